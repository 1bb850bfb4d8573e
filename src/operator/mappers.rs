//! Watch events → the keys to reconcile.
//!
//! A change matters only if a reconcile could decide differently because of
//! it. In particular our own status writes do not re-queue the object that
//! was written (no reconcile storm, no MAAS read per status patch), and
//! Cluster API's frequent status updates of Machines and Clusters are
//! ignored unless they touch a field we read.
//!
//! Mappers read the typed objects of the events and the other kinds'
//! caches, which exist before any informer starts: every event can be
//! mapped to everything it affects from the first one on.

use std::sync::Arc;

use crate::api::capi::{Cluster, Machine, CLUSTER_NAME_LABEL};
use crate::api::maas_cluster::{self, Network};
use crate::api::{
    maas_machine, Condition, MaasCluster, MaasMachine, MaasRemediation, MachineAddress, ObjectMeta,
};
use crate::controllers::caches::Caches;
use crate::runtime::{Event, ObjectKey};

/// What to enqueue for one event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Keys {
    pub maas_clusters: Vec<ObjectKey>,
    pub maas_machines: Vec<ObjectKey>,
    pub maas_remediations: Vec<ObjectKey>,
}

/// Has anything but `status` (and bookkeeping) changed? Spec changes bump
/// `generation`; metadata we act on (labels, annotations, finalizers,
/// owners, deletion) is compared directly.
fn spec_or_meta_changed(old: &ObjectMeta, new: &ObjectMeta) -> bool {
    old.generation != new.generation
        || old.labels != new.labels
        || old.annotations != new.annotations
        || old.finalizers != new.finalizers
        || old.owner_references != new.owner_references
        || old.deletion_timestamp != new.deletion_timestamp
}

/// The MaasCluster named by a Cluster's `spec.infrastructureRef`.
fn infra_cluster_of(cluster: &Cluster) -> Option<ObjectKey> {
    let r = cluster.spec.infrastructure_ref.as_ref()?;
    if r.kind != maas_cluster::KIND {
        return None;
    }
    ObjectKey::from_parts(&cluster.metadata.namespace, &r.name)
}

fn keys_of(objects: Vec<Arc<MaasMachine>>) -> Vec<ObjectKey> {
    objects.iter().filter_map(|m| m.metadata.key()).collect()
}

/// What a MaasMachine reconcile reads of its MaasCluster's status.
fn read_by_machines(c: &MaasCluster) -> Option<(&[Condition], Option<&Network>, bool)> {
    let status = c.status.as_ref()?;
    Some((&status.conditions, status.network.as_ref(), status.ready))
}

/// What the MaasCluster reconcile (the DNS record) reads of a MaasMachine.
fn read_by_cluster(m: &MaasMachine) -> (Option<&str>, bool, &[MachineAddress], bool) {
    let status = m.status.as_ref();
    (
        status.and_then(|s| s.machine_state.as_deref()),
        status.is_some_and(|s| s.machine_powered),
        status.map_or(&[], |s| s.addresses.as_slice()),
        m.metadata.is_being_deleted(),
    )
}

/// MaasCluster: itself on spec/metadata changes; its MaasMachines when
/// what they read from it changed (DNS name, API availability, readiness).
pub fn on_maas_cluster(event: &Event<MaasCluster>, caches: &Caches) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let (own, dependents) = match event {
        Event::Added(_) | Event::Deleted(_) => (true, false),
        Event::Modified { old, new } => (
            spec_or_meta_changed(&old.metadata, &new.metadata),
            read_by_machines(old) != read_by_machines(new),
        ),
    };
    if own {
        keys.maas_clusters.extend(obj.metadata.key());
    }
    if dependents {
        if let Some(cluster) = obj.metadata.label(CLUSTER_NAME_LABEL) {
            keys.maas_machines =
                keys_of(caches.maas_machines_of_cluster(&obj.metadata.namespace, cluster));
        }
    }
    keys
}

