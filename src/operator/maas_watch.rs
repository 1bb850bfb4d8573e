//! The MAAS watch ([`crate::maas::watch`]) wired to the controllers: what
//! it sees in MAAS becomes work for the MaasMachine reconciler, Events on
//! the MaasMachines, and the orphan report.
//!
//! ```text
//! MaasWatch (one list per interval per MAAS user) ─► Router::on_change
//!   Appeared / Changed / Vanished ─► the MaasMachine of the machine ─► maasmachine queue
//!   Events ─► one Kubernetes Event per MAAS event on that MaasMachine
//! orphan report (every minute) ─► capmaas_orphan_machines{source} + a warning log
//! ```
//!
//! A report concerns only the MaasMachines of the namespaces that read MAAS
//! through the report's source ([`SourceTenants`]): a tenant's endpoint
//! lists whatever it likes, under any system ID or identity, and must not
//! wake or write Events on another tenant's objects.
//!
//! A machine's MaasMachine is found by the identity in its owner data
//! (`capmaas/<namespace>/<name>/<nonce>`, checked against the cached
//! object's annotation, so a recreated object of the same name is not
//! confused with the old one); a machine without one (its owner data not
//! written yet) by the `spec.systemID` that records it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::api::MaasMachine;
use crate::controllers::caches::Caches;
use crate::controllers::identity::{Identity, Recorded};
use crate::controllers::ports::{EventTarget, EventType, Kind, KubeApi, MachineQueue};
use crate::maas::watch::{MachineChange, Orphans, SourceId, WatchHandle};
use crate::maas::{self, IDENTITY_PREFIX};
use crate::metrics;
use crate::operator::credentials::SourceTenants;
use crate::runtime::ObjectKey;

/// How often the orphan report looks at the watch's views.
pub const ORPHAN_CHECK: Duration = Duration::from_secs(60);

/// Turns the watch's reports into reconciles and Events.
pub struct Router {
    pub caches: Caches,
    pub queue: Arc<dyn MachineQueue>,
    /// Where Events go (only [`KubeApi::event`] is used).
    pub kube: Arc<dyn KubeApi>,
    /// Which namespaces each source serves.
    pub tenants: Arc<SourceTenants>,
}

impl Router {
    /// The watch's handler: quick, never blocks (the queue and the event
    /// recorder only take the work).
    pub fn on_change(&self, change: &MachineChange) {
        let source = change.source();
        match change {
            MachineChange::Appeared { machine, .. } => self.reconcile(source, machine),
            MachineChange::Changed { old, new, .. } => {
                self.reconcile(source, new);
                // Released and taken by another MaasMachine between two
                // lists: the one that lost it must hear of it too.
                if old.identity() != new.identity() {
                    self.reconcile(source, old);
                }
            }
            MachineChange::Vanished { last, .. } => self.reconcile(source, last),
            MachineChange::Events {
                machine, events, ..
            } => self.mirror(source, machine, events),
        }
    }

    fn reconcile(&self, source: &SourceId, machine: &maas::Machine) {
        if let Some(mm) = self.maas_machine_of(source, machine) {
            let meta = &mm.metadata;
            self.queue.reconcile_soon(&meta.namespace, &meta.name);
        }
    }

    /// Each MAAS event as a Kubernetes Event on the machine's MaasMachine
    /// (the recorder aggregates repeats such as the second PXE boot).
    fn mirror(&self, source: &SourceId, machine: &maas::Machine, events: &[maas::Event]) {
        let Some(mm) = self.maas_machine_of(source, machine) else {
            return;
        };
        let meta = &mm.metadata;
        let target = EventTarget {
            kind: Kind::MaasMachine,
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
        };
        for event in events {
            let type_ = if event.level.is_problem() {
                EventType::Warning
            } else {
                EventType::Normal
            };
            let message = event.message();
            log::debug!(
                "MaasMachine {}/{}: MAAS {} ({}): {message}",
                meta.namespace,
                meta.name,
                machine.system_id,
                event.level
            );
            self.kube
                .event(&target, type_, &event_reason(&event.kind), &message);
        }
    }

