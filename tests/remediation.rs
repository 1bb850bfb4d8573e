//! Remediation end to end (issue 14 item 4), in the KCP lab
//! (tests/support/kcp_lab.rs): the real Cluster API core manager runs a
//! MachineHealthCheck on the workers of clusterctl's template, workload-sim
//! makes a Node unhealthy, and capmaas remediates it through MAAS.
//!
//!     cargo test --test remediation -- --nocapture
//!
//! One cluster (1 control plane, 3 workers), one MachineHealthCheck, four
//! cases one after the other, each on its own worker:
//!
//! (a) external remediation, and a power cycle fixes it: the
//!     MachineHealthCheck creates a MaasRemediation, capmaas power-cycles
//!     the MAAS machine, the Node comes back Ready, the same Machine stays;
//! (b) external remediation, and the Node stays unhealthy: `retryLimit`
//!     power cycles, then capmaas hands the Machine back to its owner
//!     (`OwnerRemediated=False`) after marking the old MAAS machine Broken
//!     (MAAS releases it; nobody allocates it again), and Cluster API
//!     replaces the Machine on another MAAS machine;
//! (c) the MachineHealthCheck without a template: Cluster API replaces the
//!     Machine directly and capmaas releases its MAAS machine;
//! (d) external remediation of a worker whose MAAS machine MAAS shows under
//!     another identity (owner data): never power-cycled, not handed back;
//!     the MaasRemediation fails with `MachineNotOwned`.
//!
//! Needs root for the network namespace (CI runs as root); elsewhere it
//! says why it skips.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capmaas::kube::resources::{EVENTS, MAAS_MACHINES, MAAS_REMEDIATIONS, MACHINES, NODES};
use capmaas::kube::{self, ListParams};
use capmaas::maas::IDENTITY_KEY;
use capmaas::runtime::{Event, Informer, InformerConfig, Shutdown, Store};
use serde_json::Value;
use support::kcp_lab::{self, KcpLab, LabOptions, Snapshot, CLUSTER, MD};
use support::netns;

const CONTROL_PLANES: u64 = 1;
const WORKERS: u64 = 3;
const PROVISION_SECONDS: u64 = 600;
/// How long a Node condition must last before the MachineHealthCheck acts.
const UNHEALTHY_SECONDS: u64 = 5;
/// The strategy of case (b): two power cycles, 15 s each.
const RETRY_LIMIT: u64 = 2;
const ATTEMPT_SECONDS: u64 = 15;

fn print_change(s: &Snapshot) {
    println!("\n{}", s.table());
}

/// One state of a MaasRemediation: (name, phase, retryCount, deleting).
type Seen = (String, String, u64, bool);

/// Every state of every MaasRemediation seen, in order: (name, phase,
/// retryCount, deleting), as an informer sees them (a remediation may live
/// for less than a second).
struct Remediations {
    seen: Arc<Mutex<Vec<Seen>>>,
    informer: Option<Informer>,
    shutdown: Shutdown,
}

impl Remediations {
    fn watch(kube: &kube::Client, ns: &str) -> Remediations {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shutdown = Shutdown::new();
        let record = {
            let seen = seen.clone();
            move |event: &Event<Value>| {
                let deleted = matches!(event, Event::Deleted(_));
                let o = event.object();
                seen.lock().unwrap().push((
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    o["status"]["phase"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    o["status"]["retryCount"].as_u64().unwrap_or(0),
                    deleted || !o["metadata"]["deletionTimestamp"].is_null(),
                ));
            }
        };
        let config = InformerConfig::new(MAAS_REMEDIATIONS).namespace(Some(ns.to_string()));
        let store = Store::<Value>::new();
        let informer = Informer::spawn(
            kube.clone(),
            config,
            store.clone(),
            record,
            shutdown.clone(),
        )
        .expect("watching MaasRemediations");
        assert!(store.wait_until_synced(Duration::from_secs(30)));
        Remediations {
            seen,
            informer: Some(informer),
            shutdown,
        }
    }

    fn of(&self, name: &str) -> Vec<(String, u64, bool)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, ..)| n == name)
            .map(|(_, phase, count, deleting)| (phase.clone(), *count, *deleting))
            .collect()
    }
}

