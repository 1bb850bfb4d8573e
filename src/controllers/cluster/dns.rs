//! The API server DNS record `<cluster>-<6 random chars>.<dnsDomain>`
//! (TTL 10 s), whose addresses are those of the running control-plane
//! machines.
//!
//! Never leak, never wipe:
//! - the name is chosen once and persisted in `status.network.dnsName`
//!   (guarded by resourceVersion) BEFORE the record is created, and the
//!   record is looked up by name before creating, so a crash at any point
//!   never creates a second record;
//! - the addresses are written only when they differ from MAAS's, and never
//!   emptied while a control-plane MaasMachine that is not being deleted
//!   exists (all of them rebooting or a MAAS power blip must not take the
//!   API endpoint away);
//! - a rolling upgrade costs clients nothing: a joining control plane is
//!   added once its own API server answers (probed by the API poller), a
//!   leaving one is taken out as soon as its Machine is being deleted,
//!   while Cluster API's drain waits on our pre-drain hook for the
//!   record's TTL (`machine::drain`);
//! - the record is deleted with the cluster;
//! - nothing that is not ours: the record carries the cluster's mark, a
//!   TXT record `capmaas-owner=...` on its name (`mark.rs`), written right
//!   after the record is created. A record of a name our status holds
//!   (chosen there before creating it, so it is ours even when a crash
//!   lost the mark, or made by a capmaas from before marks) is marked; a
//!   cluster without that status (moved with `clusterctl move`) takes the
//!   record its endpoint names only if it carries our mark. Any other
//!   record is refused with a condition and a Warning naming it, and is
//!   never emptied, repointed or deleted.

use std::sync::Arc;

use serde_json::json;

use super::{mark, ClusterReconciling};
use crate::api::capi::Cluster;
use crate::api::conditions;
use crate::api::maas_cluster as mc_api;
use crate::api::maas_machine::{self as mm_api, MaasMachineStatus};
use crate::api::{MaasCluster, MaasMachine};
use crate::controllers::identity::{Identity, Recorded};
use crate::controllers::ports::KubeApi;
use crate::controllers::Error;
use crate::maas::DnsResource;

pub(super) const TTL_SECONDS: u32 = 10;
const SUFFIX_LEN: usize = 6;
const SUFFIX_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// The DNS name of this cluster, choosing and persisting it on first use.
/// A name another MaasCluster uses is refused: a tenant naming its cluster
/// like another namespace's and copying its endpoint must not take over
/// (rewrite, then delete) that cluster's record.
pub(super) fn ensure_name(r: &mut ClusterReconciling, cluster: &Cluster) -> Result<String, Error> {
    if let Some(name) = current_name(&r.object, &cluster.metadata.name) {
        let adopting = r.object.dns_name().is_none();
        if let Some(other) = claimed_elsewhere(r, &name, adopting) {
            let message = format!(
                "DNS name {name} is already the API endpoint of MaasCluster {other}; \
                 this cluster will not use or change its record"
            );
            r.report(
                mc_api::LOAD_BALANCER_READY,
                mc_api::DNS_NAME_IN_USE,
                &message,
            );
            return Err(Error::Retry(format!("{}: {message}", r.key())));
        }
        if adopting {
            // Adopted from the endpoint (status is not moved by clusterctl
            // move), which anyone can write: only a record MAAS shows with
            // our mark, or none yet.
            let mark = own_mark(r)?;
            let records = r.maas()?.dns_resources(&name)?;
            if records.iter().any(|rec| owner(rec, &mark) != Owner::Ours) {
                return Err(not_ours(r, &name));
            }
            persist_name(r, &name)?;
        }
        return Ok(name);
    }
    // A new name is one no record has yet, so that a record found under a
    // name our status holds is one we made.
    for _ in 0..3 {
        let name = format!(
            "{}-{}.{}",
            cluster.metadata.name,
            random_suffix()?,
            r.object.spec.dns_domain
        );
        if r.maas()?.dns_resources(&name)?.is_empty() {
            persist_name(r, &name)?;
            return Ok(name);
        }
    }
    Err(Error::Retry(format!(
        "{}: every DNS name tried exists in MAAS already",
        r.key()
    )))
}

/// Who a record is, by its marks: `Ours` carries this cluster's,
/// `Other` only another's, `Unmarked` none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    Ours,
    Unmarked,
    Other,
}

