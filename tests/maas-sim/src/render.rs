//! MAAS JSON shapes for simulator objects. Machine JSON carries every key of
//! a MAAS 3.x machine (the 3.7 API example plus the fields added since), so
//! clients that deserialize strictly or read unusual fields see real shapes.

use serde_json::{json, Value};

use crate::status::Status;
use crate::world::network::subnet_json;
use crate::world::{BootResourceRec, DnsRec, DomainRec, Interface, Machine, Named, World};

const API: &str = "/MAAS/api/2.0";

pub fn zone(z: &Named) -> Value {
    json!({"name": z.name, "description": z.description, "id": z.id,
           "resource_uri": format!("{API}/zones/{}/", z.name)})
}

pub fn pool(p: &Named) -> Value {
    json!({"name": p.name, "description": p.description, "id": p.id,
           "resource_uri": format!("{API}/resourcepool/{}/", p.id)})
}

pub fn domain(world: &World, d: &DomainRec) -> Value {
    let count = world.dns.iter().filter(|r| r.domain_id == d.id).count();
    json!({"authoritative": d.authoritative, "ttl": d.ttl, "id": d.id, "name": d.name,
           "is_default": d.is_default, "resource_record_count": count,
           "resource_uri": format!("{API}/domains/{}/", d.id)})
}

pub fn boot_resource(b: &BootResourceRec, with_sets: bool) -> Value {
    let mut v = json!({"id": b.id, "type": b.kind, "name": b.name, "architecture": b.architecture,
                       "resource_uri": format!("{API}/boot-resources/{}/", b.id),
                       "last_deployed": null});
    let subarch = b.architecture.split('/').nth(1).unwrap_or("generic");
    v["subarches"] = json!(if b.kind == "Uploaded" {
        "generic".to_owned()
    } else {
        format!("generic,{subarch}")
    });
    if let Some(t) = &b.title {
        v["title"] = json!(t);
    }
    if let Some(base) = &b.base_image {
        v["base_image"] = json!(base);
    }
    if with_sets {
        v["sets"] = json!({"20240101": {"version": "20240101", "label": if b.kind == "Uploaded" { "uploaded" } else { "stable" },
            "size": 1_073_741_824u64, "complete": true,
            "files": {"root-tgz": {"filename": "root-tgz", "filetype": "root-tgz",
                "sha256": "0000000000000000000000000000000000000000000000000000000000000000",
                "size": 1_073_741_824u64, "complete": true}}}});
    }
    v
}

pub fn user(username: &str, is_superuser: bool) -> Value {
    json!({"username": username, "email": format!("{username}@example.com"),
           "is_superuser": is_superuser, "is_local": true,
           "resource_uri": format!("{API}/users/{username}/")})
}

pub fn dns_resource(world: &World, d: &DnsRec) -> Value {
    let ips: Vec<Value> = d
        .ips
        .iter()
        .map(|ip| {
            let subnet = ip
                .parse()
                .ok()
                .and_then(|ip| world.subnet_for_ip(ip))
                .map(subnet_json);
            json!({"ip": ip, "alloc_type": 4, "alloc_type_name": "User reserved",
                   "created": "2024-01-01T00:00:00.000", "owner": user("admin", true),
                   "subnet": subnet, "interface_set": [],
                   "resource_uri": format!("{API}/ipaddresses/")})
        })
        .collect();
    let records: Vec<Value> = d.data.iter().map(|x| dns_data(world, d, x)).collect();
    json!({"id": d.id, "fqdn": world.dns_fqdn(d), "address_ttl": d.address_ttl,
           "ip_addresses": ips, "resource_records": records,
           "resource_uri": format!("{API}/dnsresources/{}/", d.id)})
}

/// A DNSData as `DNSResourceRecordHandler` renders it.
pub fn dns_data(world: &World, d: &DnsRec, x: &crate::world::DnsData) -> Value {
    json!({"id": x.id, "fqdn": world.dns_fqdn(d), "ttl": null, "rrtype": x.rrtype,
           "rrdata": x.rrdata,
           "resource_uri": format!("{API}/dnsresourcerecords/{}/", x.id)})
}

