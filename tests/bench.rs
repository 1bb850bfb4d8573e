//! Benchmarks: measured numbers for BENCHMARKS.md, printed, never asserted.
//!
//!     cargo test --release --test bench -- --ignored --nocapture
//!
//! (`--release` builds the release `capmaas`, the one measured.) Each
//! benchmark runs alone (a lock serialises them) on this binary's real
//! control plane, with maas-sim and `capmaas` as child processes.
//!
//! - `memory_idle_and_with_1000_machines`: VmRSS/VmHWM of capmaas idle, then
//!   with N (default 1,000; `BENCH_MACHINES`) Machines and MaasMachines of a
//!   paused Cluster cached and reconciled.
//! - `story_time_maas_calls_and_idle_writes`: the README story with the real
//!   Cluster API core and the simulator's deploy time at 0 s
//!   (`BENCH_DEPLOY_SECONDS`): time until every machine is Ready, MAAS calls
//!   per machine over its life (the simulator's request counts), and the
//!   Kubernetes writes capmaas makes in a steady period (`BENCH_IDLE_SECONDS`,
//!   default 90, with `--sync-period=30s` so that resyncs happen in it;
//!   `BENCH_SYNC_PERIOD=default` runs capmaas at its own sync period).
//! - `whole_controller_at_scale`: N (`BENCH_MACHINES`, default 100)
//!   MaasMachines created at once (3 control plane, the rest workers, each
//!   with what Cluster API creates for it), capmaas at its default flags and
//!   the simulator 50 ms away (`BENCH_MAAS_LATENCY_MS`): time to all Ready,
//!   MAAS calls per machine from create to Ready and over deletion, calls
//!   per minute while idle, power-off → power-on reaction, RSS and CPU.

mod support;

use capmaas::maas::MaasApi;
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use capmaas::kube::{resources, ListParams};
use capmaas::maas::{MachineFilter, MachineStatus};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::story::{
    self, capmaas_bin, metric_sum, Capmaas, LabOptions, Snapshot, StoryLab, CLUSTER,
};

