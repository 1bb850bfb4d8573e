//! `capmaas adopt`'s flags.

use std::path::PathBuf;

use crate::cli::values::{parse_name, parse_path, parse_time, NameRule};
use crate::cli::{Flag, Spec};

pub const COMMAND: Spec<Config> = Spec {
    name: "capmaas adopt",
    usage: USAGE,
    flags: FLAGS,
    version: false,
    check,
};

pub const USAGE: &str = "capmaas adopt: give the Go provider's machines a capmaas identity, once

USAGE:
    capmaas adopt (--namespace NS)... | --all-namespaces  [--apply] [FLAGS]

For every MaasMachine in the namespaces that records a MAAS machine
(spec.systemID) allocated to the MAAS user of its cluster's credentials
and carrying no capmaas identity, writes the object's identity into the
machine's owner data (and the object's annotation). Without --apply it
only prints what it would do. Safe to run again.

Only on the Go provider's own marks, which a tenant writing objects in its
namespace cannot make: the MaasMachine's status.hostname (written through
the status subresource) is the MAAS machine's hostname; its owner chain is
whole (owner Machine with that UID, whose infrastructureRef is this
MaasMachine and whose cluster is the cluster-name label's Cluster, with a
MaasCluster); its providerID's zone is the machine's zone; and a deployed
machine runs its image. Refused, with the reason: any of these missing, a
machine under another identity, an unallocated machine, one this MAAS user
cannot see, several objects with all these marks naming one machine.
Objects naming a machine without the marks never keep the rightful one from
being adopted.

ENVIRONMENT:
    MAAS_ENDPOINT, MAAS_API_KEY   the controller-wide MAAS credentials, as for the
                                  controller (clusters with spec.identityRef use theirs)

FLAGS:
    --namespace NS        look at this namespace (repeat for more)
    --all-namespaces      look at every namespace
    --cluster NAME        only the MaasMachines of this Cluster (repeat for more;
                          default: every cluster in the namespaces)
    --created-before TIME only MaasMachines created before this RFC 3339 time, e.g.
                          when the Go provider stopped: 2026-12-01T00:00:00Z
                          (default: any time)
    --apply               change MAAS and the objects (default: dry run)
    --kubeconfig PATH     kubeconfig of the management cluster (default: $KUBECONFIG,
                          else in-cluster)
    --maas-ca-file PATH   verify MAAS with this CA bundle (PEM) instead of the public roots
    -h, --help            print this help

EXIT STATUS: 0 when every machine is adopted (or already was), 1 otherwise, 2 for bad flags.
";

#[derive(Debug, Default)]
pub struct Config {
    pub namespaces: Vec<String>,
    pub all_namespaces: bool,
    pub clusters: Vec<String>,
    /// Unix seconds.
    pub created_before: Option<u64>,
    pub apply: bool,
    pub kubeconfig: Option<PathBuf>,
    pub maas_ca_file: Option<PathBuf>,
}

pub const FLAGS: &[Flag<Config>] = &[
    Flag::repeated("namespace", |c, n, v| {
        let ns = parse_name(n, v, NameRule::Label)?.ok_or(format!("--{n} needs a value"))?;
        c.namespaces.push(ns);
        Ok(())
    }),
    Flag::switch("all-namespaces", |c, on| c.all_namespaces = on),
    Flag::repeated("cluster", |c, n, v| {
        let name = parse_name(n, v, NameRule::Subdomain)?.ok_or(format!("--{n} needs a value"))?;
        c.clusters.push(name);
        Ok(())
    }),
    Flag::value("created-before", |c, n, v| {
        c.created_before = Some(parse_time(n, v)?);
        Ok(())
    }),
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
    match (config.namespaces.is_empty(), config.all_namespaces) {
        (true, false) => {
            Err("name the namespaces (--namespace NS, repeatable) or --all-namespaces".into())
        }
        (false, true) => Err("--namespace and --all-namespaces exclude each other".into()),
        _ => Ok(()),
    }
}
