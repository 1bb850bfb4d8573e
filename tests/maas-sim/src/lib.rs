//! maas-sim: a MAAS 2.0 API simulator for capmaas's tests and local lab.
//! Its own package, not part of the product, with its own MAAS model: it
//! shares no code with capmaas's client, so a wrong belief in the client is
//! not copied into the simulator that is meant to catch it.
//!
//! It answers like real MAAS 3.x (paths, `op` dispatch, OAuth PLAINTEXT with
//! nonce and timestamp checks, status codes and bodies from maas-api.md and
//! canonical/maas's source, cited where each behaviour is implemented) for
//! the calls a Cluster API provider makes, and keeps a machine state
//! machine: Ready → Allocated → Deploying → Deployed (after
//! `deploy_seconds`), release → Releasing / Disk erasing → Ready, with the
//! event log MAAS records on the way (`GET events/?op=query`: curtin's
//! stages spread over the deployment). Time moves lazily: what falls due
//! happens when the next request looks, stamped with the time it was due.
//! As real MAAS 3.4.8 does (held to it by tests/real_maas.rs), a deploy
//! answer shows the power as stored and no AUTO address yet: MAAS claims
//! those after answering, and the power turns `on` when the BMC confirms
//! it (never for power type `manual`).
//!
//! ```text
//! let server = maas_sim::start("127.0.0.1:0", Inventory::default_story())?;
//! server.base_url()   // http://127.0.0.1:PORT/MAAS
//! drop(server)        // stops it: closes every connection, joins every thread
//! ```
//! The `maas-sim` binary (`src/main.rs`) serves the same from the command
//! line ([`Options::from_args`]). Test controls live under `/_sim/` (see
//! [`control`]). Fault rules ([`Fault`]) match on method, endpoint pattern
//! (`machines/{id}/`) and op, and inject status codes (with `Retry-After`),
//! latency, or dropped connections before or after the request takes effect.

mod api;
pub mod control;
pub mod dns;
mod http;
pub mod inventory;
mod render;
pub mod status;
mod world;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use inventory::{Inventory, DEFAULT_INVENTORY};
pub use world::Fault;

use api::Route;
use http::{Reply, Request, Response};
use world::World;

const API_PREFIX: &str = "/MAAS/api/2.0/";
const SIM_PREFIX: &str = "/_sim/";

pub const USAGE: &str =
    "usage: maas-sim [--listen ADDR] [--dns-listen ADDR] [--inventory FILE] [--deploy-seconds N] [--release-seconds N]

Serves a simulated MAAS 2.0 API under /MAAS/api/2.0/ and test controls under /_sim/.

  --listen ADDR          address to bind (default 127.0.0.1:5240; port 0 picks a free port)
  --dns-listen ADDR      also serve MAAS's DNS records (UDP and TCP) on ADDR, e.g.
                         127.0.0.1:5353 (off by default; port 0 picks a free port)
  --inventory FILE       inventory JSON (default: the built-in story inventory)
  --deploy-seconds N     Deploying -> Deployed after N seconds (default: inventory, else 10)
  --release-seconds N    Releasing -> Ready after N seconds (default: inventory, else 2)
  --print-default-inventory   print the built-in inventory and exit

The first stdout line is the base URL, e.g. http://127.0.0.1:40123/MAAS; with
--dns-listen the second is the DNS address, e.g. dns 127.0.0.1:40124";

/// What to serve and where.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address for the HTTP API, e.g. `127.0.0.1:0` (a free port).
    pub listen: String,
    /// Address for the DNS responder (UDP and TCP); None: no DNS.
    pub dns_listen: Option<String>,
    pub inventory: Inventory,
    /// Override the inventory's `settings.deploy_seconds`.
    pub deploy_seconds: Option<f64>,
    /// Override the inventory's `settings.release_seconds`.
    pub release_seconds: Option<f64>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    Serve(Box<Options>),
    PrintDefaultInventory,
    Help,
}

