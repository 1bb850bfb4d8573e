//! `capmaas doctor`: what stands between the objects in the management
//! cluster and working machines, checked in one run with the credentials
//! the controller uses, one line per check.
//!
//! ```text
//! whoami ─► reachable (TLS) ─► API key ─► rights, MAAS version, transport
//!   ─► objects (MaasClusters, MaasMachines, templates, MachineDeployments, KCPs)
//!   ─► credentials of clusters with spec.identityRef
//!   ─► images, pools, deploy options for this MAAS release,
//!      3.8+ and not an admin: allocation rights per pool (dry-run allocations)
//!   ─► tags, zones, DNS domains referenced ─► capacity per template
//!   ─► orphans: machines under a capmaas identity no MaasMachine claims
//!        (--release-orphans: the plan; with --apply: released, each re-read first)
//! ```
//!
//! A check that cannot run (its MAAS or Kubernetes list failed) fails with
//! the reason. Inventory checks use the controller-wide MAAS; objects of
//! clusters with their own credentials are checked for those credentials
//! only. Nothing is written anywhere unless `--release-orphans --apply`.

mod flags;
pub use flags::{Config, COMMAND, FLAGS, USAGE};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::capi::CLUSTER_NAME_LABEL;
use crate::api::{MaasCluster, MaasMachine, MaasMachineSpec, MaasMachineTemplate, ObjectMeta};
use crate::controllers::identity::{Identity, Recorded};
use crate::controllers::machine::{asks_versioned_options, options_missing_from};
use crate::controllers::matching;
use crate::controllers::ports::MaasClients;
use crate::kube::{self, resources, ListParams};
use crate::maas::watch::find_orphans;
use crate::maas::{
    self, AllocateRequest, MaasApi, MaasVersion, MachineFilter, MachineStatus, ReleaseRequest,
    VersionInfo,
};
use crate::operator::credentials::Credentials;

/// Cluster API's annotation on objects cloned from a template.
const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    pub outcome: Outcome,
    pub name: String,
    pub detail: String,
}

/// A machine under a capmaas identity that no MaasMachine claims.
#[derive(Debug, Clone)]
pub struct Orphan {
    pub system_id: String,
    pub hostname: String,
    pub state: String,
    pub owner: String,
    pub identity: String,
    /// After `--apply`: Ok when released, else why not.
    pub released: Option<Result<(), String>>,
}

/// What `--release-orphans` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Report orphans only.
    No,
    /// Show what would be released.
    Plan,
    /// Release them (each re-read and re-checked first).
    Apply,
}

#[derive(Debug, Default)]
pub struct Report {
    pub checks: Vec<Check>,
    pub orphans: Vec<Orphan>,
}

impl Report {
    fn push(&mut self, outcome: Outcome, name: impl Into<String>, detail: impl Into<String>) {
        self.checks.push(Check {
            outcome,
            name: name.into(),
            detail: detail.into(),
        });
    }

    fn ok(&mut self, name: impl Into<String>, detail: impl Into<String>) {
        self.push(Outcome::Ok, name, detail);
    }

    fn warn(&mut self, name: impl Into<String>, detail: impl Into<String>) {
        self.push(Outcome::Warn, name, detail);
    }

    fn fail(&mut self, name: impl Into<String>, detail: impl Into<String>) {
        self.push(Outcome::Fail, name, detail);
    }

    /// No check failed.
    pub fn is_healthy(&self) -> bool {
        self.checks.iter().all(|c| c.outcome != Outcome::Fail)
    }

    pub fn render(&self, release: Release) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let tag = match c.outcome {
                Outcome::Ok => "[ OK ]",
                Outcome::Warn => "[WARN]",
                Outcome::Fail => "[FAIL]",
            };
            let _ = writeln!(out, "{tag} {}: {}", c.name, c.detail);
        }
        if !self.orphans.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<10} {:<20} {:<12} {:<12} {:<44} ACTION",
                "SYSTEMID", "HOSTNAME", "STATE", "MAAS USER", "IDENTITY"
            );
            for o in &self.orphans {
                let action = match (&o.released, release) {
                    (Some(Ok(())), _) => "released".to_string(),
                    (Some(Err(why)), _) => format!("NOT RELEASED: {why}"),
                    (None, Release::Plan) => "would release".to_string(),
                    (None, _) => "-".to_string(),
                };
                let _ = writeln!(
                    out,
                    "{:<10} {:<20} {:<12} {:<12} {:<44} {action}",
                    o.system_id, o.hostname, o.state, o.owner, o.identity
                );
            }
            match release {
                Release::No => out.push_str(
                    "to release them: capmaas doctor --release-orphans (shows the plan), \
                     then --release-orphans --apply\n",
                ),
                Release::Plan => out.push_str(
                    "dry run: nothing was released. Release only if no other management \
                     cluster's capmaas uses these MAAS users; then run again with \
                     --release-orphans --apply\n",
                ),
                Release::Apply => {}
            }
        }
        let count = |o: Outcome| self.checks.iter().filter(|c| c.outcome == o).count();
        let _ = writeln!(
            out,
            "{} ok, {} warnings, {} failed",
            count(Outcome::Ok),
            count(Outcome::Warn),
            count(Outcome::Fail)
        );
        out
    }
}

