//! The KCP lab: the cluster users actually create (`clusterctl generate
//! cluster` with deploy/clusterctl/: a KubeadmControlPlane and a
//! MachineDeployment with kubeadm bootstrap) run by the real Cluster API
//! core, KubeadmControlPlane (KCP) and kubeadm bootstrap (CABPK) managers,
//! `capmaas` and the MAAS simulator, with the machines played by
//! `workload-sim` on Cluster API's in-memory workload cluster server, and the
//! API server name resolved through the simulator's DNS.
//!
//! It runs inside a network namespace (tests/support/netns.rs, see
//! [`network`]): every machine's address is on the namespace's loopback, the
//! simulator answers DNS on [`NAMESERVER`]:53, and that is the namespace's
//! only nameserver, so the managers, capmaas, workload-sim (port-forwards to
//! etcd) and the test all resolve `prod-cluster-xxxxxx.maas` through MAAS,
//! as in a datacenter.
//!
//! ```ignore
//! let Some(_ns) = netns::run_inside("my_test", &kcp_lab::network()) else { return };
//! let mut lab = KcpLab::start(LabOptions::new(dir));
//! lab.apply(&lab.render_template(3, 5));
//! lab.wait_until(600, "3 + 5 Running", |s| s.all_ready(3, 5), |_| {});
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use capmaas::kube::{self, ListParams, Resource};
use serde_json::{json, Value};

use super::capi::{self, CapiManager, FeatureGates, Provider};
use super::maas_sim::{story_inventory, MaasSim};
use super::netns::Network;
use super::story::{aligned, kube_client, maas_line, tail, Capmaas};
use super::workload_sim::{Booted, WorkloadSim};
use super::ControlPlane;

pub const CLUSTER: &str = "prod-cluster";
pub const KCP: &str = "prod-cluster-control-plane";
pub const MD: &str = "prod-cluster-md-0";
pub const KUBERNETES_VERSION: &str = "v1.26.4";
/// The MAAS rack controller's address on the lab subnet, where the
/// simulator answers DNS.
pub const NAMESERVER: &str = "10.11.130.2";
/// Where the provider repository and clusterctl's config are laid out
/// (`deploy/clusterctl/clusterctl.yaml` names `${HOME}/capmaas-repo`).
const PROVIDER_VERSION: &str = "v0.1.0";

/// Control-plane and worker machines of the lab inventory: three in each
/// zone for control planes (capmaas reports the MAAS zones as failure
/// domains and KCP spreads its machines over them: 5 replicas plus a surge
/// machine need up to 2 in one zone), and 8 workers plus surge.
const CONTROL_PLANE_MACHINES: usize = 9;
const WORKER_MACHINES: usize = 10;
const ZONES: [&str; 3] = ["default", "zone-a", "zone-b"];

pub const KUBEADM_CONTROL_PLANES: Resource = Resource {
    group: "controlplane.cluster.x-k8s.io",
    version: "v1beta2",
    plural: "kubeadmcontrolplanes",
    kind: "KubeadmControlPlane",
    namespaced: true,
};

