//! What the client sends to MAAS and what it reads back.
//!
//! MAAS objects are deserialized leniently: every field is optional, unknown
//! fields are ignored, nested objects we only need the name of (`zone`,
//! `pool`, `domain`) are flattened to that name. MAAS has added fields in
//! every release and removed a few; a missing field must never fail a
//! reconcile.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

use super::decode::{charged_list, charged_text_map, Loose};
use crate::api::StringMap;

/// A machine's lifecycle state (MAAS `status`, see maas-api.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MachineStatus {
    New,
    Commissioning,
    FailedCommissioning,
    Missing,
    Ready,
    Reserved,
    Deployed,
    Retired,
    Broken,
    Deploying,
    Allocated,
    FailedDeployment,
    Releasing,
    FailedReleasing,
    DiskErasing,
    FailedDiskErasing,
    RescueMode,
    EnteringRescueMode,
    FailedEnteringRescueMode,
    ExitingRescueMode,
    FailedExitingRescueMode,
    Testing,
    FailedTesting,
    /// A status this client does not know (newer MAAS): its `status_name`.
    Other(String),
}

impl MachineStatus {
    /// Held by a user from allocation until a release starts: the states
    /// a deployment goes through, a failed one included.
    pub fn is_allocated(&self) -> bool {
        use MachineStatus::*;
        matches!(
            self,
            Allocated | Deploying | Deployed | FailedDeployment | RescueMode
        )
    }

    /// From MAAS's numeric `status`.
    pub fn from_code(code: i64) -> Option<MachineStatus> {
        use MachineStatus::*;
        Some(match code {
            0 => New,
            1 => Commissioning,
            2 => FailedCommissioning,
            3 => Missing,
            4 => Ready,
            5 => Reserved,
            6 => Deployed,
            7 => Retired,
            8 => Broken,
            9 => Deploying,
            10 => Allocated,
            11 => FailedDeployment,
            12 => Releasing,
            13 => FailedReleasing,
            14 => DiskErasing,
            15 => FailedDiskErasing,
            16 => RescueMode,
            17 => EnteringRescueMode,
            18 => FailedEnteringRescueMode,
            19 => ExitingRescueMode,
            20 => FailedExitingRescueMode,
            21 => Testing,
            22 => FailedTesting,
            _ => return None,
        })
    }

    /// From MAAS's `status_name` (exact labels, e.g. `Releasing failed`).
    pub fn from_name(name: &str) -> MachineStatus {
        (0..=22)
            .filter_map(MachineStatus::from_code)
            .find(|s| s.name() == name)
            .unwrap_or_else(|| MachineStatus::Other(name.to_owned()))
    }

    /// MAAS's numeric code (None for [`MachineStatus::Other`]).
    pub fn code(&self) -> Option<i64> {
        (0..=22).find(|&c| MachineStatus::from_code(c).as_ref() == Some(self))
    }

    /// MAAS's exact `status_name` label.
    pub fn name(&self) -> &str {
        use MachineStatus::*;
        match self {
            New => "New",
            Commissioning => "Commissioning",
            FailedCommissioning => "Failed commissioning",
            Missing => "Missing",
            Ready => "Ready",
            Reserved => "Reserved",
            Deployed => "Deployed",
            Retired => "Retired",
            Broken => "Broken",
            Deploying => "Deploying",
            Allocated => "Allocated",
            FailedDeployment => "Failed deployment",
            Releasing => "Releasing",
            FailedReleasing => "Releasing failed",
            DiskErasing => "Disk erasing",
            FailedDiskErasing => "Failed disk erasing",
            RescueMode => "Rescue mode",
            EnteringRescueMode => "Entering rescue mode",
            FailedEnteringRescueMode => "Failed to enter rescue mode",
            ExitingRescueMode => "Exiting rescue mode",
            FailedExitingRescueMode => "Failed to exit rescue mode",
            Testing => "Testing",
            FailedTesting => "Failed testing",
            Other(name) => name,
        }
    }

    /// The lower-case filter name used by `GET machines/?status=`.
    pub fn filter_name(&self) -> Option<&'static str> {
        use MachineStatus::*;
        Some(match self {
            New => "new",
            Commissioning => "commissioning",
            FailedCommissioning => "failed_commissioning",
            Missing => "missing",
            Ready => "ready",
            Reserved => "reserved",
            Deployed => "deployed",
            Retired => "retired",
            Broken => "broken",
            Deploying => "deploying",
            Allocated => "allocated",
            FailedDeployment => "failed_deployment",
            Releasing => "releasing",
            FailedReleasing => "failed_releasing",
            DiskErasing => "disk_erasing",
            FailedDiskErasing => "failed_disk_erasing",
            RescueMode => "rescue_mode",
            EnteringRescueMode => "entering_rescue_mode",
            FailedEnteringRescueMode => "failed_entering_rescue_mode",
            ExitingRescueMode => "exiting_rescue_mode",
            FailedExitingRescueMode => "failed_exiting_rescue_mode",
            Testing => "testing",
            FailedTesting => "failed_testing",
            Other(_) => return None,
        })
    }
}

impl fmt::Display for MachineStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A machine's power state as MAAS last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PowerState {
    On,
    Off,
    #[default]
    Unknown,
    Error,
    Other(String),
}

impl PowerState {
    pub fn parse(s: &str) -> PowerState {
        match s {
            "on" => PowerState::On,
            "off" => PowerState::Off,
            "unknown" | "" => PowerState::Unknown,
            "error" => PowerState::Error,
            other => PowerState::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
            PowerState::Unknown => "unknown",
            PowerState::Error => "error",
            PowerState::Other(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for PowerState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        Ok(PowerState::parse(s.as_deref().unwrap_or("")))
    }
}

/// The network interface MAAS boots the machine from, by id: the rest of
/// it (name, links) is in [`Machine::interfaces`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Interface {
    pub id: i64,
}

/// One of a machine's interfaces with every link MAAS has for it (an
/// allocated machine's AUTO links have no address until it deploys):
/// what the interface calls (`link_subnet`, `unlink_subnet`) act on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineInterface {
    pub id: i64,
    pub name: String,
    pub links: Vec<InterfaceLink>,
}

