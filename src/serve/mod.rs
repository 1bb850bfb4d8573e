//! Health probes and Prometheus metrics over a deliberately tiny HTTP/1.1
//! server: std::net, one thread per listener, no async runtime.
//!
//! ```text
//! Routes::Probes(health)   GET /healthz (/livez)  200 "ok" while live, else 503
//!                          GET /readyz            200 "ok" when ready, 503 + the reason
//! Routes::Metrics          GET /metrics           crate::metrics::render(), text/plain; version=0.0.4
//! Routes::Both(health)     all of them (one address given for both)
//! ```
//!
//! Each listener serves only its own routes: the probe port usually binds
//! all interfaces (the kubelet must reach it), the metrics port only
//! loopback by default, and that choice would mean nothing if the probe
//! port answered /metrics too.
//!
//! ```no_run
//! use std::sync::Arc;
//! use capmaas::runtime::LeaderGate;
//! use capmaas::serve::{self, Health, Routes};
//!
//! let gate = LeaderGate::standby(); // driven by a LeaderElector
//! let health = Arc::new(Health::new(gate.clone()));
//! let (addr, _thread) = serve::start("127.0.0.1:8081".parse().unwrap(), Routes::Probes(health.clone())).unwrap();
//! health.set_synced(true);
//! ```
//!
//! Readiness reads the leader election's own [`LeaderGate`] at each probe:
//! nothing copies the standing from one place to another.
//!
//! # Holding up under hostile clients
//!
//! The kubelet restarts the pod when /healthz fails a few times, so a client
//! that opens connections and sends nothing (or trickles bytes) must not be
//! able to starve the probes. One thread per listener multiplexes every
//! connection with non-blocking sockets: a connection waiting for its
//! request head costs a file descriptor and a small buffer, not a thread, so
//! there are [`MAX_CONNECTIONS`] cheap slots. Each connection has
//! [`HEAD_TIMEOUT`] (a deadline, not a per-read timeout) to send its request
//! head of at most [`MAX_REQUEST_BYTES`]. When the slots are full, or one
//! peer address holds [`MAX_PER_PEER`] of them, the connection that has
//! waited longest without sending a complete request (or that is only being
//! drained after its answer) is closed to make room: a new connection,
//! which is what the kubelet's probe is, always gets in, and a real client
//! sends its head at once, so only idle connections are ever pushed out.
//!
//! Why not a crate: three fixed GET routes with tiny bodies need no routing,
//! keep-alive, chunking or TLS. tiny_http (the small blocking server crate)
//! runs a thread per connection and its timeout is per read and restarts
//! with every byte received (tiny-http PR #20), which is exactly what a
//! trickling client exploits; the async servers need a runtime.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::clock::later;
use crate::runtime::{LeaderGate, Leadership};
use crate::sync::lock;

/// Largest request head (request line + headers) read; bigger requests get 431.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Connections held at once per listener. Idle ones cost a descriptor and
/// at most [`MAX_REQUEST_BYTES`] of buffer each (about 2 MiB in all).
pub const MAX_CONNECTIONS: usize = 256;
/// Connections one peer address may hold before its idle ones are pushed
/// out for its new ones.
pub const MAX_PER_PEER: usize = 32;
/// Time a client has to send its whole request head. The kubelet sends its
/// probe request at once and gives up after 1 s by default.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a client has to take the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long, and how much, to read from a client after responding (see
/// [`State::Linger`]).
const LINGER_TIMEOUT: Duration = Duration::from_secs(1);
const LINGER_MAX_BYTES: usize = 64 * 1024;
/// New connections taken per round, so that reading the heads of those
/// already accepted is never put off for long.
const ACCEPT_BATCH: usize = 16;
/// Pause between rounds when connections are open but none made progress;
/// it grows from the first to the last value while nothing happens.
const POLL_PAUSES: [Duration; 4] = [
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
];

const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the probes report, shared between the controllers and the server.
#[derive(Debug)]
pub struct Health {
    live: AtomicBool,
    synced: AtomicBool,
    /// The leader election's gate (always open without election).
    leader: LeaderGate,
    stopping: AtomicBool,
    /// Services we cannot work without that are not there yet, by name,
    /// with why (e.g. "MAAS" → "not reachable: connection refused").
    unavailable: Mutex<BTreeMap<&'static str, String>>,
}

