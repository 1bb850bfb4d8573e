//! The simulator's starting world, read from JSON.
//!
//! ```json
//! { "api_keys": [{"key": "ck:tk:secret", "username": "admin", "is_superuser": true},
//!                {"key": "ck2:tk2:s2", "username": "alice", "is_superuser": false,
//!                 "pools": ["alice-pool"]}],                // optional RBAC-style pools
//!                 // MAAS 3.8+: "deploy_pools": ["alice-pool"] (can_deploy_machines per pool)
//!   "domains": [{"name": "k8s.maas", "ttl": 30}],        // "maas" (id 0) always exists
//!   "zones": [{"name": "zone-a"}], "pools": [{"name": "cp-pool"}],   // "default" always exists
//!   "tags": ["gpu"],                                       // plus every machine tag
//!   "subnet": {"cidr": "127.11.130.0/24", "gateway_ip": "127.11.130.1"},
//!   "subnets": [{"cidr": "127.20.0.0/24", "name": "storage", "vlan": {"vid": 20, "fabric": "fabric-0"}}],
//!   "boot_resources": [{"name": "ubuntu/jammy", "type": "Synced", "architecture": "amd64/ga-22.04"},
//!                      {"name": "u-2204-0-k-1264-0", "type": "Uploaded", "architecture": "amd64/generic"}],
//!   "machines": [{"hostname": "cp-1", "cpu_count": 8, "memory": 32768, "disks_gb": [120],
//!                 "zone": "zone-a", "pool": "cp-pool", "tags": ["control-plane"],
//!                 "ip_addresses": ["127.11.130.21"]},
//!                {"hostname": "cp-2", "interfaces": [
//!                   {"name": "eth0", "links": [{"ip_address": "127.11.130.22"}]},
//!                   {"name": "eth1", "links": [{"subnet": "storage", "mode": "static", "ip_address": "127.20.0.22"}]}]}],
//!   "vm_hosts": [{"name": "lxd-1", "type": "lxd", "zone": "zone-a", "pool": "vm-pool",
//!                 "tags": ["fast"], "cores": 16, "memory": 65536, "storage_gb": 1000,
//!                 "host": "cp-1", "vm_addresses": ["127.11.130.201"]}],
//!   "settings": {"deploy_seconds": 10, "release_seconds": 2} }
//! ```
//! Every field but `machines[].hostname` is optional.

use serde::Deserialize;