/// Runs every check; MAAS is asked with `maas` (the controller-wide
/// credentials), clusters with `spec.identityRef` through `credentials`.
pub fn run(
    kube: &kube::Client,
    maas: &maas::Client,
    credentials: &Credentials,
    release: Release,
) -> Report {
    let mut report = Report::default();
    let Some(connection) = connect(&mut report, maas) else {
        return report;
    };
    let user = connection.username.clone();
    let objects = match Objects::list(kube) {
        Ok(objects) => {
            report.ok(
                "Kubernetes objects",
                format!(
                    "{} MaasClusters, {} MaasMachines, {} MaasMachineTemplates in all namespaces",
                    objects.clusters.len(),
                    objects.machines.len(),
                    objects.templates.len()
                ),
            );
            objects
        }
        Err(e) => {
            report.fail("Kubernetes objects", e);
            report.fail(
                "orphans",
                "not checked: every MaasMachine must be listed to tell an orphan",
            );
            return report;
        }
    };
    let own_credentials = cluster_credentials(&mut report, credentials, &objects.clusters);
    let inventory = Inventory::list(maas);
    let checked = |meta: &ObjectMeta| {
        let cluster = meta.label(CLUSTER_NAME_LABEL).unwrap_or_default();
        !own_credentials.contains(&(meta.namespace.clone(), cluster.to_string()))
    };
    let specs: Vec<(String, &MaasMachineSpec)> = objects
        .machines
        .iter()
        .filter(|m| checked(&m.metadata))
        .map(|m| (object_name("MaasMachine", &m.metadata), &m.spec))
        .chain(
            objects
                .templates
                .iter()
                .filter(|t| checked(&t.metadata))
                .map(|t| {
                    (
                        object_name("MaasMachineTemplate", &t.metadata),
                        &t.spec.template.spec,
                    )
                }),
        )
        .collect();
    images(&mut report, &inventory, &specs);
    named(
        &mut report,
        "resource pool",
        &inventory.pools,
        &specs,
        |s| s.resource_pool.iter().cloned().collect(),
    );
    deploy_options(&mut report, connection.version.as_ref(), &specs);
    if !connection.is_superuser
        && connection
            .version
            .as_ref()
            .is_some_and(VersionInfo::has_pool_entitlements)
    {
        pool_rights(&mut report, maas, &user, &inventory, &specs);
    }
    named(&mut report, "tag", &inventory.tags, &specs, |s| {
        s.tags.clone()
    });
    let mut zone_refs = specs.clone();
    let cluster_zone_specs: Vec<(String, MaasMachineSpec)> = objects
        .clusters
        .iter()
        .filter(|c| c.spec.identity_ref.is_none() && !c.is_externally_managed())
        .flat_map(|c| {
            c.spec.failure_domains.iter().map(|z| {
                let spec = MaasMachineSpec {
                    failure_domain: Some(z.clone()),
                    ..MaasMachineSpec::default()
                };
                (object_name("MaasCluster", &c.metadata), spec)
            })
        })
        .collect();
    zone_refs.extend(cluster_zone_specs.iter().map(|(n, s)| (n.clone(), s)));
    named(&mut report, "zone", &inventory.zones, &zone_refs, |s| {
        s.failure_domain.iter().cloned().collect()
    });
    domains(&mut report, &inventory, &objects.clusters);
    capacity(&mut report, &inventory, &objects, &checked);
    orphans(
        &mut report,
        maas,
        &user,
        credentials,
        &inventory,
        &objects,
        release,
    );
    report
}

/// What [`connect`] learnt of the controller-wide MAAS user.
struct Connection {
    username: String,
    is_superuser: bool,
    /// None when MAAS did not answer `version/`.
    version: Option<VersionInfo>,
}

