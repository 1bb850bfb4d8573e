//! Node reuse (issue 23 item 2) against the in-memory fakes.

use serde_json::{json, Value};

use crate::controllers::fake::{
    World, CAPI_CLUSTER, CAPI_MACHINE, IP_ADDRESS, IP_ADDRESS_CLAIM, MAAS_CLUSTER, MAAS_MACHINE,
};
use crate::controllers::{Error, Options};
use crate::maas::{MachineStatus, PowerState};
use crate::runtime::Action;

const NS: &str = "ns";

fn reconcile(w: &World, name: &str) -> Result<Action, Error> {
    super::reconcile(&w.ctx, NS, name)
}

/// A worker of MachineDeployment `deployment` in cluster `c1`, with
/// `nodeReuse`, not reconciled yet.
fn new_worker(w: &World, name: &str, deployment: &str) {
    w.machine(NS, "c1", name, false);
    for kind in [CAPI_MACHINE, MAAS_MACHINE] {
        w.edit(kind, NS, name, |v| {
            v["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] = json!(deployment)
        });
    }
    w.edit(MAAS_MACHINE, NS, name, |v| {
        v["spec"]["nodeReuse"] = json!(true)
    });
}

/// [`new_worker`], reconciled until its machine deploys; its system ID.
fn worker(w: &World, name: &str, deployment: &str) -> String {
    new_worker(w, name, deployment);
    reconcile(w, name).unwrap();
    w.maas_machine(NS, name).spec.system_id.expect("allocated")
}

fn delete(w: &World, name: &str) {
    w.delete(MAAS_MACHINE, NS, name);
    assert_eq!(reconcile(w, name).unwrap(), Action::Done);
}

fn reusable(w: &World) -> Value {
    w.kube.get(MAAS_CLUSTER, NS, "c1").unwrap()["status"]["reusableMachines"].clone()
}

fn erasing_world(machines: usize) -> World {
    World::with_options(
        machines,
        Options {
            release_erase: true,
            ..Options::default()
        },
    )
}

#[test]
fn a_released_worker_is_taken_again_by_the_next_machine_of_its_deployment() {
    let w = erasing_world(3);
    w.cluster(NS, "c1");
    let id = worker(&w, "m1", "md-0");
    delete(&w, "m1");

    let releases = w.maas.releases.lock().unwrap().clone();
    let (released, request) = &releases[0];
    assert_eq!(released, &id);
    assert!(
        !request.erase && !request.quick_erase && !request.secure_erase,
        "released without erase despite --release-erase"
    );
    let comment = request.comment.clone().unwrap_or_default();
    assert!(
        comment.ends_with("node reuse by MachineDeployment/md-0 of ns/c1"),
        "{comment}"
    );
    assert_eq!(reusable(&w)[&id], json!("MachineDeployment/md-0"));

    let again = worker(&w, "m2", "md-0");
    assert_eq!(again, id);
    let asked = w.maas.allocations.lock().unwrap().last().cloned().unwrap();
    assert_eq!(asked.system_id.as_deref(), Some(id.as_str()));
    assert!(asked.agent_name.is_some(), "the identity travels with it");
    let status = w.maas_machine(NS, "m2").status.unwrap_or_default();
    assert_eq!(status.reused_machine.as_deref(), Some(id.as_str()));
    assert_eq!(reusable(&w), json!({}), "the record is used up");
    assert!(w.kube.event_reasons().iter().any(|r| r == "MachineReused"));
}

#[test]
fn another_deployment_does_not_take_it() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    let id = worker(&w, "m1", "md-0");
    delete(&w, "m1");
    // sys0 is the machine the fake would hand out first anyway: the
    // other deployment takes it without a reuse, and the record stays
    // until MAAS says it is taken.
    worker(&w, "m2", "md-1");
    let asked = w.maas.allocations.lock().unwrap().last().cloned().unwrap();
    assert_eq!(asked.system_id, None);
    assert!(w
        .maas_machine(NS, "m2")
        .status
        .unwrap()
        .reused_machine
        .is_none());
    assert_eq!(reusable(&w)[&id], json!("MachineDeployment/md-0"));
}

#[test]
fn a_machine_someone_took_since_its_release_is_never_reused() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    let id = worker(&w, "m1", "md-0");
    delete(&w, "m1");
    // Another MAAS user allocated and released it meanwhile: free again,
    // but with someone else's data on its disks.
    w.maas.request_event(&id, "User acquiring node", None);
    w.maas.request_event(
        &id,
        "User releasing node",
        Some("node reuse by MachineDeployment/md-0 of ns/c0"),
    );
    worker(&w, "m2", "md-0");
    let allocations = w.maas.allocations.lock().unwrap().clone();
    assert!(
        allocations.iter().all(|a| a.system_id.is_none()),
        "{allocations:?}"
    );
    assert!(w
        .maas_machine(NS, "m2")
        .status
        .unwrap()
        .reused_machine
        .is_none());
    assert_eq!(reusable(&w), json!({}), "the stale record is dropped");
}

