//! The simulated MAAS region: machines, DNS, inventory, and the rules that
//! change them. Handlers in `api` translate HTTP to calls here; everything
//! here runs under one mutex, so each request is atomic like a MAAS
//! transaction (a failed call changes nothing).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::inventory::{Inventory, MachineEntry, Settings};
use crate::status::Status;

/// A MAAS user behind an API key.
#[derive(Debug, Clone)]
pub struct User {
    pub username: String,
    pub is_superuser: bool,
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
}

/// A transition that completes on its own after a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    Deploy,
    Release,
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
    pub configured_ips: Vec<String>,
    pub mac_address: String,
    pub power_type: String,
    pub description: String,

    pub status: Status,
    pub status_message: Option<String>,
    pub power_state: String,
    pub owner: Option<String>,
    pub owner_data: BTreeMap<String, String>,
    pub agent_name: String,
    pub osystem: String,
    pub distro_series: String,
    pub hwe_kernel: Option<String>,
    pub ephemeral_deploy: bool,
    pub swap_size: Option<i64>,
    pub locked: bool,
    pub ip_addresses: Vec<String>,
    pub user_data: Option<String>,
    pub comments: Vec<String>,
    pub pending: Option<(Pending, Instant)>,
    /// Set by the test control: the next (or current) deployment fails.
    pub fail_deployment: bool,
    /// Status before Broken, for mark_fixed.
    pub status_before_broken: Option<Status>,
    pub hardware_uuid: String,
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
    pub subnet_cidr: String,
    pub subnet_gateway: Option<String>,
    pub subnet_name: String,
    pub boot_resources: Vec<BootResourceRec>,
    pub machines: Vec<Machine>,
    pub dns: Vec<DnsRec>,
    next_dns_id: i64,
    next_seq: u64,
    /// (token key, nonce) → timestamp, for replay detection.
    pub nonces: HashMap<(String, String), u64>,
    pub faults: Vec<Fault>,
    /// Endpoint key → count.
    pub calls: BTreeMap<String, u64>,
    /// TCP connections accepted (clients should reuse theirs).
    pub connections: u64,
}

/// A MAAS-style failure: status and body.
#[derive(Debug)]
pub enum Failure {
    Text(u16, String),
    Fields(u16, Value),
}

pub type Outcome<T> = Result<T, Failure>;

fn fail<T>(status: u16, text: impl Into<String>) -> Outcome<T> {
    Err(Failure::Text(status, text.into()))
}

