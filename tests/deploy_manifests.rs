//! deploy/ on a real API server: the generated components are current, the
//! manifests are accepted, the Deployment is hardened as documented, and the
//! ServiceAccount's RBAC allows what the manager does and nothing more
//! (`kubectl auth can-i` answered by the API server's RBAC authorizer).

mod support;

use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use support::ControlPlane;

const SA: &str = "system:serviceaccount:capmaas-system:capmaas-manager";
const NAMESPACE: &str = "capmaas-system";

fn deploy_file(name: &str) -> String {
    let path = support::repo_root().join("deploy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The namespace and RBAC of deploy/ applied for real, once per binary.
fn plane() -> &'static ControlPlane {
    static APPLIED: OnceLock<()> = OnceLock::new();
    let cp = support::control_plane();
    APPLIED.get_or_init(|| {
        cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("namespace.yaml"));
        cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("rbac.yaml"));
        let crds = support::repo_root().join("crds");
        cp.kubectl(&["apply", "--server-side", "-f", support::path_str(&crds)]);
    });
    cp
}

#[test]
fn infrastructure_components_yaml_is_generated_from_its_sources() {
    let script = support::repo_root().join("deploy/clusterctl/generate.sh");
    let out = Command::new(&script).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let committed = deploy_file("clusterctl/infrastructure-components.yaml");
    assert!(
        generated == committed,
        "deploy/clusterctl/infrastructure-components.yaml is stale: run deploy/clusterctl/generate.sh --write"
    );
    for source in [
        "namespace.yaml",
        "credentials.yaml",
        "rbac.yaml",
        "manager.yaml",
    ] {
        assert!(committed.contains(&deploy_file(source)), "{source} missing");
    }
}

