//! VM hosts as MAAS ≤ 3.8 has them (`src/maasserver/api/vmhosts.py`,
//! `forms/pods.py`): listed with what is free, `op=compose` makes a
//! machine that commissions to Ready and takes from its host,
//! `DELETE machines/<id>/` gives it back; from 3.9 on, 410 Gone.

mod wire;

use std::net::TcpStream;

use serde_json::Value;

const KEY: &str = "ck:tk:secret";

fn inventory(version: &str) -> maas_sim::Inventory {
    maas_sim::Inventory::from_json(&format!(
        r#"{{"api_keys": [{{"key": "{KEY}"}}],
            "zones": [{{"name": "zone-a"}}], "pools": [{{"name": "vm-pool"}}],
            "subnet": {{"cidr": "127.11.130.0/24"}},
            "machines": [{{"hostname": "kvm-1", "status": "Deployed", "ip_addresses": ["127.11.130.10"]}}],
            "vm_hosts": [{{"name": "lxd-1", "zone": "zone-a", "pool": "vm-pool", "tags": ["fast"],
                           "cores": 8, "memory": 16384, "storage_gb": 500, "host": "kvm-1",
                           "vm_addresses": ["127.11.130.201", "127.11.130.202"]}}],
            "settings": {{"maas_version": "{version}", "commission_seconds": 0}}}}"#
    ))
    .unwrap()
}

struct Sim {
    _server: maas_sim::Server,
    stream: TcpStream,
}

impl Sim {
    fn new(version: &str) -> Sim {
        let server = maas_sim::start("127.0.0.1:0", inventory(version)).unwrap();
        let stream = TcpStream::connect(server.addr()).unwrap();
        Sim {
            _server: server,
            stream,
        }
    }

    fn call(&mut self, method: &str, path: &str, form: &str) -> (u16, String) {
        let path = format!("/MAAS/api/2.0/{path}");
        wire::send_form(&mut self.stream, KEY, method, &path, form);
        let (head, body) = wire::receive(&mut self.stream);
        let status = head[9..12].parse().unwrap();
        (status, String::from_utf8(body).unwrap())
    }

    fn json(&mut self, method: &str, path: &str, form: &str) -> Value {
        let (status, body) = self.call(method, path, form);
        assert_eq!(status, 200, "{method} {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }
}

#[test]
fn compose_takes_from_the_host_and_delete_gives_it_back() {
    let mut sim = Sim::new("3.7.3");
    let hosts = sim.json("GET", "vm-hosts/", "");
    let host = &hosts[0];
    assert_eq!(host["type"], "lxd");
    assert_eq!(host["zone"]["name"], "zone-a");
    assert_eq!(host["pool"]["name"], "vm-pool");
    assert_eq!(host["tags"][0], "fast");
    assert_eq!(host["available"]["cores"], 8);
    assert_eq!(host["available"]["local_storage"], 500_000_000_000_i64);
    assert!(host["host"]["system_id"].is_string());
    let (zone, pool) = (&host["zone"]["id"], &host["pool"]["id"]);

    let form = format!("hostname=vm-a&cores=2&memory=4096&storage=root:40&zone={zone}&pool={pool}");
    let composed = sim.json("POST", "vm-hosts/1/?op=compose", &form);
    let id = composed["system_id"].as_str().unwrap().to_string();
    assert_eq!(
        composed["resource_uri"],
        format!("/MAAS/api/2.0/machines/{id}/")
    );

    let host = sim.json("GET", "vm-hosts/1/", "");
    assert_eq!(host["used"]["cores"], 2);
    assert_eq!(host["available"]["memory"], 16384 - 4096);
    assert_eq!(host["available"]["local_storage"], 460_000_000_000_i64);
    assert_eq!(
        sim.json("GET", "pods/", "")[0]["used"]["cores"],
        2,
        "the older name"
    );

    let vm = sim.json("GET", &format!("machines/{id}/"), "");
    assert_eq!(vm["hostname"], "vm-a");
    assert_eq!(
        vm["status_name"], "Ready",
        "commissioned (commission_seconds 0)"
    );
    assert_eq!(vm["owner"], Value::Null);
    assert_eq!(
        (vm["cpu_count"].as_u64(), vm["memory"].as_u64()),
        (Some(2), Some(4096))
    );
    assert_eq!(
        (vm["zone"]["name"].as_str(), vm["pool"]["name"].as_str()),
        (Some("zone-a"), Some("vm-pool"))
    );
    assert_eq!(vm["pod"]["name"], "lxd-1");
    assert_eq!(vm["power_type"], "lxd");
    let by_name = sim.json("GET", "machines/?hostname=vm-a", "");
    assert_eq!(by_name.as_array().unwrap().len(), 1);

    // The composed machine is allocated like any other.
    let allocated = sim.json(
        "POST",
        "machines/?op=allocate",
        &format!("system_id={id}&agent_name=me"),
    );
    assert_eq!(allocated["status_name"], "Allocated");

    // A hostname is taken once; more than is free is refused.
    let (status, body) = sim.call("POST", "vm-hosts/1/?op=compose", "hostname=vm-a");
    assert_eq!(
        (status, body.as_str()),
        (
            400,
            r#"{"hostname":["Node with hostname \"vm-a\" already exists"]}"#
        )
    );
    let (status, body) = sim.call("POST", "vm-hosts/1/?op=compose", "cores=7");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("less than or equal to 6"), "{body}");

    let (status, _) = sim.call("DELETE", &format!("machines/{id}/"), "");
    assert_eq!(status, 204);
    let host = sim.json("GET", "vm-hosts/1/", "");
    assert_eq!(host["available"]["cores"], 8, "decomposed");
    assert_eq!(host["available"]["local_storage"], 500_000_000_000_i64);
}

#[test]
fn maas_after_3_8_has_no_vm_hosts() {
    let mut sim = Sim::new("3.9.0");
    for (method, path, form) in [
        ("GET", "vm-hosts/", ""),
        ("GET", "pods/", ""),
        ("GET", "vm-hosts/1/", ""),
        ("POST", "vm-hosts/1/?op=compose", "cores=1"),
    ] {
        let (status, body) = sim.call(method, path, form);
        assert_eq!(
            (status, body.as_str()),
            (410, "VM host (KVM) support has been removed from MAAS."),
            "{path}"
        );
    }
}
