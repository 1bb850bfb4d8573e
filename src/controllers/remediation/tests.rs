//! MaasRemediation reconcile steps against the in-memory fakes.

use std::time::Duration;

use serde_json::{json, Value};

use crate::api::conditions::{self, Status};
use crate::api::maas_machine as mm_api;
use crate::api::maas_remediation::{self as api, History};
use crate::api::{MaasRemediation, MaasRemediationStatus};
use crate::controllers::fake::{
    World, CAPI_CLUSTER, CAPI_MACHINE, MAAS_CLUSTER, MAAS_MACHINE, MAAS_REMEDIATION,
};
use crate::controllers::identity::{ANNOTATION, OWNER_DATA_KEY};
use crate::controllers::Error;
use crate::maas::{MachineStatus, PowerState};
use crate::runtime::Action;

const NS: &str = "ns";
const TIMEOUT: u64 = 60;

/// One reconcile; a machine capmaas asked to power off then stays off for
/// the cycle's minimum off time in the fake clock's time.
fn reconcile(w: &World) -> Result<Action, Error> {
    let result = super::reconcile(&w.ctx, NS, "m1");
    let off_requested = w
        .kube
        .get(MAAS_REMEDIATION, NS, "m1")
        .and_then(|v| v.pointer("/status/conditions").cloned())
        .and_then(|c| c.as_array().cloned())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["reason"] == super::api::POWER_OFF_REQUESTED)
        });
    if off_requested {
        w.clock.advance(super::cycle::MIN_OFF_SECONDS);
    }
    result
}

/// Cluster `c1` with worker `m1` deployed and running; returns its system ID.
fn deployed_worker(w: &World) -> String {
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    w.maas.finish_deployments();
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    let mm = w.maas_machine(NS, "m1");
    assert!(mm.status().ready, "deployed and powered on");
    w.maas.clear_calls();
    w.kube.clear_writes();
    let system_id = mm.spec.system_id.unwrap();
    // Its Node in the workload cluster, named after the MAAS hostname.
    let node = node_of(w, &system_id);
    w.workload
        .nodes
        .lock()
        .unwrap()
        .insert(("c1".into(), node), mm.spec.provider_id.unwrap_or_default());
    w.workload.up.lock().unwrap().insert("c1".into());
    system_id
}

fn node_of(w: &World, system_id: &str) -> String {
    w.maas.host(system_id).hostname.to_lowercase()
}

fn node_key(w: &World, system_id: &str) -> (String, String) {
    ("c1".into(), node_of(w, system_id))
}

/// When the Node's Ready turned True (`None`: it is not Ready).
fn ready_since(w: &World, node: &(String, String), since: Option<&str>) {
    w.workload
        .ready_since
        .lock()
        .unwrap()
        .insert(node.clone(), since.map(str::to_string));
}

/// The MaasRemediation a MachineHealthCheck creates for Machine `m1` from a
/// template with this strategy.
fn remediation(w: &World, retry_limit: u32) {
    w.kube.put(
        MAAS_REMEDIATION,
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasRemediation",
            "metadata": {"name": "m1", "namespace": NS, "uid": "uid-r-m1", "generation": 1,
                         "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                                              "name": "m1", "uid": "uid-m-m1"}]},
            "spec": {"strategy": {"type": "Reboot", "retryLimit": retry_limit, "timeout": format!("{TIMEOUT}s")}}
        }),
    );
}

fn object(w: &World) -> Option<MaasRemediation> {
    w.kube
        .get(MAAS_REMEDIATION, NS, "m1")
        .map(|v| serde_json::from_value(v).unwrap())
}

fn status(w: &World) -> MaasRemediationStatus {
    object(w).and_then(|r| r.status).unwrap_or_default()
}

fn reason(w: &World, type_: &str) -> String {
    conditions::get(&status(w).conditions, type_)
        .map(|c| c.reason.to_string())
        .unwrap_or_default()
}

fn power_calls(w: &World) -> Vec<String> {
    w.maas
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("power_"))
        .collect()
}

