//! The simulated MAAS region: machines, DNS, inventory, and the rules that
//! change them (machine lifecycle in [`machines`], DNS resources in [`dns`]). Handlers in `api` translate HTTP to calls here; everything
//! here runs under one mutex, so each request is atomic like a MAAS
//! transaction (a failed call changes nothing).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::inventory::{Inventory, MachineEntry, Settings, SubnetEntry};
use crate::status::Status;

mod addresses;
mod dns;
pub mod events;
mod machines;
pub mod network;
pub mod vmhosts;

pub use events::{Event, EventType, StatusEvent};
use machines::DEFAULT_CURTIN_FAILURE;
pub use network::{Interface, Reservation, SubnetRec};

/// A MAAS user behind an API key.
#[derive(Debug, Clone)]
pub struct User {
    pub username: String,
    pub is_superuser: bool,
    /// Pools this user may view and deploy from (RBAC); None = all.
    pub pools: Option<Vec<String>>,
    /// MAAS 3.8+: pools where it holds `can_deploy_machines`; None = all.
    pub deploy_pools: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct Credential {
    pub consumer_key: String,
    pub token_key: String,
    pub token_secret: String,
    pub user: User,
}

#[derive(Debug, Clone)]
pub struct Named {
    pub id: i64,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone)]
pub struct DomainRec {
    pub id: i64,
    pub name: String,
    pub ttl: Option<u32>,
    pub authoritative: bool,
    pub is_default: bool,
}

#[derive(Debug, Clone)]
pub struct BootResourceRec {
    pub id: i64,
    pub kind: String,
    pub name: String,
    pub architecture: String,
    pub title: Option<String>,
    pub base_image: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DnsRec {
    pub id: i64,
    pub name: String,
    pub domain_id: i64,
    pub address_ttl: Option<u32>,
    pub ips: Vec<String>,
    /// Its other records (MAAS's DNSData), e.g. TXT.
    pub data: Vec<DnsData>,
}

#[derive(Debug, Clone)]
pub struct DnsData {
    pub id: i64,
    pub rrtype: String,
    pub rrdata: String,
}

/// Something due later in a machine's life. Time moves lazily: `advance`
/// does what fell due when the next request looks, with the time it was
/// due (events carry that time).
#[derive(Debug, Clone)]
pub struct Scheduled {
    pub at: Instant,
    pub step: Step,
}

#[derive(Debug, Clone)]
pub enum Step {
    /// Record an event: type, description, action.
    Event(EventType, &'static str, &'static str),
    /// The BMC confirms the power-on a deployment asked for (`Node
    /// powered on`): only now does the machine report `on`, as real MAAS
    /// learns it from the rack's power query after its deploy answer.
    PoweredOn,
    /// The deployment ends: Deployed, or Failed deployment if asked for.
    DeployDone,
    /// The power-off of a release is confirmed: the release finishes.
    ReleaseDone,
    /// The disk erasure ends: MAAS then releases the machine.
    EraseDone,
    /// A composed VM's commissioning ends: Ready, powered off.
    CommissionDone,
}

#[derive(Debug, Clone)]
pub struct Machine {
    /// Creation order; MAAS lists by internal id.
    pub seq: u64,
    pub system_id: String,
    pub hostname: String,
    pub domain_id: i64,
    pub cpu_count: u32,
    pub memory: u64,
    pub disks_gb: Vec<u64>,
    pub zone: String,
    pub pool: String,
    pub tags: Vec<String>,
    pub architecture: String,
    /// Boot interface first.
    pub interfaces: Vec<Interface>,
    /// The link chosen as IPv4 default gateway (`link_subnet
    /// default_gateway=true`).
    pub gateway_link_ipv4: Option<i64>,
    pub power_type: String,
    pub description: String,

