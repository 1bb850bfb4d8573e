//! Cluster API conformance with the REAL core manager: the README story run by
//! `cluster-api-manager` v1.13 (tests/support/capi.rs), `capmaas` (this
//! crate's binary) and `maas-sim`, on the real test control plane.
//!
//! Machine-based control plane: the Cluster has no controlPlaneRef, the three
//! control-plane Machines carry the control-plane label, and every Machine
//! (and the MachineDeployment template) names a pre-made bootstrap Secret in
//! `bootstrap.dataSecretName`. The `<cluster>-kubeconfig` Secret points the
//! "workload cluster" at the same control plane, where the node helper plays
//! kubelet (tests/support/nodes.rs).
//!
//!     cargo test --test conformance_capi -- --nocapture
//!
//! Logs of both controllers are kept in the control plane's directory and
//! their tails are printed when an assertion fails.

mod support;

use capmaas::maas::MaasApi;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use capmaas::maas::{self, MachineFilter, MachineStatus};
use serde_json::{json, Value};
use support::capi::{self, CapiManager, CAPI_API_VERSION};
use support::maas_sim::MaasSim;
use support::objects::{condition, condition_is, label, owner};
use support::story::{tail, Capmaas};
use support::ControlPlane;

const CLUSTER: &str = "c1";
const MD: &str = "c1-md-0";
const BOOTSTRAP: &str = "c1-bootstrap";
const CP_MACHINES: [&str; 3] = ["c1-cp-0", "c1-cp-1", "c1-cp-2"];
const WORKERS: usize = 5;
const WORKERS_AFTER_SCALE_DOWN: usize = 2;
const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
const INFRA_API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

const CLUSTERS: &str = "clusters.v1beta2.cluster.x-k8s.io";
const MACHINES: &str = "machines.v1beta2.cluster.x-k8s.io";
const MACHINE_SETS: &str = "machinesets.v1beta2.cluster.x-k8s.io";
const MACHINE_DEPLOYMENTS: &str = "machinedeployments.v1beta2.cluster.x-k8s.io";
const MAAS_CLUSTERS: &str = "maasclusters.v1beta1.infrastructure.cluster.x-k8s.io";
const MAAS_MACHINES: &str = "maasmachines.v1beta1.infrastructure.cluster.x-k8s.io";
const MAAS_MACHINE_TEMPLATES: &str = "maasmachinetemplates.v1beta1.infrastructure.cluster.x-k8s.io";

/// Generous: Cluster API v1.13 rate-limits reconciles to one per second per
/// object, and the simulator takes its configured deploy time per machine.
const PROVISION_SECONDS: u64 = 300;

/// Everything a failing wait needs to say what was going on.
struct Story {
    cp: &'static ControlPlane,
    ns: String,
    capi: CapiManager,
    capmaas: Capmaas,
    maas: maas::Client,
}

impl Story {
    fn get(&self, resource: &str, name: &str) -> Option<Value> {
        let out = self
            .cp
            .try_kubectl(&["get", resource, name, "-n", &self.ns, "-o", "json"], "");
        match out {
            Ok(out) => Some(serde_json::from_str(&out).unwrap()),
            Err(e) if e.contains("NotFound") || e.contains("not found") => None,
            Err(e) => panic!("kubectl get {resource} {name}: {e}"),
        }
    }

    fn list(&self, resource: &str, selector: Option<&str>) -> Vec<Value> {
        let mut args = vec!["get", resource, "-n", &self.ns, "-o", "json"];
        if let Some(s) = selector {
            args.extend(["-l", s]);
        }
        let out: Value = serde_json::from_str(&self.cp.kubectl(&args)).unwrap();
        out["items"].as_array().cloned().unwrap_or_default()
    }

    fn apply(&self, obj: &Value) {
        self.cp
            .kubectl_stdin(&["apply", "-f", "-"], &obj.to_string());
    }

