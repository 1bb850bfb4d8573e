//! The README cluster as users create it (`clusterctl generate cluster`:
//! a KubeadmControlPlane of 3, a MachineDeployment of 2 with kubeadm
//! bootstrap) against the real MAAS 3.4.8 region (issue 20 item 3), run by
//! the real Cluster API core, KCP and CABPK managers and `capmaas` at its
//! defaults, the machines booting into Cluster API's in-memory workload
//! clusters (workload-sim), as in the KCP lab (tests/support/kcp_lab.rs).
//!
//!     CI=true cargo test --test real_maas_kcp -- --nocapture
//!
//! Two processes. The outer one (on the host) owns the real MAAS world
//! (tests/support/real_maas.rs) and plays the machines' installation
//! through MAAS's metadata API as MAAS deploys them. The inner one runs in
//! a network namespace of its own (tests/support/netns.rs), like the KCP
//! lab, so that the workload clusters' API servers listen on the machines'
//! MAAS addresses and the API name resolves through MAAS's record. The
//! namespace reaches real MAAS through a Unix socket (sockets live in the
//! file system, which both share): inside, 127.0.0.1:5240 forwards to the
//! socket, and outside the socket forwards to real MAAS's 127.0.0.1:5240,
//! so MAAS's URL is the same on both sides. Inside, the test also answers
//! DNS from MAAS's DNS records (this MAAS runs no DNS server) and serves
//! workload-sim MAAS's machines in the simulator's `/_sim/state` shape.
//!
//! Needs `../shared/real-maas` (or `$CAPMAAS_SHARED/real-maas`) and root;
//! elsewhere it says why it skips, and under `CI=true` it fails.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capmaas::maas::{ApiKey, Client, ClientConfig, MaasApi, Machine, MachineFilter, MachineStatus};
use serde_json::{json, Value};
use support::capi::{CapiManager, FeatureGates, Provider};
use support::kcp_lab::{self, MaasView, Snapshot, CLUSTER, MD};
use support::netns::{self, Network};
use support::real_maas::{self, RealMaas, DOMAIN};
use support::story::{self, Capmaas};
use support::workload_sim::WorkloadSim;

const TEST: &str = "the_readme_cluster_with_kcp_on_real_maas";
/// Where the test answers DNS inside the namespace (loopback, outside the
/// world's machine subnet 127.11.130.0/24).
const NAMESERVER: &str = "127.11.131.53";
const MAAS_PORT: u16 = 5240;
const CONTROL_PLANES: u64 = 3;
const WORKERS: u64 = 2;

fn network() -> Network {
    Network {
        prefix: "capmaas-rmkcp",
        nameserver: NAMESERVER.into(),
        addresses: vec![NAMESERVER.into()],
    }
}

/// Shared by the two processes: `sock` (the bridge to real MAAS) and `key`
/// (MAAS's admin key).
fn bridge_dir(namespace: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{namespace}-maas"))
}

#[test]
fn the_readme_cluster_with_kcp_on_real_maas() {
    match netns::current() {
        Some(namespace) => inside(&namespace),
        None => outside(),
    }
}

// ---------------------------------------------------------------------------
// The outer process: real MAAS, the bridge's host end, the machines.

fn outside() {
    if let Err(why) = netns::can_create() {
        // run_inside says why it skips (and fails under CI).
        assert!(netns::run_inside(TEST, &network()).is_none(), "{why}");
        return;
    }
    let Some(maas) = real_maas::world_with(TEST, real_maas::STORY_MACHINES) else {
        return;
    };
    let dir = bridge_dir(&netns::name(&network()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the bridge directory");
    std::fs::write(dir.join("key"), &maas.admin_key).expect("writing the key for the inner run");
    serve_unix_to_tcp(&dir.join("sock"), ([127, 0, 0, 1], MAAS_PORT).into());
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let player = scope.spawn(|| play_machines(maas, &done));
        let stop = SetOnDrop(&done);
        let inner = std::panic::catch_unwind(|| netns::run_inside(TEST, &network()));
        drop(stop);
        let played = player.join();
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(panic) = inner {
            std::panic::resume_unwind(panic);
        }
        if let Err(panic) = played {
            std::panic::resume_unwind(panic);
        }
        // What real MAAS holds after a cluster's whole life: the measure of
        // what running MAAS costs beside capmaas (BENCHMARKS.md).
        let (regiond, postgres) = maas.memory_kib();
        println!(
            "real MAAS resident memory: regiond {:.0} MiB, PostgreSQL {:.0} MiB",
            regiond as f64 / 1024.0,
            postgres as f64 / 1024.0,
        );
    });
}

struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The machines' side of each deployment MAAS starts: curtin's install and
/// the first boot (MAAS marks it Deployed, the BMC reports on). Booting the
/// node is workload-sim's, inside.
fn play_machines(maas: &'static RealMaas, done: &AtomicBool) {
    let admin = maas.admin_client();
    let mut played: HashSet<String> = HashSet::new();
    std::thread::scope(|scope| {
        while !done.load(Ordering::Relaxed) {
            for m in admin
                .machines(&MachineFilter::default())
                .unwrap_or_default()
            {
                match m.status {
                    MachineStatus::Deploying => {
                        if played.insert(m.system_id.clone()) {
                            scope.spawn(move || {
                                maas.complete_deployment(&m.system_id);
                                println!(
                                    "played the deployment of {} ({})",
                                    m.hostname, m.system_id
                                );
                            });
                        }
                    }
                    MachineStatus::Deployed => {}
                    // Released: a later deployment is played again.
                    _ => {
                        played.remove(&m.system_id);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
}

// ---------------------------------------------------------------------------
// The bridge: TCP and Unix sockets spliced.

trait Stream: Read + Write + Send + Sized + 'static {
    fn clone_stream(&self) -> std::io::Result<Self>;
    fn close_write(&self);
}

impl Stream for TcpStream {
    fn clone_stream(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn close_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Stream for UnixStream {
    fn clone_stream(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
    fn close_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Copies both ways until both sides closed.
fn splice<A: Stream, B: Stream>(a: A, b: B) {
    let (Ok(mut from_a), Ok(mut to_b)) = (a.clone_stream(), b.clone_stream()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_a, &mut to_b);
        to_b.close_write();
    });
    let (mut from_b, mut to_a) = (b, a);
    let _ = std::io::copy(&mut from_b, &mut to_a);
    to_a.close_write();
    let _ = up.join();
}

/// Host side: what connects to `socket` reaches `upstream`.
fn serve_unix_to_tcp(socket: &Path, upstream: SocketAddr) {
    let listener = UnixListener::bind(socket)
        .unwrap_or_else(|e| panic!("listening on {}: {e}", socket.display()));
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            std::thread::spawn(move || {
                if let Ok(server) = TcpStream::connect(upstream) {
                    splice(client, server);
                }
            });
        }
    });
}

/// Namespace side: what connects to `address` reaches `socket`.
fn serve_tcp_to_unix(address: SocketAddr, socket: PathBuf) {
    let listener = TcpListener::bind(address)
        .unwrap_or_else(|e| panic!("listening on {address} for the MAAS bridge: {e}"));
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let socket = socket.clone();
            std::thread::spawn(move || {
                if let Ok(server) = UnixStream::connect(&socket) {
                    splice(client, server);
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------
// Inside: DNS from MAAS's records, machines for workload-sim.

fn client(key: &str) -> Client {
    let mut config =
        ClientConfig::new(real_maas::URL, ApiKey::parse(key).expect("MAAS key parses"));
    config.timeout = Duration::from_secs(60);
    config.max_retries = 1;
    Client::new(config).expect("client")
}

/// `GET api/2.0/PATH` as admin.
fn maas_get(key: &str, path: &str) -> Result<Value, String> {
    let url = format!("{}/api/2.0/{path}", real_maas::URL);
    ureq::get(&url)
        .header("Authorization", real_maas::oauth_header(key))
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?
        .body_mut()
        .read_json::<Value>()
        .map_err(|e| format!("GET {url}: {e}"))
}

/// Answers A queries for the names MAAS has DNS records of in [`DOMAIN`]
/// (what MAAS's bind serves), NXDOMAIN for others, no answer of other
/// types. The records are read from MAAS every half second, not per query:
/// every client here resolves the API name often, and MAAS on two busy
/// cores would make them time out.
fn serve_dns(address: &str, key: String) {
    let socket = UdpSocket::bind((address, 53))
        .unwrap_or_else(|e| panic!("listening for DNS on {address}:53: {e}"));
    let records: Arc<Mutex<BTreeMap<String, Vec<Ipv4Addr>>>> = Arc::default();
    let known = records.clone();
    std::thread::spawn(move || loop {
        if let Ok(now) = dns_records(&key) {
            let by_name = now
                .into_iter()
                .map(|(fqdn, ips)| (fqdn, ips.iter().filter_map(|ip| ip.parse().ok()).collect()))
                .collect();
            *known.lock().unwrap_or_else(|e| e.into_inner()) = by_name;
        }
        std::thread::sleep(Duration::from_millis(500));
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let lookup = |name: &str| -> Option<Vec<Ipv4Addr>> {
                let records = records.lock().unwrap_or_else(|e| e.into_inner());
                records.get(name).filter(|ips| !ips.is_empty()).cloned()
            };
            if let Some(answer) = dns_answer(&buf[..n], lookup) {
                let _ = socket.send_to(&answer, peer);
            }
        }
    });
}

/// The response to one DNS query (RFC 1035 §4), `lookup` naming the
/// addresses of a name (None: no such name).
fn dns_answer(query: &[u8], lookup: impl Fn(&str) -> Option<Vec<Ipv4Addr>>) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return None;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + len)?).to_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let question_end = at + 4;
    let mut out = query.get(..question_end)?.to_vec();
    let found = lookup(&labels.join("."));
    // QR, the query's opcode and RD, AA; RA, NOERROR or NXDOMAIN.
    out[2] = 0x80 | (query[2] & 0x79) | 0x04;
    out[3] = 0x80 | if found.is_some() { 0 } else { 3 };
    let answers = if qtype == 1 {
        found.unwrap_or_default()
    } else {
        Vec::new()
    };
    out[4..6].copy_from_slice(&1u16.to_be_bytes());
    out[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
    out[8..12].fill(0);
    for ip in answers {
        // The question's name, A, IN, TTL 0, 4 bytes.
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
        out.extend_from_slice(&ip.octets());
    }
    Some(out)
}

/// MAAS's machines in the shape workload-sim reads (the simulator's GET
/// /_sim/state), read at most once a second; → the base URL.
fn serve_machine_state(maas: Client) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listening for workload-sim");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    let cache: Arc<Mutex<Option<(Instant, String)>>> = Arc::default();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let maas = maas.clone();
            let cache = cache.clone();
            std::thread::spawn(move || {
                // The request: its head is all there is (GET).
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let body = {
                    let mut cached = cache.lock().unwrap_or_else(|e| e.into_inner());
                    match cached.as_ref() {
                        Some((at, body)) if at.elapsed() < Duration::from_secs(1) => {
                            Some(body.clone())
                        }
                        _ => maas.machines(&MachineFilter::default()).ok().map(|ms| {
                            let body = machine_state(&ms).to_string();
                            *cached = Some((Instant::now(), body.clone()));
                            body
                        }),
                    }
                };
                let response = match body {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
                };
                let _ = stream.write_all(response.as_bytes());
            });
        }
    });
    base
}

fn machine_state(machines: &[Machine]) -> Value {
    let machines: Vec<Value> = machines
        .iter()
        .map(|m| {
            json!({
                "system_id": m.system_id,
                "hostname": m.hostname,
                "status_name": m.status_name,
                "power_state": m.power_state.as_str(),
                "ip_addresses": m.ip_addresses,
            })
        })
        .collect();
    json!({ "machines": machines })
}

/// MAAS's DNS records in [`DOMAIN`]: (fqdn, addresses).
fn dns_records(key: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    Ok(maas_get(key, &format!("dnsresources/?domain={DOMAIN}"))?
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let ips = d["ip_addresses"].as_array().into_iter().flatten();
            let ips = ips.filter_map(|ip| ip["ip"].as_str().or(ip.as_str()));
            (
                d["fqdn"].as_str().unwrap_or_default().to_owned(),
                ips.map(str::to_owned).collect(),
            )
        })
        .collect())
}

