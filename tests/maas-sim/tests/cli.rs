//! The `maas-sim` binary's command line: the base URL on the first stdout
//! line, the built-in inventory, usage errors.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_maas-sim");

#[test]
fn prints_the_embedded_story_inventory() {
    let printed = Command::new(BIN)
        .arg("--print-default-inventory")
        .output()
        .unwrap();
    assert!(printed.status.success());
    let story = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../inventory/story.json"),
    )
    .unwrap();
    assert_eq!(String::from_utf8(printed.stdout).unwrap(), story);
}

#[test]
fn bad_arguments_fail_with_usage() {
    for args in [&["--bogus"][..], &["--deploy-seconds", "-1"], &["--listen"]] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("maas-sim: "), "{args:?}: {stderr}");
    }
    let out = Command::new(BIN).arg("--bogus").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: maas-sim"));
    let out = Command::new(BIN)
        .args(["--inventory", "/nonexistent/inventory.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading /nonexistent/inventory.json"));
}

/// Started on port 0, it says where it listens and answers there.
#[test]
fn serves_on_the_announced_url() {
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--deploy-seconds", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_owned();
    let result = (|| {
        let addr = url
            .strip_prefix("http://")?
            .strip_suffix("/MAAS")?
            .to_owned();
        let mut stream = std::net::TcpStream::connect(addr).ok()?;
        use std::io::{Read, Write};
        stream
            .write_all(b"GET /MAAS/api/version/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        Some(answer)
    })();
    let _ = child.kill();
    let _ = child.wait();
    let answer = result.unwrap_or_else(|| panic!("no answer from {url:?}"));
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n2.0"), "{answer}");
}
