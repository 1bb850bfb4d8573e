//! The identity rules of a MaasMachine against the in-memory fakes: every
//! branch of "is this MAAS machine this object's?", on each path that acts
//! on a machine (find, deploy, power, release), and per-cluster credentials.

use serde_json::json;

use crate::api::conditions;
use crate::api::maas_cluster as mc_api;
use crate::api::maas_machine as mm_api;
use crate::controllers::fake::{FakeMaas, World, MAAS_CLUSTER, MAAS_MACHINE};
use crate::controllers::identity::{Identity, ADOPTED_ANNOTATION, ANNOTATION, OWNER_DATA_KEY};
use crate::controllers::Error;
use crate::maas::{MachineStatus, PowerState};
use crate::runtime::Action;

const NS: &str = "tenant";

fn reconcile(w: &World, ns: &str, name: &str) -> Result<Action, Error> {
    super::reconcile(&w.ctx, ns, name)
}

fn reason(w: &World, ns: &str, name: &str, type_: &str) -> String {
    let mm = w.maas_machine(ns, name);
    conditions::get(mm.conditions(), type_)
        .map(|c| c.reason.to_string())
        .unwrap_or_default()
}

fn message(w: &World, ns: &str, name: &str, type_: &str) -> String {
    let mm = w.maas_machine(ns, name);
    conditions::get(mm.conditions(), type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The MAAS calls that change something.
fn writes(maas: &FakeMaas) -> Vec<String> {
    maas.calls()
        .into_iter()
        .filter(|c| {
            ![
                "machine ",
                "machines_by_agent_name",
                "boot_resources",
                "dns_resources",
                "zones",
                "version",
            ]
            .iter()
            .any(|read| c.starts_with(read))
        })
        .collect()
}

/// A victim cluster `v1` in namespace `victim` with one deployed worker.
fn victim(w: &World) -> String {
    w.cluster("victim", "v1");
    w.machine("victim", "v1", "vm1", false);
    reconcile(w, "victim", "vm1").unwrap();
    w.maas.finish_deployments();
    reconcile(w, "victim", "vm1").unwrap();
    w.maas_machine("victim", "vm1").spec.system_id.unwrap()
}

/// A tenant MaasMachine `forged` whose spec names `system_id`.
fn forged(w: &World, system_id: &str) {
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "forged", false);
    w.edit(MAAS_MACHINE, NS, "forged", |v| {
        v["spec"]["systemID"] = json!(system_id);
        v["spec"]["providerID"] = json!(format!("maas:///az1/{system_id}"));
    });
}

#[test]
fn another_tenants_machine_named_by_system_id_is_never_touched() {
    let w = World::new(2);
    let victims = victim(&w);
    forged(&w, &victims);
    w.maas.clear_calls();
    assert_eq!(reconcile(&w, NS, "forged").unwrap(), Action::Done);
    assert_eq!(
        reason(&w, NS, "forged", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_NOT_OWNED
    );
    let why = message(&w, NS, "forged", mm_api::MACHINE_DEPLOYED);
    assert!(why.contains("belongs to another MaasMachine"), "{why}");
    assert!(w
        .kube
        .event_reasons()
        .contains(&mm_api::MACHINE_NOT_OWNED.to_string()));
    let mm = w.maas_machine(NS, "forged");
    assert!(!mm.status().ready, "not reported Ready");
    assert!(mm.status().addresses.is_empty(), "nothing copied from it");

    // Powered off behind MAAS's back: the forged object does not power it on.
    w.maas.set_state(
        &victims,
        MachineStatus::Deployed,
        "Deployed",
        PowerState::Off,
    );
    reconcile(&w, NS, "forged").unwrap();
    // Deleting the forged object touches nothing either.
    w.delete(MAAS_MACHINE, NS, "forged");
    assert_eq!(reconcile(&w, NS, "forged").unwrap(), Action::Done);
    assert!(w.kube.get(MAAS_MACHINE, NS, "forged").is_none());
    assert_eq!(writes(&w.maas), Vec::<String>::new(), "no MAAS write");
    assert_eq!(
        w.maas.host(&victims).owner_data.len(),
        1,
        "still the victim's"
    );
    assert!(w.maas.allocated().contains(&victims));
}

#[test]
fn a_ready_machine_named_by_system_id_is_not_deployed() {
    let w = World::new(2);
    forged(&w, "sys001");
    assert_eq!(reconcile(&w, NS, "forged").unwrap(), Action::Done);
    assert_eq!(
        reason(&w, NS, "forged", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_NOT_OWNED
    );
    assert!(message(&w, NS, "forged", mm_api::MACHINE_DEPLOYED).contains("not allocated to anyone"));
    assert_eq!(writes(&w.maas), Vec::<String>::new());
    assert_eq!(w.maas.host("sys001").status, MachineStatus::Ready);
    w.delete(MAAS_MACHINE, NS, "forged");
    reconcile(&w, NS, "forged").unwrap();
    assert!(w.kube.get(MAAS_MACHINE, NS, "forged").is_none());
    assert_eq!(writes(&w.maas), Vec::<String>::new());
}

#[test]
fn a_copied_identity_annotation_is_replaced_and_claims_nothing() {
    let w = World::new(3);
    let victims = victim(&w);
    let stolen = w
        .maas_machine("victim", "vm1")
        .metadata
        .annotations
        .get(ANNOTATION)
        .cloned()
        .unwrap();
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "copy", false);
    w.edit(MAAS_MACHINE, NS, "copy", |v| {
        v["metadata"]["annotations"] = json!({ANNOTATION: stolen});
    });
    reconcile(&w, NS, "copy").unwrap();
    let mm = w.maas_machine(NS, "copy");
    assert_eq!(
        mm.metadata.annotations.get(ANNOTATION).map(String::as_str),
        Some("capmaas/tenant/copy/uid-mm-copy")
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"IdentityReplaced".to_string()));
    let own = mm.spec.system_id.unwrap();
    assert_ne!(own, victims, "a machine of its own, not the victim's");
}

#[test]
fn the_identity_survives_a_move_and_scale_down_releases_the_machine() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    reconcile(&w, NS, "m1").unwrap();
    w.maas.finish_deployments();
    reconcile(&w, NS, "m1").unwrap();
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    // clusterctl move: the same object, a new UID, status not carried.
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["uid"] = json!("uid-after-move");
        v["status"] = json!({});
    });
    w.maas.clear_calls();
    reconcile(&w, NS, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").status().ready, "found again");
    assert!(!w.maas.calls().iter().any(|c| c == "allocate"));
    w.delete(MAAS_MACHINE, NS, "m1");
    reconcile(&w, NS, "m1").unwrap();
    let releases = w.maas.releases.lock().unwrap().clone();
    assert_eq!(releases.len(), 1, "released, not leaked");
    assert_eq!(releases[0].0, id);
    assert!(w.maas.allocated().is_empty());
}