/// The Machine's `OwnerRemediated` condition, if set.
fn owner_remediated(w: &World) -> Option<Value> {
    let machine = w.kube.get(CAPI_MACHINE, NS, "m1")?;
    machine["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "OwnerRemediated")
        .cloned()
}

fn events(w: &World) -> Vec<String> {
    w.kube.event_reasons()
}

/// Runs power cycle `n` from its start to MAAS reporting the machine on.
fn run_power_cycle(w: &World, system_id: &str, n: u32) {
    assert_eq!(
        reconcile(w).unwrap(),
        Action::RequeueAfter(Duration::from_secs(5))
    );
    let s = status(w);
    assert_eq!((s.phase.as_str(), s.retry_count), (api::PHASE_RUNNING, n));
    assert_eq!(reason(w, api::POWER_CYCLED), api::POWER_OFF_REQUESTED);
    assert_eq!(w.maas.host(system_id).power_state, PowerState::Off);

    reconcile(w).unwrap();
    assert_eq!(reason(w, api::POWER_CYCLED), api::POWER_ON_REQUESTED);
    assert_eq!(w.maas.host(system_id).power_state, PowerState::On);

    let next = reconcile(w).unwrap();
    assert_eq!(status(w).phase, api::PHASE_WAITING);
    let s = status(w);
    let cycled = conditions::get(&s.conditions, api::POWER_CYCLED).unwrap();
    assert_eq!(
        (cycled.status, cycled.reason.as_ref()),
        (Status::True, api::POWER_CYCLED)
    );
    assert!(
        matches!(next, Action::RequeueAfter(d) if d <= Duration::from_secs(TIMEOUT)),
        "{next:?}"
    );
    assert_eq!(
        w.machine_queue.take_names(),
        vec!["m1"],
        "the MaasMachine looks again"
    );
}

#[test]
fn power_cycle_off_then_on_then_waits_for_the_health_check() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 2);
    run_power_cycle(&w, &system_id, 1);

    assert_eq!(
        power_calls(&w),
        [
            format!("power_off {system_id}"),
            format!("power_on {system_id}")
        ]
    );
    let r = object(&w).unwrap();
    assert!(r.metadata.has_finalizer(api::FINALIZER));
    assert_eq!(
        status(&w).last_remediated.as_deref(),
        Some("2023-11-14T22:13:20Z")
    );
    assert_eq!(
        History::of(&w.maas_machine(NS, "m1").metadata),
        Some(History {
            retry_count: 1,
            last_remediated: "2023-11-14T22:13:20Z".into()
        }),
        "counted on the MaasMachine"
    );
    assert_eq!(
        events(&w),
        [
            "PowerCycleStarted",
            "NodeOutOfService",
            "PoweringOn",
            "PowerCycled"
        ]
    );
    assert!(owner_remediated(&w).is_none(), "the Machine is not touched");
    // Issue 23 item 1: the Node was tainted when MAAS reported the machine
    // off, and keeps the taint until it is Ready again.
    let node = node_key(&w, &system_id);
    assert_eq!(
        *w.workload.taint_writes.lock().unwrap(),
        [(node.1.clone(), true)]
    );
    assert_eq!(
        status(&w).out_of_service_node.as_deref(),
        Some(node.1.as_str())
    );
    assert_eq!(
        reason(&w, api::NODE_OUT_OF_SERVICE),
        api::OUT_OF_SERVICE_TAINT_ADDED
    );

    // Waiting, the Node not seen Ready since the power cycle (its Ready of
    // before, then not Ready): looked at every 10 s, MAAS not asked.
    w.maas.clear_calls();
    w.clock.advance(10);
    assert_eq!(
        reconcile(&w).unwrap(),
        Action::RequeueAfter(super::node::NODE_POLL)
    );
    ready_since(&w, &node, None);
    w.clock.advance(20);
    assert_eq!(
        reconcile(&w).unwrap(),
        Action::RequeueAfter(super::node::NODE_POLL)
    );
    assert!(w.maas.calls().is_empty());
    assert!(w.workload.out_of_service.lock().unwrap().contains(&node));

    // Ready again: the taint comes off, and the wait runs to the timeout.
    ready_since(&w, &node, Some("2023-11-14T22:13:50Z"));
    w.clock.advance(10);
    assert_eq!(
        reconcile(&w).unwrap(),
        Action::RequeueAfter(Duration::from_secs(
            TIMEOUT - 40 - super::cycle::MIN_OFF_SECONDS
        ))
    );
    assert!(!w.workload.out_of_service.lock().unwrap().contains(&node));
    assert_eq!(
        reason(&w, api::NODE_OUT_OF_SERVICE),
        api::NODE_BACK_IN_SERVICE
    );
    assert!(status(&w).out_of_service_node.is_none());
    assert!(w.maas.calls().is_empty());

    // The MachineHealthCheck finds the Node healthy and deletes us.
    w.delete(MAAS_REMEDIATION, NS, "m1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(object(&w).is_none(), "finalizer removed, object gone");
    assert!(power_calls(&w).is_empty(), "the machine is on already");
    assert_eq!(w.maas.host(&system_id).status, MachineStatus::Deployed);
    assert_eq!(w.workload.taint_writes.lock().unwrap().len(), 2);
}