/// A link of an interface to a subnet (`interface_set[].links[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceLink {
    pub id: i64,
    pub mode: LinkMode,
    pub ip: Option<String>,
    pub subnet_id: Option<i64>,
    /// The subnet's `cidr` and `name` (empty when MAAS gives none).
    pub subnet_cidr: String,
    pub subnet_name: String,
}

/// How an interface is linked to a subnet (`INTERFACE_LINK_TYPE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkMode {
    /// An address from the subnet when the machine deploys.
    Auto,
    Dhcp,
    Static,
    /// Up, without an address.
    LinkUp,
    #[default]
    #[serde(other)]
    Other,
}

impl LinkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkMode::Auto => "auto",
            LinkMode::Dhcp => "dhcp",
            LinkMode::Static => "static",
            LinkMode::LinkUp => "link_up",
            LinkMode::Other => "other",
        }
    }
}

/// A MAAS subnet (`GET subnets/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Subnet {
    pub id: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    /// `10.0.0.0/24`, `2001:db8::/64`.
    #[serde(deserialize_with = "null_as_default")]
    pub cidr: String,
    pub gateway_ip: Option<String>,
}

/// One address of a machine: on which interface, in which subnet. Read
/// from the machine's links ([`Machine::addresses`]), not a copy of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InterfaceAddress<'a> {
    pub interface: &'a str,
    pub ip: &'a str,
    pub subnet_cidr: &'a str,
    pub subnet_name: &'a str,
}

/// A MAAS machine: the fields capmaas reads, no more. The MAAS watch keeps
/// one for every machine of its users, so a field nobody reads stays in
/// the JSON (serde skips it without building it). The deploy parameters
/// MAAS echoes (`osystem`, `distro_series`, `hwe_kernel`, ...) are the
/// caller's own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Machine {
    pub system_id: String,
    pub hostname: String,
    pub fqdn: String,
    pub status: MachineStatus,
    /// MAAS's label, kept verbatim for messages.
    pub status_name: String,
    pub status_message: Option<String>,
    pub power_state: PowerState,
    pub power_type: String,
    pub zone: String,
    pub pool: String,
    pub ip_addresses: Vec<String>,
    pub cpu_count: u32,
    /// MiB.
    pub memory: u64,
    /// Decimal megabytes of physical disks, as MAAS reports it.
    pub storage: f64,
    /// Bytes; None when MAAS uses its default.
    pub swap_size: Option<i64>,
    pub architecture: String,
    pub owner: Option<String>,
    /// The owner's key=value data: the JSON's `workload_annotations` (MAAS
    /// 3.0+) and `owner_data` (every MAAS; deprecated from 3.0 on), one
    /// store under two names. A sorted list: the MAAS watch keeps one for
    /// every machine, and a `BTreeMap` node takes 544 bytes for two entries.
    pub owner_data: StringMap,
    pub tag_names: Vec<String>,
    pub boot_interface: Option<Interface>,
    /// The interfaces with their links (`interface_set[].links[]`), as the
    /// interface calls see them; [`Machine::addresses`] reads the linked
    /// addresses from them.
    pub interfaces: Vec<MachineInterface>,
    /// The VM host (`pod`, MAAS ≤ 3.8) a composed VM runs on, by name.
    pub pod: Option<String>,
    pub locked: bool,
}

impl Default for MachineStatus {
    fn default() -> Self {
        MachineStatus::Other(String::new())
    }
}

