//! The MAAS watch: a scheduler thread and up to four listing threads that
//! keep a view of every machine each MAAS user in use owns, and tell a
//! handler what changed. Sources are listed concurrently: a slow or silent
//! MAAS (a tenant's endpoint) holds one listing thread for its timeout,
//! never the other sources' cadence. It is the MAAS
//! counterpart of the Kubernetes informers; MAAS has no watch API, so it
//! lists.
//!
//! ```text
//! let watch = MaasWatch::spawn(WatchConfig::default(), |change| ..., stop_receiver)?;
//! let handle = watch.handle();                               // Clone + Send + Sync
//! handle.set_sources(vec![(SourceId::of(&client, "capmaas"), client)]);
//! handle.lookup(&source, system_id) -> Lookup::{Owned(ListedMachine) | NotOwned | Unknown}
//! handle.machine(&source, system_id) -> Option<ListedMachine>  // { machine, observed_at, first_seen }
//! handle.record(&source, machine_from_a_write_answer)
//! handle.is_fresh(&source) / last_success(&source) / last_error(&source) / machines(&source)
//! handle.orphans(&source, |identity| claimed(identity)) -> Orphans { unclaimed, unmarked }
//! watch.join(Duration::from_secs(1)) -> bool                 // after `stop` fired
//! ```
//!
//! Per source (one MAAS endpoint as one user) and interval (default 15 s):
//!
//! - **One list** of every machine the user owns (`GET machines/?owner=`),
//!   whatever their number, diffed against the previous one. The handler
//!   hears exactly the machines that [`Appeared`](MachineChange::Appeared),
//!   [`Changed`](MachineChange::Changed) in a field the controllers act on
//!   (status, power state, addresses, owner, owner data, name, zone, pool,
//!   lock) or [`Vanished`](MachineChange::Vanished) (released: MAAS clears
//!   the owner, so the machine leaves the user's list; reported with its
//!   last known state). The first list reports every machine as appeared,
//!   as an informer's first list does. A machine listed as it was keeps
//!   the view's `Arc` (matched as the list is decoded): the view and the
//!   list being compared hold only the changed machines twice.
//! - **At most one events query** per 250 machines in transit (Allocated,
//!   Deploying, Releasing, Disk erasing, ...; and once more as they leave
//!   transit, so a failed deployment's reason is read), only for events
//!   newer than those seen, each reported once, oldest first, as
//!   [`MachineChange::Events`]. Which events count as a machine's is
//!   explained in `watch/events.rs`. Nothing in transit: no call.
//!
//! The events mark and the list fail independently: a MAAS that refuses
//! the events query (a 404 to `events/?op=query` has been seen) still has
//! its machines listed, the event log waiting (counted as an error in
//! `maas_watch_event_queries_total`, logged) until the mark succeeds.
//!
//! A failing list changes nothing: the view is kept (and goes stale, see
//! [`WatchHandle::is_fresh`]), nothing is reported gone, and the source is
//! tried again after a backoff of 5 s doubling to 5 minutes (each delay up
//! to twice its step at random; a `Retry-After` is honoured), reset by the
//! next success. The watch's MAAS calls are not retried by the client: the
//! next attempt is the watch's own.
//!
//! The handler runs on a listing thread (so it must be `Sync`) after the
//! view is updated (so a reconcile it triggers reads at least that list);
//! keep it quick. The scheduler stops within a second of `stop` firing;
//! a listing thread ends once the MAAS call in flight does (each bounded
//! by the client's timeout) and holds nothing that needs flushing;
//! [`MaasWatch::join`] waits a bounded time for the scheduler.
//!
//! Metrics (label `source` = `user@endpoint`): `maas_watch_lists_total{result}`,
//! `maas_watch_list_duration_seconds`, `maas_watch_machines`,
//! `maas_watch_changes_total{change}`, `maas_watch_last_success_timestamp_seconds`,
//! `maas_watch_events_total`, `maas_watch_event_queries_total{result}`. The
//! MAAS calls themselves count in `maas_api_requests_total` like any other.

