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
//!   object; `.close(deadline)` writes what is queued and joins its thread.
//! - [`Shutdown`], [`listen_for_signals`], [`join_within`] (in `shutdown`):
//!   SIGTERM/SIGINT → stop.
//!
//! # Lifecycle (as `controllers::manager` runs it)
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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use cache::Store;
pub use events::{EventRecorder, DEDUP_WINDOW};
pub use informer::{Event, Informer, InformerConfig};
pub use leader::{default_identity, LeaderConfig, LeaderElector, LeaderGate, Leadership};
pub use object::{Object, ObjectKey};
pub use queue::{RateLimit, WorkQueue};
pub use shutdown::{join_within, listen_for_signals, Shutdown};
pub use workers::{run_workers, spawn_resync, Action};

/// 64 random bits, for jitter and identities. Falls back to the clock if
/// the OS source fails: neither use needs cryptographic quality.
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// `t` in RFC 3339 UTC, as Kubernetes writes `Time` (`micros == false`:
/// `2006-01-02T15:04:05Z`) or `MicroTime` (`micros == true`:
/// `2006-01-02T15:04:05.000000Z`).
fn format_time(t: SystemTime, micros: bool) -> String {
    let since_epoch = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since_epoch.as_secs();
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let (h, m, s) = (of_day / 3600, of_day % 3600 / 60, of_day % 60);
    if micros {
        let us = since_epoch.subsec_micros();
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{us:06}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
    }
}

/// Year, month, day of the `days`th day after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A duration picked uniformly at random in `[min, max]`.
fn random_between(min: Duration, max: Duration) -> Duration {
    if max <= min {
        return min;
    }
    let fraction = (random_u64() >> 11) as f64 / (1u64 << 53) as f64;
    min + (max - min).mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_kubernetes_times() {
        let t = UNIX_EPOCH + Duration::from_micros(1_764_470_096_123_456);
        assert_eq!(format_time(t, false), "2025-11-30T02:34:56Z");
        assert_eq!(format_time(t, true), "2025-11-30T02:34:56.123456Z");
        assert_eq!(format_time(UNIX_EPOCH, false), "1970-01-01T00:00:00Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_time(leap, false), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn random_between_stays_in_range() {
        let (min, max) = (Duration::from_secs(300), Duration::from_secs(600));
        let picks: Vec<_> = (0..100).map(|_| random_between(min, max)).collect();
        assert!(picks.iter().all(|d| *d >= min && *d <= max));
        assert!(picks.iter().any(|d| *d != picks[0]), "not constant");
        assert_eq!(random_between(max, min), max);
    }
}
