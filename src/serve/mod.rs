//! Health probes and Prometheus metrics over a deliberately tiny HTTP/1.1
//! server (std::net, one short-lived thread per connection).
//!
//! ```text
//! GET /healthz   200 "ok" while the process is live (set_live), else 503
//! GET /readyz    200 "ok" when the caches are synced and this replica is
//!                the leader or a healthy standby; 503 with the reason otherwise
//! GET /metrics   crate::metrics::render(), text/plain; version=0.0.4
//! ```
//!
//! Use:
//!
//! ```no_run
//! use std::sync::Arc;
//! use capmaas::runtime::LeaderGate;
//! use capmaas::serve::{self, Health};
//!
//! let gate = LeaderGate::standby(); // driven by a LeaderElector
//! let health = Arc::new(Health::new(gate.clone()));
//! let (addr, _thread) = serve::start("127.0.0.1:8081".parse().unwrap(), health.clone()).unwrap();
//! health.set_synced(true);
//! ```
//!
//! Readiness reads the leader election's own [`LeaderGate`] on every probe:
//! nothing copies the standing from one place to another.
//!
//! Every route is served on every address `start` is called with; the
//! controllers' manager calls it once for the health probe address and once
//! for the metrics address. The accept thread runs until the process exits.
//!
//! Why not a crate: three fixed GET routes with tiny bodies need no routing,
//! keep-alive, chunking or TLS, and the probes must not depend on an async
//! runtime. What the server does guard against is a client that holds a
//! connection open or sends an endless request: the request head must arrive
//! within [`IO_TIMEOUT`], writes time out, the head is capped at [`MAX_REQUEST_BYTES`], and at most
//! [`MAX_CONNECTIONS`] connections are served at once (others are closed at
//! once), so a stuck client cannot starve the kubelet's probes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::runtime::{LeaderGate, Leadership};

/// Largest request head (request line + headers) read; bigger requests get 431.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Connections served concurrently; the rest are dropped unanswered.
pub const MAX_CONNECTIONS: usize = 16;
/// Time a client has to send its whole request head (a deadline, not a
/// per-read timeout, so a client trickling bytes cannot hold a slot), and
/// the write timeout of the response.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long, and how much, to read from a client after responding (see `linger`).
const LINGER_TIMEOUT: Duration = Duration::from_secs(1);
const LINGER_MAX_BYTES: usize = 64 * 1024;

const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the probes report, shared between the controllers and the server.
pub struct Health {
    live: AtomicBool,
    synced: AtomicBool,
    /// The leader election's gate (always open without election).
    leader: LeaderGate,
    stopping: AtomicBool,
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

    /// Shutdown began: /readyz fails from now on.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// `Err(reason)` when the liveness probe should fail.
    pub fn liveness(&self) -> Result<(), &'static str> {
        if self.live.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("not live")
        }
    }

    /// `Err(reason)` when the readiness probe should fail.
    pub fn readiness(&self) -> Result<(), &'static str> {
        self.liveness()?;
        if self.stopping.load(Ordering::SeqCst) {
            return Err("shutting down");
        }
        if !self.synced.load(Ordering::SeqCst) {
            return Err("caches not synced");
        }
        // A synced standby is ready: it can take over at once.
        match self.leader.leadership() {
            Leadership::Leader | Leadership::Standby => Ok(()),
            Leadership::Lost => Err("leader election lost"),
        }
    }
}

/// Binds `addr` and serves the probes and metrics from a background thread.
/// Returns the bound address (useful with port 0) and the accept thread.
pub fn start(addr: SocketAddr, health: Arc<Health>) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    let thread = thread::Builder::new()
        .name(format!("serve-{local}"))
        .spawn(move || accept_loop(listener, health))?;
    Ok((local, thread))
}

fn accept_loop(listener: TcpListener, health: Arc<Health>) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            // Per-connection failures (reset before accept, fd pressure) must
            // not end the probes; back off briefly so EMFILE cannot spin.
            Err(e) => {
                log::debug!("serve: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(stream);
            continue;
        }
        let health = Arc::clone(&health);
        let guard = InFlight(Arc::clone(&in_flight));
        let spawned = thread::Builder::new()
            .name("serve-conn".into())
            .spawn(move || {
                let _guard = guard;
                if let Err(e) = handle(stream, &health) {
                    log::debug!("serve: connection failed: {e}");
                }
            });
        if let Err(e) = spawned {
            // The closure (and the guard in it) was dropped: the count is right.
            log::warn!("serve: cannot spawn a connection thread: {e}");
        }
    }
}

/// Decrements the in-flight count however the connection thread ends.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn handle(mut stream: TcpStream, health: &Health) -> io::Result<()> {
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = DeadlineReader {
        stream: &stream,
        deadline: Instant::now() + IO_TIMEOUT,
    };
    let response = match read_head(&mut reader)? {
        Head::TooLarge => Response::text(431, "request header too large\n"),
        Head::Complete(head) => match parse_request_line(&head) {
            Some((method, path)) => route(method, path, health),
            None => Response::text(400, "bad request\n"),
        },
    };
    stream.write_all(&response.to_bytes())?;
    stream.flush()?;
    linger(stream)
}