impl Options {
    /// The story inventory on `127.0.0.1:0`.
    pub fn new() -> Options {
        Options {
            listen: "127.0.0.1:0".into(),
            dns_listen: None,
            inventory: Inventory::default_story(),
            deploy_seconds: None,
            release_seconds: None,
        }
    }

    /// Parses the binary's arguments (without the program name). Tests use
    /// it too, so that `["--deploy-seconds", "0.5"]` means the same in
    /// process as on the command line.
    pub fn from_args<I, S>(args: I) -> Result<Command, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut listen = "127.0.0.1:5240".to_owned();
        let mut dns_listen = None;
        let mut inventory_file = None;
        let mut deploy_seconds = None;
        let mut release_seconds = None;
        let mut args = args.into_iter().map(|a| a.as_ref().to_owned());
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
            };
            match arg.as_str() {
                "--listen" => listen = value("--listen")?,
                "--dns-listen" => dns_listen = Some(value("--dns-listen")?),
                "--inventory" => inventory_file = Some(value("--inventory")?),
                "--deploy-seconds" => deploy_seconds = Some(seconds(&value("--deploy-seconds")?)?),
                "--release-seconds" => {
                    release_seconds = Some(seconds(&value("--release-seconds")?)?)
                }
                "--print-default-inventory" => return Ok(Command::PrintDefaultInventory),
                "-h" | "--help" => return Ok(Command::Help),
                other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
            }
        }
        let inventory = match &inventory_file {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
                Inventory::from_json(&text).map_err(|e| format!("{path}: {e}"))?
            }
            None => Inventory::from_json(DEFAULT_INVENTORY)?,
        };
        Ok(Command::Serve(Box::new(Options {
            listen,
            dns_listen,
            inventory,
            deploy_seconds,
            release_seconds,
        })))
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

fn seconds(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(n) if n >= 0.0 && n.is_finite() => Ok(n),
        _ => Err(format!("invalid number of seconds {v:?}")),
    }
}

