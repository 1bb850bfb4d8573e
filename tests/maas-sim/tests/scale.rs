//! A measurement, not a test (ignored by default; numbers go to
//! BENCHMARKS.md): what `GET machines/` costs with 1,000 machines, one
//! client and 20 concurrent connections, and the 50 ms latency setting.
//!
//! `cargo test -p maas-sim --release --test scale -- --ignored --nocapture`

mod wire;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

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
             "pools": [{{"name": "p"}}], "subnet": {{"cidr": "127.20.0.0/16", "gateway_ip": "127.20.0.1"}},
             "machines": [{}]}}"#,
        list.join(",")
    ))
    .unwrap()
}

/// One signed `GET machines/` on a kept-alive connection; the body size.
fn list(stream: &mut TcpStream) -> usize {
    wire::send(stream, "ck:tk:secret", "GET", "/MAAS/api/2.0/machines/", "");
    let (head, body) = wire::receive(stream);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.len()
}

fn timed(addr: SocketAddr, rounds: usize) -> (Duration, usize) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let mut size = 0;
    for _ in 0..rounds {
        size = list(&mut stream);
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
    let (each, size) = timed(addr, 20);
    println!("GET machines/, 1 connection: {each:?} per list, {size} bytes");
    let started = Instant::now();
    let per_thread: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20).map(|_| s.spawn(move || timed(addr, 5).0)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let worst = per_thread.iter().max().unwrap();
    println!(
        "GET machines/, 20 connections x 5 lists: {:?} wall, worst mean per list {worst:?}",
        started.elapsed()
    );
}
