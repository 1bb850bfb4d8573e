//! VIP mode (`spec.controlPlaneVIP`) against the in-memory fakes: the
//! reservation, its recovery after a lost answer, what is never released.

use std::time::Duration;

use serde_json::json;

use crate::api::conditions::{self, Status};
use crate::api::maas_cluster as mc_api;
use crate::api::maas_machine as mm_api;
use crate::controllers::fake::{FakeMaas, World, MAAS_CLUSTER, MAAS_MACHINE};
use crate::controllers::Error;
use crate::runtime::Action;

const NS: &str = "ns";

fn reconcile(w: &World) -> Result<Action, Error> {
    super::reconcile(&w.ctx, NS, "c1")
}

/// Cluster `c1` whose MaasCluster asks for `vip`.
fn vip_cluster(w: &World, name: &str, vip: serde_json::Value) {
    w.cluster(NS, name);
    w.edit(MAAS_CLUSTER, NS, name, |v| {
        v["spec"]["controlPlaneVIP"] = vip
    });
}

fn vip_status(w: &World, name: &str) -> Option<mc_api::ControlPlaneVipStatus> {
    w.maas_cluster(NS, name).status?.control_plane_vip
}

fn load_balancer(w: &World, name: &str) -> conditions::Condition {
    let mc = w.maas_cluster(NS, name);
    conditions::get(mc.conditions(), mc_api::LOAD_BALANCER_READY)
        .cloned()
        .unwrap()
}

fn dns_calls(maas: &FakeMaas) -> Vec<String> {
    maas.calls()
        .into_iter()
        .filter(|c| c.contains("dns"))
        .collect()
}

fn with_subnet(w: &World) {
    w.maas.free_addresses.lock().unwrap().insert(
        "10.0.0.0/24".into(),
        vec!["10.0.0.50".into(), "10.0.0.51".into(), "10.0.0.52".into()],
    );
}

#[test]
fn an_address_is_reserved_persisted_first_and_becomes_the_endpoint() {
    let w = World::new(0);
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    assert_eq!(reconcile(&w).unwrap(), Action::Done);

    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
    assert!(dns_calls(&w.maas).is_empty(), "{:?}", w.maas.calls());
    assert!(w.maas.dns_records().is_empty());
    // Reserving is in the status before MAAS is asked; Reserved after.
    let phases: Vec<String> = w
        .kube
        .writes()
        .iter()
        .filter_map(|wr| wr.patch["status"]["controlPlaneVIP"]["phase"].as_str())
        .map(str::to_string)
        .collect();
    assert_eq!(phases, vec!["Reserving", "Reserved"]);
    let status = vip_status(&w, "c1").unwrap();
    assert_eq!(
        (status.address.as_str(), status.phase.as_str()),
        ("10.0.0.50", "Reserved")
    );

    let mc = w.maas_cluster(NS, "c1");
    let endpoint = mc.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!((endpoint.host.as_str(), endpoint.port), ("10.0.0.50", 6443));
    assert!(mc.dns_name().is_none());
    let lb = load_balancer(&w, "c1");
    assert_eq!(lb.status, Status::True);
    assert_eq!(lb.reason, mc_api::CONTROL_PLANE_VIP_RESERVED);
    assert!(lb.message.contains("10.0.0.50"), "{}", lb.message);
    assert_eq!(
        mc.status.unwrap().initialization.unwrap().provisioned,
        Some(true)
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"ControlPlaneVIPReserved".to_string()));

    // Next reconciles: one list call, nothing written, nothing reserved.
    w.kube.clear_writes();
    w.maas.clear_calls();
    reconcile(&w).unwrap();
    assert_eq!(w.maas.calls(), vec!["ip_reservations 10.0.0.50"]);
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
}

#[test]
fn a_subnet_gives_the_next_free_address() {
    let w = World::new(0);
    with_subnet(&w);
    w.maas
        .addresses_in_use
        .lock()
        .unwrap()
        .insert("10.0.0.50".into());
    w.maas.add_reservation("10.0.0.51");
    vip_cluster(&w, "c1", json!({"subnet": "10.0.0.0/24"}));
    reconcile(&w).unwrap();
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.51", "10.0.0.52"]);
    let status = vip_status(&w, "c1").unwrap();
    assert_eq!(status.address, "10.0.0.52");
    assert!(status.reserved_before.is_empty(), "cleared once reserved");
    let endpoint = w
        .maas_cluster(NS, "c1")
        .spec
        .control_plane_endpoint
        .unwrap();
    assert_eq!(endpoint.host, "10.0.0.52");
}