    fn patch_merge(&self, resource: &str, name: &str, patch: &Value) {
        self.cp.kubectl(&[
            "patch",
            resource,
            name,
            "-n",
            &self.ns,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
    }

    /// Both controllers must still be up while we wait on them.
    fn check_processes(&mut self) {
        self.capi.assert_running();
        self.capmaas.assert_running();
    }

    /// Polls `check` once a second; on timeout panics with the state of the
    /// namespace and both controllers' log tails.
    fn wait<T>(&mut self, seconds: u64, what: &str, check: impl FnMut(&Story) -> Option<T>) -> T {
        match self.try_wait(seconds, what, check) {
            Some(v) => v,
            None => panic!(
                "timed out after {seconds}s waiting for {what}\n{}",
                self.diagnostics()
            ),
        }
    }

    /// As [`Story::wait`], but `None` on timeout.
    fn try_wait<T>(
        &mut self,
        seconds: u64,
        what: &str,
        mut check: impl FnMut(&Story) -> Option<T>,
    ) -> Option<T> {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(seconds);
        loop {
            self.check_processes();
            if let Some(v) = check(self) {
                println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
                return Some(v);
            }
            if Instant::now() > deadline {
                println!("[{:>6.1}s] NOT: {what}", started.elapsed().as_secs_f64());
                return None;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// The objects, their not-True conditions and both controllers' log tails.
    fn diagnostics(&self) -> String {
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
            "--- objects:\n{}\n--- not-True conditions:\n{}\n--- cluster-api manager ({}):\n{}\n--- capmaas ({}):\n{}",
            state.unwrap_or_else(|e| e),
            self.unhappy_conditions(),
            self.capi.log.display(),
            self.capi.log_tail(30),
            self.capmaas.log.display(),
            tail(&self.capmaas.log, 30)
        )
    }

    /// Every condition of the story's objects that is not True (Paused and
    /// the negative polarity ones aside), plus the API server DNS record.
    fn unhappy_conditions(&self) -> String {
        let mut out = String::new();
        for resource in [CLUSTERS, MACHINES, MAAS_CLUSTERS, MAAS_MACHINES] {
            for obj in self.list(resource, None) {
                for c in obj["status"]["conditions"].as_array().into_iter().flatten() {
                    let negative = [
                        "Paused",
                        "Deleting",
                        "Updating",
                        "RollingOut",
                        "ScalingUp",
                        "ScalingDown",
                        "Remediating",
                    ];
                    if c["status"] != "True" && !negative.iter().any(|n| c["type"] == *n) {
                        out.push_str(&format!(
                            "{} {}: {} {} {} {}\n",
                            obj["kind"].as_str().unwrap_or_default(),
                            name(&obj),
                            c["type"],
                            c["status"],
                            c["reason"],
                            c["message"]
                        ));
                    }
                }
            }
        }
        if let Some(mc) = self.get(MAAS_CLUSTERS, CLUSTER) {
            if let Some(host) = mc["spec"]["controlPlaneEndpoint"]["host"].as_str() {
                out.push_str(&format!(
                    "DNS record {host}: {:?}\n",
                    self.maas.dns_resources(host)
                ));
            }
        }
        out
    }

    fn maas_machines(&self) -> Vec<maas::Machine> {
        self.maas
            .machines(&MachineFilter::default())
            .expect("listing MAAS machines")
    }
}

fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

fn infra_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": INFRA_GROUP, "kind": kind, "name": name})
}

fn control_plane_objects(ns: &str, machine: &str) -> [Value; 2] {
    let maas_machine = json!({
        "apiVersion": INFRA_API_VERSION,
        "kind": "MaasMachine",
        "metadata": {"name": machine, "namespace": ns},
        "spec": {"image": "ubuntu/jammy", "minCPU": 4, "minMemory": 8192, "resourcePool": "cp-pool"},
    });
    let machine = json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "Machine",
        "metadata": {
            "name": machine,
            "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER, "cluster.x-k8s.io/control-plane": ""},
        },
        "spec": {
            "clusterName": CLUSTER,
            "version": "v1.34.4",
            "bootstrap": {"dataSecretName": BOOTSTRAP},
            "infrastructureRef": infra_ref("MaasMachine", machine),
            "deletion": {"nodeDeletionTimeoutSeconds": 10},
        },
    });
    [maas_machine, machine]
}

/// Fully specified, so the story does not lean on defaulting by accident
/// (the webhooks are there; conformance_capi_manager proves they work).
fn machine_deployment(ns: &str, replicas: usize) -> Value {
    let labels =
        json!({"cluster.x-k8s.io/cluster-name": CLUSTER, "cluster.x-k8s.io/deployment-name": MD});
    json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": MD, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "rollout": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": CLUSTER,
                    "version": "v1.34.4",
                    "bootstrap": {"dataSecretName": BOOTSTRAP},
                    "infrastructureRef": infra_ref("MaasMachineTemplate", MD),
                    "deletion": {"nodeDeletionTimeoutSeconds": 10},
                },
            },
        },
    })
}

