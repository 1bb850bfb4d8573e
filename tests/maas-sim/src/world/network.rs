//! Networks: subnets (each on a VLAN of a fabric), machine interfaces with
//! their links to subnets, and the addresses MAAS hands out, as MAAS's
//! models hold them (`Subnet`, `Interface`, `StaticIPAddress`):
//!
//! - a link is AUTO (an address claimed from the subnet when the machine
//!   deploys, released when it is released: `claim_auto_ips`,
//!   `release_auto_ips`), STATIC (an address fixed now, kept across
//!   releases), DHCP (a lease while deployed) or LINK_UP (no address);
//! - a machine's `ip_addresses` are its links' addresses, boot interface
//!   first (`Node.static_ip_addresses`);
//! - a free address is one no machine link, reservation or DNS resource
//!   uses, that no inventory plan promises to a machine, and that is not the
//!   subnet's network, broadcast or gateway address.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{json, Value};

use super::{fail, Outcome, World};
use crate::inventory::{InterfaceEntry, LinkEntry, SubnetEntry};

/// A network in CIDR form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.split_once('/')?;
        let addr: IpAddr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return None;
        }
        let network = from_bits(to_bits(addr) & mask(prefix, bits), addr.is_ipv4());
        Some(Cidr { network, prefix })
    }

    fn bits(&self) -> u8 {
        if self.network.is_ipv4() {
            32
        } else {
            128
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.network.is_ipv4()
            && to_bits(ip) & mask(self.prefix, self.bits()) == to_bits(self.network)
    }

    /// The usable host addresses, lowest first (IPv4 without network and
    /// broadcast unless /31 or /32; IPv6 without the subnet-router anycast).
    pub fn hosts(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let size_bits = self.bits() - self.prefix;
        let first = to_bits(self.network);
        let last = first | mask_low(size_bits);
        let (skip_first, skip_last) = match (self.network.is_ipv4(), size_bits) {
            (true, 0 | 1) => (false, false),
            (true, _) => (true, true),
            (false, 0) => (false, false),
            (false, _) => (true, false),
        };
        let start = first + u128::from(skip_first);
        let end = last - u128::from(skip_last);
        let v4 = self.network.is_ipv4();
        (start..=end).map(move |b| from_bits(b, v4))
    }
}

fn to_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_bits(bits: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::from((bits as u32).to_be_bytes())
    } else {
        IpAddr::from(bits.to_be_bytes())
    }
}

fn mask(prefix: u8, bits: u8) -> u128 {
    mask_low(bits) & !mask_low(bits - prefix)
}

fn mask_low(n: u8) -> u128 {
    if n >= 128 {
        u128::MAX
    } else {
        (1u128 << n) - 1
    }
}

/// A VLAN on a fabric.
#[derive(Debug, Clone)]
pub struct Vlan {
    pub id: i64,
    pub vid: u16,
    pub fabric: String,
    pub fabric_id: i64,
    pub mtu: u32,
    /// Its JSON, rendered once.
    pub json: String,
}

#[derive(Debug, Clone)]
pub struct SubnetRec {
    pub id: i64,
    pub name: String,
    pub cidr: Cidr,
    pub cidr_text: String,
    pub gateway_ip: Option<String>,
    pub dns_servers: Vec<String>,
    pub vlan: Vlan,
    pub space: String,
    pub description: String,
    pub managed: bool,
    /// Its JSON, rendered once (subnets do not change).
    pub json: String,
}

/// How an interface is linked to a subnet (`INTERFACE_LINK_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    Auto,
    Dhcp,
    Static,
    LinkUp,
}