#[test]
fn an_allocation_whose_owner_data_was_lost_is_found_and_marked() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    // The process died between allocate (+ spec write) and the identity
    // write (MAAS 3.6: set_workload_annotations).
    w.maas.fail_once("set_workload_annotations", 503, "");
    assert!(reconcile(&w, NS, "m1").is_err());
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    assert!(w.maas.host(&id).owner_data.is_empty());
    reconcile(&w, NS, "m1").unwrap();
    assert_eq!(
        w.maas
            .host(&id)
            .owner_data
            .get(OWNER_DATA_KEY)
            .map(String::as_str),
        Some("capmaas/tenant/m1/uid-mm-m1")
    );
    assert_eq!(w.maas.allocated(), vec![id], "one allocation");
}

#[test]
fn machines_allocated_before_the_identity_rules_are_marked() {
    // capmaas before the identity rules: agent_name and annotation, no owner data.
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    reconcile(&w, NS, "m1").unwrap();
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .owner_data
        .clear();
    w.maas.finish_deployments();
    reconcile(&w, NS, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").status().ready);
    assert!(w.maas.host(&id).owner_data.contains_key(OWNER_DATA_KEY));
}

#[test]
fn a_go_provider_machine_is_refused_until_adopted() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    // Deployed by the Go provider: owned, no agent_name, no owner data.
    w.maas.set_state(
        "sys000",
        MachineStatus::Deployed,
        "Deployed",
        PowerState::On,
    );
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut("sys000")
        .unwrap()
        .owner = Some("capmaas".into());
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["systemID"] = json!("sys000");
        v["spec"]["providerID"] = json!("maas:///az1/sys000");
    });
    reconcile(&w, NS, "m1").unwrap();
    assert_eq!(
        reason(&w, NS, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_NOT_OWNED
    );
    assert!(message(&w, NS, "m1", mm_api::MACHINE_DEPLOYED).contains("capmaas adopt"));
    let object = w.maas_machine(NS, "m1");
    assert!(
        !object.metadata.annotations.contains_key(ANNOTATION),
        "no identity is made up for it: only an adoption gives one"
    );
    assert_eq!(writes(&w.maas), Vec::<String>::new(), "MAAS untouched");
    // Adopted (what `capmaas adopt --apply` writes): the identity on the
    // object, marked adopted, and in the machine's owner data.
    let identity = Identity::new_for(&object.metadata)
        .unwrap()
        .as_str()
        .to_string();
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["annotations"][ANNOTATION] = json!(identity);
        v["metadata"]["annotations"][ADOPTED_ANNOTATION] = json!(identity);
    });
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut("sys000")
        .unwrap()
        .owner_data = [(OWNER_DATA_KEY.to_string(), identity)].into();
    reconcile(&w, NS, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").status().ready);
    w.delete(MAAS_MACHINE, NS, "m1");
    reconcile(&w, NS, "m1").unwrap();
    assert_eq!(w.maas.releases.lock().unwrap().len(), 1);
}

