//! The README story against the real MAAS 3.4.8 region (issue 20 item 3),
//! at capmaas's default flags: the real Cluster API core manager, the
//! `capmaas` binary, real MAAS (tests/support/real_maas.rs, its machines
//! played through MAAS's metadata API) and this test playing the machines'
//! side: each machine MAAS deploys finishes its installation, a control
//! plane's API server answers on its MAAS address (a forwarder to the test
//! API server, which the story's `<cluster>-kubeconfig` names as the
//! workload cluster), and kubelet registers the Node. The cluster is the
//! README's (`prod-cluster`: three control-plane Machines, a
//! MachineDeployment) with two workers, then one, then deleted.
//!
//!     CI=true cargo test --test real_maas_story -- --nocapture
//!
//! A binary of its own: the Cluster API manager reconciles every Machine
//! of its API server, so it must not share one with tests/real_maas.rs's
//! hand-made Machines; the real MAAS world is one per machine anyway
//! (flock), seeded with the story's machines ([`real_maas::STORY_MACHINES`]).
//!
//! Needs `../shared/real-maas` (or `$CAPMAAS_SHARED/real-maas`) and root;
//! elsewhere it says why it skips, and under `CI=true` it fails.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use capmaas::maas::{MaasApi, Machine, MachineFilter, MachineStatus};
use serde_json::{json, Value};
use support::capi::CapiManager;
use support::objects;
use support::real_maas::{self, RealMaas, DOMAIN};
use support::story::{self, Capmaas, MachineNudger, CLUSTER, MD};

const REQUESTS: &str = "maas_api_requests_total";

/// `maas_api_requests_total` by operation, summed over codes.
fn requests_by_operation(capmaas: &Capmaas) -> BTreeMap<String, f64> {
    let mut by_operation = BTreeMap::new();
    for (key, value) in capmaas.metrics() {
        let Some(labels) = key.strip_prefix(&format!("{REQUESTS}{{")) else {
            continue;
        };
        let operation = labels
            .split(',')
            .find_map(|l| l.strip_prefix("operation=\""))
            .map(|o| o.trim_end_matches(['"', '}']).to_owned())
            .unwrap_or_default();
        *by_operation.entry(operation).or_default() += value;
    }
    by_operation
}

/// What `later` adds to `earlier`: (total, "op n, op n").
fn requests_between(
    earlier: &BTreeMap<String, f64>,
    later: &BTreeMap<String, f64>,
) -> (f64, String) {
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (operation, n) in later {
        let added = n - earlier.get(operation).copied().unwrap_or(0.0);
        if added > 0.0 {
            total += added;
            parts.push(format!("{operation} {added}"));
        }
    }
    (total, parts.join(", "))
}

/// A control-plane machine's API server, on its MAAS address: what
/// connects to `address:port` reaches the test API server (the story's
/// workload cluster), as it would reach the kube-apiserver the machine
/// runs. capmaas's default DNS join waits for this answer. Only loopback
/// addresses (the world's subnet is 127.11.130.0/24).
fn serve_api_on(address: &str, port: u16, upstream: SocketAddr) {
    let ip: std::net::IpAddr = address.parse().expect("a MAAS address");
    assert!(
        ip.is_loopback(),
        "{address}: the world's machines are on loopback"
    );
    let listener = TcpListener::bind((ip, port))
        .unwrap_or_else(|e| panic!("serving the API on {address}:{port}: {e}"));
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let Ok(server) = TcpStream::connect(upstream) else {
                    return;
                };
                let (Ok(mut from_client), Ok(mut to_server)) =
                    (client.try_clone(), server.try_clone())
                else {
                    return;
                };
                let up = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_client, &mut to_server);
                    let _ = to_server.shutdown(Shutdown::Write);
                });
                let (mut from_server, mut to_client) = (server, client);
                let _ = std::io::copy(&mut from_server, &mut to_client);
                let _ = to_client.shutdown(Shutdown::Write);
                let _ = up.join();
            });
        }
    });
}

/// The machine's side of a deployment MAAS started: curtin and the first
/// boot (MAAS marks it Deployed, the BMC reports on), a control plane's
/// API server on its addresses, then kubelet's Node.
fn play_deployment(
    maas: &RealMaas,
    cp: &support::ControlPlane,
    machine: &Machine,
    api_port: u16,
    upstream: SocketAddr,
) {
    maas.complete_deployment(&machine.system_id);
    if machine.pool == "cp-pool" {
        let deployed = maas
            .admin_client()
            .machine(&machine.system_id)
            .expect("the deployed machine");
        assert!(
            !deployed.ip_addresses.is_empty(),
            "{} has no address in MAAS",
            machine.hostname
        );
        for address in &deployed.ip_addresses {
            serve_api_on(address, api_port, upstream);
        }
    }
    let node = support::nodes::node_manifest(&machine.hostname);
    cp.kubectl_stdin(&["create", "-f", "-"], &node.to_string());
    println!("played {} ({})", machine.hostname, machine.system_id);
}

