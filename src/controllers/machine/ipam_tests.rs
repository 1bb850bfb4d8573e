//! Static addresses from Cluster API IPAM (`spec.network`) against the
//! in-memory fakes: the claim, the wait for the IPAM provider, the STATIC
//! link before deploy, repeats and crashes, and the release on delete.

use serde_json::{json, Value};

use super::ipam::{
    STATIC_ADDRESSES_LINKED, STATIC_ADDRESSES_READY, STATIC_ADDRESS_FAILED, WAITING_FOR_IP_ADDRESS,
};
use crate::api::conditions;
use crate::api::maas_machine as mm_api;
use crate::controllers::fake::{World, IP_ADDRESS, IP_ADDRESS_CLAIM, MAAS_MACHINE};
use crate::controllers::ports::MaasApi;
use crate::controllers::Error;
use crate::maas::{self, LinkMode, MachineStatus, PowerState};
use crate::runtime::Action;

const NS: &str = "ns";

fn reconcile(w: &World, name: &str) -> Result<Action, Error> {
    super::reconcile(&w.ctx, NS, name)
}

fn reason(w: &World, name: &str, type_: &str) -> String {
    let mm = w.maas_machine(NS, name);
    conditions::get(mm.conditions(), type_)
        .map(|c| c.reason.to_string())
        .unwrap_or_default()
}

fn message(w: &World, name: &str, type_: &str) -> String {
    let mm = w.maas_machine(NS, name);
    conditions::get(mm.conditions(), type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Cluster `c1` with worker `m1` taking an address from pool `nodes`.
fn worker_with_pool(w: &World, network: Value) {
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| v["spec"]["network"] = network);
}

fn pool() -> Value {
    json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "nodes"})
}

/// The IPAM provider's part: an IPAddress for the claim, named in its status.
fn answer(w: &World, claim: &str, address: &str, prefix: u8) {
    // The pool's gateway is the MAAS subnet's (fake.rs has two subnets).
    let gateway = if address.starts_with("192.168.50.") {
        "192.168.50.1"
    } else {
        "10.0.0.1"
    };
    w.kube.put(
        IP_ADDRESS,
        json!({"metadata": {"name": claim, "namespace": NS},
               "spec": {"address": address, "prefix": prefix, "gateway": gateway,
                        "claimRef": {"name": claim}, "poolRef": pool()}}),
    );
    w.edit(IP_ADDRESS_CLAIM, NS, claim, |v| {
        v["status"] = json!({"addressRef": {"name": claim}})
    });
}

/// Worker `m1` deployed with 10.0.0.77 from pool `nodes`; its system ID.
fn deployed_with_a_static_address(w: &World) -> String {
    worker_with_pool(w, json!({"addressesFromPools": [pool()]}));
    reconcile(w, "m1").unwrap();
    answer(w, "m1-0", "10.0.0.77", 24);
    reconcile(w, "m1").unwrap();
    w.maas.finish_deployments();
    w.maas_machine(NS, "m1").spec.system_id.unwrap()
}

