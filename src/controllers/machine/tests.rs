//! MaasMachine reconcile steps against the in-memory fakes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::api::conditions::{self, Status};
use crate::api::maas_machine as mm_api;
use crate::controllers::fake::{World, CAPI_CLUSTER, MAAS_CLUSTER, MAAS_MACHINE};
use crate::controllers::identity::OWNER_DATA_KEY;
use crate::controllers::ports::{Clock, Kind, MaasApi};
use crate::controllers::{Error, Options};
use crate::maas::{MachineStatus, PowerState};
use crate::runtime::Action;

const NS: &str = "ns";

fn reconcile(w: &World, name: &str) -> Result<Action, Error> {
    super::reconcile(&w.ctx, NS, name)
}

fn condition(w: &World, name: &str, type_: &str) -> Option<conditions::Condition> {
    let mm = w.maas_machine(NS, name);
    conditions::get(mm.conditions(), type_).cloned()
}

fn reason(w: &World, name: &str, type_: &str) -> String {
    condition(w, name, type_)
        .map(|c| c.reason.into_owned())
        .unwrap_or_default()
}

/// One cluster `c1` and one worker `m1`, reconciled until deploying.
fn deploying_worker(w: &World) -> String {
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    reconcile(w, "m1").unwrap();
    w.maas_machine(NS, "m1").spec.system_id.expect("allocated")
}

/// Issue 23 item 5: the zone asked for has no machine left.
fn worker_in_az2(w: &World, fallback: bool) {
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["failureDomains"] = json!(["az1", "az2", "az3"])
    });
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["failureDomain"] = json!("az2");
        v["spec"]["notInZones"] = json!(["az3"]);
        if fallback {
            v["spec"]["failureDomainFallback"] = json!(true);
        }
    });
}

#[test]
fn without_fallback_an_empty_failure_domain_waits() {
    let w = World::new(1); // its one machine is in az1
    worker_in_az2(&w, false);
    reconcile(&w, "m1").unwrap();
    assert!(w.maas.allocated().is_empty());
    assert_eq!(lock_allocations(&w).len(), 1, "only az2 asked");
    assert!(condition(&w, "m1", mm_api::FAILURE_DOMAIN_MATCHED).is_none());
}

#[test]
fn with_fallback_another_zone_of_the_cluster_is_used_and_said() {
    let w = World::new(1);
    worker_in_az2(&w, true);
    reconcile(&w, "m1").unwrap();
    let zones: Vec<Option<String>> = lock_allocations(&w).into_iter().map(|a| a.zone).collect();
    // az2 first, then the cluster's others that notInZones allows.
    assert_eq!(zones, [Some("az2".into()), Some("az1".into())]);
    let mm = w.maas_machine(NS, "m1");
    assert_eq!(mm.spec.failure_domain.as_deref(), Some("az1"));
    assert!(mm.spec.provider_id.unwrap().starts_with("maas:///az1/"));
    let c = condition(&w, "m1", mm_api::FAILURE_DOMAIN_MATCHED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_ref()),
        (Status::False, mm_api::FAILURE_DOMAIN_FALLBACK)
    );
    assert!(
        c.message.contains("\"az2\"") && c.message.contains("\"az1\""),
        "{}",
        c.message
    );
    assert!(w
        .kube
        .event_reasons()
        .iter()
        .any(|r| r == mm_api::FAILURE_DOMAIN_FALLBACK));
}

#[test]
fn waits_for_the_owner_machine_without_touching_maas() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["ownerReferences"] = json!([])
    });
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty());
    assert!(w.maas_machine(NS, "m1").metadata.finalizers.is_empty());
}

#[test]
fn waits_for_cluster_infrastructure_then_bootstrap_data() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(CAPI_CLUSTER, NS, "c1", |v| v["status"] = json!({}));
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::WAITING_FOR_CLUSTER_INFRASTRUCTURE
    );
    assert_eq!(
        w.maas_machine(NS, "m1").metadata.finalizers,
        vec![mm_api::FINALIZER.to_string()]
    );

    w.edit(CAPI_CLUSTER, NS, "c1", |v| {
        v["status"] = json!({"initialization": {"infrastructureProvisioned": true}})
    });
    w.edit("Machine", NS, "m1", |v| v["spec"]["bootstrap"] = json!({}));
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::WAITING_FOR_BOOTSTRAP_DATA
    );
    assert!(w.maas.calls().is_empty());
    let ready = condition(&w, "m1", conditions::READY).unwrap();
    assert_eq!(ready.status, Status::False);
}

#[test]
fn allocates_records_the_provider_id_then_deploys() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["deployInMemory"] = json!(true);
        v["spec"]["failureDomain"] = json!("az1");
    });
    let next = reconcile(&w, "m1").unwrap();
    assert!(
        matches!(next, Action::RequeueAfter(_)),
        "polls while deploying: {next:?}"
    );

    let mm = w.maas_machine(NS, "m1");
    let system_id = mm.spec.system_id.clone().unwrap();
    assert_eq!(
        mm.spec.provider_id.as_deref(),
        Some(format!("maas:///az1/{system_id}").as_str())
    );
    assert_eq!(mm.spec.failure_domain.as_deref(), Some("az1"));

    // The spec write with the providerID precedes the deploy call.
    let calls = w.maas.calls();
    let allocate = calls.iter().position(|c| c == "allocate").unwrap();
    let deploy = calls.iter().position(|c| c.starts_with("deploy")).unwrap();
    assert!(calls[allocate..deploy]
        .iter()
        .any(|c| c.starts_with("disable_swap")));
    let writes = w.kube.writes();
    assert!(writes
        .iter()
        .any(|wr| !wr.status && wr.patch["spec"]["systemID"] == json!(system_id)));

    let deploys = w.maas.deploys.lock().unwrap().clone();
    assert_eq!(deploys.len(), 1);
    let (_, req) = &deploys[0];
    assert_eq!(req.image.as_deref(), Some("custom/u-2204-0-k-1264-0"));
    assert_eq!(req.user_data.as_deref(), Some(&b"#cloud-config\n"[..]));
    assert!(req.ephemeral_deploy);
    assert_eq!(req.agent_name.as_deref(), Some("capmaas/ns/m1/uid-mm-m1"));
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_DEPLOYING
    );
    assert!(!w.maas_machine(NS, "m1").is_provisioned());
    assert!(w
        .kube
        .event_reasons()
        .contains(&"MachineAllocated".to_string()));

    w.maas.finish_deployments();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let mm = w.maas_machine(NS, "m1");
    let status = mm.status();
    assert!(mm.is_provisioned() && status.ready);
    assert_eq!(status.machine_state.as_deref(), Some("Deployed"));
    assert!(status.machine_powered);
    assert!(status.addresses.iter().any(|a| a.type_ == "ExternalIP"));
    assert!(conditions::is_true(
        mm.conditions(),
        mm_api::MACHINE_DEPLOYED
    ));
    assert!(conditions::is_true(mm.conditions(), conditions::READY));
    assert_eq!(w.maas.allocated(), vec![system_id]);
}

#[test]
fn allocation_request_carries_the_constraints() {
    let w = World::new(0);
    w.maas.add_ready("small", "small", "az1", 1, 1024);
    w.maas.add_ready("gpu", "gpu", "az2", 8, 16384);
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut("gpu")
        .unwrap()
        .tag_names = vec!["gpu".into()];
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["tags"] = json!(["gpu"]);
        v["spec"]["minCPU"] = json!(4);
    });
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        w.maas_machine(NS, "m1").spec.system_id.as_deref(),
        Some("gpu")
    );
    assert_eq!(
        w.maas_machine(NS, "m1").spec.provider_id.as_deref(),
        Some("maas:///az2/gpu")
    );
}

#[test]
fn a_lost_allocate_answer_never_allocates_twice() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.faults.lock().unwrap().lose_allocate_answer = true;
    assert!(reconcile(&w, "m1").is_err());
    assert_eq!(w.maas.allocated().len(), 1, "MAAS did allocate");
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_none());

    reconcile(&w, "m1").unwrap();
    assert_eq!(
        w.maas.allocated().len(),
        1,
        "found by agent_name, not allocated again"
    );
    let allocates = w.maas.calls().iter().filter(|c| *c == "allocate").count();
    assert_eq!(allocates, 1);
    assert_eq!(
        w.maas_machine(NS, "m1").spec.system_id,
        Some(w.maas.allocated()[0].clone())
    );
}