/// One benchmark at a time: they share 2 cores and one control plane.
static SERIAL: Mutex<()> = Mutex::new(());

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sh(command: &str) -> String {
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The capmaas binary measured: `BENCH_CAPMAAS_BIN` (e.g. the static musl
/// build of deploy/build-static.sh), else this build's.
fn bench_bin() -> std::path::PathBuf {
    std::env::var_os("BENCH_CAPMAAS_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(capmaas_bin)
}

/// What BENCHMARKS.md records about the machine.
fn print_machine() {
    println!("machine: nproc {}", sh("nproc"));
    println!(
        "machine: CPU {}",
        sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'")
    );
    println!("machine: free -h\n{}", sh("free -h"));
    println!(
        "machine: capmaas binary {} ({} test build; {} bytes); MALLOC_ARENA_MAX={}",
        bench_bin().display(),
        if cfg!(debug_assertions) {
            "DEBUG: use --release for numbers"
        } else {
            "release"
        },
        std::fs::metadata(bench_bin()).map(|m| m.len()).unwrap_or(0),
        std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "unset".into())
    );
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Samples that changed between two `/metrics` scrapes, for the report.
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, name: &str) -> f64 {
    metric_sum(after, name, &[]) - metric_sum(before, name, &[])
}

/// capmaas's Kubernetes writes (every method but GET) between two scrapes,
/// by method.
fn kube_writes(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    let mut writes = BTreeMap::new();
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        let label = format!("method=\"{method}\"");
        let n = metric_sum(after, "rest_client_requests_total", &[&label])
            - metric_sum(before, "rest_client_requests_total", &[&label]);
        if n > 0.0 {
            writes.insert(method.to_string(), n);
        }
    }
    writes
}

fn sum_writes(writes: &BTreeMap<String, f64>) -> u64 {
    writes.values().sum::<f64>().round() as u64
}

/// Simulator request counts (cumulative) → per-key difference.
fn calls_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Substrings of capmaas's MAAS operation names that write.
const WRITE_OPERATIONS: [&str; 9] = [
    "allocate",
    "deploy",
    "release",
    "update",
    "create",
    "delete",
    "set_",
    "power_on",
    "power_off",
];

fn is_write_call(key: &str) -> bool {
    !key.starts_with("GET ")
}

fn print_calls(what: &str, calls: &BTreeMap<String, u64>, machines: usize) {
    let total: u64 = calls.values().sum();
    let writes: u64 = calls
        .iter()
        .filter(|(k, _)| is_write_call(k))
        .map(|(_, v)| v)
        .sum();
    println!(
        "MAAS calls {what}: {total} ({writes} writes, {} reads) = {:.1} per machine ({:.1} writes)",
        total - writes,
        total as f64 / machines as f64,
        writes as f64 / machines as f64
    );
    for (k, v) in calls {
        println!("    {v:>5}  {k}");
    }
}

/// capmaas's own MAAS requests (`maas_api_requests_total`) between two
/// scrapes, by operation. Unlike the simulator's counts, these exclude the
/// node helper's and the benchmark's own polling of the simulator.
fn maas_requests(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, u64> {
    let mut by_op = BTreeMap::new();
    for (key, value) in after {
        let Some(labels) = key.strip_prefix("maas_api_requests_total{") else {
            continue;
        };
        let op = labels
            .split("operation=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("?")
            .to_string();
        let n = value - before.get(key).copied().unwrap_or(0.0);
        if n > 0.0 {
            *by_op.entry(op).or_insert(0) += n.round() as u64;
        }
    }
    by_op
}

fn print_requests(what: &str, by_op: &BTreeMap<String, u64>, machines: usize) {
    let total: u64 = by_op.values().sum();
    println!(
        "capmaas MAAS requests {what}: {total} = {:.1} per machine",
        total as f64 / machines as f64
    );
    for (op, n) in by_op {
        println!("    {n:>5}  {op}");
    }
}

/// Mean of a histogram between two scrapes, per `controller` label value.
fn mean_reconcile_ms(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    controller: &str,
) -> Option<(f64, f64)> {
    let label = format!("controller=\"{controller}\"");
    let sum = metric_sum(
        after,
        "controller_runtime_reconcile_time_seconds_sum",
        &[&label],
    ) - metric_sum(
        before,
        "controller_runtime_reconcile_time_seconds_sum",
        &[&label],
    );
    let count = metric_sum(
        after,
        "controller_runtime_reconcile_time_seconds_count",
        &[&label],
    ) - metric_sum(
        before,
        "controller_runtime_reconcile_time_seconds_count",
        &[&label],
    );
    (count > 0.0).then(|| (count, sum / count * 1000.0))
}

#[test]
#[ignore = "benchmark: cargo test --release --test bench -- --ignored --nocapture"]
fn memory_idle_and_with_1000_machines() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    print_machine();
    let machines: usize = env_or("BENCH_MACHINES", 1000);
    let cp = support::control_plane();
    let sim = MaasSim::start(None);
    let dir = support::tempdir("bench-memory").unwrap();
    let mut capmaas = Capmaas::start(
        &bench_bin(),
        &cp.kubeconfig,
        &sim,
        dir.join("capmaas.log"),
        &[],
    );
    capmaas.wait_ready(60);
    std::thread::sleep(Duration::from_secs(5));
    let idle = capmaas.memory();
    println!("memory idle (caches synced, no objects): {idle}");

    // A paused Cluster with N Machines and their MaasMachines (owned, labelled,
    // and annotated paused too): capmaas caches and reconciles them, and
    // leaves MAAS alone.
    let kube = story::kube_client(cp);
    let ns = cp.new_namespace("bench-memory");
    let nsr = Some(ns.as_str());
    kube.create(
        &resources::CLUSTERS,
        nsr,
        &json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": CLUSTER, "namespace": ns},
            "spec": {"paused": true, "infrastructureRef": {"apiGroup": story::INFRA_GROUP, "kind": "MaasCluster", "name": CLUSTER}},
        }),
    )
    .unwrap();
    kube.create(&resources::MAAS_CLUSTERS, nsr, &{
        let mut mc = story::maas_cluster(&ns);
        mc["metadata"]["annotations"] = json!({"cluster.x-k8s.io/paused": ""});
        mc["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        mc
    })
    .unwrap();
    let metrics_before = capmaas.metrics();
    let calls_before = sim.calls();
    let started = Instant::now();
    // Machines first (measured alone), then their MaasMachines.
    let mut uids = Vec::with_capacity(machines);
    for i in 0..machines {
        let name = format!("{CLUSTER}-w-{i:04}");
        let [_, mut m] = story::control_plane_machine(&ns, &name);
        m["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        m["metadata"]["annotations"] = json!({"cluster.x-k8s.io/paused": ""});
        m["spec"]["providerID"] = json!(format!("maas:///zone-a/b{i:05}"));
        let m = kube.create(&resources::MACHINES, nsr, &m).unwrap();
        uids.push(m["metadata"]["uid"].clone());
    }
    println!(
        "created {machines} Machines in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(10));
    let machines_only = capmaas.memory();
    println!("memory with {machines} Machines cached: {machines_only}");
    for (i, uid) in uids.iter().enumerate() {
        let name = format!("{CLUSTER}-w-{i:04}");
        let [mut mm, _] = story::control_plane_machine(&ns, &name);
        mm["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
        mm["metadata"]["annotations"] = json!({"cluster.x-k8s.io/paused": ""});
        mm["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true,
        }]);
        mm["spec"]["systemID"] = json!(format!("b{i:05}"));
        mm["spec"]["providerID"] = json!(format!("maas:///zone-a/b{i:05}"));
        kube.create(&resources::MAAS_MACHINES, nsr, &mm).unwrap();
    }
    println!(
        "created {machines} Machines + {machines} MaasMachines in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // Settled: every MaasMachine reports Paused, and the reconcile counter
    // has stopped moving for 5 s.
    let reconciles = |m: &BTreeMap<String, f64>| {
        metric_sum(
            m,
            "controller_runtime_reconcile_total",
            &["controller=\"maasmachine\""],
        )
    };
    let mut last = (reconciles(&capmaas.metrics()), Instant::now());
    loop {
        capmaas.assert_running();
        let now = reconciles(&capmaas.metrics());
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(5) {
            let paused = kube
                .list(&resources::MAAS_MACHINES, nsr, &ListParams::default())
                .unwrap()
                .items
                .iter()
                .filter(|mm| {
                    mm["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Paused" && c["status"] == "True")
                    })
                })
                .count();
            if paused >= machines {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "only {paused} of {machines} MaasMachines report Paused; log {}",
                capmaas.log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(5));
    let loaded = capmaas.memory();
    // How large each object is, as compact JSON without managedFields (the
    // size of what the informer decodes; it caches the typed fields only).
    for r in [&resources::MACHINES, &resources::MAAS_MACHINES] {
        let items = kube.list(r, nsr, &ListParams::default()).unwrap().items;
        let bytes: usize = items
            .iter()
            .map(|o| {
                let mut o = o.clone();
                if let Some(meta) = o["metadata"].as_object_mut() {
                    meta.remove("managedFields");
                }
                o.to_string().len()
            })
            .sum();
        println!(
            "  {} {}: mean {} bytes of JSON each",
            items.len(),
            r.plural,
            bytes / items.len().max(1)
        );
    }
    println!(
        "  RSS per cached object: Machines {:.1} KiB each, MaasMachines {:.1} KiB each",
        (machines_only.rss_kib as f64 - idle.rss_kib as f64) / machines as f64,
        (loaded.rss_kib as f64 - machines_only.rss_kib as f64) / machines as f64
    );
    let metrics_after = capmaas.metrics();
    let writes = kube_writes(&metrics_before, &metrics_after);
    println!(
        "memory with {machines} Machines + {machines} MaasMachines cached and reconciled: {loaded}"
    );
    println!(
        "  settled {:.1}s after the first create; {} maasmachine reconciles; Kubernetes writes {:?}; MAAS calls {:?}",
        last.1.duration_since(started).as_secs_f64(),
        reconciles(&metrics_after) - reconciles(&metrics_before),
        writes,
        calls_between(&calls_before, &sim.calls())
    );
    println!(
        "RESULT memory: idle VmRSS {} (VmHWM {}); with {machines} Machines VmRSS {}; with {machines}+{machines} objects VmRSS {} (VmHWM {})",
        mib(idle.rss_kib),
        mib(idle.hwm_kib),
        mib(machines_only.rss_kib),
        mib(loaded.rss_kib),
        mib(loaded.hwm_kib)
    );

    // Leave the control plane clean for the next benchmark: stop capmaas,
    // drop any finalizer it added, delete everything.
    drop(capmaas);
    for r in [&resources::MAAS_MACHINES, &resources::MAAS_CLUSTERS] {
        for obj in kube.list(r, nsr, &ListParams::default()).unwrap().items {
            if obj["metadata"]["finalizers"].is_array() {
                let name = obj["metadata"]["name"].as_str().unwrap();
                kube.patch_merge(r, nsr, name, &json!({"metadata": {"finalizers": null}}))
                    .unwrap();
            }
        }
    }
    cp.kubectl(&[
        "delete",
        "maasmachines,machines,maasclusters,clusters",
        "--all",
        "-n",
        &ns,
        "--wait=false",
    ]);
}

/// When the story reached each milestone, from the start of `apply`.
#[derive(Default, Debug)]
struct Milestones {
    first_maas_machine_ready: Option<f64>,
    all_maas_machines_ready: Option<f64>,
}

#[test]
#[ignore = "benchmark: cargo test --release --test bench -- --ignored --nocapture"]
fn story_time_maas_calls_and_idle_writes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    print_machine();
    let deploy_seconds: f64 = env_or("BENCH_DEPLOY_SECONDS", 0.0);
    let idle_seconds: u64 = env_or("BENCH_IDLE_SECONDS", 90);
    let mut options = LabOptions::new(support::tempdir("bench-story").unwrap());
    options.deploy_seconds = deploy_seconds;
    options.release_seconds = 0.0;
    // `BENCH_SYNC_PERIOD=default`: the product's own (10 m), so that the
    // idle window shows what the MAAS watch alone costs.
    let sync_period: String = env_or("BENCH_SYNC_PERIOD", "30s".to_string());
    options.capmaas_args = if sync_period == "default" {
        Vec::new()
    } else {
        vec![format!("--sync-period={sync_period}")]
    };
    options.capmaas_bin = Some(bench_bin());
    let mut lab = StoryLab::start(options);
    let total = story::CP_MACHINES.len() + story::WORKERS;
    std::thread::sleep(Duration::from_secs(2));

    // --- Provisioning.
    let calls_start = lab.sim.calls();
    let metrics_start = lab.capmaas.metrics();
    let started = Instant::now();
    lab.apply_story();
    let mut milestones = Milestones::default();
    let snapshot = lab.wait_all_ready(600, Duration::from_millis(200), |s: &Snapshot| {
        let t = started.elapsed().as_secs_f64();
        if s.ready_count() > 0 && milestones.first_maas_machine_ready.is_none() {
            milestones.first_maas_machine_ready = Some(t);
        }
        if s.ready_count() == total && milestones.all_maas_machines_ready.is_none() {
            milestones.all_maas_machines_ready = Some(t);
        }
    });
    let ready_after = started.elapsed().as_secs_f64();
    let calls_ready = lab.sim.calls();
    let metrics_ready = lab.capmaas.metrics();
    println!("{}", snapshot.table());
    println!(
        "RESULT story: {total} machines (deploy {deploy_seconds}s in the simulator): first MaasMachine ready {:.1}s, all MaasMachines ready {:.1}s, every Machine Running with its Node {ready_after:.1}s after apply; nudges {}",
        milestones.first_maas_machine_ready.unwrap_or(f64::NAN),
        milestones.all_maas_machines_ready.unwrap_or(f64::NAN),
        lab.nudges
    );
    for controller in ["maascluster", "maasmachine"] {
        if let Some((count, mean)) = mean_reconcile_ms(&metrics_start, &metrics_ready, controller) {
            println!("  {controller}: {count} reconciles while provisioning, mean {mean:.1} ms");
        }
    }
    let provisioning_writes = kube_writes(&metrics_start, &metrics_ready);
    println!(
        "  Kubernetes writes by capmaas while provisioning: {} {provisioning_writes:?}",
        sum_writes(&provisioning_writes)
    );
    print_requests(
        "while provisioning",
        &maas_requests(&metrics_start, &metrics_ready),
        total,
    );
    print_calls(
        "while provisioning (simulator, all clients)",
        &calls_between(&calls_start, &calls_ready),
        total,
    );

    // --- Steady state: nothing changes; resyncs every `sync_period`.
    let versions = |lab: &StoryLab| -> BTreeMap<String, String> {
        let mut v = BTreeMap::new();
        for (r, ns) in [
            (&resources::MAAS_MACHINES, Some(lab.ns.as_str())),
            (&resources::MAAS_CLUSTERS, Some(lab.ns.as_str())),
            (&resources::MACHINES, Some(lab.ns.as_str())),
            (&resources::NODES, None),
        ] {
            for o in lab.kube.list(r, ns, &ListParams::default()).unwrap().items {
                v.insert(
                    format!("{}/{}", r.plural, o["metadata"]["name"].as_str().unwrap()),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
            }
        }
        v
    };
    // Let the last status writes of provisioning land first.
    std::thread::sleep(Duration::from_secs(5));
    let calls_idle_start = lab.sim.calls();
    let metrics_idle_start = lab.capmaas.metrics();
    let versions_before = versions(&lab);
    std::thread::sleep(Duration::from_secs(idle_seconds));
    lab.check_processes();
    let versions_after = versions(&lab);
    let metrics_idle_end = lab.capmaas.metrics();
    let calls_idle_end = lab.sim.calls();
    let changed: Vec<&String> = versions_after
        .iter()
        .filter(|(k, v)| versions_before.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    let idle_writes = kube_writes(&metrics_idle_start, &metrics_idle_end);
    let idle_reconciles = delta(
        &metrics_idle_start,
        &metrics_idle_end,
        "controller_runtime_reconcile_total",
    )
    .round() as u64;
    for controller in ["maascluster", "maasmachine"] {
        let label = format!("controller=\"{controller}\"");
        let n = metric_sum(
            &metrics_idle_end,
            "controller_runtime_reconcile_total",
            &[&label],
        ) - metric_sum(
            &metrics_idle_start,
            "controller_runtime_reconcile_total",
            &[&label],
        );
        println!("  idle: {n} {controller} reconciles");
    }
    println!(
        "RESULT idle {idle_seconds}s (--sync-period={sync_period}): {idle_reconciles} reconciles, {} Kubernetes writes by capmaas {idle_writes:?}, {} of {} objects (MaasMachines, MaasCluster, Machines, Nodes) changed resourceVersion {changed:?}",
        sum_writes(&idle_writes),
        changed.len(),
        versions_after.len()
    );
    print_requests(
        &format!("while idle for {idle_seconds}s"),
        &maas_requests(&metrics_idle_start, &metrics_idle_end),
        total,
    );
    print_calls(
        &format!("while idle for {idle_seconds}s (simulator, all clients)"),
        &calls_between(&calls_idle_start, &calls_idle_end),
        total,
    );

    // --- Deletion: the Cluster goes, every machine is released.
    let delete_started = Instant::now();
    lab.cp.kubectl(&[
        "delete",
        "clusters.v1beta2.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &lab.ns,
        "--wait=false",
    ]);
    let maas = lab.sim.client();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        lab.check_processes();
        let cluster_gone = lab
            .kube
            .get(&resources::CLUSTERS, Some(&lab.ns), CLUSTER)
            .is_err_and(|e| e.is_not_found());
        let owned = maas
            .machines(&MachineFilter::default())
            .unwrap()
            .iter()
            .filter(|m| m.owner.is_some() || m.status != MachineStatus::Ready)
            .count();
        if cluster_gone && owned == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Cluster deletion not done after 300s ({owned} machines still owned)\n{}",
            lab.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let calls_end = lab.sim.calls();
    let metrics_end = lab.capmaas.metrics();
    println!(
        "RESULT deletion: Cluster gone and every machine released {:.1}s after delete",
        delete_started.elapsed().as_secs_f64()
    );
    let deletion_writes = kube_writes(&metrics_idle_end, &metrics_end);
    println!(
        "  Kubernetes writes by capmaas while deleting: {} {deletion_writes:?}",
        sum_writes(&deletion_writes)
    );
    print_requests(
        "while deleting",
        &maas_requests(&metrics_idle_end, &metrics_end),
        total,
    );
    print_calls(
        "while deleting (simulator, all clients)",
        &calls_between(&calls_idle_end, &calls_end),
        total,
    );
    let life = maas_requests(&metrics_start, &metrics_end);
    print_requests(
        "over the whole life (provision, idle, delete)",
        &life,
        total,
    );
    let life_total: u64 = life.values().sum();
    let life_writes: u64 = life
        .iter()
        .filter(|(op, _)| WRITE_OPERATIONS.iter().any(|w| op.contains(w)))
        .map(|(_, v)| v)
        .sum();
    // Only capmaas writes to the simulator, so its write counts need no
    // filtering.
    let sim_life = calls_between(&calls_start, &calls_end);
    let sim_writes: u64 = sim_life
        .iter()
        .filter(|(k, _)| is_write_call(k))
        .map(|(_, v)| v)
        .sum();
    println!(
        "RESULT MAAS requests by capmaas per machine over its life: {:.1} ({:.1} writes by operation name; the simulator saw {sim_writes} writes = {:.1} per machine), incl. the MaasCluster's DNS calls",
        life_total as f64 / total as f64,
        life_writes as f64 / total as f64,
        sim_writes as f64 / total as f64,
    );
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the parenthesised name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> f64 { fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    // USER_HZ is 100 on every Linux this runs on.
    (ticks(11) + ticks(12)) / 100.0
}

fn threads(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

/// Control-plane machines among the N of `whole_controller_at_scale`.
const SCALE_CONTROL_PLANE: usize = 3;

/// The story inventory's users, zones, pools and images with `n` Ready
/// machines instead of its own: the first [`SCALE_CONTROL_PLANE`] in
/// `cp-pool`, the rest in `worker-pool`, one address each in 127.20.0.0/16;
/// every MAAS call takes at least `latency_ms`.
fn scale_inventory(n: usize, latency_ms: u64, deploy_seconds: f64, release_seconds: f64) -> Value {
    let mut inventory = support::maas_sim::story_inventory();
    let machines: Vec<Value> = (0..n)
        .map(|i| {
            let (pool, tag) = if i < SCALE_CONTROL_PLANE {
                ("cp-pool", "control-plane")
            } else {
                ("worker-pool", "worker")
            };
            let zone = ["zone-a", "zone-b"][i % 2];
            json!({"hostname": format!("m-{i:04}"), "cpu_count": 8, "memory": 32768,
                   "disks_gb": [120], "zone": zone, "pool": pool,
                   "tags": [tag], "power_type": "ipmi",
                   "ip_addresses": [format!("127.20.{}.{}", i / 200, i % 200 + 10)]})
        })
        .collect();
    inventory["machines"] = json!(machines);
    inventory["subnet"] =
        json!({"cidr": "127.20.0.0/16", "gateway_ip": "127.20.0.1", "name": "lab"});
    inventory["settings"] = json!({
        "deploy_seconds": deploy_seconds, "release_seconds": release_seconds,
        "default_distro_series": "jammy", "latency_ms": latency_ms,
    });
    inventory
}

/// capmaas's MAAS requests between two scrapes, in total.
fn total(by_op: &BTreeMap<String, u64>) -> u64 {
    by_op.values().sum()
}

/// The value at fraction `q` of sorted `values`.
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values[((values.len() - 1) as f64 * q).round() as usize]
}

/// What one phase cost capmaas: MAAS requests, CPU, memory at its end.
struct Phase {
    metrics: BTreeMap<String, f64>,
    cpu: f64,
    at: Instant,
}

impl Phase {
    fn now(capmaas: &Capmaas) -> Phase {
        Phase {
            metrics: capmaas.metrics(),
            cpu: cpu_seconds(capmaas.pid),
            at: Instant::now(),
        }
    }
}

/// Prints a phase's MAAS requests, Kubernetes writes and CPU; returns the
/// MAAS requests by operation.
fn report_phase(
    what: &str,
    from: &Phase,
    to: &Phase,
    capmaas: &Capmaas,
    machines: usize,
) -> BTreeMap<String, u64> {
    let requests = maas_requests(&from.metrics, &to.metrics);
    let seconds = to.at.duration_since(from.at).as_secs_f64();
    let writes = kube_writes(&from.metrics, &to.metrics);
    println!(
        "RESULT {what} ({seconds:.1}s): {} MAAS requests = {:.2} per machine, {:.1} per minute; {} Kubernetes writes {writes:?}; CPU {:.2}s ({:.1} % of one core); {}, threads {}",
        total(&requests),
        total(&requests) as f64 / machines as f64,
        total(&requests) as f64 * 60.0 / seconds,
        sum_writes(&writes),
        to.cpu - from.cpu,
        (to.cpu - from.cpu) * 100.0 / seconds,
        capmaas.memory(),
        threads(capmaas.pid)
    );
    for (op, n) in &requests {
        println!("    {n:>6}  {op}");
    }
    for controller in ["maascluster", "maasmachine"] {
        if let Some((count, mean)) = mean_reconcile_ms(&from.metrics, &to.metrics, controller) {
            println!("    {controller}: {count} reconciles, mean {mean:.1} ms");
        }
    }
    requests
}

/// How many MaasMachines carry an Event of each reason (what `kubectl
/// describe` can show), and the recorder's dropped events if capmaas logs
/// them (`CAPMAAS_LOG=info,capmaas::runtime::events=debug`).
fn report_events(kube: &capmaas::kube::Client, ns: &str, machines: usize, capmaas: &Capmaas) {
    let mut objects_by_reason: BTreeMap<String, std::collections::BTreeSet<String>> =
        BTreeMap::new();
    let events = kube
        .list(&resources::EVENTS, Some(ns), &ListParams::default())
        .unwrap()
        .items;
    for event in &events {
        if event["involvedObject"]["kind"] == "MaasMachine" {
            objects_by_reason
                .entry(event["reason"].as_str().unwrap_or_default().to_string())
                .or_default()
                .insert(
                    event["involvedObject"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
        }
    }
    let dropped = std::fs::read_to_string(&capmaas.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("dropped: too many events waiting"))
        .count();
    println!(
        "RESULT Events after create → Ready: {} in the namespace; MaasMachines (of {machines}) with an Event of each reason: {:?}; events the recorder logged as dropped (debug log only): {dropped}",
        events.len(),
        objects_by_reason
            .iter()
            .map(|(reason, names)| (reason.as_str(), names.len()))
            .collect::<BTreeMap<_, _>>()
    );
}

#[test]
#[ignore = "benchmark: BENCH_MACHINES=1000 cargo test --release --test bench whole_controller -- --ignored --nocapture"]
fn whole_controller_at_scale() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    print_machine();
    let machines: usize = env_or("BENCH_MACHINES", 100);
    let latency_ms: u64 = env_or("BENCH_MAAS_LATENCY_MS", 50);
    let deploy_seconds: f64 = env_or("BENCH_DEPLOY_SECONDS", 30.0);
    let release_seconds: f64 = env_or("BENCH_RELEASE_SECONDS", 5.0);
    let idle_seconds: u64 = env_or("BENCH_IDLE_SECONDS", 120);
    let power_offs: usize = env_or("BENCH_POWER_OFFS", 4);
    assert!(machines > SCALE_CONTROL_PLANE + power_offs);
    println!(
        "whole controller: {machines} MaasMachines ({SCALE_CONTROL_PLANE} control plane), MAAS latency {latency_ms} ms, deploy {deploy_seconds}s, release {release_seconds}s, capmaas at its default flags"
    );

    let cp = support::control_plane();
    let sim = MaasSim::start(Some(&scale_inventory(
        machines,
        latency_ms,
        deploy_seconds,
        release_seconds,
    )));
    let dir = support::tempdir("bench-scale").unwrap();
    let mut capmaas = Capmaas::start(
        &bench_bin(),
        &cp.kubeconfig,
        &sim,
        dir.join("capmaas.log"),
        &[],
    );
    capmaas.wait_ready(60);
    println!(
        "capmaas pid {}, log {}; started: {}, CPU {:.2}s",
        capmaas.pid,
        capmaas.log.display(),
        capmaas.memory(),
        cpu_seconds(capmaas.pid)
    );
    let kube = story::kube_client(cp);
    let ns = cp.new_namespace("bench-scale");
    let nsr = Some(ns.as_str());

    // The Cluster and its MaasCluster, provisioned (its DNS record made) as
    // before any machine exists; then Cluster API marks the Cluster's
    // infrastructure provisioned.
    let cluster = kube
        .create(&resources::CLUSTERS, nsr, &story::cluster(&ns))
        .unwrap();
    let mut maas_cluster = story::maas_cluster(&ns);
    maas_cluster["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": CLUSTER});
    maas_cluster["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": CLUSTER,
        "uid": cluster["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
    }]);
    kube.create(&resources::MAAS_CLUSTERS, nsr, &maas_cluster)
        .unwrap();
    support::eventually(120, "MaasCluster provisioned", || {
        capmaas.assert_running();
        let mc = kube.get(&resources::MAAS_CLUSTERS, nsr, CLUSTER).ok()?;
        (mc["status"]["initialization"]["provisioned"] == true).then_some(())
    });
    kube.patch_status_merge(
        &resources::CLUSTERS,
        nsr,
        CLUSTER,
        &json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(2));

    // --- Create → Ready: per machine, what Cluster API creates (the
    // bootstrap Secret, the Machine, the MaasMachine it owns), as fast as
    // one client writes them.
    let start = Phase::now(&capmaas);
    let calls_start = sim.calls();
    let names: Vec<String> = (0..machines)
        .map(|i| {
            if i < SCALE_CONTROL_PLANE {
                format!("{CLUSTER}-cp-{i}")
            } else {
                format!("{CLUSTER}-w-{i:04}")
            }
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        let control_plane = i < SCALE_CONTROL_PLANE;
        let pool = if control_plane {
            "cp-pool"
        } else {
            "worker-pool"
        };
        kube.create(
            &resources::SECRETS,
            nsr,
            &support::capi::bootstrap_secret(&ns, &story::bootstrap_secret_name(name), CLUSTER),
        )
        .unwrap();
        let machine = kube
            .create(
                &resources::MACHINES,
                nsr,
                &support::objects::machine(&ns, CLUSTER, name, control_plane),
            )
            .unwrap();
        kube.create(
            &resources::MAAS_MACHINES,
            nsr,
            &support::objects::owned_maas_machine(
                &ns,
                CLUSTER,
                name,
                control_plane,
                machine["metadata"]["uid"].as_str().unwrap(),
                json!({"image": story::IMAGE, "minCPU": 4, "minMemory": 8192, "resourcePool": pool}),
            ),
        )
        .unwrap();
    }
    let created = start.at.elapsed().as_secs_f64();
    println!("created {machines} × (Secret, Machine, MaasMachine) in {created:.1}s");
    let mut ready_at: BTreeMap<String, f64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(1800);
    while ready_at.len() < machines {
        capmaas.assert_running();
        let t = start.at.elapsed().as_secs_f64();
        for mm in kube
            .list(&resources::MAAS_MACHINES, nsr, &ListParams::default())
            .unwrap()
            .items
        {
            if mm["status"]["ready"] == true {
                let name = mm["metadata"]["name"].as_str().unwrap().to_string();
                ready_at.entry(name).or_insert(t);
            }
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {machines} MaasMachines Ready after 1800s; log {}",
            ready_at.len(),
            capmaas.log.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let ready = Phase::now(&capmaas);
    let mut times: Vec<f64> = ready_at.values().copied().collect();
    times.sort_by(f64::total_cmp);
    println!(
        "RESULT create → Ready, {machines} machines: all created {created:.1}s; Ready: first {:.1}s, median {:.1}s, 90 % {:.1}s, all {:.1}s after the first create (deploy takes {deploy_seconds}s in the simulator)",
        times[0],
        quantile(&times, 0.5),
        quantile(&times, 0.9),
        times[times.len() - 1]
    );
    let provisioning = report_phase("create → Ready", &start, &ready, &capmaas, machines);
    print_calls(
        "create → Ready (simulator)",
        &calls_between(&calls_start, &sim.calls()),
        machines,
    );

    // --- Idle: everything Ready, nothing changes.
    std::thread::sleep(Duration::from_secs(20));
    report_events(&kube, &ns, machines, &capmaas);
    let idle_start = Phase::now(&capmaas);
    std::thread::sleep(Duration::from_secs(idle_seconds));
    capmaas.assert_running();
    let idle_end = Phase::now(&capmaas);
    report_phase(
        &format!("idle {idle_seconds}s, all Ready"),
        &idle_start,
        &idle_end,
        &capmaas,
        machines,
    );

    // --- Power-off reaction: a Deployed worker powered off behind MAAS's
    // back, timed until capmaas asks MAAS to power it on. Spread over the
    // watch interval by waits of different lengths in between.
    let mut reactions = Vec::new();
    for k in 0..power_offs {
        let name = &names[SCALE_CONTROL_PLANE + k * (machines - SCALE_CONTROL_PLANE) / power_offs];
        let system_id = kube.get(&resources::MAAS_MACHINES, nsr, name).unwrap()["spec"]["systemID"]
            .as_str()
            .unwrap()
            .to_string();
        std::thread::sleep(Duration::from_millis(2000 + 3700 * k as u64 % 15000));
        let before = sim.call_count("POST machines/{id}/ op=power_on");
        let off = Instant::now();
        sim.power_off(&system_id);
        let reaction = support::eventually(120, "the power-on call", || {
            capmaas.assert_running();
            (sim.call_count("POST machines/{id}/ op=power_on") > before)
                .then(|| off.elapsed().as_secs_f64())
        });
        println!("  power-off of {name} ({system_id}) → power-on call {reaction:.1}s");
        reactions.push(reaction);
    }
    let powered = Phase::now(&capmaas);
    reactions.sort_by(f64::total_cmp);
    println!(
        "RESULT power-off → power-on call ({power_offs} machines one after the other): min {:.1}s, median {:.1}s, max {:.1}s",
        reactions[0],
        quantile(&reactions, 0.5),
        reactions[reactions.len() - 1]
    );
    report_phase("power-offs", &idle_end, &powered, &capmaas, machines);

    // --- Deletion: Cluster API deletes every MaasMachine and Machine;
    // done when every MaasMachine is gone and MAAS owns nothing.
    std::thread::sleep(Duration::from_secs(20));
    let delete_start = Phase::now(&capmaas);
    let calls_delete = sim.calls();
    cp.kubectl(&[
        "delete",
        "maasmachines,machines.cluster.x-k8s.io",
        "--all",
        "-n",
        &ns,
        "--wait=false",
    ]);
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        capmaas.assert_running();
        let left = kube
            .list(&resources::MAAS_MACHINES, nsr, &ListParams::default())
            .unwrap()
            .items
            .len();
        let owned = sim.state()["machines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| !m["owner"].is_null() || m["status_name"] != "Ready")
            .count();
        if left == 0 && owned == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} MaasMachines left, {owned} MAAS machines owned after 1800s; log {}",
            capmaas.log.display()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let deleted = Phase::now(&capmaas);
    println!(
        "RESULT deletion: every MaasMachine gone and every MAAS machine Ready again {:.1}s after the delete (release takes {release_seconds}s in the simulator)",
        deleted.at.duration_since(delete_start.at).as_secs_f64()
    );
    let deletion = report_phase("deletion", &delete_start, &deleted, &capmaas, machines);
    print_calls(
        "deletion (simulator)",
        &calls_between(&calls_delete, &sim.calls()),
        machines,
    );
    let mut life = provisioning.clone();
    for (op, n) in &deletion {
        *life.entry(op.clone()).or_insert(0) += n;
    }
    let life_writes: u64 = life
        .iter()
        .filter(|(op, _)| WRITE_OPERATIONS.iter().any(|w| op.contains(w)))
        .map(|(_, v)| v)
        .sum();
    println!(
        "RESULT MAAS requests per machine, create → Ready + deletion (idle and power-offs left out): {:.2} ({:.2} writes); create → Ready {:.2}, deletion {:.2}",
        total(&life) as f64 / machines as f64,
        life_writes as f64 / machines as f64,
        total(&provisioning) as f64 / machines as f64,
        total(&deletion) as f64 / machines as f64,
    );
    println!(
        "RESULT capmaas CPU over the whole run {:.1}s; {}",
        deleted.cpu,
        capmaas.memory()
    );

    // The cluster goes too; the control plane is left clean.
    cp.kubectl(&[
        "delete",
        "maasclusters,clusters.cluster.x-k8s.io",
        "--all",
        "-n",
        &ns,
        "--wait=false",
    ]);
    support::eventually(120, "MaasCluster deleted", || {
        capmaas.assert_running();
        kube.list(&resources::MAAS_CLUSTERS, nsr, &ListParams::default())
            .unwrap()
            .items
            .is_empty()
            .then_some(())
    });
}

/// Node reuse (issue 23 item 2): the README story with its
/// MachineDeployment at 3 workers, `nodeReuse: true` on their template and
/// a scale-in-first rollout (`maxSurge: 0, maxUnavailable: 1`, as the
/// README advises), then a rolling upgrade of the workers (a new Kubernetes
/// version): how long it takes, how many new workers took an old worker's
/// machine back (`status.reusedMachine`), and how the old machines were
/// released (the simulator's record of each release's erase flags).
/// `BENCH_NODE_REUSE=false`: the same rollout without node reuse.
#[test]
#[ignore = "benchmark: cargo test --release --test bench node_reuse -- --ignored --nocapture"]
fn node_reuse_rolling_upgrade_of_3_workers() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    print_machine();
    const WORKERS: usize = 3;
    let dir = support::tempdir("bench-node-reuse").unwrap();
    let mut options = LabOptions::new(dir);
    options.deploy_seconds = env_or("BENCH_DEPLOY_SECONDS", 5.0);
    options.capmaas_bin = Some(bench_bin());
    let mut lab = StoryLab::start(options);
    let mut objects = story::story_objects(lab.cp, &lab.ns);
    for o in &mut objects {
        if o["kind"] == "MaasMachineTemplate" {
            o["spec"]["template"]["spec"]["nodeReuse"] = json!(env_or("BENCH_NODE_REUSE", true));
        }
        if o["kind"] == "MachineDeployment" {
            o["spec"]["replicas"] = json!(WORKERS);
            o["spec"]["rollout"]["strategy"]["rollingUpdate"] =
                json!({"maxSurge": 0, "maxUnavailable": 1});
        }
    }
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    lab.cp
        .kubectl_stdin(&["apply", "--server-side", "-f", "-"], &list.to_string());
    lab.wait_all_ready(600, Duration::from_millis(500), |_| {});
    let selector = format!("cluster.x-k8s.io/deployment-name={}", story::MD);
    let workers = |lab: &StoryLab| -> Vec<Value> {
        let params = ListParams {
            label_selector: Some(selector.clone()),
            ..ListParams::default()
        };
        lab.kube
            .list(&resources::MAAS_MACHINES, Some(&lab.ns), &params)
            .unwrap()
            .items
    };
    let old: BTreeMap<String, String> = workers(&lab)
        .iter()
        .map(|mm| {
            (
                mm["metadata"]["name"].as_str().unwrap().to_string(),
                mm["spec"]["systemID"].as_str().unwrap().to_string(),
            )
        })
        .collect();

    let started = Instant::now();
    lab.cp.kubectl(&[
        "patch",
        "machinedeployment",
        story::MD,
        "-n",
        &lab.ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"version":"v1.27.3"}}}}"#,
    ]);
    let new = loop {
        lab.check_processes();
        let now = workers(&lab);
        let replaced = now.len() == WORKERS
            && now.iter().all(|mm| {
                !old.contains_key(mm["metadata"]["name"].as_str().unwrap_or_default())
                    && mm["status"]["ready"] == true
            });
        if replaced && lab.snapshot().is_ok_and(|s| s.all_ready()) {
            break now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "rollout not done\n{}",
            lab.diagnostics()
        );
        lab.nudge_machines();
        std::thread::sleep(Duration::from_millis(500));
    };
    let seconds = started.elapsed().as_secs_f64();
    let old_ids: Vec<&String> = old.values().collect();
    let reused = new
        .iter()
        .filter(|mm| {
            mm["status"]["reusedMachine"].as_str().is_some_and(|id| {
                old_ids.iter().any(|o| o.as_str() == id) && mm["spec"]["systemID"] == id
            })
        })
        .count();
    let state = lab.sim.state();
    let erased = state["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| old_ids.iter().any(|id| m["system_id"] == id.as_str()))
        .filter(|m| {
            let r = &m["last_release"];
            r["erase"] == true || r["quick_erase"] == true || r["secure_erase"] == true
        })
        .count();
    println!(
        "RESULT node reuse {}: rolling upgrade of {WORKERS} workers (maxSurge 0, deploy {}s in the simulator) in {seconds:.1}s; {reused}/{WORKERS} new workers on their old machines (status.reusedMachine); releases with erase: {erased}/{WORKERS}",
        env_or("BENCH_NODE_REUSE", true),
        env_or("BENCH_DEPLOY_SECONDS", 5.0)
    );
}
