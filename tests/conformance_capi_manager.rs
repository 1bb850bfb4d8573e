//! The real Cluster API core manager runs out of cluster against the test
//! control plane: its webhooks default, validate and convert Cluster API
//! objects, its controllers reconcile a Cluster, and tearing it down leaves
//! the API server usable without it.
//!
//! This proves the launcher (tests/support/capi.rs) on its own, without
//! capmaas or the MAAS simulator; tests/conformance_capi.rs builds the
//! provider story on it.
//!
//!     cargo test --test conformance_capi_manager -- --nocapture

mod support;

use serde_json::{json, Value};
use support::capi::{self, CapiManager, CAPI_API_VERSION, MUTATING_CONFIG, VALIDATING_CONFIG};
use support::objects::condition;

fn get(cp: &support::ControlPlane, resource: &str, ns: &str, name: &str) -> Value {
    let out = cp.kubectl(&["get", resource, name, "-n", ns, "-o", "json"]);
    serde_json::from_str(&out).unwrap()
}

fn infra_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": kind, "name": name})
}

#[test]
fn real_manager_defaults_validates_converts_and_reconciles() {
    let cp = support::control_plane();
    let mut capi = CapiManager::start(cp);
    println!(
        "cluster-api manager {} up, log {}",
        capi.version,
        capi.log.display()
    );
    assert!(
        capi.version.starts_with("v1.13."),
        "pinned core version: {}",
        capi.version
    );
    let ns = cp.new_namespace("capi-manager");

    // Defaulting: a MachineDeployment with nothing but the required fields
    // comes back with the strategy, replicas, labels and selector that only
    // the mutating webhook sets (the CRD schema has no defaults for them).
    let bare_md = json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "MachineDeployment",
        "metadata": {"name": "md-0", "namespace": ns},
        "spec": {
            "clusterName": "c1",
            "template": {"spec": {
                "clusterName": "c1",
                "version": "1.34.4",
                "bootstrap": {"dataSecretName": "c1-bootstrap"},
                "infrastructureRef": infra_ref("MaasMachineTemplate", "c1-md-0"),
            }},
        },
    });
    cp.kubectl_stdin(&["create", "-f", "-"], &bare_md.to_string());
    let md = get(cp, "machinedeployments.cluster.x-k8s.io", &ns, "md-0");
    assert_eq!(
        md["spec"]["rollout"]["strategy"]["type"], "RollingUpdate",
        "{md:#}"
    );
    assert_eq!(
        md["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxSurge"],
        1
    );
    assert_eq!(
        md["spec"]["rollout"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    assert_eq!(md["spec"]["replicas"], 1);
    assert_eq!(
        md["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "c1"
    );
    assert_eq!(
        md["spec"]["selector"]["matchLabels"],
        json!({"cluster.x-k8s.io/cluster-name": "c1", "cluster.x-k8s.io/deployment-name": "md-0"})
    );
    assert_eq!(
        md["spec"]["template"]["spec"]["version"], "v1.34.4",
        "v prefix added"
    );

    // Conversion: read as v1beta1, the object has the v1beta1 shape
    // (spec.strategy instead of spec.rollout.strategy). With conversion None
    // only the apiVersion would be rewritten.
    let old = cp.kubectl(&[
        "get",
        "machinedeployments.v1beta1.cluster.x-k8s.io",
        "md-0",
        "-n",
        &ns,
        "-o",
        "json",
    ]);
    let old: Value = serde_json::from_str(&old).unwrap();
    assert_eq!(old["apiVersion"], "cluster.x-k8s.io/v1beta1");
    assert_eq!(old["spec"]["strategy"]["type"], "RollingUpdate", "{old:#}");
    assert!(old["spec"].get("rollout").is_none(), "{old:#}");

    // Validation: rules only the validating webhooks enforce.
    let no_bootstrap = json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "Machine",
        "metadata": {"name": "m-0", "namespace": ns},
        "spec": {
            "clusterName": "c1",
            "bootstrap": {},
            "infrastructureRef": infra_ref("MaasMachine", "m-0"),
        },
    });
    let err = cp
        .try_kubectl(&["create", "-f", "-"], &no_bootstrap.to_string())
        .unwrap_err();
    assert!(
        err.contains("expected either spec.bootstrap.dataSecretName or spec.bootstrap.configRef to be populated"),
        "{err}"
    );
    let mut mismatched_md = bare_md.clone();
    mismatched_md["metadata"]["name"] = json!("md-1");
    mismatched_md["spec"]["template"]["spec"]["clusterName"] = json!("other");
    let err = cp
        .try_kubectl(&["create", "-f", "-"], &mismatched_md.to_string())
        .unwrap_err();
    assert!(
        err.contains(
            "spec.clusterName and spec.template.spec.clusterName must be set to the same value"
        ),
        "{err}"
    );

    // The controllers: a Cluster whose MaasCluster does not exist gets the
    // finalizer and v1beta2 conditions from the real Cluster controller.
    let cluster = json!({
        "apiVersion": CAPI_API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": ns},
        "spec": {"infrastructureRef": infra_ref("MaasCluster", "c1")},
    });
    cp.kubectl_stdin(&["create", "-f", "-"], &cluster.to_string());
    let reconciled = support::eventually(60, "the Cluster controller to set conditions", || {
        let c = get(cp, "clusters.cluster.x-k8s.io", &ns, "c1");
        let initialized = condition(&c, "ControlPlaneInitialized")?;
        let probe = condition(&c, "RemoteConnectionProbe")?;
        condition(&c, "InfrastructureReady")?;
        Some((c.clone(), initialized.clone(), probe.clone()))
    });
    let (c, initialized, probe) = reconciled;
    assert_eq!(
        c["metadata"]["finalizers"],
        json!(["cluster.cluster.x-k8s.io"]),
        "{c:#}"
    );
    assert_eq!(initialized["status"], "False", "{initialized}");
    assert_eq!(initialized["reason"], "NotInitialized", "{initialized}");
    assert_eq!(
        probe["status"], "False",
        "no kubeconfig Secret, no connection: {probe}"
    );
    assert_eq!(c["status"]["phase"], "Provisioning", "{c:#}");
    // The MachineDeployment is reconciled too: it is now owned by the Cluster.
    let md = support::eventually(60, "the MachineDeployment to be adopted", || {
        let md = get(cp, "machinedeployments.cluster.x-k8s.io", &ns, "md-0");
        md["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| !o.is_empty())
            .then_some(md)
    });
    let owner = &md["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Cluster"), Some("c1")),
        "{md:#}"
    );

    // Deletion runs through the manager's finalizers (no garbage collector).
    cp.kubectl(&[
        "delete",
        "clusters.cluster.x-k8s.io",
        "c1",
        "-n",
        &ns,
        "--wait=false",
    ]);
    support::eventually(
        60,
        "the Cluster and its MachineDeployment to be deleted",
        || {
            let left = cp.kubectl(&[
                "get",
                "clusters.cluster.x-k8s.io,machinedeployments.cluster.x-k8s.io",
                "-n",
                &ns,
                "-o",
                "name",
            ]);
            left.trim().is_empty().then_some(())
        },
    );

    // Health and metrics answer on loopback.
    let (status, _) = capi
        .http_get(capi.health_addr, "/healthz")
        .expect("healthz answers");
    assert_eq!(status, 200);
    let (status, metrics) = capi
        .http_get(capi.diagnostics_addr, "/metrics")
        .expect("metrics answer");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("controller_runtime_reconcile_total"),
        "metrics body"
    );
    capi.assert_running();

    // Teardown leaves no webhook registered and the CRDs on conversion None,
    // so the API server keeps accepting Cluster API writes without the manager.
    let crds_before = cp.kubectl(&[
        "get",
        "crd",
        "clusters.cluster.x-k8s.io",
        "-o",
        "jsonpath={.spec.conversion.strategy}",
    ]);
    assert_eq!(crds_before, "Webhook");
    drop(capi);
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let names = cp.kubectl(&["get", kind, "-o", "name"]);
        assert!(
            !names.contains(MUTATING_CONFIG) && !names.contains(VALIDATING_CONFIG),
            "{names}"
        );
    }
    let strategy = cp.kubectl(&[
        "get",
        "crd",
        "clusters.cluster.x-k8s.io",
        "-o",
        "jsonpath={.spec.conversion.strategy}",
    ]);
    assert_eq!(strategy, "None");
    cp.kubectl_stdin(&["create", "-f", "-"], &cluster.to_string());
    let c = get(cp, "clusters.cluster.x-k8s.io", &ns, "c1");
    assert!(
        c["metadata"]["finalizers"].is_null(),
        "nothing reconciles it any more: {c:#}"
    );
}

#[test]
fn webhook_manifests_are_rewritten_to_loopback_urls() {
    let yaml = r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /mutate-cluster-x-k8s-io-v1beta2-cluster
  name: default.cluster.cluster.x-k8s.io
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-cluster-x-k8s-io-v1beta2-machine
  name: validation.machine.cluster.x-k8s.io
"#;
    let list = capi::render_webhook_configurations(yaml, 9444, "Q0E=");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items[0]["metadata"]["name"], MUTATING_CONFIG);
    assert_eq!(items[1]["metadata"]["name"], VALIDATING_CONFIG);
    assert_eq!(
        items[0]["webhooks"][0]["clientConfig"],
        json!({"url": "https://127.0.0.1:9444/mutate-cluster-x-k8s-io-v1beta2-cluster", "caBundle": "Q0E="})
    );
    assert_eq!(
        items[1]["webhooks"][0]["clientConfig"]["url"],
        "https://127.0.0.1:9444/validate-cluster-x-k8s-io-v1beta2-machine"
    );
    assert_eq!(
        items[0]["webhooks"][0]["admissionReviewVersions"],
        json!(["v1"]),
        "other fields kept"
    );
}