#[test]
fn a_stale_cache_after_allocation_does_not_allocate_again() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    let before = w.kube.get(MAAS_MACHINE, NS, "m1").unwrap();
    reconcile(&w, "m1").unwrap();
    // The next reconcile reads the object as it was before our writes.
    w.kube
        .stale
        .lock()
        .unwrap()
        .insert((MAAS_MACHINE, NS.into(), "m1".into()), before);
    let _ = reconcile(&w, "m1");
    assert_eq!(w.maas.allocated().len(), 1);
    assert_eq!(
        w.maas.calls().iter().filter(|c| *c == "allocate").count(),
        1
    );
}

#[test]
fn missing_image_is_reported_with_the_closest_names_before_allocating() {
    let w = World::new(3);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["image"] = json!("u-2204-0-k-1265-0")
    });
    let err = reconcile(&w, "m1").unwrap_err();
    assert!(matches!(err, Error::Retry(_)), "{err}");
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_ref()),
        (Status::False, mm_api::MACHINE_DEPLOY_FAILED)
    );
    assert!(c.message.contains("\"u-2204-0-k-1265-0\""), "{}", c.message);
    assert!(
        c.message.contains("custom/u-2204-0-k-1264-0"),
        "{}",
        c.message
    );
    assert!(
        w.maas.allocated().is_empty(),
        "no machine is held for an image that does not exist"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"ImageNotFound".to_string()));

    // Fixing the image recovers on its own.
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["image"] = json!("custom/u-2204-0-k-1264-0")
    });
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_DEPLOYING
    );
}

#[test]
fn no_matching_machine_shows_maas_words_and_retries_from_seconds_to_minutes() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(c.reason, mm_api::MACHINE_DEPLOY_FAILED);
    assert!(
        c.message
            .contains("No available machine matches constraints"),
        "{}",
        c.message
    );
    let next = crate::kube::time::time_of_unix_seconds(w.clock.now() + 10);
    assert!(
        c.message
            .ends_with(&format!("; next try at {next} (in 10s)")),
        "{}",
        c.message
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"MachineAllocationFailed".to_string()));

    // Woken earlier (a watch event, the resync): MAAS is not asked again
    // before the time the condition names.
    w.maas.clear_calls();
    w.clock.advance(4);
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(6))
    );
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());
    // Each try waits twice as long as the one before, up to 5 minutes.
    let mut waits = Vec::new();
    for _ in 0..7 {
        let Action::RequeueAfter(wait) = reconcile(&w, "m1").unwrap() else {
            panic!("no requeue");
        };
        w.clock.advance(wait.as_secs());
        let Action::RequeueAfter(wait) = reconcile(&w, "m1").unwrap() else {
            panic!("no requeue");
        };
        waits.push(wait.as_secs());
    }
    assert_eq!(waits, [20, 40, 80, 160, 300, 300, 300]);
    let allocates = w.maas.calls().iter().filter(|c| *c == "allocate").count();
    assert_eq!(allocates, 7, "{:?}", w.maas.calls());

    // A machine that fits appears: taken at the next try.
    w.maas.add_ready("sys001", "late", "az1", 4, 8192);
    w.clock.advance(300);
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        w.maas_machine(NS, "m1").spec.system_id.as_deref(),
        Some("sys001")
    );
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_DEPLOYING
    );
}

#[test]
fn a_spec_change_ends_the_wait_for_the_next_allocation() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| v["spec"]["minCPU"] = json!(64));
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    // The user lowers the constraint (a new generation): tried at once.
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["minCPU"] = json!(2);
        v["metadata"]["generation"] = json!(2);
    });
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        w.maas_machine(NS, "m1").spec.system_id.as_deref(),
        Some("sys000")
    );
}

#[test]
fn deploy_rejected_keeps_the_allocation_and_retries() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.fail_once(
        "deploy",
        400,
        "{\"distro_series\": [\"'x' is not a valid distro_series.\"]}",
    );
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    let system_id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_DEPLOY_FAILED
    );
    assert!(
        w.maas.releases.lock().unwrap().is_empty(),
        "not released: the providerID stays valid"
    );
    w.maas.clear_calls();
    reconcile(&w, "m1").unwrap();
    assert!(
        !w.maas.calls().iter().any(|c| c.starts_with("deploy")),
        "not before the next try: {:?}",
        w.maas.calls()
    );
    w.clock.advance(10);
    reconcile(&w, "m1").unwrap();
    assert_eq!(w.maas.host(&system_id).status, MachineStatus::Deploying);
}

#[test]
fn no_swap_update_skips_the_admin_only_call() {
    let w = World::with_options(
        1,
        Options {
            no_swap_update: true,
            ..Options::default()
        },
    );
    deploying_worker(&w);
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("disable_swap")));
}

#[test]
fn deployed_and_powered_off_is_powered_on() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();
    w.maas
        .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::Off);
    let next = reconcile(&w, "m1").unwrap();
    assert_eq!(next, Action::RequeueAfter(Duration::from_secs(60)));
    assert!(w.maas.calls().contains(&format!("power_on {id}")));
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_POWERED_OFF
    );
    assert!(
        w.maas_machine(NS, "m1").is_provisioned(),
        "provisioned never flips back"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"MachinePoweredOn".to_string()));
    reconcile(&w, "m1").unwrap();
    assert!(conditions::is_true(
        w.maas_machine(NS, "m1").conditions(),
        mm_api::MACHINE_DEPLOYED
    ));
}

/// On IPMI, MAAS's power on is `ipmipower --cycle --on-if-off`: asked of
/// a machine whose BMC did not answer (`unknown`, `error`) it resets a
/// running node. Only a machine MAAS reports `off` is powered on.
#[test]
fn deployed_with_unknown_power_is_never_powered_on() {
    for state in [PowerState::Unknown, PowerState::Error] {
        let w = World::new(1);
        let id = deploying_worker(&w);
        w.maas.finish_deployments();
        reconcile(&w, "m1").unwrap();
        w.maas
            .set_state(&id, MachineStatus::Deployed, "Deployed", state.clone());
        for _ in 0..3 {
            let next = reconcile(&w, "m1").unwrap();
            assert_eq!(next, Action::RequeueAfter(Duration::from_secs(60)));
        }
        assert!(
            !w.maas.calls().iter().any(|c| c.starts_with("power_")),
            "{state:?}: {:?}",
            w.maas.calls()
        );
        assert_eq!(
            reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
            mm_api::MACHINE_POWER_STATE_UNKNOWN
        );
        let warnings = w
            .kube
            .event_reasons()
            .iter()
            .filter(|r| *r == "PowerStateUnknown")
            .count();
        assert_eq!(warnings, 1, "one Warning, not one per reconcile");
        assert!(w.maas_machine(NS, "m1").is_provisioned());
        // The BMC answers again: the machine is deployed and on.
        w.maas
            .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::On);
        reconcile(&w, "m1").unwrap();
        assert!(conditions::is_true(
            w.maas_machine(NS, "m1").conditions(),
            mm_api::MACHINE_DEPLOYED
        ));
    }
}

#[test]
fn a_reconcile_that_observes_nothing_new_writes_nothing() {
    let w = World::new(1);
    deploying_worker(&w);
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();
    w.kube.clear_writes();
    w.maas.clear_calls();
    w.clock.advance(3600);
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
    assert_eq!(
        w.maas.calls().len(),
        1,
        "one GET of the machine: {:?}",
        w.maas.calls()
    );
}

#[test]
fn polling_slows_down_while_deploying() {
    let w = World::new(1);
    deploying_worker(&w);
    let Action::RequeueAfter(first) = reconcile(&w, "m1").unwrap() else {
        panic!()
    };
    w.clock.advance(400);
    let Action::RequeueAfter(later) = reconcile(&w, "m1").unwrap() else {
        panic!()
    };
    assert!(later > first, "{first:?} then {later:?}");
    w.clock.advance(100_000);
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(120))
    );
}

#[test]
fn terminal_state_sets_failure_and_recovery_clears_it() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.set_state(
        &id,
        MachineStatus::FailedDeployment,
        "Failed deployment",
        PowerState::Off,
    );
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::Done,
        "terminal states are not polled"
    );
    let status = w.maas_machine(NS, "m1").status();
    assert_eq!(
        status.failure_reason.as_deref(),
        Some(mm_api::UPDATE_MACHINE_ERROR)
    );
    assert!(status
        .failure_message
        .unwrap()
        .contains("Failed deployment"));
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_STATE_UNDEFINED
    );

    w.maas
        .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::On);
    reconcile(&w, "m1").unwrap();
    let status = w.maas_machine(NS, "m1").status();
    assert_eq!(status.failure_reason, None);
    assert_eq!(status.failure_message, None);
    assert!(status.ready);
}