#[test]
fn each_cluster_uses_its_own_credentials() {
    let w = World::new(0);
    let tenant = w.cluster_with_own_maas(NS, "c1", 2);
    w.machine(NS, "c1", "m1", false);
    reconcile(&w, NS, "m1").unwrap();
    assert_eq!(tenant.allocated().len(), 1, "from the tenant's MAAS");
    assert!(
        w.maas.calls().is_empty(),
        "the controller-wide MAAS untouched"
    );
}

#[test]
fn unusable_credentials_are_a_condition_and_no_maas_call() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["identityRef"] = json!({"kind": "Secret", "name": "missing"})
    });
    w.machine(NS, "c1", "m1", false);
    assert!(matches!(
        reconcile(&w, NS, "m1"),
        Err(Error::Credentials(_))
    ));
    assert_eq!(
        reason(&w, NS, "m1", mm_api::MACHINE_DEPLOYED),
        mc_api::CREDENTIALS_UNAVAILABLE
    );
    assert!(message(&w, NS, "m1", mm_api::MACHINE_DEPLOYED).contains("tenant/missing"));
    assert!(w.maas.calls().is_empty());
}

/// Issue 22 item 5: the identity is written with the op the MAAS release
/// has: `set_workload_annotations` from 3.0 on (3.4.8, the real MAAS of
/// the tests, has it), `set_owner_data` before; either way the machine is
/// ours and deploys.
#[test]
fn the_identity_is_written_with_the_op_the_maas_release_has() {
    for (version, op) in [
        ("2.9.2", "set_owner_data"),
        ("3.4.8", "set_workload_annotations"),
        ("3.7.3", "set_workload_annotations"),
    ] {
        let w = World::new(1);
        *w.maas.version.lock().unwrap() = version.into();
        w.cluster(NS, "c1");
        w.machine(NS, "c1", "m1", false);
        reconcile(&w, NS, "m1").unwrap();
        let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
        let annotation_writes: Vec<String> = w
            .maas
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("set_"))
            .collect();
        assert_eq!(annotation_writes, [format!("{op} {id}")], "{version}");
        assert_eq!(
            w.maas
                .host(&id)
                .owner_data
                .get(OWNER_DATA_KEY)
                .map(String::as_str),
            Some("capmaas/tenant/m1/uid-mm-m1"),
            "{version}"
        );
        assert_eq!(w.maas.deploys.lock().unwrap().len(), 1, "{version}");
    }
}

/// The op is chosen from the MAAS view's cached version: marking many
/// machines asks `version/` once, not once per machine.
#[test]
fn marking_machines_asks_the_maas_version_once() {
    let w = World::new(3);
    w.watched();
    w.cluster(NS, "c1");
    for name in ["m1", "m2", "m3"] {
        w.machine(NS, "c1", name, false);
        reconcile(&w, NS, name).unwrap();
    }
    let calls = w.maas.calls();
    let count = |name: &str| calls.iter().filter(|c| c.starts_with(name)).count();
    assert_eq!(count("set_workload_annotations"), 3, "{calls:?}");
    assert_eq!(count("version"), 1, "{calls:?}");
}