/// The MachineHealthCheck deletes the remediation while the Node is still
/// out of service: the taint comes off before the finalizer goes; a
/// workload API that does not answer holds the finalizer (a Node left out
/// of service runs no pods) and is tried again.
#[test]
fn an_ending_remediation_takes_the_out_of_service_taint_off() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 2);
    run_power_cycle(&w, &system_id, 1);
    let node = node_key(&w, &system_id);
    assert!(w.workload.out_of_service.lock().unwrap().contains(&node));

    w.workload.up.lock().unwrap().clear();
    w.delete(MAAS_REMEDIATION, NS, "m1");
    assert!(reconcile(&w).is_err());
    assert!(object(&w).is_some(), "the finalizer holds");

    w.workload.up.lock().unwrap().insert("c1".into());
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(object(&w).is_none());
    assert!(!w.workload.out_of_service.lock().unwrap().contains(&node));
}

/// A workload API that does not answer never holds the power cycle: the
/// taint is reported as failed, and the machine is powered on.
#[test]
fn an_unreachable_workload_api_does_not_hold_the_power_cycle() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    w.workload.up.lock().unwrap().clear();
    remediation(&w, 2);
    run_power_cycle(&w, &system_id, 1);
    assert_eq!(
        reason(&w, api::NODE_OUT_OF_SERVICE),
        api::OUT_OF_SERVICE_TAINT_FAILED
    );
    assert!(events(&w).contains(&api::OUT_OF_SERVICE_TAINT_FAILED.to_string()));
    assert!(w.workload.taint_writes.lock().unwrap().is_empty());
}