/// MaasMachine: itself on spec/metadata changes; for a control-plane
/// machine also its MaasCluster when its state, power or addresses changed
/// (the DNS record follows them) or it is created, deleted or deleting;
/// for any machine that is gone, its MaasCluster if that is being deleted
/// (it waits for its last MaasMachine).
pub fn on_maas_machine(event: &Event<MaasMachine>, caches: &Caches) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    if let Event::Deleted(_) = event {
        keys.maas_clusters = deleting_maas_clusters_of(obj, caches);
    }
    let (own, cluster_side) = match event {
        Event::Added(_) | Event::Deleted(_) => (true, true),
        Event::Modified { old, new } => (
            spec_or_meta_changed(&old.metadata, &new.metadata),
            read_by_cluster(old) != read_by_cluster(new),
        ),
    };
    if own {
        keys.maas_machines.extend(obj.metadata.key());
    }
    if !cluster_side || !obj.is_control_plane(caches.owner_machine(obj).as_deref()) {
        return keys;
    }
    if let Some(cluster) = obj.metadata.label(CLUSTER_NAME_LABEL) {
        let cluster = caches
            .clusters
            .get(&ObjectKey::new(&obj.metadata.namespace, cluster));
        let key = cluster.as_deref().and_then(infra_cluster_of);
        if let Some(key) = key.filter(|k| !keys.maas_clusters.contains(k)) {
            keys.maas_clusters.push(key);
        }
    }
    keys
}

/// The MaasClusters being deleted that count this MaasMachine among
/// theirs: labelled with its cluster name, or owned by that Cluster (as the
/// MaasCluster's deletion counts them; the Cluster may be gone already).
fn deleting_maas_clusters_of(mm: &MaasMachine, caches: &Caches) -> Vec<ObjectKey> {
    let Some(cluster) = mm.metadata.label(CLUSTER_NAME_LABEL) else {
        return Vec::new();
    };
    caches
        .maas_clusters
        .list_namespace(&mm.metadata.namespace)
        .iter()
        .filter(|mc| mc.metadata.is_being_deleted())
        .filter(|mc| {
            mc.metadata.label(CLUSTER_NAME_LABEL) == Some(cluster)
                || mc
                    .metadata
                    .owner(crate::api::capi::GROUP, crate::api::capi::CLUSTER_KIND)
                    .is_some_and(|o| o.name == cluster)
        })
        .filter_map(|mc| mc.metadata.key())
        .collect()
}

/// Cluster: its MaasCluster and MaasMachines when pause, infrastructure
/// readiness, the endpoint or the spec changed.
pub fn on_cluster(event: &Event<Cluster>, caches: &Caches) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let relevant = match event {
        Event::Added(_) | Event::Deleted(_) => true,
        Event::Modified { old, new } => {
            let read = |c: &Cluster| {
                (
                    c.spec.paused,
                    c.status
                        .initialization
                        .as_ref()
                        .and_then(|i| i.infrastructure_provisioned),
                    c.status.infrastructure_ready,
                )
            };
            spec_or_meta_changed(&old.metadata, &new.metadata) || read(old) != read(new)
        }
    };
    if !relevant {
        return keys;
    }
    keys.maas_clusters.extend(infra_cluster_of(obj));
    if !obj.metadata.name.is_empty() {
        keys.maas_machines =
            keys_of(caches.maas_machines_of_cluster(&obj.metadata.namespace, &obj.metadata.name));
    }
    keys
}

/// Machine: its MaasMachine (`spec.infrastructureRef`) when the spec (e.g.
/// the bootstrap data Secret) or metadata changed; for a control-plane
/// Machine whose deletion began, also its cluster's MaasCluster (the
/// machine leaves the DNS record before its drain).
pub fn on_machine(event: &Event<Machine>, caches: &Caches) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let (relevant, deletion_began) = match event {
        Event::Added(new) => (true, new.metadata.is_being_deleted()),
        Event::Deleted(_) => (true, false),
        Event::Modified { old, new } => (
            spec_or_meta_changed(&old.metadata, &new.metadata),
            !old.metadata.is_being_deleted() && new.metadata.is_being_deleted(),
        ),
    };
    let infra = obj.spec.infrastructure_ref.as_ref();
    if let Some(r) = infra.filter(|r| relevant && r.kind == maas_machine::KIND) {
        keys.maas_machines
            .extend(ObjectKey::from_parts(&obj.metadata.namespace, &r.name));
    }
    if deletion_began && obj.is_control_plane() && !obj.spec.cluster_name.is_empty() {
        let cluster = caches.clusters.get(&ObjectKey::new(
            &obj.metadata.namespace,
            &obj.spec.cluster_name,
        ));
        keys.maas_clusters
            .extend(cluster.as_deref().and_then(infra_cluster_of));
    }
    keys
}

