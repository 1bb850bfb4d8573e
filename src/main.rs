//! The `capmaas` operator binary: flags and environment → configuration
//! (failing fast with a clear message, secrets redacted), logging, the
//! Kubernetes and MAAS clients; then [`capmaas::controllers::manager::run`]
//! starts the controllers and stops them on SIGTERM/SIGINT or lost
//! leadership. Exit status: 0 after a clean stop, 1 after lost leadership
//! or a failed start, 2 for bad flags.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use capmaas::controllers::adopt;
use capmaas::controllers::credentials::Credentials;
use capmaas::controllers::doctor;
use capmaas::controllers::manager::{self, Stopped};
use capmaas::controllers::Options;
use capmaas::kube;
use capmaas::maas;
use capmaas::runtime::{self, LeaderConfig};

const USAGE: &str = "capmaas: Cluster API infrastructure provider for Canonical MAAS

USAGE:
    capmaas [FLAGS]          run the controllers
    capmaas adopt [FLAGS]    adopt the Go provider's machines once (capmaas adopt --help)
    capmaas doctor [FLAGS]   check MAAS and the objects, report orphans (capmaas doctor --help)

ENVIRONMENT:
    MAAS_ENDPOINT   MAAS URL, e.g. http://10.0.0.1:5240/MAAS (required)
    MAAS_API_KEY    MAAS API key <consumer>:<token>:<secret> (required, never logged)
    RUST_LOG        log filter (default: info)

