//! The CRDs in crds/ on a real kube-apiserver: they install, accept what the Go
//! provider's users write, reject what its webhooks rejected (here through CEL
//! rules and, for MaasMachineTemplate, an admission policy that lets Cluster
//! API's topology dry runs through), and keep every status field the
//! controllers write (a field missing from the schema would be pruned
//! silently).

mod support;

use std::sync::OnceLock;

use serde_json::Value;
use support::ControlPlane;

const CRDS: [&str; 6] = [
    "maasclusters.infrastructure.cluster.x-k8s.io",
    "maasclustertemplates.infrastructure.cluster.x-k8s.io",
    "maasmachines.infrastructure.cluster.x-k8s.io",
    "maasmachinetemplates.infrastructure.cluster.x-k8s.io",
    "maasremediations.infrastructure.cluster.x-k8s.io",
    "maasremediationtemplates.infrastructure.cluster.x-k8s.io",
];

/// The control plane with our CRDs installed and Established.
fn plane() -> &'static ControlPlane {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let cp = support::control_plane();
    INSTALLED.get_or_init(|| {
        let dir = support::repo_root().join("crds");
        cp.kubectl(&["apply", "--server-side", "-f", &dir.to_string_lossy()]);
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        let names: Vec<String> = CRDS.iter().map(|c| format!("crd/{c}")).collect();
        args.extend(names.iter().map(String::as_str));
        cp.kubectl(&args);
        wait_for_template_policy(cp);
    });
    cp
}

const TEMPLATE_POLICY: &str = "capmaas-maasmachinetemplate-immutability";

fn maas_machine_template(name: &str, image: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachineTemplate\n\
         metadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      image: {image}\n      minCPU: 2\n      minMemory: 4096\n"
    )
}

/// The API server loads admission policies asynchronously: until then an
/// update the policy forbids goes through. Waits until one is refused.
fn wait_for_template_policy(cp: &ControlPlane) {
    let ns = cp.new_namespace("crd-policy-probe");
    apply(cp, &ns, &maas_machine_template("probe", "ubuntu/jammy")).unwrap();
    support::eventually(60, "the MaasMachineTemplate policy in effect", || {
        cp.try_kubectl(
            &["apply", "-n", &ns, "--dry-run=server", "-f", "-"],
            &maas_machine_template("probe", "ubuntu/noble"),
        )
        .err()
        .filter(|e| e.contains(TEMPLATE_POLICY))
    });
}

fn get_json(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut all = vec!["get", "-o", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&cp.kubectl(&all)).unwrap()
}

/// Applies `yaml` in `ns`; `Err(stderr)` when the API server rejects it.
fn apply(cp: &ControlPlane, ns: &str, yaml: &str) -> Result<String, String> {
    cp.try_kubectl(&["apply", "-n", ns, "-f", "-"], yaml)
}

fn merge_patch(cp: &ControlPlane, ns: &str, what: &str, patch: &str) -> Result<String, String> {
    cp.try_kubectl(&["patch", "-n", ns, what, "--type=merge", "-p", patch], "")
}

fn status_patch(cp: &ControlPlane, ns: &str, what: &str, patch: &str) -> Result<String, String> {
    cp.try_kubectl(
        &[
            "patch",
            "-n",
            ns,
            what,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ],
        "",
    )
}

fn maas_machine(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachine\n\
         metadata:\n  name: {name}\nspec:\n{spec}"
    )
}

const VALID_SPEC: &str = "  image: custom/u-2204-0-k-1264-0\n  minCPU: 4\n  minMemory: 8192\n";

#[test]
fn crds_are_established_with_contract_label_categories_and_status_subresource() {
    let cp = plane();
    for name in CRDS {
        let crd = get_json(cp, &["crd", name]);
        let labels = &crd["metadata"]["labels"];
        assert_eq!(
            labels["cluster.x-k8s.io/v1beta2"], "v1beta1",
            "{name}: contract label"
        );
        assert!(
            labels.get("cluster.x-k8s.io/v1beta1").is_none(),
            "{name}: claims the v1beta1 contract"
        );
        let spec = &crd["spec"];
        assert_eq!(spec["scope"], "Namespaced");
        assert_eq!(
            spec["names"]["categories"],
            serde_json::json!(["cluster-api"])
        );
        let versions = spec["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{name}: one version");
        assert_eq!(versions[0]["name"], "v1beta1");
        assert_eq!(versions[0]["served"], true);
        assert_eq!(versions[0]["storage"], true);
        // MaasClusterTemplate has no status; the other three have the
        // subresource (MaasMachineTemplate's kept from the Go CRD).
        assert_eq!(
            versions[0]["subresources"]["status"].is_object(),
            !name.starts_with("maasclustertemplates."),
            "{name}: status subresource"
        );
        let established = crd["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{name} not Established");
    }
    // `kubectl get cluster-api` lists our kinds beside Cluster API's.
    let ns = cp.new_namespace("crd-category");
    apply(cp, &ns, &maas_machine("m", VALID_SPEC)).unwrap();
    let out = cp.kubectl(&["get", "cluster-api", "-n", &ns, "-o", "name"]);
    assert!(
        out.contains("maasmachine.infrastructure.cluster.x-k8s.io/m"),
        "{out}"
    );
}

