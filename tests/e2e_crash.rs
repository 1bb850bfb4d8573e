//! Crash test: `capmaas` is killed with SIGKILL at random points while
//! machines are provisioned, scaled down and deleted, and restarted each
//! time. Real kube-apiserver, `maas-sim` (deploy takes seconds, so kills land
//! in every phase: naming and creating the DNS record, allocating, recording
//! the allocation, deploying, waiting for deployment, attaching to DNS,
//! releasing, removing finalizers), the `capmaas` binary, and this test
//! playing Cluster API's part.
//!
//! Every MAAS write is slowed down (half a second), so that kills often land
//! while one is in flight: MAAS acts, capmaas never hears of it, and the
//! next process must find the allocation by its agent_name. Some runs elect
//! a leader first (a short Lease), so that the Lease of a killed leader is
//! taken over as in a deployment.
//!
//! At every kill, with the process dead (so MAAS and the API server cannot
//! move under the check), the invariants hold:
//! - every MAAS machine carrying an agent_name names an existing MaasMachine
//!   (by namespace, name and uid), and no two carry the same one;
//! - a MAAS machine owned by someone carries an agent_name, unless it is
//!   being released;
//! - a MaasMachine's `spec.systemID`/`spec.providerID` never change once
//!   set, and (unless it is being deleted) name a MAAS machine that carries
//!   its agent_name;
//! - at most one DNS record exists for the cluster, it is the name in the
//!   MaasCluster's status, and that name never changes once chosen.
//!
//! Then capmaas runs to completion: every MaasMachine Ready on its own MAAS
//! machine, exactly one MAAS machine each, providerIDs on the Nodes, the
//! record holding the control-plane addresses. The same for a scale-down,
//! and for deleting the cluster: nothing allocated, the record gone, every
//! finalizer removed.
//!
//! Two deterministic crash scenarios beside it: the MaasCluster and its
//! control-plane machines deleted together while capmaas is down, and a
//! release whose answer was lost before a crash, the machine taken by
//! someone else before the restart (it must not be released again).
//!
//! The kill points come from a seeded generator; the seed is printed, and
//! `CAPMAAS_CRASH_SEED=<seed>` replays a run.

mod support;

use capmaas::maas::MaasApi;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use capmaas::kube::{self, resources, ListParams};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::nodes::{sim_views, NodeHelper};
use support::objects::{self, string};
use support::story::Capmaas;
use support::ControlPlane;

const CLUSTER: &str = "crash";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const IMAGE: &str = "custom/u-2204-0-k-1264-0";
const CONTROL_PLANE: [&str; 3] = ["cp-a", "cp-b", "cp-c"];
const WORKERS: [&str; 5] = ["w-1", "w-2", "w-3", "w-4", "w-5"];

/// Every MAAS write (allocate, deploy, release, DNS record changes and its
/// ownership mark) takes
/// this long before MAAS acts on it, so that kills often land while one is
/// in flight: MAAS then acts, and capmaas never hears of it.
const MAAS_WRITE_LATENCY_MS: u64 = 500;
/// Long enough for every request in flight at a kill to be handled.
const IN_FLIGHT: Duration = Duration::from_millis(1200);

/// xorshift64*: enough randomness for kill points, reproducible by seed.
struct Rng(u64);

