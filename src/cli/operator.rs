//! The controllers' flags: `capmaas [FLAGS]`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::controllers::Options;

use super::values::{
    human, parse_address, parse_count, parse_duration, parse_endpoints, parse_name, parse_path,
    NameRule,
};
use super::{Flag, Spec};

pub const COMMAND: Spec<Config> = Spec {
    name: "capmaas",
    usage: USAGE,
    flags: FLAGS,
    version: true,
    check,
};

pub const USAGE: &str = "capmaas: Cluster API infrastructure provider for Canonical MAAS

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
    --no-node-maas-labels[=BOOL]           do not label Nodes with MAAS's zone
                                           (topology.kubernetes.io/zone), pool and tags
                                           (maas.capmaas.io/...) (default: false)
    --shutdown-timeout DURATION            how long running reconciles may finish on SIGTERM
                                           (default: 30s; 0s to 1h)
    -h, --help                             print this help
    -V, --version                          print the version

DURATION is a number with a unit: 500ms, 15s, 10m, 2h, 1m30s. ADDR is IP:PORT or :PORT.
Values out of range are refused at start with the flag's name and range.
";

/// Every setting, from flags and the environment.
#[derive(Debug)]
pub struct Config {
    pub kubeconfig: Option<PathBuf>,
    pub namespace: Option<String>,
    pub watch_filter: Option<String>,
    pub maascluster_concurrency: usize,
    pub maasmachine_concurrency: usize,
    pub sync_period: Duration,
    pub maas_watch_interval: Duration,
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub leader_election_id: String,
    pub leader_election_namespace: Option<String>,
    pub metrics_bind_address: Option<SocketAddr>,
    pub health_probe_bind_address: Option<SocketAddr>,
    pub maas_ca_file: Option<PathBuf>,
    /// `--maas-endpoint-allow`, as API roots.
    pub maas_endpoint_allow: Vec<String>,
    pub options: Options,
    pub shutdown_timeout: Duration,
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

/// Every flag of the controllers, as `--help` lists them.
pub const FLAGS: &[Flag<Config>] = &[
    Flag::value("kubeconfig", |c, n, v| {
        c.kubeconfig = Some(parse_path(n, v)?);
        Ok(())
    }),
    Flag::value("namespace", |c, n, v| {
        c.namespace = parse_name(n, v, NameRule::Label)?;
        Ok(())
    }),
    Flag::value("watch-filter", |c, n, v| {
        c.watch_filter = parse_name(n, v, NameRule::LabelValue)?;
        Ok(())
    }),
    Flag::value("maascluster-concurrency", |c, n, v| {
        c.maascluster_concurrency = parse_count(n, v)?;
        Ok(())
    }),
    Flag::value("maasmachine-concurrency", |c, n, v| {
        c.maasmachine_concurrency = parse_count(n, v)?;
        Ok(())
    }),
    Flag::value("sync-period", |c, n, v| {
        c.sync_period = parse_duration(n, v)?;
        Ok(())
    }),
    Flag::value("maas-watch-interval", |c, n, v| {
        c.maas_watch_interval = parse_duration(n, v)?;
        Ok(())
    }),
    Flag::switch("leader-elect", |c, on| c.leader_elect = on),
    Flag::value("leader-elect-lease-duration", |c, n, v| {
        c.lease_duration = parse_duration(n, v)?;
        Ok(())
    }),
    Flag::value("leader-elect-renew-deadline", |c, n, v| {
        c.renew_deadline = parse_duration(n, v)?;
        Ok(())
    }),
    Flag::value("leader-elect-retry-period", |c, n, v| {
        c.retry_period = parse_duration(n, v)?;
        Ok(())
    }),
    Flag::value("leader-election-id", |c, n, v| {
        c.leader_election_id =
            parse_name(n, v, NameRule::Subdomain)?.ok_or(format!("--{n}: must not be empty"))?;
        Ok(())
    }),
    Flag::value("leader-election-namespace", |c, n, v| {
        c.leader_election_namespace = parse_name(n, v, NameRule::Label)?;
        Ok(())
    }),
    Flag::value("metrics-bind-address", |c, n, v| {
        c.metrics_bind_address = parse_address(n, v)?;
        Ok(())
    }),
    Flag::value("health-probe-bind-address", |c, n, v| {
        c.health_probe_bind_address = parse_address(n, v)?;
        Ok(())
    }),
    Flag::value("maas-ca-file", |c, n, v| {
        c.maas_ca_file = Some(parse_path(n, v)?);
        Ok(())
    }),
    Flag::repeated("maas-endpoint-allow", |c, n, v| {
        c.maas_endpoint_allow.extend(parse_endpoints(n, v)?);
        Ok(())
    }),
    Flag::switch("no-swap-update", |c, on| c.options.no_swap_update = on),
    Flag::switch("release-erase", |c, on| c.options.release_erase = on),
    Flag::switch("dns-attach-without-api-check", |c, on| {
        c.options.dns_attach_without_api_check = on
    }),
    Flag::switch("no-node-maas-labels", |c, on| {
        c.options.no_node_maas_labels = on
    }),
    Flag::value("shutdown-timeout", |c, n, v| {
        c.shutdown_timeout = parse_duration(n, v)?;
        Ok(())
    }),
];

/// client-go's rule for the election timings, checked here so that a wrong
/// combination fails before anything starts (also without --leader-elect,
/// so that turning it on later cannot surprise).
fn check(config: &Config) -> Result<(), String> {
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
