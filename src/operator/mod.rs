//! The controllers' wiring, start to finish: [`run`] starts every thread
//! the operator needs, waits for SIGTERM/SIGINT or lost leadership, then
//! stops and joins every one of them before it returns.
//!
//! ```text
//! Caches (5 typed stores) ◄── informers (Cluster, Machine, MaasCluster, MaasMachine,
//!                                 │        MaasRemediation)
//!                                 └─► mappers ─► three work queues
//! leader election ─► LeaderGate ─► worker pools (maascluster, maasmachine,
//!                                   maasremediation) ─► reconcilers
//!                       └─► /readyz (serve reads the gate at each probe)
//! api poller thread ─► maascluster queue     resync threads ─► every queue
//! MAAS watch thread (maas_watch::Router) ─► maasmachine queue, Events; orphan report
//! template informer ─► template_capacity thread ─► MaasMachineTemplate status
//! ```
//!
//! The reconcilers' ports are bound to the real clients here: [`adapters`]
//! (Kubernetes through the informer caches and `kube::Client`; workload
//! clusters through their kubeconfig Secrets) and [`credentials`] (each
//! identity's MAAS client, checked on a thread of its own). They are the
//! only code the reconcilers reach that holds a client.
//!
//! Before any watch starts, the credentials are checked: the API server's
//! refusal ends the process with the reason; MAAS unreachable keeps
//! `/readyz` failing with the reason while a thread checks again.
//!
//! One function owns the quit protocol, the way ripgrep's parallel walker
//! does: everything started is recorded in `Running` as soon as it runs,
//! and `Running::stop` ends it in this order, whether the process stops
//! normally, after a lost Lease, or because something failed to start:
//!
//! 1. `/readyz` fails, the shared [`Shutdown`] fires (signal thread, resync
//!    threads, the api poller and the informers' loops see it), the queues
//!    shut down;
//! 2. workers finish their current reconcile, within `shutdown_timeout`;
//! 3. events still queued are written, then the event writer ends;
//! 4. the Lease is released (a standby takes over at once);
//! 5. each informer's connections are closed, so a watch blocked on a
//!    quiet connection returns at once, and its thread is joined;
//! 6. the remaining threads are joined (the signal thread, the resyncs, the
//!    api poller with its probe threads, the MAAS start-up re-check, the
//!    orphan report), and the MAAS watch (once its call in flight ends).
//!
//! The probe and metrics server is the exception: it answers until the
//! process exits (its accept thread holds no state).

pub mod adapters;
pub mod api_poller;
pub mod credentials;
pub mod maas_watch;
pub mod mappers;
pub mod template_capacity;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::api::capi::WATCH_FILTER_LABEL;
use crate::controllers::caches::Caches;
use crate::controllers::ports::{KubeApi, SystemClock};
use crate::controllers::{cluster, machine, remediation, Context, Options};
use crate::kube::{self, resources};
use crate::maas::watch::{MaasWatch, WatchConfig};
use crate::maas::{self, StartCheck};
use crate::runtime::{
    self, Event, EventRecorder, Informer, InformerConfig, LeaderConfig, LeaderElector, LeaderGate,
    Object, ObjectKey, Shutdown, Store, WorkQueue,
};
use crate::serve::{self, Health, Routes};
use adapters::Workload;
use api_poller::{ApiPoller, PROBES_STOP};
use credentials::{Credentials, SourceTenants};
use maas_watch::Router;
use mappers::Keys;

/// Objects per informer list page (client-go: 500). A page is held whole,
/// as JSON text, while its objects are decoded: smaller pages, lower peak
/// memory at start (BENCHMARKS.md "Memory").
const LIST_PAGE_SIZE: u32 = 100;
/// How long queued Events may take to be written on shutdown.
const EVENTS_FLUSH: Duration = Duration::from_secs(2);
/// How long the threads that end on the shutdown signal may take: the api
/// poller waits for its running probes first.
const THREADS_STOP: Duration = PROBES_STOP.saturating_add(Duration::from_secs(2));
/// Deadline of each request to a workload cluster's API server.
const WORKLOAD_TIMEOUT: Duration = Duration::from_secs(5);
/// MaasRemediation workers: remediations are rare and each reconcile is one
/// or two MAAS calls.
const REMEDIATION_WORKERS: usize = 2;

