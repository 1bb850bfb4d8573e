//! The README story, as objects and as a running lab: one code path for the
//! local lab (tests/lab.rs), the benchmarks (tests/bench.rs) and, later, the
//! conformance test.
//!
//! The story: cluster `prod-cluster` (no controlPlaneRef: a machine-based
//! control plane), a MaasCluster with dnsDomain `k8s.maas`, three
//! control-plane Machines with their MaasMachines (custom image, pool
//! `cp-pool`, tag `control-plane`) and a MachineDeployment `prod-cluster-md-0`
//! of five workers from a MaasMachineTemplate (pool `worker-pool`, tag
//! `worker`). Every Machine names a pre-made bootstrap Secret; the
//! `<cluster>-kubeconfig` Secret points the "workload cluster" at the same
//! control plane, where the node helper plays kubelet.
//!
//! ```ignore
//! let mut lab = StoryLab::start(LabOptions::new(dir));
//! lab.apply_story();
//! lab.wait_all_ready(600, |snapshot| println!("{}", snapshot.table()));
//! ```
//!
//! [`StoryLab`] starts, in order: the control plane (with our CRDs), the real
//! Cluster API core manager, `maas-sim` with the story inventory, `capmaas`
//! (a child process whose log goes to the lab directory) and the node helper.
//! Everything stops when the `StoryLab` is dropped or the process exits.
#![allow(dead_code)]

use capmaas::maas::MaasApi;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capmaas::kube::{self, resources, ListParams};
use capmaas::maas::{MachineFilter, MachineStatus};
use serde_json::{json, Value};

use super::capi::{self, CapiManager, CAPI_API_VERSION};
use super::maas_sim::MaasSim;
use super::nodes::{MachineView, NodeHelper};
use super::ControlPlane;

pub const CLUSTER: &str = "prod-cluster";
pub const MD: &str = "prod-cluster-md-0";
pub const CP_MACHINES: [&str; 3] = [
    "prod-cluster-cp-0",
    "prod-cluster-cp-1",
    "prod-cluster-cp-2",
];
pub const WORKERS: usize = 5;
/// The custom image of the story inventory (Ubuntu 22.04 + Kubernetes 1.26.4).
pub const IMAGE: &str = "custom/u-2204-0-k-1264-0";
pub const KUBERNETES_VERSION: &str = "v1.26.4";
pub const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const INFRA_API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";

// ---------------------------------------------------------------------------
// The objects a user writes.

fn infra_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": INFRA_GROUP, "kind": kind, "name": name})
}

/// Name of the bootstrap data Secret of a control-plane Machine or of the
/// MachineDeployment's template.
pub fn bootstrap_secret_name(owner: &str) -> String {
    format!("{owner}-bootstrap")
}

pub fn cluster(ns: &str) -> Value {
    json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"infrastructureRef": infra_ref("MaasCluster", CLUSTER)},
    })
}

pub fn maas_cluster(ns: &str) -> Value {
    json!({
        "apiVersion": INFRA_API_VERSION,
        "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"dnsDomain": "k8s.maas"},
    })
}

/// A control-plane MaasMachine and its Machine.
pub fn control_plane_machine(ns: &str, name: &str) -> [Value; 2] {
    let maas_machine = json!({
        "apiVersion": INFRA_API_VERSION,
        "kind": "MaasMachine",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "image": IMAGE,
            "minCPU": 4,
            "minMemory": 8192,
            "resourcePool": "cp-pool",
            "tags": ["control-plane"],
        },
    });
    let machine = json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {CLUSTER_NAME_LABEL: CLUSTER, "cluster.x-k8s.io/control-plane": ""},
        },
        "spec": {
            "clusterName": CLUSTER,
            "version": KUBERNETES_VERSION,
            "bootstrap": {"dataSecretName": bootstrap_secret_name(name)},
            "infrastructureRef": infra_ref("MaasMachine", name),
            "deletion": {"nodeDeletionTimeoutSeconds": 10},
        },
    });
    [maas_machine, machine]
}