mod diff;
mod events;
/// An in-memory MAAS behind [`Reader`], for tests of this module and of
/// the wiring ([`WatchHandle::set_readers`]).
#[cfg(test)]
pub(crate) mod fake;
mod orphans;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::{Client, Error, ErrorKind, Event, EventLevel, EventQuery, Machine};
use crate::clock::later;
use crate::metrics;
pub use diff::{changed_fields, in_transit};
pub use orphans::{find_orphans, Orphans};

/// Where machines are listed: one MAAS endpoint as one user. Two clients
/// with the same endpoint and user are one source, listed once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId {
    endpoint: String,
    user: String,
}

impl SourceId {
    /// `endpoint` as [`Client::api_root`] shows it (no credentials in it:
    /// it names metrics and log lines).
    pub fn new(endpoint: impl Into<String>, user: impl Into<String>) -> SourceId {
        SourceId {
            endpoint: endpoint.into(),
            user: user.into(),
        }
    }

    /// The source `client` lists, as `user` (its key's user, from
    /// [`Client::whoami`] or the start check).
    pub fn of(client: &Client, user: &str) -> SourceId {
        SourceId::new(client.api_root(), user)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn user(&self) -> &str {
        &self.user
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.user, self.endpoint)
    }
}

/// How the watch runs. Every default is on its field.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// Time between two lists of a source. Default 15 s.
    pub interval: Duration,
    /// First delay after a failed list; doubles per failure. Default 5 s.
    pub initial_backoff: Duration,
    /// Longest delay after failures. Default 5 minutes.
    pub max_backoff: Duration,
    /// Follow the event log of machines in transit, from this level up
    /// (INFO shows a deployment's stages and failures; DEBUG adds curtin's
    /// and cloud-init's chatter). None: no event queries. Default INFO.
    pub events: Option<EventLevel>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            interval: Duration::from_secs(15),
            initial_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            events: Some(EventLevel::Info),
        }
    }
}

impl WatchConfig {
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    pub fn events(mut self, level: Option<EventLevel>) -> Self {
        self.events = level;
        self
    }

    /// A view is fresh while its last good list started less than two
    /// intervals ago: one late or failed list does not make it stale.
    pub fn fresh_for(&self) -> Duration {
        self.interval * 2
    }
}

/// A machine as the watch last saw it.
#[derive(Clone, Debug)]
pub struct ListedMachine {
    pub machine: Arc<Machine>,
    /// When the list showing it was sent, or the write answering it was
    /// recorded ([`WatchHandle::record`]): MAAS's state at least that recent.
    pub observed_at: Instant,
    /// When the watch first saw it under this user.
    pub first_seen: Instant,
}

/// What the view says about one machine, for a reconcile deciding whether
/// it needs to read MAAS.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// The user owns it, as a fresh list (or a recorded answer) shows it.
    Owned(ListedMachine),
    /// A fresh list does not show it: not (or no longer) the user's —
    /// released, or never allocated to this user.
    NotOwned,
    /// No fresh list of this source: read MAAS.
    Unknown,
}

/// One report to the handler.
#[derive(Clone, Debug)]
pub enum MachineChange {
    /// A machine the user now owns (every machine, on the first list).
    Appeared {
        source: SourceId,
        machine: Arc<Machine>,
    },
    /// A field the controllers act on changed (`fields` names them,
    /// [`changed_fields`]). When the capmaas identity changed, both the
    /// old and the new identity's objects are concerned.
    Changed {
        source: SourceId,
        old: Arc<Machine>,
        new: Arc<Machine>,
        fields: Vec<&'static str>,
    },
    /// The user no longer owns it (released, possibly behind our back):
    /// its last known state.
    Vanished {
        source: SourceId,
        last: Arc<Machine>,
    },
    /// New entries of the machine's event log, oldest first, each reported
    /// once.
    Events {
        source: SourceId,
        machine: Arc<Machine>,
        events: Vec<Event>,
    },
}

impl MachineChange {
    pub fn source(&self) -> &SourceId {
        match self {
            MachineChange::Appeared { source, .. }
            | MachineChange::Changed { source, .. }
            | MachineChange::Vanished { source, .. }
            | MachineChange::Events { source, .. } => source,
        }
    }

    /// The machine as it is now (for `Vanished`: as it was last).
    pub fn machine(&self) -> &Arc<Machine> {
        match self {
            MachineChange::Appeared { machine, .. } | MachineChange::Events { machine, .. } => {
                machine
            }
            MachineChange::Changed { new, .. } => new,
            MachineChange::Vanished { last, .. } => last,
        }
    }

