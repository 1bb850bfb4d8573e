//! VM hosts (MAAS ≤ 3.8, `vm-hosts/`, formerly `pods/`), as
//! `src/maasserver/api/vmhosts.py` and `forms/pods.py` (`ComposeMachineForm`)
//! of canonical/maas 3.x have them: a host's free resources are its total
//! less what its VMs take; `op=compose` (admin only) makes a machine of
//! the asked cores, memory (MiB) and storage (GB) that commissions to
//! Ready; `DELETE machines/<id>/` of a VM decomposes it, freeing what it
//! took. From MAAS 3.9 on every VM host endpoint answers 410
//! (`maasserver/api/gone.py`).

use std::time::Duration;

use serde_json::{json, Value};

use super::{fail, field_error, Outcome, Scheduled, Step, World};
use crate::inventory::{MachineEntry, VmHostEntry};

/// `VMHOST_REMOVED_MESSAGE`, the body of the 410.
pub const REMOVED: &str = "VM host (KVM) support has been removed from MAAS.";

#[derive(Debug, Clone)]
pub struct VmHostRec {
    pub id: i64,
    pub entry: VmHostEntry,
}

/// cores, memory (MiB), storage (bytes).
type Resources = (i64, i64, i64);

impl World {
    pub fn add_vm_host(&mut self, h: &VmHostEntry) -> Result<(), String> {
        let mut entry = h.clone();
        entry.zone.get_or_insert_with(|| "default".into());
        entry.pool.get_or_insert_with(|| "default".into());
        entry.kind.get_or_insert_with(|| "lxd".into());
        if !self
            .zones
            .iter()
            .any(|z| Some(&z.name) == entry.zone.as_ref())
            || !self
                .pools
                .iter()
                .any(|p| Some(&p.name) == entry.pool.as_ref())
        {
            return Err(format!("VM host {}: unknown zone or pool", h.name));
        }
        let id = self.vm_hosts.len() as i64 + 1;
        self.vm_hosts.push(VmHostRec { id, entry });
        Ok(())
    }

    /// Whether this MAAS still has VM hosts (removed after 3.8).
    pub fn has_vm_hosts(&self) -> bool {
        !self.settings.release_at_least(3, 9)
    }

    pub fn vm_host_index(&self, id: &str) -> Outcome<usize> {
        self.vm_hosts
            .iter()
            .position(|h| h.id.to_string() == id)
            .map_or_else(|| fail(404, "No Pod matches the given query."), Ok)
    }

    fn vm_host_used(&self, id: i64) -> Resources {
        self.machines
            .iter()
            .filter(|m| m.pod.as_ref().is_some_and(|(pod, _)| *pod == id))
            .fold((0, 0, 0), |(c, m, s), vm| {
                let disk: u64 = vm.disks_gb.iter().sum();
                (
                    c + i64::from(vm.cpu_count),
                    m + vm.memory as i64,
                    s + disk as i64 * 1_000_000_000,
                )
            })
    }

    fn vm_host_available(&self, index: usize) -> Resources {
        let h = &self.vm_hosts[index];
        let (c, m, s) = self.vm_host_used(h.id);
        let e = &h.entry;
        (
            i64::from(e.cores) - c,
            e.memory as i64 - m,
            e.storage_gb as i64 * 1_000_000_000 - s,
        )
    }

    /// `VmHostHandler`'s fields (`DISPLAYED_POD_FIELDS`).
    pub fn vm_host_json(&self, index: usize) -> Value {
        let h = &self.vm_hosts[index];
        let e = &h.entry;
        let resources = |(cores, memory, storage): Resources| json!({"cores": cores, "memory": memory, "local_storage": storage});
        let total = (
            i64::from(e.cores),
            e.memory as i64,
            e.storage_gb as i64 * 1_000_000_000,
        );
        let used = self.vm_host_used(h.id);
        let available = self.vm_host_available(index);
        let named = |list: &[super::Named], name: &Option<String>, uri: &str| {
            list.iter().find(|n| Some(&n.name) == name.as_ref()).map(|n| {
                json!({"id": n.id, "name": n.name, "description": n.description,
                       "resource_uri": format!("/MAAS/api/2.0/{uri}/{}/", if uri == "zones" { n.name.clone() } else { n.id.to_string() })})
            })
        };
        let host = e
            .host
            .as_ref()
            .and_then(|name| self.machines.iter().find(|m| &m.hostname == name))
            .map(|m| m.system_id.clone());
        json!({
            "id": h.id, "name": e.name, "tags": e.tags, "type": e.kind,
            "architectures": ["amd64/generic"],
            "capabilities": ["composable", "dynamic_local_storage", "over_commit", "storage_pools"],
            "total": resources(total), "used": resources(used), "available": resources(available),
            "zone": named(&self.zones, &e.zone, "zones"),
            "pool": named(&self.pools, &e.pool, "resourcepool"),
            "cpu_over_commit_ratio": 1.0, "memory_over_commit_ratio": 1.0,
            "storage_pools": [{"id": "default", "name": "default", "type": "dir",
                "path": "/var/snap/lxd/common/lxd/storage-pools/default",
                "total": total.2, "used": used.2, "available": available.2, "default": true}],
            "host": {"system_id": host, "__incomplete__": true},
            "default_macvlan_mode": "", "version": "5.21",
            "resource_uri": format!("/MAAS/api/2.0/vm-hosts/{}/", h.id),
        })
    }

