//! One power cycle of the MAAS machine: power off, wait until MAAS reports
//! it off, power on, wait until MAAS reports it on. MAAS has no power-cycle
//! call in its API (`power_off`, `power_on`, `query_power_state` only).
//!
//! ```text
//! PowerCycled False PoweringOff ─power_off─► PowerOffRequested ─(MAAS: off)─►
//!             False PoweringOn  ─power_on──► PowerOnRequested  ─(MAAS: on)──► True PowerCycled
//! ```
//!
//! Each `*ing` reason is written before its call and each `*Requested`
//! after it, so a restart repeats a call only when it may not have been
//! made (and both calls are safe to repeat). MAAS's `power_state` is read
//! from the machine (one GET per poll): the steps only move on what MAAS
//! reports.

use std::time::Duration;

use serde_json::json;

use super::{describe, RemediationReconciling, Target};
use crate::api::capi::Machine;
use crate::api::conditions::Desired;
use crate::api::maas_remediation::{self as api, History};
use crate::controllers::identity::{self, Identity, Ownership, Recorded};
use crate::controllers::ports::Kind;
use crate::controllers::Error;
use crate::maas::{self, MachineStatus, PowerState};
use crate::runtime::Action;

/// How often MAAS is asked for the power state during a power cycle.
const POWER_POLL: Duration = Duration::from_secs(5);

/// Starts power cycle `retryCount + 1`: checks that the machine may be
/// power-cycled, persists the intent (status, then the MaasMachine's
/// count), then asks MAAS to power it off.
pub(super) fn start(r: &mut RemediationReconciling, target: &Target) -> Result<Action, Error> {
    let host = match power_target(r, target)? {
        Ok(host) => host,
        Err(refusal) => return refuse(r, refusal),
    };
    let count = r.status.retry_count.saturating_add(1);
    r.status.retry_count = count;
    r.status.last_remediated = Some(r.now.clone());
    r.status.phase = api::PHASE_RUNNING.into();
    let message = format!(
        "power cycle {count} of {}: powering off MAAS machine {}",
        r.object.retry_limit(),
        host.system_id
    );
    r.set_false(api::POWER_CYCLED, api::POWERING_OFF, message.clone());
    r.write_status()?;
    record_history(r, target)?;
    r.normal_event("PowerCycleStarted", &message);
    power_off(r, &host)
}

/// One poll of the power cycle in progress.
pub(super) fn step(r: &mut RemediationReconciling, target: &Target) -> Result<Action, Error> {
    if r.attempt_left().is_zero() {
        let message = format!(
            "MAAS did not power-cycle the machine within {}",
            describe(r.object.timeout())
        );
        r.warning_event(api::POWER_CYCLE_TIMED_OUT, &message);
        r.set_false(api::POWER_CYCLED, api::POWER_CYCLE_TIMED_OUT, message);
        r.status.phase = api::PHASE_WAITING.into();
        return r.wait(target);
    }
    let host = match power_target(r, target)? {
        Ok(host) => host,
        Err(refusal) => return refuse(r, refusal),
    };
    // Written at the start; repeated here in case that write was lost.
    record_history(r, target)?;
    let step = r
        .condition_reason(api::POWER_CYCLED)
        .unwrap_or(api::POWERING_OFF)
        .to_string();
    let on = host.power_state == PowerState::On;
    match step.as_str() {
        api::POWERING_ON | api::POWER_ON_REQUESTED if on => powered_on(r, target, &host),
        api::POWERING_ON => power_on(r, &host),
        api::POWER_ON_REQUESTED => Ok(poll(r)),
        // A hard power cycle leaves the machine off for a few seconds, as
        // BMCs and power supplies need to reset the board (and as the
        // workload sees it: a machine that is off at once and on again in
        // the same second may never have gone down).
        api::POWER_OFF_REQUESTED
            if host.power_state == PowerState::Off
                && r.condition_age(api::POWER_CYCLED) < MIN_OFF_SECONDS =>
        {
            Ok(Action::RequeueAfter(Duration::from_secs(1)))
        }
        _ if host.power_state == PowerState::Off => {
            super::node::take_out_of_service(r, target, &host)?;
            r.set_false(
                api::POWER_CYCLED,
                api::POWERING_ON,
                format!("MAAS reports {} off; powering it on", host.system_id),
            );
            r.write_status()?;
            power_on(r, &host)
        }
        api::POWER_OFF_REQUESTED => Ok(poll(r)),
        _ => power_off(r, &host),
    }
}

fn power_off(r: &mut RemediationReconciling, host: &maas::Machine) -> Result<Action, Error> {
    let comment = format!("capmaas: {} power cycle", r.key());
    r.maas()?.write(&host.system_id, |client| {
        client
            .power_off_with_comment(&host.system_id, Some(&comment))
            .map(drop)
    })?;
    r.set_false(
        api::POWER_CYCLED,
        api::POWER_OFF_REQUESTED,
        format!("asked MAAS to power off {}", host.system_id),
    );
    Ok(poll(r))
}