/// The lab's MAAS: the story inventory's keys, domains, zones, images and
/// subnet, with machines where deploy/clusterctl/clusterctl.yaml asks for
/// them (pool `default`, tags `control-plane` / `worker`).
pub fn inventory() -> Value {
    let mut inventory = story_inventory();
    let mut machines = Vec::new();
    let mut add = |hostname: String, index: usize, tag: &str, cpu: u32, memory: u32, ip: String| {
        machines.push(json!({
            "hostname": hostname,
            "cpu_count": cpu,
            "memory": memory,
            "disks_gb": [240],
            "zone": ZONES[(index - 1) % ZONES.len()],
            "pool": "default",
            "tags": [tag],
            "ip_addresses": [ip],
            "mac_address": format!("52:54:00:bb:{:02x}:{:02x}", if tag == "worker" { 1 } else { 0 }, index),
            "power_type": "ipmi",
        }));
    };
    for i in 1..=CONTROL_PLANE_MACHINES {
        add(
            format!("cp-{i}"),
            i,
            "control-plane",
            8,
            32768,
            format!("10.11.130.{}", 20 + i),
        );
    }
    for i in 1..=WORKER_MACHINES {
        add(
            format!("worker-{i}"),
            i,
            "worker",
            16,
            65536,
            format!("10.11.130.{}", 40 + i),
        );
    }
    inventory["machines"] = Value::Array(machines);
    // The image of the version the upgrade tests move to, as the Go
    // provider's image-generation names it.
    inventory["boot_resources"]
        .as_array_mut()
        .expect("story inventory boot_resources")
        .push(json!({
            "name": "u-2204-0-k-1273-0",
            "type": "Uploaded",
            "architecture": "amd64/generic",
            "title": "Ubuntu 22.04 + Kubernetes 1.27.3",
            "base_image": "ubuntu/jammy",
        }));
    // The machines live in the lab's network namespace, on the network
    // the README story names (the story inventory's own is loopback).
    inventory["subnet"] =
        json!({"cidr": "10.11.130.0/24", "gateway_ip": "10.11.130.1", "name": "lab"});
    inventory["settings"]["machines_in_network_namespace"] = json!(true);
    inventory["_comment"] = json!("the KCP lab (tests/support/kcp_lab.rs)");
    inventory
}

/// The lab's network namespace: the nameserver and every machine address.
pub fn network() -> Network {
    let mut addresses = vec![NAMESERVER.to_string()];
    for m in inventory()["machines"].as_array().into_iter().flatten() {
        for ip in m["ip_addresses"].as_array().into_iter().flatten() {
            addresses.extend(ip.as_str().map(str::to_string));
        }
    }
    Network {
        prefix: "capmaas-kcp",
        nameserver: NAMESERVER.to_string(),
        addresses,
    }
}

pub struct LabOptions {
    /// Logs and clusterctl's home go here.
    pub dir: PathBuf,
    /// The namespace of the cluster; a fresh one when None.
    pub namespace: Option<String>,
    pub deploy_seconds: f64,
    pub release_seconds: f64,
    /// Cluster API's ClusterTopology feature gate on all three managers
    /// (ClusterClass; off by default, as shipped).
    pub cluster_topology: bool,
}

impl LabOptions {
    pub fn new(dir: PathBuf) -> LabOptions {
        LabOptions {
            dir,
            namespace: None,
            deploy_seconds: 3.0,
            release_seconds: 1.0,
            cluster_topology: false,
        }
    }
}

/// Everything of the lab running. Fields drop in order: the machines first,
/// then capmaas, the simulator and the managers (which unregister their
/// webhooks).
pub struct KcpLab {
    pub workloads: WorkloadSim,
    pub capmaas: Capmaas,
    pub sim: MaasSim,
    pub cabpk: CapiManager,
    pub kcp: CapiManager,
    pub capi: CapiManager,
    pub cp: &'static ControlPlane,
    pub kube: kube::Client,
    pub maas: capmaas::maas::Client,
    pub ns: String,
    pub dir: PathBuf,
    /// The management cluster's kubeconfig and kubectl, for people.
    pub kubectl: String,
}