#[test]
fn machine_gone_from_maas_before_provisioning_is_reported_not_replaced() {
    // spec.systemID cannot change once set, so no second machine is taken:
    // the object says why and waits for a person or a MachineHealthCheck.
    let w = World::new(2);
    let id = deploying_worker(&w);
    w.maas.machines.lock().unwrap().remove(&id);
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert_eq!(w.maas_machine(NS, "m1").spec.system_id, Some(id));
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_NOT_FOUND
    );
    assert!(w.maas.allocated().is_empty(), "nothing allocated again");
}

#[test]
fn machine_gone_from_maas_after_provisioning_is_terminal() {
    let w = World::new(2);
    let id = deploying_worker(&w);
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();
    w.maas.machines.lock().unwrap().remove(&id);
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let mm = w.maas_machine(NS, "m1");
    assert_eq!(
        mm.spec.system_id.as_deref(),
        Some(id.as_str()),
        "the providerID is kept"
    );
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_NOT_FOUND
    );
    assert!(mm.status().failure_message.is_some());
    assert_eq!(w.maas.allocated().len(), 0);
}

#[test]
fn delete_releases_then_removes_the_finalizer() {
    let w = World::with_options(
        1,
        Options {
            release_erase: true,
            ..Options::default()
        },
    );
    let id = deploying_worker(&w);
    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let releases = w.maas.releases.lock().unwrap().clone();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].0, id);
    assert!(releases[0].1.erase);
    assert!(
        w.kube.get(MAAS_MACHINE, NS, "m1").is_none(),
        "finalizer removed, object gone"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"SuccessfulRelease".to_string()));
    assert!(w.maas.allocated().is_empty());
}

#[test]
fn delete_with_the_machine_gone_from_maas_does_not_block() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.machines.lock().unwrap().remove(&id);
    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
    assert!(w
        .kube
        .event_reasons()
        .contains(&"NoMachineFound".to_string()));
}

#[test]
fn allocation_marks_the_object_with_our_identity() {
    let w = World::new(1);
    deploying_worker(&w);
    let mm = w.maas_machine(NS, "m1");
    let marker = mm.metadata.annotations.get(mm_api::AGENT_NAME_ANNOTATION);
    assert_eq!(
        marker.map(String::as_str),
        Some(format!("capmaas/{NS}/m1/{}", mm.metadata.uid).as_str())
    );
}

#[test]
fn delete_after_a_crash_never_releases_a_machine_someone_else_took() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    // Released before a crash (the answer lost, the finalizer still on),
    // then allocated by someone else: MAAS cleared our identity.
    w.maas
        .agent_names
        .lock()
        .unwrap()
        .insert(id.clone(), "someone-else".into());
    {
        let mut machines = w.maas.machines.lock().unwrap();
        let host = machines.get_mut(&id).unwrap();
        host.owner = Some("alice".into());
        host.owner_data = [(OWNER_DATA_KEY.to_string(), "capmaas/other/x/u".to_string())].into();
    }
    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.releases.lock().unwrap().is_empty(), "left alone");
    assert_eq!(w.maas.allocated(), vec![id]);
    assert!(
        w.kube.get(MAAS_MACHINE, NS, "m1").is_none(),
        "finalizer removed"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&mm_api::MACHINE_NOT_OWNED.to_string()));
}

#[test]
fn delete_after_a_crash_that_followed_the_release_just_removes_the_finalizer() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    // Released, the answer lost in a crash: the machine is free in MAAS.
    w.maas.agent_names.lock().unwrap().remove(&id);
    {
        let mut machines = w.maas.machines.lock().unwrap();
        let host = machines.get_mut(&id).unwrap();
        host.status = MachineStatus::Ready;
        host.owner = None;
        host.owner_data.clear();
    }
    w.delete(MAAS_MACHINE, NS, "m1");
    w.kube.clear_writes();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.releases.lock().unwrap().is_empty());
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
    assert!(
        w.kube.event_reasons().is_empty(),
        "no event claims anything: {:?}",
        w.kube.event_reasons()
    );
}

#[test]
fn delete_while_our_machine_is_still_releasing_claims_nothing_untrue() {
    // Issue 11: a second reconcile of a deleting MaasMachine once said the
    // machine "is now admin's" while MAAS was still releasing it for us.
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.agent_names.lock().unwrap().remove(&id);
    w.maas
        .set_state(&id, MachineStatus::Releasing, "Releasing", PowerState::On);
    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(!w
        .kube
        .event_reasons()
        .contains(&mm_api::MACHINE_NOT_OWNED.to_string()));
    assert!(
        w.maas.releases.lock().unwrap().is_empty(),
        "MAAS is releasing it already: no second release (a no-op in MAAS)"
    );
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
}

#[test]
fn delete_of_a_go_provider_object_waits_for_adoption_then_releases() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    // The Go provider marked neither the object nor the MAAS machine.
    w.maas.agent_names.lock().unwrap().remove(&id);
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .owner_data
        .clear();
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["annotations"] = json!({})
    });
    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(60)),
        "deleting it now would leak the machine"
    );
    assert!(w.maas.releases.lock().unwrap().is_empty());
    let ready = condition(&w, "m1", conditions::READY).unwrap();
    assert_eq!(ready.reason, mm_api::MACHINE_NOT_OWNED);
    assert!(ready.message.contains("capmaas adopt"), "{}", ready.message);

    // `capmaas adopt` gives object and machine one identity.
    let identity = "capmaas/ns/m1/adopted";
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["annotations"] = json!({mm_api::AGENT_NAME_ANNOTATION: identity})
    });
    w.maas
        .machines
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .owner_data = [(OWNER_DATA_KEY.to_string(), identity.to_string())].into();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let releases = w.maas.releases.lock().unwrap().clone();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].0, id);
    assert!(w.maas.allocated().is_empty());
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
}

#[test]
fn delete_after_a_lost_allocate_answer_releases_that_machine() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.faults.lock().unwrap().lose_allocate_answer = true;
    assert!(reconcile(&w, "m1").is_err());
    assert_eq!(w.maas.allocated().len(), 1);
    w.delete(MAAS_MACHINE, NS, "m1");
    reconcile(&w, "m1").unwrap();
    assert!(w.maas.allocated().is_empty(), "nothing leaked");
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
}

#[test]
fn deleting_control_plane_machine_waits_to_leave_dns() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "cp1", true);
    w.edit(
        MAAS_CLUSTER,
        NS,
        "c1",
        |v| v["status"] = json!({"ready": true, "network": {"dnsName": "c1-abcdef.maas"}}),
    );
    reconcile(&w, "cp1").unwrap();
    w.maas.finish_deployments();
    reconcile(&w, "cp1").unwrap();
    let ip = w
        .maas_machine(NS, "cp1")
        .status()
        .addresses
        .iter()
        .find(|a| a.type_ == "ExternalIP")
        .unwrap()
        .address
        .clone();
    // The cluster reconciler writes the record through the same view.
    let record = w
        .clients
        .default
        .create_dns_resource("c1-abcdef.maas", 30, std::slice::from_ref(&ip))
        .unwrap()
        .id;

    reconcile(&w, "cp1").unwrap();
    assert!(conditions::is_true(
        w.maas_machine(NS, "cp1").conditions(),
        mm_api::DNS_ATTACHED
    ));
    assert!(w.maas_machine(NS, "cp1").status().dns_attached);

    w.delete(MAAS_MACHINE, NS, "cp1");
    assert_eq!(
        reconcile(&w, "cp1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    assert_eq!(
        reason(&w, "cp1", mm_api::DNS_ATTACHED),
        mm_api::DNS_DETACH_PENDING
    );
    assert!(
        w.maas.releases.lock().unwrap().is_empty(),
        "not released while still in DNS"
    );

    // The cluster reconciler takes the address out.
    w.clients.default.set_dns_resource_ips(record, &[]).unwrap();
    assert_eq!(reconcile(&w, "cp1").unwrap(), Action::Done);
    assert_eq!(w.maas.releases.lock().unwrap().len(), 1);
    assert!(w.kube.get(MAAS_MACHINE, NS, "cp1").is_none());
}

