//! The README story end to end: the real kube-apiserver, `maas-sim`, the
//! `capmaas` binary, and this test playing Cluster API's part (Cluster and
//! Machines with owner references and labels, bootstrap Secrets, the
//! `<cluster>-kubeconfig` Secret pointing back at the test control plane,
//! Nodes named after the MAAS hostnames as kubelet would register them).
//!
//! 3 control-plane + 5 worker machines come up with providerIDs on their
//! Nodes and the API DNS record holds exactly the 3 control-plane IPs with
//! TTL 10; scaling workers 5→2 releases 3 machines in MAAS; a control-plane
//! machine powered off behind MAAS's back is powered on again while the DNS
//! record never goes empty; a machine nothing matches and a wrong image show
//! their conditions and recover; deleting the cluster releases everything,
//! deletes the DNS record and drops every finalizer.
//!
//! At the product's default periods (no `--sync-period`), the MAAS watch
//! alone notices what happens in MAAS: a power-off, a machine marked Broken
//! or released out of band, MAAS's deployment events on the MaasMachine, a
//! deployment finishing (within 20 s) or failing (MAAS's reason shown).

mod support;

use capmaas::maas::MaasApi;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::nodes::{sim_views, NodeHelper};
use support::objects;
use support::story::Capmaas;
use support::ControlPlane;

const CLUSTER: &str = "story";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CAPI: &str = "cluster.x-k8s.io/v1beta2";
const IMAGE: &str = "custom/u-2204-0-k-1264-0";

struct Story {
    cp: &'static ControlPlane,
    ns: String,
}

impl Story {
    fn apply(&self, obj: &Value) {
        self.cp.apply(obj);
    }

    fn get(&self, kind: &str, name: &str) -> Option<Value> {
        self.cp.get(&self.ns, kind, name)
    }