/// Reads from a socket until a fixed deadline.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received in time",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

/// Closes like a careful HTTP server: closing a socket with unread input makes
/// the kernel send a reset, which can destroy the response before the client
/// reads it (a 431 to an oversized request). So half-close, then discard what
/// the client still sends, bounded in bytes and time.
fn linger(mut stream: TcpStream) -> io::Result<()> {
    stream.shutdown(Shutdown::Write)?;
    stream.set_read_timeout(Some(LINGER_TIMEOUT))?;
    let mut sink = [0u8; 4096];
    let mut discarded = 0;
    while discarded < LINGER_MAX_BYTES {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => discarded += n,
        }
    }
    Ok(())
}

enum Head {
    Complete(Vec<u8>),
    TooLarge,
}

/// Reads up to the blank line ending the request head. Bodies are never read:
/// no route takes one, and the connection closes after the response.
fn read_head(stream: &mut impl Read) -> io::Result<Head> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before end of request head",
            ));
        }
        // Only the tail can complete a terminator split across reads.
        let search_from = head.len().saturating_sub(3);
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&head[search_from..], b"\r\n\r\n") {
            head.truncate(search_from + end);
            return Ok(Head::Complete(head));
        }
        if head.len() > MAX_REQUEST_BYTES {
            return Ok(Head::TooLarge);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `(method, path without query)` from `METHOD SP target SP HTTP/1.x`.
fn parse_request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line_end = find(head, b"\r\n").unwrap_or(head.len());
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

fn route(method: &str, path: &str, health: &Health) -> Response {
    let include_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return Response::text(405, "method not allowed\n").with_allow(),
    };
    let mut response = match path {
        "/healthz" | "/livez" => probe(health.liveness()),
        "/readyz" => probe(health.readiness()),
        "/metrics" => Response {
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

fn probe(result: Result<(), &'static str>) -> Response {
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

    fn request(raw: &[u8]) -> Result<Head, io::Error> {
        read_head(&mut &raw[..])
    }

    #[test]
    fn request_head_ends_at_the_blank_line() {
        match request(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nbody").unwrap() {
            Head::Complete(head) => assert_eq!(head, b"GET /readyz HTTP/1.1\r\nHost: x"),
            Head::TooLarge => panic!("too large"),
        }
    }

    #[test]
    fn terminator_split_across_reads_is_found() {
        // A reader returning one byte per read.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        let head = read_head(&mut Trickle(b"GET / HTTP/1.1\r\n\r\n")).unwrap();
        assert!(matches!(head, Head::Complete(h) if h == b"GET / HTTP/1.1"));
    }

    #[test]
    fn oversized_and_truncated_heads() {
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_REQUEST_BYTES + 10));
        assert!(matches!(request(&big).unwrap(), Head::TooLarge));
        assert_eq!(
            request(b"GET / HTTP/1.1\r\n").err().map(|e| e.kind()),
            Some(io::ErrorKind::UnexpectedEof)
        );
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
        assert_eq!(h.liveness(), Ok(()));
        assert_eq!(h.readiness(), Err("caches not synced"));
        h.set_synced(true);
        assert_eq!(h.readiness(), Ok(()), "a synced standby is ready");
        gate.lead_until(Instant::now() + Duration::from_secs(600));
        assert_eq!(h.readiness(), Ok(()));
        gate.lose();
        assert_eq!(h.readiness(), Err("leader election lost"));
        let h = Health::new(LeaderGate::always_open());
        h.set_synced(true);
        assert_eq!(h.readiness(), Ok(()));
        h.set_live(false);
        assert_eq!(h.liveness(), Err("not live"));
        assert_eq!(h.readiness(), Err("not live"));
        h.set_live(true);
        h.set_stopping();
        assert_eq!(h.readiness(), Err("shutting down"));
        assert_eq!(h.liveness(), Ok(()), "stopping is not dead");
    }

    #[test]
    fn routes() {
        let h = Health::new(LeaderGate::always_open());
        let text = |r: Response| String::from_utf8(r.to_bytes()).unwrap();
        let not_ready = text(route("GET", "/readyz", &h));
        assert!(
            not_ready.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{not_ready}"
        );
        assert!(
            not_ready.ends_with("\r\n\r\ncaches not synced\n"),
            "{not_ready}"
        );
        assert!(text(route("GET", "/healthz", &h)).starts_with("HTTP/1.1 200 OK\r\n"));
        let head = text(route("HEAD", "/healthz", &h));
        assert!(
            head.contains("Content-Length: 3\r\n") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let post = text(route("POST", "/healthz", &h));
        assert!(
            post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"),
            "{post}"
        );
        assert!(text(route("GET", "/nope", &h)).starts_with("HTTP/1.1 404 "));
        let metrics = text(route("GET", "/metrics", &h));
        assert!(
            metrics.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{metrics}"
        );
    }
}
