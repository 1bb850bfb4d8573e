//! A measurement, not a test (ignored by default; numbers go to
//! BENCHMARKS.md, "MAAS watch (issue 11)"): what the MAAS watch costs MAAS
//! and this process, at 100 and 1,000 machines, with the simulator 50 ms
//! away.
//!
//!     cargo build --release -p maas-sim
//!     cargo test --release --test bench_maas_watch -- --ignored --nocapture
//!
//! The simulator runs as a child process (`target/release/maas-sim`, or
//! `MAAS_SIM_BIN`), so this process holds only the watch and the test
//! harness: its resident set and the watch thread's CPU time are the
//! watch's. Per size: the first list; then, at the default 15 s interval,
//! a window (`BENCH_WINDOW_SECONDS`, default 60) with every machine
//! Deployed (idle), and one with a tenth of them Releasing (in transit:
//! their event log is followed). Reported: MAAS calls per minute by kind,
//! list and events-query durations, VmRSS/VmHWM, the thread's CPU time.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capmaas::maas::watch::{MaasWatch, SourceId, WatchConfig};
use capmaas::maas::{ApiKey, Client, ClientConfig};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;

const KEY: &str = "SimConsumerKey0001:SimTokenKey0000001:SimTokenSecret000000000000000001";

/// `n` machines Deployed for the admin, powered on, with an address each.
fn inventory(n: usize) -> Value {
    let machines: Vec<Value> = (0..n)
        .map(|i| {
            json!({"hostname": format!("m-{i:04}"), "pool": "p", "zone": "z",
                   "status": "Deployed", "owner": "admin", "power_state": "on",
                   "tags": ["worker"], "disks_gb": [240, 960],
                   "ip_addresses": [format!("127.20.{}.{}", i / 250, i % 250 + 1)]})
        })
        .collect();
    json!({
        "api_keys": [{"key": KEY, "username": "admin", "is_superuser": true}],
        "zones": [{"name": "z"}],
        "pools": [{"name": "p"}],
        "tags": ["worker"],
        "subnet": {"cidr": "127.20.0.0/16", "gateway_ip": "127.20.0.1"},
        "machines": machines,
    })
}

/// The simulator as a child process, driven through the tests' helper.
struct Sim {
    child: Child,
    sim: MaasSim,
}

