//! The client's types parse every real MAAS body in ../shared/maas-fixtures.
//! Skipped (with a printed reason) when the fixtures are not there; a
//! failure under `CI=true` (tests/support/skip.rs).

#[path = "support/skip.rs"]
mod skip;

use capmaas::maas::{
    check_image, BootResource, DnsResource, Domain, MaasBody, Machine, MachineStatus, PowerState,
    ResourcePool, Zone,
};
use serde_json::Value;

fn fixture(name: &str) -> Option<Value> {
    let path = skip::shared_dir().join("maas-fixtures").join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        }
        Err(e) => {
            skip::skip(
                name,
                &format!(
                    "{} not readable ({e}); the MAAS fixtures live in ../shared/maas-fixtures \
                     (or $CAPMAAS_SHARED/maas-fixtures)",
                    path.display()
                ),
            );
            None
        }
    }
}

#[test]
fn allocated_machine() {
    let Some(value) = fixture("machine-allocated.json") else {
        return;
    };
    let m: Machine = serde_json::from_value(value).unwrap();
    assert_eq!(m.system_id, "thr3am");
    assert_eq!(m.hostname, "calm-cod");
    assert_eq!(m.fqdn, "calm-cod.sample");
    assert_eq!(m.status, MachineStatus::Allocated);
    assert_eq!(m.status_name, "Allocated");
    assert_eq!(m.power_state, PowerState::On);
    assert_eq!(m.zone, "zone-north");
    assert_eq!(m.pool, "default");
    assert_eq!(m.owner.as_deref(), Some("admin"));
    assert_eq!(m.cpu_count, 3);
    assert!((m.storage - 9204.621312).abs() < 1e-6, "{}", m.storage);
    assert_eq!(m.swap_size, None);
    assert_eq!(m.architecture, "i386/generic");
    assert_eq!(m.ip_addresses.len(), 2);
    let boot = m.boot_interface.expect("boot_interface");
    assert_eq!(boot.id, 37);
    // Every interface with every link, AUTO ones without an address yet:
    // what the static-address step (link_subnet/unlink_subnet) acts on.
    assert_eq!(m.interfaces.len(), 6);
    let boot_links = &m.interfaces[0];
    assert_eq!(
        (boot_links.id, boot_links.name.as_str()),
        (37, "eth-lKRYAa")
    );
    assert_eq!(
        boot_links.links,
        [capmaas::maas::InterfaceLink {
            id: 14,
            mode: capmaas::maas::LinkMode::Auto,
            ip: None,
            subnet_id: Some(2),
            subnet_cidr: "172.16.2.0/24".into(),
            subnet_name: "name-v5djzQ".into(),
        }]
    );
    let vlan = &m.interfaces[4].links[0];
    assert_eq!(
        (vlan.id, vlan.mode, vlan.ip.as_deref(), vlan.subnet_id),
        (
            18,
            capmaas::maas::LinkMode::Static,
            Some("2001:db8:42:0:6556:13fa:7452:70da"),
            Some(5)
        )
    );
}

#[test]
fn dns_resources() {
    let Some(value) = fixture("dnsresources.json") else {
        return;
    };
    let list: Vec<DnsResource> =
        serde_json::from_value(value["dnsresources-read"].clone()).unwrap();
    assert_eq!(list[0].id, -1);
    assert_eq!(list[0].fqdn, "divine-buck.ubnt");
    assert!(
        list[0].ip_addresses.is_empty(),
        "null ip_addresses reads as empty"
    );
    for key in [
        "dnsresources-create",
        "dnsresources-read-by-id",
        "dnsresources-update",
    ] {
        let r: DnsResource = serde_json::from_value(value[key].clone()).unwrap();
        assert_eq!(
            (r.id, r.fqdn.as_str(), r.address_ttl),
            (1, "sample-machine.ubnt", None),
            "{key}"
        );
    }
}

#[test]
fn boot_resources_both_shapes() {
    let Some(old) = fixture("boot-resources.json") else {
        return;
    };
    let list: Vec<BootResource> = serde_json::from_value(old["boot-res-read"].clone()).unwrap();
    assert_eq!(list.len(), 6);
    assert!(check_image("ubuntu/bionic", &list).exists);
    assert!(
        !check_image("grub-efi/uefi", &list).exists,
        "bootloaders are not images"
    );
    let one: BootResource = serde_json::from_value(old["boot-res-read-by-id"].clone()).unwrap();
    assert_eq!(
        (one.kind.as_str(), one.name.as_str()),
        ("Uploaded", "newresource")
    );

    let Some(new) = fixture("boot-resources-list-3x.json") else {
        return;
    };
    let list: Vec<BootResource> = serde_json::from_value(new).unwrap();
    let alma = list.iter().find(|b| b.name == "alma9").unwrap();
    assert_eq!(alma.title.as_deref(), Some("Alma 9 Custom"));
    assert_eq!(alma.base_image.as_deref(), Some("rhel/9"));
    let check = check_image("custom/alma9", &list);
    assert_eq!(check.canonical.as_deref(), Some("custom/alma9"));
    let check = check_image("custom/alma8", &list);
    assert!(!check.exists);
    assert_eq!(
        check.closest.first().map(String::as_str),
        Some("custom/alma9")
    );
}

#[test]
fn zones_pools_domains() {
    let Some(value) = fixture("zones-pools-domains.json") else {
        return;
    };
    let zones: Vec<Zone> = serde_json::from_value(value["zones-read"].clone()).unwrap();
    assert_eq!(zones[1].name, "zone-north");
    let pools: Vec<ResourcePool> =
        serde_json::from_value(value["resourcepools-read"].clone()).unwrap();
    assert_eq!((pools[0].id, pools[0].name.as_str()), (0, "default"));
    let domains: Vec<Domain> = serde_json::from_value(value["domains-read"].clone()).unwrap();
    assert!(domains[0].is_default && domains[0].ttl.is_none());
    assert_eq!(domains[2].name, "ubnt");
}

/// Every recorded error body is classified as the reference says.
#[test]
fn error_bodies() {
    let Some(value) = fixture("errors.json") else {
        return;
    };
    let mut checked = 0;
    for (name, entry) in value.as_object().unwrap() {
        let Some(status) = entry.get("status").and_then(Value::as_u64) else {
            continue;
        };
        let body = match &entry["body"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let parsed = MaasBody::parse(&body);
        if entry["body"].is_object() {
            assert!(
                matches!(parsed, MaasBody::FieldErrors(_)),
                "{name}: {parsed:?}"
            );
        } else if body.is_empty() {
            assert_eq!(parsed, MaasBody::Empty, "{name}");
        } else {
            assert!(matches!(parsed, MaasBody::Text(_)), "{name}: {parsed:?}");
        }
        let retry_after = entry["headers"]["Retry-After"]
            .as_str()
            .map(|s| std::time::Duration::from_secs(s.parse().unwrap()));
        let err = capmaas::maas::Error::from_response("fixture", status as u16, &body, retry_after);
        let transient = status >= 500 || (status == 409 && retry_after.is_some());
        assert_eq!(err.is_transient(), transient, "{name}");
        assert_eq!(
            err.is_conflict(),
            status == 409 && retry_after.is_none(),
            "{name}"
        );
        assert_eq!(err.is_not_found(), status == 404, "{name}");
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} error entries");
}
