//! The watch thread against the in-memory MAAS: what it reports, when it
//! lists, how it fails and stops.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::fake::FakeMaas;
use super::*;
use crate::maas::{MachineStatus, PowerState, IDENTITY_KEY};

const EVENTUALLY: Duration = Duration::from_secs(10);

fn source() -> SourceId {
    SourceId::new("http://maas.test/MAAS/api/2.0/", "capmaas")
}

fn machine(id: &str, status: MachineStatus) -> Machine {
    let mut m = Machine {
        system_id: id.into(),
        hostname: format!("host-{id}"),
        status_name: status.name().into(),
        status,
        power_state: PowerState::On,
        owner: Some("capmaas".into()),
        ..Machine::default()
    };
    m.owner_data
        .insert(IDENTITY_KEY.into(), format!("capmaas/ns/{id}/uid"));
    m
}

fn config(interval_ms: u64) -> WatchConfig {
    WatchConfig {
        interval: Duration::from_millis(interval_ms),
        initial_backoff: Duration::from_millis(interval_ms),
        max_backoff: Duration::from_millis(interval_ms * 8),
        events: Some(EventLevel::Info),
    }
}

/// A started watch on one fake source, its reports, and its stop switch.
struct Running {
    watch: MaasWatch,
    reports: Receiver<MachineChange>,
    stop: Sender<()>,
    maas: Arc<FakeMaas>,
}

fn start(config: WatchConfig, maas: FakeMaas) -> Running {
    let (report_tx, reports) = crossbeam_channel::unbounded();
    let (stop, stop_rx) = crossbeam_channel::bounded(1);
    let watch = MaasWatch::spawn(
        config,
        move |change| {
            let _ = report_tx.send(change.clone());
        },
        stop_rx,
    )
    .unwrap();
    let maas = Arc::new(maas);
    let reader: Arc<dyn Reader> = Arc::clone(&maas) as Arc<dyn Reader>;
    watch.handle().set_readers(vec![(source(), reader)]);
    Running {
        watch,
        reports,
        stop,
        maas,
    }
}

impl Running {
    /// Reports until `done` holds for the collected ones.
    fn until(&self, done: impl Fn(&[MachineChange]) -> bool) -> Vec<MachineChange> {
        let deadline = Instant::now() + EVENTUALLY;
        let mut seen = Vec::new();
        while !done(&seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.reports.recv_timeout(left) {
                Ok(change) => seen.push(change),
                Err(_) => panic!("not seen in time; got {:?}", summary(&seen)),
            }
        }
        seen
    }

