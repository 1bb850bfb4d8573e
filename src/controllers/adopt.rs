//! `capmaas adopt`: the one explicit step that moves clusters from the Go
//! provider to capmaas.
//!
//! The Go provider recorded a machine's `spec.systemID` but marked nothing
//! in MAAS, so capmaas cannot tell its machines from anyone else's and
//! refuses to act on them (`MachineNotOwned`). An administrator runs this
//! once, for namespaces they name: for each MaasMachine that records a MAAS
//! machine allocated to the MAAS user of its cluster's credentials and
//! carrying no capmaas identity, it writes the object's identity (the
//! annotation) and then the same identity into the machine's owner data.
//! From then on the controller acts on the machine as on its own.
//!
//! Nothing a tenant's object says can trigger it: the administrator chooses
//! the namespaces, reads the plan (a dry run by default), and applies it.
//! It refuses, and says why: two MaasMachines naming one machine, a machine
//! under another identity, an unallocated machine, one this MAAS user
//! cannot see. Running it again is harmless (adopted machines are reported
//! as such).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::json;

use super::credentials::Credentials;
use super::identity::{self, Identity, Ownership, Recorded};
use super::ports::{MaasApi, MaasClients};
use crate::api::capi::{Cluster, CLUSTER_NAME_LABEL};
use crate::api::{MaasCluster, MaasMachine};
use crate::kube::{self, resources, ListParams};
use crate::maas;

/// Which namespaces to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Namespaces(Vec<String>),
    AllNamespaces,
}

/// What happens (or would happen) to one MaasMachine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Machine and object get (or got) the identity.
    Adopt,
    /// Already carries the object's identity.
    AlreadyAdopted,
    /// Left alone, with the reason.
    Refused(String),
    /// `--apply` tried and failed (the reason); running it again retries.
    Failed(String),
}

/// One line of the plan.
#[derive(Debug, Clone)]
pub struct Line {
    pub namespace: String,
    pub name: String,
    pub system_id: String,
    pub hostname: String,
    pub state: String,
    pub identity: String,
    pub verdict: Verdict,
}

/// The whole plan (after `--apply`: what was done).
#[derive(Debug, Default)]
pub struct Report {
    pub lines: Vec<Line>,
}

impl Report {
    /// True when every line is adopted or already was.
    pub fn is_clean(&self) -> bool {
        self.lines
            .iter()
            .all(|l| matches!(l.verdict, Verdict::Adopt | Verdict::AlreadyAdopted))
    }

    /// The plan as a table and a summary, for the terminal.
    pub fn render(&self, applied: bool) -> String {
        let mut out = String::new();
        if self.lines.is_empty() {
            out.push_str("no MaasMachine records a MAAS machine in these namespaces\n");
            return out;
        }
        let _ = writeln!(
            out,
            "{:<40} {:<8} {:<20} {:<12} ACTION",
            "MAASMACHINE", "SYSTEMID", "HOSTNAME", "STATE"
        );
        for l in &self.lines {
            let action = match (&l.verdict, applied) {
                (Verdict::Adopt, false) => format!("adopt as {}", l.identity),
                (Verdict::Adopt, true) => format!("adopted as {}", l.identity),
                (Verdict::AlreadyAdopted, _) => "already adopted".to_string(),
                (Verdict::Refused(why), _) => format!("REFUSED: {why}"),
                (Verdict::Failed(why), _) => format!("FAILED: {why}"),
            };
            let _ = writeln!(
                out,
                "{:<40} {:<8} {:<20} {:<12} {action}",
                format!("{}/{}", l.namespace, l.name),
                l.system_id,
                l.hostname,
                l.state
            );
        }
        let count = |f: fn(&Verdict) -> bool| self.lines.iter().filter(|l| f(&l.verdict)).count();
        let adopt = count(|v| matches!(v, Verdict::Adopt));
        let already = count(|v| matches!(v, Verdict::AlreadyAdopted));
        let refused = count(|v| matches!(v, Verdict::Refused(_)));
        let failed = count(|v| matches!(v, Verdict::Failed(_)));
        let verb = if applied { "adopted" } else { "to adopt" };
        let _ = writeln!(
            out,
            "{adopt} {verb}, {already} already adopted, {refused} refused, {failed} failed"
        );
        if !applied && adopt > 0 {
            out.push_str("dry run: nothing was changed; run again with --apply to adopt\n");
        }
        out
    }
}

