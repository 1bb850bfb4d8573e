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
//! A second story applies, unchanged, Go-provider objects carrying each
//! field the Go provider (and its fork) has beyond capmaas's own (issue
//! 22): the VM fields capmaas does not act on are refused before anything
//! is allocated, with a condition and a Warning naming the field;
//! `staticIP`, `apiServerInterfaceName`, `deployInMemory`, `minDiskSize`,
//! `lxd.enabled` (a VM composed on a VM host: this MAAS has none, so it
//! waits for one) and `spectrocloud.com/custom-dns-provided` are honoured.
//!
//!     cargo test --test go_migration -- --nocapture

mod support;

use capmaas::maas::MaasApi;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use capmaas::kube::{self, resources, ListParams};
use capmaas::maas::LinkMode;
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

/// One capmaas (and one Cluster API manager) at a time on the shared
/// control plane: each watches every namespace, and another's, with
/// another MAAS, would act on this test's objects.
static ONE_CAPMAAS: Mutex<()> = Mutex::new(());

fn one_capmaas() -> MutexGuard<'static, ()> {
    ONE_CAPMAAS.lock().unwrap_or_else(PoisonError::into_inner)
}

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
    let _one = one_capmaas();
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

/// One MaasMachine of the story cluster in `ns`, Go-provider fields in
/// `spec` (and `annotations`), with its Machine and bootstrap data.
fn go_machine(ns: &str, name: &str, spec: Value, annotations: Value) -> [Value; 3] {
    let mut maas_machine = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasMachine",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations,
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER}},
        "spec": {"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 1024},
    });
    if let (Some(into), Some(fields)) = (maas_machine["spec"].as_object_mut(), spec.as_object()) {
        into.extend(fields.clone());
    }
    [
        capi::bootstrap_secret(ns, &story::bootstrap_secret_name(name), CLUSTER),
        maas_machine,
        support::objects::machine(ns, CLUSTER, name, false),
    ]
}

/// The Warning events of reason `UnsupportedField` in `ns`, by object name.
fn unsupported_warnings(kube: &kube::Client, ns: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let events = kube
        .list(&resources::EVENTS, Some(ns), &ListParams::default())
        .unwrap()
        .items;
    for event in events
        .iter()
        .filter(|e| e["reason"] == "UnsupportedField" && e["type"] == "Warning")
    {
        by_name
            .entry(string(&event["involvedObject"]["name"]))
            .or_default()
            .push(string(&event["message"]));
    }
    by_name
}

