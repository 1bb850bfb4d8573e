//! The namespaced install: the components rendered by
//! `deploy/clusterctl/generate.sh --namespaced` (`deploy/rbac-namespaced.yaml`
//! in place of rbac.yaml, `--namespace` on the Deployment) plus
//! `deploy/rbac-watched-namespace.yaml` applied on its own. The real
//! clusterctl renders the components with nothing cluster-wide; a manager
//! run with `--namespace NS` and only these Roles reconciles a MaasCluster
//! and a MaasMachine in NS without one 401 or 403, and its ServiceAccount
//! can do nothing outside NS (no cluster-wide Secret `get`, no watch of
//! other namespaces).
//!
//!     cargo test --test deploy_namespaced

mod support;

use std::process::Command;

use serde_json::Value;
use support::service_account::{deploy_file, reconcile_as_service_account};
use support::ControlPlane;

const SA: &str = "system:serviceaccount:capmaas-system:capmaas-manager";
const VARIABLE: &str = "${CAPMAAS_WATCH_NAMESPACE}";
const PROVIDER_VARIABLE: &str = "${CAPMAAS_PROVIDER_NAMESPACE}";

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

/// The real clusterctl moves every namespaced object of the components into
/// the provider's namespace (why the watched namespace's Role is applied on
/// its own): what it renders has no cluster-wide RBAC and the flag.
#[test]
fn clusterctl_renders_the_namespaced_components() {
    let (clusterctl, _) = support::clusterctl::clusterctl_bin();
    let dir = support::tempdir("capmaas-namespaced-repo").unwrap();
    let script = support::repo_root().join("deploy/clusterctl/generate.sh");
    let status = Command::new(&script)
        .args(["--namespaced", "--repo"])
        .arg(dir.join("repo"))
        .arg("v0.1.0")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let config = dir.join("clusterctl.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n- name: maas\n  type: InfrastructureProvider\n  url: file://{}/repo/infrastructure-maas/v0.1.0/infrastructure-components.yaml\n",
            dir.display()
        ),
    )
    .unwrap();
    let out = Command::new(clusterctl)
        .args(["generate", "provider", "--infrastructure", "maas:v0.1.0"])
        .arg("--config")
        .arg(&config)
        .env("HOME", &dir)
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env("GOPROXY", "off")
        .env("MAAS_ENDPOINT", "http://maas.example:5240/MAAS")
        .env("MAAS_API_KEY", "ck:tk:secret")
        .env("CAPMAAS_WATCH_NAMESPACE", "prod")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("ClusterRole"), "{text}");
    assert!(text.contains("--namespace=prod"), "{text}");
    let count = |line: &str| text.lines().filter(|l| *l == line).count();
    assert_eq!(
        count("kind: Role"),
        1,
        "only the leader-election Role: {text}"
    );
    assert_eq!(count("kind: RoleBinding"), 1, "{text}");
    assert_eq!(count("kind: ServiceAccount"), 1, "{text}");
}

/// The `rules` of the object of kind `kind` in `yaml`, as the API
/// server's client-side parser reads them.
fn rules(cp: &ControlPlane, yaml: &str, kind: &str) -> Value {
    let out = cp.kubectl_stdin(
        &["create", "--dry-run=client", "-o", "json", "-f", "-"],
        yaml,
    );
    // One JSON document per object, concatenated.
    let items: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    items
        .into_iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == "capmaas-manager-role")
        .unwrap_or_else(|| panic!("no {kind} capmaas-manager-role"))["rules"]
        .clone()
}

/// The namespaced Role grants exactly what the cluster-wide ClusterRole
/// does: a rule added to rbac.yaml and not there fails here, not as a 403
/// in production.
#[test]
fn watched_namespace_role_has_the_cluster_roles_rules() {
    let cp = support::control_plane();
    let watched = deploy_file("rbac-watched-namespace.yaml")
        .replace(VARIABLE, "prod")
        .replace(PROVIDER_VARIABLE, "capmaas-system");
    let cluster_wide = rules(cp, &deploy_file("rbac.yaml"), "ClusterRole");
    assert!(
        cluster_wide.as_array().is_some_and(|r| r.len() > 5),
        "{cluster_wide}"
    );
    assert_eq!(rules(cp, &watched, "Role"), cluster_wide);
}

#[test]
fn manager_reconciles_in_its_namespace_with_roles_only() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("namespaced");
    let other = cp.new_namespace("not-watched");
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("namespace.yaml"));
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("rbac-namespaced.yaml"));
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &deploy_file("rbac-watched-namespace.yaml")
            .replace(VARIABLE, &ns)
            .replace(PROVIDER_VARIABLE, "capmaas-system"),
    );

    for (verb, resource) in [
        ("list", "maasmachines"),
        ("watch", "maasclusters"),
        ("patch", "maasmachines"),
        ("list", "machines"),
        ("patch", "machines"),
        ("watch", "maasremediations"),
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
