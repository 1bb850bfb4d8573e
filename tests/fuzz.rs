//! The fuzz campaign: every parser fed from outside, on stable Rust, with a
//! small deterministic mutator instead of a fuzzing engine (no new
//! dependency, no nightly). Each target starts from a corpus of valid
//! inputs (the real MAAS fixtures when `../shared/maas-fixtures` is there)
//! and hostile ones (billion laughs, deep nesting, huge numbers), mutates
//! them (bit flips, dictionary tokens, splices, repeats, cuts), and feeds
//! each to the parser's public entry point. It asserts: no panic, and a
//! bounded peak resident set.
//!
//! Budget: `CAPMAAS_FUZZ_SECONDS` per target (default 3, so CI spends
//! about 20 s of CPU); `CAPMAAS_FUZZ_SEED` replays a run (the seed and the
//! offending input are printed on failure); `CAPMAAS_FUZZ_KEEP_LONGEST=DIR`
//! writes each target's slowest input to `DIR/<target>.longest`. Longer by hand:
//!
//!     CAPMAAS_FUZZ_SECONDS=120 cargo test --release --test fuzz -- --nocapture
//!
//! Targets: the watch stream decoder, Kubernetes Status/error bodies,
//! kubeconfig YAML, MAAS JSON of every type, MAAS error bodies, the probe
//! server's request head (over a real socket), flag values (the real
//! binary).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use capmaas::kube;
use capmaas::maas;

/// Largest input tried: every real input of these parsers is smaller, and
/// the clients' limits cap what reaches them.
const MAX_INPUT: usize = 64 * 1024;

/// SplitMix64: small, fast, and the same sequence on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Bytes that change what a JSON, YAML or HTTP parser does.
const SPECIAL: &[u8] = b"\0\xff\"'{}[]:,\\\n\r\t -+.eE0179&*!|>#%@`?";

/// One to eight mutations of `input`, using `tokens` and `corpus` for
/// insertions and splices.
fn mutate(rng: &mut Rng, input: &[u8], tokens: &[&[u8]], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(8) {
        let len = out.len();
        let at = rng.below(len + 1);
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = *rng.pick(SPECIAL);
            }
            2 => {
                let token = rng.pick(tokens);
                out.splice(at..at, token.iter().copied());
            }
            3 if len > 0 => {
                let end = (at + 1 + rng.below(64)).min(len);
                out.drain(at.min(len - 1)..end);
            }
            4 if len > 0 => {
                // Repeat a slice many times: deep nesting, long runs.
                let start = rng.below(len);
                let end = (start + 1 + rng.below(16)).min(len);
                let piece = out[start..end].to_vec();
                let most = if rng.below(4) == 0 { 2000 } else { 8 };
                let times = 1 + rng.below(most);
                let repeated: Vec<u8> = piece
                    .iter()
                    .copied()
                    .cycle()
                    .take(piece.len() * times)
                    .collect();
                out.splice(start..start, repeated);
            }
            5 => out.truncate(at),
            6 => {
                let other = rng.pick(corpus);
                let from = rng.below(other.len() + 1);
                let to = (from + rng.below(256)).min(other.len());
                out.splice(at..at, other[from..to].iter().copied());
            }
            7 => {
                for _ in 0..1 + rng.below(16) {
                    out.insert(at.min(out.len()), rng.next() as u8);
                }
            }
            8 if len > 1 => {
                let a = rng.below(len);
                let b = rng.below(len);
                out.swap(a, b);
            }
            _ => {
                let token = rng.pick(tokens);
                if !token.is_empty() && len > 0 {
                    let end = (at + token.len()).min(len);
                    out.splice(at.min(len)..end, token.iter().copied());
                }
            }
        }
        out.truncate(MAX_INPUT);
    }
    out
}

