//! Static addresses as MAAS 3.5 manages them: reservations
//! (`ipaddresses/?op=reserve`, `op=release`, the list; `IPAddressesHandler`
//! in `src/maasserver/api/ip_addresses.py`) and an interface's links
//! (`op=link_subnet`, `op=unlink_subnet`; `InterfaceHandler` in
//! `src/maasserver/api/interfaces.py`, `InterfaceLinkForm` in
//! `src/maasserver/forms/interface_link.py`, `Interface._link_subnet_*` in
//! `src/maasserver/models/interface.py`).

use std::net::IpAddr;
use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::network::{Link, LinkMode, Reservation};
use super::{fail, truthy, DnsRec, Failure, Outcome, User, World};
use crate::status::Status;

/// A form error: `{"field": ["message"]}`.
fn form_error<T>(field: &str, message: impl Into<String>) -> Outcome<T> {
    let mut errors = Map::new();
    errors.insert(field.into(), json!([message.into()]));
    Err(Failure::Fields(400, Value::Object(errors)))
}

/// The last value of a form field (`QueryDict.get`).
fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

const INVALID_IP: &str = "Enter a valid IPv4 or IPv6 address.";

impl World {
    fn in_use(&self, ip: IpAddr) -> bool {
        self.addresses_in_use().contains(&ip)
    }

    /// `IPAddressesHandler.reserve`: an address for use outside MAAS that
    /// MAAS will never hand to a machine, by address (`ip`, or its old name
    /// `ip_address`) or the next free one of `subnet`; `hostname` adds it to
    /// a DNS resource (default domain unless it has one).
    pub fn reserve_ip(&mut self, user: &User, params: &[(String, String)]) -> Outcome<usize> {
        let subnet_ref = param(params, "subnet");
        let ip_text = param(params, "ip").or_else(|| param(params, "ip_address"));
        let hostname = param(params, "hostname").filter(|h| !h.is_empty());
        let mac = param(params, "mac");
        let ip: Option<IpAddr> = match ip_text {
            Some(text) => match text.parse() {
                Ok(ip) => Some(ip),
                Err(_) => return form_error("ip_address", INVALID_IP),
            },
            None => None,
        };
        let subnet_id = match (ip, subnet_ref) {
            (Some(ip), _) => match self.subnet_for_ip(ip) {
                Some(s) => s.id,
                None => return fail(400, format!("No known subnet for IP address: {ip}.")),
            },
            (None, Some(r)) => match self.subnet_by_ref(r) {
                Some(s) => s.id,
                None => return fail(400, format!("Unable to identify subnet: {r}.")),
            },
            (None, None) => {
                return fail(
                    400,
                    "Must supply either the 'subnet' or the 'ip' parameter.",
                )
            }
        };
        let (name, domain_id) = match hostname {
            Some(h) => match h.split_once('.') {
                Some((name, domain)) if !name.is_empty() => {
                    match self.domains.iter().find(|d| d.name == domain) {
                        Some(d) => (Some(name.to_owned()), d.id),
                        None => return fail(404, "No Domain matches the given query."),
                    }
                }
                _ => (Some(h.to_owned()), 0),
            },
            None => (None, 0),
        };
        if let Some(mac) = mac {
            if let Some(m) = self.machines.iter().find(|m| m.has_mac(mac)) {
                return fail(
                    400,
                    format!(
                        "MAC address {mac} already belongs to {}. Use of the interface API is \
                         required, for an interface that belongs to a node.",
                        m.hostname
                    ),
                );
            }
        }
        let ip = match ip {
            Some(ip) if self.in_use(ip) => {
                // `allocate_new` for a given address (`get_or_create` of a
                // STATIC link with a MAC says it without the address).
                return match mac {
                    None => fail(404, format!("The IP address {ip} is already in use.")),
                    Some(_) => fail(404, "IP address is already in use."),
                };
            }
            Some(ip) => ip,
            None => {
                let taken = self.addresses_in_use();
                match self.free_address(subnet_id, &taken) {
                    Some(ip) => ip,
                    None => {
                        let cidr = self.subnet(subnet_id).map(|s| s.cidr_text.clone());
                        return fail(
                            503,
                            format!(
                                "No more IPs available in subnet: {}.",
                                cidr.unwrap_or_default()
                            ),
                        );
                    }
                }
            }
        };
        if let Some(name) = &name {
            match self
                .dns
                .iter_mut()
                .find(|d| &d.name == name && d.domain_id == domain_id)
            {
                Some(rec) => rec.ips.push(ip.to_string()),
                None => {
                    let id = self.next_dns_id;
                    self.next_dns_id += 1;
                    self.dns.push(DnsRec {
                        id,
                        name: name.clone(),
                        domain_id,
                        address_ttl: None,
                        ips: vec![ip.to_string()],
                        data: Vec::new(),
                    });
                }
            }
        }
        self.next_link_id += 1;
        self.reservations.push(Reservation {
            id: self.next_link_id,
            ip,
            subnet_id,
            username: user.username.clone(),
            hostname: name,
            mac: mac.map(str::to_owned),
            created: SystemTime::now(),
        });
        Ok(self.reservations.len() - 1)
    }

