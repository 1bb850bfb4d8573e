//! Watch events → the keys to reconcile.
//!
//! A change matters only if a reconcile could decide differently because of
//! it. In particular our own status writes do not re-queue the object that
//! was written (no reconcile storm, no MAAS read per status patch), and
//! Cluster API's frequent status updates of Machines and Clusters are
//! ignored unless they touch a field we read.
//!
//! The stores may not all exist yet when the first events arrive (informers
//! start one after another); then only the object's own key is produced,
//! which is enough because every object is also listed by its own informer.

use serde_json::Value;

use super::adapters::Caches;
use crate::api::capi::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, GROUP, MACHINE_KIND};
use crate::kube::meta;
use crate::runtime::{Event, ObjectKey};

/// What to enqueue for one event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Keys {
    pub maas_clusters: Vec<ObjectKey>,
    pub maas_machines: Vec<ObjectKey>,
}

/// Has anything but `status` (and bookkeeping) changed? Spec changes bump
/// `generation`; metadata we act on (labels, annotations, finalizers,
/// owners, deletion) is compared directly.
fn spec_or_meta_changed(old: &Value, new: &Value) -> bool {
    let m = |v: &Value, field: &str| v["metadata"][field].clone();
    meta::generation(old) != meta::generation(new)
        || [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "deletionTimestamp",
        ]
        .iter()
        .any(|f| m(old, f) != m(new, f))
}

fn changed_at(old: &Value, new: &Value, pointers: &[&str]) -> bool {
    pointers.iter().any(|p| old.pointer(p) != new.pointer(p))
}

fn key_of(obj: &Value) -> Option<ObjectKey> {
    ObjectKey::of(obj)
}

/// The MaasCluster named by a Cluster's `spec.infrastructureRef`.
fn infra_cluster_of(cluster: &Value) -> Option<ObjectKey> {
    let r = &cluster["spec"]["infrastructureRef"];
    if r["kind"].as_str()? != crate::api::maas_cluster::KIND {
        return None;
    }
    Some(ObjectKey::new(
        meta::namespace(cluster)?,
        r["name"].as_str()?,
    ))
}

fn maas_machines_of(caches: &Caches, namespace: &str, cluster: &str) -> Vec<ObjectKey> {
    caches
        .maas_machines
        .list_namespace(namespace)
        .iter()
        .filter(|m| meta::label(m, CLUSTER_NAME_LABEL) == Some(cluster))
        .filter_map(|m| key_of(m))
        .collect()
}

/// MaasCluster: itself on spec/metadata changes; its MaasMachines when
/// what they read from it changed (DNS name, API availability, readiness).
pub fn on_maas_cluster(event: &Event, caches: Option<&Caches>) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let (own, dependents) = match event {
        Event::Added(_) | Event::Deleted(_) => (true, false),
        Event::Modified { old, new } => (
            spec_or_meta_changed(old, new),
            changed_at(
                old,
                new,
                &["/status/conditions", "/status/network", "/status/ready"],
            ),
        ),
    };
    if own {
        keys.maas_clusters.extend(key_of(obj));
    }
    if let (true, Some(caches), Some(ns)) = (dependents, caches, meta::namespace(obj)) {
        if let Some(cluster) = meta::label(obj, CLUSTER_NAME_LABEL) {
            keys.maas_machines = maas_machines_of(caches, ns, cluster);
        }
    }
    keys
}