/// The wire shape, lenient; converted into [`Machine`].
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawInterface {
    id: i64,
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    #[serde(deserialize_with = "charged_list")]
    links: Vec<RawLink>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawLink {
    id: i64,
    #[serde(deserialize_with = "null_as_default")]
    mode: LinkMode,
    ip_address: Option<String>,
    subnet: Option<RawSubnet>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawSubnet {
    id: Option<i64>,
    #[serde(deserialize_with = "null_as_default")]
    name: String,
    #[serde(deserialize_with = "null_as_default")]
    cidr: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawMachine {
    #[serde(deserialize_with = "null_as_default")]
    system_id: String,
    #[serde(deserialize_with = "null_as_default")]
    hostname: String,
    #[serde(deserialize_with = "null_as_default")]
    fqdn: String,
    status: Option<i64>,
    #[serde(deserialize_with = "null_as_default")]
    status_name: String,
    status_message: Option<String>,
    power_state: PowerState,
    #[serde(deserialize_with = "null_as_default")]
    power_type: String,
    #[serde(deserialize_with = "name_of")]
    zone: String,
    #[serde(deserialize_with = "name_of")]
    pool: String,
    #[serde(deserialize_with = "charged_list")]
    ip_addresses: Vec<String>,
    #[serde(deserialize_with = "lenient_u64")]
    cpu_count: u64,
    #[serde(deserialize_with = "lenient_u64")]
    memory: u64,
    #[serde(deserialize_with = "lenient_f64")]
    storage: f64,
    #[serde(deserialize_with = "lenient_opt_i64")]
    swap_size: Option<i64>,
    #[serde(deserialize_with = "null_as_default")]
    architecture: String,
    owner: Option<String>,
    #[serde(deserialize_with = "charged_text_map")]
    owner_data: BTreeMap<String, String>,
    #[serde(deserialize_with = "charged_text_map")]
    workload_annotations: BTreeMap<String, String>,
    #[serde(deserialize_with = "charged_list")]
    tag_names: Vec<String>,
    boot_interface: Option<Interface>,
    #[serde(deserialize_with = "charged_list")]
    interface_set: Vec<RawInterface>,
    pod: Loose,
    #[serde(deserialize_with = "null_as_default")]
    locked: bool,
}

impl<'de> Deserialize<'de> for Machine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawMachine::deserialize(d)?;
        let status = match raw.status.and_then(MachineStatus::from_code) {
            Some(status) => status,
            None => MachineStatus::from_name(&raw.status_name),
        };
        let status_name = if raw.status_name.is_empty() {
            status.name().to_owned()
        } else {
            raw.status_name
        };
        // From MAAS 3.0 on both fields show the same store (`OwnerData`;
        // owner_data is the deprecated name); 2.x has only owner_data, and
        // a later MAAS may drop it. Either one naming the identity counts.
        let mut owner_data = raw.workload_annotations;
        owner_data.extend(raw.owner_data);
        let owner_data: StringMap = owner_data.into_iter().collect();
        let interfaces = interfaces(raw.interface_set);
        // The MAAS watch keeps every listed machine: no list keeps the
        // room serde's doubling left (4 slots for one address).
        let mut ip_addresses = raw.ip_addresses;
        ip_addresses.shrink_to_fit();
        let mut tag_names = raw.tag_names;
        tag_names.shrink_to_fit();
        Ok(Machine {
            system_id: raw.system_id,
            hostname: raw.hostname,
            fqdn: raw.fqdn,
            status,
            status_name,
            status_message: raw.status_message,
            power_state: raw.power_state,
            power_type: raw.power_type,
            zone: raw.zone,
            pool: raw.pool,
            ip_addresses,
            cpu_count: u32::try_from(raw.cpu_count).unwrap_or(u32::MAX),
            memory: raw.memory,
            storage: raw.storage,
            swap_size: raw.swap_size,
            architecture: raw.architecture,
            owner: raw.owner.filter(|o| !o.is_empty()),
            owner_data,
            tag_names,
            boot_interface: raw.boot_interface,
            interfaces,
            pod: match raw.pod {
                Loose::Object { name, .. } => name,
                _ => None,
            },
            locked: raw.locked,
        })
    }
}

/// The interfaces with their links, moving what it can (machine lists
/// decode thousands of these).
fn interfaces(interface_set: Vec<RawInterface>) -> Vec<MachineInterface> {
    let mut interfaces = Vec::with_capacity(interface_set.len());
    for iface in interface_set {
        let mut links = Vec::with_capacity(iface.links.len());
        for link in iface.links {
            let (subnet_id, subnet_cidr, subnet_name) = match link.subnet {
                Some(s) => (s.id, s.cidr, s.name),
                None => (None, String::new(), String::new()),
            };
            links.push(InterfaceLink {
                id: link.id,
                mode: link.mode,
                ip: link.ip_address.filter(|ip| !ip.is_empty()),
                subnet_id,
                subnet_cidr,
                subnet_name,
            });
        }
        interfaces.push(MachineInterface {
            id: iface.id,
            name: iface.name,
            links,
        });
    }
    interfaces
}

impl Machine {
    /// Every address MAAS links to one of the machine's interfaces, with
    /// the interface and subnet it is on, in MAAS's order: which address
    /// is the machine's is a choice on multi-NIC machines.
    pub fn addresses(&self) -> impl Iterator<Item = InterfaceAddress<'_>> {
        self.interfaces.iter().flat_map(|iface| {
            iface.links.iter().filter_map(|link| {
                Some(InterfaceAddress {
                    interface: &iface.name,
                    ip: link.ip.as_deref()?,
                    subnet_cidr: &link.subnet_cidr,
                    subnet_name: &link.subnet_name,
                })
            })
        })
    }

    /// Total physical disk size in GB (MAAS reports decimal MB).
    pub fn storage_gb(&self) -> f64 {
        self.storage / 1000.0
    }
}

/// A machine tag (`GET tags/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Tag {
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub comment: String,
}

/// A zone (failure domain).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Zone {
    pub id: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub description: String,
}

/// An address reserved with `ipaddresses/?op=reserve` (MAAS's
/// USER_RESERVED StaticIPAddress), as `GET ipaddresses/` lists it for the
/// user who reserved it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct IpReservation {
    #[serde(deserialize_with = "null_as_default")]
    pub ip: String,
    #[serde(deserialize_with = "null_as_default")]
    pub alloc_type_name: String,
    pub subnet: Option<ReservationSubnet>,
    /// With `mac=` on the reserve call, the interface MAAS made for that
    /// MAC: the only thing a reservation carries that its maker chose.
    pub interface_set: Vec<ReservationInterface>,
}

impl IpReservation {
    /// Whether the reservation was made with `mac=<mac>`.
    pub fn has_mac(&self, mac: &str) -> bool {
        self.interface_set
            .iter()
            .any(|i| i.mac_address.eq_ignore_ascii_case(mac))
    }
}

/// An interface of a reservation, as far as it names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ReservationInterface {
    #[serde(deserialize_with = "null_as_default")]
    pub mac_address: String,
}

/// The subnet of a reservation, as far as it names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ReservationSubnet {
    pub id: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub cidr: String,
}

/// Where `ipaddresses/?op=reserve` takes the address from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReserveFrom {
    /// This address (`ip=`).
    Address(String),
    /// The next free address of this subnet (`subnet=`: CIDR, name or id).
    Subnet(String),
}

/// A resource pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ResourcePool {
    pub id: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub description: String,
}

/// A DNS domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Domain {
    pub id: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    pub ttl: Option<u32>,
    #[serde(deserialize_with = "null_as_default")]
    pub authoritative: bool,
    #[serde(deserialize_with = "null_as_default")]
    pub is_default: bool,
    #[serde(deserialize_with = "null_as_default")]
    pub resource_record_count: u64,
}

/// A DNS resource (a name with A/AAAA records).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsResource {
    /// `-1` for the synthetic node records MAAS lists with `all=true`.
    pub id: i64,
    pub fqdn: String,
    pub address_ttl: Option<u32>,
    pub ip_addresses: Vec<String>,
    /// Its other resource records (TXT, ...): `resource_records`.
    pub resource_records: Vec<DnsRecordData>,
}

impl<'de> Deserialize<'de> for DnsResource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Address {
            #[serde(default)]
            ip: Option<String>,
        }
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            id: i64,
            #[serde(default, deserialize_with = "null_as_default")]
            fqdn: String,
            #[serde(default)]
            address_ttl: Option<u32>,
            #[serde(default)]
            ip_addresses: Option<Vec<Address>>,
            #[serde(default)]
            resource_records: Option<Vec<DnsRecordData>>,
        }
        let raw = Raw::deserialize(d)?;
        Ok(DnsResource {
            id: raw.id,
            fqdn: raw.fqdn,
            address_ttl: raw.address_ttl,
            ip_addresses: raw
                .ip_addresses
                .unwrap_or_default()
                .into_iter()
                .filter_map(|a| a.ip)
                .collect(),
            resource_records: raw.resource_records.unwrap_or_default(),
        })
    }
}

