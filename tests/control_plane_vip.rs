//! VIP mode (issue 15; the Go provider's #86: an API endpoint without MAAS
//! DNS rights), end to end on the real kube-apiserver, `maas-sim` and the
//! `capmaas` binary. The cluster's MAAS user is the story inventory's
//! restricted `operator` (through `spec.identityRef`), whom MAAS refuses
//! DNS edits. What must hold:
//!
//! - `spec.controlPlaneVIP.address` is reserved in MAAS for that user
//!   (USER_RESERVED), becomes `spec.controlPlaneEndpoint` (`VIP:6443`),
//!   `LoadBalancerReady` is True (reason `ControlPlaneVIPReserved`) and no
//!   DNS record is created;
//! - capmaas killed while MAAS is reserving (after `Reserving` is in the
//!   status, before MAAS answers) finds the reservation when it starts
//!   again: one reservation, one reserve call;
//! - MAAS never hands the VIP to a machine: it is the address MAAS had
//!   planned for cp-1, and cp-1 deploys with another one; its MaasMachine
//!   joins no DNS record (`DNSAttached` True, reason `ControlPlaneVIP`);
//! - deleting the cluster (its machines first) releases the reservation.
//!
//!     cargo test --test control_plane_vip -- --nocapture

mod support;

use capmaas::maas::MaasApi;
use std::time::Duration;

use capmaas::maas::ReserveFrom;
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::objects;
use support::story::{self, Capmaas};
use support::ControlPlane;

const CLUSTER: &str = "vip";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const USER: &str = "operator";
/// cp-1's planned address in the story inventory (MAAS would give it to
/// cp-1 when it deploys, were it not reserved).
const VIP: &str = "127.11.130.21";
const RESERVE_CALL: &str = "POST ipaddresses/ op=reserve";

fn start_capmaas(cp: &ControlPlane, sim: &MaasSim, ns: &str, run: u32) -> Capmaas {
    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        sim,
        cp.dir.join(format!("capmaas-{ns}-{run}.log")),
        &[format!("--namespace={ns}")],
    );
    capmaas.wait_ready(60);
    capmaas
}

/// The addresses `USER` has reserved, as MAAS lists them to that user.
fn reservations(sim: &MaasSim) -> Vec<String> {
    let mut ips: Vec<String> = sim
        .client_for(USER)
        .ip_reservations(None)
        .expect("listing the user's reservations")
        .into_iter()
        .map(|r| {
            assert_eq!(r.alloc_type_name, "User reserved", "{r:?}");
            r.ip
        })
        .collect();
    ips.sort();
    ips
}

fn dns_records(sim: &MaasSim) -> Value {
    sim.state()["dns_resources"].clone()
}

/// The Secret with the restricted user's key, the Cluster (infrastructure
/// marked provisioned, as Cluster API would once we are) and the
/// MaasCluster asking for `vip`.
fn create_cluster(cp: &ControlPlane, sim: &MaasSim, ns: &str, vip: Value) {
    cp.apply(&json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tenant-maas", "namespace": ns},
        "stringData": {"MAAS_ENDPOINT": sim.url, "MAAS_API_KEY": sim.key_of(USER)},
    }));
    cp.apply(&json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster = cp
        .get(ns, "clusters.cluster.x-k8s.io", CLUSTER)
        .expect("the Cluster");
    cp.apply(&json!({
        "apiVersion": INFRA, "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": ns,
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": CLUSTER,
                                          "uid": cluster["metadata"]["uid"], "controller": true,
                                          "blockOwnerDeletion": true}]},
        "spec": {"dnsDomain": "k8s.maas",
                 "identityRef": {"kind": "Secret", "name": "tenant-maas"},
                 "controlPlaneVIP": vip},
    }));
    cp.kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);
}

