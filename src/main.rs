//! The `capmaas` operator binary: flags and environment → configuration
//! (failing fast with a clear message, secrets redacted), then the wiring:
//!
//! ```text
//! informers (Cluster, Machine, MaasCluster, MaasMachine) ─► mappers ─► two work queues
//! leader election ─► gate ─► worker pools (maascluster, maasmachine) ─► controllers
//! api poller thread ─► maascluster queue          serve: /healthz /readyz /metrics
//! SIGTERM/SIGINT or lost leadership ─► stop queues ─► join workers ─► release the Lease
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use capmaas::api::{capi, meta};
use capmaas::controllers::adapters::{self, Caches};
use capmaas::controllers::api_poller::ApiPoller;
use capmaas::controllers::{self, mappers, ports::SystemClock, Context, Next, Options};
use capmaas::kube::{self, resources};
use capmaas::maas::{self, StartCheck};
use capmaas::runtime::{
    self, Action, Event, Informer, InformerConfig, LeaderConfig, LeaderElector, LeaderGate,
    Leadership, ObjectKey, Shutdown, WorkQueue,
};
use capmaas::serve::{self, Health, Routes};
use serde_json::Value;

const USAGE: &str = "capmaas: Cluster API infrastructure provider for Canonical MAAS

USAGE:
    capmaas [FLAGS]

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
    --no-swap-update[=BOOL]                do not set swap_size=0 before deploy; needed with a
                                           non-admin MAAS key (default: false)
    --release-erase[=BOOL]                 erase disks when releasing machines (default: false)
    --shutdown-timeout DURATION            how long running reconciles may finish on SIGTERM
                                           (default: 30s; 0s to 1h)
    -h, --help                             print this help
    -V, --version                          print the version

DURATION is a number with a unit: 500ms, 15s, 10m, 2h, 1m30s. ADDR is IP:PORT or :PORT.
Values out of range are refused at start with the flag's name and range.
";

/// Objects per informer list page (client-go: 500). See BENCHMARKS.md
/// "Memory" for the peak it saves.
const LIST_PAGE_SIZE: u32 = 100;

