//! Find the MAAS machine of this MaasMachine, or allocate one, and prove
//! it is this object's before anything acts on it.
//!
//! Identity (`controllers::identity`): the allocation carries the object's
//! identity as `agent_name` (set by MAAS in the same transaction) and then
//! as owner data. A recorded `spec.systemID` is used only when MAAS shows
//! that machine under the identity; anything else (another tenant's
//! machine, an unallocated one, a machine the Go provider deployed and no
//! administrator adopted yet) is reported and never touched.
//!
//! Crash safety: before allocating we ask MAAS for a machine already
//! listed under the identity, so a crash between the allocate call and the
//! spec write finds the machine again instead of allocating a second one
//! (the MAAS view answers that question without a call only for an identity
//! this process chose and has not allocated with yet, see
//! `controllers::maas_view`). The spec write (`providerID`, `systemID`)
//! follows the allocation at once, then the owner data; a crash between
//! them is repaired the same way.
//!
//! The recorded machine is read from the MAAS watch's view when it is
//! fresh (its machines carry their owner data, so the identity check is the
//! same); otherwise, or when the view does not show it as ours, from MAAS.
//! A refused allocation is tried again from seconds growing to minutes
//! (`retry.rs`).

use serde_json::json;

use std::sync::Arc;

use super::{observe, retry, reuse, MachineReconciling, Step};
use crate::api::capi;
use crate::api::maas_machine::{self as mm_api, provider_id};
use crate::api::MaasCluster;
use crate::controllers::identity::{self, Identity, Ownership};
use crate::controllers::Error;
use crate::maas::watch::Lookup;
use crate::maas::{self, check_image, AllocateRequest, ReleaseRequest};
use crate::runtime::Action;