fn power_on(r: &mut RemediationReconciling, host: &maas::Machine) -> Result<Action, Error> {
    let comment = format!("capmaas: {} power cycle", r.key());
    power_on_with(r, host, &comment)?;
    r.normal_event(
        "PoweringOn",
        &format!("MAAS machine {} is off; powering it on", host.system_id),
    );
    r.set_false(
        api::POWER_CYCLED,
        api::POWER_ON_REQUESTED,
        format!("asked MAAS to power on {}", host.system_id),
    );
    Ok(poll(r))
}

/// MAAS reports the machine on again: the MaasMachine reconciler is woken
/// to look at it, and the wait for the Node begins.
fn powered_on(
    r: &mut RemediationReconciling,
    target: &Target,
    host: &maas::Machine,
) -> Result<Action, Error> {
    let message = format!(
        "MAAS machine {} is on again; waiting up to {} from the start of the power cycle for a healthy Node",
        host.system_id,
        describe(r.object.timeout())
    );
    r.set(Desired::true_(api::POWER_CYCLED, api::POWER_CYCLED).with_message(&message));
    r.status.phase = api::PHASE_WAITING.into();
    r.normal_event("PowerCycled", &message);
    let ns = r.object.metadata.namespace.clone();
    r.ctx
        .machine_queue
        .reconcile_soon(&ns, &target.maas_machine_name);
    r.wait(target)
}

/// The MaasRemediation is being deleted during a power cycle: the machine
/// is powered on (MAAS ignores that for a machine already on), unless it
/// may not be touched any more.
pub(super) fn power_on_after_cut(
    r: &mut RemediationReconciling,
    machine: &Machine,
) -> Result<(), Error> {
    let ns = r.object.metadata.namespace.clone();
    let Some(name) = machine.spec.infrastructure_ref.as_ref().map(|i| &i.name) else {
        return Ok(());
    };
    let target = Target {
        machine: std::sync::Arc::new(machine.clone()),
        maas_machine: r.ctx.kube.maas_machine(&ns, name),
        maas_machine_name: name.clone(),
    };
    let host = match power_target(r, &target)? {
        Ok(host) => host,
        Err(Refusal::Cannot(why) | Refusal::NotOwned(why)) => {
            log::info!("{}: not powering on: {why}", r.key());
            return Ok(());
        }
    };
    let comment = format!("capmaas: {} ended during a power cycle", r.key());
    power_on_with(r, &host, &comment)?;
    r.normal_event(
        "PoweringOn",
        &format!(
            "MaasRemediation deleted during a power cycle; powering on MAAS machine {}",
            host.system_id
        ),
    );
    r.ctx.machine_queue.reconcile_soon(&ns, name);
    Ok(())
}

/// The retries are spent: the machine is marked Broken in MAAS, with a
/// comment naming the cluster, the Machine and why, so that nobody
/// allocates it again before an administrator has looked (and marked it
/// fixed). MAAS releases it on the way, so the Machine's replacement
/// deletes nothing of it. Only a machine MAAS shows as ours: repeated after
/// a crash, the machine is no longer ours (or Broken already) and is left.
pub(super) fn mark_broken(
    r: &mut RemediationReconciling,
    target: &Target,
    why: &str,
) -> Result<(), Error> {
    let host = match owned_host(r, target)? {
        Ok(host) if host.status != MachineStatus::Broken => host,
        Ok(_) => return Ok(()),
        Err(Refusal::Cannot(reason) | Refusal::NotOwned(reason)) => {
            log::info!("{}: not marking broken: {reason}", r.key());
            return Ok(());
        }
    };
    let ns = &r.object.metadata.namespace;
    let comment = format!(
        "capmaas: cluster {ns}/{}, Machine {}: {why}",
        target.machine.spec.cluster_name, target.machine.metadata.name
    );
    r.maas()?.write(&host.system_id, |client| {
        client.mark_broken(&host.system_id, &comment).map(drop)
    })?;
    let message = format!(
        "MAAS machine {} marked Broken (\"{comment}\"); an administrator marks it fixed to use it again",
        host.system_id
    );
    r.set(Desired::true_(api::MARKED_BROKEN, api::MARKED_BROKEN).with_message(&message));
    r.warning_event("MachineMarkedBroken", &message);
    Ok(())
}

/// Why a machine is not power-cycled.
pub(super) enum Refusal {
    /// Nothing to power-cycle (no MaasMachine or machine, deletion under
    /// way, not Deployed, manual power): Cluster API replaces the Machine.
    Cannot(String),
    /// MAAS does not show the machine under the MaasMachine's identity:
    /// never touched, and not handed back either, since the MaasMachine's
    /// deletion would not release it (a person has to look).
    NotOwned(String),
}

fn refuse(r: &mut RemediationReconciling, refusal: Refusal) -> Result<Action, Error> {
    match refusal {
        Refusal::Cannot(why) => r.hand_back(api::CANNOT_POWER_CYCLE, why),
        Refusal::NotOwned(why) => Ok(r.fail(api::MACHINE_NOT_OWNED, why)),
    }
}