FLAGS:
    --kubeconfig PATH                      kubeconfig of the management cluster
                                           (default: $KUBECONFIG, else in-cluster)
    --namespace NS                         watch only this namespace (default: all)
    --watch-filter VALUE                   only objects labelled cluster.x-k8s.io/watch-filter=VALUE
                                           (default: no filter)
    --maascluster-concurrency N            MaasCluster workers (default: 10; 1 to 256)
    --maasmachine-concurrency N            MaasMachine workers (default: 10; 1 to 256)
    --sync-period DURATION                 re-reconcile every object this often (default: 10m;
                                           1s to 24h)
    --maas-watch-interval DURATION         list the machines of each MAAS user this often, to
                                           notice changes made in MAAS (default: 15s; 5s to 1h)
    --leader-elect[=BOOL]                  elect a leader with a Lease (default: false)
    --leader-elect-lease-duration DURATION (default: 15s; 1s to 1h)
    --leader-elect-renew-deadline DURATION (default: 10s; 100ms to 1h; below the lease)
    --leader-elect-retry-period DURATION   (default: 2s; 100ms to 1h; renew > 1.2 x retry)
    --leader-election-id NAME              the Lease's name (default: capmaas-leader-election)
    --leader-election-namespace NS         the Lease's namespace (default: the pod's namespace,
                                           else the kubeconfig's, else default)
    --metrics-bind-address ADDR            /metrics (default: 127.0.0.1:8080; \"0\" disables)
    --health-probe-bind-address ADDR       /healthz, /readyz (default: :8081; \"0\" disables)
    --maas-ca-file PATH                    verify MAAS with the CA certificate(s) (PEM) in this
                                           file instead of the public roots (default: public roots)
    --maas-endpoint-allow URL[,URL...]     per-cluster credentials (spec.identityRef) may only
                                           name these MAAS endpoints (repeatable; default: any)
    --no-swap-update[=BOOL]                do not set swap_size=0 before deploy; needed with a
                                           non-admin MAAS key (default: false)
    --release-erase[=BOOL]                 erase disks when releasing machines (default: false)
    --dns-attach-without-api-check[=BOOL]  add a control-plane machine to the API server's DNS
                                           record as soon as it runs, without waiting for its
                                           API server to answer on its address (for a manager
                                           that cannot reach the machines; default: false)
    --shutdown-timeout DURATION            how long running reconciles may finish on SIGTERM
                                           (default: 30s; 0s to 1h)
    -h, --help                             print this help
    -V, --version                          print the version

DURATION is a number with a unit: 500ms, 15s, 10m, 2h, 1m30s. ADDR is IP:PORT or :PORT.
Values out of range are refused at start with the flag's name and range.
";

/// Every setting, from flags and the environment.
#[derive(Debug)]
struct Config {
    kubeconfig: Option<PathBuf>,
    namespace: Option<String>,
    watch_filter: Option<String>,
    maascluster_concurrency: usize,
    maasmachine_concurrency: usize,
    sync_period: Duration,
    maas_watch_interval: Duration,
    leader_elect: bool,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    leader_election_id: String,
    leader_election_namespace: Option<String>,
    metrics_bind_address: Option<SocketAddr>,
    health_probe_bind_address: Option<SocketAddr>,
    maas_ca_file: Option<PathBuf>,
    /// `--maas-endpoint-allow`, as API roots.
    maas_endpoint_allow: Vec<String>,
    options: Options,
    shutdown_timeout: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            kubeconfig: None,
            namespace: None,
            watch_filter: None,
            maascluster_concurrency: 10,
            maasmachine_concurrency: 10,
            sync_period: Duration::from_secs(600),
            maas_watch_interval: Duration::from_secs(15),
            leader_elect: false,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            leader_election_id: "capmaas-leader-election".into(),
            leader_election_namespace: None,
            metrics_bind_address: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
            health_probe_bind_address: Some(SocketAddr::from(([0, 0, 0, 0], 8081))),
            maas_ca_file: None,
            maas_endpoint_allow: Vec::new(),
            options: Options::default(),
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

enum Parsed {
    Run(Box<Config>),
    Help,
    Version,
}

fn parse_args(args: &[String]) -> Result<Parsed, String> {
    let mut config = Config::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let arg = arg.as_str();
        if arg == "-h" || arg == "--help" {
            return Ok(Parsed::Help);
        }
        if arg == "-V" || arg == "--version" {
            return Ok(Parsed::Version);
        }
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?} (see --help)"));
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (flag, None),
        };
        let is_bool = matches!(
            name,
            "leader-elect" | "no-swap-update" | "release-erase" | "dns-attach-without-api-check"
        );
        let value = if is_bool {
            inline.unwrap_or_else(|| "true".to_string())
        } else {
            match inline {
                Some(value) => value,
                None => {
                    let value = args
                        .next()
                        .ok_or_else(|| format!("--{name} needs a value"))?;
                    value.clone()
                }
            }
        };
        if value.len() > MAX_VALUE_LEN {
            return Err(format!("--{name}: value too long ({} bytes)", value.len()));
        }
        let value = value.as_str();
        match name {
            "kubeconfig" => config.kubeconfig = Some(parse_path(name, value)?),
            "namespace" => config.namespace = parse_name(name, value, NameRule::Label)?,
            "watch-filter" => config.watch_filter = parse_name(name, value, NameRule::LabelValue)?,
            "maascluster-concurrency" => config.maascluster_concurrency = parse_count(name, value)?,
            "maasmachine-concurrency" => config.maasmachine_concurrency = parse_count(name, value)?,
            "sync-period" => config.sync_period = parse_duration(name, value)?,
            "maas-watch-interval" => config.maas_watch_interval = parse_duration(name, value)?,
            "leader-elect" => config.leader_elect = parse_bool(name, value)?,
            "leader-elect-lease-duration" => config.lease_duration = parse_duration(name, value)?,
            "leader-elect-renew-deadline" => config.renew_deadline = parse_duration(name, value)?,
            "leader-elect-retry-period" => config.retry_period = parse_duration(name, value)?,
            "leader-election-id" => {
                config.leader_election_id = parse_name(name, value, NameRule::Subdomain)?
                    .ok_or_else(|| format!("--{name}: must not be empty"))?
            }
            "leader-election-namespace" => {
                config.leader_election_namespace = parse_name(name, value, NameRule::Label)?
            }
            "metrics-bind-address" => config.metrics_bind_address = parse_address(name, value)?,
            "health-probe-bind-address" => {
                config.health_probe_bind_address = parse_address(name, value)?
            }
            "maas-ca-file" => config.maas_ca_file = Some(parse_path(name, value)?),
            "maas-endpoint-allow" => config
                .maas_endpoint_allow
                .extend(parse_endpoints(name, value)?),
            "no-swap-update" => config.options.no_swap_update = parse_bool(name, value)?,
            "release-erase" => config.options.release_erase = parse_bool(name, value)?,
            "dns-attach-without-api-check" => {
                config.options.dns_attach_without_api_check = parse_bool(name, value)?
            }
            "shutdown-timeout" => config.shutdown_timeout = parse_duration(name, value)?,
            _ => return Err(format!("unknown flag --{name} (see --help)")),
        }
    }
    check_leader_timing(&config)?;
    Ok(Parsed::Run(Box::new(config)))
}

/// Longest flag value read at all: no legitimate value comes near it, and a
/// bound keeps every error message short.
const MAX_VALUE_LEN: usize = 4096;

/// The range each duration flag accepts: a zero or a year-long period is a
/// typo, not a setting, and refusing it at start beats a busy loop or an
/// overflow later.
fn duration_range(name: &str) -> (Duration, Duration) {
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    match name {
        // Every object re-reconciled; below 1s the resync is a busy loop.
        "sync-period" => (s(1), s(24 * 3600)),
        // One list of every machine per MAAS user and interval: below 5s
        // that is a heavy load on MAAS; above an hour, nothing is watched.
        "maas-watch-interval" => (s(5), s(3600)),
        "leader-elect-lease-duration" => (s(1), s(3600)),
        "leader-elect-renew-deadline" | "leader-elect-retry-period" => (ms(100), s(3600)),
        // 0 is allowed: stop at once on SIGTERM.
        "shutdown-timeout" => (Duration::ZERO, s(3600)),
        _ => (ms(1), s(24 * 3600)),
    }
}

/// Worker threads per kind: at least one, at most what a MAAS region and an
/// API server should be asked to serve from one process.
const MAX_CONCURRENCY: usize = 256;

