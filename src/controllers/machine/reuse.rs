//! Node reuse (`spec.nodeReuse`, Metal3's `nodeReuse`): a machine of a
//! MachineDeployment or control plane is released without disk erase and
//! taken again by the next Machine of the same MachineDeployment or
//! control plane, so its data disks survive a rolling upgrade or a scale
//! down and up.
//!
//! ```text
//! delete: record {systemID: owner} in MaasCluster status.reusableMachines
//!   ─► release, erase=false, comment ending in the mark
//! allocate: each record of our owner in our failure domain's zone ─► MAAS:
//!   Ready, no owner, and the newest user request in its event log is
//!   that release with our mark
//!   ─► allocate system_id=<it> (+ the usual constraints and our identity)
//!   ─► status.reusedMachine; the record goes (taken, or no longer valid)
//! ```
//!
//! The record lives in the MaasCluster's status, which tenants cannot
//! write, and names the MachineDeployment or control plane (from Cluster
//! API's labels) that may take it again: a MaasMachine can only ever
//! reuse a machine of its own cluster and role. MAAS must confirm it: a
//! free machine whose last user request is our release. Anyone who took
//! it in between (and released it again) leaves a newer request, so a
//! machine with someone else's data is never taken as ours. The
//! allocation carries our identity as any other does: a crash after it is
//! found again by `agent_name`, and the record then says it was a reuse.

use serde_json::json;

use super::MachineReconciling;
use crate::api::capi::{self, Machine};
use crate::api::{MaasCluster, MaasMachine};
use crate::controllers::ports::Kind;
use crate::controllers::Error;
use crate::maas::{self, AllocateRequest, MachineStatus};

const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
const CONTROL_PLANE_NAME_LABEL: &str = "cluster.x-k8s.io/control-plane-name";

/// Who may take the machine again: `MachineDeployment/<name>` or
/// `ControlPlane/<name>`, from the labels Cluster API puts on the Machine
/// (or, once it is gone, on the MaasMachine). None: reuse does not apply.
pub(super) fn owner(mm: &MaasMachine, machine: Option<&Machine>) -> Option<String> {
    if !mm.spec.options().node_reuse {
        return None;
    }
    let labels = [
        machine.map(|m| &m.metadata.labels),
        Some(&mm.metadata.labels),
    ];
    labels.into_iter().flatten().find_map(|labels| {
        let named = |key, role| {
            labels
                .get(key)
                .filter(|v| !v.is_empty())
                .map(|v| format!("{role}/{v}"))
        };
        named(DEPLOYMENT_NAME_LABEL, "MachineDeployment")
            .or_else(|| named(CONTROL_PLANE_NAME_LABEL, "ControlPlane"))
    })
}

/// The end of the release comment that makes a machine reusable by
/// `owner` of this cluster, as MAAS logs it with the release request.
pub(super) fn mark(cluster: &MaasCluster, owner: &str) -> String {
    let meta = &cluster.metadata;
    format!(
        "node reuse by {owner} of {}/{}",
        meta.namespace,
        cluster_name(cluster)
    )
}

fn cluster_name(cluster: &MaasCluster) -> &str {
    cluster
        .metadata
        .labels
        .get(capi::CLUSTER_NAME_LABEL)
        .unwrap_or(&cluster.metadata.name)
}

/// Before a reusable release: records the machine on the MaasCluster (one
/// key of a map, so concurrent records do not overwrite each other).
/// Recorded first: a crash before the release leaves a record MAAS does
/// not confirm (the machine is not free), never a released machine
/// nobody knows about.
pub(super) fn record(
    r: &MachineReconciling,
    cluster: &MaasCluster,
    system_id: &str,
    owner: &str,
) -> Result<(), Error> {
    if recorded_for(cluster, system_id, owner) {
        return Ok(());
    }
    patch(r, cluster, system_id, json!(owner))
}

fn recorded_for(cluster: &MaasCluster, system_id: &str, owner: &str) -> bool {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.reusable_machines.get(system_id))
        .is_some_and(|o| o == owner)
}

/// Removes the record of a machine that was taken or can no longer be.
fn forget(r: &MachineReconciling, cluster: &MaasCluster, system_id: &str) -> Result<(), Error> {
    patch(r, cluster, system_id, serde_json::Value::Null)
}

fn patch(
    r: &MachineReconciling,
    cluster: &MaasCluster,
    system_id: &str,
    entry: serde_json::Value,
) -> Result<(), Error> {
    let meta = &cluster.metadata;
    r.ctx.kube.patch_status(
        Kind::MaasCluster,
        &meta.namespace,
        &meta.name,
        &json!({"status": {"reusableMachines": {system_id: entry}}}),
    )?;
    Ok(())
}

/// What the reuse path found.
pub(super) enum Reuse {
    Took(Box<maas::Machine>),
    /// A machine for us is still being deleted or released (its power-off
    /// not confirmed yet): worth waiting for rather than taking another.
    Releasing(String),
    Nothing,
}

