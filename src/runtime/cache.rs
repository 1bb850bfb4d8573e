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
//!
//! Each object is its own key: the map is a set of `Arc<T>` hashed and
//! compared by the object's namespace and name, looked up by an
//! [`ObjectKey`]. A map from a separate key would hold a second copy of
//! both strings and 48 more bytes per slot (about 0.1 MB per 1,000 objects).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use super::{Object, ObjectKey};
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
    objects: RwLock<HashSet<Entry<T>>>,
    synced: AtomicBool,
    /// Paired with `synced_signal` so waiters sleep instead of polling.
    synced_lock: Mutex<()>,
    synced_signal: Condvar,
}

/// A namespace and a name, wherever they are held: in an [`ObjectKey`] (a
/// lookup) or in the cached object itself (an [`Entry`]). Both hash and
/// compare alike, so a set of entries can be searched by a key.
trait Keyed {
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
}

impl Hash for dyn Keyed + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.namespace().hash(state);
        self.name().hash(state);
    }
}

impl PartialEq for dyn Keyed + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.namespace() == other.namespace()
    }
}

impl Eq for dyn Keyed + '_ {}

impl Keyed for ObjectKey {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// One cached object, keyed by its own namespace and name.
struct Entry<T>(Arc<T>);

impl<T: Object> Keyed for Entry<T> {
    fn namespace(&self) -> &str {
        self.0.namespace()
    }
    fn name(&self) -> &str {
        self.0.name()
    }
}

impl<'a, T: Object> Borrow<dyn Keyed + 'a> for Entry<T> {
    fn borrow(&self) -> &(dyn Keyed + 'a) {
        self
    }
}

impl<T: Object> Hash for Entry<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Borrow::<dyn Keyed>::borrow(self).hash(state);
    }
}

impl<T: Object> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        Borrow::<dyn Keyed>::borrow(self) == Borrow::<dyn Keyed>::borrow(other)
    }
}

impl<T: Object> Eq for Entry<T> {}

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
                objects: RwLock::new(HashSet::new()),
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

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    pub(crate) fn mark_synced(&self) {
        let _guard = lock(&self.inner.synced_lock);
        self.inner.synced.store(true, Ordering::Release);
        self.inner.synced_signal.notify_all();
    }

    fn read(&self) -> RwLockReadGuard<'_, HashSet<Entry<T>>> {
        // Writers replace whole entries, so a poisoned map is still
        // consistent.
        self.inner
            .objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashSet<Entry<T>>> {
        self.inner
            .objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Object> Store<T> {
    /// The cached object, if any.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<T>> {
        self.read()
            .get(key as &dyn Keyed)
            .map(|entry| Arc::clone(&entry.0))
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<T>> {
        self.read()
            .iter()
            .map(|entry| Arc::clone(&entry.0))
            .collect()
    }

    /// The cached objects of one namespace.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        self.find(|obj| obj.namespace() == namespace)
    }

    /// The cached objects for which `predicate` holds, e.g. all Machines
    /// labelled with one cluster name.
    pub fn find(&self, predicate: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        self.read()
            .iter()
            .filter(|entry| predicate(&entry.0))
            .map(|entry| Arc::clone(&entry.0))
            .collect()
    }

    /// The keys of every cached object.
    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read()
            .iter()
            .map(|entry| ObjectKey::new(entry.namespace(), entry.name()))
            .collect()
    }

    /// Inserts or replaces one object (under its own namespace and name);
    /// returns the previous version.
    pub(crate) fn upsert(&self, obj: Arc<T>) -> Option<Arc<T>> {
        self.write().replace(Entry(obj)).map(|old| old.0)
    }

    /// Removes one object; returns what was cached.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<T>> {
        self.write().take(key as &dyn Keyed).map(|old| old.0)
    }

    /// Replaces the whole content after a (re)list (of two objects with the
    /// same key, the later one stays); returns the objects that were cached
    /// but are not in `objects` (deleted while not watched).
    pub(crate) fn replace(&self, objects: Vec<Arc<T>>) -> Vec<Arc<T>> {
        let mut listed = HashSet::with_capacity(objects.len());
        for obj in objects {
            listed.replace(Entry(obj));
        }
        let mut old = std::mem::replace(&mut *self.write(), listed);
        let current = self.read();
        old.retain(|entry| !current.contains(entry));
        old.into_iter().map(|entry| entry.0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// An object named `ns/name` carrying `n`.
    fn thing(ns: &str, name: &str, n: i64) -> Arc<Value> {
        Arc::new(json!({"metadata": {"namespace": ns, "name": name}, "n": n}))
    }

    #[test]
    fn queries_and_sync_signal() {
        let store = Store::new();
        assert!(!store.is_synced());
        assert!(!store.wait_until_synced(Duration::from_millis(10)));
        store.upsert(thing("a", "x", 1));
        store.upsert(thing("b", "y", 2));
        assert_eq!(store.len(), 2);
        assert_eq!(store.list_namespace("a"), vec![thing("a", "x", 1)]);
        assert_eq!(store.find(|o| o["n"] == 2), vec![thing("b", "y", 2)]);
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || store.wait_until_synced(Duration::from_secs(60)))
        };
        store.mark_synced();
        assert!(waiter.join().unwrap());
        let gone = store.replace(vec![thing("b", "y", 3), thing("b", "y", 4)]);
        assert_eq!(gone, vec![thing("a", "x", 1)], "only what is gone");
        assert_eq!(store.keys(), vec![ObjectKey::new("b", "y")]);
        assert_eq!(
            store.get(&ObjectKey::new("b", "y")),
            Some(thing("b", "y", 4)),
            "of two listed under one key, the later stays"
        );
        let gone = store.replace(Vec::new());
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
        assert_eq!(store.upsert(Arc::new(obj.clone())), None);
        assert_eq!(*store.get(&key).unwrap(), obj);
        let newer = json!({"metadata": {"name": "m", "namespace": "ns"}});
        assert_eq!(*store.upsert(Arc::new(newer.clone())).unwrap(), obj);
        assert_eq!(*store.remove(&key).unwrap(), newer);
        assert_eq!(store.get(&key), None);
    }

    #[test]
    fn namespace_and_name_are_told_apart() {
        // "a/bc" and "ab/c" join to the same text: the key is the pair.
        let store = Store::new();
        store.upsert(thing("a", "bc", 1));
        store.upsert(thing("ab", "c", 2));
        store.upsert(thing("", "abc", 3));
        assert_eq!(store.len(), 3);
        assert_eq!(
            store.get(&ObjectKey::new("a", "bc")),
            Some(thing("a", "bc", 1))
        );
        assert_eq!(
            store.get(&ObjectKey::new("ab", "c")),
            Some(thing("ab", "c", 2))
        );
        assert_eq!(
            store.get(&ObjectKey::new("", "abc")),
            Some(thing("", "abc", 3))
        );
        assert_eq!(store.get(&ObjectKey::new("abc", "")), None);
        assert_eq!(
            store.remove(&ObjectKey::new("ab", "c")),
            Some(thing("ab", "c", 2))
        );
        assert_eq!(
            store.get(&ObjectKey::new("a", "bc")),
            Some(thing("a", "bc", 1))
        );
    }
}