/// MaasMachine: itself on spec/metadata changes; for a control-plane
/// machine also its MaasCluster when its state, power or addresses changed
/// (the DNS record follows them) or it is created, deleted or deleting.
pub fn on_maas_machine(event: &Event, caches: Option<&Caches>) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let (own, cluster_side) = match event {
        Event::Added(_) | Event::Deleted(_) => (true, true),
        Event::Modified { old, new } => (
            spec_or_meta_changed(old, new),
            changed_at(
                old,
                new,
                &[
                    "/status/machineState",
                    "/status/machinePowered",
                    "/status/addresses",
                    "/metadata/deletionTimestamp",
                ],
            ),
        ),
    };
    if own {
        keys.maas_machines.extend(key_of(obj));
    }
    let Some(caches) = caches.filter(|_| cluster_side) else {
        return keys;
    };
    if !is_control_plane(obj, caches) {
        return keys;
    }
    if let Some((ns, cluster)) = meta::namespace(obj).zip(meta::label(obj, CLUSTER_NAME_LABEL)) {
        let cluster = caches.clusters.get(&ObjectKey::new(ns, cluster));
        keys.maas_clusters
            .extend(cluster.as_deref().and_then(infra_cluster_of));
    }
    keys
}

/// The MaasMachine or its owner Machine carries the control-plane label
/// (only the Machine does when no control-plane provider stamps it).
fn is_control_plane(maas_machine: &Value, caches: &Caches) -> bool {
    if meta::label(maas_machine, CONTROL_PLANE_LABEL).is_some() {
        return true;
    }
    let Some(ns) = meta::namespace(maas_machine) else {
        return false;
    };
    meta::owner_references(maas_machine)
        .iter()
        .filter(|o| o.kind == MACHINE_KIND && o.group() == GROUP)
        .filter_map(|o| caches.machines.get(&ObjectKey::new(ns, &o.name)))
        .any(|machine| meta::label(&machine, CONTROL_PLANE_LABEL).is_some())
}

/// Cluster: its MaasCluster and MaasMachines when pause, infrastructure
/// readiness, the endpoint or the spec changed.
pub fn on_cluster(event: &Event, caches: Option<&Caches>) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let relevant = match event {
        Event::Added(_) | Event::Deleted(_) => true,
        Event::Modified { old, new } => {
            spec_or_meta_changed(old, new)
                || changed_at(
                    old,
                    new,
                    &[
                        "/spec/paused",
                        "/status/initialization/infrastructureProvisioned",
                        "/status/infrastructureReady",
                    ],
                )
        }
    };
    if !relevant {
        return keys;
    }
    keys.maas_clusters.extend(infra_cluster_of(obj));
    if let (Some(caches), Some(ns), Some(name)) = (caches, meta::namespace(obj), meta::name(obj)) {
        keys.maas_machines = maas_machines_of(caches, ns, name);
    }
    keys
}

/// Machine: its MaasMachine (`spec.infrastructureRef`) when the spec (e.g.
/// the bootstrap data Secret) or metadata changed.
pub fn on_machine(event: &Event) -> Keys {
    let mut keys = Keys::default();
    let obj = event.object();
    let relevant = match event {
        Event::Added(_) | Event::Deleted(_) => true,
        Event::Modified { old, new } => spec_or_meta_changed(old, new),
    };
    let r = &obj["spec"]["infrastructureRef"];
    if relevant && r["kind"].as_str() == Some(crate::api::maas_machine::KIND) {
        if let (Some(ns), Some(name)) = (meta::namespace(obj), r["name"].as_str()) {
            keys.maas_machines.push(ObjectKey::new(ns, name));
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn modified(old: Value, new: Value) -> Event {
        Event::Modified {
            old: Arc::new(old),
            new: Arc::new(new),
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
                mm("2", json!({"conditions": [{"type": "Ready"}]})),
            ),
            None,
        );
        assert_eq!(keys, Keys::default());
    }

    #[test]
    fn control_plane_state_changes_requeue_the_cluster() {
        let caches = Caches {
            clusters: crate::runtime::Store::new(),
            machines: crate::runtime::Store::new(),
            maas_clusters: crate::runtime::Store::new(),
            maas_machines: crate::runtime::Store::new(),
        };
        let event = modified(
            mm("1", json!({"machinePowered": true})),
            mm("2", json!({"machinePowered": false})),
        );
        // Without the Cluster in the cache we cannot tell which MaasCluster.
        assert_eq!(on_maas_machine(&event, Some(&caches)), Keys::default());
        let keys = on_maas_machine(&Event::Deleted(Arc::new(mm("3", json!({})))), None);
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
            on_machine(&modified(
                machine(1, "Provisioning"),
                machine(1, "Provisioned")
            )),
            Keys::default()
        );
        let keys = on_machine(&modified(
            machine(1, "Provisioning"),
            machine(2, "Provisioning"),
        ));
        assert_eq!(keys.maas_machines, vec![ObjectKey::new("ns", "mm1")]);
    }

    #[test]
    fn cluster_pause_and_infrastructure_readiness_matter() {
        let cluster = |paused: bool, ready: bool| {
            json!({"metadata": {"name": "c1", "namespace": "ns", "generation": 1},
                   "spec": {"paused": paused, "infrastructureRef": {"kind": "MaasCluster", "name": "mc1"}},
                   "status": {"initialization": {"infrastructureProvisioned": ready}, "phase": "x"}})
        };
        let keys = on_cluster(&modified(cluster(false, false), cluster(false, true)), None);
        assert_eq!(keys.maas_clusters, vec![ObjectKey::new("ns", "mc1")]);
        let mut churn = cluster(false, true);
        churn["status"]["phase"] = json!("Provisioned");
        assert_eq!(
            on_cluster(&modified(cluster(false, true), churn), None),
            Keys::default()
        );
    }
}