fn calls_starting(w: &World, prefix: &str) -> Vec<String> {
    w.maas
        .calls()
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

#[test]
fn the_address_is_claimed_answered_and_linked_static_before_deploy() {
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));

    // Allocated, claimed, and waiting for the IPAM provider: no deploy.
    let next = reconcile(&w, "m1").unwrap();
    assert!(matches!(next, Action::RequeueAfter(_)), "{next:?}");
    let claim = w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").expect("claim");
    assert_eq!(claim["spec"]["poolRef"], pool());
    assert_eq!(claim["spec"]["clusterName"], "c1");
    assert_eq!(
        claim["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "c1"
    );
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["kind"],
        "MaasMachine"
    );
    assert_eq!(claim["metadata"]["ownerReferences"][0]["uid"], "uid-mm-m1");
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        WAITING_FOR_IP_ADDRESS
    );
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        WAITING_FOR_IP_ADDRESS
    );
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    assert_eq!(w.maas.host(&id).status, MachineStatus::Allocated);

    // Still unanswered: the claim is not created twice.
    reconcile(&w, "m1").unwrap();
    assert_eq!(*w.kube.ipam_calls.lock().unwrap(), vec!["create m1-0"]);

    // Answered with an address on the PXE subnet, where the boot
    // interface has an AUTO link: that link goes, the STATIC one comes,
    // then the deploy.
    answer(&w, "m1-0", "10.0.0.77", 24);
    w.maas.clear_calls();
    reconcile(&w, "m1").unwrap();
    let calls = w.maas.calls();
    let position = |prefix: &str| calls.iter().position(|c| c.starts_with(prefix)).unwrap();
    assert!(position("unlink_subnet") < position("link_subnet"));
    assert!(position("link_subnet") < position("deploy"), "{calls:?}");
    let host = w.maas.host(&id);
    let links = &host.interfaces[0].links;
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].mode, crate::maas::LinkMode::Static);
    assert_eq!(links[0].ip.as_deref(), Some("10.0.0.77"));
    assert_eq!(links[0].subnet_id, Some(1));
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESSES_LINKED
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&STATIC_ADDRESSES_LINKED.to_string()));

    // Deployed: status.addresses shows the static address.
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();
    let addresses = w.maas_machine(NS, "m1").status().addresses;
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == "10.0.0.77"),
        "{addresses:?}"
    );
    assert!(calls_starting(&w, "link_subnet").len() == 1);
}

#[test]
fn a_link_made_before_a_crash_is_not_made_again() {
    let w = World::new(1);
    worker_with_pool(
        &w,
        json!({"interface": "eth0", "addressesFromPools": [pool()]}),
    );
    reconcile(&w, "m1").unwrap();
    answer(&w, "m1-0", "192.168.50.20", 24);
    w.maas.fail_once("deploy", 503, "Service Unavailable");
    assert!(reconcile(&w, "m1").is_err(), "the deploy failed");
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    let links = w.maas.host(&id).interfaces[0].links.clone();
    assert_eq!(links.len(), 2, "the AUTO link on another subnet stays");

    w.maas.clear_calls();
    reconcile(&w, "m1").unwrap();
    assert!(calls_starting(&w, "link_subnet").is_empty());
    assert!(calls_starting(&w, "unlink_subnet").is_empty());
    assert_eq!(calls_starting(&w, "deploy").len(), 1);
    assert_eq!(w.maas.host(&id).interfaces[0].links, links);
}

#[test]
fn a_new_allocation_for_the_same_maas_machine_gets_the_same_claim() {
    let w = World::new(2);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    reconcile(&w, "m1").unwrap();
    answer(&w, "m1-0", "10.0.0.77", 24);
    reconcile(&w, "m1").unwrap();
    let first = w.maas_machine(NS, "m1").spec.system_id.unwrap();

    // The MaasMachine is deleted and made again with the same name (a
    // re-provisioning): the old claim is gone with it, the new object
    // claims under the same name.
    w.delete(MAAS_MACHINE, NS, "m1");
    reconcile(&w, "m1").unwrap();
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").is_none());
    assert!(w.maas.host(&first).interfaces[0].links.is_empty());
    // The released machine went to repair: the new object gets the other.
    w.maas
        .set_state(&first, MachineStatus::Broken, "Broken", PowerState::Off);
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["network"] = json!({"addressesFromPools": [pool()]})
    });
    reconcile(&w, "m1").unwrap();
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").is_some());
    answer(&w, "m1-0", "10.0.0.77", 24);
    reconcile(&w, "m1").unwrap();
    let second = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    assert_ne!(first, second);
    let link = &w.maas.host(&second).interfaces[0].links[0];
    assert_eq!(link.ip.as_deref(), Some("10.0.0.77"));
    assert_eq!(
        *w.kube.ipam_calls.lock().unwrap(),
        ["create m1-0", "delete m1-0", "create m1-0"]
    );
}

#[test]
fn delete_releases_then_unlinks_and_deletes_the_claim() {
    let w = World::new(1);
    let id = deployed_with_a_static_address(&w);

    w.delete(MAAS_MACHINE, NS, "m1");
    w.maas.clear_calls();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let calls = w.maas.calls();
    let release = calls.iter().position(|c| c.starts_with("release")).unwrap();
    let unlink = calls
        .iter()
        .position(|c| c.starts_with("unlink_subnet"))
        .unwrap();
    assert!(release < unlink, "{calls:?}");
    assert!(w.maas.host(&id).interfaces[0].links.is_empty());
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").is_none());
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
}

