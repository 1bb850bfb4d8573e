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

/// Renders the seed's template (3 + 5), applies it as is, and waits until
/// KCP is ready, the 8 Machines run and DNS names the control planes.
fn provision(lab: &mut KcpLab, started: Instant) -> Snapshot {
    let yaml = lab.render_template(CONTROL_PLANES as usize, WORKERS as usize);
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

    let ready = provision(&mut lab, started);

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
    let ready = provision(&mut lab, started);
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

/// Issue 14 (3): KCP 3 → 5 → 3 and the MachineDeployment 5 → 8 → 2. At
/// each step every Machine runs, the DNS record holds exactly the
/// control-plane machines, and MAAS has exactly as many machines deployed.
/// KCP scaled up to 5 and back to 3, the MachineDeployment up to 8 and
/// down to 2: each step ends with every Machine Running on a Deployed MAAS
/// machine and the API server name resolving to exactly the control
/// planes.
fn scale_control_plane_and_workers(lab: &mut KcpLab) {
    for (kind, name, control_planes, workers) in [
        ("kubeadmcontrolplane", KCP, 5, WORKERS),
        ("kubeadmcontrolplane", KCP, 3, WORKERS),
        ("machinedeployment", MD, CONTROL_PLANES, 8),
        ("machinedeployment", MD, CONTROL_PLANES, 2),
    ] {
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