    /// Waits for `lists` more list calls (whole intervals).
    fn intervals(&self, lists: u32) {
        let target = self.maas.list_calls() + lists;
        let deadline = Instant::now() + EVENTUALLY;
        while self.maas.list_calls() < target {
            assert!(Instant::now() < deadline, "the watch stopped listing");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Let the interval that listed finish its events step and reports.
        std::thread::sleep(Duration::from_millis(30));
    }

    fn drain(&self) -> Vec<MachineChange> {
        self.reports.try_iter().collect()
    }

    fn stop(self) {
        self.stop.send(()).unwrap();
        assert!(
            self.watch.join(Duration::from_secs(1)),
            "stops within a second"
        );
    }
}

/// The kinds of every event reported, in report order.
fn event_kinds(changes: &[MachineChange]) -> Vec<String> {
    changes
        .iter()
        .filter_map(|c| match c {
            MachineChange::Events { events, .. } => Some(events.iter().map(|e| e.kind.clone())),
            _ => None,
        })
        .flatten()
        .collect()
}

fn summary(changes: &[MachineChange]) -> Vec<String> {
    changes
        .iter()
        .map(|c| match c {
            MachineChange::Appeared { machine, .. } => format!("+{}", machine.system_id),
            MachineChange::Changed { new, fields, .. } => {
                format!("~{} {}", new.system_id, fields.join(","))
            }
            MachineChange::Vanished { last, .. } => format!("-{} {}", last.system_id, last.status),
            MachineChange::Events {
                machine, events, ..
            } => format!(
                "e{} {}",
                machine.system_id,
                events
                    .iter()
                    .map(|e| e.kind.as_str())
                    .collect::<Vec<_>>()
                    .join("|")
            ),
        })
        .collect()
}

#[test]
fn first_list_reports_everything_then_exactly_what_changed() {
    let maas = FakeMaas::new("capmaas");
    maas.put(machine("a", MachineStatus::Deployed));
    maas.put(machine("b", MachineStatus::Deployed));
    let mut someone_elses = machine("x", MachineStatus::Deployed);
    someone_elses.owner = Some("admin".into());
    maas.put(someone_elses);
    let run = start(config(40), maas);
    let first = run.until(|seen| seen.len() == 2);
    let mut names = summary(&first);
    names.sort();
    assert_eq!(names, ["+a", "+b"]);
    run.intervals(2);
    assert!(run.drain().is_empty(), "nothing changed, nothing reported");

    run.maas.edit("a", |m| m.power_state = PowerState::Off);
    run.maas.remove("b");
    let changes = run.until(|seen| seen.len() == 2);
    let mut names = summary(&changes);
    names.sort();
    assert_eq!(names, ["-b Deployed", "~a power_state"]);
    // The view shows the change by the time the handler hears it.
    let listed = run.watch.machine(&source(), "a").unwrap();
    assert_eq!(listed.machine.power_state, PowerState::Off);
    assert!(matches!(run.watch.lookup(&source(), "b"), Lookup::NotOwned));
    assert!(matches!(run.watch.lookup(&source(), "x"), Lookup::NotOwned));
    assert!(run.watch.is_fresh(&source()));
    run.stop();
}

#[test]
fn a_failing_list_keeps_the_view_reports_nothing_and_backs_off() {
    let maas = FakeMaas::new("capmaas");
    maas.put(machine("a", MachineStatus::Deployed));
    let mut config = config(20);
    config.initial_backoff = Duration::from_millis(150);
    config.max_backoff = Duration::from_millis(600);
    let run = start(config, maas);
    run.until(|seen| seen.len() == 1);
    run.intervals(1);
    run.maas.fail_lists(4, None);
    run.maas.remove("a");
    let base = run.maas.list_calls();
    // The first failure comes within an interval, the next three after
    // 150, 300 and 600 ms (up to twice that each).
    let deadline = Instant::now() + EVENTUALLY;
    while run.maas.list_calls() < base + 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(2));
    }
    let failing_since = Instant::now();
    while run.maas.list_calls() < base + 4 {
        assert!(Instant::now() < deadline);
        assert!(
            run.reports.try_recv().is_err(),
            "a failing list reports nothing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        failing_since.elapsed() >= Duration::from_millis(1000),
        "backoff grows: {:?}",
        failing_since.elapsed()
    );
    assert!(
        run.watch.machine(&source(), "a").is_some(),
        "the view is kept"
    );
    assert!(!run.watch.is_fresh(&source()), "and stale");
    assert!(matches!(run.watch.lookup(&source(), "a"), Lookup::Unknown));
    let error = run.watch.last_error(&source()).unwrap();
    assert!(error.contains("503"), "{error}");
    // The next good list reports the machine gone and clears the error.
    let changes = run.until(|seen| !seen.is_empty());
    assert_eq!(summary(&changes), ["-a Deployed"]);
    assert!(run.watch.last_error(&source()).is_none());
    assert!(run.watch.is_fresh(&source()));
    run.stop();
}

#[test]
fn retry_after_is_honoured() {
    let maas = FakeMaas::new("capmaas");
    maas.fail_lists(1, Some(Duration::from_millis(800)));
    let run = start(config(20), maas);
    let started = Instant::now();
    run.intervals(2);
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    run.stop();
}

#[test]
fn one_list_per_interval_per_source_whatever_the_machines() {
    let maas = FakeMaas::new("capmaas");
    for i in 0..1000 {
        maas.put(machine(&format!("m{i:04}"), MachineStatus::Deployed));
    }
    let run = start(config(100), maas);
    run.until(|seen| seen.len() == 1000);
    let calls = run.maas.list_calls();
    std::thread::sleep(Duration::from_millis(1050));
    let lists = run.maas.list_calls() - calls;
    // Ten intervals; a busy machine may delay some, never add any.
    assert!((5..=11).contains(&lists), "{lists} lists in ~10 intervals");
    assert_eq!(
        run.maas.event_calls(),
        1,
        "only the starting mark: nothing in transit"
    );
    // The same source set twice is listed once.
    let reader: Arc<dyn Reader> = Arc::clone(&run.maas) as Arc<dyn Reader>;
    run.watch
        .set_readers(vec![(source(), Arc::clone(&reader)), (source(), reader)]);
    assert_eq!(run.watch.sources(), [source()]);
    run.stop();
}