/// whoami: reachability (and TLS), the key, the rights, the transport.
fn connect(report: &mut Report, maas: &maas::Client) -> Option<Connection> {
    let root = maas.api_root().to_string();
    let tls = if root.starts_with("https://") {
        "TLS, certificate verified"
    } else {
        "plain http, no TLS"
    };
    match maas.whoami() {
        Ok(user) => {
            report.ok("MAAS reachable", format!("{root} ({tls})"));
            report.ok("API key", format!("valid, MAAS user {:?}", user.username));
            if user.is_superuser {
                report.ok("rights", "MAAS administrator");
            } else {
                report.warn(
                    "rights",
                    format!(
                        "{:?} is not a MAAS administrator: it sees only the pools it is \
                         granted, and the swap update before deploy needs --no-swap-update",
                        user.username
                    ),
                );
            }
            let version = version(report, maas);
            let warnings = maas.security_warnings();
            if warnings.is_empty() {
                report.ok("transport", "the API key travels over TLS");
            }
            for w in warnings {
                report.warn("transport", w);
            }
            Some(Connection {
                username: user.username,
                is_superuser: user.is_superuser,
                version,
            })
        }
        Err(e) if e.is_unauthorized() || e.is_forbidden() => {
            report.ok("MAAS reachable", format!("{root} ({tls})"));
            report.fail("API key",
                format!("MAAS refused it: {e} (MAAS_API_KEY: create a key in MAAS under the user's API keys)"),
            );
            None
        }
        Err(e) => {
            let hint = match e.kind() {
                maas::ErrorKind::Tls => {
                    " (TLS verification failed: give MAAS's CA with --maas-ca-file)"
                }
                maas::ErrorKind::Status if e.is_not_found() => {
                    " (is MAAS_ENDPOINT the MAAS URL, e.g. http://host:5240/MAAS?)"
                }
                _ => "",
            };
            report.fail("MAAS reachable", format!("{root}: {e}{hint}"));
            None
        }
    }
}

/// MAAS's version, which says which deploy options it has and whether it
/// grants rights per pool (3.8+).
fn version(report: &mut Report, maas: &maas::Client) -> Option<VersionInfo> {
    match maas.version() {
        Ok(version) => {
            report.ok("MAAS version", version.version.clone());
            Some(version)
        }
        Err(e) => {
            report.warn("MAAS version", format!("not read: {e}"));
            None
        }
    }
}

/// `ns/name` of clusters whose MaasCluster carries its own credentials;
/// one line per such MaasCluster.
fn cluster_credentials(
    report: &mut Report,
    credentials: &Credentials,
    clusters: &[MaasCluster],
) -> BTreeSet<(String, String)> {
    let mut own = BTreeSet::new();
    for c in clusters {
        let Some(identity) = &c.spec.identity_ref else {
            continue;
        };
        let meta = &c.metadata;
        let name = format!(
            "credentials of {} (Secret {})",
            object_name("MaasCluster", meta),
            identity.name
        );
        match credentials.for_cluster(&meta.namespace, Some(identity)) {
            Ok(_) => report.ok(name, "valid"),
            Err(e) => report.fail(name, e.message()),
        }
        let cluster = meta
            .label(CLUSTER_NAME_LABEL)
            .or_else(|| {
                meta.owner(crate::api::capi::GROUP, "Cluster")
                    .map(|o| o.name.as_str())
            })
            .unwrap_or(&meta.name);
        own.insert((meta.namespace.clone(), cluster.to_string()));
    }
    own
}

/// The MAAS lists the checks read, each kept with its error.
struct Inventory {
    images: Result<Vec<maas::BootResource>, maas::Error>,
    pools: Result<Vec<String>, maas::Error>,
    tags: Result<Vec<String>, maas::Error>,
    zones: Result<Vec<String>, maas::Error>,
    domains: Result<Vec<String>, maas::Error>,
    machines: Result<Vec<Arc<maas::Machine>>, maas::Error>,
}

impl Inventory {
    fn list(maas: &maas::Client) -> Inventory {
        Inventory {
            images: maas.boot_resources(),
            pools: maas
                .resource_pools()
                .map(|l| l.into_iter().map(|p| p.name).collect()),
            tags: maas.tags().map(|l| l.into_iter().map(|t| t.name).collect()),
            zones: maas
                .zones()
                .map(|l| l.into_iter().map(|z| z.name).collect()),
            domains: maas
                .domains()
                .map(|l| l.into_iter().map(|d| d.name).collect()),
            machines: maas
                .machines(&MachineFilter::default())
                .map(|l| l.into_iter().map(Arc::new).collect()),
        }
    }
}

fn object_name(kind: &str, meta: &ObjectMeta) -> String {
    format!("{kind} {}/{}", meta.namespace, meta.name)
}

/// `a, b and 3 more`.
fn some_of(names: &[String]) -> String {
    match names.len() {
        0..=2 => names.join(", "),
        n => format!(
            "{} and {} more",
            names.iter().take(2).cloned().collect::<Vec<_>>().join(", "),
            n - 2
        ),
    }
}

