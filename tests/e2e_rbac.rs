//! The whole README story with `capmaas` authenticated as the deploy/
//! ServiceAccount: a TokenRequest token of `capmaas-manager`, the RBAC of
//! deploy/rbac.yaml, the real API server authorizing with RBAC, leader
//! election on as deploy/manager.yaml runs it. The test plays Cluster API
//! (Cluster, Machines owning MaasMachines, bootstrap Secrets, the
//! `<cluster>-kubeconfig` Secret, whose admin credentials reach the
//! "workload cluster", i.e. this same API server, where Nodes live).
//!
//! 3 control-plane + 5 worker machines Ready with providerIDs on their
//! Nodes and the control-plane IPs in DNS; workers scaled 5→2 releasing 3;
//! the cluster deleted releasing everything and deleting the DNS record; a
//! clean SIGTERM. Throughout, the API server never answered 401 or 403 to
//! capmaas (its own request metrics) and its log has no such error.

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use capmaas::kube::{self, resources, ListParams};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::nodes::{sim_views, NodeHelper};
use support::objects::{self, string};
use support::story::{free_port, http_get, metric_sum, parse_metrics};
use support::ControlPlane;

const NAMESPACE: &str = "capmaas-system";
const SERVICE_ACCOUNT: &str = "capmaas-manager";
const LEASE: &str = "capmaas-leader-election";
const CLUSTER: &str = "rbac";
const PREFIX: &str = "rbac";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const IMAGE: &str = "custom/u-2204-0-k-1264-0";

fn deploy_file(name: &str) -> String {
    let path = support::repo_root().join("deploy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A kubeconfig with a fresh TokenRequest token of the ServiceAccount, as
/// the kubelet would project it into the pod.
fn service_account_kubeconfig(cp: &ControlPlane, dir: &Path) -> PathBuf {
    let token = cp.kubectl(&[
        "create",
        "token",
        SERVICE_ACCOUNT,
        "-n",
        NAMESPACE,
        "--duration=1h",
    ]);
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "management", "cluster": {
            "server": cp.server,
            "certificate-authority": support::path_str(&cp.ca_file),
        }}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token.trim()}}],
        "contexts": [{"name": "capmaas", "context": {
            "cluster": "management", "user": SERVICE_ACCOUNT, "namespace": NAMESPACE,
        }}],
        "current-context": "capmaas",
    });
    let path = dir.join("capmaas-sa.kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    path
}

/// capmaas as deploy/manager.yaml runs it (leader election on), with the
/// ServiceAccount's kubeconfig; killed on drop unless it exited.
struct Manager {
    child: Child,
    log: PathBuf,
    metrics: SocketAddr,
    health: SocketAddr,
}

impl Manager {
    fn start(kubeconfig: &Path, sim: &MaasSim, dir: &Path) -> Manager {
        let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let health: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let log = dir.join("capmaas.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(support::story::capmaas_bin())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect")
            .arg(format!("--leader-election-namespace={NAMESPACE}"))
            .arg(format!("--metrics-bind-address={metrics}"))
            .arg(format!("--health-probe-bind-address={health}"))
            // Nothing serves at the simulator's machine addresses (see
            // story::Capmaas::start).
            .arg("--dns-attach-without-api-check")
            .env_remove("KUBECONFIG")
            .env("MAAS_ENDPOINT", &sim.url)
            .env("MAAS_API_KEY", &sim.api_key)
            .env(
                "RUST_LOG",
                std::env::var("CAPMAAS_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("spawning capmaas");
        Manager {
            child,
            log,
            metrics,
            health,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        support::story::tail(&self.log, 60)
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("capmaas exited ({status}); log:\n{}", self.tail());
        }
    }

    /// `rest_client_requests_total` by status code, from /metrics.
    fn requests_with_code(&self, code: &str) -> f64 {
        let (status, body) = http_get(self.metrics, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "/metrics: {body}");
        let label = format!("code=\"{code}\"");
        metric_sum(
            &parse_metrics(&body),
            "rest_client_requests_total",
            &[&label],
        )
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- capmaas log tail ({}) ---\n{}",
                self.log.display(),
                self.tail()
            );
        }
    }
}

/// The test in Cluster API's role, reading with the admin client.
struct Story {
    cp: &'static ControlPlane,
    kube: kube::Client,
    ns: String,
}

impl Story {
    fn apply(&self, obj: &Value) {
        self.cp
            .kubectl_stdin(&["apply", "-f", "-"], &obj.to_string());
    }

