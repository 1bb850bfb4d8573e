//! Deleting a MaasMachine: a control-plane machine first leaves the API DNS
//! record, then every MAAS machine carrying our identity is released, then
//! the finalizer goes. A machine MAAS no longer knows (404) does not block
//! deletion.

use super::{dns, MachineReconciling, Owners};
use crate::api::maas_machine as mm_api;
use crate::api::{conditions, Desired};
use crate::controllers::ports::EventType;
use crate::controllers::Error;
use crate::maas::{MachineStatus, ReleaseRequest};
use crate::runtime::Action;

pub(super) fn delete(r: &mut MachineReconciling, owners: &Owners) -> Result<Action, Error> {
    if !r.has_finalizer() {
        r.summarize = false;
        return Ok(Action::Done);
    }

    // A cluster that is being deleted removes the whole record once its
    // machines are gone; waiting for it to detach us first would deadlock
    // (it waits for us, we wait for it).
    let record_stays = owners
        .maas_cluster
        .as_ref()
        .is_some_and(|c| !c.metadata.is_being_deleted());
    if r.facts.is_control_plane && record_stays {
        let ips = external_ips(r);
        if let Some(next) = dns::check_attachment(r, owners.maas_cluster.as_deref(), &ips, false)? {
            return Ok(next);
        }
    }

    for system_id in &machines_to_release(r)? {
        release(r, system_id)?;
    }

    r.set(Desired::false_(
        mm_api::MACHINE_DEPLOYED,
        mm_api::DELETED,
        "",
    ));
    r.status.ready = false;
    r.set(Desired::false_(
        conditions::READY,
        mm_api::DELETED,
        "MAAS machine released",
    ));
    r.finish_deletion()
}

/// Every MAAS machine carrying our identity, including an allocation whose
/// answer we never saw. The recorded machine counts on its own only for
/// objects allocated by the Go provider, which marked nothing: for ours, a
/// recorded machine MAAS no longer lists under our identity was released
/// already (the answer lost in a crash) and may now be someone else's.
fn machines_to_release(r: &MachineReconciling) -> Result<Vec<String>, Error> {
    let mut system_ids: Vec<String> = r
        .ctx
        .maas
        .machines_by_agent_name(&r.agent_name())?
        .into_iter()
        .map(|host| host.system_id)
        .collect();
    let allocated_by_us = r
        .object
        .metadata
        .annotations
        .contains_key(mm_api::AGENT_NAME_ANNOTATION);
    if let Some(recorded) = r.object.system_id() {
        if system_ids.iter().any(|id| id == recorded) {
            // Listed under our identity: released above.
        } else if allocated_by_us {
            match r.ctx.maas.machine(recorded) {
                Err(e) if e.is_not_found() => r.event(
                    EventType::Warning,
                    "NoMachineFound",
                    &format!("MAAS machine {recorded:?} no longer exists"),
                ),
                Err(e) => return Err(e.into()),
                // Released already (the answer lost in a crash): nothing to do.
                Ok(host) if host.owner.is_none() => {}
                Ok(host) => r.event(
                    EventType::Normal,
                    "MachineNoLongerOurs",
                    &format!(
                        "MAAS machine {recorded:?} was released already and is now {:?}'s; left alone",
                        host.owner.as_deref().unwrap_or_default()
                    ),
                ),
            }
        } else {
            system_ids.push(recorded.to_string());
        }
    }
    Ok(system_ids)
}

fn release(r: &mut MachineReconciling, system_id: &str) -> Result<(), Error> {
    let request = ReleaseRequest {
        erase: r.ctx.options.release_erase,
        comment: Some(format!("capmaas: {} deleted", r.key())),
        ..ReleaseRequest::default()
    };
    match r.ctx.maas.release(system_id, &request) {
        Ok(()) => {
            r.event(
                EventType::Normal,
                "SuccessfulRelease",
                &format!("Released instance {system_id:?}"),
            );
            Ok(())
        }
        Err(e) if e.is_not_found() => {
            r.event(
                EventType::Warning,
                "NoMachineFound",
                &format!("MAAS machine {system_id:?} no longer exists"),
            );
            Ok(())
        }
        // 409: MAAS cannot release it in its current state. Fine if it is
        // no longer ours anyway (already released, never commissioned).
        Err(e) if e.is_conflict() => match r.ctx.maas.machine(system_id) {
            Ok(host) if matches!(host.status, MachineStatus::Ready | MachineStatus::New) => Ok(()),
            Err(get) if get.is_not_found() => Ok(()),
            _ => {
                r.event(EventType::Warning, "MachineReleaseFailed", &e.message());
                Err(e.into())
            }
        },
        Err(e) => Err(e.into()),
    }
}

fn external_ips(r: &MachineReconciling) -> Vec<String> {
    r.status
        .addresses
        .iter()
        .filter(|a| a.type_ == "ExternalIP")
        .map(|a| a.address.clone())
        .collect()
}