#[test]
fn manager_deployment_is_hardened_and_wired_to_the_credentials() {
    let cp = plane();
    let out = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        &deploy_file("manager.yaml"),
    );
    let deployment: Value = serde_json::from_str(&out).unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "capmaas-manager");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "no sidecars");
    let manager = &containers[0];
    assert_eq!(manager["name"], "manager");
    let security = &manager["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let args: Vec<&str> = manager["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    assert!(
        args.contains(&"--health-probe-bind-address=:8081"),
        "{args:?}"
    );

    let port = |name: &str| {
        manager["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["containerPort"]
            .clone()
    };
    assert_eq!(port("healthz"), 8081);
    assert_eq!(port("metrics"), 8080);
    assert_eq!(manager["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(manager["livenessProbe"]["httpGet"]["port"], "healthz");
    assert_eq!(manager["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(manager["readinessProbe"]["httpGet"]["port"], "healthz");

    for key in ["MAAS_ENDPOINT", "MAAS_API_KEY"] {
        let env = manager["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == key)
            .unwrap();
        let secret = &env["valueFrom"]["secretKeyRef"];
        assert_eq!(
            secret["name"], "capmaas-manager-bootstrap-credentials",
            "{key}"
        );
        assert_eq!(secret["key"], key);
    }
    assert!(manager["resources"]["requests"]["memory"].is_string());
    assert!(manager["resources"]["limits"]["memory"].is_string());

    let ca = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "maas-ca")
        .unwrap();
    assert_eq!(
        ca["configMap"]["optional"], true,
        "the extra CA must not be required"
    );

    let secret = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        &deploy_file("credentials.yaml"),
    );
    let secret: Value = serde_json::from_str(&secret).unwrap();
    assert_eq!(
        secret["metadata"]["name"],
        "capmaas-manager-bootstrap-credentials"
    );
    assert_eq!(secret["metadata"]["namespace"], NAMESPACE);
}

/// `kubectl auth can-i` as the manager's ServiceAccount, for a rule written
/// `VERB RESOURCE[/SUBRESOURCE] WHERE [NAME]`: WHERE is `*` (all
/// namespaces), `ns` (the test's namespace) or a namespace name; NAME asks
/// about one object. Resources are resolved by kubectl's discovery, so
/// plural names suffice.
fn can(cp: &ControlPlane, rule: &str, test_ns: &str) -> bool {
    let words: Vec<&str> = rule.split_whitespace().collect();
    let (verb, resource, place, name) = match words[..] {
        [verb, resource, place] => (verb, resource, place, None),
        [verb, resource, place, name] => (verb, resource, place, Some(name)),
        _ => panic!("bad rule {rule:?}"),
    };
    // `kubectl auth can-i VERB RESOURCE/NAME` reads a slash as a name.
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, sub)) => (r, Some(format!("--subresource={sub}"))),
        None => (resource, None),
    };
    let resource = match name {
        Some(name) => format!("{resource}/{name}"),
        None => resource.to_string(),
    };
    let mut args = vec!["auth", "can-i", verb, resource.as_str(), "--as", SA];
    args.extend(subresource.as_deref());
    match place {
        "*" => args.push("--all-namespaces"),
        "ns" => args.extend(["-n", test_ns]),
        ns => args.extend(["-n", ns]),
    }
    // can-i exits 1 with "no" on stdout when denied.
    match cp.try_kubectl(&args, "") {
        Ok(out) => out.trim() == "yes",
        Err(_) => false,
    }
}

#[test]
fn service_account_may_do_what_the_manager_does() {
    let cp = plane();
    let ns = cp.new_namespace("rbac-allowed");
    let allowed = [
        // Watch caches of our kinds and their owners, cluster-wide.
        "list maasmachines *",
        "watch maasmachines *",
        "list maasclusters *",
        "watch maasclusters *",
        "list clusters *",
        "watch clusters *",
        "list machines *",
        "watch machines *",
        // Finalizers and controller-written spec fields, then status.
        "patch maasmachines ns",
        "patch maasclusters ns",
        "patch maasmachines/status ns",
        "patch maasclusters/status ns",
        // Remediation: MaasRemediations cached and patched, the Machine's
        // OwnerRemediated condition applied to its status.
        "list maasremediations *",
        "watch maasremediations *",
        "patch maasremediations ns",
        "patch maasremediations/status ns",
        "patch machines/status ns",
        // The pre-drain hook annotation on control-plane Machines.
        "patch machines ns",
        // Templates: watched; only their status (capacity, nodeInfo) written.
        "list maasmachinetemplates *",
        "watch maasmachinetemplates *",
        "patch maasmachinetemplates/status ns",
        // Static addresses: our machines' IPAddressClaims and the
        // IPAddresses the IPAM provider answers with, by name (Kubernetes
        // has an `ipaddresses` of its own in networking.k8s.io).
        "get ipaddressclaims ns",
        "create ipaddressclaims ns",
        "delete ipaddressclaims ns",
        "get ipaddresses.ipam.cluster.x-k8s.io ns",
        // Bootstrap data and workload kubeconfig, by name.
        "get secrets ns",
        // Events in any namespace, deduplicated by patching.
        "create events ns",
        "patch events ns",
        // The leader-election Lease in the manager's namespace, by name;
        // create cannot be limited by name (the name is in the body).
        "get leases capmaas-system capmaas-leader-election",
        "update leases capmaas-system capmaas-leader-election",
        "create leases capmaas-system",
    ];
    for rule in allowed {
        assert!(can(cp, rule, &ns), "{SA} is denied: {rule}");
    }
}

#[test]
fn service_account_may_not_do_more() {
    let cp = plane();
    let ns = cp.new_namespace("rbac-denied");
    let denied = [
        // Never enumerate or change Secrets.
        "list secrets ns",
        "watch secrets *",
        "create secrets ns",
        "update secrets ns",
        // Workload nodes are reached through the workload kubeconfig.
        "get nodes *",
        "list nodes *",
        // Cluster API creates and deletes our objects; we only reconcile.
        "create maasmachines ns",
        "delete maasmachines ns",
        "delete maasclusters ns",
        "create maasmachinetemplates ns",
        "create maasremediations ns",
        "delete maasremediations ns",
        // Remediation templates are the MachineHealthCheck's to read.
        "list maasremediationtemplates *",
        "get maasremediationtemplates ns",
        "patch maasmachinetemplates ns",
        // Every write is a patch.
        "update maasmachines ns",
        "update maasclusters/status ns",
        // IPAM: claims by name only, addresses are the IPAM provider's.
        "list ipaddressclaims *",
        "patch ipaddressclaims ns",
        "patch ipaddressclaims/status ns",
        "create ipaddresses.ipam.cluster.x-k8s.io ns",
        "delete ipaddresses.ipam.cluster.x-k8s.io ns",
        // The IPAddressClaims the manager creates name their MaasMachine
        // as owner without blockOwnerDeletion.
        "update maasmachines/finalizers ns",
        // Cluster API's objects are read only (but for our pre-drain hook
        // annotation on Machines).
        "delete machines ns",
        "create machines ns",
        "update clusters ns",
        "patch clusters/status ns",
        "update machines/status ns",
        // Leases only in the manager's own namespace, never deleted, and
        // only its own Lease read or written (issue 12 item 9).
        "create leases ns",
        "update leases kube-system",
        "delete leases capmaas-system",
        "get leases capmaas-system other-lease",
        "update leases capmaas-system other-lease",
        "update leases capmaas-system",
        "list leases capmaas-system",
        // Reads come from the watch caches.
        "get maasmachines ns",
        "get machines ns",
        // Nothing else.
        "get configmaps ns",
        "list namespaces *",
        "list pods ns",
        "get customresourcedefinitions *",
        "create clusterroles *",
    ];
    for rule in denied {
        assert!(!can(cp, rule, &ns), "{SA} is allowed: {rule}");
    }
}
