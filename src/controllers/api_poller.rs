//! ONE thread that waits, for every cluster that asked, until its workload
//! API server answers, then re-queues that MaasCluster.
//!
//! The MaasCluster reconciler calls [`ApiWatch::watch`] while its
//! `APIServerAvailable` condition is not True; the thread probes each
//! watched cluster (kubeconfig Secret → short-timeout request), backing off
//! per cluster from 2 s to 1 min while it does not answer. When it answers
//! the cluster is marked online and enqueued; the reconcile consumes the
//! mark with [`ApiWatch::take_online`]. Deleted clusters are forgotten, and
//! everything is forgotten when leadership is lost ([`ApiPoller::forget_all`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use super::ports::{ApiWatch, WorkloadApi};
use crate::backoff::Backoff;

const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long the thread sleeps when nothing is watched.
const IDLE: Duration = Duration::from_secs(3600);

/// A MaasCluster, by namespace and name.
type Key = (String, String);

enum Command {
    Watch { key: Key, cluster: String },
    Forget(Key),
    ForgetAll,
}

/// The handle: cheap to clone, used from every worker.
#[derive(Clone)]
pub struct ApiPoller {
    commands: Sender<Command>,
    online: Arc<Mutex<HashSet<Key>>>,
}

struct Watched {
    cluster: String,
    due: Instant,
    backoff: Backoff,
}