#[test]
fn still_unhealthy_after_the_retry_limit_hands_the_machine_back() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 2);
    run_power_cycle(&w, &system_id, 1);
    w.clock.advance(TIMEOUT);
    run_power_cycle(&w, &system_id, 2);
    assert_eq!(power_calls(&w).len(), 4, "{:?}", w.maas.calls());

    w.clock.advance(TIMEOUT);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    let s = status(&w);
    assert_eq!(
        (s.phase.as_str(), s.retry_count),
        (api::PHASE_DELETING_MACHINE, 2)
    );
    assert_eq!(
        reason(&w, api::OWNER_REMEDIATION_REQUESTED),
        api::RETRIES_EXHAUSTED
    );
    let handed_back = owner_remediated(&w).expect("OwnerRemediated on the Machine");
    assert_eq!(handed_back["status"], "False");
    assert_eq!(handed_back["reason"], "WaitingForRemediation");
    assert!(
        handed_back["message"]
            .as_str()
            .unwrap()
            .contains("after power cycle 2 of 2"),
        "{handed_back}"
    );
    assert!(events(&w).contains(&"MachineHandedBack".to_string()));

    // Issue 23 item 1: nobody allocates it again before a person looked.
    let host = w.maas.host(&system_id);
    assert_eq!(host.status, MachineStatus::Broken);
    assert!(host.owner.is_none(), "released on the way, as MAAS does");
    let comment = host.status_message.unwrap_or_default();
    assert!(
        comment.starts_with(&format!("capmaas: cluster {NS}/c1, Machine m1: ")),
        "{comment}"
    );
    assert!(comment.contains("after power cycle 2 of 2"), "{comment}");
    assert_eq!(reason(&w, api::MARKED_BROKEN), api::MARKED_BROKEN);
    assert!(events(&w).contains(&"MachineMarkedBroken".to_string()));
    let marks = |w: &World| {
        w.maas
            .calls()
            .iter()
            .filter(|c| c.starts_with("mark_broken"))
            .count()
    };
    assert_eq!(marks(&w), 1);

    // The status write lost in a crash: the hand-back is repeated, the
    // machine (no longer ours) is not marked again.
    w.edit(MAAS_REMEDIATION, NS, "m1", |v| {
        v["status"]["phase"] = json!(api::PHASE_WAITING)
    });
    w.maas.clear_calls();
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_eq!(marks(&w), 0, "{:?}", w.maas.calls());
    assert_eq!(status(&w).phase, api::PHASE_DELETING_MACHINE);

    // Done: later reconciles neither call MAAS nor write again.
    w.maas.clear_calls();
    w.kube.clear_writes();
    w.clock.advance(600);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty() && w.kube.writes().is_empty());

    // Cluster API replaces the Machine: its MaasMachine goes without a
    // release (MAAS released it when it was marked) and the Broken machine
    // stays Broken.
    w.delete(MAAS_MACHINE, NS, "m1");
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    assert!(
        !w.maas.calls().iter().any(|c| c.starts_with("release")),
        "{:?}",
        w.maas.calls()
    );
    assert!(w.kube.get(MAAS_MACHINE, NS, "m1").is_none());
    assert_eq!(w.maas.host(&system_id).status, MachineStatus::Broken);
    assert!(events(&w).contains(&"MachineLeftBroken".to_string()));
}

#[test]
fn each_step_is_persisted_before_its_maas_call_and_resumed_after_a_failure() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    w.maas
        .fail_once("power_off", 503, "Unable to connect to the BMC");
    assert!(reconcile(&w).is_err());
    // The intent is stored: cycle 1, powering off.
    let s = status(&w);
    assert_eq!((s.phase.as_str(), s.retry_count), (api::PHASE_RUNNING, 1));
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWERING_OFF);
    assert_eq!(w.maas.host(&system_id).power_state, PowerState::On);

    // The retry resumes the same cycle: no second cycle counted.
    reconcile(&w).unwrap();
    assert_eq!(status(&w).retry_count, 1);
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWER_OFF_REQUESTED);
    assert_eq!(w.maas.host(&system_id).power_state, PowerState::Off);

    // MAAS refuses the power-on once: `PoweringOn` is stored, the retry
    // powers on.
    w.maas
        .fail_once("power_on", 503, "Unable to connect to the BMC");
    assert!(reconcile(&w).is_err());
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWERING_ON);
    reconcile(&w).unwrap();
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWER_ON_REQUESTED);
    reconcile(&w).unwrap();
    assert_eq!(status(&w).phase, api::PHASE_WAITING);
    assert_eq!(status(&w).retry_count, 1);
}

#[test]
fn power_off_requested_waits_for_maas_without_asking_again() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    reconcile(&w).unwrap();
    // MAAS still reports the machine on (the BMC is slow).
    w.maas.set_state(
        &system_id,
        MachineStatus::Deployed,
        "Deployed",
        PowerState::On,
    );
    w.maas.clear_calls();
    for _ in 0..3 {
        w.clock.advance(5);
        assert_eq!(
            reconcile(&w).unwrap(),
            Action::RequeueAfter(Duration::from_secs(5))
        );
    }
    assert!(power_calls(&w).is_empty(), "{:?}", w.maas.calls());
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWER_OFF_REQUESTED);
}