/// What the operator was told to do (from flags and the environment; see
/// `cli::operator` for the defaults).
#[derive(Debug, Clone)]
pub struct Config {
    /// Watch only this namespace (`None`: all).
    pub namespace: Option<String>,
    /// Only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    pub maascluster_concurrency: usize,
    pub maasmachine_concurrency: usize,
    /// Re-reconcile every object this often.
    pub sync_period: Duration,
    /// The Lease to hold, or `None` to run without leader election.
    pub leader_election: Option<LeaderConfig>,
    /// This replica: the Lease's holder and the Events' reporting instance.
    pub identity: String,
    pub metrics_bind_address: Option<SocketAddr>,
    pub health_probe_bind_address: Option<SocketAddr>,
    pub options: Options,
    /// How long running reconciles may finish after SIGTERM.
    pub shutdown_timeout: Duration,
    /// `--maas-ca-file`: also trusted for per-cluster credentials whose
    /// Secret has no CA of its own.
    pub maas_ca_pem: Option<Vec<u8>>,
    /// How often the MAAS watch lists each MAAS user's machines.
    pub maas_watch_interval: Duration,
    /// `--maas-endpoint-allow`: the MAAS endpoints (API roots) identity
    /// Secrets may name; empty: any.
    pub maas_endpoint_allow: Vec<String>,
    /// The Pod this process runs in (downward API), which the start-up
    /// Events are about: `kubectl describe pod` shows why it is not ready.
    pub pod: Option<PodRef>,
}

/// A Pod by namespace, name and uid (`kubectl describe` matches the uid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    /// From the downward API's `POD_NAMESPACE`, `POD_NAME` and `POD_UID`
    /// (deploy/manager.yaml); `None` unless all three are set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<PodRef> {
        let get = |key: &str| var(key).filter(|v| !v.is_empty());
        Some(PodRef {
            namespace: get("POD_NAMESPACE")?,
            name: get("POD_NAME")?,
            uid: get("POD_UID")?,
        })
    }

    fn object(&self) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "namespace": self.namespace, "name": self.name, "uid": self.uid}})
    }
}

/// Says the start-up check's outcome as an Event on our Pod (when we know
/// it), besides the log and /readyz.
#[derive(Clone)]
struct StartReport {
    events: EventRecorder,
    pod: Option<serde_json::Value>,
}

impl StartReport {
    fn ready(&self, message: &str) {
        if let Some(pod) = &self.pod {
            self.events.normal(pod, "MAASReady", message);
        }
    }

    fn warning(&self, reason: &str, message: &str) {
        if let Some(pod) = &self.pod {
            self.events.warning(pod, reason, message);
        }
    }
}

/// Why [`run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// SIGTERM or SIGINT: a clean stop.
    Shutdown,
    /// Another replica holds the Lease now: exit non-zero, so the pod
    /// restarts as a standby.
    LeadershipLost,
}

/// Why the operator could not start; the process ends with it (exit 1),
/// after stopping what had started.
#[derive(Debug)]
pub enum StartError {
    /// The API server refused our credentials (the token or kubeconfig).
    KubeCredentials(kube::Error),
    /// MAAS refused the controller-wide credentials, or is not MAAS: its
    /// answer and what to check (see `maas::Client::start_check`).
    MaasRefused(String),
    /// A thread or listener could not be started: `what`, and the system's
    /// reason (no threads left, an address in use).
    Spawn { what: String, cause: std::io::Error },
}

