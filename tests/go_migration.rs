//! Migrating a running cluster from the Go provider to capmaas, end to end
//! (issue 10), on the real API server with the real Cluster API core
//! manager and the MAAS simulator.
//!
//! The cluster's MaasMachines are what the Go provider left: `spec.systemID`
//! and `providerID` set, its finalizer, no identity anywhere (MAAS machines
//! allocated and deployed with no agent_name and no owner data). capmaas,
//! started on it, refuses to act on them (`MachineNotOwned`) and keeps the
//! finalizer of a deleted one rather than leak its machine; one
//! `capmaas adopt --apply` later (which marks each object adopted, so the
//! controller looks again at once) it manages them without allocating or
//! deploying anything again: the MaasMachine deleted before the adoption
//! and a scaled-down one release their machines, the rest are released
//! with the cluster.
//!
//!     cargo test --test go_migration -- --nocapture

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capmaas::kube::{self, resources};
use serde_json::{json, Value};
use support::capi::{self, CapiManager};
use support::go_provider::{self, adopt, go_provider_machine, FINALIZER};
use support::maas_sim::MaasSim;
use support::objects::{condition, condition_is, string};
use support::story::{self, Capmaas, CLUSTER};

const MACHINES: [&str; 3] = ["go-worker-0", "go-worker-1", "go-worker-2"];
const DELETED_BEFORE: &str = "go-worker-0";
const SCALED_DOWN: &str = "go-worker-1";
const KEPT: &str = "go-worker-2";
const IDENTITY_ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/agent-name";
const ADOPTED_ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/adopted";

fn apply(cp: &support::ControlPlane, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    cp.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
}

fn get(kube: &kube::Client, r: &kube::Resource, ns: &str, name: &str) -> Option<Value> {
    match kube.get(r, Some(ns), name) {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("get {} {ns}/{name}: {e}", r.plural),
    }
}

/// Request counts of every call that changes a machine in MAAS (the
/// MaasCluster's DNS record is not the point here).
fn machine_writes(sim: &MaasSim) -> BTreeMap<String, u64> {
    sim.calls()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("GET ") && k.contains(" machines/"))
        .collect()
}

fn released(m: &Value) -> bool {
    m["status_name"] == "Ready" && m["owner"].is_null() && m["owner_data"] == json!({})
}

