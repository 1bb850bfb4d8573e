//! MaasMachineTemplate `status.capacity` and `status.nodeInfo`: what the
//! cluster-autoscaler reads to scale a MachineDeployment up from zero
//! (Cluster API's autoscale-from-zero contract for infrastructure
//! templates).
//!
//! ```text
//! informer (templates) ─► spec changed (generation) ─► wake ─┐
//! every `period` ───────────────────────────────────────────┴─► (leader only)
//!   one MAAS machine list ─► per template: the SMALLEST machine matching its
//!   constraints (controllers::matching) ─► status diff ─► merge patch /status
//! ```
//!
//! Never over-promise: each figure is the minimum over every matching
//! machine, whatever its state; `ephemeral-storage` is stated only when the
//! template asks for a root disk size (`minDiskSize`, which MAAS guarantees;
//! MAAS's machine list gives the total of all disks, not the root disk);
//! `architecture` only when every match has the same one. With no match,
//! capacity and nodeInfo are removed: the autoscaler then cannot scale that
//! group from zero, rather than build nodes that do not exist. MAAS is asked
//! with the controller-wide credentials.

use std::collections::{BTreeMap, BTreeSet};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::{select, unbounded, Receiver};
use serde_json::{json, Value};

use super::StartError;
use crate::controllers::{matching, Error};

use crate::api::{MaasMachineSpec, MaasMachineTemplate, MaasMachineTemplateStatus, NodeInfo};
use crate::kube::{self, merge_patch, resources};
use crate::maas::{self, MaasApi, MachineFilter};
use crate::runtime::{Event, Informer, InformerConfig, LeaderGate, ObjectKey, Shutdown, Store};

/// How long to gather spec changes before one refresh.
const BATCH: Duration = Duration::from_secs(1);
/// The next try after MAAS or the API server failed.
const RETRY: Duration = Duration::from_secs(30);

/// The status a template's constraints earn from `machines`.
pub fn desired_status(
    spec: &MaasMachineSpec,
    machines: &[maas::Machine],
) -> MaasMachineTemplateStatus {
    let Some(smallest) = matching::smallest(spec, machines) else {
        return MaasMachineTemplateStatus::default();
    };
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_string(), smallest.cpu.to_string());
    capacity.insert("memory".to_string(), format!("{}Mi", smallest.memory_mib));
    // MAAS's `storage` constraint, when given, replaces minDiskSize.
    if let Some(gb) = spec
        .min_disk_size
        .filter(|gb| *gb > 0 && spec.options().storage.is_none())
    {
        capacity.insert("ephemeral-storage".to_string(), format!("{gb}G"));
    }
    let operating_system = if spec.image.trim().starts_with("windows") {
        "windows"
    } else {
        "linux"
    };
    MaasMachineTemplateStatus {
        capacity,
        node_info: Some(NodeInfo {
            architecture: smallest.architecture.unwrap_or_default(),
            operating_system: operating_system.to_string(),
        }),
    }
}

/// The merge patch of `/status` from what the template shows to `desired`,
/// or None when they agree.
fn status_patch(
    template: &MaasMachineTemplate,
    desired: &MaasMachineTemplateStatus,
) -> Option<Value> {
    let as_value = |s: &MaasMachineTemplateStatus| serde_json::to_value(s).unwrap_or(Value::Null);
    let current = template
        .status
        .as_ref()
        .map(as_value)
        .unwrap_or_else(|| json!({}));
    merge_patch::diff(&current, &as_value(desired)).map(|diff| json!({ "status": diff }))
}

/// Starts the template informer and the refresh thread; both stop on
/// `shutdown` (the informer via [`Informer::stop`]).
pub fn spawn(
    kube: kube::Client,
    maas: maas::Client,
    informer: InformerConfig,
    period: Duration,
    gate: LeaderGate,
    shutdown: Shutdown,
) -> Result<(Informer, JoinHandle<()>), StartError> {
    let store: Store<MaasMachineTemplate> = Store::new();
    let (wake, woken) = unbounded::<ObjectKey>();
    let handler = move |event: &Event<MaasMachineTemplate>| {
        let changed = match event {
            Event::Added(t) => Some(t),
            Event::Modified { old, new } if old.metadata.generation != new.metadata.generation => {
                Some(new)
            }
            Event::Modified { .. } | Event::Deleted(_) => None,
        };
        if let Some(key) = changed.and_then(|t| t.metadata.key()) {
            let _ = wake.send(key);
        }
    };
    let informer = Informer::spawn(
        kube.clone(),
        informer,
        store.clone(),
        handler,
        shutdown.clone(),
    )
    .map_err(StartError::spawn("maasmachinetemplates informer"))?;
    let refresher = Refresher {
        kube,
        maas,
        store,
        gate,
    };
    let thread = thread::Builder::new()
        .name("template-capacity".into())
        .spawn(move || refresher.run(&woken, period, &shutdown))
        .map_err(StartError::spawn("template capacity thread"))?;
    Ok((informer, thread))
}