/// The story's objects with `workers` replicas in the MachineDeployment.
fn story_objects(cp: &support::ControlPlane, ns: &str, workers: usize) -> Value {
    let mut objects = story::story_objects(cp, ns);
    for object in &mut objects {
        if object["kind"] == "MachineDeployment" {
            *object = story::machine_deployment(ns, workers);
        }
    }
    json!({"apiVersion": "v1", "kind": "List", "items": objects})
}

fn owned_by_admin(maas: &RealMaas) -> Vec<Machine> {
    maas.admin_client()
        .machines(&MachineFilter {
            owner: Some("admin".into()),
            ..MachineFilter::default()
        })
        .expect("machines owned by admin")
}

fn cluster_records(maas: &RealMaas) -> Vec<Value> {
    let all = maas.admin("GET", &format!("dnsresources/?domain={DOMAIN}"), &[]);
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["fqdn"]
                .as_str()
                .is_some_and(|f| f.starts_with(&format!("{CLUSTER}-")))
        })
        .cloned()
        .collect()
}

/// The README cluster (3 control planes, 2 workers) on real MAAS at
/// capmaas's defaults: every Machine Running with its Node, providerIDs
/// `maas:///<zone>/<system-id>`, the API record holding exactly the three
/// control planes' addresses as real MAAS stores it; workers 2 → 1
/// releases one machine in MAAS (Ready, no owner); deleting the Cluster
/// leaves MAAS clean (no machine allocated to the test's user, no record
/// of the cluster, no new reserved address). Prints create → Ready time
/// and capmaas's MAAS requests per machine (BENCHMARKS.md "Real MAAS").
#[test]
fn the_readme_story_on_real_maas() {
    let Some(maas) =
        real_maas::world_with("the_readme_story_on_real_maas", real_maas::STORY_MACHINES)
    else {
        return;
    };
    let started = Instant::now();
    let admin = maas.admin_client();
    for record in cluster_records(maas) {
        // A killed run's (the world seeds machines, not records, afresh).
        admin
            .delete_dns_resource(record["id"].as_i64().expect("record id"))
            .expect("delete a stale record");
    }
    let reservations_before: BTreeSet<String> = admin
        .ip_reservations(None)
        .expect("reserved addresses")
        .into_iter()
        .map(|r| r.ip)
        .collect();
    let cp = support::control_plane();
    let upstream: SocketAddr = cp
        .server
        .trim_start_matches("https://")
        .parse()
        .expect("the test API server's address");
    let mut capi = CapiManager::start(cp);
    let ns = cp.new_namespace("story");
    let kube = story::kube_client(cp);
    let mut capmaas = Capmaas::start_with_maas(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        real_maas::URL,
        &maas.admin_key,
        cp.dir.join(format!("capmaas-{ns}.log")),
        // The default, written out: support's capmaas otherwise skips the
        // API check the story's simulated machines cannot answer.
        &[
            format!("--namespace={ns}"),
            "--dns-attach-without-api-check=false".into(),
        ],
    );
    capmaas.wait_ready(60);
    let ready_after = started.elapsed();
    let idle_requests = requests_by_operation(&capmaas);

    // Create: the user's objects, the machines played as MAAS deploys them.
    let created = Instant::now();
    cp.kubectl_stdin(
        &["apply", "--server-side", "--field-manager=story", "-f", "-"],
        &story_objects(cp, &ns, 2).to_string(),
    );
    let mut played: HashSet<String> = HashSet::new();
    let mut nudger = MachineNudger::default();
    let deadline = created + Duration::from_secs(360);
    let running =
        std::thread::scope(|scope| {
            let mut players = Vec::new();
            loop {
                capi.assert_running();
                capmaas.assert_running();
                // A player's panic fails the test now, not at the deadline.
                let (done, busy): (Vec<_>, Vec<_>) = players
                    .into_iter()
                    .partition(|p: &std::thread::ScopedJoinHandle<'_, ()>| p.is_finished());
                players = busy;
                for player in done {
                    if let Err(panic) = player.join() {
                        std::panic::resume_unwind(panic);
                    }
                }
                for m in admin
                    .machines(&MachineFilter::default())
                    .unwrap_or_default()
                {
                    if m.status == MachineStatus::Deploying && played.insert(m.system_id.clone()) {
                        players.push(scope.spawn(move || {
                            play_deployment(maas, cp, &m, upstream.port(), upstream)
                        }));
                    }
                }
                let snapshot = story::snapshot(&kube, &ns, None).ok();
                if snapshot.as_ref().is_some_and(story::Snapshot::all_ready) {
                    break created.elapsed();
                }
                assert!(
                    Instant::now() < deadline,
                    "the story not Running after 360 s:\n{}\n--- objects:\n{}",
                    snapshot.map(|s| s.table()).unwrap_or_default(),
                    cp.kubectl(&[
                        "get",
                        "machines,maasmachines,maasclusters",
                        "-n",
                        &ns,
                        "-o",
                        "wide"
                    ])
                );
                nudger.nudge(&kube, &ns);
                std::thread::sleep(Duration::from_secs(1));
            }
        });
    let running_requests = requests_by_operation(&capmaas);

    // Every Machine Running with its Node; providerIDs from real MAAS.
    let mut control_plane_ips = BTreeSet::new();
    for mm in kube_list(cp, &ns, "maasmachines") {
        let name = mm["metadata"]["name"].as_str().unwrap_or_default();
        let system_id = mm["spec"]["systemID"].as_str().expect("systemID");
        let zone = mm["spec"]["failureDomain"].as_str().expect("failureDomain");
        let provider_id = mm["spec"]["providerID"].as_str().expect("providerID");
        assert_eq!(provider_id, format!("maas:///{zone}/{system_id}"), "{name}");
        let machine = admin.machine(system_id).expect("its MAAS machine");
        assert_eq!(machine.status, MachineStatus::Deployed, "{name}");
        assert_eq!(machine.zone, zone, "{name}");
        assert_eq!(machine.owner.as_deref(), Some("admin"), "{name}");
        let node: Value =
            serde_json::from_str(&cp.kubectl(&["get", "node", &machine.hostname, "-o", "json"]))
                .expect("the Node");
        assert_eq!(node["spec"]["providerID"], provider_id, "{name}");
        if machine.pool == "cp-pool" {
            control_plane_ips.extend(machine.ip_addresses.iter().cloned());
        }
    }
    assert_eq!(control_plane_ips.len(), 3, "{control_plane_ips:?}");
    for machine in kube_list(cp, &ns, "machines.cluster.x-k8s.io") {
        assert_eq!(machine["status"]["phase"], "Running", "{machine}");
        assert!(
            machine["status"]["nodeRef"]["name"].is_string(),
            "{machine}"
        );
    }

    // The API record in real MAAS: the three control planes once their
    // API servers answer on their addresses.
    let mc = cp
        .get(&ns, "maasclusters", CLUSTER)
        .expect("the MaasCluster");
    let fqdn = mc["status"]["network"]["dnsName"]
        .as_str()
        .unwrap_or_else(|| panic!("no DNS name: {mc}"))
        .to_owned();
    assert!(fqdn.ends_with(&format!(".{DOMAIN}")), "{fqdn}");
    support::eventually(60, "the API record holds the 3 control planes", || {
        capmaas.assert_running();
        let records = admin.dns_resources(&fqdn).ok()?;
        let [record] = records.as_slice() else {
            return None;
        };
        let ips: BTreeSet<String> = record.ip_addresses.iter().cloned().collect();
        (ips == control_plane_ips).then_some(())
    });
    let dns_complete = created.elapsed();
    let cluster = support::eventually(120, "the Cluster's control plane initialized", || {
        capi.assert_running();
        let cluster = cp.get(&ns, "clusters.cluster.x-k8s.io", CLUSTER)?;
        (objects::condition_is(&cluster, "InfrastructureReady", "True")
            && objects::condition_is(&cluster, "ControlPlaneInitialized", "True")
            && objects::condition_is(&cluster, "RemoteConnectionProbe", "True"))
        .then_some(cluster)
    });
    support::eventually(60, "APIServerAvailable", || {
        let mc = cp.get(&ns, "maasclusters", CLUSTER)?;
        objects::condition_is(&mc, "APIServerAvailable", "True").then_some(())
    });
    println!(
        "Cluster Available: {}",
        objects::condition(&cluster, "Available")
            .cloned()
            .unwrap_or_default()
    );
    let (provision_requests, provision_detail) =
        requests_between(&idle_requests, &running_requests);
    // Each machine allocated and deployed once: no retry on real MAAS's
    // answers doubled a write.
    let added = |later: &BTreeMap<String, f64>, operation: &str| {
        later.get(operation).copied().unwrap_or(0.0)
            - idle_requests.get(operation).copied().unwrap_or(0.0)
    };
    for operation in ["allocate", "deploy"] {
        assert_eq!(
            added(&running_requests, operation),
            5.0,
            "{operation}: {provision_detail}"
        );
    }

    // Scale-down: workers 2 → 1, one machine released in real MAAS.
    let workers_before: BTreeSet<String> = owned_by_admin(maas)
        .into_iter()
        .filter(|m| m.pool == "worker-pool")
        .map(|m| m.system_id)
        .collect();
    assert_eq!(workers_before.len(), 2, "{workers_before:?}");
    let scaling = Instant::now();
    cp.kubectl(&[
        "patch",
        "machinedeployments.cluster.x-k8s.io",
        MD,
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":1}}"#,
    ]);
    let released = support::eventually(240, "one worker released in MAAS", || {
        capi.assert_running();
        capmaas.assert_running();
        let snapshot = story::snapshot(&kube, &ns, None).ok()?;
        (snapshot.md_replicas == Some(1) && snapshot.all_ready()).then_some(())?;
        let workers: BTreeSet<String> = owned_by_admin(maas)
            .into_iter()
            .filter(|m| m.pool == "worker-pool")
            .map(|m| m.system_id)
            .collect();
        let released: Vec<&String> = workers_before.difference(&workers).collect();
        match released.as_slice() {
            [one] if workers.len() == 1 => Some((*one).clone()),
            _ => None,
        }
    });
    let m = maas.wait_status(&released, "Ready", Duration::from_secs(60));
    assert_eq!(m["owner"], Value::Null, "{m}");
    assert_eq!(m["owner_data"], json!({}), "{m}");
    let scaled_down = scaling.elapsed();

    // Teardown: the Cluster deleted, MAAS left clean.
    let deleting = Instant::now();
    story::delete_no_wait(cp, &ns, "clusters.cluster.x-k8s.io", CLUSTER);
    support::eventually(300, "the Cluster and its objects gone", || {
        capi.assert_running();
        capmaas.assert_running();
        (cp.get(&ns, "clusters.cluster.x-k8s.io", CLUSTER).is_none()
            && cp.get(&ns, "maasclusters", CLUSTER).is_none()
            && kube_list(cp, &ns, "maasmachines").is_empty())
        .then_some(())
    });
    let deleted = deleting.elapsed();
    let all_requests = requests_by_operation(&capmaas);
    for (hostname, id) in &maas.machines {
        let m = maas.wait_status(id, "Ready", Duration::from_secs(60));
        assert_eq!(m["owner"], Value::Null, "{hostname}: {m}");
        assert_eq!(m["owner_data"], json!({}), "{hostname}: {m}");
    }
    let owned = owned_by_admin(maas);
    assert!(owned.is_empty(), "allocated to admin: {owned:?}");
    assert_eq!(
        maas.admin("GET", &format!("dnsresources/?fqdn={fqdn}"), &[]),
        json!([]),
        "the cluster's record is left"
    );
    assert_eq!(
        maas.admin("GET", &format!("dnsresourcerecords/?fqdn={fqdn}"), &[]),
        json!([]),
        "resource records of {fqdn} are left"
    );
    assert!(
        cluster_records(maas).is_empty(),
        "a {CLUSTER}- record is left"
    );
    let reservations_after: BTreeSet<String> = admin
        .ip_reservations(None)
        .expect("reserved addresses")
        .into_iter()
        .map(|r| r.ip)
        .collect();
    assert_eq!(
        reservations_after, reservations_before,
        "reserved addresses"
    );

    let (regiond, postgres) = maas.memory_kib();
    let (life_requests, life_detail) = requests_between(&idle_requests, &all_requests);
    for operation in ["allocate", "deploy", "release"] {
        assert_eq!(
            added(&all_requests, operation),
            5.0,
            "{operation}: {life_detail}"
        );
    }
    let mut report = std::io::stdout().lock();
    let _ = writeln!(
        report,
        "real MAAS story: capmaas ready {:.1} s after start; create -> every Machine Running {:.1} s, \
         API record complete {:.1} s; scale-down 2 -> 1 {:.1} s; deletion {:.1} s; whole test {:.1} s\n\
         MAAS requests create -> Running: {provision_requests} ({:.1} per machine): {provision_detail}\n\
         MAAS requests whole life: {life_requests} ({:.1} per machine): {life_detail}\n\
         real MAAS resident memory: regiond {:.0} MiB, PostgreSQL {:.0} MiB",
        ready_after.as_secs_f64(),
        running.as_secs_f64(),
        dns_complete.as_secs_f64(),
        scaled_down.as_secs_f64(),
        deleted.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        provision_requests / 5.0,
        life_requests / 5.0,
        regiond as f64 / 1024.0,
        postgres as f64 / 1024.0,
    );
}

fn kube_list(cp: &support::ControlPlane, ns: &str, kind: &str) -> Vec<Value> {
    let list: Value =
        serde_json::from_str(&cp.kubectl(&["get", kind, "-n", ns, "-o", "json"])).expect("a list");
    list["items"].as_array().cloned().unwrap_or_default()
}
