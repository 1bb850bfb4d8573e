//! DNS resources (`dnsresources/`): list, create, update, as MAAS's
//! `DNSResourcesHandler` answers them.

use serde_json::json;

use super::{fail, field_error, DnsRec, Failure, Outcome, World};

impl World {
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
            data: Vec::new(),
        });
        Ok(self.dns.len() - 1)
    }

    /// `DNSResourceRecordsHandler.create`: `rrtype` and `rrdata` required
    /// (400 `... must be provided.`), the name by `fqdn` or `name` and
    /// `domain`; added to the DNS resource of that name, made (without
    /// addresses) if there is none. The DNSData index is returned.
    pub fn create_dns_data(&mut self, params: &[(String, String)]) -> Outcome<(usize, usize)> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let Some(rrtype) = one("rrtype") else {
            return fail(400, "rrtype must be provided.");
        };
        let Some(rrdata) = one("rrdata") else {
            return fail(400, "rrdata must be provided.");
        };
        let (name, domain_id) = match (one("name"), one("domain"), one("fqdn")) {
            (Some(name), Some(domain), _) => (name, self.domain_by_ref(&domain)?),
            (None, None, Some(fqdn)) => match self.split_fqdn(&fqdn) {
                Some(x) => x,
                None => return fail(404, "No Domain matches the given query."),
            },
            _ => return fail(400, "Either name and domain (or fqdn) must be specified"),
        };
        let index = match self
            .dns
            .iter()
            .position(|d| d.name == name && d.domain_id == domain_id)
        {
            Some(i) => i,
            None => {
                let id = self.next_dns_id;
                self.next_dns_id += 1;
                self.dns.push(DnsRec {
                    id,
                    name,
                    domain_id,
                    address_ttl: None,
                    ips: Vec::new(),
                    data: Vec::new(),
                });
                self.dns.len() - 1
            }
        };
        self.next_dns_data_id += 1;
        let id = self.next_dns_data_id;
        let rec = &mut self.dns[index];
        rec.data.push(super::DnsData {
            id,
            rrtype: rrtype.to_ascii_uppercase(),
            rrdata,
        });
        Ok((index, rec.data.len() - 1))
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