/// The MAAS machine of the MaasMachine, when it may be power-cycled: one
/// that is ours ([`owned_host`]), Deployed, and not of power type manual.
fn power_target(
    r: &RemediationReconciling,
    target: &Target,
) -> Result<Result<maas::Machine, Refusal>, Error> {
    let host = match owned_host(r, target)? {
        Ok(host) => host,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let system_id = &host.system_id;
    if host.status != MachineStatus::Deployed {
        return Ok(Err(Refusal::Cannot(format!(
            "MAAS machine {system_id} is {:?}, not Deployed",
            host.status_name
        ))));
    }
    if host.power_type == "manual" {
        return Ok(Err(Refusal::Cannot(format!(
            "MAAS cannot power-cycle machine {system_id} (power type manual)"
        ))));
    }
    Ok(Ok(host))
}

/// The MAAS machine of the MaasMachine: the machine its `spec.systemID`
/// names, and only while MAAS shows it under the MaasMachine's identity
/// (PLAN "Identity and tenancy": owner data, or the `agent_name` list right
/// after a crash before owner data was written). MAAS being unreachable is
/// an error (retried).
fn owned_host(
    r: &RemediationReconciling,
    target: &Target,
) -> Result<Result<maas::Machine, Refusal>, Error> {
    let ns = &r.object.metadata.namespace;
    let name = &target.maas_machine_name;
    let Some(mm) = target.maas_machine.as_deref() else {
        return Ok(Err(Refusal::Cannot(format!(
            "MaasMachine {ns}/{name} not found"
        ))));
    };
    if mm.metadata.is_being_deleted() || target.machine.metadata.is_being_deleted() {
        return Ok(Err(Refusal::Cannot(format!(
            "MaasMachine {ns}/{name} is being deleted"
        ))));
    }
    let Some(system_id) = mm.system_id() else {
        return Ok(Err(Refusal::Cannot(format!(
            "MaasMachine {ns}/{name} has no MAAS machine (spec.systemID)"
        ))));
    };
    let Recorded::Valid(identity) = Identity::recorded(&mm.metadata) else {
        return Ok(Err(Refusal::NotOwned(format!(
            "MaasMachine {ns}/{name} has no valid capmaas identity, so MAAS machine {system_id} is not known to be its own; left alone"
        ))));
    };
    let maas = r.maas()?;
    let host = match maas.machine(system_id) {
        Ok(host) => host,
        Err(e) if e.is_not_found() => {
            return Ok(Err(Refusal::Cannot(format!(
                "MAAS machine {system_id} no longer exists"
            ))))
        }
        Err(e) => return Err(e.into()),
    };
    let ours = match identity::ownership(&host, &identity) {
        Ownership::Ours => true,
        Ownership::Other(_) => false,
        Ownership::Unmarked => {
            host.owner.is_some()
                && maas
                    .machines_by_agent_name(identity.as_str())?
                    .iter()
                    .any(|m| m.system_id == system_id)
        }
    };
    if !ours {
        return Ok(Err(Refusal::NotOwned(identity::not_ours_message(
            system_id,
            Some(&host),
        ))));
    }
    Ok(Ok(host))
}

/// Counts this power cycle on the MaasMachine (see
/// [`api::HISTORY_ANNOTATION`]); writes only when it says otherwise.
fn record_history(r: &mut RemediationReconciling, target: &Target) -> Result<(), Error> {
    let Some(last_remediated) = r.status.last_remediated.clone() else {
        return Ok(());
    };
    let history = History {
        retry_count: r.status.retry_count,
        last_remediated,
    };
    let recorded = target
        .maas_machine
        .as_deref()
        .and_then(|mm| History::of(&mm.metadata));
    if recorded.as_ref() == Some(&history) {
        return Ok(());
    }
    let ns = r.object.metadata.namespace.clone();
    let patch =
        json!({"metadata": {"annotations": {api::HISTORY_ANNOTATION: history.to_annotation()}}});
    r.ctx
        .kube
        .patch(Kind::MaasMachine, &ns, &target.maas_machine_name, &patch)?;
    Ok(())
}

/// Polls again soon, within the attempt's time.
/// How long a power cycle keeps the machine off, at least (seconds).
pub(super) const MIN_OFF_SECONDS: u64 = 5;

/// Powers the machine on, with `comment` in MAAS's event log.
fn power_on_with(
    r: &RemediationReconciling,
    host: &maas::Machine,
    comment: &str,
) -> Result<(), Error> {
    r.maas()?.write(&host.system_id, |client| {
        client
            .power_on_with_comment(&host.system_id, Some(comment))
            .map(drop)
    })?;
    Ok(())
}

fn poll(r: &RemediationReconciling) -> Action {
    let left = r.attempt_left().max(Duration::from_secs(1));
    Action::RequeueAfter(POWER_POLL.min(left))
}