fn images(report: &mut Report, inventory: &Inventory, specs: &[(String, &MaasMachineSpec)]) {
    let mut wanted: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (name, spec) in specs {
        if !spec.image.trim().is_empty() {
            wanted
                .entry(spec.image.trim())
                .or_default()
                .push(name.clone());
        }
    }
    if wanted.is_empty() {
        return;
    }
    let resources = match &inventory.images {
        Ok(resources) => resources,
        Err(e) => {
            report.fail("images", format!("listing boot resources: {e}"));
            return;
        }
    };
    for (image, users) in wanted {
        let check = maas::check_image(image, resources);
        let name = format!("image {image}");
        if check.exists {
            let canonical = check.canonical.unwrap_or_else(|| image.to_string());
            report.ok(
                name,
                format!("in MAAS as {canonical} (used by {})", some_of(&users)),
            );
        } else {
            let closest = if check.closest.is_empty() {
                String::new()
            } else {
                format!("; did you mean {}?", check.closest.join(" or "))
            };
            report.fail(
                name,
                format!(
                    "not among MAAS's boot resources (used by {}){closest}",
                    some_of(&users)
                ),
            );
        }
    }
}

/// Pools, tags, zones: each name referenced must exist in MAAS.
fn named(
    report: &mut Report,
    what: &str,
    existing: &Result<Vec<String>, maas::Error>,
    specs: &[(String, &MaasMachineSpec)],
    names_of: impl Fn(&MaasMachineSpec) -> Vec<String>,
) {
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (object, spec) in specs {
        for n in names_of(spec).into_iter().filter(|n| !n.is_empty()) {
            wanted.entry(n).or_default().push(object.clone());
        }
    }
    let missing = "does not exist in MAAS or this MAAS user cannot see it";
    exists(report, what, existing, wanted, missing);
}

/// One line per name `wanted` (with the objects that use it): Ok when
/// MAAS lists it, else `missing`.
fn exists(
    report: &mut Report,
    what: &str,
    existing: &Result<Vec<String>, maas::Error>,
    wanted: BTreeMap<String, Vec<String>>,
    missing: &str,
) {
    if wanted.is_empty() {
        return;
    }
    let existing = match existing {
        Ok(existing) => existing,
        Err(e) => {
            report.fail(format!("{what}s"), format!("listing them: {e}"));
            return;
        }
    };
    for (n, users) in wanted {
        let (outcome, detail) = if existing.contains(&n) {
            (Outcome::Ok, "exists")
        } else {
            (Outcome::Fail, missing)
        };
        let users = some_of(&users);
        report.push(
            outcome,
            format!("{what} {n}"),
            format!("{detail} (used by {users})"),
        );
    }
}

/// Deploy options only newer MAAS releases have (the controller's table):
/// one line per option this MAAS lacks, naming the objects that ask for
/// it. MAAS would ignore such an option, so the controller deploys none of
/// their machines (`UnsupportedByMAAS`).
fn deploy_options(
    report: &mut Report,
    version: Option<&VersionInfo>,
    specs: &[(String, &MaasMachineSpec)],
) {
    let mut asking: Vec<&(String, &MaasMachineSpec)> = specs
        .iter()
        .filter(|(_, spec)| asks_versioned_options(spec))
        .collect();
    if asking.is_empty() {
        return;
    }
    // Templates first: the objects a user writes.
    asking.sort_by_key(|(name, _)| !name.starts_with("MaasMachineTemplate"));
    let names = |objects: &[&(String, &MaasMachineSpec)]| {
        some_of(&objects.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
    };
    let Some(version) = version else {
        report.warn(
            "deploy options",
            format!(
                "not checked: MAAS's version was not read (asked by {})",
                names(&asking)
            ),
        );
        return;
    };
    let Some(running) = MaasVersion::parse(&version.version) else {
        report.warn(
            "deploy options",
            format!(
                "not checked: MAAS reports version {:?}, not a release number (asked by {})",
                version.version,
                names(&asking)
            ),
        );
        return;
    };
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, spec) in &asking {
        for option in options_missing_from(spec, running) {
            missing.entry(option).or_default().push(name.clone());
        }
    }
    if missing.is_empty() {
        report.ok(
            "deploy options",
            format!(
                "MAAS {} has every option asked (by {})",
                version.version,
                names(&asking)
            ),
        );
    }
    for (option, objects) in missing {
        report.fail(
            "deploy options",
            format!(
                "{option}; this MAAS is {}, which would ignore it: their machines are not \
                 deployed (asked by {})",
                version.version,
                some_of(&objects)
            ),
        );
    }
}