#[test]
fn a_lost_reserve_answer_is_found_again_not_reserved_twice() {
    for vip in [
        json!({"address": "10.0.0.50"}),
        json!({"subnet": "10.0.0.0/24"}),
    ] {
        let w = World::new(0);
        with_subnet(&w);
        w.maas.add_reservation("10.0.0.51"); // the user's own, made by hand
        vip_cluster(&w, "c1", vip.clone());
        w.maas.faults.lock().unwrap().lose_reserve_answer = true;
        assert!(reconcile(&w).is_err(), "{vip}");
        let pending = vip_status(&w, "c1").unwrap();
        assert_eq!(pending.phase, mc_api::VIP_RESERVING, "{vip}");

        reconcile(&w).unwrap();
        assert_eq!(
            w.maas.reserved_ips(),
            vec!["10.0.0.50", "10.0.0.51"],
            "{vip}: one reservation"
        );
        let status = vip_status(&w, "c1").unwrap();
        assert_eq!(
            (status.address.as_str(), status.phase.as_str()),
            ("10.0.0.50", "Reserved"),
            "{vip}"
        );
        assert_eq!(
            w.maas
                .calls()
                .iter()
                .filter(|c| c.starts_with("reserve_ip"))
                .count(),
            1,
            "{vip}: {:?}",
            w.maas.calls()
        );

        // Deleting releases ours, never the hand-made one.
        w.delete(MAAS_CLUSTER, NS, "c1");
        assert_eq!(reconcile(&w).unwrap(), Action::Done, "{vip}");
        assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.51"], "{vip}");
    }
}

#[test]
fn a_lost_answer_with_other_new_reservations_is_not_guessed() {
    let w = World::new(0);
    with_subnet(&w);
    vip_cluster(&w, "c1", json!({"subnet": "10.0.0.0/24"}));
    w.maas.faults.lock().unwrap().lose_reserve_answer = true;
    assert!(reconcile(&w).is_err());
    // The same MAAS user reserves another one by hand meanwhile.
    w.maas.add_reservation("10.0.0.99");
    assert!(reconcile(&w).is_err());
    let lb = load_balancer(&w, "c1");
    assert_eq!(lb.reason, mc_api::CONTROL_PLANE_VIP_FAILED);
    assert!(
        lb.message.contains("10.0.0.50, 10.0.0.99"),
        "{}",
        lb.message
    );
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50", "10.0.0.99"]);
    // Nor released on deletion.
    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50", "10.0.0.99"]);
}

#[test]
fn an_address_reserved_before_is_used_and_never_released() {
    let w = World::new(0);
    w.maas.add_reservation("10.0.0.50");
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    reconcile(&w).unwrap();
    assert_eq!(vip_status(&w, "c1").unwrap().phase, mc_api::VIP_EXTERNAL);
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("reserve_ip")));
    assert_eq!(
        w.maas_cluster(NS, "c1")
            .spec
            .control_plane_endpoint
            .unwrap()
            .host,
        "10.0.0.50"
    );
    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("release_ip")));
    assert!(w
        .kube
        .event_reasons()
        .contains(&"ControlPlaneVIPKept".to_string()));
}

/// `clusterctl move`: spec and annotations copied, status not, new UIDs.
fn moved(w: &World, name: &str) {
    w.edit(MAAS_CLUSTER, NS, name, |v| {
        v["status"] = json!({});
        v["metadata"]["uid"] = json!(format!("moved-{name}"));
    });
}

#[test]
fn after_clusterctl_move_the_reservation_with_our_mark_is_ours() {
    let w = World::new(0);
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    reconcile(&w).unwrap();
    let mark = w.maas.reservations.lock().unwrap()[0].interface_set[0]
        .mac_address
        .clone();
    assert!(mark.starts_with(|c: char| c.is_ascii_hexdigit()), "{mark}");
    moved(&w, "c1");
    w.maas.clear_calls();
    reconcile(&w).unwrap();
    assert_eq!(vip_status(&w, "c1").unwrap().phase, mc_api::VIP_RESERVED);
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("reserve_ip")));
    w.delete(MAAS_CLUSTER, NS, "c1");
    reconcile(&w).unwrap();
    assert!(w.maas.reserved_ips().is_empty());
}

#[test]
fn an_endpoint_naming_a_reservation_without_our_mark_does_not_make_it_ours() {
    // Issue 19: the same MAAS user reserved 10.0.0.50 before (by hand, or
    // another management cluster); a tenant names it as VIP and endpoint.
    let w = World::new(0);
    w.maas.add_reservation("10.0.0.50");
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "10.0.0.50", "port": 6443})
    });
    reconcile(&w).unwrap();
    assert_eq!(vip_status(&w, "c1").unwrap().phase, mc_api::VIP_EXTERNAL);
    w.delete(MAAS_CLUSTER, NS, "c1");
    reconcile(&w).unwrap();
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("release_ip")));
}

