//! The slice of Kubernetes `ObjectMeta` the controllers read and write.
//!
//! Every struct keeps the fields it does not name in `extra`, so an object
//! read from the cache and written back whole never loses a field.
//!
//! [`project`] and [`METADATA_READ`] cut a watched object down to what the
//! controllers read before it is cached (each kind's list sits beside its
//! type). Projecting is safe because no cached object is ever written back
//! whole: every write is a merge patch of named fields or of the difference
//! between two values decoded from the same projected object.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `metadata` fields the controllers and the event mappers read:
/// identity, the fields that gate a reconcile, and the ones guarded writes
/// send back (`resourceVersion`). Dropped: `creationTimestamp`,
/// `generateName`, `managedFields` and anything else.
pub const METADATA_READ: [&str; 10] = [
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/uid",
    "/metadata/resourceVersion",
    "/metadata/generation",
    "/metadata/deletionTimestamp",
    "/metadata/labels",
    "/metadata/annotations",
    "/metadata/finalizers",
    "/metadata/ownerReferences",
];

/// The informer transform for our own kinds (MaasCluster, MaasMachine):
/// `spec` and `status` stay whole (the reconcilers read nearly all of them,
/// and keep unknown fields in `extra`), `metadata` is cut to
/// [`METADATA_READ`]. Safe because the controllers write these objects only
/// with merge patches of named fields or of the difference between two views
/// of this projection, so a field left out here is never sent, hence never
/// dropped on the server.
pub fn project_own_kind(obj: &mut Value) {
    project(
        obj,
        &[
            &METADATA_READ[..],
            &["/apiVersion", "/kind", "/spec", "/status"],
        ]
        .concat(),
    );
}

/// Keeps only the values at `pointers` (JSON pointers such as
/// `/spec/bootstrap/dataSecretName`) and the objects leading to them;
/// everything else in `obj` goes. Values are moved, not copied. No pointer
/// may be a prefix of another.
pub fn project(obj: &mut Value, pointers: &[&str]) {
    let mut kept = Value::Object(Map::new());
    for pointer in pointers {
        let Some(value) = obj.pointer_mut(pointer).map(Value::take) else {
            continue;
        };
        let mut at = &mut kept;
        let mut segments = pointer.split('/').skip(1).peekable();
        while let Some(segment) = segments.next() {
            let Value::Object(map) = at else { break };
            if segments.peek().is_none() {
                map.insert(segment.to_string(), value);
                break;
            }
            at = map
                .entry(segment)
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    *obj = kept;
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl ObjectMeta {
    pub fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    pub fn has_label(&self, label: &str) -> bool {
        self.labels.contains_key(label)
    }

    pub fn has_annotation(&self, annotation: &str) -> bool {
        self.annotations.contains_key(annotation)
    }

    /// The owner of the given group and kind. Matches on the group only, not
    /// the version: Cluster API writes both v1beta1 and v1beta2 owner refs.
    pub fn owner(&self, group: &str, kind: &str) -> Option<&OwnerReference> {
        self.owner_references
            .iter()
            .find(|o| o.kind == kind && o.group() == group)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl OwnerReference {
    /// `cluster.x-k8s.io` for `cluster.x-k8s.io/v1beta2`; empty for core `v1`.
    pub fn group(&self) -> &str {
        match self.api_version.rsplit_once('/') {
            Some((group, _version)) => group,
            None => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_matches_group_and_kind_whatever_the_version() {
        let meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "m",
            "ownerReferences": [
                {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": "old", "uid": "1"},
                {"apiVersion": "other.io/v1", "kind": "Cluster", "name": "x", "uid": "2"},
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c", "uid": "3"}
            ]
        }))
        .unwrap();
        assert_eq!(
            meta.owner("cluster.x-k8s.io", "Machine").unwrap().name,
            "old"
        );
        assert_eq!(meta.owner("cluster.x-k8s.io", "Cluster").unwrap().name, "c");
        assert!(meta.owner("cluster.x-k8s.io", "MachineSet").is_none());
    }

    #[test]
    fn project_keeps_the_pointers_and_the_path_to_them() {
        let mut obj = serde_json::json!({
            "kind": "K",
            "metadata": {"name": "m", "creationTimestamp": "t", "labels": {"a": "b"}},
            "spec": {"a": {"b": 1, "c": 2}, "d": [1, 2]},
            "status": {"big": "x"}
        });
        project(
            &mut obj,
            &[
                "/kind",
                "/metadata/name",
                "/metadata/labels",
                "/spec/a/b",
                "/spec/d",
                "/missing/x",
            ],
        );
        assert_eq!(
            obj,
            serde_json::json!({"kind": "K", "metadata": {"name": "m", "labels": {"a": "b"}},
                               "spec": {"a": {"b": 1}, "d": [1, 2]}})
        );
    }

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let input = serde_json::json!({
            "name": "m", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "x"}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "n", "uid": "u", "controller": true}]
        });
        let meta: ObjectMeta = serde_json::from_value(input.clone()).unwrap();
        assert_eq!(serde_json::to_value(&meta).unwrap(), input);
    }
}