impl LinkMode {
    /// The form value, case-insensitive (`CaseInsensitiveChoiceField`).
    pub fn parse(text: &str) -> Option<LinkMode> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Some(LinkMode::Auto),
            "dhcp" => Some(LinkMode::Dhcp),
            "static" => Some(LinkMode::Static),
            "link_up" => Some(LinkMode::LinkUp),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkMode::Auto => "auto",
            LinkMode::Dhcp => "dhcp",
            LinkMode::Static => "static",
            LinkMode::LinkUp => "link_up",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Link {
    pub id: i64,
    pub mode: LinkMode,
    pub subnet_id: Option<i64>,
    /// The address in use now.
    pub ip: Option<String>,
    /// The inventory's choice for an AUTO or DHCP link, used when free.
    pub planned: Option<String>,
}

/// An address reserved with `ipaddresses/?op=reserve` (USER_RESERVED).
#[derive(Debug, Clone)]
pub struct Reservation {
    /// Its StaticIPAddress id (links and reservations share the sequence).
    pub id: i64,
    pub ip: IpAddr,
    pub subnet_id: i64,
    pub username: String,
    pub hostname: Option<String>,
    pub mac: Option<String>,
    pub created: std::time::SystemTime,
}

#[derive(Debug, Clone)]
pub struct Interface {
    pub id: i64,
    pub name: String,
    pub mac_address: String,
    /// The VLAN it is connected to (its subnets' VLAN).
    pub vlan_id: i64,
    pub links: Vec<Link>,
}

impl World {
    /// Subnets from the inventory: `subnets`, after the legacy single
    /// `subnet`; each subnet's VLAN is its own untagged VLAN on its own
    /// fabric unless the inventory names one. Without any: 127.10.0.0/24.
    pub(super) fn load_subnets(&mut self, entries: &[SubnetEntry]) -> Result<(), String> {
        let default = [SubnetEntry {
            cidr: "127.10.0.0/24".into(),
            gateway_ip: Some("127.10.0.1".into()),
            ..SubnetEntry::default()
        }];
        let entries = if entries.is_empty() {
            &default[..]
        } else {
            entries
        };
        for (i, e) in entries.iter().enumerate() {
            let cidr =
                Cidr::parse(&e.cidr).ok_or_else(|| format!("subnet {}: bad CIDR", e.cidr))?;
            if self.subnets.iter().any(|s| s.cidr == cidr) {
                return Err(format!("subnet {} given twice", e.cidr));
            }
            let fabric = e
                .vlan
                .as_ref()
                .and_then(|v| v.fabric.clone())
                .unwrap_or_else(|| format!("fabric-{i}"));
            let vid = e.vlan.as_ref().map_or(0, |v| v.vid);
            let fabric_id = match self.subnets.iter().find(|s| s.vlan.fabric == fabric) {
                Some(s) => s.vlan.fabric_id,
                None => self
                    .subnets
                    .iter()
                    .map(|s| s.vlan.fabric_id + 1)
                    .max()
                    .unwrap_or(0),
            };
            let vlan = match self
                .subnets
                .iter()
                .find(|s| s.vlan.fabric == fabric && s.vlan.vid == vid)
            {
                Some(s) => s.vlan.clone(),
                None => {
                    let mut vlan = Vlan {
                        id: 5001 + self.subnets.len() as i64,
                        vid,
                        fabric,
                        fabric_id,
                        mtu: e.vlan.as_ref().and_then(|v| v.mtu).unwrap_or(1500),
                        json: String::new(),
                    };
                    vlan.json = vlan_json(&vlan).to_string();
                    vlan
                }
            };
            if let Some(gw) = &e.gateway_ip {
                let ok = gw.parse::<IpAddr>().is_ok_and(|ip| cidr.contains(ip));
                if !ok {
                    return Err(format!("subnet {}: gateway {gw} is not in it", e.cidr));
                }
            }
            let mut subnet = SubnetRec {
                id: self.subnets.len() as i64 + 1,
                name: e.name.clone().unwrap_or_else(|| e.cidr.clone()),
                cidr,
                cidr_text: e.cidr.clone(),
                gateway_ip: e.gateway_ip.clone(),
                dns_servers: e.dns_servers.clone(),
                vlan,
                space: e.space.clone().unwrap_or_else(|| "undefined".into()),
                description: e.description.clone().unwrap_or_default(),
                managed: true,
                json: String::new(),
            };
            subnet.json = subnet_json(&subnet).to_string();
            self.subnets.push(subnet);
        }
        Ok(())
    }