pub fn maas_machine_template(ns: &str) -> Value {
    json!({
        "apiVersion": INFRA_API_VERSION,
        "kind": "MaasMachineTemplate",
        "metadata": {"name": MD, "namespace": ns},
        "spec": {"template": {"spec": {
            "image": IMAGE,
            "minCPU": 8,
            "minMemory": 16384,
            "resourcePool": "worker-pool",
            "tags": ["worker"],
        }}},
    })
}

/// Fully specified, so the story does not lean on defaulting by accident.
pub fn machine_deployment(ns: &str, replicas: usize) -> Value {
    let labels = json!({CLUSTER_NAME_LABEL: CLUSTER, DEPLOYMENT_NAME_LABEL: MD});
    json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": MD, "namespace": ns, "labels": {CLUSTER_NAME_LABEL: CLUSTER}},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": CLUSTER,
                    "version": KUBERNETES_VERSION,
                    "bootstrap": {"dataSecretName": bootstrap_secret_name(MD)},
                    "infrastructureRef": infra_ref("MaasMachineTemplate", MD),
                    "deletion": {"nodeDeletionTimeoutSeconds": 10},
                },
            },
        },
    })
}

/// Every object of the story, in the order to apply them: Secrets first
/// (Cluster API retries a missing kubeconfig Secret only every 30 s), then
/// the clusters, the control plane, the workers.
pub fn story_objects(cp: &ControlPlane, ns: &str) -> Vec<Value> {
    let mut objects = vec![capi::kubeconfig_secret(cp, ns, CLUSTER)];
    for owner in CP_MACHINES.iter().copied().chain([MD]) {
        objects.push(capi::bootstrap_secret(
            ns,
            &bootstrap_secret_name(owner),
            CLUSTER,
        ));
    }
    objects.push(maas_cluster(ns));
    objects.push(cluster(ns));
    for name in CP_MACHINES {
        objects.extend(control_plane_machine(ns, name));
    }
    objects.push(maas_machine_template(ns));
    objects.push(machine_deployment(ns, WORKERS));
    objects
}

// ---------------------------------------------------------------------------
// capmaas as a child process.

/// `capmaas` run against the control plane and a simulator; killed on drop
/// (printing its log's tail if the test is panicking).
pub struct Capmaas {
    child: Child,
    pub pid: u32,
    pub log: PathBuf,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
}

/// A loopback port nothing listens on, never one this process handed out
/// before: the kernel gives a port just closed to the next bind, so two
/// calls for one program's two addresses could return the same port (the
/// KCP manager then failed with "address already in use", CI 2026-12-05).
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a free loopback port");
        let port = listener.local_addr().expect("local address").port();
        if handed_out.insert(port) {
            return port;
        }
    }
}

impl Capmaas {
    /// Starts `bin` with `--kubeconfig`, MAAS_ENDPOINT/MAAS_API_KEY of `sim`,
    /// metrics and probes on free loopback ports, DNS attachment without the
    /// API check (see below), and `extra_args`; stdout
    /// and stderr go to `log`. RUST_LOG comes from CAPMAAS_LOG (default info).
    pub fn start(
        bin: &Path,
        kubeconfig: &Path,
        sim: &MaasSim,
        log: PathBuf,
        extra_args: &[String],
    ) -> Capmaas {
        Capmaas::start_with_maas(bin, kubeconfig, &sim.url, &sim.api_key, log, extra_args)
    }

