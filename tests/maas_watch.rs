//! The MAAS watch against the simulator: out-of-band changes reported by
//! the next list, a deployment's event log mirrored once each in order, a
//! failing MAAS that changes nothing, and the cost: one list per interval
//! per MAAS user, whatever the number of machines.

mod support;

use capmaas::maas::MaasApi;
use std::time::{Duration, Instant};

use capmaas::maas::watch::{Lookup, MaasWatch, MachineChange, SourceId, WatchConfig};
use capmaas::maas::{
    AllocateRequest, Client, DeployRequest, EventLevel, EventQuery, Machine, MachineStatus,
    PowerState, IDENTITY_KEY,
};
use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;

const EVENTUALLY: Duration = Duration::from_secs(30);
const LISTS: &str = "GET machines/";
const EVENT_QUERIES: &str = "GET events/ op=query";

struct Watching {
    watch: MaasWatch,
    reports: Receiver<MachineChange>,
    stop: Sender<()>,
    source: SourceId,
}

/// A watch on the simulator's admin user.
fn watch(sim: &MaasSim, config: WatchConfig) -> Watching {
    let client = sim.client();
    let source = SourceId::of(&client, "admin");
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
    watch.set_sources(vec![(source.clone(), client)]);
    Watching {
        watch,
        reports,
        stop,
        source,
    }
}

fn config(interval: Duration) -> WatchConfig {
    WatchConfig::default().interval(interval)
}

impl Watching {
    /// The first report that satisfies `wanted`; the others on the way are
    /// returned too, in order.
    fn wait_for(
        &self,
        wanted: impl Fn(&MachineChange) -> bool,
    ) -> (MachineChange, Vec<MachineChange>) {
        let deadline = Instant::now() + EVENTUALLY;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.reports.recv_timeout(left) {
                Ok(change) if wanted(&change) => return (change, before),
                Ok(change) => before.push(change),
                Err(_) => panic!("not reported in time; got {:?}", summary(&before)),
            }
        }
    }

    /// Every report for `duration`.
    fn collect(&self, duration: Duration) -> Vec<MachineChange> {
        let deadline = Instant::now() + duration;
        let mut seen = Vec::new();
        while let Ok(change) = self
            .reports
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            seen.push(change);
        }
        seen
    }

    fn stop(self) {
        self.stop.send(()).unwrap();
        assert!(self.watch.join(Duration::from_secs(2)), "the watch stops");
    }
}

fn summary(changes: &[MachineChange]) -> Vec<String> {
    changes
        .iter()
        .map(|c| match c {
            MachineChange::Appeared { machine, .. } => {
                format!("+{} {}", machine.hostname, machine.status)
            }
            MachineChange::Changed { new, fields, .. } => {
                format!("~{} {} ({})", new.hostname, fields.join(","), new.status)
            }
            MachineChange::Vanished { last, .. } => format!("-{} {}", last.hostname, last.status),
            MachineChange::Events {
                machine, events, ..
            } => format!("e{} x{}", machine.hostname, events.len()),
        })
        .collect()
}

fn is_change_of(change: &MachineChange, system_id: &str) -> bool {
    !matches!(change, MachineChange::Events { .. }) && change.system_id() == system_id
}

/// Allocates a machine of `pool` as capmaas does (identity as agent_name
/// and owner data) and deploys it.
fn deploy_ours(client: &Client, pool: &str, name: &str) -> Machine {
    let identity = format!("capmaas/watch-test/{name}/uid-{name}");
    let machine = client
        .allocate(&AllocateRequest {
            pool: Some(pool.into()),
            agent_name: Some(identity.clone()),
            ..AllocateRequest::default()
        })
        .unwrap();
    client
        .set_owner_data(&machine.system_id, &[(IDENTITY_KEY, Some(&identity))])
        .unwrap();
    client
        .deploy(&machine.system_id, &DeployRequest::default())
        .unwrap()
}