impl ApiPoller {
    /// Starts the thread. `on_online(namespace, maas_cluster)` is called (on
    /// the poller thread) when a watched cluster's API answers; it should
    /// only enqueue. The thread ends when `shutdown` fires or is dropped.
    pub fn spawn(
        workload: Arc<dyn WorkloadApi>,
        on_online: impl Fn(&str, &str) + Send + 'static,
        shutdown: Receiver<()>,
    ) -> std::io::Result<(ApiPoller, JoinHandle<()>)> {
        let (commands, receiver) = crossbeam_channel::unbounded();
        let online = Arc::new(Mutex::new(HashSet::new()));
        let poller = ApiPoller {
            commands,
            online: online.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("api-poller".into())
            .spawn(move || run(workload.as_ref(), &on_online, &receiver, &shutdown, &online))?;
        Ok((poller, thread))
    }

    /// Forget every cluster (leadership lost: another replica takes over).
    pub fn forget_all(&self) {
        let _ = self.commands.send(Command::ForgetAll);
    }

    fn online(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.online.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ApiWatch for ApiPoller {
    fn watch(&self, namespace: &str, maas_cluster: &str, cluster: &str) {
        let key = (namespace.to_string(), maas_cluster.to_string());
        let _ = self.commands.send(Command::Watch {
            key,
            cluster: cluster.to_string(),
        });
    }

    fn take_online(&self, namespace: &str, maas_cluster: &str) -> bool {
        self.online()
            .remove(&(namespace.to_string(), maas_cluster.to_string()))
    }

    fn forget(&self, namespace: &str, maas_cluster: &str) {
        let key = (namespace.to_string(), maas_cluster.to_string());
        self.online().remove(&key);
        let _ = self.commands.send(Command::Forget(key));
    }
}

/// Which clusters are watched and when each is due; no I/O, so the
/// backoff and forgetting rules are tested without threads.
#[derive(Default)]
struct Schedule {
    watched: HashMap<Key, Watched>,
}

impl Schedule {
    fn watch(&mut self, key: Key, cluster: String, now: Instant) {
        // Keep the backoff of a cluster already watched: every reconcile
        // re-asks, which must not reset the schedule.
        self.watched.entry(key).or_insert(Watched {
            cluster,
            due: now,
            backoff: Backoff::new(FIRST_BACKOFF, MAX_BACKOFF),
        });
    }

    fn forget(&mut self, key: &Key) {
        self.watched.remove(key);
    }

    fn forget_all(&mut self) {
        self.watched.clear();
    }

    fn time_to_next(&self, now: Instant) -> Duration {
        let next_due = self.watched.values().map(|w| w.due).min();
        next_due
            .map(|due| due.saturating_duration_since(now))
            .unwrap_or(IDLE)
    }

    /// The clusters due for a probe: (MaasCluster key, Cluster name).
    fn due(&self, now: Instant) -> Vec<(Key, String)> {
        self.watched
            .iter()
            .filter(|(_, w)| w.due <= now)
            .map(|(k, w)| (k.clone(), w.cluster.clone()))
            .collect()
    }

    fn answered(&mut self, key: &Key) {
        self.watched.remove(key);
    }

    fn failed(&mut self, key: &Key, now: Instant) {
        if let Some(entry) = self.watched.get_mut(key) {
            entry.due = now + entry.backoff.next_delay();
        }
    }
}

fn run(
    workload: &dyn WorkloadApi,
    on_online: &dyn Fn(&str, &str),
    commands: &Receiver<Command>,
    shutdown: &Receiver<()>,
    online: &Mutex<HashSet<Key>>,
) {
    let mut schedule = Schedule::default();
    loop {
        let wait = schedule.time_to_next(Instant::now());
        select! {
            recv(shutdown) -> _ => return,
            recv(commands) -> command => match command {
                Ok(Command::Watch { key, cluster }) => schedule.watch(key, cluster, Instant::now()),
                Ok(Command::Forget(key)) => schedule.forget(&key),
                Ok(Command::ForgetAll) => {
                    schedule.forget_all();
                    online.lock().unwrap_or_else(PoisonError::into_inner).clear();
                }
                Err(_) => return,
            },
            default(wait) => {}
        }
        for (key, cluster) in schedule.due(Instant::now()) {
            match workload.probe(&key.0, &cluster) {
                Ok(()) => {
                    log::info!("workload API of {}/{cluster} answers", key.0);
                    schedule.answered(&key);
                    online
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key.clone());
                    on_online(&key.0, &key.1);
                }
                Err(e) => {
                    log::debug!("workload API of {}/{cluster} not ready: {e}", key.0);
                    schedule.failed(&key, Instant::now());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::fake::refused;
    use crate::controllers::ports::NodeInfo;
    use crate::kube;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Probe {
        answers_after: usize,
        calls: AtomicUsize,
    }

    impl WorkloadApi for Probe {
        fn probe(&self, _ns: &str, cluster: &str) -> Result<(), kube::Error> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if cluster == "up" && n > self.answers_after {
                Ok(())
            } else {
                Err(refused(cluster))
            }
        }
        fn node(&self, _: &str, _: &str, _: &str) -> Result<Option<NodeInfo>, kube::Error> {
            Ok(None)
        }
        fn set_node_provider_id(
            &self,
            _: &str,
            _: &str,
            _: &str,
            _: &str,
        ) -> Result<(), kube::Error> {
            Ok(())
        }
    }

    #[test]
    fn enqueues_a_cluster_once_its_api_answers_and_forgets_it() {
        let probe = Arc::new(Probe {
            answers_after: 1,
            calls: AtomicUsize::new(0),
        });
        let (enqueued_tx, enqueued) = crossbeam_channel::unbounded();
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let (poller, thread) = ApiPoller::spawn(
            probe.clone(),
            move |ns, name| {
                let _ = enqueued_tx.send(format!("{ns}/{name}"));
            },
            stop,
        )
        .unwrap();
        assert!(!poller.take_online("ns", "mc"));
        poller.watch("ns", "mc", "up");
        let key = enqueued.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(key, "ns/mc");
        assert!(poller.take_online("ns", "mc"));
        assert!(!poller.take_online("ns", "mc"), "the answer is consumed");
        // The probe failed once before answering: it was retried.
        assert_eq!(probe.calls.load(Ordering::SeqCst), 2);
        drop(stop_tx);
        thread.join().unwrap();
    }

    #[test]
    fn schedule_backs_off_per_cluster_and_forgets() {
        let t0 = Instant::now();
        let a = ("ns".to_string(), "a".to_string());
        let b = ("ns".to_string(), "b".to_string());
        let mut s = Schedule::default();
        assert_eq!(s.time_to_next(t0), IDLE);
        s.watch(a.clone(), "ca".into(), t0);
        s.watch(b.clone(), "cb".into(), t0);
        assert_eq!(s.due(t0).len(), 2);
        s.failed(&a, t0);
        s.failed(&b, t0);
        assert!(s.due(t0).is_empty());
        assert_eq!(s.time_to_next(t0), FIRST_BACKOFF);
        // Re-watching does not reset the backoff.
        s.watch(a.clone(), "ca".into(), t0);
        assert!(s.due(t0).is_empty());
        let t1 = t0 + FIRST_BACKOFF;
        assert_eq!(s.due(t1).len(), 2);
        s.failed(&a, t1);
        assert_eq!(
            s.due(t1 + FIRST_BACKOFF),
            vec![(b.clone(), "cb".to_string())]
        );
        assert_eq!(
            s.due(t1 + FIRST_BACKOFF * 2).len(),
            2,
            "a's backoff doubled"
        );
        for _ in 0..10 {
            s.failed(&a, t1);
        }
        assert_eq!(
            s.time_to_next(t1 + FIRST_BACKOFF),
            Duration::ZERO,
            "b is still due"
        );
        s.forget(&b);
        assert_eq!(s.time_to_next(t1), MAX_BACKOFF, "backoff is capped");
        s.answered(&a);
        assert_eq!(s.time_to_next(t1), IDLE);
        s.watch(a.clone(), "ca".into(), t1);
        s.forget_all();
        assert!(s.due(t1 + MAX_BACKOFF).is_empty());
    }
}
