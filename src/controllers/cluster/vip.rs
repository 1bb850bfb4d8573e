//! VIP mode (`spec.controlPlaneVIP`): the API endpoint is an address that
//! MAAS keeps for this cluster (`POST ipaddresses/?op=reserve`, a
//! USER_RESERVED address MAAS never hands to a machine) and kube-vip on the
//! control-plane machines holds. No DNS record, so it works for MAAS users
//! without DNS rights (MAAS lets any user reserve addresses).
//!
//! Crash-safe like the DNS record, never releasing what is not ours:
//! - `status.controlPlaneVIP` says `Reserving` (with the address, or for a
//!   subnet the MAAS user's reservations before ours) BEFORE MAAS is asked,
//!   and `Reserved` after; after a crash in between, the reservation is
//!   found again in MAAS's list of the user's reservations instead of
//!   being made twice;
//! - every reservation is made with the cluster's mark (`mac=`, see
//!   `mark.rs`), which MAAS lists with it: without a status (a cluster
//!   moved with `clusterctl move`) a reservation is this cluster's only if
//!   it carries the mark, never because the spec or endpoint names it;
//! - an address already reserved for the MAAS user without our mark is
//!   used as it is (`External`) and never released; in subnet mode only a
//!   marked reservation in that subnet is taken; one another MaasCluster
//!   records is refused;
//! - the reservation is checked on every reconcile (one list call) and
//!   made again if it was released outside capmaas;
//! - it is released when the cluster is deleted, after its machines.

use serde_json::{json, Value};

use super::{mark, ClusterReconciling};
use crate::api::maas_cluster::{
    self as mc_api, ControlPlaneVip, ControlPlaneVipStatus, VIP_EXTERNAL, VIP_RESERVED,
    VIP_RESERVING,
};
use crate::controllers::Error;
use crate::maas::{IpReservation, ReserveFrom};

/// The VIP of the cluster, reserved in MAAS; each state is persisted
/// before the next MAAS write.
pub(super) fn ensure(r: &mut ClusterReconciling, vip: &ControlPlaneVip) -> Result<String, Error> {
    let recorded = r.status.control_plane_vip.clone();
    let address = recorded
        .as_ref()
        .map(|rec| rec.address.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| vip.address.clone());
    if let Some(address) = &address {
        refuse_if_claimed(r, address)?;
    }
    let mark = mark::reservation_mac(&mark::ensure_identity(r)?)?;
    match recorded {
        Some(rec) if !rec.address.is_empty() => keep(r, rec, &mark),
        Some(rec) => recover_from_subnet(r, vip, &rec.reserved_before, &mark),
        None => start(r, vip, &mark),
    }
}

/// A recorded address: reserved for us in MAAS (the reservation finished
/// after a crash, or is still there), or reserved again.
fn keep(
    r: &mut ClusterReconciling,
    rec: ControlPlaneVipStatus,
    mark: &str,
) -> Result<String, Error> {
    if is_reserved(r, &rec.address)? {
        if rec.phase == VIP_RESERVING {
            record(r, &rec.address, VIP_RESERVED, &[])?;
            reserved_event(r, &rec.address);
        }
        return Ok(rec.address);
    }
    if rec.phase != VIP_RESERVING {
        r.warning_event(
            "ControlPlaneVIPLost",
            &format!(
                "control-plane VIP {} is no longer reserved in MAAS (released outside \
                 capmaas): reserving it again",
                rec.address
            ),
        );
        record(r, &rec.address, VIP_RESERVING, &[])?;
    }
    reserve(r, ReserveFrom::Address(rec.address), mark)
}

/// Nothing recorded yet: a reservation of this MAAS user carrying our
/// mark is ours (a cluster moved with `clusterctl move`, whose status
/// stayed behind); an address reserved without it is used as it is;
/// otherwise the intent is persisted, then MAAS asked.
fn start(r: &mut ClusterReconciling, vip: &ControlPlaneVip, mark: &str) -> Result<String, Error> {
    match (&vip.address, &vip.subnet) {
        (Some(address), _) => {
            let listed = r.maas()?.client().ip_reservations(Some(address))?;
            if let Some(found) = listed.iter().find(|x| &x.ip == address) {
                adopt(r, address, found.has_mac(mark))?;
                return Ok(address.clone());
            }
            record(r, address, VIP_RESERVING, &[])?;
            reserve(r, ReserveFrom::Address(address.clone()), mark)
        }
        (None, Some(subnet)) => {
            let before = r.maas()?.client().ip_reservations(None)?;
            if let Some(ours) = marked_in_subnet(r, &before, subnet, mark) {
                refuse_if_claimed(r, &ours)?;
                adopt(r, &ours, true)?;
                return Ok(ours);
            }
            let before: Vec<String> = before.into_iter().map(|x| x.ip).collect();
            record(r, "", VIP_RESERVING, &before)?;
            reserve(r, ReserveFrom::Subnet(subnet.clone()), mark)
        }
        (None, None) => Err(failed(
            r,
            "spec.controlPlaneVIP names neither an address nor a subnet".into(),
        )),
    }
}