    /// The MaasMachine a MAAS machine of `source` belongs to, as the caches
    /// know it, if its namespace reads MAAS through `source`.
    fn maas_machine_of(
        &self,
        source: &SourceId,
        machine: &maas::Machine,
    ) -> Option<Arc<MaasMachine>> {
        let mm = self.find_maas_machine(machine)?;
        if self.tenants.serves(source, &mm.metadata.namespace) {
            return Some(mm);
        }
        log::debug!(
            "MAAS watch: machine {} of {source} names a MaasMachine of namespace {}, \
             which does not use that MAAS source; ignored",
            machine.system_id,
            mm.metadata.namespace
        );
        None
    }

    /// The MaasMachine a MAAS machine belongs to, as the caches know it.
    fn find_maas_machine(&self, machine: &maas::Machine) -> Option<Arc<MaasMachine>> {
        match machine.identity() {
            Some(identity) => {
                let key = key_of_identity(identity)?;
                let mm = self.caches.maas_machines.get(&key)?;
                match Identity::recorded(&mm.metadata) {
                    Recorded::Valid(own) if own.as_str() == identity => Some(mm),
                    _ => None,
                }
            }
            None => self
                .caches
                .maas_machines
                .find(|mm| mm.system_id() == Some(machine.system_id.as_str()))
                .into_iter()
                .next(),
        }
    }
}

/// `capmaas/<namespace>/<name>/<nonce>` → the object's key.
fn key_of_identity(identity: &str) -> Option<ObjectKey> {
    let mut parts = identity.strip_prefix(IDENTITY_PREFIX)?.splitn(3, '/');
    let (namespace, name) = (parts.next()?, parts.next()?);
    parts.next()?;
    ObjectKey::from_parts(namespace, name)
}

/// A MAAS event type as an Event reason: `Performing PXE boot` →
/// `MAASPerformingPXEBoot` (UpperCamelCase, as Kubernetes reasons are).
pub fn event_reason(maas_type: &str) -> String {
    let mut reason = String::from("MAAS");
    for word in maas_type.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            reason.push(first.to_ascii_uppercase());
            reason.extend(chars);
        }
    }
    if reason.len() == "MAAS".len() {
        reason.push_str("Event");
    }
    reason.truncate(128);
    reason
}

/// Starts the orphan report: every [`ORPHAN_CHECK`] until `stop` fires
/// (or disconnects).
pub fn spawn_orphan_report(
    watch: WatchHandle,
    caches: Caches,
    stop: Receiver<()>,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("maas-orphans".into())
        .spawn(move || {
            let mut report = OrphanReport::default();
            loop {
                crossbeam_channel::select! {
                    recv(stop) -> _ => return,
                    default(ORPHAN_CHECK) => report.check(&watch, &caches),
                }
            }
        })
}

/// Machines MAAS lists under a capmaas identity that no MaasMachine claims
/// (a crash, a deleted namespace, a hand edit), and machines of our MAAS
/// users with no identity that no MaasMachine records. Reported, never
/// released: `capmaas doctor --release-orphans` shows them and, with
/// `--apply`, releases them; that is a person's decision.
#[derive(Default)]
pub struct OrphanReport {
    /// Per source: the unclaimed machines of the previous check. A machine
    /// is reported once two checks in a row found it unclaimed (a grace
    /// period for the caches to catch up with a new allocation).
    suspects: BTreeMap<SourceId, BTreeSet<String>>,
    /// What the last warning named, so it is logged again only on change.
    warned: BTreeMap<SourceId, BTreeSet<String>>,
}

