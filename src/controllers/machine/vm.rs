//! A MaasMachine asking for a VM (the Go provider's `spec.lxd.enabled`, or
//! `spec.virsh.enabled`): MAAS composes one on a VM host (MAAS ≤ 3.8), and
//! once it is Ready it is a machine like any other: allocated by its
//! system ID under the object's identity (`agent_name`, then owner data),
//! deployed, and on delete decomposed (`DELETE machines/<id>/`) instead of
//! released.
//!
//! Crash safety: the VM's hostname is a function of the identity
//! ([`hostname`]), and before composing we look for a machine with that
//! hostname, so a VM composed before a crash (or whose answer was lost) is
//! found again, never composed twice. Until it is allocated the VM has no
//! owner and no `agent_name`: its hostname is its only mark, and a machine
//! with that hostname that is not a VM, or that someone holds, is never
//! taken.
//!
//! The host: VM hosts of the asked type in `spec.resourcePool` and the
//! machine's zone, carrying every `spec.tags` tag (the one `spec.parent`
//! names, when set), with room for the VM; the most headroom first (free
//! cores, memory and storage, each over what the VM takes). Its machine's
//! system ID is recorded in `spec.parent`.

use std::time::Duration;

use serde_json::json;

use super::{retry, MachineReconciling, Step};
use crate::api::capi;
use crate::api::maas_machine as mm_api;
use crate::controllers::identity::Identity;
use crate::controllers::Error;
use crate::maas::{self, ComposeRequest, MachineStatus, VmHost};
use crate::runtime::Action;

/// How often to look at a VM MAAS is commissioning (unowned, so the MAAS
/// watch, which lists our user's machines, does not see it).
const COMMISSIONING_POLL: Duration = Duration::from_secs(10);

/// MAAS's defaults for a composed VM without `minCPU` / `minMemory`.
const DEFAULT_CORES: u32 = 1;
const DEFAULT_MEMORY_MIB: u64 = 2048;

/// The VM's hostname: `<name>-<first 8 of the identity's nonce>`, a DNS
/// label MAAS accepts (at most 49 characters), the same on every
/// reconcile and after `clusterctl move` (the identity travels).
pub(crate) fn hostname(identity: &Identity) -> String {
    let mut parts = identity.as_str().rsplit('/');
    let nonce: String = parts
        .next()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    let name: String = parts
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("{}-{}", name.trim_matches('-'), nonce.to_ascii_lowercase())
}

/// The system ID of this object's VM once MAAS has it Ready to allocate;
/// composes it first if there is none. Stops while MAAS commissions it,
/// and with a condition when it cannot be had.
pub(super) fn ready_vm(
    r: &mut MachineReconciling,
    machine: &capi::Machine,
    kind: &str,
    identity: &Identity,
) -> Result<Step<String>, Error> {
    let hostname = hostname(identity);
    let found = r
        .maas()?
        .client()
        .machines(&maas::MachineFilter::by_hostname(&hostname))?
        .into_iter()
        .next();
    let Some(vm) = found else {
        return Ok(match compose(r, machine, kind, &hostname)? {
            Step::Continue(system_id) => commissioning(r, &system_id, &hostname),
            Step::Stop(action) => Step::Stop(action),
        });
    };
    // Ours would have been listed under our agent_name already: one that
    // is not a VM, or that someone holds, is not ours.
    let ours = vm.pod.is_some() && vm.owner.is_none();
    if ours && r.object.spec.options().parent.is_none() {
        // Composed before a crash that lost the spec write.
        let hosts = r.maas()?.client().vm_hosts().unwrap_or_default();
        if let Some(host) = hosts.iter().find(|h| vm.pod.as_ref() == Some(&h.name)) {
            record_parent(r, host)?;
        }
    }
    let reason = match vm.status {
        MachineStatus::Ready if ours => return Ok(Step::Continue(vm.system_id)),
        MachineStatus::New | MachineStatus::Commissioning | MachineStatus::Testing if ours => {
            return Ok(commissioning(r, &vm.system_id, &hostname));
        }
        _ if ours => mm_api::MACHINE_DEPLOY_FAILED,
        _ => mm_api::MACHINE_NOT_OWNED,
    };
    let message = format!(
        "MAAS machine {} ({hostname}) is {} and {}: not deployed (deleting the MaasMachine \
         decomposes a VM of ours)",
        vm.system_id,
        vm.status_name,
        if ours { "ours" } else { "not our VM" }
    );
    r.not_deployed(reason, reason, message);
    Ok(Step::Stop(Action::Done))
}