#[test]
fn deleting_control_plane_machine_of_a_deleting_cluster_does_not_wait_for_dns() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "cp1", true);
    w.edit(
        MAAS_CLUSTER,
        NS,
        "c1",
        |v| v["status"] = json!({"ready": true, "network": {"dnsName": "c1-abcdef.maas"}}),
    );
    reconcile(&w, "cp1").unwrap();
    w.maas.finish_deployments();
    reconcile(&w, "cp1").unwrap();
    let ip = w
        .maas_machine(NS, "cp1")
        .status()
        .addresses
        .iter()
        .find(|a| a.type_ == "ExternalIP")
        .unwrap()
        .address
        .clone();
    w.clients
        .default
        .create_dns_resource("c1-abcdef.maas", 30, &[ip])
        .unwrap();
    reconcile(&w, "cp1").unwrap();
    assert!(w.maas_machine(NS, "cp1").status().dns_attached);

    // Cluster and machine deleted together: the MaasCluster waits for its
    // machines and deletes the record afterwards, so the machine must not
    // wait to leave the record.
    w.delete(MAAS_CLUSTER, NS, "c1");
    w.delete(MAAS_MACHINE, NS, "cp1");
    assert_eq!(reconcile(&w, "cp1").unwrap(), Action::Done);
    assert_eq!(w.maas.releases.lock().unwrap().len(), 1);
    assert!(w.kube.get(MAAS_MACHINE, NS, "cp1").is_none());
}

#[test]
fn paused_by_cluster_or_annotation_does_nothing_but_say_so() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(CAPI_CLUSTER, NS, "c1", |v| {
        v["spec"]["paused"] = json!(true)
    });
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty());
    let paused = condition(&w, "m1", conditions::PAUSED).unwrap();
    assert_eq!(
        (paused.status, paused.reason.as_ref()),
        (Status::True, conditions::PAUSED_REASON)
    );
    assert!(w.maas_machine(NS, "m1").metadata.finalizers.is_empty());

    // Deletion waits while paused too (clusterctl move).
    w.edit(CAPI_CLUSTER, NS, "c1", |v| {
        v["spec"]["paused"] = json!(false)
    });
    reconcile(&w, "m1").unwrap();
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["annotations"] = json!({"cluster.x-k8s.io/paused": ""})
    });
    w.delete(MAAS_MACHINE, NS, "m1");
    w.maas.clear_calls();
    reconcile(&w, "m1").unwrap();
    assert!(w.maas.calls().is_empty());
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_some());
    assert_eq!(
        condition(&w, "m1", conditions::PAUSED).unwrap().status,
        Status::True
    );
}

fn api_available(w: &World) {
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["status"] = json!({"ready": true, "conditions": [
            {"type": "APIServerAvailable", "status": "True", "reason": "APIServerAvailable", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]})
    });
}

#[test]
fn sets_the_node_provider_id_once_the_api_is_up() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", mm_api::NODE_PROVIDER_ID_SET),
        mm_api::WAITING_FOR_NODE
    );

    api_available(&w);
    let Action::RequeueAfter(_) = reconcile(&w, "m1").unwrap() else {
        panic!("waits for the Node")
    };
    // The Node is named after the short hostname.
    let hostname = w.maas.host(&id).hostname;
    w.workload
        .nodes
        .lock()
        .unwrap()
        .insert(("c1".into(), hostname.clone()), String::new());
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let provider_id = w.maas_machine(NS, "m1").spec.provider_id.unwrap();
    assert_eq!(
        w.workload.nodes.lock().unwrap()[&("c1".to_string(), hostname)],
        provider_id
    );
    assert!(conditions::is_true(
        w.maas_machine(NS, "m1").conditions(),
        mm_api::NODE_PROVIDER_ID_SET
    ));
}

/// Issue 23 item 4: MAAS's zone, pool and tags on the Node, kept in step.
#[test]
fn the_node_carries_maas_facts_as_labels_kept_in_step() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.edit_host(&id, |h| {
        h.pool = "worker-pool".into();
        h.tag_names = vec!["worker".into(), "gpu".into(), "bad tag!".into()];
    });
    w.maas.finish_deployments();
    api_available(&w);
    let hostname = w.maas.host(&id).hostname;
    let node = ("c1".to_string(), hostname.clone());
    w.workload
        .nodes
        .lock()
        .unwrap()
        .insert(node.clone(), String::new());
    // Someone else's label is never touched.
    w.workload.node_labels.lock().unwrap().insert(
        node.clone(),
        [("team".to_string(), "storage".to_string())].into(),
    );
    reconcile(&w, "m1").unwrap();
    let zone = w.maas.host(&id).zone;
    let labels = |w: &World| w.workload.node_labels.lock().unwrap()[&node].clone();
    assert_eq!(
        labels(&w),
        [
            ("maas.capmaas.io/pool", "worker-pool"),
            ("maas.capmaas.io/tag.gpu", "true"),
            ("maas.capmaas.io/tag.worker", "true"),
            ("team", "storage"),
            ("topology.kubernetes.io/zone", zone.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>()
    );
    assert_eq!(w.maas_machine(NS, "m1").status().node_labels.len(), 4);

    // Nothing new: no workload call at all.
    w.workload.node_labels.lock().unwrap().remove(&node);
    reconcile(&w, "m1").unwrap();
    assert!(!w.workload.node_labels.lock().unwrap().contains_key(&node));

    // MAAS changes: a tag goes, the pool changes; our old label goes.
    w.maas.edit_host(&id, |h| {
        h.pool = "other-pool".into();
        h.tag_names = vec!["worker".into()];
    });
    w.workload.node_labels.lock().unwrap().insert(
        node.clone(),
        [("maas.capmaas.io/tag.gpu".to_string(), "true".to_string())].into(),
    );
    w.watched().list();
    reconcile(&w, "m1").unwrap();
    let now = labels(&w);
    assert_eq!(
        now.get("maas.capmaas.io/pool").map(String::as_str),
        Some("other-pool")
    );
    assert!(!now.contains_key("maas.capmaas.io/tag.gpu"), "{now:?}");
    assert!(now.contains_key("maas.capmaas.io/tag.worker"));
}

#[test]
fn node_labels_are_off_with_the_opt_out() {
    let w = World::with_options(
        1,
        Options {
            no_node_maas_labels: true,
            ..Options::default()
        },
    );
    let id = deploying_worker(&w);
    w.maas.finish_deployments();
    api_available(&w);
    let hostname = w.maas.host(&id).hostname;
    w.workload
        .nodes
        .lock()
        .unwrap()
        .insert(("c1".into(), hostname), String::new());
    reconcile(&w, "m1").unwrap();
    assert!(conditions::is_true(
        w.maas_machine(NS, "m1").conditions(),
        mm_api::NODE_PROVIDER_ID_SET
    ));
    assert!(w.workload.node_labels.lock().unwrap().is_empty());
    assert!(w.maas_machine(NS, "m1").status().node_labels.is_empty());
}

#[test]
fn node_with_another_provider_id_is_reported_not_retried() {
    let w = World::new(1);
    let id = deploying_worker(&w);
    w.maas.finish_deployments();
    api_available(&w);
    let hostname = w.maas.host(&id).hostname;
    w.workload
        .nodes
        .lock()
        .unwrap()
        .insert(("c1".into(), hostname), "aws:///x/i-123".into());
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let c = condition(&w, "m1", mm_api::NODE_PROVIDER_ID_SET).unwrap();
    assert_eq!(c.reason, mm_api::NODE_PROVIDER_ID_MISMATCH);
    assert!(c.message.contains("aws:///x/i-123"));
    assert!(
        w.maas_machine(NS, "m1").status().ready,
        "the machine itself is fine"
    );
    let events_before = w.kube.event_reasons().len();
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        w.kube.event_reasons().len(),
        events_before,
        "one warning, not one per reconcile"
    );
}

#[test]
fn status_patch_is_a_diff_and_keeps_unknown_fields() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["lxd"] = json!({"enabled": false})
    });
    reconcile(&w, "m1").unwrap();
    let raw = w.kube.get(MAAS_MACHINE, NS, "m1").unwrap();
    assert_eq!(raw["spec"]["lxd"], json!({"enabled": false}));
    for write in w
        .kube
        .writes()
        .iter()
        .filter(|wr| wr.kind == Kind::MaasMachine && !wr.status)
    {
        assert!(write.patch.get("status").is_none());
    }
}

