//! One cluster's MAAS as the reconcilers see it: the real calls, plus what
//! can be answered without asking MAAS again.
//!
//! [`MaasView`] holds one cluster's MAAS client as a [`MaasApi`] (the one
//! dynamic call between a reconciler and `maas::Client`, or the unit
//! tests' fake) and is what a reconcile gets. Its own methods are the calls
//! it answers or must learn of; everything else goes to the client as it is
//! ([`MaasView::client`]), and a write to a machine through
//! [`MaasView::write`]:
//!
//! - **Machines** from the MAAS watch's view ([`MaasView::watched`]): the
//!   last list of the MAAS user's machines, kept current with every answer
//!   MAAS gives this process about a machine (reads and writes are recorded
//!   into the view). A view entry older than this process's last write to
//!   that machine is not used: the write's effect is unknown there (a lost
//!   answer, or a write such as power-on whose answer does not show it), so
//!   the reconcile reads MAAS instead. That keeps a stale view from causing
//!   a second deploy or power-on.
//! - **Boot resources** from a shared cache of [`BOOT_RESOURCES_TTL`]: one
//!   read per minute for all machines, instead of one per machine (workers
//!   asking at the same moment share that read).
//! - **The MAAS version** from a cache of [`VERSION_TTL`]: asked for
//!   deploy options newer MAAS releases have and for the op that writes a
//!   machine's identity; an upgrade is rare.
//! - **DNS records** ([`MaasView::recent_dns_resources`]) as this process
//!   last read or wrote them, for [`DNS_TTL`]: the MaasCluster reconciler
//!   reads the record once per [`DNS_TTL`] however often it runs, writes
//!   it, and its control-plane machines, woken right after, check their
//!   `DNSAttached` against that instead of one GET each. Every DNS write of
//!   the process goes through here, so the cache never shows an address as
//!   detached while this process attached it.
//!
//! - **The allocation lookup** (`machines_by_agent_name`) for an identity
//!   this process chose itself ([`MaasView::chose_identity`]) and has sent
//!   no allocate with yet: nothing can be allocated under it, so the answer
//!   is known to be empty. The identity leaves that set when an allocate
//!   with it is sent, whatever the outcome (an answer may be lost), and
//!   comes back only when MAAS refused that allocate (409 no machine
//!   matches, 400 bad constraints: nothing was allocated; the client
//!   retries an allocate only when MAAS surely did nothing). The set lives
//!   in memory: after a restart every identity is looked up again.
//!
//! Answers that failed are not cached. The caches live as long as the
//! client they wrap (`operator::credentials` keeps one per Secret
//! version, and one controller-wide).

use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::ports::{Clock, SystemClock};
use crate::maas::watch::{Lookup, SourceId, WatchHandle};
use crate::maas::{self, AllocateRequest, BootResource, DnsResource, MaasApi};

/// How long the boot resources read once serve every machine.
pub const BOOT_RESOURCES_TTL: Duration = Duration::from_secs(60);
/// How long the MAAS version read once serves every machine.
pub const VERSION_TTL: Duration = Duration::from_secs(300);
/// How long a DNS record read or written serves the machines' checks.
pub const DNS_TTL: Duration = Duration::from_secs(30);
/// Identities remembered as unallocated at most; beyond that the set is
/// emptied (forgetting costs only a lookup).
const MAX_NEW_IDENTITIES: usize = 10_000;
/// Write marks older than this are forgotten: by then every view entry
/// that could be read is newer (a view is fresh for at most two intervals,
/// and `--maas-watch-interval` is at most an hour).
const WRITE_MARKS_KEPT: Duration = Duration::from_secs(2 * 3600);

/// The MAAS watch, seen from one cluster's MAAS: one source's view.
pub trait WatchView: Send + Sync {
    fn lookup(&self, system_id: &str) -> Lookup;
    /// MAAS's answer about a machine, newer than any list.
    fn record(&self, machine: &maas::Machine);
    /// Whether the source was listed lately (see `WatchHandle::is_fresh`).
    fn is_fresh(&self) -> bool;
}

impl<T: WatchView + ?Sized> WatchView for Arc<T> {
    fn lookup(&self, system_id: &str) -> Lookup {
        (**self).lookup(system_id)
    }