    /// A subnet by specifier: id, CIDR, `name:<name>`, `cidr:<cidr>` or a
    /// bare name (`Subnet.objects.get_object_by_specifiers_or_raise`).
    pub fn subnet_by_ref(&self, r: &str) -> Option<&SubnetRec> {
        let r = r.trim();
        if let Some(name) = r.strip_prefix("name:") {
            return self.subnets.iter().find(|s| s.name == name);
        }
        let r = r.strip_prefix("cidr:").unwrap_or(r);
        self.subnets.iter().find(|s| {
            s.id.to_string() == r
                || s.cidr_text == r
                || Cidr::parse(r).is_some_and(|c| c == s.cidr)
                || s.name == r
        })
    }

    /// The most specific subnet containing `ip`
    /// (`get_best_subnet_for_ip`).
    pub fn subnet_for_ip(&self, ip: IpAddr) -> Option<&SubnetRec> {
        self.subnets
            .iter()
            .filter(|s| s.cidr.contains(ip))
            .max_by_key(|s| s.cidr.prefix)
    }

    pub fn subnet(&self, id: i64) -> Option<&SubnetRec> {
        self.subnets.iter().find(|s| s.id == id)
    }

    /// A machine's interfaces from its inventory entry: `interfaces`, or
    /// the legacy form (one `eth0` with `mac_address` and an AUTO link per
    /// `ip_addresses` entry, on the subnet holding it; without addresses one
    /// AUTO link on the first subnet).
    pub(super) fn build_interfaces(
        &mut self,
        seq: u64,
        hostname: &str,
        entries: &[InterfaceEntry],
        legacy_ips: &[String],
        legacy_mac: Option<&str>,
        assigned: bool,
    ) -> Result<Vec<Interface>, String> {
        let default_mac = |i: u64| {
            format!(
                "52:54:{:02x}:{:02x}:{:02x}:{:02x}",
                i & 0xff,
                seq >> 16 & 0xff,
                seq >> 8 & 0xff,
                seq & 0xff
            )
        };
        let legacy;
        let entries_are_legacy = entries.is_empty();
        let entries = if entries.is_empty() {
            let links: Vec<LinkEntry> = if legacy_ips.is_empty() {
                vec![LinkEntry::default()]
            } else {
                legacy_ips
                    .iter()
                    .map(|ip| LinkEntry {
                        ip_address: Some(ip.clone()),
                        ..LinkEntry::default()
                    })
                    .collect()
            };
            legacy = [InterfaceEntry {
                name: "eth0".into(),
                mac_address: legacy_mac.map(str::to_owned),
                links,
            }];
            &legacy[..]
        } else {
            entries
        };
        let mut interfaces = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let mut links = Vec::new();
            let mut vlan_id = None;
            for l in &e.links {
                let mode = LinkMode::parse(l.mode.as_deref().unwrap_or("auto"))
                    .ok_or_else(|| format!("machine {hostname}: unknown link mode"))?;
                let ip: Option<IpAddr> = match &l.ip_address {
                    Some(text) => Some(
                        text.parse()
                            .map_err(|_| format!("machine {hostname}: bad address {text}"))?,
                    ),
                    None => None,
                };
                if let (true, None, Some(ip)) = (entries_are_legacy, &l.subnet, ip) {
                    // Older inventories gave addresses without subnets: an
                    // address outside every subnet brings its own /24 (/64).
                    if self.subnet_for_ip(ip).is_none() {
                        let prefix = if ip.is_ipv4() { 24 } else { 64 };
                        self.load_subnets(&[SubnetEntry {
                            cidr: Cidr::parse(&format!("{ip}/{prefix}"))
                                .map(|c| format!("{}/{prefix}", c.network))
                                .unwrap_or_default(),
                            ..SubnetEntry::default()
                        }])?;
                    }
                }
                let subnet = match (&l.subnet, ip) {
                    (Some(r), _) => self.subnet_by_ref(r),
                    (None, Some(ip)) => self.subnet_for_ip(ip),
                    (None, None) => self.subnets.first(),
                }
                .ok_or_else(|| format!("machine {hostname}: no subnet for link {l:?}"))?;
                if let Some(ip) = ip {
                    if !subnet.cidr.contains(ip) {
                        return Err(format!(
                            "machine {hostname}: {ip} is not in {}",
                            subnet.cidr_text
                        ));
                    }
                }
                vlan_id.get_or_insert(subnet.vlan.id);
                let subnet_id = subnet.id;
                self.next_link_id += 1;
                let ip = ip.map(|ip| ip.to_string());
                links.push(Link {
                    id: self.next_link_id,
                    mode,
                    subnet_id: Some(subnet_id),
                    ip: match mode {
                        LinkMode::Static => ip.clone(),
                        LinkMode::Auto | LinkMode::Dhcp if assigned => ip.clone(),
                        _ => None,
                    },
                    planned: ip,
                });
            }
            interfaces.push(Interface {
                id: seq as i64 * 10 + i as i64,
                name: e.name.clone(),
                mac_address: e
                    .mac_address
                    .clone()
                    .unwrap_or_else(|| default_mac(i as u64)),
                vlan_id: vlan_id.unwrap_or_else(|| self.subnets[0].vlan.id),
                links,
            });
        }
        Ok(interfaces)
    }