#[test]
fn go_provider_objects_are_accepted_with_defaults() {
    let cp = plane();
    let ns = cp.new_namespace("crd-valid");
    // The objects of the Go provider's templates/cluster-template.yaml
    // (v0.9.0) with its variables filled in, plus every optional spec field.
    let objects = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: MaasCluster
metadata:
  name: prod-cluster
spec:
  dnsDomain: maas
  failureDomains: [az1, az2]
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: MaasMachineTemplate
metadata:
  name: prod-cluster-control-plane
spec:
  template:
    spec:
      minCPU: 4
      minMemory: 8192
      image: custom/u-2204-0-k-1264-0
      resourcePool: default
      tags: [ cp ]
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: MaasMachine
metadata:
  name: prod-cluster-md-0-abcde
  labels:
    cluster.x-k8s.io/cluster-name: prod-cluster
spec:
  image: ubuntu/jammy
  minCPU: 2
  minMemory: 4096
  minDiskSize: 100
  tags: [gpu, fast]
  resourcePool: workers
  failureDomain: az1
  deployInMemory: true
  systemID: abc123
  providerID: maas:///az1/abc123
  lxd:
    enabled: false
    vmConfig:
      diskSize: 80
"#;
    apply(cp, &ns, objects).unwrap();

    let mm = get_json(cp, &["-n", &ns, "maasmachine", "prod-cluster-md-0-abcde"]);
    let spec = &mm["spec"];
    assert_eq!(spec["minDiskSize"], 100);
    assert_eq!(spec["deployInMemory"], true);
    assert_eq!(spec["failureDomain"], "az1");
    assert_eq!(spec["resourcePool"], "workers");
    assert_eq!(spec["tags"], serde_json::json!(["gpu", "fast"]));
    assert_eq!(spec["providerID"], "maas:///az1/abc123");
    assert_eq!(
        spec["lxd"]["vmConfig"]["autoStart"], true,
        "Go default kept"
    );

    let template = get_json(
        cp,
        &[
            "-n",
            &ns,
            "maasmachinetemplate",
            "prod-cluster-control-plane",
        ],
    );
    let tspec = &template["spec"]["template"]["spec"];
    assert_eq!(
        tspec["deployInMemory"], false,
        "default false as in the Go CRD"
    );
    assert_eq!(tspec["tags"], serde_json::json!(["cp"]));

    let mc = get_json(cp, &["-n", &ns, "maascluster", "prod-cluster"]);
    assert_eq!(
        mc["spec"]["failureDomains"],
        serde_json::json!(["az1", "az2"])
    );
}

#[test]
fn status_in_the_v1beta2_contract_shape_round_trips() {
    let cp = plane();
    let ns = cp.new_namespace("crd-status");
    apply(
        cp,
        &ns,
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\n\
         metadata:\n  name: c\nspec:\n  dnsDomain: maas\n",
    )
    .unwrap();
    let cluster_status = r#"{"status":{
        "ready": true,
        "initialization": {"provisioned": true},
        "network": {"dnsName": "c-a1b2c3.maas"},
        "failureDomains": [{"name": "az1", "controlPlane": true, "attributes": {"pool": "gpu"}}, {"name": "az2"}],
        "reusableMachines": {"abc123": "MachineDeployment/md-0"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}}"#;
    status_patch(cp, &ns, "maascluster/c", cluster_status).unwrap();
    let got = get_json(cp, &["-n", &ns, "maascluster", "c"])["status"].clone();
    let want: Value = serde_json::from_str::<Value>(cluster_status).unwrap()["status"].clone();
    assert_eq!(got, want, "nothing pruned, nothing added");

    apply(cp, &ns, &maas_machine("m", VALID_SPEC)).unwrap();
    let machine_status = r#"{"status":{
        "ready": true,
        "initialization": {"provisioned": true},
        "machineState": "Deployed",
        "machinePowered": true,
        "hostname": "node-1",
        "dnsAttached": true,
        "failureDomain": "az1",
        "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "node-1"}],
        "failureReason": "UpdateMachineError",
        "failureMessage": "boom",
        "reusedMachine": "abc123",
        "conditions": [{"type": "MachineDeployed", "status": "True", "reason": "MachineDeployed", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}"#;
    status_patch(cp, &ns, "maasmachine/m", machine_status).unwrap();
    let got = get_json(cp, &["-n", &ns, "maasmachine", "m"])["status"].clone();
    let want: Value = serde_json::from_str::<Value>(machine_status).unwrap()["status"].clone();
    assert_eq!(got, want);

    // The legacy `ready` flag defaults to false, as in the Go CRD.
    apply(cp, &ns, &maas_machine("fresh", VALID_SPEC)).unwrap();
    status_patch(
        cp,
        &ns,
        "maasmachine/fresh",
        r#"{"status":{"machineState":"Allocated"}}"#,
    )
    .unwrap();
    let fresh = get_json(cp, &["-n", &ns, "maasmachine", "fresh"]);
    assert_eq!(fresh["status"]["ready"], false);

    // failureDomains is a list-type map: one entry per name.
    let dup = r#"{"status":{"failureDomains":[{"name":"az1"},{"name":"az1"}]}}"#;
    let err = status_patch(cp, &ns, "maascluster/c", dup).unwrap_err();
    assert!(err.contains("Duplicate value"), "{err}");
    // A condition needs a reason (metav1.Condition).
    let no_reason = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"","message":"",
        "lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    assert!(status_patch(cp, &ns, "maasmachine/m", no_reason).is_err());
}

