//! Lease leader election against a real kube-apiserver: two processes
//! contend for one Lease (exactly one leads; after `kill -9` of the leader
//! the other takes over), a clean release hands over at once, and a leader
//! whose Lease is taken away stops at once.
//!
//! The contending processes are this test binary run again with
//! `--ignored --exact lease_contender` and the Lease coordinates in the
//! environment (see [`lease_contender`]).

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capmaas::kube::resources::LEASES;
use capmaas::kube::{Client, Config};
use capmaas::runtime::{LeaderConfig, LeaderElector, LeaderGate, Leadership};
use crossbeam_channel::Receiver;
use serde_json::{json, Value};

/// Bound for "eventually"; never a performance assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);

/// Short timings so the test takes seconds, in client-go's proportions.
fn fast(namespace: &str, name: &str, identity: &str) -> LeaderConfig {
    let mut config = LeaderConfig::new(namespace, name);
    config.identity = identity.to_string();
    config.lease_duration = Duration::from_secs(6);
    config.renew_deadline = Duration::from_secs(4);
    config.retry_period = Duration::from_millis(500);
    config
}

fn client_from(kubeconfig: &std::path::Path) -> Client {
    Client::new(Config::infer(Some(kubeconfig)).unwrap()).unwrap()
}

fn admin() -> Client {
    client_from(&support::control_plane().kubeconfig)
}

fn lease(client: &Client, ns: &str, name: &str) -> Value {
    client.get(&LEASES, Some(ns), name).unwrap()
}

/// The helper process: contends for the Lease named in the environment,
/// prints `LEADING <identity>` when it leads and `LOST` when it loses, and
/// releases the Lease when its standard input closes. Not a test on its own.
#[test]
#[ignore = "helper process for two_processes_contend_for_one_lease"]
fn lease_contender() {
    let var = |k: &str| std::env::var(k).unwrap();
    let kubeconfig = std::path::PathBuf::from(var("CONTENDER_KUBECONFIG"));
    let config = fast(
        &var("CONTENDER_NAMESPACE"),
        &var("CONTENDER_LEASE"),
        &var("CONTENDER_IDENTITY"),
    );
    let elector =
        LeaderElector::spawn(client_from(&kubeconfig), config, LeaderGate::standby()).unwrap();
    let gate = elector.gate();
    let identity = elector.identity().to_string();
    // Standard input closing (the parent dropping it) means "shut down".
    let (stdin_closed_tx, stdin_closed) = crossbeam_channel::bounded::<()>(1);
    std::thread::spawn(move || {
        let mut sink = String::new();
        while std::io::stdin()
            .read_line(&mut sink)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        let _ = stdin_closed_tx.send(());
    });
    println!("STARTED {identity}");
    let mut announced = false;
    loop {
        if !announced && gate.wait_for_leadership(Duration::from_millis(100)) == Leadership::Leader
        {
            println!("LEADING {identity}");
            announced = true;
        }
        if elector.lost().try_recv().is_ok() {
            println!("LOST {identity}");
            return;
        }
        if stdin_closed.try_recv().is_ok() {
            elector.release();
            println!("RELEASED {identity}");
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running contender and the lines it prints.
struct Contender {
    identity: String,
    child: Child,
    lines: Receiver<String>,
}

impl Contender {
    fn start(ns: &str, lease: &str, identity: &str) -> Contender {
        let cp = support::control_plane();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "lease_contender", "--nocapture"])
            .env("CONTENDER_KUBECONFIG", &cp.kubeconfig)
            .env("CONTENDER_NAMESPACE", ns)
            .env("CONTENDER_LEASE", lease)
            .env("CONTENDER_IDENTITY", identity)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Contender {
            identity: identity.to_string(),
            child,
            lines,
        }
    }

    /// Waits for a line starting with `word` from this contender.
    fn expect(&self, word: &str) {
        let deadline = Instant::now() + EVENTUALLY;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("{} never printed {word}", self.identity));
            if line.starts_with(word) {
                return;
            }
        }
    }

    /// Whether a line starting with `word` came within `wait`.
    fn printed_within(&self, word: &str, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if line.starts_with(word) {
                return true;
            }
        }
        false
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn two_processes_contend_for_one_lease() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-lease");
    let lease_name = "contended";

    let mut first = Contender::start(&ns, lease_name, "first");
    first.expect("LEADING");
    let second = Contender::start(&ns, lease_name, "second");
    second.expect("STARTED");

    // The second keeps trying for several lease durations without success.
    assert!(
        !second.printed_within("LEADING", Duration::from_secs(15)),
        "two leaders at once"
    );
    let held = lease(&client, &ns, lease_name);
    assert_eq!(held["spec"]["holderIdentity"], "first");
    assert_eq!(held["spec"]["leaseDurationSeconds"], 6);
    let transitions = held["spec"]["leaseTransitions"].as_i64().unwrap_or(0);

    // kill -9: the leader cannot release; the standby waits out the lease
    // (measured on its own clock since it last saw the record change).
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    let killed_at = Instant::now();
    second.expect("LEADING");
    let took = killed_at.elapsed();
    // A correctness bound, not a speed one: the takeover must come from the
    // lease expiring (6 s) plus retries, not from anything slower.
    assert!(took < Duration::from_secs(6 + 20), "takeover took {took:?}");
    let taken = lease(&client, &ns, lease_name);
    assert_eq!(taken["spec"]["holderIdentity"], "second");
    assert_eq!(
        taken["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
        transitions + 1
    );
}

