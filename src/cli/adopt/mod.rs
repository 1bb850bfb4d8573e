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
//! the namespaces (and clusters, and how recent an object may be), reads
//! the plan (a dry run by default), and applies it. A tenant can write any
//! `spec.systemID` and any owner references in its namespace, so a
//! MaasMachine is adopted only on the Go provider's own marks
//! ([`evidence`]): `status.hostname` is the MAAS machine's hostname (the Go
//! provider writes it through the status subresource, which tenants' roles
//! do not grant), and the owner chain is whole (the owner Machine exists
//! with that UID, its infrastructureRef is this MaasMachine, its cluster is
//! the cluster-name label's). An object without them is refused and does
//! not count as a claim: it neither blocks nor takes the machine of the
//! object that has them. It also refuses, and says why, a machine under
//! another identity, an unallocated machine, one this MAAS user cannot see,
//! and two objects with all the marks naming one machine. Running it again
//! is harmless (adopted machines are reported as such).

mod flags;
pub use flags::{Config, COMMAND, FLAGS, USAGE};

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::api::capi::{Cluster, Machine, CLUSTER_NAME_LABEL};
use crate::api::{MaasCluster, MaasMachine};
use crate::controllers::identity::{self, Identity, Ownership, Recorded};
use crate::controllers::maas_view::MaasView;
use crate::controllers::ports::MaasClients;
use crate::kube::{self, resources, ListParams};
use crate::maas;
use crate::operator::credentials::Credentials;

/// Which namespaces to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    Named(Vec<String>),
    All,
}