#[test]
fn invalid_specs_are_rejected() {
    let cp = plane();
    let ns = cp.new_namespace("crd-invalid");
    let cases = [
        (
            "empty-image",
            "  image: \"\"\n  minCPU: 1\n  minMemory: 1\n",
            "spec.image",
        ),
        (
            "negative-cpu",
            "  image: ubuntu/jammy\n  minCPU: -1\n  minMemory: 1\n",
            "spec.minCPU",
        ),
        (
            "negative-memory",
            "  image: ubuntu/jammy\n  minCPU: 1\n  minMemory: -1\n",
            "spec.minMemory",
        ),
        (
            "negative-disk",
            "  image: ubuntu/jammy\n  minCPU: 1\n  minMemory: 1\n  minDiskSize: -1\n",
            "spec.minDiskSize",
        ),
        ("no-image", "  minCPU: 1\n  minMemory: 1\n", "spec.image"),
        (
            "no-cpu",
            "  image: ubuntu/jammy\n  minMemory: 1\n",
            "spec.minCPU",
        ),
        (
            "no-memory",
            "  image: ubuntu/jammy\n  minCPU: 1\n",
            "spec.minMemory",
        ),
    ];
    for (name, spec, field) in cases {
        let err = apply(cp, &ns, &maas_machine(name, spec)).unwrap_err();
        assert!(err.contains(field), "{name}: {err}");
    }
    // Zero is allowed (Minimum=0), as in the Go CRD.
    apply(
        cp,
        &ns,
        &maas_machine(
            "zero",
            "  image: ubuntu/jammy\n  minCPU: 0\n  minMemory: 0\n",
        ),
    )
    .unwrap();

    let cluster = |name: &str, spec: &str| {
        format!("apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\nmetadata:\n  name: {name}\nspec:\n{spec}")
    };
    let err = apply(cp, &ns, &cluster("no-domain", "  failureDomains: [a]\n")).unwrap_err();
    assert!(err.contains("spec.dnsDomain"), "{err}");
    let err = apply(cp, &ns, &cluster("empty-domain", "  dnsDomain: \"\"\n")).unwrap_err();
    assert!(err.contains("spec.dnsDomain"), "{err}");

    let template = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachineTemplate\n\
                    metadata:\n  name: t\nspec:\n  template:\n    spec:\n      image: \"\"\n      minCPU: 1\n      minMemory: 1\n";
    let err = apply(cp, &ns, template).unwrap_err();
    assert!(err.contains("spec.template.spec.image"), "{err}");
}

/// Issue 22 item 6: the per-template deploy options are kept (not pruned)
/// on machines and templates, and typed.
#[test]
fn deploy_options_are_kept_and_typed() {
    let cp = plane();
    let ns = cp.new_namespace("crd-deploy-options");
    let options = "  hweKernel: hwe-24.04\n  enableKernelCrashDump: true\n  enableHwSync: false\n";
    apply(
        cp,
        &ns,
        &maas_machine("m", &format!("{VALID_SPEC}{options}")),
    )
    .unwrap();
    let spec = &get_json(cp, &["-n", &ns, "maasmachine/m"])["spec"];
    assert_eq!(spec["hweKernel"], "hwe-24.04");
    assert_eq!(spec["enableKernelCrashDump"], true);
    assert_eq!(spec["enableHwSync"], false);

    let template = format!(
        "{}      hweKernel: ga-22.04\n      enableHwSync: true\n",
        maas_machine_template("t", "ubuntu/noble")
    );
    apply(cp, &ns, &template).unwrap();
    let spec = &get_json(cp, &["-n", &ns, "maasmachinetemplate/t"])["spec"]["template"]["spec"];
    assert_eq!(spec["hweKernel"], "ga-22.04");
    assert_eq!(spec["enableHwSync"], true);

    for (name, option, field) in [
        ("empty-kernel", "  hweKernel: \"\"\n", "spec.hweKernel"),
        (
            "crash-dump-text",
            "  enableKernelCrashDump: yes-please\n",
            "spec.enableKernelCrashDump",
        ),
    ] {
        let err = apply(
            cp,
            &ns,
            &maas_machine(name, &format!("{VALID_SPEC}{option}")),
        )
        .unwrap_err();
        assert!(err.contains(field), "{name}: {err}");
    }
}

#[test]
fn machine_image_cpu_and_memory_are_immutable() {
    let cp = plane();
    let ns = cp.new_namespace("crd-immutable-m");
    apply(cp, &ns, &maas_machine("m", VALID_SPEC)).unwrap();
    let cases = [
        (
            r#"{"spec":{"image":"ubuntu/noble"}}"#,
            "maas machine image change is not allowed",
        ),
        (
            r#"{"spec":{"minCPU":8}}"#,
            "maas machine min cpu count change is not allowed",
        ),
        (
            r#"{"spec":{"minMemory":16384}}"#,
            "maas machine min memory change is not allowed",
        ),
    ];
    for (patch, message) in cases {
        let err = merge_patch(cp, &ns, "maasmachine/m", patch).unwrap_err();
        assert!(err.contains(message), "{patch}: {err}");
    }
    // The controller writes these once, after allocation.
    merge_patch(
        cp,
        &ns,
        "maasmachine/m",
        r#"{"spec":{"systemID":"x1","providerID":"maas:///az1/x1","failureDomain":"az1","tags":["a"]}}"#,
    )
    .unwrap();
    // From then on nobody re-points the object at another machine, nor
    // clears the fields to set others.
    for (patch, message) in [
        (
            r#"{"spec":{"systemID":"victim"}}"#,
            "maas machine system ID change is not allowed",
        ),
        (
            r#"{"spec":{"systemID":null}}"#,
            "maas machine system ID change is not allowed",
        ),
        (
            r#"{"spec":{"providerID":"maas:///az1/victim"}}"#,
            "maas machine provider ID change is not allowed",
        ),
        (
            r#"{"spec":{"providerID":null}}"#,
            "maas machine provider ID change is not allowed",
        ),
    ] {
        let err = merge_patch(cp, &ns, "maasmachine/m", patch).unwrap_err();
        assert!(err.contains(message), "{patch}: {err}");
    }
    // Writing the same values again is not a change; the zone stays writable.
    merge_patch(
        cp,
        &ns,
        "maasmachine/m",
        r#"{"spec":{"systemID":"x1","providerID":"maas:///az1/x1","failureDomain":"az2"}}"#,
    )
    .unwrap();
    // Re-applying the same values is not a change.
    merge_patch(
        cp,
        &ns,
        "maasmachine/m",
        r#"{"spec":{"image":"custom/u-2204-0-k-1264-0","minCPU":4}}"#,
    )
    .unwrap();
    let spec = get_json(cp, &["-n", &ns, "maasmachine", "m"])["spec"].clone();
    assert_eq!(spec["image"], "custom/u-2204-0-k-1264-0");
    assert_eq!(spec["minCPU"], 4);
    assert_eq!(spec["minMemory"], 8192);
    assert_eq!(spec["systemID"], "x1");
}

