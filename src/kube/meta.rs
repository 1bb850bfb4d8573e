//! Readers for `metadata` fields of an object held as `serde_json::Value`.
//!
//! Missing or mistyped fields read as `None` / empty: objects come from the
//! network and the callers decide what absence means.

use std::collections::BTreeMap;

use serde_json::Value;

fn metadata_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

fn string_map(obj: &Value, field: &str) -> BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

pub fn name(obj: &Value) -> Option<&str> {
    metadata_str(obj, "name")
}

pub fn namespace(obj: &Value) -> Option<&str> {
    metadata_str(obj, "namespace")
}

pub fn uid(obj: &Value) -> Option<&str> {
    metadata_str(obj, "uid")
}

pub fn resource_version(obj: &Value) -> Option<&str> {
    metadata_str(obj, "resourceVersion")
}

pub fn generation(obj: &Value) -> Option<i64> {
    obj.get("metadata")?.get("generation")?.as_i64()
}

/// `metadata.deletionTimestamp` (RFC 3339), set once deletion has begun.
pub fn deletion_timestamp(obj: &Value) -> Option<&str> {
    metadata_str(obj, "deletionTimestamp")
}

/// True once the object is being deleted (and waits for its finalizers).
pub fn is_deleting(obj: &Value) -> bool {
    deletion_timestamp(obj).is_some()
}

/// `metadata.finalizers`, in order (order matters to the guarded patches).
pub fn finalizers(obj: &Value) -> Vec<&str> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

pub fn has_finalizer(obj: &Value, finalizer: &str) -> bool {
    finalizers(obj).contains(&finalizer)
}

pub fn labels(obj: &Value) -> BTreeMap<String, String> {
    string_map(obj, "labels")
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("labels")?.get(key)?.as_str()
}

pub fn annotations(obj: &Value) -> BTreeMap<String, String> {
    string_map(obj, "annotations")
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

impl OwnerReference {
    /// The API group of the owner (`cluster.x-k8s.io` from
    /// `cluster.x-k8s.io/v1beta2`; empty for core `v1`). Compare groups, not
    /// apiVersions: the owner may be stored under an older version.
    pub fn group(&self) -> &str {
        match self.api_version.rsplit_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }
}

pub fn owner_references(obj: &Value) -> Vec<OwnerReference> {
    let Some(list) = obj
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let flag = |v: &Value, k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    list.iter()
        .map(|r| OwnerReference {
            api_version: text(r, "apiVersion"),
            kind: text(r, "kind"),
            name: text(r, "name"),
            uid: text(r, "uid"),
            controller: flag(r, "controller"),
            block_owner_deletion: flag(r, "blockOwnerDeletion"),
        })
        .collect()
}

/// The owner reference with `controller: true`, if any.
pub fn controller_owner(obj: &Value) -> Option<OwnerReference> {
    owner_references(obj).into_iter().find(|r| r.controller)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_metadata() {
        let obj = json!({"metadata": {
            "name": "m1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["a", "maasmachine.infrastructure.cluster.x-k8s.io"],
            "labels": {"cluster.x-k8s.io/cluster-name": "c1", "n": 1},
            "annotations": {"x": "y"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u-s"},
                {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "m",
                 "uid": "u-m", "controller": true, "blockOwnerDeletion": true}
            ]
        }});
        assert_eq!(name(&obj), Some("m1"));
        assert_eq!(namespace(&obj), Some("ns"));
        assert_eq!(uid(&obj), Some("u-1"));
        assert_eq!(resource_version(&obj), Some("42"));
        assert_eq!(generation(&obj), Some(3));
        assert!(is_deleting(&obj));
        assert_eq!(
            finalizers(&obj),
            vec!["a", "maasmachine.infrastructure.cluster.x-k8s.io"]
        );
        assert!(has_finalizer(&obj, "a"));
        assert!(!has_finalizer(&obj, "b"));
        assert_eq!(label(&obj, "cluster.x-k8s.io/cluster-name"), Some("c1"));
        // Non-string label values are skipped, not stringified.
        assert_eq!(labels(&obj).len(), 1);
        assert_eq!(annotation(&obj, "x"), Some("y"));
        let owners = owner_references(&obj);
        assert_eq!(owners.len(), 2);
        assert_eq!(owners[0].group(), "");
        let ctrl = controller_owner(&obj).unwrap();
        assert_eq!(ctrl.kind, "Machine");
        assert_eq!(ctrl.group(), "cluster.x-k8s.io");
        assert!(ctrl.block_owner_deletion);
    }

    #[test]
    fn missing_fields_are_empty() {
        let obj = json!({"kind": "Thing"});
        assert_eq!(name(&obj), None);
        assert!(!is_deleting(&obj));
        assert!(finalizers(&obj).is_empty());
        assert!(labels(&obj).is_empty());
        assert!(owner_references(&obj).is_empty());
        assert!(controller_owner(&obj).is_none());
    }
}
