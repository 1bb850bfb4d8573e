//! The small traits the reconcilers talk through, so each step can be tested
//! against in-memory fakes (`controllers::fake`, in tests) and run against
//! the real clients, bound by the wiring (`operator::adapters` for
//! Kubernetes, `operator::credentials` for each identity's MAAS).
//!
//! - [`MaasApi`] (`crate::maas::MaasApi`): the MAAS calls the controllers
//!   make, implemented by `maas::Client` itself; the reconcilers reach it
//!   through a [`MaasView`], which answers what the MAAS watch's view and
//!   short-lived caches know in its place.
//! - [`MaasClients`]: the [`MaasView`] of a cluster's MAAS, with its
//!   credentials.
//! - [`KubeApi`]: reads from the informer caches, per-name Secret GETs, the
//!   few writes (merge patches of our own objects), events.
//!
//! Each port returns its client's own error (`maas::Error`, `kube::Error`),
//! classified by that error's methods (`is_transient`, `is_not_found`,
//! `is_conflict`, `is_refused`); fakes build the same errors.
//! - [`WorkloadApi`]: the workload cluster, reached through its
//!   `<cluster>-kubeconfig` Secret: a liveness probe and Node providerIDs.
//! - [`ApiWatch`]: the handle of the one thread that polls workload API
//!   servers (`operator::api_poller`).
//! - [`MachineQueue`]: the MaasMachine work queue, for the MaasCluster
//!   reconciler to wake machines waiting on the DNS record.
//! - [`Clock`]: wall time, fixed in tests.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::maas_view::MaasView;
use crate::api::capi::{self, Cluster};
use crate::api::ipam::{IpAddress, IpAddressClaim};
use crate::api::{Condition, IdentityRef, MaasCluster, MaasMachine, MaasRemediation};
use crate::kube;
pub use crate::maas::MaasApi;

/// The MAAS of one cluster: reached with its own credentials
/// (`MaasCluster.spec.identityRef`, a Secret in its namespace) or, without
/// one, the controller-wide credentials.
pub trait MaasClients: Send + Sync {
    fn for_cluster(
        &self,
        namespace: &str,
        identity: Option<&IdentityRef>,
    ) -> Result<Arc<MaasView>, CredentialsError>;
}

/// Why a cluster's MAAS cannot be used; the message is for a condition and
/// never carries the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialsError {
    /// The Secret is missing or unusable: a user must fix it.
    Invalid(String),
    /// MAAS answered and refused the credentials (or is not MAAS, or TLS
    /// failed): waiting will not fix it.
    Refused(String),
    /// The Secret or MAAS could not be read now: retried with backoff.
    Unavailable(String),
}

impl CredentialsError {
    pub fn message(&self) -> &str {
        match self {
            CredentialsError::Invalid(m)
            | CredentialsError::Refused(m)
            | CredentialsError::Unavailable(m) => m,
        }
    }
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CredentialsError {}

/// The objects the controllers patch: our own kinds, and the Cluster API
/// Machine (only its pre-drain hook annotation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    MaasCluster,
    MaasMachine,
    MaasRemediation,
    Machine,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::MaasCluster => crate::api::maas_cluster::KIND,
            Kind::MaasMachine => crate::api::maas_machine::KIND,
            Kind::MaasRemediation => crate::api::maas_remediation::KIND,
            Kind::Machine => crate::kube::resources::MACHINES.kind,
        }
    }
}

/// The object an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTarget {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

pub trait KubeApi: Send + Sync {
    // Reads, from the informer caches: the cached objects themselves.
    fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>>;
    fn machine(&self, namespace: &str, name: &str) -> Option<Arc<capi::Machine>>;
    fn maas_cluster(&self, namespace: &str, name: &str) -> Option<Arc<MaasCluster>>;
    /// Every MaasCluster this controller watches.
    fn maas_clusters(&self) -> Vec<Arc<MaasCluster>>;
    fn maas_machine(&self, namespace: &str, name: &str) -> Option<Arc<MaasMachine>>;
    fn maas_remediation(&self, namespace: &str, name: &str) -> Option<Arc<MaasRemediation>>;
    /// MaasMachines labelled `cluster.x-k8s.io/cluster-name=<cluster>`,
    /// by name.
    fn maas_machines_of_cluster(&self, namespace: &str, cluster: &str) -> Vec<Arc<MaasMachine>>;
    /// The Machines whose `spec.infrastructureRef` names this MaasMachine.
    fn machines_of_maas_machine(
        &self,
        namespace: &str,
        maas_machine: &str,
    ) -> Vec<Arc<capi::Machine>>;

    /// One key of one Secret, by a direct GET (Secrets are never cached).
    /// `Ok(None)` when the Secret or the key does not exist.
    fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, kube::Error>;