#[test]
fn readme_story_with_real_cluster_api_core() {
    let test_started = Instant::now();
    let cp = support::control_plane();
    // support::control_plane() installs this project's CRDs too.
    let capi = CapiManager::start(cp);
    println!(
        "cluster-api manager {} up, log {}",
        capi.version,
        capi.log.display()
    );
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "5"]);
    let maas = sim.client();
    let capmaas = Capmaas::start(
        &support::story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        cp.dir.join("capmaas.log"),
        &[],
    );
    println!("capmaas up, log {}", capmaas.log.display());
    let nodes = support::story::start_node_helper(cp, &sim);
    let ns = cp.new_namespace("conformance");
    let mut story = Story {
        cp,
        ns: ns.clone(),
        capi,
        capmaas,
        maas,
    };

    // --- The objects a user writes (kubeconfig Secret before the Cluster:
    // the manager retries a missing one only every 30 s).
    story.apply(&capi::kubeconfig_secret(cp, &ns, CLUSTER));
    story.apply(&capi::bootstrap_secret(&ns, BOOTSTRAP, CLUSTER));
    story.apply(&json!({
        "apiVersion": INFRA_API_VERSION,
        "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"dnsDomain": "k8s.maas"},
    }));
    story.apply(&json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"infrastructureRef": infra_ref("MaasCluster", CLUSTER)},
    }));
    for machine in CP_MACHINES {
        for obj in control_plane_objects(&ns, machine) {
            story.apply(&obj);
        }
    }
    story.apply(&json!({
        "apiVersion": INFRA_API_VERSION,
        "kind": "MaasMachineTemplate",
        "metadata": {"name": MD, "namespace": ns},
        "spec": {"template": {"spec": {"image": "ubuntu/jammy", "minCPU": 8, "minMemory": 16384, "resourcePool": "worker-pool",
                                       "nodeReuse": true}}},
    }));
    story.apply(&machine_deployment(&ns, WORKERS));

    // --- Provisioning: every Machine Running with a Node.
    let total = CP_MACHINES.len() + WORKERS;
    story.wait(
        PROVISION_SECONDS,
        "every Machine Running with a nodeRef",
        |s| {
            let machines = s.list(MACHINES, None);
            let running = machines
                .iter()
                .filter(|m| {
                    m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string()
                })
                .count();
            (machines.len() == total && running == total).then_some(())
        },
    );
    // Ready mirrors the MaasMachine's Ready (InfrastructureReady) and the
    // Node's health (NodeHealthy).
    // A Machine that never gets Ready is recorded, and the story goes on, so
    // one run reports every finding.
    let mut violations: Vec<String> = Vec::new();
    let all_ready = story.try_wait(60, "every Machine Ready", |s| {
        s.list(MACHINES, None)
            .iter()
            .all(|m| condition_is(m, "Ready", "True"))
            .then_some(())
    });
    if all_ready.is_none() {
        violations.push(format!(
            "Machines not Ready after 60s:\n{}",
            story.unhappy_conditions()
        ));
    }
    let machines = story.list(MACHINES, None);

    // The Cluster took over what capmaas published.
    let cluster = story.wait(
        60,
        "Cluster ControlPlaneInitialized and RemoteConnectionProbe True",
        |s| {
            let c = s.get(CLUSTERS, CLUSTER)?;
            (condition_is(&c, "ControlPlaneInitialized", "True")
                && condition_is(&c, "RemoteConnectionProbe", "True"))
            .then_some(c)
        },
    );
    let maas_cluster = story.get(MAAS_CLUSTERS, CLUSTER).expect("MaasCluster");
    let endpoint = &maas_cluster["spec"]["controlPlaneEndpoint"];
    assert!(
        endpoint["host"].as_str().is_some_and(|h| !h.is_empty()),
        "{maas_cluster:#}"
    );
    assert_eq!(
        &cluster["spec"]["controlPlaneEndpoint"], endpoint,
        "Cluster copies the MaasCluster endpoint"
    );
    assert_eq!(
        cluster["status"]["initialization"]["infrastructureProvisioned"], true,
        "{cluster:#}"
    );
    assert!(
        condition_is(&cluster, "InfrastructureReady", "True"),
        "{cluster:#}"
    );
    assert_eq!(
        label(&maas_cluster, "cluster.x-k8s.io/cluster-name"),
        Some(CLUSTER)
    );
    let cluster_owner =
        owner(&maas_cluster, "Cluster").unwrap_or_else(|| panic!("{maas_cluster:#}"));
    assert_eq!(cluster_owner["name"], CLUSTER);
    assert_eq!(cluster_owner["uid"], cluster["metadata"]["uid"]);
    // A limitation of Cluster API v1.13, not of the provider: with no
    // controlPlaneRef there is no control-plane object to read, and the
    // Cluster controller reports ControlPlaneAvailable Unknown/InternalError
    // ("Please check controller logs for errors"), so the Cluster's own
    // Available never becomes True for a machine-based control plane. Pinned
    // here so a Cluster API bump that changes it shows up.
    let cp_available =
        condition(&cluster, "ControlPlaneAvailable").unwrap_or_else(|| panic!("{cluster:#}"));
    assert_eq!(
        (&cp_available["status"], &cp_available["reason"]),
        (&json!("Unknown"), &json!("InternalError")),
        "{cp_available}"
    );
    assert!(!condition_is(&cluster, "Available", "True"), "{cluster:#}");

    // Every Machine: providerID maas:///<zone>/<system-id> of its MAAS
    // machine, the Node carries the same providerID, and its MaasMachine is
    // owned by it and labelled with the cluster name.
    let deployed: BTreeMap<String, maas::Machine> = story
        .maas_machines()
        .into_iter()
        .filter(|m| m.status == MachineStatus::Deployed)
        .map(|m| (m.system_id.clone(), m))
        .collect();
    assert_eq!(
        deployed.len(),
        total,
        "one deployed MAAS machine per Machine"
    );
    let mut system_ids: BTreeMap<String, String> = BTreeMap::new(); // Machine name → system_id
    let mut hostnames: BTreeMap<String, String> = BTreeMap::new(); // Machine name → Node name
    for machine in &machines {
        let mname = name(machine).to_string();
        let mm = story
            .get(MAAS_MACHINES, &mname)
            .unwrap_or_else(|| panic!("MaasMachine {mname}"));
        let system_id = mm["spec"]["systemID"]
            .as_str()
            .unwrap_or_else(|| panic!("{mm:#}"))
            .to_string();
        let host = deployed
            .get(&system_id)
            .unwrap_or_else(|| panic!("{system_id} is not deployed in MAAS"));
        let provider_id = format!("maas:///{}/{}", host.zone, host.system_id);
        assert_eq!(machine["spec"]["providerID"], provider_id, "{machine:#}");
        assert_eq!(mm["spec"]["providerID"], provider_id, "{mm:#}");
        let node_name = machine["status"]["nodeRef"]["name"].as_str().unwrap();
        assert_eq!(
            node_name, host.hostname,
            "the Node is the one registered for the MAAS hostname"
        );
        let node: Value =
            serde_json::from_str(&cp.kubectl(&["get", "node", node_name, "-o", "json"])).unwrap();
        assert_eq!(node["spec"]["providerID"], provider_id, "{node:#}");
        // Cluster API claimed the Node: its annotations, and the
        // uninitialized taint the node helper registered with is gone.
        assert_eq!(
            node["metadata"]["annotations"]["cluster.x-k8s.io/machine"], mname,
            "{node:#}"
        );
        assert!(
            !node["spec"]["taints"].as_array().is_some_and(|t| t
                .iter()
                .any(|t| t["key"] == "node.cluster.x-k8s.io/uninitialized")),
            "{node:#}"
        );
        assert_eq!(
            label(&mm, "cluster.x-k8s.io/cluster-name"),
            Some(CLUSTER),
            "{mm:#}"
        );
        let machine_owner = owner(&mm, "Machine").unwrap_or_else(|| panic!("{mm:#}"));
        assert_eq!(machine_owner["name"], mname);
        assert_eq!(machine_owner["uid"], machine["metadata"]["uid"]);
        assert_eq!(machine_owner["controller"], true);
        assert!(
            owner(&mm, "MachineSet").is_none(),
            "the MachineSet owner is swapped for the Machine: {mm:#}"
        );
        if label(machine, "cluster.x-k8s.io/deployment-name") == Some(MD) {
            assert_eq!(
                label(&mm, "cluster.x-k8s.io/deployment-name"),
                Some(MD),
                "{mm:#}"
            );
            assert_eq!(
                mm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"], MD,
                "{mm:#}"
            );
            assert!(label(&mm, "cluster.x-k8s.io/set-name").is_some(), "{mm:#}");
        }
        assert!(condition_is(machine, "NodeHealthy", "True"), "{machine:#}");
        let bootstrap =
            condition(machine, "BootstrapConfigReady").unwrap_or_else(|| panic!("{machine:#}"));
        assert_eq!(
            (&bootstrap["status"], &bootstrap["reason"]),
            (&json!("True"), &json!("DataSecretProvided")),
            "dataSecretName without a bootstrap provider"
        );
        hostnames.insert(mname.clone(), host.hostname.clone());
        system_ids.insert(mname, system_id);
    }
    let workers: Vec<&Value> = machines
        .iter()
        .filter(|m| label(m, "cluster.x-k8s.io/deployment-name") == Some(MD))
        .collect();
    assert_eq!(workers.len(), WORKERS);
    let dns_fqdn = endpoint["host"].as_str().unwrap().to_string();
    let records = story.maas.dns_resources(&dns_fqdn).unwrap();
    assert_eq!(
        records.len(),
        1,
        "one DNS record for {dns_fqdn}: {records:?}"
    );
    println!(
        "provisioned: {} Machines, Nodes registered {:?}",
        machines.len(),
        nodes.registered()
    );

    // --- Scale the MachineDeployment down to 2: three workers go, their MAAS
    // machines are released, their MaasMachines are gone.
    story.patch_merge(
        MACHINE_DEPLOYMENTS,
        MD,
        &json!({"spec": {"replicas": WORKERS_AFTER_SCALE_DOWN}}),
    );
    let worker_selector = format!("cluster.x-k8s.io/deployment-name={MD}");
    let mut remaining = story.wait(
        PROVISION_SECONDS,
        "the MachineDeployment at 2 workers",
        |s| {
            let ms = s.list(MACHINES, Some(&worker_selector));
            let mms = s.list(MAAS_MACHINES, Some(&worker_selector));
            (ms.len() == WORKERS_AFTER_SCALE_DOWN && mms.len() == WORKERS_AFTER_SCALE_DOWN).then(
                || {
                    ms.iter()
                        .map(|m| name(m).to_string())
                        .collect::<BTreeSet<String>>()
                },
            )
        },
    );
    let removed: Vec<String> = workers
        .iter()
        .map(|m| name(m).to_string())
        .filter(|n| !remaining.contains(n))
        .collect();
    assert_eq!(removed.len(), WORKERS - WORKERS_AFTER_SCALE_DOWN);
    let released_ids: Vec<String> = removed.iter().map(|n| system_ids[n].clone()).collect();
    story.wait(60, "the scaled-down workers' MAAS machines released", |s| {
        let all = s.maas_machines();
        released_ids
            .iter()
            .all(|id| {
                all.iter().any(|m| {
                    &m.system_id == id && m.status == MachineStatus::Ready && m.owner.is_none()
                })
            })
            .then_some(())
    });
    let md = story.get(MACHINE_DEPLOYMENTS, MD).unwrap();
    assert_eq!(md["spec"]["replicas"], WORKERS_AFTER_SCALE_DOWN);
    // Cluster API drains and deletes the Nodes of scaled-down Machines itself
    // (after their MaasMachines are gone); the others stay.
    let node_exists = |n: &String| cp.try_kubectl(&["get", "node", n.as_str()], "").is_ok();
    story.wait(
        60,
        "the scaled-down workers' Nodes deleted by Cluster API",
        |_| {
            removed
                .iter()
                .all(|m| !node_exists(&hostnames[m]))
                .then_some(())
        },
    );
    assert!(remaining.iter().all(|m| node_exists(&hostnames[m])));

    // --- Node reuse (issue 23 item 2; the template has nodeReuse): the
    // three released machines kept their disks and are recorded for this
    // MachineDeployment; scaled up again, the new worker takes one back.
    let owner = format!("MachineDeployment/{MD}");
    let state = sim.state();
    for id in &released_ids {
        let host = state["machines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["system_id"] == id.as_str())
            .unwrap();
        let release = &host["last_release"];
        assert_eq!(
            release["erase"], false,
            "{id} released without erase: {release}"
        );
        assert!(
            release["comment"]
                .as_str()
                .is_some_and(|c| c.ends_with(&format!("node reuse by {owner} of {ns}/{CLUSTER}"))),
            "{release}"
        );
    }
    let reusable = story.get(MAAS_CLUSTERS, CLUSTER).unwrap()["status"]["reusableMachines"].clone();
    let recorded: BTreeSet<String> = reusable
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(
        recorded,
        released_ids.iter().cloned().collect(),
        "{reusable:#}"
    );
    assert!(reusable
        .as_object()
        .unwrap()
        .values()
        .all(|o| o == owner.as_str()));
    let scaling_up = Instant::now();
    story.patch_merge(
        MACHINE_DEPLOYMENTS,
        MD,
        &json!({"spec": {"replicas": WORKERS_AFTER_SCALE_DOWN + 1}}),
    );
    let (added, reused) = story.wait(
        PROVISION_SECONDS,
        "a third worker Running on a reused machine",
        |s| {
            let machine = s
                .list(MACHINES, Some(&worker_selector))
                .into_iter()
                .find(|m| !remaining.contains(name(m)))?;
            (machine["status"]["phase"] == "Running").then_some(())?;
            let mm = s.get(MAAS_MACHINES, name(&machine))?;
            let reused = mm["status"]["reusedMachine"].as_str()?.to_string();
            Some((name(&machine).to_string(), reused))
        },
    );
    let mm = story.get(MAAS_MACHINES, &added).unwrap();
    assert_eq!(mm["spec"]["systemID"], reused.as_str(), "{mm:#}");
    assert!(
        released_ids.contains(&reused),
        "{reused} was released for reuse"
    );
    let reusable = story.get(MAAS_CLUSTERS, CLUSTER).unwrap()["status"]["reusableMachines"].clone();
    assert!(reusable.get(&reused).is_none(), "{reusable:#}");
    assert_eq!(
        reusable.as_object().map_or(0, |m| m.len()),
        2,
        "{reusable:#}"
    );
    println!(
        "scaled 2 -> 3 in {:.1}s: {added} took back MAAS machine {reused}, not erased",
        scaling_up.elapsed().as_secs_f64()
    );
    hostnames.insert(added.clone(), story.maas.machine(&reused).unwrap().hostname);
    system_ids.insert(added.clone(), reused);
    remaining.insert(added);

    // --- Paused: with Cluster spec.paused, capmaas leaves MaasMachines
    // alone, even one being deleted: no release, finalizer kept. (This is
    // what `clusterctl move` relies on: it pauses the Cluster, then deletes
    // the source objects; a provider acting on them would release machines
    // that now belong to the target cluster.) Deleting a provisioned
    // MaasMachine behind Cluster API's back puts its Machine into a failure
    // state ("Machine infrastructure reference has been deleted after
    // provisioning was completed"), so this runs last, before the Cluster
    // goes.
    story.patch_merge(CLUSTERS, CLUSTER, &json!({"spec": {"paused": true}}));
    story.wait(60, "every MaasMachine reporting Paused", |s| {
        s.list(MAAS_MACHINES, None)
            .iter()
            .all(|mm| condition_is(mm, "Paused", "True"))
            .then_some(())
    });
    let paused_victim = remaining.iter().next().unwrap().clone();
    let victim_id = system_ids[&paused_victim].clone();
    cp.kubectl(&[
        "delete",
        MAAS_MACHINES,
        &paused_victim,
        "-n",
        &ns,
        "--wait=false",
    ]);
    // A bounded window of several capmaas reconcile opportunities; the
    // positive half (release after unpausing) follows.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(1));
        let mm = story
            .get(MAAS_MACHINES, &paused_victim)
            .expect("a paused MaasMachine keeps its finalizer");
        assert!(mm["metadata"]["deletionTimestamp"].is_string());
        assert!(condition_is(&mm, "Paused", "True"), "{mm:#}");
        let host = story.maas.machine(&victim_id).unwrap();
        assert_eq!(
            host.status,
            MachineStatus::Deployed,
            "capmaas released a paused machine"
        );
    }
    story.patch_merge(CLUSTERS, CLUSTER, &json!({"spec": {"paused": false}}));
    story.wait(120, "the unpaused MaasMachine released and gone", |s| {
        let gone = s.get(MAAS_MACHINES, &paused_victim).is_none();
        let host = s.maas.machine(&victim_id).ok()?;
        (gone && host.owner.is_none()).then_some(())
    });

    // --- Delete the Cluster: Cluster API deletes every Machine (and so every
    // MaasMachine), then the MaasCluster; capmaas releases every machine and
    // deletes the DNS record.
    cp.kubectl(&["delete", CLUSTERS, CLUSTER, "-n", &ns, "--wait=false"]);
    story.wait(PROVISION_SECONDS, "the Cluster gone", |s| {
        s.get(CLUSTERS, CLUSTER).is_none().then_some(())
    });
    for resource in [
        MACHINES,
        MACHINE_SETS,
        MACHINE_DEPLOYMENTS,
        MAAS_MACHINES,
        MAAS_CLUSTERS,
    ] {
        let left = story.list(resource, None);
        assert!(
            left.is_empty(),
            "{resource} left after Cluster deletion: {:?}",
            left.iter().map(name).collect::<Vec<_>>()
        );
    }
    let used: BTreeSet<&String> = system_ids.values().collect();
    story.wait(60, "every MAAS machine of the story released", |s| {
        s.maas_machines()
            .iter()
            .filter(|m| used.contains(&m.system_id))
            .all(|m| m.owner.is_none() && m.status == MachineStatus::Ready)
            .then_some(())
    });
    assert!(
        story.maas.dns_resources(&dns_fqdn).unwrap().is_empty(),
        "DNS record {dns_fqdn} deleted"
    );

    // No garbage collector on a bare API server: what Cluster API leaves to
    // it (templates, Secrets, the Nodes of the last Machines) goes by hand.
    drop(nodes);
    let registered: BTreeSet<String> = deployed.values().map(|m| m.hostname.clone()).collect();
    let left_nodes: Vec<String> = registered
        .iter()
        .filter(|n| cp.try_kubectl(&["get", "node", n.as_str()], "").is_ok())
        .cloned()
        .collect();
    // During Cluster deletion Cluster API skips Node deletion for every
    // Machine (its workload cluster is going away): exactly the Nodes of the
    // control plane and of the workers that survived the scale-down are left.
    let expected_left: Vec<String> = CP_MACHINES
        .iter()
        .map(|m| m.to_string())
        .chain(remaining.iter().cloned())
        .map(|m| hostnames[&m].clone())
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    assert_eq!(left_nodes, expected_left);
    println!("Nodes left for the GC that is not there: {left_nodes:?}");
    for node in &left_nodes {
        cp.kubectl(&["delete", "node", node]);
    }
    cp.kubectl(&["delete", MAAS_MACHINE_TEMPLATES, MD, "-n", &ns]);
    cp.kubectl(&[
        "delete",
        "secret",
        BOOTSTRAP,
        &format!("{CLUSTER}-kubeconfig"),
        "-n",
        &ns,
    ]);
    story.check_processes();
    println!(
        "conformance story done in {:.1}s",
        test_started.elapsed().as_secs_f64()
    );
    assert!(
        violations.is_empty(),
        "contract violations:\n{}",
        violations.join("\n")
    );
}