#[test]
fn a_lost_allocate_answer_is_still_recorded_as_a_reuse() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    let id = worker(&w, "m1", "md-0");
    delete(&w, "m1");
    w.maas.faults.lock().unwrap().lose_allocate_answer = true;
    new_worker(&w, "m2", "md-0");
    assert!(reconcile(&w, "m2").is_err(), "the answer was lost");
    reconcile(&w, "m2").unwrap();
    let mm = w.maas_machine(NS, "m2");
    assert_eq!(mm.spec.system_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        mm.status.unwrap().reused_machine.as_deref(),
        Some(id.as_str())
    );
    assert_eq!(
        w.maas.allocations.lock().unwrap().len(),
        2,
        "one allocation each"
    );
    assert_eq!(reusable(&w), json!({}));
}

#[test]
fn without_node_reuse_or_with_the_cluster_going_nothing_is_kept() {
    for cluster_deleting in [false, true] {
        let w = erasing_world(2);
        w.cluster(NS, "c1");
        let id = worker(&w, "m1", "md-0");
        if cluster_deleting {
            w.delete(CAPI_CLUSTER, NS, "c1");
        } else {
            w.edit(MAAS_MACHINE, NS, "m1", |v| {
                v["spec"]["nodeReuse"] = json!(false)
            });
        }
        delete(&w, "m1");
        let releases = w.maas.releases.lock().unwrap().clone();
        assert_eq!(releases[0].0, id);
        assert!(releases[0].1.erase, "erased as the flag says");
        assert_eq!(reusable(&w), Value::Null);
    }
}

#[test]
fn a_machine_still_releasing_is_waited_for() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    let id = worker(&w, "m1", "md-0");
    delete(&w, "m1");
    w.maas
        .set_state(&id, MachineStatus::Releasing, "Releasing", PowerState::On);
    let allocations = w.maas.allocations.lock().unwrap().len();
    new_worker(&w, "m2", "md-0");
    assert!(matches!(
        reconcile(&w, "m2").unwrap(),
        Action::RequeueAfter(_)
    ));
    assert_eq!(
        w.maas.allocations.lock().unwrap().len(),
        allocations,
        "nothing taken"
    );
    assert_eq!(reusable(&w)[&id], json!("MachineDeployment/md-0"));

    w.maas
        .set_state(&id, MachineStatus::Ready, "Ready", PowerState::Off);
    reconcile(&w, "m2").unwrap();
    assert_eq!(
        w.maas_machine(NS, "m2").spec.system_id.as_deref(),
        Some(id.as_str())
    );
}

#[test]
fn a_new_machine_waits_for_the_one_its_deployment_is_deleting() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    let id = worker(&w, "m1", "md-0");
    // Cluster API creates the replacement as soon as it starts deleting.
    w.delete(MAAS_MACHINE, NS, "m1");
    new_worker(&w, "m2", "md-0");
    let allocations = w.maas.allocations.lock().unwrap().len();
    assert!(matches!(
        reconcile(&w, "m2").unwrap(),
        Action::RequeueAfter(_)
    ));
    assert_eq!(w.maas.allocations.lock().unwrap().len(), allocations);
    reconcile(&w, "m1").unwrap();
    reconcile(&w, "m2").unwrap();
    assert_eq!(
        w.maas_machine(NS, "m2").spec.system_id.as_deref(),
        Some(id.as_str())
    );
}

