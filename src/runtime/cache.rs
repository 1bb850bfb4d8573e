//! The shared cache of one watched kind, filled by its informer.
//!
//! Reconcilers read from here instead of the API server. Objects are held as
//! `Arc<Value>`: a reader clones a pointer, never a document, and an object
//! replaced by a newer version is freed when its last reader drops it.
//!
//! To keep memory near the budget, objects are stored with
//! `metadata.managedFields` and the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation removed: both are often larger than the rest of the object and
//! no controller reads them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ObjectKey;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A read-mostly map `namespace/name → object` for one kind.
///
/// Cheap to clone; all clones share the same map. Written only by the
/// informer that owns it.
#[derive(Clone, Default)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    objects: RwLock<HashMap<ObjectKey, Arc<Value>>>,
    synced: AtomicBool,
    /// Paired with `synced_signal` so waiters sleep instead of polling.
    synced_lock: Mutex<()>,
    synced_signal: Condvar,
}

impl Store {
    /// An empty, not yet synced store.
    pub fn new() -> Store {
        Store::default()
    }

    /// The cached object, if any.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.read().get(key).cloned()
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<Value>> {
        self.read().values().cloned().collect()
    }

    /// The cached objects of one namespace.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<Value>> {
        self.read()
            .iter()
            .filter(|(key, _)| key.namespace == namespace)
            .map(|(_, obj)| obj.clone())
            .collect()
    }

    /// The cached objects for which `predicate` holds, e.g. all Machines
    /// labelled with one cluster name.
    pub fn find(&self, predicate: impl Fn(&Value) -> bool) -> Vec<Arc<Value>> {
        self.read()
            .values()
            .filter(|obj| predicate(obj))
            .cloned()
            .collect()
    }

    /// The keys of every cached object.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read().keys().cloned().collect()
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// True once the first complete list has been applied: from then on the
    /// store holds every object (possibly slightly behind), so "not in the
    /// store" means "does not exist".
    pub fn is_synced(&self) -> bool {
        self.inner.synced.load(Ordering::Acquire)
    }

    /// Blocks until [`is_synced`](Store::is_synced) or `timeout` passes;
    /// returns whether the store is synced.
    pub fn wait_until_synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self
            .inner
            .synced_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while !self.is_synced() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            guard = self
                .inner
                .synced_signal
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }

    /// Inserts or replaces one object; returns the previous version.
    pub(crate) fn upsert(&self, key: ObjectKey, obj: Arc<Value>) -> Option<Arc<Value>> {
        self.write().insert(key, obj)
    }

    /// Removes one object; returns what was cached.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.write().remove(key)
    }

    /// Replaces the whole content after a (re)list; returns the old content
    /// so the caller can tell what was added, changed and deleted.
    pub(crate) fn replace(
        &self,
        objects: HashMap<ObjectKey, Arc<Value>>,
    ) -> HashMap<ObjectKey, Arc<Value>> {
        std::mem::replace(&mut *self.write(), objects)
    }

    pub(crate) fn mark_synced(&self) {
        let _guard = self
            .inner
            .synced_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.inner.synced.store(true, Ordering::Release);
        self.inner.synced_signal.notify_all();
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<ObjectKey, Arc<Value>>> {
        // Writers replace whole entries, so a poisoned map is still
        // consistent.
        self.inner
            .objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<Value>>> {
        self.inner
            .objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Drops the parts of an object no controller reads, before caching it.
pub(crate) fn slim(mut obj: Value) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        let annotations = meta.get_mut("annotations").and_then(Value::as_object_mut);
        if let Some(annotations) = annotations {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slim_drops_managed_fields_and_last_applied_only() {
        let obj = json!({"metadata": {
            "name": "a",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {LAST_APPLIED: "{...}", "keep": "me"}
        }, "spec": {"x": 1}});
        assert_eq!(
            slim(obj),
            json!({"metadata": {"name": "a", "annotations": {"keep": "me"}}, "spec": {"x": 1}})
        );
        let only_last_applied = json!({"metadata": {"annotations": {LAST_APPLIED: "{}"}}});
        assert_eq!(slim(only_last_applied), json!({"metadata": {}}));
    }

    #[test]
    fn queries_and_sync_signal() {
        let store = Store::new();
        assert!(!store.is_synced());
        assert!(!store.wait_until_synced(Duration::from_millis(10)));
        store.upsert(ObjectKey::new("a", "x"), Arc::new(json!({"n": 1})));
        store.upsert(ObjectKey::new("b", "y"), Arc::new(json!({"n": 2})));
        assert_eq!(store.len(), 2);
        assert_eq!(store.list_namespace("a").len(), 1);
        assert_eq!(store.find(|o| o["n"] == 2).len(), 1);
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || store.wait_until_synced(Duration::from_secs(60)))
        };
        store.mark_synced();
        assert!(waiter.join().unwrap());
        let old = store.replace(HashMap::new());
        assert_eq!(old.len(), 2);
        assert!(store.is_empty());
    }
}
