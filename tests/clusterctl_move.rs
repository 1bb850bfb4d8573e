//! A real `clusterctl move` (the clusterctl v1.13 of tests/capi-testbin)
//! between two real management clusters, each a test control plane with the
//! real Cluster API core manager and `capmaas`, sharing one MAAS (the
//! simulator): the bootstrap-to-management move every Cluster API user does.
//!
//! A machine-based control plane (2 control-plane Machines) and a
//! MachineDeployment of 2 workers are provisioned on the first cluster, then
//! moved (`clusterctl move -n NS`); on the second, the workers are scaled
//! down, a control-plane Machine is replaced (deleted, and a new one
//! created, as a machine-based control plane is rolled by hand), and the
//! cluster is deleted. What must hold (issue 10):
//!
//! - the move writes nothing to MAAS: no allocation, no release, no DNS
//!   change; every machine keeps its `agent_name` and owner data, every
//!   MaasMachine its identity annotation (with a new UID);
//! - after the move, the second cluster's capmaas finds every machine as
//!   its own: the scaled-down worker and the replaced control plane are
//!   released (Ready, owner cleared), nothing stays allocated at the end;
//! - the API server DNS record is the same one (name and MAAS id) on both
//!   sides, follows the replaced control plane and is deleted with the
//!   cluster;
//! - the identity Secret (`spec.identityRef`) moves because it carries the
//!   label `clusterctl.cluster.x-k8s.io/move` (a copy without it stays
//!   behind), and the second cluster reads its credentials from it.
//!
//! The workload cluster of the test is the first control plane itself (its
//! `<cluster>-kubeconfig` Secret points there, for both Cluster API
//! managers), where the node helper plays kubelet.
//!
//!     cargo test --test clusterctl_move -- --nocapture
//!
//! `CAPMAAS_MOVE_BIN=/path/to/capmaas` runs another capmaas build on both
//! sides (e.g. one from before the identity rules, to see the leak this
//! test guards against).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use capmaas::kube::{self, resources, ListParams};
use serde_json::{json, Value};
use support::capi::{self, CapiManager};
use support::clusterctl::{clusterctl_move, prepare_for_move, MOVE_LABEL};
use support::maas_sim::MaasSim;
use support::objects::{condition_is, string};
use support::story::{self, tail, Capmaas, CLUSTER, MD};
use support::ControlPlane;

const IDENTITY_SECRET: &str = "maas-credentials";
const UNLABELLED_SECRET: &str = "maas-credentials-unlabelled";
const CP_BEFORE: [&str; 2] = ["prod-cluster-cp-0", "prod-cluster-cp-1"];
const CP_REPLACED: &str = "prod-cluster-cp-0";
const CP_REPLACEMENT: &str = "prod-cluster-cp-3";
const WORKERS: usize = 2;
const IDENTITY_ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/agent-name";

/// One management cluster: its control plane and an admin client.
struct Side {
    name: &'static str,
    cp: &'static ControlPlane,
    kube: kube::Client,
}

impl Side {
    fn new(name: &'static str, cp: &'static ControlPlane) -> Side {
        Side {
            name,
            cp,
            kube: story::kube_client(cp),
        }
    }

    fn get(&self, r: &kube::Resource, ns: &str, name: &str) -> Option<Value> {
        match self.kube.get(r, Some(ns), name) {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("{}: get {} {name}: {e}", self.name, r.plural),
        }
    }

    fn list(&self, r: &kube::Resource, ns: &str, selector: Option<&str>) -> Vec<Value> {
        let params = match selector {
            Some(s) => ListParams::labels(s),
            None => ListParams::default(),
        };
        self.kube
            .list(r, Some(ns), &params)
            .unwrap_or_else(|e| panic!("{}: list {}: {e}", self.name, r.plural))
            .items
    }

    fn apply(&self, objects: &[Value]) {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        self.cp
            .kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
    }
}

fn name(obj: &Value) -> String {
    string(&obj["metadata"]["name"])
}

/// A Secret that `clusterctl move` carries although no Cluster owns it.
fn movable(mut secret: Value) -> Value {
    secret["metadata"]["labels"][MOVE_LABEL] = json!("");
    secret
}