#[test]
fn delete_waits_for_maas_to_finish_releasing_before_unlinking() {
    let w = World::new(1);
    let id = deployed_with_a_static_address(&w);
    w.delete(MAAS_MACHINE, NS, "m1");
    // Released by an earlier reconcile; MAAS keeps the owner, its data and
    // the agent name until the machine is Ready.
    let before = w.maas.host(&id);
    let agent = w.maas.agent_names.lock().unwrap()[&id].clone();
    w.maas.release(&id, &Default::default()).unwrap();
    w.maas
        .set_state(&id, MachineStatus::Releasing, "Releasing", PowerState::On);
    {
        let mut machines = w.maas.machines.lock().unwrap();
        let host = machines.get_mut(&id).unwrap();
        host.owner = before.owner.clone();
        host.owner_data = before.owner_data.clone();
    }
    w.maas.agent_names.lock().unwrap().insert(id.clone(), agent);
    w.maas.clear_calls();

    let next = reconcile(&w, "m1").unwrap();
    assert!(matches!(next, Action::RequeueAfter(_)), "{next:?}");
    assert!(calls_starting(&w, "unlink_subnet").is_empty());
    assert!(
        calls_starting(&w, "release").is_empty(),
        "MAAS is releasing it: not released again while waiting"
    );
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").is_some());
    assert!(message(&w, "m1", STATIC_ADDRESSES_READY).contains("waiting for MAAS to release"));

    w.maas.release(&id, &Default::default()).unwrap();
    w.maas.clear_calls();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert_eq!(calls_starting(&w, "unlink_subnet").len(), 1);
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").is_none());
}

#[test]
fn an_address_outside_every_maas_subnet_is_reported_and_not_deployed() {
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    reconcile(&w, "m1").unwrap();
    answer(&w, "m1-0", "172.16.0.9", 24);
    let next = reconcile(&w, "m1").unwrap();
    assert!(matches!(next, Action::RequeueAfter(_)));
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESS_FAILED
    );
    assert!(message(&w, "m1", STATIC_ADDRESSES_READY).contains("no MAAS subnet"));
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_DEPLOY_FAILED
    );
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    assert!(calls_starting(&w, "link_subnet").is_empty());
}

#[test]
fn a_pool_gateway_other_than_the_maas_subnets_is_reported_and_not_deployed() {
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    reconcile(&w, "m1").unwrap();
    answer(&w, "m1-0", "10.0.0.77", 24);
    w.edit(IP_ADDRESS, NS, "m1-0", |v| {
        v["spec"]["gateway"] = json!("10.0.0.254")
    });
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESS_FAILED
    );
    let said = message(&w, "m1", STATIC_ADDRESSES_READY);
    assert!(
        said.contains("10.0.0.254") && said.contains("10.0.0.1"),
        "{said}"
    );
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    assert!(calls_starting(&w, "link_subnet").is_empty());
    assert!(calls_starting(&w, "unlink_subnet").is_empty());
}

#[test]
fn a_claim_of_the_name_owned_by_something_else_is_not_used() {
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    w.kube.put(
        IP_ADDRESS_CLAIM,
        json!({"metadata": {"name": "m1-0", "namespace": NS,
                            "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                                 "kind": "MaasMachine", "name": "other", "uid": "u2"}]},
               "spec": {"poolRef": pool()},
               "status": {"addressRef": {"name": "m1-0"}}}),
    );
    assert!(reconcile(&w, "m1").is_err());
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESS_FAILED
    );
    assert!(calls_starting(&w, "link_subnet").is_empty());
    assert!(w.maas.deploys.lock().unwrap().is_empty());

    // Deleting the MaasMachine leaves that claim alone.
    w.delete(MAAS_MACHINE, NS, "m1");
    reconcile(&w, "m1").unwrap();
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, "m1-0").is_some());
}

