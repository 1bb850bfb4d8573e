//! Resource types (group/version/plural) and the URL paths built from them.
//!
//! A [`Resource`] is all the client needs to address a kind: there are no
//! typed structs at this layer, objects are `serde_json::Value`.

/// One API resource type, e.g. `cluster.x-k8s.io/v1beta2` `clusters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resource {
    /// API group; empty for the core group (`/api/v1`).
    pub group: &'static str,
    pub version: &'static str,
    /// The URL path segment (lower-case plural), e.g. `maasmachines`.
    pub plural: &'static str,
    pub kind: &'static str,
    /// Namespaced resources need a namespace for get/create/...; list and
    /// watch accept `None` to mean all namespaces.
    pub namespaced: bool,
}

impl Resource {
    /// `apiVersion` as written in objects: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The path of the collection (`ns = None` on a namespaced resource means
    /// across all namespaces), or of one object when `name` is given, plus
    /// an optional subresource such as `status`. Segments are
    /// percent-encoded, so a hostile name cannot change the path's shape.
    pub fn path(&self, ns: Option<&str>, name: Option<&str>, subresource: Option<&str>) -> String {
        let mut path = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if let (true, Some(ns)) = (self.namespaced, ns) {
            path.push_str("/namespaces/");
            path.push_str(&encode(ns));
        }
        path.push('/');
        path.push_str(self.plural);
        if let Some(name) = name {
            path.push('/');
            path.push_str(&encode(name));
            if let Some(sub) = subresource {
                path.push('/');
                path.push_str(sub);
            }
        }
        path
    }
}

const fn core(plural: &'static str, kind: &'static str, namespaced: bool) -> Resource {
    Resource {
        group: "",
        version: "v1",
        plural,
        kind,
        namespaced,
    }
}

const fn capi(plural: &'static str, kind: &'static str) -> Resource {
    Resource {
        group: "cluster.x-k8s.io",
        version: "v1beta2",
        plural,
        kind,
        namespaced: true,
    }
}

const fn infra(plural: &'static str, kind: &'static str) -> Resource {
    Resource {
        group: "infrastructure.cluster.x-k8s.io",
        version: "v1beta1",
        plural,
        kind,
        namespaced: true,
    }
}

pub const NAMESPACES: Resource = core("namespaces", "Namespace", false);
pub const SECRETS: Resource = core("secrets", "Secret", true);
pub const CONFIG_MAPS: Resource = core("configmaps", "ConfigMap", true);
pub const NODES: Resource = core("nodes", "Node", false);
pub const EVENTS: Resource = core("events", "Event", true);
pub const SERVICE_ACCOUNTS: Resource = core("serviceaccounts", "ServiceAccount", true);
pub const LEASES: Resource = Resource {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
};
pub const CLUSTERS: Resource = capi("clusters", "Cluster");
pub const MACHINES: Resource = capi("machines", "Machine");
pub const MACHINE_SETS: Resource = capi("machinesets", "MachineSet");
pub const MACHINE_DEPLOYMENTS: Resource = capi("machinedeployments", "MachineDeployment");
pub const KUBEADM_CONTROL_PLANES: Resource = Resource {
    group: "controlplane.cluster.x-k8s.io",
    version: "v1beta2",
    plural: "kubeadmcontrolplanes",
    kind: "KubeadmControlPlane",
    namespaced: true,
};
pub const IP_ADDRESS_CLAIMS: Resource = Resource {
    group: "ipam.cluster.x-k8s.io",
    version: "v1beta2",
    plural: "ipaddressclaims",
    kind: "IPAddressClaim",
    namespaced: true,
};
pub const IP_ADDRESSES: Resource = Resource {
    group: "ipam.cluster.x-k8s.io",
    version: "v1beta2",
    plural: "ipaddresses",
    kind: "IPAddress",
    namespaced: true,
};
pub const MAAS_CLUSTERS: Resource = infra("maasclusters", "MaasCluster");
pub const MAAS_MACHINES: Resource = infra("maasmachines", "MaasMachine");
pub const MAAS_MACHINE_TEMPLATES: Resource = infra("maasmachinetemplates", "MaasMachineTemplate");
pub const MAAS_REMEDIATIONS: Resource = infra("maasremediations", "MaasRemediation");

/// Every byte but RFC 3986's unreserved `A-Z a-z 0-9 - . _ ~` is encoded
/// (the same set the MAAS client uses; the encoder is the
/// `percent-encoding` crate's).
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but RFC 3986 unreserved characters. Used for
/// path segments and query values (continue tokens contain `=`, `+`, `/`).
pub(crate) fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_and_group_paths() {
        assert_eq!(
            SECRETS.path(Some("ns1"), Some("c1-kubeconfig"), None),
            "/api/v1/namespaces/ns1/secrets/c1-kubeconfig"
        );
        assert_eq!(SECRETS.path(None, None, None), "/api/v1/secrets");
        assert_eq!(
            NODES.path(Some("ignored"), Some("n1"), None),
            "/api/v1/nodes/n1"
        );
        assert_eq!(
            MAAS_MACHINES.path(Some("ns"), Some("m-1"), Some("status")),
            "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/ns/maasmachines/m-1/status"
        );
        assert_eq!(
            CLUSTERS.path(None, None, None),
            "/apis/cluster.x-k8s.io/v1beta2/clusters"
        );
        assert_eq!(
            LEASES.path(Some("kube-system"), None, None),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        );
    }

    #[test]
    fn api_versions() {
        assert_eq!(SECRETS.api_version(), "v1");
        assert_eq!(CLUSTERS.api_version(), "cluster.x-k8s.io/v1beta2");
        assert_eq!(
            MAAS_CLUSTERS.api_version(),
            "infrastructure.cluster.x-k8s.io/v1beta1"
        );
    }

    #[test]
    fn encoding_keeps_segments_whole() {
        assert_eq!(encode("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(encode("x/../y?z"), "x%2F..%2Fy%3Fz");
        assert_eq!(encode("eyJ2Ijo+/=="), "eyJ2Ijo%2B%2F%3D%3D");
        assert_eq!(encode("app=web,tier!=db"), "app%3Dweb%2Ctier%21%3Ddb");
    }
}