#[test]
fn a_control_plane_vip_is_reserved_survives_a_crash_and_is_released() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("vip");
    let sim = MaasSim::start(None);
    sim.set_timings(1.0, 0.5);
    let records_before = dns_records(&sim);
    assert!(reservations(&sim).is_empty());

    // MAAS takes 5 s to reserve, time to kill capmaas while it waits.
    sim.set_fault(
        json!({"method": "POST", "endpoint": "ipaddresses/", "op": "reserve",
                         "latency_ms": 5000, "times": 1}),
    );
    create_cluster(cp, &sim, &ns, json!({"address": VIP}));
    let capmaas = start_capmaas(cp, &sim, &ns, 1);
    support::eventually(60, "status.controlPlaneVIP Reserving", || {
        let mc = cp.get(&ns, "maasclusters", CLUSTER)?;
        (mc["status"]["controlPlaneVIP"]["phase"] == "Reserving").then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sim.call_count(RESERVE_CALL), 1, "the reserve is in flight");
    drop(capmaas); // SIGKILL before MAAS answers
    support::eventually(30, "MAAS finishes the reservation", || {
        (reservations(&sim) == [VIP]).then_some(())
    });
    let mc = cp.get(&ns, "maasclusters", CLUSTER).unwrap();
    assert_eq!(
        mc["status"]["controlPlaneVIP"]["phase"], "Reserving",
        "{mc}"
    );

    // Started again: the reservation is found, not made twice.
    let mut capmaas = start_capmaas(cp, &sim, &ns, 2);
    let mc = support::eventually(60, "LoadBalancerReady", || {
        let mc = cp.get(&ns, "maasclusters", CLUSTER)?;
        objects::condition_is(&mc, "LoadBalancerReady", "True").then_some(mc)
    });
    let lb = objects::condition(&mc, "LoadBalancerReady").unwrap();
    assert_eq!(lb["reason"], "ControlPlaneVIPReserved", "{lb}");
    assert_eq!(
        mc["status"]["controlPlaneVIP"],
        json!({"address": VIP, "phase": "Reserved"})
    );
    assert_eq!(
        mc["spec"]["controlPlaneEndpoint"],
        json!({"host": VIP, "port": 6443})
    );
    assert_eq!(mc["status"]["initialization"]["provisioned"], true);
    assert!(mc["status"]["network"]["dnsName"].is_null(), "{mc}");
    assert_eq!(reservations(&sim), [VIP]);
    assert_eq!(sim.call_count(RESERVE_CALL), 1, "{:?}", sim.calls());
    assert_eq!(dns_records(&sim), records_before, "no DNS record");

    // A control-plane machine: cp-1, whose planned address is the VIP.
    cp.add_machine(
        &ns,
        CLUSTER,
        "cp-0",
        true,
        json!({"image": story::IMAGE, "minCPU": 4, "minMemory": 8192,
               "resourcePool": "cp-pool", "machineSelector": {"hostname": "cp-1"}}),
    );
    let (mm, host) = support::eventually(90, "cp-0 deployed", || {
        capmaas.assert_running();
        let mm = cp.get(&ns, "maasmachines", "cp-0")?;
        let host = sim.machine_state(mm["spec"]["systemID"].as_str()?);
        (host["status_name"] == "Deployed" && objects::condition(&mm, "DNSAttached").is_some())
            .then_some((mm, host))
    });
    assert_eq!(host["hostname"], "cp-1");
    assert_eq!(host["owner"], USER);
    let ips: Vec<&str> = host["ip_addresses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!ips.is_empty() && !ips.contains(&VIP), "{ips:?}");
    let attached = objects::condition(&mm, "DNSAttached").unwrap();
    assert_eq!(attached["status"], "True", "{attached}");
    assert_eq!(attached["reason"], "ControlPlaneVIP", "{attached}");
    assert_eq!(dns_records(&sim), records_before, "still no DNS record");

    // Deleting: the machine goes first, then the VIP is released.
    for kind in ["maasclusters", "maasmachines", "machines.cluster.x-k8s.io"] {
        let name = if kind == "maasclusters" {
            CLUSTER
        } else {
            "cp-0"
        };
        story::delete_no_wait(cp, &ns, kind, name);
    }
    support::eventually(90, "MaasCluster gone", || {
        capmaas.assert_running();
        cp.get(&ns, "maasclusters", CLUSTER).is_none().then_some(())
    });
    assert!(cp.get(&ns, "maasmachines", "cp-0").is_none());
    assert!(reservations(&sim).is_empty(), "the VIP is released");
    assert_eq!(
        sim.call_count("POST ipaddresses/ op=release"),
        1,
        "{:?}",
        sim.calls()
    );
    capmaas.assert_running();
}

/// VIP mode from a subnet (`controlPlaneVIP.subnet`, the MAAS subnet's
/// name): MAAS picks the address, the status and the endpoint name it,
/// deletion releases it.
#[test]
fn a_vip_from_a_maas_subnet_is_the_address_maas_picked() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("vip-subnet");
    let sim = MaasSim::start(None);
    create_cluster(cp, &sim, &ns, json!({"subnet": "lab"}));
    let mut capmaas = start_capmaas(cp, &sim, &ns, 1);
    let mc = support::eventually(60, "LoadBalancerReady", || {
        let mc = cp.get(&ns, "maasclusters", CLUSTER)?;
        objects::condition_is(&mc, "LoadBalancerReady", "True").then_some(mc)
    });
    let address = objects::string(&mc["status"]["controlPlaneVIP"]["address"]);
    assert!(address.starts_with("127.11.130."), "{mc}");
    assert_eq!(mc["status"]["controlPlaneVIP"]["phase"], "Reserved");
    assert!(mc["status"]["controlPlaneVIP"]["reservedBefore"].is_null());
    assert_eq!(mc["spec"]["controlPlaneEndpoint"]["host"], address.as_str());
    assert_eq!(reservations(&sim), vec![address]);

    story::delete_no_wait(cp, &ns, "maasclusters", CLUSTER);
    support::eventually(60, "MaasCluster gone", || {
        capmaas.assert_running();
        cp.get(&ns, "maasclusters", CLUSTER).is_none().then_some(())
    });
    assert!(reservations(&sim).is_empty(), "released");
}