fn wait_until_deployed(client: &Client, system_id: &str) {
    let deadline = Instant::now() + EVENTUALLY;
    while client.machine(system_id).unwrap().status != MachineStatus::Deployed {
        assert!(
            Instant::now() < deadline,
            "{system_id} not deployed in time"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lists the simulator served since `before`, a `/_sim/calls` count.
fn lists_since(sim: &MaasSim, before: u64) -> u64 {
    sim.call_count(LISTS) - before
}

/// Power-off, release and Broken behind capmaas's back, and a failed
/// deployment: each is reported by the first list after it (one more when
/// a list was already on its way as the change happened), and nothing else
/// is reported.
#[test]
fn out_of_band_changes_are_reported_by_the_next_list() {
    let sim = MaasSim::start_with_args(
        None,
        &["--deploy-seconds", "0.2", "--release-seconds", "0.1"],
    );
    let client = sim.client();
    let powered = deploy_ours(&client, "cp-pool", "powered");
    let released = deploy_ours(&client, "cp-pool", "released");
    let broken = deploy_ours(&client, "cp-pool", "broken");
    let untouched = deploy_ours(&client, "cp-pool", "untouched");
    for m in [&powered, &released, &broken, &untouched] {
        wait_until_deployed(&client, &m.system_id);
    }
    let w = watch(&sim, config(Duration::from_secs(2)));
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (appeared, _) = w.wait_for(|c| matches!(c, MachineChange::Appeared { .. }));
        assert_eq!(appeared.machine().status, MachineStatus::Deployed);
        seen.push(appeared.system_id().to_owned());
    }

    let before = sim.call_count(LISTS);
    sim.power_off(&powered.system_id);
    let (change, others) = w.wait_for(|c| is_change_of(c, &powered.system_id));
    let MachineChange::Changed { fields, new, .. } = &change else {
        panic!("{:?}", summary(&[change]));
    };
    assert_eq!(fields, &["power_state"]);
    assert_eq!(new.power_state, PowerState::Off);
    assert!(
        lists_since(&sim, before) <= 2,
        "{}",
        lists_since(&sim, before)
    );
    assert!(others.is_empty(), "{:?}", summary(&others));

    let before = sim.call_count(LISTS);
    sim.release_out_of_band(&released.system_id, json!({"comment": "maintenance"}));
    let (change, others) = w.wait_for(|c| is_change_of(c, &released.system_id));
    let MachineChange::Vanished { last, .. } = &change else {
        panic!("{:?}", summary(&[change]));
    };
    assert_eq!(last.status, MachineStatus::Deployed, "its last known state");
    assert!(lists_since(&sim, before) <= 2);
    assert!(others.is_empty(), "{:?}", summary(&others));

    // MAAS releases a machine it marks Broken: it leaves the owner's list.
    let before = sim.call_count(LISTS);
    sim.mark_broken(&broken.system_id);
    let (change, _) = w.wait_for(|c| is_change_of(c, &broken.system_id));
    assert!(
        matches!(change, MachineChange::Vanished { .. }),
        "{:?}",
        summary(&[change])
    );
    assert!(lists_since(&sim, before) <= 2);
    assert_eq!(
        client.machine(&broken.system_id).unwrap().status,
        MachineStatus::Broken,
        "what the controller reads once"
    );

    sim.set_timings(30.0, 0.1);
    let failing = deploy_ours(&client, "worker-pool", "failing");
    w.wait_for(|c| {
        is_change_of(c, &failing.system_id) && c.machine().status == MachineStatus::Deploying
    });
    let before = sim.call_count(LISTS);
    sim.fail_deployment_because(&failing.system_id, "no disk matches the storage layout");
    let (change, others) = w.wait_for(|c| is_change_of(c, &failing.system_id));
    let MachineChange::Changed { fields, new, .. } = &change else {
        panic!("{:?}", summary(&[change]));
    };
    assert!(fields.contains(&"status"), "{fields:?}");
    assert_eq!(new.status, MachineStatus::FailedDeployment);
    assert!(lists_since(&sim, before) <= 2);
    // MAAS's own reason comes as an event: in the interval that sees the
    // machine fail, or already in the one before when the events query
    // runs after the failure and before the next list.
    let is_failure = |c: &MachineChange| {
        matches!(c, MachineChange::Events { events, .. }
            if c.system_id() == failing.system_id
                && events.iter().any(|e| e.kind == "Node installation failure"))
    };
    let reported = match others.iter().find(|c| is_failure(c)) {
        Some(early) => early.clone(),
        None => w.wait_for(is_failure).0,
    };
    let MachineChange::Events { events, .. } = reported else {
        unreachable!()
    };
    let failure = events
        .iter()
        .find(|e| e.kind == "Node installation failure")
        .unwrap();
    assert!(failure.level.is_problem());
    assert!(
        failure
            .message()
            .contains("no disk matches the storage layout"),
        "{}",
        failure.message()
    );
    let everything = [others, w.collect(Duration::from_millis(500))].concat();
    assert!(
        !everything
            .iter()
            .any(|c| c.system_id() == untouched.system_id),
        "the untouched machine is never reported: {:?}",
        summary(&everything)
    );
    assert!(matches!(
        w.watch.lookup(&w.source, &untouched.system_id),
        Lookup::Owned(_)
    ));
    assert!(matches!(
        w.watch.lookup(&w.source, &released.system_id),
        Lookup::NotOwned
    ));
    w.stop();
}

/// Every INFO-or-above event MAAS logs for a deployment after the machine
/// was allocated, reported once each, in MAAS's order.
#[test]
fn a_deployment_s_events_are_reported_once_each_in_order() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "4"]);
    let client = sim.client();
    let w = watch(&sim, config(Duration::from_millis(500)));
    let deadline = Instant::now() + EVENTUALLY;
    while !w.watch.is_fresh(&w.source) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let machine = deploy_ours(&client, "cp-pool", "deploying");
    let (_, before) = w.wait_for(|c| {
        is_change_of(c, &machine.system_id) && c.machine().status == MachineStatus::Deployed
    });
    let after = w.collect(Duration::from_millis(1500));
    let reported: Vec<(i64, String)> = [before, after]
        .concat()
        .into_iter()
        .filter_map(|c| match c {
            MachineChange::Events {
                events, machine: m, ..
            } => {
                assert_eq!(m.system_id, machine.system_id);
                Some(events)
            }
            _ => None,
        })
        .flatten()
        .map(|e| (e.id, e.kind))
        .collect();

    // MAAS's log of that machine since its allocation to us, oldest first.
    let allocation = client
        .events(&EventQuery {
            system_ids: vec![machine.system_id.clone()],
            level: Some(EventLevel::Debug),
            limit: Some(1000),
            ..EventQuery::default()
        })
        .unwrap()
        .into_iter()
        .find(|e| e.description.ends_with("(to admin)"))
        .unwrap()
        .id;
    let mut logged: Vec<(i64, String)> = client
        .events(&EventQuery {
            system_ids: vec![machine.system_id.clone()],
            after: Some(allocation),
            level: Some(EventLevel::Info),
            limit: Some(1000),
        })
        .unwrap()
        .into_iter()
        .map(|e| (e.id, e.kind))
        .collect();
    logged.reverse();
    assert_eq!(reported, logged);
    let kinds: Vec<&str> = reported.iter().map(|(_, k)| k.as_str()).collect();
    for stage in [
        "Deploying",
        "Performing PXE boot",
        "Installing OS",
        "Rebooting",
        "Deployed",
    ] {
        assert!(kinds.contains(&stage), "{stage} missing from {kinds:?}");
    }
    // Deployed: out of transit, no more event queries.
    let queries = sim.call_count(EVENT_QUERIES);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(sim.call_count(EVENT_QUERIES), queries);
    w.stop();
}