#[test]
fn deleting_a_maas_machine_naming_a_machine_never_ours_unlinks_nothing() {
    // Issue 19: a tenant names an unallocated machine whose address an
    // administrator pinned STATIC, and answers its own claim from its own
    // pool with that address.
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["systemID"] = json!("sys000")
    });
    let uid = w.maas_machine(NS, "m1").metadata.uid;
    w.kube.put(
        IP_ADDRESS_CLAIM,
        json!({"metadata": {"name": "m1-0", "namespace": NS,
                            "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                                 "kind": "MaasMachine", "name": "m1", "uid": uid}]},
               "spec": {"poolRef": pool()}}),
    );
    answer(&w, "m1-0", "10.0.0.77", 24);
    let pinned = maas::InterfaceLink {
        id: 4242,
        mode: LinkMode::Static,
        ip: Some("10.0.0.77".into()),
        subnet_id: Some(1),
        ..maas::InterfaceLink::default()
    };
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut("sys000")
        .unwrap()
        .interfaces[0]
        .links = vec![pinned.clone()];
    assert!(reconcile(&w, "m1").is_ok(), "refused as not ours, no error");
    assert!(w.maas_machine(NS, "m1").status().machine_state.is_none());

    w.delete(MAAS_MACHINE, NS, "m1");
    w.maas.clear_calls();
    reconcile(&w, "m1").unwrap();
    assert!(calls_starting(&w, "unlink_subnet").is_empty());
    assert!(calls_starting(&w, "release").is_empty());
    assert_eq!(w.maas.host("sys000").interfaces[0].links, vec![pinned]);
    assert!(w
        .kube
        .event_reasons()
        .contains(&STATIC_ADDRESS_FAILED.to_string()));
}

#[test]
fn the_machine_state_is_stored_before_the_first_link() {
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    reconcile(&w, "m1").unwrap();
    answer(&w, "m1-0", "10.0.0.77", 24);
    // The reconcile stops right after the link (the deploy fails), before
    // it observes the machine: only the state stored before the link says
    // the machine is ours when it is deleted.
    w.maas.fail_once("deploy", 503, "Service Unavailable");
    let _ = reconcile(&w, "m1");
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    assert_eq!(calls_starting(&w, "link_subnet").len(), 1);
    assert!(w.maas_machine(NS, "m1").status().machine_state.is_some());

    w.delete(MAAS_MACHINE, NS, "m1");
    reconcile(&w, "m1").unwrap();
    assert!(w.maas.host(&id).interfaces[0].links.is_empty());
}

#[test]
fn a_restricted_maas_user_is_told_interfaces_are_for_administrators() {
    let w = World::new(1);
    worker_with_pool(&w, json!({"addressesFromPools": [pool()]}));
    reconcile(&w, "m1").unwrap();
    answer(&w, "m1-0", "192.168.50.20", 24);
    w.maas.fail_once("link_subnet", 403, "");
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESS_FAILED
    );
    assert!(
        message(&w, "m1", STATIC_ADDRESSES_READY).contains("only administrators"),
        "{}",
        message(&w, "m1", STATIC_ADDRESSES_READY)
    );
    assert!(w.maas.deploys.lock().unwrap().is_empty());
}

/// Issue 22: the Go fork's `spec.staticIP`, set on worker `m1`.
fn worker_with_static_ip(w: &World, static_ip: Value) {
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["staticIP"] = static_ip
    });
}

#[test]
fn a_go_static_ip_is_linked_static_before_deploy_and_unlinked_on_delete() {
    let w = World::new(1);
    worker_with_static_ip(
        &w,
        json!({"ip": "10.0.0.88", "cidr": "10.0.0.0/24", "gateway": "10.0.0.1"}),
    );
    reconcile(&w, "m1").unwrap();
    let calls = w.maas.calls();
    let position = |prefix: &str| calls.iter().position(|c| c.starts_with(prefix)).unwrap();
    assert!(position("link_subnet") < position("deploy"), "{calls:?}");
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    let links = w.maas.host(&id).interfaces[0].links.clone();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].mode, LinkMode::Static);
    assert_eq!(links[0].ip.as_deref(), Some("10.0.0.88"));
    assert_eq!(links[0].subnet_id, Some(1));
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESSES_LINKED
    );
    assert!(w.kube.ipam_calls.lock().unwrap().is_empty(), "no claim");

    w.maas.finish_deployments();
    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.host(&id).interfaces[0].links.is_empty());
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
}

