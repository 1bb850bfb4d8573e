//! ONE thread that waits, for every cluster that asked, until its workload
//! API server answers, then re-queues that MaasCluster; and the same for
//! single control-plane machines that wait to join their cluster's DNS
//! record until their own API server answers ([`ApiWatch::address_answers`]).
//!
//! The MaasCluster reconciler calls [`ApiWatch::watch`] while its
//! `APIServerAvailable` condition is not True; the thread probes each
//! watched cluster (kubeconfig Secret → short-timeout request), backing off
//! per cluster from 2 s to 1 min while it does not answer. When it answers
//! the cluster is marked online and enqueued; the reconcile consumes the
//! mark with [`ApiWatch::take_online`]. Deleted clusters are forgotten, and
//! everything is forgotten when leadership is lost ([`ApiPoller::forget_all`]).
//!
//! A dead cluster's probe takes up to its timeout (5 s) plus a Secret read,
//! so probes never run one after the other on the poller thread: each runs
//! on a short-lived thread of its own, at most [`MAX_IN_FLIGHT`] at once,
//! and the poller thread only schedules and collects. A cluster is never
//! probed twice at once. When more are due than may run, clusters never
//! probed before go first, then the longest waiting: a new healthy cluster
//! is not queued behind clusters already known to be failing. The poller
//! thread joins its probe threads as they end, and the running ones when it
//! stops (at most [`PROBES_STOP`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};

use crate::backoff::Backoff;
use crate::clock::later;
use crate::controllers::ports::{ApiWatch, WorkloadApi};
use crate::kube;
use crate::runtime;
use crate::sync::lock;

const FIRST_BACKOFF: Duration = Duration::from_secs(2);
/// How long the poller waits for running probes when it stops: a probe's
/// own deadline (5 s) plus the Secret read before it.
pub const PROBES_STOP: Duration = Duration::from_secs(10);
/// Probes running at once. Each is a thread blocked on the network for at
/// most the probe timeout; 50 dead clusters and a healthy one all fit.
pub const MAX_IN_FLIGHT: usize = 64;
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A joining control-plane machine is probed at least this often: its
/// address joins the record no later than this after its API answers.
const ADDRESS_MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long the thread sleeps when nothing is watched.
const IDLE: Duration = Duration::from_secs(3600);

/// What is probed: the workload API of a MaasCluster's Cluster (through
/// its endpoint), or the API server of one of its control-plane machines
/// (`address`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    maas_cluster: String,
    address: Option<String>,
}

impl Key {
    fn new(namespace: &str, maas_cluster: &str, address: Option<&str>) -> Key {
        Key {
            namespace: namespace.to_string(),
            maas_cluster: maas_cluster.to_string(),
            address: address.map(str::to_string),
        }
    }

    fn of(&self, namespace: &str, maas_cluster: &str) -> bool {
        self.namespace == namespace && self.maas_cluster == maas_cluster
    }

    /// An address of this MaasCluster that is not among `keep`.
    fn dropped(&self, namespace: &str, maas_cluster: &str, keep: &[String]) -> bool {
        self.of(namespace, maas_cluster) && self.address.as_ref().is_some_and(|a| !keep.contains(a))
    }
}

enum Command {
    Watch {
        key: Key,
        cluster: String,
    },
    /// Forget the MaasCluster and all its addresses.
    Forget {
        namespace: String,
        maas_cluster: String,
    },
    KeepAddresses {
        namespace: String,
        maas_cluster: String,
        keep: Vec<String>,
    },
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
    /// Probed (and failed) at least once: goes after fresh ones.
    failed_before: bool,
    /// A probe is running; its result is on its way.
    in_flight: bool,
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
            .spawn(move || run(&workload, &on_online, &receiver, &shutdown, &online))?;
        Ok((poller, thread))
    }

    /// Forget every cluster (leadership lost: another replica takes over).
    pub fn forget_all(&self) {
        let _ = self.commands.send(Command::ForgetAll);
    }

    fn online(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        lock(&self.online)
    }
}

impl ApiWatch for ApiPoller {
    fn watch(&self, namespace: &str, maas_cluster: &str, cluster: &str) {
        let _ = self.commands.send(Command::Watch {
            key: Key::new(namespace, maas_cluster, None),
            cluster: cluster.to_string(),
        });
    }

    fn take_online(&self, namespace: &str, maas_cluster: &str) -> bool {
        self.online()
            .remove(&Key::new(namespace, maas_cluster, None))
    }

