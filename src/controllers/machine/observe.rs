//! What MAAS says about the machine → MaasMachine status and conditions;
//! powers a deployed machine back on; then, for a running machine, the DNS
//! attachment (control plane) and the workload Node's providerID.
//!
//! While the MAAS watch lists the machine's MAAS, a change of the machine
//! wakes its MaasMachine and nothing is polled ([`next_look`]); otherwise
//! MAAS is polled while the machine is in a transitional state, at
//! [`poll_interval`]s that grow while nothing changes.

use std::time::Duration;

use super::{dns, next_look, node, poll_interval, MachineReconciling, Owners};
use crate::api::maas_machine::{self as mm_api, AddressSelector};
use crate::api::{Desired, Initialization, MachineAddress};
use crate::controllers::{remediation, Error};
use crate::maas::{self, MachineStatus, PowerState};
use crate::runtime::Action;

/// After asking MAAS to power a deployed machine on: look again then, and
/// do not ask again before (MAAS shows the new power state only once its
/// power driver has run). The watch reports the machine on sooner.
const POWER_ON_REQUEUE: Duration = Duration::from_secs(60);
const POWERING_ON: &str = "deployed machine was powered off; powering it on";

pub(super) fn observe(
    r: &mut MachineReconciling,
    host: &maas::Machine,
    owners: &Owners,
) -> Result<Action, Error> {
    record_host(r, host);
    let powered = host.power_state == PowerState::On;
    let provisioned = r.object.is_provisioned();
    // A MaasRemediation powered it off on purpose and powers it on again.
    let remediating = remediation::power_cycle_in_progress(r.ctx, &r.object);

    let mut next = match (&host.status, powered) {
        (MachineStatus::Deployed, true) => {
            r.set_true(mm_api::MACHINE_DEPLOYED, mm_api::MACHINE_DEPLOYED);
            r.status.initialization = Some(Initialization {
                provisioned: Some(true),
            });
            r.status.ready = true;
            r.status.failure_reason = None;
            r.status.failure_message = None;
            Action::Done
        }
        (MachineStatus::Deployed, false) if remediating.is_some() => {
            let message = remediating.unwrap_or_default();
            r.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::MACHINE_POWERED_OFF,
                message,
            );
            Action::RequeueAfter(POWER_ON_REQUEUE)
        }
        (MachineStatus::Deployed, false) if host.power_state == PowerState::Off => {
            power_on(r, host)?
        }
        (MachineStatus::Deployed, false) => power_state_unknown(r, host),
        (MachineStatus::Deploying, powered) => {
            let reason = if powered {
                mm_api::MACHINE_DEPLOYING
            } else {
                mm_api::MACHINE_POWERED_OFF
            };
            r.set_false(mm_api::MACHINE_DEPLOYED, reason, status_message(host));
            transitional(r)
        }
        (MachineStatus::Allocated | MachineStatus::Ready, _) if !provisioned => {
            r.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::MACHINE_DEPLOYING,
                status_message(host),
            );
            transitional(r)
        }
        (
            MachineStatus::Releasing
            | MachineStatus::DiskErasing
            | MachineStatus::New
            | MachineStatus::Ready,
            _,
        ) => {
            let message = format!(
                "MAAS machine {} is {:?}: released outside of Cluster API",
                host.system_id, host.status_name
            );
            failed(
                r,
                mm_api::MACHINE_TERMINATED,
                "MachineUnexpectedTermination",
                message,
            );
            Action::Done
        }
        (
            MachineStatus::Commissioning
            | MachineStatus::Testing
            | MachineStatus::RescueMode
            | MachineStatus::EnteringRescueMode
            | MachineStatus::ExitingRescueMode
            | MachineStatus::Reserved,
            _,
        ) => {
            // An operator is working on the machine; it may come back.
            let message = format!("MAAS machine {} is {:?}", host.system_id, host.status_name);
            r.set(Desired::unknown(
                mm_api::MACHINE_DEPLOYED,
                mm_api::MACHINE_STATE_UNDEFINED,
                message,
            ));
            next_look(
                r,
                poll_interval(r.condition_age(mm_api::MACHINE_DEPLOYED))
                    .max(Duration::from_secs(60)),
            )
        }
        _ => {
            // Failed deployment, Broken, Missing, Retired, Failed *: needs a
            // human (or a MachineHealthCheck); reported, not polled.
            let message = format!(
                "MAAS machine {} is {:?}: {}",
                host.system_id,
                host.status_name,
                status_message(host)
            );
            failed(
                r,
                mm_api::MACHINE_STATE_UNDEFINED,
                "MachineUnhandledState",
                message,
            );
            Action::Done
        }
    };

    let running = powered
        && matches!(
            host.status,
            MachineStatus::Deploying | MachineStatus::Deployed
        );
    if r.facts.is_control_plane {
        let ips = own_ips(r.object.address_selector().as_ref(), host);
        if let Some(dns_next) =
            dns::check_attachment(r, owners.maas_cluster.as_deref(), &ips, running)?
        {
            next = earliest(next, dns_next);
        }
    }
    if host.status == MachineStatus::Deployed && powered {
        if let Some(cluster) = &owners.cluster {
            if let Some(node_next) = node::ensure_provider_id(
                r,
                cluster,
                owners.maas_cluster.as_deref(),
                &host.hostname,
            )? {
                next = earliest(next, node_next);
            }
            if let Some(labels_next) = node::ensure_node_labels(r, cluster, host)? {
                next = earliest(next, labels_next);
            }
        }
    }
    Ok(next)
}