#[test]
fn control_plane_label_on_the_machine_alone_counts() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "cp1", true);
    w.edit(MAAS_MACHINE, NS, "cp1", |v| {
        v["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "c1"})
    });
    w.edit(
        MAAS_CLUSTER,
        NS,
        "c1",
        |v| v["status"] = json!({"ready": true, "network": {"dnsName": "c1-abcdef.maas"}}),
    );
    w.maas.add_dns("c1-abcdef.maas", &[]);
    reconcile(&w, "cp1").unwrap();
    w.maas.finish_deployments();
    // Deployed and running, but not yet in the record: not Ready.
    assert_eq!(
        reconcile(&w, "cp1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    assert_eq!(
        reason(&w, "cp1", mm_api::DNS_ATTACHED),
        mm_api::DNS_ATTACH_PENDING
    );
    let ready = condition(&w, "cp1", conditions::READY).unwrap();
    assert_eq!(ready.status, Status::False);
    assert!(ready.message.contains("DNSAttached"), "{}", ready.message);
}

#[test]
fn a_maas_outage_changes_no_status() {
    let w = World::new(1);
    deploying_worker(&w);
    w.maas.finish_deployments();
    reconcile(&w, "m1").unwrap();
    w.kube.clear_writes();
    w.maas
        .fail_once("machine", 503, "503 no connections available");
    assert!(reconcile(&w, "m1").is_err());
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
    w.maas.fail_once("machine", 400, "Bad request");
    assert!(reconcile(&w, "m1").is_err());
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_NOT_FOUND
    );
}

#[test]
fn the_image_is_looked_up_once_per_reconcile() {
    let w = World::new(1);
    deploying_worker(&w);
    let lookups = w
        .maas
        .calls()
        .iter()
        .filter(|c| *c == "boot_resources")
        .count();
    assert_eq!(lookups, 1, "{:?}", w.maas.calls());
}

#[test]
fn a_control_plane_machine_of_an_externally_managed_cluster_needs_no_dns_record() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "cp1", true);
    // The owner of the MaasCluster provides the endpoint; capmaas made no record.
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["annotations"] = json!({"cluster.x-k8s.io/managed-by": "my-lb"});
        v["status"] = json!({"ready": true, "initialization": {"provisioned": true}});
    });
    reconcile(&w, "cp1").unwrap();
    w.maas.finish_deployments();
    assert_eq!(reconcile(&w, "cp1").unwrap(), Action::Done);
    assert!(condition(&w, "cp1", mm_api::DNS_ATTACHED).is_none());
    let ready = condition(&w, "cp1", conditions::READY).unwrap();
    assert_eq!(ready.status, Status::True, "{ready:?}");
    assert!(
        !w.maas.calls().iter().any(|c| c.starts_with("dns")),
        "{:?}",
        w.maas.calls()
    );
}

#[test]
fn maas_constraints_and_a_pinned_machine_reach_the_allocation() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["notTags"] = json!(["gpu"]);
        v["spec"]["notInZones"] = json!(["az9"]);
        v["spec"]["architecture"] = json!("amd64/generic");
        v["spec"]["storage"] = json!("root:100(ssd)");
        v["spec"]["interfaces"] = json!("eth0:subnet=10.0.0.0/24");
        v["spec"]["minDiskSize"] = json!(50);
        v["spec"]["machineSelector"] = json!({"hostname": "host-1"});
    });
    reconcile(&w, "m1").unwrap();
    let allocations = w.maas.allocations.lock().unwrap().clone();
    let req = &allocations[0];
    assert_eq!(req.not_tags, vec!["gpu"]);
    assert_eq!(req.not_in_zone, vec!["az9"]);
    assert_eq!(req.arch, vec!["amd64/generic"]);
    assert_eq!(req.storage.as_deref(), Some("root:100(ssd)"));
    assert_eq!(req.interfaces.as_deref(), Some("eth0:subnet=10.0.0.0/24"));
    assert_eq!(req.name.as_deref(), Some("host-1"));
    assert_eq!(req.system_id, None);
    assert_eq!(
        req.agent_name.as_deref(),
        Some("capmaas/ns/m1/uid-mm-m1"),
        "pinned, yet allocated under its identity like any other"
    );
}

#[test]
fn disk_erase_per_machine_overrides_the_controller_flag() {
    for (value, erase, quick, secure) in [
        (Some("Quick"), true, true, false),
        (Some("Secure"), true, false, true),
        (Some("Full"), true, false, false),
        (Some("None"), false, false, false),
        (None, true, false, false),
    ] {
        let w = World::with_options(
            1,
            Options {
                release_erase: true,
                ..Options::default()
            },
        );
        w.cluster(NS, "c1");
        w.machine(NS, "c1", "m1", false);
        if let Some(value) = value {
            w.edit(MAAS_MACHINE, NS, "m1", |v| {
                v["spec"]["diskErase"] = json!(value)
            });
        }
        reconcile(&w, "m1").unwrap();
        w.delete(MAAS_MACHINE, NS, "m1");
        reconcile(&w, "m1").unwrap();
        let releases = w.maas.releases.lock().unwrap().clone();
        let req = &releases[0].1;
        assert_eq!(
            (req.erase, req.quick_erase, req.secure_erase),
            (erase, quick, secure),
            "{value:?}"
        );
    }
}

#[test]
fn a_restricted_maas_user_deploys_without_the_swap_edit() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.fail_once("disable_swap", 403, "");
    reconcile(&w, "m1").unwrap();
    assert_eq!(w.maas.deploys.lock().unwrap().len(), 1, "deployed anyway");
    assert_eq!(
        reason(&w, "m1", mm_api::SWAP_DISABLED),
        mm_api::SWAP_UPDATE_SKIPPED
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&mm_api::SWAP_UPDATE_SKIPPED.to_string()));

    // Asked per machine: no edit at all.
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["disableSwap"] = json!(false)
    });
    reconcile(&w, "m1").unwrap();
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("disable_swap")));
    assert_eq!(
        reason(&w, "m1", mm_api::SWAP_DISABLED),
        mm_api::SWAP_UPDATE_DISABLED
    );
    assert_eq!(w.maas.deploys.lock().unwrap().len(), 1);
}

#[test]
fn a_stale_cache_never_drops_a_condition_set_once() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.fail_once("disable_swap", 403, "");
    let before = w.kube.get(MAAS_MACHINE, NS, "m1").unwrap();
    reconcile(&w, "m1").unwrap();
    assert_eq!(
        reason(&w, "m1", mm_api::SWAP_DISABLED),
        mm_api::SWAP_UPDATE_SKIPPED
    );
    // The next reconcile reads the object as it was before our writes: its
    // status write is refused (Conflict) instead of replacing the
    // conditions with a list that lacks SwapDisabled.
    w.kube
        .stale
        .lock()
        .unwrap()
        .insert((MAAS_MACHINE, NS.into(), "m1".into()), before);
    let _ = reconcile(&w, "m1");
    assert_eq!(
        reason(&w, "m1", mm_api::SWAP_DISABLED),
        mm_api::SWAP_UPDATE_SKIPPED
    );
}

// Issue 11: the reconciler with the MAAS watch's view of the fake.

/// `m1` deployed and running, with the watch listing its MAAS.
fn deployed_and_watched(w: &World) -> (String, std::sync::Arc<crate::controllers::fake::FakeView>) {
    let view = w.watched();
    let id = deploying_worker(w);
    w.maas.finish_deployments();
    view.list();
    reconcile(w, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").status().ready);
    (id, view)
}

#[test]
fn a_watched_machine_is_read_from_the_view_not_from_maas() {
    let w = World::new(1);
    let (_, view) = deployed_and_watched(&w);
    w.maas.clear_calls();
    w.clock.advance(3600);
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());
    drop(view);
}

#[test]
fn a_power_off_the_watch_lists_is_powered_on_once() {
    let w = World::new(1);
    let (id, view) = deployed_and_watched(&w);
    w.maas
        .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::Off);
    view.list();
    w.maas.clear_calls();
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(60))
    );
    assert_eq!(w.maas.calls(), [format!("power_on {id}")], "no GET");
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_POWERED_OFF
    );

    // MAAS's power driver has not run yet: the next list still shows it
    // off. Woken again (the list, the resync) within the minute: not asked
    // a second time.
    w.maas
        .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::Off);
    view.list();
    w.clock.advance(20);
    w.maas.clear_calls();
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(40))
    );
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());

    // The power driver ran; the next list shows the machine on.
    w.maas
        .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::On);
    view.list();
    reconcile(&w, "m1").unwrap();
    assert!(conditions::is_true(
        w.maas_machine(NS, "m1").conditions(),
        mm_api::MACHINE_DEPLOYED
    ));
}