#[test]
fn a_power_cycle_maas_never_finishes_times_out_then_counts_as_an_attempt() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    reconcile(&w).unwrap();
    w.maas.set_state(
        &system_id,
        MachineStatus::Deployed,
        "Deployed",
        PowerState::On,
    );
    w.clock.advance(TIMEOUT);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(events(&w).contains(&api::POWER_CYCLE_TIMED_OUT.to_string()));
    assert_eq!(status(&w).phase, api::PHASE_DELETING_MACHINE);
    assert_eq!(owner_remediated(&w).unwrap()["status"], "False");
}

#[test]
fn a_machine_that_cannot_be_power_cycled_is_handed_back_at_once() {
    type Setup = fn(&World, &str);
    let cases: [(&str, Setup, &str); 4] = [
        (
            "not deployed",
            |w, id| {
                w.maas.set_state(
                    id,
                    MachineStatus::FailedDeployment,
                    "Failed deployment",
                    PowerState::Off,
                )
            },
            "is \"Failed deployment\", not Deployed",
        ),
        (
            "manual power",
            |w, id| {
                w.maas
                    .machines
                    .lock()
                    .unwrap()
                    .get_mut(id)
                    .unwrap()
                    .power_type = "manual".into()
            },
            "power type manual",
        ),
        (
            "gone from MAAS",
            |w, id| {
                w.maas.machines.lock().unwrap().remove(id);
            },
            "no longer exists",
        ),
        (
            "MaasMachine being deleted",
            |w, _| w.delete(MAAS_MACHINE, NS, "m1"),
            "is being deleted",
        ),
    ];
    for (case, setup, why) in cases {
        let w = World::new(2);
        let system_id = deployed_worker(&w);
        setup(&w, &system_id);
        remediation(&w, 3);
        assert_eq!(reconcile(&w).unwrap(), Action::Done, "{case}");
        assert!(power_calls(&w).is_empty(), "{case}: {:?}", w.maas.calls());
        assert_eq!(status(&w).phase, api::PHASE_DELETING_MACHINE, "{case}");
        assert_eq!(
            reason(&w, api::OWNER_REMEDIATION_REQUESTED),
            api::CANNOT_POWER_CYCLE,
            "{case}"
        );
        let handed_back = owner_remediated(&w).unwrap();
        let message = handed_back["message"].as_str().unwrap();
        assert!(message.contains(why), "{case}: {message}");
    }
}

#[test]
fn a_machine_without_a_maas_machine_recorded_is_handed_back() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.machine(NS, "c1", "m1", false);
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert!(w.maas.calls().is_empty());
    let handed_back = owner_remediated(&w).unwrap();
    let message = handed_back["message"].as_str().unwrap();
    assert!(message.contains("no MAAS machine"), "{message}");
}

#[test]
fn a_machine_being_deleted_is_never_touched() {
    let w = World::new(2);
    deployed_worker(&w);
    w.delete(CAPI_MACHINE, NS, "m1");
    remediation(&w, 1);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty());
    assert!(owner_remediated(&w).is_none());
    assert_eq!(status(&w).phase, api::PHASE_DELETING_MACHINE);
    assert!(
        !object(&w).unwrap().metadata.has_finalizer(api::FINALIZER),
        "nothing to clean up"
    );
}