    fn get(&self, r: &kube::Resource, name: &str) -> Option<Value> {
        match self.kube.get(r, Some(&self.ns), name) {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                println!("get {} {name}: {e}", r.plural);
                None
            }
        }
    }

    fn count(&self, r: &kube::Resource) -> Option<usize> {
        self.kube
            .list(r, Some(&self.ns), &ListParams::default())
            .ok()
            .map(|l| l.items.len())
    }

    fn delete(&self, kind: &str, name: &str) {
        support::story::delete_no_wait(self.cp, &self.ns, kind, name);
    }

    fn add_machine(&self, name: &str, control_plane: bool) {
        let bootstrap = support::story::bootstrap_secret_name(name);
        self.apply(&support::capi::bootstrap_secret(
            &self.ns, &bootstrap, CLUSTER,
        ));
        self.apply(&objects::machine(&self.ns, CLUSTER, name, control_plane));
        let machine_uid = string(&self.get(&resources::MACHINES, name).unwrap()["metadata"]["uid"]);
        let spec = if control_plane {
            json!({"image": IMAGE, "minCPU": 4, "minMemory": 8192, "resourcePool": "cp-pool"})
        } else {
            json!({"image": IMAGE, "minCPU": 8, "minMemory": 16384, "resourcePool": "worker-pool"})
        };
        self.apply(&objects::owned_maas_machine(
            &self.ns,
            CLUSTER,
            name,
            control_plane,
            &machine_uid,
            spec,
        ));
    }

    fn remove_machine(&self, name: &str) {
        self.delete("maasmachines", name);
        self.delete("machines.cluster.x-k8s.io", name);
    }
}