fn field_error<T>(field: &str, message: impl Into<String>) -> Outcome<T> {
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
            subnet_cidr: "10.0.0.0/24".into(),
            subnet_gateway: Some("10.0.0.1".into()),
            subnet_name: "10.0.0.0/24".into(),
            boot_resources: Vec::new(),
            machines: Vec::new(),
            dns: Vec::new(),
            next_dns_id: 1,
            next_seq: 1,
            nonces: HashMap::new(),
            faults: Vec::new(),
            calls: BTreeMap::new(),
            connections: 0,
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
        world.tags = inventory.tags.clone();
        if let Some(subnet) = &inventory.subnet {
            world.subnet_cidr = subnet.cidr.clone();
            world.subnet_gateway = subnet.gateway_ip.clone();
            world.subnet_name = subnet.name.clone().unwrap_or_else(|| subnet.cidr.clone());
        }
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
            });
        }
        Ok(world)
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
        self.next_seq += 1;
        let deployed_like = matches!(status, Status::Deployed | Status::Deploying);
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
            configured_ips: m.ip_addresses.clone(),
            mac_address: m.mac_address.clone().unwrap_or_else(|| {
                format!(
                    "52:54:00:{:02x}:{:02x}:{:02x}",
                    seq >> 16 & 0xff,
                    seq >> 8 & 0xff,
                    seq & 0xff
                )
            }),
            power_type: m.power_type.clone().unwrap_or_else(|| "ipmi".into()),
            description: m.description.clone().unwrap_or_default(),
            status,
            status_message: None,
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
            swap_size: None,
            locked: false,
            ip_addresses: if deployed_like {
                m.ip_addresses.clone()
            } else {
                Vec::new()
            },
            user_data: None,
            comments: Vec::new(),
            pending: None,
            fail_deployment: false,
            status_before_broken: None,
            hardware_uuid: format!("{:08x}-0000-4000-8000-{:012x}", seq, seq * 7919),
        });
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

    /// Completes transitions whose time has come. Called on every request,
    /// so the simulation needs no timer thread.
    pub fn advance(&mut self, now: Instant) {
        for m in &mut self.machines {
            let Some((pending, at)) = m.pending else {
                continue;
            };
            if now < at {
                continue;
            }
            m.pending = None;
            match pending {
                Pending::Deploy => {
                    if m.fail_deployment {
                        m.fail_deployment = false;
                        m.status = Status::FailedDeployment;
                        m.status_message = Some("Failed deployment".into());
                        m.power_state = "off".into();
                    } else {
                        m.status = Status::Deployed;
                        m.status_message = Some("Deployed".into());
                    }
                }
                Pending::Release => finish_release(m),
            }
        }
    }

    pub fn machine_index(&self, system_id: &str) -> Outcome<usize> {
        self.machines
            .iter()
            .position(|m| m.system_id == system_id)
            .map_or_else(|| fail(404, "No Machine matches the given query."), Ok)
    }

    /// Machines a user may see: admins see all, others not those owned by
    /// someone else.
    pub fn visible(&self, m: &Machine, user: &User) -> bool {
        user.is_superuser || m.owner.as_deref().is_none_or(|o| o == user.username)
    }

    // ---- allocate --------------------------------------------------------

    pub fn allocate(&mut self, user: &User, params: &[(String, String)]) -> Outcome<usize> {
        // AcquireNodeForm's fields; anything else but IGNORED is a 400.
        #[rustfmt::skip]
        const CONSTRAINTS: &[&str] = &[
            "name", "system_id", "arch", "cpu_count", "mem", "tags", "not_tags", "zone",
            "not_in_zone", "pool", "not_in_pool", "storage", "subnets", "not_subnets", "fabrics",
            "not_fabrics", "fabric_classes", "not_fabric_classes", "vlans", "not_vlans",
            "link_speed", "interfaces", "devices", "cpu_speed", "owner", "power_state",
            "deployment_target", "pod", "not_pod", "pod_type", "not_pod_type",
        ];
        #[rustfmt::skip]
        const IGNORED: &[&str] = &[
            "op", "agent_name", "comment", "bridge_all", "bridge_type", "bridge_stp", "bridge_fd",
            "dry_run", "verbose",
        ];
        let mut bad: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, _) in params {
            if !CONSTRAINTS.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()) {
                bad.insert(k.clone(), vec!["No such constraint.".into()]);
            }
        }
        if !bad.is_empty() {
            return Err(Failure::Fields(400, json!(bad)));
        }
        let all = |key: &str| -> Vec<String> {
            params
                .iter()
                .filter(|(k, _)| k == key)
                .flat_map(|(_, v)| split_list(v))
                .collect()
        };
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };

        let cpu = match one("cpu_count") {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => return field_error("cpu_count", "Invalid CPU count: number required."),
            },
            None => None,
        };
        let mem = match one("mem") {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => return field_error("mem", "Invalid memory: number of MiB required."),
            },
            None => None,
        };
        let zones = all("zone");
        let not_zones = all("not_in_zone");
        let unknown: Vec<&str> = zones
            .iter()
            .chain(not_zones.iter())
            .filter(|z| !self.zones.iter().any(|x| &x.name == *z))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return field_error("zone", format!("No such zone(s): {}.", unknown.join(", ")));
        }
        let pools = all("pool");
        let not_pools = all("not_in_pool");
        let unknown: Vec<&str> = pools
            .iter()
            .chain(not_pools.iter())
            .filter(|p| !self.pools.iter().any(|x| &x.name == *p))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return field_error("pool", format!("No such pool(s): {}.", unknown.join(", ")));
        }
        let tags = all("tags");
        let not_tags = all("not_tags");
        let unknown: Vec<String> = tags
            .iter()
            .chain(not_tags.iter())
            .filter(|t| !self.tags.contains(t))
            .map(|t| format!("'{t}'"))
            .collect();
        if !unknown.is_empty() {
            return field_error("tags", format!("No such tag(s): {}.", unknown.join(", ")));
        }
        let arches = all("arch");
        for arch in &arches {
            let family = arch.split('/').next().unwrap_or("");
            if !["amd64", "arm64", "i386", "armhf", "ppc64el", "s390x"].contains(&family) {
                return field_error("arch", "Architecture not recognised.");
            }
        }
        let storage = match one("storage") {
            Some(v) => match parse_storage(&v) {
                Some(s) => s,
                None => {
                    return field_error(
                        "storage",
                        format!("Malformed storage constraint, \"{v}\"."),
                    )
                }
            },
            None => Vec::new(),
        };
        let name = one("name");
        let system_id = one("system_id");

        let mut candidates: Vec<usize> = (0..self.machines.len())
            .filter(|&i| {
                let m = &self.machines[i];
                m.status == Status::Ready
                    && !m.locked
                    && self.visible(m, user)
                    && cpu.is_none_or(|c| f64::from(m.cpu_count) >= c)
                    && mem.is_none_or(|c| m.memory as f64 >= c)
                    && (zones.is_empty() || zones.contains(&m.zone))
                    && !not_zones.contains(&m.zone)
                    && (pools.is_empty() || pools.contains(&m.pool))
                    && !not_pools.contains(&m.pool)
                    && tags.iter().all(|t| m.tags.contains(t))
                    && !not_tags.iter().any(|t| m.tags.contains(t))
                    && (arches.is_empty()
                        || arches.iter().any(|a| {
                            a == &m.architecture
                                || !a.contains('/') && m.architecture.starts_with(&format!("{a}/"))
                        }))
                    && name.as_ref().is_none_or(|n| {
                        n == &m.hostname
                            || *n == format!("{}.{}", m.hostname, self.domain_name(m.domain_id))
                    })
                    && system_id.as_ref().is_none_or(|s| s == &m.system_id)
                    && storage_fits(&storage, &m.disks_gb)
            })
            .collect();
        candidates.sort_by(|&a, &b| {
            let cost = |m: &Machine| f64::from(m.cpu_count) + m.memory as f64 / 1024.0;
            let (ma, mb) = (&self.machines[a], &self.machines[b]);
            cost(ma).total_cmp(&cost(mb)).then(ma.seq.cmp(&mb.seq))
        });
        let Some(&index) = candidates.first() else {
            if let Some(id) = system_id {
                return fail(409, format!("No machine with system ID {id} available."));
            }
            let given: Vec<&(String, String)> = params
                .iter()
                .filter(|(k, _)| CONSTRAINTS.contains(&k.as_str()))
                .collect();
            if given.is_empty() {
                return fail(409, "No machine available.");
            }
            return fail(409, no_match_message(&given));
        };
        if one("dry_run").is_some_and(|v| truthy(&v)) {
            return Ok(index);
        }
        let m = &mut self.machines[index];
        m.status = Status::Allocated;
        m.owner = Some(user.username.clone());
        m.agent_name = one("agent_name").unwrap_or_default();
        m.status_message = Some(format!(
            "From 'Ready' to 'Allocated' (to {})",
            user.username
        ));
        if let Some(comment) = one("comment") {
            m.comments.push(comment);
        }
        Ok(index)
    }

    // ---- deploy ----------------------------------------------------------

    /// Every `<os>/<release>` a deploy may name.
    pub fn distro_choices(&self) -> Vec<(String, String, String)> {
        let mut choices: Vec<(String, String, String)> = self
            .boot_resources
            .iter()
            .filter_map(|b| {
                let (os, series) = deployable_os_release(b)?;
                Some((os, series, b.architecture.clone()))
            })
            .collect();
        choices.sort();
        choices
    }

    /// Resolves a `distro_series` value to (osystem, series, architectures).
    fn resolve_series(&self, wanted: &str) -> Option<(String, String, Vec<String>)> {
        let aliases = [
            ("18.04", "bionic"),
            ("20.04", "focal"),
            ("22.04", "jammy"),
            ("24.04", "noble"),
        ];
        let (want_os, want_series) = match wanted.split_once('/') {
            Some((os, s)) => (Some(os), s),
            None => (None, wanted),
        };
        let want_series = aliases
            .iter()
            .find(|(v, _)| *v == want_series)
            .map(|(_, n)| *n)
            .unwrap_or(want_series);
        let matching: Vec<(String, String, String)> = self
            .distro_choices()
            .into_iter()
            .filter(|(os, series, _)| series == want_series && want_os.is_none_or(|w| w == os))
            .collect();
        let (os, series, _) = matching.first()?.clone();
        let arches = matching.into_iter().map(|(_, _, a)| a).collect();
        Some((os, series, arches))
    }

    pub fn deploy(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let m = &self.machines[index];
        match m.status {
            Status::Ready => {
                if m.owner.as_deref().is_some_and(|o| o != user.username) {
                    return fail(409, "Can't allocate a machine belonging to another user.");
                }
            }
            Status::Allocated => {
                if m.owner.as_deref() != Some(&user.username) && !user.is_superuser {
                    return Err(Failure::Text(403, String::new()));
                }
            }
            ref other => {
                return fail(
                    409,
                    format!(
                        "Can't deploy a machine that is in the '{}' state",
                        other.name()
                    ),
                )
            }
        }
        if one("install_kvm").is_some_and(|v| truthy(&v)) && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        let wanted = one("distro_series")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.settings.default_distro_series.clone());
        let Some((os, series, arches)) = self.resolve_series(&wanted) else {
            let mut names: Vec<String> = self
                .distro_choices()
                .into_iter()
                .map(|(os, s, _)| format!("'{os}/{s}'"))
                .collect();
            names.dedup();
            let mut list = vec!["''".to_owned()];
            list.extend(names);
            return Err(Failure::Fields(
                400,
                json!({"distro_series": [format!(
                    "'{wanted}' is not a valid distro_series.  It should be one of: {}.",
                    list.join(", ")
                )]}),
            ));
        };
        let m = &self.machines[index];
        let family = m.architecture.split('/').next().unwrap_or("");
        if !arches.iter().any(|a| a.split('/').next() == Some(family)) {
            return fail(
                400,
                format!(
                    "Deployment operating system {os}/{series} is unavailable for {}.",
                    m.architecture
                ),
            );
        }
        if let Some(kernel) = one("hwe_kernel").filter(|k| !k.is_empty()) {
            if !(kernel.starts_with("ga-") || kernel.starts_with("hwe-")) {
                return field_error(
                    "hwe_kernel",
                    format!(
                        "{kernel} is not available for {os}/{series} on {}.",
                        m.architecture
                    ),
                );
            }
        }
        let deploy_for = Duration::from_secs_f64(self.settings.deploy_seconds.max(0.0));
        let m = &mut self.machines[index];
        if m.status == Status::Ready {
            m.owner = Some(user.username.clone());
        }
        if let Some(agent) = one("agent_name") {
            m.agent_name = agent;
        }
        if let Some(comment) = one("comment") {
            m.comments.push(comment);
        }
        m.osystem = os;
        m.distro_series = series;
        m.hwe_kernel = Some(
            one("hwe_kernel")
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "ga-22.04".into()),
        );
        m.ephemeral_deploy = one("ephemeral_deploy").is_some_and(|v| truthy(&v));
        m.user_data = one("user_data");
        start_deployment(m, deploy_for);
        Ok(())
    }

    // ---- release ---------------------------------------------------------

    pub fn release(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let release_for = Duration::from_secs_f64(self.settings.release_seconds.max(0.0));
        let m = &mut self.machines[index];
        if m.owner.as_deref().is_some_and(|o| o != user.username) && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        if m.locked {
            return Err(Failure::Text(403, String::new()));
        }
        use Status::*;
        match m.status {
            Ready | Releasing => return Ok(()),
            Allocated | Reserved | Broken | Deploying | Deployed | FailedDeployment
            | FailedDiskErasing | FailedReleasing => {}
            ref other => {
                return fail(
                    409,
                    format!(
                        "Machine cannot be released in its current state ('{}').",
                        other.name()
                    ),
                )
            }
        }
        let flag = |key: &str| params.iter().any(|(k, v)| k == key && truthy(v));
        let erase = flag("erase") || flag("secure_erase") || flag("quick_erase");
        if let Some((_, comment)) = params.iter().find(|(k, _)| k == "comment") {
            m.comments.push(comment.clone());
        }
        m.agent_name.clear();
        m.osystem.clear();
        m.distro_series.clear();
        m.hwe_kernel = None;
        m.fail_deployment = false;
        m.status_before_broken = None;
        if erase {
            m.status = DiskErasing;
            m.status_message = Some("Disk erasing".into());
            m.pending = Some((Pending::Release, Instant::now() + release_for));
        } else if m.power_state == "off" || release_for.is_zero() {
            finish_release(m);
        } else {
            m.status = Releasing;
            m.status_message = Some("Releasing".into());
            m.pending = Some((Pending::Release, Instant::now() + release_for));
        }
        Ok(())
    }

    // ---- power -----------------------------------------------------------

    pub fn power_on(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let m = &self.machines[index];
        let Some(owner) = m.owner.clone() else {
            return fail(409, "Can't start node: it hasn't been allocated.");
        };
        if owner != user.username && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        if m.status == Status::Allocated {
            // MAAS starts a deployment with the defaults (deploy records
            // the comment).
            let defaults: Vec<(String, String)> = params
                .iter()
                .filter(|(k, _)| k == "user_data" || k == "comment")
                .cloned()
                .collect();
            return self.deploy(index, user, &defaults);
        }
        let m = &mut self.machines[index];
        m.power_state = "on".into();
        if let Some((_, comment)) = params.iter().find(|(k, _)| k == "comment") {
            m.comments.push(comment.clone());
        }
        Ok(())
    }

    pub fn power_off(&mut self, index: usize, user: &User) -> Outcome<()> {
        let m = &mut self.machines[index];
        if m.owner.as_deref().is_some_and(|o| o != user.username) && !user.is_superuser {
            return Err(Failure::Text(403, String::new()));
        }
        m.power_state = "off".into();
        Ok(())
    }

    // ---- owner data ------------------------------------------------------

    pub fn set_owner_data(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let m = &self.machines[index];
        if m.owner.as_deref() != Some(&user.username) {
            return fail(
                409,
                "Cannot set workload annotation: it hasn't been acquired.",
            );
        }
        for (k, _) in params {
            if k != "op"
                && !k
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '-')
            {
                return fail(500, "Invalid character in key name");
            }
        }
        let m = &mut self.machines[index];
        for (k, v) in params.iter().filter(|(k, _)| k != "op") {
            if v.is_empty() {
                m.owner_data.remove(k);
            } else {
                m.owner_data.insert(k.clone(), v.clone());
            }
        }
        Ok(())
    }

    // ---- other machine ops -------------------------------------------------

    pub fn abort(&mut self, index: usize) -> Outcome<()> {
        let m = &mut self.machines[index];
        if m.status != Status::Deploying {
            return fail(
                409,
                format!(
                    "Cannot abort in current state: node {} is in state {}.",
                    m.system_id,
                    m.status.name()
                ),
            );
        }
        m.status = Status::Allocated;
        m.pending = None;
        m.power_state = "off".into();
        Ok(())
    }

    pub fn mark_broken(&mut self, index: usize) {
        let m = &mut self.machines[index];
        if m.status != Status::Broken {
            m.status_before_broken = Some(m.status);
        }
        m.status = Status::Broken;
        m.status_message = Some("Marked broken".into());
        m.pending = None;
    }

    pub fn mark_fixed(&mut self, index: usize) -> Outcome<()> {
        let m = &mut self.machines[index];
        if m.status != Status::Broken {
            return fail(409, "Can't mark a non-broken node as 'Ready'.");
        }
        m.status = match m.status_before_broken.take() {
            Some(Status::Deployed) => Status::Deployed,
            _ => Status::Ready,
        };
        Ok(())
    }

    pub fn update_machine(&mut self, index: usize, params: &[(String, String)]) -> Outcome<()> {
        let mut swap = None;
        let mut zone = None;
        let mut pool = None;
        let mut domain = None;
        for (k, v) in params {
            match k.as_str() {
                "swap_size" => match parse_size(v) {
                    Some(n) => swap = Some(n),
                    None => {
                        return field_error("swap_size", "Invalid size for swap: ".to_owned() + v)
                    }
                },
                "zone" => match self.zones.iter().find(|z| &z.name == v) {
                    Some(z) => zone = Some(z.name.clone()),
                    None => {
                        return field_error(
                            "zone",
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    }
                },
                "pool" => match self.pools.iter().find(|p| &p.name == v) {
                    Some(p) => pool = Some(p.name.clone()),
                    None => {
                        return field_error(
                            "pool",
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    }
                },
                "domain" => {
                    match self
                        .domains
                        .iter()
                        .find(|d| &d.name == v || d.id.to_string() == *v)
                    {
                        Some(d) => domain = Some(d.id),
                        None => {
                            return field_error(
                                "domain",
                                format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                            )
                        }
                    }
                }
                _ => {}
            }
        }
        let m = &mut self.machines[index];
        for (k, v) in params {
            match k.as_str() {
                "hostname" if !v.is_empty() => m.hostname = v.clone(),
                "description" => m.description = v.clone(),
                _ => {}
            }
        }
        if let Some(s) = swap {
            m.swap_size = Some(s);
        }
        if let Some(z) = zone {
            m.zone = z;
        }
        if let Some(p) = pool {
            m.pool = p;
        }
        if let Some(d) = domain {
            m.domain_id = d;
        }
        Ok(())
    }

    // ---- DNS ---------------------------------------------------------------

    pub fn dns_index(&self, id: &str) -> Outcome<usize> {
        let id: i64 = id.parse().unwrap_or(i64::MIN);
        self.dns
            .iter()
            .position(|d| d.id == id)
            .map_or_else(|| fail(404, "No DNSResource matches the given query."), Ok)
    }

    fn domain_by_ref(&self, r: &str) -> Outcome<i64> {
        self.domains
            .iter()
            .find(|d| d.name == r || d.id.to_string() == r)
            .map(|d| d.id)
            .map_or_else(|| fail(404, "No Domain matches the given query."), Ok)
    }

    pub fn list_dns(&self, params: &[(String, String)]) -> Outcome<Vec<usize>> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let mut name = one("name");
        let mut domain = match one("domain") {
            Some(d) => Some(self.domain_by_ref(&d)?),
            None => None,
        };
        if let Some(fqdn) = one("fqdn") {
            match self.split_fqdn(&fqdn) {
                Some((n, d)) => {
                    name = Some(n);
                    domain = Some(d);
                }
                None => return fail(404, "No Domain matches the given query."),
            }
        }
        Ok((0..self.dns.len())
            .filter(|&i| {
                let d = &self.dns[i];
                name.as_ref().is_none_or(|n| n == &d.name)
                    && domain.is_none_or(|id| id == d.domain_id)
            })
            .collect())
    }

    pub fn create_dns(&mut self, params: &[(String, String)]) -> Outcome<usize> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let (name, domain_id) = match (one("fqdn"), one("name")) {
            (Some(fqdn), _) if !fqdn.is_empty() => match self.split_fqdn(&fqdn) {
                Some(x) => x,
                None => return fail(404, "No Domain matches the given query."),
            },
            (_, Some(name)) if !name.is_empty() => {
                let domain = match one("domain") {
                    Some(d) => self.domain_by_ref(&d)?,
                    None => 0,
                };
                (name, domain)
            }
            _ => return field_error("name", "This field is required."),
        };
        let ttl = parse_ttl(one("address_ttl"))?;
        let ips = parse_ips(one("ip_addresses").unwrap_or_default())?;
        if self
            .dns
            .iter()
            .any(|d| d.name == name && d.domain_id == domain_id)
        {
            return Err(Failure::Fields(
                400,
                json!({"__all__": ["Labels must be unique within their zone."]}),
            ));
        }
        let id = self.next_dns_id;
        self.next_dns_id += 1;
        self.dns.push(DnsRec {
            id,
            name,
            domain_id,
            address_ttl: ttl.flatten(),
            ips,
        });
        Ok(self.dns.len() - 1)
    }

    pub fn update_dns(&mut self, index: usize, params: &[(String, String)]) -> Outcome<()> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let mut target = (self.dns[index].name.clone(), self.dns[index].domain_id);
        if let Some(fqdn) = one("fqdn") {
            target = match self.split_fqdn(&fqdn) {
                Some(x) => x,
                None => return fail(404, "No Domain matches the given query."),
            };
        }
        if let Some(name) = one("name") {
            target.0 = name;
        }
        if let Some(domain) = one("domain") {
            target.1 = self.domain_by_ref(&domain)?;
        }
        let ttl = parse_ttl(one("address_ttl"))?;
        let ips = match one("ip_addresses") {
            Some(v) => Some(parse_ips(v)?),
            None => None,
        };
        let id = self.dns[index].id;
        if self
            .dns
            .iter()
            .any(|d| d.id != id && d.name == target.0 && d.domain_id == target.1)
        {
            return Err(Failure::Fields(
                400,
                json!({"__all__": ["Labels must be unique within their zone."]}),
            ));
        }
        let rec = &mut self.dns[index];
        rec.name = target.0;
        rec.domain_id = target.1;
        if let Some(ttl) = ttl {
            rec.address_ttl = ttl;
        }
        if let Some(ips) = ips {
            rec.ips = ips;
        }
        Ok(())
    }

    // ---- test controls -----------------------------------------------------

    /// Finishes a pending transition at once.
    pub fn complete(&mut self, index: usize) {
        if let Some((kind, _)) = self.machines[index].pending {
            self.machines[index].pending = Some((kind, Instant::now()));
            self.advance(Instant::now());
        }
    }

    /// Makes the current deployment fail now, or the next one fail.
    pub fn fail_deployment(&mut self, index: usize) {
        let m = &mut self.machines[index];
        m.fail_deployment = true;
        if m.status == Status::Deploying {
            m.pending = Some((Pending::Deploy, Instant::now()));
            self.advance(Instant::now());
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
                    "power_state": m.power_state,
                    "owner": m.owner,
                    "agent_name": m.agent_name,
                    "owner_data": m.owner_data,
                    "osystem": m.osystem,
                    "distro_series": m.distro_series,
                    "hwe_kernel": m.hwe_kernel,
                    "ephemeral_deploy": m.ephemeral_deploy,
                    "ip_addresses": m.ip_addresses,
                    "zone": m.zone,
                    "pool": m.pool,
                    "tags": m.tags,
                    "swap_size": m.swap_size,
                    "user_data": m.user_data,
                    "comments": m.comments,
                    "locked": m.locked,
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

/// The `(osystem, release)` a boot resource offers to deploy. Synced images
/// are named `os/release`; uploaded custom images are stored without their
/// `custom/` (a bare name is a custom release, as MAAS lists them); the
/// bootloaders (`grub-*`, `pxelinux`, `uboot`) are boot resources one cannot
/// deploy.
fn deployable_os_release(b: &BootResourceRec) -> Option<(String, String)> {
    let name = b.name.trim();
    match name.split_once('/') {
        Some((os, _))
            if os.starts_with("grub") || os.starts_with("pxelinux") || os.starts_with("uboot") =>
        {
            None
        }
        Some((os, release)) => Some((os.to_owned(), release.to_owned())),
        None if !name.is_empty() => Some(("custom".to_owned(), name.to_owned())),
        None => None,
    }
}

fn start_deployment(m: &mut Machine, deploy_for: Duration) {
    m.status = Status::Deploying;
    m.status_message = Some("Deploying".into());
    m.power_state = "on".into();
    m.ip_addresses = m.configured_ips.clone();
    m.pending = Some((Pending::Deploy, Instant::now() + deploy_for));
}

fn finish_release(m: &mut Machine) {
    m.status = Status::Ready;
    m.status_message = Some("Released".into());
    m.power_state = "off".into();
    m.owner = None;
    m.owner_data.clear();
    m.agent_name.clear();
    m.osystem.clear();
    m.distro_series.clear();
    m.hwe_kernel = None;
    m.ephemeral_deploy = false;
    m.ip_addresses.clear();
    m.user_data = None;
    m.pending = None;
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "yes" | "on"
    )
}

/// MAAS accepts repeated keys and comma/space separated values.
fn split_list(v: &str) -> Vec<String> {
    v.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `label:size(tags),size,...` → sizes in GB (tags are ignored).
fn parse_storage(v: &str) -> Option<Vec<f64>> {
    let mut sizes = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let entry = entry.split('(').next()?;
        let size = entry.rsplit(':').next()?;
        sizes.push(size.trim().parse::<f64>().ok()?);
    }
    Some(sizes)
}

/// The first size is for the boot disk, the rest for other distinct disks.
fn storage_fits(wanted: &[f64], disks: &[u64]) -> bool {
    let Some((&root, rest)) = wanted.split_first() else {
        return true;
    };
    let Some((&boot, others)) = disks.split_first() else {
        return false;
    };
    if (boot as f64) < root {
        return false;
    }
    let mut free: Vec<u64> = others.to_vec();
    for &need in rest {
        match free.iter().position(|&d| d as f64 >= need) {
            Some(i) => {
                free.remove(i);
            }
            None => return false,
        }
    }
    true
}

/// Bytes with optional K/M/G/T suffix.
fn parse_size(v: &str) -> Option<i64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], 1i64 << 10),
        'M' | 'm' => (&v[..v.len() - 1], 1 << 20),
        'G' | 'g' => (&v[..v.len() - 1], 1 << 30),
        'T' | 't' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1),
    };
    let n: f64 = num.parse().ok()?;
    (n >= 0.0).then_some((n * mult as f64) as i64)
}