#[test]
fn no_machine_or_another_providers_machine_fails_without_writing_to_it() {
    let w = World::new(2);
    w.cluster(NS, "c1");
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert_eq!(status(&w).phase, api::PHASE_FAILED);
    assert_eq!(
        reason(&w, api::OWNER_REMEDIATION_REQUESTED),
        api::MACHINE_NOT_FOUND
    );

    let w = World::new(2);
    deployed_worker(&w);
    w.edit(CAPI_MACHINE, NS, "m1", |m| {
        m["spec"]["infrastructureRef"] = json!({"kind": "Metal3Machine", "name": "m1"})
    });
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert_eq!(status(&w).phase, api::PHASE_FAILED);
    assert_eq!(
        reason(&w, api::OWNER_REMEDIATION_REQUESTED),
        api::NOT_A_MAAS_MACHINE
    );
    assert!(w.maas.calls().is_empty());
    assert!(owner_remediated(&w).is_none());
    assert_eq!(events(&w), ["RemediationFailed"]);
    reconcile(&w).unwrap();
    assert_eq!(events(&w), ["RemediationFailed"], "reported once");
}

#[test]
fn a_paused_cluster_pauses_the_remediation() {
    let w = World::new(2);
    deployed_worker(&w);
    w.edit(CAPI_CLUSTER, NS, "c1", |c| {
        c["spec"]["paused"] = json!(true)
    });
    remediation(&w, 1);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty());
    assert_eq!(reason(&w, conditions::PAUSED), conditions::PAUSED_REASON);
}

#[test]
fn deleted_during_a_power_cycle_the_machine_is_powered_on_again() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert_eq!(w.maas.host(&system_id).power_state, PowerState::Off);

    // The Node's condition changed (kubelet stopped): the health check
    // deletes the remediation mid-cycle.
    w.delete(MAAS_REMEDIATION, NS, "m1");
    reconcile(&w).unwrap();
    assert!(object(&w).is_none());
    assert_eq!(w.maas.host(&system_id).power_state, PowerState::On);
    assert_eq!(w.machine_queue.take_names(), vec!["m1"]);
    assert!(events(&w).contains(&"RemediationEnded".to_string()));
}

#[test]
fn a_new_remediation_of_the_same_machine_goes_on_counting() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 2);
    reconcile(&w).unwrap();
    w.delete(MAAS_REMEDIATION, NS, "m1");
    reconcile(&w).unwrap();
    assert!(object(&w).is_none());
    assert_eq!(w.machine_queue.take_names(), vec!["m1"], "powered on");

    // Still unhealthy: the health check creates a new one 20 s later. It
    // waits out the first cycle's timeout instead of cycling at once.
    w.clock.advance(20);
    remediation(&w, 2);
    w.kube.clear_writes();
    w.maas.clear_calls();
    assert_eq!(
        reconcile(&w).unwrap(),
        Action::RequeueAfter(Duration::from_secs(
            TIMEOUT - 20 - super::cycle::MIN_OFF_SECONDS
        ))
    );
    let s = status(&w);
    assert_eq!((s.phase.as_str(), s.retry_count), (api::PHASE_WAITING, 1));
    assert!(events(&w).contains(&"RemediationContinued".to_string()));
    assert!(power_calls(&w).is_empty());

    // Then cycle 2 of 2, and after it the hand-back.
    w.clock.advance(TIMEOUT - 20);
    run_power_cycle(&w, &system_id, 2);
    w.clock.advance(TIMEOUT);
    reconcile(&w).unwrap();
    assert_eq!(status(&w).phase, api::PHASE_DELETING_MACHINE);
    assert!(owner_remediated(&w).is_some());
}

#[test]
fn an_old_count_is_forgotten() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    run_power_cycle(&w, &system_id, 1);
    w.delete(MAAS_REMEDIATION, NS, "m1");
    reconcile(&w).unwrap();

    // Healthy for longer than the minimum healthy period: a fresh start.
    w.clock.advance(api::MIN_HEALTHY_PERIOD.as_secs());
    remediation(&w, 1);
    run_power_cycle(&w, &system_id, 1);
}