    pub status: Status,
    /// The status before the last change (`Node.previous_status`).
    pub previous_status: Status,
    /// Latest INFO-or-above event: `status_message`, `status_action`.
    pub status_event: StatusEvent,
    pub error_description: String,
    pub power_state: String,
    pub owner: Option<String>,
    pub owner_data: BTreeMap<String, String>,
    pub agent_name: String,
    pub osystem: String,
    pub distro_series: String,
    pub hwe_kernel: Option<String>,
    pub ephemeral_deploy: bool,
    /// Deploy's `enable_hw_sync` (MAAS 3.2+); release clears it.
    pub enable_hw_sync: bool,
    /// Deploy's `enable_kernel_crash_dump` (MAAS 3.6+).
    pub enable_kernel_crash_dump: bool,
    pub swap_size: Option<i64>,
    pub locked: bool,
    pub user_data: Option<String>,
    pub comments: Vec<String>,
    /// What happens next on its own (deployment, release, erasure steps).
    pub timeline: VecDeque<Scheduled>,
    /// Set by the test control: the next (or current) deployment fails,
    /// with this curtin message.
    pub fail_reason: Option<String>,
    /// The last release asked for (who, erase flags, comment), for tests.
    pub last_release: Option<Value>,
    pub hardware_uuid: String,
    /// The VM host (id, name) of a composed VM.
    pub pod: Option<(i64, String)>,
    /// The members of its JSON that never change, rendered once.
    pub static_json: String,
}

impl Machine {
    /// Its links' addresses, boot interface first
    /// (`Node.static_ip_addresses`).
    pub fn ip_addresses(&self) -> Vec<String> {
        self.interfaces
            .iter()
            .flat_map(|i| &i.links)
            .filter_map(|l| l.ip.clone())
            .collect()
    }

    /// Whether one of its interfaces has this MAC (any case).
    pub fn has_mac(&self, mac: &str) -> bool {
        self.interfaces
            .iter()
            .any(|i| i.mac_address.eq_ignore_ascii_case(mac))
    }
}

/// What a fault rule does to a matching request.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Fault {
    /// Match: HTTP method (any when absent).
    pub method: Option<String>,
    /// Match: endpoint pattern such as `machines/` or `machines/{id}/`
    /// (any when absent).
    pub endpoint: Option<String>,
    /// Match: the `op` parameter (any when absent).
    pub op: Option<String>,
    /// Answer with this status (e.g. 503) instead of handling the request.
    pub status: Option<u16>,
    /// Body of that answer (a MAAS-like default when absent).
    pub body: Option<String>,
    /// `Retry-After` seconds to send with the status.
    pub retry_after: Option<u64>,
    /// Sleep this long before handling.
    pub latency_ms: u64,
    /// Close the connection without answering, before handling.
    pub drop: bool,
    /// Handle the request (state changes!), then close without answering:
    /// the client sees a broken connection for a call that worked.
    pub drop_after: bool,
    /// Probability in 0..=1 that a matching request is affected (default 1).
    pub rate: f64,
    /// Affect only this many matching requests, then expire.
    pub times: Option<u32>,
}

impl Default for Fault {
    fn default() -> Self {
        Fault {
            method: None,
            endpoint: None,
            op: None,
            status: None,
            body: None,
            retry_after: None,
            latency_ms: 0,
            drop: false,
            drop_after: false,
            rate: 1.0,
            times: None,
        }
    }
}

pub struct World {
    pub settings: Settings,
    pub credentials: Vec<Credential>,
    pub domains: Vec<DomainRec>,
    pub zones: Vec<Named>,
    pub pools: Vec<Named>,
    pub tags: Vec<String>,
    pub subnets: Vec<SubnetRec>,
    /// Addresses reserved through `ipaddresses/?op=reserve`.
    pub reservations: Vec<Reservation>,
    next_link_id: i64,
    pub boot_resources: Vec<BootResourceRec>,
    pub machines: Vec<Machine>,
    pub vm_hosts: Vec<vmhosts::VmHostRec>,
    pub dns: Vec<DnsRec>,
    next_dns_id: i64,
    next_dns_data_id: i64,
    next_seq: u64,
    /// (token key, nonce) → timestamp, for replay detection.
    pub nonces: HashMap<(String, String), u64>,
    pub faults: Vec<Fault>,
    /// Endpoint key → count.
    pub calls: BTreeMap<String, u64>,
    /// TCP connections accepted (clients should reuse theirs).
    pub connections: u64,
    /// The event log, oldest first (ids increase).
    pub events: Vec<Event>,
    next_event_id: u64,
    /// An instant and the wall-clock time it stands for.
    clock: (Instant, SystemTime),
}

/// A MAAS-style failure: status and body.
#[derive(Debug)]
pub enum Failure {
    Text(u16, String),
    Fields(u16, Value),
}

pub type Outcome<T> = Result<T, Failure>;