    /// `IPAddressesHandler.release`: the caller's own reservation, or with
    /// `force` (admins) any address (a machine link loses it). The address
    /// also leaves the DNS resources that held it.
    pub fn release_ip(&mut self, user: &User, params: &[(String, String)]) -> Outcome<()> {
        let Some(text) = param(params, "ip") else {
            return fail(400, "No provided ip!");
        };
        let force = param(params, "force").is_some_and(truthy);
        if force && !user.is_superuser {
            return fail(
                403,
                "Force-releasing an IP address requires admin privileges.",
            );
        }
        let Ok(ip) = text.parse::<IpAddr>() else {
            return form_error("ip", INVALID_IP);
        };
        let reservation = self
            .reservations
            .iter()
            .position(|r| r.ip == ip && (force || r.username == user.username));
        let link = force
            .then(|| {
                self.machines.iter().enumerate().find_map(|(mi, m)| {
                    m.interfaces.iter().enumerate().find_map(|(ii, iface)| {
                        let li = iface
                            .links
                            .iter()
                            .position(|l| l.ip.as_deref() == Some(text))?;
                        Some((mi, ii, li))
                    })
                })
            })
            .flatten();
        match (reservation, link) {
            (Some(r), _) => {
                self.reservations.remove(r);
            }
            (None, Some((mi, ii, li))) => {
                let iface = &mut self.machines[mi].interfaces[ii];
                if iface.links[li].mode == LinkMode::Static {
                    iface.links.remove(li);
                    ensure_link_up(iface, &mut self.next_link_id);
                } else {
                    iface.links[li].ip = None;
                }
            }
            (None, None) if force => {
                return fail(400, format!("IP address {ip} does not exist."));
            }
            (None, None) => {
                return fail(
                    400,
                    format!(
                        "IP address {ip} does not exist, is not the correct type of address, \
                         or does not belong to the requesting user.\nIf you are sure you want \
                         to release this address, use force=true as a MAAS administrator."
                    ),
                );
            }
        }
        for d in &mut self.dns {
            d.ips.retain(|x| x.parse::<IpAddr>().ok() != Some(ip));
        }
        Ok(())
    }