#[test]
fn cluster_dns_domain_is_immutable() {
    let cp = plane();
    let ns = cp.new_namespace("crd-immutable-c");
    apply(
        cp,
        &ns,
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\n\
         metadata:\n  name: c\nspec:\n  dnsDomain: maas\n",
    )
    .unwrap();
    let err = merge_patch(
        cp,
        &ns,
        "maascluster/c",
        r#"{"spec":{"dnsDomain":"other"}}"#,
    )
    .unwrap_err();
    assert!(
        err.contains("changing cluster DNS Domain not allowed"),
        "{err}"
    );
    // The endpoint is written by the controller after creation.
    merge_patch(
        cp,
        &ns,
        "maascluster/c",
        r#"{"spec":{"controlPlaneEndpoint":{"host":"c-a1b2c3.maas","port":6443}}}"#,
    )
    .unwrap();
    let mc = get_json(cp, &["-n", &ns, "maascluster", "c"]);
    assert_eq!(mc["spec"]["dnsDomain"], "maas");
    assert_eq!(mc["spec"]["controlPlaneEndpoint"]["port"], 6443);
}

#[test]
fn template_image_cpu_and_memory_are_immutable_other_fields_are_not() {
    let cp = plane();
    let ns = cp.new_namespace("crd-immutable-t");
    let template = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachineTemplate\n\
                    metadata:\n  name: t\nspec:\n  template:\n    spec:\n      image: ubuntu/jammy\n      minCPU: 2\n      minMemory: 4096\n";
    apply(cp, &ns, template).unwrap();
    let cases = [
        (
            r#"{"spec":{"template":{"spec":{"image":"ubuntu/noble"}}}}"#,
            "maas machine template image change is not allowed",
        ),
        (
            r#"{"spec":{"template":{"spec":{"minCPU":3}}}}"#,
            "maas machine template min cpu count change is not allowed",
        ),
        (
            r#"{"spec":{"template":{"spec":{"minMemory":1}}}}"#,
            "maas machine template min memory change is not allowed",
        ),
    ];
    for (patch, message) in cases {
        let err = merge_patch(cp, &ns, "maasmachinetemplate/t", patch).unwrap_err();
        assert!(err.contains(message), "{patch}: {err}");
    }
    // As in the Go provider, the other template fields may be edited.
    merge_patch(
        cp,
        &ns,
        "maasmachinetemplate/t",
        r#"{"spec":{"template":{"metadata":{"labels":{"tier":"gpu"}},"spec":{"tags":["gpu"],"resourcePool":"p","minDiskSize":50}}}}"#,
    )
    .unwrap();
    let t = get_json(cp, &["-n", &ns, "maasmachinetemplate", "t"]);
    assert_eq!(
        t["spec"]["template"]["spec"]["tags"],
        serde_json::json!(["gpu"])
    );
    assert_eq!(
        t["spec"]["template"]["metadata"]["labels"]["tier"], "gpu",
        "template metadata kept"
    );
    assert_eq!(t["spec"]["template"]["spec"]["image"], "ubuntu/jammy");
}

#[test]
fn printer_columns_show_cluster_state_system_id_provider_id_and_ready() {
    let cp = plane();
    let ns = cp.new_namespace("crd-columns");
    let machine = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachine\nmetadata:\n  name: m\n  labels:\n    cluster.x-k8s.io/cluster-name: prod\n\
                   spec:\n  image: ubuntu/jammy\n  minCPU: 1\n  minMemory: 1\n  systemID: x7\n  providerID: maas:///az1/x7\n";
    apply(cp, &ns, machine).unwrap();
    status_patch(
        cp,
        &ns,
        "maasmachine/m",
        r#"{"status":{"ready":true,"machineState":"Deployed"}}"#,
    )
    .unwrap();
    let out = cp.kubectl(&["get", "-n", &ns, "maasmachine", "m"]);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME",
            "CLUSTER",
            "STATE",
            "SYSTEMID",
            "PROVIDERID",
            "READY",
            "AGE"
        ],
        "{out}"
    );
    assert_eq!(
        lines[1][..6],
        ["m", "prod", "Deployed", "x7", "maas:///az1/x7", "true"],
        "{out}"
    );

    let cluster = "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\nmetadata:\n  name: prod\n  labels:\n    cluster.x-k8s.io/cluster-name: prod\n\
                   spec:\n  dnsDomain: maas\n  controlPlaneEndpoint:\n    host: prod-a1b2c3.maas\n    port: 6443\n";
    apply(cp, &ns, cluster).unwrap();
    let out = cp.kubectl(&["get", "-n", &ns, "maascluster", "prod"]);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "CLUSTER", "ENDPOINT", "READY", "AGE"],
        "{out}"
    );
    assert_eq!(lines[1][..3], ["prod", "prod", "prod-a1b2c3.maas"], "{out}");
}