    /// As [`Capmaas::start`], against the MAAS at `url` (e.g. real MAAS,
    /// tests/support/real_maas.rs) with `api_key`.
    pub fn start_with_maas(
        bin: &Path,
        kubeconfig: &Path,
        url: &str,
        api_key: &str,
        log: PathBuf,
        extra_args: &[String],
    ) -> Capmaas {
        let metrics_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let health_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        // The story's machines are the simulator's records: nothing serves
        // at their addresses, so probing their API servers before they join
        // the DNS record would keep all control planes but the first out.
        // The KCP lab, whose machines serve, passes
        // `--dns-attach-without-api-check=false` instead (a flag given twice
        // is refused).
        const DNS_ATTACH: &str = "--dns-attach-without-api-check";
        let default_dns_attach =
            (!extra_args.iter().any(|a| a.starts_with(DNS_ATTACH))).then_some(DNS_ATTACH);
        let child = Command::new(bin)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--metrics-bind-address={metrics_addr}"))
            .arg(format!("--health-probe-bind-address={health_addr}"))
            .args(default_dns_attach)
            .args(extra_args)
            .env_remove("KUBECONFIG")
            .env("MAAS_ENDPOINT", url)
            .env("MAAS_API_KEY", api_key)
            .env(
                "RUST_LOG",
                std::env::var("CAPMAAS_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("cloning the log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));
        Capmaas {
            pid: child.id(),
            child,
            log,
            metrics_addr,
            health_addr,
        }
    }

    /// Panics with the log's tail if capmaas has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "capmaas exited ({status}); log {}:\n{}",
                self.log.display(),
                tail(&self.log, 40)
            );
        }
    }

    /// Waits until `/readyz` answers 200 (caches synced).
    pub fn wait_ready(&mut self, seconds: u64) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            self.assert_running();
            if let Some((200, _)) = http_get(self.health_addr, "/readyz") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "capmaas not ready after {seconds}s; log {}:\n{}",
                self.log.display(),
                tail(&self.log, 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every sample of `/metrics`, keyed `name{labels}` as exposed.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let (status, body) = http_get(self.metrics_addr, "/metrics")
            .unwrap_or_else(|| panic!("GET http://{}/metrics failed", self.metrics_addr));
        assert_eq!(status, 200, "/metrics: {body}");
        parse_metrics(&body)
    }

    /// Resident memory now and its peak, from /proc/PID/status.
    pub fn memory(&self) -> Memory {
        Memory::of(self.pid)
    }
}

impl Drop for Capmaas {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- capmaas log tail ({}) ---\n{}",
                self.log.display(),
                tail(&self.log, 60)
            );
        }
    }
}

/// VmRSS and VmHWM of a process, in KiB.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl Memory {
    pub fn of(pid: u32) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        };
        Memory {
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
        }
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VmRSS {:.1} MiB, VmHWM {:.1} MiB",
            self.rss_kib as f64 / 1024.0,
            self.hwm_kib as f64 / 1024.0
        )
    }
}