pub(super) fn owner(record: &DnsResource, mark: &str) -> Owner {
    let marks: Vec<&str> = record
        .txt()
        .map(|t| t.trim_matches('"'))
        .filter(|t| t.starts_with(mark::DNS_MARK_PREFIX))
        .collect();
    if marks.contains(&mark) {
        Owner::Ours
    } else if marks.is_empty() {
        Owner::Unmarked
    } else {
        Owner::Other
    }
}

/// This cluster's mark (its identity chosen and persisted first).
fn own_mark(r: &mut ClusterReconciling) -> Result<String, Error> {
    mark::dns_mark(&mark::ensure_identity(r)?)
}

/// `LoadBalancerReady=False` naming the record, a Warning when new; the
/// error to retry with.
fn not_ours(r: &mut ClusterReconciling, fqdn: &str) -> Error {
    let message = format!(
        "DNS record {fqdn} exists in MAAS without this cluster's mark (its TXT record \
         {}...): it is not this cluster's, and capmaas will not use, change or delete it",
        mark::DNS_MARK_PREFIX
    );
    r.report(
        mc_api::LOAD_BALANCER_READY,
        mc_api::DNS_RECORD_NOT_OURS,
        &message,
    );
    Error::Retry(format!("{}: {message}", r.key()))
}

/// Writes our mark on the record of `fqdn`.
fn mark_record(r: &mut ClusterReconciling, fqdn: &str, mark: &str) -> Result<(), Error> {
    r.maas()?.create_dns_txt(fqdn, mark)?;
    Ok(())
}

/// `status.network.dnsName`, else an endpoint host that has our naming
/// scheme (`<cluster>-xxxxxx.<dnsDomain>`), which is how a cluster looks
/// after `clusterctl move`: spec copied, status not.
pub(super) fn current_name(mc: &MaasCluster, cluster_name: &str) -> Option<String> {
    if let Some(name) = mc.dns_name() {
        return Some(name.to_string());
    }
    let host = &mc.spec.control_plane_endpoint.as_ref()?.host;
    let suffix = host.strip_prefix(cluster_name)?.strip_prefix('-')?;
    let (random, domain) = suffix.split_once('.')?;
    (random.len() == SUFFIX_LEN && domain == mc.spec.dns_domain).then(|| host.clone())
}

/// Another MaasCluster of this controller that uses `name`: one whose
/// status holds it (capmaas chose it there) always wins; one whose endpoint
/// merely names it wins only against a cluster that is adopting the name
/// from its own endpoint too (so a copied endpoint never takes over).
fn claimed_elsewhere(r: &ClusterReconciling, name: &str, adopting: bool) -> Option<String> {
    r.other_cluster_where(|other| {
        let in_status = other.dns_name() == Some(name);
        let in_endpoint = other
            .spec
            .control_plane_endpoint
            .as_ref()
            .is_some_and(|e| e.host == name);
        in_status || (adopting && in_endpoint)
    })
}

/// Writes the name with the resourceVersion we read: if our cache was
/// stale (a name may already be stored), the API server refuses and we
/// retry with fresh data rather than pick a second name.
fn persist_name(r: &mut ClusterReconciling, name: &str) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"resourceVersion": r.object.metadata.resource_version},
        "status": {"network": {"dnsName": name}}
    });
    r.patch_status_now(&patch, |status| {
        status.network.get_or_insert_with(Default::default).dns_name = name.to_string();
    })
}

fn random_suffix() -> Result<String, Error> {
    let mut bytes = [0u8; SUFFIX_LEN];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| Error::Retry(format!("no randomness for the DNS name: {e}")))?;
    Ok(bytes
        .iter()
        .filter_map(|b| SUFFIX_ALPHABET.get(usize::from(*b) % SUFFIX_ALPHABET.len()))
        .map(|c| char::from(*c))
        .collect())
}