impl KcpLab {
    pub fn start(options: LabOptions) -> KcpLab {
        assert!(
            super::netns::current().is_some(),
            "the KCP lab runs inside its network namespace (netns::run_inside)"
        );
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
        let gates = FeatureGates {
            cluster_topology: options.cluster_topology,
        };
        let capi = CapiManager::start_provider_with(cp, Provider::Core, gates);
        let kcp = CapiManager::start_provider_with(cp, Provider::KubeadmControlPlane, gates);
        let cabpk = CapiManager::start_provider_with(cp, Provider::KubeadmBootstrap, gates);
        step(&format!(
            "Cluster API {} managers up: core, KCP, CABPK (logs {}, {}, {})",
            capi.version,
            capi.log.display(),
            kcp.log.display(),
            cabpk.log.display()
        ));
        let deploy = options.deploy_seconds.to_string();
        let release = options.release_seconds.to_string();
        let dns = format!("{NAMESERVER}:53");
        let sim = MaasSim::start_with_args(
            Some(&inventory()),
            &[
                "--deploy-seconds",
                &deploy,
                "--release-seconds",
                &release,
                "--dns-listen",
                &dns,
            ],
        );
        step(&format!(
            "maas-sim up at {}, DNS on {dns} (deploy {deploy}s, release {release}s)",
            sim.url
        ));
        let mut capmaas = Capmaas::start(
            &super::story::capmaas_bin(),
            &cp.kubeconfig,
            &sim,
            options.dir.join("capmaas.log"),
            // Its machines serve their API: a control plane joins the DNS
            // record once it answers (the product's default).
            &["--dns-attach-without-api-check=false".to_string()],
        );
        capmaas.wait_ready(60);
        step(&format!("capmaas up, log {}", capmaas.log.display()));
        let workloads = WorkloadSim::start(cp, &sim, &options.dir);
        step(&format!(
            "workload-sim up, log {}",
            workloads.log().display()
        ));
        let ns = options
            .namespace
            .clone()
            .unwrap_or_else(|| cp.new_namespace("kcp"));
        let kubectl = format!(
            "{} --kubeconfig {}",
            cp.bin_dir.join("kubectl").display(),
            cp.kubeconfig.display()
        );
        KcpLab {
            workloads,
            capmaas,
            maas: sim.client(),
            sim,
            cabpk,
            kcp,
            capi,
            cp,
            kube: kube_client(cp),
            ns,
            dir: options.dir,
            kubectl,
        }
    }

    /// `clusterctl generate cluster prod-cluster --kubernetes-version v1.26.4
    /// --control-plane-machine-count=CP --worker-machine-count=WORKERS` with
    /// deploy/clusterctl/clusterctl.yaml as shipped, from a local provider
    /// repository laid out by generate.sh, into the lab's namespace.
    pub fn render_template(&self, control_planes: usize, workers: usize) -> String {
        self.render_flavor(None, control_planes, workers, &[])
    }

    /// As [`KcpLab::render_template`], with `--flavor FLAVOR` when given and
    /// `vars` overriding clusterctl.yaml's variables (clusterctl prefers the
    /// environment).
    pub fn render_flavor(
        &self,
        flavor: Option<&str>,
        control_planes: usize,
        workers: usize,
        vars: &[(&str, &str)],
    ) -> String {
        render_flavor_in(&self.dir, &self.ns, flavor, control_planes, workers, vars)
    }

    /// `kubectl apply -f -`, as a user would.
    pub fn apply(&self, yaml: &str) {
        self.cp.kubectl_stdin(&["apply", "-f", "-"], yaml);
    }