impl Health {
    /// Live, not synced: not ready until `set_synced(true)`. Leadership is
    /// read from `leader` at each probe.
    pub fn new(leader: LeaderGate) -> Health {
        Health {
            live: AtomicBool::new(true),
            synced: AtomicBool::new(false),
            leader,
            stopping: AtomicBool::new(false),
            unavailable: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether the process works at all; false makes /healthz fail and the
    /// kubelet restart the container.
    pub fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::SeqCst);
    }

    /// Whether every informer has listed once.
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::SeqCst);
    }

    /// `service` (e.g. "MAAS") cannot be used: /readyz fails with
    /// `service: reason` until [`Health::set_available`]. Set by the
    /// start-up checks.
    pub fn set_unavailable(&self, service: &'static str, reason: String) {
        lock(&self.unavailable).insert(service, reason);
    }

    /// `service` can be used again.
    pub fn set_available(&self, service: &'static str) {
        lock(&self.unavailable).remove(service);
    }

    /// Shutdown began: /readyz fails from now on.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// `Err(why)` when the liveness probe should fail.
    pub fn liveness(&self) -> Result<(), NotReady> {
        if self.live.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(NotReady::NotLive)
        }
    }

    /// `Err(reason)` when the readiness probe should fail. A service we
    /// cannot reach is named before the caches: it is the cause to fix.
    pub fn readiness(&self) -> Result<(), NotReady> {
        self.liveness()?;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(NotReady::ShuttingDown);
        }
        if let Some((service, reason)) = lock(&self.unavailable).iter().next() {
            return Err(NotReady::Unavailable {
                service,
                reason: reason.clone(),
            });
        }
        if !self.synced.load(Ordering::SeqCst) {
            return Err(NotReady::CachesNotSynced);
        }
        // A synced standby is ready: it can take over at once.
        match self.leader.leadership() {
            Leadership::Leader | Leadership::Standby => Ok(()),
            Leadership::Lost => Err(NotReady::LeadershipLost),
        }
    }
}

/// Why a probe fails. Its text is the probe's 503 body, which `kubectl
/// describe pod` shows: the cause to fix, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    NotLive,
    ShuttingDown,
    /// A service the operator needs (MAAS) cannot be used, and why.
    Unavailable {
        service: &'static str,
        reason: String,
    },
    CachesNotSynced,
    LeadershipLost,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::NotLive => f.write_str("not live"),
            NotReady::ShuttingDown => f.write_str("shutting down"),
            NotReady::Unavailable { service, reason } => write!(f, "{service}: {reason}"),
            NotReady::CachesNotSynced => f.write_str("caches not synced"),
            NotReady::LeadershipLost => f.write_str("leader election lost"),
        }
    }
}

/// Which routes a listener serves.
#[derive(Clone, Debug)]
pub enum Routes {
    /// `/healthz`, `/livez`, `/readyz`.
    Probes(Arc<Health>),
    /// `/metrics`.
    Metrics,
    /// Everything, for when one address is given for both.
    Both(Arc<Health>),
}

impl Routes {
    fn health(&self) -> Option<&Health> {
        match self {
            Routes::Probes(h) | Routes::Both(h) => Some(h),
            Routes::Metrics => None,
        }
    }

    fn metrics(&self) -> bool {
        matches!(self, Routes::Metrics | Routes::Both(_))
    }
}

/// Binds `addr` and serves `routes` from a background thread. Returns the
/// bound address (useful with port 0) and the thread, which runs until the
/// process exits.
pub fn start(addr: SocketAddr, routes: Routes) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let thread = thread::Builder::new()
        .name(format!("serve-{local}"))
        .spawn(move || serve(listener, &routes))?;
    Ok((local, thread))
}

/// One open connection and where it is in its one exchange.
struct Conn {
    stream: TcpStream,
    peer: IpAddr,
    state: State,
}

enum State {
    /// Reading the request head until the blank line, by `deadline`.
    Head { buf: Vec<u8>, deadline: Instant },
    /// Sending the response, by `deadline`.
    Write {
        bytes: Vec<u8>,
        sent: usize,
        deadline: Instant,
    },
    /// Answered and half-closed: closing a socket with unread input makes
    /// the kernel send a reset, which can destroy the response before the
    /// client reads it (a 431 to an oversized request). So discard what the
    /// client still sends, bounded in bytes and time, until it closes.
    Linger { discarded: usize, deadline: Instant },
}