    fn record(&self, machine: &maas::Machine) {
        (**self).record(machine)
    }

    fn is_fresh(&self) -> bool {
        (**self).is_fresh()
    }
}

/// The real [`WatchView`]: a source of the running watch.
pub struct SourceView {
    pub handle: WatchHandle,
    pub source: SourceId,
}

impl WatchView for SourceView {
    fn lookup(&self, system_id: &str) -> Lookup {
        self.handle.lookup(&self.source, system_id)
    }

    fn record(&self, machine: &maas::Machine) {
        self.handle.record(&self.source, machine.clone());
    }

    fn is_fresh(&self) -> bool {
        self.handle.is_fresh(&self.source)
    }
}

/// See the module docs.
pub struct MaasView {
    api: Arc<dyn MaasApi>,
    /// Set once the MAAS user is known (and a watch runs).
    view: OnceLock<Box<dyn WatchView>>,
    boot_resources: Mutex<Option<(u64, Vec<BootResource>)>>,
    /// Held while the boot resources are read: workers that need them at
    /// the same moment wait for that one read instead of each sending one.
    boot_resources_read: Mutex<()>,
    version: Mutex<Option<(u64, maas::VersionInfo)>>,
    /// By FQDN: the records as last read or written, and when.
    dns: Mutex<HashMap<String, (u64, Vec<DnsResource>)>>,
    /// By system_id: when this process last started a write to it.
    writes: Mutex<HashMap<String, Instant>>,
    /// Identities chosen by this process and not yet sent with an allocate.
    new_identities: Mutex<HashSet<String>>,
    /// The time the caches above are kept by (the unit tests' is fixed).
    clock: Arc<dyn Clock>,
}

impl MaasView {
    pub fn new(api: Arc<dyn MaasApi>) -> MaasView {
        MaasView::with_clock(api, Arc::new(SystemClock))
    }

    pub fn with_clock(api: Arc<dyn MaasApi>, clock: Arc<dyn Clock>) -> MaasView {
        MaasView {
            clock,
            api,
            view: OnceLock::new(),
            boot_resources: Mutex::new(None),
            boot_resources_read: Mutex::new(()),
            version: Mutex::new(None),
            dns: Mutex::new(HashMap::new()),
            writes: Mutex::new(HashMap::new()),
            new_identities: Mutex::new(HashSet::new()),
        }
    }

    /// Reads machines from `view` from now on; a view attached before is
    /// kept (the source of a client never changes).
    pub fn attach(&self, view: Box<dyn WatchView>) {
        let _ = self.view.set(view);
    }

    pub fn is_attached(&self) -> bool {
        self.view.get().is_some()
    }

    /// Whether something cached at `at` (seconds) is younger than `ttl`
    /// (and not from the future: a clock set back empties the caches).
    fn fresh(&self, at: u64, ttl: Duration) -> bool {
        let now = self.clock.now();
        at <= now && now - at < ttl.as_secs()
    }

    /// Notes a write to a machine before it is sent: view entries older
    /// than it no longer stand in for a read.
    fn mark_write(&self, system_id: &str) {
        let mut writes = lock(&self.writes);
        writes.retain(|_, at| at.elapsed() < WRITE_MARKS_KEPT);
        writes.insert(system_id.to_string(), Instant::now());
    }

    /// Puts a machine MAAS answered with into the view.
    fn recorded(
        &self,
        answer: Result<maas::Machine, maas::Error>,
    ) -> Result<maas::Machine, maas::Error> {
        let machine = answer?;
        if let Some(view) = self.view.get() {
            view.record(&machine);
        }
        Ok(machine)
    }

    fn recent_boot_resources(&self) -> Option<Vec<BootResource>> {
        let cached = lock(&self.boot_resources);
        let (at, resources) = cached.as_ref()?;
        self.fresh(*at, BOOT_RESOURCES_TTL)
            .then(|| resources.clone())
    }

    fn remember_dns(&self, fqdn: &str, records: Vec<DnsResource>) {
        let mut dns = lock(&self.dns);
        dns.retain(|_, (at, _)| self.fresh(*at, DNS_TTL));
        dns.insert(fqdn.to_string(), (self.clock.now(), records));
    }