    pub fn system_id(&self) -> &str {
        &self.machine().system_id
    }
}

/// What the watch reads from MAAS: a [`Client`], or a fake in unit tests.
pub trait Reader: Send + Sync {
    fn machines_owned_by(&self, owner: &str) -> Result<Vec<Arc<Machine>>, Error>;
    /// The list, with the `Arc` from `previous` (sorted by system_id) for a
    /// machine as it was: unchanged machines are then not held twice while
    /// the list is compared with the view.
    fn machines_owned_by_reusing(
        &self,
        owner: &str,
        previous: Vec<Arc<Machine>>,
    ) -> Result<Vec<Arc<Machine>>, Error> {
        drop(previous);
        self.machines_owned_by(owner)
    }
    fn events(&self, query: &EventQuery) -> Result<Vec<Event>, Error>;
}

impl Reader for Client {
    fn machines_owned_by(&self, owner: &str) -> Result<Vec<Arc<Machine>>, Error> {
        Client::machines_owned_by(self, owner)
    }

    fn machines_owned_by_reusing(
        &self,
        owner: &str,
        previous: Vec<Arc<Machine>>,
    ) -> Result<Vec<Arc<Machine>>, Error> {
        Client::machines_owned_by_reusing(self, owner, previous)
    }

    fn events(&self, query: &EventQuery) -> Result<Vec<Event>, Error> {
        super::MaasApi::events(self, query)
    }
}

/// The running watch: its thread and a handle on its view.
pub struct MaasWatch {
    handle: WatchHandle,
    thread: JoinHandle<()>,
}

impl MaasWatch {
    /// Starts the watch thread, with no sources yet
    /// ([`WatchHandle::set_sources`]). `handler` runs on that thread for
    /// every [`MachineChange`]. The thread ends when `stop` receives a
    /// message or disconnects (the project's `Shutdown::receiver()` does
    /// the latter).
    pub fn spawn(
        config: WatchConfig,
        handler: impl Fn(&MachineChange) + Send + Sync + 'static,
        stop: Receiver<()>,
    ) -> io::Result<MaasWatch> {
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let shared = Arc::new(Shared {
            config,
            wanted: Mutex::new(Vec::new()),
            views: RwLock::new(HashMap::new()),
            wake: wake_tx,
        });
        let mut worker = Worker::new(Arc::clone(&shared), Arc::new(handler), stop, wake_rx)?;
        let thread = thread::Builder::new()
            .name("maas-watch".into())
            .spawn(move || worker.run())?;
        Ok(MaasWatch {
            handle: WatchHandle { shared },
            thread,
        })
    }

    pub fn handle(&self) -> WatchHandle {
        self.handle.clone()
    }

    /// Waits up to `within` for the thread to end (after `stop` fired).
    /// False when it is still in a MAAS call: it ends when that call does
    /// and holds nothing that needs flushing.
    pub fn join(self, within: Duration) -> bool {
        let deadline = later(Instant::now(), within);
        while !self.thread.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
        if self.thread.join().is_err() {
            log::error!("the MAAS watch thread panicked");
        }
        true
    }
}

impl std::ops::Deref for MaasWatch {
    type Target = WatchHandle;

    fn deref(&self) -> &WatchHandle {
        &self.handle
    }
}

/// The watch's view and sources, for reconcilers and the wiring. Cheap to
/// clone.
#[derive(Clone)]
pub struct WatchHandle {
    shared: Arc<Shared>,
}

struct Shared {
    config: WatchConfig,
    /// The sources to list, as last set.
    wanted: Mutex<Vec<(SourceId, Arc<dyn Reader>)>>,
    views: RwLock<HashMap<SourceId, View>>,
    /// Wakes the thread when the sources change.
    wake: Sender<()>,
}