/// Looks at every MaasMachine in `scope` and, with `apply`, adopts what
/// can be adopted. Errors are for what stops the whole run (the API
/// server cannot be listed); each machine's own trouble is on its line.
pub fn run(
    kube: &kube::Client,
    credentials: &Credentials,
    scope: &Scope,
    apply: bool,
) -> Result<Report, String> {
    let machines = list_maas_machines(kube, scope)?;
    let mut by_system_id: HashMap<String, usize> = HashMap::new();
    for m in &machines {
        if let Some(id) = m.system_id() {
            *by_system_id.entry(id.to_string()).or_default() += 1;
        }
    }
    let mut report = Report::default();
    for m in &machines {
        let Some(system_id) = m.system_id().map(str::to_string) else {
            continue;
        };
        let mut line = Line {
            namespace: m.metadata.namespace.clone(),
            name: m.metadata.name.clone(),
            system_id: system_id.clone(),
            hostname: String::new(),
            state: String::new(),
            identity: String::new(),
            verdict: Verdict::Adopt,
        };
        if by_system_id.get(&system_id).copied().unwrap_or(0) > 1 {
            line.verdict = Verdict::Refused(format!(
                "several MaasMachines name MAAS machine {system_id}; \
                 fix or delete the wrong ones first"
            ));
            report.lines.push(line);
            continue;
        }
        let identity = match Identity::recorded(&m.metadata) {
            Recorded::Valid(identity) => identity,
            Recorded::Missing | Recorded::Foreign(_) => match Identity::new_for(&m.metadata) {
                Some(identity) => identity,
                None => {
                    line.verdict =
                        Verdict::Refused("namespace and name too long for a MAAS identity".into());
                    report.lines.push(line);
                    continue;
                }
            },
        };
        line.identity = identity.to_string();
        let maas = match maas_of(kube, credentials, m) {
            Ok(maas) => maas,
            Err(why) => {
                line.verdict = Verdict::Refused(why);
                report.lines.push(line);
                continue;
            }
        };
        let host = match maas.machine(&system_id) {
            Ok(host) => host,
            Err(e) if e.is_not_found() || e.is_forbidden() => {
                line.verdict = Verdict::Refused(
                    "MAAS machine does not exist or is not visible to this MAAS user".into(),
                );
                report.lines.push(line);
                continue;
            }
            Err(e) => {
                line.verdict = Verdict::Failed(format!("reading the MAAS machine: {e}"));
                report.lines.push(line);
                continue;
            }
        };
        line.hostname = host.hostname.clone();
        line.state = host.status_name.clone();
        line.verdict = verdict(&host, &identity);
        let result = match line.verdict {
            Verdict::Adopt if apply => adopt(kube, maas.as_ref(), m, &host, &identity),
            // A run cut short after the owner data: the object still needs
            // its mark (and the controller its wake-up).
            Verdict::AlreadyAdopted if apply && !m.metadata.annotations.contains_key(ADOPTED) => {
                mark_adopted(kube, m, &identity)
            }
            _ => Ok(()),
        };
        if let Err(why) = result {
            line.verdict = Verdict::Failed(why);
        }
        report.lines.push(line);
    }
    Ok(report)
}

/// Whether this machine may become this identity's.
fn verdict(host: &maas::Machine, identity: &Identity) -> Verdict {
    match identity::ownership(host, identity) {
        Ownership::Ours => Verdict::AlreadyAdopted,
        Ownership::Other(other) => Verdict::Refused(format!("the MAAS machine belongs to {other}")),
        Ownership::Unmarked if host.owner.is_none() => {
            Verdict::Refused("the MAAS machine is not allocated to anyone".into())
        }
        Ownership::Unmarked if !host.status.is_allocated() => Verdict::Refused(format!(
            "the MAAS machine is {}, not allocated or deployed",
            host.status_name
        )),
        Ownership::Unmarked => Verdict::Adopt,
    }
}

/// Annotation on an adopted MaasMachine (value: the identity), written
/// last: it records the adoption on the object and, being a change the
/// controller watches, makes it look again at once at a machine it refused
/// (nothing else would: the owner data changed in MAAS only).
pub const ADOPTED: &str = "capmaas.infrastructure.cluster.x-k8s.io/adopted";

/// The identity annotation first, then the owner data, then the adopted
/// mark: a run cut short anywhere leaves an object the controller still
/// refuses or has not looked at again, and running again finishes it.
fn adopt(
    kube: &kube::Client,
    maas: &dyn MaasApi,
    m: &MaasMachine,
    host: &maas::Machine,
    identity: &Identity,
) -> Result<(), String> {
    if Identity::recorded(&m.metadata) != Recorded::Valid(identity.clone()) {
        let patch = json!({"metadata": {
            "annotations": {identity::ANNOTATION: identity.as_str()},
            "resourceVersion": m.metadata.resource_version,
        }});
        kube.patch_merge(
            &resources::MAAS_MACHINES,
            Some(&m.metadata.namespace),
            &m.metadata.name,
            &patch,
        )
        .map_err(|e| format!("writing the identity annotation: {e}"))?;
    }
    maas.set_owner_data(&host.system_id, identity::OWNER_DATA_KEY, identity.as_str())
        .map_err(|e| {
            let hint = if e.is_conflict() {
                format!(
                    " (MAAS lets only the machine's owner {:?} write its owner data: \
                     adopt with that user's credentials)",
                    host.owner.as_deref().unwrap_or_default()
                )
            } else {
                String::new()
            };
            format!("writing the MAAS owner data: {e}{hint}")
        })?;
    mark_adopted(kube, m, identity)
}