impl StartError {
    /// For `map_err`: `what` could not be started.
    pub(crate) fn spawn(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
        let what = what.into();
        move |cause| StartError::Spawn { what, cause }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::KubeCredentials(e) => write!(
                f,
                "the API server refused our credentials: {e}; check the ServiceAccount \
                 token (or --kubeconfig), then restart"
            ),
            StartError::MaasRefused(why) => f.write_str(why),
            StartError::Spawn { what, cause } => write!(f, "{what}: {cause}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Runs the controllers until SIGTERM/SIGINT or lost leadership; returns
/// after every thread it started has stopped (see the module docs).
pub fn run(config: &Config, kube: kube::Client, maas: maas::Client) -> Result<Stopped, StartError> {
    let shutdown = Shutdown::new();
    let gate = match config.leader_election {
        Some(_) => LeaderGate::standby(),
        None => LeaderGate::always_open(),
    };
    let health = Arc::new(Health::new(gate.clone()));
    let mut running = Running {
        shutdown: shutdown.clone(),
        health: health.clone(),
        queues: Vec::new(),
        workers: Vec::new(),
        events: None,
        elector: None,
        informers: Vec::new(),
        threads: Vec::new(),
        maas_watch: None,
    };
    let outcome = start_and_wait(config, &kube, maas, &gate, &mut running);
    running.stop(config.shutdown_timeout);
    outcome
}

/// Starts everything (recording each thread in `running` at once), then
/// waits for the signal to stop.
fn start_and_wait(
    config: &Config,
    kube: &kube::Client,
    maas: maas::Client,
    gate: &LeaderGate,
    running: &mut Running,
) -> Result<Stopped, StartError> {
    let shutdown = running.shutdown.clone();
    let signals =
        runtime::listen_for_signals(&shutdown).map_err(StartError::spawn("signal handler"))?;
    running.threads.push(signals);
    serve_probes(config, &running.health)?;

    // Start-up checks: refused credentials end the process with the reason
    // (exit 1: a wrong key or token never fixes itself, and the restart
    // picks up a corrected Secret); an unreachable MAAS keeps /readyz
    // failing with the reason until it answers.
    match kube.check_credentials() {
        Ok(Some(user)) => log::info!("API server {}: authenticated as {user}", kube.server()),
        Ok(None) => {}
        Err(e) => return Err(StartError::KubeCredentials(e)),
    }
    let events = EventRecorder::spawn(kube.clone(), "capmaas", &config.identity)
        .map_err(StartError::spawn("event recorder"))?;
    running.events = Some(events.clone());
    let report = StartReport {
        events: events.clone(),
        pod: config.pod.as_ref().map(PodRef::object),
    };
    let maas_user = Arc::new(OnceLock::new());
    let recheck = check_maas_at_start(&maas, &running.health, &shutdown, &maas_user, report)?;
    running.threads.extend(recheck);
    let cluster_queue = running.add_queue("maascluster");
    let machine_queue = running.add_queue("maasmachine");
    let remediation_queue = running.add_queue("maasremediation");

    // The stores first: informers fill them, mappers and reconcilers read
    // them, so every event can be mapped from the first one on.
    let caches = Caches::new();
    let watches = Watches {
        kube,
        config,
        shutdown: &shutdown,
        maas_clusters: &cluster_queue,
        maas_machines: &machine_queue,
        maas_remediations: &remediation_queue,
    };
    let informers = [
        watches.start(resources::CLUSTERS, &caches.clusters, {
            let caches = caches.clone();
            move |e| mappers::on_cluster(e, &caches)
        }),
        watches.start(resources::MACHINES, &caches.machines, {
            let caches = caches.clone();
            move |e| mappers::on_machine(e, &caches)
        }),
        watches.start(resources::MAAS_CLUSTERS, &caches.maas_clusters, {
            let caches = caches.clone();
            move |e| mappers::on_maas_cluster(e, &caches)
        }),
        watches.start(resources::MAAS_MACHINES, &caches.maas_machines, {
            let caches = caches.clone();
            move |e| mappers::on_maas_machine(e, &caches)
        }),
        watches.start(
            resources::MAAS_REMEDIATIONS,
            &caches.maas_remediations,
            mappers::on_maas_remediation,
        ),
    ];
    for informer in informers {
        running.informers.push(informer?);
    }
    if !caches.wait_until_synced(&shutdown) {
        return Ok(Stopped::Shutdown);
    }
    running.health.set_synced(true);
    log::info!("caches synced");

    // Leader election: workers run only while the gate is open.
    let lost = match &config.leader_election {
        Some(lease) => {
            let elector = LeaderElector::spawn(kube.clone(), lease.clone(), gate.clone())
                .map_err(StartError::spawn("leader election"))?;
            let lost = elector.lost();
            running.elector = Some(elector);
            lost
        }
        None => crossbeam_channel::never(),
    };

    let workload = Arc::new(Workload::new(kube.clone(), WORKLOAD_TIMEOUT));
    let poller_queue = cluster_queue.clone();
    let (poller, poller_thread) = ApiPoller::spawn(
        workload.clone(),
        move |ns, name| poller_queue.add(ObjectKey::new(ns, name)),
        shutdown.receiver().clone(),
    )
    .map_err(StartError::spawn("api poller"))?;
    running.threads.push(poller_thread);

    // MaasMachineTemplate status.capacity/nodeInfo (autoscaling from zero).
    let (templates, templates_thread) = template_capacity::spawn(
        kube.clone(),
        maas.clone(),
        informer_config(config, resources::MAAS_MACHINE_TEMPLATES),
        config.sync_period,
        gate.clone(),
        shutdown.clone(),
    )?;
    running.informers.push(templates);
    running.threads.push(templates_thread);

    let kube_api: Arc<dyn KubeApi> = Arc::new(adapters::Kube {
        client: kube.clone(),
        caches: caches.clone(),
        events,
    });
    // The MAAS watch: its sources are the clients the credentials hand out.
    let tenants = Arc::new(SourceTenants::default());
    let router = Router {
        caches: caches.clone(),
        queue: Arc::new(machine_queue.clone()),
        kube: kube_api.clone(),
        tenants: tenants.clone(),
    };
    let watch = MaasWatch::spawn(
        WatchConfig::default().interval(config.maas_watch_interval),
        move |change| router.on_change(change),
        shutdown.receiver().clone(),
    )
    .map_err(StartError::spawn("MAAS watch"))?;
    let watch_handle = watch.handle();
    running.maas_watch = Some(watch);
    running.threads.push(
        maas_watch::spawn_orphan_report(
            watch_handle.clone(),
            caches.clone(),
            shutdown.receiver().clone(),
        )
        .map_err(StartError::spawn("orphan report"))?,
    );
    let ctx = Context {
        kube: kube_api,
        maas: Arc::new(
            Credentials::new(maas, maas_user, kube.clone(), config.maas_ca_pem.clone())
                .with_tenants(tenants)
                .with_allowed_endpoints(config.maas_endpoint_allow.clone())
                .with_watch(watch_handle),
        ),
        workload,
        api_watch: Arc::new(poller.clone()),
        machine_queue: Arc::new(machine_queue.clone()),
        clock: Arc::new(SystemClock),
        options: config.options.clone(),
    };
    let c = ctx.clone();
    running.workers.extend(runtime::run_workers(
        "maascluster",
        cluster_queue.clone(),
        config.maascluster_concurrency,
        move |key: &ObjectKey| cluster::reconcile(&c, &key.namespace, &key.name),
        gate.clone(),
    ));
    let c = ctx.clone();
    running.workers.extend(runtime::run_workers(
        "maasmachine",
        machine_queue.clone(),
        config.maasmachine_concurrency,
        move |key: &ObjectKey| machine::reconcile(&c, &key.namespace, &key.name),
        gate.clone(),
    ));
    running.workers.extend(runtime::run_workers(
        "maasremediation",
        remediation_queue.clone(),
        REMEDIATION_WORKERS,
        move |key: &ObjectKey| remediation::reconcile(&ctx, &key.namespace, &key.name),
        gate.clone(),
    ));
    for resync in [
        runtime::spawn_resync(
            caches.maas_clusters.clone(),
            cluster_queue,
            config.sync_period,
            shutdown.clone(),
        ),
        runtime::spawn_resync(
            caches.maas_machines.clone(),
            machine_queue,
            config.sync_period,
            shutdown.clone(),
        ),
        runtime::spawn_resync(
            caches.maas_remediations.clone(),
            remediation_queue,
            config.sync_period,
            shutdown.clone(),
        ),
    ] {
        running
            .threads
            .push(resync.map_err(StartError::spawn("resync"))?);
    }
    log::info!("controllers running");

    let leadership_lost = crossbeam_channel::select! {
        recv(shutdown.receiver()) -> _ => false,
        recv(lost) -> _ => true,
    };
    if leadership_lost {
        log::error!("leadership lost; stopping");
        poller.forget_all();
        Ok(Stopped::LeadershipLost)
    } else {
        log::info!("shutting down");
        Ok(Stopped::Shutdown)
    }
}

/// Starts the probe and metrics listeners. Each serves only its own routes;
/// one address given for both serves both.
fn serve_probes(config: &Config, health: &Arc<Health>) -> Result<(), StartError> {
    let listeners = match (
        config.health_probe_bind_address,
        config.metrics_bind_address,
    ) {
        (Some(probes), Some(metrics)) if probes == metrics => {
            vec![(
                "health probes and metrics",
                probes,
                Routes::Both(health.clone()),
            )]
        }
        (probes, metrics) => probes
            .map(|a| ("health probes", a, Routes::Probes(health.clone())))
            .into_iter()
            .chain(metrics.map(|a| ("metrics", a, Routes::Metrics)))
            .collect(),
    };
    for (what, addr, routes) in listeners {
        let (bound, _answers_until_exit) =
            serve::start(addr, routes).map_err(StartError::spawn(format!("{what} on {addr}")))?;
        log::info!("serving {what} on {bound}");
    }
    Ok(())
}

/// One `whoami` before any work: Ready → go on (the key's MAAS user goes
/// into `user`); Refused (wrong key, not MAAS, TLS) → the error that ends
/// the process; Unreachable → not ready, with the reason, while a thread
/// (returned, to be joined) checks again with backoff until MAAS answers
/// (and fills `user`) or `shutdown` fires. Each outcome is also an Event
/// on our Pod (`report`).
fn check_maas_at_start(
    maas: &maas::Client,
    health: &Arc<Health>,
    shutdown: &Shutdown,
    user: &Arc<OnceLock<String>>,
    report: StartReport,
) -> Result<Option<JoinHandle<()>>, StartError> {
    let unreachable = |e: &maas::Error| format!("not reachable: {e}");
    let api_root = maas.api_root().to_string();
    match maas.start_check() {
        StartCheck::Ready(whoami) => {
            log::info!("MAAS {api_root}: authenticated as {}", whoami.username);
            report.ready(&format!(
                "MAAS {api_root}: authenticated as {}",
                whoami.username
            ));
            let _ = user.set(whoami.username);
            Ok(None)
        }
        StartCheck::Refused(why) => {
            report.warning("MAASRefused", &why);
            Err(StartError::MaasRefused(why))
        }
        StartCheck::Unreachable(e) => {
            log::warn!("MAAS not reachable at start; not ready until it answers: {e}");
            report.warning(
                "MAASUnreachable",
                &format!("MAAS {api_root} not reachable; not ready until it answers: {e}"),
            );
            health.set_unavailable("MAAS", unreachable(&e));
            let (maas, health, stop) = (maas.clone(), health.clone(), shutdown.receiver().clone());
            let user = user.clone();
            std::thread::Builder::new()
                .name("maas-start-check".into())
                .spawn(move || {
                    let still_unreachable = |check: &StartCheck| {
                        if let StartCheck::Unreachable(e) = check {
                            health.set_unavailable("MAAS", unreachable(e));
                        }
                    };
                    match maas.recheck_until_ready(still_unreachable, &stop) {
                        Some(StartCheck::Ready(whoami)) => {
                            log::info!("MAAS answers: authenticated as {}", whoami.username);
                            report.ready(&format!(
                                "MAAS {api_root} answers: authenticated as {}",
                                whoami.username
                            ));
                            let _ = user.set(whoami.username);
                            health.set_available("MAAS");
                        }
                        // Stays unready with the reason: fix the key, then
                        // restart the pod.
                        Some(StartCheck::Refused(why)) => {
                            log::error!("{why}");
                            report.warning("MAASRefused", &why);
                            health.set_unavailable("MAAS", why);
                        }
                        _ => {}
                    }
                })
                .map(Some)
                .map_err(StartError::spawn("MAAS start-up check thread"))
        }
    }
}

/// What every informer is started with: the mappers feed three queues.
struct Watches<'a> {
    kube: &'a kube::Client,
    config: &'a Config,
    shutdown: &'a Shutdown,
    maas_clusters: &'a WorkQueue,
    maas_machines: &'a WorkQueue,
    maas_remediations: &'a WorkQueue,
}

impl Watches<'_> {
    /// Starts the informer of `resource` into `store`, its events mapped to
    /// keys by `map` and queued.
    fn start<T: Object>(
        &self,
        resource: kube::Resource,
        store: &Store<T>,
        map: impl Fn(&Event<T>) -> Keys + Send + 'static,
    ) -> Result<Informer, StartError> {
        let informer = informer_config(self.config, resource);
        let (clusters, machines) = (self.maas_clusters.clone(), self.maas_machines.clone());
        let remediations = self.maas_remediations.clone();
        let handler = move |event: &Event<T>| {
            let keys = map(event);
            for key in keys.maas_clusters {
                clusters.add(key);
            }
            for key in keys.maas_machines {
                machines.add(key);
            }
            for key in keys.maas_remediations {
                remediations.add(key);
            }
        };
        let shutdown = self.shutdown.clone();
        Informer::spawn(
            self.kube.clone(),
            informer,
            store.clone(),
            handler,
            shutdown,
        )
        .map_err(StartError::spawn(format!("{} informer", resource.plural)))
    }
}

/// An informer of `resource` as configured: namespace, watch filter, pages.
fn informer_config(config: &Config, resource: kube::Resource) -> InformerConfig {
    let mut informer = InformerConfig::new(resource).namespace(config.namespace.clone());
    informer.page_size = LIST_PAGE_SIZE;
    if let Some(filter) = &config.watch_filter {
        informer = informer.label_selector(format!("{WATCH_FILTER_LABEL}={filter}"));
    }
    informer
}

/// Everything [`run`] started, to stop in order.
struct Running {
    shutdown: Shutdown,
    health: Arc<Health>,
    queues: Vec<WorkQueue>,
    workers: Vec<JoinHandle<()>>,
    events: Option<EventRecorder>,
    elector: Option<LeaderElector>,
    informers: Vec<Informer>,
    /// Threads that end on their own once `shutdown` fires.
    threads: Vec<JoinHandle<()>>,
    /// Ends on `shutdown` too, or once its MAAS call in flight returns.
    maas_watch: Option<MaasWatch>,
}

impl Running {
    /// A new work queue, shut down with the others on stop.
    fn add_queue(&mut self, name: &str) -> WorkQueue {
        let queue = WorkQueue::new(name);
        self.queues.push(queue.clone());
        queue
    }

