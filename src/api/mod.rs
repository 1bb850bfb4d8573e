//! The CRD types (serde) of `infrastructure.cluster.x-k8s.io/v1beta1`, the
//! few Cluster API fields we read, condition helpers and merge-patch diffs.
//!
//! - [`MaasCluster`], [`MaasMachine`], [`MaasMachineTemplate`]: field names
//!   byte-identical to the Go provider; every struct keeps unknown fields in
//!   `extra` so writing an object back never drops a field.
//! - [`capi`]: read-only projections of `Cluster` and `Machine`.
//! - [`conditions`]: metav1 conditions (`set`, `set_ready_summary`).
//! - [`patch::merge_diff`]: the merge patch between what was read and what
//!   should be; `None` means "write nothing".

pub mod capi;
pub mod conditions;
pub mod maas_cluster;
pub mod maas_machine;
pub mod meta;
pub mod patch;

pub use conditions::{Condition, Desired, Status};
pub use maas_cluster::{
    ApiEndpoint, FailureDomain, Initialization, MaasCluster, MaasClusterSpec, MaasClusterStatus,
};
pub use maas_machine::{
    MaasMachine, MaasMachineSpec, MaasMachineStatus, MaasMachineTemplate, MachineAddress,
};
pub use meta::{ObjectMeta, OwnerReference};

pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
pub const VERSION: &str = "v1beta1";
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
