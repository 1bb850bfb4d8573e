//! The clusterctl provider files (deploy/clusterctl/) through the real
//! `clusterctl` (built from Go modules by tests/capi-testbin/build.sh) from a
//! local file repository, and what it renders through a real API server
//! (`kubectl apply --dry-run=server`, our CRDs and Cluster API's installed).

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::Value;
use support::ControlPlane;

const VERSION: &str = "v0.1.0";

/// The story's variables (README): a 3 + 5 machine cluster on MAAS.
const STORY_VARIABLES: [(&str, &str); 11] = [
    ("MAAS_DNS_DOMAIN", "maas"),
    ("CONTROL_PLANE_MACHINE_IMAGE", "custom/u-2204-0-k-1264-0"),
    ("CONTROL_PLANE_MACHINE_MINCPU", "4"),
    ("CONTROL_PLANE_MACHINE_MINMEMORY", "8192"),
    ("CONTROL_PLANE_MACHINE_RESOURCEPOOL", "default"),
    ("CONTROL_PLANE_MACHINE_TAG", "control-plane"),
    ("WORKER_MACHINE_IMAGE", "ubuntu/jammy"),
    ("WORKER_MACHINE_MINCPU", "2"),
    ("WORKER_MACHINE_MINMEMORY", "4096"),
    ("WORKER_MACHINE_RESOURCEPOOL", "workers"),
    ("WORKER_MACHINE_TAG", "worker"),
];

struct Clusterctl {
    bin: PathBuf,
    /// HOME and XDG_CONFIG_HOME of every run: nothing from the user's
    /// ~/.cluster-api leaks in, nothing is written outside.
    home: PathBuf,
    config: PathBuf,
}

/// clusterctl and a local repository laid out by generate.sh, once per binary.
fn clusterctl() -> &'static Clusterctl {
    static CTL: OnceLock<Clusterctl> = OnceLock::new();
    CTL.get_or_init(|| {
        let bin = support::capi::build().join("clusterctl");
        let home = support::tempdir("capmaas-clusterctl").unwrap();
        let repo = home.join("repo");
        let status = Command::new(support::repo_root().join("deploy/clusterctl/generate.sh"))
            .args(["--repo", support::path_str(&repo), VERSION])
            .status()
            .unwrap();
        assert!(status.success(), "generate.sh --repo failed");
        let components = repo.join(format!(
            "infrastructure-maas/{VERSION}/infrastructure-components.yaml"
        ));
        let config = home.join("clusterctl.yaml");
        let yaml = format!(
            "providers:\n- name: maas\n  type: InfrastructureProvider\n  url: file://{}\n",
            components.display()
        );
        std::fs::write(&config, yaml).unwrap();
        Clusterctl { bin, home, config }
    })
}

impl Clusterctl {
    /// Runs clusterctl with `vars` as its only provider/template variables;
    /// `Err(stderr)` on failure.
    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Result<String, String> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .arg("--config")
            .arg(&self.config)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join("xdg"))
            // No version lookups on the network: the repository is local.
            .env("GOPROXY", "off");
        for name in STORY_VARIABLES.iter().map(|(n, _)| n).chain(&[
            "MAAS_ENDPOINT",
            "MAAS_API_KEY",
            "KUBECONFIG",
            "CONTROL_PLANE_VIP",
            "CONTROL_PLANE_VIP_INTERFACE",
            "KUBE_VIP_VERSION",
        ]) {
            cmd.env_remove(name);
        }
        cmd.envs(vars.iter().copied());
        let out = cmd.output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).unwrap())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