/// `machineState`, `machinePowered`, `hostname`, `addresses` as MAAS reports them.
pub(super) fn record_host(r: &mut MachineReconciling, host: &maas::Machine) {
    r.status.machine_state = Some(host.status_name.clone()).filter(|s| !s.is_empty());
    r.status.machine_powered = host.power_state == PowerState::On;
    r.status.hostname = Some(host.hostname.clone()).filter(|h| !h.is_empty());
    r.status.addresses = addresses(host, &own_ips(r.object.address_selector().as_ref(), host));
}

/// The machine's own IPs: those `spec.addressSelector` picks (on a
/// multi-NIC machine MAAS lists the PXE network's first, which is rarely
/// the one the cluster should use), else every IP MAAS reports.
pub(super) fn own_ips(selector: Option<&AddressSelector>, host: &maas::Machine) -> Vec<String> {
    let Some(selector) = selector else {
        return host.ip_addresses.clone();
    };
    let mut ips: Vec<String> = host
        .addresses()
        .filter(|a| {
            selector
                .subnet
                .as_ref()
                .is_none_or(|s| *s == a.subnet_cidr || *s == a.subnet_name)
                && selector
                    .interface
                    .as_ref()
                    .is_none_or(|i| *i == a.interface)
        })
        .map(|a| a.ip.to_owned())
        .collect();
    ips.dedup();
    ips
}

/// Each own IP as ExternalIP and InternalIP, the FQDN as ExternalDNS and
/// InternalDNS (as the Go provider reports them).
fn addresses(host: &maas::Machine, ips: &[String]) -> Vec<MachineAddress> {
    let mut out = Vec::new();
    let entry = |type_: &str, address: &str| MachineAddress {
        type_: crate::api::names::name(type_),
        address: address.into(),
    };
    if !host.fqdn.is_empty() {
        out.push(entry("ExternalDNS", &host.fqdn));
        out.push(entry("InternalDNS", &host.fqdn));
    }
    for ip in ips.iter().filter(|ip| !ip.is_empty()) {
        out.push(entry("ExternalIP", ip));
        out.push(entry("InternalIP", ip));
    }
    out
}

fn transitional(r: &MachineReconciling) -> Action {
    next_look(r, poll_interval(r.condition_age(mm_api::MACHINE_DEPLOYED)))
}

/// A deployed machine found powered off is powered on, unless that was
/// asked less than [`POWER_ON_REQUEUE`] ago (the condition says so since
/// then).
fn power_on(r: &mut MachineReconciling, host: &maas::Machine) -> Result<Action, Error> {
    let asked = r
        .condition(mm_api::MACHINE_DEPLOYED)
        .is_some_and(|c| c.reason == mm_api::MACHINE_POWERED_OFF && c.message == POWERING_ON);
    let age = r.condition_age(mm_api::MACHINE_DEPLOYED);
    if asked && age < POWER_ON_REQUEUE.as_secs() {
        return Ok(Action::RequeueAfter(Duration::from_secs(
            POWER_ON_REQUEUE.as_secs() - age,
        )));
    }
    let comment = "capmaas: deployed machine found powered off";
    r.maas()?.write(&host.system_id, |client| {
        client
            .power_on_with_comment(&host.system_id, Some(comment))
            .map(drop)
    })?;
    r.normal_event(
        "MachinePoweredOn",
        &format!("Powering on deployed instance {:?}", host.system_id),
    );
    r.set_false(
        mm_api::MACHINE_DEPLOYED,
        mm_api::MACHINE_POWERED_OFF,
        POWERING_ON,
    );
    Ok(Action::RequeueAfter(POWER_ON_REQUEUE))
}

/// A deployed machine whose power state MAAS does not know (`unknown`,
/// `error`: a BMC that did not answer, or power type manual) is not
/// powered on: on IPMI that would power-cycle it, running or not. It is
/// said once in a Warning event and on the condition, and looked at again
/// later (the watch reports a change sooner).
fn power_state_unknown(r: &mut MachineReconciling, host: &maas::Machine) -> Action {
    let message = format!(
        "MAAS reports power state {:?} for deployed machine {}; not powering it on \
         (a power on through its BMC could reset a running machine)",
        host.power_state.as_str(),
        host.system_id
    );
    r.not_deployed(
        mm_api::MACHINE_POWER_STATE_UNKNOWN,
        "PowerStateUnknown",
        message,
    );
    Action::RequeueAfter(POWER_ON_REQUEUE)
}

/// A state that needs a human: condition, failure fields, one event per new
/// message. Cleared again once the machine is deployed and running.
pub(super) fn failed(
    r: &mut MachineReconciling,
    reason: &str,
    event_reason: &str,
    message: String,
) {
    if r.status.failure_message.as_deref() != Some(message.as_str()) {
        r.warning_event(event_reason, &message);
    }
    let desired = if reason == mm_api::MACHINE_STATE_UNDEFINED {
        Desired::unknown(mm_api::MACHINE_DEPLOYED, reason, message.clone())
    } else {
        Desired::false_(mm_api::MACHINE_DEPLOYED, reason, message.clone())
    };
    r.set(desired);
    r.status.failure_reason = Some(mm_api::UPDATE_MACHINE_ERROR.into());
    r.status.failure_message = Some(message);
}

fn status_message(host: &maas::Machine) -> String {
    host.status_message.clone().unwrap_or_default()
}

fn earliest(a: Action, b: Action) -> Action {
    match (a, b) {
        (Action::Done, other) | (other, Action::Done) => other,
        (Action::RequeueAfter(x), Action::RequeueAfter(y)) => Action::RequeueAfter(x.min(y)),
    }
}