/// Our marked reservation in `subnet` (MAAS names the subnet), the one our
/// endpoint names if there are several.
fn marked_in_subnet(
    r: &ClusterReconciling,
    listed: &[IpReservation],
    subnet: &str,
    mark: &str,
) -> Option<String> {
    let endpoint = r
        .object
        .spec
        .control_plane_endpoint
        .as_ref()
        .map(|e| e.host.as_str());
    let ours: Vec<&IpReservation> = listed
        .iter()
        .filter(|x| x.has_mac(mark) && x.subnet.is_some() && in_subnet(x, subnet))
        .collect();
    ours.iter()
        .find(|x| Some(x.ip.as_str()) == endpoint)
        .or(ours.first())
        .map(|x| x.ip.clone())
}

/// Records an address MAAS already had reserved for this MAAS user:
/// `ours` (it carries our mark) as `Reserved`, released with the cluster;
/// anyone else's as `External`, never released.
fn adopt(r: &mut ClusterReconciling, address: &str, ours: bool) -> Result<(), Error> {
    if ours {
        record(r, address, VIP_RESERVED, &[])?;
        r.normal_event(
            "ControlPlaneVIPReserved",
            &format!(
                "control-plane VIP {address}, reserved in MAAS with this cluster's mark (a \
                 moved cluster), is this cluster's"
            ),
        );
        return Ok(());
    }
    record(r, address, VIP_EXTERNAL, &[])?;
    r.normal_event(
        "ControlPlaneVIPAdopted",
        &format!(
            "control-plane VIP {address} was already reserved in MAAS for this MAAS user, not \
             by this cluster: used as it is, and left reserved when the cluster is deleted"
        ),
    );
    Ok(())
}

/// Reserving from a subnet, address unknown: a crash may have come after
/// MAAS reserved one. Ours is the user's reservation in that subnet that
/// was not there before and no other MaasCluster records.
fn recover_from_subnet(
    r: &mut ClusterReconciling,
    vip: &ControlPlaneVip,
    before: &[String],
    mark: &str,
) -> Result<String, Error> {
    let Some(subnet) = vip.subnet.clone() else {
        return start(r, vip, mark);
    };
    match new_reservations(r, &subnet, before)?.as_slice() {
        [] => reserve(r, ReserveFrom::Subnet(subnet), mark),
        [ip] => {
            let ip = ip.clone();
            record(r, &ip, VIP_RESERVED, &[])?;
            reserved_event(r, &ip);
            Ok(ip)
        }
        several => Err(failed(r, ambiguous(several))),
    }
}

fn ambiguous(candidates: &[String]) -> String {
    format!(
        "cannot tell which of the MAAS reservations {} this cluster made (capmaas stopped \
         while reserving, and the same MAAS user reserved others meanwhile): release the \
         ones that are not this cluster's in MAAS",
        candidates.join(", ")
    )
}

/// The user's reservations in `subnet` made since `before` that no other
/// MaasCluster records.
fn new_reservations(
    r: &ClusterReconciling,
    subnet: &str,
    before: &[String],
) -> Result<Vec<String>, Error> {
    let listed = r.maas()?.client().ip_reservations(None)?;
    Ok(listed
        .into_iter()
        .filter(|x| in_subnet(x, subnet) && !before.contains(&x.ip))
        .map(|x| x.ip)
        .filter(|ip| claimed_by(r, ip).is_none())
        .collect())
}

/// Whether a reservation is in the subnet a spec names (CIDR, name or id,
/// as MAAS's `subnet=`); one MAAS lists without its subnet may be.
fn in_subnet(reservation: &IpReservation, subnet: &str) -> bool {
    let Some(s) = &reservation.subnet else {
        return true;
    };
    let wanted = subnet
        .strip_prefix("name:")
        .or_else(|| subnet.strip_prefix("cidr:"))
        .unwrap_or(subnet);
    s.cidr == wanted || s.name == wanted || s.id.to_string() == wanted
}

/// Asks MAAS; the answer is recorded as `Reserved`.
fn reserve(r: &mut ClusterReconciling, from: ReserveFrom, mark: &str) -> Result<String, Error> {
    let reservation = match r.maas()?.client().reserve_ip_marked(&from, mark) {
        Ok(reservation) => reservation,
        Err(e) if e.is_transient() => return Err(e.into()),
        Err(e) => {
            let what = match &from {
                ReserveFrom::Address(ip) => format!("control-plane VIP {ip}"),
                ReserveFrom::Subnet(subnet) => format!("an address in subnet {subnet}"),
            };
            return Err(failed(r, format!("MAAS would not reserve {what}: {e}")));
        }
    };
    record(r, &reservation.ip, VIP_RESERVED, &[])?;
    reserved_event(r, &reservation.ip);
    Ok(reservation.ip)
}

