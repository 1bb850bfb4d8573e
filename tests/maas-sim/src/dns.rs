//! A small authoritative DNS server for the records MAAS holds, as MAAS's
//! bind serves them: DNS resources (`dnsresources/`) and machines'
//! `hostname.domain` while they have addresses, in every authoritative
//! domain. UDP and TCP on one address (`--dns-listen`), off by default.
//!
//! Answers: A/AAAA (and ANY) with the record's TTL (`address_ttl`, else
//! the domain's, else 30, MAAS's `default_dns_ttl`); a name with no record
//! of the asked type is NODATA; an unknown name in a MAAS domain is
//! NXDOMAIN; both carry the zone's SOA in the authority section, shaped
//! like MAAS's zone template (`<domain>. nobody.example.com. serial 600
//! 1800 604800 <ttl>`, `src/provisioningserver/templates/dns/zone.template`).
//! A name outside MAAS's domains is REFUSED (no recursion: RA is clear).
//! EDNS0: an OPT record in the query is answered with one (version 0,
//! 1232-byte payload); a UDP answer that does not fit is truncated (TC).
//! Malformed packets are answered FORMERR when their header can be read,
//! else dropped; nothing here panics on input.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::world::World;
use crate::Shared;

const TYPE_A: u16 = 1;
const TYPE_SOA: u16 = 6;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;

const RCODE_FORMERR: u8 = 1;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_NOTIMP: u8 = 4;
const RCODE_REFUSED: u8 = 5;

/// MAAS's `default_dns_ttl`.
const DEFAULT_TTL: u32 = 30;
/// The UDP payload size we advertise with EDNS0 (the DNS flag day value).
const EDNS_PAYLOAD: u16 = 1232;
/// A TCP client gets this long to send its query.
const TCP_TIMEOUT: Duration = Duration::from_secs(5);

/// The UDP and TCP threads of a running DNS server.
pub(crate) struct DnsServer {
    pub addr: SocketAddr,
    threads: Vec<JoinHandle<()>>,
}

impl DnsServer {
    /// Binds UDP and TCP on `listen` (port 0: one free port for both).
    pub(crate) fn start(listen: &str, shared: &Arc<Shared>) -> std::io::Result<DnsServer> {
        let (udp, tcp) = bind_both(listen)?;
        let addr = udp.local_addr()?;
        udp.set_read_timeout(Some(Duration::from_millis(200)))?;
        let udp_shared = Arc::clone(shared);
        let udp_thread = std::thread::Builder::new()
            .name("maas-sim-dns-udp".into())
            .spawn(move || serve_udp(&udp, &udp_shared))?;
        let tcp_shared = Arc::clone(shared);
        let tcp_thread = std::thread::Builder::new()
            .name("maas-sim-dns-tcp".into())
            .spawn(move || serve_tcp(&tcp, &tcp_shared))?;
        Ok(DnsServer {
            addr,
            threads: vec![udp_thread, tcp_thread],
        })
    }

