//! A control-plane machine leaves the API server's DNS record before
//! Cluster API drains it (and, after the drain, KCP removes its etcd member
//! and the machine is released): clients resolving the name stop getting
//! its address while it still serves, and their caches have expired by the
//! time it stops.
//!
//! ```text
//! Machine not deleting, control plane ─► our pre-drain hook on the Machine
//! Machine deleting, hook on it:
//!   address still in the record ─► wait (the MaasCluster takes it out once
//!                                  another control plane serves)
//!   out ─► record the time (status.leftDNSAt, written once) ─► wait
//!          the record's TTL from it ─► remove the hook: Cluster API drains
//! ```
//!
//! The hook is the Cluster API machine deletion-phase hook contract
//! (`pre-drain.delete.hook.machine.cluster.x-k8s.io/<name>`): Cluster API
//! does not drain a Machine while one is on it. It never holds a deletion
//! that has nothing to wait for: the last control plane of a cluster (or
//! a cluster being deleted) keeps its address and lets go at once; a Machine
//! that is no longer a control plane of a cluster we manage, whose
//! MaasMachine is being deleted or is gone ([`release_orphaned_hooks`])
//! loses the hook too. The wait survives a restart: it is computed from the
//! recorded time, not from memory. That time is in the status, which the
//! tenant cannot write (versions before issue 19 kept it in an annotation,
//! which the tenant could set to a time that overflowed the requeue; such
//! an annotation is removed and the wait starts again, at most one TTL
//! more); and the wait is never longer than the TTL, itself bounded by
//! [`MAX_TTL_WAIT`], whatever the recorded time or MAAS says.

use std::time::Duration;

use serde_json::{json, Value};

use super::{MachineReconciling, Owners, DNS_PENDING_REQUEUE};
use crate::api::capi::{Cluster, Machine};
use crate::api::maas_machine as mm_api;
use crate::api::MaasCluster;
use crate::controllers::cluster::{is_running, role, Role};
use crate::controllers::ports::Kind;
use crate::controllers::{Context, Error};
use crate::kube::time;
use crate::runtime::Action;

/// Our pre-drain hook on a control-plane Machine.
pub const PRE_DRAIN_HOOK: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io/capmaas-dns";
/// The hook's value: who owns it (the contract asks for the owner's name).
const HOOK_OWNER: &str = "capmaas";
/// Where versions before issue 19 recorded the time (an annotation the
/// tenant can write): removed when seen, never read.
pub const LEFT_DNS_AT: &str = "capmaas.infrastructure.cluster.x-k8s.io/left-dns-at";
/// `DNSAttached` reasons while the drain waits.
pub const LEAVING_DNS: &str = "LeavingDNSBeforeDrain";
pub const LEFT_DNS: &str = "LeftDNSBeforeDrain";
/// The TTL waited for when MAAS does not say (capmaas creates the record
/// with 10 s; MAAS's default for a record without one is 30 s).
const DEFAULT_TTL_SECONDS: u64 = 30;
/// The longest TTL waited for: the record's TTL is MAAS's number (a
/// tenant's MAAS may say 136 years); an hour is far above any TTL an API
/// server's record should have.
pub const MAX_TTL_WAIT: u64 = 3600;

fn has_hook(machine: &Machine) -> bool {
    machine.metadata.has_annotation(PRE_DRAIN_HOOK)
}

fn hook_patch(value: Value) -> Value {
    json!({"metadata": {"annotations": {PRE_DRAIN_HOOK: value}}})
}

/// Puts our hook on a control-plane Machine that is not being deleted, and
/// takes it off one that is no longer a control plane of a cluster whose
/// DNS record capmaas keeps (externally managed, label removed). A cluster
/// whose endpoint is a VIP has no record to leave: no hook.
pub(super) fn ensure_hook(
    r: &mut MachineReconciling,
    machine: &Machine,
    maas_cluster: Option<&MaasCluster>,
) -> Result<(), Error> {
    if machine.metadata.is_being_deleted() {
        return Ok(());
    }
    let keeps_dns = maas_cluster.is_none_or(|c| c.spec.control_plane_vip.is_none());
    match (r.facts.is_control_plane && keeps_dns, has_hook(machine)) {
        (true, false) => {
            let meta = &machine.metadata;
            r.ctx.kube.patch(
                Kind::Machine,
                &meta.namespace,
                &meta.name,
                &hook_patch(json!(HOOK_OWNER)),
            )?;
            log::info!(
                "{}: pre-drain hook {PRE_DRAIN_HOOK} set on Machine {}",
                r.key(),
                meta.name
            );
            Ok(())
        }
        (false, true) => release_hook(r.ctx, machine),
        _ => Ok(()),
    }
}