#[test]
fn a_go_provider_cluster_is_adopted_then_scaled_down_and_deleted_cleanly() {
    let started = Instant::now();
    let cp = support::control_plane();
    let capi = CapiManager::start(cp);
    let sim =
        MaasSim::start_with_args(None, &["--deploy-seconds", "1", "--release-seconds", "0.5"]);
    let ns = cp.new_namespace("go-migration");
    let kube = story::kube_client(cp);

    // --- What the Go provider left: deployed machines, no identity.
    let hosts: Vec<String> = sim.state()["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status_name"] == "Ready" && m["pool"] == "worker-pool")
        .map(|m| string(&m["hostname"]))
        .take(MACHINES.len())
        .collect();
    let system_ids: BTreeMap<&str, String> = MACHINES
        .iter()
        .zip(&hosts)
        .map(|(name, host)| (*name, go_provider_machine(&sim, host)))
        .collect();
    let mut objects = vec![
        capi::kubeconfig_secret(cp, &ns, CLUSTER),
        story::maas_cluster(&ns),
        story::cluster(&ns),
    ];
    for name in MACHINES {
        let mut maas_machine = go_provider::maas_machine(&ns, name, &system_ids[name]);
        maas_machine["metadata"]["finalizers"] = json!([FINALIZER]);
        objects.push(capi::bootstrap_secret(
            &ns,
            &story::bootstrap_secret_name(name),
            CLUSTER,
        ));
        objects.push(maas_machine);
        objects.push(support::objects::machine(&ns, CLUSTER, name, false));
    }
    apply(cp, &objects);
    // The Go provider's mark `capmaas adopt` asks for (issue 19 item 6).
    for (name, host) in MACHINES.iter().zip(&hosts) {
        go_provider::record_status(cp, &ns, name, host);
    }
    support::wait_explained(
        60,
        "the Go provider's machines Deployed in MAAS",
        String::new,
        || {
            system_ids
                .values()
                .all(|id| sim.machine_state(id)["status_name"] == "Deployed")
                .then_some(())
        },
    );

    // --- capmaas takes over the management cluster.
    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        cp.dir.join("capmaas-go-migration.log"),
        &[],
    );
    capmaas.wait_ready(60);
    let diagnostics = || {
        format!(
            "{}\n--- MAAS: {}\n--- cluster-api:\n{}\n--- capmaas ({}):\n{}",
            cp.try_kubectl(
                &[
                    "get",
                    "clusters,machines,maasclusters,maasmachines",
                    "-n",
                    &ns,
                    "-o",
                    "wide"
                ],
                ""
            )
            .unwrap_or_else(|e| e),
            sim.state(),
            capi.log_tail(20),
            capmaas.log.display(),
            story::tail(&capmaas.log, 40)
        )
    };
    let writes_before = machine_writes(&sim);
    let refused = |mm: &Value| {
        condition(mm, "MachineDeployed")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "MachineNotOwned")
    };
    support::wait_explained(
        120,
        "every Go-provider MaasMachine refused (MachineNotOwned)",
        diagnostics,
        || {
            MACHINES
                .iter()
                .all(|n| {
                    get(&kube, &resources::MAAS_MACHINES, &ns, n).is_some_and(|mm| refused(&mm))
                })
                .then_some(())
        },
    );
    // Deleted before the adoption: the finalizer stays (the machine would
    // leak otherwise) and MAAS is not touched.
    story::delete_no_wait(cp, &ns, "machines.cluster.x-k8s.io", DELETED_BEFORE);
    support::wait_explained(
        60,
        "the MaasMachine deleted before adoption waits (Ready=False MachineNotOwned)",
        diagnostics,
        || {
            let mm = get(&kube, &resources::MAAS_MACHINES, &ns, DELETED_BEFORE)?;
            let ready = condition(&mm, "Ready")?;
            (mm["metadata"]["deletionTimestamp"].is_string()
                && ready["status"] == "False"
                && ready["reason"] == "MachineNotOwned")
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(get(&kube, &resources::MAAS_MACHINES, &ns, DELETED_BEFORE).is_some());
    assert_eq!(
        machine_writes(&sim),
        writes_before,
        "capmaas wrote to MAAS for machines it does not own"
    );
    for id in system_ids.values() {
        let m = sim.machine_state(id);
        assert_eq!(m["status_name"], "Deployed", "{m}");
        assert_eq!(m["owner_data"], json!({}), "{m}");
    }

    // --- The administrator adopts them, once.
    let applied = adopt(cp, &sim, &["--namespace", &ns, "--apply"]);
    let out = String::from_utf8_lossy(&applied.stdout);
    assert_eq!(applied.status.code(), Some(0), "{out}");
    assert!(
        out.contains("3 adopted, 0 already adopted, 0 refused"),
        "{out}"
    );
    for name in [SCALED_DOWN, KEPT] {
        let mm = get(&kube, &resources::MAAS_MACHINES, &ns, name).unwrap();
        let annotations = &mm["metadata"]["annotations"];
        let identity = string(&annotations[IDENTITY_ANNOTATION]);
        assert!(
            identity.starts_with(&format!("capmaas/{ns}/{name}/")),
            "{mm:#}"
        );
        assert_eq!(annotations[ADOPTED_ANNOTATION], identity.as_str(), "{mm:#}");
        let m = sim.machine_state(&system_ids[name]);
        assert_eq!(
            m["owner_data"]["capmaas-identity"],
            identity.as_str(),
            "{m}"
        );
    }

    // The one deleted before is released now; the others are managed.
    support::wait_explained(
        60,
        "the MaasMachine deleted before adoption released and gone",
        diagnostics,
        || {
            (get(&kube, &resources::MAAS_MACHINES, &ns, DELETED_BEFORE).is_none()
                && released(&sim.machine_state(&system_ids[DELETED_BEFORE])))
            .then_some(())
        },
    );
    support::wait_explained(60, "the adopted MaasMachines Ready", diagnostics, || {
        [SCALED_DOWN, KEPT]
            .iter()
            .all(|n| {
                get(&kube, &resources::MAAS_MACHINES, &ns, n)
                    .is_some_and(|mm| condition_is(&mm, "Ready", "True"))
            })
            .then_some(())
    });
    assert_eq!(
        sim.call_count("POST machines/ op=allocate"),
        writes_before["POST machines/ op=allocate"],
        "an adopted machine was allocated again"
    );
    assert_eq!(
        sim.call_count("POST machines/{id}/ op=deploy"),
        writes_before["POST machines/{id}/ op=deploy"],
        "an adopted machine was deployed again"
    );

    // --- Scale down: one Machine deleted, its machine released, the other kept.
    story::delete_no_wait(cp, &ns, "machines.cluster.x-k8s.io", SCALED_DOWN);
    support::wait_explained(60, "the scaled-down machine released", diagnostics, || {
        (get(&kube, &resources::MAAS_MACHINES, &ns, SCALED_DOWN).is_none()
            && released(&sim.machine_state(&system_ids[SCALED_DOWN])))
        .then_some(())
    });
    let kept = sim.machine_state(&system_ids[KEPT]);
    assert_eq!(kept["status_name"], "Deployed", "{kept}");

    // --- The cluster deleted: everything released.
    story::delete_no_wait(cp, &ns, "clusters.cluster.x-k8s.io", CLUSTER);
    support::wait_explained(
        120,
        "the cluster gone, every machine released",
        diagnostics,
        || {
            let gone = get(&kube, &resources::CLUSTERS, &ns, CLUSTER).is_none();
            (gone
                && system_ids
                    .values()
                    .all(|id| released(&sim.machine_state(id))))
            .then_some(())
        },
    );
    for (name, id) in &system_ids {
        let m = sim.machine_state(id);
        assert_eq!(
            m["last_release"]["comment"],
            format!("capmaas: MaasMachine {ns}/{name} deleted"),
            "{m}"
        );
    }
    capmaas.assert_running();
    println!(
        "Go-provider migration done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
