//! The few Cluster API (cluster.x-k8s.io) fields the controllers and the
//! event mappers read. Read-only: these objects are never written, so the
//! types name only what is read and decoding drops the rest (Cluster API's
//! large Machine status: conditions, nodeInfo, addresses; a Cluster's
//! topology, clusterNetwork pods ...). That is the cache's projection.

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
/// On an infrastructure object whose infrastructure someone else manages
/// (Cluster API's `annotations.IsExternallyManaged`; the contract page says
/// "label", the code and the labels-and-annotations reference say
/// annotation). The provider leaves such an object alone.
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

pub const DEFAULT_API_SERVER_PORT: i64 = 6443;

/// The workload kubeconfig Secret of a cluster (key `value`).
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Cluster {
    pub metadata: ObjectMeta,
    pub spec: ClusterSpec,
    pub status: ClusterStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClusterSpec {
    pub paused: Option<bool>,
    pub control_plane_endpoint: Option<ApiEndpoint>,
    pub cluster_network: Option<ClusterNetwork>,
    pub infrastructure_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClusterNetwork {
    pub api_server_port: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ObjectRef {
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClusterStatus {
    pub initialization: Option<ClusterInitialization>,
    /// v1beta1 field, still honoured when a v1beta1 object is served.
    pub infrastructure_ready: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClusterInitialization {
    pub infrastructure_provisioned: Option<bool>,
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
#[serde(default)]
pub struct Machine {
    pub metadata: ObjectMeta,
    pub spec: MachineSpec,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MachineSpec {
    pub cluster_name: String,
    pub bootstrap: Bootstrap,
    pub failure_domain: Option<String>,
    pub infrastructure_ref: Option<ObjectRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Bootstrap {
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
    fn a_whole_cluster_decodes_to_what_is_read() {
        let whole = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "generation": 2, "labels": {"l": "v"},
                         "annotations": {"cluster.x-k8s.io/paused": ""},
                         "finalizers": ["cluster.cluster.x-k8s.io"],
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"paused": true,
                     "clusterNetwork": {"apiServerPort": 7443, "pods": {"cidrBlocks": ["10.0.0.0/8"]}},
                     "controlPlaneEndpoint": {"host": "h", "port": 6443},
                     "controlPlaneRef": {"kind": "KubeadmControlPlane", "name": "cp"},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": "mc"},
                     "topology": {"class": "x"}},
            "status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true},
                       "infrastructureReady": true, "phase": "Provisioned",
                       "conditions": [{"type": "Available", "status": "True"}]}
        });
        // What was read before (the old projection of the cached object).
        let read = serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "generation": 2, "labels": {"l": "v"},
                         "annotations": {"cluster.x-k8s.io/paused": ""},
                         "finalizers": ["cluster.cluster.x-k8s.io"]},
            "spec": {"paused": true, "clusterNetwork": {"apiServerPort": 7443},
                     "controlPlaneEndpoint": {"host": "h", "port": 6443},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": "mc"}},
            "status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true},
                       "infrastructureReady": true}
        });
        let whole: Cluster = serde_json::from_value(whole).unwrap();
        let read: Cluster = serde_json::from_value(read).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{read:?}"));
    }

    #[test]
    fn a_whole_machine_decodes_to_what_is_read() {
        let whole = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u2", "resourceVersion": "9", "generation": 1,
                         "labels": {"cluster.x-k8s.io/control-plane": ""},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": "s", "uid": "u3"}],
                         "deletionTimestamp": "2026-01-02T00:00:00Z",
                         "managedFields": [{"manager": "x"}], "generateName": "m-"},
            "spec": {"clusterName": "c", "version": "v1.31.0",
                     "bootstrap": {"dataSecretName": "m-boot", "configRef": {"kind": "KubeadmConfig", "name": "m"}},
                     "failureDomain": "z1",
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasMachine", "name": "mm"},
                     "providerID": "maas:///z1/abc"},
            "status": {"phase": "Running", "nodeRef": {"name": "n"},
                       "nodeInfo": {"kernelVersion": "6.8"}, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
        });
        let read = serde_json::json!({
            "metadata": {"name": "m", "namespace": "ns", "uid": "u2", "resourceVersion": "9", "generation": 1,
                         "labels": {"cluster.x-k8s.io/control-plane": ""},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": "s", "uid": "u3"}],
                         "deletionTimestamp": "2026-01-02T00:00:00Z"},
            "spec": {"clusterName": "c", "bootstrap": {"dataSecretName": "m-boot"}, "failureDomain": "z1",
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasMachine", "name": "mm"}}
        });
        let whole: Machine = serde_json::from_value(whole).unwrap();
        let read: Machine = serde_json::from_value(read).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{read:?}"));
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
