//! The in-process server's life: it serves on the address it reports, and
//! stopping it closes open connections and cuts injected latency short, so
//! a test that drops its simulator does not leave threads or sockets behind.

mod wire;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The story inventory's admin key.
const KEY: &str = "SimConsumerKey0001:SimTokenKey0000001:SimTokenSecret000000000000000001";

fn request(stream: &mut TcpStream, method: &str, path: &str, body: &str) {
    wire::send(stream, KEY, method, path, body);
}

fn response(stream: &mut TcpStream) -> String {
    wire::receive(stream).0
}

#[test]
fn stopping_closes_connections_and_ends_latency() {
    let server = maas_sim::start("127.0.0.1:0", maas_sim::Inventory::default_story()).unwrap();
    assert!(server.base_url().starts_with("http://127.0.0.1:"));
    let addr = server.addr();

    let mut idle = TcpStream::connect(addr).unwrap();
    request(&mut idle, "GET", "/_sim/stats", "");
    assert!(response(&mut idle).starts_with("HTTP/1.1 200 OK"));
    request(
        &mut idle,
        "POST",
        "/_sim/faults",
        r#"{"endpoint": "zones/", "latency_ms": 60000}"#,
    );
    assert!(response(&mut idle).starts_with("HTTP/1.1 200 OK"));

    // A request held for a minute by the latency rule.
    let mut slow = TcpStream::connect(addr).unwrap();
    request(&mut slow, "GET", "/MAAS/api/2.0/zones/", "");
    std::thread::sleep(Duration::from_millis(200));

    let started = Instant::now();
    server.shutdown();
    assert!(started.elapsed() < Duration::from_secs(5));

    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(idle.read_to_end(&mut rest).unwrap_or(0), 0);
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        !String::from_utf8_lossy(&rest).contains("200 OK"),
        "the held request was answered after the stop"
    );
    assert!(TcpStream::connect(addr).is_err(), "still accepting");
}