fn commissioning(r: &mut MachineReconciling, system_id: &str, hostname: &str) -> Step<String> {
    r.set_false(
        mm_api::MACHINE_DEPLOYED,
        mm_api::MACHINE_DEPLOY_STARTED,
        format!("VM {system_id} ({hostname}) commissioning"),
    );
    Step::Stop(Action::RequeueAfter(COMMISSIONING_POLL))
}

/// Chooses a VM host and composes the VM on it; its system ID.
fn compose(
    r: &mut MachineReconciling,
    machine: &capi::Machine,
    kind: &str,
    hostname: &str,
) -> Result<Step<String>, Error> {
    let hosts = match r.maas()?.client().vm_hosts() {
        Ok(hosts) => hosts,
        // MAAS after 3.8 removed VM hosts: nothing to wait for.
        Err(e) if e.is_gone() => {
            let message = format!(
                "spec.{kind}.enabled: this MAAS has no VM hosts (removed after 3.8: {})",
                e.message()
            );
            r.not_deployed(
                mm_api::VM_HOSTS_UNSUPPORTED,
                mm_api::VM_HOSTS_UNSUPPORTED,
                message,
            );
            return Ok(Step::Stop(Action::Done));
        }
        Err(e) => return Err(e.into()),
    };
    let spec = &r.object.spec;
    let request = ComposeRequest {
        hostname: hostname.to_string(),
        cores: spec
            .min_cpu
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_CORES),
        memory_mib: spec
            .min_memory
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MEMORY_MIB),
        disk_gb: r.object.vm_disk_gb(),
        ..ComposeRequest::default()
    };
    let wanted = Wanted {
        kind,
        pool: spec.resource_pool.as_deref().filter(|p| !p.is_empty()),
        zone: spec
            .failure_domain
            .as_deref()
            .or(machine.spec.failure_domain.as_deref())
            .filter(|z| !z.is_empty()),
        tags: &spec.tags,
        parent: spec.options().parent.as_deref().filter(|p| !p.is_empty()),
    };
    let Some(host) = choose_host(&hosts, &wanted, &request).cloned() else {
        let message = format!(
            "no {kind} VM host has room for a VM of {} cores, {} MiB, {} GB in pool {}, zone \
             {}, with tags [{}]{}",
            request.cores,
            request.memory_mib,
            request.disk_gb,
            wanted.pool.unwrap_or("(any)"),
            wanted.zone.unwrap_or("(any)"),
            wanted.tags.join(", "),
            wanted
                .parent
                .map(|p| format!(", parent {p}"))
                .unwrap_or_default(),
        );
        return Ok(Step::Stop(retry::refused(r, "VMHostUnavailable", &message)));
    };
    let request = ComposeRequest {
        zone_id: host.zone_id,
        pool_id: host.pool_id,
        ..request
    };
    match r.maas()?.client().compose(host.id, &request) {
        Ok(system_id) => {
            r.normal_event(
                "VMComposed",
                &format!(
                    "Composed VM {system_id} ({hostname}) on VM host {:?}",
                    host.name
                ),
            );
            record_parent(r, &host)?;
            Ok(Step::Continue(system_id))
        }
        Err(e) if e.is_refused() || e.is_conflict() => {
            let message = format!("composing a VM on VM host {:?}: {}", host.name, e.message());
            Ok(Step::Stop(retry::refused(r, "VMComposeFailed", &message)))
        }
        Err(e) => Err(e.into()),
    }
}

/// What a VM host must match.
struct Wanted<'a> {
    kind: &'a str,
    pool: Option<&'a str>,
    zone: Option<&'a str>,
    tags: &'a [String],
    parent: Option<&'a str>,
}

/// The eligible host with the most headroom: the sum, over cores, memory
/// and storage, of what is free divided by what the VM takes (ties: the
/// lowest id).
fn choose_host<'h>(
    hosts: &'h [VmHost],
    wanted: &Wanted,
    vm: &ComposeRequest,
) -> Option<&'h VmHost> {
    let named = |field: &str, want: Option<&str>| want.is_none_or(|w| field == w);
    let headroom = |h: &VmHost| {
        [
            h.free_cores / f64::from(vm.cores),
            h.free_memory / vm.memory_mib as f64,
            h.free_storage / (vm.disk_gb.max(1) as f64 * 1e9),
        ]
    };
    hosts
        .iter()
        .filter(|h| h.kind == wanted.kind)
        .filter(|h| named(&h.pool, wanted.pool) && named(&h.zone, wanted.zone))
        .filter(|h| wanted.tags.iter().all(|t| h.tags.contains(t)))
        .filter(|h| {
            wanted
                .parent
                .is_none_or(|p| h.name == p || parent_of(h) == p)
        })
        .filter_map(|h| {
            let ratios = headroom(h);
            let fits = ratios.iter().all(|ratio| *ratio >= 1.0);
            fits.then(|| (ratios.iter().sum::<f64>(), h))
        })
        .fold(
            None,
            |best: Option<(f64, &VmHost)>, (score, h)| match best {
                Some((top, _)) if top >= score => best,
                _ => Some((score, h)),
            },
        )
        .map(|(_, h)| h)
}

