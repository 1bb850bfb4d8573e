//! `MaasCluster` (infrastructure.cluster.x-k8s.io/v1beta1), field names as in
//! the Go provider; status follows the Cluster API v1beta2 contract with the
//! legacy `ready` flag kept for v1beta1 readers.
//!
//! The types name what the controllers read and write; decoding drops the
//! rest (e.g. the Go provider's `spec.lxdConfig.nicType`), see `api::meta` for why
//! that is safe.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::conditions::Condition;
use super::meta::ObjectMeta;

pub const KIND: &str = "MaasCluster";
pub const FINALIZER: &str = "maascluster.infrastructure.cluster.x-k8s.io";

/// Condition types and reasons, byte-identical to the Go provider.
pub const LOAD_BALANCER_READY: &str = "LoadBalancerReady";
pub const LOAD_BALANCER_FAILED: &str = "LoadBalancerFailed";
pub const WAIT_FOR_DNS_NAME: &str = "WaitForDNSName";
pub const API_SERVER_AVAILABLE: &str = "APIServerAvailable";
pub const API_SERVER_NOT_READY: &str = "APIServerNotReady";
pub const WAITING_FOR_CLUSTER: &str = "WaitingForCluster";
pub const DELETING: &str = "Deleting";
/// Ours (the Go provider has one controller-wide MAAS key): whether the
/// MAAS credentials of the cluster (`spec.identityRef`, else the
/// controller's) could be read and MAAS accepts them.
pub const CREDENTIALS_READY: &str = "CredentialsReady";
pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
/// Another MaasCluster already uses the DNS name this one asks for.
pub const DNS_NAME_IN_USE: &str = "DNSNameInUse";
/// The DNS record of the name exists in MAAS without this cluster's mark
/// (someone else's): never used, changed or deleted.
pub const DNS_RECORD_NOT_OURS: &str = "DNSRecordNotOurs";
/// `LoadBalancerReady` reasons of VIP mode (`spec.controlPlaneVIP`): the
/// address is reserved in MAAS and is the endpoint; another MaasCluster
/// already has it; MAAS would not reserve it (the message says why).
pub const CONTROL_PLANE_VIP_RESERVED: &str = "ControlPlaneVIPReserved";
pub const CONTROL_PLANE_VIP_IN_USE: &str = "ControlPlaneVIPInUse";
pub const CONTROL_PLANE_VIP_FAILED: &str = "ControlPlaneVIPReservationFailed";
/// `DNSAttached` reason (True) of the control-plane MaasMachines of a
/// cluster in VIP mode: there is no DNS record to join.
pub const CONTROL_PLANE_VIP: &str = "ControlPlaneVIP";

/// `status.controlPlaneVIP.phase`: about to reserve (the reservation may
/// exist: a crash came between), reserved by this cluster (released with
/// it), or reserved for this MAAS user before the cluster asked (used,
/// never released by capmaas).
pub const VIP_RESERVING: &str = "Reserving";

/// The Go provider's mark (any value) of a cluster whose endpoint is the
/// user's (`spec.controlPlaneEndpoint`): capmaas makes no DNS record for it
/// and deletes none.
pub const CUSTOM_DNS_ANNOTATION: &str = "spectrocloud.com/custom-dns-provided";
/// `LoadBalancerReady` reason (True) of such a cluster, and `DNSAttached`
/// reason (True) of its control-plane machines.
pub const CUSTOM_ENDPOINT: &str = "CustomEndpointProvided";
/// `LoadBalancerReady` reason (False): the cluster is marked so and has
/// no endpoint yet.
pub const WAITING_FOR_CUSTOM_ENDPOINT: &str = "WaitingForCustomEndpoint";
/// `LoadBalancerReady` reason (False): a field asks for what capmaas does
/// not do (`spec.lxdConfig.enabled`, LXD VM hosts).
pub const UNSUPPORTED_FIELD: &str = "UnsupportedField";
pub const VIP_RESERVED: &str = "Reserved";
pub const VIP_EXTERNAL: &str = "External";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasCluster {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MaasClusterSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MaasClusterStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasClusterSpec {
    #[serde(default)]
    pub dns_domain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_domains: Vec<String>,
    /// The MAAS credentials of this cluster: a Secret in its namespace
    /// (keys `MAAS_ENDPOINT`, `MAAS_API_KEY`, optional `MAAS_CA_CERT`).
    /// Absent: the controller-wide credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityRef>,
    /// VIP mode: the API endpoint is this address (or one taken from this
    /// MAAS subnet), reserved in MAAS and held by kube-vip on the
    /// control-plane machines, instead of a MAAS DNS record.
    #[serde(
        default,
        rename = "controlPlaneVIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub control_plane_vip: Option<ControlPlaneVip>,
    /// The Go provider's HCP switch (machines become LXD VM hosts):
    /// `enabled: true` is refused, the rest is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lxd_config: Option<super::maas_machine::GoLxd>,
}

/// Exactly one of the two (CEL in the CRD).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlPlaneVip {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A MAAS subnet: CIDR, name or id, as MAAS's `subnet=` takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
}