fn parse_count(name: &str, value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_CONCURRENCY).contains(&n) => Ok(n),
        _ => Err(format!(
            "--{name}: expected a whole number from 1 to {MAX_CONCURRENCY}, got {}",
            shown(value)
        )),
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!(
            "--{name}: expected true or false, got {}",
            shown(value)
        )),
    }
}

/// `500ms`, `15s`, `10m`, `2h`, `1m30s` (Go's `time.ParseDuration` subset),
/// within the flag's [`duration_range`]. Overflow is an error, never a
/// panic.
fn parse_duration(name: &str, value: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "--{name}: expected a duration such as 30s, 10m or 1h30m, got {}",
            shown(value)
        )
    };
    let (min, max) = duration_range(name);
    let out_of_range = || {
        format!(
            "--{name}: {} is out of range; expected {} to {}",
            shown(value),
            human(min),
            human(max)
        )
    };
    if value.is_empty() || value.len() > 64 {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        // A number too big for u64 is out of range, not malformed.
        let number: u64 = rest[..digits].parse().map_err(|_| out_of_range())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            _ => return Err(bad()),
        };
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or_else(out_of_range)?;
        rest = &rest[unit_len..];
    }
    if total < min || total > max {
        return Err(out_of_range());
    }
    Ok(total)
}

/// A duration as the flags write it (`90s` → `1m30s`).
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `host:port`, `:port` (all interfaces), or `0` (disabled). The port must
/// be a real one: port 0 would bind somewhere no probe or scraper can know.
fn parse_address(name: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "0" || value.is_empty() {
        return Ok(None);
    }
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    let addr: SocketAddr = full.parse().map_err(|_| {
        format!(
            "--{name}: expected host:port (an IP address and a port), :port or 0, got {}",
            shown(value)
        )
    })?;
    if addr.port() == 0 {
        return Err(format!(
            "--{name}: port 0 is not allowed (use 0 alone to disable), got {}",
            shown(value)
        ));
    }
    Ok(Some(addr))
}

fn parse_path(name: &str, value: &str) -> Result<PathBuf, String> {
    if value.is_empty() || value.len() > MAX_VALUE_LEN || value.contains('\0') {
        return Err(format!(
            "--{name}: expected a file path, got {}",
            shown(value)
        ));
    }
    Ok(PathBuf::from(value))
}

/// A comma-separated list of MAAS endpoints, as API roots (so that
/// `http://h:5240/MAAS` and `http://h:5240/MAAS/api/2.0/` are one).
fn parse_endpoints(name: &str, value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(|url| maas::client::api_root(url).map_err(|e| format!("--{name}: {e}")))
        .collect()
}

/// Which Kubernetes naming rule a flag value follows.
#[derive(Clone, Copy)]
enum NameRule {
    /// RFC 1123 label: namespaces (63 characters, `a-z 0-9 -`).
    Label,
    /// RFC 1123 subdomain: object names such as the Lease (253, also `.`).
    Subdomain,
    /// A label value: 63 characters of `A-Z a-z 0-9 - _ .`, starting and
    /// ending alphanumeric.
    LabelValue,
}

/// An empty value means "unset"; anything else must follow `rule`, so a
/// typo fails at start instead of as a 400 from the API server later.
fn parse_name(name: &str, value: &str, rule: NameRule) -> Result<Option<String>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    let (max, allowed, what): (usize, fn(char) -> bool, &str) = match rule {
        NameRule::Label => (
            63,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-',
            "a namespace name (at most 63 of a-z, 0-9, '-')",
        ),
        NameRule::Subdomain => (
            253,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.',
            "an object name (at most 253 of a-z, 0-9, '-', '.')",
        ),
        NameRule::LabelValue => (
            63,
            |c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'),
            "a label value (at most 63 of A-Z, a-z, 0-9, '-', '_', '.')",
        ),
    };
    let ends_ok = value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    if value.len() > max || !value.chars().all(allowed) || !ends_ok {
        return Err(format!(
            "--{name}: expected {what}, starting and ending with a letter or digit, got {}",
            shown(value)
        ));
    }
    Ok(Some(value.to_string()))
}

/// client-go's rule for the election timings, checked here so that a wrong
/// combination fails before anything starts (also without --leader-elect,
/// so that turning it on later cannot surprise).
fn check_leader_timing(config: &Config) -> Result<(), String> {
    if config.lease_duration <= config.renew_deadline {
        return Err(format!(
            "--leader-elect-lease-duration ({}) must be longer than --leader-elect-renew-deadline ({})",
            human(config.lease_duration),
            human(config.renew_deadline)
        ));
    }
    if config.renew_deadline <= config.retry_period.mul_f64(1.2) {
        return Err(format!(
            "--leader-elect-renew-deadline ({}) must be longer than 1.2 x --leader-elect-retry-period ({})",
            human(config.renew_deadline),
            human(config.retry_period)
        ));
    }
    Ok(())
}