#[test]
fn a_deployment_s_events_are_reported_once_in_order() {
    let maas = FakeMaas::new("capmaas");
    let run = start(config(40), maas);
    run.intervals(1);
    run.maas.allocate("d", "capmaas");
    run.maas.put(machine("d", MachineStatus::Allocated));
    run.maas.event("d", "Deploying", "", "INFO");
    run.maas.event("d", "Powering on", "", "INFO");
    run.until(|seen| event_kinds(seen).len() == 2);
    run.maas.edit("d", |m| m.status = MachineStatus::Deploying);
    run.maas.event("d", "Performing PXE boot", "", "INFO");
    run.maas.event("d", "curtin chatter", "", "DEBUG");
    run.maas.event("d", "Installing OS", "", "INFO");
    let seen = run.until(|seen| event_kinds(seen).len() == 2);
    assert_eq!(event_kinds(&seen), ["Performing PXE boot", "Installing OS"]);
    // Curtin fails: MAAS logs why, then the status changes; the interval
    // that sees the machine leave transit reads the reason.
    run.maas
        .event("d", "Node installation failure", "'curtin' boom", "ERROR");
    run.maas
        .edit("d", |m| m.status = MachineStatus::FailedDeployment);
    let seen = run.until(|seen| event_kinds(seen).len() == 1);
    assert_eq!(event_kinds(&seen), ["Node installation failure"]);
    run.intervals(3);
    let rest = run.drain();
    assert!(
        !rest
            .iter()
            .any(|c| matches!(c, MachineChange::Events { .. })),
        "each event once: {:?}",
        summary(&rest)
    );
    // Out of transit for good: no more event queries.
    let calls = run.maas.event_calls();
    run.intervals(3);
    assert_eq!(run.maas.event_calls(), calls);
    run.stop();
}

#[test]
fn all_events_in_order_through_the_handler() {
    let maas = FakeMaas::new("capmaas");
    let run = start(config(30), maas);
    run.intervals(1);
    run.maas.allocate("d", "capmaas");
    run.maas.put(machine("d", MachineStatus::Deploying));
    let stages = [
        "Deploying",
        "Powering on",
        "Performing PXE boot",
        "Loading ephemeral",
        "Configuring storage",
        "Installing OS",
        "Configuring OS",
        "Rebooting",
        "Deployed",
    ];
    for stage in stages {
        run.maas.event("d", stage, "", "INFO");
        std::thread::sleep(Duration::from_millis(13));
    }
    run.maas.edit("d", |m| m.status = MachineStatus::Deployed);
    let seen = run.until(|seen| event_kinds(seen).len() >= stages.len());
    assert_eq!(event_kinds(&seen), stages);
    run.stop();
}

#[test]
fn a_recorded_answer_is_read_and_not_reported_back() {
    let maas = FakeMaas::new("capmaas");
    let run = start(config(40), maas);
    run.intervals(1);
    // The controller allocated a machine: MAAS's answer is recorded.
    let allocated = machine("new", MachineStatus::Allocated);
    run.maas.put(allocated.clone());
    run.watch.record(&source(), allocated);
    match run.watch.lookup(&source(), "new") {
        Lookup::Owned(listed) => assert_eq!(listed.machine.status, MachineStatus::Allocated),
        other => panic!("{other:?}"),
    }
    run.intervals(2);
    assert!(
        !run.drain()
            .iter()
            .any(|c| matches!(c, MachineChange::Appeared { .. })),
        "the writer knows"
    );
    // Released: MAAS's answer has no owner; the view drops it at once.
    let mut released = machine("new", MachineStatus::Ready);
    released.owner = None;
    run.maas.remove("new");
    run.watch.record(&source(), released);
    assert!(run.watch.machine(&source(), "new").is_none());
    run.intervals(2);
    assert!(run.drain().is_empty());
    run.stop();
}