/// What capmaas reserved for `spec.controlPlaneVIP`, written before and
/// after the MAAS call so a crash in between is recovered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneVipStatus {
    /// Empty only while reserving from a subnet.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// [`VIP_RESERVING`], [`VIP_RESERVED`] or [`VIP_EXTERNAL`].
    #[serde(default)]
    pub phase: String,
    /// While reserving from a subnet: the MAAS user's reservations before
    /// ours, so that ours is told from them after a crash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_before: Vec<String>,
}

/// Which credentials a cluster uses: the Cluster API multi-tenancy
/// contract's `identityRef` (CAPA, CAPV, CAPZ call it so). Only `Secret`
/// exists today; the kind leaves room for a cluster-scoped identity kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct IdentityRef {
    pub kind: String,
    pub name: String,
}

/// The only `identityRef.kind` there is.
pub const IDENTITY_KIND_SECRET: &str = "Secret";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApiEndpoint {
    pub host: String,
    pub port: i64,
}

impl ApiEndpoint {
    /// Cluster API's `APIEndpoint.IsValid`.
    pub fn is_valid(&self) -> bool {
        !self.host.is_empty() && self.port != 0
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasClusterStatus {
    /// Legacy v1beta1-contract flag, set together with `initialization.provisioned`.
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "failure_domains_any_shape"
    )]
    pub failure_domains: Vec<FailureDomain>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(
        default,
        rename = "controlPlaneVIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub control_plane_vip: Option<ControlPlaneVipStatus>,
    /// Machines released for node reuse (`MaasMachine.spec.nodeReuse`):
    /// MAAS system ID → `MachineDeployment/<name>` or `ControlPlane/<name>`,
    /// whose next Machine may take it again. In the status, where tenants
    /// cannot write. (A map of strings: its serde code exists already.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reusable_machines: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Initialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dns_name: String,
}

/// One entry of the v1beta2 `status.failureDomains` list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Map<String, Value>>,
}

/// Objects written by a v1beta1-contract provider carry a map here; read
/// it as empty so the controller rewrites it as a list instead of failing.
fn failure_domains_any_shape<'de, D>(de: D) -> Result<Vec<FailureDomain>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let value = Value::deserialize(de)?;
    match value {
        Value::Array(_) => serde_json::from_value(value).map_err(serde::de::Error::custom),
        _ => Ok(Vec::new()),
    }
}

impl MaasCluster {
    /// Carries `cluster.x-k8s.io/managed-by` (any value, as Cluster API
    /// reads it): its infrastructure is someone else's, capmaas leaves it
    /// alone (no finalizer, no DNS record, no status).
    pub fn is_externally_managed(&self) -> bool {
        self.metadata
            .has_annotation(super::capi::MANAGED_BY_ANNOTATION)
    }

    /// Carries the Go provider's `spectrocloud.com/custom-dns-provided`:
    /// the endpoint is the user's, no DNS record is ours.
    pub fn has_custom_endpoint(&self) -> bool {
        self.metadata.has_annotation(CUSTOM_DNS_ANNOTATION)
    }

    /// `spec.lxdConfig.enabled` (Go HCP mode), which capmaas refuses.
    pub fn lxd_hosts_enabled(&self) -> bool {
        self.spec.lxd_config.as_ref().and_then(|l| l.enabled) == Some(true)
    }