/// Tries the machines released for `owner`, by system ID, with the
/// allocation `request` narrowed to each; the first MAAS gives is ours.
pub(super) fn allocate(
    r: &mut MachineReconciling,
    cluster: &MaasCluster,
    owner: &str,
    request: &AllocateRequest,
) -> Result<Reuse, Error> {
    let candidates: Vec<String> = cluster
        .status
        .iter()
        .flat_map(|s| &s.reusable_machines)
        .filter(|(_, o)| *o == owner)
        .map(|(id, _)| id.clone())
        .collect();
    let mark = mark(cluster, owner);
    let mut releasing = None;
    for system_id in candidates {
        match check(r, &system_id, &mark, request.zone.as_deref())? {
            Check::Reusable => {}
            Check::Releasing => {
                releasing.get_or_insert(system_id);
                continue;
            }
            // Kept for a sibling placed in its zone.
            Check::OtherZone => continue,
            Check::Gone => {
                log::info!(
                    "{}: MAAS machine {system_id} is no longer reusable (taken or changed since its release)",
                    r.key()
                );
                forget(r, cluster, &system_id)?;
                continue;
            }
        }
        let attempt = AllocateRequest {
            system_id: Some(system_id.clone()),
            ..request.clone()
        };
        match r.maas()?.allocate(&attempt) {
            Ok(host) => {
                r.normal_event("MachineReused",
                    &format!(
                        "Allocated MAAS machine {system_id} again (spec.nodeReuse, released by {owner} without erase)"
                    ),
                );
                return Ok(Reuse::Took(Box::new(host)));
            }
            // Taken meanwhile, or it no longer matches the spec.
            Err(e) if e.is_conflict() || e.is_bad_request() => {
                log::info!(
                    "{}: not reusing MAAS machine {system_id}: {}",
                    r.key(),
                    e.message()
                );
                forget(r, cluster, &system_id)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(system_id) = releasing.or_else(|| leaving_sibling(r, owner)) {
        return Ok(Reuse::Releasing(system_id));
    }
    Ok(Reuse::Nothing)
}

/// How long a new machine waits for a machine of its owner that is still
/// being deleted (drained, released) before it allocates another: a
/// drain blocked by a PodDisruptionBudget that waits for this very
/// machine must not block it for ever.
const LEAVING_PATIENCE_SECS: u64 = 300;

/// A Machine of the same owner is being deleted (a rollout or scale-in
/// has just begun) with node reuse: its machine is about to come free for
/// us, so wait for it rather than take another. Cluster API creates the
/// replacement as soon as it starts deleting, before the release.
fn leaving_sibling(r: &MachineReconciling, owner: &str) -> Option<String> {
    if r.condition_age(crate::api::maas_machine::MACHINE_DEPLOYED) > LEAVING_PATIENCE_SECS {
        return None;
    }
    let meta = &r.object.metadata;
    let cluster = meta.labels.get(capi::CLUSTER_NAME_LABEL)?;
    r.ctx
        .kube
        .maas_machines_of_cluster(&meta.namespace, cluster)
        .into_iter()
        .filter(|mm| mm.metadata.is_being_deleted() && mm.metadata.name != meta.name)
        .filter(|mm| self::owner(mm, None).as_deref() == Some(owner))
        .find_map(|mm| mm.system_id().map(str::to_string))
}

enum Check {
    Reusable,
    Releasing,
    /// In another zone than this Machine's failure domain: MAAS would
    /// refuse it, yet it is no less reusable by a sibling placed there (a
    /// control plane spreads its machines over the zones).
    OtherZone,
    Gone,
}

/// Reusable: MAAS shows the machine free, and the newest user request in
/// its log is the release that carried `mark`. Releasing: that release is
/// still under way.
fn check(
    r: &MachineReconciling,
    system_id: &str,
    mark: &str,
    zone: Option<&str>,
) -> Result<Check, Error> {
    let host = match r.maas()?.machine(system_id) {
        Ok(host) => host,
        Err(e) if e.is_not_found() || e.is_forbidden() => return Ok(Check::Gone),
        Err(e) => return Err(e.into()),
    };
    if zone.is_some_and(|zone| zone != host.zone) {
        return Ok(Check::OtherZone);
    }
    let expected = match host.status {
        MachineStatus::Ready if host.owner.is_none() => Check::Reusable,
        MachineStatus::Releasing => Check::Releasing,
        _ => return Ok(Check::Gone),
    };
    let events = r.maas()?.client().events(&maas::EventQuery {
        system_ids: vec![system_id.to_string()],
        level: Some(maas::EventLevel::Debug),
        limit: Some(50),
        after: None,
    })?;
    let newest_request = events.iter().find(|e| e.kind.starts_with("User "));
    let ours = newest_request
        .is_some_and(|e| e.kind == "User releasing node" && e.description.ends_with(mark));
    Ok(if ours { expected } else { Check::Gone })
}

/// After the allocation is recorded: a machine the MaasCluster lists as
/// reusable by our owner was reused (also when a crash lost the allocate
/// answer and the machine was found again by our identity); say so in
/// the status and drop the record.
pub(super) fn settle(
    r: &mut MachineReconciling,
    cluster: Option<&MaasCluster>,
    owner: Option<&str>,
    system_id: &str,
) -> Result<(), Error> {
    let (Some(cluster), Some(owner)) = (cluster, owner) else {
        return Ok(());
    };
    if !recorded_for(cluster, system_id, owner) {
        return Ok(());
    }
    // Stored before the record goes, so a crash in between loses neither.
    if r.status.reused_machine.as_deref() != Some(system_id) {
        let reused = Some(system_id.to_string());
        r.patch_status_now(&json!({"status": {"reusedMachine": system_id}}), |s| {
            s.reused_machine.clone_from(&reused)
        })?;
    }
    forget(r, cluster, system_id)
}