/// `kubectl apply --dry-run=server` of `yaml`; the objects as the API server
/// would store them (defaulted, validated, pruned).
fn dry_run(cp: &ControlPlane, yaml: &str) -> Vec<Value> {
    let out = cp.kubectl_stdin(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        yaml,
    );
    let parsed: Value = serde_json::from_str(&out).unwrap();
    match parsed["kind"].as_str() {
        Some("List") => parsed["items"].as_array().unwrap().clone(),
        _ => vec![parsed],
    }
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn kinds(objects: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds
}

#[test]
fn generate_provider_renders_components_the_api_server_accepts() {
    let ctl = clusterctl();
    let cp = support::control_plane();
    let ns = cp.new_namespace("capmaas-provider");
    let vars = [
        ("MAAS_ENDPOINT", "http://maas.example:5240/MAAS"),
        ("MAAS_API_KEY", "ck:tk:secret"),
    ];
    let yaml = ctl
        .run(
            &[
                "generate",
                "provider",
                "--infrastructure",
                &format!("maas:{VERSION}"),
                "--target-namespace",
                &ns,
            ],
            &vars,
        )
        .unwrap();
    assert!(!yaml.contains("${"), "unsubstituted variable:\n{yaml}");

    // The provider namespace is created by the same apply, which a dry run
    // cannot do: the test created it (as `clusterctl init` would).
    let objects: Vec<Value> = dry_run(cp, &yaml)
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "Role",
            "RoleBinding",
            "Secret",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    );
    for o in &objects {
        let labels = &o["metadata"]["labels"];
        assert_eq!(
            labels["cluster.x-k8s.io/provider"], "infrastructure-maas",
            "{}",
            o["kind"]
        );
        assert!(
            labels.get("clusterctl.cluster.x-k8s.io").is_some(),
            "{} lacks clusterctl's label",
            o["kind"]
        );
        if o["metadata"].get("namespace").is_some() {
            assert_eq!(
                o["metadata"]["namespace"],
                ns.as_str(),
                "{} not moved to the target namespace",
                o["kind"]
            );
        }
    }

    let secret = find(&objects, "Secret", "capmaas-manager-bootstrap-credentials");
    let decode = |key: &str| {
        let b64 = secret["data"][key].as_str().unwrap();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(decode("MAAS_ENDPOINT"), "http://maas.example:5240/MAAS");
    assert_eq!(decode("MAAS_API_KEY"), "ck:tk:secret");

    let binding = find(
        &objects,
        "ClusterRoleBinding",
        "capmaas-manager-rolebinding",
    );
    assert_eq!(binding["subjects"][0]["namespace"], ns.as_str());
    let deployment = find(&objects, "Deployment", "capmaas-controller-manager");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["name"], "manager",
        "clusterctl's contract: the container is named manager"
    );
    assert!(container["args"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--leader-elect"));

    // The provider's variables are exactly the credentials.
    let described = ctl
        .run(
            &[
                "generate",
                "provider",
                "--infrastructure",
                "maas",
                "--describe",
            ],
            &[],
        )
        .unwrap();
    let variables = section(&described, "Variables:");
    assert_eq!(
        variables,
        set(&["MAAS_API_KEY", "MAAS_ENDPOINT"]),
        "{described}"
    );
}

/// `clusterctl generate cluster prod-cluster` in `ns` with the story's
/// variables (3 control planes, 5 workers, v1.26.4), from `flavor`.
fn generate_story_cluster(ctl: &Clusterctl, ns: &str, flavor: Option<&str>) -> String {
    let mut args = vec!["generate", "cluster", "prod-cluster"];
    args.extend(flavor.iter().flat_map(|f| ["--flavor", *f]));
    let infrastructure = format!("maas:{VERSION}");
    args.extend([
        "--infrastructure",
        &infrastructure,
        "--target-namespace",
        ns,
        "--kubernetes-version",
        "v1.26.4",
        "--control-plane-machine-count=3",
        "--worker-machine-count=5",
    ]);
    ctl.run(&args, &STORY_VARIABLES).unwrap()
}

#[test]
fn generate_cluster_renders_the_story_cluster() {
    let ctl = clusterctl();
    let cp = support::control_plane();
    let ns = cp.new_namespace("capmaas-story");
    let yaml = generate_story_cluster(ctl, &ns, None);
    let objects = dry_run(cp, &yaml);
    assert_eq!(
        kinds(&objects),
        [
            "Cluster",
            "KubeadmConfigTemplate",
            "KubeadmControlPlane",
            "MaasCluster",
            "MaasMachineTemplate",
            "MaasMachineTemplate",
            "MachineDeployment",
        ]
    );
    for o in &objects {
        assert_eq!(o["metadata"]["namespace"], ns.as_str());
        let api_version = o["apiVersion"].as_str().unwrap();
        let want = if api_version.starts_with("infrastructure.") {
            "v1beta1"
        } else {
            "v1beta2"
        };
        assert!(api_version.ends_with(want), "{api_version}");
    }

    let cluster = find(&objects, "Cluster", "prod-cluster");
    assert_eq!(cluster["spec"]["infrastructureRef"]["kind"], "MaasCluster");
    assert_eq!(cluster["spec"]["infrastructureRef"]["name"], "prod-cluster");
    assert_eq!(
        find(&objects, "MaasCluster", "prod-cluster")["spec"]["dnsDomain"],
        "maas"
    );

    let kcp = find(
        &objects,
        "KubeadmControlPlane",
        "prod-cluster-control-plane",
    );
    assert_eq!(kcp["spec"]["replicas"], 3);
    assert_eq!(kcp["spec"]["version"], "v1.26.4");
    assert_eq!(
        kcp["spec"]["machineTemplate"]["spec"]["infrastructureRef"]["name"],
        "prod-cluster-control-plane"
    );

    let md = find(&objects, "MachineDeployment", "prod-cluster-md-0");
    assert_eq!(md["spec"]["replicas"], 5);
    assert_eq!(md["spec"]["template"]["spec"]["version"], "v1.26.4");
    assert_eq!(
        md["spec"]["template"]["spec"]["infrastructureRef"]["name"],
        "prod-cluster-md-0"
    );
    assert_eq!(
        md["spec"]["template"]["spec"]["bootstrap"]["configRef"]["name"],
        "prod-cluster-md-0"
    );

    let cp_spec = &find(
        &objects,
        "MaasMachineTemplate",
        "prod-cluster-control-plane",
    )["spec"]["template"]["spec"];
    assert_eq!(cp_spec["image"], "custom/u-2204-0-k-1264-0");
    assert_eq!(cp_spec["minCPU"], 4);
    assert_eq!(cp_spec["minMemory"], 8192);
    assert_eq!(cp_spec["resourcePool"], "default");
    assert_eq!(cp_spec["tags"], serde_json::json!(["control-plane"]));
    let worker_spec =
        &find(&objects, "MaasMachineTemplate", "prod-cluster-md-0")["spec"]["template"]["spec"];
    assert_eq!(worker_spec["image"], "ubuntu/jammy");
    assert_eq!(worker_spec["minCPU"], 2);
    assert_eq!(worker_spec["minMemory"], 4096);
    assert_eq!(worker_spec["resourcePool"], "workers");
    assert_eq!(worker_spec["tags"], serde_json::json!(["worker"]));
}

#[test]
fn template_variables_are_the_go_providers() {
    let ctl = clusterctl();
    let out = ctl
        .run(
            &[
                "generate",
                "cluster",
                "c",
                "--infrastructure",
                &format!("maas:{VERSION}"),
                "-n",
                "default",
                "--list-variables",
            ],
            &[],
        )
        .unwrap();
    let mut required: BTreeSet<String> =
        STORY_VARIABLES.iter().map(|(n, _)| n.to_string()).collect();
    required.insert("KUBERNETES_VERSION".into());
    assert_eq!(section(&out, "Required Variables:"), required, "{out}");
    assert_eq!(
        section(&out, "Optional Variables:"),
        set(&[
            "CLUSTER_NAME",
            "CONTROL_PLANE_MACHINE_COUNT",
            "NAMESPACE",
            "WORKER_MACHINE_COUNT"
        ]),
        "{out}"
    );
    // A missing variable is an error, not an empty field.
    let err = ctl
        .run(
            &[
                "generate",
                "cluster",
                "c",
                "--infrastructure",
                &format!("maas:{VERSION}"),
                "-n",
                "default",
                "--kubernetes-version",
                "v1.26.4",
            ],
            &STORY_VARIABLES[1..],
        )
        .unwrap_err();
    assert!(err.contains("MAAS_DNS_DOMAIN"), "{err}");
}

#[test]
fn empty_pool_and_tag_mean_no_constraint() {
    let ctl = clusterctl();
    let cp = support::control_plane();
    let ns = cp.new_namespace("capmaas-empty");
    let vars: Vec<(&str, &str)> = STORY_VARIABLES
        .iter()
        .map(|&(k, v)| {
            if k.ends_with("_RESOURCEPOOL") || k.ends_with("_TAG") {
                (k, "")
            } else {
                (k, v)
            }
        })
        .collect();
    let yaml = ctl
        .run(
            &[
                "generate",
                "cluster",
                "c",
                "--infrastructure",
                &format!("maas:{VERSION}"),
                "-n",
                &ns,
                "--kubernetes-version",
                "v1.26.4",
            ],
            &vars,
        )
        .unwrap();
    let objects = dry_run(cp, &yaml);
    for name in ["c-control-plane", "c-md-0"] {
        let spec = &find(&objects, "MaasMachineTemplate", name)["spec"]["template"]["spec"];
        assert!(spec.get("resourcePool").is_none(), "{name}: {spec}");
        assert_eq!(spec["tags"], serde_json::json!([]), "{name}");
    }
}

/// `--flavor topology`: clusterctl adds the ClusterClass file (no management
/// cluster to find it in) to a Cluster with `spec.topology`, and the API
/// server accepts all of it.
#[test]
fn generate_cluster_topology_flavor_renders_the_class_and_its_cluster() {
    let ctl = clusterctl();
    let cp = support::control_plane();
    let ns = cp.new_namespace("capmaas-topology");
    let yaml = generate_story_cluster(ctl, &ns, Some("topology"));
    let objects = dry_run(cp, &yaml);
    assert_eq!(
        kinds(&objects),
        [
            "Cluster",
            "ClusterClass",
            "KubeadmConfigTemplate",
            "KubeadmControlPlaneTemplate",
            "MaasClusterTemplate",
            "MaasMachineTemplate",
            "MaasMachineTemplate",
        ]
    );
    for o in &objects {
        assert_eq!(o["metadata"]["namespace"], ns.as_str(), "{}", o["kind"]);
    }

    let cluster = find(&objects, "Cluster", "prod-cluster");
    let topology = &cluster["spec"]["topology"];
    assert_eq!(topology["classRef"]["name"], "maas-kubeadm");
    assert_eq!(topology["version"], "v1.26.4");
    assert_eq!(topology["controlPlane"]["replicas"], 3);
    let md = &topology["workers"]["machineDeployments"][0];
    assert_eq!(
        (&md["class"], &md["name"], &md["replicas"]),
        (&"default-worker".into(), &"md-0".into(), &5.into())
    );
    let values: std::collections::BTreeMap<String, Value> = topology["variables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["value"].clone()))
        .collect();
    let want = serde_json::json!({
        "dnsDomain": "maas",
        "controlPlaneImage": "custom/u-2204-0-k-1264-0",
        "controlPlaneMinCPU": 4,
        "controlPlaneMinMemory": 8192,
        "controlPlaneResourcePool": "default",
        "controlPlaneTags": ["control-plane"],
        "workerImage": "ubuntu/jammy",
        "workerMinCPU": 2,
        "workerMinMemory": 4096,
        "workerResourcePool": "workers",
        "workerTags": ["worker"],
    });
    assert_eq!(serde_json::to_value(&values).unwrap(), want);

    // The Cluster sets every variable the class declares but the per-cluster
    // credentials (default "": the controller's), and the class's templates
    // are the ones it ships.
    let class = find(&objects, "ClusterClass", "maas-kubeadm");
    let variables = class["spec"]["variables"].as_array().unwrap();
    let declared: BTreeSet<String> = variables
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    let mut set: BTreeSet<String> = values.keys().cloned().collect();
    set.insert("identitySecretName".into());
    assert_eq!(declared, set);
    let identity = variables
        .iter()
        .find(|v| v["name"] == "identitySecretName")
        .unwrap();
    assert_eq!(identity["schema"]["openAPIV3Schema"]["default"], "");
    let spec = &class["spec"];
    for (reference, kind) in [
        (
            &spec["infrastructure"]["templateRef"],
            "MaasClusterTemplate",
        ),
        (
            &spec["controlPlane"]["templateRef"],
            "KubeadmControlPlaneTemplate",
        ),
        (
            &spec["controlPlane"]["machineInfrastructure"]["templateRef"],
            "MaasMachineTemplate",
        ),
        (
            &spec["workers"]["machineDeployments"][0]["infrastructure"]["templateRef"],
            "MaasMachineTemplate",
        ),
        (
            &spec["workers"]["machineDeployments"][0]["bootstrap"]["templateRef"],
            "KubeadmConfigTemplate",
        ),
    ] {
        assert_eq!(reference["kind"], kind);
        find(&objects, kind, reference["name"].as_str().unwrap());
    }
}

/// `--flavor vip`: the default flavor's objects, the MaasCluster asking for
/// the VIP, and kube-vip as a static pod on the control-plane machines (a
/// Pod the API server accepts, image pinned, ARP on the given interface).
#[test]
fn generate_cluster_vip_flavor_renders_the_vip_and_kube_vip() {
    let ctl = clusterctl();
    let cp = support::control_plane();
    let ns = cp.new_namespace("capmaas-vip");
    let infrastructure = format!("maas:{VERSION}");
    let generate = |name: &str, version: &str, vars: &[(&str, &str)]| {
        let args = [
            "generate",
            "cluster",
            name,
            "--flavor",
            "vip",
            "--infrastructure",
            &infrastructure,
            "--target-namespace",
            &ns,
            "--kubernetes-version",
            version,
            "--control-plane-machine-count=3",
            "--worker-machine-count=5",
        ];
        ctl.run(&args, vars)
    };
    let mut vars = STORY_VARIABLES.to_vec();
    vars.extend([
        ("CONTROL_PLANE_VIP", "10.11.130.50"),
        ("CONTROL_PLANE_VIP_INTERFACE", "eth0"),
    ]);
    let yaml = generate("prod-cluster", "v1.26.4", &vars).unwrap();
    let objects = dry_run(cp, &yaml);
    assert_eq!(
        kinds(&objects),
        [
            "Cluster",
            "KubeadmConfigTemplate",
            "KubeadmControlPlane",
            "MaasCluster",
            "MaasMachineTemplate",
            "MaasMachineTemplate",
            "MachineDeployment",
        ]
    );
    let maas_cluster = find(&objects, "MaasCluster", "prod-cluster");
    assert_eq!(
        maas_cluster["spec"]["controlPlaneVIP"],
        serde_json::json!({"address": "10.11.130.50"})
    );
    let kcp = find(
        &objects,
        "KubeadmControlPlane",
        "prod-cluster-control-plane",
    );
    assert_eq!(kcp["spec"]["replicas"], 3);
    let config = &kcp["spec"]["kubeadmConfigSpec"];
    let files = config["files"].as_array().unwrap();
    let manifest = files
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/manifests/kube-vip.yaml")
        .expect("kube-vip static pod")["content"]
        .as_str()
        .unwrap();
    // The static pod is a Pod the API server takes as it is.
    let pod = &dry_run(cp, manifest)[0];
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["spec"]["hostNetwork"], true);
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/kube-vip/kube-vip:v0.8.9");
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e["value"].as_str().unwrap_or_default();
            (e["name"].as_str().unwrap().to_string(), value.to_string())
        })
        .collect();
    for want in [
        ("address", "10.11.130.50"),
        ("port", "6443"),
        ("vip_interface", "eth0"),
        ("vip_arp", "true"),
        ("cp_enable", "true"),
        ("vip_leaderelection", "true"),
    ] {
        assert!(
            env.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {env:?}"
        );
    }
    // super-admin.conf only while kubeadm init runs (Kubernetes >= 1.29).
    let commands = |key: &str| -> Vec<String> {
        config[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    assert!(commands("preKubeadmCommands").contains(&"/etc/kube-vip-kubeadm-init.sh".into()));
    assert!(files
        .iter()
        .any(|f| f["path"] == "/etc/kube-vip-kubeadm-init.sh"));
    assert!(commands("postKubeadmCommands")[0]
        .contains("super-admin.conf#path: /etc/kubernetes/admin.conf"));
    // The image tag is a variable with a default.
    vars.push(("KUBE_VIP_VERSION", "v0.9.2"));
    let pinned = generate("c", "v1.30.1", &vars).unwrap();
    assert!(
        pinned.contains("image: ghcr.io/kube-vip/kube-vip:v0.9.2"),
        "{pinned}"
    );
    // Without the VIP clusterctl refuses to render it.
    let err = generate("c", "v1.30.1", &STORY_VARIABLES).unwrap_err();
    assert!(err.contains("CONTROL_PLANE_VIP"), "{err}");
}

/// The topology flavor takes exactly the default flavor's variables, so one
/// clusterctl.yaml serves both.
#[test]
fn topology_flavor_takes_the_default_flavors_variables() {
    let ctl = clusterctl();
    let infrastructure = format!("maas:{VERSION}");
    let list = |flavor: Option<&str>| {
        let mut args = vec![
            "generate",
            "cluster",
            "c",
            "--infrastructure",
            &infrastructure,
            "-n",
            "default",
            "--list-variables",
        ];
        args.extend(flavor.iter().flat_map(|f| ["--flavor", *f]));
        let out = ctl.run(&args, &[]).unwrap();
        (
            section(&out, "Required Variables:"),
            section(&out, "Optional Variables:"),
        )
    };
    assert_eq!(list(Some("topology")), list(None));
}

/// The indented `- NAME` lines under `header` in clusterctl's output.
fn section(out: &str, header: &str) -> BTreeSet<String> {
    out.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// deploy/clusterctl/clusterctl.yaml as shipped: its `providers:` entry finds
/// a repository laid out by `generate.sh --repo $HOME/capmaas-repo v0.1.0`,
/// its `images:` entry moves the manager image, and its variables are enough
/// to render a cluster.
#[test]
fn example_clusterctl_yaml_works_as_documented() {
    let ctl = clusterctl();
    let home = support::tempdir("capmaas-example-home").unwrap();
    let status = Command::new(support::repo_root().join("deploy/clusterctl/generate.sh"))
        .args([
            "--repo",
            support::path_str(&home.join("capmaas-repo")),
            VERSION,
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let example = Clusterctl {
        bin: ctl.bin.clone(),
        home,
        config: support::repo_root().join("deploy/clusterctl/clusterctl.yaml"),
    };
    let provider = example
        .run(
            &["generate", "provider", "--infrastructure", "maas:v0.1.0"],
            &[],
        )
        .unwrap();
    assert!(
        provider.contains("image: registry.example/capmaas:0.1.0"),
        "{provider}"
    );
    assert!(provider.contains("MAAS_ENDPOINT: http://maas.example:5240/MAAS"));
    let cluster = example
        .run(
            &[
                "generate",
                "cluster",
                "prod-cluster",
                "-n",
                "default",
                "--infrastructure",
                "maas:v0.1.0",
                "--kubernetes-version",
                "v1.26.4",
            ],
            &[],
        )
        .unwrap();
    assert!(cluster.contains("kind: KubeadmControlPlane"), "{cluster}");
}