/// An interface as `InterfaceHandler` renders it, links with their
/// subnets (`ip_address` only once assigned).
pub fn interface(world: &World, m: &Machine, iface: &Interface) -> Value {
    serde_json::from_str(&interface_text(world, m, iface)).unwrap_or(Value::Null)
}

/// [`interface`] as JSON text, built from the subnets' and VLANs'
/// pre-rendered JSON (lists of many machines are built this way).
fn interface_text(world: &World, m: &Machine, iface: &Interface) -> String {
    let vlan = world
        .subnets
        .iter()
        .find(|s| s.vlan.id == iface.vlan_id)
        .map_or("null", |s| s.vlan.json.as_str());
    let links: Vec<String> = iface
        .links
        .iter()
        .map(|l| {
            let mut link = format!("{{\"id\":{},\"mode\":\"{}\"", l.id, l.mode.name());
            if let Some(s) = l.subnet_id.and_then(|id| world.subnet(id)) {
                link.push_str(",\"subnet\":");
                link.push_str(&s.json);
            }
            if let Some(ip) = &l.ip {
                link.push_str(",\"ip_address\":");
                link.push_str(&json!(ip).to_string());
            }
            link.push('}');
            link
        })
        .collect();
    let scalars = json!({"firmware_version": null, "parents": [], "effective_mtu": 1500,
        "system_id": m.system_id, "tags": [], "enabled": true, "product": null,
        "type": "physical", "children": [], "vendor": null,
        "mac_address": iface.mac_address, "discovered": null, "id": iface.id,
        "params": "", "name": iface.name, "link_connected": true, "interface_speed": 10000,
        "link_speed": 10000, "numa_node": 0, "sriov_max_vf": 0,
        "resource_uri": format!("{API}/nodes/{}/interfaces/{}/", m.system_id, iface.id)})
    .to_string();
    format!(
        "{},\"vlan\":{vlan},\"links\":[{}]}}",
        scalars.strip_suffix('}').unwrap_or(&scalars),
        links.join(",")
    )
}

/// `default_gateways.ipv4`: the link chosen with `default_gateway`, else
/// the first link (boot interface first) on a subnet with an IPv4 gateway.
fn default_gateway(world: &World, m: &Machine) -> Value {
    let links = || m.interfaces.iter().flat_map(|i| &i.links);
    let gateway_of = |subnet_id: Option<i64>| {
        subnet_id
            .and_then(|id| world.subnet(id))
            .and_then(|s| s.gateway_ip.clone())
            .filter(|gw| gw.parse::<std::net::Ipv4Addr>().is_ok())
    };
    if let Some(link) = m
        .gateway_link_ipv4
        .and_then(|id| links().find(|l| l.id == id))
    {
        return json!({"gateway_ip": gateway_of(link.subnet_id), "link_id": link.id});
    }
    let gateway = links().find_map(|l| gateway_of(l.subnet_id));
    json!({"gateway_ip": gateway, "link_id": null})
}