/// Prometheus text format → `name{labels}` → value (comments skipped).
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sum of the samples of `name` whose labels contain every one of `labels`
/// (`key="value"` strings).
pub fn metric_sum(metrics: &BTreeMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| {
            let (n, rest) = k.split_once('{').unwrap_or((k.as_str(), ""));
            n == name && labels.iter().all(|l| rest.contains(l))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Minimal HTTP/1.0 GET (probes and metrics are plain HTTP).
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------
// What the story looks like right now.

/// One row per MaasMachine, joined with its Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub state: String,
    pub system_id: String,
    pub provider_id: String,
    pub ready: bool,
    /// The owning Machine's phase (`-` when it has none yet).
    pub machine_phase: String,
    pub node: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub rows: Vec<Row>,
    /// Machines by name → phase (including Machines whose MaasMachine does
    /// not exist yet).
    pub machines: BTreeMap<String, String>,
    /// Machines in phase Running with a nodeRef.
    pub running: usize,
    /// `spec.replicas` of the MachineDeployment (None before it exists).
    pub md_replicas: Option<u64>,
    /// MAAS machines (hostnames) by status name, e.g. "Releasing": empty
    /// when the snapshot was taken without the simulator.
    pub maas: BTreeMap<String, Vec<String>>,
}

impl Snapshot {
    /// Control-plane Machines plus the MachineDeployment's replicas.
    pub fn expected_machines(&self) -> usize {
        CP_MACHINES.len() + self.md_replicas.unwrap_or(WORKERS as u64) as usize
    }

    /// Every expected Machine Running with a Node, every MaasMachine ready,
    /// and nothing more (scale-downs finished).
    pub fn all_ready(&self) -> bool {
        let expected = self.expected_machines();
        self.machines.len() == expected
            && self.running == expected
            && self.rows.len() == expected
            && self.rows.iter().all(|r| r.ready)
    }

    pub fn ready_count(&self) -> usize {
        self.rows.iter().filter(|r| r.ready).count()
    }

    /// A compact table, one line per MaasMachine.
    pub fn table(&self) -> String {
        let header = [
            "MAASMACHINE",
            "STATE",
            "SYSTEM ID",
            "PROVIDER ID",
            "READY",
            "MACHINE",
            "NODE",
        ];
        let mut lines: Vec<[String; 7]> = vec![header.map(str::to_string)];
        for r in &self.rows {
            lines.push([
                r.name.clone(),
                r.state.clone(),
                r.system_id.clone(),
                r.provider_id.clone(),
                r.ready.to_string(),
                r.machine_phase.clone(),
                r.node.clone(),
            ]);
        }
        let mut out = aligned(&lines);
        let mut phases: BTreeMap<&str, usize> = BTreeMap::new();
        for phase in self.machines.values() {
            *phases.entry(phase.as_str()).or_default() += 1;
        }
        let phases: Vec<String> = phases.iter().map(|(p, n)| format!("{n} {p}")).collect();
        out.push_str(&format!(
            "Machines: {} ({}); MaasMachines ready: {}/{}; MachineDeployment {MD} replicas: {}\n",
            self.machines.len(),
            if phases.is_empty() {
                "none".to_string()
            } else {
                phases.join(", ")
            },
            self.ready_count(),
            self.rows.len(),
            self.md_replicas
                .map(|r| r.to_string())
                .unwrap_or_else(|| "-".into()),
        ));
        if !self.maas.is_empty() {
            out.push_str(&maas_line(&self.maas));
        }
        out
    }
}

/// Rows as left-aligned columns two spaces apart, one line each.
pub fn aligned<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `MAAS: Deployed cp-1 cp-2; Ready worker-6` (hostnames by status).
pub fn maas_line(maas: &BTreeMap<String, Vec<String>>) -> String {
    let maas: Vec<String> = maas
        .iter()
        .map(|(status, hosts)| format!("{status} {}", hosts.join(" ")))
        .collect();
    format!("MAAS: {}\n", maas.join("; "))
}

fn string(v: &Value) -> String {
    v.as_str().map(str::to_string).unwrap_or_default()
}

fn or_dash(s: String) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

/// Reads the story's MaasMachines, Machines and MachineDeployment, and the
/// MAAS machines by status when `maas` is given.
pub fn snapshot(
    kube: &kube::Client,
    ns: &str,
    maas: Option<&capmaas::maas::Client>,
) -> Result<Snapshot, String> {
    let snapshot = kube_snapshot(kube, ns).map_err(|e| e.to_string())?;
    let Some(maas) = maas else {
        return Ok(snapshot);
    };
    let mut by_status: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in maas
        .machines(&MachineFilter::default())
        .map_err(|e| e.to_string())?
    {
        by_status
            .entry(m.status.name().to_string())
            .or_default()
            .push(m.hostname);
    }
    for hosts in by_status.values_mut() {
        hosts.sort();
    }
    Ok(Snapshot {
        maas: by_status,
        ..snapshot
    })
}

fn kube_snapshot(kube: &kube::Client, ns: &str) -> Result<Snapshot, kube::Error> {
    let all = ListParams::default();
    let machines = kube.list(&resources::MACHINES, Some(ns), &all)?.items;
    let maas_machines = kube.list(&resources::MAAS_MACHINES, Some(ns), &all)?.items;
    let md_replicas = match kube.get(&resources::MACHINE_DEPLOYMENTS, Some(ns), MD) {
        Ok(md) => md["spec"]["replicas"].as_u64(),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    let by_name: HashMap<String, &Value> = machines
        .iter()
        .map(|m| (string(&m["metadata"]["name"]), m))
        .collect();
    let mut rows: Vec<Row> = maas_machines
        .iter()
        .map(|mm| {
            let owner = mm["metadata"]["ownerReferences"]
                .as_array()
                .and_then(|os| os.iter().find(|o| o["kind"] == "Machine"))
                .map(|o| string(&o["name"]))
                .unwrap_or_default();
            let machine = by_name.get(&owner);
            Row {
                name: string(&mm["metadata"]["name"]),
                state: or_dash(string(&mm["status"]["machineState"])),
                system_id: or_dash(string(&mm["spec"]["systemID"])),
                provider_id: or_dash(string(&mm["spec"]["providerID"])),
                ready: mm["status"]["ready"].as_bool().unwrap_or(false),
                machine_phase: or_dash(
                    machine
                        .map(|m| string(&m["status"]["phase"]))
                        .unwrap_or_default(),
                ),
                node: or_dash(
                    machine
                        .map(|m| string(&m["status"]["nodeRef"]["name"]))
                        .unwrap_or_default(),
                ),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let running = machines
        .iter()
        .filter(|m| m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string())
        .count();
    Ok(Snapshot {
        rows,
        machines: machines
            .iter()
            .map(|m| {
                (
                    string(&m["metadata"]["name"]),
                    or_dash(string(&m["status"]["phase"])),
                )
            })
            .collect(),
        running,
        md_replicas,
        maas: BTreeMap::new(),
    })
}

// ---------------------------------------------------------------------------
// The running lab.

pub struct LabOptions {
    /// Where capmaas's log (and the caller's files) go.
    pub dir: PathBuf,
    /// The namespace of the story; a fresh one when None.
    pub namespace: Option<String>,
    /// The simulator's Deploying → Deployed time.
    pub deploy_seconds: f64,
    pub release_seconds: f64,
    /// The capmaas binary (the test build's when None).
    pub capmaas_bin: Option<PathBuf>,
    pub capmaas_args: Vec<String>,
}

impl LabOptions {
    pub fn new(dir: PathBuf) -> LabOptions {
        LabOptions {
            dir,
            namespace: None,
            deploy_seconds: 5.0,
            release_seconds: 2.0,
            capmaas_bin: None,
            capmaas_args: Vec::new(),
        }
    }
}

/// Everything of the story running. Fields drop in order: the node helper
/// first (it polls the simulator), then capmaas, the simulator, and the
/// Cluster API manager (which unregisters its webhooks).
pub struct StoryLab {
    pub nodes: NodeHelper,
    pub capmaas: Capmaas,
    pub sim: MaasSim,
    pub capi: CapiManager,
    pub cp: &'static ControlPlane,
    pub kube: kube::Client,
    pub ns: String,
    pub dir: PathBuf,
    /// The simulator's machines, for the MAAS line of the table.
    pub maas: capmaas::maas::Client,
    nudger: MachineNudger,
    /// How many nudges were sent.
    pub nudges: usize,
}

/// The capmaas binary of this build (`cargo test --release` gives the
/// release one).
pub fn capmaas_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_capmaas"))
}

/// `kubectl delete` of one namespaced object without waiting for its
/// finalizers; absent is fine.
pub fn delete_no_wait(cp: &ControlPlane, ns: &str, kind: &str, name: &str) {
    cp.kubectl(&[
        "delete",
        kind,
        name,
        "-n",
        ns,
        "--wait=false",
        "--ignore-not-found",
    ]);
}

/// A client of the control plane for polling (cheaper than kubectl).
pub fn kube_client(cp: &ControlPlane) -> kube::Client {
    let config =
        kube::Config::from_kubeconfig_file(&cp.kubeconfig, None).expect("admin kubeconfig");
    kube::Client::new(config).expect("kube client")
}

/// Starts the simulator's machines lister for the node helper.
pub fn start_node_helper(cp: &'static ControlPlane, sim: &MaasSim) -> NodeHelper {
    let maas = sim.client();
    NodeHelper::start(cp, move || {
        let machines = maas
            .machines(&MachineFilter::default())
            .map_err(|e| e.to_string())?;
        Ok(machines
            .into_iter()
            .map(|m| MachineView {
                deployed: m.status == MachineStatus::Deployed,
                system_id: m.system_id,
                hostname: m.hostname,
            })
            .collect())
    })
}

/// Cluster API installs its Node watch only once the Cluster's control
/// plane is initialized (capi-core-local.md §3.5), and the node helper
/// registers a Node only after MAAS reports Deployed (a real kubelet
/// registers earlier, during cloud-init). So a Machine whose Node got its
/// providerID after the Machine's last reconcile waits for the 10-minute
/// resync. This touches such a Machine (an annotation) once it has
/// waited 10 s, and then at most every 10 s.
#[derive(Default)]
pub struct MachineNudger {
    /// Since when each Machine has waited for its Node, and when it was
    /// last nudged.
    waiting: HashMap<String, Instant>,
    nudged: HashMap<String, Instant>,
}

impl MachineNudger {
    /// Returns how many Machines it nudged.
    pub fn nudge(&mut self, kube: &kube::Client, ns: &str) -> usize {
        let mut nudges = 0;
        let Ok(nodes) = kube.list(&resources::NODES, None, &ListParams::default()) else {
            return 0;
        };
        let node_provider_ids: Vec<String> = nodes
            .items
            .iter()
            .map(|n| string(&n["spec"]["providerID"]))
            .filter(|p| !p.is_empty())
            .collect();
        let Ok(machines) = kube.list(&resources::MACHINES, Some(ns), &ListParams::default()) else {
            return 0;
        };
        for m in machines.items {
            let name = string(&m["metadata"]["name"]);
            let provider_id = string(&m["spec"]["providerID"]);
            let waiting = !provider_id.is_empty()
                && m["status"]["nodeRef"]["name"].is_null()
                && m["metadata"]["deletionTimestamp"].is_null()
                && node_provider_ids.contains(&provider_id);
            if !waiting {
                self.waiting.remove(&name);
                continue;
            }
            let since = *self
                .waiting
                .entry(name.clone())
                .or_insert_with(Instant::now);
            let recently = self
                .nudged
                .get(&name)
                .is_some_and(|t| t.elapsed() < Duration::from_secs(10));
            if since.elapsed() >= Duration::from_secs(10) && !recently {
                let patch = json!({"metadata": {"annotations": {
                    "lab.capmaas.io/nudged-at": format!("{:?}", std::time::SystemTime::now()),
                }}});
                if kube
                    .patch_merge(&resources::MACHINES, Some(ns), &name, &patch)
                    .is_ok()
                {
                    println!(
                        "lab: nudged Machine {name} (its Node has waited 10 s for a reconcile)"
                    );
                    self.nudged.insert(name, Instant::now());
                    nudges += 1;
                }
            }
        }
        nudges
    }
}

impl StoryLab {
    pub fn start(options: LabOptions) -> StoryLab {
        std::fs::create_dir_all(&options.dir)
            .unwrap_or_else(|e| panic!("creating {}: {e}", options.dir.display()));
        let started = Instant::now();
        let step = |what: &str| println!("lab [{:>5.1}s] {what}", started.elapsed().as_secs_f64());
        let cp = super::control_plane();
        step(&format!(
            "control plane up at {} (dir {})",
            cp.server,
            cp.dir.display()
        ));
        let capi = CapiManager::start(cp);
        step(&format!(
            "cluster-api manager {} up, log {}",
            capi.version,
            capi.log.display()
        ));
        let deploy = options.deploy_seconds.to_string();
        let release = options.release_seconds.to_string();
        let sim = MaasSim::start_with_args(
            None,
            &["--deploy-seconds", &deploy, "--release-seconds", &release],
        );
        step(&format!(
            "maas-sim up at {} (deploy {deploy}s, release {release}s)",
            sim.url
        ));
        let bin = options.capmaas_bin.clone().unwrap_or_else(capmaas_bin);
        let mut capmaas = Capmaas::start(
            &bin,
            &cp.kubeconfig,
            &sim,
            options.dir.join("capmaas.log"),
            &options.capmaas_args,
        );
        capmaas.wait_ready(60);
        step(&format!(
            "capmaas up (pid {}, metrics http://{}/metrics), log {}",
            capmaas.pid,
            capmaas.metrics_addr,
            capmaas.log.display()
        ));
        let nodes = start_node_helper(cp, &sim);
        let ns = options
            .namespace
            .clone()
            .unwrap_or_else(|| cp.new_namespace("story"));
        StoryLab {
            nodes,
            capmaas,
            capi,
            cp,
            kube: kube_client(cp),
            maas: sim.client(),
            sim,
            ns,
            dir: options.dir,
            nudger: MachineNudger::default(),
            nudges: 0,
        }
    }

    /// Creates every object of the story (server-side apply: idempotent).
    pub fn apply_story(&self) {
        let list =
            json!({"apiVersion": "v1", "kind": "List", "items": story_objects(self.cp, &self.ns)});
        self.cp.kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--field-manager=capmaas-lab",
                "-f",
                "-",
            ],
            &list.to_string(),
        );
    }

    pub fn snapshot(&self) -> Result<Snapshot, String> {
        snapshot(&self.kube, &self.ns, Some(&self.maas))
    }

    /// Both controllers must be up while we wait on them.
    pub fn check_processes(&mut self) {
        self.capi.assert_running();
        self.capmaas.assert_running();
    }

    /// See [`MachineNudger`]; `nudges` counts them.
    pub fn nudge_machines(&mut self) {
        self.nudges += self.nudger.nudge(&self.kube, &self.ns);
    }

    /// Polls every `interval` until [`Snapshot::all_ready`], calling
    /// `on_change` with each snapshot that differs from the previous one.
    /// Panics after `seconds` with the state and both controllers' log
    /// tails. Returns the final snapshot.
    pub fn wait_all_ready(
        &mut self,
        seconds: u64,
        interval: Duration,
        mut on_change: impl FnMut(&Snapshot),
    ) -> Snapshot {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut last: Option<Snapshot> = None;
        loop {
            self.check_processes();
            let snapshot = match self.snapshot() {
                Ok(s) => s,
                Err(e) => {
                    println!("reading the story: {e}");
                    assert!(Instant::now() < deadline, "timed out: {e}");
                    std::thread::sleep(interval);
                    continue;
                }
            };
            if last.as_ref() != Some(&snapshot) {
                on_change(&snapshot);
            }
            if snapshot.all_ready() {
                return snapshot;
            }
            last = Some(snapshot);
            assert!(
                Instant::now() < deadline,
                "timed out after {seconds}s waiting for every machine to be Ready\n{}",
                self.diagnostics()
            );
            self.nudge_machines();
            std::thread::sleep(interval);
        }
    }

    /// The story's objects and both controllers' log tails.
    pub fn diagnostics(&self) -> String {
        let state = self.cp.try_kubectl(
            &[
                "get",
                "clusters,machines,maasclusters,maasmachines,machinesets,machinedeployments",
                "-n",
                &self.ns,
                "-o",
                "wide",
            ],
            "",
        );
        format!(
            "--- objects:\n{}\n--- cluster-api manager ({}):\n{}\n--- capmaas ({}):\n{}",
            state.unwrap_or_else(|e| e),
            self.capi.log.display(),
            self.capi.log_tail(30),
            self.capmaas.log.display(),
            tail(&self.capmaas.log, 30)
        )
    }
}