impl Drop for Remediations {
    fn drop(&mut self) {
        self.shutdown.trigger();
        if let Some(informer) = self.informer.take() {
            informer.stop();
        }
    }
}

/// Polls `check` every half second, with the lab's processes checked,
/// until it answers; panics with the lab's diagnostics after `seconds`.
fn wait_for<T>(
    lab: &mut KcpLab,
    seconds: u64,
    what: &str,
    mut check: impl FnMut(&KcpLab) -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        lab.check_processes();
        if let Some(v) = check(lab) {
            println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(seconds),
            "timed out after {seconds}s waiting for {what}\n{}",
            lab.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn get(
    kube: &kube::Client,
    resource: &kube::Resource,
    ns: Option<&str>,
    name: &str,
) -> Option<Value> {
    match kube.get(resource, ns, name) {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() => None,
        Err(e) => panic!("GET {} {name}: {e}", resource.plural),
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The Ready status of a workload Node ("" when it does not exist).
fn out_of_service(workload: &kube::Client, node: &str) -> bool {
    get(workload, &NODES, None, node).is_some_and(|n| {
        n["spec"]["taints"].as_array().is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t["key"] == "node.kubernetes.io/out-of-service")
        })
    })
}

fn node_ready(workload: &kube::Client, node: &str) -> String {
    get(workload, &NODES, None, node)
        .and_then(|n| {
            condition(&n, "Ready").map(|c| c["status"].as_str().unwrap_or("").to_string())
        })
        .unwrap_or_default()
}

/// A worker as the test follows it.
#[derive(Debug, Clone)]
struct Worker {
    machine: String,
    maas_machine: String,
    node: String,
    system_id: String,
}

fn worker(lab: &KcpLab, machine: &str) -> Worker {
    let m = get(&lab.kube, &MACHINES, Some(&lab.ns), machine).expect("the Machine");
    let infra = m["spec"]["infrastructureRef"]["name"].as_str().unwrap();
    let mm = get(&lab.kube, &MAAS_MACHINES, Some(&lab.ns), infra).expect("its MaasMachine");
    Worker {
        machine: machine.to_string(),
        maas_machine: infra.to_string(),
        node: m["status"]["nodeRef"]["name"].as_str().unwrap().to_string(),
        system_id: mm["spec"]["systemID"].as_str().unwrap().to_string(),
    }
}

fn worker_names(s: &Snapshot) -> BTreeSet<String> {
    s.machines
        .iter()
        .filter(|m| !m.control_plane)
        .map(|m| m.name.clone())
        .collect()
}

/// The reasons of the Events recorded on one object, oldest first.
fn event_reasons(kube: &kube::Client, ns: &str, kind: &str, name: &str) -> Vec<String> {
    let params = ListParams {
        field_selector: Some(format!(
            "involvedObject.kind={kind},involvedObject.name={name}"
        )),
        ..ListParams::default()
    };
    let mut events = kube.list(&EVENTS, Some(ns), &params).unwrap().items;
    events.sort_by_key(|e| e["firstTimestamp"].as_str().unwrap_or("").to_string());
    events
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn remediation_template(ns: &str, name: &str, retry_limit: u64, timeout_seconds: u64) -> String {
    format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: MaasRemediationTemplate\n\
         metadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  template:\n    spec:\n      strategy:\n        \
         type: Reboot\n        retryLimit: {retry_limit}\n        timeout: {timeout_seconds}s\n"
    )
}

/// The MachineHealthCheck on the MachineDeployment's workers.
fn machine_health_check(ns: &str, template: Option<&str>) -> String {
    let remediation = match template {
        Some(t) => format!(
            "  remediation:\n    templateRef:\n      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\n      \
             kind: MaasRemediationTemplate\n      name: {t}\n"
        ),
        None => String::new(),
    };
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineHealthCheck\nmetadata:\n  name: workers\n  namespace: {ns}\n\
         spec:\n  clusterName: {CLUSTER}\n  selector:\n    matchLabels:\n      \
         cluster.x-k8s.io/deployment-name: {MD}\n  checks:\n    unhealthyNodeConditions:\n    \
         - type: Ready\n      status: \"False\"\n      timeoutSeconds: {UNHEALTHY_SECONDS}\n    \
         - type: Ready\n      status: Unknown\n      timeoutSeconds: {UNHEALTHY_SECONDS}\n{remediation}"
    )
}