/// What the administrator asks to adopt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub namespaces: Namespaces,
    /// Only MaasMachines of these Clusters (by the cluster-name label);
    /// empty: every cluster.
    pub clusters: Vec<String>,
    /// Only MaasMachines the API server created before this time (Unix
    /// seconds): objects a tenant wrote after the Go provider stopped are
    /// left out, whatever they say.
    pub created_before: Option<u64>,
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
    // Looked at first, written after: whether a MaasMachine may be adopted
    // depends on every other one naming its machine.
    let mut planned: Vec<(Line, Option<Planned>)> = machines
        .iter()
        .filter_map(|(m, created)| {
            let system_id = m.system_id()?.to_string();
            Some(plan(kube, credentials, scope, m, *created, system_id))
        })
        .collect();
    refuse_contested(&mut planned);
    let mut report = Report::default();
    for (mut line, planned) in planned {
        let result = match (&line.verdict, planned) {
            (Verdict::Adopt, Some(p)) if apply => {
                adopt(kube, p.maas.as_ref(), p.object, &p.host, &p.identity)
            }
            // A run cut short after the owner data: the object still needs
            // its mark (and the controller its wake-up).
            (Verdict::AlreadyAdopted, Some(p))
                if apply
                    && p.object
                        .metadata
                        .annotations
                        .get(ADOPTED)
                        .map(String::as_str)
                        != Some(p.identity.as_str()) =>
            {
                mark_adopted(kube, p.object, &p.identity)
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

/// What adopting one line needs, once its verdict is known.
struct Planned<'a> {
    object: &'a MaasMachine,
    maas: Arc<MaasView>,
    host: maas::Machine,
    identity: Identity,
}

/// One MaasMachine's line: its verdict, read from the objects and MAAS
/// without writing anything.
fn plan<'a>(
    kube: &kube::Client,
    credentials: &Credentials,
    scope: &Scope,
    m: &'a MaasMachine,
    created: Option<u64>,
    system_id: String,
) -> (Line, Option<Planned<'a>>) {
    let mut line = Line {
        namespace: m.metadata.namespace.clone(),
        name: m.metadata.name.clone(),
        system_id: system_id.clone(),
        hostname: String::new(),
        state: String::new(),
        identity: String::new(),
        verdict: Verdict::Adopt,
    };
    let refused = |mut line: Line, why: String| {
        line.verdict = Verdict::Refused(why);
        (line, None)
    };
    if let Some(before) = scope.created_before {
        if created.is_none_or(|created| created >= before) {
            return refused(
                line,
                "created at or after --created-before (or with no creation time): \
                 not one the Go provider made"
                    .into(),
            );
        }
    }
    // Only what capmaas never allocated itself: an object without an
    // identity (the Go provider's), or one whose adoption is under way.
    let identity = match Identity::recorded(&m.metadata) {
        Recorded::Valid(identity) => identity,
        Recorded::Foreign(other) => {
            return refused(
                line,
                format!("its identity annotation names another object ({other:?})"),
            )
        }
        Recorded::Missing => match Identity::new_for(&m.metadata) {
            Some(identity) => identity,
            None => {
                return refused(
                    line,
                    "namespace and name too long for a MAAS identity".into(),
                )
            }
        },
    };
    line.identity = identity.to_string();
    if let Err(why) = owner_chain(kube, m) {
        return refused(line, why);
    }
    let maas = match maas_of(kube, credentials, m) {
        Ok(maas) => maas,
        Err(why) => return refused(line, why),
    };
    let host = match maas.machine(&system_id) {
        Ok(host) => host,
        Err(e) if e.is_not_found() || e.is_forbidden() => {
            return refused(
                line,
                "MAAS machine does not exist or is not visible to this MAAS user".into(),
            )
        }
        Err(e) => {
            line.verdict = Verdict::Failed(format!("reading the MAAS machine: {e}"));
            return (line, None);
        }
    };
    line.hostname = host.hostname.clone();
    line.state = host.status_name.clone();
    line.verdict = verdict(&host, &identity, identity::may_be_adopted(&m.metadata));
    if line.verdict == Verdict::Adopt {
        if let Err(why) = evidence(m, &host) {
            return refused(line, why);
        }
    }
    let planned = Planned {
        object: m,
        maas,
        host,
        identity,
    };
    (line, Some(planned))
}

/// The Go provider's mark on the object that a tenant cannot write: it
/// copies the machine's hostname into `status.hostname` through the status
/// subresource once it has allocated it.
fn evidence(m: &MaasMachine, host: &maas::Machine) -> Result<(), String> {
    let recorded = m.status.as_ref().and_then(|s| s.hostname.as_deref());
    match recorded {
        Some(name) if !name.is_empty() && name.eq_ignore_ascii_case(&host.hostname) => Ok(()),
        Some(name) => Err(format!(
            "its status.hostname {name:?} is not the MAAS machine's: not the Go provider's record \
             of this machine"
        )),
        None => {
            Err("no status.hostname: the Go provider never recorded this machine as its own".into())
        }
    }
}

/// The owner chain the Go provider's MaasMachines have: a controller owner
/// Machine that exists with that UID, whose infrastructureRef is this
/// MaasMachine and whose cluster is the one the cluster-name label names.
fn owner_chain(kube: &kube::Client, m: &MaasMachine) -> Result<(), String> {
    let ns = &m.metadata.namespace;
    let owner = m
        .metadata
        .owner(crate::api::capi::GROUP, "Machine")
        .ok_or("no owner Machine: not created by Cluster API for a cluster")?;
    let machine: Machine = get(kube, &resources::MACHINES, ns, &owner.name)?;
    if machine.metadata.uid != owner.uid {
        return Err(format!(
            "its owner reference names Machine {ns}/{} with another UID (a Machine since \
             deleted and made again)",
            owner.name
        ));
    }
    let infra = machine.spec.infrastructure_ref.as_ref();
    if !infra.is_some_and(|r| r.kind == "MaasMachine" && r.name == m.metadata.name) {
        return Err(format!(
            "its owner Machine {ns}/{} has another infrastructureRef",
            owner.name
        ));
    }
    let label = m.metadata.label(CLUSTER_NAME_LABEL).unwrap_or_default();
    if machine.spec.cluster_name != label {
        return Err(format!(
            "its owner Machine belongs to cluster {:?}, its cluster-name label says {label:?}",
            machine.spec.cluster_name
        ));
    }
    Ok(())
}

/// Several MaasMachines with every mark naming one machine: none is
/// adopted (the administrator narrows the scope). Objects without the marks
/// were refused already and do not count.
fn refuse_contested(planned: &mut [(Line, Option<Planned<'_>>)]) {
    let mut claims: HashMap<String, Vec<String>> = HashMap::new();
    for (line, _) in planned.iter() {
        if line.verdict == Verdict::Adopt {
            claims
                .entry(line.system_id.clone())
                .or_default()
                .push(format!("{}/{}", line.namespace, line.name));
        }
    }
    for (line, _) in planned.iter_mut() {
        match claims.get(&line.system_id) {
            Some(names) if names.len() > 1 && line.verdict == Verdict::Adopt => {
                line.verdict = Verdict::Refused(format!(
                    "{} all carry the Go provider's marks for MAAS machine {}; narrow the \
                     scope (--namespace, --cluster, --created-before) to the rightful one",
                    names.join(", "),
                    line.system_id
                ));
            }
            _ => {}
        }
    }
}

/// Whether this machine may become this identity's (`adoptable`: the
/// object is not one capmaas allocated for itself, see
/// [`identity::may_be_adopted`]).
fn verdict(host: &maas::Machine, identity: &Identity, adoptable: bool) -> Verdict {
    match identity::ownership(host, identity) {
        Ownership::Ours => Verdict::AlreadyAdopted,
        Ownership::Unmarked if !adoptable => Verdict::Refused(
            "capmaas allocated this object's machine itself, and MAAS shows it under none \
             of its identities now (released and taken since): not its own any more"
                .into(),
        ),
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

const ADOPTED: &str = identity::ADOPTED_ANNOTATION;

/// The identity annotation with the adoption marked pending first, then
/// the owner data, then the adoption marked done (the annotation's value
/// becomes the identity: a change the controller watches, so it looks
/// again at once at a machine it refused; nothing else would, the owner
/// data changed in MAAS only). A run cut short anywhere leaves an object
/// the controller still refuses (and never releases from under an
/// adoption), and running again finishes it.
fn adopt(
    kube: &kube::Client,
    maas: &MaasView,
    m: &MaasMachine,
    host: &maas::Machine,
    identity: &Identity,
) -> Result<(), String> {
    if Identity::recorded(&m.metadata) != Recorded::Valid(identity.clone()) {
        let patch = json!({"metadata": {
            "annotations": {
                identity::ANNOTATION: identity.as_str(),
                ADOPTED: identity::ADOPTION_PENDING,
            },
            "resourceVersion": m.metadata.resource_version,
        }});
        patch_machine(kube, m, &patch)
            .map_err(|e| format!("writing the identity annotation: {e}"))?;
    }
    identity::write(maas, &host.system_id, identity).map_err(|e| {
        let hint = if e.is_conflict() {
            format!(
                " (MAAS lets only the machine's owner {:?} write its workload annotations: \
                 adopt with that user's credentials)",
                host.owner.as_deref().unwrap_or_default()
            )
        } else {
            String::new()
        };
        format!("writing the identity into the MAAS workload annotations: {e}{hint}")
    })?;
    mark_adopted(kube, m, identity)
}

fn mark_adopted(kube: &kube::Client, m: &MaasMachine, identity: &Identity) -> Result<(), String> {
    let patch = json!({"metadata": {"annotations": {ADOPTED: identity.as_str()}}});
    patch_machine(kube, m, &patch).map_err(|e| {
        format!("adopted in MAAS, but marking the MaasMachine failed (run again): {e}")
    })
}

fn patch_machine(kube: &kube::Client, m: &MaasMachine, patch: &Value) -> Result<(), kube::Error> {
    let meta = &m.metadata;
    kube.patch_merge(
        &resources::MAAS_MACHINES,
        Some(&meta.namespace),
        &meta.name,
        patch,
    )
    .map(drop)
}

/// The MAAS of the MaasMachine's cluster, as the controller would use it.
fn maas_of(
    kube: &kube::Client,
    credentials: &Credentials,
    m: &MaasMachine,
) -> Result<Arc<MaasView>, String> {
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
    typed(&value).map_err(|e| format!("{} {ns}/{name}: {e}", r.kind))
}

/// `value` as `T`, decoded from its JSON text rather than by
/// `serde_json::from_value`: the informers decode these types from text,
/// and a second (`Value`) decoder of each costs ~45 KB of static binary.
/// A one-off command can afford the extra serialization.
fn typed<T: DeserializeOwned>(value: &Value) -> serde_json::Result<T> {
    serde_json::from_str(&value.to_string())
}

/// The MaasMachines in scope, with their creation time (Unix seconds, as
/// the API server set it).
fn list_maas_machines(
    kube: &kube::Client,
    scope: &Scope,
) -> Result<Vec<(MaasMachine, Option<u64>)>, String> {
    let namespaces: Vec<Option<&str>> = match &scope.namespaces {
        Namespaces::All => vec![None],
        Namespaces::Named(names) => names.iter().map(|n| Some(n.as_str())).collect(),
    };
    let in_clusters = |m: &MaasMachine| {
        scope.clusters.is_empty()
            || m.metadata
                .label(CLUSTER_NAME_LABEL)
                .is_some_and(|c| scope.clusters.iter().any(|s| s == c))
    };
    let mut all = Vec::new();
    for ns in namespaces {
        let (items, _) = kube
            .list_map(
                &resources::MAAS_MACHINES,
                ns,
                &ListParams::default(),
                |item: Value| {
                    let created = item
                        .pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .and_then(kube::time::unix_seconds);
                    let m: MaasMachine = typed(&item).ok()?;
                    in_clusters(&m).then_some((m, created))
                },
            )
            .map_err(|e| format!("listing MaasMachines: {e}"))?;
        all.extend(items);
    }
    all.sort_by(|(a, _), (b, _)| {
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
            verdict(&host(Some("capmaas"), deployed.clone(), None), &id, true),
            Verdict::Adopt
        );
        assert_eq!(
            verdict(
                &host(Some("capmaas"), deployed.clone(), Some(id.as_str())),
                &id,
                true
            ),
            Verdict::AlreadyAdopted
        );
        let other = verdict(
            &host(Some("capmaas"), deployed, Some("capmaas/x/y/z")),
            &id,
            true,
        );
        assert!(matches!(other, Verdict::Refused(why) if why.contains("capmaas/x/y/z")));
        let ready = verdict(&host(None, MachineStatus::Ready, None), &id, true);
        assert!(matches!(ready, Verdict::Refused(why) if why.contains("not allocated")));
        let releasing = verdict(
            &host(Some("capmaas"), MachineStatus::Releasing, None),
            &id,
            true,
        );
        assert!(matches!(releasing, Verdict::Refused(_)));
        // capmaas's own object: its machine under no identity was released
        // and taken since; adopting it would take someone else's machine.
        let taken = verdict(
            &host(Some("capmaas"), MachineStatus::Deployed, None),
            &id,
            false,
        );
        assert!(matches!(taken, Verdict::Refused(why) if why.contains("not its own")));
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

    #[test]
    fn only_the_go_providers_status_hostname_is_evidence() {
        let host = maas::Machine {
            hostname: "node-1".into(),
            ..maas::Machine::default()
        };
        let with = |hostname: Option<&str>| MaasMachine {
            status: Some(crate::api::MaasMachineStatus {
                hostname: hostname.map(str::to_string),
                ..Default::default()
            }),
            ..MaasMachine::default()
        };
        assert!(evidence(&with(Some("node-1")), &host).is_ok());
        assert!(evidence(&with(Some("NODE-1")), &host).is_ok());
        let other = evidence(&with(Some("node-2")), &host).unwrap_err();
        assert!(other.contains("\"node-2\""), "{other}");
        assert!(evidence(&with(Some("")), &host).is_err());
        assert!(evidence(&with(None), &host).is_err());
        assert!(evidence(&MaasMachine::default(), &host).is_err());
    }

    #[test]
    fn two_objects_with_every_mark_on_one_machine_are_both_refused() {
        let line = |name: &str, id: &str, verdict: Verdict| Line {
            namespace: "ns".into(),
            name: name.into(),
            system_id: id.into(),
            hostname: String::new(),
            state: String::new(),
            identity: String::new(),
            verdict,
        };
        let mut planned = vec![
            (line("a", "x", Verdict::Adopt), None),
            (line("b", "x", Verdict::Adopt), None),
            (
                line("thief", "y", Verdict::Refused("no marks".into())),
                None,
            ),
            (line("c", "y", Verdict::Adopt), None),
        ];
        refuse_contested(&mut planned);
        for (l, _) in planned.iter().take(2) {
            assert!(
                matches!(&l.verdict, Verdict::Refused(why) if why.contains("ns/a, ns/b")),
                "{l:?}"
            );
        }
        // An object without the marks does not count as a claim.
        assert_eq!(planned[3].0.verdict, Verdict::Adopt);
    }
}
