//! The shared cache of one watched kind: `namespace/name → Arc<T>`.
//!
//! A store is created first and then handed to the informer that fills it
//! and to everyone who reads it (mappers, reconcilers), so nothing has to
//! wait for an informer to exist before it can hold the store. Reconcilers
//! read from here instead of the API server.
//!
//! Objects are held as the caller's type `T`, decoded once by the informer
//! (see [`Object`](super::Object)); a read hands out the same `Arc<T>`, so
//! reading costs a pointer copy and nothing a reader does changes the cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use super::ObjectKey;
use crate::clock::later;
use crate::sync::lock;

/// A read-mostly map `namespace/name → object` for one kind.
///
/// Cheap to clone; all clones share the same map. Written only by the
/// informer it is handed to.
pub struct Store<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    objects: RwLock<HashMap<ObjectKey, Arc<T>>>,
    synced: AtomicBool,
    /// Paired with `synced_signal` so waiters sleep instead of polling.
    synced_lock: Mutex<()>,
    synced_signal: Condvar,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Self {
        Store {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Store {
            inner: Arc::new(Inner {
                objects: RwLock::new(HashMap::new()),
                synced: AtomicBool::new(false),
                synced_lock: Mutex::new(()),
                synced_signal: Condvar::new(),
            }),
        }
    }
}

impl<T> Store<T> {
    /// An empty, not yet synced store.
    pub fn new() -> Store<T> {
        Store::default()
    }

    /// The cached object, if any.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<T>> {
        self.read().get(key).cloned()
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<T>> {
        self.read().values().cloned().collect()
    }

    /// The cached objects of one namespace.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        self.read()
            .iter()
            .filter(|(key, _)| key.namespace == namespace)
            .map(|(_, obj)| Arc::clone(obj))
            .collect()
    }

    /// The cached objects for which `predicate` holds, e.g. all Machines
    /// labelled with one cluster name.
    pub fn find(&self, predicate: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
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
        let deadline = later(Instant::now(), timeout);
        let mut guard = lock(&self.inner.synced_lock);
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
    pub(crate) fn upsert(&self, key: ObjectKey, obj: Arc<T>) -> Option<Arc<T>> {
        self.write().insert(key, obj)
    }

    /// Removes one object; returns what was cached.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<T>> {
        self.write().remove(key)
    }

    /// Replaces the whole content after a (re)list; returns the objects that
    /// were cached but are not in `objects` (deleted while not watched).
    pub(crate) fn replace(&self, objects: HashMap<ObjectKey, Arc<T>>) -> Vec<Arc<T>> {
        let mut old = std::mem::replace(&mut *self.write(), objects);
        let current = self.read();
        old.retain(|key, _| !current.contains_key(key));
        old.into_values().collect()
    }

    pub(crate) fn mark_synced(&self) {
        let _guard = lock(&self.inner.synced_lock);
        self.inner.synced.store(true, Ordering::Release);
        self.inner.synced_signal.notify_all();
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<ObjectKey, Arc<T>>> {
        // Writers replace whole entries, so a poisoned map is still
        // consistent.
        self.inner
            .objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<ObjectKey, Arc<T>>> {
        self.inner
            .objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn put(store: &Store<Value>, ns: &str, name: &str, obj: Value) -> Option<Arc<Value>> {
        store.upsert(ObjectKey::new(ns, name), Arc::new(obj))
    }

    #[test]
    fn queries_and_sync_signal() {
        let store = Store::new();
        assert!(!store.is_synced());
        assert!(!store.wait_until_synced(Duration::from_millis(10)));
        put(&store, "a", "x", json!({"n": 1}));
        put(&store, "b", "y", json!({"n": 2}));
        assert_eq!(store.len(), 2);
        assert_eq!(*store.list_namespace("a")[0], json!({"n": 1}));
        assert_eq!(*store.find(|o| o["n"] == 2)[0], json!({"n": 2}));
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || store.wait_until_synced(Duration::from_secs(60)))
        };
        store.mark_synced();
        assert!(waiter.join().unwrap());
        let y = HashMap::from([(ObjectKey::new("b", "y"), Arc::new(json!({"n": 3})))]);
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
        assert_eq!(put(&store, "ns", "m", obj.clone()), None);
        assert_eq!(*store.get(&key).unwrap(), obj);
        let newer = json!({"metadata": {"name": "m", "namespace": "ns"}});
        assert_eq!(*put(&store, "ns", "m", newer.clone()).unwrap(), obj);
        assert_eq!(*store.remove(&key).unwrap(), newer);
        assert_eq!(store.get(&key), None);
    }
}
