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

use std::process::ExitCode;

use capmaas::cli::operator::Config;
use capmaas::cli::{self, adopt, doctor, Command};
use capmaas::controllers::credentials::Credentials;
use capmaas::kube;
use capmaas::maas;
use capmaas::operator::{self as manager, Stopped};
use capmaas::runtime::{self, LeaderConfig};

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
    // Both values are trimmed (a Secret's trailing newline); what is wrong
    // inside is named, the key itself never shown (InvalidApiKey says why
    // without it).
    let api_key = maas::ApiKey::parse(&key).map_err(|e| format!("MAAS_API_KEY: {e}"))?;
    maas::client::api_root(&endpoint).map_err(|e| format!("MAAS_ENDPOINT: {e}"))?;
    let mut client_config = maas::ClientConfig::new(endpoint.trim(), api_key);
    client_config.extra_ca_pem = maas_ca_pem(config)?;
    maas::Client::new(client_config)
        .map_err(|e| format!("MAAS client for {}: {e}", maas::redact_url(endpoint.trim())))
}

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let config = match command {
        Command::Help(usage) => {
            print!("{usage}");
            return ExitCode::SUCCESS;
        }
        Command::Version => {
            println!("capmaas {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Command::Adopt(config) => return adopt_main(&config),
        Command::Doctor(config) => return doctor_main(&config),
        Command::Run(config) => config,
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

/// `capmaas adopt`: prints the plan (and, with --apply, what was done).
fn adopt_main(config: &cli::adopt::Config) -> ExitCode {
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
        let scope = adopt::Scope {
            namespaces: if config.all_namespaces {
                adopt::Namespaces::All
            } else {
                adopt::Namespaces::Named(config.namespaces.clone())
            },
            clusters: config.clusters.clone(),
            created_before: config.created_before,
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

/// `capmaas doctor`: the report, and its verdict as the exit status.
fn doctor_main(config: &cli::doctor::Config) -> ExitCode {
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
    let stopped = manager::run(&manager_config, kube, maas).map_err(|e| e.to_string())?;
    Ok(match stopped {
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
}
