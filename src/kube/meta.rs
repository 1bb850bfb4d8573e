//! Readers for `metadata` fields of an object held as `serde_json::Value`
//! (the client's own objects, Events, Leases). Typed objects have
//! `api::ObjectMeta` instead.
//!
//! Missing or mistyped fields read as `None` / empty: objects come from the
//! network and the callers decide what absence means.

use serde_json::Value;

fn metadata_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
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

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("labels")?.get(key)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_metadata() {
        let obj = json!({"metadata": {
            "name": "m1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["a", "maasmachine.infrastructure.cluster.x-k8s.io"],
            "labels": {"cluster.x-k8s.io/cluster-name": "c1", "n": 1}
        }});
        assert_eq!(name(&obj), Some("m1"));
        assert_eq!(namespace(&obj), Some("ns"));
        assert_eq!(uid(&obj), Some("u-1"));
        assert_eq!(resource_version(&obj), Some("42"));
        assert!(is_deleting(&obj));
        assert_eq!(
            finalizers(&obj),
            vec!["a", "maasmachine.infrastructure.cluster.x-k8s.io"]
        );
        assert_eq!(label(&obj, "cluster.x-k8s.io/cluster-name"), Some("c1"));
        // Non-string values are not stringified.
        assert_eq!(label(&obj, "n"), None);
    }

    #[test]
    fn missing_fields_are_empty() {
        let obj = json!({"kind": "Thing"});
        assert_eq!(name(&obj), None);
        assert!(!is_deleting(&obj));
        assert!(finalizers(&obj).is_empty());
        assert_eq!(label(&obj, "x"), None);
    }
}
