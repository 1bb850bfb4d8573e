//! The few Cluster API (cluster.x-k8s.io) fields the controllers read.
//! Read-only projections: unknown fields are dropped because these objects
//! are never written back.

use serde::Deserialize;

use super::maas_cluster::ApiEndpoint;
use super::meta::ObjectMeta;

pub const GROUP: &str = "cluster.x-k8s.io";
pub const CLUSTER_KIND: &str = "Cluster";
pub const MACHINE_KIND: &str = "Machine";

pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Present (with an empty value) on control-plane Machines and infra objects.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

pub const DEFAULT_API_SERVER_PORT: i64 = 6443;

/// The workload kubeconfig Secret of a cluster (key `value`).
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Cluster {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ClusterSpec,
    #[serde(default)]
    pub status: ClusterStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    #[serde(default)]
    pub paused: Option<bool>,
    #[serde(default)]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    #[serde(default)]
    pub cluster_network: Option<ClusterNetwork>,
    #[serde(default)]
    pub infrastructure_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    #[serde(default)]
    pub api_server_port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ObjectRef {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    #[serde(default)]
    pub initialization: Option<ClusterInitialization>,
    /// v1beta1 field, still honoured when a v1beta1 object is served.
    #[serde(default)]
    pub infrastructure_ready: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default)]
    pub infrastructure_provisioned: Option<bool>,
    #[serde(default)]
    pub control_plane_initialized: Option<bool>,
}

impl Cluster {
    pub fn is_paused(&self) -> bool {
        self.spec.paused.unwrap_or(false)
    }

    pub fn infrastructure_provisioned(&self) -> bool {
        let v1beta2 = self
            .status
            .initialization
            .as_ref()
            .and_then(|i| i.infrastructure_provisioned);
        v1beta2
            .or(self.status.infrastructure_ready)
            .unwrap_or(false)
    }

    /// `spec.clusterNetwork.apiServerPort`, else 6443.
    pub fn api_server_port(&self) -> i64 {
        self.spec
            .cluster_network
            .as_ref()
            .and_then(|n| n.api_server_port)
            .filter(|p| *p > 0)
            .unwrap_or(DEFAULT_API_SERVER_PORT)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Machine {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MachineSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub bootstrap: Bootstrap,
    #[serde(default)]
    pub failure_domain: Option<String>,
    #[serde(default)]
    pub infrastructure_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bootstrap {
    #[serde(default)]
    pub data_secret_name: Option<String>,
}

impl Machine {
    pub fn is_control_plane(&self) -> bool {
        self.metadata.has_label(CONTROL_PLANE_LABEL)
    }

    pub fn bootstrap_secret(&self) -> Option<&str> {
        self.spec
            .bootstrap
            .data_secret_name
            .as_deref()
            .filter(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v1beta2_and_v1beta1_cluster_fields() {
        let c: Cluster = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "spec": {"paused": true, "clusterNetwork": {"apiServerPort": 7443},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": "mc"}},
            "status": {"initialization": {"infrastructureProvisioned": true}}
        }))
        .unwrap();
        assert!(c.is_paused() && c.infrastructure_provisioned());
        assert_eq!(c.api_server_port(), 7443);
        let old: Cluster =
            serde_json::from_value(serde_json::json!({"status": {"infrastructureReady": true}}))
                .unwrap();
        assert!(old.infrastructure_provisioned());
        assert_eq!(old.api_server_port(), 6443);
    }

    #[test]
    fn machine_bootstrap_and_control_plane_label() {
        let m: Machine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m", "labels": {"cluster.x-k8s.io/control-plane": ""}},
            "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "m-boot"}}
        }))
        .unwrap();
        assert!(m.is_control_plane());
        assert_eq!(m.bootstrap_secret(), Some("m-boot"));
    }
}
