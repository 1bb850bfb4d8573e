//! `clusterctl move` with the real clusterctl (tests/capi-testbin) between
//! two test control planes, and what a management cluster needs for it that
//! `clusterctl init` would have put there (these test control planes get
//! their CRDs from `kubectl apply` instead):
//!
//! 1. clusterctl's own CRD, `providers.clusterctl.cluster.x-k8s.io`
//!    (`cmd/clusterctl/config/manifest/clusterctl-api.yaml` of the Cluster
//!    API module, which clusterctl embeds): the move lists the provider
//!    inventory of both clusters and fails without it;
//! 2. inventory objects (`clusterctl.cluster.x-k8s.io/v1alpha3 Provider`) for
//!    the core provider (`cluster-api`, in `capi-system`) and ours
//!    (`infrastructure-maas`, in `capmaas-system`), the same versions on
//!    both sides: the move refuses a target that lacks a provider of the
//!    source or has an older one;
//! 3. the label `clusterctl.cluster.x-k8s.io` on every CRD whose objects may
//!    move (Cluster API's and ours): the move discovers the kinds to move by
//!    that label only, and would otherwise move nothing but Secrets.
//!
//! ```ignore
//! prepare_for_move(cp1);
//! prepare_for_move(cp2);
//! clusterctl_move(cp1, cp2, "ns").unwrap();
//! ```
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::json;

use super::{repo_root, ControlPlane};

/// clusterctl's label on every component it installs (and the CRDs the move
/// discovers).
pub const CLUSTERCTL_LABEL: &str = "clusterctl.cluster.x-k8s.io";
/// An object carrying this label moves even when no Cluster owns it.
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";
/// The version our provider's inventory entry claims (deploy/clusterctl).
pub const INFRA_VERSION: &str = "v0.1.0";

/// The clusterctl of tests/capi-testbin and the Cluster API version it was
/// built from (e.g. `v1.13.6`).
pub fn clusterctl_bin() -> (PathBuf, String) {
    static FOUND: OnceLock<(PathBuf, String)> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let dir = super::capi::build();
            let version = std::fs::read_to_string(dir.join("VERSION"))
                .expect("capi-testbin VERSION")
                .trim()
                .to_string();
            (dir.join("clusterctl"), version)
        })
        .clone()
}

/// `clusterctl-api.yaml` of the Cluster API module clusterctl was built from
/// (in the Go module cache since the build downloaded it).
fn provider_crd(version: &str) -> PathBuf {
    let out = Command::new("go")
        .args([
            "mod",
            "download",
            "-json",
            &format!("sigs.k8s.io/cluster-api@{version}"),
        ])
        .current_dir(repo_root().join("tests/capi-testbin"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running go mod download");
    assert!(out.status.success(), "go mod download failed");
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("go mod JSON");
    let dir = info["Dir"].as_str().expect("module Dir");
    PathBuf::from(dir).join("cmd/clusterctl/config/manifest/clusterctl-api.yaml")
}

/// Makes `cp` a management cluster `clusterctl move` accepts as source or
/// target (see the module comment).
pub fn prepare_for_move(cp: &ControlPlane) {
    let (_, version) = clusterctl_bin();
    let crd = provider_crd(&version);
    cp.kubectl(&["apply", "--server-side", "-f", super::path_str(&crd)]);
    cp.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/providers.clusterctl.cluster.x-k8s.io",
        "--timeout=60s",
    ]);
    cp.kubectl(&[
        "label",
        "crd",
        "--all",
        "--overwrite",
        &format!("{CLUSTERCTL_LABEL}="),
    ]);
    let provider = |namespace: &str, name: &str, provider: &str, type_: &str, version: &str| {
        json!({
            "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
            "kind": "Provider",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {CLUSTERCTL_LABEL: "", "cluster.x-k8s.io/provider": name},
            },
            "providerName": provider,
            "type": type_,
            "version": version,
        })
    };
    let items = json!([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-system"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capmaas-system"}},
        provider("capi-system", "cluster-api", "cluster-api", "CoreProvider", &version),
        provider(
            "capmaas-system",
            "infrastructure-maas",
            "maas",
            "InfrastructureProvider",
            INFRA_VERSION
        ),
    ]);
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    );
}

/// `clusterctl move --namespace NS` from `from` to `to`; its output, or
/// `Err(output)` when it fails.
pub fn clusterctl_move(from: &ControlPlane, to: &ControlPlane, ns: &str) -> Result<String, String> {
    let (bin, _) = clusterctl_bin();
    let home = super::tempdir("capmaas-clusterctl-move")?;
    let out = Command::new(bin)
        .args(["move", "--namespace", ns, "-v", "3"])
        .arg(format!("--kubeconfig={}", from.kubeconfig.display()))
        .arg(format!("--to-kubeconfig={}", to.kubeconfig.display()))
        // Nothing from the user's ~/.cluster-api, nothing on the network.
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("xdg"))
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env("GOPROXY", "off")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running clusterctl: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}