/// Every setting, from flags and the environment.
#[derive(Debug)]
struct Config {
    kubeconfig: Option<PathBuf>,
    namespace: Option<String>,
    watch_filter: Option<String>,
    maascluster_concurrency: usize,
    maasmachine_concurrency: usize,
    sync_period: Duration,
    leader_elect: bool,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    leader_election_id: String,
    leader_election_namespace: Option<String>,
    metrics_bind_address: Option<SocketAddr>,
    health_probe_bind_address: Option<SocketAddr>,
    maas_ca_file: Option<PathBuf>,
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
            leader_elect: false,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            leader_election_id: "capmaas-leader-election".into(),
            leader_election_namespace: None,
            metrics_bind_address: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
            health_probe_bind_address: Some(SocketAddr::from(([0, 0, 0, 0], 8081))),
            maas_ca_file: None,
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
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
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
        let is_bool = matches!(name, "leader-elect" | "no-swap-update" | "release-erase");
        let value = if is_bool {
            inline.unwrap_or_else(|| "true".to_string())
        } else {
            match inline {
                Some(value) => value,
                None => {
                    let value = args
                        .get(i)
                        .ok_or_else(|| format!("--{name} needs a value"))?;
                    i += 1;
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
            "no-swap-update" => config.options.no_swap_update = parse_bool(name, value)?,
            "release-erase" => config.options.release_erase = parse_bool(name, value)?,
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
    if let Some(path) = &config.maas_ca_file {
        let pem =
            std::fs::read(path).map_err(|e| format!("--maas-ca-file {}: {e}", path.display()))?;
        client_config.extra_ca_pem = Some(pem);
    }
    maas::Client::new(client_config)
        .map_err(|e| format!("MAAS client for {}: {e}", maas::redact_url(endpoint.trim())))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
    let logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).build();
    let max_level = logger.filter();
    if log::set_boxed_logger(Box::new(CappedLogger(logger))).is_ok() {
        log::set_max_level(max_level);
    }
}

/// Maps one informer event to the keys to reconcile.
type Mapper = dyn Fn(&Event, Option<&Caches>) -> mappers::Keys + Send;

/// The key of an informer event mapped onto the two queues.
fn enqueue(keys: mappers::Keys, clusters: &WorkQueue, machines: &WorkQueue) {
    for key in keys.maas_clusters {
        clusters.add(key);
    }
    for key in keys.maas_machines {
        machines.add(key);
    }
}

fn to_action(next: Next) -> Action {
    match next {
        Next::Done => Action::Done,
        Next::RequeueAfter(d) => Action::RequeueAfter(d),
    }
}

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

    let shutdown = Shutdown::new();
    runtime::listen_for_signals(&shutdown).map_err(|e| format!("signal handler: {e}"))?;

    let health = Arc::new(Health::new());
    // Each listener serves only its own routes; one address given for both
    // serves both.
    let listeners = match (
        config.health_probe_bind_address,
        config.metrics_bind_address,
    ) {
        (Some(probes), Some(metrics)) if probes == metrics => {
            vec![(
                "health probes and metrics",
                probes,
                Routes::Both(health.clone()),
            )]
        }
        (probes, metrics) => probes
            .map(|a| ("health probes", a, Routes::Probes(health.clone())))
            .into_iter()
            .chain(metrics.map(|a| ("metrics", a, Routes::Metrics)))
            .collect(),
    };
    for (what, addr, routes) in listeners {
        let (bound, _thread) =
            serve::start(addr, routes).map_err(|e| format!("{what} on {addr}: {e}"))?;
        log::info!("serving {what} on {bound}");
    }

    // Start-up checks: refused credentials end the process with the reason
    // (exit 1: a wrong key or token never fixes itself, and the restart
    // picks up a corrected Secret); an unreachable MAAS keeps /readyz
    // failing with the reason until it answers.
    match kube.check_credentials() {
        Ok(Some(user)) => log::info!("API server {}: authenticated as {user}", kube.server()),
        Ok(None) => {}
        Err(e) => return Err(format!("the API server refused our credentials: {e}")),
    }
    check_maas_at_start(&maas, &health, &shutdown)?;

    let identity = runtime::default_identity();
    let events = runtime::EventRecorder::spawn(kube.clone(), "capmaas", &identity)
        .map_err(|e| e.to_string())?;
    let cluster_queue = WorkQueue::new("maascluster");
    let machine_queue = WorkQueue::new("maasmachine");

    // Informers. Mappers reach the other stores through `caches` once all
    // informers exist; until then each event maps to its own key only.
    let caches: Arc<OnceLock<Caches>> = Arc::new(OnceLock::new());
    let informer_config = |resource| {
        let mut c = InformerConfig::new(resource).namespace(config.namespace.clone());
        // A list page is held whole as `Value`s (~6x its JSON) while it is
        // cut down and encoded: smaller pages, lower peak memory at start.
        c.page_size = LIST_PAGE_SIZE;
        if let Some(filter) = &config.watch_filter {
            c = c.label_selector(format!("{}={filter}", capi::WATCH_FILTER_LABEL));
        }
        c
    };
    // Each kind is cached cut down to what the controllers and mappers read
    // (the projections sit beside the types that read them).
    let spawn = |resource: kube::Resource, project: fn(&mut Value), map: Box<Mapper>| {
        let (cq, mq, caches) = (cluster_queue.clone(), machine_queue.clone(), caches.clone());
        Informer::spawn(
            kube.clone(),
            informer_config(resource).transform(project),
            move |event: &Event| enqueue(map(event, caches.get()), &cq, &mq),
            shutdown.clone(),
        )
        .map_err(|e| format!("{} informer: {e}", resource.plural))
    };
    let clusters = spawn(
        resources::CLUSTERS,
        capi::project_cluster,
        Box::new(mappers::on_cluster),
    )?;
    let machines = spawn(
        resources::MACHINES,
        capi::project_machine,
        Box::new(|e, _| mappers::on_machine(e)),
    )?;
    let maas_clusters = spawn(
        resources::MAAS_CLUSTERS,
        meta::project_own_kind,
        Box::new(mappers::on_maas_cluster),
    )?;
    let maas_machines = spawn(
        resources::MAAS_MACHINES,
        meta::project_own_kind,
        Box::new(mappers::on_maas_machine),
    )?;
    let stores = Caches {
        clusters: clusters.store(),
        machines: machines.store(),
        maas_clusters: maas_clusters.store(),
        maas_machines: maas_machines.store(),
    };
    let _ = caches.set(stores.clone());

    for (name, store) in [
        ("clusters", &stores.clusters),
        ("machines", &stores.machines),
        ("maasclusters", &stores.maas_clusters),
        ("maasmachines", &stores.maas_machines),
    ] {
        while !store.wait_until_synced(Duration::from_secs(1)) {
            if shutdown.is_triggered() {
                return Ok(ExitCode::SUCCESS);
            }
            log::debug!("waiting for the {name} cache");
        }
    }
    health.set_synced(true);
    log::info!("caches synced");

    // Leader election: workers run only while the gate is open.
    let elector = if config.leader_elect {
        let namespace = config
            .leader_election_namespace
            .clone()
            .or_else(|| {
                std::env::var("POD_NAMESPACE")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .or_else(|| kube.default_namespace().map(str::to_string))
            .unwrap_or_else(|| "default".to_string());
        let mut lease = LeaderConfig::new(namespace, config.leader_election_id.clone());
        lease.identity = identity.clone();
        lease.lease_duration = config.lease_duration;
        lease.renew_deadline = config.renew_deadline;
        lease.retry_period = config.retry_period;
        Some(
            LeaderElector::spawn(kube.clone(), lease)
                .map_err(|e| format!("leader election: {e}"))?,
        )
    } else {
        None
    };
    let gate = elector
        .as_ref()
        .map(LeaderElector::gate)
        .unwrap_or_else(LeaderGate::always_open);
    let lost = elector
        .as_ref()
        .map(LeaderElector::lost)
        .unwrap_or_else(crossbeam_channel::never);
    let _leadership_reporter = report_leadership(gate.clone(), health.clone(), shutdown.clone());

    let workload = Arc::new(adapters::Workload::new(
        kube.clone(),
        Duration::from_secs(5),
    ));
    let poller_queue = cluster_queue.clone();
    let (poller, _poller_thread) = ApiPoller::spawn(
        workload.clone(),
        move |ns, name| poller_queue.add(ObjectKey::new(ns, name)),
        shutdown.receiver().clone(),
    )
    .map_err(|e| format!("api poller: {e}"))?;

    let ctx = Context {
        kube: Arc::new(adapters::Kube {
            client: kube.clone(),
            caches: stores.clone(),
            events: events.clone(),
        }),
        maas: Arc::new(adapters::Maas { client: maas }),
        workload,
        api_watch: Arc::new(poller.clone()),
        machine_queue: Arc::new(machine_queue.clone()),
        clock: Arc::new(SystemClock),
        options: config.options.clone(),
    };

    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    let c = ctx.clone();
    workers.extend(runtime::run_workers(
        "maascluster",
        cluster_queue.clone(),
        config.maascluster_concurrency,
        move |key: &ObjectKey| {
            controllers::cluster::reconcile(&c, &key.namespace, &key.name).map(to_action)
        },
        gate.clone(),
    ));
    let c = ctx.clone();
    workers.extend(runtime::run_workers(
        "maasmachine",
        machine_queue.clone(),
        config.maasmachine_concurrency,
        move |key: &ObjectKey| {
            controllers::machine::reconcile(&c, &key.namespace, &key.name).map(to_action)
        },
        gate.clone(),
    ));
    for (store, queue) in [
        (&stores.maas_clusters, &cluster_queue),
        (&stores.maas_machines, &machine_queue),
    ] {
        runtime::spawn_resync(
            store.clone(),
            queue.clone(),
            config.sync_period,
            shutdown.clone(),
        )
        .map_err(|e| format!("resync: {e}"))?;
    }
    log::info!("controllers running");

    let lost_leadership = crossbeam_channel::select! {
        recv(shutdown.receiver()) -> _ => false,
        recv(lost) -> _ => true,
    };
    if lost_leadership {
        log::error!("leadership lost; stopping");
        health.set_leadership(serve::Leadership::Lost);
        poller.forget_all();
    } else {
        log::info!("shutting down");
    }
    health.set_stopping();
    shutdown.trigger();
    cluster_queue.shutdown();
    machine_queue.shutdown();
    if !runtime::join_within(workers, config.shutdown_timeout) {
        log::warn!(
            "reconciles still running after {:?}; exiting anyway",
            config.shutdown_timeout
        );
    }
    events.flush(Duration::from_secs(2));
    if let Some(elector) = elector {
        elector.release();
    }
    Ok(if lost_leadership {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One `whoami` before any work: Ready → go on; Refused (wrong key, not
/// MAAS, TLS) → the error that ends the process; Unreachable → not ready,
/// with the reason, while a thread checks again with backoff.
fn check_maas_at_start(
    maas: &maas::Client,
    health: &Arc<Health>,
    shutdown: &Shutdown,
) -> Result<(), String> {
    let unreachable = |e: &maas::Error| Err(format!("not reachable: {e}"));
    match maas.start_check() {
        StartCheck::Ready(user) => {
            log::info!(
                "MAAS {}: authenticated as {}",
                maas.api_root(),
                user.username
            );
            Ok(())
        }
        StartCheck::Refused(why) => Err(why),
        StartCheck::Unreachable(e) => {
            log::warn!("MAAS not reachable at start; not ready until it answers: {e}");
            health.set_available("MAAS", unreachable(&e));
            let (maas, health, stop) = (maas.clone(), health.clone(), shutdown.receiver().clone());
            std::thread::Builder::new()
                .name("maas-start-check".into())
                .spawn(move || {
                    let report = |check: &StartCheck| {
                        if let StartCheck::Unreachable(e) = check {
                            health.set_available("MAAS", unreachable(e));
                        }
                    };
                    match maas.recheck_until_ready(report, &stop) {
                        Some(StartCheck::Ready(user)) => {
                            log::info!("MAAS answers: authenticated as {}", user.username);
                            health.set_available("MAAS", Ok(()));
                        }
                        // Stays unready with the reason: fix the key, then
                        // restart the pod.
                        Some(StartCheck::Refused(why)) => {
                            log::error!("{why}");
                            health.set_available("MAAS", Err(why));
                        }
                        _ => {}
                    }
                })
                .map(|_| ())
                .map_err(|e| format!("MAAS start-up check thread: {e}"))
        }
    }
}

/// Mirrors the gate's leadership into the readiness probe.
fn report_leadership(
    gate: LeaderGate,
    health: Arc<Health>,
    shutdown: Shutdown,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("leadership-report".into())
        .spawn(move || loop {
            let state = match gate.leadership() {
                Leadership::Leader => serve::Leadership::Leader,
                Leadership::Standby => serve::Leadership::Standby,
                Leadership::Lost => serve::Leadership::Lost,
            };
            health.set_leadership(state);
            if shutdown.sleep(Duration::from_secs(1)) {
                return;
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse_args(&args)? {
            Parsed::Run(config) => Ok(*config),
            _ => Err("not a run".into()),
        }
    }

    #[test]
    fn defaults_match_the_help_text() {
        let c = parse(&[]).unwrap();
        assert_eq!(
            (c.maascluster_concurrency, c.maasmachine_concurrency),
            (10, 10)
        );
        assert_eq!(c.sync_period, Duration::from_secs(600));
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
            "--leader-elect",
            "--leader-elect-lease-duration",
            "--leader-elect-renew-deadline",
            "--leader-elect-retry-period",
            "--leader-election-id",
            "--leader-election-namespace",
            "--metrics-bind-address",
            "--health-probe-bind-address",
            "--maas-ca-file",
            "--no-swap-update",
            "--release-erase",
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
        ])
        .unwrap();
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