#[test]
fn a_view_older_than_our_own_write_is_not_trusted() {
    let w = World::new(1);
    let (id, view) = deployed_and_watched(&w);
    w.maas
        .set_state(&id, MachineStatus::Deployed, "Deployed", PowerState::Off);
    view.list();
    reconcile(&w, "m1").unwrap();
    // After the power-on the view (listed before it) shows the machine
    // off: the reconcile reads MAAS, which shows it on.
    w.clock.advance(120);
    w.maas.clear_calls();
    reconcile(&w, "m1").unwrap();
    assert_eq!(w.maas.calls(), [format!("machine {id}")]);
    assert!(w.maas_machine(NS, "m1").status().machine_powered);
}

#[test]
fn while_watched_a_deploying_machine_is_not_polled() {
    let w = World::new(1);
    let view = w.watched();
    deploying_worker(&w);
    view.list();
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(super::WATCHED_REQUEUE),
        "the watch wakes it when MAAS changes"
    );
    view.go_stale();
    let Action::RequeueAfter(poll) = reconcile(&w, "m1").unwrap() else {
        panic!("no requeue");
    };
    assert!(poll < Duration::from_secs(60), "polled again: {poll:?}");
}

#[test]
fn a_release_behind_our_back_is_a_condition_and_an_event() {
    let w = World::new(1);
    let (id, view) = deployed_and_watched(&w);
    w.maas.release(&id, &Default::default()).unwrap();
    view.list();
    w.kube.clear_writes();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_TERMINATED
    );
    let status = w.maas_machine(NS, "m1").status();
    assert!(
        status
            .failure_message
            .as_deref()
            .is_some_and(|m| m.contains("released outside of Cluster API")),
        "{status:?}"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"MachineUnexpectedTermination".to_string()));
    assert_eq!(w.maas.allocated().len(), 0, "nothing allocated again");
}

#[test]
fn out_of_band_broken_is_a_condition_and_an_event() {
    let w = World::new(1);
    let (id, view) = deployed_and_watched(&w);
    w.maas
        .set_state(&id, MachineStatus::Broken, "Broken", PowerState::Off);
    view.list();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    let status = w.maas_machine(NS, "m1").status();
    assert!(
        status
            .failure_message
            .as_deref()
            .is_some_and(|m| m.contains("Broken")),
        "{status:?}"
    );
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::MACHINE_STATE_UNDEFINED
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"MachineUnhandledState".to_string()));
}

#[test]
fn a_refused_swap_edit_waits_for_the_next_try_before_deploying() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas
        .fail_once("disable_swap", 400, "{\"swap_size\": [\"bad\"]}");
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    assert!(w.maas.deploys.lock().unwrap().is_empty(), "not deployed");
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(c.reason, mm_api::MACHINE_DEPLOY_FAILED);
    assert!(c.message.contains("swap_size=0"), "{}", c.message);
    assert!(c.message.contains("next try at"), "{}", c.message);
    w.clock.advance(10);
    reconcile(&w, "m1").unwrap();
    assert_eq!(w.maas.deploys.lock().unwrap().len(), 1);
}

#[test]
fn the_address_selector_picks_the_machines_own_addresses() {
    use crate::api::maas_machine::AddressSelector;
    use crate::maas::{InterfaceLink, MachineInterface};
    let on = |interface: &str, ip: &str, cidr: &str, name: &str| MachineInterface {
        name: interface.into(),
        links: vec![InterfaceLink {
            ip: Some(ip.into()),
            subnet_cidr: cidr.into(),
            subnet_name: name.into(),
            ..InterfaceLink::default()
        }],
        ..MachineInterface::default()
    };
    let host = crate::maas::Machine {
        ip_addresses: vec!["10.11.130.5".into(), "10.20.0.5".into(), "10.30.0.5".into()],
        interfaces: vec![
            on("eth0", "10.11.130.5", "10.11.130.0/24", "pxe"),
            on("eth1", "10.20.0.5", "10.20.0.0/24", "cluster"),
            on("bond0", "10.30.0.5", "10.30.0.0/24", "storage"),
        ],
        ..crate::maas::Machine::default()
    };
    let select = |subnet: Option<&str>, interface: Option<&str>| {
        let selector = AddressSelector {
            subnet: subnet.map(str::to_string),
            interface: interface.map(str::to_string),
        };
        super::observe::own_ips(Some(&selector), &host)
    };
    assert_eq!(
        super::observe::own_ips(None, &host),
        host.ip_addresses,
        "no selector: every address, as MAAS lists them"
    );
    assert_eq!(select(Some("10.20.0.0/24"), None), ["10.20.0.5"]);
    assert_eq!(select(Some("storage"), None), ["10.30.0.5"]);
    assert_eq!(select(None, Some("eth0")), ["10.11.130.5"]);
    assert_eq!(select(Some("cluster"), Some("eth1")), ["10.20.0.5"]);
    assert!(
        select(Some("cluster"), Some("eth0")).is_empty(),
        "every field must match"
    );
}

fn lock_allocations(w: &World) -> Vec<crate::maas::AllocateRequest> {
    w.maas.allocations.lock().unwrap().clone()
}

/// Issue 22: each Go-provider field asking for a VM capmaas does not make
/// (a parent without `lxd`/`virsh`, an unreadable `virsh`, ...) stops the machine
/// before anything is allocated (no MAAS call), with the field's path on
/// `MachineDeployed` and one Warning event, however often it is reconciled.
#[test]
fn a_go_provider_vm_field_is_refused_before_any_maas_call() {
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit); 4] = [
        ("spec.parent", |v| v["spec"]["parent"] = json!("vmhost1")),
        ("spec.virsh", |v| v["spec"]["virsh"] = json!({})),
        ("maas.spectrocloud.com/vm-name", |v| {
            v["metadata"]["annotations"]["maas.spectrocloud.com/vm-name"] = json!("vm-m1-abcde")
        }),
        ("MaasCluster spec.lxdConfig.enabled", |_| {}),
    ];
    for (field, edit) in cases {
        let w = World::new(1);
        w.cluster(NS, "c1");
        if field.starts_with("MaasCluster") {
            w.edit(MAAS_CLUSTER, NS, "c1", |v| {
                v["spec"]["lxdConfig"] = json!({"enabled": true})
            });
        }
        w.machine(NS, "c1", "m1", false);
        w.edit(MAAS_MACHINE, NS, "m1", edit);
        for _ in 0..2 {
            assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done, "{field}");
        }
        let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
        assert_eq!(
            (c.status, c.reason.as_ref()),
            (Status::False, mm_api::UNSUPPORTED_FIELD),
            "{field}"
        );
        assert!(c.message.contains(field), "{field}: {}", c.message);
        assert!(w.maas.calls().is_empty(), "{field}: {:?}", w.maas.calls());
        assert!(w.maas_machine(NS, "m1").spec.system_id.is_none(), "{field}");
        let warnings = w
            .kube
            .event_reasons()
            .into_iter()
            .filter(|r| r == mm_api::UNSUPPORTED_FIELD)
            .count();
        assert_eq!(warnings, 1, "{field}");
    }
}

/// What the Go provider writes by default (`lxd.enabled: false`, an empty
/// parent) is a bare-metal machine, allocated as usual.
#[test]
fn go_provider_defaults_are_bare_metal() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["lxdConfig"] = json!({"enabled": false})
    });
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["lxd"] = json!({"enabled": false});
        v["spec"]["parent"] = json!("");
    });
    reconcile(&w, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_some());
    assert_ne!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::UNSUPPORTED_FIELD
    );
}

/// A machine already allocated is not refused afterwards: that would
/// only take away what runs.
#[test]
fn an_allocated_machine_is_not_refused_for_a_vm_field() {
    let w = World::new(1);
    deploying_worker(&w);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["lxd"] = json!({"enabled": true})
    });
    reconcile(&w, "m1").unwrap();
    assert_ne!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::UNSUPPORTED_FIELD
    );
}