/// 503s with `Retry-After`, then dropped connections: the view is kept
/// (and goes stale), nothing is reported, least of all gone, and the
/// watch waits; once MAAS answers again, exactly what changed meanwhile is
/// reported.
#[test]
fn a_failing_maas_keeps_the_view_and_reports_nothing_gone() {
    let sim = MaasSim::start_with_args(
        None,
        &["--deploy-seconds", "0.1", "--release-seconds", "0.1"],
    );
    let client = sim.client();
    let kept = deploy_ours(&client, "cp-pool", "kept");
    let released = deploy_ours(&client, "cp-pool", "released");
    for m in [&kept, &released] {
        wait_until_deployed(&client, &m.system_id);
    }
    let mut config = config(Duration::from_millis(300));
    config.initial_backoff = Duration::from_millis(300);
    config.max_backoff = Duration::from_millis(1200);
    let w = watch(&sim, config);
    w.wait_for(|c| matches!(c, MachineChange::Appeared { .. }));
    w.wait_for(|c| matches!(c, MachineChange::Appeared { .. }));

    sim.set_fault(
        json!({"method": "GET", "endpoint": "machines/", "status": 503, "retry_after": 1}),
    );
    sim.release_out_of_band(&released.system_id, json!({}));
    let before = sim.call_count(LISTS);
    let during = w.collect(Duration::from_millis(2500));
    assert!(during.is_empty(), "{:?}", summary(&during));
    let lists = lists_since(&sim, before);
    assert!(
        (1..=4).contains(&lists),
        "{lists} lists in 2.5 s: Retry-After 1 s is honoured"
    );
    assert!(!w.watch.is_fresh(&w.source));
    for m in [&kept, &released] {
        assert!(matches!(
            w.watch.lookup(&w.source, &m.system_id),
            Lookup::Unknown
        ));
        assert!(
            w.watch.machine(&w.source, &m.system_id).is_some(),
            "the view is kept"
        );
    }
    let error = w.watch.last_error(&w.source).unwrap();
    assert!(error.contains("503"), "{error}");

    sim.clear_faults();
    sim.set_fault(json!({"method": "GET", "endpoint": "machines/", "drop": true}));
    let during = w.collect(Duration::from_millis(2000));
    assert!(during.is_empty(), "{:?}", summary(&during));
    let error = w.watch.last_error(&w.source).unwrap();
    assert!(!error.contains("503"), "a new error: {error}");

    sim.clear_faults();
    let (change, others) = w.wait_for(|_| true);
    assert!(others.is_empty());
    assert!(
        matches!(&change, MachineChange::Vanished { last, .. } if last.system_id == released.system_id),
        "{:?}",
        summary(&[change])
    );
    let rest = w.collect(Duration::from_millis(800));
    assert!(rest.is_empty(), "{:?}", summary(&rest));
    assert!(w.watch.is_fresh(&w.source));
    assert!(w.watch.last_error(&w.source).is_none());
    w.stop();
}