    /// Addresses in use now: machine links, reservations, DNS resources.
    pub fn addresses_in_use(&self) -> HashSet<IpAddr> {
        let mut used = HashSet::new();
        for m in &self.machines {
            for link in m.interfaces.iter().flat_map(|i| &i.links) {
                if let Some(ip) = link.ip.as_deref().and_then(|ip| ip.parse().ok()) {
                    used.insert(ip);
                }
            }
        }
        for r in &self.reservations {
            used.insert(r.ip);
        }
        for d in &self.dns {
            used.extend(d.ips.iter().filter_map(|ip| ip.parse::<IpAddr>().ok()));
        }
        used
    }

    /// The lowest free address of `subnet_id`, not in `taken` and not
    /// planned for any machine by the inventory.
    pub fn free_address(&self, subnet_id: i64, taken: &HashSet<IpAddr>) -> Option<IpAddr> {
        let subnet = self.subnet(subnet_id)?;
        let mut avoid: HashSet<IpAddr> = self
            .machines
            .iter()
            .flat_map(|m| m.interfaces.iter().flat_map(|i| &i.links))
            .filter_map(|l| l.planned.as_deref()?.parse().ok())
            .collect();
        if let Some(gw) = subnet.gateway_ip.as_deref().and_then(|g| g.parse().ok()) {
            avoid.insert(gw);
        }
        subnet
            .cidr
            .hosts()
            .take(1 << 20)
            .find(|ip| !taken.contains(ip) && !avoid.contains(ip))
    }

    /// `claim_auto_ips` at deployment: every AUTO and DHCP link without an
    /// address gets its planned one if it is free, else the lowest free
    /// one. All or nothing: exhaustion is MAAS's 503 and changes nothing.
    pub(super) fn claim_auto_ips(&mut self, index: usize) -> Outcome<()> {
        let mut taken = self.addresses_in_use();
        let mut claims: Vec<(usize, usize, String)> = Vec::new();
        let m = &self.machines[index];
        for (i, iface) in m.interfaces.iter().enumerate() {
            for (l, link) in iface.links.iter().enumerate() {
                if !matches!(link.mode, LinkMode::Auto | LinkMode::Dhcp) || link.ip.is_some() {
                    continue;
                }
                let Some(subnet_id) = link.subnet_id else {
                    continue;
                };
                let planned = link
                    .planned
                    .as_deref()
                    .and_then(|p| p.parse::<IpAddr>().ok())
                    .filter(|p| !taken.contains(p));
                let Some(ip) = planned.or_else(|| self.free_address(subnet_id, &taken)) else {
                    return fail(503, "Failed to allocate the required AUTO IP addresses");
                };
                if let Err(unsafe_address) = self.check_test_address(&m.hostname, &ip.to_string()) {
                    return fail(500, unsafe_address);
                }
                taken.insert(ip);
                claims.push((i, l, ip.to_string()));
            }
        }
        let m = &mut self.machines[index];
        for (i, l, ip) in claims {
            m.interfaces[i].links[l].ip = Some(ip);
        }
        Ok(())
    }