/// A resource record of a DNS resource other than its addresses (MAAS's
/// DNSData: `rrtype` `TXT`, `CNAME`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DnsRecordData {
    pub id: i64,
    #[serde(deserialize_with = "null_as_default")]
    pub rrtype: String,
    #[serde(deserialize_with = "null_as_default")]
    pub rrdata: String,
}

impl DnsResource {
    /// The data of its TXT records.
    pub fn txt(&self) -> impl Iterator<Item = &str> {
        self.resource_records
            .iter()
            .filter(|r| r.rrtype.eq_ignore_ascii_case("TXT"))
            .map(|r| r.rrdata.as_str())
    }
}

/// A boot resource (an OS image, a bootloader, or an uploaded custom image).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct BootResource {
    pub id: i64,
    /// `Synced`, `Uploaded`, `Generated`.
    #[serde(rename = "type", deserialize_with = "null_as_default")]
    pub kind: String,
    /// `ubuntu/jammy`; uploaded images appear without `custom/` on MAAS ≤ 3.7.
    #[serde(deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(deserialize_with = "null_as_default")]
    pub architecture: String,
    pub title: Option<String>,
    pub base_image: Option<String>,
}

/// The user behind the API key (`users/?op=whoami`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct User {
    #[serde(deserialize_with = "null_as_default")]
    pub username: String,
    #[serde(deserialize_with = "null_as_default")]
    pub email: String,
    #[serde(deserialize_with = "null_as_default")]
    pub is_superuser: bool,
}

/// The owner data key under which capmaas records a machine's identity
/// (`capmaas/<namespace>/<name>/<nonce>`; MAAS allows keys matching
/// `[\w.-]+`). MAAS shows owner data in every machine JSON and clears it on
/// release, so a list tells which machines carry an identity at no extra
/// call.
pub const IDENTITY_KEY: &str = "capmaas-identity";

/// The prefix of every identity capmaas writes under [`IDENTITY_KEY`].
pub const IDENTITY_PREFIX: &str = "capmaas/";

impl Machine {
    /// The capmaas identity in the owner data, when it carries one.
    pub fn identity(&self) -> Option<&str> {
        self.owner_data
            .get(IDENTITY_KEY)
            .map(String::as_str)
            .filter(|id| id.starts_with(IDENTITY_PREFIX))
    }
}

/// The level of a MAAS event (Python logging levels, plus AUDIT below
/// DEBUG; `LOGGING_LEVELS` in canonical/maas
/// `src/maasserver/models/eventtype.py`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventLevel {
    Audit,
    Debug,
    Info,
    Warning,
    Error,
    Critical,
    /// A level this client does not know: MAAS's name.
    Other(String),
}

impl EventLevel {
    pub fn parse(name: &str) -> EventLevel {
        match name {
            "AUDIT" => EventLevel::Audit,
            "DEBUG" => EventLevel::Debug,
            "INFO" => EventLevel::Info,
            "WARNING" => EventLevel::Warning,
            "ERROR" => EventLevel::Error,
            "CRITICAL" => EventLevel::Critical,
            other => EventLevel::Other(other.to_owned()),
        }
    }

    /// MAAS's name, as `level=` takes it.
    pub fn as_str(&self) -> &str {
        match self {
            EventLevel::Audit => "AUDIT",
            EventLevel::Debug => "DEBUG",
            EventLevel::Info => "INFO",
            EventLevel::Warning => "WARNING",
            EventLevel::Error => "ERROR",
            EventLevel::Critical => "CRITICAL",
            EventLevel::Other(name) => name,
        }
    }

    /// WARNING and above: what deserves a Warning where it is shown.
    pub fn is_problem(&self) -> bool {
        matches!(
            self,
            EventLevel::Warning | EventLevel::Error | EventLevel::Critical
        )
    }
}

impl fmt::Display for EventLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name: Option<String> = Option::deserialize(d)?;
        Ok(EventLevel::parse(name.as_deref().unwrap_or("")))
    }
}

/// One entry of a machine's event log (`event_to_dict` in canonical/maas
/// `src/maasserver/api/events.py`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Event {
    /// Grows with every event MAAS records, over all machines.
    pub id: i64,
    /// The machine (`node`).
    #[serde(rename = "node", default, deserialize_with = "null_as_default")]
    pub system_id: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub hostname: String,
    /// Who caused it; `unknown` for MAAS's own events (PXE boot, curtin).
    #[serde(default, deserialize_with = "null_as_default")]
    pub username: String,
    pub level: EventLevel,
    /// As MAAS renders it, second precision, e.g. `Fri, 07 Dec. 2018
    /// 20:11:08`; kept verbatim (it names no time zone).
    #[serde(default, deserialize_with = "null_as_default")]
    pub created: String,
    /// The event type's description, e.g. `Performing PXE boot`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub kind: String,
    /// Details, e.g. `'curtin' curtin command install`; often empty.
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
}

impl Event {
    /// `type - description`, or the type alone: how MAAS itself shows an
    /// event in a machine's `status_message`.
    pub fn message(&self) -> String {
        if self.description.is_empty() {
            self.kind.clone()
        } else {
            format!("{} - {}", self.kind, self.description)
        }
    }
}

/// Most events one `events/?op=query` returns (`MAX_EVENT_LOG_COUNT`; MAAS
/// answers 400 to more).
pub const MAX_EVENT_LIMIT: u32 = 1000;

/// Parameters of `GET events/?op=query`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only these machines (`id`, repeated); empty = every machine the user
    /// may view. Each id adds about 10 bytes to the URL: keep a few hundred
    /// per call.
    pub system_ids: Vec<String>,
    /// Only events with a larger id, oldest `limit` of them (MAAS answers
    /// them newest first all the same). Without it: the newest `limit`.
    pub after: Option<i64>,
    /// This level and above; MAAS's default is INFO.
    pub level: Option<EventLevel>,
    /// MAAS's default is 100; more than [`MAX_EVENT_LIMIT`] is sent as that.
    pub limit: Option<u32>,
}