/// system_ids of MAAS machines someone holds.
fn owned(sim: &MaasSim) -> BTreeSet<String> {
    sim.state()["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !m["owner"].is_null())
        .map(|m| string(&m["system_id"]))
        .collect()
}

fn dns_records(sim: &MaasSim) -> Vec<Value> {
    sim.state()["dns_resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| string(&d["fqdn"]).starts_with(&format!("{CLUSTER}-")))
        .cloned()
        .collect()
}

#[test]
fn the_story_as_the_deploy_service_account_without_a_403() {
    let cp = support::control_plane();
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("namespace.yaml"));
    cp.kubectl_stdin(&["apply", "-f", "-"], &deploy_file("rbac.yaml"));
    // The ServiceAccount may not touch Nodes of the management cluster:
    // proof that the Node writes below go through the workload kubeconfig.
    // (`kubectl auth can-i` prints "no" and exits 1.)
    let can = cp.try_kubectl(
        &[
            "auth",
            "can-i",
            "patch",
            "nodes",
            &format!("--as=system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"),
        ],
        "",
    );
    assert!(
        can.as_deref().map_or(true, |out| out.trim() == "no"),
        "the ServiceAccount may patch Nodes: {can:?}"
    );

    let dir = support::tempdir("capmaas-rbac").unwrap();
    let kubeconfig = service_account_kubeconfig(cp, &dir);
    let mut inventory = support::maas_sim::story_inventory();
    for machine in inventory["machines"].as_array_mut().unwrap() {
        let hostname = string(&machine["hostname"]);
        machine["hostname"] = json!(format!("{PREFIX}-{hostname}"));
    }
    let sim = MaasSim::start(Some(&inventory));
    sim.set_timings(1.0, 0.5);
    let base = sim.base.clone();
    let _nodes = NodeHelper::start(cp, move || sim_views(&base));
    let mut manager = Manager::start(&kubeconfig, &sim, &dir);
    println!("rbac: capmaas log {}", manager.log.display());
    support::eventually(90, "capmaas ready (caches synced)", || {
        manager.assert_running();
        (http_get(manager.health, "/readyz").map(|r| r.0) == Some(200)).then_some(())
    });
    support::eventually(60, "the Lease held", || {
        manager.assert_running();
        let out = cp
            .try_kubectl(&["get", "lease", LEASE, "-n", NAMESPACE, "-o", "json"], "")
            .ok()?;
        let lease: Value = serde_json::from_str(&out).ok()?;
        (!string(&lease["spec"]["holderIdentity"]).is_empty()).then_some(())
    });

    // The cluster: Cluster, workload kubeconfig, MaasCluster owned by it.
    let story = Story {
        cp,
        kube: support::story::kube_client(cp),
        ns: cp.new_namespace(PREFIX),
    };
    story.apply(&json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": story.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster_uid = string(&story.get(&resources::CLUSTERS, CLUSTER).unwrap()["metadata"]["uid"]);
    story.apply(&support::capi::kubeconfig_secret(cp, &story.ns, CLUSTER));
    story.apply(&json!({
        "apiVersion": INFRA, "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": story.ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": CLUSTER, "uid": cluster_uid,
                                          "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"dnsDomain": "k8s.maas"},
    }));
    let fqdn = support::eventually(90, "MaasCluster provisioned", || {
        manager.assert_running();
        let mc = story.get(&resources::MAAS_CLUSTERS, CLUSTER)?;
        (mc["status"]["initialization"]["provisioned"] == true).then_some(())?;
        (mc["spec"]["controlPlaneEndpoint"]["host"].is_string()).then_some(())?;
        mc["status"]["network"]["dnsName"]
            .as_str()
            .map(str::to_string)
    });
    cp.kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &story.ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);

    // 3 control-plane + 5 worker machines.
    let cps = ["cp-a", "cp-b", "cp-c"];
    let workers = ["w-1", "w-2", "w-3", "w-4", "w-5"];
    for name in cps {
        story.add_machine(name, true);
    }
    for name in workers {
        story.add_machine(name, false);
    }
    let all: Vec<&str> = cps.iter().chain(workers.iter()).copied().collect();
    support::eventually(
        240,
        "8 MaasMachines Ready with providerIDs on their Nodes",
        || {
            manager.assert_running();
            for name in &all {
                let mm = story.get(&resources::MAAS_MACHINES, name)?;
                (mm["status"]["ready"] == true && objects::condition_is(&mm, "Ready", "True"))
                    .then_some(())?;
                let provider_id = mm["spec"]["providerID"].as_str()?;
                let hostname = mm["status"]["hostname"].as_str()?;
                let node = story.kube.get(&resources::NODES, None, hostname).ok()?;
                (node["spec"]["providerID"] == provider_id).then_some(())?;
            }
            Some(())
        },
    );
    let mut system_ids = BTreeSet::new();
    for name in &all {
        let mm = story.get(&resources::MAAS_MACHINES, name).unwrap();
        let system_id = string(&mm["spec"]["systemID"]);
        let zone = string(&mm["spec"]["failureDomain"]);
        assert_eq!(
            string(&mm["spec"]["providerID"]),
            format!("maas:///{zone}/{system_id}")
        );
        assert_eq!(sim.machine_state(&system_id)["status_name"], "Deployed");
        system_ids.insert(system_id);
    }
    assert_eq!(owned(&sim), system_ids, "one MAAS machine per MaasMachine");
    let cp_ips: BTreeSet<String> = cps
        .iter()
        .flat_map(|n| {
            story.get(&resources::MAAS_MACHINES, n).unwrap()["status"]["addresses"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|a| a["type"] == "ExternalIP")
        .map(|a| string(&a["address"]))
        .collect();
    assert_eq!(cp_ips.len(), 3, "{cp_ips:?}");
    support::eventually(60, "the DNS record holds the 3 control-plane IPs", || {
        manager.assert_running();
        let records = dns_records(&sim);
        let ips: BTreeSet<String> = records.first()?["ip_addresses"]
            .as_array()?
            .iter()
            .map(string)
            .collect();
        (records.len() == 1 && string(&records[0]["fqdn"]) == fqdn && ips == cp_ips).then_some(())
    });
    support::eventually(60, "APIServerAvailable", || {
        manager.assert_running();
        let mc = story.get(&resources::MAAS_CLUSTERS, CLUSTER)?;
        objects::condition_is(&mc, "APIServerAvailable", "True").then_some(())
    });

    // Scale workers 5 → 2: three MAAS machines released.
    let removed = ["w-3", "w-4", "w-5"];
    let removed_ids: BTreeSet<String> = removed
        .iter()
        .map(|n| string(&story.get(&resources::MAAS_MACHINES, n).unwrap()["spec"]["systemID"]))
        .collect();
    for name in removed {
        story.remove_machine(name);
    }
    support::eventually(
        120,
        "3 workers released and their MaasMachines gone",
        || {
            manager.assert_running();
            let gone = removed
                .iter()
                .all(|n| story.get(&resources::MAAS_MACHINES, n).is_none());
            let held = owned(&sim);
            (gone && held.len() == 5 && held.is_disjoint(&removed_ids)).then_some(())
        },
    );

    // Delete the cluster as Cluster API does: the Machines, then (once
    // their MaasMachines are gone) the MaasCluster, then the Cluster.
    for name in cps.iter().chain(&["w-1", "w-2"]) {
        story.remove_machine(name);
    }
    support::eventually(120, "every MaasMachine released and gone", || {
        manager.assert_running();
        (story.count(&resources::MAAS_MACHINES)? == 0 && owned(&sim).is_empty()).then_some(())
    });
    story.delete("maasclusters", CLUSTER);
    support::eventually(120, "the MaasCluster gone with its DNS record", || {
        manager.assert_running();
        (story.count(&resources::MAAS_CLUSTERS)? == 0 && dns_records(&sim).is_empty()).then_some(())
    });
    story.delete("clusters.cluster.x-k8s.io", CLUSTER);

    // Never a 401 or 403 from the API server, by capmaas's own count of its
    // requests (which did reach it: the metric is not simply absent).
    let ok = manager.requests_with_code("200") + manager.requests_with_code("201");
    assert!(ok > 0.0, "no successful API request counted");
    for code in ["401", "403"] {
        let n = manager.requests_with_code(code);
        assert_eq!(
            n,
            0.0,
            "{n} API requests answered {code}:\n{}",
            manager.tail()
        );
    }

    // SIGTERM: the Lease handed back, a clean exit.
    let pid = manager.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let exit = support::eventually(60, "capmaas exits after SIGTERM", || {
        manager.child.try_wait().ok().flatten()
    });
    assert!(
        exit.success(),
        "capmaas exited with {exit}:\n{}",
        manager.tail()
    );
    let log = manager.log();
    let lower = log.to_lowercase();
    for needle in ["forbidden", " 403", "unauthorized", " 401"] {
        assert!(
            !lower.contains(needle),
            "{needle:?} in capmaas's log:\n{log}"
        );
    }
}
