//! maas-sim: a MAAS 2.0 API simulator for tests and the local lab.
//!
//! It answers like real MAAS 3.x (paths, `op` dispatch, OAuth PLAINTEXT with
//! nonce and timestamp checks, status codes and bodies from maas-api.md) for
//! the calls a Cluster API provider makes, and keeps a machine state
//! machine: Ready → Allocated → Deploying → Deployed (after
//! `deploy_seconds`), release → Releasing / Disk erasing → Ready. Time moves
//! lazily: pending transitions complete when the next request looks.
//!
//! ```text
//! let server = sim::start("127.0.0.1:0", Inventory::default_story())?;
//! server.base_url()   // http://127.0.0.1:PORT/MAAS
//! ```
//! Test controls live under `/_sim/` (see [`control`]). Fault rules
//! ([`Fault`]) match on method, endpoint pattern (`machines/{id}/`) and op,
//! and inject status codes (with `Retry-After`), latency, or dropped
//! connections before or after the request takes effect.

mod api;
pub mod control;
mod http;
pub mod inventory;
mod render;
mod world;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use inventory::{Inventory, DEFAULT_INVENTORY};
pub use world::Fault;

use api::Route;
use http::{Reply, Request, Response};
use world::World;

const API_PREFIX: &str = "/MAAS/api/2.0/";
const SIM_PREFIX: &str = "/_sim/";

/// A running simulator.
pub struct Server {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What users would put in MAAS_ENDPOINT: `http://127.0.0.1:PORT/MAAS`.
    pub fn base_url(&self) -> String {
        format!("http://{}/MAAS", self.addr)
    }

    /// Blocks while the server runs (forever, unless accepting fails).
    pub fn wait(self) {
        let _ = self.accept.join();
    }
}

struct Shared {
    world: Mutex<World>,
}

impl Shared {
    fn world(&self) -> MutexGuard<'_, World> {
        // A handler panic leaves a consistent-enough world for a simulator.
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Binds `listen` and serves in background threads.
pub fn start(listen: &str, inventory: Inventory) -> io::Result<Server> {
    let world =
        World::new(inventory).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let listener = TcpListener::bind(listen)?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        world: Mutex::new(world),
    });
    let accept = std::thread::Builder::new()
        .name("maas-sim-accept".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                shared.world().connections += 1;
                let shared = Arc::clone(&shared);
                let _ = std::thread::Builder::new()
                    .name("maas-sim-conn".into())
                    .spawn(move || http::serve_connection(stream, &|req| handle(&shared, req)));
            }
        })?;
    Ok(Server { addr, accept })
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
                    "version": "3.5.4", "subversion": "maas-sim"}),
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
            std::thread::sleep(Duration::from_millis(fault.latency_ms));
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
        location.push_str(&crate::maas::encode_pairs(&req.query));
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