/// MAAS 3.8+, a user not an administrator: may it allocate from each pool
/// the objects allocate from? Its rights come from its groups'
/// entitlements, which API 2.0 does not show, so doctor asks MAAS for a
/// dry-run allocation pinned to the pool (`dry_run=true`: MAAS picks a
/// machine and acquires none). MAAS offers a user only the Ready machines
/// of pools where it holds `can_deploy_machines`, yet lists the free
/// machines of every pool it may view: Ready machines listed in the pool
/// but none offered is a missing right. With no Ready machine visible
/// there, a missing right and an empty pool answer alike, and doctor says
/// it cannot tell. An object without `resourcePool` allocates from any
/// pool the user may deploy in.
fn pool_rights(
    report: &mut Report,
    maas: &maas::Client,
    username: &str,
    inventory: &Inventory,
    specs: &[(String, &MaasMachineSpec)],
) {
    let mut wanted: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    for (object, spec) in specs {
        let pool = spec.resource_pool.clone().filter(|p| !p.is_empty());
        // A pool MAAS does not list has failed its check already.
        if let (Some(p), Ok(existing)) = (&pool, &inventory.pools) {
            if !existing.contains(p) {
                continue;
            }
        }
        wanted.entry(pool).or_default().push(object.clone());
    }
    for (pool, users) in wanted {
        let (name, place, grant) = match &pool {
            Some(p) => (
                format!("pool rights {p}"),
                format!("pool {p}"),
                format!("pool {p}"),
            ),
            None => (
                "pool rights (no resourcePool)".to_string(),
                "any pool".to_string(),
                "the pools it should allocate from".to_string(),
            ),
        };
        let ready = inventory.machines.as_ref().ok().map(|machines| {
            machines
                .iter()
                .filter(|m| {
                    m.status == MachineStatus::Ready
                        && !m.locked
                        && m.owner.as_deref().is_none_or(|o| o == username)
                        && pool.as_ref().is_none_or(|p| &m.pool == p)
                })
                .count()
        });
        let request = AllocateRequest {
            pool: pool.clone(),
            dry_run: true,
            ..AllocateRequest::default()
        };
        let users = some_of(&users);
        match (maas.allocate(&request), ready) {
            (Ok(picked), _) => report.ok(
                name,
                format!(
                    "may allocate from {place}: a dry run picked {} and allocated nothing \
                     (used by {users})",
                    picked.hostname
                ),
            ),
            (Err(e), Some(ready)) if e.is_conflict() && ready > 0 => report.fail(
                name,
                format!(
                    "cannot allocate from {place}: {ready} Ready machines are visible there, \
                     but MAAS offers this user none; a MAAS administrator must give one of \
                     its groups can_deploy_machines on {grant} (used by {users})"
                ),
            ),
            (Err(e), _) if e.is_conflict() => report.warn(
                name,
                format!(
                    "cannot tell: no Ready machine is visible in {place}, and MAAS answers a \
                     missing can_deploy_machines right and an empty pool alike (used by {users})"
                ),
            ),
            (Err(e), _) => report.warn(
                name,
                format!("not checked: dry-run allocation: {e} (used by {users})"),
            ),
        }
    }
}

fn domains(report: &mut Report, inventory: &Inventory, clusters: &[MaasCluster]) {
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in clusters {
        // A cluster in VIP mode, or with the user's endpoint
        // (custom-dns-provided), makes no record: its domain is not used.
        if c.spec.identity_ref.is_none()
            && !c.is_externally_managed()
            && !c.has_custom_endpoint()
            && c.spec.control_plane_vip.is_none()
            && !c.spec.dns_domain.is_empty()
        {
            wanted
                .entry(c.spec.dns_domain.clone())
                .or_default()
                .push(object_name("MaasCluster", &c.metadata));
        }
    }
    let missing = "not a MAAS domain: the API server record cannot be created";
    exists(report, "DNS domain", &inventory.domains, wanted, missing);
}

/// Per template: free machines matching its constraints against the
/// replicas asked of it that have no machine yet. Best effort: templates
/// with overlapping constraints compete for the same machines.
fn capacity(
    report: &mut Report,
    inventory: &Inventory,
    objects: &Objects,
    checked: &dyn Fn(&ObjectMeta) -> bool,
) {
    let templates: Vec<&MaasMachineTemplate> = objects
        .templates
        .iter()
        .filter(|t| checked(&t.metadata))
        .collect();
    if templates.is_empty() {
        return;
    }
    let machines = match &inventory.machines {
        Ok(machines) => machines,
        Err(e) => {
            report.fail("capacity", format!("listing machines: {e}"));
            return;
        }
    };
    for t in templates {
        let meta = &t.metadata;
        let spec = &t.spec.template.spec;
        let replicas: i64 = objects
            .users
            .iter()
            .filter(|u| u.namespace == meta.namespace && u.template == meta.name)
            .map(|u| u.replicas)
            .sum();
        let allocated = objects
            .machines
            .iter()
            .filter(|m| {
                m.metadata.namespace == meta.namespace
                    && m.metadata.annotations.get(CLONED_FROM_NAME) == Some(&meta.name)
                    && m.system_id().is_some()
            })
            .count() as i64;
        let needed = (replicas - allocated).max(0);
        let free = machines
            .iter()
            .filter(|m| matching::is_free(m) && matching::matches(spec, m))
            .count() as i64;
        let name = format!("capacity of {}", object_name("MaasMachineTemplate", meta));
        let detail = format!(
            "{free} free machines match; {replicas} replicas asked, {allocated} allocated, \
             {needed} to allocate"
        );
        if free >= needed {
            report.ok(name, detail);
        } else {
            report.fail(name, format!("{detail}: short by {}", needed - free));
        }
    }
}