/// MaasRemediation: itself when created, deleted, or its spec or metadata
/// changed (a deletion pending); our own status writes are not events.
pub fn on_maas_remediation(event: &Event<MaasRemediation>) -> Keys {
    let relevant = match event {
        Event::Added(_) | Event::Deleted(_) => true,
        Event::Modified { old, new } => spec_or_meta_changed(&old.metadata, &new.metadata),
    };
    let mut keys = Keys::default();
    if relevant {
        keys.maas_remediations.extend(event.object().metadata.key());
    }
    keys
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    use super::*;

    fn typed<T: DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn modified<T: DeserializeOwned>(old: Value, new: Value) -> Event<T> {
        Event::Modified {
            old: typed(old),
            new: typed(new),
        }
    }

    fn mm(rv: &str, status: Value) -> Value {
        json!({"metadata": {"name": "m1", "namespace": "ns", "resourceVersion": rv, "generation": 1,
                            "labels": {"cluster.x-k8s.io/cluster-name": "c1", "cluster.x-k8s.io/control-plane": ""}},
               "status": status})
    }

    #[test]
    fn our_own_status_writes_do_not_requeue_the_object() {
        let keys = on_maas_machine(
            &modified(
                mm("1", json!({"conditions": []})),
                mm(
                    "2",
                    json!({"conditions": [{"type": "Ready", "status": "True"}]}),
                ),
            ),
            &Caches::new(),
        );
        assert_eq!(keys, Keys::default());
    }

    #[test]
    fn control_plane_state_changes_requeue_the_cluster() {
        let caches = Caches::new();
        let event = modified(
            mm("1", json!({"machinePowered": true})),
            mm("2", json!({"machinePowered": false})),
        );
        // Without the Cluster in the cache we cannot tell which MaasCluster.
        assert_eq!(on_maas_machine(&event, &caches), Keys::default());
        let keys = on_maas_machine(&Event::Deleted(typed(mm("3", json!({})))), &caches);
        assert_eq!(keys.maas_machines, vec![ObjectKey::new("ns", "m1")]);
    }

    #[test]
    fn machine_status_churn_is_ignored_but_bootstrap_data_is_not() {
        let machine = |generation: i64, phase: &str| {
            json!({"metadata": {"name": "m1", "namespace": "ns", "generation": generation},
                   "spec": {"infrastructureRef": {"kind": "MaasMachine", "name": "mm1"}},
                   "status": {"phase": phase}})
        };
        assert_eq!(
            on_machine(
                &modified(machine(1, "Provisioning"), machine(1, "Provisioned")),
                &Caches::new()
            ),
            Keys::default()
        );
        let keys = on_machine(
            &modified(machine(1, "Provisioning"), machine(2, "Provisioning")),
            &Caches::new(),
        );
        assert_eq!(keys.maas_machines, vec![ObjectKey::new("ns", "mm1")]);
    }

    /// A control-plane machine leaves the DNS record before its drain: the
    /// MaasCluster hears of the deletion at once.
    #[test]
    fn a_control_plane_deletion_requeues_the_cluster() {
        let caches = Caches::new();
        caches
            .clusters
            .upsert(typed(json!({"metadata": {"name": "c1", "namespace": "ns"},
                         "spec": {"infrastructureRef": {"kind": "MaasCluster", "name": "mc1"}}})));
        let machine = |control_plane: bool, deleting: bool| {
            let mut v = json!({"metadata": {"name": "m1", "namespace": "ns", "generation": 1, "labels": {}},
                               "spec": {"clusterName": "c1", "infrastructureRef": {"kind": "MaasMachine", "name": "mm1"}}});
            if control_plane {
                v["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = json!("");
            }
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-12-02T00:00:00Z");
            }
            v
        };
        let keys = on_machine(
            &modified(machine(true, false), machine(true, true)),
            &caches,
        );
        assert_eq!(keys.maas_clusters, vec![ObjectKey::new("ns", "mc1")]);
        assert_eq!(keys.maas_machines, vec![ObjectKey::new("ns", "mm1")]);
        let worker = on_machine(
            &modified(machine(false, false), machine(false, true)),
            &caches,
        );
        assert!(worker.maas_clusters.is_empty());
        let later = on_machine(&modified(machine(true, true), machine(true, true)), &caches);
        assert!(
            later.maas_clusters.is_empty(),
            "only when the deletion begins"
        );
    }

    #[test]
    fn a_remediation_is_queued_on_creation_and_deletion_not_on_its_status() {
        let r = |rv: &str, deleting: bool, phase: &str| {
            let mut v = json!({"metadata": {"name": "m1", "namespace": "ns", "resourceVersion": rv, "generation": 1},
                               "status": {"phase": phase}});
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            v
        };
        let own = vec![ObjectKey::new("ns", "m1")];
        let added = on_maas_remediation(&Event::Added(typed(r("1", false, ""))));
        assert_eq!(added.maas_remediations, own);
        let status_only = modified(r("1", false, ""), r("2", false, "Running"));
        assert_eq!(on_maas_remediation(&status_only), Keys::default());
        let deleting = modified(r("2", false, "Running"), r("3", true, "Running"));
        assert_eq!(on_maas_remediation(&deleting).maas_remediations, own);
    }

    #[test]
    fn cluster_pause_and_infrastructure_readiness_matter() {
        let cluster = |paused: bool, ready: bool| {
            json!({"metadata": {"name": "c1", "namespace": "ns", "generation": 1},
                   "spec": {"paused": paused, "infrastructureRef": {"kind": "MaasCluster", "name": "mc1"}},
                   "status": {"initialization": {"infrastructureProvisioned": ready}, "phase": "x"}})
        };
        let caches = Caches::new();
        let keys = on_cluster(
            &modified(cluster(false, false), cluster(false, true)),
            &caches,
        );
        assert_eq!(keys.maas_clusters, vec![ObjectKey::new("ns", "mc1")]);
        let mut churn = cluster(false, true);
        churn["status"]["phase"] = json!("Provisioned");
        assert_eq!(
            on_cluster(&modified(cluster(false, true), churn), &caches),
            Keys::default()
        );
    }
}