/// Real MAAS as the lab's snapshot reads it.
fn maas_view(maas: &Client, key: &str) -> Result<MaasView, String> {
    let mut machines: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in maas
        .machines(&MachineFilter::default())
        .map_err(|e| e.to_string())?
    {
        machines.entry(m.status_name).or_default().push(m.hostname);
    }
    let records = dns_records(key)?;
    Ok(MaasView { machines, records })
}

// ---------------------------------------------------------------------------
// Inside: the story.

/// capmaas's `maas_api_requests_total` by operation, summed over codes.
fn requests_by_operation(capmaas: &Capmaas) -> BTreeMap<String, f64> {
    let mut by_operation = BTreeMap::new();
    for (key, value) in capmaas.metrics() {
        let Some(labels) = key.strip_prefix("maas_api_requests_total{") else {
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

/// What `later` adds to `earlier`: (total, by operation).
fn requests_between(
    earlier: &BTreeMap<String, f64>,
    later: &BTreeMap<String, f64>,
) -> (f64, BTreeMap<String, f64>) {
    let added: BTreeMap<String, f64> = later
        .iter()
        .map(|(op, n)| (op.clone(), n - earlier.get(op).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    (added.values().sum(), added)
}

struct Lab {
    workloads: WorkloadSim,
    capmaas: Capmaas,
    cabpk: CapiManager,
    kcp: CapiManager,
    capi: CapiManager,
    cp: &'static support::ControlPlane,
    kube: capmaas::kube::Client,
    maas: Client,
    key: String,
    ns: String,
}

impl Lab {
    fn snapshot(&self) -> Result<Snapshot, String> {
        let view = maas_view(&self.maas, &self.key)?;
        kcp_lab::snapshot_with(&self.kube, &self.ns, &view, &self.workloads)
    }

    fn wait_until(
        &mut self,
        seconds: u64,
        what: &str,
        done: impl Fn(&Snapshot) -> bool,
    ) -> Snapshot {
        let started = Instant::now();
        let mut last: Option<Snapshot> = None;
        loop {
            self.capi.assert_running();
            self.kcp.assert_running();
            self.cabpk.assert_running();
            self.capmaas.assert_running();
            self.workloads.assert_running();
            match self.snapshot() {
                Ok(s) => {
                    if last.as_ref() != Some(&s) {
                        println!(
                            "\n[{:>6.1}s]\n{}",
                            started.elapsed().as_secs_f64(),
                            s.table()
                        );
                    }
                    if done(&s) {
                        println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
                        return s;
                    }
                    last = Some(s);
                }
                Err(e) => println!("reading the lab: {e}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(seconds),
                "timed out after {seconds}s waiting for {what}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn diagnostics(&self) -> String {
        let objects = self.cp.try_kubectl(
            &[
                "get",
                "clusters,kubeadmcontrolplanes,machinedeployments,machines,maasclusters,maasmachines",
                "-n",
                &self.ns,
                "-o",
                "wide",
            ],
            "",
        );
        let mut out = format!("--- objects:\n{}", objects.unwrap_or_else(|e| e));
        for (name, log) in [
            ("core manager", self.capi.log_tail(25)),
            ("KCP manager", self.kcp.log_tail(25)),
            ("capmaas", story::tail(&self.capmaas.log, 25)),
            ("workload-sim", self.workloads.log_tail(25)),
        ] {
            out.push_str(&format!("\n--- {name}:\n{log}"));
        }
        out
    }

    fn owned(&self) -> Vec<Machine> {
        self.maas
            .machines(&MachineFilter {
                owner: Some("admin".into()),
                ..MachineFilter::default()
            })
            .expect("machines owned by admin")
    }
}

fn inside(namespace: &str) {
    let started = Instant::now();
    let bridge = bridge_dir(namespace);
    let key = std::fs::read_to_string(bridge.join("key"))
        .expect("the outer run's MAAS key")
        .trim()
        .to_owned();
    serve_tcp_to_unix(([127, 0, 0, 1], MAAS_PORT).into(), bridge.join("sock"));
    let maas = client(&key);
    maas.machines(&MachineFilter::default())
        .expect("real MAAS answers through the bridge");
    for record in maas_view(&maas, &key).expect("MAAS's records").records {
        // A killed run's (the world seeds machines, not records, afresh).
        if record.0.starts_with(&format!("{CLUSTER}-")) {
            for r in maas.dns_resources(&record.0).expect("the stale record") {
                maas.delete_dns_resource(r.id)
                    .expect("delete a stale record");
            }
        }
    }
    let reservations = |maas: &Client| -> BTreeSet<String> {
        maas.ip_reservations(None)
            .expect("reserved addresses")
            .into_iter()
            .map(|r| r.ip)
            .collect()
    };
    let reservations_before = reservations(&maas);
    serve_dns(NAMESERVER, key.clone());
    let state = serve_machine_state(maas.clone());

    let dir = support::tempdir("real-maas-kcp").expect("the lab directory");
    let cp = support::control_plane();
    let gates = FeatureGates::default();
    let capi = CapiManager::start_provider_with(cp, Provider::Core, gates);
    let kcp = CapiManager::start_provider_with(cp, Provider::KubeadmControlPlane, gates);
    let cabpk = CapiManager::start_provider_with(cp, Provider::KubeadmBootstrap, gates);
    let mut capmaas = Capmaas::start_with_maas(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        real_maas::URL,
        &key,
        dir.join("capmaas.log"),
        // The default, written out: support's capmaas otherwise skips the
        // API check; these machines serve their API.
        &["--dns-attach-without-api-check=false".to_string()],
    );
    capmaas.wait_ready(60);
    let workloads = WorkloadSim::start_with_state(cp, &state, &dir);
    let ns = cp.new_namespace("kcp");
    let mut lab = Lab {
        workloads,
        capmaas,
        cabpk,
        kcp,
        capi,
        cp,
        kube: story::kube_client(cp),
        maas,
        key,
        ns,
    };
    let lab_up = started.elapsed();
    println!(
        "lab up in {:.1}s, dir {}",
        lab_up.as_secs_f64(),
        dir.display()
    );

    // The README cluster, as clusterctl renders it for this MAAS.
    let yaml = kcp_lab::render_flavor_in(
        &dir,
        &lab.ns,
        None,
        CONTROL_PLANES as usize,
        WORKERS as usize,
        &[
            ("MAAS_DNS_DOMAIN", DOMAIN),
            ("CONTROL_PLANE_MACHINE_RESOURCEPOOL", "cp-pool"),
            ("WORKER_MACHINE_RESOURCEPOOL", "worker-pool"),
        ],
    );
    let idle_requests = requests_by_operation(&lab.capmaas);
    let creating = Instant::now();
    lab.cp.kubectl_stdin(&["apply", "-f", "-"], &yaml);
    let ready = lab.wait_until(
        300,
        "KCP 3/3 ready, 2 workers, 5 Machines Running, the MAAS record = control-plane IPs",
        |s| s.all_ready(CONTROL_PLANES, WORKERS),
    );
    let running = creating.elapsed();
    let (provision_requests, provision_detail) =
        requests_between(&idle_requests, &requests_by_operation(&lab.capmaas));
    let cluster = support::eventually(120, "the Cluster Available", || {
        let cluster = lab.cp.get(&lab.ns, "clusters.cluster.x-k8s.io", CLUSTER)?;
        support::objects::condition_is(&cluster, "Available", "True").then_some(cluster)
    });
    let available = creating.elapsed();
    assert!(
        support::objects::condition_is(&cluster, "ControlPlaneAvailable", "True")
            || support::objects::condition_is(&cluster, "ControlPlaneInitialized", "True"),
        "{cluster}"
    );
    assert_eq!(
        ready.control_plane.available_condition,
        "True",
        "{}",
        ready.table()
    );

    // Every Machine on a deployed MAAS machine, its providerID real MAAS's.
    for m in &ready.machines {
        let (zone, system_id) = m
            .provider_id
            .strip_prefix("maas:///")
            .and_then(|rest| rest.split_once('/'))
            .unwrap_or_else(|| panic!("{}: providerID {}", m.name, m.provider_id));
        let machine = lab.maas.machine(system_id).expect("its MAAS machine");
        assert_eq!(machine.status, MachineStatus::Deployed, "{}", m.name);
        assert_eq!(machine.zone, zone, "{}", m.name);
        assert_eq!(machine.hostname, m.node, "{}", m.name);
        let pool = if m.control_plane {
            "cp-pool"
        } else {
            "worker-pool"
        };
        assert_eq!(machine.pool, pool, "{}", m.name);
    }
    // The API name: MAAS's record holds the three control planes, and it
    // resolves to them.
    let cp_ips = ready.control_plane_ips();
    assert_eq!(cp_ips.len(), 3, "{}", ready.table());
    let host = {
        let cluster = lab
            .cp
            .get(&lab.ns, "clusters.cluster.x-k8s.io", CLUSTER)
            .expect("Cluster");
        cluster["spec"]["controlPlaneEndpoint"]["host"]
            .as_str()
            .expect("controlPlaneEndpoint.host")
            .to_owned()
    };
    assert!(host.ends_with(&format!(".{DOMAIN}")), "{host}");
    let records = lab.maas.dns_resources(&host).expect("the API record");
    let [record] = records.as_slice() else {
        panic!("{host}: {records:?}");
    };
    let recorded: BTreeSet<String> = record.ip_addresses.iter().cloned().collect();
    assert_eq!(recorded, cp_ips, "{host} in MAAS");
    assert_eq!(
        kcp_lab::resolve(&host).expect("resolving"),
        cp_ips,
        "{host}"
    );

    // Scale-down: workers 2 → 1, one machine released in real MAAS.
    let workers_before: BTreeSet<String> = lab
        .owned()
        .into_iter()
        .filter(|m| m.pool == "worker-pool")
        .map(|m| m.system_id)
        .collect();
    assert_eq!(workers_before.len(), 2, "{workers_before:?}");
    let scaling = Instant::now();
    lab.cp.kubectl(&[
        "patch",
        "machinedeployments.cluster.x-k8s.io",
        MD,
        "-n",
        &lab.ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":1}}"#,
    ]);
    lab.wait_until(180, "3 + 1 Running, one worker released in MAAS", |s| {
        s.all_ready(CONTROL_PLANES, 1) && s.maas.get("Ready").map_or(0, Vec::len) == 1
    });
    let workers: BTreeSet<String> = lab
        .owned()
        .into_iter()
        .filter(|m| m.pool == "worker-pool")
        .map(|m| m.system_id)
        .collect();
    let released: Vec<&String> = workers_before.difference(&workers).collect();
    let [released] = released.as_slice() else {
        panic!("released {released:?} of {workers_before:?}");
    };
    let m = lab.maas.machine(released).expect("the released machine");
    assert_eq!(m.status, MachineStatus::Ready, "{m:?}");
    assert_eq!(m.owner, None, "{m:?}");
    assert!(m.owner_data.is_empty(), "{m:?}");
    let scaled_down = scaling.elapsed();

    // Teardown: the Cluster deleted, real MAAS left clean.
    let deleting = Instant::now();
    story::delete_no_wait(lab.cp, &lab.ns, "clusters.cluster.x-k8s.io", CLUSTER);
    lab.wait_until(
        240,
        "Cluster deleted: no Machines, every MAAS machine Ready, no record",
        |s| {
            !s.cluster_exists
                && s.machines.is_empty()
                && s.maas.keys().all(|status| status == "Ready")
                && s.dns_records.is_empty()
        },
    );
    let deleted = deleting.elapsed();
    // Each machine allocated, deployed and released once: no retry on real
    // MAAS's answers doubled a write.
    let (life_requests, life_detail) =
        requests_between(&idle_requests, &requests_by_operation(&lab.capmaas));
    for operation in ["allocate", "deploy", "release"] {
        assert_eq!(
            life_detail.get(operation).copied().unwrap_or(0.0),
            5.0,
            "{operation}: {life_detail:?}"
        );
    }
    let owned = lab.owned();
    assert!(owned.is_empty(), "allocated to admin: {owned:?}");
    for m in lab
        .maas
        .machines(&MachineFilter::default())
        .expect("machines")
    {
        assert!(
            m.owner_data.is_empty(),
            "{}: {:?}",
            m.hostname,
            m.owner_data
        );
    }
    assert_eq!(
        lab.maas.dns_resources(&host).expect("records"),
        vec![],
        "the cluster's record is left"
    );
    // MAAS keeps TXT and other records of a name apart from its addresses:
    // none of the API name's may outlive the cluster either.
    assert_eq!(
        maas_get(&lab.key, &format!("dnsresourcerecords/?fqdn={host}")),
        Ok(json!([])),
        "resource records of {host} are left"
    );
    assert_eq!(
        reservations(&lab.maas),
        reservations_before,
        "reserved addresses"
    );
    println!(
        "real MAAS KCP story: lab up {:.1} s; create -> 5 Machines Running {:.1} s, Cluster Available {:.1} s; \
         scale-down 2 -> 1 {:.1} s; deletion {:.1} s; inner run {:.1} s\n\
         MAAS requests create -> Running: {provision_requests} ({:.1} per machine): {provision_detail:?}\n\
         MAAS requests whole life: {life_requests} ({:.1} per machine): {life_detail:?}",
        lab_up.as_secs_f64(),
        running.as_secs_f64(),
        available.as_secs_f64(),
        scaled_down.as_secs_f64(),
        deleted.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        provision_requests / 5.0,
        life_requests / 5.0,
    );
}