/// A flag value quoted for an error message, cut short if long.
fn shown(value: &str) -> String {
    const MAX: usize = 80;
    if value.len() <= MAX {
        return format!("{value:?}");
    }
    let mut cut = MAX;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{:?}... ({} bytes)", &value[..cut], value.len())
}

/// The PEM of `--maas-ca-file`, if given.
fn maas_ca_pem(config: &Config) -> Result<Option<Vec<u8>>, String> {
    let Some(path) = &config.maas_ca_file else {
        return Ok(None);
    };
    std::fs::read(path)
        .map(Some)
        .map_err(|e| format!("--maas-ca-file {}: {e}", path.display()))
}

/// MAAS_ENDPOINT and MAAS_API_KEY; the key never appears in a message.
fn maas_client(config: &Config) -> Result<maas::Client, String> {
    let endpoint = std::env::var("MAAS_ENDPOINT")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or("MAAS_ENDPOINT is not set; e.g. MAAS_ENDPOINT=http://10.11.130.11:5240/MAAS")?;
    let key = std::env::var("MAAS_API_KEY")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or("MAAS_API_KEY is not set; it is the MAAS API key <consumer>:<token>:<secret>")?;
    let api_key = maas::ApiKey::parse(key.trim()).map_err(|_| {
        "MAAS_API_KEY is not a MAAS API key (expected three parts <consumer>:<token>:<secret>)"
    })?;
    let mut client_config = maas::ClientConfig::new(endpoint.trim(), api_key);
    client_config.extra_ca_pem = maas_ca_pem(config)?;
    maas::Client::new(client_config)
        .map_err(|e| format!("MAAS client for {}: {e}", maas::redact_url(endpoint.trim())))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("adopt") {
        return adopt_main(args.get(1..).unwrap_or_default());
    }
    if args.first().map(String::as_str) == Some("doctor") {
        return doctor_main(args.get(1..).unwrap_or_default());
    }
    let config = match parse_args(&args) {
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("capmaas {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Run(config)) => config,
        Err(e) => {
            eprintln!("capmaas: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    match run(&config) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("capmaas: {e}");
            ExitCode::FAILURE
        }
    }
}

const ADOPT_USAGE: &str = "capmaas adopt: give the Go provider's machines a capmaas identity, once

USAGE:
    capmaas adopt (--namespace NS)... | --all-namespaces  [--apply] [FLAGS]

For every MaasMachine in the namespaces that records a MAAS machine
(spec.systemID) allocated to the MAAS user of its cluster's credentials
and carrying no capmaas identity, writes the object's identity into the
machine's owner data (and the object's annotation). Without --apply it
only prints what it would do. Refused, with the reason: several objects
naming one machine, a machine under another identity, an unallocated
machine, a machine this MAAS user cannot see. Safe to run again.

ENVIRONMENT:
    MAAS_ENDPOINT, MAAS_API_KEY   the controller-wide MAAS credentials, as for the
                                  controller (clusters with spec.identityRef use theirs)

FLAGS:
    --namespace NS        look at this namespace (repeat for more)
    --all-namespaces      look at every namespace
    --apply               change MAAS and the objects (default: dry run)
    --kubeconfig PATH     kubeconfig of the management cluster (default: $KUBECONFIG,
                          else in-cluster)
    --maas-ca-file PATH   verify MAAS with this CA bundle (PEM) instead of the public roots
    -h, --help            print this help

EXIT STATUS: 0 when every machine is adopted (or already was), 1 otherwise, 2 for bad flags.
";

/// A subcommand's arguments as (argument, flag, value): `--flag=value`,
/// `--flag value`, or one of `switches` alone (no value). A flag missing
/// its value gets none, and the caller says which flag needs one.
fn subcommand_flags(args: &[String], switches: &[&str]) -> Vec<(String, String, Option<String>)> {
    let mut out = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None if switches.contains(&arg.as_str()) => (arg.clone(), None),
            None => (arg.clone(), args.next().cloned()),
        };
        out.push((arg.clone(), flag, value));
    }
    out
}

/// `capmaas adopt`'s flags.
#[derive(Debug, Default)]
struct AdoptConfig {
    namespaces: Vec<String>,
    all_namespaces: bool,
    apply: bool,
    kubeconfig: Option<PathBuf>,
    maas_ca_file: Option<PathBuf>,
}