/// The built-in inventory: the story lab's, `tests/inventory/story.json`
/// (this package lives in `tests/maas-sim/`; one file, not a copy).
pub const DEFAULT_INVENTORY: &str = include_str!("../../inventory/story.json");

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Inventory {
    pub api_keys: Vec<ApiKeyEntry>,
    pub domains: Vec<DomainEntry>,
    pub zones: Vec<NamedEntry>,
    pub pools: Vec<NamedEntry>,
    pub tags: Vec<String>,
    /// The first subnet (older inventories); `subnets` follow it.
    pub subnet: Option<SubnetEntry>,
    pub subnets: Vec<SubnetEntry>,
    pub boot_resources: Vec<BootResourceEntry>,
    pub machines: Vec<MachineEntry>,
    pub dns_resources: Vec<DnsEntry>,
    /// VM hosts (MAAS ≤ 3.8) that compose machines (`op=compose`).
    pub vm_hosts: Vec<VmHostEntry>,
    pub settings: Settings,
    /// Free text, ignored (lets the JSON file explain itself).
    #[serde(rename = "_comment")]
    pub comment: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyEntry {
    pub key: String,
    #[serde(default = "admin")]
    pub username: String,
    #[serde(default = "yes")]
    pub is_superuser: bool,
    /// The resource pools this user may see and deploy from, as MAAS with
    /// RBAC grants `view` and `deploy-machines` per pool. Absent: every
    /// pool (MAAS without RBAC). Admins always see every pool.
    #[serde(default)]
    pub pools: Option<Vec<String>>,
    /// MAAS 3.8+ (ReBAC): the resource pools where this user's groups hold
    /// `can_deploy_machines`. Absent: every pool, as MAAS's built-in
    /// `Users` group grants it MAAS-wide. The user still sees the free
    /// machines of every pool (`can_view_available_machines`), but may
    /// allocate, deploy or release only in these. Refused before 3.8,
    /// which has no such rights.
    #[serde(default)]
    pub deploy_pools: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainEntry {
    pub name: String,
    #[serde(default)]
    pub ttl: Option<u32>,
    #[serde(default = "yes")]
    pub authoritative: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedEntry {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubnetEntry {
    pub cidr: String,
    pub gateway_ip: Option<String>,
    /// Defaults to the CIDR, as in MAAS.
    pub name: Option<String>,
    pub description: Option<String>,
    pub dns_servers: Vec<String>,
    pub space: Option<String>,
    /// Default: an untagged VLAN on a fabric of the subnet's own.
    pub vlan: Option<VlanEntry>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VlanEntry {
    pub vid: u16,
    pub fabric: Option<String>,
    pub mtu: Option<u32>,
}

/// A machine interface: `{"name": "eth1", "mac_address": "...", "links":
/// [{"subnet": "127.20.0.0/24", "mode": "static", "ip_address": "127.20.0.5"}]}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InterfaceEntry {
    pub name: String,
    pub mac_address: Option<String>,
    pub links: Vec<LinkEntry>,
}

/// A link: `subnet` (CIDR, name or id; default: the one holding
/// `ip_address`, else the first), `mode` (auto, static, dhcp, link_up;
/// default auto) and `ip_address` (for AUTO/DHCP the address it gets when
/// deployed, if free; for STATIC the address).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkEntry {
    pub subnet: Option<String>,
    pub mode: Option<String>,
    pub ip_address: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootResourceEntry {
    pub name: String,
    #[serde(rename = "type", default = "synced")]
    pub kind: String,
    #[serde(default = "amd64_generic")]
    pub architecture: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub base_image: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MachineEntry {
    /// Generated from the hostname when absent.
    pub system_id: Option<String>,
    pub hostname: String,
    /// Domain name; the default domain when absent.
    pub domain: Option<String>,
    pub cpu_count: Option<u32>,
    /// MiB.
    pub memory: Option<u64>,
    /// Physical disks in GB, boot disk first.
    pub disks_gb: Vec<u64>,
    pub zone: Option<String>,
    pub pool: Option<String>,
    pub tags: Vec<String>,
    pub architecture: Option<String>,
    /// Addresses the machine gets once deployment starts (one AUTO link on
    /// `eth0` each); or, with several NICs, `interfaces`.
    pub ip_addresses: Vec<String>,
    pub mac_address: Option<String>,
    /// Interfaces, boot interface first (instead of `ip_addresses`).
    pub interfaces: Vec<InterfaceEntry>,
    pub power_type: Option<String>,
    /// Starting status name (default `Ready`).
    pub status: Option<String>,
    pub power_state: Option<String>,
    pub owner: Option<String>,
    pub description: Option<String>,
}

/// A VM host: its total resources (memory MiB, storage GB); what its VMs
/// take is not free. `host` is the hostname of the machine it runs on;
/// each VM composed gets the next unused of `vm_addresses`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VmHostEntry {
    pub name: String,
    /// `lxd` (default) or `virsh`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub zone: Option<String>,
    pub pool: Option<String>,
    pub tags: Vec<String>,
    pub cores: u32,
    pub memory: u64,
    pub storage_gb: u64,
    pub host: Option<String>,
    pub vm_addresses: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsEntry {
    pub fqdn: String,
    #[serde(default)]
    pub address_ttl: Option<u32>,
    #[serde(default)]
    pub ip_addresses: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Deploying → Deployed after this long.
    pub deploy_seconds: f64,
    /// Releasing / Disk erasing → Ready after this long.
    pub release_seconds: f64,
    /// Series used when a deploy names none.
    pub default_distro_series: String,
    /// Every API call (not `/_sim/`) takes at least this long.
    pub latency_ms: u64,
    /// The machines' addresses live in a network namespace the test made
    /// (the KCP lab). Without it every machine address must be a loopback
    /// one: capmaas connects to machine addresses (the join probe), and a
    /// test may send traffic only to loopback or to its own namespaces.
    pub machines_in_network_namespace: bool,
    /// No rack controller can reach the BMCs (a region alone, as the
    /// real-MAAS test world runs): `op=query_power_state` answers 503
    /// with MAAS's reason, as real MAAS 3.4.8 does.
    pub no_rack_controller: bool,
    /// What `GET version/` answers as `version` (real MAAS 3.4.8, the
    /// real-MAAS test world, answers `"3.4.8"` with an empty `subversion`);
    /// deploy reads `enable_hw_sync` from 3.2 and `enable_kernel_crash_dump`
    /// from 3.6 on and, like real MAAS (3.4.8 reads only the deploy
    /// parameters it knows), ignores them before.
    pub maas_version: String,
    /// A composed VM is commissioned (Commissioning → Ready) after this long.
    pub commission_seconds: f64,
}

impl Settings {
    /// `maas_version` is `major.minor` or newer (a version that does not
    /// parse counts as the newest).
    pub fn release_at_least(&self, major: u32, minor: u32) -> bool {
        let mut parts = self
            .maas_version
            .split(|c: char| !c.is_ascii_digit())
            .map(str::parse::<u32>);
        match (parts.next(), parts.next()) {
            (Some(Ok(have_major)), Some(Ok(have_minor))) => {
                (have_major, have_minor) >= (major, minor)
            }
            _ => true,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            deploy_seconds: 10.0,
            release_seconds: 2.0,
            default_distro_series: "jammy".into(),
            latency_ms: 0,
            machines_in_network_namespace: false,
            no_rack_controller: false,
            maas_version: "3.4.8".into(),
            commission_seconds: 2.0,
        }
    }
}

fn admin() -> String {
    "admin".into()
}
fn yes() -> bool {
    true
}
fn synced() -> String {
    "Synced".into()
}
fn amd64_generic() -> String {
    "amd64/generic".into()
}

impl Inventory {
    pub fn from_json(text: &str) -> Result<Inventory, String> {
        serde_json::from_str(text).map_err(|e| format!("invalid inventory: {e}"))
    }

    pub fn default_story() -> Inventory {
        // The embedded file is checked by a unit test, so this cannot fail
        // in a released build; fall back to an empty world just in case.
        Inventory::from_json(DEFAULT_INVENTORY).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_inventory_parses_and_fits_the_story() {
        let inv = Inventory::from_json(DEFAULT_INVENTORY).unwrap();
        let count = |pool: &str, tag: &str| {
            inv.machines
                .iter()
                .filter(|m| m.pool.as_deref() == Some(pool) && m.tags.iter().any(|t| t == tag))
                .count()
        };
        assert!(count("cp-pool", "control-plane") >= 4);
        assert!(count("worker-pool", "worker") >= 6);
        assert!(inv
            .boot_resources
            .iter()
            .any(|b| b.name == "u-2204-0-k-1264-0"));
        assert!(inv.domains.iter().any(|d| d.name == "k8s.maas"));
        for zone in ["zone-a", "zone-b"] {
            assert!(inv.zones.iter().any(|z| z.name == zone));
        }
        assert!(!inv.api_keys.is_empty());
    }

    #[test]
    fn release_comparisons_read_major_and_minor() {
        let at = |version: &str| Settings {
            maas_version: version.into(),
            ..Settings::default()
        };
        assert!(at("3.4.8").release_at_least(3, 2));
        assert!(!at("3.4.8").release_at_least(3, 6));
        assert!(at("3.6.0~beta1").release_at_least(3, 6));
        assert!(at("3.10.1").release_at_least(3, 6));
        assert!(!at("2.9.2").release_at_least(3, 2));
        assert!(at("").release_at_least(3, 6), "unknown counts as newest");
        assert_eq!(
            Settings::default().maas_version,
            "3.4.8",
            "as the real MAAS of the tests"
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(Inventory::from_json(r#"{"machnes": []}"#).is_err());
    }
}