impl OrphanReport {
    /// One look at every source the watch lists freshly (a stale view may
    /// still show machines released since).
    pub fn check(&mut self, watch: &WatchHandle, caches: &Caches) {
        let objects = caches.maas_machines.list();
        let claimed: HashSet<String> = objects
            .iter()
            .filter_map(|mm| match Identity::recorded(&mm.metadata) {
                Recorded::Valid(identity) => Some(identity.as_str().to_string()),
                _ => None,
            })
            .collect();
        let recorded: HashSet<&str> = objects.iter().filter_map(|mm| mm.system_id()).collect();
        let found = watch
            .sources()
            .into_iter()
            .filter(|source| watch.is_fresh(source))
            .map(|source| {
                let orphans = watch.orphans(&source, |identity| claimed.contains(identity));
                (source, orphans)
            })
            .collect();
        self.report(found, &recorded);
    }

    /// Publishes what [`OrphanReport::check`] found: per source, the
    /// machines found unclaimed twice in a row, and the unmarked machines
    /// no MaasMachine records (`recorded` system ids). Returns the orphans
    /// reported, by source.
    pub fn report(
        &mut self,
        found: Vec<(SourceId, Orphans)>,
        recorded: &HashSet<&str>,
    ) -> BTreeMap<SourceId, BTreeSet<String>> {
        let mut unclaimed_gauge = Vec::new();
        let mut unmarked_gauge = Vec::new();
        let mut suspects = BTreeMap::new();
        let mut reported = BTreeMap::new();
        for (source, found) in found {
            let before = self.suspects.get(&source).cloned().unwrap_or_default();
            let orphans: Vec<&Arc<maas::Machine>> = found
                .unclaimed
                .iter()
                .filter(|m| before.contains(&m.system_id))
                .collect();
            let unmarked = found
                .unmarked
                .iter()
                .filter(|m| !recorded.contains(m.system_id.as_str()))
                .count();
            let label = source.to_string();
            unclaimed_gauge.push((label.clone(), orphans.len() as f64));
            unmarked_gauge.push((label, unmarked as f64));
            self.warn(&source, &orphans);
            reported.insert(
                source.clone(),
                orphans.iter().map(|m| m.system_id.clone()).collect(),
            );
            let now = found
                .unclaimed
                .iter()
                .map(|m| m.system_id.clone())
                .collect();
            suspects.insert(source, now);
        }
        self.suspects = suspects;
        metrics::gauge_replace_all(
            "capmaas_orphan_machines",
            "MAAS machines under a capmaas identity that no MaasMachine claims (never released automatically).",
            &by_source(&unclaimed_gauge),
        );
        metrics::gauge_replace_all(
            "capmaas_unmarked_machines",
            "MAAS machines of capmaas's MAAS users with no capmaas identity that no MaasMachine records.",
            &by_source(&unmarked_gauge),
        );
        reported
    }

    /// A warning naming the orphans whenever they differ from the last one.
    fn warn(&mut self, source: &SourceId, orphans: &[&Arc<maas::Machine>]) {
        let ids: BTreeSet<String> = orphans.iter().map(|m| m.system_id.clone()).collect();
        let before = self.warned.get(source).cloned().unwrap_or_default();
        if before == ids {
            return;
        }
        if orphans.is_empty() {
            log::info!("MAAS machines of {source}: no orphans any more");
        } else {
            let listed: Vec<String> = orphans
                .iter()
                .map(|m| {
                    format!(
                        "{} ({}, {}, {})",
                        m.system_id,
                        m.hostname,
                        m.status_name,
                        m.identity().unwrap_or_default()
                    )
                })
                .collect();
            log::warn!(
                "{} MAAS machine(s) of {source} carry a capmaas identity that no MaasMachine \
                 claims: {}; left alone (`capmaas doctor --release-orphans` shows them, with \
                 `--apply` releases them)",
                orphans.len(),
                listed.join(", ")
            );
        }
        self.warned.insert(source.clone(), ids);
    }
}

/// Gauge series labelled by source.
fn by_source(values: &[(String, f64)]) -> Vec<(Vec<(&str, &str)>, f64)> {
    values
        .iter()
        .map(|(source, n)| (vec![("source", source.as_str())], *n))
        .collect()
}

#[cfg(test)]
mod tests;