/// How long to wait before looking again at a machine for reuse that MAAS
/// is still releasing or whose MaasMachine is still being deleted.
const REUSE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub(super) fn find_or_allocate(
    r: &mut MachineReconciling,
    machine: &capi::Machine,
    maas_cluster: Option<&MaasCluster>,
    identity: &Identity,
) -> Result<Step<maas::Machine>, Error> {
    if let Some(system_id) = r.object.system_id().map(str::to_string) {
        return recorded_machine(r, &system_id, identity);
    }
    if let Some(wait) = retry::waiting(r) {
        return Ok(Step::Stop(wait));
    }

    let reuse_owner = reuse::owner(&r.object, Some(machine));
    let mut ours = r.maas()?.machines_by_agent_name(identity.as_str())?;
    if !ours.is_empty() {
        let host = ours.remove(0);
        for duplicate in ours {
            release_duplicate(r, &duplicate);
        }
        log::info!(
            "{}: found MAAS machine {} already allocated to it",
            r.key(),
            host.system_id
        );
        record_allocation(r, &host)?;
        reuse::settle(r, maas_cluster, reuse_owner.as_deref(), &host.system_id)?;
        let host = mark(r, host, identity)?;
        return Ok(Step::Continue(host));
    }

    // Check the image and the deploy options before taking a machine we
    // could not deploy.
    if let Some(wait) = super::deploy::refuse_unsupported_options(r)? {
        return Ok(Step::Stop(wait));
    }
    require_image(r)?;
    let mut request = allocate_request(r, machine, identity);
    // A VM: composed first, then allocated by its system ID alone (the
    // constraints were the host's to meet).
    if let Some(kind) = r.object.vm_kind() {
        request = match super::vm::ready_vm(r, machine, kind, identity)? {
            Step::Continue(system_id) => AllocateRequest {
                system_id: Some(system_id),
                agent_name: request.agent_name,
                comment: request.comment,
                ..AllocateRequest::default()
            },
            Step::Stop(action) => return Ok(Step::Stop(action)),
        };
    }
    if r.condition_reason(mm_api::MACHINE_DEPLOYED) != Some(mm_api::MACHINE_DEPLOY_FAILED) {
        r.set_false(
            mm_api::MACHINE_DEPLOYED,
            mm_api::MACHINE_DEPLOY_STARTED,
            "allocating a machine",
        );
    }
    // A VM is composed for this object alone: never a reused machine.
    let reused = match (maas_cluster, reuse_owner.as_deref()) {
        (Some(cluster), Some(owner)) if r.object.vm_kind().is_none() => {
            match reuse::allocate(r, cluster, owner, &request)? {
                reuse::Reuse::Took(host) => Some(*host),
                reuse::Reuse::Releasing(system_id) => {
                    r.set_false(
                        mm_api::MACHINE_DEPLOYED,
                        mm_api::MACHINE_DEPLOY_STARTED,
                        format!("waiting for MAAS machine {system_id} to be released, to reuse it (spec.nodeReuse)"));
                    return Ok(Step::Stop(Action::RequeueAfter(REUSE_WAIT)));
                }
                reuse::Reuse::Nothing => None,
            }
        }
        _ => None,
    };
    // Only a machine the reuse path took is a reuse: a normal allocation
    // may land on a machine whose record was just found stale.
    let reuse_owner = reuse_owner.filter(|_| reused.is_some());
    let allocated = match reused {
        Some(host) => Ok(host),
        None => match r.maas()?.allocate(&request) {
            Err(e)
                if e.is_conflict()
                    && r.object.spec.options().failure_domain_fallback
                    && r.object.vm_kind().is_none() =>
            {
                allocate_elsewhere(r, &request, maas_cluster, e)
            }
            other => other,
        },
    };
    match allocated {
        Ok(host) => {
            let message = format!(
                "Allocated MAAS machine {} ({}) in zone {:?}",
                host.system_id, host.hostname, host.zone
            );
            r.normal_event("MachineAllocated", &message);
            if r.object.spec.options().failure_domain_fallback
                && request.zone.as_ref() == Some(&host.zone)
            {
                r.set_true(
                    mm_api::FAILURE_DOMAIN_MATCHED,
                    mm_api::FAILURE_DOMAIN_MATCHED,
                );
            }
            record_allocation(r, &host)?;
            reuse::settle(r, maas_cluster, reuse_owner.as_deref(), &host.system_id)?;
            let host = mark(r, host, identity)?;
            Ok(Step::Continue(host))
        }
        // No machine matches (409) or MAAS rejects a constraint (400): the
        // user can read why, and when the next try is, on the condition.
        Err(e) if e.is_conflict() || e.is_bad_request() => {
            let message = format!("allocating a machine: {}", e.message());
            Ok(Step::Stop(retry::refused(
                r,
                "MachineAllocationFailed",
                &message,
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// `spec.failureDomainFallback`: the zone asked for has no matching
/// machine (`refused`), so try the cluster's other failure domains in turn
/// (those `notInZones` allows). The identity travels with every attempt,
/// so a crash in between finds the one allocation again. The condition
/// says which zone the machine came from; with every zone refused, the
/// first refusal is the answer (the user asked for that zone).
fn allocate_elsewhere(
    r: &mut MachineReconciling,
    request: &AllocateRequest,
    maas_cluster: Option<&MaasCluster>,
    refused: maas::Error,
) -> Result<maas::Machine, maas::Error> {
    let Some(asked) = request.zone.clone() else {
        return Err(refused);
    };
    let others: Vec<String> = maas_cluster
        .map(MaasCluster::failure_domain_names)
        .unwrap_or_default()
        .into_iter()
        .filter(|z| *z != asked && !request.not_in_zone.contains(z))
        .collect();
    for zone in others {
        let attempt = AllocateRequest {
            zone: Some(zone.clone()),
            ..request.clone()
        };
        let maas = match r.maas() {
            Ok(maas) => maas,
            Err(_) => return Err(refused),
        };
        match maas.allocate(&attempt) {
            Ok(host) => {
                let message = format!(
                    "no machine matched in failure domain {asked:?}; allocated {} in {:?} \
                     instead (spec.failureDomainFallback)",
                    host.system_id, host.zone
                );
                r.warning_event(mm_api::FAILURE_DOMAIN_FALLBACK, &message);
                r.set_false(
                    mm_api::FAILURE_DOMAIN_MATCHED,
                    mm_api::FAILURE_DOMAIN_FALLBACK,
                    message,
                );
                return Ok(host);
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e),
        }
    }
    Err(refused)
}

/// The machine `spec.systemID` names, if MAAS shows it under our identity.
fn recorded_machine(
    r: &mut MachineReconciling,
    system_id: &str,
    identity: &Identity,
) -> Result<Step<maas::Machine>, Error> {
    let listed = match r.maas()?.watched(system_id) {
        Lookup::Owned(listed) => Some(Arc::unwrap_or_clone(listed.machine)),
        Lookup::NotOwned | Lookup::Unknown => None,
    };
    let read = match listed {
        Some(host) => Ok(host),
        None => r.maas()?.machine(system_id),
    };
    let host = match read {
        Ok(host) => host,
        // 404: gone from MAAS; 403: another MAAS user's machine, which this
        // user may not even read.
        Err(e) if e.is_not_found() => return Ok(gone_from_maas(r, system_id)),
        Err(e) if e.is_forbidden() => return Ok(not_ours(r, system_id, None)),
        // A MAAS outage changes nothing we know about the machine: keep
        // the status as it is (no flapping to Unknown) and retry.
        Err(e) if e.is_transient() => return Err(e.into()),
        Err(e) => {
            r.set(crate::api::Desired::unknown(
                mm_api::MACHINE_DEPLOYED,
                mm_api::MACHINE_NOT_FOUND,
                e.to_string(),
            ));
            return Err(e.into());
        }
    };
    match identity::ownership(&host, identity) {
        Ownership::Ours => Ok(Step::Continue(host)),
        Ownership::Other(_) => Ok(not_ours(r, system_id, Some(&host))),
        // Ours until now, released behind our back (MAAS cleared the owner
        // data): a machine this object had observed as its own (it recorded
        // its state) and nobody owns any more.
        Ownership::Unmarked if host.owner.is_none() && r.status.machine_state.is_some() => {
            Ok(released_out_of_band(r, &host))
        }
        // Allocated under our identity but the owner data is not written
        // yet (a crash between the two calls, or a machine allocated by
        // capmaas before the identity rules): the agent_name list settles it.
        Ownership::Unmarked => {
            let listed = host.owner.is_some()
                && r.maas()?
                    .machines_by_agent_name(identity.as_str())?
                    .iter()
                    .any(|m| m.system_id == system_id);
            if !listed {
                return Ok(not_ours(r, system_id, Some(&host)));
            }
            Ok(Step::Continue(mark(r, host, identity)?))
        }
    }
}

/// An object the Go provider allocated (a systemID, no capmaas identity):
/// read, never acted on, until an administrator adopts it (`capmaas adopt`);
/// the condition says whose the machine is.
pub(super) fn refuse_unadopted(r: &mut MachineReconciling) -> Result<Action, Error> {
    let Some(system_id) = r.object.system_id().map(str::to_string) else {
        return Ok(Action::Done);
    };
    let step = match r.maas()?.machine(&system_id) {
        Ok(host) => not_ours(r, &system_id, Some(&host)),
        Err(e) if e.is_not_found() => gone_from_maas(r, &system_id),
        Err(e) if e.is_forbidden() => not_ours(r, &system_id, None),
        Err(e) => return Err(e.into()),
    };
    Ok(match step {
        Step::Stop(action) => action,
        Step::Continue(_) => Action::Done,
    })
}

/// Our machine was released by someone else: said so, and left alone
/// (`spec.systemID` cannot change; a MachineHealthCheck or a person
/// replaces the Machine).
fn released_out_of_band(r: &mut MachineReconciling, host: &maas::Machine) -> Step<maas::Machine> {
    observe::record_host(r, host);
    let message = format!(
        "MAAS machine {} is {:?}: released outside of Cluster API",
        host.system_id, host.status_name
    );
    observe::failed(
        r,
        mm_api::MACHINE_TERMINATED,
        "MachineUnexpectedTermination",
        message,
    );
    Step::Stop(Action::Done)
}

/// Our recorded machine no longer exists in MAAS. `spec.systemID` cannot
/// change once set, so the MaasMachine cannot get another one: reported,
/// for a MachineHealthCheck or a person to replace it.
fn gone_from_maas(r: &mut MachineReconciling, system_id: &str) -> Step<maas::Machine> {
    let message = format!("MAAS machine {system_id} no longer exists");
    if r.status.failure_message.as_deref() != Some(message.as_str()) {
        r.warning_event("NoMachineFound", &message);
    }
    r.set_false(
        mm_api::MACHINE_DEPLOYED,
        mm_api::MACHINE_NOT_FOUND,
        message.clone(),
    );
    r.status.failure_reason = Some(mm_api::UPDATE_MACHINE_ERROR.into());
    r.status.failure_message = Some(message);
    Step::Stop(Action::Done)
}

/// The recorded machine is not this object's: say why, touch nothing.
fn not_ours(
    r: &mut MachineReconciling,
    system_id: &str,
    host: Option<&maas::Machine>,
) -> Step<maas::Machine> {
    let message = identity::not_ours_message(system_id, host);
    r.not_deployed(
        mm_api::MACHINE_NOT_OWNED,
        mm_api::MACHINE_NOT_OWNED,
        message,
    );
    Step::Stop(Action::Done)
}

/// Writes the identity into the machine's workload annotations unless it is
/// there.
fn mark(
    r: &MachineReconciling,
    host: maas::Machine,
    identity: &Identity,
) -> Result<maas::Machine, Error> {
    if identity::ownership(&host, identity) == Ownership::Ours {
        return Ok(host);
    }
    Ok(identity::write(r.maas()?, &host.system_id, identity)?)
}

fn allocate_request(
    r: &MachineReconciling,
    machine: &capi::Machine,
    identity: &Identity,
) -> AllocateRequest {
    let spec = &r.object.spec;
    let options = spec.options();
    let zone = spec
        .failure_domain
        .clone()
        .or_else(|| machine.spec.failure_domain.clone())
        .filter(|z| !z.is_empty());
    let meta = &r.object.metadata;
    let cluster = meta
        .labels
        .get(crate::api::capi::CLUSTER_NAME_LABEL)
        .map(String::as_str)
        .unwrap_or("");
    AllocateRequest {
        cpu_count: spec
            .min_cpu
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0),
        mem: spec
            .min_memory
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0),
        pool: spec.resource_pool.clone().filter(|p| !p.is_empty()),
        zone,
        tags: spec.tags.clone(),
        min_disk_gb: spec
            .min_disk_size
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0),
        not_tags: options.not_tags.clone(),
        not_in_zone: options.not_in_zones.clone(),
        arch: non_empty(&options.architecture).into_iter().collect(),
        storage: non_empty(&options.storage),
        interfaces: non_empty(&options.interfaces),
        system_id: options
            .machine_selector
            .as_ref()
            .and_then(|s| non_empty(&s.system_id)),
        name: options
            .machine_selector
            .as_ref()
            .and_then(|s| non_empty(&s.hostname)),
        agent_name: Some(identity.as_str().to_string()),
        comment: Some(format!(
            "capmaas: cluster {cluster}, MaasMachine {}/{}",
            meta.namespace, meta.name
        )),
        ..AllocateRequest::default()
    }
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

/// Persists `spec.providerID`, `spec.systemID`, `spec.failureDomain` right
/// after allocation (or after finding our allocation again).
fn record_allocation(r: &mut MachineReconciling, host: &maas::Machine) -> Result<(), Error> {
    let provider_id = provider_id(&host.zone, &host.system_id);
    let zone = (!host.zone.is_empty()).then(|| host.zone.clone());
    let spec = &r.object.spec;
    if spec.provider_id.as_deref() == Some(provider_id.as_str())
        && spec.system_id.as_deref() == Some(host.system_id.as_str())
        && (zone.is_none() || spec.failure_domain == zone)
    {
        return Ok(());
    }
    let mut spec = json!({"providerID": provider_id, "systemID": host.system_id});
    if let (Some(zone), serde_json::Value::Object(fields)) = (&zone, &mut spec) {
        fields.insert("failureDomain".into(), json!(zone));
    }
    r.patch(&json!({ "spec": spec }))?;
    r.object.spec.provider_id = Some(provider_id);
    r.object.spec.system_id = Some(host.system_id.clone());
    if zone.is_some() {
        r.object.spec.failure_domain = zone;
    }
    Ok(())
}

/// Two machines carry our identity only if an allocate answer was lost and
/// retried; keep the first, give the others back.
fn release_duplicate(r: &MachineReconciling, host: &maas::Machine) {
    let request = ReleaseRequest {
        comment: Some(format!("capmaas: duplicate allocation for {}", r.key())),
        ..Default::default()
    };
    let released = match r.maas() {
        Ok(maas) => maas
            .write(&host.system_id, |client| {
                client.release(&host.system_id, &request).map(drop)
            })
            .map_err(Error::from),
        Err(e) => Err(e),
    };
    match released {
        Ok(()) => r.normal_event(
            "SuccessfulRelease",
            &format!("Released duplicate instance {:?}", host.system_id),
        ),
        Err(e) => log::warn!(
            "{}: releasing duplicate allocation {}: {e}",
            r.key(),
            host.system_id
        ),
    }
}

/// Is the image of this MaasMachine among MAAS's boot resources? If not,
/// says so on `MachineDeployed` with the closest existing names, and the
/// reconcile stops here (retried with backoff).
pub(super) fn require_image(r: &mut MachineReconciling) -> Result<(), Error> {
    // Checked once per reconcile (before allocating, then before deploying).
    if r.facts.image_found {
        return Ok(());
    }
    let wanted = r.object.spec.image.clone();
    let resources = r.maas()?.boot_resources()?;
    let check = check_image(&wanted, &resources);
    if check.exists {
        r.facts.image_found = true;
        return Ok(());
    }
    let message = if check.closest.is_empty() {
        format!("image {wanted:?} not found in MAAS boot resources (none are deployable)")
    } else {
        let closest: Vec<String> = check.closest.iter().map(|c| format!("{c:?}")).collect();
        format!(
            "image {wanted:?} not found in MAAS boot resources; closest: {}",
            closest.join(", ")
        )
    };
    r.not_deployed(mm_api::MACHINE_DEPLOY_FAILED, "ImageNotFound", message);
    Err(Error::Retry(format!(
        "{}: image {wanted:?} not in MAAS",
        r.key()
    )))
}
