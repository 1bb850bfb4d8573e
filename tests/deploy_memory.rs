//! Benchmark, not a test (ignored by default; it asserts nothing about the
//! numbers): the manager's resident memory with 1,000 MaasMachines and their
//! 1,000 Machines cached, to size deploy/manager.yaml's requests and limits
//! and to check the design budget (about 15 MiB). Prints the numbers for
//! BENCHMARKS.md.
//!
//! ```sh
//! cargo test --release --test deploy_memory -- --ignored --nocapture
//! CAPMAAS_BENCH_MACHINES=5000 cargo test --release --test deploy_memory -- --ignored --nocapture
//! CAPMAAS_BENCH_BIN=target/x86_64-unknown-linux-musl/release/capmaas cargo test ...  # the static build
//! ```
//!
//! The objects carry the spec and status a running cluster's objects have
//! (conditions, addresses, providerIDs). The Cluster is paused, so every
//! MaasMachine is reconciled once (a Paused condition is written) without
//! MAAS work: the number is the cost of the caches and the idle machinery.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use capmaas::kube::{self, resources};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::story::free_port;

struct Manager(Child);

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_body(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// Sum of a metric family's samples whose labels contain `label`.
fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn machine(ns: &str, i: usize) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": format!("bench-md-0-{i:05}"),
            "namespace": ns,
            "labels": {
                "cluster.x-k8s.io/cluster-name": "bench",
                "cluster.x-k8s.io/deployment-name": "bench-md-0",
                "cluster.x-k8s.io/set-name": "bench-md-0-abcde",
            },
        },
        "spec": {
            "clusterName": "bench",
            "version": "v1.26.4",
            "bootstrap": {"dataSecretName": format!("bench-md-0-{i:05}-bootstrap")},
            "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "MaasMachine",
                "name": format!("bench-md-0-{i:05}"),
            },
            "providerID": format!("maas:///zone-a/sys{i:05}"),
        },
    })
}

fn maas_machine(ns: &str, i: usize, machine_uid: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "MaasMachine",
        "metadata": {
            "name": format!("bench-md-0-{i:05}"),
            "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": "bench"},
            "annotations": {
                "cluster.x-k8s.io/cloned-from-name": "bench-md-0",
                "cluster.x-k8s.io/cloned-from-groupkind": "MaasMachineTemplate.infrastructure.cluster.x-k8s.io",
            },
            "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine",
                "name": format!("bench-md-0-{i:05}"),
                "uid": machine_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
            "finalizers": ["maasmachine.infrastructure.cluster.x-k8s.io"],
        },
        "spec": {
            "image": "u-2204-0-k-1264-0",
            "minCPU": 4,
            "minMemory": 8192,
            "resourcePool": "worker-pool",
            "tags": ["worker"],
            "failureDomain": "zone-a",
            "systemID": format!("sys{i:05}"),
            "providerID": format!("maas:///zone-a/sys{i:05}"),
        },
    })
}

fn maas_machine_status(i: usize) -> Value {
    let t = "2026-11-30T00:00:00Z";
    let condition = |type_: &str| json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": t, "observedGeneration": 1});
    json!({"status": {
        "ready": true,
        "initialization": {"provisioned": true},
        "machineState": "Deployed",
        "machinePowered": true,
        "hostname": format!("worker-{i:05}"),
        "addresses": [
            {"type": "InternalIP", "address": format!("127.20.{}.{}", i / 250, i % 250 + 1)},
            {"type": "Hostname", "address": format!("worker-{i:05}")},
            {"type": "InternalDNS", "address": format!("worker-{i:05}.maas")},
        ],
        "conditions": [condition("Ready"), condition("MachineDeployed")],
    }})
}

/// Runs `f(i)` for i in 0..n on a few threads (the API server is the
/// bottleneck; one connection each).
fn in_parallel(n: usize, f: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i);
            });
        }
    });
}

#[test]
#[ignore = "benchmark: prints memory numbers, run with --ignored --nocapture"]
fn resident_memory_with_machines_cached() {
    let n: usize = std::env::var("CAPMAAS_BENCH_MACHINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let cp = support::control_plane();
    let ns = cp.new_namespace("bench");
    let client =
        kube::Client::new(kube::Config::infer(Some(cp.kubeconfig.as_path())).unwrap()).unwrap();

    let started = Instant::now();
    let cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "bench", "namespace": ns},
        "spec": {"paused": true, "infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": "bench"}},
    });
    client
        .create(&resources::CLUSTERS, Some(&ns), &cluster)
        .unwrap();
    in_parallel(n, |i| {
        let created = client
            .create(&resources::MACHINES, Some(&ns), &machine(&ns, i))
            .unwrap();
        let uid = created["metadata"]["uid"].as_str().unwrap();
        let mm = maas_machine(&ns, i, uid);
        let name = mm["metadata"]["name"].as_str().unwrap().to_string();
        client
            .create(&resources::MAAS_MACHINES, Some(&ns), &mm)
            .unwrap();
        client
            .patch_status_merge(
                &resources::MAAS_MACHINES,
                Some(&ns),
                &name,
                &maas_machine_status(i),
            )
            .unwrap();
    });
    eprintln!(
        "created {n} Machines and {n} MaasMachines in {:?}",
        started.elapsed()
    );

    let sim = MaasSim::start(None);
    let metrics_port = free_port();
    // CAPMAAS_BENCH_BIN: measure another build, e.g. the static musl one.
    let bin = std::env::var("CAPMAAS_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_capmaas").to_string());
    let child = Command::new(&bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
        .arg("--health-probe-bind-address=0")
        .env_remove("KUBECONFIG")
        .env("MAAS_ENDPOINT", &sim.url)
        .env("MAAS_API_KEY", &sim.api_key)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let manager = Manager(child);
    let pid = manager.0.id();

    let started = Instant::now();
    support::eventually(600, "every MaasMachine reconciled", || {
        let text = http_body(metrics_port, "/metrics")?;
        let done = metric_sum(
            &text,
            "controller_runtime_reconcile_total",
            "controller=\"maasmachine\"",
        );
        let depth = metric_sum(&text, "workqueue_depth", "name=\"maasmachine\"");
        (done >= n as f64 && depth == 0.0).then_some(())
    });
    let settle = started.elapsed();
    // Let the last status writes and watch events pass.
    std::thread::sleep(Duration::from_secs(5));
    let (rss, hwm) = memory_kib(pid);
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = cpu.rsplit(')').next().unwrap().split_whitespace().collect();
    // utime + stime, in clock ticks (100 Hz on Linux).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    println!(
        "{bin}\ncapmaas with {n} MaasMachines + {n} Machines cached: VmRSS {:.1} MiB, VmHWM (peak) {:.1} MiB, \
         CPU {:.2} s, all reconciled {settle:?} after start",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        ticks as f64 / 100.0,
    );
    drop(manager);
}