    /// Joins the threads; the caller has set `stopping`. The TCP acceptor
    /// is woken by a connection.
    pub(crate) fn join(self) {
        let _ = TcpStream::connect_timeout(&crate::loopback_of(self.addr), Duration::from_secs(2));
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn bind_both(listen: &str) -> std::io::Result<(UdpSocket, TcpListener)> {
    let mut last_error = None;
    // With port 0 the UDP port may be taken for TCP: try a few.
    for _ in 0..10 {
        let udp = UdpSocket::bind(listen)?;
        match TcpListener::bind(udp.local_addr()?) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no port for DNS")))
}

fn serve_udp(socket: &UdpSocket, shared: &Shared) {
    let mut buf = [0u8; 4096];
    while !shared.stopping.load(Ordering::SeqCst) {
        let Ok((len, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let answer = {
            let mut world = shared.world();
            world.advance(std::time::Instant::now());
            answer(&world, &buf[..len], Transport::Udp)
        };
        if let Some(answer) = answer {
            let _ = socket.send_to(&answer, peer);
        }
    }
}

fn serve_tcp(listener: &TcpListener, shared: &Shared) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(mut stream) = stream else { continue };
        // One query at a time on this thread: DNS over TCP is the rare
        // retry after a truncated UDP answer.
        let _ = stream.set_read_timeout(Some(TCP_TIMEOUT));
        let _ = stream.set_write_timeout(Some(TCP_TIMEOUT));
        while let Some(query) = read_tcp_message(&mut stream) {
            let answer = {
                let mut world = shared.world();
                world.advance(std::time::Instant::now());
                answer(&world, &query, Transport::Tcp)
            };
            let Some(answer) = answer else { break };
            let mut framed = (answer.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&answer);
            if stream.write_all(&framed).is_err() {
                break;
            }
        }
    }
}

fn read_tcp_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message).ok()?;
    Some(message)
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Udp,
    Tcp,
}

/// A parsed question.
struct Question {
    /// Lower-case, without the final dot.
    name: String,
    qtype: u16,
    /// The question's bytes as they were sent (echoed in the answer).
    raw: Vec<u8>,
    /// The query's EDNS0 UDP payload size, if it had an OPT record.
    edns: Option<u16>,
}

/// The answer to one DNS message, or None when not even its header can be
/// read (or it is itself an answer).
pub(crate) fn answer(world: &World, query: &[u8], transport: Transport) -> Option<Vec<u8>> {
    if query.len() < 12 {
        return None;
    }
    let id = [query[0], query[1]];
    let flags = u16::from_be_bytes([query[2], query[3]]);
    if flags & 0x8000 != 0 {
        return None; // a response: never answer those (no loops)
    }
    let opcode = ((flags >> 11) & 0xf) as u8;
    let rd = flags & 0x0100 != 0;
    let question = parse_question(query);
    let mut out = Response::new(id, opcode, rd);
    let question = match question {
        Some(q) if opcode == 0 => q,
        Some(q) => {
            out.question(&q.raw);
            out.rcode = RCODE_NOTIMP;
            return Some(out.finish(q.edns, transport));
        }
        None => {
            out.rcode = if opcode == 0 {
                RCODE_FORMERR
            } else {
                RCODE_NOTIMP
            };
            return Some(out.finish(None, transport));
        }
    };
    out.question(&question.raw);
    let in_zone =
        |zone: &str| question.name == zone || question.name.ends_with(&format!(".{zone}"));
    let Some(zone) = world
        .domains
        .iter()
        .filter(|d| d.authoritative && in_zone(&d.name.to_ascii_lowercase()))
        .max_by_key(|d| d.name.len())
    else {
        out.rcode = RCODE_REFUSED;
        return Some(out.finish(question.edns, transport));
    };
    out.authoritative = true;
    let zone_name = zone.name.to_ascii_lowercase();
    let zone_ttl = zone.ttl.unwrap_or(DEFAULT_TTL);
    let label = if question.name == zone_name {
        "@"
    } else {
        &question.name[..question.name.len() - zone_name.len() - 1]
    };
    let records = records_for(world, zone.id, label, zone_ttl);
    let exists = label == "@"
        || !records.is_empty()
        || world
            .dns
            .iter()
            .any(|r| r.domain_id == zone.id && r.name.eq_ignore_ascii_case(label));
    if question.qtype == TYPE_SOA && label == "@" {
        out.answer_soa(&zone_name, zone_ttl, true);
        return Some(out.finish(question.edns, transport));
    }
    let wanted: Vec<&(IpAddr, u32)> = records
        .iter()
        .filter(|(ip, _)| match question.qtype {
            TYPE_A => ip.is_ipv4(),
            TYPE_AAAA => ip.is_ipv6(),
            TYPE_ANY => true,
            _ => false,
        })
        .collect();
    if wanted.is_empty() {
        if !exists {
            out.rcode = RCODE_NXDOMAIN;
        }
        out.answer_soa(&zone_name, zone_ttl, false);
    }
    for (ip, ttl) in wanted {
        out.answer_address(*ip, *ttl);
    }
    Some(out.finish(question.edns, transport))
}

/// The addresses MAAS publishes for `label` in domain `domain_id`, each
/// with its TTL: DNS resources, then machines with addresses.
fn records_for(world: &World, domain_id: i64, label: &str, zone_ttl: u32) -> Vec<(IpAddr, u32)> {
    let mut out: Vec<(IpAddr, u32)> = Vec::new();
    let mut push = |ip: &str, ttl: u32| {
        if let Ok(ip) = ip.parse::<IpAddr>() {
            if !out.iter().any(|(x, _)| *x == ip) {
                out.push((ip, ttl));
            }
        }
    };
    for r in world
        .dns
        .iter()
        .filter(|r| r.domain_id == domain_id && r.name.eq_ignore_ascii_case(label))
    {
        for ip in &r.ips {
            push(ip, r.address_ttl.unwrap_or(zone_ttl));
        }
    }
    for m in world
        .machines
        .iter()
        .filter(|m| m.domain_id == domain_id && m.hostname.eq_ignore_ascii_case(label))
    {
        for ip in m.ip_addresses() {
            push(&ip, zone_ttl);
        }
    }
    out
}

/// Reads the header counts, the single question and (for EDNS) the
/// additional section. None if anything is out of bounds or malformed.
fn parse_question(msg: &[u8]) -> Option<Question> {
    let count = |at: usize| u16::from_be_bytes([msg[at], msg[at + 1]]);
    let (qd, an, ns, ar) = (count(4), count(6), count(8), count(10));
    if qd != 1 {
        return None;
    }
    let start = 12;
    let (name, after_name) = read_name(msg, start)?;
    let fixed = msg.get(after_name..after_name + 4)?;
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    if qclass != CLASS_IN && qclass != TYPE_ANY {
        return None;
    }
    let raw = msg.get(start..after_name + 4)?.to_vec();
    // Skip answer and authority records (a query has none, but be lenient),
    // then look for OPT among the additional records.
    let mut at = after_name + 4;
    for _ in 0..(usize::from(an) + usize::from(ns)) {
        at = skip_record(msg, at)?.0;
    }
    let mut edns = None;
    for _ in 0..ar {
        let (next, rtype, class) = skip_record(msg, at)?;
        if rtype == TYPE_OPT {
            edns = Some(class.max(512));
        }
        at = next;
    }
    Some(Question {
        name,
        qtype,
        raw,
        edns,
    })
}

/// Skips one resource record at `at`: (next offset, type, class).
fn skip_record(msg: &[u8], at: usize) -> Option<(usize, u16, u16)> {
    let (_, after) = read_name(msg, at)?;
    let fixed = msg.get(after..after + 10)?;
    let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let class = u16::from_be_bytes([fixed[2], fixed[3]]);
    let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    let next = after + 10 + rdlen;
    (next <= msg.len()).then_some((next, rtype, class))
}

/// A (possibly compressed) name at `at`: lower-case dotted text and the
/// offset after it in the message. Bounded: at most 255 bytes of name and
/// as many pointer jumps as the message has bytes.
fn read_name(msg: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut total = 0usize;
    let mut end = None;
    let mut jumps = 0;
    loop {
        let len = *msg.get(at)?;
        match len & 0xc0 {
            0x00 => {
                if len == 0 {
                    let after = end.unwrap_or(at + 1);
                    return Some((labels.join("."), after));
                }
                let label = msg.get(at + 1..at + 1 + usize::from(len))?;
                total += usize::from(len) + 1;
                if total > 255 {
                    return None;
                }
                labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
                at += 1 + usize::from(len);
            }
            0xc0 => {
                let low = *msg.get(at + 1)?;
                if end.is_none() {
                    end = Some(at + 2);
                }
                jumps += 1;
                if jumps > msg.len() {
                    return None;
                }
                at = usize::from(u16::from_be_bytes([len & 0x3f, low]));
            }
            _ => return None, // 0x40 and 0x80 label types are obsolete
        }
    }
}

/// An answer being built.
struct Response {
    id: [u8; 2],
    opcode: u8,
    rd: bool,
    authoritative: bool,
    rcode: u8,
    question: Vec<u8>,
    answers: Vec<Vec<u8>>,
    authority: Vec<Vec<u8>>,
}

impl Response {
    fn new(id: [u8; 2], opcode: u8, rd: bool) -> Response {
        Response {
            id,
            opcode,
            rd,
            authoritative: false,
            rcode: 0,
            question: Vec::new(),
            answers: Vec::new(),
            authority: Vec::new(),
        }
    }

