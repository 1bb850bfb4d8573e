//! The CRD types (serde) of `infrastructure.cluster.x-k8s.io/v1beta1`, the
//! few Cluster API fields we read, condition helpers and merge-patch diffs.
//!
//! These types are the one shape of an object in the process: informers
//! decode watch events straight into them and cache them as `Arc<T>` (each
//! is a [`runtime::Object`](crate::runtime::Object), see [`meta`]), the
//! event mappers and reconcilers read the same values. A type names only
//! the fields that are read or written; decoding drops the rest, which is
//! the cache's projection.
//!
//! - [`MaasCluster`], [`MaasMachine`], [`MaasMachineTemplate`]: field names
//!   byte-identical to the Go provider.
//! - [`MaasRemediation`]: Cluster API external remediation (CAPM3's
//!   Metal3Remediation shape).
//! - [`capi`]: the fields of Cluster API's `Cluster` and `Machine` we read.
//! - [`conditions`]: metav1 conditions (`set`, `set_ready_summary`).
//! - [`ipam`]: Cluster API's `IPAddressClaim` and `IPAddress`.

pub mod capi;
pub mod conditions;
pub mod ipam;
pub mod maas_cluster;
pub mod maas_machine;
pub mod maas_remediation;
pub mod meta;
pub mod names;

pub use conditions::{Condition, Desired, Status};
pub use maas_cluster::{
    ApiEndpoint, FailureDomain, IdentityRef, Initialization, MaasCluster, MaasClusterSpec,
    MaasClusterStatus,
};
pub use maas_machine::{
    MaasMachine, MaasMachineSpec, MaasMachineStatus, MaasMachineTemplate,
    MaasMachineTemplateStatus, MachineAddress, NodeInfo,
};
pub use maas_remediation::{MaasRemediation, MaasRemediationStatus};
pub use meta::{ObjectMeta, OwnerReference, StringMap};

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1beta1";
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