fn orphans(
    report: &mut Report,
    maas: &maas::Client,
    user: &str,
    credentials: &Credentials,
    inventory: &Inventory,
    objects: &Objects,
    release: Release,
) {
    let claimed: BTreeSet<String> = objects
        .machines
        .iter()
        .filter_map(|m| match Identity::recorded(&m.metadata) {
            Recorded::Valid(identity) => Some(identity.as_str().to_string()),
            _ => None,
        })
        .collect();
    let is_claimed = |identity: &str| claimed.contains(identity);
    // Every MAAS user in use: the controller's, then the clusters' own.
    let mut sources: Vec<(maas::Client, String)> = vec![(maas.clone(), user.to_string())];
    for (client, username) in credentials.clients() {
        if !sources
            .iter()
            .any(|(c, u)| *u == username && c.api_root() == client.api_root())
        {
            sources.push((client, username));
        }
    }
    let mut unclaimed = 0;
    let mut unmarked: Vec<String> = Vec::new();
    for (i, (client, username)) in sources.iter().enumerate() {
        let listed: Result<Vec<Arc<maas::Machine>>, String> = if i == 0 {
            match &inventory.machines {
                Ok(ms) => Ok(ms
                    .iter()
                    .filter(|m| m.owner.as_deref() == Some(username.as_str()))
                    .cloned()
                    .collect()),
                Err(e) => Err(e.to_string()),
            }
        } else {
            client
                .machines_owned_by(username)
                .map_err(|e| e.to_string())
        };
        let machines = match listed {
            Ok(machines) => machines,
            Err(e) => {
                report.fail(
                    format!("orphans of MAAS user {username:?}"),
                    format!("listing its machines: {e}"),
                );
                continue;
            }
        };
        let found = find_orphans(&machines, is_claimed);
        unmarked.extend(found.unmarked.iter().map(|m| m.hostname.clone()));
        for m in found.unclaimed {
            unclaimed += 1;
            let mut orphan = Orphan {
                system_id: m.system_id.clone(),
                hostname: m.hostname.clone(),
                state: m.status_name.clone(),
                owner: username.clone(),
                identity: m.identity().unwrap_or_default().to_string(),
                released: None,
            };
            if release == Release::Apply {
                orphan.released = Some(release_orphan(client, username, &orphan, is_claimed));
            }
            report.orphans.push(orphan);
        }
    }
    let released = report
        .orphans
        .iter()
        .filter(|o| matches!(o.released, Some(Ok(()))))
        .count();
    match (unclaimed, released) {
        (0, _) => report.ok(
            "orphans",
            "every machine under a capmaas identity is claimed by a MaasMachine",
        ),
        (n, r) if r == n => report.ok(
            "orphans",
            format!("{n} machines under a capmaas identity no MaasMachine claims: released"),
        ),
        (n, r) => report.fail(
            "orphans",
            format!(
                "{} machines under a capmaas identity no MaasMachine claims (listed below)",
                n - r
            ),
        ),
    }
    if !unmarked.is_empty() {
        report.warn(
            "unmarked machines",
            format!(
                "{} allocated to capmaas's MAAS users without a capmaas identity ({}): the Go \
                 provider's (run capmaas adopt) or allocated by hand with the same account",
                unmarked.len(),
                some_of(&unmarked)
            ),
        );
    }
}

