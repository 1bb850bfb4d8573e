//! TLS to MAAS: verification is on, an extra CA bundle is honoured, a wrong
//! or missing CA is a permanent TLS error; a redirect is reported clearly.
//! A minimal rustls server stands in for a MAAS with its own CA.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capmaas::maas::{ApiKey, Client, ClientConfig, ErrorKind};

fn material(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/inventory/tls")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Reads one request's head from `stream` and answers `response`.
fn answer(stream: &mut (impl std::io::Read + Write), response: &str) {
    let mut reader = BufReader::new(&mut *stream);
    let mut line = String::new();
    while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        if line == "\r\n" {
            break;
        }
        line.clear();
    }
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}

const WHOAMI: &str = "{\"username\": \"tls-admin\", \"email\": \"\", \"is_superuser\": true}";

/// An HTTPS "MAAS" on 127.0.0.1 that answers every request with whoami.
fn tls_server() -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&material("server.pem"))
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&material("server.key")).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{WHOAMI}",
                    WHOAMI.len()
                );
                answer(&mut tls, &response);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    format!("https://127.0.0.1:{port}/MAAS")
}

fn config(endpoint: String, ca: Option<Vec<u8>>) -> ClientConfig {
    let mut config = ClientConfig::new(endpoint, ApiKey::parse("ck:tk:secret").unwrap());
    config.extra_ca_pem = ca;
    config.timeout = Duration::from_secs(10);
    config.max_retries = 2;
    config
}

#[test]
fn extra_ca_bundle_is_trusted() {
    let endpoint = tls_server();
    let client = Client::new(config(endpoint, Some(material("ca.pem")))).unwrap();
    assert_eq!(client.whoami().unwrap().username, "tls-admin");
}

#[test]
fn unknown_ca_is_a_permanent_tls_error() {
    let endpoint = tls_server();
    for ca in [None, Some(material("other-ca.pem"))] {
        let with_ca = ca.is_some();
        let err = Client::new(config(endpoint.clone(), ca))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(
            err.kind(),
            &ErrorKind::Tls,
            "with other CA: {with_ca}: {err}"
        );
        assert!(!err.is_transient(), "{err}");
        assert_eq!(err.attempts(), 1, "{err}");
    }
}

#[test]
fn redirect_is_reported_not_followed() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            answer(
                &mut stream,
                "HTTP/1.1 301 Moved Permanently\r\nLocation: https://maas.example:5443/MAAS/api/2.0/users/?op=whoami\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let err = Client::new(config(format!("http://127.0.0.1:{port}/MAAS"), None))
        .unwrap()
        .check()
        .unwrap_err();
    assert_eq!(err.http_status(), Some(301));
    assert!(!err.is_transient());
    assert!(
        err.message()
            .contains("redirected to https://maas.example:5443/"),
        "{err}"
    );
}