impl EventQuery {
    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("op", "query".to_owned())];
        q.extend(self.system_ids.iter().map(|v| ("id", v.clone())));
        q.extend(self.level.iter().map(|l| ("level", l.as_str().to_owned())));
        q.extend(
            self.limit
                .map(|l| ("limit", l.clamp(1, MAX_EVENT_LIMIT).to_string())),
        );
        q.extend(self.after.map(|a| ("after", a.to_string())));
        q
    }
}

/// Server-side filters for `GET machines/` (each list is OR-ed by MAAS,
/// except `tags`, which must all be present).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFilter {
    pub system_ids: Vec<String>,
    pub hostnames: Vec<String>,
    pub agent_name: Option<String>,
    pub zone: Option<String>,
    pub pool: Option<String>,
    pub tags: Vec<String>,
    pub owner: Option<String>,
    /// Lower-case filter names, e.g. `deployed` ([`MachineStatus::filter_name`]).
    pub statuses: Vec<String>,
    /// Applied by the client after listing: MAAS cannot filter on owner data.
    pub owner_data: Vec<(String, String)>,
}

impl MachineFilter {
    pub fn by_agent_name(agent_name: &str) -> MachineFilter {
        MachineFilter {
            agent_name: Some(agent_name.to_owned()),
            ..MachineFilter::default()
        }
    }

    pub fn by_hostname(hostname: &str) -> MachineFilter {
        MachineFilter {
            hostnames: vec![hostname.to_owned()],
            ..MachineFilter::default()
        }
    }

    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        q.extend(self.system_ids.iter().map(|v| ("id", v.clone())));
        q.extend(self.hostnames.iter().map(|v| ("hostname", v.clone())));
        q.extend(self.agent_name.iter().map(|v| ("agent_name", v.clone())));
        q.extend(self.zone.iter().map(|v| ("zone", v.clone())));
        q.extend(self.pool.iter().map(|v| ("pool", v.clone())));
        q.extend(self.tags.iter().map(|v| ("tags", v.clone())));
        q.extend(self.owner.iter().map(|v| ("owner", v.clone())));
        q.extend(self.statuses.iter().map(|v| ("status", v.clone())));
        q
    }

    pub(crate) fn matches_owner_data(&self, machine: &Machine) -> bool {
        self.owner_data
            .iter()
            .all(|(k, v)| machine.owner_data.get(k) == Some(v))
    }
}

/// Constraints and identity for `op=allocate`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocateRequest {
    /// Minimum CPU count.
    pub cpu_count: Option<u32>,
    /// Minimum memory in MiB.
    pub mem: Option<u64>,
    pub pool: Option<String>,
    pub zone: Option<String>,
    /// The machine must have all of these.
    pub tags: Vec<String>,
    pub not_tags: Vec<String>,
    /// Minimum size of the root (first) disk in GB, sent as `storage=root:<gb>`
    /// unless [`AllocateRequest::storage`] says more.
    pub min_disk_gb: Option<u64>,
    /// MAAS's storage constraint, verbatim (`label:size(tag,...),...`, sizes
    /// in GB); replaces `min_disk_gb`.
    pub storage: Option<String>,
    /// MAAS's interfaces constraint, verbatim (`label:key=value,...;...`).
    pub interfaces: Option<String>,
    /// Architectures, any of (`amd64`, `arm64/generic`).
    pub arch: Vec<String>,
    /// Zones the machine must not be in.
    pub not_in_zone: Vec<String>,
    pub system_id: Option<String>,
    /// Hostname or FQDN.
    pub name: Option<String>,
    /// Stored on the machine by MAAS and filterable with
    /// [`MachineFilter::agent_name`]: how a caller finds an allocation it
    /// made but never saw the answer to.
    pub agent_name: Option<String>,
    pub comment: Option<String>,
    /// Pick a machine but do not allocate it.
    pub dry_run: bool,
}

impl AllocateRequest {
    pub(crate) fn form(&self) -> Vec<(&'static str, String)> {
        let mut f = Vec::new();
        f.extend(self.cpu_count.map(|v| ("cpu_count", v.to_string())));
        f.extend(self.mem.map(|v| ("mem", v.to_string())));
        f.extend(self.pool.iter().map(|v| ("pool", v.clone())));
        f.extend(self.zone.iter().map(|v| ("zone", v.clone())));
        f.extend(self.tags.iter().map(|v| ("tags", v.clone())));
        f.extend(self.not_tags.iter().map(|v| ("not_tags", v.clone())));
        f.extend(self.not_in_zone.iter().map(|v| ("not_in_zone", v.clone())));
        f.extend(self.arch.iter().map(|v| ("arch", v.clone())));
        match &self.storage {
            Some(storage) => f.push(("storage", storage.clone())),
            None => f.extend(self.min_disk_gb.map(|gb| ("storage", format!("root:{gb}")))),
        }
        f.extend(self.interfaces.iter().map(|v| ("interfaces", v.clone())));
        f.extend(self.system_id.iter().map(|v| ("system_id", v.clone())));
        f.extend(self.name.iter().map(|v| ("name", v.clone())));
        f.extend(self.agent_name.iter().map(|v| ("agent_name", v.clone())));
        f.extend(self.comment.iter().map(|v| ("comment", v.clone())));
        if self.dry_run {
            f.push(("dry_run", "true".into()));
        }
        f
    }
}

/// A VM host (`GET vm-hosts/`, MAAS ≤ 3.8; `pods/` before 2.9): where
/// MAAS composes VMs. Only what choosing one needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmHost {
    pub id: i64,
    pub name: String,
    /// `lxd` or `virsh`.
    pub kind: String,
    pub tags: Vec<String>,
    pub zone: String,
    pub zone_id: Option<i64>,
    pub pool: String,
    pub pool_id: Option<i64>,
    /// The system_id of the machine it runs on (None: a host MAAS does
    /// not manage).
    pub host: Option<String>,
    /// What is free (`available`): cores, memory (MiB), local storage (bytes).
    pub free_cores: f64,
    pub free_memory: f64,
    pub free_storage: f64,
}