fn budget() -> Duration {
    let seconds = std::env::var("CAPMAAS_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(seconds.max(0.1))
}

fn seed(target: &str) -> u64 {
    let base = std::env::var("CAPMAAS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0x5eed_c0de);
    // Each target its own stream, reproducible from the one seed.
    target
        .bytes()
        .fold(base, |h, b| h.rotate_left(5) ^ u64::from(b))
}

fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

/// Runs `check` on the corpus, then on mutants until the budget is spent.
/// `check` returns normally for any input (errors are fine); a panic is a
/// finding. Prints what ran; fails with the seed and the first findings.
fn campaign(target: &str, corpus: Vec<Vec<u8>>, tokens: &[&[u8]], check: impl Fn(&[u8])) {
    let seed = seed(target);
    let mut rng = Rng(seed);
    let budget = budget();
    let rss_before = peak_rss_mib();
    let started = Instant::now();
    let mut inputs = 0u64;
    let mut longest = (Duration::ZERO, Vec::new());
    let mut findings: Vec<(u64, String, Vec<u8>)> = Vec::new();
    // Returns whether the input panicked.
    let mut run = |input: Vec<u8>, inputs: &mut u64| -> bool {
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let took = t.elapsed();
        if took > longest.0 {
            longest = (took, input.clone());
        }
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            findings.push((*inputs, message, input));
            *inputs += 1;
            return true;
        }
        *inputs += 1;
        false
    };
    for input in &corpus {
        run(input.clone(), &mut inputs);
    }
    let mut found = 0;
    while started.elapsed() < budget && found < 5 {
        let base = rng.pick(&corpus).clone();
        let input = mutate(&mut rng, &base, tokens, &corpus);
        found += usize::from(run(input, &mut inputs));
    }
    let grown = peak_rss_mib().saturating_sub(rss_before);
    if let Ok(dir) = std::env::var("CAPMAAS_FUZZ_KEEP_LONGEST") {
        // For a look at what took longest: DIR/<target>.longest
        let _ = std::fs::write(format!("{dir}/{target}.longest"), &longest.1);
    }
    eprintln!(
        "fuzz {target}: {inputs} inputs in {:.1} s (seed {seed}), longest {:.1} ms \
         ({} bytes), peak RSS +{grown} MiB",
        started.elapsed().as_secs_f64(),
        longest.0.as_secs_f64() * 1000.0,
        longest.1.len()
    );
    if let Some((n, message, input)) = findings.first() {
        panic!(
            "fuzz {target}: {} panics (CAPMAAS_FUZZ_SEED={seed}); first at input {n}: {message}\n\
             input ({} bytes): {:?}",
            findings.len(),
            input.len(),
            String::from_utf8_lossy(&input[..input.len().min(2000)])
        );
    }
    assert!(grown < 256, "fuzz {target}: peak RSS grew by {grown} MiB");
}

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/maas-fixtures");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            std::fs::read(e.path()).ok().map(|b| (name, b))
        })
        .collect();
    files.sort();
    files
}

const JSON_TOKENS: &[&[u8]] = &[
    b"null",
    b"true",
    b"false",
    b"0",
    b"-0",
    b"1e999",
    b"-1e-999",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"3.4e38",
    b"\"\"",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"{}",
    b"[]",
    b"[[[[[[[[[[[[[[[[",
    b"{\"a\":",
    b"\"status\":",
    b"\"system_id\":",
    b"\"power_state\":",
    b"\"ip_addresses\":",
    b"\"interface_set\":",
    b"\"metadata\":",
    b"\"resourceVersion\":",
    b"\"type\":\"ERROR\"",
    b"\"code\":",
    b"\"details\":",
    b"\"causes\":",
    b"\"retryAfterSeconds\":",
    b"\"owner_data\":",
    b"\xf0\x9f\x92\xa9",
    b"\xc3\x28",
];