/// The Go provider's `parent`: the system ID of the VM host's machine (its
/// name for a host MAAS does not manage).
fn parent_of(host: &VmHost) -> String {
    host.host.clone().unwrap_or_else(|| host.name.clone())
}

fn record_parent(r: &mut MachineReconciling, host: &VmHost) -> Result<(), Error> {
    let parent = parent_of(host);
    if r.object.spec.options().parent.as_deref() == Some(parent.as_str()) {
        return Ok(());
    }
    r.patch(&json!({"spec": {"parent": parent}}))?;
    r.object.spec.options_mut().parent = Some(parent);
    Ok(())
}

/// On delete, the VM this object composed (a VM with our hostname) is
/// decomposed (`DELETE machines/<id>/`), not released: when `to_release`
/// holds it (ours by identity), or nobody holds it (composed, never
/// allocated). It leaves `to_release`.
pub(super) fn decompose_ours(
    r: &mut MachineReconciling,
    identity: &Identity,
    to_release: &mut Vec<String>,
) -> Result<(), Error> {
    let by_hostname = maas::MachineFilter::by_hostname(&hostname(identity));
    for vm in r.maas()?.client().machines(&by_hostname)? {
        let id = vm.system_id;
        if vm.pod.is_none() || !(vm.owner.is_none() || to_release.contains(&id)) {
            continue;
        }
        match r.maas()?.write(&id, |client| client.delete_machine(&id)) {
            Ok(()) => r.normal_event("VMDecomposed", &format!("Deleted VM {id:?}")),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        to_release.retain(|s| *s != id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(id: i64, name: &str, cores: f64, memory: f64, storage_gb: f64) -> VmHost {
        VmHost {
            id,
            name: name.into(),
            kind: "lxd".into(),
            zone: "az1".into(),
            pool: "vms".into(),
            free_cores: cores,
            free_memory: memory,
            free_storage: storage_gb * 1e9,
            ..VmHost::default()
        }
    }

    #[test]
    fn the_host_with_most_headroom_among_the_eligible_wins() {
        let vm = ComposeRequest {
            cores: 2,
            memory_mib: 4096,
            disk_gb: 60,
            ..ComposeRequest::default()
        };
        let mut tagged = host(4, "tagged", 64.0, 262_144.0, 4000.0);
        tagged.tags = vec!["fast".into()];
        let hosts = vec![
            host(1, "small", 4.0, 8192.0, 200.0),
            host(2, "big", 16.0, 65536.0, 1000.0),
            host(3, "full", 1.0, 65536.0, 1000.0),
            tagged,
        ];
        let fast = vec!["fast".to_string()];
        let any = Wanted {
            kind: "lxd",
            pool: Some("vms"),
            zone: Some("az1"),
            tags: &[],
            parent: None,
        };
        let pick = |w: &Wanted| choose_host(&hosts, w, &vm).map(|h| h.name.clone());
        assert_eq!(pick(&any).as_deref(), Some("tagged"));
        assert_eq!(
            pick(&Wanted { tags: &fast, ..any }).as_deref(),
            Some("tagged")
        );
        let pinned = Wanted {
            parent: Some("small"),
            ..any
        };
        assert_eq!(pick(&pinned).as_deref(), Some("small"));
        let full = Wanted {
            parent: Some("full"),
            ..any
        };
        assert_eq!(pick(&full), None, "no room for 2 cores");
        assert_eq!(
            pick(&Wanted {
                zone: Some("az2"),
                ..any
            }),
            None
        );
        assert_eq!(
            pick(&Wanted {
                kind: "virsh",
                ..any
            }),
            None
        );
        let not_tagged: Vec<VmHost> = hosts
            .iter()
            .filter(|h| h.tags.is_empty())
            .cloned()
            .collect();
        let best = choose_host(&not_tagged, &any, &vm).map(|h| h.name.as_str());
        assert_eq!(best, Some("big"), "most headroom among those with room");
    }

    #[test]
    fn the_hostname_is_a_dns_label_from_the_identity() {
        let meta = crate::api::ObjectMeta {
            namespace: "team-a".into(),
            name: "Worker.0_x".into(),
            uid: "3F2A9C1B-0000-4000-8000-000000000001".into(),
            ..Default::default()
        };
        let identity = Identity::new_for(&meta).unwrap();
        assert_eq!(hostname(&identity), "worker-0-x-3f2a9c1b");
    }
}
