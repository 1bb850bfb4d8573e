//! The namespaced install (`deploy/rbac-namespaced.yaml`, rendered by
//! `deploy/clusterctl/generate.sh --namespaced`): a manager run with
//! `--namespace NS` and only Roles in NS and in capmaas-system reconciles a
//! MaasCluster and a MaasMachine in NS without one 401 or 403, and its
//! ServiceAccount can do nothing outside NS (no cluster-wide Secret `get`,
//! no watch of other namespaces).
//!
//!     cargo test --test deploy_namespaced

mod support;

use std::process::Command;

use support::service_account::{deploy_file, reconcile_as_service_account};
use support::ControlPlane;

const SA: &str = "system:serviceaccount:capmaas-system:capmaas-manager";
const VARIABLE: &str = "${CAPMAAS_WATCH_NAMESPACE}";

/// `generate.sh --namespaced`'s output.
fn namespaced_components() -> String {
    let script = support::repo_root().join("deploy/clusterctl/generate.sh");
    let out = Command::new(&script).arg("--namespaced").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl auth can-i VERB RESOURCE` as the ServiceAccount in `ns` (`*`:
/// all namespaces).
fn can(cp: &ControlPlane, verb: &str, resource: &str, ns: &str) -> bool {
    let mut args = vec!["auth", "can-i", verb, resource, "--as", SA];
    match ns {
        "*" => args.push("--all-namespaces"),
        ns => args.extend(["-n", ns]),
    }
    cp.try_kubectl(&args, "")
        .is_ok_and(|out| out.trim() == "yes")
}

#[test]
fn generated_namespaced_components_watch_one_namespace_with_roles_only() {
    let components = namespaced_components();
    assert!(components.contains(&deploy_file("rbac-namespaced.yaml")));
    assert!(
        !components.contains(&deploy_file("rbac.yaml")),
        "the cluster-wide RBAC is not in the namespaced flavor"
    );
    assert!(!components.contains("kind: ClusterRole"), "{components}");
    assert!(
        components.contains(&format!("        - --namespace={VARIABLE}\n")),
        "the Deployment watches the namespace"
    );
    let committed = deploy_file("clusterctl/infrastructure-components.yaml");
    assert!(
        !committed.contains(VARIABLE),
        "the default flavor is unchanged"
    );
}

#[test]
fn manager_reconciles_in_its_namespace_with_roles_only() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("namespaced");
    let other = cp.new_namespace("not-watched");
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("namespace.yaml"));
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &deploy_file("rbac-namespaced.yaml").replace(VARIABLE, &ns),
    );

    for (verb, resource) in [
        ("list", "maasmachines"),
        ("watch", "maasclusters"),
        ("patch", "maasmachines"),
        ("list", "machines"),
        ("get", "secrets"),
        ("create", "events"),
    ] {
        assert!(
            can(cp, verb, resource, &ns),
            "denied in {ns}: {verb} {resource}"
        );
        assert!(
            !can(cp, verb, resource, &other),
            "allowed in {other}: {verb} {resource}"
        );
        assert!(
            !can(cp, verb, resource, "*"),
            "allowed cluster-wide: {verb} {resource}"
        );
    }
    assert!(!can(cp, "list", "secrets", &ns), "Secrets are never listed");

    reconcile_as_service_account(cp, &ns, &[format!("--namespace={ns}")]);
}
