//! The in-process server's life: it serves on the address it reports, and
//! stopping it closes open connections and cuts injected latency short, so
//! a test that drops its simulator does not leave threads or sockets behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn request(stream: &mut TcpStream, method: &str, path: &str, body: &str) {
    // The story inventory's admin key, signed PLAINTEXT as MAAS clients do.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let auth = format!(
        "OAuth oauth_consumer_key=\"SimConsumerKey0001\", oauth_token=\"SimTokenKey0000001\", \
         oauth_signature=\"%26SimTokenSecret000000000000000001\", oauth_signature_method=\"PLAINTEXT\", \
         oauth_timestamp=\"{now}\", oauth_nonce=\"{path}-{now}\""
    );
    let text = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: {auth}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).unwrap();
}

/// Reads one response with a Content-Length body.
fn response(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "connection closed");
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    head + &String::from_utf8(body).unwrap()
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
