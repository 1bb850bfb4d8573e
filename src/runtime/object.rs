//! What the runtime needs to know of a watched object: its key and its
//! resourceVersion ([`Object`]), and nothing else.
//!
//! The runtime is generic: an informer decodes each object it receives
//! straight into the caller's type `T` (for our controllers, the `api`
//! structs; serde skips every field the type does not name, which is what
//! keeps the cache small) and caches it as `Arc<T>`. `T` only has to say
//! where its key and resourceVersion are. `serde_json::Value` is an
//! [`Object`] too, for watching a kind whole (tests, tools).

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::kube;

/// Identifies one object of a kind: `namespace/name`, with an empty
/// namespace for cluster-scoped objects. Displays as `ns/name` (or `name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object held as JSON, from its `metadata`; `None`
    /// without a name.
    pub fn of(obj: &Value) -> Option<ObjectKey> {
        let name = kube::meta::name(obj)?;
        Some(ObjectKey::new(
            kube::meta::namespace(obj).unwrap_or(""),
            name,
        ))
    }

    /// The key from a namespace and a name; `None` when the name is empty
    /// (an object the API server would never send).
    pub fn from_parts(namespace: &str, name: &str) -> Option<ObjectKey> {
        (!name.is_empty()).then(|| ObjectKey::new(namespace, name))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A Kubernetes object as an informer decodes and caches it.
pub trait Object: DeserializeOwned + Send + Sync + 'static {
    /// `metadata.namespace` (empty for a cluster-scoped object).
    fn namespace(&self) -> &str;
    /// `metadata.name` (empty if missing).
    fn name(&self) -> &str;
    /// `metadata.namespace`/`metadata.name`; `None` without a name.
    fn key(&self) -> Option<ObjectKey> {
        ObjectKey::from_parts(self.namespace(), self.name())
    }
    /// `metadata.resourceVersion` (empty if missing): an event whose version
    /// equals the cached one is a repeat.
    fn resource_version(&self) -> &str;
    /// Called once on each object after decoding, before it is cached. A
    /// typed object has nothing to drop (it holds only what it names); the
    /// default does nothing.
    fn trim(&mut self) {}
}

/// A whole object as JSON. Costly to cache (a `Value` takes about 6× its
/// JSON text), so the controllers watch typed objects; this is for tools
/// and tests that watch a kind they have no type for.
impl Object for Value {
    fn namespace(&self) -> &str {
        kube::meta::namespace(self).unwrap_or("")
    }

    fn name(&self) -> &str {
        kube::meta::name(self).unwrap_or("")
    }

    fn key(&self) -> Option<ObjectKey> {
        ObjectKey::of(self)
    }

    fn resource_version(&self) -> &str {
        kube::meta::resource_version(self).unwrap_or("")
    }

    /// Drops `metadata.managedFields` and the
    /// `kubectl.kubernetes.io/last-applied-configuration` annotation: both
    /// are often larger than the rest of the object and nobody reads them.
    fn trim(&mut self) {
        const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
        let Some(meta) = self.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        meta.remove("managedFields");
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
}

/// The identity of any object, decoded when the object itself cannot be
/// decoded into its type, so the informer can still say which object it is.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Head {
    pub metadata: HeadMeta,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct HeadMeta {
    pub name: String,
    pub namespace: String,
    pub resource_version: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_of_objects() {
        let namespaced = json!({"metadata": {"name": "m1", "namespace": "ns"}});
        assert_eq!(ObjectKey::of(&namespaced), Some(ObjectKey::new("ns", "m1")));
        assert_eq!(ObjectKey::new("ns", "m1").to_string(), "ns/m1");
        let cluster_scoped = json!({"metadata": {"name": "node-1"}});
        assert_eq!(
            ObjectKey::of(&cluster_scoped).unwrap().to_string(),
            "node-1"
        );
        assert_eq!(ObjectKey::of(&json!({"metadata": {}})), None);
        assert_eq!(ObjectKey::from_parts("ns", ""), None);
    }

    #[test]
    fn trim_drops_managed_fields_and_last_applied_only() {
        let mut obj = json!({"metadata": {
            "name": "a",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"}
        }, "spec": {"x": 1}});
        obj.trim();
        assert_eq!(
            obj,
            json!({"metadata": {"name": "a", "annotations": {"keep": "me"}}, "spec": {"x": 1}})
        );
        let mut only_last_applied = json!({"metadata": {"annotations":
            {"kubectl.kubernetes.io/last-applied-configuration": "{}"}}});
        only_last_applied.trim();
        assert_eq!(only_last_applied, json!({"metadata": {}}));
    }
}