fn remediation_template(name: &str, strategy: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasRemediationTemplate\n\
         metadata:\n  name: {name}\nspec:\n  template:\n    spec:\n{strategy}"
    )
}

fn remediation(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasRemediation\n\
         metadata:\n  name: {name}\nspec:\n{spec}"
    )
}

#[test]
fn remediation_strategy_defaults_to_one_reboot_within_ten_minutes() {
    let cp = plane();
    let ns = cp.new_namespace("crd-remediation");
    // What CAPM3's users write (its docs/remediation-controller.md), with
    // our duration field, and an empty one.
    let full =
        "      strategy:\n        type: Reboot\n        retryLimit: 2\n        timeout: 5m30s\n";
    apply(cp, &ns, &remediation_template("workers", full)).unwrap();
    apply(cp, &ns, &remediation_template("empty", "      {}\n")).unwrap();
    let t = get_json(cp, &["-n", &ns, "maasremediationtemplate", "workers"]);
    assert_eq!(
        t["spec"]["template"]["spec"]["strategy"],
        serde_json::json!({"type": "Reboot", "retryLimit": 2, "timeout": "5m30s"})
    );
    let t = get_json(cp, &["-n", &ns, "maasremediationtemplate", "empty"]);
    assert_eq!(
        t["spec"]["template"]["spec"]["strategy"],
        serde_json::json!({"type": "Reboot", "retryLimit": 1, "timeout": "10m"})
    );
    // A MaasRemediation as the MachineHealthCheck creates it: spec copied
    // from the template (here: none at all).
    apply(cp, &ns, &remediation("m1", "  {}\n")).unwrap();
    let r = get_json(cp, &["-n", &ns, "maasremediation", "m1"]);
    assert_eq!(
        r["spec"]["strategy"],
        serde_json::json!({"type": "Reboot", "retryLimit": 1, "timeout": "10m"})
    );
}

#[test]
fn remediation_strategy_is_validated() {
    let cp = plane();
    let ns = cp.new_namespace("crd-remediation-invalid");
    let cases = [
        (
            "other-type",
            "    type: Reprovision\n",
            "spec.strategy.type",
        ),
        (
            "zero-retries",
            "    retryLimit: 0\n",
            "spec.strategy.retryLimit",
        ),
        (
            "bare-number",
            "    timeout: \"600\"\n",
            "spec.strategy.timeout",
        ),
        ("days", "    timeout: 1d\n", "spec.strategy.timeout"),
        (
            "too-short",
            "    timeout: 500ms\n",
            "timeout must be at least 1s",
        ),
    ];
    for (name, strategy, field) in cases {
        let spec = format!("  strategy:\n{strategy}");
        let err = apply(cp, &ns, &remediation(name, &spec)).unwrap_err();
        assert!(err.contains(field), "{name}: {err}");
    }
    for ok in ["90s", "1h30m", "1.5h", "1s"] {
        let spec = format!("  strategy:\n    timeout: {ok}\n");
        let name = format!("ok-{}", ok.replace('.', "-"));
        apply(cp, &ns, &remediation(&name, &spec)).unwrap();
    }
}

#[test]
fn remediation_status_round_trips_and_shows_in_columns() {
    let cp = plane();
    let ns = cp.new_namespace("crd-remediation-status");
    apply(
        cp,
        &ns,
        &remediation("m1", "  strategy:\n    retryLimit: 3\n"),
    )
    .unwrap();
    let status = r#"{"status":{
        "phase": "Waiting",
        "retryCount": 2,
        "lastRemediated": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "PowerCycled", "status": "True", "reason": "PowerCycled", "message": "on again",
                        "lastTransitionTime": "2026-01-01T00:00:30Z", "observedGeneration": 1}]}}"#;
    status_patch(cp, &ns, "maasremediation/m1", status).unwrap();
    let got = get_json(cp, &["-n", &ns, "maasremediation", "m1"])["status"].clone();
    let want: Value = serde_json::from_str::<Value>(status).unwrap()["status"].clone();
    assert_eq!(got, want, "nothing pruned, nothing added");
    status_patch(
        cp,
        &ns,
        "maasremediation/m1",
        r#"{"status":{"phase":"Deleting machine"}}"#,
    )
    .unwrap();
    let err = status_patch(
        cp,
        &ns,
        "maasremediation/m1",
        r#"{"status":{"phase":"Done"}}"#,
    )
    .unwrap_err();
    assert!(err.contains("status.phase"), "{err}");

    let out = cp.kubectl(&["get", "-n", &ns, "maasremediation", "m1"]);
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "PHASE",
            "RETRY",
            "COUNT",
            "RETRY",
            "LIMIT",
            "LAST",
            "REMEDIATED",
            "STRATEGY",
            "AGE"
        ],
        "{out}"
    );
    for value in [
        "Deleting machine",
        " 2 ",
        " 3 ",
        "2026-01-01T00:00:00Z",
        "Reboot",
    ] {
        assert!(lines[1].contains(value), "{value:?} in {out}");
    }
}

