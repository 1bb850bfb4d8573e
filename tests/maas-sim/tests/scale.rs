//! A measurement, not a test (ignored by default; numbers go to
//! BENCHMARKS.md): what `GET machines/` costs with 1,000 machines, one
//! client and 20 concurrent connections, and the 50 ms latency setting.
//!
//! `cargo test -p maas-sim --release --test scale -- --ignored --nocapture`

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn inventory(machines: usize) -> maas_sim::Inventory {
    let list: Vec<String> = (0..machines)
        .map(|i| {
            format!(
                r#"{{"hostname": "m-{i:04}", "pool": "p", "zone": "z", "tags": ["worker"],
                     "status": "Deployed", "owner": "admin", "disks_gb": [240, 960],
                     "ip_addresses": ["10.20.{}.{}"]}}"#,
                i / 250,
                i % 250 + 1
            )
        })
        .collect();
    maas_sim::Inventory::from_json(&format!(
        r#"{{"api_keys": [{{"key": "ck:tk:secret"}}], "zones": [{{"name": "z"}}],
             "pools": [{{"name": "p"}}], "subnet": {{"cidr": "10.20.0.0/16", "gateway_ip": "10.20.0.1"}},
             "machines": [{}]}}"#,
        list.join(",")
    ))
    .unwrap()
}

/// One signed `GET machines/` on a kept-alive connection; the body size.
fn list(stream: &mut TcpStream, nonce: &str) -> usize {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let request = format!(
        "GET /MAAS/api/2.0/machines/ HTTP/1.1\r\nHost: sim\r\nAuthorization: OAuth \
         oauth_consumer_key=\"ck\", oauth_token=\"tk\", oauth_signature=\"%26secret\", \
         oauth_signature_method=\"PLAINTEXT\", oauth_timestamp=\"{now}\", oauth_nonce=\"{nonce}\"\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    length
}

fn timed(addr: SocketAddr, rounds: usize, tag: &str) -> (Duration, usize) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let mut size = 0;
    for r in 0..rounds {
        size = list(&mut stream, &format!("{tag}-{r}"));
    }
    (started.elapsed() / rounds as u32, size)
}

#[test]
#[ignore]
fn list_cost_at_1000_machines() {
    let built = Instant::now();
    let server = maas_sim::start("127.0.0.1:0", inventory(1000)).unwrap();
    println!("world of 1000 machines built in {:?}", built.elapsed());
    let addr = server.addr();
    let (each, size) = timed(addr, 20, "one");
    println!("GET machines/, 1 connection: {each:?} per list, {size} bytes");
    let started = Instant::now();
    let per_thread: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|t| s.spawn(move || timed(addr, 5, &format!("c{t}")).0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let worst = per_thread.iter().max().unwrap();
    println!(
        "GET machines/, 20 connections x 5 lists: {:?} wall, worst mean per list {worst:?}",
        started.elapsed()
    );
}
