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
#[serde(default)]
pub struct IpAddressClaim {
    pub metadata: ObjectMeta,
    pub status: IpAddressClaimStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IpAddressClaimStatus {
    #[serde(rename = "addressRef", default)]
    pub address_ref: Option<LocalRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct LocalRef {
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct IpAddress {
    pub metadata: ObjectMeta,
    pub spec: IpAddressSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct IpAddressSpec {
    pub address: String,
    pub prefix: u8,
    pub gateway: Option<String>,
}