    /// `kubectl patch --type=merge` of an object in the lab's namespace.
    pub fn patch(&self, kind: &str, name: &str, patch: &Value) {
        self.cp.kubectl(&[
            "patch",
            kind,
            name,
            "-n",
            &self.ns,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
    }

    /// Every process must still be up while we wait on them.
    pub fn check_processes(&mut self) {
        self.capi.assert_running();
        self.kcp.assert_running();
        self.cabpk.assert_running();
        self.capmaas.assert_running();
        self.workloads.assert_running();
    }

    pub fn snapshot(&self) -> Result<Snapshot, String> {
        snapshot(&self.kube, &self.ns, &self.sim, &self.workloads)
    }

    /// Polls every second until `done(snapshot)`, calling `on_change` with
    /// each snapshot that differs from the previous one; panics after
    /// `seconds` with the state and every log's tail.
    pub fn wait_until(
        &mut self,
        seconds: u64,
        what: &str,
        mut done: impl FnMut(&Snapshot) -> bool,
        mut on_change: impl FnMut(&Snapshot),
    ) -> Snapshot {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(seconds);
        let mut last: Option<Snapshot> = None;
        loop {
            self.check_processes();
            match self.snapshot() {
                Ok(s) => {
                    if last.as_ref() != Some(&s) {
                        on_change(&s);
                    }
                    if done(&s) {
                        println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
                        return s;
                    }
                    last = Some(s);
                }
                Err(e) => println!("reading the lab: {e}"),
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {seconds}s waiting for {what}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The objects, the snapshot and every log's tail.
    pub fn diagnostics(&self) -> String {
        let objects = self.cp.try_kubectl(
            &[
                "get",
                "clusters,kubeadmcontrolplanes,machinedeployments,machines,maasclusters,maasmachines,kubeadmconfigs",
                "-n",
                &self.ns,
                "-o",
                "wide",
            ],
            "",
        );
        let snapshot = self
            .snapshot()
            .map(|s| s.table())
            .unwrap_or_else(|e| e.to_string());
        let mut out = format!(
            "--- objects:\n{}\n--- snapshot:\n{snapshot}",
            objects.unwrap_or_else(|e| e)
        );
        for (name, log) in [
            ("core manager", self.capi.log_tail(25)),
            ("KCP manager", self.kcp.log_tail(25)),
            ("CABPK manager", self.cabpk.log_tail(15)),
            ("capmaas", tail(&self.capmaas.log, 25)),
            ("workload-sim", self.workloads.log_tail(25)),
        ] {
            out.push_str(&format!("\n--- {name}:\n{log}"));
        }
        out
    }

    /// The Cluster's API server name (`spec.controlPlaneEndpoint.host`),
    /// once capmaas has set it.
    pub fn endpoint_host(&self) -> Option<String> {
        let cluster = self
            .kube
            .get(&capmaas::kube::resources::CLUSTERS, Some(&self.ns), CLUSTER)
            .ok()?;
        cluster["spec"]["controlPlaneEndpoint"]["host"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string)
    }

    /// The workload cluster's admin kubeconfig (`<cluster>-kubeconfig`,
    /// written by KCP), saved to `dir/workload.kubeconfig`.
    pub fn workload_kubeconfig(&self) -> PathBuf {
        let secret = self
            .kube
            .get(
                &capmaas::kube::resources::SECRETS,
                Some(&self.ns),
                &format!("{CLUSTER}-kubeconfig"),
            )
            .expect("reading the workload kubeconfig Secret");
        let value = secret["data"]["value"].as_str().expect("kubeconfig value");
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value)
            .expect("kubeconfig is base64");
        let path = self.dir.join("workload.kubeconfig");
        std::fs::write(&path, bytes).expect("writing the workload kubeconfig");
        path
    }
}

/// [`KcpLab::render_flavor`] for a lab laid out in `dir`, the cluster in
/// namespace `ns`.
pub fn render_flavor_in(
    dir: &std::path::Path,
    ns: &str,
    flavor: Option<&str>,
    control_planes: usize,
    workers: usize,
    vars: &[(&str, &str)],
) -> String {
    let home = dir.join("clusterctl-home");
    let status = Command::new(super::repo_root().join("deploy/clusterctl/generate.sh"))
        .args([
            "--repo",
            super::path_str(&home.join("capmaas-repo")),
            PROVIDER_VERSION,
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("running generate.sh");
    assert!(status.success(), "generate.sh --repo failed");
    let clusterctl = capi::build().join("clusterctl");
    let out = Command::new(&clusterctl)
        .args([
            "generate",
            "cluster",
            CLUSTER,
            "--kubernetes-version",
            KUBERNETES_VERSION,
            &format!("--control-plane-machine-count={control_planes}"),
            &format!("--worker-machine-count={workers}"),
            // Without `clusterctl init` there is no provider inventory
            // to find the default infrastructure provider in.
            "--infrastructure",
            &format!("maas:{PROVIDER_VERSION}"),
            "--target-namespace",
            ns,
            "--config",
        ])
        .arg(super::repo_root().join("deploy/clusterctl/clusterctl.yaml"))
        .args(flavor.iter().flat_map(|f| ["--flavor", *f]))
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("xdg"))
        .env("GOPROXY", "off")
        .env_remove("KUBECONFIG")
        .envs(vars.iter().copied())
        .output()
        .expect("running clusterctl");
    assert!(
        out.status.success(),
        "clusterctl generate cluster: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("clusterctl prints UTF-8")
}

/// Resolves `host` with the system resolver (this namespace's resolv.conf:
/// the simulator's DNS), as every client here does.
pub fn resolve(host: &str) -> Result<BTreeSet<String>, String> {
    (host, 6443)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip().to_string()).collect())
        .map_err(|e| format!("resolving {host}: {e}"))
}

// ---------------------------------------------------------------------------
// What the lab looks like right now.

/// The KubeadmControlPlane's or the MachineDeployment's version and
/// replica counts (spec and status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub version: String,
    pub desired: u64,
    pub replicas: u64,
    pub ready: u64,
    pub up_to_date: u64,
    pub available: u64,
    /// KCP's `status.initialization.controlPlaneInitialized`.
    pub initialized: bool,
    /// The `Available` condition's status.
    pub available_condition: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineRow {
    pub name: String,
    pub control_plane: bool,
    pub phase: String,
    pub version: String,
    pub node: String,
    pub provider_id: String,
    /// ExternalIP addresses (status.addresses, copied from the MaasMachine).
    pub ips: Vec<String>,
    pub deleting: bool,
    /// Cluster API's `status.deletion.nodeDrainStartTime` ("" until then).
    pub drain_started: String,
    /// Carries capmaas's pre-drain hook annotation.
    pub drain_hook: bool,
}

impl MachineRow {
    pub fn running(&self) -> bool {
        self.phase == "Running" && !self.node.is_empty() && !self.provider_id.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub control_plane: Replicas,
    pub workers: Replicas,
    pub machines: Vec<MachineRow>,
    /// Whether the Cluster object exists.
    pub cluster_exists: bool,
    /// The addresses of MAAS's API server record (empty before it exists).
    pub dns: BTreeSet<String>,
    /// Every MAAS DNS record of this cluster's name (`prod-cluster-*`).
    pub dns_records: BTreeSet<String>,
    /// What workload-sim has booted, by hostname.
    pub booted: Vec<Booted>,
    /// MAAS machines (hostnames) by status name.
    pub maas: BTreeMap<String, Vec<String>>,
}

impl Snapshot {
    pub fn control_plane_machines(&self) -> impl Iterator<Item = &MachineRow> {
        self.machines.iter().filter(|m| m.control_plane)
    }

    /// The ExternalIPs of the control-plane Machines not being deleted.
    pub fn control_plane_ips(&self) -> BTreeSet<String> {
        self.control_plane_machines()
            .filter(|m| !m.deleting)
            .flat_map(|m| m.ips.iter().cloned())
            .collect()
    }

    /// KCP initialized and ready with `control_planes` up-to-date replicas,
    /// the MachineDeployment with `workers`, exactly that many Machines, all
    /// Running with a Node and a providerID, and the DNS record holding
    /// exactly the control-plane Machines' addresses.
    pub fn all_ready(&self, control_planes: u64, workers: u64) -> bool {
        let cp = &self.control_plane;
        let md = &self.workers;
        cp.initialized
            && cp.desired == control_planes
            && cp.replicas == control_planes
            && cp.ready == control_planes
            && cp.up_to_date == control_planes
            && md.desired == workers
            && md.replicas == workers
            && md.ready == workers
            && md.up_to_date == workers
            && self.machines.len() as u64 == control_planes + workers
            && self.machines.iter().all(MachineRow::running)
            && self.control_plane_machines().count() as u64 == control_planes
            && !self.dns.is_empty()
            && self.dns == self.control_plane_ips()
    }

    /// A compact table for people.
    pub fn table(&self) -> String {
        let cp = &self.control_plane;
        let md = &self.workers;
        let mut out = format!(
            "KCP {KCP} {}: {}/{} replicas, ready {}, up-to-date {}, available {}, initialized {}, Available={}\n\
             MachineDeployment {MD} {}: {}/{} replicas, ready {}, up-to-date {}, available {}\n",
            cp.version, cp.replicas, cp.desired, cp.ready, cp.up_to_date, cp.available,
            cp.initialized, or_dash(&cp.available_condition),
            md.version, md.replicas, md.desired, md.ready, md.up_to_date, md.available,
        );
        let mut rows = vec![[
            "MACHINE".to_string(),
            "ROLE".into(),
            "PHASE".into(),
            "VERSION".into(),
            "NODE".into(),
            "PROVIDER ID".into(),
            "IP".into(),
        ]];
        for m in &self.machines {
            rows.push([
                m.name.clone(),
                if m.control_plane {
                    "control-plane"
                } else {
                    "worker"
                }
                .into(),
                format!(
                    "{}{}",
                    or_dash(&m.phase),
                    match (m.deleting, m.drain_hook, m.drain_started.is_empty()) {
                        (false, _, _) => "",
                        (true, true, _) => " (deleting, drain held)",
                        (true, false, false) => " (deleting, drained)",
                        (true, false, true) => " (deleting)",
                    }
                ),
                or_dash(&m.version),
                or_dash(&m.node),
                or_dash(&m.provider_id),
                or_dash(&m.ips.join(",")),
            ]);
        }
        out.push_str(&aligned(&rows));
        let dns: Vec<&str> = self.dns.iter().map(String::as_str).collect();
        let records: Vec<&str> = self.dns_records.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "DNS record {}: {}\n",
            or_dash(&records.join(" ")),
            or_dash(&dns.join(" "))
        ));
        let booted: Vec<String> = self
            .booted
            .iter()
            .map(|b| {
                if b.api_server.is_empty() {
                    b.hostname.clone()
                } else {
                    format!("{} (API {})", b.hostname, b.api_server)
                }
            })
            .collect();
        out.push_str(&format!("booted: {}\n", or_dash(&booted.join(", "))));
        out.push_str(&maas_line(&self.maas));
        out
    }
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

fn string(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn condition_status(obj: &Value, type_: &str) -> String {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(|c| string(&c["status"]))
        .unwrap_or_default()
}

/// What a [`Snapshot`] reads of MAAS: machine hostnames by status name,
/// and every DNS record (fqdn, addresses).
#[derive(Clone, Debug, Default)]
pub struct MaasView {
    pub machines: BTreeMap<String, Vec<String>>,
    pub records: Vec<(String, Vec<String>)>,
}

impl MaasView {
    /// The simulator's state now.
    pub fn of_sim(sim: &MaasSim) -> MaasView {
        let state = sim.state();
        let mut machines: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in state["machines"].as_array().into_iter().flatten() {
            machines
                .entry(string(&m["status_name"]))
                .or_default()
                .push(string(&m["hostname"]));
        }
        let records = state["dns_resources"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                let ips = d["ip_addresses"].as_array().into_iter().flatten();
                (string(&d["fqdn"]), ips.map(string).collect())
            })
            .collect();
        MaasView { machines, records }
    }
}

pub fn snapshot(
    kube: &kube::Client,
    ns: &str,
    sim: &MaasSim,
    workloads: &WorkloadSim,
) -> Result<Snapshot, String> {
    snapshot_with(kube, ns, &MaasView::of_sim(sim), workloads)
}

/// [`snapshot`] of a lab whose MAAS is seen through `view`.
pub fn snapshot_with(
    kube: &kube::Client,
    ns: &str,
    view: &MaasView,
    workloads: &WorkloadSim,
) -> Result<Snapshot, String> {
    use capmaas::kube::resources::{MACHINES, MACHINE_DEPLOYMENTS};
    let get = |resource: &Resource, name: &str| -> Result<Value, String> {
        match kube.get(resource, Some(ns), name) {
            Ok(v) => Ok(v),
            Err(e) if e.is_not_found() => Ok(Value::Null),
            Err(e) => Err(e.to_string()),
        }
    };
    let cluster = get(&capmaas::kube::resources::CLUSTERS, CLUSTER)?;
    let kcp = get(&KUBEADM_CONTROL_PLANES, KCP)?;
    let md = get(&MACHINE_DEPLOYMENTS, MD)?;
    let machines = kube
        .list(&MACHINES, Some(ns), &ListParams::default())
        .map_err(|e| e.to_string())?
        .items;
    let mut rows: Vec<MachineRow> = machines
        .iter()
        .map(|m| MachineRow {
            name: string(&m["metadata"]["name"]),
            control_plane: m["metadata"]["labels"]
                .get("cluster.x-k8s.io/control-plane")
                .is_some(),
            phase: string(&m["status"]["phase"]),
            version: string(&m["spec"]["version"]),
            node: string(&m["status"]["nodeRef"]["name"]),
            provider_id: string(&m["spec"]["providerID"]),
            ips: m["status"]["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| a["type"] == "ExternalIP")
                .map(|a| string(&a["address"]))
                .collect(),
            deleting: !m["metadata"]["deletionTimestamp"].is_null(),
            drain_started: string(&m["status"]["deletion"]["nodeDrainStartTime"]),
            drain_hook: m["metadata"]["annotations"]
                .get(capmaas::controllers::machine::drain::PRE_DRAIN_HOOK)
                .is_some(),
        })
        .collect();
    rows.sort_by(|a, b| (!a.control_plane, &a.name).cmp(&(!b.control_plane, &b.name)));

    let dns_name = dns_name(kube, ns)?;
    let dns = view
        .records
        .iter()
        .filter(|(fqdn, _)| Some(fqdn) == dns_name.as_ref())
        .flat_map(|(_, ips)| ips.iter().cloned())
        .collect();
    let dns_records = view
        .records
        .iter()
        .map(|(fqdn, _)| fqdn.clone())
        .filter(|fqdn| fqdn.starts_with(&format!("{CLUSTER}-")))
        .collect();
    Ok(Snapshot {
        control_plane: replicas(&kcp, &kcp["spec"]["version"]),
        workers: replicas(&md, &md["spec"]["template"]["spec"]["version"]),
        machines: rows,
        cluster_exists: !cluster.is_null(),
        dns,
        dns_records,
        booted: workloads.booted()?,
        maas: view.machines.clone(),
    })
}

fn replicas(obj: &Value, version: &Value) -> Replicas {
    let status = &obj["status"];
    Replicas {
        version: string(version),
        desired: count(&obj["spec"]["replicas"]),
        replicas: count(&status["replicas"]),
        ready: count(&status["readyReplicas"]),
        up_to_date: count(&status["upToDateReplicas"]),
        available: count(&status["availableReplicas"]),
        initialized: status["initialization"]["controlPlaneInitialized"] == true,
        available_condition: condition_status(obj, "Available"),
    }
}

/// The MaasCluster's `status.network.dnsName`.
fn dns_name(kube: &kube::Client, ns: &str) -> Result<Option<String>, String> {
    match kube.get(&capmaas::kube::resources::MAAS_CLUSTERS, Some(ns), CLUSTER) {
        Ok(mc) => Ok(mc["status"]["network"]["dnsName"]
            .as_str()
            .map(str::to_string)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