/// The client's reservation calls against the simulator, which answers as
/// MAAS's `IPAddressesHandler` does: what capmaas relies on.
#[test]
fn reservation_calls_answer_as_maas_does() {
    let sim = MaasSim::start(None);
    let operator = sim.client_for(USER);
    let admin = sim.client();
    let reserved = operator
        .reserve_ip(&ReserveFrom::Address(VIP.into()))
        .unwrap();
    assert_eq!(reserved.ip, VIP);
    assert_eq!(reserved.alloc_type_name, "User reserved");
    assert_eq!(reserved.subnet.unwrap().cidr, "127.11.130.0/24");
    // Reserving it again (a repeat after a lost answer) is "in use": 404.
    let again = operator
        .reserve_ip(&ReserveFrom::Address(VIP.into()))
        .unwrap_err();
    assert!(again.is_not_found() && !again.is_transient(), "{again}");
    assert!(again.message().contains("already in use"), "{again}");
    // Listed to its user only, by address too.
    assert_eq!(operator.ip_reservations(Some(VIP)).unwrap().len(), 1);
    assert!(operator
        .ip_reservations(Some("127.11.130.99"))
        .unwrap()
        .is_empty());
    assert!(admin.ip_reservations(None).unwrap().is_empty());
    // Another user cannot release it (no force): 400, still reserved.
    let foreign = admin.release_ip(VIP).unwrap_err();
    assert!(foreign.is_bad_request(), "{foreign}");
    assert_eq!(reservations(&sim), [VIP]);
    // From a subnet: the next free address, never the reserved one.
    let from_subnet = operator
        .reserve_ip(&ReserveFrom::Subnet("lab".into()))
        .unwrap();
    assert_ne!(from_subnet.ip, VIP);
    let unknown = operator
        .reserve_ip(&ReserveFrom::Subnet("nowhere".into()))
        .unwrap_err();
    assert!(unknown.is_bad_request(), "{unknown}");
    // With `mac=`, listed with the interface MAAS made for that MAC (the
    // mark capmaas reserves with); the others list none.
    let marked = operator
        .reserve_ip_marked(&ReserveFrom::Subnet("lab".into()), "02:AB:cd:00:00:01")
        .unwrap();
    let listed = operator.ip_reservations(Some(&marked.ip)).unwrap();
    assert!(listed[0].has_mac("02:ab:cd:00:00:01"), "{listed:?}");
    assert!(!operator.ip_reservations(Some(VIP)).unwrap()[0].has_mac("02:ab:cd:00:00:01"));
    operator.release_ip(&marked.ip).unwrap();
    // Released by its user; a second release is a 400.
    operator.release_ip(VIP).unwrap();
    operator.release_ip(&from_subnet.ip).unwrap();
    assert!(reservations(&sim).is_empty());
    assert!(operator.release_ip(VIP).unwrap_err().is_bad_request());
}