#[test]
fn release_on_shutdown_hands_over_at_once() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-release");
    let lease_name = "released";

    let mut leader = Contender::start(&ns, lease_name, "leaving");
    leader.expect("LEADING");
    // Give it a lease duration far longer than the wait below: only the
    // release can explain a quick handover.
    let mut config = fast(&ns, lease_name, "successor");
    config.lease_duration = Duration::from_secs(300);
    config.renew_deadline = Duration::from_secs(200);
    // Closing stdin asks the helper for a clean shutdown.
    drop(leader.child.stdin.take());
    leader.expect("RELEASED");
    assert!(leader.child.wait().unwrap().success());
    let released = lease(&client, &ns, lease_name);
    assert_eq!(released["spec"]["holderIdentity"], "");
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1);

    let successor = LeaderElector::spawn(admin(), config, LeaderGate::standby()).unwrap();
    assert_eq!(
        successor.gate().wait_for_leadership(EVENTUALLY),
        Leadership::Leader
    );
    assert_eq!(
        lease(&client, &ns, lease_name)["spec"]["holderIdentity"],
        "successor"
    );
    successor.release();
}

#[test]
fn a_leader_whose_lease_is_taken_stops_at_once() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-lost");
    let lease_name = "stolen";
    let elector = LeaderElector::spawn(
        admin(),
        fast(&ns, lease_name, "victim"),
        LeaderGate::standby(),
    )
    .unwrap();
    let gate = elector.gate();
    assert_eq!(gate.wait_for_leadership(EVENTUALLY), Leadership::Leader);

    // Someone else writes themselves in (as a partitioned-away leader would
    // find on its return).
    let mut stolen = lease(&client, &ns, lease_name);
    stolen["spec"]["holderIdentity"] = json!("intruder");
    stolen["spec"]["leaseDurationSeconds"] = json!(3600);
    client
        .replace(&LEASES, Some(&ns), lease_name, &stolen)
        .unwrap();

    elector
        .lost()
        .recv_timeout(EVENTUALLY)
        .expect("loss is signalled");
    assert_eq!(gate.leadership(), Leadership::Lost);
    assert!(!elector.is_leader());
    // Losing never writes: the intruder keeps the Lease, even after release.
    elector.release();
    assert_eq!(
        lease(&client, &ns, lease_name)["spec"]["holderIdentity"],
        "intruder"
    );
}

#[test]
fn a_leader_recreates_a_deleted_lease_and_keeps_leading() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-recreate");
    let lease_name = "deleted";
    let elector = LeaderElector::spawn(
        admin(),
        fast(&ns, lease_name, "keeper"),
        LeaderGate::standby(),
    )
    .unwrap();
    assert_eq!(
        elector.gate().wait_for_leadership(EVENTUALLY),
        Leadership::Leader
    );
    let before = lease(&client, &ns, lease_name);
    client.delete(&LEASES, Some(&ns), lease_name, None).unwrap();
    let recreated = support::eventually(60, "the Lease to be recreated", || {
        client.get(&LEASES, Some(&ns), lease_name).ok()
    });
    assert_ne!(recreated["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(recreated["spec"]["holderIdentity"], "keeper");
    assert!(elector.is_leader());
    assert!(elector.lost().try_recv().is_err(), "no loss reported");
    elector.release();
}