impl Conn {
    /// Waiting on the client rather than on us: may be closed to make room.
    fn idle(&self) -> bool {
        matches!(self.state, State::Head { .. } | State::Linger { .. })
    }
}

/// What one step on a connection did.
enum Step {
    Progress,
    Waiting,
    Done,
}

fn serve(listener: TcpListener, routes: &Routes) {
    // Oldest first: eviction takes the first idle one.
    let mut conns: Vec<Conn> = Vec::new();
    let mut quiet_rounds = 0;
    loop {
        let mut progress = false;
        if conns.is_empty() {
            // Nothing to poll: wait for a connection without spinning.
            match accept_blocking(&listener) {
                Ok((stream, peer)) => admit(&mut conns, stream, peer.ip()),
                Err(e) => pause_after_accept_error(&e),
            }
            progress = true;
        }
        for _ in 0..ACCEPT_BATCH {
            match listener.accept() {
                Ok((stream, peer)) => {
                    admit(&mut conns, stream, peer.ip());
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    pause_after_accept_error(&e);
                    break;
                }
            }
        }
        let now = Instant::now();
        conns.retain_mut(|conn| match step(conn, routes, now) {
            Step::Progress => {
                progress = true;
                true
            }
            Step::Waiting => true,
            Step::Done => false,
        });
        if progress {
            quiet_rounds = 0;
        } else {
            let pause = POLL_PAUSES.get(quiet_rounds).or(POLL_PAUSES.last());
            thread::sleep(pause.copied().unwrap_or(Duration::from_millis(50)));
            quiet_rounds += 1;
        }
    }
}

fn accept_blocking(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    listener.set_nonblocking(false)?;
    let accepted = listener.accept();
    listener.set_nonblocking(true)?;
    accepted
}

/// Per-connection failures (reset before accept, descriptor pressure) must
/// not end the probes; pausing briefly keeps EMFILE from spinning.
fn pause_after_accept_error(e: &io::Error) {
    log::debug!("serve: accept failed: {e}");
    thread::sleep(Duration::from_millis(50));
}

/// Takes a new connection, first closing the oldest idle one of the same
/// peer (over [`MAX_PER_PEER`]) or of anyone (over [`MAX_CONNECTIONS`]).
/// When every slot is busy answering, the new connection is closed.
fn admit(conns: &mut Vec<Conn>, stream: TcpStream, peer: IpAddr) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let same_peer = conns.iter().filter(|c| c.peer == peer).count();
    let victim = if same_peer >= MAX_PER_PEER {
        conns.iter().position(|c| c.peer == peer && c.idle())
    } else if conns.len() >= MAX_CONNECTIONS {
        conns.iter().position(Conn::idle)
    } else {
        None
    };
    if let Some(i) = victim {
        let old = conns.remove(i);
        let _ = old.stream.shutdown(Shutdown::Both);
    }
    if conns.iter().filter(|c| c.peer == peer).count() >= MAX_PER_PEER
        || conns.len() >= MAX_CONNECTIONS
    {
        log::debug!("serve: all connection slots busy; closing a new one from {peer}");
        return;
    }
    conns.push(Conn {
        stream,
        peer,
        state: State::Head {
            buf: Vec::new(),
            deadline: later(Instant::now(), HEAD_TIMEOUT),
        },
    });
}