/// Issue 23 item 3: the address from an IPAM pool stays with the machine.
#[test]
fn a_reused_machine_comes_back_with_its_static_address() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    let pools = json!({"addressesFromPools": [
        {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "nodes"}]});
    new_worker(&w, "m1", "md-0");
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["network"] = pools.clone()
    });
    reconcile(&w, "m1").unwrap();
    let id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    // Named after the machine, owned by the MaasCluster.
    let claim_name = format!("c1-{id}-0");
    let claim = w
        .kube
        .get(IP_ADDRESS_CLAIM, NS, &claim_name)
        .expect("claim");
    assert_eq!(
        claim["metadata"]["ownerReferences"][0]["kind"],
        "MaasCluster"
    );
    // The IPAM provider answers.
    w.kube.put(
        IP_ADDRESS,
        json!({"metadata": {"name": claim_name, "namespace": NS},
               "spec": {"address": "10.0.0.77", "prefix": 24, "gateway": "10.0.0.1",
                        "claimRef": {"name": claim_name}}}),
    );
    w.edit(IP_ADDRESS_CLAIM, NS, &claim_name, |v| {
        v["status"] = json!({"addressRef": {"name": claim_name}})
    });
    reconcile(&w, "m1").unwrap();
    let links = |w: &World| {
        w.maas
            .calls()
            .into_iter()
            .filter(|c| c.starts_with("link_subnet") || c.starts_with("unlink_subnet"))
            .count()
    };
    let linked = links(&w);
    assert!(linked >= 1, "{:?}", w.maas.calls());
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();

    delete(&w, "m1");
    assert_eq!(links(&w), linked, "nothing unlinked on a release for reuse");
    assert!(w.kube.get(IP_ADDRESS_CLAIM, NS, &claim_name).is_some());

    new_worker(&w, "m2", "md-0");
    w.edit(MAAS_MACHINE, NS, "m2", |v| {
        v["spec"]["network"] = pools.clone()
    });
    reconcile(&w, "m2").unwrap();
    assert_eq!(
        w.maas_machine(NS, "m2").spec.system_id.as_deref(),
        Some(id.as_str())
    );
    assert_eq!(links(&w), linked, "the STATIC link MAAS kept is recognised");
    assert_eq!(
        *w.kube.ipam_calls.lock().unwrap(),
        vec![format!("create {claim_name}")],
        "the same claim, so the same address"
    );
    assert_eq!(w.maas.host(&id).ip_addresses, vec!["10.0.0.77".to_string()]);
}

/// A control plane of KCP `kcp` in cluster `c1` with `nodeReuse`, placed by
/// KCP in failure domain `zone`, reconciled until its machine deploys; its
/// system ID.
fn control_plane(w: &World, name: &str, zone: &str) -> String {
    w.machine(NS, "c1", name, true);
    w.edit(CAPI_MACHINE, NS, name, |v| {
        v["metadata"]["labels"]["cluster.x-k8s.io/control-plane-name"] = json!("kcp");
        v["spec"]["failureDomain"] = json!(zone);
    });
    w.edit(MAAS_MACHINE, NS, name, |v| {
        v["metadata"]["labels"]["cluster.x-k8s.io/control-plane-name"] = json!("kcp");
        v["spec"]["nodeReuse"] = json!(true);
    });
    reconcile(w, name).unwrap();
    w.maas_machine(NS, name).spec.system_id.expect("allocated")
}

/// KCP 3 → 1 → 3 spreads its machines over the failure domains: each new
/// control plane takes back the released machine of its own zone, and a
/// machine of another zone is kept for the sibling placed there (MAAS
/// would refuse it to this one, which is no reason to forget it).
#[test]
fn each_control_plane_takes_back_the_machine_of_its_failure_domain() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["failureDomains"] = json!(["az1", "az2"])
    });
    // sys000 and sys002 stay in az1, sys001 is in az2.
    w.maas.edit_host("sys001", |h| h.zone = "az2".into());
    let in_az1 = control_plane(&w, "cp1", "az1");
    let in_az2 = control_plane(&w, "cp2", "az2");
    assert_eq!((in_az1.as_str(), in_az2.as_str()), ("sys000", "sys001"));
    delete(&w, "cp1");
    delete(&w, "cp2");
    assert_eq!(
        reusable(&w),
        json!({"sys000": "ControlPlane/kcp", "sys001": "ControlPlane/kcp"})
    );

    // KCP places the first new one in az2: the az1 machine, tried first,
    // is not its to take.
    assert_eq!(control_plane(&w, "cp3", "az2"), in_az2);
    assert_eq!(reusable(&w), json!({"sys000": "ControlPlane/kcp"}));
    assert_eq!(control_plane(&w, "cp4", "az1"), in_az1);
    for (name, id) in [("cp3", &in_az2), ("cp4", &in_az1)] {
        let status = w.maas_machine(NS, name).status.unwrap_or_default();
        assert_eq!(status.reused_machine.as_ref(), Some(id), "{name}");
    }
    assert_eq!(reusable(&w), json!({}));
    let asked: Vec<_> = w.maas.allocations.lock().unwrap().clone();
    assert!(
        asked
            .iter()
            .all(|a| a.system_id.is_none() || a.zone.is_some()),
        "{asked:?}"
    );
    assert_eq!(
        asked.iter().filter(|a| a.system_id.is_some()).count(),
        2,
        "no allocation MAAS had to refuse: {asked:?}"
    );
}