#[test]
fn sources_come_and_go() {
    let maas = FakeMaas::new("capmaas");
    maas.put(machine("a", MachineStatus::Deployed));
    let run = start(config(30), maas);
    run.until(|seen| seen.len() == 1);
    run.watch.set_readers(vec![]);
    let deadline = Instant::now() + EVENTUALLY;
    while run.watch.machine(&source(), "a").is_some() {
        assert!(Instant::now() < deadline, "a dropped source's view goes");
        std::thread::sleep(Duration::from_millis(5));
    }
    let calls = run.maas.list_calls();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(run.maas.list_calls(), calls, "no longer listed");
    assert!(matches!(run.watch.lookup(&source(), "a"), Lookup::Unknown));
    assert!(
        run.drain().is_empty(),
        "forgetting a source reports nothing"
    );
    run.stop();
}

#[test]
fn stops_within_a_second_with_a_long_interval() {
    let maas = FakeMaas::new("capmaas");
    let run = start(WatchConfig::default(), maas);
    run.intervals(1);
    let asked = Instant::now();
    run.stop();
    assert!(asked.elapsed() < Duration::from_secs(1));
}

/// A stop message that arrives while the thread is busy listing is seen
/// between sources, and the thread does not wait out the interval after.
#[test]
fn a_stop_seen_between_sources_ends_the_thread() {
    let (stop, stop_rx) = crossbeam_channel::bounded(1);
    let (listing_tx, listing) = crossbeam_channel::bounded::<()>(8);
    struct Slow(FakeMaas, Sender<()>);
    impl Reader for Slow {
        fn machines_owned_by(&self, owner: &str) -> Result<Vec<Arc<Machine>>, Error> {
            let _ = self.1.try_send(());
            std::thread::sleep(Duration::from_millis(200));
            self.0.machines_owned_by(owner)
        }
        fn events(&self, query: &EventQuery) -> Result<Vec<Event>, Error> {
            self.0.events(query)
        }
    }
    let watch = MaasWatch::spawn(WatchConfig::default(), |_| {}, stop_rx).unwrap();
    let sources: Vec<(SourceId, Arc<dyn Reader>)> = (0..3)
        .map(|i| {
            let reader: Arc<dyn Reader> =
                Arc::new(Slow(FakeMaas::new("capmaas"), listing_tx.clone()));
            (
                SourceId::new(format!("http://maas-{i}/"), "capmaas"),
                reader,
            )
        })
        .collect();
    watch.set_readers(sources);
    listing.recv_timeout(EVENTUALLY).unwrap();
    stop.send(()).unwrap();
    assert!(
        watch.join(Duration::from_secs(1)),
        "stopped after the list in flight, not after the 15 s interval"
    );
}

#[test]
fn a_panicking_handler_does_not_stop_the_watch() {
    let (stop, stop_rx) = crossbeam_channel::bounded(1);
    let watch = MaasWatch::spawn(config(20), |_| panic!("handler bug"), stop_rx).unwrap();
    let maas = Arc::new(FakeMaas::new("capmaas"));
    maas.put(machine("a", MachineStatus::Deployed));
    watch
        .handle()
        .set_readers(vec![(source(), Arc::clone(&maas) as Arc<dyn Reader>)]);
    let deadline = Instant::now() + EVENTUALLY;
    while maas.list_calls() < 3 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.send(()).unwrap();
    assert!(watch.join(Duration::from_secs(1)));
}

#[test]
fn backoff_grows_to_its_cap_and_resets() {
    let mut backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
    let delays: Vec<Duration> = (0..10).map(|_| backoff.next_delay()).collect();
    assert!(delays[0] >= Duration::from_secs(5) && delays[0] <= Duration::from_secs(10));
    assert!(delays[3] >= Duration::from_secs(40));
    assert!(delays.iter().all(|d| *d <= Duration::from_secs(300)));
    assert_eq!(delays[9], Duration::from_secs(300));
    backoff.reset();
    assert!(backoff.next_delay() <= Duration::from_secs(10));
}