#[test]
fn the_maas_machine_reconciler_leaves_a_power_cycled_machine_off() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert_eq!(w.maas.host(&system_id).power_state, PowerState::Off);

    w.maas.clear_calls();
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    assert!(power_calls(&w).is_empty(), "{:?}", w.maas.calls());
    let mm = w.maas_machine(NS, "m1");
    let deployed = conditions::get(mm.conditions(), mm_api::MACHINE_DEPLOYED).unwrap();
    assert_eq!(deployed.reason, mm_api::MACHINE_POWERED_OFF);
    assert!(
        deployed
            .message
            .contains("power-cycled by MaasRemediation ns/m1"),
        "{}",
        deployed.message
    );

    // Once the remediation is gone, a deployed machine found off is powered
    // on as before.
    w.kube.remove(MAAS_REMEDIATION, NS, "m1");
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    assert_eq!(power_calls(&w), [format!("power_on {system_id}")]);
}

/// Sets the owner data MAAS shows for the machine (None: cleared).
fn set_owner_data(w: &World, system_id: &str, identity: Option<&str>) {
    let mut machines = w.maas.machines.lock().unwrap();
    let host = machines.get_mut(system_id).unwrap();
    host.owner_data.remove(OWNER_DATA_KEY);
    if let Some(identity) = identity {
        host.owner_data
            .insert(OWNER_DATA_KEY.into(), identity.into());
    }
}

/// Nothing happened to the machine and Cluster API was not asked to
/// replace it: the remediation failed, saying why.
fn assert_refused_as_not_owned(w: &World, why: &str) {
    assert!(power_calls(w).is_empty(), "{:?}", w.maas.calls());
    assert!(owner_remediated(w).is_none(), "not handed back");
    assert_eq!(status(w).phase, api::PHASE_FAILED);
    assert_eq!(
        reason(w, api::OWNER_REMEDIATION_REQUESTED),
        api::MACHINE_NOT_OWNED
    );
    let s = status(w);
    let message = &conditions::get(&s.conditions, api::OWNER_REMEDIATION_REQUESTED)
        .unwrap()
        .message;
    assert!(message.contains(why), "{message}");
    assert!(events(w).contains(&"RemediationFailed".to_string()));
}

#[test]
fn a_machine_maas_shows_under_another_identity_is_never_power_cycled() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    set_owner_data(&w, &system_id, Some("capmaas/other/vm1/uid-x"));
    remediation(&w, 3);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_refused_as_not_owned(&w, "belongs to another MaasMachine");
    assert_eq!(w.maas.host(&system_id).power_state, PowerState::On);
}

#[test]
fn a_maas_machine_without_its_own_identity_is_never_power_cycled() {
    let w = World::new(2);
    deployed_worker(&w);
    // An annotation naming another object (copied or forged) is no identity.
    w.edit(MAAS_MACHINE, NS, "m1", |v| {
        v["metadata"]["annotations"][ANNOTATION] = json!("capmaas/victim/vm1/uid-v");
    });
    remediation(&w, 1);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_refused_as_not_owned(&w, "no valid capmaas identity");
    assert!(w.maas.calls().is_empty(), "not even read");
}

#[test]
fn owner_data_lost_but_listed_under_the_identity_is_power_cycled() {
    // A crash between allocate (agent_name) and set_owner_data: the
    // agent_name list settles it, as for the MaasMachine reconciler.
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    set_owner_data(&w, &system_id, None);
    remediation(&w, 1);
    run_power_cycle(&w, &system_id, 1);
    assert_eq!(power_calls(&w).len(), 2, "{:?}", w.maas.calls());
}

#[test]
fn the_machine_changing_hands_during_a_power_cycle_is_not_powered_on() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWER_OFF_REQUESTED);
    // Released and allocated to someone else behind our back.
    set_owner_data(&w, &system_id, Some("capmaas/other/vm1/uid-x"));
    w.maas.clear_calls();
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert_refused_as_not_owned(&w, "belongs to another MaasMachine");
}