    /// `release_auto_ips`: AUTO (and DHCP lease) addresses go; STATIC ones
    /// stay.
    pub(super) fn release_auto_ips(&mut self, index: usize) {
        for link in self.machines[index]
            .interfaces
            .iter_mut()
            .flat_map(|i| i.links.iter_mut())
        {
            if matches!(link.mode, LinkMode::Auto | LinkMode::Dhcp) {
                link.ip = None;
            }
        }
    }
}

/// A subnet as `SubnetHandler` renders it (`DISPLAYED_SUBNET_FIELDS`).
pub fn subnet_json(s: &SubnetRec) -> Value {
    json!({
        "id": s.id,
        "name": s.name,
        "description": s.description,
        "vlan": vlan_json(&s.vlan),
        "space": s.space,
        "cidr": s.cidr_text,
        "gateway_ip": s.gateway_ip,
        "dns_servers": s.dns_servers,
        "rdns_mode": 2,
        "active_discovery": false,
        "allow_dns": true,
        "allow_proxy": true,
        "managed": s.managed,
        "disabled_boot_architectures": [],
        "resource_uri": format!("/MAAS/api/2.0/subnets/{}/", s.id),
    })
}

pub fn vlan_json(v: &Vlan) -> Value {
    json!({
        "vid": v.vid, "mtu": v.mtu, "dhcp_on": true, "external_dhcp": null,
        "relay_vlan": null, "space": "undefined", "primary_rack": "rack01",
        "secondary_rack": null, "fabric": v.fabric, "id": v.id, "fabric_id": v.fabric_id,
        "name": if v.vid == 0 { "untagged".to_owned() } else { v.vid.to_string() },
        "resource_uri": format!("/MAAS/api/2.0/vlans/{}/", v.id),
    })
}

/// One label of MAAS's `interfaces` allocation constraint:
/// `label:key=value[,key=value...]` (`parse_labeled_constraint_map`).
pub type InterfaceWanted = (String, Vec<(String, String)>);

/// Parses `eth0:subnet=127.10.0.0/24;eth1:fabric=storage,mode=static` with
/// MAAS's own error texts.
pub fn parse_interfaces_constraint(value: &str) -> Result<Vec<InterfaceWanted>, String> {
    if value.len() <= 1 {
        return Ok(Vec::new());
    }
    let mut labels: Vec<InterfaceWanted> = Vec::new();
    for constraint in value.split(';') {
        let Some((label, pairs)) = constraint.split_once(':') else {
            return Err(format!(
                "Malformed constraint: '{constraint}' (required format: \
                 '<label>:<key>=<value>[,<key2>=<value2>[,...]]')"
            ));
        };
        let valid_label = label
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_label {
            return Err(format!(
                "Invalid label name: '{label}' (Must begin with an alphanumeric character, \
                 and include only alphanumeric characters, dashes, and underscores.)"
            ));
        }
        if labels.iter().any(|(l, _)| l == label) {
            return Err(format!(
                "Constraint label defined more than once: '{label}'"
            ));
        }
        let mut wanted = Vec::new();
        for kvp in pairs.split(',') {
            let Some((key, val)) = kvp.split_once('=') else {
                return Err(format!("Malformed key/value pair in constraint: '{kvp}'"));
            };
            wanted.push((key.to_owned(), val.to_owned()));
        }
        labels.push((label.to_owned(), wanted));
    }
    Ok(labels)
}