fn block_device(m: &Machine, index: usize, size_gb: u64) -> Value {
    let id = m.seq * 100 + index as u64;
    let name = format!("sd{}", (b'a' + (index as u8 % 26)) as char);
    let size = size_gb * 1_000_000_000;
    let (used, partitions, used_for) = if index == 0 {
        let part_size = size.saturating_sub(8 * 1024 * 1024);
        (
            part_size,
            json!([{
            "uuid": format!("00000000-0000-4000-8000-{:012x}", id), "size": part_size,
            "bootable": false, "tags": [], "system_id": m.system_id, "device_id": id,
            "type": "partition", "id": id,
            "filesystem": {"fstype": "ext4", "label": "root", "uuid": format!("00000000-0000-4000-9000-{:012x}", id),
                           "mount_point": "/", "mount_options": null},
            "path": format!("/dev/disk/by-dname/{name}-part1"),
            "used_for": "ext4 formatted filesystem mounted at /",
            "resource_uri": format!("{API}/nodes/{}/blockdevices/{id}/partition/{id}", m.system_id)}]),
            "GPT partitioned with 1 partition",
        )
    } else {
        (0, json!([]), "Unused")
    };
    json!({"firmware_version": "1.0", "system_id": m.system_id, "tags": ["ssd"], "id_path": null,
        "size": size, "block_size": 512, "type": "physical", "uuid": null, "filesystem": null,
        "partitions": partitions, "partition_table_type": if index == 0 { json!("GPT") } else { Value::Null },
        "model": "SIMDISK", "storage_pool": null, "available_size": size - used, "id": id,
        "used_size": used, "path": format!("/dev/disk/by-dname/{name}"), "used_for": used_for,
        "serial": format!("SIM{id:08}"), "name": name, "numa_node": 0,
        "resource_uri": format!("{API}/nodes/{}/blockdevices/{id}/", m.system_id)})
}

fn status_pair(code: i64) -> (i64, &'static str) {
    match code {
        2 => (2, "Passed"),
        _ => (-1, "Unknown"),
    }
}

/// A machine as `MachineHandler` renders it.
pub fn machine(world: &World, m: &Machine) -> Value {
    serde_json::from_str(&machine_text(world, m)).unwrap_or(Value::Null)
}

/// [`machine`] as JSON text: what changes is rendered now, the rest (disks,
/// hardware, test results: most of the bytes) was rendered once when the
/// machine was added ([`machine_static`]).
pub fn machine_text(world: &World, m: &Machine) -> String {
    let domain = world
        .domains
        .iter()
        .find(|d| d.id == m.domain_id)
        .map(|d| domain(world, d))
        .unwrap_or(Value::Null);
    let zone = world
        .zones
        .iter()
        .find(|z| z.name == m.zone)
        .map(zone)
        .unwrap_or(Value::Null);
    let pool = world
        .pools
        .iter()
        .find(|p| p.name == m.pool)
        .map(pool)
        .unwrap_or(Value::Null);
    let interfaces: Vec<String> = m
        .interfaces
        .iter()
        .map(|i| interface_text(world, m, i))
        .collect();
    let fqdn = format!("{}.{}", m.hostname, world.domain_name(m.domain_id));
    let mut changing = json!({
        "status": m.status.code(),
        "status_name": m.status.name(),
        "status_message": m.status_event.message,
        "status_action": m.status_event.action,
        "default_gateways": {"ipv4": default_gateway(world, m),
                             "ipv6": {"gateway_ip": null, "link_id": null}},
        "pool": pool,
        "zone": zone,
        "domain": domain,
        "netboot": !matches!(m.status, Status::Deployed),
        "swap_size": m.swap_size,
        "hostname": m.hostname,
        "description": m.description,
        "hwe_kernel": m.hwe_kernel,
        "fqdn": fqdn,
        "locked": m.locked,
        "ip_addresses": m.ip_addresses(),
        "osystem": m.osystem,
        "distro_series": m.distro_series,
        "tag_names": m.tags,
        "power_state": m.power_state,
        "power_type": m.power_type,
        "owner": m.owner,
        "owner_data": m.owner_data,
        "ephemeral_deploy": m.ephemeral_deploy,
        "enable_hw_sync": m.enable_hw_sync,
        "enable_kernel_crash_dump": m.enable_kernel_crash_dump,
        "error_description": m.error_description,
    });
    if world.settings.release_at_least(3, 0) {
        // MAAS 3.0 renamed owner data to workload annotations and renders
        // the one store under both names; 2.x has only owner_data.
        changing["workload_annotations"] = json!(m.owner_data);
    }
    let changing = changing.to_string();
    let mut out = String::with_capacity(changing.len() + m.static_json.len() + 4096);
    out.push_str(changing.strip_suffix('}').unwrap_or(&changing));
    out.push(',');
    out.push_str(&m.static_json);
    out.push_str(",\"boot_interface\":");
    out.push_str(interfaces.first().map_or("null", String::as_str));
    out.push_str(",\"interface_set\":[");
    out.push_str(&interfaces.join(","));
    out.push_str("]}");
    out
}