    fn forget(&self, namespace: &str, maas_cluster: &str) {
        self.online().retain(|k| !k.of(namespace, maas_cluster));
        let _ = self.commands.send(Command::Forget {
            namespace: namespace.to_string(),
            maas_cluster: maas_cluster.to_string(),
        });
    }

    fn address_answers(
        &self,
        namespace: &str,
        maas_cluster: &str,
        cluster: &str,
        address: &str,
    ) -> bool {
        let key = Key::new(namespace, maas_cluster, Some(address));
        if self.online().contains(&key) {
            return true;
        }
        let _ = self.commands.send(Command::Watch {
            key,
            cluster: cluster.to_string(),
        });
        false
    }

    fn keep_addresses(&self, namespace: &str, maas_cluster: &str, keep: &[String]) {
        self.online()
            .retain(|k| !k.dropped(namespace, maas_cluster, keep));
        let _ = self.commands.send(Command::KeepAddresses {
            namespace: namespace.to_string(),
            maas_cluster: maas_cluster.to_string(),
            keep: keep.to_vec(),
        });
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
        let max_backoff = if key.address.is_some() {
            ADDRESS_MAX_BACKOFF
        } else {
            MAX_BACKOFF
        };
        self.watched.entry(key).or_insert(Watched {
            cluster,
            due: now,
            backoff: Backoff::new(FIRST_BACKOFF, max_backoff),
            failed_before: false,
            in_flight: false,
        });
    }

    /// Forgets whatever `drop` says (a MaasCluster, or its addresses but some).
    fn forget_where(&mut self, drop: impl Fn(&Key) -> bool) {
        self.watched.retain(|k, _| !drop(k));
    }

    fn forget_all(&mut self) {
        self.watched.clear();
    }

    fn time_to_next(&self, now: Instant) -> Duration {
        let next_due = self
            .watched
            .values()
            .filter(|w| !w.in_flight)
            .map(|w| w.due)
            .min();
        next_due
            .map(|due| due.saturating_duration_since(now))
            .unwrap_or(IDLE)
    }

    /// Up to `room` clusters due for a probe, marked in flight: (MaasCluster
    /// key, Cluster name). Never probed before first, then by due time.
    fn start_due(&mut self, now: Instant, room: usize) -> Vec<(Key, String)> {
        let mut due: Vec<(&Key, &Watched)> = self
            .watched
            .iter()
            .filter(|(_, w)| w.due <= now && !w.in_flight)
            .collect();
        due.sort_by_key(|(_, w)| (w.failed_before, w.due));
        let started: Vec<(Key, String)> = due
            .into_iter()
            .take(room)
            .map(|(k, w)| (k.clone(), w.cluster.clone()))
            .collect();
        for (key, _) in &started {
            if let Some(w) = self.watched.get_mut(key) {
                w.in_flight = true;
            }
        }
        started
    }

    fn in_flight(&self) -> usize {
        self.watched.values().filter(|w| w.in_flight).count()
    }

    /// The probe answered: done with this cluster. False when it was
    /// forgotten meanwhile (then the answer means nothing).
    fn answered(&mut self, key: &Key) -> bool {
        self.watched.remove(key).is_some()
    }

    fn failed(&mut self, key: &Key, now: Instant) {
        if let Some(entry) = self.watched.get_mut(key) {
            entry.in_flight = false;
            entry.failed_before = true;
            entry.due = later(now, entry.backoff.next_delay());
        }
    }
}

/// A finished probe: which cluster, and what it said.
type ProbeResult = (Key, String, Result<(), kube::Error>);