fn parse_adopt_args(args: &[String]) -> Result<Option<AdoptConfig>, String> {
    let mut config = AdoptConfig::default();
    for (arg, flag, value) in
        subcommand_flags(args, &["-h", "--help", "--apply", "--all-namespaces"])
    {
        let value = |name: &str| {
            value
                .clone()
                .ok_or_else(|| format!("--{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--apply" => config.apply = true,
            "--all-namespaces" => config.all_namespaces = true,
            "--namespace" => {
                let ns = parse_name("namespace", &value("namespace")?, NameRule::Label)?
                    .ok_or("--namespace needs a value")?;
                config.namespaces.push(ns);
            }
            "--kubeconfig" => {
                config.kubeconfig = Some(parse_path("kubeconfig", &value("kubeconfig")?)?)
            }
            "--maas-ca-file" => {
                config.maas_ca_file = Some(parse_path("maas-ca-file", &value("maas-ca-file")?)?)
            }
            _ => {
                return Err(format!(
                    "adopt: unexpected argument {arg:?} (see capmaas adopt --help)"
                ))
            }
        }
    }
    match (config.namespaces.is_empty(), config.all_namespaces) {
        (true, false) => Err(
            "adopt: name the namespaces (--namespace NS, repeatable) or --all-namespaces".into(),
        ),
        (false, true) => Err("adopt: --namespace and --all-namespaces exclude each other".into()),
        _ => Ok(Some(config)),
    }
}

/// `capmaas adopt`: prints the plan (and, with --apply, what was done).
fn adopt_main(args: &[String]) -> ExitCode {
    let config = match parse_adopt_args(args) {
        Ok(Some(config)) => config,
        Ok(None) => {
            print!("{ADOPT_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("capmaas: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging_at("warn");
    let run = || -> Result<adopt::Report, String> {
        let controller = Config {
            maas_ca_file: config.maas_ca_file.clone(),
            ..Config::default()
        };
        let maas = maas_client(&controller)?;
        for warning in maas.security_warnings() {
            eprintln!("capmaas: warning: {warning}");
        }
        let kube_config = kube::Config::infer(config.kubeconfig.as_deref())
            .map_err(|e| format!("kubeconfig: {e}"))?;
        let kube = kube::Client::new(kube_config).map_err(|e| format!("Kubernetes client: {e}"))?;
        let credentials = Credentials::new(
            maas,
            Default::default(),
            kube.clone(),
            maas_ca_pem(&controller)?,
        );
        let scope = if config.all_namespaces {
            adopt::Scope::AllNamespaces
        } else {
            adopt::Scope::Namespaces(config.namespaces.clone())
        };
        adopt::run(&kube, &credentials, &scope, config.apply)
    };
    match run() {
        Ok(report) => {
            print!("{}", report.render(config.apply));
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("capmaas adopt: {e}");
            ExitCode::FAILURE
        }
    }
}

const DOCTOR_USAGE: &str =
    "capmaas doctor: check what stands between the objects and working machines

USAGE:
    capmaas doctor [--release-orphans [--apply]] [FLAGS]

One line per check, with the credentials the controller uses: MAAS reachable
(TLS), API key valid, the MAAS user's rights and transport, every image,
resource pool, tag and zone the MaasMachines and MaasMachineTemplates name,
every MaasCluster's DNS domain, MAAS credentials of clusters with
spec.identityRef, capacity (free machines matching each template against the
replicas MachineDeployments and KubeadmControlPlanes ask of it), and orphans:
machines MAAS lists under a capmaas identity that no MaasMachine claims.
Reads every namespace; writes nothing unless --release-orphans --apply.

ENVIRONMENT:
    MAAS_ENDPOINT, MAAS_API_KEY   the controller-wide MAAS credentials, as for the controller

FLAGS:
    --release-orphans     show which orphans would be released (a dry run)
    --apply               with --release-orphans: release them (each re-read first)
    --kubeconfig PATH     kubeconfig of the management cluster (default: $KUBECONFIG,
                          else in-cluster)
    --maas-ca-file PATH   verify MAAS with this CA bundle (PEM) instead of the public roots
    -h, --help            print this help

EXIT STATUS: 0 when no check failed (warnings allowed), 1 otherwise, 2 for bad flags.
";

/// `capmaas doctor`'s flags.
#[derive(Debug, Default)]
struct DoctorConfig {
    release_orphans: bool,
    apply: bool,
    kubeconfig: Option<PathBuf>,
    maas_ca_file: Option<PathBuf>,
}

fn parse_doctor_args(args: &[String]) -> Result<Option<DoctorConfig>, String> {
    let mut config = DoctorConfig::default();
    for (arg, flag, value) in
        subcommand_flags(args, &["-h", "--help", "--release-orphans", "--apply"])
    {
        let value = |name: &str| {
            value
                .clone()
                .ok_or_else(|| format!("--{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--release-orphans" => config.release_orphans = true,
            "--apply" => config.apply = true,
            "--kubeconfig" => {
                config.kubeconfig = Some(parse_path("kubeconfig", &value("kubeconfig")?)?)
            }
            "--maas-ca-file" => {
                config.maas_ca_file = Some(parse_path("maas-ca-file", &value("maas-ca-file")?)?)
            }
            _ => {
                return Err(format!(
                    "doctor: unexpected argument {arg:?} (see capmaas doctor --help)"
                ))
            }
        }
    }
    if config.apply && !config.release_orphans {
        return Err("doctor: --apply goes with --release-orphans".into());
    }
    Ok(Some(config))
}

/// `capmaas doctor`: the report, and its verdict as the exit status.
fn doctor_main(args: &[String]) -> ExitCode {
    let config = match parse_doctor_args(args) {
        Ok(Some(config)) => config,
        Ok(None) => {
            print!("{DOCTOR_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("capmaas: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging_at("error");
    let release = match (config.release_orphans, config.apply) {
        (false, _) => doctor::Release::No,
        (true, false) => doctor::Release::Plan,
        (true, true) => doctor::Release::Apply,
    };
    let run = || -> Result<doctor::Report, String> {
        let controller = Config {
            maas_ca_file: config.maas_ca_file.clone(),
            ..Config::default()
        };
        // One try per call: a doctor reports an outage, it does not wait it out.
        let maas = maas_client(&controller)?.with_max_retries(0);
        let kube_config = kube::Config::infer(config.kubeconfig.as_deref())
            .map_err(|e| format!("kubeconfig: {e}"))?;
        let kube = kube::Client::new(kube_config).map_err(|e| format!("Kubernetes client: {e}"))?;
        let credentials = Credentials::new(
            maas.clone(),
            Default::default(),
            kube.clone(),
            maas_ca_pem(&controller)?,
        );
        Ok(doctor::run(&kube, &maas, &credentials, release))
    };
    match run() {
        Ok(report) => {
            print!("{}", report.render(release));
            if report.is_healthy() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("capmaas doctor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Log targets whose TRACE records carry raw HTTP requests, Authorization
/// headers included (the MAAS OAuth signature, Kubernetes bearer tokens).
/// Their DEBUG records list only non-sensitive headers.
const SECRET_BEARING_TARGETS: [&str; 2] = ["ureq", "ureq_proto"];

/// Whether a record may be written at all, whatever RUST_LOG asks:
/// `ureq` and `ureq_proto` are capped at DEBUG.
fn may_log(target: &str, level: log::Level) -> bool {
    level < log::Level::Trace
        || !SECRET_BEARING_TARGETS.iter().any(|crate_name| {
            target
                .strip_prefix(crate_name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
}

/// env_logger (RUST_LOG, default info) behind the [`may_log`] cap.
struct CappedLogger(env_logger::Logger);

impl log::Log for CappedLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        may_log(metadata.target(), metadata.level()) && self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if may_log(record.target(), record.level()) {
            self.0.log(record);
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

fn init_logging() {
    init_logging_at("info");
}

/// Logging with RUST_LOG, else `default`.
fn init_logging_at(default: &str) {
    let logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default))
            .build();
    let max_level = logger.filter();
    if log::set_boxed_logger(Box::new(CappedLogger(logger))).is_ok() {
        log::set_max_level(max_level);
    }
}

/// The Kubernetes and MAAS clients, then the controllers until they stop.
fn run(config: &Config) -> Result<ExitCode, String> {
    let maas = maas_client(config)?;
    let kube_config = kube::Config::infer(config.kubeconfig.as_deref())
        .map_err(|e| format!("kubeconfig: {e}"))?;
    let kube = kube::Client::new(kube_config).map_err(|e| format!("Kubernetes client: {e}"))?;
    log::info!(
        "capmaas {} starting: API server {}, MAAS {}",
        env!("CARGO_PKG_VERSION"),
        kube.server(),
        maas.api_root()
    );
    let mut manager_config = manager_config(config, kube.default_namespace());
    manager_config.maas_ca_pem = maas_ca_pem(config)?;
    Ok(match manager::run(&manager_config, kube, maas)? {
        Stopped::Shutdown => ExitCode::SUCCESS,
        Stopped::LeadershipLost => ExitCode::FAILURE,
    })
}

/// The controllers' settings. The Lease lives in `--leader-election-namespace`,
/// else the pod's namespace, else the kubeconfig's, else `default`.
fn manager_config(config: &Config, kubeconfig_namespace: Option<&str>) -> manager::Config {
    let identity = runtime::default_identity();
    let leader_election = config.leader_elect.then(|| {
        let namespace = config
            .leader_election_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .or_else(|| kubeconfig_namespace.map(str::to_string))
            .unwrap_or_else(|| "default".to_string());
        let mut lease = LeaderConfig::new(namespace, config.leader_election_id.clone());
        lease.identity = identity.clone();
        lease.lease_duration = config.lease_duration;
        lease.renew_deadline = config.renew_deadline;
        lease.retry_period = config.retry_period;
        lease
    });
    manager::Config {
        namespace: config.namespace.clone(),
        watch_filter: config.watch_filter.clone(),
        maascluster_concurrency: config.maascluster_concurrency,
        maasmachine_concurrency: config.maasmachine_concurrency,
        sync_period: config.sync_period,
        maas_watch_interval: config.maas_watch_interval,
        maas_endpoint_allow: config.maas_endpoint_allow.clone(),
        leader_election,
        identity,
        metrics_bind_address: config.metrics_bind_address,
        health_probe_bind_address: config.health_probe_bind_address,
        options: config.options.clone(),
        shutdown_timeout: config.shutdown_timeout,
        maas_ca_pem: None,
        pod: manager::PodRef::from_env(|key| std::env::var(key).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopt_needs_explicit_namespaces() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let c = parse_adopt_args(&args(&["--namespace", "a", "--namespace=b", "--apply"]))
            .unwrap()
            .unwrap();
        assert_eq!(c.namespaces, vec!["a", "b"]);
        assert!(c.apply && !c.all_namespaces);
        let c = parse_adopt_args(&args(&["--all-namespaces"]))
            .unwrap()
            .unwrap();
        assert!(c.all_namespaces && !c.apply, "a dry run unless asked");
        assert!(parse_adopt_args(&args(&["--help"])).unwrap().is_none());
        for (bad, needle) in [
            (vec![], "--all-namespaces"),
            (
                vec!["--all-namespaces", "--namespace", "a"],
                "exclude each other",
            ),
            (vec!["--namespace"], "needs a value"),
            (vec!["--namespace", "Not_A_Namespace"], "--namespace"),
            (vec!["--bogus"], "unexpected argument"),
        ] {
            let err = parse_adopt_args(&args(&bad)).unwrap_err();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    fn parse(args: &[&str]) -> Result<Config, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse_args(&args)? {
            Parsed::Run(config) => Ok(*config),
            _ => Err("not a run".into()),
        }
    }

    #[test]
    fn maas_endpoint_allow_is_a_repeatable_list_of_api_roots() {
        assert!(parse(&[]).unwrap().maas_endpoint_allow.is_empty());
        let c = parse(&[
            "--maas-endpoint-allow=http://a:5240/MAAS, https://b/MAAS/api/2.0/",
            "--maas-endpoint-allow",
            "http://c:5240/MAAS/",
        ])
        .unwrap();
        assert_eq!(
            c.maas_endpoint_allow,
            [
                "http://a:5240/MAAS/api/2.0/",
                "https://b/MAAS/api/2.0/",
                "http://c:5240/MAAS/api/2.0/"
            ]
        );
        let err = parse(&["--maas-endpoint-allow=ftp://a/MAAS"]).unwrap_err();
        assert!(err.starts_with("--maas-endpoint-allow: "), "{err}");
    }

    #[test]
    fn defaults_match_the_help_text() {
        let c = parse(&[]).unwrap();
        assert_eq!(
            (c.maascluster_concurrency, c.maasmachine_concurrency),
            (10, 10)
        );
        assert_eq!(c.sync_period, Duration::from_secs(600));
        assert_eq!(c.maas_watch_interval, Duration::from_secs(15));
        assert!(!c.leader_elect && !c.options.no_swap_update && !c.options.release_erase);
        assert_eq!(c.leader_election_id, "capmaas-leader-election");
        assert_eq!(
            c.metrics_bind_address,
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            c.health_probe_bind_address,
            Some("0.0.0.0:8081".parse().unwrap())
        );
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        for flag in [
            "--kubeconfig",
            "--namespace",
            "--watch-filter",
            "--maascluster-concurrency",
            "--maasmachine-concurrency",
            "--sync-period",
            "--maas-watch-interval",
            "--leader-elect",
            "--leader-elect-lease-duration",
            "--leader-elect-renew-deadline",
            "--leader-elect-retry-period",
            "--leader-election-id",
            "--leader-election-namespace",
            "--metrics-bind-address",
            "--health-probe-bind-address",
            "--maas-ca-file",
            "--maas-endpoint-allow",
            "--no-swap-update",
            "--release-erase",
            "--dns-attach-without-api-check",
            "--shutdown-timeout",
        ] {
            assert!(USAGE.contains(flag), "{flag} missing from --help");
        }
    }

    #[test]
    fn flags_in_both_spellings() {
        let c = parse(&[
            "--namespace=ns1",
            "--sync-period",
            "1m30s",
            "--leader-elect",
            "--release-erase=false",
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address=:9440",
            "--maasmachine-concurrency",
            "3",
            "--maas-watch-interval=1m",
            "--dns-attach-without-api-check",
        ])
        .unwrap();
        assert!(c.options.dns_attach_without_api_check);
        assert_eq!(c.maas_watch_interval, Duration::from_secs(60));
        assert_eq!(c.namespace.as_deref(), Some("ns1"));
        assert_eq!(c.sync_period, Duration::from_secs(90));
        assert!(c.leader_elect && !c.options.release_erase);
        assert_eq!(c.metrics_bind_address, None);
        assert_eq!(
            c.health_probe_bind_address,
            Some("0.0.0.0:9440".parse().unwrap())
        );
        assert_eq!(c.maasmachine_concurrency, 3);
    }

    #[test]
    fn bad_flags_are_refused_with_their_name() {
        for (args, needle) in [
            (vec!["--bogus"], "--bogus"),
            (vec!["--sync-period", "10"], "--sync-period"),
            (
                vec!["--maascluster-concurrency", "0"],
                "--maascluster-concurrency",
            ),
            (vec!["--namespace"], "--namespace needs a value"),
            (vec!["--leader-elect=yes"], "--leader-elect"),
            (vec!["stray"], "stray"),
        ] {
            let err = parse(&args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn http_client_traces_never_reach_the_log() {
        use log::Level::{Debug, Info, Trace};
        for target in ["ureq", "ureq::run", "ureq_proto", "ureq_proto::util"] {
            assert!(
                !may_log(target, Trace),
                "{target} TRACE carries Authorization"
            );
            assert!(may_log(target, Debug) && may_log(target, Info), "{target}");
        }
        for target in [
            "capmaas::kube::client",
            "rustls::client",
            "ureqx",
            "my_ureq",
        ] {
            assert!(may_log(target, Trace), "{target} is not capped");
        }
        let logger = CappedLogger(env_logger::Builder::new().parse_filters("trace").build());
        let at = |target, level| {
            log::Log::enabled(
                &logger,
                &log::Metadata::builder().target(target).level(level).build(),
            )
        };
        assert!(!at("ureq_proto::util", Trace), "RUST_LOG=trace is capped");
        assert!(at("ureq_proto::util", Debug) && at("capmaas", Trace));
    }

    /// Issue 12 item 6: this value made `parse_duration` overflow and the
    /// process abort (rc 134) before it printed anything.
    #[test]
    fn overflowing_and_out_of_range_values_are_errors_not_panics() {
        for (args, needle) in [
            (
                vec!["--sync-period", "18446744073709551615s1s"],
                "out of range",
            ),
            (
                vec!["--sync-period", "18446744073709551615h"],
                "out of range",
            ),
            (
                vec!["--sync-period", "99999999999999999999999s"],
                "out of range",
            ),
            (vec!["--sync-period", "0s"], "out of range"),
            (vec!["--sync-period", "25h"], "expected 1s to 24h"),
            (vec!["--maas-watch-interval", "4s"], "expected 5s to 1h"),
            (vec!["--maas-watch-interval", "61m"], "expected 5s to 1h"),
            (vec!["--maas-watch-interval", "15"], "--maas-watch-interval"),
            (vec!["--shutdown-timeout", "2h"], "--shutdown-timeout"),
            (
                vec!["--leader-elect-lease-duration", "500ms"],
                "out of range",
            ),
            (vec!["--leader-elect-retry-period", "1ms"], "out of range"),
            (
                vec!["--maasmachine-concurrency", "18446744073709551616"],
                "1 to 256",
            ),
            (vec!["--maasmachine-concurrency", "257"], "1 to 256"),
            (vec!["--maasmachine-concurrency", "-1"], "1 to 256"),
            (
                vec!["--metrics-bind-address", "127.0.0.1:99999"],
                "host:port",
            ),
            (
                vec!["--metrics-bind-address", "localhost:8080"],
                "IP address",
            ),
            (vec!["--health-probe-bind-address", ":0"], "port 0"),
            (vec!["--namespace", "Team_A"], "namespace name"),
            (vec!["--leader-election-namespace", "-x"], "namespace name"),
            (vec!["--leader-election-id", ""], "must not be empty"),
            (vec!["--leader-election-id", "a/b"], "object name"),
            (vec!["--watch-filter", "a b"], "label value"),
            (vec!["--kubeconfig", ""], "file path"),
            (
                vec!["--leader-elect-renew-deadline", "20s"],
                "must be longer than",
            ),
            (
                vec!["--leader-elect-retry-period", "9s"],
                "1.2 x --leader-elect-retry-period",
            ),
        ] {
            let err = parse(&args).unwrap_err();
            assert!(err.contains(needle), "{args:?}: {err}");
            assert!(
                err.contains(args[0]),
                "{args:?}: {err} does not name the flag"
            );
        }
        let long = "9".repeat(10_000);
        let err = parse(&["--sync-period", &long]).unwrap_err();
        assert!(err.len() < 200, "{err}");
    }

    #[test]
    fn boundaries_are_inclusive() {
        let c = parse(&[
            "--sync-period=24h",
            "--maas-watch-interval=5s",
            "--shutdown-timeout=0s",
            "--maascluster-concurrency=256",
            "--leader-elect-lease-duration=1s",
            "--leader-elect-renew-deadline=500ms",
            "--leader-elect-retry-period=100ms",
            "--leader-election-id=a.b-c",
            "--watch-filter=Team_A.1",
            "--metrics-bind-address=[::1]:65535",
        ])
        .unwrap();
        assert_eq!(c.sync_period, Duration::from_secs(24 * 3600));
        assert_eq!(c.maas_watch_interval, Duration::from_secs(5));
        assert_eq!(
            parse(&["--maas-watch-interval=1h"])
                .unwrap()
                .maas_watch_interval,
            Duration::from_secs(3600)
        );
        assert_eq!(c.shutdown_timeout, Duration::ZERO);
        assert_eq!(c.maascluster_concurrency, 256);
        assert_eq!(c.watch_filter.as_deref(), Some("Team_A.1"));
        assert_eq!(human(Duration::from_millis(3_723_004)), "1h2m3s4ms");
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("d", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            parse_duration("d", "2h").unwrap(),
            Duration::from_secs(7200)
        );
        assert!(parse_duration("d", "").is_err());
        assert!(parse_duration("d", "5x").is_err());
        assert!(parse_duration("d", "s").is_err());
    }
}