/// An inventory of `n` machines Deployed for the admin.
fn deployed_inventory(n: usize) -> Value {
    let machines: Vec<Value> = (0..n)
        .map(|i| {
            json!({"hostname": format!("m-{i:04}"), "pool": "p", "zone": "z",
                   "status": "Deployed", "owner": "admin", "power_state": "on",
                   "ip_addresses": [format!("127.20.{}.{}", i / 250, i % 250 + 1)]})
        })
        .collect();
    json!({
        "api_keys": [{"key": "SimConsumerKey0001:SimTokenKey0000001:SimTokenSecret000000000000000001",
                      "username": "admin", "is_superuser": true}],
        "zones": [{"name": "z"}],
        "pools": [{"name": "p"}],
        "subnet": {"cidr": "127.20.0.0/16", "gateway_ip": "127.20.0.1"},
        "machines": machines,
    })
}

/// With 1,000 machines: one list per interval, no other call while nothing
/// is in transit, and one events query per interval for all the machines
/// in transit together.
#[test]
fn one_list_per_interval_at_1000_machines() {
    let sim = MaasSim::start_with_args(
        Some(&deployed_inventory(1000)),
        &["--release-seconds", "600"],
    );
    let interval = Duration::from_millis(500);
    let w = watch(&sim, config(interval));
    let mut appeared = 0;
    while appeared < 1000 {
        w.wait_for(|c| matches!(c, MachineChange::Appeared { .. }));
        appeared += 1;
    }
    sim.reset_calls();
    let started = Instant::now();
    let quiet = w.collect(Duration::from_secs(3));
    assert!(quiet.is_empty(), "{:?}", summary(&quiet));
    let calls = sim.calls();
    let lists = calls.get(LISTS).copied().unwrap_or(0);
    let most = (started.elapsed().as_secs_f64() / interval.as_secs_f64()).ceil() as u64 + 1;
    assert!(lists >= 2 && lists <= most, "{lists} lists, at most {most}");
    assert_eq!(calls.len(), 1, "only lists while idle: {calls:?}");

    // Ten machines start releasing (and stay Releasing): one events query
    // per interval for the ten.
    let state = sim.state();
    let ids: Vec<String> = state["machines"].as_array().unwrap()[..10]
        .iter()
        .map(|m| m["system_id"].as_str().unwrap().to_owned())
        .collect();
    for id in &ids {
        sim.release_out_of_band(id, json!({}));
    }
    let mut releasing = 0;
    while releasing < 10 {
        let (change, _) = w.wait_for(|c| matches!(c, MachineChange::Changed { .. }));
        assert_eq!(change.machine().status, MachineStatus::Releasing);
        releasing += 1;
    }
    sim.reset_calls();
    let started = Instant::now();
    let events = w.collect(Duration::from_secs(3));
    let calls = sim.calls();
    let lists = calls.get(LISTS).copied().unwrap_or(0);
    let queries = calls.get(EVENT_QUERIES).copied().unwrap_or(0);
    let most = (started.elapsed().as_secs_f64() / interval.as_secs_f64()).ceil() as u64 + 1;
    assert!(lists >= 2 && lists <= most, "{lists} lists, at most {most}");
    // One query per interval; the count may catch an interval between its
    // list and its query at either end of the window.
    assert!(
        queries.abs_diff(lists) <= 1,
        "{queries} event queries for {lists} lists: {calls:?}"
    );
    assert_eq!(calls.len(), 2, "lists and event queries only: {calls:?}");
    assert!(
        events
            .iter()
            .all(|c| matches!(c, MachineChange::Events { .. })),
        "{:?}",
        summary(&events)
    );
    w.stop();
}