/// Issue 22: a control plane of a cluster marked
/// `spectrocloud.com/custom-dns-provided` joins no record (the endpoint is
/// the user's) and holds no drain for one.
#[test]
fn a_control_plane_machine_of_a_custom_dns_cluster_needs_no_dns_record() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "cp1", true);
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["annotations"] = json!({"spectrocloud.com/custom-dns-provided": ""});
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "api.example.test", "port": 6443});
    });
    reconcile(&w, "cp1").unwrap();
    w.maas.finish_deployments();
    assert_eq!(reconcile(&w, "cp1").unwrap(), Action::Done);
    assert!(condition(&w, "cp1", mm_api::DNS_ATTACHED).is_none());
    let ready = condition(&w, "cp1", conditions::READY).unwrap();
    assert_eq!(ready.status, Status::True, "{ready:?}");
    let machine = w.kube.get("Machine", NS, "cp1").unwrap();
    assert!(
        machine["metadata"]["annotations"]
            .as_object()
            .is_none_or(|a| a.keys().all(|k| !k.starts_with("pre-drain"))),
        "{machine}"
    );
}

/// Issue 23 item 6: bootstrap data MAAS cannot boot (Ignition) is refused
/// before anything is allocated, with a condition and one Warning however
/// often it is reconciled; cloud-config (or no `format`) goes on.
#[test]
fn ignition_bootstrap_data_is_refused_before_allocation() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.kube.put_secret(NS, "m1-bootstrap", "format", b"ignition");
    for _ in 0..3 {
        assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    }
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_ref()),
        (Status::False, mm_api::UNSUPPORTED_BOOTSTRAP_FORMAT)
    );
    assert!(c.message.contains("\"ignition\""), "{}", c.message);
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_none());
    let warnings = w
        .kube
        .event_reasons()
        .into_iter()
        .filter(|r| r == mm_api::UNSUPPORTED_BOOTSTRAP_FORMAT)
        .count();
    assert_eq!(warnings, 1);

    w.kube
        .put_secret(NS, "m1-bootstrap", "format", b"cloud-config");
    reconcile(&w, "m1").unwrap();
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_some());
    assert_eq!(w.maas.deploys.lock().unwrap().len(), 1);
}

/// A machine allocated before its bootstrap data turned to Ignition is
/// not deployed with it.
#[test]
fn ignition_bootstrap_data_is_never_deployed() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.fail_once("deploy", 503, "test: deploy later");
    let _ = reconcile(&w, "m1");
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_some());
    w.kube.put_secret(NS, "m1-bootstrap", "format", b"ignition");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    assert_eq!(
        reason(&w, "m1", mm_api::MACHINE_DEPLOYED),
        mm_api::UNSUPPORTED_BOOTSTRAP_FORMAT
    );
}

/// Issue 23 item 6: Cluster API's in-place updates (v1.12+) patch the
/// running Machine and its MaasMachine's spec from the new template, and
/// Canonical Kubernetes marks an in-place upgrade with an annotation: the
/// machine under it is kept, never re-provisioned, still tracked and Ready.
#[test]
fn an_in_place_update_keeps_the_machine_it_runs_on() {
    let w = World::new(2);
    let (id, view) = deployed_and_watched(&w);
    let before = w.maas_machine(NS, "m1");
    w.edit("Machine", NS, "m1", |v| {
        v["spec"]["version"] = json!("v1.31.2");
        v["metadata"]["annotations"] = json!({
            "in-place-updates.internal.cluster.x-k8s.io/update-in-progress": "",
            "k8sd.io/in-place-upgrade-to": "channel=1.31/stable",
        });
    });
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["image"] = json!("custom/u-2404-0-k-1312-0");
        v["spec"]["minCPU"] = json!(8);
        v["spec"]["tags"] = json!(["fast"]);
        v["metadata"]["annotations"]["k8sd.io/in-place-upgrade-to"] = json!("channel=1.31/stable");
    });
    w.maas.clear_calls();
    w.clock.advance(600);
    view.list();
    for _ in 0..2 {
        reconcile(&w, "m1").unwrap();
    }
    let calls = w.maas.calls();
    assert!(
        !calls
            .iter()
            .any(|c| ["allocate", "deploy", "release", "power"]
                .iter()
                .any(|op| c.starts_with(op))),
        "{calls:?}"
    );
    let after = w.maas_machine(NS, "m1");
    assert_eq!(after.spec.system_id.as_deref(), Some(id.as_str()));
    assert_eq!(after.spec.provider_id, before.spec.provider_id);
    assert!(after.status().ready);
    assert_eq!(w.maas.allocated(), vec![id]);
}

/// Issue 22 item 6: the per-template deploy options reach MAAS's deploy
/// exactly as set; unset ones are not sent, and MAAS's version is asked
/// only for an option that needs a release.
#[test]
fn deploy_options_are_sent_only_when_set() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.machine(NS, "c1", "m2", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["image"] = json!("ubuntu/jammy");
        v["spec"]["hweKernel"] = json!("hwe-22.04");
        v["spec"]["enableHwSync"] = json!(true);
        v["spec"]["enableKernelCrashDump"] = json!(false);
    });
    *w.maas.version.lock().unwrap() = "3.4.8".into();
    reconcile(&w, "m1").unwrap();
    reconcile(&w, "m2").unwrap();

    let deploys = w.maas.deploys.lock().unwrap().clone();
    assert_eq!(deploys.len(), 2, "{deploys:?}");
    let form = |i: usize| deploys[i].1.form();
    let m1 = form(0);
    assert!(
        m1.contains(&("distro_series", "ubuntu/jammy".into())),
        "{m1:?}"
    );
    assert!(m1.contains(&("hwe_kernel", "hwe-22.04".into())), "{m1:?}");
    assert!(m1.contains(&("enable_hw_sync", "true".into())), "{m1:?}");
    assert!(
        m1.contains(&("enable_kernel_crash_dump", "false".into())),
        "false is MAAS 3.4.8's behaviour anyway: sent, not refused: {m1:?}"
    );
    let m2 = form(1);
    for param in ["hwe_kernel", "enable_hw_sync", "enable_kernel_crash_dump"] {
        assert!(!m2.iter().any(|(k, _)| *k == param), "{param}: {m2:?}");
    }
    // m1's hw sync (3.2+) needed the version; m2 asked for nothing. (An
    // identity write needs it too, answered by MaasView's version cache.)
    let calls = w.maas.calls();
    let for_options = calls
        .iter()
        .zip(calls.iter().skip(1))
        .filter(|(call, next)| *call == "version" && !next.starts_with("set_workload_annotations"))
        .count();
    assert_eq!(for_options, 1, "{calls:?}");
}

/// Issue 22 item 6: crash dumps on a MAAS older than 3.6 (which would
/// silently ignore the parameter) are refused before anything is
/// allocated, with one Warning event, and looked at again only slowly; a
/// MAAS upgrade lets the machine go on.
#[test]
fn a_deploy_option_this_maas_lacks_is_refused_before_allocating() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["enableKernelCrashDump"] = json!(true);
    });
    *w.maas.version.lock().unwrap() = "3.4.8".into();
    for _ in 0..2 {
        assert_eq!(
            reconcile(&w, "m1").unwrap(),
            Action::RequeueAfter(super::deploy::UNSUPPORTED_RECHECK)
        );
    }
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_ref()),
        (Status::False, mm_api::UNSUPPORTED_BY_MAAS)
    );
    for part in ["spec.enableKernelCrashDump", "MAAS 3.6", "3.4.8"] {
        assert!(c.message.contains(part), "{part}: {}", c.message);
    }
    assert!(w.maas_machine(NS, "m1").spec.system_id.is_none());
    assert!(!w.maas.calls().iter().any(|c| c == "allocate"));
    let warnings = w
        .kube
        .event_reasons()
        .into_iter()
        .filter(|r| r == mm_api::UNSUPPORTED_BY_MAAS)
        .count();
    assert_eq!(warnings, 1);

    // MAAS upgraded: at the recheck the machine deploys with crash dumps on.
    *w.maas.version.lock().unwrap() = "3.6.1-17000-g.0123abcd".into();
    w.clock
        .advance(super::deploy::UNSUPPORTED_RECHECK.as_secs());
    reconcile(&w, "m1").unwrap();
    let deploys = w.maas.deploys.lock().unwrap().clone();
    assert_eq!(deploys.len(), 1);
    assert!(deploys[0]
        .1
        .form()
        .contains(&("enable_kernel_crash_dump", "true".into())));
}