    pub fn status(&self) -> MaasClusterStatus {
        self.status.clone().unwrap_or_default()
    }

    /// The cluster's failure domains: `spec.failureDomains` if given, else
    /// those its status reports (the MAAS zones).
    pub fn failure_domain_names(&self) -> Vec<String> {
        if !self.spec.failure_domains.is_empty() {
            return self.spec.failure_domains.clone();
        }
        self.status
            .as_ref()
            .map(|s| s.failure_domains.iter().map(|d| d.name.clone()).collect())
            .unwrap_or_default()
    }

    pub fn dns_name(&self) -> Option<&str> {
        let name = self.status.as_ref()?.network.as_ref()?.dns_name.as_str();
        (!name.is_empty()).then_some(name)
    }

    /// The control-plane VIP as recorded in the status, once known.
    pub fn vip_address(&self) -> Option<&str> {
        let address = self
            .status
            .as_ref()?
            .control_plane_vip
            .as_ref()?
            .address
            .as_str();
        (!address.is_empty()).then_some(address)
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_field_names_round_trip() {
        let input = serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"dnsDomain": "maas",
                     "controlPlaneEndpoint": {"host": "c-abcdef.maas", "port": 6443}},
            "status": {"ready": true, "initialization": {"provisioned": true},
                       "network": {"dnsName": "c-abcdef.maas"},
                       "failureDomains": [{"name": "z1", "controlPlane": true}]}
        });
        let c: MaasCluster = serde_json::from_value(input.clone()).unwrap();
        assert_eq!(c.dns_name(), Some("c-abcdef.maas"));
        assert_eq!(serde_json::to_value(&c).unwrap(), input);
    }

    #[test]
    fn decoding_drops_what_is_not_read() {
        let whole = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "5", "generation": 1,
                         "labels": {"cluster.x-k8s.io/cluster-name": "c"}, "finalizers": [FINALIZER],
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                              "name": "c", "uid": "cu"}],
                         "deletionTimestamp": "2026-01-02T00:00:00Z",
                         "creationTimestamp": "2026-01-01T00:00:00Z", "selfLink": "/x"},
            "spec": {"dnsDomain": "maas", "lxdConfig": {"enabled": false, "nicType": "bridged"}},
            "status": {"ready": true, "network": {"dnsName": "c-abcdef.maas"},
                       "failureDomains": {"z1": {"controlPlane": true}}, "somethingNew": 1}
        });
        let c: MaasCluster = serde_json::from_value(whole).unwrap();
        assert!(c.metadata.is_being_deleted() && c.dns_name() == Some("c-abcdef.maas"));
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({
                "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "5",
                             "generation": 1, "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                             "finalizers": [FINALIZER],
                             "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                                  "kind": "Cluster", "name": "c", "uid": "cu"}],
                             "deletionTimestamp": "2026-01-02T00:00:00Z"},
                "spec": {"dnsDomain": "maas", "lxdConfig": {"enabled": false}},
                "status": {"ready": true, "network": {"dnsName": "c-abcdef.maas"}}
            })
        );
    }

    #[test]
    fn control_plane_vip_round_trips() {
        let input = serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"dnsDomain": "maas", "controlPlaneVIP": {"subnet": "lab"}},
            "status": {"ready": true,
                       "controlPlaneVIP": {"address": "10.0.0.7", "phase": "Reserving",
                                           "reservedBefore": ["10.0.0.3"]}}
        });
        let c: MaasCluster = serde_json::from_value(input.clone()).unwrap();
        let vip = c.spec.control_plane_vip.clone().unwrap();
        assert_eq!((vip.address, vip.subnet.as_deref()), (None, Some("lab")));
        assert_eq!(c.vip_address(), Some("10.0.0.7"));
        assert_eq!(serde_json::to_value(&c).unwrap(), input);
    }

    #[test]
    fn legacy_map_failure_domains_read_as_empty() {
        let c: MaasCluster = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"}, "spec": {"dnsDomain": "maas"},
            "status": {"ready": false, "failureDomains": {"z1": {"controlPlane": true}}}
        }))
        .unwrap();
        assert!(c.status().failure_domains.is_empty());
    }
}
