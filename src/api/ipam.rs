//! The Cluster API IPAM contract's `IPAddressClaim` and `IPAddress`
//! (`ipam.cluster.x-k8s.io/v1beta2`), as far as capmaas reads them: a
//! MaasMachine claims an address from a pool (`spec.poolRef`), the IPAM
//! provider answers with an `IPAddress` named by the claim's
//! `status.addressRef`.

use serde::{Deserialize, Serialize};

use super::meta::ObjectMeta;

pub const GROUP: &str = "ipam.cluster.x-k8s.io";
pub const API_VERSION: &str = "ipam.cluster.x-k8s.io/v1beta2";
pub const CLAIM_KIND: &str = "IPAddressClaim";

/// A pool of addresses (`InClusterIPPool`, `GlobalInClusterIPPool`, an
/// Infoblox pool, ...): the IPAM contract's `poolRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRef {
    #[serde(rename = "apiGroup", default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IpAddressClaim {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: IpAddressClaimStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IpAddressClaimStatus {
    #[serde(rename = "addressRef", default)]
    pub address_ref: Option<LocalRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LocalRef {
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IpAddress {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: IpAddressSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct IpAddressSpec {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub prefix: u8,
    #[serde(default)]
    pub gateway: Option<String>,
}