impl Rng {
    fn seeded() -> (Rng, u64) {
        let seed = match std::env::var("CAPMAAS_CRASH_SEED") {
            Ok(s) => s.parse().expect("CAPMAAS_CRASH_SEED is a u64"),
            Err(_) => {
                let mut bytes = [0u8; 8];
                getrandom::getrandom(&mut bytes).expect("getrandom");
                u64::from_le_bytes(bytes)
            }
        };
        (Rng(seed | 1), seed)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in [lo, hi) milliseconds.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

/// The test in Cluster API's role, plus the capmaas process it kills.
struct Crash {
    cp: &'static ControlPlane,
    kube: kube::Client,
    ns: String,
    sim: MaasSim,
    logs: PathBuf,
    runs: u32,
    capmaas: Option<Capmaas>,
    /// What the invariants remember between observations.
    seen: Seen,
    cluster_marked_provisioned: bool,
    /// The Cluster is being deleted: Machines first, then the MaasCluster.
    tearing_down: bool,
    maas_cluster_deleted: bool,
}

#[derive(Default)]
struct Seen {
    /// MaasMachine uid → (systemID, providerID) once set.
    allocation: HashMap<String, (String, String)>,
    /// The MaasCluster's DNS name once chosen.
    dns_name: Option<String>,
    observations: u32,
}

fn agent_name(ns: &str, mm: &Value) -> String {
    format!(
        "capmaas/{ns}/{}/{}",
        string(&mm["metadata"]["name"]),
        string(&mm["metadata"]["uid"])
    )
}

impl Crash {
    fn apply(&self, obj: &Value) {
        self.cp
            .kubectl_stdin(&["apply", "-f", "-"], &obj.to_string());
    }

    fn list(&self, r: &kube::Resource) -> Vec<Value> {
        support::eventually(60, "listing from the API server", || {
            self.kube
                .list(r, Some(&self.ns), &ListParams::default())
                .map_err(|e| println!("list {}: {e}", r.plural))
                .ok()
        })
        .items
    }

    fn get(&self, r: &kube::Resource, name: &str) -> Option<Value> {
        match self.kube.get(r, Some(&self.ns), name) {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("get {} {name}: {e}", r.plural),
        }
    }

    fn uid(&self, r: &kube::Resource, name: &str) -> String {
        string(&self.get(r, name).expect("object exists")["metadata"]["uid"])
    }

    fn delete(&self, kind: &str, name: &str) {
        support::story::delete_no_wait(self.cp, &self.ns, kind, name);
    }

    /// Cluster API's part for one machine: bootstrap Secret, Machine, and
    /// the MaasMachine it owns.
    fn add_machine(&self, name: &str, control_plane: bool) {
        let bootstrap = support::story::bootstrap_secret_name(name);
        self.apply(&support::capi::bootstrap_secret(
            &self.ns, &bootstrap, CLUSTER,
        ));
        self.apply(&objects::machine(&self.ns, CLUSTER, name, control_plane));
        let machine_uid = self.uid(&resources::MACHINES, name);
        let spec = if control_plane {
            json!({"image": IMAGE, "minCPU": 4, "minMemory": 8192, "resourcePool": "cp-pool"})
        } else {
            json!({"image": IMAGE, "minCPU": 8, "minMemory": 16384, "resourcePool": "worker-pool"})
        };
        self.apply(&objects::owned_maas_machine(
            &self.ns,
            CLUSTER,
            name,
            control_plane,
            &machine_uid,
            spec,
        ));
    }

    fn remove_machine(&self, name: &str) {
        self.delete("maasmachines", name);
        self.delete("machines.cluster.x-k8s.io", name);
    }

    /// Cluster API marks the Cluster's infrastructure provisioned once the
    /// MaasCluster says so, and while tearing the cluster down deletes the
    /// MaasCluster once no MaasMachine is left.
    fn play_cluster_api(&mut self) {
        if self.tearing_down && !self.maas_cluster_deleted {
            if self.list(&resources::MAAS_MACHINES).is_empty() {
                self.delete("maasclusters", CLUSTER);
                self.maas_cluster_deleted = true;
                println!("crash: MaasMachines gone, MaasCluster deleted");
            }
            return;
        }
        if self.cluster_marked_provisioned {
            return;
        }
        let Some(mc) = self.get(&resources::MAAS_CLUSTERS, CLUSTER) else {
            return;
        };
        if mc["status"]["initialization"]["provisioned"] == true {
            self.cp.kubectl(&[
                "patch",
                "clusters.cluster.x-k8s.io",
                CLUSTER,
                "-n",
                &self.ns,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
            ]);
            self.cluster_marked_provisioned = true;
            println!("crash: Cluster marked infrastructure-provisioned");
        }
    }

    fn start_capmaas(&mut self) {
        self.start_capmaas_with(false);
    }

    /// With `leader_elect`, as deploy/manager.yaml runs it (a short Lease,
    /// so that a killed leader's is taken over quickly).
    fn start_capmaas_with(&mut self, leader_elect: bool) {
        assert!(self.capmaas.is_none());
        self.runs += 1;
        let log = self.logs.join(format!("capmaas-{:02}.log", self.runs));
        // The product's default periods: a restarted capmaas relists
        // everything and the MAAS watch notices MAAS's side.
        let mut args = vec![format!("--namespace={}", self.ns)];
        if leader_elect {
            args.extend([
                "--leader-elect".to_string(),
                format!("--leader-election-namespace={}", self.ns),
                "--leader-elect-lease-duration=2s".to_string(),
                "--leader-elect-renew-deadline=1500ms".to_string(),
                "--leader-elect-retry-period=500ms".to_string(),
            ]);
        }
        self.capmaas = Some(Capmaas::start(
            &support::story::capmaas_bin(),
            &self.cp.kubeconfig,
            &self.sim,
            log,
            &args,
        ));
    }

    /// The Lease's holder, if any.
    fn lease_holder(&self) -> Option<String> {
        let lease = self
            .kube
            .get(
                &resources::LEASES,
                Some(&self.ns),
                "capmaas-leader-election",
            )
            .ok()?;
        Some(string(&lease["spec"]["holderIdentity"])).filter(|h| !h.is_empty())
    }

    /// SIGKILL (and reap) the running capmaas; it must not have exited on
    /// its own before.
    fn kill_capmaas(&mut self) {
        let mut capmaas = self.capmaas.take().expect("capmaas running");
        capmaas.assert_running();
        drop(capmaas);
    }

    fn assert_running(&mut self) {
        if let Some(c) = self.capmaas.as_mut() {
            c.assert_running();
        }
    }

    /// Starts capmaas, lets it work a random 0.2–3 s, kills it with
    /// SIGKILL and checks the invariants with the process dead.
    fn kill_once(&mut self, when: &str, rng: &mut Rng) {
        self.kill_once_with(when, false, rng);
    }

    /// With `leader_elect`, the random time counts from when the new
    /// process took the Lease over from the killed one.
    fn kill_once_with(&mut self, when: &str, leader_elect: bool, rng: &mut Rng) {
        let previous = self.lease_holder();
        self.start_capmaas_with(leader_elect);
        if leader_elect {
            let holder = support::eventually(60, "the Lease taken over", || {
                self.assert_running();
                self.lease_holder().filter(|h| Some(h) != previous.as_ref())
            });
            println!("crash: {holder} leads (was {previous:?})");
        }
        let after = rng.millis(200, 3000);
        std::thread::sleep(after);
        self.kill_capmaas();
        // A MAAS write in flight at the kill still lands (MAAS acts on a
        // request whose client is gone); a real restart takes longer.
        std::thread::sleep(IN_FLIGHT);
        self.check_invariants(&format!("{when}, killed after {after:?}"));
        self.play_cluster_api();
    }

    /// The invariants of the module doc, on one observation.
    fn check_invariants(&mut self, when: &str) {
        self.seen.observations += 1;
        let state = self.sim.state();
        let maas_machines = self.list(&resources::MAAS_MACHINES);
        let maas_cluster = self.get(&resources::MAAS_CLUSTERS, CLUSTER);
        let machines = state["machines"].as_array().unwrap();
        let context = || {
            let ours: Vec<String> = machines
                .iter()
                .filter(|m| !m["owner"].is_null() || m["agent_name"] != "")
                .map(|m| {
                    format!(
                        "{} {} {} agent={}",
                        string(&m["hostname"]),
                        string(&m["system_id"]),
                        string(&m["status_name"]),
                        string(&m["agent_name"])
                    )
                })
                .collect();
            let mms: Vec<String> = maas_machines
                .iter()
                .map(|mm| {
                    format!(
                        "{} uid={} systemID={} deleting={}",
                        string(&mm["metadata"]["name"]),
                        string(&mm["metadata"]["uid"]),
                        string(&mm["spec"]["systemID"]),
                        !mm["metadata"]["deletionTimestamp"].is_null()
                    )
                })
                .collect();
            format!(
                "at {when}\nMAAS:\n  {}\nMaasMachines:\n  {}\nDNS: {}\nlogs in {}",
                ours.join("\n  "),
                mms.join("\n  "),
                state["dns_resources"],
                self.logs.display()
            )
        };

        // Agent names: each names one existing MaasMachine, none twice.
        let by_agent: HashMap<String, &Value> = maas_machines
            .iter()
            .map(|mm| (agent_name(&self.ns, mm), mm))
            .collect();
        let mut agents: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in machines {
            let agent = string(&m["agent_name"]);
            if agent.is_empty() {
                let releasing = ["Releasing", "Disk erasing"]
                    .contains(&m["status_name"].as_str().unwrap_or(""));
                assert!(
                    m["owner"].is_null() || releasing,
                    "MAAS machine {} is owned but carries no agent_name\n{}",
                    string(&m["system_id"]),
                    context()
                );
                continue;
            }
            assert!(
                by_agent.contains_key(&agent),
                "MAAS machine {} carries agent_name {agent:?} of no MaasMachine: leaked\n{}",
                string(&m["system_id"]),
                context()
            );
            assert!(
                !m["owner"].is_null(),
                "MAAS machine {} carries an agent_name but no owner\n{}",
                string(&m["system_id"]),
                context()
            );
            agents
                .entry(agent)
                .or_default()
                .push(string(&m["system_id"]));
        }
        for (agent, ids) in &agents {
            assert_eq!(
                ids.len(),
                1,
                "{agent} allocated twice: {ids:?}\n{}",
                context()
            );
        }

        // Allocations recorded once and for good, on a machine that is ours.
        for mm in &maas_machines {
            let name = string(&mm["metadata"]["name"]);
            let uid = string(&mm["metadata"]["uid"]);
            let system_id = string(&mm["spec"]["systemID"]);
            let provider_id = string(&mm["spec"]["providerID"]);
            if let Some((seen_id, seen_provider)) = self.seen.allocation.get(&uid) {
                assert_eq!(
                    &system_id,
                    seen_id,
                    "{name}: spec.systemID changed\n{}",
                    context()
                );
                assert_eq!(
                    &provider_id,
                    seen_provider,
                    "{name}: spec.providerID changed\n{}",
                    context()
                );
            } else if !system_id.is_empty() {
                assert!(
                    provider_id.ends_with(&format!("/{system_id}")),
                    "{name}: providerID {provider_id:?} vs systemID {system_id:?}"
                );
                self.seen
                    .allocation
                    .insert(uid.clone(), (system_id.clone(), provider_id));
            }
            let deleting = !mm["metadata"]["deletionTimestamp"].is_null();
            if !system_id.is_empty() && !deleting {
                let host = machines
                    .iter()
                    .find(|m| m["system_id"] == system_id.as_str())
                    .unwrap_or_else(|| panic!("{name}: systemID {system_id} not in MAAS"));
                assert_eq!(
                    string(&host["agent_name"]),
                    agent_name(&self.ns, mm),
                    "{name}: its MAAS machine {system_id} is not marked as its own\n{}",
                    context()
                );
            }
        }

        // One DNS record at most, under the one name ever chosen.
        let records: Vec<String> = state["dns_resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| string(&d["fqdn"]))
            .filter(|f| f.starts_with(&format!("{CLUSTER}-")))
            .collect();
        assert!(
            records.len() <= 1,
            "more than one DNS record: {records:?}\n{}",
            context()
        );
        let name = maas_cluster
            .as_ref()
            .map(|mc| string(&mc["status"]["network"]["dnsName"]))
            .filter(|n| !n.is_empty());
        if let Some(name) = &name {
            match &self.seen.dns_name {
                Some(seen) => assert_eq!(seen, name, "the DNS name changed\n{}", context()),
                None => self.seen.dns_name = Some(name.clone()),
            }
        }
        if let Some(record) = records.first() {
            assert_eq!(
                Some(record),
                self.seen.dns_name.as_ref(),
                "a DNS record under a name the MaasCluster does not hold\n{}",
                context()
            );
        }
        let allocated = agents.len();
        let deployed = machines
            .iter()
            .filter(|m| m["status_name"] == "Deployed")
            .count();
        println!(
            "crash: invariants hold {when}: {allocated} allocated ({deployed} deployed), {} MaasMachines, {} DNS record(s)",
            maas_machines.len(),
            records.len()
        );
    }

    /// Every MaasMachine named is Ready on a MAAS machine of its own, its
    /// Node has the providerID, and MAAS holds exactly these machines.
    fn wait_ready(&mut self, names: &[&str], seconds: u64) {
        let what = format!("{} MaasMachines ready", names.len());
        support::eventually(seconds, &what, || {
            self.assert_running();
            self.play_cluster_api();
            for name in names {
                let mm = self.get(&resources::MAAS_MACHINES, name)?;
                (mm["status"]["ready"] == true).then_some(())?;
                let provider_id = mm["spec"]["providerID"].as_str()?;
                let hostname = mm["status"]["hostname"].as_str()?;
                let node = self.kube.get(&resources::NODES, None, hostname).ok()?;
                (node["spec"]["providerID"] == provider_id).then_some(())?;
            }
            Some(())
        });
        self.check_invariants("all ready");
        let state = self.sim.state();
        let owned: BTreeSet<String> = state["machines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| !m["owner"].is_null())
            .map(|m| string(&m["system_id"]))
            .collect();
        let recorded: BTreeSet<String> = names
            .iter()
            .map(|n| string(&self.get(&resources::MAAS_MACHINES, n).unwrap()["spec"]["systemID"]))
            .collect();
        assert_eq!(
            recorded.len(),
            names.len(),
            "two MaasMachines share a MAAS machine"
        );
        assert_eq!(
            owned, recorded,
            "MAAS holds exactly one machine per MaasMachine"
        );
        for id in &owned {
            let m = self.sim.machine_state(id);
            assert_eq!(m["status_name"], "Deployed", "{id}");
        }
    }

    fn control_plane_ips(&self) -> BTreeSet<String> {
        CONTROL_PLANE
            .iter()
            .filter_map(|n| self.get(&resources::MAAS_MACHINES, n))
            .flat_map(|mm| {
                mm["status"]["addresses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|a| a["type"] == "ExternalIP")
            .map(|a| string(&a["address"]))
            .collect()
    }

    fn dns_records(&self) -> Vec<Value> {
        self.sim.state()["dns_resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| string(&d["fqdn"]).starts_with(&format!("{CLUSTER}-")))
            .cloned()
            .collect()
    }

    fn owned_hosts(&self) -> usize {
        self.sim.state()["machines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| !m["owner"].is_null())
            .count()
    }

    /// See [`MAAS_WRITE_LATENCY_MS`].
    fn slow_maas_writes(&self) {
        for (method, endpoint, op) in [
            ("POST", "machines/", Some("allocate")),
            ("POST", "machines/{id}/", Some("deploy")),
            ("POST", "machines/{id}/", Some("release")),
            ("POST", "dnsresources/", None),
            ("POST", "dnsresourcerecords/", None),
            ("PUT", "dnsresources/{id}/", None),
            ("DELETE", "dnsresources/{id}/", None),
        ] {
            let mut fault = json!({"method": method, "endpoint": endpoint, "latency_ms": MAAS_WRITE_LATENCY_MS});
            if let Some(op) = op {
                fault["op"] = json!(op);
            }
            self.sim.set_fault(fault);
        }
    }

    /// Log lines of every capmaas run so far that contain `needle`.
    fn log_count(&self, needle: &str) -> usize {
        (1..=self.runs)
            .map(|run| {
                let log = self.logs.join(format!("capmaas-{run:02}.log"));
                let text = std::fs::read_to_string(log).unwrap_or_default();
                text.lines().filter(|l| l.contains(needle)).count()
            })
            .sum()
    }

    fn last_log_tail(&self) -> String {
        let log = self.logs.join(format!("capmaas-{:02}.log", self.runs));
        support::story::tail(&log, 60)
    }
}

impl Drop for Crash {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- capmaas log tail (run {}) ---\n{}",
                self.runs,
                self.last_log_tail()
            );
        }
    }
}

/// A namespace, a simulator whose hostnames start with `prefix` (Nodes are
/// cluster-scoped), the node helper, and the Cluster, its MaasCluster and
/// the workload kubeconfig Secret; capmaas not started.
fn setup(prefix: &str) -> (Crash, NodeHelper) {
    let cp = support::control_plane();
    let ns = cp.new_namespace(prefix);
    let mut inventory = support::maas_sim::story_inventory();
    for machine in inventory["machines"].as_array_mut().unwrap() {
        let hostname = string(&machine["hostname"]);
        machine["hostname"] = json!(format!("{prefix}-{hostname}"));
    }
    let sim = MaasSim::start(Some(&inventory));
    // Long enough that kills land while machines deploy and release.
    sim.set_timings(3.0, 1.0);
    let base = sim.base.clone();
    let nodes = NodeHelper::start(cp, move || sim_views(&base));
    let logs = support::tempdir(&format!("capmaas-{prefix}")).unwrap();
    println!("crash: capmaas logs in {}", logs.display());
    let crash = Crash {
        cp,
        kube: support::story::kube_client(cp),
        ns,
        sim,
        logs,
        runs: 0,
        capmaas: None,
        seen: Seen::default(),
        cluster_marked_provisioned: false,
        tearing_down: false,
        maas_cluster_deleted: false,
    };

    // Cluster API's objects, as `kubectl apply` of a cluster template would
    // leave them.
    crash.apply(&json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": crash.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster_uid = crash.uid(&resources::CLUSTERS, CLUSTER);
    crash.apply(&support::capi::kubeconfig_secret(cp, &crash.ns, CLUSTER));
    crash.apply(&json!({
        "apiVersion": INFRA, "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": crash.ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": CLUSTER, "uid": cluster_uid,
                                          "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"dnsDomain": "k8s.maas"},
    }));
    (crash, nodes)
}

#[test]
fn kill_9_at_random_points_never_leaks_or_doubles_a_machine() {
    let (mut rng, seed) = Rng::seeded();
    println!("crash: seed {seed} (replay with CAPMAAS_CRASH_SEED={seed})");
    let (mut crash, _nodes) = setup("crash");
    for name in CONTROL_PLANE {
        crash.add_machine(name, true);
    }
    crash.check_invariants("before the first start");
    crash.slow_maas_writes();

    // Provisioning, killed again and again; the workers arrive one by one
    // between kills, so that allocations and deployments overlap the kills
    // throughout.
    const KILLS: usize = 12;
    for i in 0..KILLS {
        if i % 2 == 1 && i / 2 < WORKERS.len() {
            crash.add_machine(WORKERS[i / 2], false);
        }
        // Some runs elect a leader first, as deployed.
        let leader_elect = i % 4 == 2;
        crash.kill_once_with(
            &format!("provisioning, kill {}/{KILLS}", i + 1),
            leader_elect,
            &mut rng,
        );
    }
    crash.start_capmaas();
    let all: Vec<&str> = CONTROL_PLANE
        .iter()
        .chain(WORKERS.iter())
        .copied()
        .collect();
    crash.wait_ready(&all, 150);
    let cp_ips = crash.control_plane_ips();
    assert_eq!(cp_ips.len(), 3, "{cp_ips:?}");
    support::eventually(60, "the record holds the 3 control-plane IPs", || {
        crash.assert_running();
        let records = crash.dns_records();
        let ips: BTreeSet<String> = records
            .first()?
            .get("ip_addresses")?
            .as_array()?
            .iter()
            .map(string)
            .collect();
        (records.len() == 1 && ips == cp_ips).then_some(())
    });
    let ready_ids: HashMap<String, String> = all
        .iter()
        .map(|n| {
            let mm = crash.get(&resources::MAAS_MACHINES, n).unwrap();
            (n.to_string(), string(&mm["spec"]["systemID"]))
        })
        .collect();
    println!(
        "crash: all 8 ready after {} runs; allocate calls: {}",
        crash.runs,
        crash.sim.call_count("POST machines/ op=allocate")
    );

    // Scale workers 5 → 3, killed around the scale-down.
    crash.kill_capmaas();
    crash.remove_machine("w-4");
    crash.remove_machine("w-5");
    crash.check_invariants("scale-down requested");
    for i in 1..=4 {
        crash.kill_once_with(&format!("scale-down, kill {i}/4"), i % 2 == 1, &mut rng);
    }
    crash.start_capmaas();
    support::eventually(90, "w-4 and w-5 gone and released", || {
        crash.assert_running();
        let gone = ["w-4", "w-5"]
            .iter()
            .all(|n| crash.get(&resources::MAAS_MACHINES, n).is_none());
        (gone && crash.owned_hosts() == 6).then_some(())
    });
    let kept: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| !["w-4", "w-5"].contains(n))
        .collect();
    crash.wait_ready(&kept, 60);
    for name in &kept {
        let mm = crash.get(&resources::MAAS_MACHINES, name).unwrap();
        assert_eq!(string(&mm["spec"]["systemID"]), ready_ids[*name], "{name}");
    }
    for name in ["w-4", "w-5"] {
        let m = crash.sim.machine_state(&ready_ids[name]);
        assert!(m["owner"].is_null(), "{name} not released: {m}");
    }

    // Delete the cluster, killed in the middle of tearing it down. Cluster
    // API deletes the Machines first and the MaasCluster once they are gone.
    crash.kill_capmaas();
    for name in &kept {
        crash.remove_machine(name);
    }
    crash.tearing_down = true;
    crash.check_invariants("deletion requested");
    for i in 1..=6 {
        crash.kill_once(&format!("deletion, kill {i}/6"), &mut rng);
        if crash.maas_cluster_deleted && crash.list(&resources::MAAS_CLUSTERS).is_empty() {
            break;
        }
    }
    crash.start_capmaas();
    support::eventually(120, "the cluster torn down", || {
        crash.assert_running();
        crash.play_cluster_api();
        let left = crash.list(&resources::MAAS_MACHINES).len()
            + crash.list(&resources::MAAS_CLUSTERS).len();
        (left == 0 && crash.owned_hosts() == 0 && crash.dns_records().is_empty()).then_some(())
    });
    crash.check_invariants("after teardown");
    assert!(
        crash.sim.state()["machines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["agent_name"] == "" && m["owner"].is_null()),
        "nothing allocated in MAAS"
    );
    // Cluster API deletes the Cluster once its infrastructure is gone.
    crash.delete("clusters.cluster.x-k8s.io", CLUSTER);
    crash.kill_capmaas();
    println!(
        "crash: {} capmaas runs, {} observations, {} allocations found again by agent_name after a kill, {} allocate calls for 8 MaasMachines, seed {seed}",
        crash.runs,
        crash.seen.observations,
        crash.log_count("already allocated to it"),
        crash.sim.call_count("POST machines/ op=allocate"),
    );
}

/// A MaasCluster deleted while its control-plane MaasMachines are still
/// being deleted (capmaas down when both deletions arrive, e.g. restarted
/// by a crash or an upgrade, or a user deleting the MaasCluster by hand).
/// Once a deadlock: the machines waited for the cluster to take their
/// addresses out of the DNS record, the cluster in deletion waited for the
/// machines to go and never touched the record again (fixed in fc0be17).
#[test]
fn cluster_and_control_plane_deleted_together_while_capmaas_is_down() {
    let (mut crash, _nodes) = setup("dnsdl");
    crash.add_machine("cp-a", true);
    crash.start_capmaas();
    crash.wait_ready(&["cp-a"], 120);
    support::eventually(60, "cp-a in the DNS record", || {
        crash.assert_running();
        let records = crash.dns_records();
        let ips = records.first()?["ip_addresses"].as_array()?.len();
        (ips == 1).then_some(())
    });
    crash.kill_capmaas();
    crash.remove_machine("cp-a");
    crash.delete("maasclusters", CLUSTER);
    crash.start_capmaas();
    support::eventually(90, "the cluster torn down", || {
        crash.assert_running();
        let left = crash.list(&resources::MAAS_MACHINES).len()
            + crash.list(&resources::MAAS_CLUSTERS).len();
        (left == 0 && crash.owned_hosts() == 0 && crash.dns_records().is_empty()).then_some(())
    });
}

/// capmaas released a machine (MAAS did it, the answer was lost) and died
/// before removing the finalizer. While it was down, another MAAS user (or
/// another capmaas, for another cluster, with the same MAAS account) took
/// the freed machine. Restarted, capmaas must not release the recorded
/// system ID again: the machine is no longer ours.
#[test]
fn a_release_repeated_after_a_crash_never_frees_a_machine_someone_else_took() {
    let (mut crash, _nodes) = setup("steal");
    crash.sim.set_timings(1.0, 0.2);
    crash.add_machine("w-1", false);
    crash.start_capmaas();
    crash.wait_ready(&["w-1"], 120);
    let system_id =
        string(&crash.get(&resources::MAAS_MACHINES, "w-1").unwrap()["spec"]["systemID"]);

    // Every release is carried out by MAAS, its answer lost: the finalizer
    // stays while the machine goes back to the pool.
    crash.sim.set_fault(json!({"method": "POST", "endpoint": "machines/{id}/", "op": "release", "drop_after": true}));
    crash.remove_machine("w-1");
    support::eventually(60, "the machine released in MAAS", || {
        crash.assert_running();
        let m = crash.sim.machine_state(&system_id);
        (m["status_name"] == "Ready").then_some(())
    });
    assert!(
        crash.get(&resources::MAAS_MACHINES, "w-1").is_some(),
        "the finalizer went although no release was acknowledged"
    );
    crash.kill_capmaas();
    crash.sim.clear_faults();

    // Someone else takes the machine meanwhile.
    let taken = crash
        .sim
        .client()
        .allocate(&capmaas::maas::AllocateRequest {
            system_id: Some(system_id.clone()),
            agent_name: Some("another-tenant".into()),
            ..Default::default()
        })
        .expect("allocating the free machine");
    assert_eq!(taken.system_id, system_id);

    crash.start_capmaas();
    support::eventually(90, "w-1 gone", || {
        crash.assert_running();
        crash
            .get(&resources::MAAS_MACHINES, "w-1")
            .is_none()
            .then_some(())
    });
    let m = crash.sim.machine_state(&system_id);
    assert!(
        m["agent_name"] == "another-tenant" && !m["owner"].is_null(),
        "capmaas released a machine another user had allocated: {m}"
    );
}