/// The `openAPIV3Schema` of the CRD file `crds/infrastructure.cluster.x-k8s.io_<plural>.yaml`.
fn schema_on_disk(plural: &str) -> Value {
    let path = support::repo_root().join(format!(
        "crds/infrastructure.cluster.x-k8s.io_{plural}.yaml"
    ));
    let text = std::fs::read_to_string(&path).unwrap();
    let crd: Value = serde_saphyr::from_str(&text).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// `v` without the `keys` members, at every depth.
fn without(v: &Value, keys: &[&str]) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !keys.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), without(v, keys)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|i| without(i, keys)).collect()),
        other => other.clone(),
    }
}

/// A ClusterClass's MaasCluster is exactly what a hand-written one may be:
/// the template's `spec.template.spec` is MaasCluster's `spec`, with the same
/// descriptions, defaults, validation and CEL. Edit both files together.
#[test]
fn cluster_template_spec_is_the_maas_cluster_spec() {
    let cluster = schema_on_disk("maasclusters");
    let template = schema_on_disk("maasclustertemplates");
    assert_eq!(
        template["properties"]["spec"]["properties"]["template"]["properties"]["spec"],
        cluster["properties"]["spec"],
        "crds/*_maasclustertemplates.yaml spec.template.spec differs from MaasCluster's spec"
    );
}

/// MaasMachineTemplate's `spec.template.spec` has MaasMachine's fields with
/// the same types, defaults and validation; only descriptions and CEL rules
/// differ (the template's messages say "template", and systemID/providerID
/// are only guarded on the machine, where the controller writes them).
#[test]
fn machine_template_spec_has_the_maas_machine_fields() {
    let machine = schema_on_disk("maasmachines");
    let template = schema_on_disk("maasmachinetemplates");
    let ignore = ["description", "x-kubernetes-validations"];
    assert_eq!(
        without(
            &template["properties"]["spec"]["properties"]["template"]["properties"]["spec"],
            &ignore
        ),
        without(&machine["properties"]["spec"], &ignore),
    );
}

#[test]
fn cluster_template_is_accepted_validated_and_its_dns_domain_immutable() {
    let cp = plane();
    let ns = cp.new_namespace("crd-cluster-template");
    let template = |name: &str, spec: &str| {
        format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasClusterTemplate\n\
             metadata:\n  name: {name}\nspec:\n  template:\n{spec}"
        )
    };
    apply(
        cp,
        &ns,
        &template(
            "t",
            "    metadata:\n      labels:\n        tier: prod\n      annotations:\n        note: x\n\
             \x20   spec:\n      dnsDomain: maas\n      failureDomains: [az1, az2]\n      lxdConfig:\n        enabled: false\n",
        ),
    )
    .unwrap();
    let t = get_json(cp, &["-n", &ns, "maasclustertemplate", "t"]);
    let tmpl = &t["spec"]["template"];
    assert_eq!(tmpl["metadata"]["labels"]["tier"], "prod");
    assert_eq!(tmpl["metadata"]["annotations"]["note"], "x");
    assert_eq!(
        tmpl["spec"]["failureDomains"],
        serde_json::json!(["az1", "az2"])
    );
    assert_eq!(
        tmpl["spec"]["lxdConfig"]["storageBackend"], "zfs",
        "MaasCluster's defaults apply"
    );
    // `kubectl get` shows the domain; `kubectl get cluster-api` lists it.
    let out = cp.kubectl(&["get", "-n", &ns, "maasclustertemplate", "t"]);
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DNSDOMAIN", "AGE"], "{out}");
    assert!(out.lines().nth(1).unwrap().contains("maas"), "{out}");
    let out = cp.kubectl(&["get", "cluster-api", "-n", &ns, "-o", "name"]);
    assert!(
        out.contains("maasclustertemplate.infrastructure.cluster.x-k8s.io/t"),
        "{out}"
    );

    for (name, spec, field) in [
        ("no-spec", "    metadata: {}\n", "spec.template.spec"),
        (
            "no-domain",
            "    spec:\n      failureDomains: [a]\n",
            "spec.template.spec.dnsDomain",
        ),
        (
            "empty-domain",
            "    spec:\n      dnsDomain: \"\"\n",
            "spec.template.spec.dnsDomain",
        ),
        (
            "bad-nic",
            "    spec:\n      dnsDomain: maas\n      lxdConfig:\n        nicType: bridged\n",
            "spec.template.spec.lxdConfig.nicType",
        ),
    ] {
        let err = apply(cp, &ns, &template(name, spec)).unwrap_err();
        assert!(err.contains(field), "{name}: {err}");
    }
    let err = merge_patch(
        cp,
        &ns,
        "maasclustertemplate/t",
        r#"{"spec":{"template":{"spec":{"dnsDomain":"other"}}}}"#,
    )
    .unwrap_err();
    assert!(
        err.contains("changing cluster DNS Domain not allowed"),
        "{err}"
    );
}