    /// After a DNS write: `change` applied to every remembered record with
    /// this id on success; on failure (outcome unknown) those entries are
    /// forgotten, so the next check reads MAAS.
    fn dns_written(&self, id: i64, ok: bool, change: impl Fn(&mut Vec<DnsResource>)) {
        let mut dns = lock(&self.dns);
        if !ok {
            dns.retain(|_, (_, records)| !records.iter().any(|r| r.id == id));
            return;
        }
        for (_, records) in dns.values_mut() {
            if records.iter().any(|r| r.id == id) {
                change(records);
            }
        }
    }
}

/// What a machine write may answer: a machine (put into the view), or
/// nothing to learn from.
pub trait WriteAnswer {
    fn machine(&self) -> Option<&maas::Machine>;
}

impl WriteAnswer for () {
    fn machine(&self) -> Option<&maas::Machine> {
        None
    }
}

impl WriteAnswer for maas::Machine {
    fn machine(&self) -> Option<&maas::Machine> {
        Some(self)
    }
}

/// The calls the view answers or must learn of are its own methods; the
/// rest go to the client as they are ([`MaasView::client`],
/// [`MaasView::write`]).
impl MaasView {
    /// The client, for what the view neither answers nor must learn of:
    /// zones, subnets, IP reservations. A write to a machine goes through
    /// [`MaasView::write`], a DNS write through its method here.
    pub fn client(&self) -> &dyn MaasApi {
        &*self.api
    }

    /// A write to machine `system_id`: noted before it is sent (view
    /// entries older than it no longer stand in for a read), and a machine
    /// MAAS answers with is put into the view.
    pub fn write<T: WriteAnswer>(
        &self,
        system_id: &str,
        call: impl FnOnce(&dyn MaasApi) -> Result<T, maas::Error>,
    ) -> Result<T, maas::Error> {
        self.mark_write(system_id);
        let answer = call(&*self.api)?;
        if let (Some(machine), Some(view)) = (answer.machine(), self.view.get()) {
            view.record(machine);
        }
        Ok(answer)
    }

    /// The machine as MAAS has it now (a read, put into the view).
    pub fn machine(&self, system_id: &str) -> Result<maas::Machine, maas::Error> {
        self.recorded(self.api.machine(system_id))
    }

    /// Machines whose `agent_name` is exactly this (release clears it).
    pub fn machines_by_agent_name(
        &self,
        agent_name: &str,
    ) -> Result<Vec<maas::Machine>, maas::Error> {
        if lock(&self.new_identities).contains(agent_name) {
            return Ok(Vec::new());
        }
        self.api
            .machines(&maas::MachineFilter::by_agent_name(agent_name))
    }

    pub fn allocate(&self, req: &AllocateRequest) -> Result<maas::Machine, maas::Error> {
        let agent_name = req.agent_name.as_deref().unwrap_or_default();
        let was_new = lock(&self.new_identities).remove(agent_name);
        let answer = self.api.allocate(req);
        if let Err(e) = &answer {
            if was_new && (e.is_conflict() || e.is_bad_request()) {
                lock(&self.new_identities).insert(agent_name.to_string());
            }
        }
        self.recorded(answer)
    }

    pub fn boot_resources(&self) -> Result<Vec<BootResource>, maas::Error> {
        if let Some(resources) = self.recent_boot_resources() {
            return Ok(resources);
        }
        let _one_read = lock(&self.boot_resources_read);
        if let Some(resources) = self.recent_boot_resources() {
            return Ok(resources);
        }
        let resources = self.api.boot_resources()?;
        *lock(&self.boot_resources) = Some((self.clock.now(), resources.clone()));
        Ok(resources)
    }

    /// `GET version/`: which MAAS release answers.
    pub fn version(&self) -> Result<maas::VersionInfo, maas::Error> {
        if let Some((at, info)) = lock(&self.version).as_ref() {
            if self.fresh(*at, VERSION_TTL) {
                return Ok(info.clone());
            }
        }
        let info = self.api.version()?;
        *lock(&self.version) = Some((self.clock.now(), info.clone()));
        Ok(info)
    }