fn reserved_event(r: &ClusterReconciling, address: &str) {
    r.normal_event(
        "ControlPlaneVIPReserved",
        &format!("Reserved control-plane VIP {address} in MAAS"),
    );
}

/// Whether MAAS lists `address` among this MAAS user's reservations.
fn is_reserved(r: &ClusterReconciling, address: &str) -> Result<bool, Error> {
    let listed = r.maas()?.client().ip_reservations(Some(address))?;
    Ok(listed.iter().any(|x| x.ip == address))
}

/// Persists the state, guarded by the resourceVersion read (a stale cache
/// is refused by the API server and retried with fresh data).
fn record(
    r: &mut ClusterReconciling,
    address: &str,
    phase: &str,
    before: &[String],
) -> Result<(), Error> {
    let value = ControlPlaneVipStatus {
        address: address.to_string(),
        phase: phase.to_string(),
        reserved_before: before.to_vec(),
    };
    let or_null = |empty: bool, v: Value| if empty { Value::Null } else { v };
    let patch = json!({
        "metadata": {"resourceVersion": r.object.metadata.resource_version},
        "status": {"controlPlaneVIP": {
            "address": or_null(address.is_empty(), json!(address)),
            "phase": phase,
            "reservedBefore": or_null(before.is_empty(), json!(before)),
        }}
    });
    r.patch_status_now(&patch, |status| {
        status.control_plane_vip = Some(value.clone());
    })
}

/// Another MaasCluster of this controller whose status records `address`.
fn claimed_by(r: &ClusterReconciling, address: &str) -> Option<String> {
    r.other_cluster_where(|other| other.vip_address() == Some(address))
}

fn refuse_if_claimed(r: &mut ClusterReconciling, address: &str) -> Result<(), Error> {
    let Some(other) = claimed_by(r, address) else {
        return Ok(());
    };
    let message = format!(
        "control-plane VIP {address} is already the endpoint of MaasCluster {other}; this \
         cluster will not reserve, use or release it"
    );
    r.report(
        mc_api::LOAD_BALANCER_READY,
        mc_api::CONTROL_PLANE_VIP_IN_USE,
        &message,
    );
    Err(Error::Retry(format!("{}: {message}", r.key())))
}

/// `LoadBalancerReady=False` with MAAS's words, a Warning event when the
/// message is new; the error to retry with backoff.
pub(super) fn failed(r: &mut ClusterReconciling, message: String) -> Error {
    r.report(
        mc_api::LOAD_BALANCER_READY,
        mc_api::CONTROL_PLANE_VIP_FAILED,
        &message,
    );
    Error::Retry(format!("{}: {message}", r.key()))
}

/// On deletion (the machines are gone): releases what this cluster
/// reserved; an address reserved before it asked, or one another
/// MaasCluster records, stays.
pub(super) fn release(r: &mut ClusterReconciling) -> Result<(), Error> {
    let Some(rec) = r.status.control_plane_vip.clone() else {
        return Ok(());
    };
    let address = if rec.phase == VIP_EXTERNAL {
        r.normal_event(
            "ControlPlaneVIPKept",
            &format!(
                "control-plane VIP {} was reserved in MAAS before this cluster: left reserved",
                rec.address
            ),
        );
        return Ok(());
    } else if !rec.address.is_empty() {
        rec.address
    } else {
        // Stopped while reserving from a subnet.
        let Some(subnet) = r
            .object
            .spec
            .control_plane_vip
            .clone()
            .and_then(|v| v.subnet)
        else {
            return Ok(());
        };
        match new_reservations(r, &subnet, &rec.reserved_before)?.as_slice() {
            [] => return Ok(()),
            [ip] => ip.clone(),
            several => {
                let message = ambiguous(several);
                r.warning_event(mc_api::CONTROL_PLANE_VIP_FAILED, &message);
                return Ok(());
            }
        }
    };
    if let Some(other) = claimed_by(r, &address) {
        r.warning_event(
            mc_api::CONTROL_PLANE_VIP_IN_USE,
            &format!("control-plane VIP {address} is MaasCluster {other}'s; left reserved"),
        );
        return Ok(());
    }
    if !is_reserved(r, &address)? {
        return Ok(());
    }
    r.maas()?.client().release_ip(&address)?;
    r.normal_event(
        "ControlPlaneVIPReleased",
        &format!("Released control-plane VIP {address} in MAAS"),
    );
    Ok(())
}