impl Shared {
    /// The views, for reading. A panic under the lock leaves whole values
    /// behind, so poisoning is ignored.
    fn views(&self) -> RwLockReadGuard<'_, HashMap<SourceId, View>> {
        self.views.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn views_mut(&self) -> RwLockWriteGuard<'_, HashMap<SourceId, View>> {
        self.views.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn wanted(&self) -> MutexGuard<'_, Vec<(SourceId, Arc<dyn Reader>)>> {
        self.wanted.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One source's machines.
#[derive(Default)]
struct View {
    machines: diff::Machines,
    last_success: Option<Instant>,
    last_error: Option<String>,
}

impl WatchHandle {
    /// The sources to list from now on (the controller-wide credentials
    /// and each distinct per-cluster credential in use). New sources are
    /// listed at once; sources left out are forgotten, their machines
    /// neither reported nor kept. A repeated id keeps its first client.
    pub fn set_sources(&self, sources: Vec<(SourceId, Client)>) {
        self.set_readers(
            sources
                .into_iter()
                .map(|(id, client)| {
                    let reader: Arc<dyn Reader> = Arc::new(client.with_max_retries(0));
                    (id, reader)
                })
                .collect(),
        );
    }

    /// [`WatchHandle::set_sources`] with any [`Reader`]: the crate's tests
    /// drive a real watch with an in-memory MAAS (`fake::FakeMaas`).
    pub(crate) fn set_readers(&self, sources: Vec<(SourceId, Arc<dyn Reader>)>) {
        let mut unique: Vec<(SourceId, Arc<dyn Reader>)> = Vec::new();
        for (id, reader) in sources {
            if !unique.iter().any(|(known, _)| *known == id) {
                unique.push((id, reader));
            }
        }
        *self.shared.wanted() = unique;
        let _ = self.shared.wake.try_send(());
    }