/// Advances one connection as far as it can go without blocking.
fn step(conn: &mut Conn, routes: &Routes, now: Instant) -> Step {
    match &mut conn.state {
        State::Head { buf, deadline } => {
            let mut chunk = [0u8; 1024];
            match (&conn.stream).read(&mut chunk) {
                Ok(0) => Step::Done,
                Ok(n) => {
                    buf.extend_from_slice(chunk.get(..n).unwrap_or(&chunk));
                    let response = match head_status(buf) {
                        HeadStatus::Incomplete => return Step::Progress,
                        HeadStatus::TooLarge => Response::text(431, "request header too large\n"),
                        HeadStatus::Complete(end) => {
                            match parse_request_line(buf.get(..end).unwrap_or(buf)) {
                                Some((method, path)) => route(method, path, routes),
                                None => Response::text(400, "bad request\n"),
                            }
                        }
                    };
                    conn.state = State::Write {
                        bytes: response.to_bytes(),
                        sent: 0,
                        deadline: later(now, WRITE_TIMEOUT),
                    };
                    Step::Progress
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if now >= *deadline {
                        log::debug!("serve: no request head from {} in time", conn.peer);
                        Step::Done
                    } else {
                        Step::Waiting
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Waiting,
                Err(_) => Step::Done,
            }
        }
        State::Write {
            bytes,
            sent,
            deadline,
        } => match (&conn.stream).write(bytes.get(*sent..).unwrap_or_default()) {
            Ok(n) => {
                *sent += n;
                if *sent == bytes.len() {
                    if conn.stream.shutdown(Shutdown::Write).is_err() {
                        return Step::Done;
                    }
                    conn.state = State::Linger {
                        discarded: 0,
                        deadline: later(now, LINGER_TIMEOUT),
                    };
                }
                Step::Progress
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && now < *deadline => Step::Waiting,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Waiting,
            Err(_) => Step::Done,
        },
        State::Linger {
            discarded,
            deadline,
        } => {
            let mut sink = [0u8; 4096];
            match (&conn.stream).read(&mut sink) {
                Ok(0) => Step::Done,
                Ok(n) => {
                    *discarded += n;
                    if *discarded >= LINGER_MAX_BYTES {
                        Step::Done
                    } else {
                        Step::Progress
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && now < *deadline => Step::Waiting,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Step::Waiting,
                Err(_) => Step::Done,
            }
        }
    }
}

enum HeadStatus {
    Incomplete,
    /// The head ends before this offset (the blank line excluded).
    Complete(usize),
    TooLarge,
}

/// Whether `buf` holds a whole request head. Bodies are never read: no route
/// takes one, and the connection closes after the response.
fn head_status(buf: &[u8]) -> HeadStatus {
    match find(buf, b"\r\n\r\n") {
        Some(end) if end <= MAX_REQUEST_BYTES => HeadStatus::Complete(end),
        Some(_) => HeadStatus::TooLarge,
        None if buf.len() > MAX_REQUEST_BYTES => HeadStatus::TooLarge,
        None => HeadStatus::Incomplete,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `(method, path without query)` from `METHOD SP target SP HTTP/1.x`.
fn parse_request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line_end = find(head, b"\r\n").unwrap_or(head.len());
    let line = std::str::from_utf8(head.get(..line_end)?).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

fn route(method: &str, path: &str, routes: &Routes) -> Response {
    let include_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return Response::text(405, "method not allowed\n").with_allow(),
    };
    let health = routes.health();
    let mut response = match (path, health) {
        ("/healthz" | "/livez", Some(health)) => probe(health.liveness()),
        ("/readyz", Some(health)) => probe(health.readiness()),
        ("/metrics", _) if routes.metrics() => Response {
            status: 200,
            content_type: METRICS_CONTENT_TYPE,
            body: crate::metrics::render().into_bytes(),
            include_body: true,
            allow: false,
        },
        _ => Response::text(404, "not found\n"),
    };
    response.include_body = include_body;
    response
}

fn probe(result: Result<(), NotReady>) -> Response {
    match result {
        Ok(()) => Response::text(200, "ok\n"),
        Err(reason) => Response::text(503, &format!("{reason}\n")),
    }
}

struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// False for HEAD: the same head (Content-Length of the GET body), no body.
    include_body: bool,
    /// Adds `Allow: GET, HEAD` (405 responses).
    allow: bool,
}

impl Response {
    fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            include_body: true,
            allow: false,
        }
    }

    fn with_allow(mut self) -> Response {
        self.allow = true;
        self
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason_phrase(self.status),
            self.content_type,
            self.body.len(),
        );
        if self.allow {
            head.push_str("Allow: GET, HEAD\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        if self.include_body {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(raw: &[u8]) -> Option<&[u8]> {
        match head_status(raw) {
            HeadStatus::Complete(end) => Some(&raw[..end]),
            _ => None,
        }
    }

    #[test]
    fn request_head_ends_at_the_blank_line() {
        assert_eq!(
            complete(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nbody"),
            Some(&b"GET /readyz HTTP/1.1\r\nHost: x"[..])
        );
        assert!(matches!(
            head_status(b"GET / HTTP/1.1\r\n"),
            HeadStatus::Incomplete
        ));
    }

    #[test]
    fn oversized_heads() {
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_REQUEST_BYTES + 10));
        assert!(matches!(head_status(&big), HeadStatus::TooLarge));
        big.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(head_status(&big), HeadStatus::TooLarge));
    }

    #[test]
    fn request_line_parsing() {
        assert_eq!(
            parse_request_line(b"GET /metrics?x=1 HTTP/1.1"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(
            parse_request_line(b"HEAD /healthz HTTP/1.0\r\nHost: a"),
            Some(("HEAD", "/healthz"))
        );
        assert_eq!(parse_request_line(b"GET /healthz"), None);
        assert_eq!(parse_request_line(b"GET http://x/ HTTP/1.1"), None);
        assert_eq!(parse_request_line(b"GET / SPDY/3"), None);
        assert_eq!(parse_request_line(b"GET / HTTP/1.1 extra"), None);
        assert_eq!(parse_request_line(&[0xff, 0xfe]), None);
    }

    #[test]
    fn readiness_needs_sync_and_a_live_leader_or_standby() {
        let gate = LeaderGate::standby();
        let h = Health::new(gate.clone());
        let err = |s: &str| Err(s.to_string());
        let text = |r: Result<(), NotReady>| r.map_err(|e| e.to_string());
        assert_eq!(h.liveness(), Ok(()));
        assert_eq!(text(h.readiness()), err("caches not synced"));
        h.set_synced(true);
        assert_eq!(h.readiness(), Ok(()), "a synced standby is ready");
        gate.lead_until(Instant::now() + Duration::from_secs(600));
        assert_eq!(h.readiness(), Ok(()));
        gate.lose();
        assert_eq!(text(h.readiness()), err("leader election lost"));
        let h = Health::new(LeaderGate::always_open());
        h.set_synced(true);
        assert_eq!(h.readiness(), Ok(()));
        h.set_live(false);
        assert_eq!(text(h.liveness()), err("not live"));
        assert_eq!(text(h.readiness()), err("not live"));
        h.set_live(true);
        h.set_stopping();
        assert_eq!(text(h.readiness()), err("shutting down"));
        assert_eq!(h.liveness(), Ok(()), "stopping is not dead");
    }

    /// Issue 12 item 5: MAAS unreachable at start must show as not ready,
    /// with the reason, instead of a ready pod that fails every reconcile.
    #[test]
    fn an_unavailable_service_makes_the_pod_unready_with_its_reason() {
        let h = Health::new(LeaderGate::always_open());
        h.set_unavailable("MAAS", "not reachable: connection refused".into());
        assert_eq!(
            h.readiness().map_err(|e| e.to_string()),
            Err("MAAS: not reachable: connection refused".to_string()),
            "named before the caches"
        );
        h.set_synced(true);
        assert!(h.readiness().is_err());
        assert_eq!(h.liveness(), Ok(()), "waiting for MAAS is not dead");
        h.set_available("MAAS");
        assert_eq!(h.readiness(), Ok(()));
    }

    #[test]
    fn routes() {
        let h = Arc::new(Health::new(LeaderGate::always_open()));
        let probes = Routes::Probes(h.clone());
        let text = |r: Response| String::from_utf8(r.to_bytes()).unwrap();
        let not_ready = text(route("GET", "/readyz", &probes));
        assert!(
            not_ready.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{not_ready}"
        );
        assert!(
            not_ready.ends_with("\r\n\r\ncaches not synced\n"),
            "{not_ready}"
        );
        assert!(text(route("GET", "/healthz", &probes)).starts_with("HTTP/1.1 200 OK\r\n"));
        let head = text(route("HEAD", "/healthz", &probes));
        assert!(
            head.contains("Content-Length: 3\r\n") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let post = text(route("POST", "/healthz", &probes));
        assert!(
            post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"),
            "{post}"
        );
        assert!(text(route("GET", "/nope", &probes)).starts_with("HTTP/1.1 404 "));
        assert!(
            text(route("GET", "/metrics", &probes)).starts_with("HTTP/1.1 404 "),
            "the probe listener serves no metrics"
        );
        let metrics = text(route("GET", "/metrics", &Routes::Metrics));
        assert!(
            metrics.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{metrics}"
        );
        assert!(text(route("GET", "/healthz", &Routes::Metrics)).starts_with("HTTP/1.1 404 "));
        let both = Routes::Both(h);
        assert!(text(route("GET", "/metrics", &both)).starts_with("HTTP/1.1 200 "));
        assert!(text(route("GET", "/livez", &both)).starts_with("HTTP/1.1 200 "));
    }
}