/// The Machine is being deleted and our hook holds its drain: returns the
/// requeue while it must keep holding, None once the hook is gone (or was
/// never there).
pub(super) fn hold_drain(
    r: &mut MachineReconciling,
    machine: &Machine,
    cluster: &Cluster,
    owners: &Owners,
) -> Result<Option<Action>, Error> {
    if !machine.metadata.is_being_deleted() || !has_hook(machine) {
        return Ok(None);
    }
    let vip = owners
        .maas_cluster
        .as_deref()
        .is_some_and(|c| c.spec.control_plane_vip.is_some());
    let fqdn = owners
        .maas_cluster
        .as_deref()
        .and_then(|c| c.dns_name())
        .map(str::to_string);
    let ips: Vec<String> = r
        .object
        .status
        .as_ref()
        .map(|s| s.addresses.iter().map(|a| a.address.clone()).collect())
        .unwrap_or_default();
    let nothing_to_wait_for = if !r.facts.is_control_plane {
        Some("not a control plane of a cluster whose DNS record capmaas keeps")
    } else if cluster.metadata.is_being_deleted() {
        Some("the cluster is being deleted")
    } else if vip {
        Some("the cluster's endpoint is its control-plane VIP (no DNS record)")
    } else if fqdn.is_none() {
        Some("the cluster has no DNS name yet")
    } else if ips.is_empty() {
        Some("the machine never had an address")
    } else {
        None
    };
    let Some(fqdn) = fqdn.filter(|_| nothing_to_wait_for.is_none()) else {
        let why = nothing_to_wait_for.unwrap_or_default();
        r.normal_event(
            "DrainAllowed",
            &format!("pre-drain hook removed at once: {why}"),
        );
        release_hook(r.ctx, machine)?;
        return Ok(None);
    };
    let records = match r.maas()?.recent_dns_resources(&fqdn) {
        Ok(records) => records,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let in_record = records
        .iter()
        .flat_map(|rec| rec.ip_addresses.iter())
        .any(|ip| ips.contains(ip));
    if r.object.metadata.has_annotation(LEFT_DNS_AT) {
        r.patch(&json!({"metadata": {"annotations": {LEFT_DNS_AT: null}}}))?;
    }
    let now = r.ctx.clock.now();
    // Recorded by us; a time still to come is not one we wrote.
    let recorded = r
        .status
        .left_dns_at
        .as_deref()
        .and_then(time::unix_seconds)
        .filter(|at| *at <= now);
    if in_record {
        if !others_serving(r, owners) {
            r.normal_event(
                "DrainAllowed",
                &format!(
                    "the last control plane keeps its address in {fqdn}; \
                     pre-drain hook removed"
                ),
            );
            release_hook(r.ctx, machine)?;
            return Ok(None);
        }
        // Back in the record (a hand edit): its TTL wait starts again.
        r.status.left_dns_at = None;
        r.set_false(
            mm_api::DNS_ATTACHED,
            LEAVING_DNS,
            format!(
                "Machine is being deleted: leaving {fqdn} once another control plane's \
                 API server answers; the drain waits"
            ),
        );
        return Ok(Some(Action::RequeueAfter(DNS_PENDING_REQUEUE)));
    }

    let ttl = records
        .iter()
        .find_map(|rec| rec.address_ttl)
        .map_or(DEFAULT_TTL_SECONDS, u64::from)
        .min(MAX_TTL_WAIT);
    let left_at = match recorded {
        Some(at) => at,
        None => {
            r.status.left_dns_at = Some(time::time_of_unix_seconds(now));
            r.normal_event(
                LEFT_DNS,
                &format!(
                    "left {fqdn}; waiting {ttl} s (the record's TTL) for resolvers' caches \
                     before Cluster API drains the node"
                ),
            );
            now
        }
    };
    let drain_at = left_at.saturating_add(ttl);
    if now < drain_at {
        r.set_false(
            mm_api::DNS_ATTACHED,
            LEFT_DNS,
            format!(
                "left {fqdn}; waiting {} s more (the record's TTL, {ttl} s) before the drain",
                drain_at - now
            ),
        );
        return Ok(Some(Action::RequeueAfter(Duration::from_secs(
            drain_at - now,
        ))));
    }
    r.normal_event(
        "DrainAllowed",
        &format!(
            "left {fqdn} {} s ago (TTL {ttl} s); pre-drain hook removed",
            now - left_at
        ),
    );
    release_hook(r.ctx, machine)?;
    Ok(None)
}

/// Another control plane of the cluster that stays and runs: the record
/// can hand over to it (the MaasCluster adds it once its API answers).
fn others_serving(r: &MachineReconciling, owners: &Owners) -> bool {
    let Some(cluster) = owners.cluster.as_deref() else {
        return false;
    };
    let me = &r.object.metadata.name;
    let ns = &r.object.metadata.namespace;
    r.ctx
        .kube
        .maas_machines_of_cluster(ns, &cluster.metadata.name)
        .iter()
        .filter(|m| m.metadata.name != *me && !m.metadata.is_being_deleted())
        .any(|m| role(r.ctx.kube.as_ref(), m) == Role::ControlPlane && is_running(m))
}

/// Takes our hook off the Machine (already gone: fine).
pub(super) fn release_hook(ctx: &Context, machine: &Machine) -> Result<(), Error> {
    if !has_hook(machine) {
        return Ok(());
    }
    let meta = &machine.metadata;
    match ctx.kube.patch(
        Kind::Machine,
        &meta.namespace,
        &meta.name,
        &hook_patch(Value::Null),
    ) {
        Ok(_) => {
            log::info!(
                "Machine {}/{}: pre-drain hook {PRE_DRAIN_HOOK} removed",
                meta.namespace,
                meta.name
            );
            Ok(())
        }
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The MaasMachine `namespace/name` is gone: no reconcile of it will take
/// our hook off the Machines that name it, so this does.
pub(crate) fn release_orphaned_hooks(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<(), Error> {
    for machine in ctx.kube.machines_of_maas_machine(namespace, name) {
        release_hook(ctx, &machine)?;
    }
    Ok(())
}