pub(crate) fn fail<T>(status: u16, text: impl Into<String>) -> Outcome<T> {
    Err(Failure::Text(status, text.into()))
}

pub(crate) fn field_error<T>(field: &str, message: impl Into<String>) -> Outcome<T> {
    Err(Failure::Fields(400, json!({ field: [message.into()] })))
}

const ZNUMS: &[u8] = b"34678abcdefghkmnpqrstwxy";

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A stable 6-character system_id from a seed, in MAAS's alphabet.
fn system_id_for(seed: &str, salt: u64) -> String {
    let mut h: u64 = 0xcbf29ce484222325 ^ salt;
    for b in seed.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    (0..6)
        .map(|i| ZNUMS[((h >> (i * 8)) % ZNUMS.len() as u64) as usize] as char)
        .collect()
}

impl World {
    pub fn new(inventory: Inventory) -> Result<World, String> {
        let mut world = World {
            settings: inventory.settings.clone(),
            credentials: Vec::new(),
            domains: vec![DomainRec {
                id: 0,
                name: "maas".into(),
                ttl: None,
                authoritative: true,
                is_default: true,
            }],
            zones: vec![Named {
                id: 1,
                name: "default".into(),
                description: String::new(),
            }],
            pools: vec![Named {
                id: 0,
                name: "default".into(),
                description: "Default pool".into(),
            }],
            tags: Vec::new(),
            subnets: Vec::new(),
            reservations: Vec::new(),
            next_link_id: 0,
            boot_resources: Vec::new(),
            machines: Vec::new(),
            vm_hosts: Vec::new(),
            dns: Vec::new(),
            next_dns_id: 1,
            next_dns_data_id: 0,
            next_seq: 1,
            nonces: HashMap::new(),
            faults: Vec::new(),
            calls: BTreeMap::new(),
            connections: 0,
            events: Vec::new(),
            next_event_id: 0,
            clock: (Instant::now(), SystemTime::now()),
        };
        for entry in &inventory.api_keys {
            let parts: Vec<&str> = entry.key.split(':').collect();
            let [ck, tk, ts] = parts[..] else {
                return Err(format!(
                    "inventory api key for {} is not consumer:token:secret",
                    entry.username
                ));
            };
            world.credentials.push(Credential {
                consumer_key: ck.into(),
                token_key: tk.into(),
                token_secret: ts.into(),
                user: User {
                    username: entry.username.clone(),
                    is_superuser: entry.is_superuser,
                    pools: entry.pools.clone(),
                    deploy_pools: entry.deploy_pools.clone(),
                },
            });
        }
        for d in &inventory.domains {
            if world.domains.iter().any(|x| x.name == d.name) {
                continue;
            }
            let id = world.domains.len() as i64;
            world.domains.push(DomainRec {
                id,
                name: d.name.clone(),
                ttl: d.ttl,
                authoritative: d.authoritative,
                is_default: false,
            });
        }
        for z in &inventory.zones {
            if !world.zones.iter().any(|x| x.name == z.name) {
                let id = world.zones.len() as i64 + 1;
                world.zones.push(Named {
                    id,
                    name: z.name.clone(),
                    description: z.description.clone(),
                });
            }
        }
        for p in &inventory.pools {
            if !world.pools.iter().any(|x| x.name == p.name) {
                let id = world.pools.len() as i64;
                world.pools.push(Named {
                    id,
                    name: p.name.clone(),
                    description: p.description.clone(),
                });
            }
        }
        for c in &world.credentials {
            if c.user.deploy_pools.is_some() && !world.settings.release_at_least(3, 8) {
                return Err(format!(
                    "inventory api key for {}: deploy_pools are MAAS 3.8 entitlements, but \
                     maas_version is {:?}",
                    c.user.username, world.settings.maas_version
                ));
            }
            for pool in c.user.pools.iter().chain(&c.user.deploy_pools).flatten() {
                if !world.pools.iter().any(|p| &p.name == pool) {
                    return Err(format!(
                        "inventory api key for {}: unknown pool {pool}",
                        c.user.username
                    ));
                }
            }
        }
        world.tags = inventory.tags.clone();
        let subnets: Vec<SubnetEntry> = inventory
            .subnet
            .iter()
            .chain(&inventory.subnets)
            .cloned()
            .collect();
        world.load_subnets(&subnets)?;
        for (i, b) in inventory.boot_resources.iter().enumerate() {
            world.boot_resources.push(BootResourceRec {
                id: i as i64 + 1,
                kind: b.kind.clone(),
                name: b.name.clone(),
                architecture: b.architecture.clone(),
                title: b.title.clone(),
                base_image: b.base_image.clone(),
            });
        }
        for m in &inventory.machines {
            world.add_machine(m)?;
        }
        for h in &inventory.vm_hosts {
            world.add_vm_host(h)?;
        }
        for d in &inventory.dns_resources {
            let (name, domain_id) = world
                .split_fqdn(&d.fqdn)
                .ok_or_else(|| format!("inventory DNS resource {}: unknown domain", d.fqdn))?;
            let id = world.next_dns_id;
            world.next_dns_id += 1;
            world.dns.push(DnsRec {
                id,
                name,
                domain_id,
                address_ttl: d.address_ttl,
                ips: d.ip_addresses.clone(),
                data: Vec::new(),
            });
        }
        Ok(world)
    }