/// Releases one orphan after reading it again: still this MAAS user's,
/// still under the same identity, still unclaimed.
fn release_orphan(
    client: &maas::Client,
    username: &str,
    orphan: &Orphan,
    is_claimed: impl Fn(&str) -> bool,
) -> Result<(), String> {
    let now = client
        .machine(&orphan.system_id)
        .map_err(|e| format!("reading it again: {e}"))?;
    if now.owner.as_deref() != Some(username) || now.identity() != Some(orphan.identity.as_str()) {
        return Err("it changed since it was listed; run doctor again".into());
    }
    if is_claimed(&orphan.identity) {
        return Err("a MaasMachine claims it now".into());
    }
    let request = ReleaseRequest {
        comment: Some(format!(
            "capmaas doctor --release-orphans: no MaasMachine claims {}",
            orphan.identity
        )),
        ..ReleaseRequest::default()
    };
    client
        .release(&orphan.system_id, &request)
        .map(|_| ())
        .map_err(|e| format!("release: {e}"))
}

/// A MachineDeployment or KubeadmControlPlane's use of a template.
struct TemplateUse {
    namespace: String,
    template: String,
    replicas: i64,
}

/// What the checks read from Kubernetes, every namespace.
struct Objects {
    clusters: Vec<MaasCluster>,
    machines: Vec<MaasMachine>,
    templates: Vec<MaasMachineTemplate>,
    users: Vec<TemplateUse>,
}

impl Objects {
    fn list(kube: &kube::Client) -> Result<Objects, String> {
        let mut users: Vec<TemplateUse> = list::<Value>(kube, &resources::MACHINE_DEPLOYMENTS)?
            .iter()
            .filter_map(|md| template_use(md, md.pointer("/spec/template/spec/infrastructureRef")))
            .collect();
        // KubeadmControlPlane is optional (another control plane provider,
        // or its CRD not installed): absent means no use.
        let kcps = kube.list_map(
            &resources::KUBEADM_CONTROL_PLANES,
            None,
            &ListParams::default(),
            |item: Value| Some(item),
        );
        match kcps {
            Ok((kcps, _)) => users.extend(kcps.iter().filter_map(|kcp| {
                // v1beta2 nests the reference under spec, v1beta1 did not.
                let reference = kcp
                    .pointer("/spec/machineTemplate/spec/infrastructureRef")
                    .or_else(|| kcp.pointer("/spec/machineTemplate/infrastructureRef"));
                template_use(kcp, reference)
            })),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(format!("listing KubeadmControlPlanes: {e}")),
        }
        Ok(Objects {
            clusters: list(kube, &resources::MAAS_CLUSTERS)?,
            machines: list(kube, &resources::MAAS_MACHINES)?,
            templates: list(kube, &resources::MAAS_MACHINE_TEMPLATES)?,
            users,
        })
    }
}

fn template_use(owner: &Value, reference: Option<&Value>) -> Option<TemplateUse> {
    let reference = reference?;
    if reference.get("kind").and_then(Value::as_str) != Some("MaasMachineTemplate") {
        return None;
    }
    Some(TemplateUse {
        namespace: owner.pointer("/metadata/namespace")?.as_str()?.to_string(),
        template: reference.get("name")?.as_str()?.to_string(),
        replicas: owner
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1),
    })
}

