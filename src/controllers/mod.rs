//! The story: the MaasCluster, MaasMachine and MaasRemediation reconcilers.
//! They hold no client: they read through the [`ports`] and return or call
//! what to write; [`crate::operator`] runs them. With the wiring, the only
//! layer that joins MAAS and Kubernetes.
//!
//! Following one watch event to a MAAS call:
//!
//! ```text
//! informer decodes a MaasMachine (api type) ─► caches.maas_machines: Arc<MaasMachine>
//!   ─► operator::mappers::on_maas_machine(&Event<MaasMachine>, &caches) ─► keys ─► work queue
//!   ─► worker ─► machine::reconcile(ctx, ns, name): ctx.kube.maas_machine(..) (the same Arc)
//!   ─► Reconciling<MaasMachine>: steps call r.maas() (MaasView ─dyn MaasApi─► maas::Client),
//!      set conditions ─► finish(): one status diff patch
//! ```
//!
//! - [`crate::operator`]: starts and stops everything (informers into
//!   [`caches`], mappers onto three queues, workers, leader election, api
//!   poller).
//! - `reconciling`: the scaffold the reconcilers share (conditions, events,
//!   finalizer, guarded patches, the one status write at the end).
//!
//! Each reconcile reads its object from the caches, walks the steps of its
//! story in order (one module per step), and writes only what changed:
//!
//! - MaasCluster ([`cluster`]): owner Cluster → pause → finalizer → API DNS
//!   name (persisted before the record exists) → DNS record → endpoint →
//!   failure domains → DNS attachments (never emptied while control-plane
//!   machines exist) → API server availability (via `operator::api_poller`) →
//!   conditions. Delete: wait for MaasMachines, delete the DNS record, drop
//!   the finalizer.
//! - MaasMachine ([`machine`]): owners → pause → finalizer → wait for
//!   cluster infrastructure and bootstrap data → find our allocation or
//!   allocate (crash-safe, marked with `agent_name`) → check the image →
//!   deploy → observe MAAS (power on, conditions, DNS attachment, Node
//!   providerID). Delete: leave DNS, release, drop the finalizer.
//! - MaasRemediation ([`remediation`], created by a MachineHealthCheck):
//!   power-cycle the MAAS machine up to `retryLimit` times, then hand the
//!   Machine back to its owner (`OwnerRemediated=False`) for replacement.
//!
//! The reconcilers talk through the traits of [`ports`], holding no client;
//! the wiring binds them to the real clients (`operator::adapters`: the
//! `kube` client and the caches; `operator::credentials`: each identity's
//! MAAS client), and `maas::Client` implements [`ports::MaasApi`] itself; [`maas_view`] is each cluster's
//! MAAS as a reconcile gets it: that client, plus machine reads from the
//! MAAS watch's view (and boot resources, DNS records from short-lived
//! caches), and `operator::maas_watch` turns what the
//! watch sees in MAAS into reconciles, Events and the orphan report. Errors are the
//! clients' own (`maas::Error`, `kube::Error`), wrapped in [`Error`].

pub mod caches;
pub mod cluster;
mod error;
#[cfg(test)]
pub(crate) mod fake;
pub mod identity;
pub mod maas_view;
pub mod machine;
pub mod matching;
pub mod ports;
mod reconciling;
pub mod remediation;

use std::sync::Arc;

pub use error::Error;
use ports::{ApiWatch, Clock, KubeApi, MaasClients, MachineQueue, WorkloadApi};

/// Behaviour switches from the command line.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Do not `PUT swap_size=0` before deploy (restricted MAAS users cannot).
    pub no_swap_update: bool,
    /// Erase disks when releasing a machine.
    pub release_erase: bool,
    /// A running control-plane machine joins the DNS record without its
    /// API server being probed first (a manager that cannot reach the
    /// machines' addresses).
    pub dns_attach_without_api_check: bool,
    /// Do not label Nodes with MAAS's zone, pool and tags.
    pub no_node_maas_labels: bool,
}

/// Everything a reconcile needs; shared by all workers of both controllers.
#[derive(Clone)]
pub struct Context {
    pub kube: Arc<dyn KubeApi>,
    /// Each cluster's MAAS (its `spec.identityRef`, else the controller's).
    pub maas: Arc<dyn MaasClients>,
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