    /// Test safety: a machine may be given only a loopback address, unless
    /// the inventory says its machines live in a network namespace the test
    /// made. capmaas connects to machine addresses (the join probe), and a
    /// test must never send traffic elsewhere.
    pub(crate) fn check_test_address(&self, hostname: &str, ip: &str) -> Result<(), String> {
        if self.settings.machines_in_network_namespace {
            return Ok(());
        }
        match ip.parse::<std::net::IpAddr>() {
            Ok(addr) if addr.is_loopback() => Ok(()),
            _ => Err(format!(
                "test safety: machine {hostname} would get the address {ip}, which is not a \
                 loopback address; give test machines 127.0.0.0/8 addresses, or set \
                 settings.machines_in_network_namespace in an inventory whose machines live \
                 in a network namespace the test made"
            )),
        }
    }

    /// Adds a machine from an inventory entry; returns its system_id.
    pub fn add_machine(&mut self, m: &MachineEntry) -> Result<String, String> {
        if m.hostname.is_empty() {
            return Err("machine needs a hostname".into());
        }
        let domain_id = match &m.domain {
            Some(name) => self
                .domains
                .iter()
                .find(|d| &d.name == name)
                .map(|d| d.id)
                .ok_or_else(|| format!("machine {}: unknown domain {name}", m.hostname))?,
            None => 0,
        };
        let zone = m.zone.clone().unwrap_or_else(|| "default".into());
        if !self.zones.iter().any(|z| z.name == zone) {
            return Err(format!("machine {}: unknown zone {zone}", m.hostname));
        }
        let pool = m.pool.clone().unwrap_or_else(|| "default".into());
        if !self.pools.iter().any(|p| p.name == pool) {
            return Err(format!("machine {}: unknown pool {pool}", m.hostname));
        }
        let system_id = match &m.system_id {
            Some(id) => id.clone(),
            None => {
                let mut salt = 0;
                loop {
                    let id = system_id_for(&m.hostname, salt);
                    if !self.machines.iter().any(|x| x.system_id == id) {
                        break id;
                    }
                    salt += 1;
                }
            }
        };
        if self.machines.iter().any(|x| x.system_id == system_id) {
            return Err(format!("duplicate system_id {system_id}"));
        }
        let status = match &m.status {
            Some(name) => {
                Status::from_name(name).ok_or_else(|| format!("unknown status {name}"))?
            }
            None => Status::Ready,
        };
        for tag in &m.tags {
            if !self.tags.contains(tag) {
                self.tags.push(tag.clone());
            }
        }
        let seq = self.next_seq;
        let deployed_like = matches!(status, Status::Deployed | Status::Deploying);
        let interfaces = self.build_interfaces(
            seq,
            &m.hostname,
            &m.interfaces,
            &m.ip_addresses,
            m.mac_address.as_deref(),
            deployed_like,
        )?;
        self.next_seq += 1;
        self.machines.push(Machine {
            seq,
            system_id: system_id.clone(),
            hostname: m.hostname.clone(),
            domain_id,
            cpu_count: m.cpu_count.unwrap_or(4),
            memory: m.memory.unwrap_or(8192),
            disks_gb: if m.disks_gb.is_empty() {
                vec![100]
            } else {
                m.disks_gb.clone()
            },
            zone,
            pool,
            tags: m.tags.clone(),
            architecture: m
                .architecture
                .clone()
                .unwrap_or_else(|| "amd64/generic".into()),
            interfaces,
            gateway_link_ipv4: None,
            power_type: m.power_type.clone().unwrap_or_else(|| "ipmi".into()),
            description: m.description.clone().unwrap_or_default(),
            status,
            previous_status: status,
            status_event: StatusEvent::default(),
            error_description: String::new(),
            power_state: m
                .power_state
                .clone()
                .unwrap_or_else(|| if deployed_like { "on" } else { "off" }.into()),
            owner: m.owner.clone(),
            owner_data: BTreeMap::new(),
            agent_name: String::new(),
            osystem: String::new(),
            distro_series: String::new(),
            hwe_kernel: None,
            ephemeral_deploy: false,
            enable_hw_sync: false,
            enable_kernel_crash_dump: false,
            swap_size: None,
            locked: false,
            user_data: None,
            comments: Vec::new(),
            timeline: VecDeque::new(),
            fail_reason: None,
            last_release: None,
            hardware_uuid: format!("{:08x}-0000-4000-8000-{:012x}", seq, seq * 7919),
            pod: None,
            static_json: String::new(),
        });
        if let Some(m) = self.machines.last_mut() {
            m.static_json = crate::render::machine_static(m);
        }
        if let Some(m) = self.machines.last() {
            for ip in m
                .interfaces
                .iter()
                .flat_map(|i| &i.links)
                .flat_map(|l| l.ip.iter().chain(&l.planned))
            {
                self.check_test_address(&m.hostname, ip)?;
            }
        }
        Ok(system_id)
    }