/// The contract's "InfraMachineTemplate: support for SSA dry run": Cluster
/// API's topology controller server-side applies a changed template onto
/// the current one as a dry run annotated `topology.cluster.x-k8s.io/
/// dry-run`, to see whether it must rotate the template. That dry run goes
/// through; the same change without the annotation, or for real, does not.
#[test]
fn template_immutability_lets_topology_dry_runs_through() {
    let cp = plane();
    let ns = cp.new_namespace("crd-topology-dry-run");
    apply(cp, &ns, &maas_machine_template("t", "ubuntu/jammy")).unwrap();
    // `spec` of a changed template, annotated or not.
    let changed = |annotated: bool, spec: &str| {
        let annotations = if annotated {
            "  annotations:\n    topology.cluster.x-k8s.io/dry-run: \"\"\n"
        } else {
            ""
        };
        format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachineTemplate\n\
             metadata:\n  name: t\n{annotations}spec:\n  template:\n    spec:\n{spec}"
        )
    };
    let ssa = |dry_run: bool, yaml: &str| {
        let mut args = vec![
            "apply",
            "-n",
            &ns,
            "--server-side",
            "--force-conflicts",
            "--field-manager=capi-topology",
            "-o",
            "json",
            "-f",
            "-",
        ];
        if dry_run {
            args.push("--dry-run=server");
        }
        cp.try_kubectl(&args, yaml)
    };

    // The topology controller's dry run: answered with the changed object.
    let all_changed = "      image: ubuntu/noble\n      minCPU: 8\n      minMemory: 16384\n";
    let out = ssa(true, &changed(true, all_changed)).unwrap();
    let answered: Value = serde_json::from_str(&out).unwrap();
    let spec = &answered["spec"]["template"]["spec"];
    assert_eq!(
        (&spec["image"], &spec["minCPU"], &spec["minMemory"]),
        (&"ubuntu/noble".into(), &8.into(), &16384.into())
    );

    // Anything else is refused with the Go provider's messages.
    for (spec, message) in [
        (
            "      image: ubuntu/noble\n      minCPU: 2\n      minMemory: 4096\n",
            "maas machine template image change is not allowed",
        ),
        (
            "      image: ubuntu/jammy\n      minCPU: 8\n      minMemory: 4096\n",
            "maas machine template min cpu count change is not allowed",
        ),
        (
            "      image: ubuntu/jammy\n      minCPU: 2\n      minMemory: 16384\n",
            "maas machine template min memory change is not allowed",
        ),
    ] {
        for (dry_run, annotated) in [(true, false), (false, true), (false, false)] {
            let err = ssa(dry_run, &changed(annotated, spec)).unwrap_err();
            assert!(
                err.contains(message),
                "dry run {dry_run}, annotated {annotated}: {err}"
            );
        }
    }
    let stored = get_json(cp, &["-n", &ns, "maasmachinetemplate", "t"]);
    assert_eq!(stored["spec"]["template"]["spec"]["image"], "ubuntu/jammy");
    assert_eq!(stored["spec"]["template"]["spec"]["minCPU"], 2);
}

#[test]
fn cluster_identity_ref_is_chosen_once_at_creation() {
    let cp = plane();
    let ns = cp.new_namespace("crd-identity");
    let cluster = |name: &str, identity: &str| {
        format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\n\
             metadata:\n  name: {name}\nspec:\n  dnsDomain: maas\n{identity}"
        )
    };
    apply(
        cp,
        &ns,
        &cluster("with", "  identityRef:\n    name: tenant-maas\n"),
    )
    .unwrap();
    let spec = get_json(cp, &["-n", &ns, "maascluster", "with"])["spec"].clone();
    assert_eq!(
        spec["identityRef"],
        serde_json::json!({"kind": "Secret", "name": "tenant-maas"}),
        "kind defaults to Secret"
    );
    let message = "changing cluster identityRef not allowed";
    for patch in [
        r#"{"spec":{"identityRef":{"name":"other"}}}"#,
        r#"{"spec":{"identityRef":null}}"#,
    ] {
        let err = merge_patch(cp, &ns, "maascluster/with", patch).unwrap_err();
        assert!(err.contains(message), "{patch}: {err}");
    }
    apply(cp, &ns, &cluster("without", "")).unwrap();
    let err = merge_patch(
        cp,
        &ns,
        "maascluster/without",
        r#"{"spec":{"identityRef":{"name":"later"}}}"#,
    )
    .unwrap_err();
    assert!(err.contains(message), "{err}");
    let err = apply(
        cp,
        &ns,
        &cluster(
            "bad-kind",
            "  identityRef:\n    kind: AWSClusterRoleIdentity\n    name: x\n",
        ),
    )
    .unwrap_err();
    assert!(err.contains("spec.identityRef.kind"), "{err}");
    // Other fields stay editable.
    merge_patch(
        cp,
        &ns,
        "maascluster/with",
        r#"{"spec":{"failureDomains":["az1"]}}"#,
    )
    .unwrap();
}

