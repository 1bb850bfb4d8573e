//! The machine side of the API server DNS record (control-plane machines
//! only). The MaasCluster reconciler owns the record's contents; a machine
//! only reads it to report `DNSAttached`, and on deletion waits until the
//! cluster has taken its address out.
//!
//! The record is looked at only when the answer can change: a running
//! machine not yet attached, a stopped machine still attached, or a
//! deleting machine; and then as the MaasCluster reconciler last read or
//! wrote it, if that was recent (`MaasView::recent_dns_resources`): it
//! changes the record and wakes these machines right after.

use super::{MachineReconciling, DNS_PENDING_REQUEUE};
use crate::api::conditions;
use crate::api::maas_cluster as mc_api;
use crate::api::maas_machine as mm_api;
use crate::api::{Desired, MaasCluster};
use crate::controllers::Error;
use crate::runtime::Action;

/// Updates `dnsAttached` and the `DNSAttached` condition; returns a requeue
/// while an attach or detach is pending.
pub(super) fn check_attachment(
    r: &mut MachineReconciling,
    maas_cluster: Option<&MaasCluster>,
    ips: &[String],
    running: bool,
) -> Result<Option<Action>, Error> {
    if maas_cluster.is_some_and(|c| c.spec.control_plane_vip.is_some()) {
        // VIP mode: kube-vip holds the endpoint; no record to join or leave.
        r.status.dns_attached = false;
        r.set(
            Desired::true_(mm_api::DNS_ATTACHED, mc_api::CONTROL_PLANE_VIP)
                .with_message("the cluster's endpoint is its control-plane VIP (no DNS record)"),
        );
        return Ok(None);
    }
    // A Machine being deleted has left the record before its drain.
    let deleting = r.object.metadata.is_being_deleted() || r.facts.leaving;
    let Some(fqdn) = maas_cluster.and_then(|c| c.dns_name()).map(str::to_string) else {
        if !deleting {
            r.set_false(
                mm_api::DNS_ATTACHED,
                mm_api::DNS_ATTACH_PENDING,
                "waiting for the cluster's DNS name",
            );
        }
        return Ok(None);
    };
    let attached_now = conditions::is_true(&r.status.conditions, mm_api::DNS_ATTACHED);
    let needs_read = deleting || (running && !attached_now) || (!running && r.status.dns_attached);
    if !needs_read {
        if !running && !deleting {
            r.set_false(
                mm_api::DNS_ATTACHED,
                mm_api::DNS_ATTACH_PENDING,
                "machine is not running",
            );
        }
        return Ok(None);
    }
    let records = match r.maas()?.recent_dns_resources(&fqdn) {
        Ok(records) => records,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let registered = records
        .iter()
        .flat_map(|rec| rec.ip_addresses.iter())
        .any(|ip| ips.contains(ip));
    r.status.dns_attached = registered;
    match (running && !deleting, registered) {
        (true, true) => {
            r.set_true(mm_api::DNS_ATTACHED, mm_api::DNS_ATTACHED);
            Ok(None)
        }
        (true, false) => {
            r.set_false(
                mm_api::DNS_ATTACHED,
                mm_api::DNS_ATTACH_PENDING,
                format!("waiting to join {fqdn} (added once its API server answers)"),
            );
            Ok(Some(Action::RequeueAfter(DNS_PENDING_REQUEUE)))
        }
        (false, true) => {
            r.set_false(
                mm_api::DNS_ATTACHED,
                mm_api::DNS_DETACH_PENDING,
                format!("waiting to leave {fqdn}"),
            );
            Ok(Some(Action::RequeueAfter(DNS_PENDING_REQUEUE)))
        }
        (false, false) => {
            let why = if deleting {
                "machine is being deleted"
            } else {
                "machine is not running"
            };
            r.set_false(mm_api::DNS_ATTACHED, mm_api::DNS_ATTACH_PENDING, why);
            Ok(None)
        }
    }
}