    /// `op=compose`: the new machine's index.
    pub fn compose(&mut self, index: usize, params: &[(String, String)]) -> Outcome<usize> {
        let get = |k: &str| {
            params
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        let (free_cores, free_memory, free_storage) = self.vm_host_available(index);
        // IntegerField(min_value, max_value=hints): the hints are what is free.
        let int = |k: &str, default: i64, min: i64, max: i64| -> Outcome<i64> {
            let Some(text) = get(k).filter(|t| !t.is_empty()) else {
                return Ok(default);
            };
            let Ok(n) = text.trim().parse::<i64>() else {
                return field_error(k, "Enter a whole number.");
            };
            if n < min {
                return field_error(
                    k,
                    format!("Ensure this value is greater than or equal to {min}."),
                );
            }
            if n > max {
                return field_error(
                    k,
                    format!("Ensure this value is less than or equal to {max}."),
                );
            }
            Ok(n)
        };
        let cores = int("cores", 1, 1, free_cores)?;
        let memory = int("memory", 2048, 1024, free_memory)?;
        // `label:size(tag,...)`, comma-separated, sizes in GB.
        let storage = get("storage").unwrap_or("root:8");
        let Some(sizes) = super::machines::parse_storage(storage).filter(|s| !s.is_empty()) else {
            return field_error(
                "storage",
                format!("Malformed storage constraint, \"{storage}\"."),
            );
        };
        let disks_gb: Vec<u64> = sizes.iter().map(|gb| gb.ceil() as u64).collect();
        let wanted_storage = disks_gb.iter().sum::<u64>() as i64 * 1_000_000_000;
        if wanted_storage > free_storage {
            let name = &self.vm_hosts[index].entry.name;
            return fail(
                503,
                format!(
                    "Unable to compose KVM instance in '{name}'. There is not enough free storage."
                ),
            );
        }
        let hostname = match get("hostname").filter(|h| !h.is_empty()) {
            Some(h) if self.machines.iter().any(|m| m.hostname == h) => {
                return field_error(
                    "hostname",
                    format!("Node with hostname \"{h}\" already exists"),
                );
            }
            Some(h) => h.to_string(),
            None => format!("vm-{}", self.machines.len() + 1),
        };
        // ModelChoiceField by id; the zone defaults to the default zone,
        // the pool to the host's.
        let choice =
            |k: &str, list: &[super::Named], default: Option<String>| -> Outcome<Option<String>> {
                match get(k).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(id) => match list.iter().find(|n| n.id.to_string() == id) {
                    Some(n) => Ok(Some(n.name.clone())),
                    None => field_error(
                        k,
                        "Select a valid choice. That choice is not one of the available choices.",
                    ),
                },
            }
            };
        let entry = self.vm_hosts[index].entry.clone();
        let zone = choice("zone", &self.zones, Some("default".into()))?;
        let pool = choice("pool", &self.pools, entry.pool.clone())?;
        let address = entry
            .vm_addresses
            .iter()
            .find(|ip| {
                !self.machines.iter().any(|m| {
                    m.ip_addresses().contains(ip)
                        || m.interfaces
                            .iter()
                            .flat_map(|i| &i.links)
                            .any(|l| l.planned.as_ref() == Some(*ip))
                })
            })
            .cloned();
        let system_id = self
            .add_machine(&MachineEntry {
                hostname,
                cpu_count: Some(cores as u32),
                memory: Some(memory as u64),
                disks_gb,
                zone,
                pool,
                ip_addresses: address.into_iter().collect(),
                power_type: entry.kind.clone(),
                status: Some("Commissioning".into()),
                power_state: Some("on".into()),
                ..MachineEntry::default()
            })
            .map_err(|e| super::Failure::Text(503, e))?;
        let vm_index = self.machine_index(&system_id)?;
        let commission = Duration::from_secs_f64(self.settings.commission_seconds.max(0.0));
        let m = &mut self.machines[vm_index];
        m.pod = Some((self.vm_hosts[index].id, entry.name.clone()));
        m.static_json = crate::render::machine_static(m);
        m.timeline.push_back(Scheduled {
            at: std::time::Instant::now() + commission,
            step: Step::CommissionDone,
        });
        Ok(vm_index)
    }
}