#[cfg(test)]
mod realistic {
    use serde::de::DeserializeOwned;
    use serde_json::{json, Value};

    use super::*;

    fn typed<T: DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn control_plane_status_change_enqueues_its_maas_cluster() {
        let caches = Caches::new();
        let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns", "generation": 2},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": "c1"}}});
        caches.clusters.upsert(typed(cluster));
        let mm = |state: &str| {
            json!({"metadata": {"name": "c1-cp-0", "namespace": "ns", "generation": 1,
                                "labels": {"cluster.x-k8s.io/control-plane": "", "cluster.x-k8s.io/cluster-name": "c1"}},
                   "status": {"machineState": state}})
        };
        let event = Event::Modified {
            old: typed(mm("Deploying")),
            new: typed(mm("Deployed")),
        };
        let keys = on_maas_machine(&event, &caches);
        assert_eq!(keys.maas_clusters, vec![ObjectKey::new("ns", "c1")]);
    }

    #[test]
    fn a_control_plane_label_on_the_owner_machine_counts() {
        let caches = Caches::new();
        let cluster = json!({"metadata": {"name": "c1", "namespace": "ns"},
            "spec": {"infrastructureRef": {"kind": "MaasCluster", "name": "mc1"}}});
        caches.clusters.upsert(typed(cluster));
        let mm = |state: &str| {
            json!({"metadata": {"name": "m1", "namespace": "ns",
                                "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1", "uid": "u"}]},
                   "status": {"machineState": state}})
        };
        let event = Event::Modified {
            old: typed(mm("Deploying")),
            new: typed(mm("Deployed")),
        };
        assert_eq!(
            on_maas_machine(&event, &caches),
            Keys::default(),
            "a worker"
        );
        let machine = json!({"metadata": {"name": "m1", "namespace": "ns", "labels": {"cluster.x-k8s.io/control-plane": ""}}});
        caches.machines.upsert(typed(machine));
        assert_eq!(
            on_maas_machine(&event, &caches).maas_clusters,
            vec![ObjectKey::new("ns", "mc1")]
        );
    }
}