    /// `IPAddressesHandler.read`: the caller's reservations; admins may ask
    /// for another user's (`owner`) or for every address (`all`).
    pub fn list_ips(&self, user: &User, params: &[(String, String)]) -> Outcome<Value> {
        let all = param(params, "all").is_some_and(truthy);
        let owner = param(params, "owner");
        let only_ip = match param(params, "ip") {
            Some(text) => match text.parse::<IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => return fail(400, "Parameter 'ip' must contain an IP address."),
            },
            None => None,
        };
        if all && !user.is_superuser {
            return fail(403, "Listing all IP addresses requires admin privileges.");
        }
        if owner.is_some() && !user.is_superuser {
            return fail(
                403,
                "Listing another user's IP addresses requires admin privileges.",
            );
        }
        let wanted_owner = owner.unwrap_or(&user.username);
        let mut rows: Vec<(i64, Value)> = Vec::new();
        for r in &self.reservations {
            let listed = if all && owner.is_none() {
                true
            } else {
                r.username == wanted_owner
            };
            if listed && only_ip.is_none_or(|ip| ip == r.ip) {
                rows.push((r.id, self.reservation_json(r)));
            }
        }
        if all {
            for m in &self.machines {
                for iface in &m.interfaces {
                    for link in &iface.links {
                        let Some(ip) = link.ip.as_deref().and_then(|ip| ip.parse::<IpAddr>().ok())
                        else {
                            continue;
                        };
                        if owner.is_none() && only_ip.is_none_or(|x| x == ip) {
                            rows.push((link.id, self.link_ip_json(m, iface, link)));
                        }
                    }
                }
            }
        }
        rows.sort_by_key(|(id, _)| *id);
        Ok(Value::Array(rows.into_iter().map(|(_, v)| v).collect()))
    }

    pub fn reservation_json(&self, r: &Reservation) -> Value {
        let owner = self
            .credentials
            .iter()
            .find(|c| c.user.username == r.username)
            .map(|c| crate::render::user(&c.user.username, c.user.is_superuser));
        json!({
            "alloc_type": 4,
            "alloc_type_name": "User reserved",
            "created": super::events::format_iso(r.created),
            "ip": r.ip.to_string(),
            "owner": owner,
            "interface_set": self.reservation_interfaces(r),
            "subnet": self.subnet(r.subnet_id).map(super::network::subnet_json),
            "resource_uri": "/MAAS/api/2.0/ipaddresses/",
        })
    }

    /// With `mac=`, MAAS made an interface of that MAC (type `unknown`,
    /// named `eth0`, on no machine) with the address linked STATIC, and
    /// lists it; without, none.
    fn reservation_interfaces(&self, r: &Reservation) -> Value {
        let Some(mac) = &r.mac else {
            return json!([]);
        };
        json!([{
            "id": r.id,
            "name": "eth0",
            "type": "unknown",
            "mac_address": mac.to_ascii_lowercase(),
            "enabled": true,
            "params": "",
            "tags": [],
            "parents": [],
            "children": [],
            "vlan": null,
            "links": [{
                "id": r.id,
                "mode": "static",
                "ip_address": r.ip.to_string(),
                "subnet": self.subnet(r.subnet_id).map(super::network::subnet_json),
            }],
        }])
    }

    fn link_ip_json(&self, m: &super::Machine, iface: &super::Interface, link: &Link) -> Value {
        let (alloc_type, name) = match link.mode {
            LinkMode::Auto => (0, "Automatic"),
            LinkMode::Static | LinkMode::LinkUp => (1, "Static"),
            LinkMode::Dhcp => (5, "DHCP"),
        };
        json!({
            "alloc_type": alloc_type,
            "alloc_type_name": name,
            "created": super::events::format_iso(self.clock.1),
            "ip": link.ip,
            "owner": null,
            "interface_set": [crate::render::interface(self, m, iface)],
            "subnet": link.subnet_id.and_then(|id| self.subnet(id)).map(super::network::subnet_json),
            "resource_uri": "/MAAS/api/2.0/ipaddresses/",
        })
    }

    /// An interface of machine `index` by id or name (`get_interface_or_404`
    /// answers "No Interface matches the given query.").
    pub fn interface_index(&self, index: usize, id: &str) -> Outcome<usize> {
        self.machines[index]
            .interfaces
            .iter()
            .position(|i| i.id.to_string() == id || i.name == id)
            .map_or_else(|| fail(404, "No Interface matches the given query."), Ok)
    }

    /// `raise_error_for_invalid_state_on_allocated_operations`.
    fn check_link_state(&self, index: usize, operation: &str) -> Outcome<()> {
        use Status::*;
        match self.machines[index].status {
            New | Ready | FailedTesting | Allocated | Broken => Ok(()),
            _ => fail(
                409,
                format!(
                    "Cannot {operation} interface because the machine is not New, Ready, \
                     Allocated, or Broken."
                ),
            ),
        }
    }

    /// `InterfaceHandler.link_subnet` (the caller has admin rights on the
    /// machine): `mode` AUTO (an address when it deploys), DHCP, STATIC (an
    /// address now: `ip_address` or the next free one; one already known to
    /// MAAS, a reservation included, is "already in use") or LINK_UP;
    /// `default_gateway` makes it the machine's IPv4 gateway link; `force`
    /// allows a subnet on another VLAN and clears the other links first.
    pub fn link_subnet(
        &mut self,
        index: usize,
        iface_index: usize,
        params: &[(String, String)],
    ) -> Outcome<()> {
        self.check_link_state(index, "link subnet")?;
        let force = param(params, "force").is_some_and(truthy);
        let iface = &self.machines[index].interfaces[iface_index];
        let mut errors: Map<String, Value> = Map::new();
        let mut add = |field: &str, message: String| {
            if let Some(list) = errors
                .entry(field.to_owned())
                .or_insert_with(|| json!([]))
                .as_array_mut()
            {
                list.push(json!(message));
            }
        };
        let mode = match param(params, "mode") {
            None | Some("") => {
                add("mode", "This field is required.".into());
                None
            }
            Some(text) => {
                let mode = LinkMode::parse(text);
                if mode.is_none() {
                    add(
                        "mode",
                        format!(
                            "'{text}' is not a valid mode.  It should be one of: 'AUTO', \
                             'DHCP', 'STATIC', 'LINK_UP'."
                        ),
                    );
                }
                mode
            }
        };
        let subnet = match param(params, "subnet").filter(|s| !s.is_empty()) {
            None => None,
            Some(r) => match self.subnet_by_ref(r) {
                Some(s) if force || s.vlan.id == iface.vlan_id => Some(s),
                _ => {
                    add(
                        "subnet",
                        "Select a valid choice. That choice is not one of the available choices."
                            .into(),
                    );
                    None
                }
            },
        };
        let ip: Option<IpAddr> = match param(params, "ip_address").filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => match text.parse() {
                Ok(ip) => Some(ip),
                Err(_) => {
                    add("ip_address", INVALID_IP.into());
                    None
                }
            },
        };
        let default_gateway = param(params, "default_gateway").is_some_and(truthy);
        let subnet_label = |s: &super::network::SubnetRec| {
            format!("{}:{}(vid={})", s.name, s.cidr_text, s.vlan.vid)
        };
        let subnet_given = param(params, "subnet").is_some_and(|s| !s.is_empty());
        match mode {
            Some(LinkMode::Auto | LinkMode::Static) if !subnet_given => {
                add("subnet", "This field is required.".into());
            }
            Some(LinkMode::Static) => {
                if let (Some(s), Some(ip)) = (subnet, ip) {
                    if !s.cidr.contains(ip) {
                        add(
                            "ip_address",
                            format!(
                                "IP address is not in the given subnet '{}'.",
                                subnet_label(s)
                            ),
                        );
                    }
                }
            }
            Some(LinkMode::Dhcp) => {
                if let Some(dhcp) = iface.links.iter().find(|l| l.mode == LinkMode::Dhcp) {
                    match dhcp.subnet_id.and_then(|id| self.subnet(id)) {
                        Some(s) => add(
                            "mode",
                            format!(
                                "Interface is already set to DHCP from '{}'.",
                                subnet_label(s)
                            ),
                        ),
                        None => add("mode", "Interface is already set to DHCP.".into()),
                    }
                }
            }
            Some(LinkMode::LinkUp)
                if !force && iface.links.iter().any(|l| l.mode != LinkMode::LinkUp) =>
            {
                add(
                    "mode",
                    "Cannot configure interface to link up (with no IP address) while other \
                     links are already configured. Specify force=True to override this \
                     behavior and delete all links."
                        .into(),
                );
            }
            _ => {}
        }
        if default_gateway {
            match (mode, subnet) {
                (Some(m @ (LinkMode::Dhcp | LinkMode::LinkUp)), _) => add(
                    "default_gateway",
                    format!("Cannot use in mode '{}'.", m.name()),
                ),
                (_, None) => add(
                    "default_gateway",
                    "Subnet is required when default_gateway is True.".into(),
                ),
                (_, Some(s)) if s.gateway_ip.is_none() => add(
                    "default_gateway",
                    format!(
                        "Cannot set as default gateway because subnet {} doesn't provide a \
                         gateway IP address.",
                        subnet_label(s)
                    ),
                ),
                _ => {}
            }
        }
        if !errors.is_empty() {
            return Err(Failure::Fields(400, Value::Object(errors)));
        }
        let Some(mode) = mode else {
            return fail(400, "mode is required");
        };
        let subnet_id = subnet.map(|s| s.id);
        let vlan_id = subnet.map(|s| s.vlan.id);
        // The address of a STATIC link is taken now.
        let static_ip = match (mode, subnet_id) {
            (LinkMode::Static, Some(sid)) => match ip {
                Some(ip) if self.in_use(ip) => return fail(404, "IP address is already in use."),
                Some(ip) => Some(ip),
                None => {
                    let taken = self.addresses_in_use();
                    match self.free_address(sid, &taken) {
                        Some(ip) => Some(ip),
                        None => {
                            let cidr = self.subnet(sid).map(|s| s.cidr_text.clone());
                            return fail(
                                503,
                                format!(
                                    "No more IPs available in subnet: {}.",
                                    cidr.unwrap_or_default()
                                ),
                            );
                        }
                    }
                }
            },
            _ => None,
        };
        self.next_link_id += 1;
        let link_id = self.next_link_id;
        let m = &mut self.machines[index];
        let iface = &mut m.interfaces[iface_index];
        if mode == LinkMode::LinkUp || force {
            iface.links.clear();
        }
        if let Some(vlan) = vlan_id {
            iface.vlan_id = vlan;
        }
        // A new AUTO, DHCP or STATIC link replaces the DHCP link of its
        // family and any LINK_UP; a LINK_UP replaces the DHCP ones.
        iface.links.retain(|l| match mode {
            LinkMode::LinkUp => l.mode != LinkMode::Dhcp,
            _ => l.mode != LinkMode::LinkUp && (mode == LinkMode::Auto || l.mode != LinkMode::Dhcp),
        });
        iface.links.push(Link {
            id: link_id,
            mode,
            subnet_id,
            ip: static_ip.map(|ip| ip.to_string()),
            planned: None,
        });
        if default_gateway {
            m.gateway_link_ipv4 = Some(link_id);
        }
        Ok(())
    }

    /// `InterfaceHandler.unlink_subnet`: removes link `id`; an interface left
    /// without links gets a LINK_UP (`ensure_link_up`).
    pub fn unlink_subnet(
        &mut self,
        index: usize,
        iface_index: usize,
        params: &[(String, String)],
    ) -> Outcome<()> {
        self.check_link_state(index, "unlink subnet")?;
        let iface = &self.machines[index].interfaces[iface_index];
        let ids: Vec<String> = iface.links.iter().map(|l| l.id.to_string()).collect();
        let position = match param(params, "id").filter(|v| !v.is_empty()) {
            None => return form_error("id", "This field is required."),
            Some(id) => match ids.iter().position(|x| x == id) {
                Some(p) => p,
                None => {
                    let choices: Vec<String> = ids.iter().map(|i| format!("'{i}'")).collect();
                    return form_error(
                        "id",
                        format!(
                            "'{id}' is not a valid id.  It should be one of: {}.",
                            choices.join(", ")
                        ),
                    );
                }
            },
        };
        let m = &mut self.machines[index];
        let removed = m.interfaces[iface_index].links.remove(position);
        if m.gateway_link_ipv4 == Some(removed.id) {
            m.gateway_link_ipv4 = None;
        }
        ensure_link_up(&mut m.interfaces[iface_index], &mut self.next_link_id);
        Ok(())
    }
}

/// `Interface.ensure_link_up`: an interface keeps at least a LINK_UP, and
/// only while it has no other link.
fn ensure_link_up(iface: &mut super::Interface, next_link_id: &mut i64) {
    if iface.links.is_empty() {
        *next_link_id += 1;
        iface.links.push(Link {
            id: *next_link_id,
            mode: LinkMode::LinkUp,
            subnet_id: None,
            ip: None,
            planned: None,
        });
    } else if iface.links.iter().any(|l| l.mode != LinkMode::LinkUp) {
        iface.links.retain(|l| l.mode != LinkMode::LinkUp);
    }
}
