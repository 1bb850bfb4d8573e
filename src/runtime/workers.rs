//! Worker pools: N threads that take keys from a [`WorkQueue`] and reconcile
//! them, and a periodic resync that re-queues every cached key.
//!
//! Each worker runs one loop, the same as controller-runtime's
//! `processNextWorkItem`:
//!
//! ```text
//! wait until leader → get key → reconcile(key) → Ok(Done)             forget
//!                                              → Ok(RequeueAfter(d))   forget + add_after(d)
//!                                              → Err(e)                add_rate_limited
//!                                 → done(key)  (always)
//! ```
//!
//! The leader gate is checked again right after `get`, so a process that
//! has lost its Lease starts no new reconcile; a reconcile already running
//! finishes (there is no fencing anyway, so every reconcile must be safe to
//! run twice). A panicking reconcile counts as an error and is retried with
//! backoff (in debug builds; release builds abort on panic).

use std::fmt::Display;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{LeaderGate, Leadership, ObjectKey, Shutdown, Store, WorkQueue};
use crate::metrics;

/// How often an idle worker outside leadership re-checks for shutdown.
const STANDBY_POLL: Duration = Duration::from_millis(500);

/// What a successful reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing more to do until the object (or something mapped to it)
    /// changes, or the periodic resync comes round.
    Done,
    /// Reconcile again after this long (e.g. to poll MAAS while a machine
    /// deploys). An earlier add of the same key still wins.
    RequeueAfter(Duration),
}

/// Starts `concurrency` worker threads (at least one) named
/// `<name>-worker-<i>` that reconcile keys from `queue` while `gate` is open.
///
/// `name` is the `controller` label of the metrics. The threads end when the
/// queue shuts down or leadership is lost; join them with
/// [`join_within`](super::join_within).
pub fn run_workers<E, F>(
    name: &'static str,
    queue: WorkQueue,
    concurrency: usize,
    reconcile: F,
    gate: LeaderGate,
) -> Vec<JoinHandle<()>>
where
    E: Display,
    F: Fn(&ObjectKey) -> Result<Action, E> + Send + Sync + 'static,
{
    let reconcile = Arc::new(reconcile);
    let active = Arc::new(AtomicUsize::new(0));
    metrics::gauge_set(
        "controller_runtime_max_concurrent_reconciles",
        "Maximum number of concurrent reconciles per controller.",
        &[("controller", name)],
        concurrency.max(1) as f64,
    );
    let mut handles = Vec::new();
    for i in 0..concurrency.max(1) {
        let worker = Worker {
            name,
            queue: queue.clone(),
            gate: gate.clone(),
            active: active.clone(),
        };
        let reconcile = reconcile.clone();
        let spawned = thread::Builder::new()
            .name(format!("{name}-worker-{i}"))
            .spawn(move || worker.run(&*reconcile));
        match spawned {
            Ok(handle) => handles.push(handle),
            // Out of threads: run with the workers we have rather than
            // none; if that is zero the controller shows up as stuck.
            Err(e) => log::error!("{name}: cannot start worker {i}: {e}"),
        }
    }
    handles
}

struct Worker {
    name: &'static str,
    queue: WorkQueue,
    gate: LeaderGate,
    /// Workers of this controller currently inside a reconcile.
    active: Arc<AtomicUsize>,
}

impl Worker {
    fn run<E: Display>(&self, reconcile: &dyn Fn(&ObjectKey) -> Result<Action, E>) {
        loop {
            match self.gate.wait_for_leadership(STANDBY_POLL) {
                Leadership::Leader => {}
                Leadership::Standby if !self.queue.is_shutting_down() => continue,
                Leadership::Standby | Leadership::Lost => return,
            }
            let Some(key) = self.queue.get() else {
                return;
            };
            if self.gate.is_leader() {
                self.reconcile_one(&key, reconcile);
            } else {
                // Lost while waiting for the key: hand it back untouched
                // (it is processing, so this marks it to be queued again).
                self.queue.add(key.clone());
            }
            self.queue.done(&key);
        }
    }