    /// The sources currently set.
    pub fn sources(&self) -> Vec<SourceId> {
        self.shared
            .wanted()
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn read<T>(&self, source: &SourceId, f: impl FnOnce(Option<&View>) -> T) -> T {
        let views = self.shared.views();
        f(views.get(source))
    }

    /// The machine as last seen, however old (see [`ListedMachine`]).
    pub fn machine(&self, source: &SourceId, system_id: &str) -> Option<ListedMachine> {
        self.read(source, |view| view?.machines.get(system_id).cloned())
    }

    /// Whether a reconcile can use the view instead of reading MAAS.
    pub fn lookup(&self, source: &SourceId, system_id: &str) -> Lookup {
        let fresh_for = self.shared.config.fresh_for();
        self.read(source, |view| {
            let Some(view) = view else {
                return Lookup::Unknown;
            };
            let fresh = view.last_success.is_some_and(|at| at.elapsed() < fresh_for);
            match view.machines.get(system_id) {
                Some(entry) if fresh || entry.observed_at.elapsed() < fresh_for => {
                    Lookup::Owned(entry.clone())
                }
                None if fresh => Lookup::NotOwned,
                _ => Lookup::Unknown,
            }
        })
    }

    /// Whether the source's last good list is recent (two intervals).
    pub fn is_fresh(&self, source: &SourceId) -> bool {
        self.last_success(source)
            .is_some_and(|at| at.elapsed() < self.shared.config.fresh_for())
    }

    /// When the source's last good list was sent.
    pub fn last_success(&self, source: &SourceId) -> Option<Instant> {
        self.read(source, |view| view?.last_success)
    }

    /// Why the source's latest list failed; None once one succeeds.
    pub fn last_error(&self, source: &SourceId) -> Option<String> {
        self.read(source, |view| view?.last_error.clone())
    }

    /// Every machine of the source, as last seen.
    pub fn machines(&self, source: &SourceId) -> Vec<ListedMachine> {
        self.read(source, |view| {
            view.map(|v| v.machines.values().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// Puts MAAS's answer to a write (allocate, deploy, power, release,
    /// owner data) into the view, so reconciles read it until the next
    /// list and that list does not report the change the writer made. A
    /// machine no longer owned by the source's user leaves the view.
    pub fn record(&self, source: &SourceId, machine: Machine) {
        if machine.system_id.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut views = self.shared.views_mut();
        let Some(view) = views.get_mut(source) else {
            return;
        };
        if machine.owner.as_deref() != Some(source.user()) {
            view.machines.remove(&machine.system_id);
            return;
        }
        let first_seen = view
            .machines
            .get(&machine.system_id)
            .map_or(now, |known| known.first_seen);
        view.machines.insert(ListedMachine {
            machine: Arc::new(machine),
            observed_at: now,
            first_seen,
        });
    }

    /// Machines of the source carrying a capmaas identity nobody claims,
    /// and machines of its user without one (see [`find_orphans`]). Only
    /// machines seen for at least one interval count: an allocation a
    /// moment old may not be in the controllers' caches yet.
    pub fn orphans(&self, source: &SourceId, is_claimed: impl Fn(&str) -> bool) -> Orphans {
        let settled = self.shared.config.interval;
        let machines: Vec<Arc<Machine>> = self
            .machines(source)
            .into_iter()
            .filter(|m| m.first_seen.elapsed() >= settled)
            .map(|m| m.machine)
            .collect();
        find_orphans(&machines, is_claimed)
    }
}

/// The thread's own state for one source.
struct SourceState {
    reader: Arc<dyn Reader>,
    /// `user@endpoint`, the metrics' `source` label.
    label: String,
    next_due: Instant,
    backoff: Backoff,
    events: events::EventLog,
    /// Machines whose events to fetch: in transit, or leaving transit and
    /// not fetched since.
    tracked: HashSet<String>,
}

/// What a list did to a source's view.
struct Applied {
    changes: Vec<MachineChange>,
    /// Listed machines in transit.
    transit: HashSet<String>,
    /// Every listed machine.
    listed: HashSet<String>,
    /// Machines new to the user, or that changed hands, since the previous
    /// list.
    newcomers: HashSet<String>,
}

/// The handler, shared by the listing threads.
type Handler = Arc<dyn Fn(&MachineChange) + Send + Sync>;

/// One source's interval, handed to a listing thread and back.
type Job = (SourceId, SourceState);

/// The scheduler: decides which source is due and hands it to one of
/// [`MAX_CONCURRENT_LISTS`] listing threads, so a slow or silent source
/// holds one of them, never the others' cadence.
struct Worker {
    shared: Arc<Shared>,
    stop: Receiver<()>,
    /// Set once `stop` fired (a message on it is consumed when seen).
    stopping: bool,
    wake: Receiver<()>,
    /// Sources waiting for their next interval.
    sources: HashMap<SourceId, SourceState>,
    /// Sources being listed (their state is with a listing thread).
    in_flight: HashSet<SourceId>,
    jobs: Sender<Job>,
    done: Receiver<Job>,
}

/// Sources listed at the same time. Each list is bounded by the client's
/// timeout, so a few silent sources delay the others by at most one
/// scheduling round, and an endless number of them cannot open an endless
/// number of connections.
const MAX_CONCURRENT_LISTS: usize = 4;

impl Worker {
    fn new(
        shared: Arc<Shared>,
        handler: Handler,
        stop: Receiver<()>,
        wake: Receiver<()>,
    ) -> io::Result<Worker> {
        let (jobs, job_rx) = crossbeam_channel::unbounded::<Job>();
        let (done_tx, done) = crossbeam_channel::unbounded::<Job>();
        for n in 0..MAX_CONCURRENT_LISTS {
            let lister = Lister {
                shared: Arc::clone(&shared),
                handler: Arc::clone(&handler),
            };
            let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
            // Ends when the scheduler drops `jobs` (after its current job).
            thread::Builder::new()
                .name(format!("maas-watch-{n}"))
                .spawn(move || {
                    for (id, mut state) in job_rx {
                        lister.poll(&id, &mut state);
                        if done_tx.send((id, state)).is_err() {
                            return;
                        }
                    }
                })?;
        }
        Ok(Worker {
            shared,
            stop,
            stopping: false,
            wake,
            sources: HashMap::new(),
            in_flight: HashSet::new(),
            jobs,
            done,
        })
    }

    fn run(&mut self) {
        log::debug!("MAAS watch started");
        while !self.stopped() {
            self.sync_sources();
            let now = Instant::now();
            let mut due: Vec<(Instant, SourceId)> = self
                .sources
                .iter()
                .filter(|(_, s)| s.next_due <= now)
                .map(|(id, s)| (s.next_due, id.clone()))
                .collect();
            due.sort();
            for (_, id) in due {
                if let Some(state) = self.sources.remove(&id) {
                    self.in_flight.insert(id.clone());
                    if self.jobs.send((id, state)).is_err() {
                        return;
                    }
                }
            }
            let wait = self
                .sources
                .values()
                .map(|s| s.next_due.saturating_duration_since(Instant::now()))
                .min()
                .unwrap_or(Duration::from_secs(3600));
            crossbeam_channel::select! {
                recv(self.stop) -> _ => self.stopping = true,
                recv(self.wake) -> _ => {}
                recv(self.done) -> job => {
                    if let Ok((id, state)) = job {
                        self.returned(id, state);
                    }
                }
                default(wait) => {}
            }
        }
        log::debug!("MAAS watch stopped");
    }

    /// A source back from its interval: waits for its next one, unless it
    /// was dropped meanwhile.
    fn returned(&mut self, id: SourceId, state: SourceState) {
        self.in_flight.remove(&id);
        if self.shared.wanted().iter().any(|(w, _)| *w == id) {
            self.sources.insert(id, state);
        } else {
            self.shared.views_mut().remove(&id);
            publish_gauges(&self.shared);
        }
    }

    /// Whether `stop` fired: a message, or every sender gone.
    fn stopped(&mut self) -> bool {
        if !self.stopping {
            self.stopping = !matches!(self.stop.try_recv(), Err(TryRecvError::Empty));
        }
        self.stopping
    }

    /// Adopts the sources last set: new ones are due now, dropped ones are
    /// forgotten (view and gauges).
    fn sync_sources(&mut self) {
        let wanted = self.shared.wanted().clone();
        let mut removed: Vec<SourceId> = self
            .sources
            .keys()
            .filter(|id| !wanted.iter().any(|(w, _)| w == *id))
            .cloned()
            .collect();
        for (id, reader) in wanted {
            if self.in_flight.contains(&id) {
                continue;
            }
            match self.sources.get_mut(&id) {
                // New credentials for the same user: same state.
                Some(state) => state.reader = reader,
                None => {
                    log::info!("MAAS watch: listing machines of {id}");
                    self.sources.insert(
                        id.clone(),
                        SourceState {
                            reader,
                            label: id.to_string(),
                            next_due: Instant::now(),
                            backoff: Backoff::new(
                                self.shared.config.initial_backoff,
                                self.shared.config.max_backoff,
                            ),
                            events: events::EventLog::default(),
                            tracked: HashSet::new(),
                        },
                    );
                }
            }
        }
        if removed.is_empty() {
            return;
        }
        let mut views = self.shared.views_mut();
        for id in removed.drain(..) {
            log::info!("MAAS watch: no longer listing machines of {id}");
            self.sources.remove(&id);
            views.remove(&id);
        }
        drop(views);
        publish_gauges(&self.shared);
    }
}

/// What a listing thread needs: the view and the handler.
struct Lister {
    shared: Arc<Shared>,
    handler: Handler,
}

impl Lister {
    /// One interval of one source: the events mark (once), the list, diff,
    /// report, then the events step. The list and the event log fail
    /// independently: a MAAS that refuses `events/?op=query` still has its
    /// machines listed (the failure is a metric and a log line).
    fn poll(&self, id: &SourceId, state: &mut SourceState) {
        let reader = Arc::clone(&state.reader);
        let label = state.label.clone();
        let level = self.shared.config.events.clone();
        if level.is_some() && state.events.needs_mark() {
            if let Err(error) = state.events.mark(reader.as_ref()) {
                count_event_query(&label, "error");
                log::warn!(
                    "MAAS watch: reading the newest event of {id} failed: {error}; listing \
                     machines without their event log, trying again next interval"
                );
            }
        }
        let started = Instant::now();
        let listed = reader.machines_owned_by_reusing(id.user(), self.viewed(id));
        metrics::observe(
            "maas_watch_list_duration_seconds",
            "Duration of one MAAS watch list (all machines of one MAAS user).",
            &[("source", &label)],
            started.elapsed().as_secs_f64(),
        );
        let list = match listed {
            Ok(list) => list,
            Err(error) => {
                self.list_failed(id, state, &error);
                return;
            }
        };
        count_list(&label, "ok");
        let Some(Applied {
            changes,
            transit,
            listed,
            newcomers,
        }) = self.apply(id, list, started)
        else {
            return;
        };
        state.backoff.reset();
        let interval = self.shared.config.interval;
        // Keep the cadence; a list slower than the interval waits a whole
        // one rather than listing back to back.
        let now = Instant::now();
        let on_cadence = later(started, interval);
        state.next_due = if on_cadence > now {
            on_cadence
        } else {
            later(now, interval)
        };
        for change in &changes {
            let kind = match change {
                MachineChange::Appeared { .. } => "appeared",
                MachineChange::Changed { .. } => "changed",
                MachineChange::Vanished { .. } => "vanished",
                MachineChange::Events { .. } => "events",
            };
            metrics::counter_inc(
                "maas_watch_changes_total",
                "Machines the MAAS watch reported as appeared, changed or vanished.",
                &[("source", &label), ("change", kind)],
            );
        }
        publish_gauges(&self.shared);
        for change in &changes {
            self.notify(change);
        }
        // Without its starting point the event log would replay history.
        if let (Some(level), false) = (level, state.events.needs_mark()) {
            self.follow_events(id, state, &level, transit, &listed, &newcomers);
        }
    }

    /// Replaces the source's view with the list; None when the source was
    /// dropped while it was listed.
    fn apply(&self, id: &SourceId, list: Vec<Arc<Machine>>, listed_at: Instant) -> Option<Applied> {
        let mut views = self.shared.views_mut();
        if !self.shared.wanted().iter().any(|(w, _)| w == id) {
            return None;
        }
        let view = views.entry(id.clone()).or_default();
        let (machines, changes) = diff::apply_list(id, &view.machines, list, listed_at);
        view.machines = machines;
        view.last_success = Some(listed_at);
        view.last_error = None;
        let transit = view
            .machines
            .values()
            .filter(|m| in_transit(&m.machine.status))
            .map(|m| m.machine.system_id.clone())
            .collect();
        let listed = view
            .machines
            .values()
            .map(|m| m.machine.system_id.clone())
            .collect();
        let newcomers = changes
            .iter()
            .filter_map(|change| match change {
                MachineChange::Appeared { machine, .. } => Some(machine.system_id.clone()),
                MachineChange::Changed { old, new, .. } if diff::changed_hands(old, new) => {
                    Some(new.system_id.clone())
                }
                _ => None,
            })
            .collect();
        Some(Applied {
            changes,
            transit,
            listed,
            newcomers,
        })
    }

    fn list_failed(&self, id: &SourceId, state: &mut SourceState, error: &Error) {
        count_list(&state.label, "error");
        let delay = state
            .backoff
            .next_delay()
            .max(error.retry_after().unwrap_or_default());
        state.next_due = later(Instant::now(), delay);
        let stale = {
            let mut views = self.shared.views_mut();
            if !self.shared.wanted().iter().any(|(w, _)| w == id) {
                return;
            }
            let view = views.entry(id.clone()).or_default();
            view.last_error = Some(error.to_string());
            view.machines.len()
        };
        let needs_a_person = error.is_unauthorized()
            || error.is_forbidden()
            || matches!(error.kind(), ErrorKind::Tls | ErrorKind::Config)
            || error.is_bad_request();
        let message = format!(
            "MAAS watch: listing machines of {id} failed: {error}; keeping the last view \
             ({stale} machines, now going stale); next try in {delay:?}"
        );
        if needs_a_person {
            log::error!("{message}");
        } else {
            log::warn!("{message}");
        }
    }

    /// The events step of one interval (see `events.rs`).
    fn follow_events(
        &self,
        id: &SourceId,
        state: &mut SourceState,
        level: &EventLevel,
        transit: HashSet<String>,
        listed: &HashSet<String>,
        newcomers: &HashSet<String>,
    ) {
        let mut tracked: HashSet<String> = state
            .tracked
            .iter()
            .filter(|sid| listed.contains(*sid))
            .cloned()
            .collect();
        tracked.extend(transit.iter().cloned());
        state.events.track(&tracked, newcomers);
        if tracked.is_empty() {
            state.tracked = tracked;
            return;
        }
        let label = state.label.clone();
        match state.events.poll(state.reader.as_ref(), id.user(), level) {
            Ok(batches) => {
                // Machines that left transit have had their last look.
                state.tracked = transit;
                count_event_query(&label, "ok");
                for (system_id, events) in batches {
                    let Some(entry) = self.machine_of(id, &system_id) else {
                        continue;
                    };
                    metrics::counter_add(
                        "maas_watch_events_total",
                        "MAAS event log entries the MAAS watch reported.",
                        &[("source", &label)],
                        events.len() as f64,
                    );
                    self.notify(&MachineChange::Events {
                        source: id.clone(),
                        machine: entry.machine,
                        events,
                    });
                }
            }
            Err(error) => {
                state.tracked = tracked;
                count_event_query(&label, "error");
                log::warn!(
                    "MAAS watch: reading the event log of {id}'s machines in transit failed: \
                     {error}; trying again next interval"
                );
            }
        }
    }

    /// The source's machines as the view has them, sorted by system_id.
    fn viewed(&self, id: &SourceId) -> Vec<Arc<Machine>> {
        let views = self.shared.views();
        let Some(view) = views.get(id) else {
            return Vec::new();
        };
        let mut machines: Vec<Arc<Machine>> = view
            .machines
            .values()
            .map(|entry| Arc::clone(&entry.machine))
            .collect();
        machines.sort_unstable_by(|a, b| a.system_id.cmp(&b.system_id));
        machines
    }

    fn machine_of(&self, id: &SourceId, system_id: &str) -> Option<ListedMachine> {
        self.shared
            .views()
            .get(id)?
            .machines
            .get(system_id)
            .cloned()
    }

    /// Calls the handler; a panicking handler is logged and the watch goes
    /// on (in builds that unwind).
    fn notify(&self, change: &MachineChange) {
        let handler = &self.handler;
        if panic::catch_unwind(AssertUnwindSafe(|| handler(change))).is_err() {
            log::error!(
                "MAAS watch: the handler panicked on machine {} of {}",
                change.system_id(),
                change.source()
            );
        }
    }
}

/// Machines per source and the time of each source's last good list.
fn publish_gauges(shared: &Shared) {
    let views = shared.views();
    let mut machines = Vec::new();
    let mut last_success = Vec::new();
    let labels: Vec<(String, &View)> = views.iter().map(|(id, v)| (id.to_string(), v)).collect();
    for (label, view) in &labels {
        let labels = vec![("source", label.as_str())];
        machines.push((labels.clone(), view.machines.len() as f64));
        if let Some(at) = view.last_success {
            last_success.push((labels, unix_seconds(at)));
        }
    }
    metrics::gauge_replace_all(
        "maas_watch_machines",
        "Machines the MAAS user of each MAAS watch source owns, as last listed.",
        &machines,
    );
    metrics::gauge_replace_all(
        "maas_watch_last_success_timestamp_seconds",
        "When the last good MAAS watch list of each source was sent (Unix time).",
        &last_success,
    );
}

fn count_list(label: &str, result: &str) {
    metrics::counter_inc(
        "maas_watch_lists_total",
        "MAAS watch lists by result (ok, error).",
        &[("source", label), ("result", result)],
    );
}

fn count_event_query(label: &str, result: &str) {
    metrics::counter_inc(
        "maas_watch_event_queries_total",
        "MAAS watch event log steps (one or more events/?op=query calls) by result.",
        &[("source", label), ("result", result)],
    );
}

/// An `Instant` as Unix seconds (through the wall clock now).
fn unix_seconds(at: Instant) -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    now - at.elapsed().as_secs_f64()
}

/// Exponential backoff with jitter, as the informers back off (the maas
/// layer cannot use theirs): each delay is the current step plus up to as
/// much again at random, capped at `max`; the step doubles per failure and
/// resets on success.
struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            step: initial,
        }
    }

    fn next_delay(&mut self) -> Duration {
        let mut byte = [0u8; 1];
        let jitter = match getrandom::getrandom(&mut byte) {
            Ok(()) => 1.0 + f64::from(byte[0]) / 255.0,
            Err(_) => 1.0,
        };
        let delay = self.step.mul_f64(jitter).min(self.max);
        self.step = self.step.saturating_mul(2).min(self.max);
        delay
    }

    fn reset(&mut self) {
        self.step = self.initial;
    }
}

#[cfg(test)]
mod tests;