struct Refresher {
    kube: kube::Client,
    maas: maas::Client,
    store: Store<MaasMachineTemplate>,
    gate: LeaderGate,
}

impl Refresher {
    fn run(&self, woken: &Receiver<ObjectKey>, period: Duration, shutdown: &Shutdown) {
        let mut wait = period;
        loop {
            let mut keys: BTreeSet<ObjectKey> = BTreeSet::new();
            select! {
                recv(shutdown.receiver()) -> _ => return,
                recv(woken) -> key => {
                    keys.extend(key.ok());
                    if shutdown.sleep(BATCH) {
                        return;
                    }
                    keys.extend(woken.try_iter());
                }
                default(wait) => keys.extend(self.store.keys()),
            }
            if !self.gate.is_leader() || keys.is_empty() {
                wait = period;
                continue;
            }
            wait = match self.refresh(&keys) {
                Ok(()) => period,
                Err(e) => {
                    log::warn!("template capacity: {e}; trying again in {RETRY:?}");
                    period.min(RETRY)
                }
            };
        }
    }

    /// One MAAS list for all `keys`, then one status patch per template
    /// whose status changes.
    fn refresh(&self, keys: &BTreeSet<ObjectKey>) -> Result<(), Error> {
        let machines = self.maas.machines(&MachineFilter::default())?;
        let mut failed = None;
        for key in keys {
            let Some(template) = self.store.get(key) else {
                continue;
            };
            let desired = desired_status(&template.spec.template.spec, &machines);
            let Some(patch) = status_patch(&template, &desired) else {
                continue;
            };
            let meta = &template.metadata;
            match self.kube.patch_status_merge(
                &resources::MAAS_MACHINE_TEMPLATES,
                Some(&meta.namespace),
                &meta.name,
                &patch,
            ) {
                Ok(_) => log::info!(
                    "MaasMachineTemplate {}/{}: capacity {:?}",
                    meta.namespace,
                    meta.name,
                    desired.capacity
                ),
                Err(e) if e.is_not_found() => {}
                Err(e) => failed = Some(Error::Kube(e)),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maas::MachineStatus;

    fn machine(cpu: u32, memory: u64, arch: &str) -> maas::Machine {
        maas::Machine {
            cpu_count: cpu,
            memory,
            storage: 500_000.0,
            pool: "workers".into(),
            architecture: arch.into(),
            status: MachineStatus::Deployed,
            ..maas::Machine::default()
        }
    }

    fn spec() -> MaasMachineSpec {
        MaasMachineSpec {
            min_cpu: Some(4),
            min_memory: Some(8192),
            resource_pool: Some("workers".into()),
            image: "ubuntu/jammy".into(),
            ..MaasMachineSpec::default()
        }
    }

    #[test]
    fn capacity_is_the_smallest_match_in_kubernetes_quantities() {
        let machines = [
            machine(16, 65536, "amd64/generic"),
            machine(8, 131072, "amd64/generic"),
            machine(2, 262144, "amd64/generic"), // too few CPUs
        ];
        let status = desired_status(&spec(), &machines);
        let capacity: Vec<(&str, &str)> = status
            .capacity
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(capacity, [("cpu", "8"), ("memory", "65536Mi")]);
        let info = status.node_info.unwrap();
        assert_eq!(
            (info.architecture.as_str(), info.operating_system.as_str()),
            ("amd64", "linux")
        );
        let mut with_disk = spec();
        with_disk.min_disk_size = Some(100);
        let status = desired_status(&with_disk, &machines);
        assert_eq!(status.capacity["ephemeral-storage"], "100G");
    }

    #[test]
    fn no_match_promises_nothing_and_the_patch_removes_what_was_promised() {
        let status = desired_status(&spec(), &[machine(2, 1024, "amd64/generic")]);
        assert_eq!(status, MaasMachineTemplateStatus::default());
        let template = MaasMachineTemplate {
            status: Some(desired_status(
                &spec(),
                &[machine(8, 8192, "arm64/generic")],
            )),
            ..MaasMachineTemplate::default()
        };
        let patch = status_patch(&template, &status).unwrap();
        assert_eq!(
            patch,
            json!({"status": {"capacity": null, "nodeInfo": null}})
        );
        let same = template.status.clone().unwrap();
        assert!(status_patch(&template, &same).is_none());
    }
}