/// None = not given; Some(None) = given empty.
fn parse_ttl(v: Option<String>) -> Outcome<Option<Option<u32>>> {
    match v {
        None => Ok(None),
        Some(s) if s.trim().is_empty() => Ok(Some(None)),
        Some(s) => match s.trim().parse::<u32>() {
            Ok(n) => Ok(Some(Some(n))),
            Err(_) => field_error("address_ttl", "Enter a whole number."),
        },
    }
}

fn parse_ips(v: String) -> Outcome<Vec<String>> {
    let mut ips = Vec::new();
    for ip in v.split_whitespace() {
        if ip.parse::<std::net::IpAddr>().is_err() {
            return field_error("ip_addresses", format!("'{ip}' is not a valid IP address."));
        }
        if !ips.iter().any(|x| x == ip) {
            ips.push(ip.to_owned());
        }
    }
    Ok(ips)
}

/// `No available machine matches constraints: [('cpu_count', ['4'])] (resolved to "cpu_count=4.0")`
fn no_match_message(given: &[&(String, String)]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut values: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, v) in given {
        if !order.contains(&k.as_str()) {
            order.push(k);
        }
        values.entry(k).or_default().push(v);
    }
    let repr: Vec<String> = order
        .iter()
        .map(|k| {
            let vs: Vec<String> = values[k].iter().map(|v| format!("'{v}'")).collect();
            format!("('{k}', [{}])", vs.join(", "))
        })
        .collect();
    let resolved: Vec<String> = values
        .iter()
        .map(|(k, vs)| {
            let joined: Vec<String> = vs
                .iter()
                .map(|v| match *k {
                    "cpu_count" | "mem" => v
                        .parse::<f64>()
                        .map(|n| format!("{n:?}"))
                        .unwrap_or_else(|_| v.to_string()),
                    _ => v.to_string(),
                })
                .collect();
            format!("{k}={}", joined.join(","))
        })
        .collect();
    format!(
        "No available machine matches constraints: [{}] (resolved to \"{}\")",
        repr.join(", "),
        resolved.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_match_message_matches_maas_format() {
        let a = ("cpu_count".to_owned(), "4".to_owned());
        let b = ("mem".to_owned(), "8192".to_owned());
        let c = ("pool".to_owned(), "default".to_owned());
        let d = ("zone".to_owned(), "default".to_owned());
        assert_eq!(
            no_match_message(&[&a, &b, &c, &d]),
            "No available machine matches constraints: [('cpu_count', ['4']), ('mem', ['8192']), \
             ('pool', ['default']), ('zone', ['default'])] (resolved to \"cpu_count=4.0 mem=8192.0 \
             pool=default zone=default\")"
        );
    }

    #[test]
    fn storage_constraints() {
        assert_eq!(parse_storage("root:50,100(ssd)"), Some(vec![50.0, 100.0]));
        assert_eq!(parse_storage("x:y"), None);
        assert!(storage_fits(&[50.0], &[120]));
        assert!(!storage_fits(&[200.0], &[120, 960]));
        assert!(storage_fits(&[100.0, 500.0], &[120, 960]));
        assert!(!storage_fits(&[100.0, 500.0, 500.0], &[120, 960]));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
    }
}