    pub fn domain_name(&self, id: i64) -> &str {
        self.domains
            .iter()
            .find(|d| d.id == id)
            .map(|d| d.name.as_str())
            .unwrap_or("maas")
    }

    /// `name.domain` → (name, domain id); a bare domain → ("@", id).
    pub fn split_fqdn(&self, fqdn: &str) -> Option<(String, i64)> {
        let fqdn = fqdn.trim_end_matches('.');
        if let Some(d) = self.domains.iter().find(|d| d.name == fqdn) {
            return Some(("@".into(), d.id));
        }
        let (name, domain) = fqdn.split_once('.')?;
        let d = self.domains.iter().find(|d| d.name == domain)?;
        Some((name.to_owned(), d.id))
    }

    pub fn dns_fqdn(&self, rec: &DnsRec) -> String {
        let domain = self.domain_name(rec.domain_id);
        if rec.name == "@" {
            domain.to_owned()
        } else {
            format!("{}.{domain}", rec.name)
        }
    }

    /// Does what fell due, in time order across machines. Called on every
    /// request, so the simulation needs no timer thread.
    pub fn advance(&mut self, now: Instant) {
        let mut due: Vec<(Instant, usize, Step)> = Vec::new();
        for (i, m) in self.machines.iter_mut().enumerate() {
            while m.timeline.front().is_some_and(|s| s.at <= now) {
                if let Some(s) = m.timeline.pop_front() {
                    due.push((s.at, i, s.step));
                }
            }
        }
        due.sort_by_key(|(at, i, _)| (*at, *i));
        for (at, i, step) in due {
            self.apply(i, step, at);
        }
    }

    pub fn machine_index(&self, system_id: &str) -> Outcome<usize> {
        self.machines
            .iter()
            .position(|m| m.system_id == system_id)
            .map_or_else(|| fail(404, "No Machine matches the given query."), Ok)
    }

    /// `NodePermission.view` on a machine (`_can_view` in
    /// `src/maasserver/auth/local.py`, MAAS 3.5): admins see every machine;
    /// other users see unowned machines and their own, and with RBAC only
    /// in the pools they were granted. For machines `edit` is the same test
    /// plus "not locked" (see `api::machines`).
    pub fn can_view(&self, m: &Machine, user: &User) -> bool {
        user.is_superuser
            || (m.owner.as_deref().is_none_or(|o| o == user.username)
                && self.pool_visible(&m.pool, user))
    }

