//! Test safety: the simulator never gives a machine an address outside the
//! loopback range unless its inventory says the machines live in a network
//! namespace the test made. capmaas connects to machine addresses (the
//! join probe), and tests may send traffic only to loopback or to their own
//! namespaces; this refusal is the check every capmaas run goes through.

mod wire;

const KEY: &str = "ck:tk:secretsecret";

fn inventory(machines: &str, extra: &str) -> maas_sim::Inventory {
    maas_sim::Inventory::from_json(&format!(
        r#"{{"api_keys": [{{"key": "{KEY}"}}],
            "boot_resources": [{{"name": "ubuntu/jammy", "architecture": "amd64/ga-22.04"}}],
            "subnets": [{{"cidr": "127.11.130.0/24"}}, {{"cidr": "10.11.130.0/24"}}],
            "machines": [{machines}] {extra}}}"#
    ))
    .unwrap()
}

fn refusal(inv: maas_sim::Inventory) -> String {
    match maas_sim::start("127.0.0.1:0", inv) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_built_in_and_shipped_inventory_gives_machines_loopback_addresses() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../inventory");
    let mut seen = 0;
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            let inv = maas_sim::Inventory::from_json(&text).unwrap();
            assert!(
                maas_sim::start("127.0.0.1:0", inv).is_ok(),
                "{} is refused",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen >= 2, "no inventories found under {root}");
}

#[test]
fn a_machine_given_a_non_loopback_address_is_refused() {
    let why = refusal(inventory(
        r#"{"hostname": "far", "ip_addresses": ["10.11.130.21"]}"#,
        "",
    ));
    assert!(why.contains("test safety: machine far"), "{why}");
    let why = refusal(inventory(
        r#"{"hostname": "far2", "interfaces": [{"name": "eth0",
             "links": [{"subnet": "10.11.130.0/24", "mode": "static", "ip_address": "10.11.130.9"}]}]}"#,
        "",
    ));
    assert!(why.contains("test safety: machine far2"), "{why}");
    // Loopback addresses are fine, and so is any address of machines that
    // live in a network namespace the test made (the KCP lab).
    assert_eq!(
        refusal(inventory(
            r#"{"hostname": "in-netns", "ip_addresses": ["10.11.130.21"]}"#,
            r#", "settings": {"machines_in_network_namespace": true}"#
        )),
        ""
    );
    assert_eq!(
        refusal(inventory(
            r#"{"hostname": "near", "ip_addresses": ["127.11.130.21"]}"#,
            ""
        )),
        ""
    );
}

#[test]
fn an_auto_address_from_a_non_loopback_subnet_is_refused_at_deploy() {
    // A machine whose AUTO link draws from 10.11.130.0/24 only at deploy.
    let inv = inventory(
        r#"{"hostname": "auto", "interfaces": [{"name": "eth0",
             "links": [{"subnet": "10.11.130.0/24", "mode": "auto"}]}]}"#,
        "",
    );
    let server = maas_sim::start("127.0.0.1:0", inv).unwrap();
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    let mut post = |path: &str| {
        wire::send(&mut stream, KEY, "POST", path, "");
        let (head, body) = wire::receive(&mut stream);
        (head, String::from_utf8_lossy(&body).into_owned())
    };
    let (head, body) = post("/MAAS/api/2.0/machines/?op=allocate");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["system_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (head, body) = post(&format!("/MAAS/api/2.0/machines/{id}/?op=deploy"));
    assert!(head.starts_with("HTTP/1.1 500"), "{head}{body}");
    assert!(body.contains("test safety: machine auto"), "{body}");
}
