//! Deleting a MaasMachine: a control-plane machine first leaves the API DNS
//! record, then every MAAS machine MAAS shows under the object's identity
//! is released, then the finalizer goes. A machine MAAS no longer knows
//! (404) does not block deletion; a recorded machine that is not ours is
//! left alone (and said so). One exception keeps the finalizer: a recorded
//! machine that is allocated but carries no capmaas identity, which is what
//! a Go-provider machine looks like before an administrator adopts it;
//! deleting the object then would leak the machine.

use std::time::Duration;

use super::{dns, drain, reuse, MachineReconciling, Owners};
use crate::api::conditions;
use crate::api::maas_machine::{self as mm_api, DiskErase};
use crate::controllers::identity::{self, Identity, Ownership, Recorded};
use crate::controllers::Error;
use crate::maas::{self, MachineStatus, ReleaseRequest};
use crate::runtime::Action;

/// How long a deletion waits before looking again at a recorded machine
/// that awaits adoption.
const ADOPTION_WAIT: Duration = Duration::from_secs(60);

pub(super) fn delete(r: &mut MachineReconciling, owners: &Owners) -> Result<Action, Error> {
    // Cluster API deletes the MaasMachine after the drain; deleted any
    // other way, it must not leave the Machine's drain held by our hook.
    if let Some(machine) = &owners.machine {
        drain::release_hook(r.ctx, machine)?;
    }
    if !r.has_finalizer() {
        r.summarize = false;
        return Ok(Action::Done);
    }
    // The MAAS of the cluster; without the MaasCluster (deleted first, by
    // hand) the controller-wide one is the best guess.
    let identity_ref = owners
        .maas_cluster
        .as_ref()
        .and_then(|c| c.spec.identity_ref.clone());
    if let Err(e) = r.connect_maas(identity_ref.as_ref()) {
        r.set_false(
            mm_api::MACHINE_DEPLOYED,
            mm_api::CREDENTIALS_UNAVAILABLE,
            format!("cannot release the MAAS machine: {e}"),
        );
        return Err(e.into());
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

    let identity = match Identity::recorded(&r.object.metadata) {
        Recorded::Valid(identity) => Some(identity),
        Recorded::Missing | Recorded::Foreign(_) => None,
    };
    let to_release = match machines_to_release(r, identity.as_ref())? {
        ToRelease::Machines(ids) => ids,
        ToRelease::AwaitingAdoption(message) => {
            r.summarize = false;
            r.set_false(conditions::READY, mm_api::MACHINE_NOT_OWNED, message);
            return Ok(Action::RequeueAfter(ADOPTION_WAIT));
        }
    };
    // A VM this object composed is decomposed (deleted), not released;
    // so is one composed but never allocated.
    let mut to_release = to_release;
    let composed = r.object.vm_kind().is_some() || r.object.spec.options().parent.is_some();
    if composed {
        if let Some(id) = &identity {
            super::vm::decompose_ours(r, id, &mut to_release)?;
        }
    }
    // Node reuse: the recorded machine goes back to MAAS for the next
    // Machine of its MachineDeployment or control plane, unless the
    // cluster itself is going (or it was a VM, decomposed above).
    let reuse = match (&owners.maas_cluster, &owners.cluster) {
        (Some(maas_cluster), Some(cluster))
            if record_stays && !composed && !cluster.metadata.is_being_deleted() =>
        {
            reuse::owner(&r.object, owners.machine.as_deref()).map(|o| (maas_cluster.clone(), o))
        }
        _ => None,
    };
    let recorded = r.object.system_id().map(str::to_string);
    for system_id in &to_release {
        let mark = match &reuse {
            Some((cluster, owner)) if recorded.as_ref() == Some(system_id) => {
                reuse::record(r, cluster, system_id, owner)?;
                Some(reuse::mark(cluster, owner))
            }
            _ => None,
        };
        release(r, system_id, mark.as_deref())?;
    }
    if let Some(wait) =
        super::ipam::release_static_addresses(r, identity.as_ref(), reuse.is_some())?
    {
        return Ok(wait);
    }

    r.set_false(mm_api::MACHINE_DEPLOYED, mm_api::DELETED, "");
    r.status.ready = false;
    r.set_false(conditions::READY, mm_api::DELETED, "MAAS machine released");
    r.finish_deletion()
}

enum ToRelease {
    Machines(Vec<String>),
    /// The recorded machine may be a Go-provider machine no administrator
    /// adopted yet: wait (the message says what to do).
    AwaitingAdoption(String),
}

/// Every MAAS machine MAAS shows under our identity: listed by
/// `agent_name` (which also finds an allocation whose answer a crash
/// lost), or the recorded machine if its owner data names us (adopted
/// machines have no `agent_name`). A recorded machine under no identity of
/// ours is released already (the answer lost in a crash) or someone else's.
/// A Broken machine is never released: MAAS would make it Ready, and the
/// next allocation would take what a remediation or an administrator
/// marked Broken so that nobody does.
fn machines_to_release(
    r: &MachineReconciling,
    identity: Option<&Identity>,
) -> Result<ToRelease, Error> {
    let mut system_ids: Vec<String> = match identity {
        Some(identity) => r
            .maas()?
            .machines_by_agent_name(identity.as_str())?
            .into_iter()
            .filter(|host| !being_released(host) && host.status != MachineStatus::Broken)
            .map(|host| host.system_id)
            .collect(),
        None => Vec::new(),
    };
    let Some(recorded) = r.object.system_id().map(str::to_string) else {
        return Ok(ToRelease::Machines(system_ids));
    };
    if system_ids.contains(&recorded) {
        return Ok(ToRelease::Machines(system_ids));
    }
    let host = match r.maas()?.machine(&recorded) {
        Ok(host) => host,
        Err(e) if e.is_not_found() => {
            r.warning_event(
                "NoMachineFound",
                &format!("MAAS machine {recorded:?} no longer exists"),
            );
            return Ok(ToRelease::Machines(system_ids));
        }
        // Another MAAS user's machine: not ours to release.
        Err(e) if e.is_forbidden() => {
            r.warning_event(
                mm_api::MACHINE_NOT_OWNED,
                &identity::not_ours_message(&recorded, None),
            );
            return Ok(ToRelease::Machines(system_ids));
        }
        Err(e) => return Err(e.into()),
    };
    let ownership = identity.map(|id| identity::ownership(&host, id));
    match ownership {
        // Released already by an earlier reconcile (that waits for MAAS to
        // finish, e.g. to unlink static addresses): not again.
        Some(Ownership::Ours) if being_released(&host) => {}
        Some(Ownership::Ours) if host.status == MachineStatus::Broken => r.normal_event("MachineLeftBroken",
            &format!(
                "MAAS machine {recorded} is Broken: not released, so that nobody allocates it before an administrator marks it fixed"
            ),
        ),
        Some(Ownership::Ours) => system_ids.push(recorded),
        // Released already (its answer lost in a crash), or never ours: no
        // owner means nothing to release and nobody to warn about.
        _ if host.owner.is_none() => {}
        Some(Ownership::Unmarked) | None
            if host.status.is_allocated()
                && identity::may_be_adopted(&r.object.metadata)
                && !identity::marked(&host) =>
        {
            return Ok(ToRelease::AwaitingAdoption(identity::not_ours_message(
                &recorded,
                Some(&host),
            )));
        }
        _ => r.warning_event(mm_api::MACHINE_NOT_OWNED,
            &identity::not_ours_message(&recorded, Some(&host)),
        ),
    }
    Ok(ToRelease::Machines(system_ids))
}

/// MAAS is releasing the machine already (Releasing, Disk erasing).
fn being_released(host: &maas::Machine) -> bool {
    matches!(
        host.status,
        MachineStatus::Releasing | MachineStatus::DiskErasing
    )
}

/// Releases a machine; with a node reuse `mark` without erasing its disks,
/// and the mark at the end of the comment MAAS logs with the request.
fn release(r: &mut MachineReconciling, system_id: &str, mark: Option<&str>) -> Result<(), Error> {
    let erase = match r
        .object
        .spec
        .options()
        .disk_erase
        .as_deref()
        .map(DiskErase::parse)
    {
        _ if mark.is_some() => DiskErase::None,
        Some(Some(erase)) => erase,
        Some(None) | None if r.ctx.options.release_erase => DiskErase::Full,
        _ => DiskErase::None,
    };
    let comment = match mark {
        Some(mark) => format!("capmaas: {} deleted; {mark}", r.key()),
        None => format!("capmaas: {} deleted", r.key()),
    };
    let request = ReleaseRequest {
        erase: erase != DiskErase::None,
        quick_erase: erase == DiskErase::Quick,
        secure_erase: erase == DiskErase::Secure,
        comment: Some(comment),
        ..ReleaseRequest::default()
    };
    match r.maas()?.write(system_id, |client| {
        client.release(system_id, &request).map(drop)
    }) {
        Ok(()) => {
            let how = if mark.is_some() {
                " without disk erase, for node reuse"
            } else {
                ""
            };
            r.normal_event(
                "SuccessfulRelease",
                &format!("Released instance {system_id:?}{how}"),
            );
            Ok(())
        }
        Err(e) if e.is_not_found() => {
            r.warning_event(
                "NoMachineFound",
                &format!("MAAS machine {system_id:?} no longer exists"),
            );
            Ok(())
        }
        // 409: MAAS cannot release it in its current state. Fine if it is
        // no longer ours anyway (already released, never commissioned).
        Err(e) if e.is_conflict() => match r.maas()?.machine(system_id) {
            Ok(host)
                if being_released(&host)
                    || matches!(host.status, MachineStatus::Ready | MachineStatus::New) =>
            {
                Ok(())
            }
            Err(get) if get.is_not_found() => Ok(()),
            _ => {
                r.warning_event("MachineReleaseFailed", &e.message());
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
