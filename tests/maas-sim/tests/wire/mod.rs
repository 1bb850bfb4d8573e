//! Raw HTTP for the package's tests: a request signed with the key
//! `ck:tk:secret`-style PLAINTEXT header MAAS clients send, and one response
//! read off a kept-alive connection.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{SystemTime, UNIX_EPOCH};

/// Writes `method path` with an OAuth PLAINTEXT header for
/// `consumer:token:secret` (a fresh nonce each time) and a JSON `body`.
pub fn send(stream: &mut TcpStream, key: &str, method: &str, path: &str, body: &str) {
    send_typed(stream, key, method, path, "application/json", body);
}

/// [`send`] with a form body (`a=1&b=2`), as MAAS clients POST.
pub fn send_form(stream: &mut TcpStream, key: &str, method: &str, path: &str, body: &str) {
    send_typed(
        stream,
        key,
        method,
        path,
        "application/x-www-form-urlencoded",
        body,
    );
}

fn send_typed(
    stream: &mut TcpStream,
    key: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) {
    static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let parts: Vec<&str> = key.split(':').collect();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let nonce = NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let text = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: OAuth \
         oauth_consumer_key=\"{}\", oauth_token=\"{}\", oauth_signature=\"%26{}\", \
         oauth_signature_method=\"PLAINTEXT\", oauth_timestamp=\"{now}\", \
         oauth_nonce=\"{}-{nonce}\"\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        parts[0],
        parts[1],
        parts[2],
        std::process::id(),
        body.len()
    );
    stream.write_all(text.as_bytes()).unwrap();
}

/// Reads one response with a Content-Length body: (head, body).
pub fn receive(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "connection closed");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    (head, body)
}