impl VmHost {
    /// Read field by field from the JSON of one VM host (a derive would
    /// cost more binary than the few fields read).
    pub(crate) fn from_json(v: &serde_json::Value) -> VmHost {
        let at = |path: &str| v.pointer(path).unwrap_or(&serde_json::Value::Null);
        let text = |path: &str| at(path).as_str().unwrap_or_default().to_string();
        VmHost {
            id: at("/id").as_i64().unwrap_or(0),
            name: text("/name"),
            kind: text("/type"),
            tags: at("/tags")
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
            zone: text("/zone/name"),
            zone_id: at("/zone/id").as_i64(),
            pool: text("/pool/name"),
            pool_id: at("/pool/id").as_i64(),
            host: at("/host/system_id").as_str().map(str::to_string),
            free_cores: at("/available/cores").as_f64().unwrap_or(0.0),
            free_memory: at("/available/memory").as_f64().unwrap_or(0.0),
            free_storage: at("/available/local_storage").as_f64().unwrap_or(0.0),
        }
    }
}

/// `POST vm-hosts/<id>/?op=compose` (`ComposeMachineForm`): `zone` and
/// `pool` are ids, `memory` MiB, the one disk GB.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComposeRequest {
    pub hostname: String,
    pub cores: u32,
    pub memory_mib: u64,
    pub disk_gb: u64,
    pub zone_id: Option<i64>,
    pub pool_id: Option<i64>,
}

impl ComposeRequest {
    pub(crate) fn form(&self) -> Vec<(&'static str, String)> {
        let mut f = vec![
            ("hostname", self.hostname.clone()),
            ("cores", self.cores.to_string()),
            ("memory", self.memory_mib.to_string()),
            ("storage", format!("root:{}", self.disk_gb)),
        ];
        f.extend(self.zone_id.map(|id| ("zone", id.to_string())));
        f.extend(self.pool_id.map(|id| ("pool", id.to_string())));
        f
    }
}

/// Parameters for `op=deploy`. `Debug` shows the size of `user_data`, never
/// its content: cloud-init user data carries bootstrap tokens.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DeployRequest {
    /// As users write it: `custom/u-2204-0-k-1264-0`, `ubuntu/jammy`,
    /// `jammy`. None = MAAS's default series.
    pub image: Option<String>,
    /// Raw cloud-init user data; the client base64-encodes it.
    pub user_data: Option<Vec<u8>>,
    /// Deploy to RAM only.
    pub ephemeral_deploy: bool,
    pub hwe_kernel: Option<String>,
    /// MAAS 3.2+ (`enable_hw_sync`); None: not sent.
    pub enable_hw_sync: Option<bool>,
    /// MAAS 3.6+ (`enable_kernel_crash_dump`); None: not sent, MAAS's
    /// global setting applies.
    pub enable_kernel_crash_dump: Option<bool>,
    pub agent_name: Option<String>,
    pub comment: Option<String>,
}

impl fmt::Debug for DeployRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let user_data = self
            .user_data
            .as_ref()
            .map(|d| format!("<{} bytes redacted>", d.len()));
        f.debug_struct("DeployRequest")
            .field("image", &self.image)
            .field("user_data", &user_data)
            .field("ephemeral_deploy", &self.ephemeral_deploy)
            .field("hwe_kernel", &self.hwe_kernel)
            .field("enable_hw_sync", &self.enable_hw_sync)
            .field("enable_kernel_crash_dump", &self.enable_kernel_crash_dump)
            .field("agent_name", &self.agent_name)
            .field("comment", &self.comment)
            .finish()
    }
}

impl DeployRequest {
    pub(crate) fn form(&self) -> Vec<(&'static str, String)> {
        use base64::Engine as _;
        let mut f = Vec::new();
        if let Some(image) = &self.image {
            // MAAS ignores `osystem` and resolves the image from
            // `distro_series` alone, which accepts `os/series` and custom
            // names with or without `custom/`. `osystem` is sent only so a
            // request in a proxy log reads naturally.
            if let Some((os, _)) = image.split_once('/') {
                f.push(("osystem", os.to_owned()));
            }
            f.push(("distro_series", image.clone()));
        }
        if let Some(data) = &self.user_data {
            f.push((
                "user_data",
                base64::engine::general_purpose::STANDARD.encode(data),
            ));
        }
        if self.ephemeral_deploy {
            f.push(("ephemeral_deploy", "true".into()));
        }
        f.extend(self.hwe_kernel.iter().map(|v| ("hwe_kernel", v.clone())));
        f.extend(
            self.enable_hw_sync
                .map(|v| ("enable_hw_sync", v.to_string())),
        );
        f.extend(
            self.enable_kernel_crash_dump
                .map(|v| ("enable_kernel_crash_dump", v.to_string())),
        );
        f.extend(self.agent_name.iter().map(|v| ("agent_name", v.clone())));
        f.extend(self.comment.iter().map(|v| ("comment", v.clone())));
        f
    }
}

/// Parameters for `op=release`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseRequest {
    pub erase: bool,
    pub secure_erase: bool,
    pub quick_erase: bool,
    pub force: bool,
    pub comment: Option<String>,
}

impl ReleaseRequest {
    pub(crate) fn form(&self) -> Vec<(&'static str, String)> {
        let mut f = Vec::new();
        for (flag, name) in [
            (self.erase, "erase"),
            (self.secure_erase, "secure_erase"),
            (self.quick_erase, "quick_erase"),
            (self.force, "force"),
        ] {
            if flag {
                f.push((name, "true".to_owned()));
            }
        }
        f.extend(self.comment.iter().map(|v| ("comment", v.clone())));
        f
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `{"name": "zone-a", ...}` or `"zone-a"` or null → the name.
fn name_of<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Loose::deserialize(d)? {
        Loose::Str(s) => s,
        Loose::Object { name, .. } => name.unwrap_or_default(),
        _ => String::new(),
    })
}

fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Loose::deserialize(d)?.as_f64().unwrap_or(0.0))
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = lenient_f64(d)?;
    Ok(if v.is_finite() && v > 0.0 {
        v as u64
    } else {
        0
    })
}