fn list<T: DeserializeOwned>(kube: &kube::Client, r: &kube::Resource) -> Result<Vec<T>, String> {
    kube.list_map(r, None, &ListParams::default(), |item: T| Some(item))
        .map(|(items, _)| items)
        .map_err(|e| format!("listing {}s: {e}", r.kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_fails_on_any_failed_check_and_shows_the_plan() {
        let mut report = Report::default();
        report.push(Outcome::Ok, "MAAS reachable", "x");
        report.push(Outcome::Warn, "rights", "not admin");
        assert!(report.is_healthy());
        report.push(Outcome::Fail, "image a", "missing");
        assert!(!report.is_healthy());
        report.orphans.push(Orphan {
            system_id: "abc123".into(),
            hostname: "h1".into(),
            state: "Deployed".into(),
            owner: "admin".into(),
            identity: "capmaas/ns/m/u".into(),
            released: None,
        });
        let plan = report.render(Release::Plan);
        assert!(plan.contains("[FAIL] image a: missing"), "{plan}");
        assert!(plan.contains("would release"), "{plan}");
        assert!(plan.contains("dry run: nothing was released"), "{plan}");
        assert!(plan.ends_with("1 ok, 1 warnings, 1 failed\n"), "{plan}");
        report.orphans[0].released = Some(Ok(()));
        assert!(report.render(Release::Apply).contains(" released"));
    }

    #[test]
    fn a_cluster_in_vip_mode_needs_no_dns_domain() {
        let inventory = Inventory {
            images: Ok(vec![]),
            pools: Ok(vec![]),
            tags: Ok(vec![]),
            zones: Ok(vec![]),
            domains: Ok(vec!["maas".into()]),
            machines: Ok(vec![]),
        };
        let cluster = |name: &str, vip: Option<serde_json::Value>| -> MaasCluster {
            let mut c = serde_json::json!({"metadata": {"name": name, "namespace": "ns"},
                                           "spec": {"dnsDomain": "nowhere"}});
            if let Some(vip) = vip {
                c["spec"]["controlPlaneVIP"] = vip;
            }
            serde_json::from_value(c).unwrap()
        };
        let mut report = Report::default();
        let vip = cluster("vip", Some(serde_json::json!({"address": "10.0.0.5"})));
        domains(&mut report, &inventory, std::slice::from_ref(&vip));
        assert!(report.checks.is_empty(), "{:?}", report.checks);
        // Nor does one whose endpoint is the user's (issue 22).
        let mut custom = cluster("custom", None);
        custom.metadata.annotations.insert(
            crate::api::maas_cluster::CUSTOM_DNS_ANNOTATION.to_string(),
            String::new(),
        );
        domains(&mut report, &inventory, std::slice::from_ref(&custom));
        assert!(report.checks.is_empty(), "{:?}", report.checks);
        domains(
            &mut report,
            &inventory,
            &[vip, custom, cluster("dns", None)],
        );
        assert_eq!(report.checks.len(), 1);
        assert_eq!(report.checks[0].outcome, Outcome::Fail);
    }

    #[test]
    fn deploy_options_a_maas_release_lacks_name_the_option_and_the_objects() {
        let spec = |hw_sync: bool, crash_dump: bool| {
            let mut spec = MaasMachineSpec::default();
            let options = spec.options_mut();
            options.enable_hw_sync = Some(hw_sync);
            options.enable_kernel_crash_dump = Some(crash_dump);
            spec
        };
        let (both, dump, none) = (spec(true, true), spec(false, true), spec(false, false));
        let specs = [
            ("MaasMachine ns/m-1".to_string(), &both),
            ("MaasMachineTemplate ns/both".to_string(), &both),
            ("MaasMachineTemplate ns/dump".to_string(), &dump),
            ("MaasMachineTemplate ns/plain".to_string(), &none),
        ];
        let at = |v: &str| VersionInfo {
            version: v.into(),
            subversion: String::new(),
            capabilities: Vec::new(),
        };
        let run = |version: Option<&VersionInfo>, specs: &[(String, &MaasMachineSpec)]| {
            let mut report = Report::default();
            deploy_options(&mut report, version, specs);
            report.checks
        };

        let checks = run(Some(&at("3.4.8")), &specs);
        assert_eq!(checks.len(), 1, "{checks:?}");
        assert_eq!(checks[0].outcome, Outcome::Fail);
        let detail = &checks[0].detail;
        assert!(
            detail.starts_with("spec.enableKernelCrashDump: true needs MAAS 3.6 or newer"),
            "{detail}"
        );
        assert!(detail.contains("this MAAS is 3.4.8"), "{detail}");
        assert!(
            detail.contains(
                "asked by MaasMachineTemplate ns/both, MaasMachineTemplate ns/dump and 1 more"
            ),
            "templates first: {detail}"
        );

        let checks = run(Some(&at("3.1.0")), &specs);
        let failed: Vec<&str> = checks.iter().map(|c| c.detail.as_str()).collect();
        assert_eq!(checks.len(), 2, "{failed:?}");
        assert!(
            failed[0].starts_with("spec.enableHwSync: true needs MAAS 3.2"),
            "{failed:?}"
        );
        assert!(
            failed[0].ends_with("(asked by MaasMachineTemplate ns/both, MaasMachine ns/m-1)"),
            "{failed:?}"
        );

        let checks = run(Some(&at("3.6.0")), &specs);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].outcome, Outcome::Ok, "{checks:?}");

        for version in [None, Some(&at("unknown"))] {
            let checks = run(version, &specs);
            assert_eq!(checks.len(), 1);
            assert_eq!(checks[0].outcome, Outcome::Warn, "{checks:?}");
            assert!(checks[0].detail.starts_with("not checked"), "{checks:?}");
        }
        // Nothing asked, nothing said.
        assert!(run(Some(&at("3.4.8")), &specs[3..]).is_empty());
    }

    #[test]
    fn templates_are_used_by_deployments_and_both_kcp_shapes() {
        let md = serde_json::json!({"metadata": {"namespace": "ns"}, "spec": {"replicas": 3}});
        let r = serde_json::json!({"kind": "MaasMachineTemplate", "name": "t"});
        let u = template_use(&md, Some(&r)).unwrap();
        assert_eq!(
            (u.namespace.as_str(), u.template.as_str(), u.replicas),
            ("ns", "t", 3)
        );
        let other = serde_json::json!({"kind": "DockerMachineTemplate", "name": "t"});
        assert!(template_use(&md, Some(&other)).is_none());
        assert!(template_use(&md, None).is_none());
    }
}