#[test]
fn the_power_cycle_uses_the_clusters_own_maas() {
    let w = World::new(0);
    let tenant = w.cluster_with_own_maas(NS, "c1", 1);
    w.machine(NS, "c1", "m1", false);
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    tenant.finish_deployments();
    crate::controllers::machine::reconcile(&w.ctx, NS, "m1").unwrap();
    let system_id = w.maas_machine(NS, "m1").spec.system_id.unwrap();
    tenant.clear_calls();
    remediation(&w, 1);
    reconcile(&w).unwrap();
    assert_eq!(tenant.host(&system_id).power_state, PowerState::Off);
    assert!(tenant.calls().iter().any(|c| c.starts_with("power_off")));
    assert!(
        w.maas.calls().is_empty(),
        "the controller-wide MAAS untouched"
    );

    // Credentials gone: retried, nothing written, the step kept.
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["identityRef"] = json!({"kind": "Secret", "name": "missing"})
    });
    tenant.clear_calls();
    assert!(matches!(reconcile(&w), Err(Error::Credentials(_))));
    assert!(tenant.calls().is_empty());
    assert_eq!(reason(&w, api::POWER_CYCLED), api::POWER_OFF_REQUESTED);
    assert!(events(&w).contains(&api::CREDENTIALS_UNAVAILABLE.to_string()));
}

/// Issue 23 item 1: a Node deleted and registered anew while its machine
/// was down gets back the labels and annotations users had set, never over
/// what the new Node carries; kubectl's last-applied copy is not kept.
#[test]
fn a_node_registered_anew_gets_back_its_labels_and_annotations() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    let node = node_key(&w, &system_id);
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    w.workload.node_labels.lock().unwrap().insert(
        node.clone(),
        map(&[
            ("node-role.kubernetes.io/storage", ""),
            ("topology.rook.io/rack", "r1"),
        ]),
    );
    w.workload.node_annotations.lock().unwrap().insert(
        node.clone(),
        map(&[
            ("example.com/owner", "team-a"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ]),
    );
    remediation(&w, 2);
    run_power_cycle(&w, &system_id, 1);
    let saved = status(&w)
        .saved_node
        .expect("saved when the machine went off");
    assert_eq!(saved.uid, format!("uid-node-{}", node.1));
    assert_eq!(saved.labels.len(), 2);
    assert_eq!(saved.annotations.len(), 1, "{saved:?}");

    // Registered anew: another uid, only the kubelet's labels, one of the
    // user's with another value now.
    w.workload
        .node_uids
        .lock()
        .unwrap()
        .insert(node.clone(), "uid-node-new".into());
    w.workload.node_labels.lock().unwrap().insert(
        node.clone(),
        map(&[
            ("kubernetes.io/hostname", node.1.as_str()),
            ("topology.rook.io/rack", "r2"),
        ]),
    );
    w.workload.node_annotations.lock().unwrap().remove(&node);
    ready_since(&w, &node, Some("2023-11-14T22:14:00Z"));
    w.clock.advance(60);
    reconcile(&w).unwrap();

    let labels = w.workload.node_labels.lock().unwrap()[&node].clone();
    assert_eq!(
        labels,
        map(&[
            ("kubernetes.io/hostname", node.1.as_str()),
            ("node-role.kubernetes.io/storage", ""),
            ("topology.rook.io/rack", "r2"),
        ])
    );
    let annotations = w.workload.node_annotations.lock().unwrap()[&node].clone();
    assert_eq!(annotations, map(&[("example.com/owner", "team-a")]));
    assert!(events(&w).contains(&"NodeMetadataRestored".to_string()));
    assert!(status(&w).saved_node.is_none());
    assert!(!w.workload.out_of_service.lock().unwrap().contains(&node));
}

/// The same Node back after the power cycle: nothing is written to it but
/// the taint coming off.
#[test]
fn the_same_node_back_is_not_rewritten() {
    let w = World::new(2);
    let system_id = deployed_worker(&w);
    let node = node_key(&w, &system_id);
    remediation(&w, 2);
    run_power_cycle(&w, &system_id, 1);
    ready_since(&w, &node, Some("2023-11-14T22:14:00Z"));
    w.clock.advance(60);
    reconcile(&w).unwrap();
    assert!(!events(&w).contains(&"NodeMetadataRestored".to_string()));
    assert!(status(&w).saved_node.is_none());
}
