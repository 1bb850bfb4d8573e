//! Issue 19 item 3, measured: what a hostile MAAS answer of tiny JSON
//! elements decodes to, before the bounds (plain serde decoding of the
//! same types, as the client did) and through the client now, by the
//! growth of this process's peak resident set (the one test of this
//! binary, so nothing else grows it; the bounded decodes run first, since
//! the peak never comes down).
//!
//!     cargo test --test decode_bounds -- --nocapture

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use capmaas::maas::{self, ApiKey, ClientConfig, ErrorKind, Machine};

/// This process's peak resident set (VmHWM), in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// `[x,x,...]` of about `bytes`.
fn list_of(x: &str, bytes: usize) -> Vec<u8> {
    let count = bytes / (x.len() + 1);
    let mut body = b"[".to_vec();
    for i in 0..count {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(x.as_bytes());
    }
    body.push(b']');
    body
}

/// A loopback MAAS answering every request with 200 and `body`.
fn serve(body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/MAAS", listener.local_addr().unwrap());
    let mut answer = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let _ = stream.write_all(&answer);
        }
    });
    url
}

const KEY: &str = "Ck9aXhYcVbPqRsTuWz:Tk2bYcZdAeBfCgDhEi:S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAB";
const MIB: usize = 1024 * 1024;

fn client(body: Vec<u8>) -> maas::Client {
    maas::Client::new(ClientConfig::new(serve(body), ApiKey::parse(KEY).unwrap()))
        .unwrap()
        .with_max_retries(0)
}

#[test]
fn hostile_machine_lists_decode_to_a_bounded_size() {
    let empty_machines = list_of("{}", 2 * MIB);
    let size = empty_machines.len();
    // One machine whose interface list holds 8 MiB of empty interfaces:
    // under the item cap, so only the decode budget stops it.
    let mut empty_interfaces = br#"[{"system_id": "abc", "interface_set": "#.to_vec();
    empty_interfaces.extend(list_of("{}", 8 * MIB));
    empty_interfaces.extend_from_slice(b"}]");

    let start = peak_rss();
    let err = client(empty_machines.clone())
        .machines_owned_by("mallory")
        .unwrap_err();
    assert_eq!(*err.kind(), ErrorKind::Decode);
    assert!(err.to_string().contains("more than 5000 elements"), "{err}");
    let after_list = peak_rss() - start;
    let nested = client(empty_interfaces)
        .machines_owned_by("mallory")
        .unwrap_err();
    assert_eq!(*nested.kind(), ErrorKind::Decode);
    assert!(
        nested
            .to_string()
            .contains("decodes to more memory than allowed"),
        "{nested}"
    );
    let after = peak_rss() - start;

    let before = serde_json::from_slice::<Vec<Machine>>(&empty_machines).unwrap();
    let decoded = before.len();
    drop(before);
    let before = peak_rss() - start;
    let mib = |bytes: usize| bytes as f64 / MIB as f64;
    let ratio = |bytes: usize| bytes as f64 / size as f64;
    println!(
        "2 MiB list of {{}} ({decoded} machines): peak RSS growth before {:.0} MiB \
         ({:.0}x the body), after {:.1} MiB ({:.1}x; refused: {err}); with the nested list \
         (8 MiB of interfaces, the test's copies of its body included) {:.1} MiB, \
         refused ({nested})",
        mib(before),
        ratio(before),
        mib(after_list),
        ratio(after_list),
        mib(after),
    );
    assert!(
        before > 100 * size,
        "the attack as reported: {before} bytes"
    );
    assert!(after < 40 * MIB, "{after} bytes");
}