/// The record named `fqdn`, created (with `ips`) if MAAS has none. Read
/// as this process last read or wrote it when that was recent
/// (`MaasView::recent_dns_resources`): the reconciles that follow one
/// another while machines come up cost one read, not one each. A write
/// whose outcome is unknown drops that memory, so the next reconcile reads
/// MAAS; a hand edit is repaired once the memory has expired.
pub(super) fn ensure_record(
    r: &mut ClusterReconciling,
    fqdn: &str,
    ips: &[String],
) -> Result<DnsResource, Error> {
    let mark = own_mark(r)?;
    let mut found = r.maas()?.recent_dns_resources(fqdn)?;
    match found.len() {
        0 => {
            let record = r.maas()?.create_dns_resource(fqdn, TTL_SECONDS, ips)?;
            r.normal_event(
                "DNSRecordCreated",
                &format!("Created DNS record {fqdn} (TTL {TTL_SECONDS})"),
            );
            mark_record(r, fqdn, &mark)?;
            Ok(record)
        }
        1 => {
            let record = found.remove(0);
            match owner(&record, &mark) {
                Owner::Ours => {}
                // Our status holds the name (chosen before creating, or
                // checked when adopted): made by us before its mark (a
                // crash between the two calls, or a capmaas from before
                // marks).
                Owner::Unmarked => {
                    mark_record(r, fqdn, &mark)?;
                    r.normal_event(
                        "DNSRecordMarked",
                        &format!("Marked DNS record {fqdn} as this cluster's"),
                    );
                }
                Owner::Other => return Err(not_ours(r, fqdn)),
            }
            Ok(record)
        }
        n => Err(Error::Retry(format!(
            "expected 1 DNS resource for {fqdn:?}, got {n}"
        ))),
    }
}

/// What a MaasMachine is to the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Worker,
    ControlPlane,
    /// A control-plane machine whose Machine is being deleted: it leaves
    /// the record before Cluster API drains it (see `machine::drain`).
    Leaving,
}

/// What `m` is to the record, from its owner Machine (in the cache): a
/// control plane whose Machine is being deleted leaves it before the drain.
pub(crate) fn role(kube: &dyn KubeApi, m: &MaasMachine) -> Role {
    let owner = m
        .owner_machine_name()
        .and_then(|name| kube.machine(&m.metadata.namespace, name));
    if !m.is_control_plane(owner.as_deref()) {
        Role::Worker
    } else if owner.is_some_and(|o| o.metadata.is_being_deleted()) {
        Role::Leaving
    } else {
        Role::ControlPlane
    }
}

/// The record's addresses as they should be, and who waits to join.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Attachments {
    /// `None` means "leave the record as it is": no control-plane machine
    /// runs, but some that are not being deleted exist (rebooting, powered
    /// off), or one has not been observed yet.
    pub ips: Option<Vec<String>>,
    /// Running control-plane machines kept out until their API server
    /// answers (the addresses the API poller keeps probing).
    pub waiting: Vec<String>,
}

/// The addresses the record should hold: the first ExternalIP of every
/// running control-plane machine that stays (not being deleted, its Machine
/// not leaving) and is either in the record already or whose API server
/// answered (`answers`, asked only for those not in the record). Clients
/// resolving the name then only ever get an address that serves.
///
/// Exceptions, so the record never empties while the cluster lives:
/// - nothing of ours in the record yet (a new cluster): every running
///   staying control plane joins at once; kubeadm init on the first one
///   reaches its own API through the name before that API serves;
/// - only leaving machines in the record and no successor answering yet:
///   they stay until one does (the leaving machine's drain waits for that);
/// - the whole control plane leaving (the cluster is being deleted): the
///   record keeps what it has until the MaasMachines themselves go.
pub(super) fn attachments(
    machines: &[Arc<MaasMachine>],
    role: impl Fn(&MaasMachine) -> Role,
    current: &[String],
    mut answers: impl FnMut(&str) -> bool,
) -> Attachments {
    let control_plane: Vec<(&MaasMachine, Role)> = machines
        .iter()
        .map(|m| (m.as_ref(), role(m)))
        .filter(|(_, role)| *role != Role::Worker)
        .collect();
    // A control-plane machine with a MAAS machine recorded that the machine
    // controller has not looked at yet (`clusterctl move` copies spec, not
    // status) may well be serving: until each has been observed once, the
    // record stays as it is rather than shrink to the ones seen so far.
    if control_plane.iter().any(|(m, _)| is_unobserved(m)) {
        return Attachments::default();
    }
    let running: Vec<(String, Role)> = control_plane
        .iter()
        .filter(|(m, _)| !m.metadata.is_being_deleted() && is_running(m))
        .filter_map(|(m, role)| {
            let status = m.status.as_ref()?;
            status
                .addresses
                .iter()
                .find(|a| a.type_ == "ExternalIP")
                .map(|a| (a.address.clone(), *role))
        })
        .collect();
    let attached: Vec<String> = running
        .iter()
        .filter(|(ip, _)| current.contains(ip))
        .map(|(ip, _)| ip.clone())
        .collect();
    let (mut ready, mut waiting) = (Vec::new(), Vec::new());
    for (ip, _) in running
        .iter()
        .filter(|(_, role)| *role == Role::ControlPlane)
    {
        if current.contains(ip) || answers(ip) {
            ready.push(ip.clone());
        } else {
            waiting.push(ip.clone());
        }
    }
    let mut ips = if !ready.is_empty() {
        ready
    } else if attached.is_empty() {
        std::mem::take(&mut waiting)
    } else {
        attached
    };
    ips.sort();
    ips.dedup();
    waiting.sort();
    waiting.dedup();
    let staying = control_plane
        .iter()
        .any(|(m, _)| !m.metadata.is_being_deleted());
    if ips.is_empty() && staying {
        return Attachments { ips: None, waiting };
    }
    Attachments {
        ips: Some(ips),
        waiting,
    }
}

