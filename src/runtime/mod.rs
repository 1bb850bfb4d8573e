//! Generic controller machinery on threads: watch threads and caches, the
//! work queue, worker pools, Lease leader election, events, shutdown.
//!
//! Knows Kubernetes (through [`crate::kube`]) but nothing of MAAS or of our
//! CRDs. The data flow, one thread per box:
//!
//! ```text
//! Informer (per kind) ──► Store (ns/name → Arc<Value>) ──► handler(&Event) ──► WorkQueue
//!   list → watch → resume / 410 → relist                    (controllers map          │
//!                                                            events to keys)          ▼
//!                  LeaderElector ──► LeaderGate ──────────────────────────► run_workers(reconcile)
//! ```
//!
//! # The API in one place
//!
//! - [`ObjectKey`]: `namespace/name` of an object (namespace empty for
//!   cluster-scoped kinds).
//! - [`Store`] (in `cache`): `get`, `list`, `list_namespace`, `find`, `keys`,
//!   `is_synced`, `wait_until_synced`.
//! - [`WorkQueue`] (in `queue`): client-go semantics. `add`, `add_after`,
//!   `add_rate_limited`, `forget`, `num_requeues`, `get` (blocks; `None`
//!   after shutdown), `done`, `len`, `shutdown`. Retry policy: [`RateLimit`].
//! - [`Action`] and [`run_workers`] (in `workers`): a reconcile is
//!   `Fn(&ObjectKey) -> Result<Action, E>`; [`spawn_resync`] re-queues a
//!   store's keys every sync period.
//! - [`LeaderGate`] and [`Leadership`] (in `leader`): the switch workers
//!   check before each reconcile; [`LeaderGate::always_open`] without
//!   election.
//! - [`Shutdown`], [`listen_for_signals`], [`join_within`] (in `shutdown`):
//!   SIGTERM/SIGINT → stop; see that module for the sequence `main` follows.

mod cache;
mod leader;
mod queue;
mod shutdown;
mod workers;

use std::fmt;

use serde_json::Value;

pub use cache::Store;
pub use leader::{LeaderGate, Leadership};
pub use queue::{RateLimit, WorkQueue};
pub use shutdown::{join_within, listen_for_signals, Shutdown};
pub use workers::{run_workers, spawn_resync, Action};

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

    /// The key of an object, from its `metadata`; `None` without a name.
    pub fn of(obj: &Value) -> Option<ObjectKey> {
        let metadata = obj.get("metadata")?;
        let name = metadata.get("name")?.as_str()?;
        let namespace = metadata.get("namespace").and_then(Value::as_str);
        Some(ObjectKey::new(namespace.unwrap_or(""), name))
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
    }
}