    /// `NodePermission.edit` on machines as MAAS lists them (`get_nodes`),
    /// less the lock test: what allocation
    /// (`get_available_machines_for_acquisition`) and the collection's
    /// `op=release` ask. Before MAAS 3.8 the same as [`World::can_view`];
    /// from 3.8 (`_filter_visible_nodes` with OpenFGA) only unowned or own
    /// machines in the pools where the user holds `can_deploy_machines`: a
    /// free machine it sees in another pool is never offered to it. (The
    /// per-machine check, `_can_edit`, lets an unowned or own machine
    /// through in any pool, so the machine's own ops keep `can_view`.)
    pub fn can_deploy(&self, m: &Machine, user: &User) -> bool {
        self.can_view(m, user)
            && (user.is_superuser
                || !self.settings.release_at_least(3, 8)
                || user
                    .deploy_pools
                    .as_ref()
                    .is_none_or(|pools| pools.contains(&m.pool)))
    }

    /// Whether `user` may see the pool (RBAC `view`); always without RBAC.
    pub fn pool_visible(&self, pool: &str, user: &User) -> bool {
        user.is_superuser
            || user
                .pools
                .as_ref()
                .is_none_or(|pools| pools.iter().any(|p| p == pool))
    }

    // ---- test controls -----------------------------------------------------

    /// Finishes what is pending (deployment, release, erasure) now.
    pub fn complete(&mut self, index: usize) {
        let now = Instant::now();
        for s in &mut self.machines[index].timeline {
            s.at = now;
        }
        self.advance(now);
    }

    /// Makes the running deployment fail now, or the next one fail, with
    /// `reason` as curtin's message.
    pub fn fail_deployment(&mut self, index: usize, reason: Option<String>) {
        let now = Instant::now();
        let m = &mut self.machines[index];
        m.fail_reason = Some(reason.unwrap_or_else(|| DEFAULT_CURTIN_FAILURE.to_owned()));
        if m.status == Status::Deploying {
            // curtin ran, so the machine had powered on: a pending
            // power-on confirmation comes first.
            m.timeline.retain(|s| matches!(s.step, Step::PoweredOn));
            for s in &mut m.timeline {
                s.at = now;
            }
            m.timeline.push_back(Scheduled {
                at: now,
                step: Step::DeployDone,
            });
            self.advance(now);
        }
    }

    /// The state dump tests assert on.
    pub fn state_json(&self) -> Value {
        let machines: Vec<Value> = self
            .machines
            .iter()
            .map(|m| {
                json!({
                    "system_id": m.system_id,
                    "hostname": m.hostname,
                    "fqdn": format!("{}.{}", m.hostname, self.domain_name(m.domain_id)),
                    "status": m.status.code(),
                    "status_name": m.status.name(),
                    "status_message": m.status_event.message,
                    "error_description": m.error_description,
                    "power_state": m.power_state,
                    "owner": m.owner,
                    "agent_name": m.agent_name,
                    "owner_data": m.owner_data,
                    "osystem": m.osystem,
                    "distro_series": m.distro_series,
                    "hwe_kernel": m.hwe_kernel,
                    "ephemeral_deploy": m.ephemeral_deploy,
                    "enable_hw_sync": m.enable_hw_sync,
                    "enable_kernel_crash_dump": m.enable_kernel_crash_dump,
                    "ip_addresses": m.ip_addresses(),
                    "interfaces": m.interfaces.iter().map(|i| json!({
                        "name": i.name,
                        "mac_address": i.mac_address,
                        "links": i.links.iter().map(|l| json!({
                            "mode": l.mode.name(),
                            "subnet": l.subnet_id.and_then(|id| self.subnet(id)).map(|s| &s.cidr_text),
                            "ip_address": l.ip,
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                    "zone": m.zone,
                    "pool": m.pool,
                    "tags": m.tags,
                    "swap_size": m.swap_size,
                    "user_data": m.user_data,
                    "comments": m.comments,
                    "locked": m.locked,
                    "last_release": m.last_release,
                })
            })
            .collect();
        let dns: Vec<Value> = self
            .dns
            .iter()
            .map(|d| {
                json!({
                    "id": d.id,
                    "fqdn": self.dns_fqdn(d),
                    "address_ttl": d.address_ttl,
                    "ip_addresses": d.ips,
                })
            })
            .collect();
        json!({ "machines": machines, "dns_resources": dns })
    }
}

pub(crate) fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "yes" | "on"
    )
}

/// MAAS accepts repeated keys and comma/space separated values.
pub(crate) fn split_list(v: &str) -> Vec<String> {
    v.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