    /// Stops and joins everything, in the order of the module docs.
    fn stop(self, drain: Duration) {
        self.health.set_stopping();
        self.shutdown.trigger();
        for queue in &self.queues {
            queue.shutdown();
        }
        if !runtime::join_within(self.workers, drain) {
            log::warn!("reconciles still running after {drain:?}; exiting anyway");
        }
        if let Some(events) = self.events {
            if !events.close(EVENTS_FLUSH) {
                log::warn!("events still being written after {EVENTS_FLUSH:?}; dropped");
            }
        }
        if let Some(elector) = self.elector {
            elector.release();
        }
        for informer in self.informers {
            informer.stop();
        }
        runtime::join_within(self.threads, THREADS_STOP);
        if let Some(watch) = self.maas_watch {
            if !watch.join(THREADS_STOP) {
                log::warn!("the MAAS watch is still in a MAAS call; exiting anyway");
            }
        }
        log::info!("stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_is_known_only_when_the_downward_api_gives_all_three() {
        fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
            move |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v.to_string())
            }
        }
        let all = [
            ("POD_NAMESPACE", "capmaas-system"),
            ("POD_NAME", "capmaas-x"),
            ("POD_UID", "u1"),
        ];
        let pod = PodRef::from_env(env(&all)).unwrap();
        assert_eq!(
            pod.object(),
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "namespace": "capmaas-system", "name": "capmaas-x", "uid": "u1"}})
        );
        assert_eq!(PodRef::from_env(env(&all[..2])), None);
        let empty_uid = [("POD_NAMESPACE", "n"), ("POD_NAME", "p"), ("POD_UID", "")];
        assert_eq!(PodRef::from_env(env(&empty_uid)), None);
    }
}