fn mark_adopted(kube: &kube::Client, m: &MaasMachine, identity: &Identity) -> Result<(), String> {
    let patch = json!({"metadata": {"annotations": {ADOPTED: identity.as_str()}}});
    kube.patch_merge(
        &resources::MAAS_MACHINES,
        Some(&m.metadata.namespace),
        &m.metadata.name,
        &patch,
    )
    .map(|_| ())
    .map_err(|e| format!("adopted in MAAS, but marking the MaasMachine failed (run again): {e}"))
}

/// The MAAS of the MaasMachine's cluster, as the controller would use it.
fn maas_of(
    kube: &kube::Client,
    credentials: &Credentials,
    m: &MaasMachine,
) -> Result<Arc<dyn MaasApi>, String> {
    let ns = &m.metadata.namespace;
    let cluster_name = m
        .metadata
        .label(CLUSTER_NAME_LABEL)
        .ok_or("no cluster-name label: cannot tell which cluster's credentials to use")?;
    let cluster: Cluster = get(kube, &resources::CLUSTERS, ns, cluster_name)?;
    let infra = cluster
        .spec
        .infrastructure_ref
        .as_ref()
        .ok_or_else(|| format!("Cluster {ns}/{cluster_name} has no infrastructureRef"))?;
    let maas_cluster: MaasCluster = get(kube, &resources::MAAS_CLUSTERS, ns, &infra.name)?;
    credentials
        .for_cluster(ns, maas_cluster.spec.identity_ref.as_ref())
        .map_err(|e| format!("MAAS credentials of the cluster: {e}"))
}

fn get<T: DeserializeOwned>(
    kube: &kube::Client,
    r: &kube::Resource,
    ns: &str,
    name: &str,
) -> Result<T, String> {
    let value = kube
        .get(r, Some(ns), name)
        .map_err(|e| format!("{} {ns}/{name}: {e}", r.kind))?;
    serde_json::from_value(value).map_err(|e| format!("{} {ns}/{name}: {e}", r.kind))
}

fn list_maas_machines(kube: &kube::Client, scope: &Scope) -> Result<Vec<MaasMachine>, String> {
    let namespaces: Vec<Option<&str>> = match scope {
        Scope::AllNamespaces => vec![None],
        Scope::Namespaces(names) => names.iter().map(|n| Some(n.as_str())).collect(),
    };
    let mut all = Vec::new();
    for ns in namespaces {
        let (items, _) = kube
            .list_map(
                &resources::MAAS_MACHINES,
                ns,
                &ListParams::default(),
                |m: MaasMachine| Some(m),
            )
            .map_err(|e| format!("listing MaasMachines: {e}"))?;
        all.extend(items);
    }
    all.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectMeta;
    use crate::maas::MachineStatus;

    fn host(owner: Option<&str>, status: MachineStatus, identity: Option<&str>) -> maas::Machine {
        let mut m = maas::Machine {
            system_id: "abc123".into(),
            status_name: format!("{status:?}"),
            status,
            owner: owner.map(str::to_string),
            ..maas::Machine::default()
        };
        if let Some(id) = identity {
            m.owner_data
                .insert(identity::OWNER_DATA_KEY.into(), id.into());
        }
        m
    }

    fn identity() -> Identity {
        Identity::new_for(&ObjectMeta {
            namespace: "ns".into(),
            name: "m".into(),
            uid: "u".into(),
            ..ObjectMeta::default()
        })
        .unwrap()
    }

    #[test]
    fn only_an_allocated_machine_under_no_identity_is_adopted() {
        let id = identity();
        let deployed = MachineStatus::Deployed;
        assert_eq!(
            verdict(&host(Some("capmaas"), deployed.clone(), None), &id),
            Verdict::Adopt
        );
        assert_eq!(
            verdict(
                &host(Some("capmaas"), deployed.clone(), Some(id.as_str())),
                &id
            ),
            Verdict::AlreadyAdopted
        );
        let other = verdict(&host(Some("capmaas"), deployed, Some("capmaas/x/y/z")), &id);
        assert!(matches!(other, Verdict::Refused(why) if why.contains("capmaas/x/y/z")));
        let ready = verdict(&host(None, MachineStatus::Ready, None), &id);
        assert!(matches!(ready, Verdict::Refused(why) if why.contains("not allocated")));
        let releasing = verdict(&host(Some("capmaas"), MachineStatus::Releasing, None), &id);
        assert!(matches!(releasing, Verdict::Refused(_)));
    }

    #[test]
    fn the_report_says_what_a_dry_run_would_do() {
        let mut report = Report::default();
        report.lines.push(Line {
            namespace: "ns".into(),
            name: "m".into(),
            system_id: "abc123".into(),
            hostname: "h".into(),
            state: "Deployed".into(),
            identity: "capmaas/ns/m/u".into(),
            verdict: Verdict::Adopt,
        });
        let text = report.render(false);
        assert!(text.contains("adopt as capmaas/ns/m/u"), "{text}");
        assert!(text.contains("dry run"), "{text}");
        assert!(report.is_clean());
        report.lines[0].verdict = Verdict::Refused("x".into());
        assert!(!report.is_clean());
    }
}
