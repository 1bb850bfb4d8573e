//! The DNS responder on the wire: UDP and TCP queries from std sockets, and
//! glibc's own resolver (`getent`) inside a network namespace whose
//! `/etc/netns/<ns>/resolv.conf` names the simulator, as the lab uses it.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Command, Stdio};

use maas_sim::dns::lookup;

const A: u16 = 1;
const AAAA: u16 = 28;

const INVENTORY: &str = r#"{
  "api_keys": [{"key": "ck:tk:secret"}],
  "domains": [{"name": "k8s.maas", "ttl": 45}],
  "boot_resources": [{"name": "ubuntu/jammy", "architecture": "amd64/ga-22.04"}],
  "machines": [
    {"hostname": "cp-1", "domain": "k8s.maas", "status": "Deployed", "ip_addresses": ["127.10.0.21"]},
    {"hostname": "cp-2", "domain": "k8s.maas", "ip_addresses": ["127.10.0.22"]}
  ],
  "dns_resources": [
    {"fqdn": "api.k8s.maas", "address_ttl": 10, "ip_addresses": ["127.10.0.21", "127.10.0.23"]}
  ]
}"#;

fn ips(found: &maas_sim::dns::Lookup) -> Vec<(String, u32)> {
    found
        .addresses
        .iter()
        .map(|(ip, ttl)| (ip.to_string(), *ttl))
        .collect()
}

#[test]
fn answers_over_udp_and_tcp() {
    let mut options = maas_sim::Options::new();
    options.inventory = maas_sim::Inventory::from_json(INVENTORY).unwrap();
    options.dns_listen = Some("127.0.0.1:0".into());
    let server = maas_sim::start_with(options).unwrap();
    let dns = server.dns_addr().expect("DNS asked for");
    for tcp in [false, true] {
        let api = lookup(dns, "api.k8s.maas", A, tcp).unwrap();
        assert_eq!(
            (api.rcode, api.authoritative, api.truncated),
            (0, true, false)
        );
        assert_eq!(
            ips(&api),
            [("127.10.0.21".into(), 10), ("127.10.0.23".into(), 10)]
        );
        let cp = lookup(dns, "CP-1.k8s.maas.", A, tcp).unwrap();
        assert_eq!(ips(&cp), [("127.10.0.21".into(), 45)]);
        let nodata = lookup(dns, "cp-1.k8s.maas", AAAA, tcp).unwrap();
        assert_eq!(
            (nodata.rcode, nodata.addresses.len(), nodata.authority),
            (0, 0, 1)
        );
        let not_deployed = lookup(dns, "cp-2.k8s.maas", A, tcp).unwrap();
        assert_eq!(not_deployed.rcode, 3, "no address yet: NXDOMAIN");
        assert_eq!(lookup(dns, "www.example.com", A, tcp).unwrap().rcode, 5);
    }
    let default = maas_sim::start("127.0.0.1:0", maas_sim::Inventory::default_story()).unwrap();
    assert_eq!(default.dns_addr(), None, "off by default");
    drop(server);
    assert!(
        lookup(dns, "api.k8s.maas", A, true).is_err(),
        "stopped with the server"
    );
}

/// glibc's resolver (RD set, A and AAAA, EDNS0 with `options edns0`)
/// through `/etc/netns/<ns>/resolv.conf`. Needs root for the network
/// namespace (CI runs as root); skipped elsewhere.
#[test]
fn glibc_resolves_through_a_network_namespace() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root || Command::new("ip").arg("-V").output().is_err() {
        println!("skipped: needs root and iproute2 to create a network namespace");
        return;
    }
    let ns = format!("maas-sim-dns-{}", std::process::id());
    let netns_dir = std::path::PathBuf::from("/etc/netns").join(&ns);
    let inventory = std::env::temp_dir().join(format!("{ns}.json"));
    std::fs::write(&inventory, INVENTORY).unwrap();
    let run = |args: &[&str]| {
        let status = Command::new("ip").args(args).status().unwrap();
        assert!(status.success(), "ip {args:?}");
    };
    run(&["netns", "add", &ns]);
    let cleanup = Cleanup {
        ns: ns.clone(),
        dir: netns_dir.clone(),
        inventory: inventory.clone(),
        child: None,
    };
    run(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
    // getaddrinfo(AI_ADDRCONFIG) sends no query at all unless the namespace
    // has an IPv4 address other than 127.0.0.1 (glibc's check_pf): the lab
    // puts the machines' addresses there; so does this test.
    run(&[
        "netns",
        "exec",
        &ns,
        "ip",
        "addr",
        "add",
        "127.10.0.99/32",
        "dev",
        "lo",
    ]);
    std::fs::create_dir_all(&netns_dir).unwrap();
    std::fs::write(
        netns_dir.join("resolv.conf"),
        "nameserver 127.0.0.1\noptions edns0 timeout:2 attempts:1\n",
    )
    .unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_maas-sim")])
        .args(["--listen", "127.0.0.1:0", "--dns-listen", "127.0.0.1:53"])
        .arg("--inventory")
        .arg(&inventory)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut cleanup = cleanup;
    cleanup.child = Some(child);
    let (mut url, mut dns) = (String::new(), String::new());
    out.read_line(&mut url).unwrap();
    out.read_line(&mut dns).unwrap();
    assert_eq!(dns.trim(), "dns 127.0.0.1:53", "{url} {dns}");

    let getent = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &ns, "getent"])
            .args(args)
            .output()
            .unwrap()
    };
    let hosts = getent(&["ahostsv4", "api.k8s.maas"]);
    let text = String::from_utf8_lossy(&hosts.stdout);
    let mut found: Vec<IpAddr> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    found.sort();
    found.dedup();
    assert_eq!(
        found,
        [
            "127.10.0.21".parse::<IpAddr>().unwrap(),
            "127.10.0.23".parse().unwrap()
        ],
        "{text}"
    );
    // A and AAAA in parallel on one socket (the AAAA is NODATA).
    let both = getent(&["ahosts", "cp-1.k8s.maas"]);
    assert!(
        String::from_utf8_lossy(&both.stdout).starts_with("127.10.0.21"),
        "{both:?}"
    );
    let one = getent(&["hosts", "cp-1.k8s.maas"]);
    assert!(
        String::from_utf8_lossy(&one.stdout).starts_with("127.10.0.21"),
        "{one:?}"
    );
    let unknown = getent(&["hosts", "nope.k8s.maas"]);
    assert_eq!(unknown.status.code(), Some(2), "not found: {unknown:?}");
    drop(cleanup);
}

/// Removes what the namespace test made, also when it fails.
struct Cleanup {
    ns: String,
    dir: std::path::PathBuf,
    inventory: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.ns])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.inventory);
    }
}