/// Issue 19: reservations the same MAAS user made before (by hand, or
/// another management cluster's VIP) are never this cluster's to release,
/// whatever its spec and endpoint name; only what capmaas reserved, with
/// the cluster's mark (`mac=`, listed in `interface_set`), is.
///
/// - a cluster naming such an address as its VIP, and as its endpoint (as
///   a cluster moved by `clusterctl move` would), uses it (`External`) and
///   leaves it reserved when deleted;
/// - a cluster asking for a VIP from subnet `lab` whose endpoint names
///   such an address in another subnet reserves its own in `lab`, and
///   releases only that one.
#[test]
fn reservations_made_before_without_our_mark_are_never_released() {
    let cp = support::control_plane();
    let mut inventory = support::maas_sim::story_inventory();
    inventory["subnets"] = json!([{"cidr": "127.30.0.0/24", "name": "nodes",
                                   "gateway_ip": "127.30.0.1",
                                   "vlan": {"vid": 30, "fabric": "fabric-nodes"}}]);
    let sim = MaasSim::start(Some(&inventory));
    let operator = sim.client_for(USER);
    operator
        .reserve_ip(&ReserveFrom::Address(VIP.into()))
        .unwrap();
    let outside = operator
        .reserve_ip(&ReserveFrom::Subnet("nodes".into()))
        .unwrap()
        .ip;
    let mut before = vec![VIP.to_string(), outside.clone()];
    before.sort();

    // One cluster after the other, each with a capmaas of its namespace:
    // its recorded VIP (phase, address) and the reservations while it
    // lived.
    let run = |prefix: &str, vip: Value, host: &str| {
        let ns = cp.new_namespace(prefix);
        create_cluster(cp, &sim, &ns, vip);
        let endpoint = json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": 6443}}});
        cp.kubectl(&[
            "patch",
            "maasclusters",
            CLUSTER,
            "-n",
            &ns,
            "--type=merge",
            "-p",
            &endpoint.to_string(),
        ]);
        let mut capmaas = start_capmaas(cp, &sim, &ns, 1);
        let recorded = support::eventually(60, &format!("{ns}: the VIP recorded"), || {
            let mc = cp.get(&ns, "maasclusters", CLUSTER)?;
            let vip = &mc["status"]["controlPlaneVIP"];
            let phase = vip["phase"].as_str()?;
            (phase != "Reserving").then(|| (phase.to_string(), objects::string(&vip["address"])))
        });
        let during = reservations(&sim);
        story::delete_no_wait(cp, &ns, "maasclusters", CLUSTER);
        support::eventually(60, &format!("{ns}: MaasCluster gone"), || {
            capmaas.assert_running();
            cp.get(&ns, "maasclusters", CLUSTER).is_none().then_some(())
        });
        (recorded, during)
    };

    let (recorded, _) = run("vip-theirs", json!({"address": VIP}), VIP);
    assert_eq!(
        recorded,
        ("External".to_string(), VIP.to_string()),
        "used as it is, not ours"
    );
    assert_eq!(reservations(&sim), before, "left reserved");

    let ((phase, own), during) = run("vip-theirs-subnet", json!({"subnet": "lab"}), &outside);
    assert_eq!(phase, "Reserved");
    assert!(own.starts_with("127.11.130.") && own != VIP, "{own}");
    let mut all = vec![VIP.to_string(), outside.clone(), own.clone()];
    all.sort();
    assert_eq!(during, all);
    assert_eq!(
        reservations(&sim),
        before,
        "only the subnet cluster's own reservation was released"
    );
}
