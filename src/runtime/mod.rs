//! Generic controller machinery on threads: watch threads and caches, the
//! work queue, worker pools, Lease leader election, events, shutdown.
//!
//! Knows Kubernetes (through [`crate::kube`]) but nothing of MAAS or of our
//! CRDs. The data flow, one thread per box:
//!
//! ```text
//! Store<T> (created first) ◄── Informer<T> (per kind) ──► handler(&Event<T>) ──► WorkQueue
//!   ns/name → Arc<T>             list → watch → resume      (controllers map          │
//!                                / 410 → relist             events to keys)           ▼
//!                  LeaderElector ──► LeaderGate ──────────────────────────► run_workers(reconcile)
//! ```
//!
//! # The API in one place
//!
//! - [`ObjectKey`]: `namespace/name` of an object (namespace empty for
//!   cluster-scoped kinds). [`Object`] (in `object`): what a cached type
//!   must tell: its key and resourceVersion. The `api` structs implement it;
//!   so does `serde_json::Value`.
//! - [`Store<T>`](Store) (in `cache`): `namespace/name → Arc<T>`, created
//!   before its informer and shared with every reader. `get`, `list`,
//!   `list_namespace`, `find`, `keys`, `is_synced`, `wait_until_synced`.
//! - [`Informer`] (in `informer`): `Informer::spawn(client,
//!   InformerConfig::new(resource).namespace(..).label_selector(..), store,
//!   |event: &Event<T>| ..., shutdown)`; `informer.stop()` after shutdown.
//!   Each object is decoded once, from the wire straight into `T`. [`Event`]
//!   is `Added(obj)`, `Modified { old, new }` or `Deleted(obj)` with
//!   `Arc<T>` objects (the store's own); the handler runs on the watch
//!   thread after the store has applied the change. This is where
//!   controllers map events to keys (a Machine → its MaasMachine, ...).
//! - [`WorkQueue`] (in `queue`): client-go semantics. `add`, `add_after`,
//!   `add_rate_limited`, `forget`, `num_requeues`, `get` (blocks; `None`
//!   after shutdown), `done`, `len`, `shutdown`. Retry policy: [`RateLimit`].
//! - [`Action`] and [`run_workers`] (in `workers`): a reconcile is
//!   `Fn(&ObjectKey) -> Result<Action, E>`; [`spawn_resync`] re-queues a
//!   store's keys every sync period.
//! - [`LeaderGate`] and [`Leadership`] (in `leader`): the switch workers
//!   check before each reconcile and probes read; `LeaderGate::standby()`
//!   for an election, [`LeaderGate::always_open`] without one.
//!   [`LeaderElector`]: `LeaderElector::spawn(client, LeaderConfig::new(ns,
//!   name), gate)` opens and closes that gate; `.lost()` (a channel that
//!   fires on loss: exit non-zero), `.release()` on clean shutdown (joins
//!   its thread).
//! - [`EventRecorder`] (in `events`): `EventRecorder::spawn(client,
//!   "capmaas", instance)`, `.normal(&obj, reason, message)`,
//!   `.warning(..)`; never blocks, aggregates repeats, rate-limits per
//!   object; `.close(deadline)` writes what is queued and joins its threads.
//! - [`Shutdown`], [`listen_for_signals`], [`join_within`] (in `shutdown`):
//!   SIGTERM/SIGINT → stop.
//!
//! # Lifecycle (as `operator` runs it)
//!
//! ```text
//! shutdown = Shutdown::new(); listen_for_signals(&shutdown)   // 2nd signal: exit 1 at once
//! stores; informers into them (handlers add keys to queues) → wait_until_synced
//! gate = LeaderGate::standby(); LeaderElector::spawn(.., gate)   (or LeaderGate::always_open())
//! workers = run_workers(.., gate); spawn_resync(..)
//! select { shutdown fired → graceful | elector.lost() → exit non-zero }
//! shutdown.trigger(); queue.shutdown() → join_within(workers, deadline)
//!   → events.close(..) → elector.release() → informer.stop() each → join the rest
//! ```
//!
//! Every thread is joined: an informer's `stop` closes its own connections,
//! so a watch blocked on a quiet connection returns at once.
//!
//! # Metrics (through [`crate::metrics`])
//!
//! - Work queue, label `name`: `workqueue_depth`, `workqueue_adds_total`,
//!   `workqueue_retries_total`, `workqueue_queue_duration_seconds`,
//!   `workqueue_work_duration_seconds`.
//! - Workers, label `controller`: `controller_runtime_reconcile_total`
//!   (plus `result` = `success` | `error` | `requeue_after`),
//!   `controller_runtime_reconcile_errors_total`,
//!   `controller_runtime_reconcile_time_seconds`,
//!   `controller_runtime_active_workers`,
//!   `controller_runtime_max_concurrent_reconciles`.
//! - Informers, label `informer`: `informer_lists_total`,
//!   `informer_watches_total`, `informer_errors_total`.
//! - Election, label `name` (the Lease): `leader_election_master_status`.

mod cache;
mod events;
mod informer;
mod leader;
mod object;
mod queue;
mod shutdown;
mod workers;

pub use cache::Store;
pub use events::{EventRecorder, DEDUP_WINDOW};
pub use informer::{Event, Informer, InformerConfig};
pub use leader::{default_identity, LeaderConfig, LeaderElector, LeaderGate, Leadership};
pub use object::{Object, ObjectKey};
pub use queue::{RateLimit, WorkQueue};
pub use shutdown::{join_within, listen_for_signals, Shutdown};
pub use workers::{run_workers, spawn_resync, Action};