#[test]
fn cluster_control_plane_vip_is_one_of_address_or_subnet_chosen_once() {
    let cp = plane();
    let ns = cp.new_namespace("crd-vip");
    let cluster = |name: &str, vip: &str| {
        format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\n\
             metadata:\n  name: {name}\nspec:\n  dnsDomain: maas\n{vip}"
        )
    };
    apply(
        cp,
        &ns,
        &cluster("by-address", "  controlPlaneVIP:\n    address: 10.0.0.50\n"),
    )
    .unwrap();
    apply(
        cp,
        &ns,
        &cluster("by-subnet", "  controlPlaneVIP:\n    subnet: 10.0.0.0/24\n"),
    )
    .unwrap();
    let one_of = "set exactly one of controlPlaneVIP.address and controlPlaneVIP.subnet";
    for vip in [
        "  controlPlaneVIP:\n    address: 10.0.0.50\n    subnet: 10.0.0.0/24\n",
        "  controlPlaneVIP: {}\n",
    ] {
        let err = apply(cp, &ns, &cluster("both-or-none", vip)).unwrap_err();
        assert!(err.contains(one_of), "{vip}: {err}");
    }
    let err = apply(
        cp,
        &ns,
        &cluster(
            "not-an-ip",
            "  controlPlaneVIP:\n    address: api.example.com\n",
        ),
    )
    .unwrap_err();
    assert!(err.contains("spec.controlPlaneVIP.address"), "{err}");

    let message = "changing cluster controlPlaneVIP not allowed";
    for patch in [
        r#"{"spec":{"controlPlaneVIP":{"address":"10.0.0.51"}}}"#,
        r#"{"spec":{"controlPlaneVIP":null}}"#,
    ] {
        let err = merge_patch(cp, &ns, "maascluster/by-address", patch).unwrap_err();
        assert!(err.contains(message), "{patch}: {err}");
    }
    apply(cp, &ns, &cluster("dns", "")).unwrap();
    let err = merge_patch(
        cp,
        &ns,
        "maascluster/dns",
        r#"{"spec":{"controlPlaneVIP":{"address":"10.0.0.60"}}}"#,
    )
    .unwrap_err();
    assert!(err.contains(message), "{err}");

    // What the controller writes is kept, nothing pruned.
    let status = r#"{"status":{"ready":true,
        "controlPlaneVIP":{"address":"10.0.0.7","phase":"Reserving","reservedBefore":["10.0.0.3"]}}}"#;
    status_patch(cp, &ns, "maascluster/by-subnet", status).unwrap();
    let got = get_json(cp, &["-n", &ns, "maascluster", "by-subnet"])["status"].clone();
    let want: Value = serde_json::from_str::<Value>(status).unwrap()["status"].clone();
    assert_eq!(got, want);
    let err = status_patch(
        cp,
        &ns,
        "maascluster/by-subnet",
        r#"{"status":{"controlPlaneVIP":{"phase":"Mine"}}}"#,
    )
    .unwrap_err();
    assert!(err.contains("status.controlPlaneVIP.phase"), "{err}");
}

/// `spec.network` (static addresses from IPAM pools) is set at creation
/// and never changed, added or removed: the claims and MAAS links follow
/// it once, before the machine deploys.
#[test]
fn machine_network_is_chosen_once_at_creation() {
    let cp = plane();
    let ns = cp.new_namespace("crd-network");
    let pools = "  network:\n    interface: eth1\n    addressesFromPools:\n    \
                 - {apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: nodes}\n";
    apply(
        cp,
        &ns,
        &maas_machine("with", &format!("{VALID_SPEC}{pools}")),
    )
    .unwrap();
    let spec = get_json(cp, &["-n", &ns, "maasmachine", "with"])["spec"].clone();
    assert_eq!(spec["network"]["addressesFromPools"][0]["name"], "nodes");
    let message = "maas machine network change is not allowed";
    for patch in [
        r#"{"spec":{"network":{"interface":"eth0"}}}"#,
        r#"{"spec":{"network":null}}"#,
    ] {
        let err = merge_patch(cp, &ns, "maasmachine/with", patch).unwrap_err();
        assert!(err.contains(message), "{patch}: {err}");
    }
    apply(cp, &ns, &maas_machine("without", VALID_SPEC)).unwrap();
    let err = merge_patch(
        cp,
        &ns,
        "maasmachine/without",
        r#"{"spec":{"network":{"addressesFromPools":[{"apiGroup":"ipam.cluster.x-k8s.io","kind":"InClusterIPPool","name":"x"}]}}}"#,
    )
    .unwrap_err();
    assert!(err.contains(message), "{err}");
    let err = apply(
        cp,
        &ns,
        &maas_machine(
            "no-pool",
            &format!("{VALID_SPEC}  network:\n    addressesFromPools: []\n"),
        ),
    )
    .unwrap_err();
    assert!(err.contains("spec.network.addressesFromPools"), "{err}");
}

/// Issue 22: the Go fork's `spec.staticIP` may be filled in by an IPAM
/// controller once (its `ip` empty before), then no longer changes: the
/// address is linked in MAAS by then.
#[test]
fn a_go_static_ip_is_immutable_once_its_address_is_set() {
    let cp = plane();
    let ns = cp.new_namespace("crd-static-ip");
    let spec = format!(
        "{VALID_SPEC}  apiServerInterfaceName: eth1\n  virsh: {{host: h}}\n  staticIP:\n    ip: \"\"\n    cidr: 10.0.0.0/24\n"
    );
    apply(cp, &ns, &maas_machine("m", &spec)).unwrap();
    let mm = get_json(cp, &["-n", &ns, "maasmachine", "m"]);
    assert_eq!(mm["spec"]["apiServerInterfaceName"], "eth1", "not pruned");
    assert_eq!(mm["spec"]["virsh"]["host"], "h", "not pruned");
    merge_patch(
        cp,
        &ns,
        "maasmachine/m",
        r#"{"spec":{"staticIP":{"ip":"10.0.0.5","gateway":"10.0.0.1"}}}"#,
    )
    .unwrap();
    let err = merge_patch(
        cp,
        &ns,
        "maasmachine/m",
        r#"{"spec":{"staticIP":{"ip":"10.0.0.6"}}}"#,
    )
    .unwrap_err();
    assert!(
        err.contains("maas machine staticIP change is not allowed once ip is set"),
        "{err}"
    );
}
