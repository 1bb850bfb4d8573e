//! `capmaas doctor`'s flags.

use std::path::PathBuf;

use crate::cli::values::parse_path;
use crate::cli::{Flag, Spec};

pub const COMMAND: Spec<Config> = Spec {
    name: "capmaas doctor",
    usage: USAGE,
    flags: FLAGS,
    version: false,
    check,
};

pub const USAGE: &str = "capmaas doctor: check what stands between the objects and working machines

USAGE:
    capmaas doctor [--release-orphans [--apply]] [FLAGS]

One line per check, with the credentials the controller uses: MAAS reachable
(TLS), API key valid, the MAAS user's rights, the MAAS version (3.8+: what to
check of pool rights) and transport, every image, resource pool, tag and zone
the MaasMachines and MaasMachineTemplates name, every MaasCluster's DNS
domain, MAAS credentials of clusters with spec.identityRef, capacity (free machines matching each template against the
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

#[derive(Debug, Default)]
pub struct Config {
    pub release_orphans: bool,
    pub apply: bool,
    pub kubeconfig: Option<PathBuf>,
    pub maas_ca_file: Option<PathBuf>,
}

pub const FLAGS: &[Flag<Config>] = &[
    Flag::switch("release-orphans", |c, on| c.release_orphans = on),
    Flag::switch("apply", |c, on| c.apply = on),
    Flag::value("kubeconfig", |c, n, v| {
        c.kubeconfig = Some(parse_path(n, v)?);
        Ok(())
    }),
    Flag::value("maas-ca-file", |c, n, v| {
        c.maas_ca_file = Some(parse_path(n, v)?);
        Ok(())
    }),
];

fn check(config: &Config) -> Result<(), String> {
    if config.apply && !config.release_orphans {
        return Err("--apply goes with --release-orphans".into());
    }
    Ok(())
}