    fn question(&mut self, raw: &[u8]) {
        self.question = raw.to_vec();
    }

    /// An A or AAAA record owned by the question's name (pointer to 12).
    fn answer_address(&mut self, ip: IpAddr, ttl: u32) {
        let (rtype, data) = match ip {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        let mut rr = vec![0xc0, 0x0c];
        rr.extend_from_slice(&rtype.to_be_bytes());
        rr.extend_from_slice(&CLASS_IN.to_be_bytes());
        rr.extend_from_slice(&ttl.to_be_bytes());
        rr.extend_from_slice(&(data.len() as u16).to_be_bytes());
        rr.extend_from_slice(&data);
        self.answers.push(rr);
    }

    /// The zone's SOA, in the answer (`in_answer`, owner = the question
    /// name) or the authority section (owner = the zone).
    fn answer_soa(&mut self, zone: &str, ttl: u32, in_answer: bool) {
        let serial = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        let mut rdata = encode_name(zone);
        rdata.extend(encode_name("nobody.example.com"));
        for value in [serial, 600, 1800, 604_800, ttl] {
            rdata.extend_from_slice(&value.to_be_bytes());
        }
        let mut rr = if in_answer {
            vec![0xc0, 0x0c]
        } else {
            encode_name(zone)
        };
        rr.extend_from_slice(&TYPE_SOA.to_be_bytes());
        rr.extend_from_slice(&CLASS_IN.to_be_bytes());
        rr.extend_from_slice(&ttl.to_be_bytes());
        rr.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        rr.extend_from_slice(&rdata);
        if in_answer {
            self.answers.push(rr);
        } else {
            self.authority.push(rr);
        }
    }

    /// The wire message; over UDP cut to the client's limit with TC set.
    fn finish(self, edns: Option<u16>, transport: Transport) -> Vec<u8> {
        let limit = match transport {
            Transport::Tcp => usize::from(u16::MAX),
            Transport::Udp => usize::from(edns.map_or(512, |size| size.min(EDNS_PAYLOAD))),
        };
        let opt = edns.map(|_| {
            let mut rr = vec![0]; // root
            rr.extend_from_slice(&TYPE_OPT.to_be_bytes());
            rr.extend_from_slice(&EDNS_PAYLOAD.to_be_bytes());
            rr.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // ext-rcode, version, flags, rdlen
            rr
        });
        let build = |answers: &[Vec<u8>], authority: &[Vec<u8>], truncated: bool| {
            let mut flags: u16 = 0x8000 | (u16::from(self.opcode) << 11);
            if self.authoritative {
                flags |= 0x0400;
            }
            if truncated {
                flags |= 0x0200;
            }
            if self.rd {
                flags |= 0x0100;
            }
            flags |= u16::from(self.rcode);
            let mut msg = self.id.to_vec();
            msg.extend_from_slice(&flags.to_be_bytes());
            let qd = u16::from(!self.question.is_empty());
            for n in [
                qd,
                answers.len() as u16,
                authority.len() as u16,
                u16::from(opt.is_some()),
            ] {
                msg.extend_from_slice(&n.to_be_bytes());
            }
            msg.extend_from_slice(&self.question);
            for rr in answers.iter().chain(authority) {
                msg.extend_from_slice(rr);
            }
            if let Some(opt) = &opt {
                msg.extend_from_slice(opt);
            }
            msg
        };
        let full = build(&self.answers, &self.authority, false);
        if full.len() <= limit {
            return full;
        }
        build(&[], &[], true)
    }
}

fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        let bytes = &label.as_bytes()[..label.len().min(63)];
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
    }
    out.push(0);
    out
}