/// A running simulator. Dropping it stops it (see [`Server::shutdown`]).
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    dns: Option<dns::DnsServer>,
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the DNS responder listens (UDP and TCP), if it was asked for.
    pub fn dns_addr(&self) -> Option<SocketAddr> {
        self.dns.as_ref().map(|d| d.addr)
    }

    /// What users would put in MAAS_ENDPOINT: `http://127.0.0.1:PORT/MAAS`.
    pub fn base_url(&self) -> String {
        format!("http://{}/MAAS", self.addr)
    }

    /// Blocks while the server runs (forever, unless accepting fails).
    pub fn wait(mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }

    /// Stops accepting, closes every open connection (clients see the
    /// server go away, as when a MAAS region stops), cuts injected
    /// latencies short and joins every thread the server started.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.wake_sleepers();
        if let Some(dns) = self.dns.take() {
            dns.join();
        }
        // The acceptor blocks in accept(): one connection wakes it. If even
        // that fails, the thread is left behind rather than hanging here.
        if TcpStream::connect_timeout(&loopback_of(self.addr), Duration::from_secs(2)).is_ok() {
            let _ = accept.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where to connect to reach a listener bound to `addr` (an unspecified
/// address is reached on loopback).
fn loopback_of(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

struct Shared {
    world: Mutex<World>,
    stopping: AtomicBool,
    /// Open connections by id, so that a stop can close them.
    open: Mutex<HashMap<u64, TcpStream>>,
    next_connection: AtomicU64,
    /// Sleeps (injected latency) wait on this, so that a stop ends them.
    sleepers: (Mutex<()>, Condvar),
}

impl Shared {
    fn world(&self) -> MutexGuard<'_, World> {
        // A handler panic leaves a consistent-enough world for a simulator.
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps for `duration`, or less if the server stops.
    fn pause(&self, duration: Duration) {
        let deadline = Instant::now() + duration;
        let mut guard = self.sleepers.0.lock().unwrap_or_else(|p| p.into_inner());
        while !self.stopping.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            guard = match self.sleepers.1.wait_timeout(guard, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    fn wake_sleepers(&self) {
        let _guard = self.sleepers.0.lock().unwrap_or_else(|p| p.into_inner());
        self.sleepers.1.notify_all();
    }
}

/// Binds `listen` and serves the inventory in background threads.
pub fn start(listen: &str, inventory: Inventory) -> io::Result<Server> {
    start_with(Options {
        listen: listen.to_owned(),
        dns_listen: None,
        inventory,
        deploy_seconds: None,
        release_seconds: None,
    })
}

/// Starts a simulator as `options` say.
pub fn start_with(options: Options) -> io::Result<Server> {
    let mut inventory = options.inventory;
    if let Some(n) = options.deploy_seconds {
        inventory.settings.deploy_seconds = n;
    }
    if let Some(n) = options.release_seconds {
        inventory.settings.release_seconds = n;
    }
    let world =
        World::new(inventory).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let listener = TcpListener::bind(&options.listen)?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        world: Mutex::new(world),
        stopping: AtomicBool::new(false),
        open: Mutex::new(HashMap::new()),
        next_connection: AtomicU64::new(0),
        sleepers: (Mutex::new(()), Condvar::new()),
    });
    let dns = match &options.dns_listen {
        Some(listen) => Some(dns::DnsServer::start(listen, &shared)?),
        None => None,
    };
    let accept_shared = Arc::clone(&shared);
    let accept = std::thread::Builder::new()
        .name("maas-sim-accept".into())
        .spawn(move || accept_loop(&listener, &accept_shared))?;
    Ok(Server {
        addr,
        shared,
        accept: Some(accept),
        dns,
    })
}

/// Accepts until stopped, one thread per connection; on stop closes every
/// connection and joins their threads.
fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        threads.retain(|t| !t.is_finished());
        shared.world().connections += 1;
        let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = stream.try_clone() {
            shared.open().insert(id, clone);
        }
        let conn_shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("maas-sim-conn".into())
            .spawn(move || {
                http::serve_connection(stream, &|req| handle(&conn_shared, req));
                conn_shared.open().remove(&id);
            });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(_) => {
                shared.open().remove(&id);
            }
        }
    }
    for (_, stream) in shared.open().drain() {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    for thread in threads {
        let _ = thread.join();
    }
}

/// One request, start to finish.
fn handle(shared: &Shared, req: Request) -> Reply {
    if let Some(rel) = req.path.strip_prefix(SIM_PREFIX) {
        let mut world = shared.world();
        world.advance(Instant::now());
        return Reply::Send(control::handle(&mut world, &req, rel));
    }
    match req.path.as_str() {
        "/MAAS/api/version/" => return Reply::Send(Response::text(200, "2.0")),
        p if p.starts_with("/MAAS/api/1.0/") => return Reply::Send(Response::text(410, "Gone")),
        _ => {}
    }
    let Some(rel) = req.path.strip_prefix(API_PREFIX).map(str::to_owned) else {
        if req.path == "/MAAS/api/2.0" {
            return Reply::Send(redirect_with_slash(&req));
        }
        return Reply::Send(Response::html(404, "<h1>Not Found</h1>"));
    };
    // Django's APPEND_SLASH: a slash-less path gets a 301, which loses a
    // POST body. Real clients must send the slash; so must ours.
    if !rel.is_empty() && !rel.ends_with('/') {
        return Reply::Send(redirect_with_slash(&req));
    }
    let route = Route::parse(&rel);
    let form = if matches!(req.method.as_str(), "POST" | "PUT") {
        req.form()
    } else {
        Vec::new()
    };
    let op = req
        .query
        .iter()
        .chain(form.iter())
        .find(|(k, _)| k == "op")
        .map(|(_, v)| v.clone());
    let params: Vec<(String, String)> = if matches!(req.method.as_str(), "POST" | "PUT") {
        form.into_iter().filter(|(k, _)| k != "op").collect()
    } else {
        req.query
            .iter()
            .filter(|(k, _)| k != "op")
            .cloned()
            .collect()
    };
    let key = match &op {
        Some(op) => format!("{} {} op={op}", req.method, route.pattern),
        None => format!("{} {}", req.method, route.pattern),
    };

    // Every API call takes at least the configured latency (a MAAS region
    // far away, or busy), outside the lock.
    let latency = shared.world().settings.latency_ms;
    if latency > 0 {
        shared.pause(Duration::from_millis(latency));
        if shared.stopping.load(Ordering::SeqCst) {
            return Reply::Drop;
        }
    }

    // Count, authenticate, pick a fault: one short critical section.
    let (user, fault) = {
        let mut world = shared.world();
        *world.calls.entry(key).or_insert(0) += 1;
        if route.pattern == "version/" {
            return Reply::Send(Response::json(
                200,
                &serde_json::json!({"capabilities": ["networks-management", "static-ipaddresses",
                    "ipv6-deployment-ubuntu", "devices-management", "storage-deployment-ubuntu",
                    "network-deployment-ubuntu", "bridging-interface-ubuntu",
                    "bridging-automatic-ubuntu", "authenticate-api"],
                    "version": world.settings.maas_version, "subversion": "maas-sim"}),
            ));
        }
        let user = match api::authenticate(&mut world, &req, &route, op.as_deref()) {
            Ok(user) => user,
            Err(response) => return Reply::Send(response),
        };
        (
            user,
            take_fault(&mut world, &req.method, &route.pattern, op.as_deref()),
        )
    };

    if let Some(fault) = &fault {
        if fault.latency_ms > 0 {
            shared.pause(Duration::from_millis(fault.latency_ms));
            if shared.stopping.load(Ordering::SeqCst) {
                return Reply::Drop;
            }
        }
        if fault.drop {
            return Reply::Drop;
        }
        if let Some(status) = fault.status {
            return Reply::Send(fault_response(status, fault));
        }
    }

    let response = {
        let mut world = shared.world();
        world.advance(Instant::now());
        api::handle(&mut world, &user, &req, &route, op.as_deref(), &params)
    };
    if fault.as_ref().is_some_and(|f| f.drop_after) {
        return Reply::Drop;
    }
    Reply::Send(response)
}

fn redirect_with_slash(req: &Request) -> Response {
    let mut location = format!("{}/", req.path);
    if !req.query.is_empty() {
        location.push('?');
        location.push_str(&http::encode_query(&req.query));
    }
    Response::empty(301).with_header("Location", location)
}

/// The first matching rule, if it fires this time (rate, remaining times).
fn take_fault(world: &mut World, method: &str, pattern: &str, op: Option<&str>) -> Option<Fault> {
    let position = world.faults.iter().position(|f| {
        f.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && f.endpoint
                .as_deref()
                .is_none_or(|e| e == "*" || e.trim_start_matches('/') == pattern)
            && f.op.as_deref().is_none_or(|o| Some(o) == op)
            && f.times.is_none_or(|t| t > 0)
    })?;
    let fault = &mut world.faults[position];
    if fault.rate < 1.0 {
        let mut b = [0u8; 4];
        let roll = if getrandom::getrandom(&mut b).is_ok() {
            f64::from(u32::from_le_bytes(b)) / f64::from(u32::MAX)
        } else {
            0.0
        };
        if roll >= fault.rate {
            return None;
        }
    }
    if let Some(times) = &mut fault.times {
        *times -= 1;
    }
    Some(fault.clone())
}

fn fault_response(status: u16, fault: &Fault) -> Response {
    let mut response = match (status, &fault.body) {
        (_, Some(body)) => Response::text(status, body),
        (409, None) => Response::html(
            409,
            "<!DOCTYPE html>\n<html>\n  <head>\n    <title>Error: Conflict Error</title>\n  </head>\n  <body>\n    <h2 class=\"p-heading--four\">\n      Conflict error. Try your request again, as it will most likely succeed.\n    </h2>\n  </body>\n</html>",
        ),
        (503, None) => Response::text(
            503,
            "Unable to connect to rack controller 'rack01' (sim001); no connections available.",
        ),
        (504, None) => Response::text(504, "Timed out waiting for the rack controller."),
        (_, None) => Response::text(status, "Simulated fault"),
    };
    if let Some(seconds) = fault.retry_after {
        response = response.with_header("Retry-After", seconds.to_string());
    }
    response
}