    fn list(&self, kind: &str) -> Vec<Value> {
        let out = self
            .cp
            .kubectl(&["get", kind, "-n", &self.ns, "-o", "json"]);
        let list: Value = serde_json::from_str(&out).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    fn patch_status(&self, kind: &str, name: &str, patch: Value) {
        self.cp.kubectl(&[
            "patch",
            kind,
            name,
            "-n",
            &self.ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
    }

    fn delete(&self, kind: &str, name: &str) {
        support::story::delete_no_wait(self.cp, &self.ns, kind, name);
    }

    fn uid(&self, kind: &str, name: &str) -> String {
        self.get(kind, name).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// What Cluster API does for one machine: the bootstrap Secret, the
    /// Machine, and the MaasMachine it owns (labels + owner reference).
    fn add_machine(&self, name: &str, control_plane: bool, spec: Value) {
        self.cp
            .add_machine(&self.ns, CLUSTER, name, control_plane, spec);
    }

    /// What Cluster API does when a Machine goes: delete it and its MaasMachine.
    fn remove_machine(&self, name: &str) {
        self.delete("maasmachines", name);
        self.delete("machines.cluster.x-k8s.io", name);
    }

    fn maas_machine(&self, name: &str) -> Option<Value> {
        self.get("maasmachines", name)
    }
}

fn cp_spec() -> Value {
    json!({"image": IMAGE, "minCPU": 4, "minMemory": 8192, "resourcePool": "cp-pool"})
}

fn worker_spec() -> Value {
    json!({"image": "ubuntu/jammy", "minCPU": 8, "minMemory": 16384, "resourcePool": "worker-pool"})
}

/// The record's addresses, via the MAAS API as any client would see them.
fn dns_ips(sim: &MaasSim, fqdn: &str) -> Option<(BTreeSet<String>, Option<u32>)> {
    let records = sim.client().dns_resources(fqdn).ok()?;
    let record = records.first()?;
    Some((
        record.ip_addresses.iter().cloned().collect(),
        record.address_ttl,
    ))
}

fn owned_machines(sim: &MaasSim) -> BTreeSet<String> {
    sim.state()["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !m["owner"].is_null())
        .map(|m| m["hostname"].as_str().unwrap().to_string())
        .collect()
}

/// What Cluster API does when the cluster goes: every MaasMachine (with its
/// Machine) and the MaasCluster deleted. Waits up to `seconds` until none
/// is left, MAAS owns no machine and `also` holds.
fn tear_down(
    story: &Story,
    sim: &MaasSim,
    capmaas: &mut Capmaas,
    seconds: u64,
    also: impl Fn(&MaasSim) -> bool,
) {
    for mm in story.list("maasmachines") {
        story.remove_machine(mm["metadata"]["name"].as_str().unwrap());
    }
    story.delete("maasclusters", CLUSTER);
    support::eventually(seconds, "cluster torn down", || {
        capmaas.assert_running();
        let left = story.list("maasmachines").len() + story.list("maasclusters").len();
        (left == 0 && owned_machines(sim).is_empty() && also(sim)).then_some(())
    });
}

/// Everything one scenario runs on: its namespace, simulator, node helper
/// and capmaas process, plus a provisioned MaasCluster (returns its DNS name).
struct Scenario {
    story: Story,
    sim: MaasSim,
    capmaas: Capmaas,
    _nodes: NodeHelper,
}

/// At the product's default periods: what happens in MAAS is noticed by
/// the MAAS watch, not by a quick resync.
fn start_scenario(prefix: &str, before_cluster: impl FnOnce(&MaasSim)) -> (Scenario, String) {
    start_scenario_with(prefix, &[], before_cluster)
}

/// [`start_scenario`] with capmaas's flags (besides `--namespace`) given.
fn start_scenario_with(
    prefix: &str,
    flags: &[&str],
    before_cluster: impl FnOnce(&MaasSim),
) -> (Scenario, String) {
    let cp = support::control_plane();
    let story = Story {
        cp,
        ns: cp.new_namespace(prefix),
    };
    // Nodes are cluster-scoped and named after MAAS hostnames: scenarios
    // running side by side get hostnames of their own.
    let mut inventory = support::maas_sim::story_inventory();
    for machine in inventory["machines"].as_array_mut().unwrap() {
        let hostname = machine["hostname"].as_str().unwrap().to_string();
        machine["hostname"] = json!(format!("{prefix}-{hostname}"));
    }
    let sim = MaasSim::start(Some(&inventory));
    sim.set_timings(1.0, 0.5);
    let base = sim.base.clone();
    let nodes = NodeHelper::start(cp, move || sim_views(&base));
    let mut capmaas = Capmaas::start(
        &support::story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        cp.dir.join(format!("capmaas-{}.log", story.ns)),
        &std::iter::once(format!("--namespace={}", story.ns))
            .chain(flags.iter().map(|f| f.to_string()))
            .collect::<Vec<_>>(),
    );
    before_cluster(&sim);

    // The Cluster, its MaasCluster (owned by it) and the workload kubeconfig.
    story.apply(&json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": story.ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster_uid = story.uid("clusters.cluster.x-k8s.io", CLUSTER);
    story.apply(&json!({
        "apiVersion": INFRA, "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": story.ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": CAPI, "kind": "Cluster", "name": CLUSTER, "uid": cluster_uid,
                                          "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"dnsDomain": "k8s.maas"},
    }));
    story.apply(&support::capi::kubeconfig_secret(cp, &story.ns, CLUSTER));

    // Infrastructure provisioned: DNS name, endpoint, ready.
    let fqdn = support::eventually(60, "MaasCluster provisioned", || {
        capmaas.assert_running();
        let mc = story.get("maasclusters", CLUSTER)?;
        (mc["status"]["initialization"]["provisioned"] == true).then_some(())?;
        mc["status"]["network"]["dnsName"]
            .as_str()
            .map(str::to_string)
    });
    let mc = story.get("maasclusters", CLUSTER).unwrap();
    assert_eq!(
        mc["spec"]["controlPlaneEndpoint"],
        json!({"host": fqdn, "port": 6443})
    );
    assert_eq!(mc["status"]["ready"], true);
    assert_eq!(
        mc["metadata"]["finalizers"],
        json!(["maascluster.infrastructure.cluster.x-k8s.io"])
    );
    assert!(
        fqdn.starts_with("story-") && fqdn.ends_with(".k8s.maas"),
        "{fqdn}"
    );
    // Cluster API would now mark the Cluster's infrastructure provisioned.
    story.patch_status(
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        json!({"status": {"initialization": {"infrastructureProvisioned": true}}}),
    );
    (
        Scenario {
            story,
            sim,
            capmaas,
            _nodes: nodes,
        },
        fqdn,
    )
}

#[test]
fn the_story() {
    let (scenario, fqdn) = start_scenario("story", |_| {});
    let Scenario {
        story,
        sim,
        mut capmaas,
        _nodes,
    } = scenario;
    let cp = story.cp;

    // 3 control-plane and 5 worker machines.
    let cps = ["cp-a", "cp-b", "cp-c"];
    let workers = ["w-1", "w-2", "w-3", "w-4", "w-5"];
    for name in cps {
        story.add_machine(name, true, cp_spec());
    }
    for name in workers {
        story.add_machine(name, false, worker_spec());
    }
    let all: Vec<&str> = cps.iter().chain(workers.iter()).copied().collect();
    support::eventually(
        240,
        "8 MaasMachines ready with their Nodes' providerIDs",
        || {
            capmaas.assert_running();
            for name in &all {
                let mm = story.maas_machine(name)?;
                (mm["status"]["ready"] == true
                    && mm["status"]["initialization"]["provisioned"] == true)
                    .then_some(())?;
                let provider_id = mm["spec"]["providerID"].as_str()?;
                let hostname = mm["status"]["hostname"].as_str()?;
                let node: Value = serde_json::from_str(
                    &cp.try_kubectl(&["get", "node", hostname, "-o", "json"], "")
                        .ok()?,
                )
                .ok()?;
                (node["spec"]["providerID"] == provider_id).then_some(())?;
                // MAAS's facts as labels (issue 23 item 4).
                let labels = &node["metadata"]["labels"];
                let pool = if cps.contains(name) {
                    "cp-pool"
                } else {
                    "worker-pool"
                };
                let tag = if cps.contains(name) {
                    "control-plane"
                } else {
                    "worker"
                };
                (labels["topology.kubernetes.io/zone"] == mm["spec"]["failureDomain"]
                    && labels["maas.capmaas.io/pool"] == pool
                    && labels[format!("maas.capmaas.io/tag.{tag}")] == "true")
                    .then_some(())?;
                let ready = objects::condition(&mm, "Ready").cloned()?;
                (ready["status"] == "True").then_some(())?;
            }
            Some(())
        },
    );
    for name in &all {
        let mm = story.maas_machine(name).unwrap();
        let provider_id = mm["spec"]["providerID"].as_str().unwrap();
        let system_id = mm["spec"]["systemID"].as_str().unwrap();
        let zone = mm["spec"]["failureDomain"].as_str().unwrap();
        assert_eq!(provider_id, format!("maas:///{zone}/{system_id}"));
        let in_sim = sim.machine_state(system_id);
        assert_eq!(in_sim["status_name"], "Deployed", "{name}");
    }
    let cp_ips: BTreeSet<String> = cps
        .iter()
        .map(|name| {
            let mm = story.maas_machine(name).unwrap();
            let addresses = mm["status"]["addresses"].as_array().unwrap().clone();
            let ip = addresses
                .iter()
                .find(|a| a["type"] == "ExternalIP")
                .unwrap();
            ip["address"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(cp_ips.len(), 3);
    let (ips, ttl) = support::eventually(30, "DNS holds the 3 control-plane IPs", || {
        dns_ips(&sim, &fqdn).filter(|(ips, _)| *ips == cp_ips)
    });
    assert_eq!(ips, cp_ips);
    assert_eq!(ttl, Some(10));
    support::eventually(60, "APIServerAvailable", || {
        let mc = story.get("maasclusters", CLUSTER)?;
        (objects::condition(&mc, "APIServerAvailable").cloned()?["status"] == "True").then_some(())
    });
    assert_eq!(owned_machines(&sim).len(), 8);

    // Scale workers 5 → 2: three machines released in MAAS.
    let removed = ["w-3", "w-4", "w-5"];
    let removed_hosts: BTreeSet<String> = removed
        .iter()
        .map(|n| {
            story.maas_machine(n).unwrap()["status"]["hostname"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for name in removed {
        story.remove_machine(name);
    }
    support::eventually(90, "3 workers released and their MaasMachines gone", || {
        capmaas.assert_running();
        let gone = removed.iter().all(|n| story.maas_machine(n).is_none());
        let owned = owned_machines(&sim);
        (gone && owned.len() == 5 && owned.is_disjoint(&removed_hosts)).then_some(())
    });

    // A control-plane machine powered off behind MAAS's back is powered on
    // again, and the API record is never empty meanwhile.
    let victim = story.maas_machine("cp-b").unwrap()["spec"]["systemID"]
        .as_str()
        .unwrap()
        .to_string();
    sim.power_off(&victim);
    support::eventually(90, "cp-b powered on again", || {
        capmaas.assert_running();
        let (ips, _) = dns_ips(&sim, &fqdn).expect("the record exists");
        assert!(!ips.is_empty(), "the API DNS record went empty");
        assert!(ips.is_subset(&cp_ips), "{ips:?}");
        let on = sim.machine_state(&victim)["power_state"] == "on";
        let mm = story.maas_machine("cp-b")?;
        (on && mm["status"]["machinePowered"] == true).then_some(())
    });
    support::eventually(60, "DNS back to 3 IPs", || {
        dns_ips(&sim, &fqdn).filter(|(ips, _)| *ips == cp_ips)
    });

    // A BMC that stops answering (MAAS: power state unknown, or error) is
    // never powered on: on IPMI MAAS's power on is `ipmipower --cycle
    // --on-if-off`, a reset of the running machine. One Warning says so.
    let silent = story.maas_machine("cp-c").unwrap()["spec"]["systemID"]
        .as_str()
        .unwrap()
        .to_string();
    sim.reset_calls();
    sim.power_state_lost(&silent, "unknown");
    let message = support::eventually(60, "cp-c says MAAS lost its power state", || {
        let c = objects::condition(&story.maas_machine("cp-c")?, "MachineDeployed").cloned()?;
        (c["reason"] == "MachinePowerStateUnknown")
            .then(|| c["message"].as_str().unwrap_or_default().to_string())
    });
    assert!(message.contains("\"unknown\""), "{message}");
    std::thread::sleep(std::time::Duration::from_secs(5));
    let warnings: Vec<_> = events_of(&story, "cp-c")
        .into_iter()
        .filter(|e| e.1 == "PowerStateUnknown")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, "Warning");
    assert_eq!(warnings[0].3, 1, "said once: {warnings:?}");
    assert_eq!(
        sim.call_count("POST machines/{id}/ op=power_on"),
        0,
        "nothing powered on"
    );
    sim.power_on(&silent);
    support::eventually(90, "cp-c powered again", || {
        capmaas.assert_running();
        let mm = story.maas_machine("cp-c")?;
        (mm["status"]["machinePowered"] == true).then_some(())
    });
    support::eventually(60, "DNS back to 3 IPs", || {
        dns_ips(&sim, &fqdn).filter(|(ips, _)| *ips == cp_ips)
    });

    // Nothing matches: MAAS's words on the condition, then recovery once a
    // machine that fits appears.
    story.add_machine("w-big", false, json!({"image": "ubuntu/jammy", "minCPU": 64, "minMemory": 16384, "resourcePool": "worker-pool"}));
    let message = support::eventually(60, "w-big reports no matching machine", || {
        let c = objects::condition(&story.maas_machine("w-big")?, "MachineDeployed").cloned()?;
        (c["reason"] == "MachineDeployFailed")
            .then(|| c["message"].as_str().unwrap_or_default().to_string())
    });
    assert!(
        message.contains("No available machine matches constraints"),
        "{message}"
    );
    sim.add_machine(json!({"hostname": "big-1", "cpu_count": 64, "memory": 262144, "zone": "zone-b", "pool": "worker-pool",
                           "ip_addresses": ["127.11.130.99"], "power_type": "ipmi"}));
    support::eventually(120, "w-big recovers", || {
        capmaas.assert_running();
        (story.maas_machine("w-big")?["status"]["ready"] == true).then_some(())
    });

    // A wrong image: the condition names it and the closest existing one;
    // no machine is held. Cluster API's way out is a new machine.
    story.add_machine(
        "w-typo",
        false,
        json!({"image": "u-2204-0-k-1265-0", "minCPU": 1, "minMemory": 1024}),
    );
    let message = support::eventually(60, "w-typo reports the image", || {
        let c = objects::condition(&story.maas_machine("w-typo")?, "MachineDeployed").cloned()?;
        (c["reason"] == "MachineDeployFailed")
            .then(|| c["message"].as_str().unwrap_or_default().to_string())
    });
    assert!(
        message.contains("u-2204-0-k-1265-0") && message.contains("u-2204-0-k-1264-0"),
        "{message}"
    );
    assert!(
        story.maas_machine("w-typo").unwrap()["spec"]["systemID"].is_null(),
        "no machine held"
    );
    story.remove_machine("w-typo");
    story.add_machine(
        "w-fixed",
        false,
        json!({"image": IMAGE, "minCPU": 1, "minMemory": 1024}),
    );
    support::eventually(120, "w-fixed ready", || {
        capmaas.assert_running();
        (story.maas_machine("w-fixed")?["status"]["ready"] == true).then_some(())
    });
    support::eventually(60, "w-typo gone", || {
        story.maas_machine("w-typo").is_none().then_some(())
    });

    // Delete the cluster: everything released, the record deleted, every
    // finalizer removed.
    tear_down(&story, &sim, &mut capmaas, 180, |_| true);
    assert!(
        sim.client().dns_resources(&fqdn).unwrap().is_empty(),
        "DNS record deleted"
    );
    story.delete("clusters.cluster.x-k8s.io", CLUSTER);
    capmaas.assert_running();
}

/// The Events on one object: (type, reason, message, count).
fn events_of(story: &Story, name: &str) -> Vec<(String, String, String, u64)> {
    let out = story.cp.kubectl(&[
        "get",
        "events",
        "-n",
        &story.ns,
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).unwrap();
    let field = |e: &Value, key: &str| e[key].as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let count = e["count"]
                .as_u64()
                .or_else(|| e["series"]["count"].as_u64())
                .unwrap_or(1);
            (
                field(e, "type"),
                field(e, "reason"),
                field(e, "message"),
                count,
            )
        })
        .collect()
}

/// Issue 11 at the product's defaults (no `--sync-period`, the MAAS watch
/// at its 15 s interval): MAAS's deployment progress shows in `kubectl
/// describe maasmachine` as Events, each MAAS event once; a deployed
/// control-plane machine powered off behind MAAS's back is powered on again
/// within 30 s while the API DNS record never goes empty; a machine marked
/// Broken and one released out of band say so in their condition and an
/// Event within 30 s; the MaasCluster goes as soon as its last MaasMachine.
#[test]
fn maas_changes_are_seen_within_seconds_at_default_periods() {
    let (scenario, fqdn) = start_scenario_with("watch", &[], |_| {});
    let Scenario {
        story,
        sim,
        mut capmaas,
        _nodes,
    } = scenario;
    let cp = story.cp;
    // Deployments long enough for a list to see them in transit.
    sim.set_timings(20.0, 0.5);
    story.add_machine("cp-a", true, cp_spec());
    story.add_machine("w-1", false, worker_spec());
    story.add_machine("w-2", false, worker_spec());
    let all = ["cp-a", "w-1", "w-2"];
    support::eventually(180, "3 MaasMachines ready", || {
        capmaas.assert_running();
        all.iter()
            .all(|n| {
                story
                    .maas_machine(n)
                    .is_some_and(|m| m["status"]["ready"] == true)
            })
            .then_some(())
    });
    let system_id = |name: &str| {
        story.maas_machine(name).unwrap()["spec"]["systemID"]
            .as_str()
            .unwrap()
            .to_string()
    };

    // MAAS's own account of the deployment, on the MaasMachine.
    let describe = support::eventually(60, "MAAS events in kubectl describe", || {
        let out = cp.kubectl(&["describe", "maasmachine", "w-1", "-n", &story.ns]);
        (out.contains("MAASPerformingPXEBoot") && out.contains("MAASDeployed")).then_some(out)
    });
    assert!(describe.contains("MAASInstallingOS"), "{describe}");
    eprintln!(
        "kubectl describe maasmachine w-1, events:{}",
        describe.split("Events:").nth(1).unwrap_or_default()
    );
    // One more watch interval: nothing is mirrored twice.
    std::thread::sleep(std::time::Duration::from_secs(16));
    let deployed: u64 = events_of(&story, "w-1")
        .iter()
        .filter(|(_, reason, _, _)| reason == "MAASDeployed")
        .map(|(_, _, _, count)| count)
        .sum();
    assert_eq!(deployed, 1, "{:?}", events_of(&story, "w-1"));

    // Powered off behind MAAS's back: on again within 30 s, DNS never empty.
    let cp_ip = support::eventually(30, "cp-a in DNS", || {
        dns_ips(&sim, &fqdn)
            .filter(|(ips, _)| ips.len() == 1)
            .and_then(|(ips, _)| ips.into_iter().next())
    });
    let victim = system_id("cp-a");
    let started = std::time::Instant::now();
    sim.power_off(&victim);
    support::eventually(30, "cp-a powered on again", || {
        capmaas.assert_running();
        let (ips, _) = dns_ips(&sim, &fqdn).expect("the record exists");
        assert_eq!(
            ips,
            BTreeSet::from([cp_ip.clone()]),
            "the API DNS record changed"
        );
        (sim.machine_state(&victim)["power_state"] == "on").then_some(())
    });
    eprintln!("power-off → power-on: {:?}", started.elapsed());

    // Marked Broken by an operator.
    let broken = system_id("w-1");
    sim.mark_broken(&broken);
    support::eventually(30, "w-1 reports Broken", || {
        capmaas.assert_running();
        let c = objects::condition(&story.maas_machine("w-1")?, "MachineDeployed").cloned()?;
        // Unknown: an operator may fix it; the message says what MAAS says.
        let said = c["status"] != "True" && c["message"].as_str()?.contains("Broken");
        let evented = events_of(&story, "w-1")
            .iter()
            .any(|(type_, _, message, _)| type_ == "Warning" && message.contains("Broken"));
        (said && evented).then_some(())
    });

    // Released by an operator.
    let released = system_id("w-2");
    sim.release_out_of_band(&released, json!({"user": "admin"}));
    support::eventually(30, "w-2 reports its release", || {
        capmaas.assert_running();
        let c = objects::condition(&story.maas_machine("w-2")?, "MachineDeployed").cloned()?;
        let said = c["status"] == "False"
            && c["message"]
                .as_str()?
                .contains("released outside of Cluster API");
        let evented = events_of(&story, "w-2")
            .iter()
            .any(|(type_, reason, _, _)| {
                type_ == "Warning" && reason == "MachineUnexpectedTermination"
            });
        (said && evented).then_some(())
    });
    assert_eq!(
        owned_machines(&sim).len(),
        1,
        "nothing allocated in their place"
    );

    // Teardown: the MaasCluster goes with its last MaasMachine, without
    // waiting for a fixed requeue.
    tear_down(&story, &sim, &mut capmaas, 60, |_| true);
    story.delete("clusters.cluster.x-k8s.io", CLUSTER);
}

/// Issue 11's figures for deployments, at the product's defaults (the MAAS
/// watch at its 15 s interval, no `--sync-period`): a deployment MAAS
/// finishes is on the MaasMachine (Ready, MachineDeployed True) within 20 s
/// of MAAS reaching Deployed; a failed one shows MAAS's own words on the
/// MachineDeployed condition and curtin's reason in a Warning Event within
/// 30 s, and is left for a human (nothing else allocated) until deleted.
#[test]
fn finished_and_failed_deployments_are_seen_within_seconds_at_default_periods() {
    let (scenario, _fqdn) = start_scenario("deploy", |_| {});
    let Scenario {
        story,
        sim,
        mut capmaas,
        _nodes,
    } = scenario;
    // Deployments that last until the test finishes or fails them.
    sim.set_timings(3600.0, 0.5);
    story.add_machine("w-1", false, worker_spec());
    story.add_machine("w-2", false, worker_spec());
    let deploying = |capmaas: &mut Capmaas, name: &str| {
        support::eventually(60, &format!("{name} Deploying"), || {
            capmaas.assert_running();
            let mm = story.maas_machine(name)?;
            (mm["status"]["machineState"] == "Deploying")
                .then(|| mm["spec"]["systemID"].as_str().map(str::to_string))?
        })
    };
    let finishing = deploying(&mut capmaas, "w-1");
    let failing = deploying(&mut capmaas, "w-2");

    // MAAS finishes the deployment now: Ready within 20 s.
    let finished = std::time::Instant::now();
    assert_eq!(sim.complete(&finishing), "Deployed");
    support::eventually(20, "w-1 Ready after MAAS finished deploying it", || {
        capmaas.assert_running();
        let mm = story.maas_machine("w-1")?;
        (mm["status"]["ready"] == true && objects::condition_is(&mm, "MachineDeployed", "True"))
            .then_some(())
    });
    eprintln!(
        "MAAS Deployed → MaasMachine Ready: {:?}",
        finished.elapsed()
    );

    // Curtin fails the other: MAAS's words on the condition and curtin's
    // reason as a Warning Event, within 30 s.
    const REASON: &str = "no disk matches the storage layout";
    let failed = std::time::Instant::now();
    assert_eq!(
        sim.fail_deployment_because(&failing, REASON),
        "Failed deployment"
    );
    let (message, event) = support::eventually(30, "w-2 reports its failed deployment", || {
        capmaas.assert_running();
        let mm = story.maas_machine("w-2")?;
        let c = objects::condition(&mm, "MachineDeployed").cloned()?;
        let message = c["message"].as_str()?.to_string();
        // Not True; Unknown, as MAAS's failed states wait for a human.
        (c["status"] != "True" && message.contains("Failed deployment")).then_some(())?;
        let event = events_of(&story, "w-2")
            .into_iter()
            .find(|(type_, _, message, _)| type_ == "Warning" && message.contains(REASON))?;
        Some((message, event))
    });
    eprintln!(
        "MAAS Failed deployment → condition and Event: {:?}\n  condition: {message}\n  event: {event:?}",
        failed.elapsed()
    );
    // MAAS's status message for a failed installation, as its machine JSON
    // reports it.
    assert!(message.contains("Installation failed"), "{message}");
    let mm = story.maas_machine("w-2").unwrap();
    assert_eq!(mm["status"]["ready"], false);
    assert_eq!(mm["status"]["machineState"], "Failed deployment");
    assert_eq!(
        mm["spec"]["systemID"],
        json!(failing),
        "the same machine kept"
    );
    assert_eq!(
        owned_machines(&sim).len(),
        2,
        "nothing allocated in its place"
    );

    // Teardown releases both, the failed one too.
    tear_down(&story, &sim, &mut capmaas, 60, |_| true);
    story.delete("clusters.cluster.x-k8s.io", CLUSTER);
}

/// Answers MAAS gave but capmaas never received (MAAS acted, the connection
/// broke) do not leak or double anything, and a MAAS outage does not touch
/// the running cluster's DNS record.
#[test]
fn lost_answers_and_maas_outages_never_leak_or_wipe() {
    let (scenario, fqdn) = start_scenario("crash", |sim| {
        // The first DNS record creation is done by MAAS, its answer lost.
        sim.set_fault(
            json!({"method": "POST", "endpoint": "dnsresources/", "drop_after": true, "times": 1}),
        );
    });
    let Scenario {
        story,
        sim,
        mut capmaas,
        _nodes,
    } = scenario;
    let records = |sim: &MaasSim| {
        let state = sim.state();
        state["dns_resources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["fqdn"] == fqdn)
            .count()
    };
    assert_eq!(records(&sim), 1, "one DNS record despite the lost answer");

    // The same for the first allocation and the first deployment.
    sim.set_fault(json!({"method": "POST", "endpoint": "machines/", "op": "allocate", "drop_after": true, "times": 1}));
    sim.set_fault(json!({"method": "POST", "endpoint": "machines/{id}/", "op": "deploy", "drop_after": true, "times": 1}));
    story.add_machine("cp-a", true, cp_spec());
    story.add_machine("w-1", false, worker_spec());
    support::eventually(180, "both machines ready", || {
        capmaas.assert_running();
        ["cp-a", "w-1"]
            .iter()
            .all(|n| {
                story
                    .maas_machine(n)
                    .is_some_and(|m| m["status"]["ready"] == true)
            })
            .then_some(())
    });
    assert_eq!(
        owned_machines(&sim).len(),
        2,
        "exactly one MAAS machine per MaasMachine"
    );
    assert_eq!(
        sim.call_count("POST machines/ op=allocate"),
        2,
        "{:?}",
        sim.calls()
    );
    let cp_ip = {
        let mm = story.maas_machine("cp-a").unwrap();
        let addresses = mm["status"]["addresses"].as_array().unwrap().clone();
        addresses
            .iter()
            .find(|a| a["type"] == "ExternalIP")
            .unwrap()["address"]
            .as_str()
            .unwrap()
            .to_string()
    };
    support::eventually(30, "the control plane in DNS", || {
        dns_ips(&sim, &fqdn).filter(|(ips, _)| ips.len() == 1 && ips.contains(&cp_ip))
    });

    // MAAS down for a while: reconciles fail, nothing is written, the DNS
    // record and the machines' status stay as they were.
    sim.set_fault(json!({"status": 503, "retry_after": 1}));
    std::thread::sleep(std::time::Duration::from_secs(8));
    capmaas.assert_running();
    for name in ["cp-a", "w-1"] {
        assert_eq!(
            story.maas_machine(name).unwrap()["status"]["ready"],
            true,
            "{name}"
        );
    }
    sim.clear_faults();
    let (ips, _) = dns_ips(&sim, &fqdn).unwrap();
    assert_eq!(ips, BTreeSet::from([cp_ip]));

    // Teardown leaves nothing behind.
    tear_down(&story, &sim, &mut capmaas, 120, |sim| records(sim) == 0);
}

/// SIGTERM: the workers stop, the Lease is handed back, the exit is clean.
#[test]
fn sigterm_releases_the_lease_and_exits_cleanly() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("lease");
    let sim = MaasSim::start(None);
    let log = cp.dir.join(format!("capmaas-{ns}.log"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_capmaas"))
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .arg(format!("--namespace={ns}"))
        .arg("--leader-elect")
        .arg(format!("--leader-election-namespace={ns}"))
        .arg("--metrics-bind-address=0")
        .arg("--health-probe-bind-address=0")
        .env_remove("KUBECONFIG")
        .env("MAAS_ENDPOINT", &sim.url)
        .env("MAAS_API_KEY", &sim.api_key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let lease = || -> Option<Value> {
        let out = cp
            .try_kubectl(
                &[
                    "get",
                    "lease",
                    "capmaas-leader-election",
                    "-n",
                    &ns,
                    "-o",
                    "json",
                ],
                "",
            )
            .ok()?;
        serde_json::from_str(&out).ok()
    };
    support::eventually(60, "the Lease held", || {
        let holder = lease()?["spec"]["holderIdentity"].as_str()?.to_string();
        (!holder.is_empty()).then_some(())
    });
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let exit = support::eventually(60, "capmaas exits", || child.try_wait().unwrap());
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(exit.success(), "{exit}; log:\n{text}");
    let holder = lease().unwrap()["spec"]["holderIdentity"].clone();
    assert!(
        holder.is_null() || holder == "",
        "Lease still held: {holder}"
    );
}

/// Issue 19 item 1, played through the real API server against the real
/// binary: a tenant deletes a control-plane Machine, waits until its
/// address has left the record (the drain then waits the TTL), and sets
/// `capmaas.infrastructure.cluster.x-k8s.io/left-dns-at` (where versions
/// before issue 19 kept the time) to 18446744073709551615. The requeue
/// then overflowed the clock and the release build aborted, on every
/// start; this debug build would show a panicked thread. Now the time is
/// in the status, the annotation is removed, the drain goes on after the
/// TTL and other machines are still reconciled.
#[test]
fn a_tenants_left_dns_at_annotation_never_drives_the_clock() {
    const HOOK: &str = "pre-drain.delete.hook.machine.cluster.x-k8s.io/capmaas-dns";
    const LEFT_DNS_AT: &str = "capmaas.infrastructure.cluster.x-k8s.io/left-dns-at";
    const MACHINES: &str = "machines.cluster.x-k8s.io";
    let (scenario, fqdn) = start_scenario("leftdns", |_| {});
    let Scenario {
        story,
        sim,
        mut capmaas,
        _nodes,
    } = scenario;
    let cp = story.cp;
    let cps = ["cp-a", "cp-b"];
    for name in cps {
        story.add_machine(name, true, cp_spec());
    }
    support::eventually(240, "both control planes Ready and in the record", || {
        capmaas.assert_running();
        let ips = cps
            .iter()
            .map(|name| {
                let mm = story.maas_machine(name)?;
                (mm["status"]["ready"] == true).then_some(())?;
                let addresses = mm["status"]["addresses"].as_array()?;
                let ip = addresses.iter().find(|a| a["type"] == "ExternalIP")?;
                ip["address"].as_str().map(str::to_string)
            })
            .collect::<Option<BTreeSet<String>>>()?;
        (dns_ips(&sim, &fqdn)?.0 == ips).then_some(())
    });
    support::eventually(60, "our pre-drain hook on Machine cp-a", || {
        let machine = story.get(MACHINES, "cp-a")?;
        machine["metadata"]["annotations"][HOOK]
            .is_string()
            .then_some(())
    });
    // Cluster API's finalizer keeps the Machine while it is deleted.
    let finalizers = |list: Value| {
        cp.kubectl(&[
            "patch",
            MACHINES,
            "cp-a",
            "-n",
            &story.ns,
            "--type=merge",
            "-p",
            &json!({"metadata": {"finalizers": list}}).to_string(),
        ]);
    };
    finalizers(json!(["machine.cluster.x-k8s.io"]));
    story.delete(MACHINES, "cp-a");
    support::eventually(60, "cp-a out of the record, its drain waiting", || {
        capmaas.assert_running();
        let mm = story.maas_machine("cp-a")?;
        let dns = objects::condition(&mm, "DNSAttached")?;
        (dns["reason"] == "LeftDNSBeforeDrain").then_some(())
    });

    // The tenant's move.
    cp.kubectl(&[
        "annotate",
        "maasmachines",
        "cp-a",
        "-n",
        &story.ns,
        "--overwrite",
        &format!("{LEFT_DNS_AT}=18446744073709551615"),
    ]);
    // The record's TTL is 10 s: the drain is let go within it.
    support::eventually(40, "the hook removed after the TTL", || {
        capmaas.assert_running();
        let machine = story.get(MACHINES, "cp-a")?;
        machine["metadata"]["annotations"][HOOK]
            .is_null()
            .then_some(())
    });
    let mm = story.maas_machine("cp-a").unwrap();
    assert!(
        mm["metadata"]["annotations"][LEFT_DNS_AT].is_null(),
        "the tenant's annotation is removed: {mm:#}"
    );
    assert!(mm["status"]["leftDNSAt"].is_string(), "{mm:#}");

    // Still reconciling: a new worker comes up.
    story.add_machine("w-1", false, worker_spec());
    support::eventually(120, "a worker Ready after the attack", || {
        capmaas.assert_running();
        let mm = story.maas_machine("w-1")?;
        (mm["status"]["ready"] == true).then_some(())
    });
    let log = std::fs::read_to_string(&capmaas.log).unwrap();
    assert!(
        !log.contains("panicked at"),
        "a thread panicked:\n{}",
        support::story::tail(&capmaas.log, 60)
    );
    finalizers(Value::Null);
    tear_down(&story, &sim, &mut capmaas, 120, |_| true);
}