fn run(
    workload: &Arc<dyn WorkloadApi>,
    on_online: &dyn Fn(&str, &str),
    commands: &Receiver<Command>,
    shutdown: &Receiver<()>,
    online: &Mutex<HashSet<Key>>,
) {
    let mut schedule = Schedule::default();
    let (results_tx, results) = crossbeam_channel::unbounded::<ProbeResult>();
    let mut probes: Vec<JoinHandle<()>> = Vec::new();
    loop {
        // Collect the probe threads that ended (their results are queued).
        let (ended, running): (Vec<_>, Vec<_>) = probes.into_iter().partition(|p| p.is_finished());
        probes = running;
        runtime::join_within(ended, Duration::ZERO);
        let wait = schedule.time_to_next(Instant::now());
        select! {
            recv(shutdown) -> _ => break,
            recv(commands) -> command => match command {
                Ok(Command::Watch { key, cluster }) => schedule.watch(key, cluster, Instant::now()),
                Ok(Command::Forget { namespace, maas_cluster }) => {
                    schedule.forget_where(|k| k.of(&namespace, &maas_cluster));
                }
                Ok(Command::KeepAddresses { namespace, maas_cluster, keep }) => {
                    schedule.forget_where(|k| k.dropped(&namespace, &maas_cluster, &keep));
                }
                Ok(Command::ForgetAll) => {
                    schedule.forget_all();
                    lock(online).clear();
                }
                Err(_) => break,
            },
            recv(results) -> result => {
                let Ok((key, cluster, result)) = result else { break };
                match result {
                    Ok(()) => {
                        if schedule.answered(&key) {
                            log::info!("{} answers", what(&key, &cluster));
                            lock(online).insert(key.clone());
                            on_online(&key.namespace, &key.maas_cluster);
                        }
                    }
                    Err(e) => {
                        log::debug!("{} not ready: {e}", what(&key, &cluster));
                        schedule.failed(&key, Instant::now());
                    }
                }
            }
            default(wait) => {}
        }
        let room = MAX_IN_FLIGHT.saturating_sub(schedule.in_flight());
        for (key, cluster) in schedule.start_due(Instant::now(), room) {
            let (workload, results_tx) = (Arc::clone(workload), results_tx.clone());
            let probed = key.clone();
            let spawned = std::thread::Builder::new()
                .name("api-probe".into())
                .spawn(move || {
                    let result = match &probed.address {
                        None => workload.probe(&probed.namespace, &cluster),
                        Some(address) => {
                            workload.probe_address(&probed.namespace, &cluster, address)
                        }
                    };
                    let _ = results_tx.send((probed, cluster, result));
                });
            match spawned {
                Ok(probe) => probes.push(probe),
                Err(e) => {
                    log::warn!("api poller: cannot start a probe thread: {e}");
                    schedule.failed(&key, Instant::now());
                }
            }
        }
    }
    // A probe ends within its timeout; wait for that, not longer.
    if !runtime::join_within(probes, PROBES_STOP) {
        log::warn!("api poller: workload probes still running after {PROBES_STOP:?}");
    }
}

