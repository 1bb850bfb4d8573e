//! capmaas running as the `capmaas-manager` ServiceAccount with a
//! TokenRequest token (as a pod would), against the real API server, taking
//! a MaasCluster and one control-plane MaasMachine through their lives
//! (finalizers, spec and status patches, bootstrap Secret, events, MAAS
//! allocate/deploy/release, deletion) and shutting down releasing the
//! Lease, without one 401 or 403: the proof that an RBAC flavor of deploy/
//! is enough (tests/deploy_service_account.rs, tests/deploy_namespaced.rs).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::maas_sim::MaasSim;
use super::story::free_port;
use super::ControlPlane;

const NAMESPACE: &str = "capmaas-system";
const LEASE: &str = "capmaas-leader-election";

pub fn deploy_file(name: &str) -> String {
    let path = super::repo_root().join("deploy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A kubeconfig holding a fresh TokenRequest token of the manager's
/// ServiceAccount: what the kubelet mounts into the pod, as a file.
fn service_account_kubeconfig(cp: &ControlPlane, dir: &Path) -> std::path::PathBuf {
    let token = cp.kubectl(&[
        "create",
        "token",
        "capmaas-manager",
        "-n",
        NAMESPACE,
        "--duration=1h",
    ]);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
         users:\n- name: capmaas\n  user:\n    token: {}\ncontexts:\n- name: capmaas\n  context: {{cluster: test, user: capmaas, namespace: {NAMESPACE}}}\n\
         current-context: capmaas\n",
        cp.server,
        cp.ca_file.display(),
        token.trim()
    );
    let path = dir.join("capmaas-sa.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    path
}

/// The manager process; killed on drop if the test did not stop it.
struct Manager {
    child: Child,
    log: std::path::PathBuf,
}

impl Manager {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Status code of `GET path`, or None when nothing answers yet.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.split(' ').nth(1)?.parse().ok()
}

fn get_json(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get", "-o", "json"];
    all.extend_from_slice(args);
    cp.try_kubectl(&all, "")
        .ok()
        .and_then(|out| serde_json::from_str(&out).ok())
}

/// The story (see the module comment) with capmaas started with
/// `extra_args`, in namespace `ns`.
pub fn reconcile_as_service_account(cp: &ControlPlane, ns: &str, extra_args: &[String]) {
    let ns = ns.to_string();
    let dir = super::tempdir("capmaas-sa").unwrap();
    let kubeconfig = service_account_kubeconfig(cp, &dir);
    let sim = MaasSim::start(None);
    let health_port = free_port();
    let log = dir.join("capmaas.log");
    let child = Command::new(env!("CARGO_BIN_EXE_capmaas"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--leader-elect")
        .arg(format!("--leader-election-namespace={NAMESPACE}"))
        .arg(format!(
            "--health-probe-bind-address=127.0.0.1:{health_port}"
        ))
        .arg("--metrics-bind-address=0")
        // Nothing serves at the simulator's machine addresses (see
        // story::Capmaas::start).
        .arg("--dns-attach-without-api-check")
        .args(extra_args)
        .env_remove("KUBECONFIG")
        .env("MAAS_ENDPOINT", &sim.url)
        .env("MAAS_API_KEY", &sim.api_key)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("capmaas.stdout")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut manager = Manager { child, log };

    // Caches synced (list + watch of every kind) and leader elected.
    super::eventually(90, "capmaas ready", || {
        (http_status(health_port, "/readyz") == Some(200)).then_some(())
    });
    let holder = super::eventually(60, "the Lease held", || {
        let lease = get_json(cp, &["lease", LEASE, "-n", NAMESPACE])?;
        let holder = lease["spec"]["holderIdentity"].as_str()?.to_string();
        (!holder.is_empty()).then_some(holder)
    });

    // A MaasCluster owned by a Cluster: the manager patches the finalizer and
    // the endpoint, writes status, records events.
    cp.kubectl_stdin(
        &["apply", "-n", &ns, "-f", "-"],
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata:\n  name: prod-cluster\nspec:\n  \
         infrastructureRef:\n    apiGroup: infrastructure.cluster.x-k8s.io\n    kind: MaasCluster\n    name: prod-cluster\n",
    );
    let uid = cp.kubectl(&[
        "get",
        "-n",
        &ns,
        "cluster",
        "prod-cluster",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let maas_cluster = format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasCluster\nmetadata:\n  name: prod-cluster\n  \
         labels:\n    cluster.x-k8s.io/cluster-name: prod-cluster\n  ownerReferences:\n  - apiVersion: cluster.x-k8s.io/v1beta2\n    \
         kind: Cluster\n    name: prod-cluster\n    uid: {uid}\nspec:\n  dnsDomain: k8s.maas\n"
    );
    cp.kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &maas_cluster);
    let mc = super::eventually(90, "MaasCluster reconciled", || {
        let mc = get_json(cp, &["-n", &ns, "maascluster", "prod-cluster"])?;
        let has_finalizer = mc["metadata"]["finalizers"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f == "maascluster.infrastructure.cluster.x-k8s.io")
        });
        let has_endpoint = mc["spec"]["controlPlaneEndpoint"]["host"].is_string();
        let provisioned = mc["status"]["initialization"]["provisioned"] == true;
        (has_finalizer && has_endpoint && provisioned).then_some(mc)
    });
    let host = mc["spec"]["controlPlaneEndpoint"]["host"].as_str().unwrap();
    assert!(
        host.starts_with("prod-cluster-") && host.ends_with(".k8s.maas"),
        "{host}"
    );

    // One control-plane machine, Cluster API's part played by the test:
    // infrastructure provisioned, a bootstrap data Secret, the Machine, and
    // the MaasMachine it owns. The manager reads the Secret, allocates and
    // deploys in MAAS, and patches spec (providerID) and status.
    sim.set_timings(0.2, 0.2);
    cp.kubectl(&[
        "patch",
        "-n",
        &ns,
        "cluster",
        "prod-cluster",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);
    let bootstrap = super::capi::bootstrap_secret(&ns, "cp-0-bootstrap", "prod-cluster");
    cp.kubectl_stdin(&["apply", "-f", "-"], &bootstrap.to_string());
    let machine = "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata:\n  name: cp-0\n  labels:\n    \
         cluster.x-k8s.io/cluster-name: prod-cluster\n    cluster.x-k8s.io/control-plane: \"\"\nspec:\n  \
         clusterName: prod-cluster\n  bootstrap:\n    dataSecretName: cp-0-bootstrap\n  infrastructureRef:\n    \
         apiGroup: infrastructure.cluster.x-k8s.io\n    kind: MaasMachine\n    name: cp-0\n";
    cp.kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], machine);
    let machine_uid = cp.kubectl(&[
        "get",
        "-n",
        &ns,
        "machine",
        "cp-0",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let maas_machine = format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasMachine\nmetadata:\n  name: cp-0\n  labels:\n    \
         cluster.x-k8s.io/cluster-name: prod-cluster\n    cluster.x-k8s.io/control-plane: \"\"\n  ownerReferences:\n  \
         - apiVersion: cluster.x-k8s.io/v1beta2\n    kind: Machine\n    name: cp-0\n    uid: {machine_uid}\nspec:\n  \
         image: u-2204-0-k-1264-0\n  minCPU: 4\n  minMemory: 8192\n  resourcePool: cp-pool\n"
    );
    cp.kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], &maas_machine);
    let mm = super::eventually(120, "MaasMachine deployed", || {
        let mm = get_json(cp, &["-n", &ns, "maasmachine", "cp-0"])?;
        (mm["status"]["ready"] == true && mm["spec"]["providerID"].is_string()).then_some(mm)
    });
    let provider_id = mm["spec"]["providerID"].as_str().unwrap();
    assert!(provider_id.starts_with("maas:///zone-"), "{provider_id}");
    assert_eq!(mm["status"]["machineState"], "Deployed");

    // Events were recorded (created, or patched when repeated) on our objects.
    let events = get_json(cp, &["-n", &ns, "events"]).unwrap();
    let ours = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["kind"] == "MaasMachine")
        .count();
    assert!(ours > 0, "no Event recorded for the MaasMachine: {events}");

    // Deleting releases the machine in MAAS and removes the finalizer
    // (patches again); then the MaasCluster's DNS record and finalizer go.
    let system_id = mm["spec"]["systemID"].as_str().unwrap().to_string();
    cp.kubectl(&["delete", "-n", &ns, "maasmachine", "cp-0", "--wait=false"]);
    super::eventually(120, "MaasMachine gone", || {
        cp.try_kubectl(&["get", "-n", &ns, "maasmachine", "cp-0"], "")
            .is_err()
            .then_some(())
    });
    // Released (the finalizer goes once MAAS accepted the release; the
    // machine then passes through Releasing).
    super::eventually(60, "MAAS machine released", || {
        sim.machine_state(&system_id)["owner"]
            .is_null()
            .then_some(())
    });
    cp.kubectl(&[
        "delete",
        "-n",
        &ns,
        "maascluster",
        "prod-cluster",
        "--wait=false",
    ]);
    super::eventually(120, "MaasCluster gone", || {
        cp.try_kubectl(&["get", "-n", &ns, "maascluster", "prod-cluster"], "")
            .is_err()
            .then_some(())
    });

    // Shutdown releases the Lease (an update) and exits cleanly.
    let pid = manager.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = super::eventually(60, "capmaas exits after SIGTERM", || {
        manager.child.try_wait().ok().flatten()
    });
    let log = manager.log();
    assert!(exit.success(), "capmaas exited with {exit}:\n{log}");
    let lease = get_json(cp, &["lease", LEASE, "-n", NAMESPACE]).unwrap();
    assert_ne!(
        lease["spec"]["holderIdentity"].as_str(),
        Some(holder.as_str()),
        "Lease not released:\n{log}"
    );

    let lower = log.to_lowercase();
    for needle in ["forbidden", " 403", "unauthorized", " 401"] {
        assert!(
            !lower.contains(needle),
            "{needle:?} in the manager's log:\n{log}"
        );
    }
}
