//! Externally managed infrastructure (the Cluster API contract): a
//! MaasCluster carrying the `cluster.x-k8s.io/managed-by` annotation is
//! left to its owner, on the real API server with the MAAS simulator. The
//! test plays Cluster API (owner references); capmaas runs as a process.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::story::{self, Capmaas, INFRA_API_VERSION, INFRA_GROUP};
use support::ControlPlane;

const MANAGED_BY: &str = "cluster.x-k8s.io/managed-by";
const FINALIZER: &str = "maascluster.infrastructure.cluster.x-k8s.io";

fn apply(cp: &ControlPlane, object: &Value) {
    cp.kubectl_stdin(&["apply", "-f", "-"], &object.to_string());
}

fn get(cp: &ControlPlane, ns: &str, kind: &str, name: &str) -> Option<Value> {
    cp.try_kubectl(&["get", kind, name, "-n", ns, "-o", "json"], "")
        .ok()
        .map(|out| serde_json::from_str(&out).expect("kubectl -o json"))
}

/// A Cluster and its MaasCluster, owned the way Cluster API owns it.
fn cluster_pair(cp: &ControlPlane, ns: &str, name: &str, annotations: Value) {
    apply(
        cp,
        &json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasCluster", "name": name}},
        }),
    );
    let uid = get(cp, ns, "cluster", name).unwrap()["metadata"]["uid"].clone();
    apply(
        cp,
        &json!({
            "apiVersion": INFRA_API_VERSION, "kind": "MaasCluster",
            "metadata": {
                "name": name, "namespace": ns, "annotations": annotations,
                "labels": {"cluster.x-k8s.io/cluster-name": name},
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                     "name": name, "uid": uid, "controller": true}],
            },
            "spec": {"dnsDomain": "k8s.maas",
                     "controlPlaneEndpoint": {"host": "lb.example.org", "port": 6443}},
        }),
    );
}

fn dns_records(sim: &MaasSim) -> Vec<String> {
    let mut names: Vec<String> = sim.state()["dns_resources"]
        .as_array()
        .expect("dns_resources")
        .iter()
        .map(|r| r["fqdn"].as_str().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn an_externally_managed_maas_cluster_is_left_to_its_owner() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("external");
    let sim = MaasSim::start(None);
    let records_before = dns_records(&sim);

    cluster_pair(cp, &ns, "theirs", json!({MANAGED_BY: "my-lb-operator"}));
    cluster_pair(cp, &ns, "ours", json!({}));
    let theirs_before = get(cp, &ns, "maascluster", "theirs").unwrap();

    let dir = support::tempdir("capmaas-external").unwrap();
    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        dir.join("capmaas.log"),
        &[format!("--namespace={ns}")],
    );
    capmaas.wait_ready(60);

    // The controller is at work: the cluster without the annotation gets
    // our finalizer and its DNS record.
    let ours_name = support::eventually(60, "MaasCluster ours provisioned", || {
        let ours = get(cp, &ns, "maascluster", "ours")?;
        let name = ours["status"]["network"]["dnsName"].as_str()?.to_string();
        dns_records(&sim).contains(&name).then_some(name)
    });
    let ours = get(cp, &ns, "maascluster", "ours").unwrap();
    assert_eq!(ours["metadata"]["finalizers"], json!([FINALIZER]));

    // The annotated one: a change to it is seen (and ignored) too.
    cp.kubectl(&["label", "maascluster", "theirs", "-n", &ns, "touched=yes"]);
    std::thread::sleep(Duration::from_secs(3));
    capmaas.assert_running();
    let theirs = get(cp, &ns, "maascluster", "theirs").unwrap();
    assert!(theirs["metadata"]["finalizers"].is_null(), "{theirs}");
    assert!(theirs["status"].is_null(), "no status writes: {theirs}");
    assert_eq!(theirs["spec"], theirs_before["spec"]);
    let mut expected = records_before.clone();
    expected.push(ours_name.clone());
    expected.sort();
    assert_eq!(dns_records(&sim), expected, "no DNS record for theirs");

    // A cluster handed over to an owner and deleted: capmaas takes its
    // finalizer off and leaves the record (now the owner's) in MAAS.
    cp.kubectl(&[
        "annotate",
        "maascluster",
        "ours",
        "-n",
        &ns,
        &format!("{MANAGED_BY}=my-lb-operator"),
    ]);
    story::delete_no_wait(cp, &ns, "maascluster", "ours");
    support::eventually(30, "MaasCluster ours deleted", || {
        get(cp, &ns, "maascluster", "ours").is_none().then_some(())
    });
    assert_eq!(dns_records(&sim), expected, "the record is left alone");
    capmaas.assert_running();
}