#[cfg(test)]
mod realistic {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::runtime::Store;

    #[test]
    fn control_plane_status_change_enqueues_its_maas_cluster() {
        let caches = Caches {
            clusters: Store::new(),
            machines: Store::new(),
            maas_clusters: Store::new(),
            maas_machines: Store::new(),
        };
        let cluster = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns", "generation": 2},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": "c1"}}});
        caches.clusters.upsert(ObjectKey::new("ns", "c1"), &cluster);
        let mm = |state: &str| {
            json!({"metadata": {"name": "c1-cp-0", "namespace": "ns", "generation": 1,
                                "labels": {"cluster.x-k8s.io/control-plane": "", "cluster.x-k8s.io/cluster-name": "c1"}},
                   "status": {"machineState": state}})
        };
        let event = Event::Modified {
            old: Arc::new(mm("Deploying")),
            new: Arc::new(mm("Deployed")),
        };
        let keys = on_maas_machine(&event, Some(&caches));
        assert_eq!(keys.maas_clusters, vec![ObjectKey::new("ns", "c1")]);
    }

    #[test]
    fn a_control_plane_label_on_the_owner_machine_counts() {
        let caches = Caches {
            clusters: Store::new(),
            machines: Store::new(),
            maas_clusters: Store::new(),
            maas_machines: Store::new(),
        };
        let cluster = json!({"metadata": {"name": "c1", "namespace": "ns"},
            "spec": {"infrastructureRef": {"kind": "MaasCluster", "name": "mc1"}}});
        caches.clusters.upsert(ObjectKey::new("ns", "c1"), &cluster);
        let mm = |state: &str| {
            json!({"metadata": {"name": "m1", "namespace": "ns",
                                "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m1", "uid": "u"}]},
                   "status": {"machineState": state}})
        };
        let event = Event::Modified {
            old: Arc::new(mm("Deploying")),
            new: Arc::new(mm("Deployed")),
        };
        assert_eq!(
            on_maas_machine(&event, Some(&caches)),
            Keys::default(),
            "a worker"
        );
        let machine = json!({"metadata": {"name": "m1", "namespace": "ns", "labels": {"cluster.x-k8s.io/control-plane": ""}}});
        caches.machines.upsert(ObjectKey::new("ns", "m1"), &machine);
        assert_eq!(
            on_maas_machine(&event, Some(&caches)).maas_clusters,
            vec![ObjectKey::new("ns", "mc1")]
        );
    }
}
