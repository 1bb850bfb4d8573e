//! The probe and metrics server over real sockets: what the kubelet and
//! Prometheus see, and that misbehaving clients cannot take the probes down.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capmaas::runtime::LeaderGate;
use capmaas::serve::{self, Health, MAX_CONNECTIONS, MAX_REQUEST_BYTES};

/// The server, its health and the leader gate it reads.
fn start() -> (SocketAddr, Arc<Health>, LeaderGate) {
    let gate = LeaderGate::standby();
    let health = Arc::new(Health::new(gate.clone()));
    let (addr, _thread) =
        serve::start("127.0.0.1:0".parse().unwrap(), Arc::clone(&health)).unwrap();
    (addr, health, gate)
}

/// Sends `raw`, returns (status code, head, body) of the response.
fn exchange(addr: SocketAddr, raw: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: probe\r\nUser-Agent: kube-probe/1.34\r\n\r\n")
            .as_bytes(),
    )
}

#[test]
fn probes_follow_health() {
    let (addr, health, gate) = start();
    assert_eq!(get(addr, "/healthz").0, 200);
    let (status, _, body) = get(addr, "/readyz");
    assert_eq!((status, body.as_str()), (503, "caches not synced\n"));

    health.set_synced(true);
    assert_eq!(get(addr, "/readyz").0, 200, "synced standby");
    gate.lead_until(Instant::now() + Duration::from_secs(600));
    let (status, _, body) = get(addr, "/readyz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    gate.lose();
    assert_eq!(get(addr, "/readyz").2, "leader election lost\n");

    health.set_live(false);
    assert_eq!(get(addr, "/healthz").0, 503);
    health.set_live(true);
    assert_eq!(get(addr, "/healthz?verbose").0, 200, "query string ignored");
}

#[test]
fn metrics_renders_the_registry() {
    let (addr, _health, _gate) = start();
    capmaas::metrics::counter_inc(
        "serve_test_requests_total",
        "Requests seen by the serve test.",
        &[("route", "x")],
    );
    let (status, head, body) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(
        body.contains("# TYPE serve_test_requests_total counter\n"),
        "{body}"
    );
    assert!(
        body.contains("serve_test_requests_total{route=\"x\"} 1\n"),
        "{body}"
    );
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(length, body.len());
}

#[test]
fn bad_requests_get_http_errors() {
    let (addr, _health, _gate) = start();
    assert_eq!(get(addr, "/").0, 404);
    assert_eq!(exchange(addr, b"DELETE /healthz HTTP/1.1\r\n\r\n").0, 405);
    assert_eq!(exchange(addr, b"garbage\r\n\r\n").0, 400);
    let mut huge = b"GET /healthz HTTP/1.1\r\nX-Filler: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 4 * MAX_REQUEST_BYTES));
    huge.extend_from_slice(b"\r\n\r\n");
    // The server answers before reading everything; the unread rest may make
    // the close a reset, so read what arrives and tolerate an error after it.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = stream.write_all(&huge);
    let mut response = [0u8; 64];
    let n = stream.read(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response[..n]);
    assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
}

#[test]
fn idle_connections_cannot_starve_the_probes() {
    let (addr, _health, _gate) = start();
    // A client that connects and never sends holds one slot only.
    let idle = TcpStream::connect(addr).unwrap();
    assert_eq!(get(addr, "/healthz").0, 200);

    // Filling every slot turns further connections away instead of queueing
    // them behind the idle ones...
    let mut hogs: Vec<TcpStream> = (1..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    hogs.push(idle);
    let refused = wait_until(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(0) | Err(_))
    });
    assert!(
        refused,
        "connections beyond MAX_CONNECTIONS were not turned away"
    );

    // ...and once they go, the probes answer again.
    for hog in &hogs {
        hog.shutdown(Shutdown::Both).unwrap();
    }
    drop(hogs);
    let recovered = wait_until(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.starts_with("HTTP/1.1 200 ")
    });
    assert!(recovered, "probes did not recover after idle clients left");
}

/// Polls `f` until it holds (the server threads notice closed sockets
/// asynchronously); gives up after a generous deadline.
fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_client_trickling_its_request_is_cut_off() {
    let (addr, _health, _gate) = start();
    let mut stream = TcpStream::connect(addr).unwrap();
    // Well under MAX_REQUEST_BYTES, but spread over far more than the
    // server's deadline for a request head: the server must give up first.
    let trickle = b"GET /healthz HTTP/1.1\r\nX-Slow: "
        .iter()
        .chain(std::iter::repeat(&b'a'));
    let total = serve::IO_TIMEOUT.as_millis() as usize / 50 * 4;
    let mut cut_off = false;
    for &byte in trickle.take(total) {
        if stream.write_all(&[byte]).is_err() {
            cut_off = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !cut_off {
        // Writes into a closed socket can still succeed once; a short read
        // tells: end of stream or reset = closed, timeout = still open.
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 64];
        cut_off = match stream.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
    }
    assert!(
        cut_off,
        "the server kept reading a request head for 4x its deadline"
    );
}
