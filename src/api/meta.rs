//! The slice of Kubernetes `ObjectMeta` the controllers read and write.
//!
//! Decoding keeps only these fields (serde skips the rest: managedFields,
//! creationTimestamp, ...), which is what keeps the informer caches small.
//! Dropping the rest is safe because no object is ever written back whole:
//! every write is a merge patch of named fields, or of the difference
//! between two values of the same type (see `kube::merge_patch`), so a field left
//! out here is never sent, hence never removed on the server.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::names::{self, Name};
use crate::runtime::ObjectKey;

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
    #[serde(default, skip_serializing_if = "StringMap::is_empty")]
    pub labels: StringMap,
    #[serde(default, skip_serializing_if = "StringMap::is_empty")]
    pub annotations: StringMap,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// Labels or annotations: a JSON object of strings, held as a sorted list.
///
/// A `BTreeMap` allocates a node of eleven slots (about 540 bytes) for the
/// first entry; objects carry two to five labels and annotations, so a
/// sorted `Vec` costs a tenth of that, and the informer caches hold one per
/// object (BENCHMARKS.md "Architecture redesign").
///
/// Keys are [`Name`]s: the label and annotation keys capmaas knows take no
/// allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StringMap(Vec<(Name, String)>);

impl StringMap {
    pub fn get(&self, key: &str) -> Option<&String> {
        let at = self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok()?;
        self.0.get(at).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`; returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self
            .0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key.as_str()))
        {
            Ok(at) => self
                .0
                .get_mut(at)
                .map(|(_, old)| std::mem::replace(old, value)),
            Err(at) => {
                self.0.insert(at, (names::name_from(key), value));
                None
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok()?;
        Some(self.0.remove(at).1)
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// In key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_str()))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let sorted: BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        StringMap(
            sorted
                .into_iter()
                .map(|(k, v)| (names::name_from(k), v))
                .collect(),
        )
    }
}

impl<const N: usize> From<[(String, String); N]> for StringMap {
    fn from(pairs: [(String, String); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl Serialize for StringMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = StringMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StringMap, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((Key(key), value)) = map.next_entry::<Key, String>()? {
                    pairs.push((key, value));
                }
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                // JSON allows a key twice; the last one wins, as in a map.
                pairs.reverse();
                pairs.dedup_by(|a, b| a.0 == b.0);
                pairs.reverse();
                pairs.shrink_to_fit();
                Ok(StringMap(pairs))
            }
        }
        deserializer.deserialize_map(Pairs)
    }
}

/// A map key decoded as a [`Name`].
struct Key(Name);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        names::decode(deserializer).map(Key)
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl ObjectMeta {
    /// `namespace/name`; `None` without a name.
    pub fn key(&self) -> Option<ObjectKey> {
        ObjectKey::from_parts(&self.namespace, &self.name)
    }

    pub fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp.is_some()
    }

    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    pub fn has_label(&self, label: &str) -> bool {
        self.labels.contains_key(label)
    }

    pub fn label(&self, label: &str) -> Option<&str> {
        self.labels.get(label).map(String::as_str)
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
    #[serde(default, deserialize_with = "names::decode")]
    pub api_version: Name,
    #[serde(default, deserialize_with = "names::decode")]
    pub kind: Name,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
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

/// Makes each listed `api` kind (a struct with `metadata: ObjectMeta`) a
/// [`runtime::Object`](crate::runtime::Object), so informers can cache it.
///
/// `trim` gives back the spare capacity of the object's lists: serde grows
/// a `Vec` by doubling from 4 (a list of one owner reference keeps room for
/// four, five conditions room for eight), and a cached object keeps that
/// slack for as long as it lives. The optional block trims the kind's own
/// lists.
macro_rules! cached_kinds {
    ($($kind:ty $(=> |$obj:ident| $trim:block)?),* $(,)?) => {$(
        impl crate::runtime::Object for $kind {
            fn namespace(&self) -> &str {
                &self.metadata.namespace
            }
            fn name(&self) -> &str {
                &self.metadata.name
            }
            fn resource_version(&self) -> &str {
                &self.metadata.resource_version
            }
            fn trim(&mut self) {
                self.metadata.finalizers.shrink_to_fit();
                self.metadata.owner_references.shrink_to_fit();
                $(let $obj = self; $trim)?
            }
        }
    )*};
}

cached_kinds!(
    super::MaasCluster => |cluster| {
        if let Some(status) = &mut cluster.status {
            status.conditions.shrink_to_fit();
        }
    },
    super::MaasMachine => |machine| {
        if let Some(status) = &mut machine.status {
            status.addresses.shrink_to_fit();
            status.conditions.shrink_to_fit();
        }
    },
    super::MaasRemediation => |remediation| {
        if let Some(status) = &mut remediation.status {
            status.conditions.shrink_to_fit();
        }
    },
    super::MaasMachineTemplate,
    super::capi::Cluster,
    super::capi::Machine,
);

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
    fn trim_leaves_no_spare_room_in_cached_lists() {
        use crate::runtime::Object;
        let mut machine: super::super::MaasMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m", "namespace": "ns", "finalizers": ["f"],
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                              "kind": "Machine", "name": "m", "uid": "u"}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True"},
                                      {"type": "Paused", "status": "False"},
                                      {"type": "MachineDeployed", "status": "True"},
                                      {"type": "DNSAttached", "status": "True"},
                                      {"type": "SwapDisabled", "status": "True"}]}
        }))
        .unwrap();
        let before = machine.clone();
        machine.trim();
        assert_eq!(machine, before, "trimming changes no value");
        let status = machine.status.as_ref().unwrap();
        assert_eq!(machine.metadata.owner_references.capacity(), 1);
        assert_eq!(machine.metadata.finalizers.capacity(), 1);
        assert_eq!(status.addresses.capacity(), 1);
        assert_eq!(status.conditions.capacity(), 5);
    }

    #[test]
    fn string_maps_read_and_write_as_json_objects() {
        let labels: StringMap =
            serde_json::from_value(serde_json::json!({"b": "2", "a": "1", "c": ""})).unwrap();
        assert_eq!(labels.get("a").map(String::as_str), Some("1"));
        assert!(labels.contains_key("c") && !labels.contains_key("d"));
        let mut labels = labels;
        assert_eq!(labels.insert("b".into(), "3".into()), Some("2".into()));
        assert_eq!(labels.insert("0".into(), "x".into()), None);
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"0":"x","a":"1","b":"3","c":""}"#
        );
        let twice: StringMap = serde_json::from_str(r#"{"k": "old", "k": "new"}"#).unwrap();
        assert_eq!((twice.len(), twice.get("k").unwrap().as_str()), (1, "new"));
        assert!(serde_json::from_str::<StringMap>(r#"{"n": 1}"#).is_err());
        let mut built: StringMap = [("z", "1"), ("y", "2")].into_iter().collect();
        assert_eq!(built.remove("z").as_deref(), Some("1"));
        assert_eq!(built.remove("z"), None);
        built.insert("z".into(), "1".into());
        assert_eq!(
            built,
            StringMap::from([("z".into(), "1".into()), ("y".into(), "2".into())])
        );
        assert_eq!(built.iter().collect::<Vec<_>>(), [("y", "2"), ("z", "1")]);
    }

    #[test]
    fn decoding_keeps_what_is_read_and_drops_the_rest() {
        let input = serde_json::json!({
            "name": "m", "namespace": "ns", "uid": "u1", "resourceVersion": "5", "generation": 2,
            "labels": {"l": "v"}, "annotations": {"a": "b"}, "finalizers": ["f"],
            "deletionTimestamp": "2026-01-02T00:00:00Z",
            "creationTimestamp": "2026-01-01T00:00:00Z", "generateName": "m-",
            "managedFields": [{"manager": "x"}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "n", "uid": "u", "controller": true}]
        });
        let meta: ObjectMeta = serde_json::from_value(input).unwrap();
        assert_eq!(
            serde_json::to_value(&meta).unwrap(),
            serde_json::json!({
                "name": "m", "namespace": "ns", "uid": "u1", "resourceVersion": "5", "generation": 2,
                "labels": {"l": "v"}, "annotations": {"a": "b"}, "finalizers": ["f"],
                "deletionTimestamp": "2026-01-02T00:00:00Z",
                "ownerReferences": [{"apiVersion": "v1", "kind": "K", "name": "n", "uid": "u"}]
            })
        );
        assert_eq!(meta.key(), Some(ObjectKey::new("ns", "m")));
    }
}