    pub fn dns_resources(&self, fqdn: &str) -> Result<Vec<DnsResource>, maas::Error> {
        let records = self.api.dns_resources(fqdn)?;
        self.remember_dns(fqdn, records.clone());
        Ok(records)
    }

    pub fn create_dns_resource(
        &self,
        fqdn: &str,
        ttl: u32,
        ips: &[String],
    ) -> Result<DnsResource, maas::Error> {
        match self.api.create_dns_resource(fqdn, ttl, ips) {
            Ok(record) => {
                self.remember_dns(fqdn, vec![record.clone()]);
                Ok(record)
            }
            Err(e) => {
                lock(&self.dns).remove(fqdn);
                Err(e)
            }
        }
    }

    /// A TXT record on the name (see `maas::Client::create_dns_txt`). It is
    /// part of the record MAAS lists: added to the remembered one, or
    /// (outcome unknown) the name is read again.
    pub fn create_dns_txt(&self, fqdn: &str, rrdata: &str) -> Result<(), maas::Error> {
        let result = self.api.create_dns_txt(fqdn, rrdata);
        let mut dns = lock(&self.dns);
        match (&result, dns.get_mut(fqdn)) {
            (Ok(()), Some((_, records))) if records.len() == 1 => {
                for record in records.iter_mut() {
                    record.resource_records.push(maas::DnsRecordData {
                        rrtype: "TXT".into(),
                        rrdata: rrdata.into(),
                        ..Default::default()
                    });
                }
            }
            _ => {
                dns.remove(fqdn);
            }
        }
        result
    }

    pub fn set_dns_resource_ips(&self, id: i64, ips: &[String]) -> Result<(), maas::Error> {
        let result = self.api.set_dns_resource_ips(id, ips).map(drop);
        self.dns_written(id, result.is_ok(), |records| {
            for record in records.iter_mut().filter(|r| r.id == id) {
                record.ip_addresses = ips.to_vec();
            }
        });
        result
    }

    pub fn delete_dns_resource(&self, id: i64) -> Result<(), maas::Error> {
        let result = self.api.delete_dns_resource(id);
        self.dns_written(id, result.is_ok(), |records| records.retain(|r| r.id != id));
        result
    }

    /// This process has just chosen and persisted `identity`: nothing can
    /// be allocated under it before this process sends an allocate with it,
    /// so until then [`MaasView::machines_by_agent_name`] need not ask MAAS.
    pub fn chose_identity(&self, identity: &str) {
        let mut identities = lock(&self.new_identities);
        if identities.len() >= MAX_NEW_IDENTITIES {
            identities.clear();
        }
        identities.insert(identity.to_string());
    }

    /// What the MAAS watch's view says about a machine: `Owned` stands in
    /// for [`MaasView::machine`]; `NotOwned` and `Unknown` mean "read MAAS
    /// before acting". Without a watch: `Unknown`.
    pub fn watched(&self, system_id: &str) -> Lookup {
        let Some(view) = self.view.get() else {
            return Lookup::Unknown;
        };
        let lookup = view.lookup(system_id);
        let written = lock(&self.writes).get(system_id).copied();
        match (lookup, written) {
            (Lookup::Owned(listed), Some(at)) if listed.observed_at <= at => Lookup::Unknown,
            (lookup, _) => lookup,
        }
    }

    /// Whether the MAAS watch lists this MAAS now: a change of one of its
    /// machines then wakes the machine's MaasMachine, so nobody polls.
    pub fn is_watched(&self) -> bool {
        self.view.get().is_some_and(|view| view.is_fresh())
    }

    /// The DNS records named `fqdn` as this process last read or wrote
    /// them, when that was recent; otherwise read from MAAS.
    pub fn recent_dns_resources(&self, fqdn: &str) -> Result<Vec<DnsResource>, maas::Error> {
        if let Some((at, records)) = lock(&self.dns).get(fqdn) {
            if self.fresh(*at, DNS_TTL) {
                return Ok(records.clone());
            }
        }
        self.dns_resources(fqdn)
    }
}

#[cfg(test)]
mod tests;