/// Issue 20 item 6: a MAAS that answers 404 to every `events/?op=query`
/// (seen in the field) still has its machines listed: a power-off is
/// reported by the next list, not at the 10-minute resync; the events
/// failures are counted, and the machine list never is.
#[test]
fn a_failing_events_query_never_blinds_the_machine_list() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0.2"]);
    let client = sim.client();
    let powered = deploy_ours(&client, "cp-pool", "blind-powered");
    wait_until_deployed(&client, &powered.system_id);
    sim.set_fault(
        json!({"method": "GET", "endpoint": "events/", "op": "query",
                         "status": 404, "body": "Not Found"}),
    );
    let w = watch(&sim, config(Duration::from_secs(1)));
    let (appeared, _) = w.wait_for(|c| is_change_of(c, &powered.system_id));
    assert!(matches!(appeared, MachineChange::Appeared { .. }));
    assert!(w.watch.is_fresh(&w.source), "the list succeeded");

    sim.power_off(&powered.system_id);
    let (change, _) = w.wait_for(|c| is_change_of(c, &powered.system_id));
    let MachineChange::Changed { new, .. } = &change else {
        panic!("{:?}", summary(&[change]));
    };
    assert_eq!(new.power_state, PowerState::Off);
    assert!(w.watch.is_fresh(&w.source));
    assert_eq!(w.watch.last_error(&w.source), None, "the list never failed");
    assert!(
        sim.call_count(EVENT_QUERIES) >= 2,
        "the events mark is retried"
    );
    // Metrics are process-wide: only this source's lines.
    let label = format!("source=\"{}\"", w.source);
    let metrics: String = capmaas::metrics::render()
        .lines()
        .filter(|l| l.contains(&label))
        .map(|l| format!("{l}\n"))
        .collect();
    let failed_events = metrics
        .lines()
        .any(|l| l.starts_with("maas_watch_event_queries_total") && l.contains("result=\"error\""));
    assert!(failed_events, "the failing part is a metric:\n{metrics}");
    let failed_lists = metrics
        .lines()
        .any(|l| l.starts_with("maas_watch_lists_total") && l.contains("result=\"error\""));
    assert!(!failed_lists, "no list failed:\n{metrics}");

    // Once events answer again, the event log starts from there.
    sim.clear_faults();
    let before = sim.call_count(EVENT_QUERIES);
    let deadline = Instant::now() + EVENTUALLY;
    while sim.call_count(EVENT_QUERIES) == before {
        assert!(Instant::now() < deadline, "the events mark is tried again");
        std::thread::sleep(Duration::from_millis(50));
    }
    w.stop();
}