#[test]
fn another_clusters_marked_reservation_is_not_ours() {
    // A cluster in another namespace reserved 10.0.0.50 with its mark; a
    // tenant names the same address (and copies the identity annotation,
    // which names the other object and is replaced).
    let w = World::new(0);
    w.cluster("other", "c1");
    w.edit(MAAS_CLUSTER, "other", "c1", |v| {
        v["spec"]["controlPlaneVIP"] = json!({"address": "10.0.0.50"})
    });
    super::reconcile(&w.ctx, "other", "c1").unwrap();
    let theirs = w
        .maas_cluster("other", "c1")
        .metadata
        .annotations
        .get(crate::controllers::identity::ANNOTATION)
        .cloned()
        .unwrap();
    // Forget the other cluster's status, so only MAAS's mark can tell.
    w.kube.remove(MAAS_CLUSTER, "other", "c1");

    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["annotations"] =
            json!({crate::controllers::identity::ANNOTATION: theirs.clone()});
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "10.0.0.50", "port": 6443});
    });
    reconcile(&w).unwrap();
    assert_eq!(vip_status(&w, "c1").unwrap().phase, mc_api::VIP_EXTERNAL);
    assert_ne!(
        w.maas_cluster(NS, "c1")
            .metadata
            .annotations
            .get(crate::controllers::identity::ANNOTATION),
        Some(&theirs)
    );
    w.delete(MAAS_CLUSTER, NS, "c1");
    reconcile(&w).unwrap();
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
}

#[test]
fn in_subnet_mode_only_our_marked_reservation_in_that_subnet_is_taken() {
    // Issue 19: an endpoint naming the user's reservation outside the
    // subnet (or an unmarked one in it) is not adopted: a new address is
    // reserved from the subnet, and only that one is released.
    let w = World::new(0);
    with_subnet(&w);
    w.maas.add_reservation("192.168.9.9");
    w.maas.add_reservation("10.0.0.50");
    w.maas.reservations.lock().unwrap()[1].subnet = Some(crate::maas::ReservationSubnet {
        id: 1,
        name: "pxe".into(),
        cidr: "10.0.0.0/24".into(),
    });
    vip_cluster(&w, "c1", json!({"subnet": "10.0.0.0/24"}));
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "192.168.9.9", "port": 6443})
    });
    reconcile(&w).unwrap();
    let vip = vip_status(&w, "c1").unwrap();
    assert_eq!(vip.phase, mc_api::VIP_RESERVED);
    assert_eq!(vip.address, "10.0.0.51", "a new reservation of our own");
    w.delete(MAAS_CLUSTER, NS, "c1");
    reconcile(&w).unwrap();
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50", "192.168.9.9"]);
}

#[test]
fn an_address_maas_will_not_reserve_is_reported_with_its_words() {
    let w = World::new(0);
    w.maas
        .addresses_in_use
        .lock()
        .unwrap()
        .insert("10.0.0.50".into());
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    assert!(reconcile(&w).is_err());
    let lb = load_balancer(&w, "c1");
    assert_eq!(lb.status, Status::False);
    assert_eq!(lb.reason, mc_api::CONTROL_PLANE_VIP_FAILED);
    assert!(lb.message.contains("already in use"), "{}", lb.message);
    assert!(w
        .maas_cluster(NS, "c1")
        .spec
        .control_plane_endpoint
        .is_none());
    assert!(w
        .kube
        .event_reasons()
        .contains(&mc_api::CONTROL_PLANE_VIP_FAILED.to_string()));
    // An outage changes nothing.
    w.kube.clear_writes();
    w.maas.fail_once("reserve_ip", 503, "503");
    assert!(reconcile(&w).is_err());
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
    // Deleting releases nothing: the address is not ours.
    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("release_ip")));
}

#[test]
fn another_clusters_vip_is_refused_and_never_released() {
    let w = World::new(0);
    vip_cluster(&w, "victim", json!({"address": "10.0.0.50"}));
    super::reconcile(&w.ctx, NS, "victim").unwrap();
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    w.maas.clear_calls();
    assert!(reconcile(&w).is_err());
    let lb = load_balancer(&w, "c1");
    assert_eq!(lb.reason, mc_api::CONTROL_PLANE_VIP_IN_USE);
    assert!(lb.message.contains("ns/victim"), "{}", lb.message);
    assert!(vip_status(&w, "c1").is_none());
    assert_eq!(
        w.maas.calls(),
        vec!["zones"],
        "MAAS not asked about the VIP"
    );
    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
}