#[test]
fn fuzz_watch_stream_decoder() {
    let event = |t: &str, obj: &str| format!("{{\"type\":\"{t}\",\"object\":{obj}}}\n");
    let obj = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","resourceVersion":"12","finalizers":["x"]},"data":{"k":"v\n{"}}"#;
    let mut corpus: Vec<Vec<u8>> = vec![
        [
            event("ADDED", obj),
            event("MODIFIED", obj),
            event("DELETED", obj),
            event("BOOKMARK", r#"{"metadata":{"resourceVersion":"15"}}"#),
        ]
        .concat()
        .into_bytes(),
        event(
            "ERROR",
            r#"{"kind":"Status","code":410,"reason":"Expired","message":"too old"}"#,
        )
        .into_bytes(),
        event("ERROR", r#"{"code":"x"}"#).into_bytes(),
        b"<html>502 Bad Gateway</html>".to_vec(),
        [
            b"{\"type\":\"ADDED\",\"object\":".as_slice(),
            &b"[".repeat(5000),
        ]
        .concat(),
        event("ADDED", obj).repeat(200).into_bytes(),
    ];
    corpus.push(Vec::new());
    campaign("watch-stream", corpus, JSON_TOKENS, |input| {
        // 16 KiB per event: the mutants' long runs meet the limit too.
        let events = kube::fuzz::watch_stream(input.to_vec(), 16 * 1024).take(10_000);
        for event in events.flatten() {
            let _ = event.resource_version();
        }
    });
}

#[test]
fn fuzz_kubernetes_status_bodies() {
    let corpus: Vec<Vec<u8>> = vec![
        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"configmaps"},"code":404}"#.to_vec(),
        br#"{"reason":"Invalid","message":"bad","code":422,"details":{"causes":[{"reason":"FieldValueRequired","message":"Required value","field":"metadata.name"}]}}"#.to_vec(),
        br#"{"reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":18446744073709551615}}"#.to_vec(),
        b"<html><body>upstream connect error</body></html>".to_vec(),
        "\u{1F4A9}".repeat(300).into_bytes(),
        Vec::new(),
    ];
    let statuses = [
        400u16, 401, 403, 404, 409, 410, 415, 422, 429, 500, 503, 0, 999, 65535,
    ];
    campaign("status-bodies", corpus, JSON_TOKENS, |input| {
        let status = statuses[input.len() % statuses.len()];
        let err = kube::fuzz::status_error(status, input);
        let shown = err.to_string();
        assert!(
            shown.len() < 4 * MAX_INPUT,
            "message of {} bytes",
            shown.len()
        );
        let _ = (err.is_transient(), err.retry_after(), err.status());
    });
}

#[test]
fn fuzz_kubeconfig_yaml() {
    let base = "apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    insecure-skip-tls-verify: true
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
users:
- name: u1
  user:
    token: abc.def
";
    let mut laughs = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 1..12 {
        let prev = (b'a' + i - 1) as char;
        let cur = (b'a' + i) as char;
        laughs.push_str(&format!(
            "{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
    }
    laughs.push_str("current-context: *l\n");
    let corpus: Vec<Vec<u8>> = vec![
        base.as_bytes().to_vec(),
        laughs.into_bytes(),
        format!("clusters: {}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
        format!(
            "users:\n{}",
            (0..2000)
                .map(|i| format!("{}- a\n", " ".repeat(i % 200)))
                .collect::<String>()
        )
        .into_bytes(),
        format!("current-context: {}\n", "x".repeat(60_000)).into_bytes(),
        b"--- !!binary |\n  AAAA\n...\n%YAML 1.2\n---\n{? [a]: b}\n".to_vec(),
        Vec::new(),
    ];
    let tokens: &[&[u8]] = &[
        b"&a ",
        b"*a",
        b"<<: *a\n",
        b"!!binary ",
        b"!!str ",
        b"- ",
        b": ",
        b"? ",
        b"{",
        b"}",
        b"[",
        b"]",
        b"---\n",
        b"...\n",
        b"%YAML 1.2\n",
        b"%TAG ! tag:x,2000:\n",
        b"|\n",
        b">-\n",
        b"\t",
        b"client-key-data: ",
        b"certificate-authority-data: LS0t",
        b"tokenFile: /etc/passwd",
        b"exec: {command: sh}",
        b"\"\\x00\"",
        b"'",
        b"#",
        b"  ",
        b"\n",
    ];
    campaign("kubeconfig-yaml", corpus, tokens, |input| {
        if let Err(e) = kube::Config::from_kubeconfig_yaml(input, None, None) {
            let _ = e.to_string();
        }
    });
}

#[test]
fn fuzz_maas_json_of_every_type() {
    let mut corpus: Vec<Vec<u8>> = fixtures()
        .into_iter()
        .filter(|(name, _)| name != "errors.json")
        .map(|(_, bytes)| bytes)
        .collect();
    corpus.extend([
        br#"{"system_id":"abc123","hostname":"n1","status":6,"status_name":"Deployed","power_state":"on","zone":{"name":"z"},"pool":{"name":"p"},"ip_addresses":["10.0.0.5"],"owner_data":{"k":"v"},"interface_set":[{"name":"eth0","mac_address":"aa:bb"}]}"#.to_vec(),
        br#"[{"id":1,"fqdn":"a.maas","address_ttl":10,"ip_addresses":[{"ip":"10.0.0.1"}]}]"#.to_vec(),
        br#"[{"id":0,"name":"default","description":""}]"#.to_vec(),
        br#"[{"id":7,"name":"custom/u-2204","architecture":"amd64/generic","type":"Uploaded"}]"#.to_vec(),
        br#"{"username":"admin","email":null,"is_superuser":true}"#.to_vec(),
        br#"{"state":"unknown"}"#.to_vec(),
        b"null".to_vec(),
    ]);
    campaign("maas-json", corpus, JSON_TOKENS, |input| {
        let _ = serde_json::from_slice::<maas::Machine>(input);
        let _ = serde_json::from_slice::<Vec<maas::Machine>>(input);
        let _ = serde_json::from_slice::<Vec<maas::DnsResource>>(input);
        let _ = serde_json::from_slice::<maas::DnsResource>(input);
        let _ = serde_json::from_slice::<Vec<maas::Domain>>(input);
        let _ = serde_json::from_slice::<Vec<maas::Zone>>(input);
        let _ = serde_json::from_slice::<Vec<maas::ResourcePool>>(input);
        if let Ok(resources) = serde_json::from_slice::<Vec<maas::BootResource>>(input) {
            let _ = maas::check_image("ubuntu/jammy", &resources);
            let _ = maas::check_image(&String::from_utf8_lossy(input), &resources);
        }
        let _ = serde_json::from_slice::<maas::User>(input);
        let _ = serde_json::from_slice::<maas::PowerState>(input);
        let _ = serde_json::from_slice::<maas::Interface>(input);
    });
}

#[test]
fn fuzz_maas_error_bodies() {
    let mut corpus: Vec<Vec<u8>> = fixtures()
        .into_iter()
        .filter(|(name, _)| name == "errors.json")
        .map(|(_, bytes)| bytes)
        .collect();
    corpus.extend([
        br#"{"distro_series": ["'x' is not a valid distro_series."], "__all__": ["No"]}"#.to_vec(),
        b"No machine with system ID abc available.".to_vec(),
        b"Authorization Error: 'Invalid signature. Expected signature base string: &S3cret'"
            .to_vec(),
        b"Authorization Error: 'Invalid signature. Expected signature base string: ".to_vec(),
        b"<!DOCTYPE html><html><body><h1>502</h1></body></html>".to_vec(),
        "\u{e9}".repeat(3000).into_bytes(),
    ]);
    let statuses = [400u16, 401, 403, 404, 409, 500, 503, 302];
    campaign("maas-error-bodies", corpus, JSON_TOKENS, |input| {
        let text = String::from_utf8_lossy(input);
        let body = maas::MaasBody::parse(&text);
        let _ = body.to_string();
        let status = statuses[input.len() % statuses.len()];
        let err = maas::Error::from_response("fuzz", status, &text, None);
        let shown = err.to_string();
        assert!(
            shown.len() < 3 * MAX_INPUT,
            "message of {} bytes",
            shown.len()
        );
        let _ = (err.is_transient(), err.message());
    });
}

#[test]
fn fuzz_probe_server_request_head() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::Arc;

    let health = Arc::new(capmaas::serve::Health::new(
        capmaas::runtime::LeaderGate::always_open(),
    ));
    let (addr, _thread) = capmaas::serve::start(
        "127.0.0.1:0".parse().unwrap(),
        capmaas::serve::Routes::Both(health),
    )
    .unwrap();
    let corpus: Vec<Vec<u8>> = vec![
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.34\r\n\r\n".to_vec(),
        b"HEAD /readyz?verbose HTTP/1.0\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/1.1\r\nAccept: text/plain\r\n\r\n".to_vec(),
        b"POST /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
        b"GET http://x/ HTTP/1.1\r\n\r\n".to_vec(),
        [
            b"GET / HTTP/1.1\r\nX: ".as_slice(),
            &[b'a'; 9000],
            b"\r\n\r\n",
        ]
        .concat(),
    ];
    let tokens: &[&[u8]] = &[
        b"\r\n",
        b"\r\n\r\n",
        b"\n\n",
        b" HTTP/1.1",
        b" HTTP/2",
        b"GET ",
        b"HEAD ",
        b"/healthz",
        b"/readyz",
        b"/metrics",
        b"%00",
        b"?",
        b"#",
        b"\t",
        b"Host: ",
        b"Transfer-Encoding: chunked",
        b"\xff\xfe",
    ];
    campaign("probe-request-head", corpus, tokens, |input| {
        let mut stream = TcpStream::connect(addr).expect("the server is up");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(input);
        // Half-close: a head without its blank line is answered at EOF by
        // closing; the server must never hang or die on it.
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.1 "),
            "not an HTTP answer: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        );
    });
    // Still serving after everything above.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
}

#[test]
fn fuzz_flag_values() {
    let flags = [
        "sync-period",
        "maas-watch-interval",
        "leader-elect-lease-duration",
        "leader-elect-renew-deadline",
        "leader-elect-retry-period",
        "shutdown-timeout",
        "maascluster-concurrency",
        "maasmachine-concurrency",
        "metrics-bind-address",
        "health-probe-bind-address",
        "namespace",
        "leader-election-id",
        "leader-election-namespace",
        "watch-filter",
        "leader-elect",
        "release-erase",
        "no-swap-update",
        "kubeconfig",
        "maas-ca-file",
    ];
    let corpus: Vec<Vec<u8>> = [
        "10m",
        "1m30s",
        "18446744073709551615s1s",
        "500ms",
        "24h",
        "0",
        ":8081",
        "[::1]:8080",
        "127.0.0.1:65535",
        "true",
        "capmaas-system",
        "a.b-c",
        "Team_A.1",
        "99999999999999999999h",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let tokens: &[&[u8]] = &[
        b"ms",
        b"s",
        b"m",
        b"h",
        b"us",
        b"0",
        b"9",
        b"18446744073709551615",
        b":",
        b"[",
        b"]",
        b"::",
        b".",
        b"-",
        b"=",
        b"--",
        b"\xc3\xa9",
    ];
    let bin = env!("CARGO_BIN_EXE_capmaas");
    campaign("flag-values", corpus, tokens, |input| {
        // Arguments cannot hold NUL; the rest goes through as the OS allows.
        let value: String = String::from_utf8_lossy(input).replace('\0', "");
        let flag = flags[input.len() % flags.len()];
        let output = std::process::Command::new(bin)
            .arg(format!("--{flag}={value}"))
            .env_remove("MAAS_ENDPOINT")
            .env_remove("MAAS_API_KEY")
            .env_remove("KUBECONFIG")
            .output()
            .expect("capmaas runs");
        // 2: refused flag; 1: flags fine, stopped for the missing
        // MAAS_ENDPOINT. Anything else (101 panic, 134 abort) is a finding.
        let code = output.status.code();
        assert!(
            matches!(code, Some(1 | 2)),
            "--{flag}={value:?} exited {code:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}