/// A machine allocated before the spec asked for the option (its first
/// deploy failed) is refused at deploy time and keeps its allocation.
#[test]
fn an_allocated_machine_is_refused_before_deploy_and_keeps_its_allocation() {
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.maas.fail_once("deploy", 503, "Service Unavailable");
    let _ = reconcile(&w, "m1");
    let system_id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    assert_eq!(w.maas.host(&system_id).status, MachineStatus::Allocated);

    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["enableHwSync"] = json!(true);
    });
    *w.maas.version.lock().unwrap() = "3.1.0".into();
    w.clock.advance(600);
    assert_eq!(
        reconcile(&w, "m1").unwrap(),
        Action::RequeueAfter(super::deploy::UNSUPPORTED_RECHECK)
    );
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(c.reason, mm_api::UNSUPPORTED_BY_MAAS);
    assert!(c.message.contains("spec.enableHwSync"), "{}", c.message);
    assert!(w.maas.deploys.lock().unwrap().is_empty());
    assert_eq!(w.maas.host(&system_id).status, MachineStatus::Allocated);
}

/// Two LXD VM hosts in az1 (`small`: 4 cores, 8 GiB, 200 GB free; `big`:
/// 16 cores, 64 GiB, 1 TB) and a virsh one; worker `m1` asks for an LXD VM
/// (the Go provider's fields: minCPU 2, minMemory 4096, vmConfig.diskSize 40).
fn lxd_worker(w: &World) {
    let host = |id: i64, name: &str, kind: &str, cores: f64, memory: f64, storage_gb: f64| {
        crate::maas::VmHost {
            id,
            name: name.into(),
            kind: kind.into(),
            zone: "az1".into(),
            zone_id: Some(1),
            pool: "default".into(),
            pool_id: Some(0),
            host: Some(format!("host{id}")),
            free_cores: cores,
            free_memory: memory,
            free_storage: storage_gb * 1e9,
            ..Default::default()
        }
    };
    *w.maas.vm_hosts.lock().unwrap() = vec![
        host(1, "small", "lxd", 4.0, 8192.0, 200.0),
        host(2, "big", "lxd", 16.0, 65536.0, 1000.0),
        host(3, "virsh-huge", "virsh", 64.0, 262_144.0, 8000.0),
    ];
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["lxd"] = json!({"enabled": true, "vmConfig": {"diskSize": 40}})
    });
}

fn compose_calls(w: &World) -> usize {
    w.maas
        .calls()
        .iter()
        .filter(|c| c.starts_with("compose_vm"))
        .count()
}

/// Issue 22 item 3: `lxd.enabled` composes a VM on the LXD host with the
/// most headroom, sized from the spec; once MAAS has commissioned it, it
/// is allocated under the object's identity and deployed like any machine;
/// on delete it is decomposed, not released.
#[test]
fn an_lxd_machine_is_composed_on_the_roomiest_host_deployed_and_decomposed() {
    let w = World::new(0);
    lxd_worker(&w);
    let next = reconcile(&w, "m1").unwrap();
    assert!(matches!(next, Action::RequeueAfter(_)), "{next:?}");
    let composed = w.maas.composed.lock().unwrap().clone();
    assert_eq!(composed.len(), 1);
    let (host_id, req) = &composed[0];
    assert_eq!(*host_id, 2, "big has the most headroom");
    assert_eq!((req.cores, req.memory_mib, req.disk_gb), (2, 4096, 40));
    assert_eq!((req.zone_id, req.pool_id), (Some(1), Some(0)));
    assert_eq!(req.hostname, "m1-uidmmm1", "from the identity");
    let mm = w.maas_machine(NS, "m1");
    assert_eq!(mm.spec.options().parent.as_deref(), Some("host2"));
    assert!(
        mm.spec.system_id.is_none(),
        "not allocated while commissioning"
    );
    assert!(condition(&w, "m1", mm_api::MACHINE_DEPLOYED)
        .unwrap()
        .message
        .contains("commissioning"));

    // Still commissioning: looked at again, never composed again.
    reconcile(&w, "m1").unwrap();
    assert_eq!(compose_calls(&w), 1);

    let vm = w
        .maas
        .machines
        .lock()
        .unwrap()
        .values()
        .find(|m| m.pod.is_some())
        .unwrap()
        .system_id
        .clone();
    w.maas
        .set_state(&vm, MachineStatus::Ready, "Ready", PowerState::Off);
    reconcile(&w, "m1").unwrap();
    let mm = w.maas_machine(NS, "m1");
    assert_eq!(mm.spec.system_id.as_deref(), Some(vm.as_str()));
    assert_eq!(
        mm.spec.provider_id.as_deref(),
        Some(format!("maas:///az1/{vm}").as_str())
    );
    let allocations = lock_allocations(&w);
    assert_eq!(allocations.len(), 1);
    assert_eq!(allocations[0].system_id.as_deref(), Some(vm.as_str()));
    assert_eq!(
        allocations[0].agent_name.as_deref(),
        Some("capmaas/ns/m1/uid-mm-m1")
    );
    assert_eq!(
        allocations[0].cpu_count, None,
        "the host met the constraints"
    );
    assert_eq!(
        w.maas
            .host(&vm)
            .owner_data
            .get(OWNER_DATA_KEY)
            .map(String::as_str),
        Some("capmaas/ns/m1/uid-mm-m1")
    );
    w.maas.finish_deployments();
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert!(w.maas_machine(NS, "m1").status().ready);

    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert_eq!(w.maas.deleted.lock().unwrap().clone(), vec![vm]);
    assert!(
        w.maas.releases.lock().unwrap().is_empty(),
        "decomposed, not released"
    );
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
    assert_eq!(compose_calls(&w), 1);
}

/// A crash after the compose call, before anything was written back: the
/// VM is found again by its hostname (and its host recorded), never
/// composed twice; deleted while MAAS commissions it, it is decomposed.
#[test]
fn a_vm_composed_before_a_crash_is_found_again_by_its_hostname() {
    let w = World::new(0);
    lxd_worker(&w);
    let earlier = crate::maas::ComposeRequest {
        hostname: "m1-uidmmm1".into(),
        cores: 2,
        memory_mib: 4096,
        disk_gb: 40,
        ..Default::default()
    };
    // The identity is chosen on the first reconcile; the crash came later.
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["annotations"][mm_api::AGENT_NAME_ANNOTATION] =
            json!("capmaas/ns/m1/uid-mm-m1")
    });
    let vm = w.maas.compose(1, &earlier).unwrap();
    w.maas.calls.lock().unwrap().clear();
    reconcile(&w, "m1").unwrap();
    assert_eq!(compose_calls(&w), 0, "{:?}", w.maas.calls());
    assert_eq!(
        w.maas_machine(NS, "m1").spec.options().parent.as_deref(),
        Some("host1")
    );
    assert!(condition(&w, "m1", mm_api::MACHINE_DEPLOYED)
        .unwrap()
        .message
        .contains(&vm));

    w.delete(MAAS_MACHINE, NS, "m1");
    assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    assert_eq!(w.maas.deleted.lock().unwrap().clone(), vec![vm]);
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
}

/// MAAS after 3.8 has no VM hosts (410 Gone): a clear condition and one
/// Warning, no retry loop, nothing composed.
#[test]
fn a_vm_on_a_maas_without_vm_hosts_is_a_clear_condition_not_a_retry_loop() {
    let w = World::new(0);
    lxd_worker(&w);
    *w.maas.version.lock().unwrap() = "3.9.0".into();
    for _ in 0..2 {
        assert_eq!(reconcile(&w, "m1").unwrap(), Action::Done);
    }
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(c.reason, mm_api::VM_HOSTS_UNSUPPORTED);
    assert!(
        c.message.contains("spec.lxd.enabled") && c.message.contains("3.8"),
        "{}",
        c.message
    );
    let warnings = w
        .kube
        .event_reasons()
        .into_iter()
        .filter(|r| r == mm_api::VM_HOSTS_UNSUPPORTED)
        .count();
    assert_eq!(warnings, 1);
    assert_eq!(compose_calls(&w), 0);
}

/// No host of the asked type has room (virsh: only one host, too small):
/// refused with the sizes in words, retried with backoff.
#[test]
fn no_vm_host_with_room_is_refused_and_retried() {
    let w = World::new(0);
    lxd_worker(&w);
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["spec"]["lxd"] = json!(null);
        v["spec"]["virsh"] = json!({"enabled": true});
        v["spec"]["minDiskSize"] = json!(9000);
    });
    let next = reconcile(&w, "m1").unwrap();
    assert!(matches!(next, Action::RequeueAfter(_)), "{next:?}");
    let c = condition(&w, "m1", mm_api::MACHINE_DEPLOYED).unwrap();
    assert!(
        c.message.contains("no virsh VM host has room") && c.message.contains("9000 GB"),
        "{}",
        c.message
    );
    assert_eq!(compose_calls(&w), 0);
}