#[test]
fn a_reservation_released_by_hand_is_made_again() {
    let w = World::new(0);
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    reconcile(&w).unwrap();
    w.maas.reservations.lock().unwrap().clear();
    reconcile(&w).unwrap();
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
    assert_eq!(vip_status(&w, "c1").unwrap().phase, mc_api::VIP_RESERVED);
    assert!(w
        .kube
        .event_reasons()
        .contains(&"ControlPlaneVIPLost".to_string()));
}

#[test]
fn delete_waits_for_machines_then_releases_the_vip() {
    let w = World::new(0);
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    w.machine(NS, "c1", "cp1", true);
    reconcile(&w).unwrap();
    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(
        reconcile(&w).unwrap(),
        Action::RequeueAfter(Duration::from_secs(30))
    );
    assert_eq!(
        w.maas.reserved_ips(),
        vec!["10.0.0.50"],
        "kept while machines remain"
    );
    w.kube.remove(MAAS_MACHINE, NS, "cp1");
    // A release whose answer was lost: MAAS has already done it.
    w.maas.fail_once("release_ip", 504, "");
    assert!(reconcile(&w).is_err());
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.reserved_ips().is_empty());
    assert!(
        w.kube.get(MAAS_CLUSTER, NS, "c1").is_none(),
        "finalizer removed"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"ControlPlaneVIPReleased".to_string()));
    assert!(dns_calls(&w.maas).is_empty(), "{:?}", w.maas.calls());
}

#[test]
fn a_tenant_without_dns_rights_reserves_with_its_own_credentials() {
    let w = World::new(0);
    let tenant = w.cluster_with_own_maas(NS, "c1", 0);
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneVIP"] = json!({"address": "10.0.0.50"})
    });
    // The tenant's MAAS refuses DNS writes (non-admin): none is attempted.
    tenant.fail_once(
        "create_dns_resource",
        403,
        "This method is reserved for admin users.",
    );
    reconcile(&w).unwrap();
    assert_eq!(tenant.reserved_ips(), vec!["10.0.0.50"]);
    assert!(
        w.maas.reserved_ips().is_empty(),
        "not the controller's MAAS user"
    );
    assert!(dns_calls(&tenant).is_empty(), "{:?}", tenant.calls());
    assert!(conditions::is_true(
        w.maas_cluster(NS, "c1").conditions(),
        mc_api::LOAD_BALANCER_READY
    ));
}

#[test]
fn control_plane_machines_of_a_vip_cluster_have_no_dns_to_join() {
    let w = World::new(1);
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    reconcile(&w).unwrap();
    w.machine(NS, "c1", "cp1", true);
    crate::controllers::machine::reconcile(&w.ctx, NS, "cp1").unwrap();
    w.maas.finish_deployments();
    w.maas.clear_calls();
    crate::controllers::machine::reconcile(&w.ctx, NS, "cp1").unwrap();
    let mm = w.maas_machine(NS, "cp1");
    let attached = conditions::get(mm.conditions(), mm_api::DNS_ATTACHED).unwrap();
    assert_eq!(attached.status, Status::True);
    assert_eq!(attached.reason, mc_api::CONTROL_PLANE_VIP);
    assert!(dns_calls(&w.maas).is_empty(), "{:?}", w.maas.calls());
    // And it is released without waiting for a record.
    w.delete(MAAS_MACHINE, NS, "cp1");
    assert_eq!(
        crate::controllers::machine::reconcile(&w.ctx, NS, "cp1").unwrap(),
        Action::Done
    );
    assert_eq!(w.maas.releases.lock().unwrap().len(), 1);
}

#[test]
fn a_maas_that_refuses_the_list_is_reported() {
    let w = World::new(0);
    vip_cluster(&w, "c1", json!({"address": "10.0.0.50"}));
    w.maas.fail_once(
        "ip_reservations",
        403,
        "Listing all IP addresses requires admin privileges.",
    );
    assert!(reconcile(&w).is_err());
    let lb = load_balancer(&w, "c1");
    assert_eq!(lb.reason, mc_api::CONTROL_PLANE_VIP_FAILED);
    assert!(lb.message.contains("requires admin"), "{}", lb.message);
    assert!(vip_status(&w, "c1").is_none());
    // It answers again: reserved.
    reconcile(&w).unwrap();
    assert_eq!(w.maas.reserved_ips(), vec!["10.0.0.50"]);
    assert!(conditions::is_true(
        w.maas_cluster(NS, "c1").conditions(),
        mc_api::LOAD_BALANCER_READY
    ));
}
