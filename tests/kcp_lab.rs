//! The cluster users actually create, end to end (issue 14): the seed's
//! `clusterctl generate cluster prod-cluster --kubernetes-version v1.26.4
//! --control-plane-machine-count=3 --worker-machine-count=5`, rendered with
//! deploy/clusterctl/clusterctl.yaml and applied as is, run by the real
//! Cluster API core, KubeadmControlPlane and kubeadm bootstrap managers,
//! `capmaas` and the MAAS simulator; the machines boot into Cluster API's
//! in-memory workload cluster server (tests/capi-testbin/workload-sim), and
//! every client resolves the API server name through the simulator's DNS
//! inside the test's own network namespace (tests/support/kcp_lab.rs).
//!
//!     cargo test --test kcp_lab -- --nocapture
//!
//! Needs root for the network namespace (CI runs as root); elsewhere each
//! test says why it skips. `lab` is the local lab behind `tests/lab.sh up`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use capmaas::kube::{self, resources, ListParams};
use serde_json::json;
use support::api_probe::{ApiProbe, Report};
use support::kcp_lab::{self, KcpLab, LabOptions, MachineRow, Snapshot, CLUSTER, KCP, MD};
use support::maas_timeline::{self, Event, MaasTimeline};
use support::netns;

const CONTROL_PLANES: u64 = 3;
const WORKERS: u64 = 5;
/// Generous for 2 busy cores: KCP adds control-plane machines one at a
/// time, each waiting for the previous one's etcd member and static pods.
const PROVISION_SECONDS: u64 = 600;

fn print_change(s: &Snapshot) {
    println!("\n{}", s.table());
}

fn lab_dir(name: &str) -> std::path::PathBuf {
    support::tempdir(name).expect("creating the lab directory")
}

/// The user data MAAS deployed each machine with, decoded, by hostname.
fn deployed_user_data(lab: &KcpLab) -> Vec<(String, String)> {
    lab.sim.state()["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["status_name"] == "Deployed")
        .map(|m| {
            let raw = m["user_data"].as_str().unwrap_or_default();
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|_| raw.to_string());
            (
                m["hostname"].as_str().unwrap_or_default().to_string(),
                decoded,
            )
        })
        .collect()
}

/// Renders the seed's template (3 + 5), applies it as is (with
/// `control_plane_node_reuse`, after the one line a user adds to the
/// control-plane MaasMachineTemplate), and waits until KCP is ready, the 8
/// Machines run and DNS names the control planes.
fn provision(lab: &mut KcpLab, started: Instant, control_plane_node_reuse: bool) -> Snapshot {
    let mut yaml = lab.render_template(CONTROL_PLANES as usize, WORKERS as usize);
    if control_plane_node_reuse {
        yaml = with_control_plane_node_reuse(&yaml);
    }
    std::fs::write(lab.dir.join("cluster.yaml"), &yaml).unwrap();
    lab.apply(&yaml);
    let provisioning = Instant::now();
    let ready = lab.wait_until(
        PROVISION_SECONDS,
        "KCP 3/3 ready, 5 workers, 8 Machines Running, DNS = control-plane IPs",
        |s| s.all_ready(CONTROL_PLANES, WORKERS),
        print_change,
    );
    println!(
        "provisioned in {:.1}s (lab started {:.1}s before)",
        provisioning.elapsed().as_secs_f64(),
        (provisioning - started).as_secs_f64()
    );
    ready
}

fn names(machines: impl Iterator<Item = MachineRow>) -> BTreeSet<String> {
    machines.map(|m| m.name).collect()
}