/// The MaasMachine's power-cycle count, as capmaas records it.
fn history(lab: &KcpLab, maas_machine: &str) -> Option<Value> {
    let mm = get(&lab.kube, &MAAS_MACHINES, Some(&lab.ns), maas_machine)?;
    let text = mm["metadata"]["annotations"]["capmaas.infrastructure.cluster.x-k8s.io/remediation"]
        .as_str()?
        .to_string();
    serde_json::from_str(&text).ok()
}

#[test]
fn machine_health_check_power_cycles_then_replaces() {
    let test = "machine_health_check_power_cycles_then_replaces";
    let Some(namespace) = netns::run_inside(test, &kcp_lab::network()) else {
        return;
    };
    let started = Instant::now();
    let dir = support::tempdir("remediation-lab").expect("the lab directory");
    let mut lab = KcpLab::start(LabOptions::new(dir));
    println!(
        "inside network namespace {namespace}; lab dir {}",
        lab.dir.display()
    );

    let yaml = lab.render_template(CONTROL_PLANES as usize, WORKERS as usize);
    lab.apply(&yaml);
    let ready = lab.wait_until(
        PROVISION_SECONDS,
        "KCP 1/1 ready, 3 workers Running",
        |s| s.all_ready(CONTROL_PLANES, WORKERS),
        print_change,
    );
    let provisioned = started.elapsed();
    let workers: Vec<Worker> = worker_names(&ready)
        .iter()
        .map(|m| worker(&lab, m))
        .collect();
    let (healed, sick, plain) = (&workers[0], &workers[1], &workers[2]);
    println!("workers: (a) {healed:?}\n         (b) {sick:?}\n         (c) {plain:?}");

    let kubeconfig = lab.workload_kubeconfig();
    let workload = kube::Client::new(
        kube::Config::from_kubeconfig_file(&kubeconfig, None).expect("workload kubeconfig"),
    )
    .unwrap();
    let remediations = Remediations::watch(&lab.kube, &lab.ns);
    lab.apply(&format!(
        "{}---\n{}",
        remediation_template(&lab.ns, "reboot", 1, 60),
        remediation_template(&lab.ns, "reboot-twice", RETRY_LIMIT, ATTEMPT_SECONDS)
    ));
    lab.apply(&machine_health_check(&lab.ns, Some("reboot")));

    // (a) A kubelet that a reboot fixes.
    let case_a = Instant::now();
    lab.workloads.set_node_ready(&healed.node, "False", true);
    // Issue 23 item 1: while MAAS has the machine off, its Node carries the
    // out-of-service taint (stateful pods leave, volumes detach), and loses
    // it once Ready again.
    let mut out_of_service_seen = false;
    wait_for(
        &mut lab,
        120,
        "(a) a MaasRemediation power-cycled the machine",
        |lab| {
            out_of_service_seen |= out_of_service(&workload, &healed.node);
            let seen = remediations.of(&healed.machine);
            let cycled = seen.iter().any(|(_, count, _)| *count == 1);
            (cycled && history(lab, &healed.maas_machine).is_some()).then_some(())
        },
    );
    wait_for(
        &mut lab,
        120,
        "(a) the Node Ready again, the remediation gone",
        |lab| {
            out_of_service_seen |= out_of_service(&workload, &healed.node);
            let gone = get(
                &lab.kube,
                &MAAS_REMEDIATIONS,
                Some(&lab.ns),
                &healed.machine,
            )
            .is_none();
            (gone && node_ready(&workload, &healed.node) == "True").then_some(())
        },
    );
    assert!(
        !out_of_service(&workload, &healed.node),
        "the taint is off the healed Node"
    );
    let a_seconds = case_a.elapsed();
    let seen = remediations.of(&healed.machine);
    println!("(a) MaasRemediation states: {seen:?}");
    assert!(
        seen.iter().all(|(_, count, _)| *count <= 1),
        "one power cycle: {seen:?}"
    );
    let counted = history(&lab, &healed.maas_machine).unwrap();
    assert_eq!(counted["retryCount"], 1, "{counted}");
    let machine = get(&lab.kube, &MACHINES, Some(&lab.ns), &healed.machine).expect("same Machine");
    assert!(machine["metadata"]["deletionTimestamp"].is_null());
    assert!(
        condition(&machine, "OwnerRemediated").is_none(),
        "{machine}"
    );
    let host = lab.sim.machine_state(&healed.system_id);
    assert_eq!(host["status_name"], "Deployed");
    assert_eq!(host["power_state"], "on");
    let comments = host["comments"].to_string();
    assert!(
        comments.contains(&format!(
            "MaasRemediation {}/{} power cycle",
            lab.ns, healed.machine
        )),
        "MAAS's event log names who power-cycled it: {comments}"
    );
    let reasons = event_reasons(&lab.kube, &lab.ns, "MaasRemediation", &healed.machine);
    assert!(
        reasons.contains(&"PowerCycleStarted".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"RemediationEnded".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"NodeOutOfService".to_string())
            && reasons.contains(&"NodeBackInService".to_string()),
        "{reasons:?}"
    );
    println!("(a) out-of-service taint seen on the Node while polled: {out_of_service_seen}");
    println!(
        "(a) remediated by a power cycle in {:.1}s; events {reasons:?}",
        a_seconds.as_secs_f64()
    );

    // (b) A fault a reboot does not fix: two power cycles, then Cluster
    // API replaces the Machine.
    let case_b = Instant::now();
    lab.apply(&machine_health_check(&lab.ns, Some("reboot-twice")));
    let before = lab.snapshot().unwrap();
    lab.workloads.set_node_ready(&sick.node, "False", false);
    let replaced = lab.wait_until(
        PROVISION_SECONDS,
        "(b) the sick worker replaced: 3 workers Running, the old Machine gone",
        |s| {
            let names = worker_names(s);
            !names.contains(&sick.machine) && s.all_ready(CONTROL_PLANES, WORKERS)
        },
        print_change,
    );
    let b_seconds = case_b.elapsed();
    let seen = remediations.of(&sick.machine);
    println!("(b) MaasRemediation states: {seen:?}");
    let most = seen.iter().map(|(_, count, _)| *count).max().unwrap_or(0);
    assert_eq!(most, RETRY_LIMIT, "{seen:?}");
    assert!(
        seen.iter().any(|(phase, ..)| phase == "Deleting machine"),
        "handed back: {seen:?}"
    );
    // Issue 23 item 1: the retries spent, the machine is Broken in MAAS
    // (released on the way, as MAAS does), with a comment naming the
    // cluster and the Machine, so that nobody allocates it again.
    let old_host = lab.sim.machine_state(&sick.system_id);
    assert_eq!(old_host["status_name"], "Broken", "{old_host}");
    assert!(old_host["owner"].is_null(), "{old_host}");
    let comment = old_host["error_description"].as_str().unwrap_or("");
    assert!(
        comment.contains(&format!("Machine {}", sick.machine)) && comment.contains("cluster "),
        "the old MAAS machine marked Broken for the old Machine: {old_host}"
    );
    let new_names: Vec<String> = worker_names(&replaced)
        .difference(&worker_names(&before))
        .cloned()
        .collect();
    assert_eq!(new_names.len(), 1, "one replacement: {new_names:?}");
    let replacement = worker(&lab, &new_names[0]);
    let new_host = lab.sim.machine_state(&replacement.system_id);
    assert_eq!(new_host["status_name"], "Deployed");
    let reasons = event_reasons(&lab.kube, &lab.ns, "MaasRemediation", &sick.machine);
    assert!(
        reasons.contains(&"MachineHandedBack".to_string())
            && reasons.contains(&"MachineMarkedBroken".to_string()),
        "{reasons:?}"
    );
    assert_ne!(
        replacement.system_id, sick.system_id,
        "a Broken machine is never allocated"
    );
    println!(
        "(b) {} power cycles, then replaced by {} on MAAS machine {} ({}) in {:.1}s; events {reasons:?}",
        RETRY_LIMIT,
        replacement.machine,
        replacement.system_id,
        if replacement.system_id == sick.system_id { "the released one, allocated again" } else { "another one" },
        b_seconds.as_secs_f64()
    );

    // (c) No remediation template: Cluster API replaces the Machine, capmaas
    // releases its MAAS machine.
    let case_c = Instant::now();
    lab.apply(&machine_health_check(&lab.ns, None));
    let before = lab.snapshot().unwrap();
    lab.workloads.set_node_ready(&plain.node, "False", false);
    let replaced = lab.wait_until(
        PROVISION_SECONDS,
        "(c) the unhealthy worker replaced without a power cycle",
        |s| !worker_names(s).contains(&plain.machine) && s.all_ready(CONTROL_PLANES, WORKERS),
        print_change,
    );
    let c_seconds = case_c.elapsed();
    assert!(
        remediations.of(&plain.machine).is_empty(),
        "no MaasRemediation"
    );
    let old_host = lab.sim.machine_state(&plain.system_id);
    assert!(
        old_host["last_release"]["comment"]
            .as_str()
            .unwrap_or("")
            .contains(&plain.maas_machine),
        "{old_host}"
    );
    assert!(
        !old_host["comments"].to_string().contains("power cycle"),
        "never power-cycled: {old_host}"
    );
    assert_eq!(
        worker_names(&replaced)
            .difference(&worker_names(&before))
            .count(),
        1
    );
    println!("(c) replaced in {:.1}s", c_seconds.as_secs_f64());

    // (d) A machine MAAS shows under another identity is never
    // power-cycled, and its Machine is not handed back either.
    let case_d = Instant::now();
    let fresh: Vec<String> = worker_names(&replaced)
        .difference(&worker_names(&before))
        .cloned()
        .collect();
    let foreign = worker(&lab, &fresh[0]);
    lab.apply(&machine_health_check(&lab.ns, Some("reboot")));
    let other = "capmaas/elsewhere/someone-else/uid-1";
    lab.maas
        .set_owner_data(&foreign.system_id, &[(IDENTITY_KEY, Some(other))])
        .expect("set_owner_data");
    // A fault a reboot would heal: a power cycle would not go unnoticed.
    lab.workloads.set_node_ready(&foreign.node, "False", true);
    let refused = wait_for(
        &mut lab,
        120,
        "(d) the MaasRemediation failed: MachineNotOwned",
        |lab| {
            let r = get(
                &lab.kube,
                &MAAS_REMEDIATIONS,
                Some(&lab.ns),
                &foreign.machine,
            )?;
            (r["status"]["phase"] == "Failed").then_some(r)
        },
    );
    let d_seconds = case_d.elapsed();
    let requested = condition(&refused, "OwnerRemediationRequested").unwrap();
    assert_eq!(requested["reason"], "MachineNotOwned", "{refused}");
    assert!(
        requested["message"]
            .as_str()
            .unwrap()
            .contains("belongs to another MaasMachine"),
        "{refused}"
    );
    // Give a wrong power cycle time to show.
    std::thread::sleep(Duration::from_secs(5));
    let host = lab.sim.machine_state(&foreign.system_id);
    assert!(
        !host["comments"].to_string().contains("power cycle"),
        "never power-cycled: {host}"
    );
    assert_eq!(host["power_state"], "on");
    assert_eq!(host["owner_data"][IDENTITY_KEY], other, "{host}");
    let machine = get(&lab.kube, &MACHINES, Some(&lab.ns), &foreign.machine).expect("kept");
    assert!(machine["metadata"]["deletionTimestamp"].is_null());
    assert!(
        condition(&machine, "OwnerRemediated").is_none(),
        "not handed back: {machine}"
    );
    assert_eq!(node_ready(&workload, &foreign.node), "False");
    let reasons = event_reasons(&lab.kube, &lab.ns, "MaasRemediation", &foreign.machine);
    assert_eq!(reasons, ["RemediationFailed"], "{reasons:?}");
    println!("(d) refused in {:.1}s", d_seconds.as_secs_f64());

    println!(
        "remediation test: lab + provisioning {:.1}s, (a) {:.1}s, (b) {:.1}s, (c) {:.1}s, (d) {:.1}s, whole test {:.1}s",
        provisioned.as_secs_f64(),
        a_seconds.as_secs_f64(),
        b_seconds.as_secs_f64(),
        c_seconds.as_secs_f64(),
        d_seconds.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