fn identity_secret(ns: &str, secret_name: &str, sim: &MaasSim) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret_name, "namespace": ns},
        "stringData": {"MAAS_ENDPOINT": sim.url, "MAAS_API_KEY": sim.api_key},
    })
}

/// The bootstrap Secret and the Machine/MaasMachine pair of one
/// control-plane machine (the story's).
fn control_plane_objects(ns: &str, machine: &str) -> Vec<Value> {
    let mut objects = vec![movable(capi::bootstrap_secret(
        ns,
        &story::bootstrap_secret_name(machine),
        CLUSTER,
    ))];
    objects.extend(story::control_plane_machine(ns, machine));
    objects
}

/// The MAAS machines as the simulator holds them, by system_id.
fn maas_machines(sim: &MaasSim) -> BTreeMap<String, Value> {
    sim.state()["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (string(&m["system_id"]), m.clone()))
        .collect()
}

/// The simulator's DNS records of the story's cluster.
fn dns_records(sim: &MaasSim) -> Vec<Value> {
    sim.state()["dns_resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| string(&d["fqdn"]).starts_with(&format!("{CLUSTER}-")))
        .cloned()
        .collect()
}

/// Request counts of every call that changes something in MAAS.
fn write_calls(sim: &MaasSim) -> BTreeMap<String, u64> {
    sim.calls()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("GET "))
        .collect()
}

fn released(machine: &Value) -> bool {
    machine["status_name"] == "Ready"
        && machine["owner"].is_null()
        && machine["agent_name"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        && machine["owner_data"]
            .as_object()
            .is_none_or(|data| data.is_empty())
}

/// Cluster API watches Nodes only once the control plane is initialized, and
/// the node helper registers a Node only once MAAS reports Deployed: a
/// Machine whose Node got its providerID after the Machine's last reconcile
/// would wait for the 10-minute resync. Touches such Machines (see
/// `StoryLab::nudge_machines`).
fn nudge(side: &Side, workload: &Side, ns: &str) {
    let Ok(nodes) = workload
        .kube
        .list(&resources::NODES, None, &ListParams::default())
    else {
        return;
    };
    let provider_ids: BTreeSet<String> = nodes
        .items
        .iter()
        .map(|n| string(&n["spec"]["providerID"]))
        .collect();
    for m in side.list(&resources::MACHINES, ns, None) {
        let provider_id = string(&m["spec"]["providerID"]);
        if !provider_id.is_empty()
            && m["status"]["nodeRef"]["name"].is_null()
            && m["metadata"]["deletionTimestamp"].is_null()
            && provider_ids.contains(&provider_id)
        {
            let patch = json!({"metadata": {"annotations": {
                "test.capmaas.io/nudged-at": format!("{:?}", Instant::now()),
            }}});
            let _ = side
                .kube
                .patch_merge(&resources::MACHINES, Some(ns), &name(&m), &patch);
        }
    }
}

#[test]
fn clusterctl_move_keeps_every_machine_and_the_dns_record() {
    let started = Instant::now();
    // Both control planes and both Cluster API managers start side by side.
    let (cp1, cp2) = std::thread::scope(|s| {
        let second = s.spawn(support::second_control_plane);
        (support::control_plane(), second.join().unwrap())
    });
    let (capi1, capi2) = std::thread::scope(|s| {
        let second = s.spawn(|| CapiManager::start(cp2));
        (CapiManager::start(cp1), second.join().unwrap())
    });
    prepare_for_move(cp1);
    prepare_for_move(cp2);
    println!(
        "[{:>6.1}s] two management clusters with Cluster API {} up",
        started.elapsed().as_secs_f64(),
        capi1.version
    );
    let (first, second) = (Side::new("first", cp1), Side::new("second", cp2));

    let sim =
        MaasSim::start_with_args(None, &["--deploy-seconds", "1", "--release-seconds", "0.5"]);
    let bin = std::env::var_os("CAPMAAS_MOVE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(story::capmaas_bin);
    let capmaas1 = Capmaas::start(
        &bin,
        &cp1.kubeconfig,
        &sim,
        cp1.dir.join("capmaas.log"),
        &[],
    );
    let mut capmaas2 = Capmaas::start(
        &bin,
        &cp2.kubeconfig,
        &sim,
        cp2.dir.join("capmaas.log"),
        &[],
    );
    capmaas2.wait_ready(60);
    let nodes = story::start_node_helper(cp1, &sim);
    let ns = cp1.new_namespace("move");
    let diagnostics = |side: &Side, capi: &CapiManager, capmaas: &Capmaas| {
        let objects = side.cp.try_kubectl(
            &[
                "get",
                "clusters,machines,maasclusters,maasmachines,machinedeployments",
                "-n",
                &ns,
                "-o",
                "wide",
            ],
            "",
        );
        format!(
            "--- {} cluster objects:\n{}\n--- MAAS: {}\n--- cluster-api:\n{}\n--- capmaas ({}):\n{}",
            side.name,
            objects.unwrap_or_else(|e| e),
            sim.state(),
            capi.log_tail(20),
            capmaas.log.display(),
            tail(&capmaas.log, 40)
        )
    };

    // --- Provision on the first cluster.
    let mut maas_cluster = story::maas_cluster(&ns);
    maas_cluster["spec"]["identityRef"] = json!({"kind": "Secret", "name": IDENTITY_SECRET});
    let mut objects = vec![
        capi::kubeconfig_secret(cp1, &ns, CLUSTER),
        movable(identity_secret(&ns, IDENTITY_SECRET, &sim)),
        identity_secret(&ns, UNLABELLED_SECRET, &sim),
        movable(capi::bootstrap_secret(
            &ns,
            &story::bootstrap_secret_name(MD),
            CLUSTER,
        )),
        maas_cluster,
        story::cluster(&ns),
    ];
    for machine in CP_BEFORE {
        objects.extend(control_plane_objects(&ns, machine));
    }
    objects.push(story::maas_machine_template(&ns));
    objects.push(story::machine_deployment(&ns, WORKERS));
    first.apply(&objects);
    let total = CP_BEFORE.len() + WORKERS;
    support::wait_explained(
        240,
        "provisioned on the first cluster: every Machine Running with a Node, the control plane initialized",
        || diagnostics(&first, &capi1, &capmaas1),
        || {
            nudge(&first, &first, &ns);
            let machines = first.list(&resources::MACHINES, &ns, None);
            let running = machines
                .iter()
                .filter(|m| {
                    m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string()
                })
                .count();
            let cluster = first.get(&resources::CLUSTERS, &ns, CLUSTER)?;
            (machines.len() == total
                && running == total
                && condition_is(&cluster, "ControlPlaneInitialized", "True")
                && cluster["status"]["initialization"]["infrastructureProvisioned"] == true)
                .then_some(())
        },
    );
    let cp_ips = |side: &Side, machines: &[&str]| -> BTreeSet<String> {
        machines
            .iter()
            .flat_map(|m| {
                side.get(&resources::MAAS_MACHINES, &ns, m)
                    .map(|mm| mm["status"]["addresses"].clone())
                    .and_then(|a| a.as_array().cloned())
                    .unwrap_or_default()
            })
            .filter(|a| a["type"] == "ExternalIP")
            .map(|a| string(&a["address"]))
            .collect()
    };
    let record = support::wait_explained(
        60,
        "one DNS record holding both control-plane IPs",
        || diagnostics(&first, &capi1, &capmaas1),
        || {
            let records = dns_records(&sim);
            let ips: BTreeSet<String> = records.first()?["ip_addresses"]
                .as_array()?
                .iter()
                .map(string)
                .collect();
            (records.len() == 1 && ips.len() == 2 && ips == cp_ips(&first, &CP_BEFORE))
                .then(|| records[0].clone())
        },
    );
    let fqdn = string(&record["fqdn"]);

    // What the move must not change.
    let before: BTreeMap<String, Value> = first
        .list(&resources::MAAS_MACHINES, &ns, None)
        .into_iter()
        .map(|mm| (name(&mm), mm))
        .collect();
    assert_eq!(before.len(), total);
    let system_ids: BTreeMap<String, String> = before
        .iter()
        .map(|(n, mm)| (n.clone(), string(&mm["spec"]["systemID"])))
        .collect();
    let maas_before = maas_machines(&sim);
    for (mm_name, mm) in &before {
        let identity = string(&mm["metadata"]["annotations"][IDENTITY_ANNOTATION]);
        let machine = &maas_before[&system_ids[mm_name]];
        assert_eq!(machine["status_name"], "Deployed", "{machine}");
        assert_eq!(machine["agent_name"], identity.as_str(), "{machine}");
        assert!(identity.starts_with(&format!("capmaas/{ns}/{mm_name}/")));
    }
    let writes_before = write_calls(&sim);
    let allocations_before = sim.call_count("POST machines/ op=allocate");
    assert_eq!(allocations_before, total as u64);

    // --- The move, with capmaas still running on the first cluster: it must
    // leave alone what clusterctl pauses and then deletes there.
    let moved_at = Instant::now();
    let out = clusterctl_move(cp1, cp2, &ns).unwrap_or_else(|out| {
        panic!(
            "clusterctl move failed:\n{out}\n{}",
            diagnostics(&first, &capi1, &capmaas1)
        )
    });
    println!(
        "[{:>6.1}s] clusterctl move done in {:.1}s:\n{out}",
        started.elapsed().as_secs_f64(),
        moved_at.elapsed().as_secs_f64()
    );
    // The first cluster is done with: its capmaas and Cluster API stop.
    drop(capmaas1);
    drop(capi1);
    for r in [
        &resources::CLUSTERS,
        &resources::MACHINES,
        &resources::MAAS_MACHINES,
        &resources::MAAS_CLUSTERS,
    ] {
        assert!(
            first.list(r, &ns, None).is_empty(),
            "{} left on the first cluster",
            r.plural
        );
    }
    assert!(second
        .get(&resources::SECRETS, &ns, IDENTITY_SECRET)
        .is_some());
    assert!(
        second
            .get(&resources::SECRETS, &ns, UNLABELLED_SECRET)
            .is_none(),
        "a Secret without the move label and no owner is not moved"
    );

    // --- The second cluster takes over.
    support::wait_explained(
        180,
        "every moved MaasMachine Ready on the second cluster, every Machine Running",
        || diagnostics(&second, &capi2, &capmaas2),
        || {
            nudge(&second, &first, &ns);
            let cluster = second.get(&resources::CLUSTERS, &ns, CLUSTER)?;
            (cluster["spec"]["paused"] != true).then_some(())?;
            let mms = second.list(&resources::MAAS_MACHINES, &ns, None);
            let ready = mms
                .iter()
                .filter(|mm| mm["status"]["ready"] == true && condition_is(mm, "Ready", "True"))
                .count();
            let running = second
                .list(&resources::MACHINES, &ns, None)
                .iter()
                .filter(|m| {
                    m["status"]["phase"] == "Running" && m["status"]["nodeRef"]["name"].is_string()
                })
                .count();
            let mc = second.get(&resources::MAAS_CLUSTERS, &ns, CLUSTER)?;
            (mms.len() == total
                && ready == total
                && running == total
                && condition_is(&mc, "Ready", "True"))
            .then_some(())
        },
    );
    for (mm_name, old) in &before {
        let moved = second.get(&resources::MAAS_MACHINES, &ns, mm_name).unwrap();
        assert_eq!(moved["spec"]["systemID"], old["spec"]["systemID"]);
        assert_eq!(
            moved["metadata"]["annotations"][IDENTITY_ANNOTATION],
            old["metadata"]["annotations"][IDENTITY_ANNOTATION],
            "the identity moved with the object"
        );
        assert_ne!(
            moved["metadata"]["uid"], old["metadata"]["uid"],
            "clusterctl recreates the object"
        );
    }
    assert_eq!(
        sim.call_count("POST machines/ op=allocate"),
        allocations_before,
        "the move allocated a machine"
    );
    assert_eq!(
        write_calls(&sim),
        writes_before,
        "the move (and the second cluster's capmaas taking over) wrote to MAAS"
    );
    let maas_after = maas_machines(&sim);
    for id in system_ids.values() {
        for field in ["status_name", "owner", "agent_name", "owner_data"] {
            assert_eq!(
                maas_after[id][field], maas_before[id][field],
                "{field} of {id} changed"
            );
        }
    }
    let moved_mc = second.get(&resources::MAAS_CLUSTERS, &ns, CLUSTER).unwrap();
    assert_eq!(moved_mc["status"]["network"]["dnsName"], fqdn.as_str());
    assert_eq!(dns_records(&sim), vec![record.clone()], "the same record");

    // --- Scale the workers down on the second cluster: the removed worker's
    // machine is released.
    second.cp.kubectl(&[
        "patch",
        "machinedeployments.cluster.x-k8s.io",
        MD,
        "-n",
        &ns,
        "--type=merge",
        "-p",
        &json!({"spec": {"replicas": WORKERS - 1}}).to_string(),
    ]);
    let worker_selector = format!("cluster.x-k8s.io/deployment-name={MD}");
    let removed_worker = support::wait_explained(
        120,
        "one worker removed and its MAAS machine released",
        || diagnostics(&second, &capi2, &capmaas2),
        || {
            let left: BTreeSet<String> = second
                .list(&resources::MAAS_MACHINES, &ns, Some(&worker_selector))
                .iter()
                .map(name)
                .collect();
            let gone: Vec<&String> = before
                .keys()
                .filter(|n| n.starts_with(MD) && !left.contains(*n))
                .collect();
            let [gone] = gone[..] else { return None };
            let machines = maas_machines(&sim);
            (left.len() == WORKERS - 1 && released(&machines[&system_ids[gone]]))
                .then(|| gone.clone())
        },
    );
    println!(
        "released worker {removed_worker} ({})",
        system_ids[&removed_worker]
    );

    // --- Roll a control-plane Machine: delete one, create its replacement.
    second.cp.kubectl(&[
        "delete",
        "machines.cluster.x-k8s.io",
        CP_REPLACED,
        "-n",
        &ns,
        "--wait=false",
    ]);
    second.apply(&control_plane_objects(&ns, CP_REPLACEMENT));
    let survivors = [CP_BEFORE[1], CP_REPLACEMENT];
    let release_comment = format!("capmaas: MaasMachine {ns}/{CP_REPLACED} deleted");
    support::wait_explained(
        180,
        "the replaced control plane released, its replacement Ready, the record following",
        || diagnostics(&second, &capi2, &capmaas2),
        || {
            nudge(&second, &first, &ns);
            // MAAS may hand the released machine straight to the
            // replacement: released by the deletion, then free or the
            // replacement's.
            let old = &maas_machines(&sim)[&system_ids[CP_REPLACED]];
            let new = second.get(&resources::MAAS_MACHINES, &ns, CP_REPLACEMENT)?;
            let new_identity = &new["metadata"]["annotations"][IDENTITY_ANNOTATION];
            let old_gone = second
                .get(&resources::MAAS_MACHINES, &ns, CP_REPLACED)
                .is_none()
                && old["last_release"]["comment"] == release_comment.as_str()
                && (released(old) || &old["owner_data"]["capmaas-identity"] == new_identity);
            let new_ready = condition_is(&new, "Ready", "True");
            let records = dns_records(&sim);
            let ips: BTreeSet<String> = records.first()?["ip_addresses"]
                .as_array()?
                .iter()
                .map(string)
                .collect();
            let want = cp_ips(&second, &survivors);
            (old_gone
                && new_ready
                && records.len() == 1
                && records[0]["id"] == record["id"]
                && want.len() == 2
                && ips == want)
                .then_some(())
        },
    );
    assert_eq!(
        sim.call_count("POST machines/ op=allocate"),
        allocations_before + 1,
        "only the replacement was allocated"
    );
    let mc = second.get(&resources::MAAS_CLUSTERS, &ns, CLUSTER).unwrap();
    assert!(
        condition_is(&mc, "CredentialsReady", "True"),
        "the moved identity Secret is read on the second cluster: {mc:#}"
    );

    // --- Delete the cluster on the second cluster: everything released, the
    // record deleted.
    second.cp.kubectl(&[
        "delete",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &ns,
        "--wait=false",
    ]);
    support::wait_explained(
        180,
        "the Cluster gone, every MAAS machine released, the record deleted",
        || diagnostics(&second, &capi2, &capmaas2),
        || {
            let gone = second.get(&resources::CLUSTERS, &ns, CLUSTER).is_none()
                && second.list(&resources::MAAS_MACHINES, &ns, None).is_empty()
                && second.list(&resources::MAAS_CLUSTERS, &ns, None).is_empty();
            let all_free = maas_machines(&sim).values().all(released);
            (gone && all_free && dns_records(&sim).is_empty()).then_some(())
        },
    );
    capmaas2.assert_running();
    drop(nodes);
    println!(
        "clusterctl move story done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
