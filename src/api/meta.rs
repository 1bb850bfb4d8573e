//! The slice of Kubernetes `ObjectMeta` the controllers read and write.
//!
//! Every struct keeps the fields it does not name in `extra`, so an object
//! read from the cache and written back whole never loses a field.

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