/// The seed's cluster provisioned, checked, scaled both ways, deleted.
#[test]
fn seed_template_verbatim_with_kcp_and_kubeadm_bootstrap() {
    let test = "seed_template_verbatim_with_kcp_and_kubeadm_bootstrap";
    let Some(namespace) = netns::run_inside(test, &kcp_lab::network()) else {
        return;
    };
    let started = Instant::now();
    let mut lab = KcpLab::start(LabOptions::new(lab_dir("kcp-lab")));
    println!(
        "inside network namespace {namespace}; lab dir {}",
        lab.dir.display()
    );

    // Node reuse on the control planes, for the scale-down and up below.
    let ready = provision(&mut lab, started, true);

    // KCP is initialized and Available; every Machine runs the template's
    // version on a MAAS machine.
    assert!(ready.control_plane.initialized);
    assert_eq!(
        ready.control_plane.available_condition,
        "True",
        "{}",
        ready.table()
    );
    for m in &ready.machines {
        assert_eq!(m.version, kcp_lab::KUBERNETES_VERSION, "{}", m.name);
        assert!(
            m.provider_id.starts_with("maas:///"),
            "{}: {}",
            m.name,
            m.provider_id
        );
    }
    let node_names: BTreeSet<&str> = ready.machines.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(node_names.len(), 8, "one Node per Machine: {node_names:?}");

    // The API server name resolves, through the simulator's DNS, to exactly
    // the three control-plane machines' addresses.
    let host = lab.endpoint_host().expect("controlPlaneEndpoint.host");
    assert!(
        host.starts_with("prod-cluster-") && host.ends_with(".maas"),
        "{host}"
    );
    let resolved = kcp_lab::resolve(&host).unwrap();
    let cp_ips = ready.control_plane_ips();
    assert_eq!(cp_ips.len(), 3, "{}", ready.table());
    assert_eq!(
        resolved, cp_ips,
        "{host} resolves to the control-plane machines"
    );
    println!("{host} resolves to {resolved:?}");

    // Each machine was deployed with CABPK's cloud-init: one `kubeadm
    // init` (the first control-plane machine), seven `kubeadm join`.
    let user_data = deployed_user_data(&lab);
    assert_eq!(user_data.len(), 8);
    let inits = user_data
        .iter()
        .filter(|(_, d)| d.contains("kubeadm init"))
        .count();
    let joins = user_data
        .iter()
        .filter(|(_, d)| d.contains("kubeadm join"))
        .count();
    assert_eq!((inits, joins), (1, 7), "{user_data:?}");

    // The workload API answers through the name with KCP's kubeconfig, and
    // its Nodes carry the providerIDs capmaas set.
    let config = kube::Config::from_kubeconfig_file(&lab.workload_kubeconfig(), None)
        .expect("workload kubeconfig");
    assert!(config.server.contains(&host), "{}", config.server);
    let workload = kube::Client::new(config).unwrap();
    let nodes = workload
        .list(&resources::NODES, None, &ListParams::default())
        .expect("listing workload Nodes through the DNS name")
        .items;
    let mut node_ids: Vec<String> = nodes
        .iter()
        .map(|n| {
            n["spec"]["providerID"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let mut machine_ids: Vec<String> = ready
        .machines
        .iter()
        .map(|m| m.provider_id.clone())
        .collect();
    node_ids.sort();
    machine_ids.sort();
    assert_eq!(node_ids, machine_ids);

    // The same cluster scaled both ways (one lab for both stories: a
    // provisioning costs two minutes of the suite's budget).
    scale_control_plane_and_workers(&mut lab);

    // Deleting the Cluster releases every machine and removes the record.
    let deleting = Instant::now();
    lab.cp
        .kubectl(&["delete", "cluster", CLUSTER, "-n", &lab.ns, "--wait=false"]);
    lab.wait_until(
        300,
        "Cluster deleted: no Machines, every MAAS machine released, no DNS record",
        |s| {
            !s.cluster_exists
                && s.machines.is_empty()
                && s.maas.keys().all(|status| status == "Ready")
                && s.dns_records.is_empty()
        },
        print_change,
    );
    println!(
        "deleted in {:.1}s; whole test {:.1}s",
        deleting.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// The version both rollouts move to (one minor up, as KCP allows).
const UPGRADE_VERSION: &str = "v1.27.3";

/// Issue 14 (2): bump KCP's and the MachineDeployment's version. Every
/// machine is replaced, control planes one at a time (KCP's surge of 1),
/// workers with the MachineDeployment's surge of 1; every old control-plane
/// machine leaves the DNS record before Cluster API starts draining it
/// (capmaas's pre-drain hook) and so before MAAS releases it, and the
/// record never hands out an address where no API server listens (a new
/// control plane joins once its API answers). A probe resolves
/// the name and calls the workload API every 100 ms through the rollout and
/// reports the share of failed calls and the longest outage.
#[test]
fn rolling_upgrade_replaces_every_machine() {
    let test = "rolling_upgrade_replaces_every_machine";
    let Some(_namespace) = netns::run_inside(test, &kcp_lab::network()) else {
        return;
    };
    let started = Instant::now();
    let mut lab = KcpLab::start(LabOptions::new(lab_dir("kcp-upgrade")));
    // Without node reuse: this rollout proves the handover to fresh
    // machines (see scale_control_plane_and_workers).
    let ready = provision(&mut lab, started, false);
    let old_control_planes = names(ready.control_plane_machines().cloned());
    let old_workers = names(ready.machines.iter().filter(|m| !m.control_plane).cloned());
    let host = lab.endpoint_host().expect("controlPlaneEndpoint.host");
    let ttl = record_ttl(&lab, &host);
    let origin = Instant::now();
    let origin_wall = SystemTime::now();
    let timeline = MaasTimeline::start(&lab.sim.base, &host, origin);
    let kubeconfig = lab.workload_kubeconfig();
    let probe = ApiProbe::start(&kubeconfig, &host, None, origin);
    let caching_probe = ApiProbe::start(&kubeconfig, &host, Some(ttl), origin);
    // Let the probe see the steady state first.
    std::thread::sleep(Duration::from_secs(3));

    let rollout = Instant::now();
    lab.patch(
        "kubeadmcontrolplane",
        KCP,
        &json!({"spec": {"version": UPGRADE_VERSION}}),
    );
    lab.patch(
        "machinedeployment",
        MD,
        &json!({"spec": {"template": {"spec": {"version": UPGRADE_VERSION}}}}),
    );
    let (mut most_control_planes, mut most_workers) = (0, 0);
    // Control-plane Machine → (nodeDrainStartTime, its addresses).
    let mut drains: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let done = lab.wait_until(
        PROVISION_SECONDS * 2,
        "every Machine replaced by a v1.27.3 one, KCP 3/3 and 5 workers ready",
        |s| {
            s.all_ready(CONTROL_PLANES, WORKERS)
                && s.machines.iter().all(|m| m.version == UPGRADE_VERSION)
        },
        |s| {
            most_control_planes = most_control_planes.max(s.control_plane_machines().count());
            most_workers = most_workers.max(s.machines.len() - s.control_plane_machines().count());
            for m in s.control_plane_machines() {
                if !m.drain_started.is_empty() {
                    drains.insert(m.name.clone(), (m.drain_started.clone(), m.ips.clone()));
                }
            }
            print_change(s);
        },
    );
    let rollout_seconds = rollout.elapsed().as_secs_f64();
    // And the steady state after.
    std::thread::sleep(Duration::from_secs(3));
    let report = probe.stop();
    let caching = caching_probe.stop();
    let events = timeline.stop();
    println!("rollout took {rollout_seconds:.1}s\n{report}{caching}");
    for (report, what) in [
        (&report, "resolving every call"),
        (&caching, "keeping DNS answers"),
    ] {
        println!("first-address failures {what}, by the machine's MAAS status at the time:");
        for (machine, n) in failures_by_machine(report, &events) {
            println!("  {n:>5} x {machine}");
        }
    }

    let new_control_planes = names(done.control_plane_machines().cloned());
    let new_workers = names(done.machines.iter().filter(|m| !m.control_plane).cloned());
    assert!(
        new_control_planes.is_disjoint(&old_control_planes),
        "every control-plane Machine replaced: {old_control_planes:?} -> {new_control_planes:?}"
    );
    assert!(
        new_workers.is_disjoint(&old_workers),
        "every worker replaced"
    );
    assert!(
        most_control_planes <= CONTROL_PLANES as usize + 1,
        "one control-plane machine at a time: up to {most_control_planes} at once"
    );
    assert!(
        most_workers <= WORKERS as usize + 1,
        "up to {most_workers} workers at once"
    );

    // capmaas's pre-drain hook is on every control-plane Machine, and each
    // old one left the record before Cluster API began to drain it.
    for m in done.control_plane_machines() {
        assert!(m.drain_hook, "{} has no pre-drain hook", m.name);
    }
    for name in &old_control_planes {
        let Some((drain_started, ips)) = drains.get(name) else {
            panic!(
                "never saw {name} being drained (status.deletion.nodeDrainStartTime): {drains:?}"
            );
        };
        let drain_at = capmaas::kube::time::unix_seconds(drain_started)
            .unwrap_or_else(|| panic!("{name}: nodeDrainStartTime {drain_started:?}"));
        let left = ips
            .iter()
            .filter_map(|ip| maas_timeline::left_record_at(&events, ip))
            .max()
            .unwrap_or_else(|| panic!("{name} ({ips:?}) never left the record: {events:?}"));
        let left_wall = (origin_wall + left)
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // The drain time has whole seconds: it began within [drain_at, drain_at + 1).
        println!(
            "{name}: left the DNS record {:.1}s before Cluster API began draining it",
            drain_at as f64 - left_wall
        );
        assert!(
            left_wall < drain_at as f64 + 1.0,
            "{name} left the DNS record at {left_wall:.1} (Unix), after its drain began ({drain_started})"
        );
    }
    // The record never handed out an address where nothing listened: new
    // control planes joined once their API answered, old ones stopped
    // serving only after leaving (and, for a client that keeps answers for
    // the TTL, after the TTL). Slow calls on a busy machine are not counted.
    for (report, what) in [
        (&report, "resolving every call"),
        (&caching, "keeping DNS answers"),
    ] {
        let refused: Vec<String> = report
            .samples
            .iter()
            .filter_map(|s| {
                let (ip, error) = s.attempts.first()?;
                let error = error.as_ref()?;
                error
                    .to_lowercase()
                    .contains("refused")
                    .then(|| format!("{:.1}s {ip}: {error}", s.at.as_secs_f64()))
            })
            .collect();
        assert!(
            refused.is_empty(),
            "probe {what}: the record handed out addresses where no API server listened:\n{}",
            refused.join("\n")
        );
    }

    // Every released control-plane machine left the record first.
    let releases = maas_timeline::release_order(&events);
    let mut released_control_planes = 0;
    for (hostname, released_at, left_at) in &releases {
        if !hostname.starts_with("cp-") {
            continue;
        }
        released_control_planes += 1;
        match left_at {
            Some(left) => println!(
                "{hostname}: left the DNS record at {:.1}s, MAAS release began {:.1}s later",
                left.as_secs_f64(),
                (*released_at - *left).as_secs_f64()
            ),
            None => panic!(
                "{hostname} was still in the DNS record when MAAS began releasing it ({:.1}s)",
                released_at.as_secs_f64()
            ),
        }
    }
    assert_eq!(released_control_planes, 3, "{releases:?}");
    assert!(report.calls() > 100, "{report}");
    for (report, what) in [
        (&report, "resolving every call".to_string()),
        (&caching, format!("keeping DNS answers {}s", ttl.as_secs())),
    ] {
        println!(
            "BENCHMARK rolling upgrade {} -> {UPGRADE_VERSION} (3 control planes, 5 workers), \
             probe {what}: rollout {:.1}s, {} calls, failed trying every address {:.2}% \
             (longest outage {:.1}s), first address only {:.2}% (longest {:.1}s)",
            kcp_lab::KUBERNETES_VERSION,
            rollout_seconds,
            report.calls(),
            report.any_address().share * 100.0,
            report.any_address().longest_outage.as_secs_f64(),
            report.first_address().share * 100.0,
            report.first_address().longest_outage.as_secs_f64(),
        );
    }
}

/// The TTL MAAS serves the API server record with.
fn record_ttl(lab: &KcpLab, host: &str) -> Duration {
    let state = lab.sim.state();
    let ttl = state["dns_resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["fqdn"] == host)
        .and_then(|d| d["address_ttl"].as_u64())
        .unwrap_or_else(|| panic!("no TTL on the record {host}: {state}"));
    Duration::from_secs(ttl)
}

/// First-address failures grouped by the machine behind the address and
/// its MAAS status when the call was made.
fn failures_by_machine(report: &Report, events: &[Event]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for s in &report.samples {
        let key = match (&s.resolve_error, s.attempts.first()) {
            (Some(e), _) => format!("resolving failed: {e}"),
            (None, Some((ip, Some(_)))) => {
                match maas_timeline::status_at(events, &ip.to_string(), s.at) {
                    Some((hostname, status)) => format!("{hostname} ({ip}) {status}"),
                    None => format!("{ip} (no MAAS machine)"),
                }
            }
            _ => continue,
        };
        *counts.entry(key).or_default() += 1;
    }
    counts.into_iter().collect()
}

/// Issue 14 (3) with node reuse (issue 23 item 2): KCP 3 → 1 → 3 and the
/// MachineDeployment 5 → 8 → 2. Each step ends with every Machine Running
/// on a Deployed MAAS machine, the DNS record holding exactly the
/// control-plane machines, and MAAS with exactly as many machines
/// deployed.
///
/// The control planes have `nodeReuse` (the seed test's template): the two
/// machines KCP releases going to 1 are released without erase and
/// recorded for it, and going back to 3 the two new control planes take
/// them back, each in its own failure domain. Reuse is proven here and not
/// in the rolling upgrade: that test proves the DNS handover to fresh
/// machines under KCP's default surge of 1 (a new machine before an old
/// one goes, so the first could not reuse anyway), and a scale-in-first
/// rollout (`maxSurge: 0`, what node reuse asks for) would no longer prove
/// it. KCP scales by odd numbers only (stacked etcd), and 3 → 1 → 3 costs
/// what 3 → 5 → 3 did: two machines down, two up.
fn scale_control_plane_and_workers(lab: &mut KcpLab) {
    let before = control_plane_system_ids(lab);
    scale_step(lab, "kubeadmcontrolplane", KCP, 1, WORKERS);
    let kept = control_plane_system_ids(lab);
    let released: BTreeSet<String> = before
        .values()
        .filter(|id| !kept.values().any(|k| k == *id))
        .cloned()
        .collect();
    assert_eq!(released.len(), 2, "{before:?} -> {kept:?}");
    assert_released_for_reuse(lab, &released);

    let scaling_up = Instant::now();
    scale_step(lab, "kubeadmcontrolplane", KCP, CONTROL_PLANES, WORKERS);
    let taken_back = assert_taken_back(lab, &kept, &released);
    println!(
        "BENCHMARK node reuse, KCP 1 -> 3: {}/{} new control planes on a released machine \
         ({taken_back:?}), released with erase 0/{}, scale-up {:.1}s",
        taken_back.len(),
        released.len(),
        released.len(),
        scaling_up.elapsed().as_secs_f64()
    );

    scale_step(lab, "machinedeployment", MD, CONTROL_PLANES, 8);
    scale_step(lab, "machinedeployment", MD, CONTROL_PLANES, 2);
}

/// Scales `kind` to its count of (`control_planes`, `workers`) and waits
/// until all of them run and MAAS has as many deployed.
fn scale_step(lab: &mut KcpLab, kind: &str, name: &str, control_planes: u64, workers: u64) {
    let replicas = if kind == "machinedeployment" {
        workers
    } else {
        control_planes
    };
    let step = Instant::now();
    lab.cp.kubectl(&[
        "scale",
        kind,
        name,
        "-n",
        &lab.ns,
        &format!("--replicas={replicas}"),
    ]);
    let s = lab.wait_until(
        PROVISION_SECONDS,
        &format!("{kind} scaled to {replicas}: {control_planes} + {workers} Running"),
        |s| {
            s.all_ready(control_planes, workers)
                && s.maas.get("Deployed").map_or(0, Vec::len) as u64 == control_planes + workers
        },
        print_change,
    );
    println!(
        "{kind} -> {replicas} in {:.1}s; DNS {:?}",
        step.elapsed().as_secs_f64(),
        s.dns
    );
    assert_eq!(
        kcp_lab::resolve(&lab.endpoint_host().unwrap()).unwrap(),
        s.control_plane_ips()
    );
}

/// The seed's template with `nodeReuse: true` in the control-plane
/// MaasMachineTemplate (`spec.template.spec`), as a user would add it.
fn with_control_plane_node_reuse(yaml: &str) -> String {
    let template = format!("kind: MaasMachineTemplate\nmetadata:\n  name: {KCP}\n");
    let docs: Vec<String> = yaml
        .split("\n---\n")
        .map(|doc| {
            if !doc.contains(&template) {
                return doc.to_string();
            }
            let spec = "\n  template:\n    spec:\n";
            assert_eq!(doc.matches(spec).count(), 1, "{doc}");
            doc.replacen(spec, &format!("{spec}      nodeReuse: true\n"), 1)
        })
        .collect();
    let out = docs.join("\n---\n");
    assert_eq!(out.matches("nodeReuse: true").count(), 1, "{out}");
    out
}

/// The control planes' MaasMachines: name → MAAS system ID.
fn control_plane_system_ids(lab: &KcpLab) -> BTreeMap<String, String> {
    control_plane_maas_machines(lab)
        .iter()
        .map(|mm| {
            (
                mm["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                mm["spec"]["systemID"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

fn control_plane_maas_machines(lab: &KcpLab) -> Vec<serde_json::Value> {
    lab.kube
        .list(
            &resources::MAAS_MACHINES,
            Some(&lab.ns),
            &ListParams::labels("cluster.x-k8s.io/control-plane"),
        )
        .expect("listing the control planes' MaasMachines")
        .items
}

fn reuse_mark(lab: &KcpLab) -> String {
    format!("node reuse by ControlPlane/{KCP} of {}/{CLUSTER}", lab.ns)
}

/// MAAS released each machine without erase, with our mark, and the
/// MaasCluster records it for the control plane.
fn assert_released_for_reuse(lab: &KcpLab, released: &BTreeSet<String>) {
    let state = lab.sim.state();
    for id in released {
        let host = state["machines"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["system_id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not in MAAS: {state}"));
        let release = &host["last_release"];
        for flag in ["erase", "quick_erase", "secure_erase"] {
            assert_eq!(
                release[flag], false,
                "{id} released without {flag}: {release}"
            );
        }
        assert!(
            release["comment"]
                .as_str()
                .is_some_and(|c| c.ends_with(&reuse_mark(lab))),
            "{id}: {release}"
        );
    }
    let recorded = reusable_machines(lab);
    let owner = format!("ControlPlane/{KCP}");
    assert_eq!(
        recorded,
        released
            .iter()
            .map(|id| (id.clone(), owner.clone()))
            .collect::<BTreeMap<_, _>>()
    );
}

/// The MaasCluster's `status.reusableMachines`: system ID → owner.
fn reusable_machines(lab: &KcpLab) -> BTreeMap<String, String> {
    let mc = lab
        .kube
        .get(&resources::MAAS_CLUSTERS, Some(&lab.ns), CLUSTER)
        .expect("reading the MaasCluster");
    mc["status"]["reusableMachines"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(id, owner)| (id.clone(), owner.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// Every control plane added since `kept` runs on one of the `released`
/// machines (each taken once), says so in `status.reusedMachine`, and has
/// a `MachineReused` Event; the records are used up. The new MaasMachines'
/// names → the machines they took.
fn assert_taken_back(
    lab: &KcpLab,
    kept: &BTreeMap<String, String>,
    released: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    let events = lab.cp.kubectl(&[
        "get",
        "events",
        "-n",
        &lab.ns,
        "--field-selector",
        "reason=MachineReused",
        "-o",
        "json",
    ]);
    let events: serde_json::Value = serde_json::from_str(&events).expect("kubectl's JSON");
    let reused_events: BTreeSet<String> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["kind"] == "MaasMachine")
        .filter_map(|e| e["involvedObject"]["name"].as_str().map(str::to_string))
        .collect();
    let mut taken = BTreeMap::new();
    for mm in control_plane_maas_machines(lab) {
        let name = mm["metadata"]["name"].as_str().unwrap_or_default();
        if kept.contains_key(name) {
            continue;
        }
        let system_id = mm["spec"]["systemID"].as_str().unwrap_or_default();
        assert_eq!(
            mm["status"]["reusedMachine"], system_id,
            "{name} runs on a machine released for reuse: {mm:#}"
        );
        assert!(
            mm["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.ends_with(&format!("/{system_id}"))),
            "{mm:#}"
        );
        assert!(
            reused_events.contains(name),
            "a MachineReused Event for {name}: {events:#}"
        );
        taken.insert(name.to_string(), system_id.to_string());
    }
    let took: BTreeSet<String> = taken.values().cloned().collect();
    assert_eq!(
        &took, released,
        "both released machines taken back: {taken:?}"
    );
    assert_eq!(taken.len(), released.len(), "{taken:?}");
    assert!(
        reusable_machines(lab).is_empty(),
        "the records are used up: {:?}",
        reusable_machines(lab)
    );
    taken
}

/// The local lab (`tests/lab.sh up`): the seed's cluster, then it keeps
/// running, printing every change, until `$CAPMAAS_LAB_DIR/stop` appears.
#[test]
#[ignore = "the local lab; run with tests/lab.sh up"]
fn lab() {
    let Some(namespace) = netns::run_inside("lab", &kcp_lab::network()) else {
        return;
    };
    let dir = std::env::var_os("CAPMAAS_LAB_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join(".cache/lab"));
    let stop_file = dir.join("stop");
    let _ = std::fs::remove_file(&stop_file);
    let mut options = LabOptions::new(dir.clone());
    options.namespace = Some("default".into());
    if let Some(s) = std::env::var("CAPMAAS_LAB_DEPLOY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        options.deploy_seconds = s;
    }
    let mut lab = KcpLab::start(options);
    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(&lab.cp.kubeconfig, &kubeconfig).unwrap();
    let kubectl = lab.cp.bin_dir.join("kubectl");
    std::fs::write(
        dir.join("env"),
        format!(
            "KUBECTL={}\nKUBECONFIG={}\nNAMESPACE={}\nNETNS={namespace}\nMAAS_URL={}\nCAPMAAS_LOG={}\nCAPI_LOG={}\nKCP_LOG={}\nCABPK_LOG={}\nWORKLOAD_SIM_LOG={}\nCONTROL_PLANE_DIR={}\n",
            kubectl.display(),
            kubeconfig.display(),
            lab.ns,
            lab.sim.url,
            lab.capmaas.log.display(),
            lab.capi.log.display(),
            lab.kcp.log.display(),
            lab.cabpk.log.display(),
            lab.workloads.log().display(),
            lab.cp.dir.display(),
        ),
    )
    .unwrap();
    let yaml = lab.render_template(CONTROL_PLANES as usize, WORKERS as usize);
    std::fs::write(dir.join("cluster.yaml"), &yaml).unwrap();
    lab.apply(&yaml);
    println!(
        "lab: applied clusterctl's template ({}/cluster.yaml)",
        dir.display()
    );
    let mut last = lab.wait_until(
        PROVISION_SECONDS,
        "every machine Running",
        |s| s.all_ready(CONTROL_PLANES, WORKERS),
        print_change,
    );
    let host = lab.endpoint_host().unwrap_or_default();
    let k = format!(
        "ip netns exec {namespace} {} --kubeconfig {}",
        kubectl.display(),
        kubeconfig.display()
    );
    println!(
        "\nLAB READY: every machine is Ready ({CONTROL_PLANES} control planes, {WORKERS} workers)\n\
         \n  API server name: {host} (resolves through the simulator's DNS inside namespace {namespace})\
         \n  {k} get kubeadmcontrolplanes,machinedeployments,machines\
         \n  upgrade: {k} patch kubeadmcontrolplane {KCP} --type=merge -p '{{\"spec\":{{\"version\":\"v1.27.3\"}}}}'\
         \n           {k} patch machinedeployment {MD} --type=merge -p '{{\"spec\":{{\"template\":{{\"spec\":{{\"version\":\"v1.27.3\"}}}}}}}}'\
         \n  scale:   {k} scale kubeadmcontrolplane {KCP} --replicas=5\
         \n           {k} scale machinedeployment {MD} --replicas=8\
         \n  resolve: ip netns exec {namespace} getent ahostsv4 {host}\
         \n  tests/lab.sh status\
         \n  tests/lab.sh down\n\
         \nlogs in {}; the lab keeps running and prints every change.\n",
        dir.display()
    );
    while !stop_file.exists() {
        lab.check_processes();
        match lab.snapshot() {
            Ok(s) if s != last => {
                print_change(&s);
                last = s;
            }
            Ok(_) => {}
            Err(e) => println!("lab: reading the lab: {e}"),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("lab: stop file found, tearing down");
    let _ = std::fs::remove_file(&stop_file);
}