/// For the log: which API server.
fn what(key: &Key, cluster: &str) -> String {
    match &key.address {
        None => format!("workload API of {}/{cluster}", key.namespace),
        Some(address) => format!("API server of {}/{cluster} at {address}", key.namespace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::fake::refused;
    use crate::controllers::ports::NodeInfo;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// What the poller asks of a workload cluster: the fakes below answer
    /// only that, and the poller touches nothing else.
    trait Answers: Send + Sync {
        fn probe(&self, cluster: &str) -> Result<(), kube::Error>;
        fn probe_address(&self, address: &str) -> Result<(), kube::Error> {
            Err(refused(address))
        }
    }

    impl<T: Answers> WorkloadApi for T {
        fn probe(&self, _ns: &str, cluster: &str) -> Result<(), kube::Error> {
            Answers::probe(self, cluster)
        }
        fn probe_address(&self, _: &str, _: &str, address: &str) -> Result<(), kube::Error> {
            Answers::probe_address(self, address)
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
        fn set_node_out_of_service(
            &self,
            _: &str,
            _: &str,
            _: &str,
            _: bool,
        ) -> Result<(), kube::Error> {
            unreachable!("the poller never taints Nodes")
        }
        fn patch_node_metadata(
            &self,
            _: &str,
            _: &str,
            _: &str,
            _: &serde_json::Value,
        ) -> Result<(), kube::Error> {
            unreachable!("the poller never writes Nodes")
        }
    }

    struct Probe {
        answers_after: usize,
        calls: AtomicUsize,
    }

    impl Answers for Probe {
        fn probe(&self, cluster: &str) -> Result<(), kube::Error> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if cluster == "up" && n > self.answers_after {
                Ok(())
            } else {
                Err(refused(cluster))
            }
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

    /// A joining machine's address: probed with `probe_address`, marked
    /// once it answers (the mark stays: the reconcile asks until the
    /// address is in the record), forgotten by `keep_addresses`.
    #[test]
    fn an_address_is_marked_once_its_api_answers_until_dropped() {
        struct Machines;
        impl Answers for Machines {
            fn probe(&self, cluster: &str) -> Result<(), kube::Error> {
                Err(refused(cluster))
            }
            fn probe_address(&self, address: &str) -> Result<(), kube::Error> {
                if address == "10.0.0.2" {
                    Ok(())
                } else {
                    Err(refused(address))
                }
            }
        }
        let (enqueued_tx, enqueued) = crossbeam_channel::unbounded();
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let (poller, thread) = ApiPoller::spawn(
            Arc::new(Machines),
            move |ns, name| {
                let _ = enqueued_tx.send(format!("{ns}/{name}"));
            },
            stop,
        )
        .unwrap();
        assert!(!poller.address_answers("ns", "mc", "c1", "10.0.0.2"));
        assert!(!poller.address_answers("ns", "mc", "c1", "10.0.0.3"));
        let key = enqueued.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(key, "ns/mc");
        assert!(poller.address_answers("ns", "mc", "c1", "10.0.0.2"));
        assert!(poller.address_answers("ns", "mc", "c1", "10.0.0.2"), "kept");
        assert!(!poller.address_answers("ns", "mc", "c1", "10.0.0.3"));
        assert!(
            !poller.take_online("ns", "mc"),
            "the cluster's own API did not answer"
        );
        poller.keep_addresses("ns", "mc", &["10.0.0.3".to_string()]);
        assert!(!poller
            .online()
            .contains(&Key::new("ns", "mc", Some("10.0.0.2"))));
        drop(stop_tx);
        thread.join().unwrap();
    }

    #[test]
    fn an_address_is_probed_at_least_every_few_seconds() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        let a = Key::new("ns", "mc", Some("10.0.0.2"));
        s.watch(a.clone(), "c1".into(), t0);
        for _ in 0..10 {
            s.start_due(t0, MAX_IN_FLIGHT);
            s.failed(&a, t0);
        }
        assert_eq!(s.time_to_next(t0), ADDRESS_MAX_BACKOFF);
        s.watch(Key::new("ns", "other", Some("10.0.0.2")), "c2".into(), t0);
        s.forget_where(|k| k.of("ns", "mc"));
        assert_eq!(s.watched.len(), 1, "only that MaasCluster's addresses");
    }

    /// Keys of what `start_due` started.
    fn started(s: &mut Schedule, now: Instant) -> Vec<String> {
        let mut keys: Vec<String> = s
            .start_due(now, MAX_IN_FLIGHT)
            .into_iter()
            .map(|(k, _)| k.maas_cluster)
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn schedule_backs_off_per_cluster_and_forgets() {
        let t0 = Instant::now();
        let a = Key::new("ns", "a", None);
        let b = Key::new("ns", "b", None);
        let mut s = Schedule::default();
        assert_eq!(s.time_to_next(t0), IDLE);
        s.watch(a.clone(), "ca".into(), t0);
        s.watch(b.clone(), "cb".into(), t0);
        assert_eq!(started(&mut s, t0), ["a", "b"]);
        assert!(started(&mut s, t0).is_empty(), "never probed twice at once");
        assert_eq!(s.in_flight(), 2);
        assert_eq!(
            s.time_to_next(t0),
            IDLE,
            "nothing to wake for while in flight"
        );
        s.failed(&a, t0);
        s.failed(&b, t0);
        assert!(started(&mut s, t0).is_empty());
        assert_eq!(s.time_to_next(t0), FIRST_BACKOFF);
        // Re-watching does not reset the backoff.
        s.watch(a.clone(), "ca".into(), t0);
        assert!(started(&mut s, t0).is_empty());
        let t1 = t0 + FIRST_BACKOFF;
        assert_eq!(started(&mut s, t1), ["a", "b"]);
        s.failed(&a, t1);
        s.failed(&b, t1 - FIRST_BACKOFF);
        assert_eq!(started(&mut s, t1 + FIRST_BACKOFF), ["b"]);
        assert_eq!(
            started(&mut s, t1 + FIRST_BACKOFF * 2),
            ["a"],
            "a's backoff doubled"
        );
        for _ in 0..10 {
            s.failed(&a, t1);
        }
        s.forget_where(|k| *k == b);
        assert_eq!(s.time_to_next(t1), MAX_BACKOFF, "backoff is capped");
        assert!(s.answered(&a));
        assert!(
            !s.answered(&a),
            "an answer for a forgotten cluster means nothing"
        );
        assert_eq!(s.time_to_next(t1), IDLE);
        s.watch(a.clone(), "ca".into(), t1);
        s.forget_all();
        assert!(started(&mut s, t1 + MAX_BACKOFF).is_empty());
    }

    #[test]
    fn clusters_never_probed_go_before_failing_ones_when_room_is_short() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        for i in 0..5 {
            s.watch(
                Key::new("ns", &format!("dead-{i}"), None),
                format!("dead-{i}"),
                t0,
            );
        }
        for (key, _) in s.start_due(t0, 5) {
            s.failed(&key, t0);
        }
        let later = t0 + MAX_BACKOFF;
        s.watch(Key::new("ns", "new", None), "new".into(), later);
        let first = s.start_due(later, 1);
        assert_eq!(first[0].1, "new");
        assert_eq!(s.start_due(later, 2).len(), 2, "then the failing ones");
    }

    /// A fake whose `dead-*` clusters hang (as an unreachable API server does
    /// until the probe's timeout) until the test lets them go.
    struct Hanging {
        release: crossbeam_channel::Receiver<()>,
        hanging: AtomicUsize,
        most_at_once: AtomicUsize,
    }

    impl Answers for Hanging {
        fn probe(&self, cluster: &str) -> Result<(), kube::Error> {
            if cluster == "healthy" {
                return Ok(());
            }
            let now = self.hanging.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_at_once.fetch_max(now, Ordering::SeqCst);
            let _ = self.release.recv_timeout(Duration::from_secs(60));
            self.hanging.fetch_sub(1, Ordering::SeqCst);
            Err(refused(cluster))
        }
    }

    /// Issue 12 item 7: probes ran one after the other on the poller thread,
    /// so with N dead clusters the last waited ~5N s. Here 50 dead clusters
    /// hang for as long as the test wants, watched before the healthy one:
    /// it must be found while all 50 still hang.
    #[test]
    fn a_healthy_cluster_is_found_while_dead_ones_hang() {
        let (release_tx, release) = crossbeam_channel::unbounded();
        let probe = Arc::new(Hanging {
            release,
            hanging: AtomicUsize::new(0),
            most_at_once: AtomicUsize::new(0),
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
        for i in 0..50 {
            poller.watch("ns", &format!("mc-{i}"), &format!("dead-{i}"));
        }
        while probe.hanging.load(Ordering::SeqCst) < 50 {
            std::thread::sleep(Duration::from_millis(5));
        }
        poller.watch("ns", "mc-healthy", "healthy");
        let key = enqueued.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(key, "ns/mc-healthy");
        assert_eq!(
            probe.hanging.load(Ordering::SeqCst),
            50,
            "found while all 50 hang"
        );
        assert!(poller.take_online("ns", "mc-healthy"));

        // The bound: more dead clusters than MAX_IN_FLIGHT never run at once.
        for i in 50..MAX_IN_FLIGHT + 20 {
            poller.watch("ns", &format!("mc-{i}"), &format!("dead-{i}"));
        }
        while probe.hanging.load(Ordering::SeqCst) < MAX_IN_FLIGHT {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(probe.most_at_once.load(Ordering::SeqCst), MAX_IN_FLIGHT);
        drop(release_tx);
        drop(stop_tx);
        thread.join().unwrap();
    }

    /// Numbers for BENCHMARKS.md ("Workload API poller"): 50 dead clusters,
    /// each probe failing after the real probe timeout (5 s), and one
    /// healthy cluster watched last; prints how long until it is enqueued.
    ///
    ///     cargo test --release --lib api_poller::tests::bench -- --ignored --nocapture
    #[test]
    #[ignore]
    fn bench_healthy_cluster_behind_50_dead_ones() {
        struct Slow;
        impl Answers for Slow {
            fn probe(&self, cluster: &str) -> Result<(), kube::Error> {
                if cluster == "healthy" {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_secs(5));
                Err(refused(cluster))
            }
        }
        let (enqueued_tx, enqueued) = crossbeam_channel::unbounded();
        let (stop_tx, stop) = crossbeam_channel::bounded::<()>(0);
        let (poller, thread) = ApiPoller::spawn(
            Arc::new(Slow),
            move |_, name| {
                let _ = enqueued_tx.send(name.to_string());
            },
            stop,
        )
        .unwrap();
        let started = Instant::now();
        for i in 0..50 {
            poller.watch("ns", &format!("mc-{i}"), &format!("dead-{i}"));
        }
        poller.watch("ns", "mc-healthy", "healthy");
        let name = enqueued.recv_timeout(Duration::from_secs(600)).unwrap();
        println!(
            "healthy cluster {name} enqueued {:?} after 50 dead + 1 healthy were watched",
            started.elapsed()
        );
        drop(stop_tx);
        thread.join().unwrap();
    }
}