/// A MAAS that accepts connections and never answers (its listener and
/// the connections it took live until the test process ends).
fn silent_maas() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/MAAS", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.extend(stream.ok());
        }
    });
    url
}

/// Issue 19 item 10 (and the BENCHMARKS figure "Tenant isolation"): a
/// tenant's silent MAAS endpoint, listed next to a healthy one, leaves the
/// healthy source's view fresh. Before the fix the single watch thread sat
/// in the silent source's 30 s list timeouts and the healthy view went
/// stale between them.
///
///     cargo test --test maas_watch a_silent_source -- --nocapture
#[test]
fn a_silent_source_leaves_the_other_sources_view_fresh() {
    let sim = MaasSim::start(None);
    let healthy = sim.client();
    let healthy_source = SourceId::of(&healthy, "admin");
    // The production timeouts (30 s per call), not the simulator's.
    let key = capmaas::maas::ApiKey::parse(&sim.key_of("admin")).unwrap();
    let silent = Client::new(capmaas::maas::ClientConfig::new(silent_maas(), key)).unwrap();
    let silent_source = SourceId::of(&silent, "tenant");
    let (stop, stop_rx) = crossbeam_channel::bounded(1);
    let watch = MaasWatch::spawn(config(Duration::from_secs(1)), |_| {}, stop_rx).unwrap();
    // The silent source first, as a tenant's new cluster would be.
    watch.set_sources(vec![
        (silent_source.clone(), silent),
        (healthy_source.clone(), healthy),
    ]);
    let started = Instant::now();
    while !watch.is_fresh(&healthy_source) {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the healthy source is listed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_list = started.elapsed();
    // 90 samples over 18 s: the view is fresh while its last list started
    // less than two intervals (2 s) ago.
    let mut stale = 0;
    for _ in 0..90 {
        std::thread::sleep(Duration::from_millis(200));
        if !watch.is_fresh(&healthy_source) {
            stale += 1;
        }
    }
    println!(
        "healthy source first listed after {:.1}s, then stale in {stale} of 90 samples \
         next to a silent source",
        first_list.as_secs_f64()
    );
    assert!(
        !watch.is_fresh(&silent_source),
        "the silent source never answered"
    );
    // Generous: a loaded machine may delay a list now and then, but the
    // healthy source is never held behind the silent one's 30 s timeouts.
    assert!(stale < 20, "stale in {stale} of 90 samples");
    assert!(
        first_list < Duration::from_secs(10),
        "first listed after {first_list:?}"
    );
    stop.send(()).unwrap();
    assert!(watch.join(Duration::from_secs(2)));
}
