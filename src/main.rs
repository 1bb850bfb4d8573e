//! The `capmaas` operator binary: flags and environment → configuration
//! (failing fast with a clear message, secrets redacted), logging, the
//! Kubernetes and MAAS clients; then [`capmaas::controllers::manager::run`]
//! starts the controllers and stops them on SIGTERM/SIGINT or lost
//! leadership. Exit status: 0 after a clean stop, 1 after lost leadership
//! or a failed start, 2 for bad flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use capmaas::controllers::manager::{self, Stopped};
use capmaas::controllers::Options;
use capmaas::kube;
use capmaas::maas;
use capmaas::runtime::{self, LeaderConfig};

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
    --maascluster-concurrency N            MaasCluster workers (default: 10)
    --maasmachine-concurrency N            MaasMachine workers (default: 10)
    --sync-period DURATION                 re-reconcile every object this often (default: 10m)
    --leader-elect[=BOOL]                  elect a leader with a Lease (default: false)
    --leader-elect-lease-duration DURATION (default: 15s)
    --leader-elect-renew-deadline DURATION (default: 10s)
    --leader-elect-retry-period DURATION   (default: 2s)
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
                                           (default: 30s)
    -h, --help                             print this help
    -V, --version                          print the version

DURATION is a number with a unit: 500ms, 15s, 10m, 2h, 1m30s.
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
        let value = value.as_str();
        match name {
            "kubeconfig" => config.kubeconfig = Some(PathBuf::from(value)),
            "namespace" => config.namespace = non_empty(value),
            "watch-filter" => config.watch_filter = non_empty(value),
            "maascluster-concurrency" => config.maascluster_concurrency = parse_count(name, value)?,
            "maasmachine-concurrency" => config.maasmachine_concurrency = parse_count(name, value)?,
            "sync-period" => config.sync_period = parse_duration(name, value)?,
            "leader-elect" => config.leader_elect = parse_bool(name, value)?,
            "leader-elect-lease-duration" => config.lease_duration = parse_duration(name, value)?,
            "leader-elect-renew-deadline" => config.renew_deadline = parse_duration(name, value)?,
            "leader-elect-retry-period" => config.retry_period = parse_duration(name, value)?,
            "leader-election-id" => config.leader_election_id = value.to_string(),
            "leader-election-namespace" => config.leader_election_namespace = non_empty(value),
            "metrics-bind-address" => config.metrics_bind_address = parse_address(name, value)?,
            "health-probe-bind-address" => {
                config.health_probe_bind_address = parse_address(name, value)?
            }
            "maas-ca-file" => config.maas_ca_file = Some(PathBuf::from(value)),
            "no-swap-update" => config.options.no_swap_update = parse_bool(name, value)?,
            "release-erase" => config.options.release_erase = parse_bool(name, value)?,
            "shutdown-timeout" => config.shutdown_timeout = parse_duration(name, value)?,
            _ => return Err(format!("unknown flag --{name} (see --help)")),
        }
    }
    if config.sync_period.is_zero() {
        return Err("--sync-period must be more than 0".into());
    }
    Ok(Parsed::Run(Box::new(config)))
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

fn parse_count(name: &str, value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "--{name}: expected a positive number, got {value:?}"
        )),
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("--{name}: expected true or false, got {value:?}")),
    }
}

/// `500ms`, `15s`, `10m`, `2h`, `1m30s` (Go's `time.ParseDuration` subset).
fn parse_duration(name: &str, value: &str) -> Result<Duration, String> {
    let bad = || format!("--{name}: expected a duration such as 30s, 10m or 1h30m, got {value:?}");
    let mut total = Duration::ZERO;
    let mut rest = value;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number * 60),
            "h" => Duration::from_secs(number * 3600),
            _ => return Err(bad()),
        };
        total += part;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// `host:port`, `:port` (all interfaces), or `0` (disabled).
fn parse_address(name: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "0" || value.is_empty() {
        return Ok(None);
    }
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    full.parse()
        .map(Some)
        .map_err(|_| format!("--{name}: expected host:port, :port or 0, got {value:?}"))
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
        .map_err(|e| format!("MAAS client for {}: {e}", endpoint.trim()))
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
    let manager_config = manager_config(config, kube.default_namespace());
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
        leader_election,
        identity,
        metrics_bind_address: config.metrics_bind_address,
        health_probe_bind_address: config.health_probe_bind_address,
        options: config.options.clone(),
        shutdown_timeout: config.shutdown_timeout,
    }
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
