//! What each command does once its flags are parsed: its logging, the
//! clients from the environment (MAAS_ENDPOINT, MAAS_API_KEY, the
//! kubeconfig), the work, and what it prints. Messages are for a person,
//! so errors here are text.

use std::process::ExitCode;

use super::operator::Config;
use super::{adopt, doctor, logging};
use crate::operator::credentials::Credentials;
use crate::runtime::{self, LeaderConfig};
use crate::{kube, maas, operator};

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

/// The operator's settings and its Kubernetes and MAAS clients, from the
/// flags and the environment.
pub fn operator(config: &Config) -> Result<(operator::Config, kube::Client, maas::Client), String> {
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
    let mut operator_config = operator_config(config, kube.default_namespace());
    operator_config.maas_ca_pem = maas_ca_pem(config)?;
    Ok((operator_config, kube, maas))
}

/// The controllers' settings. The Lease lives in `--leader-election-namespace`,
/// else the pod's namespace, else the kubeconfig's, else `default`.
fn operator_config(config: &Config, kubeconfig_namespace: Option<&str>) -> operator::Config {
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
    operator::Config {
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
        pod: operator::PodRef::from_env(|key| std::env::var(key).ok()),
    }
}

/// `capmaas adopt`: prints the plan (and, with --apply, what was done).
pub fn adopt(config: &adopt::Config) -> ExitCode {
    logging::init("warn");
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
    let outcome = run().map(|report| (report.render(config.apply), report.is_clean()));
    finish("adopt", outcome)
}

/// `capmaas doctor`: the report, and its verdict as the exit status.
pub fn doctor(config: &doctor::Config) -> ExitCode {
    logging::init("error");
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
    let outcome = run().map(|report| (report.render(release), report.is_healthy()));
    finish("doctor", outcome)
}

/// Prints a command's report, exiting 0 when it is `good`, else 1; a
/// failure to run at all is printed as an error (exit 1).
fn finish(command: &str, outcome: Result<(String, bool), String>) -> ExitCode {
    match outcome {
        Ok((report, good)) => {
            print!("{report}");
            if good {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("capmaas {command}: {e}");
            ExitCode::FAILURE
        }
    }
}