/// The members of a machine's JSON that never change (without braces).
pub fn machine_static(m: &Machine) -> String {
    let disks: Vec<Value> = m
        .disks_gb
        .iter()
        .enumerate()
        .map(|(i, gb)| block_device(m, i, *gb))
        .collect();
    let storage_mb: f64 = m.disks_gb.iter().map(|gb| *gb as f64 * 1000.0).sum();
    let (passed, passed_name) = status_pair(2);
    let fixed = json!({
        "disable_ipv4": false,
        "other_test_status": passed, "other_test_status_name": passed_name,
        "boot_disk": disks.first().cloned().unwrap_or(Value::Null),
        "address_ttl": null,
        "physicalblockdevice_set": disks,
        "blockdevice_set": disks,
        "virtualblockdevice_set": [],
        "storage": storage_mb,
        "cpu_test_status": passed, "cpu_test_status_name": passed_name,
        "memory_test_status": passed, "memory_test_status_name": passed_name,
        "network_test_status": passed, "network_test_status_name": passed_name,
        "storage_test_status": passed, "storage_test_status_name": passed_name,
        "interface_test_status": passed, "interface_test_status_name": passed_name,
        "commissioning_status": passed, "commissioning_status_name": passed_name,
        "testing_status": passed, "testing_status_name": passed_name,
        "cpu_count": m.cpu_count,
        "cpu_speed": 2400,
        "current_installation_result_id": null,
        "current_commissioning_result_id": m.seq * 3,
        "current_testing_result_id": m.seq * 3 + 1,
        "architecture": m.architecture,
        "min_hwe_kernel": "",
        "system_id": m.system_id,
        "node_type": 0,
        "node_type_name": "Machine",
        "special_filesystems": [],
        "bios_boot_method": "uefi",
    });
    let hardware = json!({
        "memory": m.memory,
        "hardware_info": {"system_vendor": "Simulated", "system_product": "maas-sim", "system_family": "Unknown",
            "system_version": "Unknown", "system_sku": "Unknown", "system_serial": m.system_id,
            "cpu_model": "Simulated CPU", "mainboard_vendor": "Simulated", "mainboard_product": "Unknown",
            "mainboard_serial": "Unknown", "mainboard_version": "Unknown", "mainboard_firmware_vendor": "Unknown",
            "mainboard_firmware_date": "Unknown", "mainboard_firmware_version": "Unknown",
            "chassis_vendor": "Unknown", "chassis_type": "Rack Mount Chassis", "chassis_serial": "Unknown",
            "chassis_version": "Unknown"},
        "hardware_uuid": m.hardware_uuid,
        "volume_groups": [], "raids": [], "cache_sets": [], "bcaches": [],
        "numanode_set": [{"index": 0, "memory": m.memory, "cores": (0..m.cpu_count).collect::<Vec<_>>(), "hugepages_set": []}],
        "pod": m.pod.as_ref().map(|(id, name)| json!({"id": id, "name": name,
            "resource_uri": format!("{API}/pods/{id}/")})),
        "parent": null,
        "virtualmachine_id": null,
        "last_sync": null, "next_sync": null, "sync_interval": null,
        "is_dpu": false,
        "resource_uri": format!("{API}/machines/{}/", m.system_id),
    });
    let (fixed, hardware) = (fixed.to_string(), hardware.to_string());
    format!(
        "{},{}",
        &fixed[1..fixed.len() - 1],
        &hardware[1..hardware.len() - 1]
    )
}
