//! Facts arrive later on real MAAS (issue 20 item 7): a deploy answer
//! carries neither the machine's addresses nor its power (real MAAS 3.4.8
//! claims AUTO addresses after answering, and learns the power from the
//! BMC; the simulator now answers the same: the_simulator_answers_as_real_
//! maas_does in tests/real_maas.rs). Three control planes whose addresses
//! appear at different watch polls must still all reach the cluster's DNS
//! record, with capmaas at its defaults (watch interval included) on the
//! real kube-apiserver and `maas-sim`.
//!
//! Here with `--dns-attach-without-api-check` (the story machines serve
//! no API); the join probe's path (a control plane enters the record once
//! its API answers) is the cluster reconciler's unit test
//! `control_planes_whose_addresses_come_at_different_polls_all_join_with_the_probe`.
//!
//!     cargo test --test late_addresses -- --nocapture

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::story::{self, Capmaas};
use support::ControlPlane;

const CLUSTER: &str = "late";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
/// The story inventory's control-plane machines in cp-pool.
const HOSTS: [&str; 3] = ["cp-1", "cp-2", "cp-3"];
/// How long MAAS holds each deploy call before taking it, in the order
/// capmaas sends them: their addresses come into being this far apart
/// (more than the watch's 15 s interval from first to last), and always
/// after capmaas sent the deploy.
const DEPLOY_HELD_MS: [u64; 3] = [0, 10_000, 20_000];

/// The Cluster (infrastructure marked provisioned, as Cluster API would
/// once we are) and its MaasCluster, with the simulator's admin key.
fn create_cluster(cp: &ControlPlane, ns: &str) {
    cp.apply(&json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster = cp
        .get(ns, "clusters.cluster.x-k8s.io", CLUSTER)
        .expect("the Cluster");
    cp.apply(&json!({
        "apiVersion": INFRA, "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": ns,
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": CLUSTER,
                                          "uid": cluster["metadata"]["uid"], "controller": true,
                                          "blockOwnerDeletion": true}]},
        "spec": {"dnsDomain": "k8s.maas"},
    }));
    cp.kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);
}

fn addresses(v: &Value) -> Vec<String> {
    let mut ips: Vec<String> = v["ip_addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect();
    ips.sort();
    ips
}

#[test]
fn control_planes_whose_addresses_come_at_different_polls_all_reach_the_record() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("late");
    let sim = MaasSim::start(None);
    sim.set_timings(5.0, 0.5);
    for held in DEPLOY_HELD_MS {
        sim.set_fault(json!({"method": "POST", "op": "deploy", "latency_ms": held, "times": 1}));
    }
    create_cluster(cp, &ns);
    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        cp.dir.join(format!("capmaas-{ns}.log")),
        &[format!("--namespace={ns}")],
    );
    capmaas.wait_ready(60);
    let started = Instant::now();
    for (i, host) in HOSTS.iter().enumerate() {
        cp.add_machine(
            &ns,
            CLUSTER,
            &format!("cp-{i}"),
            true,
            json!({"image": story::IMAGE, "minCPU": 4, "minMemory": 8192,
                   "resourcePool": "cp-pool", "machineSelector": {"hostname": host}}),
        );
    }

    // When each machine's address came into being in MAAS, and the record.
    let mut appeared: BTreeMap<&str, (Duration, Vec<String>)> = BTreeMap::new();
    let record = support::eventually(150, "all three control planes in the DNS record", || {
        capmaas.assert_running();
        for host in HOSTS {
            let ips = addresses(&sim.machine_state(host));
            if !ips.is_empty() {
                appeared.entry(host).or_insert((started.elapsed(), ips));
            }
        }
        let mc = cp.get(&ns, "maasclusters", CLUSTER)?;
        let fqdn = mc["status"]["network"]["dnsName"].as_str()?.to_owned();
        let record = sim.state()["dns_resources"]
            .as_array()?
            .iter()
            .find(|r| r["fqdn"] == fqdn.as_str())?
            .clone();
        let mut want: Vec<String> = appeared.values().flat_map(|(_, ips)| ips.clone()).collect();
        want.sort();
        (appeared.len() == HOSTS.len() && addresses(&record) == want).then_some(record)
    });
    let times: Vec<Duration> = appeared.values().map(|(at, _)| *at).collect();
    eprintln!("addresses appeared at {appeared:?}; the record: {record}");
    let spread = times.iter().max().copied().unwrap_or_default()
        - times.iter().min().copied().unwrap_or_default();
    assert!(
        spread >= Duration::from_secs(15),
        "the addresses came {spread:?} apart, within one watch interval: {appeared:?}"
    );
    assert_eq!(addresses(&record).len(), 3, "{record}");
    capmaas.assert_running();
}