impl World {
    /// Every label matched by a distinct interface of `interfaces`. Keys
    /// modelled: `subnet`/`not_subnet` (subnet specifiers), `fabric`/
    /// `not_fabric`, `vid`/`not_vid`, `space`/`not_space`, `mode`, `name`,
    /// `id`; any other key matches nothing (the simulator does not model it).
    pub fn interfaces_match(&self, interfaces: &[Interface], wanted: &[InterfaceWanted]) -> bool {
        fn assign(
            world: &World,
            ifaces: &[Interface],
            wanted: &[InterfaceWanted],
            used: &mut Vec<usize>,
        ) -> bool {
            let Some(((_, pairs), rest)) = wanted.split_first() else {
                return true;
            };
            for (i, iface) in ifaces.iter().enumerate() {
                if used.contains(&i) || !pairs.iter().all(|(k, v)| world.interface_has(iface, k, v))
                {
                    continue;
                }
                used.push(i);
                if assign(world, ifaces, rest, used) {
                    return true;
                }
                used.pop();
            }
            false
        }
        assign(self, interfaces, wanted, &mut Vec::new())
    }

    fn interface_has(&self, iface: &Interface, key: &str, value: &str) -> bool {
        let subnets: Vec<&SubnetRec> = iface
            .links
            .iter()
            .filter_map(|l| l.subnet_id.and_then(|id| self.subnet(id)))
            .collect();
        let vlan = subnets.first().map(|s| &s.vlan);
        let on_subnet = || {
            self.subnet_by_ref(value)
                .is_some_and(|want| subnets.iter().any(|s| s.id == want.id))
        };
        match key {
            "subnet" => on_subnet(),
            "not_subnet" => !on_subnet(),
            "fabric" => vlan.is_some_and(|v| v.fabric == value),
            "not_fabric" => vlan.is_none_or(|v| v.fabric != value),
            "vid" => vlan.is_some_and(|v| v.vid.to_string() == value),
            "not_vid" => vlan.is_none_or(|v| v.vid.to_string() != value),
            "space" => subnets.iter().any(|s| s.space == value),
            "not_space" => !subnets.iter().any(|s| s.space == value),
            "mode" => iface
                .links
                .iter()
                .any(|l| l.mode.name().eq_ignore_ascii_case(value)),
            "name" => iface.name == value,
            "id" => iface.id.to_string() == value,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        let c = Cidr::parse("127.11.130.7/24").unwrap();
        assert!(c.contains("127.11.130.255".parse().unwrap()));
        assert!(!c.contains("10.11.131.0".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let hosts: Vec<IpAddr> = Cidr::parse("192.0.2.0/30").unwrap().hosts().collect();
        assert_eq!(
            hosts,
            [
                "192.0.2.1".parse::<IpAddr>().unwrap(),
                "192.0.2.2".parse().unwrap()
            ]
        );
        assert_eq!(Cidr::parse("192.0.2.9/32").unwrap().hosts().count(), 1);
        let v6 = Cidr::parse("2001:db8::/126").unwrap();
        assert_eq!(v6.hosts().count(), 3);
        assert!(v6.contains("2001:db8::3".parse().unwrap()));
        assert!(Cidr::parse("127.10.0.0/33").is_none());
        assert!(Cidr::parse("nope/8").is_none());
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn interfaces_constraint_parses_like_maas() {
        assert_eq!(
            parse_interfaces_constraint(
                "eth0:subnet=127.10.0.0/24;eth1:fabric=storage,mode=static"
            ),
            Ok(vec![
                (
                    "eth0".to_owned(),
                    vec![("subnet".to_owned(), "127.10.0.0/24".to_owned())]
                ),
                (
                    "eth1".to_owned(),
                    vec![
                        ("fabric".to_owned(), "storage".to_owned()),
                        ("mode".to_owned(), "static".to_owned())
                    ]
                ),
            ])
        );
        assert!(parse_interfaces_constraint("eth0")
            .unwrap_err()
            .starts_with("Malformed constraint: 'eth0'"));
        assert_eq!(
            parse_interfaces_constraint("a:x=1;a:y=2").unwrap_err(),
            "Constraint label defined more than once: 'a'"
        );
        assert_eq!(
            parse_interfaces_constraint("a:x").unwrap_err(),
            "Malformed key/value pair in constraint: 'x'"
        );
        assert!(parse_interfaces_constraint("-a:x=1")
            .unwrap_err()
            .starts_with("Invalid label name: '-a'"));
    }
}