/// What [`lookup`] got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// 0 NOERROR, 3 NXDOMAIN, 5 REFUSED, ...
    pub rcode: u8,
    pub authoritative: bool,
    pub truncated: bool,
    /// A and AAAA answers with their TTLs.
    pub addresses: Vec<(IpAddr, u32)>,
    /// Records in the authority section (the SOA of a negative answer).
    pub authority: usize,
}

/// A minimal stub resolver for tests and probes: asks `server` for `name`
/// (`qtype` 1 = A, 28 = AAAA) over UDP or TCP, with RD set and an EDNS0
/// OPT record, as glibc does with `options edns0`.
pub fn lookup(server: SocketAddr, name: &str, qtype: u16, tcp: bool) -> std::io::Result<Lookup> {
    let id: u16 = (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(7)
        & 0xffff) as u16;
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]);
    q.extend(encode_name(name));
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let reply = if tcp {
        let mut stream = TcpStream::connect_timeout(&server, TCP_TIMEOUT)?;
        stream.set_read_timeout(Some(TCP_TIMEOUT))?;
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        stream.write_all(&framed)?;
        read_tcp_message(&mut stream).ok_or_else(|| invalid("no TCP answer"))?
    } else {
        let socket = UdpSocket::bind(if server.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        })?;
        socket.set_read_timeout(Some(Duration::from_secs(5)))?;
        socket.send_to(&q, server)?;
        let mut buf = [0u8; 65_535];
        let (len, _) = socket.recv_from(&mut buf)?;
        buf[..len].to_vec()
    };
    if reply.len() < 12 || reply[..2] != id.to_be_bytes() {
        return Err(invalid("not an answer to the query"));
    }
    let flags = u16::from_be_bytes([reply[2], reply[3]]);
    let count = |i: usize| usize::from(u16::from_be_bytes([reply[4 + 2 * i], reply[5 + 2 * i]]));
    let mut at = 12;
    for _ in 0..count(0) {
        at = read_name(&reply, at)
            .ok_or_else(|| invalid("bad question"))?
            .1
            + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..count(1) {
        let (_, after) = read_name(&reply, at).ok_or_else(|| invalid("bad answer"))?;
        let fixed = reply
            .get(after..after + 10)
            .ok_or_else(|| invalid("short answer"))?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let data = reply
            .get(after + 10..after + 10 + len)
            .ok_or_else(|| invalid("short rdata"))?;
        match (rtype, data.len()) {
            (TYPE_A, 4) => {
                addresses.push((IpAddr::from([data[0], data[1], data[2], data[3]]), ttl))
            }
            (TYPE_AAAA, 16) => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(data);
                addresses.push((IpAddr::from(octets), ttl));
            }
            _ => {}
        }
        at = after + 10 + len;
    }
    Ok(Lookup {
        rcode: (flags & 0x000f) as u8,
        authoritative: flags & 0x0400 != 0,
        truncated: flags & 0x0200 != 0,
        addresses,
        authority: count(2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Inventory;

    fn world() -> World {
        let inventory = Inventory::from_json(
            r#"{"domains": [{"name": "k8s.maas", "ttl": 45}, {"name": "ext.example", "authoritative": false}],
                "machines": [{"hostname": "cp-1", "domain": "k8s.maas", "status": "Deployed",
                              "ip_addresses": ["127.10.0.21", "::1"]},
                             {"hostname": "idle", "domain": "k8s.maas"}],
                "dns_resources": [{"fqdn": "api.k8s.maas", "address_ttl": 10,
                                   "ip_addresses": ["127.10.0.21", "127.10.0.22"]},
                                  {"fqdn": "empty.k8s.maas"}]}"#,
        )
        .unwrap();
        World::new(inventory).unwrap()
    }

    /// A query as glibc sends it: RD set, optionally an EDNS0 OPT record.
    fn query(name: &str, qtype: u16, edns: bool) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
        q.extend(encode_name(name));
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        if edns {
            q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        }
        q
    }

    struct Parsed {
        flags: u16,
        counts: [u16; 4],
        /// (type, ttl, rdata) of the answer section.
        answers: Vec<(u16, u32, Vec<u8>)>,
    }

    fn parse(msg: &[u8]) -> Parsed {
        let flags = u16::from_be_bytes([msg[2], msg[3]]);
        let c = |i: usize| u16::from_be_bytes([msg[4 + 2 * i], msg[5 + 2 * i]]);
        let counts = [c(0), c(1), c(2), c(3)];
        let (_, mut at) = read_name(msg, 12).unwrap();
        at += 4;
        let mut answers = Vec::new();
        for _ in 0..counts[1] {
            let (_, after) = read_name(msg, at).unwrap();
            let rtype = u16::from_be_bytes([msg[after], msg[after + 1]]);
            let ttl = u32::from_be_bytes(msg[after + 4..after + 8].try_into().unwrap());
            let len = usize::from(u16::from_be_bytes([msg[after + 8], msg[after + 9]]));
            answers.push((rtype, ttl, msg[after + 10..after + 10 + len].to_vec()));
            at = after + 10 + len;
        }
        Parsed {
            flags,
            counts,
            answers,
        }
    }

    #[test]
    fn answers_records_with_their_ttl() {
        let w = world();
        let a = parse(&answer(&w, &query("API.k8s.maas.", TYPE_A, false), Transport::Udp).unwrap());
        assert_eq!(a.flags & 0x000f, 0, "NOERROR");
        assert_ne!(a.flags & 0x0400, 0, "authoritative");
        assert_ne!(a.flags & 0x0100, 0, "RD echoed");
        assert_eq!(a.flags & 0x0080, 0, "no recursion available");
        assert_eq!(
            a.answers,
            vec![
                (TYPE_A, 10, vec![127, 10, 0, 21]),
                (TYPE_A, 10, vec![127, 10, 0, 22])
            ]
        );
        let m = parse(&answer(&w, &query("cp-1.k8s.maas", TYPE_A, true), Transport::Udp).unwrap());
        assert_eq!(
            m.answers,
            vec![(TYPE_A, 45, vec![127, 10, 0, 21])],
            "the domain's TTL"
        );
        assert_eq!(m.counts[3], 1, "OPT answered");
        let v6 = parse(
            &answer(
                &w,
                &query("cp-1.k8s.maas", TYPE_AAAA, false),
                Transport::Udp,
            )
            .unwrap(),
        );
        assert_eq!(v6.answers.len(), 1);
        assert_eq!(v6.answers[0].0, TYPE_AAAA);
    }

    #[test]
    fn nodata_nxdomain_refused_and_soa() {
        let w = world();
        let rcode = |p: &Parsed| p.flags & 0x000f;
        let nodata =
            parse(&answer(&w, &query("api.k8s.maas", TYPE_AAAA, false), Transport::Udp).unwrap());
        assert_eq!(
            (rcode(&nodata), nodata.counts[1], nodata.counts[2]),
            (0, 0, 1)
        );
        let empty =
            parse(&answer(&w, &query("empty.k8s.maas", TYPE_A, false), Transport::Udp).unwrap());
        assert_eq!(
            (rcode(&empty), empty.counts[1]),
            (0, 0),
            "a record without addresses exists"
        );
        for name in ["nope.k8s.maas", "idle.k8s.maas"] {
            let nx = parse(&answer(&w, &query(name, TYPE_A, false), Transport::Udp).unwrap());
            assert_eq!((rcode(&nx), nx.counts[2]), (3, 1), "{name}");
        }
        let refused =
            parse(&answer(&w, &query("example.org", TYPE_A, false), Transport::Udp).unwrap());
        assert_eq!(rcode(&refused), 5);
        let not_ours =
            parse(&answer(&w, &query("x.ext.example", TYPE_A, false), Transport::Udp).unwrap());
        assert_eq!(
            rcode(&not_ours),
            5,
            "a non-authoritative domain is not served"
        );
        let soa = parse(&answer(&w, &query("k8s.maas", TYPE_SOA, false), Transport::Udp).unwrap());
        assert_eq!(soa.answers.len(), 1);
        assert_eq!(soa.answers[0].0, TYPE_SOA);
        assert_eq!(soa.answers[0].1, 45);
    }

    #[test]
    fn malformed_packets_never_panic() {
        let w = world();
        assert!(answer(&w, &[1, 2, 3], Transport::Udp).is_none());
        let mut bad = query("api.k8s.maas", TYPE_A, false);
        bad.truncate(bad.len() - 3);
        let formerr = parse_header_only(&answer(&w, &bad, Transport::Udp).unwrap());
        assert_eq!(formerr & 0x000f, 1);
        // A compression loop in the question.
        let looped = [0u8, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1];
        assert_eq!(
            parse_header_only(&answer(&w, &looped, Transport::Udp).unwrap()) & 0x000f,
            1
        );
        // Random bytes, and random mutations of a good query.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let good = query("api.k8s.maas", TYPE_A, true);
        for round in 0..20_000 {
            let msg: Vec<u8> = if round % 2 == 0 {
                let len = (next() % 64) as usize;
                (0..len).map(|_| next() as u8).collect()
            } else {
                let mut m = good.clone();
                for _ in 0..=(next() % 4) {
                    let i = (next() as usize) % m.len();
                    m[i] = next() as u8;
                }
                m.truncate((next() as usize) % (m.len() + 1));
                m
            };
            let _ = answer(&w, &msg, Transport::Udp);
            let _ = answer(&w, &msg, Transport::Tcp);
        }
    }

    fn parse_header_only(msg: &[u8]) -> u16 {
        u16::from_be_bytes([msg[2], msg[3]])
    }

    #[test]
    fn udp_answers_that_do_not_fit_are_truncated() {
        let mut w = world();
        let ips: Vec<String> = (1..=200)
            .map(|i| format!("127.1.{}.{}", i / 250, i % 250))
            .collect();
        w.dns[0].ips = ips;
        let udp = answer(&w, &query("api.k8s.maas", TYPE_A, false), Transport::Udp).unwrap();
        let p = parse(&udp);
        assert_ne!(p.flags & 0x0200, 0, "TC");
        assert_eq!(p.counts[1], 0);
        let tcp =
            parse(&answer(&w, &query("api.k8s.maas", TYPE_A, false), Transport::Tcp).unwrap());
        assert_eq!(tcp.answers.len(), 200);
    }
}