    fn reconcile_one<E: Display>(
        &self,
        key: &ObjectKey,
        reconcile: &dyn Fn(&ObjectKey) -> Result<Action, E>,
    ) {
        let name = self.name;
        self.set_active(self.active.fetch_add(1, Ordering::SeqCst) + 1);
        let started = Instant::now();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| reconcile(key)));
        let elapsed = started.elapsed();
        self.set_active(self.active.fetch_sub(1, Ordering::SeqCst) - 1);

        metrics::observe(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller.",
            &[("controller", name)],
            elapsed.as_secs_f64(),
        );
        let result = match outcome {
            Ok(Ok(Action::Done)) => {
                log::debug!("{name} {key}: reconciled in {elapsed:?}");
                self.queue.forget(key);
                "success"
            }
            Ok(Ok(Action::RequeueAfter(delay))) => {
                log::debug!("{name} {key}: reconciled in {elapsed:?}, again in {delay:?}");
                self.queue.forget(key);
                self.queue.add_after(key.clone(), delay);
                "requeue_after"
            }
            Ok(Err(error)) => {
                log::warn!(
                    "{name} {key}: reconcile failed (retry {}): {error}",
                    self.queue.num_requeues(key) + 1
                );
                self.record_error();
                self.queue.add_rate_limited(key.clone());
                "error"
            }
            Err(_) => {
                log::error!("{name} {key}: reconcile panicked; retrying with backoff");
                self.record_error();
                self.queue.add_rate_limited(key.clone());
                "error"
            }
        };
        metrics::counter_inc(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller.",
            &[("controller", name), ("result", result)],
        );
    }

    fn set_active(&self, active: usize) {
        metrics::gauge_set(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller.",
            &[("controller", self.name)],
            active as f64,
        );
    }

    fn record_error(&self) {
        metrics::counter_inc(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller.",
            &[("controller", self.name)],
        );
    }
}

/// Re-queues the key of every object in `store` once every `period`, so
/// drift nobody was told about (a machine changed in MAAS, a missed event)
/// is noticed eventually. Ends when `shutdown` fires.
pub fn spawn_resync<T: super::Object>(
    store: Store<T>,
    queue: WorkQueue,
    period: Duration,
    shutdown: Shutdown,
) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("{}-resync", queue.name()))
        .spawn(move || {
            while !shutdown.sleep(period) {
                let keys = store.keys();
                log::debug!("{}: resync of {} keys", queue.name(), keys.len());
                for key in keys {
                    queue.add(key);
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    const EVENTUALLY: Duration = Duration::from_secs(20);

    fn eventually(what: &str, check: impl Fn() -> bool) {
        let start = Instant::now();
        while !check() {
            assert!(start.elapsed() < EVENTUALLY, "never happened: {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn results_drive_forget_requeue_and_backoff() {
        let queue = WorkQueue::new("test-workers");
        let calls = Arc::new(Mutex::new(Vec::<String>::new()));
        let reconcile = {
            let calls = calls.clone();
            move |key: &ObjectKey| -> Result<Action, String> {
                let seen = {
                    let mut calls = calls.lock().unwrap();
                    calls.push(key.name.clone());
                    calls.iter().filter(|n| **n == key.name).count()
                };
                match (key.name.as_str(), seen) {
                    ("fails-once", 1) => Err("boom".to_string()),
                    ("requeues", 1) => Ok(Action::RequeueAfter(Duration::from_millis(1))),
                    ("panics", 1) => panic!("test panic"),
                    _ => Ok(Action::Done),
                }
            }
        };
        let workers = run_workers(
            "test",
            queue.clone(),
            3,
            reconcile,
            LeaderGate::always_open(),
        );
        for name in ["ok", "fails-once", "requeues", "panics"] {
            queue.add(ObjectKey::new("ns", name));
        }
        let count = |name: &str| calls.lock().unwrap().iter().filter(|n| *n == name).count();
        eventually("retries ran", || {
            count("fails-once") == 2 && count("requeues") == 2 && count("panics") == 2
        });
        eventually("backoff forgotten after success", || {
            queue.num_requeues(&ObjectKey::new("ns", "fails-once")) == 0
        });
        assert_eq!(count("ok"), 1);
        queue.shutdown();
        assert!(super::super::join_within(workers, EVENTUALLY));
    }

    #[test]
    fn no_reconcile_without_leadership() {
        let queue = WorkQueue::new("test-standby");
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = LeaderGate::standby();
        let reconcile = {
            let calls = calls.clone();
            move |_: &ObjectKey| -> Result<Action, String> {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(Action::Done)
            }
        };
        let workers = run_workers("standby", queue.clone(), 2, reconcile, gate.clone());
        queue.add(ObjectKey::new("ns", "a"));
        thread::sleep(Duration::from_millis(100));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "standby must not reconcile"
        );

        gate.lead_until(Instant::now() + Duration::from_secs(600));
        eventually("leader reconciles", || calls.load(Ordering::SeqCst) == 1);

        gate.lose();
        queue.add(ObjectKey::new("ns", "b"));
        assert!(
            super::super::join_within(workers, EVENTUALLY),
            "workers stop on loss"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "nothing after the loss");
    }

    #[test]
    fn resync_requeues_every_cached_key() {
        let store = Store::new();
        for (namespace, name) in [("a", "x"), ("b", "y")] {
            let meta = serde_json::json!({"metadata": {"namespace": namespace, "name": name}});
            store.upsert(Arc::new(meta));
        }
        let queue = WorkQueue::new("test-resync");
        let shutdown = Shutdown::new();
        let handle = spawn_resync(
            store,
            queue.clone(),
            Duration::from_millis(10),
            shutdown.clone(),
        )
        .unwrap();
        eventually("both keys queued", || queue.len() == 2);
        shutdown.trigger();
        handle.join().unwrap();
    }
}
