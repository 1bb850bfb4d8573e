//! The shared cache of one watched kind, filled by its informer.
//!
//! Reconcilers read from here instead of the API server.
//!
//! Objects are held as compact JSON text and decoded on every read: a
//! `serde_json::Value` costs about 6× its JSON (one B-tree node, ~600 bytes,
//! for every JSON object, however small), the text about 1×, and memory is
//! the budget here (BENCHMARKS.md "Memory"), while a read costs microseconds
//! per object. Each reader gets its own `Arc<Value>`; nothing it does
//! changes the cache.
//!
//! To keep memory near the budget, objects are stored with
//! `metadata.managedFields` and the `kubectl.kubernetes.io/last-applied-configuration`
//! annotation removed: both are often larger than the rest of the object and
//! no controller reads them. Informer transforms cut them further.

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
    objects: RwLock<HashMap<ObjectKey, Encoded>>,
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
        let text = self.read().get(key)?.clone();
        decode(key, &text)
    }

    /// The cached object's text, for comparing without decoding.
    pub(crate) fn get_encoded(&self, key: &ObjectKey) -> Option<Encoded> {
        self.read().get(key).cloned()
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<Value>> {
        self.decode_where(|_| true)
    }

    /// The cached objects of one namespace.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<Value>> {
        self.decode_where(|key| key.namespace == namespace)
    }

    /// The cached objects for which `predicate` holds, e.g. all Machines
    /// labelled with one cluster name.
    pub fn find(&self, predicate: impl Fn(&Value) -> bool) -> Vec<Arc<Value>> {
        let mut found = self.decode_where(|_| true);
        found.retain(|obj| predicate(obj));
        found
    }

    /// Decodes the objects whose key matches, outside the lock (the texts
    /// are shared, so copying them out is a pointer each).
    fn decode_where(&self, matches: impl Fn(&ObjectKey) -> bool) -> Vec<Arc<Value>> {
        let texts: Vec<(ObjectKey, Encoded)> = self
            .read()
            .iter()
            .filter(|(key, _)| matches(key))
            .map(|(key, text)| (key.clone(), text.clone()))
            .collect();
        texts
            .iter()
            .filter_map(|(key, text)| decode(key, text))
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
    pub(crate) fn upsert(&self, key: ObjectKey, obj: &Value) -> Option<Arc<Value>> {
        let text = encode(obj);
        let old = self.write().insert(key.clone(), text)?;
        decode(&key, &old)
    }

    /// Removes one object; returns what was cached.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        let old = self.write().remove(key)?;
        decode(key, &old)
    }

    /// Replaces the whole content after a (re)list; returns the objects that
    /// were cached but are not in `objects` (deleted while not watched).
    pub(crate) fn replace(&self, objects: HashMap<ObjectKey, Encoded>) -> Vec<Arc<Value>> {
        let mut old = std::mem::replace(&mut *self.write(), objects);
        {
            let current = self.read();
            old.retain(|key, _| !current.contains_key(key));
        }
        old.iter()
            .filter_map(|(key, text)| decode(key, text))
            .collect()
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

    fn read(&self) -> RwLockReadGuard<'_, HashMap<ObjectKey, Encoded>> {
        // Writers replace whole entries, so a poisoned map is still
        // consistent.
        self.inner
            .objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<ObjectKey, Encoded>> {
        self.inner
            .objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One cached object: its compact JSON, shared so that readers copy it out
/// of the lock for the price of a pointer.
pub(crate) type Encoded = Arc<str>;

pub(crate) fn encode(obj: &Value) -> Encoded {
    // Serializing a `Value` cannot fail: its keys are strings.
    Arc::from(obj.to_string())
}

/// The object back from its text. Cannot fail in practice: the text was
/// written by serde_json from a value that serde_json had parsed with the
/// same nesting limit, inside a larger list or watch document. Should it
/// ever fail, the object reads as absent, and the error says why.
pub(crate) fn decode(key: &ObjectKey, text: &str) -> Option<Arc<Value>> {
    match serde_json::from_str(text) {
        Ok(obj) => Some(Arc::new(obj)),
        Err(e) => {
            log::error!("cache: cannot decode {key}: {e}");
            None
        }
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
        store.upsert(ObjectKey::new("a", "x"), &json!({"n": 1}));
        store.upsert(ObjectKey::new("b", "y"), &json!({"n": 2}));
        assert_eq!(store.len(), 2);
        assert_eq!(*store.list_namespace("a")[0], json!({"n": 1}));
        assert_eq!(*store.find(|o| o["n"] == 2)[0], json!({"n": 2}));
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || store.wait_until_synced(Duration::from_secs(60)))
        };
        store.mark_synced();
        assert!(waiter.join().unwrap());
        let y = HashMap::from([(ObjectKey::new("b", "y"), encode(&json!({"n": 3})))]);
        let gone = store.replace(y);
        assert_eq!(gone, vec![Arc::new(json!({"n": 1}))], "only what is gone");
        assert_eq!(store.keys(), vec![ObjectKey::new("b", "y")]);
        let gone = store.replace(HashMap::new());
        assert_eq!(gone.len(), 1);
        assert!(store.is_empty());
    }

    #[test]
    fn objects_come_back_as_they_went_in() {
        let store = Store::new();
        let key = ObjectKey::new("ns", "m");
        let obj = json!({"metadata": {"name": "m", "namespace": "ns", "labels": {"a": ""}},
                         "spec": {"n": 1, "f": 1.5, "big": u64::MAX, "neg": -3, "s": "é\"\n",
                                  "list": [null, true, {"x": []}]}});
        assert_eq!(store.upsert(key.clone(), &obj), None);
        assert_eq!(*store.get(&key).unwrap(), obj);
        let newer = json!({"metadata": {"name": "m", "namespace": "ns"}});
        assert_eq!(*store.upsert(key.clone(), &newer).unwrap(), obj);
        assert_eq!(*store.remove(&key).unwrap(), newer);
        assert_eq!(store.get(&key), None);
    }
}