    // Cluster API IPAM, by direct requests (claims are few and read only
    // while a machine waits for its addresses).
    /// `Ok(None)` when the claim does not exist.
    fn ip_address_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<IpAddressClaim>, kube::Error>;
    /// Creates the claim (the whole object); `AlreadyExists` is an error.
    fn create_ip_address_claim(&self, namespace: &str, claim: &Value) -> Result<(), kube::Error>;
    /// Deletes the claim; one that does not exist is not an error.
    fn delete_ip_address_claim(&self, namespace: &str, name: &str) -> Result<(), kube::Error>;
    /// `Ok(None)` when the address does not exist.
    fn ip_address(&self, namespace: &str, name: &str) -> Result<Option<IpAddress>, kube::Error>;

    /// JSON merge patch of the object (metadata, spec). A patch carrying
    /// `metadata.resourceVersion` fails with `Conflict` if the object changed.
    /// Returns the object's new resourceVersion.
    fn patch(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<String, kube::Error>;
    /// JSON merge patch of the status subresource; returns the new resourceVersion.
    fn patch_status(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<String, kube::Error>;

    /// Sets one condition in a Cluster API Machine's `status.conditions`
    /// (server-side apply: that list is a map keyed by type, so the other
    /// conditions stay as they are, and nothing is read first).
    fn apply_machine_condition(
        &self,
        namespace: &str,
        name: &str,
        condition: &Condition,
    ) -> Result<(), kube::Error>;

    /// Records a core/v1 Event; failures are logged, never returned.
    fn event(&self, target: &EventTarget, type_: EventType, reason: &str, message: &str);
}

/// A workload cluster Node, as far as providerIDs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub provider_id: Option<String>,
    /// When its `Ready` condition last turned True (`metav1.Time`); `None`
    /// while it is not True. A Node that was never seen down after a power
    /// cycle still shows the Ready of before it.
    pub ready_since: Option<String>,
    /// It carries the [`OUT_OF_SERVICE_TAINT`].
    pub out_of_service: bool,
    /// `metadata.uid`: a Node deleted and registered again has a new one.
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Kubernetes' non-graceful node shutdown taint (`NoExecute`): pods on the
/// Node are deleted at once and their volumes detached, so that stateful
/// pods start elsewhere while the machine is down.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// The workload cluster of `<namespace>/<cluster>`, reached with the
/// kubeconfig in Secret `<cluster>-kubeconfig` (re-read on every call: the
/// control plane rotates its client certificate). It is a Kubernetes API,
/// so its errors are `kube::Error`s: an unusable Secret or kubeconfig is a
/// `Config` error, the rest are what the workload API server answered.
pub trait WorkloadApi: Send + Sync {
    /// Does the API server answer (with a short timeout)?
    fn probe(&self, namespace: &str, cluster: &str) -> Result<(), kube::Error>;
    /// Does the API server on this one machine answer (`https://<address>`
    /// at the endpoint's port, the same request and short timeout as
    /// [`WorkloadApi::probe`])? The serving certificate names the machine's
    /// address, as kubeadm's does.
    fn probe_address(
        &self,
        namespace: &str,
        cluster: &str,
        address: &str,
    ) -> Result<(), kube::Error>;
    fn node(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
    ) -> Result<Option<NodeInfo>, kube::Error>;
    fn set_node_provider_id(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
        provider_id: &str,
    ) -> Result<(), kube::Error>;
    /// JSON merge patch of the Node's `metadata` (`labels` and
    /// `annotations`: a string sets the key, null removes it; keys not
    /// named are left as they are).
    fn patch_node_metadata(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
        metadata: &Value,
    ) -> Result<(), kube::Error>;
    /// Adds (`true`) or removes (`false`) the [`OUT_OF_SERVICE_TAINT`],
    /// keeping the Node's other taints; a Node already so is not written.
    fn set_node_out_of_service(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
        out_of_service: bool,
    ) -> Result<(), kube::Error>;
}

/// The API poller seen from the MaasCluster reconciler.
pub trait ApiWatch: Send + Sync {
    /// Start (or keep) polling the workload API of this MaasCluster's Cluster.
    fn watch(&self, namespace: &str, maas_cluster: &str, cluster: &str);
    /// Has the API answered since the last call? Consumes the answer.
    fn take_online(&self, namespace: &str, maas_cluster: &str) -> bool;
    /// Stop polling (the MaasCluster is gone or being deleted).
    fn forget(&self, namespace: &str, maas_cluster: &str);
    /// Has the API server of the control-plane machine at `address`
    /// answered? If not (yet), starts (or keeps) probing it; the answer
    /// re-queues the MaasCluster. The mark stays until
    /// [`ApiWatch::keep_addresses`] drops it.
    fn address_answers(
        &self,
        namespace: &str,
        maas_cluster: &str,
        cluster: &str,
        address: &str,
    ) -> bool;
    /// Stop probing, and forget the answers of, every address of this
    /// MaasCluster but these (those still waiting to join the record).
    fn keep_addresses(&self, namespace: &str, maas_cluster: &str, keep: &[String]);
}

/// The MaasMachine work queue seen from the MaasCluster reconciler.
pub trait MachineQueue: Send + Sync {
    /// Reconcile this MaasMachine soon (deduplicated with pending work).
    fn reconcile_soon(&self, namespace: &str, name: &str);
}

pub trait Clock: Send + Sync {
    /// Seconds since the Unix epoch.
    fn now(&self) -> u64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}