#[test]
fn go_provider_fields_are_honoured_or_refused_before_allocation() {
    let _one = one_capmaas();
    let cp = support::control_plane();
    let capi = CapiManager::start(cp);
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "1"]);
    let kube = story::kube_client(cp);

    // The VM fields and a staticIP MAAS cannot set: refused, nothing
    // allocated. The rest: honoured.
    const STATIC_IP: &str = "127.11.130.200";
    let refused_fields: [(&str, Value, Value, &str); 4] = [
        (
            "vm-parent",
            json!({"parent": "vmhost1"}),
            json!({}),
            "spec.parent",
        ),
        (
            "vm-virsh",
            json!({"virsh": {"host": "qemu+ssh://h"}}),
            json!({}),
            "spec.virsh",
        ),
        (
            "vm-named",
            json!({}),
            json!({"maas.spectrocloud.com/vm-name": "vm-vm-named-abcde"}),
            "maas.spectrocloud.com/vm-name",
        ),
        (
            "static-dns",
            json!({"staticIP": {"ip": "127.11.130.201", "cidr": "127.11.130.0/24",
                                "nameservers": ["127.0.0.53"]}}),
            json!({}),
            "spec.staticIP.nameservers",
        ),
    ];
    let ns = cp.new_namespace("go-fields");
    let mut maas_cluster = story::maas_cluster(&ns);
    maas_cluster["spec"]["lxdConfig"] = json!({"enabled": false, "nicType": "bridge"});
    maas_cluster["spec"]["failureDomains"] = json!(["zone-a", "zone-b"]);
    maas_cluster["metadata"]["annotations"] =
        json!({"infrastructure.cluster.x-k8s.io/last-applied-dns-hash": "0123abcd"});
    let mut objects = vec![
        capi::kubeconfig_secret(cp, &ns, CLUSTER),
        maas_cluster,
        story::cluster(&ns),
    ];
    for (name, spec, annotations, _) in &refused_fields {
        objects.extend(go_machine(&ns, name, spec.clone(), annotations.clone()));
    }
    // A VM (the Go provider's LXD VM): composed on a VM host; the story's
    // MAAS has none, so it waits for one, allocating nothing.
    objects.extend(go_machine(
        &ns,
        "vm-lxd",
        json!({"lxd": {"enabled": true, "vmConfig": {"diskSize": 60, "autoStart": true}}}),
        json!({}),
    ));
    objects.extend(go_machine(
        &ns,
        "bare-static",
        json!({"lxd": {"enabled": false}, "deployInMemory": true, "minDiskSize": 10,
               "apiServerInterfaceName": "eth0",
               "staticIP": {"ip": STATIC_IP, "cidr": "127.11.130.0/24",
                            "gateway": "127.11.130.1"}}),
        json!({}),
    ));

    // A cluster whose endpoint is the user's, and one asking for LXD hosts.
    let custom_ns = cp.new_namespace("go-custom-dns");
    let mut custom = story::maas_cluster(&custom_ns);
    custom["metadata"]["annotations"] = json!({"spectrocloud.com/custom-dns-provided": ""});
    custom["spec"]["controlPlaneEndpoint"] =
        json!({"host": "127.0.0.1", "port": story::free_port()});
    let lxd_ns = cp.new_namespace("go-lxd-hosts");
    let mut lxd = story::maas_cluster(&lxd_ns);
    lxd["spec"]["lxdConfig"] = json!({"enabled": true, "nicType": "macvlan"});
    for (ns, maas_cluster) in [(&custom_ns, custom), (&lxd_ns, lxd)] {
        objects.extend([
            capi::kubeconfig_secret(cp, ns, CLUSTER),
            maas_cluster,
            story::cluster(ns),
        ]);
    }
    objects.extend(go_machine(&lxd_ns, "on-lxd-host", json!({}), json!({})));
    apply(cp, &objects);

    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        cp.dir.join("capmaas-go-fields.log"),
        &[],
    );
    capmaas.wait_ready(60);
    let diagnostics = || {
        format!(
            "{}\n--- cluster-api:\n{}\n--- capmaas ({}):\n{}",
            cp.try_kubectl(
                &[
                    "get",
                    "clusters,maasclusters,maasmachines",
                    "-A",
                    "-o",
                    "wide"
                ],
                ""
            )
            .unwrap_or_else(|e| e),
            capi.log_tail(20),
            capmaas.log.display(),
            story::tail(&capmaas.log, 40)
        )
    };
    let deployed = |ns: &str, name: &str| {
        get(&kube, &resources::MAAS_MACHINES, ns, name)
            .filter(|mm| condition_is(mm, "MachineDeployed", "True"))
    };
    let bare = support::wait_explained(
        120,
        "the Go-provider machine with staticIP deployed",
        diagnostics,
        || deployed(&ns, "bare-static"),
    );
    let refused = |ns: &str, name: &str| {
        let mm = get(&kube, &resources::MAAS_MACHINES, ns, name)?;
        let c = condition(&mm, "MachineDeployed")?.clone();
        (c["status"] == "False" && c["reason"] == "UnsupportedField")
            .then(|| (string(&c["message"]), mm))
    };
    for (name, _, _, field) in &refused_fields {
        let (message, mm) =
            support::wait_explained(60, &format!("{name} refused"), diagnostics, || {
                refused(&ns, name)
            });
        assert!(message.contains(field), "{name}: {message}");
        assert!(mm["spec"]["systemID"].is_null(), "{mm:#}");
    }
    let waiting = support::wait_explained(60, "vm-lxd waiting for a VM host", diagnostics, || {
        let mm = get(&kube, &resources::MAAS_MACHINES, &ns, "vm-lxd")?;
        let c = condition(&mm, "MachineDeployed")?;
        string(&c["message"])
            .contains("no lxd VM host has room for a VM of 1 cores")
            .then_some(mm)
    });
    assert!(waiting["spec"]["systemID"].is_null(), "{waiting:#}");
    let (message, _) = support::wait_explained(
        60,
        "a machine of the LXD-host cluster refused",
        diagnostics,
        || refused(&lxd_ns, "on-lxd-host"),
    );
    assert!(message.contains("spec.lxdConfig.enabled"), "{message}");

    // --- Refused: one Warning each, and the only allocation is bare-static's.
    let warnings = support::wait_explained(30, "the Warnings", diagnostics, || {
        let w = unsupported_warnings(&kube, &ns);
        (w.len() == refused_fields.len()).then_some(w)
    });
    for (name, _, _, field) in &refused_fields {
        let said = &warnings[*name];
        assert_eq!(said.len(), 1, "{name}: {said:?}");
        assert!(said[0].contains(field), "{name}: {said:?}");
    }
    assert_eq!(sim.call_count("POST machines/ op=allocate"), 1);

    // --- bare-static: the static address linked STATIC on eth0, the only
    // address it reports; deployed in memory.
    let system_id = string(&bare["spec"]["systemID"]);
    let host = sim.client().machine(&system_id).expect("machine");
    let eth0 = host.interfaces.iter().find(|i| i.name == "eth0").unwrap();
    assert!(
        eth0.links
            .iter()
            .any(|l| l.mode == LinkMode::Static && l.ip.as_deref() == Some(STATIC_IP)),
        "{eth0:?}"
    );
    assert_eq!(sim.machine_state(&system_id)["ephemeral_deploy"], true);
    let addresses: Vec<String> = bare["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| string(&a["type"]).ends_with("IP"))
        .map(|a| string(&a["address"]))
        .collect();
    assert!(
        !addresses.is_empty() && addresses.iter().all(|a| a == STATIC_IP),
        "{addresses:?}"
    );

    // --- The Go clusters: failureDomains honoured; the custom endpoint
    // used without a DNS record; the LXD-host one refused.
    let story_cluster = get(&kube, &resources::MAAS_CLUSTERS, &ns, CLUSTER).unwrap();
    let zones: Vec<String> = story_cluster["status"]["failureDomains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| string(&d["name"]))
        .collect();
    assert_eq!(zones, ["zone-a", "zone-b"]);
    let custom = support::wait_explained(60, "the custom-DNS cluster ready", diagnostics, || {
        get(&kube, &resources::MAAS_CLUSTERS, &custom_ns, CLUSTER).filter(|c| {
            condition(c, "LoadBalancerReady")
                .is_some_and(|l| l["status"] == "True" && l["reason"] == "CustomEndpointProvided")
        })
    });
    assert!(
        custom["status"]["network"]["dnsName"].is_null(),
        "{custom:#}"
    );
    let records = sim.state()["dns_resources"].clone();
    let fqdns: Vec<String> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| string(&r["fqdn"]))
        .collect();
    assert_eq!(
        fqdns,
        [string(&story_cluster["status"]["network"]["dnsName"])],
        "only the story cluster has a record: {records}"
    );
    let lxd = get(&kube, &resources::MAAS_CLUSTERS, &lxd_ns, CLUSTER).unwrap();
    let c = condition(&lxd, "LoadBalancerReady").expect("LoadBalancerReady");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("UnsupportedField"))
    );
    assert!(lxd["metadata"]["finalizers"].is_null(), "{lxd:#}");
    assert_eq!(unsupported_warnings(&kube, &lxd_ns)[CLUSTER].len(), 1);

    // --- Deleting the custom-DNS cluster deletes no record.
    story::delete_no_wait(cp, &custom_ns, "clusters.cluster.x-k8s.io", CLUSTER);
    support::wait_explained(60, "the custom-DNS cluster gone", diagnostics, || {
        get(&kube, &resources::MAAS_CLUSTERS, &custom_ns, CLUSTER)
            .is_none()
            .then_some(())
    });
    assert_eq!(sim.call_count("DELETE dnsresources/{id}/"), 0);
    capmaas.assert_running();
}
