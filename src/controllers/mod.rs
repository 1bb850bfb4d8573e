//! The story: the MaasCluster and MaasMachine reconcilers and the workload
//! API poller. The only layer that joins MAAS and Kubernetes.
//!
//! Each reconcile reads its object from the caches, walks the steps of its
//! story in order (one module per step), and writes only what changed:
//!
//! - MaasCluster ([`cluster`]): owner Cluster → pause → finalizer → API DNS
//!   name (persisted before the record exists) → DNS record → endpoint →
//!   failure domains → DNS attachments (never emptied while control-plane
//!   machines exist) → API server availability (via [`api_poller`]) →
//!   conditions. Delete: wait for MaasMachines, delete the DNS record, drop
//!   the finalizer.
//! - MaasMachine ([`machine`]): owners → pause → finalizer → wait for
//!   cluster infrastructure and bootstrap data → find our allocation or
//!   allocate (crash-safe, marked with `agent_name`) → check the image →
//!   deploy → observe MAAS (power on, conditions, DNS attachment, Node
//!   providerID). Delete: leave DNS, release, drop the finalizer.
//!
//! The reconcilers talk through the traits of [`ports`]; [`adapters`] bind
//! them to the real `kube`/`maas` clients and the runtime caches.

pub mod adapters;
pub mod api_poller;
pub mod caches;
pub mod cluster;
mod error;
#[cfg(test)]
pub(crate) mod fake;
mod finalizer;
pub mod machine;
pub mod manager;
pub mod mappers;
pub mod ports;
mod status;

use std::sync::Arc;

pub use error::Error;
use ports::{ApiWatch, Clock, KubeApi, MaasApi, MachineQueue, WorkloadApi};

/// Behaviour switches from the command line.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Do not `PUT swap_size=0` before deploy (restricted MAAS users cannot).
    pub no_swap_update: bool,
    /// Erase disks when releasing a machine.
    pub release_erase: bool,
}

/// Everything a reconcile needs; shared by all workers of both controllers.
#[derive(Clone)]
pub struct Context {
    pub kube: Arc<dyn KubeApi>,
    pub maas: Arc<dyn MaasApi>,
    pub workload: Arc<dyn WorkloadApi>,
    pub api_watch: Arc<dyn ApiWatch>,
    /// Wakes MaasMachines waiting on the DNS record when it changes (their
    /// own requeue stays as the safety net).
    pub machine_queue: Arc<dyn MachineQueue>,
    pub clock: Arc<dyn Clock>,
    pub options: Options,
}

/// Every event a reconcile records is also counted, so the notable actions
/// (allocations, deploys, releases, power-ons, DNS writes) and failures show
/// on `/metrics` by reason.
pub(crate) fn count_action(kind: ports::Kind, reason: &str) {
    crate::metrics::counter_inc(
        "capmaas_actions_total",
        "Notable actions and failures of the controllers, by object kind and event reason.",
        &[("kind", kind.as_str()), ("reason", reason)],
    );
}

impl Context {
    /// Records an event on one of our objects: logged, sent to the API
    /// server (de-duplicated there by the recorder) and counted.
    pub(crate) fn record_event(
        &self,
        kind: ports::Kind,
        meta: &crate::api::ObjectMeta,
        type_: ports::EventType,
        reason: &str,
        message: &str,
    ) {
        let target = ports::EventTarget {
            kind,
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
        };
        let key = format!("{} {}/{}", kind.as_str(), meta.namespace, meta.name);
        match type_ {
            ports::EventType::Normal => log::info!("{key}: {reason}: {message}"),
            ports::EventType::Warning => log::warn!("{key}: {reason}: {message}"),
        }
        self.kube.event(&target, type_, reason, message);
        count_action(kind, reason);
    }

    pub(crate) fn now_rfc3339(&self) -> String {
        crate::api::conditions::format_rfc3339(self.clock.now())
    }
}