impl Sim {
    fn start(machines: usize) -> Sim {
        let bin = std::env::var_os("MAAS_SIM_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| support::repo_root().join("target/release/maas-sim"));
        assert!(
            bin.exists(),
            "{} missing: run `cargo build --release -p maas-sim` first (or set MAAS_SIM_BIN)",
            bin.display()
        );
        let dir = support::tempdir("bench-maas-watch").unwrap();
        let file = dir.join("inventory.json");
        let inventory = inventory(machines);
        std::fs::write(&file, inventory.to_string()).unwrap();
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--release-seconds", "100000"])
            .arg("--inventory")
            .arg(&file)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Sim {
            child,
            sim: MaasSim::attach(line.trim(), &inventory),
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds (user + system) of the thread named `name`.
fn thread_cpu(name: &str) -> f64 {
    // USER_HZ: 100 on every Linux this runs on.
    let ticks = 100.0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is 3rd, utime 14th, stime 15th.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        return (utime + stime) / ticks;
    }
    0.0
}

/// Sum and count of a histogram series in the process's registry.
fn histogram(name: &str, label: &str) -> (f64, f64) {
    let text = capmaas::metrics::render();
    let value = |suffix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{suffix}{{")) && l.contains(label))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    };
    (value("_sum"), value("_count"))
}

fn per_minute(calls: &BTreeMap<String, u64>, key: &str, window: Duration) -> f64 {
    calls.get(key).copied().unwrap_or(0) as f64 * 60.0 / window.as_secs_f64()
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn measure(machines: usize, window: Duration) {
    println!("\n== {machines} machines, 50 ms latency, default interval (15 s) ==");
    let sim = Sim::start(machines);
    sim.sim.set_latency_ms(50);
    let mut config = ClientConfig::new(sim.sim.url.clone(), ApiKey::parse(KEY).unwrap());
    config.timeout = Duration::from_secs(60);
    let client = Client::new(config).unwrap();
    let source = SourceId::of(&client, "admin");
    let label = source.to_string();
    let (stop, stop_rx) = crossbeam_channel::bounded(1);
    let rss_before = status_kib("VmRSS:");
    let (seen_tx, seen) = crossbeam_channel::unbounded();
    let watch = MaasWatch::spawn(
        WatchConfig::default(),
        move |_| {
            let _ = seen_tx.send(());
        },
        stop_rx,
    )
    .unwrap();
    let started = Instant::now();
    watch.set_sources(vec![(source.clone(), client)]);
    for _ in 0..machines {
        seen.recv_timeout(Duration::from_secs(120)).unwrap();
    }
    let (list_sum, list_count) = histogram("maas_watch_list_duration_seconds", &label);
    println!(
        "first list (cold, includes the start mark): {:.0} ms until all {machines} reported; list {:.0} ms",
        started.elapsed().as_secs_f64() * 1000.0,
        list_sum / list_count.max(1.0) * 1000.0
    );
    println!(
        "VmRSS before the watch {}, after the first list {}",
        mib(rss_before),
        mib(status_kib("VmRSS:"))
    );

    for phase in ["idle (all Deployed)", "a tenth Releasing (in transit)"] {
        if phase.starts_with("a tenth") {
            // The ids from the watch's own view: reading the simulator's
            // state would put megabytes into this process's numbers.
            let mut ids: Vec<String> = watch
                .machines(&source)
                .into_iter()
                .map(|m| m.machine.system_id.clone())
                .collect();
            ids.sort();
            for id in ids.iter().take(machines / 10) {
                sim.sim.release_out_of_band(id, json!({}));
            }
            // Let one interval see them enter transit.
            std::thread::sleep(Duration::from_secs(16));
        }
        let (ls0, lc0) = histogram("maas_watch_list_duration_seconds", &label);
        let (es0, ec0) = histogram("maas_api_request_duration_seconds", "events_query");
        let cpu0 = thread_cpu("maas-watch");
        sim.sim.reset_calls();
        let t0 = Instant::now();
        std::thread::sleep(window);
        let elapsed = t0.elapsed();
        let calls = sim.sim.calls();
        let cpu = thread_cpu("maas-watch") - cpu0;
        let (ls1, lc1) = histogram("maas_watch_list_duration_seconds", &label);
        let (es1, ec1) = histogram("maas_api_request_duration_seconds", "events_query");
        let lists = per_minute(&calls, "GET machines/", elapsed);
        let queries = per_minute(&calls, "GET events/ op=query", elapsed);
        let total: u64 = calls.values().sum();
        println!("-- {phase}, {:.0} s window --", elapsed.as_secs_f64());
        println!(
            "MAAS calls per minute: {:.1} ({lists:.1} lists + {queries:.1} events queries); all calls: {calls:?} ({total})",
            lists + queries
        );
        println!(
            "one interval: list {:.0} ms (mean of {}), events query {} ",
            (ls1 - ls0) / (lc1 - lc0).max(1.0) * 1000.0,
            lc1 - lc0,
            if ec1 > ec0 {
                format!(
                    "{:.0} ms (mean of {})",
                    (es1 - es0) / (ec1 - ec0) * 1000.0,
                    ec1 - ec0
                )
            } else {
                "none".into()
            }
        );
        println!(
            "watch thread CPU {:.2} s in the window ({:.2} % of one core); VmRSS {} VmHWM {}",
            cpu,
            cpu / elapsed.as_secs_f64() * 100.0,
            mib(status_kib("VmRSS:")),
            mib(status_kib("VmHWM:"))
        );
    }
    stop.send(()).unwrap();
    assert!(watch.join(Duration::from_secs(5)));
}

#[test]
#[ignore = "benchmark: cargo build --release -p maas-sim && cargo test --release --test bench_maas_watch -- --ignored --nocapture"]
fn maas_watch_cost_at_100_and_1000_machines() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("?", |(_, m)| m.trim());
    println!(
        "machine: {} cores ({model})",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "build: {}",
        if cfg!(debug_assertions) {
            "DEBUG: use --release for numbers"
        } else {
            "release"
        }
    );
    let window = Duration::from_secs(
        std::env::var("BENCH_WINDOW_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    );
    for machines in [100, 1000] {
        measure(machines, window);
    }
}