#[test]
fn a_go_static_ip_without_an_address_waits_for_it() {
    let w = World::new(1);
    worker_with_static_ip(&w, json!({"ip": "", "cidr": "10.0.0.0/24"}));
    let next = reconcile(&w, "m1").unwrap();
    assert!(matches!(next, Action::RequeueAfter(_)), "{next:?}");
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        WAITING_FOR_IP_ADDRESS
    );
    assert!(message(&w, "m1", mm_api::MACHINE_DEPLOYED).contains("spec.staticIP.ip"));
    assert!(w.maas.deploys.lock().unwrap().is_empty());

    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["staticIP"]["ip"] = json!("10.0.0.89")
    });
    reconcile(&w, "m1").unwrap();
    assert_eq!(w.maas.deploys.lock().unwrap().len(), 1);
}

#[test]
fn a_go_static_ip_gateway_other_than_the_maas_subnets_is_reported_and_not_deployed() {
    let w = World::new(1);
    worker_with_static_ip(
        &w,
        json!({"ip": "10.0.0.88", "cidr": "10.0.0.0/24", "gateway": "10.0.0.254"}),
    );
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", STATIC_ADDRESSES_READY),
        STATIC_ADDRESS_FAILED
    );
    let said = message(&w, "m1", STATIC_ADDRESSES_READY);
    assert!(
        said.contains("spec.staticIP") && said.contains("10.0.0.254") && said.contains("10.0.0.1"),
        "{said}"
    );
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    assert!(calls_starting(&w, "link_subnet").is_empty());
}

/// What the spec alone shows MAAS cannot do is refused before anything is
/// allocated, like the VM fields.
#[test]
fn a_go_static_ip_maas_cannot_set_is_refused_before_allocation() {
    for (static_ip, said) in [
        (
            json!({"ip": "10.0.0.88", "cidr": "10.9.0.0/24"}),
            "10.9.0.0/24",
        ),
        (json!({"ip": "10.0.0.88"}), "spec.staticIP.cidr"),
        (
            json!({"ip": "ten", "cidr": "10.0.0.0/24"}),
            "spec.staticIP.ip",
        ),
        (
            json!({"ip": "10.0.0.88", "cidr": "10.0.0.0/24", "nameservers": ["1.1.1.1"]}),
            "spec.staticIP.nameservers",
        ),
    ] {
        let w = World::new(1);
        worker_with_static_ip(&w, static_ip.clone());
        reconcile(&w, "m1").unwrap();
        reconcile(&w, "m1").unwrap();
        assert_eq!(
            reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
            mm_api::UNSUPPORTED_FIELD,
            "{static_ip}"
        );
        let message = message(&w, "m1", mm_api::MACHINE_DEPLOYED);
        assert!(message.contains(said), "{static_ip}: {message}");
        assert!(
            w.maas.calls().is_empty(),
            "{static_ip}: {:?}",
            w.maas.calls()
        );
        let warnings = w
            .kube
            .event_reasons()
            .into_iter()
            .filter(|r| r == mm_api::UNSUPPORTED_FIELD)
            .count();
        assert_eq!(warnings, 1, "{static_ip}");
    }
}

/// An address filled in after the allocation that MAAS cannot set: said
/// on the conditions and in one Warning, nothing deployed or linked.
#[test]
fn a_go_static_ip_filled_in_wrong_after_allocation_is_reported_and_not_deployed() {
    let w = World::new(1);
    worker_with_static_ip(&w, json!({"ip": "", "cidr": "10.0.0.0/24"}));
    reconcile(&w, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_some());
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["staticIP"]["ip"] = json!("10.9.0.5")
    });
    reconcile(&w, "m1").unwrap();
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        STATIC_ADDRESS_FAILED
    );
    assert!(message(&w, "m1", STATIC_ADDRESSES_READY).contains("10.9.0.5"));
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    assert!(calls_starting(&w, "link_subnet").is_empty());
    let warnings = w
        .kube
        .event_reasons()
        .into_iter()
        .filter(|r| r == STATIC_ADDRESS_FAILED)
        .count();
    assert_eq!(warnings, 1);
}