fn lenient_opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Loose::deserialize(d)?.as_i64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MAAS watch keeps one per machine of its users, two while a
    /// changed list is compared (issue 19 item 11): 720 bytes inline when
    /// it held every field MAAS sends that the client knew.
    #[test]
    fn a_machine_holds_only_what_capmaas_reads() {
        // The MAAS watch keeps each in an `Arc` (16 bytes more): with
        // musl's 4-byte header, at most 476 fits its 496-byte size class.
        let size = size_of::<Machine>();
        println!("size_of::<Machine>() = {size} bytes");
        assert!(size <= 476, "{size} bytes");
    }

    #[test]
    fn a_vm_host_is_read_from_maas_json() {
        let v = serde_json::json!({"id": 3, "name": "lxd-1", "type": "lxd", "tags": ["fast", 7],
            "zone": {"id": 2, "name": "zone-a"}, "pool": {"id": 1, "name": "vms"},
            "host": {"system_id": "abc123", "__incomplete__": true},
            "available": {"cores": 6, "memory": 12288, "local_storage": 4.6e11}});
        let h = VmHost::from_json(&v);
        assert_eq!(
            (h.id, h.name.as_str(), h.kind.as_str()),
            (3, "lxd-1", "lxd")
        );
        assert_eq!(h.tags, vec!["fast".to_string()]);
        assert_eq!(
            (h.zone.as_str(), h.zone_id, h.pool_id),
            ("zone-a", Some(2), Some(1))
        );
        assert_eq!(h.host.as_deref(), Some("abc123"));
        assert_eq!(
            (h.free_cores, h.free_memory, h.free_storage),
            (6.0, 12288.0, 4.6e11)
        );
        let unmanaged =
            VmHost::from_json(&serde_json::json!({"id": 4, "host": {"system_id": null}}));
        assert_eq!((unmanaged.host, unmanaged.zone_id), (None, None));
    }

    #[test]
    fn status_codes_and_names_round_trip() {
        for code in 0..=22 {
            let status = MachineStatus::from_code(code).unwrap();
            assert_eq!(status.code(), Some(code));
            assert_eq!(MachineStatus::from_name(status.name()), status);
        }
        assert_eq!(
            MachineStatus::from_code(13).unwrap().name(),
            "Releasing failed"
        );
        assert_eq!(
            MachineStatus::from_name("Something new"),
            MachineStatus::Other("Something new".into())
        );
    }

    #[test]
    fn minimal_machine_parses() {
        let m: Machine = serde_json::from_str(
            r#"{"system_id":"abc","status":6,"zone":{"name":"z"},"pool":null,
                "ip_addresses":null,"owner_data":{"a":"b"},"power_state":"on","memory":4096}"#,
        )
        .unwrap();
        assert_eq!(m.status, MachineStatus::Deployed);
        assert_eq!(m.status_name, "Deployed");
        assert_eq!(m.zone, "z");
        assert_eq!(m.pool, "");
        assert_eq!(m.power_state, PowerState::On);
        assert_eq!(m.owner_data.get("a").map(String::as_str), Some("b"));
        assert_eq!(m.memory, 4096);
    }

    #[test]
    fn events_parse_as_maas_renders_them() {
        // `event_to_dict`: a curtin failure, and a system event whose node
        // and description MAAS may send as null.
        let events: Vec<Event> = serde_json::from_str(
            r#"[{"username": "unknown", "node": "7xtf67", "hostname": "node-1", "id": 1667,
                 "level": "ERROR", "created": "Fri, 07 Dec. 2018 20:11:08",
                 "type": "Node installation failure",
                 "description": "'curtin' curtin command install"},
                {"username": "admin", "node": null, "hostname": "node-2", "id": 12,
                 "level": "NOTICE", "created": "Fri, 07 Dec. 2018 20:11:09",
                 "type": "Deployed", "description": null}]"#,
        )
        .unwrap();
        assert_eq!(events[0].id, 1667);
        assert_eq!(events[0].system_id, "7xtf67");
        assert_eq!(events[0].level, EventLevel::Error);
        assert!(events[0].level.is_problem());
        assert_eq!(
            events[0].message(),
            "Node installation failure - 'curtin' curtin command install"
        );
        assert_eq!(events[1].system_id, "");
        assert_eq!(events[1].level, EventLevel::Other("NOTICE".into()));
        assert_eq!(events[1].message(), "Deployed");
        let missing: Event = serde_json::from_str(r#"{"id": 3}"#).unwrap();
        assert_eq!(missing.level, EventLevel::Other(String::new()));
        assert!(
            serde_json::from_str::<Event>(r#"{"node": "x"}"#).is_err(),
            "an event has an id"
        );
    }

    #[test]
    fn event_query_repeats_ids_and_caps_the_limit() {
        let query = EventQuery {
            system_ids: vec!["a".into(), "b".into()],
            after: Some(41),
            level: Some(EventLevel::Debug),
            limit: Some(5000),
        };
        assert_eq!(
            query.query(),
            vec![
                ("op", "query".to_owned()),
                ("id", "a".into()),
                ("id", "b".into()),
                ("level", "DEBUG".into()),
                ("limit", "1000".into()),
                ("after", "41".into()),
            ]
        );
        assert_eq!(
            EventQuery::default().query(),
            vec![("op", "query".to_owned())]
        );
    }

    /// Issue 22 item 5: an identity written as owner data (MAAS 2.x, or an
    /// older capmaas) and one written as a workload annotation are found
    /// whichever of the two fields MAAS renders.
    #[test]
    fn identity_is_read_from_workload_annotations_or_owner_data() {
        let id = "capmaas/ns/mm/uid";
        let parse = |fields: &str| -> Machine {
            serde_json::from_str(&format!(r#"{{"system_id":"abc",{fields}}}"#)).unwrap()
        };
        for fields in [
            // MAAS 2.x: owner_data only.
            format!(r#""owner_data":{{"{IDENTITY_KEY}":"{id}"}}"#),
            // A MAAS that dropped the deprecated name.
            format!(r#""workload_annotations":{{"{IDENTITY_KEY}":"{id}"}}"#),
            // MAAS 3.0 to 3.7: both names, one store.
            format!(
                r#""owner_data":{{"{IDENTITY_KEY}":"{id}","a":"b"}},
                   "workload_annotations":{{"{IDENTITY_KEY}":"{id}","a":"b"}}"#
            ),
        ] {
            let m = parse(&fields);
            assert_eq!(m.identity(), Some(id), "{fields}");
        }
        let both = parse(r#""owner_data":{"a":"1"},"workload_annotations":{"b":"2"}"#);
        assert_eq!(both.owner_data.len(), 2, "{:?}", both.owner_data);
        assert_eq!(parse(r#""owner_data":null"#).identity(), None);
    }

    #[test]
    fn identity_is_read_from_owner_data_only_when_it_is_capmaas_s() {
        let mut m = Machine::default();
        assert_eq!(m.identity(), None);
        m.owner_data.insert(IDENTITY_KEY.into(), "juju/x".into());
        assert_eq!(m.identity(), None);
        m.owner_data
            .insert(IDENTITY_KEY.into(), "capmaas/ns/mm/uid".into());
        assert_eq!(m.identity(), Some("capmaas/ns/mm/uid"));
    }

    /// Issue 12 item 4: the derived Debug printed the user data, whose
    /// cloud-init carries the kubeadm bootstrap token.
    #[test]
    fn deploy_request_debug_hides_user_data() {
        let request = DeployRequest {
            image: Some("ubuntu/jammy".into()),
            user_data: Some(b"#cloud-config\ntoken: abcdef.0123456789abcdef\n".to_vec()),
            ..DeployRequest::default()
        };
        let shown = format!("{request:?} {request:#?}");
        assert!(!shown.contains("abcdef"), "{shown}");
        assert!(!shown.contains("99, 108, 111"), "{shown}");
        assert!(shown.contains("<45 bytes redacted>"), "{shown}");
        assert!(shown.contains("ubuntu/jammy"), "{shown}");
    }

    #[test]
    fn deploy_form_base64s_user_data_and_keeps_custom_prefix() {
        let req = DeployRequest {
            image: Some("custom/u-2204-0-k-1264-0".into()),
            user_data: Some(b"#cloud-config\n".to_vec()),
            ephemeral_deploy: true,
            ..DeployRequest::default()
        };
        let form = req.form();
        assert!(form.contains(&("distro_series", "custom/u-2204-0-k-1264-0".into())));
        assert!(form.contains(&("osystem", "custom".into())));
        assert!(form.contains(&("user_data", "I2Nsb3VkLWNvbmZpZwo=".into())));
        assert!(form.contains(&("ephemeral_deploy", "true".into())));
    }

    /// Issue 22: `ubuntu/noble` and `rhel/9` go to MAAS whole in
    /// `distro_series` (MAAS 3.4.8 `set_distro_series` ignores the posted
    /// `osystem` and splits `os/series` itself); the per-template options
    /// go only when set.
    #[test]
    fn deploy_form_sends_os_series_whole_and_options_only_when_set() {
        for image in ["ubuntu/noble", "rhel/9", "centos/centos70"] {
            let form = DeployRequest {
                image: Some(image.into()),
                ..DeployRequest::default()
            }
            .form();
            let os = image.split('/').next().unwrap();
            assert_eq!(
                form,
                vec![
                    ("osystem", os.to_owned()),
                    ("distro_series", image.to_owned())
                ]
            );
        }
        let bare = DeployRequest {
            image: Some("noble".into()),
            ..DeployRequest::default()
        };
        assert_eq!(bare.form(), vec![("distro_series", "noble".to_owned())]);

        let with_options = DeployRequest {
            hwe_kernel: Some("hwe-24.04".into()),
            enable_hw_sync: Some(true),
            enable_kernel_crash_dump: Some(false),
            ..DeployRequest::default()
        };
        assert_eq!(
            with_options.form(),
            vec![
                ("hwe_kernel", "hwe-24.04".to_owned()),
                ("enable_hw_sync", "true".into()),
                ("enable_kernel_crash_dump", "false".into()),
            ]
        );
    }

    #[test]
    fn allocate_form_repeats_tags_and_sends_storage() {
        let req = AllocateRequest {
            tags: vec!["a".into(), "b".into()],
            min_disk_gb: Some(50),
            mem: Some(8192),
            ..AllocateRequest::default()
        };
        let form = req.form();
        assert_eq!(
            form,
            vec![
                ("mem", "8192".to_owned()),
                ("tags", "a".into()),
                ("tags", "b".into()),
                ("storage", "root:50".into())
            ]
        );
    }

    #[test]
    fn allocate_form_passes_constraints_through() {
        let req = AllocateRequest {
            not_tags: vec!["gpu".into()],
            not_in_zone: vec!["z9".into()],
            arch: vec!["arm64".into()],
            min_disk_gb: Some(50),
            storage: Some("root:100(ssd),data:500".into()),
            interfaces: Some("eth0:subnet=10.0.0.0/24;eth1:fabric=storage".into()),
            ..AllocateRequest::default()
        };
        assert_eq!(
            req.form(),
            vec![
                ("not_tags", "gpu".to_owned()),
                ("not_in_zone", "z9".into()),
                ("arch", "arm64".into()),
                ("storage", "root:100(ssd),data:500".into()),
                (
                    "interfaces",
                    "eth0:subnet=10.0.0.0/24;eth1:fabric=storage".into()
                ),
            ],
            "the storage constraint replaces minDiskSize's root size"
        );
    }

    #[test]
    fn machine_addresses_carry_their_interface_and_subnet() {
        let machine: Machine = serde_json::from_value(serde_json::json!({
            "system_id": "abc", "ip_addresses": ["10.11.130.5", "10.20.0.5"],
            "interface_set": [
                {"name": "eth0", "links": [{"mode": "auto", "ip_address": "10.11.130.5",
                                            "subnet": {"name": "pxe", "cidr": "10.11.130.0/24"}}]},
                {"name": "eth1", "links": [{"mode": "static", "ip_address": "10.20.0.5",
                                            "subnet": {"name": "cluster", "cidr": "10.20.0.0/24"}},
                                           {"mode": "link_up", "subnet": null}]},
                {"name": "eth2", "links": null},
            ],
        }))
        .unwrap();
        assert_eq!(
            machine.addresses().collect::<Vec<_>>(),
            vec![
                InterfaceAddress {
                    interface: "eth0",
                    ip: "10.11.130.5",
                    subnet_cidr: "10.11.130.0/24",
                    subnet_name: "pxe",
                },
                InterfaceAddress {
                    interface: "eth1",
                    ip: "10.20.0.5",
                    subnet_cidr: "10.20.0.0/24",
                    subnet_name: "cluster",
                },
            ]
        );
    }
}