/// Not being deleted, a MAAS machine recorded, and nothing known about it
/// yet: no machine state, and not refused (a machine that is not ours or
/// gone from MAAS has no state either, and must not freeze the record).
/// Other MachineDeployed reasons (waiting for the cluster's infrastructure,
/// right after a move) say nothing about the MAAS machine.
fn is_unobserved(m: &MaasMachine) -> bool {
    let looked_at = |s: &MaasMachineStatus| {
        s.machine_state.is_some()
            || conditions::get(&s.conditions, mm_api::MACHINE_DEPLOYED).is_some_and(|c| {
                c.reason == mm_api::MACHINE_NOT_OWNED || c.reason == mm_api::MACHINE_NOT_FOUND
            })
    };
    !m.metadata.is_being_deleted()
        && m.system_id().is_some()
        && !m.status.as_ref().is_some_and(looked_at)
}

/// Powered on and Deploying or Deployed: a first control-plane machine
/// needs its own address in the record while kubeadm initialises it.
pub(crate) fn is_running(m: &MaasMachine) -> bool {
    m.status.as_ref().is_some_and(|s| {
        s.machine_powered
            && matches!(
                s.machine_state.as_deref(),
                Some("Deploying") | Some("Deployed")
            )
    })
}

/// Writes the desired addresses if they differ from MAAS's (which also
/// repairs drift made by hand); true when it wrote.
pub(super) fn update_attachments(
    r: &mut ClusterReconciling,
    record: &DnsResource,
    desired: Option<Vec<String>>,
) -> Result<bool, Error> {
    let Some(desired) = desired else {
        return Ok(false);
    };
    let mut current = record.ip_addresses.clone();
    current.sort();
    current.dedup();
    if current == desired {
        return Ok(false);
    }
    r.maas()?.set_dns_resource_ips(record.id, &desired)?;
    let message = format!(
        "DNS record {} now resolves to [{}] (was [{}])",
        record.fqdn,
        desired.join(", "),
        current.join(", ")
    );
    r.normal_event("DNSRecordUpdated", &message);
    Ok(true)
}

/// Deletes the cluster's record(s); a record already gone is fine.
pub(super) fn delete_record(
    r: &mut ClusterReconciling,
    cluster_name: Option<&str>,
) -> Result<(), Error> {
    let name = match cluster_name {
        Some(cluster) => current_name(&r.object, cluster),
        None => r.object.dns_name().map(str::to_string),
    };
    let Some(fqdn) = name else { return Ok(()) };
    let adopting = r.object.dns_name().is_none();
    if let Some(other) = claimed_elsewhere(r, &fqdn, adopting) {
        r.warning_event(
            mc_api::DNS_NAME_IN_USE,
            &format!("DNS record {fqdn} is MaasCluster {other}'s; left alone"),
        );
        return Ok(());
    }
    let records = match r.maas()?.dns_resources(&fqdn) {
        Ok(records) => records,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mark = match Identity::recorded(&r.object.metadata) {
        Recorded::Valid(identity) => mark::dns_mark(&identity)?,
        Recorded::Missing | Recorded::Foreign(_) => String::new(),
    };
    let chosen = r.object.dns_name() == Some(fqdn.as_str());
    for record in records.iter().filter(|rec| rec.id >= 0) {
        let ours = match owner(record, &mark) {
            Owner::Ours => true,
            Owner::Unmarked => chosen,
            Owner::Other => false,
        };
        if !ours {
            r.warning_event(
                mc_api::DNS_RECORD_NOT_OURS,
                &format!("DNS record {fqdn} is not this cluster's (no mark of it): left alone"),
            );
            continue;
        }
        match r.maas()?.delete_dns_resource(record.id) {
            Ok(()) => r.normal_event("DNSRecordDeleted", &format!("Deleted DNS record {fqdn}")),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
