//! Client conformance against the real MAAS 3.4.8 region (issue 20): every
//! MAAS call the product makes, made with the product's own client
//! (`capmaas::maas::Client`) against real MAAS, in the world of
//! tests/support/real_maas.rs (the README story's pools, zones, tags,
//! domain, custom image, an admin and a non-admin key, machines played
//! through MAAS's metadata API). Each answer must parse into the client's
//! types, each refusal must become the right typed error carrying MAAS's
//! own text. Also: the simulator held to real MAAS (the same request
//! sequence to both, `the_simulator_answers_as_real_maas_does`), and the
//! `capmaas` binary on the real API server (tests/k8s-testbin) against
//! real MAAS (`a_deployed_machine_whose_power_is_unknown_is_never_powered_on`).
//!
//!     cargo test --test real_maas -- --nocapture
//!
//! Needs `../shared/real-maas` (or `$CAPMAAS_SHARED/real-maas`) and root;
//! elsewhere it says why it skips, and under `CI=true` it fails.
//!
//! The tests share one MAAS and its seeded machines: each test works on
//! machines no other test touches (named below).

mod support;

use std::time::Duration;

use capmaas::maas::{
    AllocateRequest, AnnotationsOp, DeployRequest, EventQuery, MaasBody, MachineFilter,
    MachineStatus, PowerState, ReleaseRequest, ReserveFrom, IDENTITY_KEY,
};
use serde_json::{json, Value};
use support::objects;
use support::real_maas::{self, CUSTOM_IMAGE, DOMAIN, OPERATOR, SUBNET};
use support::story::{self, Capmaas};

/// Inventory calls, read as admin and as a non-admin user (no machine
/// changes).
#[test]
fn inventory_answers_parse_into_the_clients_types() {
    let Some(maas) = real_maas::world("inventory_answers_parse_into_the_clients_types") else {
        return;
    };
    let admin = maas.admin_client();
    let operator = maas.operator_client();

    admin.check().expect("check");
    let me = admin.whoami().expect("whoami");
    assert_eq!(me.username, "admin");
    assert!(me.is_superuser);
    let op = operator.whoami().expect("whoami as operator");
    assert_eq!(op.username, OPERATOR);
    assert!(!op.is_superuser);
    // What `capmaas doctor` reports as the MAAS version.
    let version = operator.version().expect("version");
    assert_eq!(version.version, "3.4.8");
    assert_eq!(version.subversion, "");
    assert!(!version.has_pool_entitlements());
    assert!(
        version.capabilities.iter().any(|c| c == "authenticate-api"),
        "{version:?}"
    );

    let zones = admin.zones().expect("zones");
    for zone in ["default", "zone-a", "zone-b"] {
        assert!(zones.iter().any(|z| z.name == zone), "{zone} in {zones:?}");
    }
    let pools = admin.resource_pools().expect("pools");
    for pool in ["default", "cp-pool", "worker-pool"] {
        assert!(pools.iter().any(|p| p.name == pool), "{pool} in {pools:?}");
    }
    let tags = admin.tags().expect("tags");
    for tag in ["control-plane", "worker", "gpu"] {
        assert!(tags.iter().any(|t| t.name == tag), "{tag} in {tags:?}");
    }
    let domains = admin.domains().expect("domains");
    assert!(domains.iter().any(|d| d.name == DOMAIN), "{domains:?}");
    let subnets = admin.subnets().expect("subnets");
    assert!(subnets.iter().any(|s| s.cidr == SUBNET), "{subnets:?}");

    let images = admin.boot_resources().expect("boot resources");
    assert!(
        images.iter().any(|r| r.name == "ubuntu/jammy"),
        "{images:?}"
    );
    for user_wrote in [CUSTOM_IMAGE, "u-2204-0-k-1264-0", "ubuntu/jammy", "jammy"] {
        let check = admin.check_image(user_wrote).expect("check_image");
        assert!(check.exists, "{user_wrote}: {check:?}");
    }
    // The non-admin user sees the same images (the provider runs with such
    // a key).
    let typo = operator
        .check_image("custom/u-2204-0-k-1264-O")
        .expect("check_image");
    assert!(!typo.exists, "{typo:?}");
    assert_eq!(
        typo.closest.first().map(String::as_str),
        Some(CUSTOM_IMAGE),
        "{typo:?}"
    );

    // Machines with the README story's hardware facts.
    let cps = admin
        .machines(&MachineFilter {
            pool: Some("cp-pool".into()),
            ..MachineFilter::default()
        })
        .expect("machines in cp-pool");
    let mut names: Vec<&str> = cps.iter().map(|m| m.hostname.as_str()).collect();
    names.sort();
    assert_eq!(names, ["cp-1", "cp-2"]);
    let id = maas.system_id("worker-5");
    let m = admin.machine(id).expect("machine");
    assert_eq!(m.hostname, "worker-5");
    assert_eq!(m.fqdn, format!("worker-5.{DOMAIN}"));
    assert_eq!((m.cpu_count, m.memory), (32, 131072));
    assert_eq!(
        (m.pool.as_str(), m.zone.as_str()),
        ("worker-pool", "zone-a")
    );
    let mut tags = m.tag_names.clone();
    tags.sort();
    assert_eq!(tags, ["gpu", "worker"]);
    assert_eq!(m.architecture, "amd64/generic");
    assert_eq!(m.power_type, "manual");
    // Real MAAS: a manual machine's stored power state is "unknown".
    assert_eq!(m.power_state, PowerState::Unknown);
    assert!(
        (m.storage - 120_000.0).abs() < 1.0,
        "storage in MB: {}",
        m.storage
    );
    let boot = m.boot_interface.as_ref().expect("boot interface");
    assert_eq!(m.interfaces.len(), 1, "{:?}", m.interfaces);
    assert_eq!(m.interfaces[0].id, boot.id);
    let by_tag = admin
        .machines(&MachineFilter {
            tags: vec!["gpu".into()],
            ..MachineFilter::default()
        })
        .expect("machines by tag");
    assert_eq!(by_tag.len(), 1, "{by_tag:?}");
    assert_eq!(by_tag[0].system_id, id);
    // A non-admin user sees the machines nobody owns (spare-1 is never
    // allocated) and its own, not admin's.
    let seen = operator
        .machines(&MachineFilter::by_hostname("spare-1"))
        .expect("machines as operator");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].status, MachineStatus::Ready);
}

/// cp-1: allocate with the story's constraints, owner data, swap, a static
/// link, deploy the custom image with user data, the machine plays its
/// deployment, power calls, events, release.
#[test]
fn a_control_plane_machine_through_its_life() {
    let Some(maas) = real_maas::world("a_control_plane_machine_through_its_life") else {
        return;
    };
    let admin = maas.admin_client();
    let id = maas.system_id("cp-1");

    let picked = admin
        .allocate(&AllocateRequest {
            cpu_count: Some(8),
            mem: Some(32768),
            pool: Some("cp-pool".into()),
            zone: Some("zone-a".into()),
            tags: vec!["control-plane".into()],
            not_tags: vec!["gpu".into()],
            min_disk_gb: Some(100),
            arch: vec!["amd64".into()],
            agent_name: Some("real-maas/cp-0".into()),
            comment: Some("capmaas conformance".into()),
            ..AllocateRequest::default()
        })
        .expect("allocate");
    assert_eq!(
        picked.system_id, id,
        "cp-1 is the one control plane in zone-a"
    );
    assert_eq!(picked.status, MachineStatus::Allocated);
    assert_eq!(picked.owner.as_deref(), Some("admin"));
    let found = admin
        .machines(&MachineFilter::by_agent_name("real-maas/cp-0"))
        .expect("machines by agent name");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].system_id, id);
    let owned = admin.machines_owned_by("admin").expect("owned");
    assert!(owned.iter().any(|m| m.system_id == id));

    let with_data = admin
        .set_owner_data(
            id,
            &[
                (IDENTITY_KEY, Some("capmaas/real/cp-0")),
                ("other", Some("x")),
            ],
        )
        .expect("set_owner_data");
    assert_eq!(
        with_data.owner_data.get(IDENTITY_KEY).map(String::as_str),
        Some("capmaas/real/cp-0")
    );
    let without = admin
        .set_owner_data(id, &[("other", None)])
        .expect("delete owner data");
    assert!(
        !without.owner_data.contains_key("other"),
        "{:?}",
        without.owner_data
    );

    // Issue 22 item 5: MAAS 3.4.8 already has set_workload_annotations (from
    // 3.0 on), and it and set_owner_data write one store, which the machine
    // and the machines list render as both workload_annotations and
    // owner_data: the identity written either way reads the same.
    let op = admin.version().expect("version/").annotations_op();
    assert_eq!(op, AnnotationsOp::SetWorkloadAnnotations);
    let annotated = admin
        .set_annotations(id, op, &[("annotated", Some("1"))])
        .expect("set_workload_annotations");
    assert_eq!(annotated.identity(), Some("capmaas/real/cp-0"));
    let raw = maas.admin("GET", &format!("machines/{id}/"), &[]);
    assert_eq!(
        raw["workload_annotations"],
        json!({IDENTITY_KEY: "capmaas/real/cp-0", "annotated": "1"}),
        "{raw}"
    );
    assert_eq!(raw["owner_data"], raw["workload_annotations"]);
    admin
        .set_owner_data(id, &[("annotated", None)])
        .expect("delete with the deprecated op");
    let listed = maas.admin("GET", &format!("machines/?id={id}"), &[]);
    assert_eq!(
        listed[0]["workload_annotations"],
        json!({IDENTITY_KEY: "capmaas/real/cp-0"}),
        "{listed}"
    );
    assert_eq!(listed[0]["owner_data"], listed[0]["workload_annotations"]);

    let swapless = admin
        .update_machine(id, &[("swap_size", "0")])
        .expect("swap_size");
    assert_eq!(swapless.swap_size, Some(0));

    // A static address on the boot interface, then taken away again.
    let subnet = admin
        .subnets()
        .expect("subnets")
        .into_iter()
        .find(|s| s.cidr == SUBNET)
        .expect("the seeded subnet");
    let iface = picked.boot_interface.as_ref().expect("boot interface").id;
    let auto = picked.interfaces[0].links.clone();
    assert!(
        !auto.is_empty(),
        "seeded with an AUTO link: {:?}",
        picked.interfaces
    );
    for link in &auto {
        admin
            .unlink_subnet(id, iface, link.id)
            .expect("unlink the AUTO link");
    }
    admin
        .link_subnet_static(id, iface, subnet.id, "127.11.130.21")
        .expect("link_subnet STATIC");
    let linked = admin.machine(id).expect("machine");
    let link = linked.interfaces[0]
        .links
        .iter()
        .find(|l| l.ip.as_deref() == Some("127.11.130.21"))
        .unwrap_or_else(|| panic!("static link: {:?}", linked.interfaces));
    let again = admin
        .link_subnet_static(id, iface, subnet.id, "127.11.130.21")
        .expect_err("the same address twice");
    // Real MAAS answers a taken address with 404 (the simulator agrees).
    assert!(again.is_not_found(), "{again}");
    assert_eq!(again.message(), "IP address is already in use.", "{again}");
    assert_eq!(link.subnet_id, Some(subnet.id));

    let user_data = b"#cloud-config\nruncmd: [kubeadm join]\n".to_vec();
    let deploying = admin
        .deploy(
            id,
            &DeployRequest {
                image: Some(CUSTOM_IMAGE.into()),
                user_data: Some(user_data),
                ..DeployRequest::default()
            },
        )
        .expect("deploy the custom image");
    assert_eq!(deploying.status, MachineStatus::Deploying);
    assert_eq!(deploying.osystem, "custom");
    assert_eq!(deploying.distro_series, "u-2204-0-k-1264-0");
    // Real MAAS: the deploy answer reports power as it was stored (the
    // static address was there before; AUTO ones come after the answer:
    // the_simulator_answers_as_real_maas_does).
    assert_eq!(deploying.power_state, PowerState::Unknown);
    assert_eq!(deploying.ip_addresses, ["127.11.130.21"]);

    maas.complete_deployment(id);
    let deployed = admin.machine(id).expect("machine");
    assert_eq!(deployed.status, MachineStatus::Deployed);
    assert_eq!(deployed.power_state, PowerState::On);
    assert_eq!(deployed.ip_addresses, ["127.11.130.21"]);
    assert_eq!(
        deployed.owner_data.get(IDENTITY_KEY).map(String::as_str),
        Some("capmaas/real/cp-0")
    );

    let events = admin
        .events(&EventQuery {
            system_ids: vec![id.to_owned()],
            limit: Some(50),
            ..EventQuery::default()
        })
        .expect("events");
    assert!(!events.is_empty());
    assert!(
        events.windows(2).all(|w| w[0].id > w[1].id),
        "newest first: {:?}",
        events.iter().map(|e| e.id).collect::<Vec<_>>()
    );
    assert!(events.iter().all(|e| e.system_id == id), "{events:?}");
    let later = admin
        .events(&EventQuery {
            system_ids: vec![id.to_owned()],
            after: Some(events[events.len() - 1].id),
            ..EventQuery::default()
        })
        .expect("events after");
    assert_eq!(later.len(), events.len() - 1);

    // The manual power driver powers nothing but answers; the answer parses.
    let off = admin
        .power_off_with_comment(id, Some("conformance"))
        .expect("power_off");
    assert_eq!(off.system_id, id);
    let on = admin
        .power_on_with_comment(id, Some("conformance"))
        .expect("power_on");
    assert_eq!(on.system_id, id);
    // No rack controller can reach a BMC here: real MAAS answers 503 with
    // its reason (the simulator too, with `no_rack_controller`).
    let err = admin
        .with_max_retries(0)
        .query_power_state(id)
        .expect_err("no rack");
    assert_eq!(err.http_status(), Some(503), "{err}");
    assert!(err.is_transient(), "{err}");
    assert!(
        err.message()
            .contains("No rack controllers can access the BMC"),
        "{err}"
    );

    let released = admin
        .release(
            id,
            &ReleaseRequest {
                comment: Some("done".into()),
                ..ReleaseRequest::default()
            },
        )
        .expect("release");
    assert!(
        matches!(
            released.status,
            MachineStatus::Releasing | MachineStatus::Ready
        ),
        "{:?}",
        released.status
    );
    let ready = maas.wait_status(id, "Ready", Duration::from_secs(30));
    assert_eq!(ready["owner"], serde_json::Value::Null);
    let after = admin.machine(id).expect("machine");
    assert!(
        after.owner_data.is_empty(),
        "release clears owner data: {:?}",
        after.owner_data
    );
    assert_eq!(after.swap_size, Some(0), "a release keeps swap_size");
}

/// worker-2: a deployment the machine reports as failed, on demand.
#[test]
fn a_failed_deployment_carries_the_installers_text() {
    let Some(maas) = real_maas::world("a_failed_deployment_carries_the_installers_text") else {
        return;
    };
    let admin = maas.admin_client();
    let id = maas.system_id("worker-2");
    admin
        .allocate(&AllocateRequest {
            system_id: Some(id.into()),
            agent_name: Some("real-maas/worker-2".into()),
            ..AllocateRequest::default()
        })
        .expect("allocate by system_id");
    admin
        .deploy(
            id,
            &DeployRequest {
                image: Some("ubuntu/jammy".into()),
                ..DeployRequest::default()
            },
        )
        .expect("deploy jammy");
    maas.fail_deployment(id, "curtin: disk sda vanished");
    let failed = admin.machine(id).expect("machine");
    assert_eq!(failed.status, MachineStatus::FailedDeployment);
    // MAAS keeps its own words in the status message; the installer's
    // text is in the events.
    let message = failed.status_message.clone().unwrap_or_default();
    assert!(
        message.contains("Installation failed"),
        "status_message {message:?}"
    );
    let events = admin
        .events(&EventQuery {
            system_ids: vec![id.to_owned()],
            ..EventQuery::default()
        })
        .expect("events");
    assert!(
        events
            .iter()
            .any(|e| e.description.contains("disk sda vanished")),
        "{events:?}"
    );
    admin
        .release(id, &ReleaseRequest::default())
        .expect("release the failed machine");
    maas.wait_status(id, "Ready", Duration::from_secs(30));
}

/// Every refusal the product meets becomes the right typed error with
/// MAAS's text. Machines: worker-5 (allocated here), spare-1 (never).
#[test]
fn refusals_are_typed_errors_carrying_maas_text() {
    let Some(maas) = real_maas::world("refusals_are_typed_errors_carrying_maas_text") else {
        return;
    };
    let admin = maas.admin_client();
    let operator = maas.operator_client();

    // The release the product compares deploy options against.
    let version = admin.version().expect("version/");
    assert_eq!(
        capmaas::maas::MaasVersion::parse(&version.version),
        Some(capmaas::maas::MaasVersion::new(3, 4, 8)),
        "{version:?}"
    );

    // 409: nothing matches.
    let err = admin
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            mem: Some(1 << 30),
            ..AllocateRequest::default()
        })
        .expect_err("no machine has 1 TiB");
    assert!(err.is_conflict(), "{err}");
    assert!(!err.is_transient());
    assert!(
        err.message()
            .contains("No available machine matches constraints"),
        "{err}"
    );
    assert!(err.message().contains("cp-pool"), "{err}");

    // 400: constraints naming what does not exist.
    let err = admin
        .allocate(&AllocateRequest {
            zone: Some("zone-z".into()),
            ..AllocateRequest::default()
        })
        .expect_err("no zone-z");
    assert!(err.is_bad_request(), "{err}");
    let MaasBody::FieldErrors(fields) = err.body() else {
        panic!("field errors: {err:?}")
    };
    assert_eq!(fields["zone"], ["No such zone(s): zone-z."], "{err}");
    let err = admin
        .allocate(&AllocateRequest {
            tags: vec!["no-such-tag".into()],
            ..AllocateRequest::default()
        })
        .expect_err("no such tag");
    assert!(err.is_bad_request(), "{err}");
    assert!(
        err.message().contains("No such tag(s): 'no-such-tag'."),
        "{err}"
    );
    let err = admin
        .allocate(&AllocateRequest {
            pool: Some("no-pool".into()),
            ..AllocateRequest::default()
        })
        .expect_err("no such pool");
    assert!(err.is_bad_request(), "{err}");
    assert!(err.message().contains("no-pool"), "{err}");

    // 400: a typo in the image name, and the machine stays Allocated.
    let id = maas.system_id("worker-5");
    admin
        .allocate(&AllocateRequest {
            name: Some("worker-5".into()),
            ..AllocateRequest::default()
        })
        .expect("allocate by name");
    let err = admin
        .deploy(
            id,
            &DeployRequest {
                image: Some("custom/u-2204-0-k-1264-O".into()),
                ..DeployRequest::default()
            },
        )
        .expect_err("no such image");
    assert!(err.is_bad_request(), "{err}");
    assert!(err.message().contains("u-2204-0-k-1264-O"), "{err}");
    assert_eq!(
        admin.machine(id).expect("machine").status,
        MachineStatus::Allocated
    );

    // 403: the non-admin user on a machine it does not own, and on DNS.
    let spare = maas.system_id("spare-1");
    let err = operator.power_on(id).expect_err("admin's machine");
    assert!(err.is_forbidden(), "{err}");
    // A machine nobody allocated: MAAS checks the state first (409).
    let err = operator.power_on(spare).expect_err("not allocated");
    assert!(err.is_conflict(), "{err}");
    assert_eq!(err.message(), "Can't start node: it hasn't been allocated.");
    let err = operator
        .update_machine(spare, &[("swap_size", "0")])
        .expect_err("not admin");
    assert!(err.is_forbidden(), "{err}");
    let err = operator
        .set_owner_data(id, &[("k", Some("v"))])
        .expect_err("admin's machine");
    assert!(err.is_forbidden(), "{err}");
    let err = operator
        .create_dns_resource(
            &format!("forbidden.{DOMAIN}"),
            10,
            &["127.11.130.70".into()],
        )
        .expect_err("DNS is admin's");
    assert!(err.is_forbidden(), "{err}");
    eprintln!("operator creating DNS: {err}");

    // 404.
    let err = admin.machine("nosuch").expect_err("no machine nosuch");
    assert!(err.is_not_found(), "{err}");
    let err = admin
        .dns_resource(999_999)
        .expect_err("no DNS resource 999999");
    assert!(err.is_not_found(), "{err}");
    let err = admin
        .release("nosuch", &ReleaseRequest::default())
        .expect_err("no machine");
    assert!(err.is_not_found(), "{err}");

    // 503: no rack controller can ask a BMC.
    let err = admin
        .with_max_retries(0)
        .query_power_state(spare)
        .expect_err("no rack");
    assert_eq!(err.http_status(), Some(503), "{err}");
    assert!(err.is_transient());
    assert!(
        err.message()
            .contains("No rack controllers can access the BMC"),
        "{err}"
    );

    admin
        .release(id, &ReleaseRequest::default())
        .expect("release worker-5");
    maas.wait_status(id, "Ready", Duration::from_secs(30));
}

/// The control-plane DNS record and IP reservations, as the product keeps
/// them.
#[test]
fn dns_records_and_ip_reservations() {
    let Some(maas) = real_maas::world("dns_records_and_ip_reservations") else {
        return;
    };
    let admin = maas.admin_client();
    let fqdn = format!("api-real.{DOMAIN}");
    for stale in admin.dns_resources(&fqdn).expect("dns lookup") {
        admin
            .delete_dns_resource(stale.id)
            .expect("delete a record the last run left");
    }
    let created = admin
        .create_dns_resource(&fqdn, 10, &["127.11.130.50".into(), "127.11.130.51".into()])
        .expect("create");
    assert_eq!(created.fqdn, fqdn);
    let mut ips = created.ip_addresses.clone();
    ips.sort();
    assert_eq!(ips, ["127.11.130.50", "127.11.130.51"]);
    let found = admin.dns_resources(&fqdn).expect("lookup");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, created.id);
    assert_eq!(found[0].address_ttl, Some(10));
    let moved = admin
        .set_dns_resource_ips(created.id, &["127.11.130.52".into()])
        .expect("set ips");
    assert_eq!(moved.ip_addresses, ["127.11.130.52"]);
    assert_eq!(
        admin.dns_resource(created.id).expect("get").ip_addresses,
        ["127.11.130.52"]
    );
    admin.delete_dns_resource(created.id).expect("delete");
    assert!(admin.dns_resources(&fqdn).expect("lookup").is_empty());
    let err = admin
        .delete_dns_resource(created.id)
        .expect_err("deleted already");
    assert!(err.is_not_found(), "{err}");

    for stale in admin
        .ip_reservations(Some("127.11.130.60"))
        .expect("reservations")
    {
        admin
            .release_ip(&stale.ip)
            .expect("release a reservation the last run left");
    }
    let reserved = admin
        .reserve_ip(&ReserveFrom::Address("127.11.130.60".into()))
        .expect("reserve");
    assert_eq!(reserved.ip, "127.11.130.60");
    let listed = admin
        .ip_reservations(Some("127.11.130.60"))
        .expect("reservations");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let err = admin
        .reserve_ip(&ReserveFrom::Address("127.11.130.60".into()))
        .expect_err("reserved twice");
    assert!(err.is_refused(), "{err}");
    eprintln!("reserving an address twice: {err}");
    let next = admin
        .reserve_ip(&ReserveFrom::Subnet(SUBNET.into()))
        .expect("reserve from the subnet");
    assert!(next.ip.starts_with("127.11.130."), "{next:?}");
    admin.release_ip("127.11.130.60").expect("release");
    admin.release_ip(&next.ip).expect("release");
    assert!(admin
        .ip_reservations(Some("127.11.130.60"))
        .expect("reservations")
        .is_empty());
}

// ---- the simulator held to real MAAS (issue 20 item 4)

/// One MAAS the differential test talks to, over raw API 2.0 (what the
/// product's client would hide: status codes, body shapes).
struct Side<'a> {
    name: &'static str,
    url: String,
    admin: String,
    operator: String,
    agent: ureq::Agent,
    system_id: Box<dyn Fn(&str) -> String + 'a>,
    /// The machine finishes its deployment and its BMC reports `on`.
    deployed: Box<dyn Fn(&str) + 'a>,
}

impl Side<'_> {
    /// `METHOD api/2.0/PATH` (op and filters in PATH's query), `form` as
    /// the body; → (status, JSON or the text as a JSON string).
    fn call(&self, key: &str, method: &str, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}/api/2.0/{path}", self.url))
            .header("Authorization", real_maas::oauth_header(key))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(capmaas::maas::encode_pairs(form))
            .expect("request");
        let mut response = self
            .agent
            .run(request)
            .unwrap_or_else(|e| panic!("{}: {method} {path}: {e}", self.name));
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(8 << 20)
            .read_to_string()
            .unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }
}

/// Machine fields newer MAAS added (`error_description` and `is_dpu` in 3.5,
/// `enable_kernel_crash_dump` in 3.6), which the simulator answers and
/// real MAAS 3.4.8 does not; the product reads none of them.
const NEWER_MAAS_MACHINE_FIELDS: [&str; 3] =
    ["enable_kernel_crash_dump", "error_description", "is_dpu"];

/// What must agree: the status code and, per answer, its shape and the
/// facts a provider reads (never ids, times or addresses' values); for a
/// machine, also every field of the answer.
fn summary(status: u16, body: &Value) -> Value {
    let shape = match body {
        Value::Object(o) if o.contains_key("system_id") => json!({
            "machine": {
                "status": body["status_name"],
                "power_state": body["power_state"],
                "owned": !body["owner"].is_null(),
                "addresses": body["ip_addresses"].as_array().map(Vec::len),
                "osystem": body["osystem"],
                "swap_size": body["swap_size"],
                "hostname": body["hostname"],
                "enable_hw_sync": body["enable_hw_sync"],
                "fields": o.keys().filter(|k| !NEWER_MAAS_MACHINE_FIELDS.contains(&k.as_str()))
                    .collect::<Vec<_>>(),
            }
        }),
        Value::Object(o) if o.contains_key("fqdn") => json!({
            "dns": {"fqdn": body["fqdn"], "addresses": body["ip_addresses"].as_array()
                .map(|a| a.iter().map(|ip| ip["ip"].clone()).collect::<Vec<_>>()),
                "ttl": body["address_ttl"]}
        }),
        Value::Object(o) if o.contains_key("events") => {
            let ids: Vec<i64> = body["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["id"].as_i64())
                .collect();
            json!({"events": {
                "keys": o.keys().collect::<Vec<_>>(),
                "some": !ids.is_empty(),
                "newest_first": ids.windows(2).all(|w| w[0] > w[1]),
            }})
        }
        // Field errors: which fields.
        Value::Object(o) => json!({"fields": o.keys().collect::<Vec<_>>()}),
        Value::Array(a) => json!({"list": a.len()}),
        Value::String(text) => json!({"text": text.split(':').next().unwrap_or_default().trim()}),
        other => json!({"other": other}),
    };
    json!({"code": status, "body": shape})
}

/// The request sequence, on one side: → (step, summary) in order.
fn differential_sequence(side: &Side) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    let mut note = |step: &str, (status, body): (u16, Value)| {
        seen.push((step.to_owned(), summary(status, &body)));
        body
    };
    let (admin, operator) = (side.admin.as_str(), side.operator.as_str());

    note(
        "allocate: nothing matches",
        side.call(
            admin,
            "POST",
            "machines/?op=allocate",
            &[("pool", "cp-pool"), ("mem", "1048576")],
        ),
    );
    note(
        "allocate: no such zone",
        side.call(
            admin,
            "POST",
            "machines/?op=allocate",
            &[("zone", "zone-z")],
        ),
    );
    note(
        "allocate: no such tag",
        side.call(
            admin,
            "POST",
            "machines/?op=allocate",
            &[("tags", "no-such-tag")],
        ),
    );
    let picked = note(
        "allocate with constraints",
        side.call(
            admin,
            "POST",
            "machines/?op=allocate",
            &[
                ("cpu_count", "16"),
                ("mem", "65536"),
                ("pool", "worker-pool"),
                ("zone", "zone-a"),
                ("tags", "worker"),
                ("not_tags", "gpu"),
                ("agent_name", "differential"),
            ],
        ),
    );
    let id = picked["system_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(id, (side.system_id)("worker-1"), "{}", side.name);
    let machine = format!("machines/{id}/");
    note(
        "swap_size",
        side.call(admin, "PUT", &machine, &[("swap_size", "0")]),
    );
    note(
        "deploy: image typo",
        side.call(
            admin,
            "POST",
            &format!("{machine}?op=deploy"),
            &[("distro_series", "custom/u-2204-0-k-1264-O")],
        ),
    );
    // Issue 22: an OS MAAS has no image for, and the deploy options:
    // 3.4.8 keeps hardware sync and ignores crash dumps (3.6+).
    note(
        "deploy: unknown os",
        side.call(
            admin,
            "POST",
            &format!("{machine}?op=deploy"),
            &[("osystem", "rhel"), ("distro_series", "rhel/9")],
        ),
    );
    note(
        "deploy",
        side.call(
            admin,
            "POST",
            &format!("{machine}?op=deploy"),
            &[
                ("distro_series", CUSTOM_IMAGE),
                ("enable_hw_sync", "true"),
                ("enable_kernel_crash_dump", "true"),
            ],
        ),
    );
    note(
        "read while deploying",
        side.call(admin, "GET", &machine, &[]),
    );
    (side.deployed)(&id);
    note("read once deployed", side.call(admin, "GET", &machine, &[]));
    note(
        "power_on: not the operator's",
        side.call(operator, "POST", &format!("{machine}?op=power_on"), &[]),
    );
    note(
        "power_off",
        side.call(admin, "POST", &format!("{machine}?op=power_off"), &[]),
    );
    note(
        "power_on",
        side.call(admin, "POST", &format!("{machine}?op=power_on"), &[]),
    );
    note(
        "query_power_state",
        side.call(
            admin,
            "GET",
            &format!("{machine}?op=query_power_state"),
            &[],
        ),
    );
    note(
        "events",
        side.call(
            admin,
            "GET",
            &format!("events/?op=query&id={id}&limit=20"),
            &[],
        ),
    );
    note(
        "no such machine",
        side.call(admin, "GET", "machines/nosuch/", &[]),
    );
    note(
        "mark_broken",
        side.call(admin, "POST", &format!("{machine}?op=mark_broken"), &[]),
    );
    note(
        "mark_fixed",
        side.call(admin, "POST", &format!("{machine}?op=mark_fixed"), &[]),
    );
    note(
        "release",
        side.call(admin, "POST", &format!("{machine}?op=release"), &[]),
    );
    note("read once released", side.call(admin, "GET", &machine, &[]));
    // The operator's machine: admin may not mark it broken (only its
    // owner may), the operator may not edit it (admin only).
    note(
        "allocate as the operator",
        side.call(
            operator,
            "POST",
            "machines/?op=allocate",
            &[("name", "worker-1")],
        ),
    );
    note(
        "mark_broken: admin, not the owner",
        side.call(admin, "POST", &format!("{machine}?op=mark_broken"), &[]),
    );
    note(
        "update: not admin",
        side.call(operator, "PUT", &machine, &[("swap_size", "0")]),
    );
    note(
        "release as the operator",
        side.call(operator, "POST", &format!("{machine}?op=release"), &[]),
    );

    let fqdn = format!("diff.{DOMAIN}");
    note(
        "dnsresource: not the operator's",
        side.call(
            operator,
            "POST",
            "dnsresources/",
            &[("fqdn", &fqdn), ("ip_addresses", "127.11.130.80")],
        ),
    );
    let created = note(
        "dnsresource create",
        side.call(
            admin,
            "POST",
            "dnsresources/",
            &[
                ("fqdn", &fqdn),
                ("ip_addresses", "127.11.130.80"),
                ("address_ttl", "10"),
            ],
        ),
    );
    let dns = format!("dnsresources/{}/", created["id"]);
    note(
        "dnsresource lookup",
        side.call(admin, "GET", &format!("dnsresources/?fqdn={fqdn}"), &[]),
    );
    note(
        "dnsresource set addresses",
        side.call(admin, "PUT", &dns, &[("ip_addresses", "127.11.130.81")]),
    );
    note("dnsresource delete", side.call(admin, "DELETE", &dns, &[]));
    note("dnsresource deleted", side.call(admin, "GET", &dns, &[]));

    let ip = [("ip", "127.11.130.82")];
    note(
        "ipaddress reserve",
        side.call(admin, "POST", "ipaddresses/?op=reserve", &ip),
    );
    note(
        "ipaddress reserve twice",
        side.call(admin, "POST", "ipaddresses/?op=reserve", &ip),
    );
    note(
        "ipaddress release",
        side.call(admin, "POST", "ipaddresses/?op=release", &ip),
    );
    note(
        "ipaddress release twice",
        side.call(admin, "POST", "ipaddresses/?op=release", &ip),
    );
    seen
}

/// The simulator's world shaped like the real one: the same pools, zones,
/// tags, domain, images, users, and real_maas::MACHINES as manual machines
/// with one AUTO link each.
fn simulator_like_the_real_world() -> support::maas_sim::MaasSim {
    let mut inventory = support::maas_sim::story_inventory();
    inventory["dns_resources"] = json!([]);
    // The real world is a region without a rack controller (no BMC
    // anywhere): a power query needs one, so both answer 503. Power on
    // and off of manual machines need none.
    inventory["settings"]["no_rack_controller"] = json!(true);
    inventory["settings"]["maas_version"] = json!("3.4.8");
    inventory["machines"] = real_maas::MACHINES
        .iter()
        .enumerate()
        .map(|(i, (hostname, pool, zone, cpus, memory, tags))| {
            json!({
                "hostname": hostname, "pool": pool, "zone": zone,
                "cpu_count": cpus, "memory": memory, "tags": tags,
                "disks_gb": [120], "power_type": "manual", "power_state": "unknown",
                "mac_address": format!("52:54:00:13:00:{:02x}", i + 1),
                "ip_addresses": [format!("127.11.130.{}", 101 + i)],
            })
        })
        .collect();
    support::maas_sim::MaasSim::start_with_args(Some(&inventory), &["--deploy-seconds", "600"])
}

/// worker-1, DNS `diff.k8s.maas`, address 127.11.130.80–82: the same
/// requests to real MAAS and to the simulator agree in status codes, body
/// shapes and the machine's state after each step.
///
/// What real MAAS would need hardware for is not in the sequence: a BMC
/// that powers a machine (the world's machines are `manual`: MAAS starts
/// none, and the power state is what the world sets), a rack controller
/// answering power queries (both answer 503 here), and the machine's
/// own deployment (the world plays it through the metadata API).
#[test]
fn the_simulator_answers_as_real_maas_does() {
    let Some(maas) = real_maas::world("the_simulator_answers_as_real_maas_does") else {
        return;
    };
    let agent = || {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .new_agent()
    };
    // What a last run may have left.
    let admin = maas.admin_client();
    for stale in admin.dns_resources(&format!("diff.{DOMAIN}")).expect("dns") {
        admin.delete_dns_resource(stale.id).expect("delete");
    }
    for stale in admin.ip_reservations(Some("127.11.130.82")).expect("ips") {
        admin.release_ip(&stale.ip).expect("release");
    }
    let real = Side {
        name: "real MAAS",
        url: real_maas::URL.into(),
        admin: maas.admin_key.clone(),
        operator: maas.operator_key.clone(),
        agent: agent(),
        system_id: Box::new(|hostname| maas.system_id(hostname).to_owned()),
        deployed: Box::new(|id| maas.complete_deployment(id)),
    };
    let sim = simulator_like_the_real_world();
    let simulated = Side {
        name: "simulator",
        url: sim.url.clone(),
        admin: sim.key_of("admin"),
        operator: sim.key_of(OPERATOR),
        agent: agent(),
        system_id: Box::new(|hostname| sim.system_id(hostname)),
        deployed: Box::new(|id| {
            sim.complete(id);
            sim.power_on(id);
        }),
    };
    let started = std::time::Instant::now();
    let from_real = differential_sequence(&real);
    eprintln!(
        "real MAAS: the sequence in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let from_sim = differential_sequence(&simulated);
    let differences: Vec<String> = from_real
        .iter()
        .zip(&from_sim)
        .filter(|(r, s)| r != s)
        .map(|((step, r), (_, s))| format!("{step}:\n  real MAAS {r}\n  simulator {s}"))
        .collect();
    for (step, seen) in &from_real {
        eprintln!("{step}: HTTP {}", seen["code"]);
    }
    assert!(
        differences.is_empty(),
        "the simulator differs from real MAAS:\n{}",
        differences.join("\n")
    );
}

// ---- never power-cycle a healthy machine, on real MAAS (issue 20 item 5)

/// MAAS's events for `system_id` newer than `after` (DEBUG and up: a
/// power request is a DEBUG event), as `(id, type)`.
fn machine_events(maas: &real_maas::RealMaas, system_id: &str, after: i64) -> Vec<(i64, String)> {
    let page = maas.admin(
        "GET",
        &format!("events/?op=query&id={system_id}&level=DEBUG&after={after}&limit=1000"),
        &[],
    );
    page["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["id"].as_i64()?, e["type"].as_str()?.to_owned())))
        .collect()
}

/// cp-2, a worker of a cluster the real `capmaas` binary runs against real
/// MAAS and the real API server, at its defaults: capmaas allocates and
/// deploys it, the world plays the deployment, then MAAS reports its power
/// `unknown` (power type manual; a BMC that did not answer). On IPMI a
/// power on would hard-cycle a running machine: capmaas must say why on
/// the MaasMachine and never ask MAAS to power it on, through more than a
/// watch interval.
#[test]
fn a_deployed_machine_whose_power_is_unknown_is_never_powered_on() {
    const CLUSTER: &str = "power";
    let Some(maas) =
        real_maas::world("a_deployed_machine_whose_power_is_unknown_is_never_powered_on")
    else {
        return;
    };
    let admin = maas.admin_client();
    // A record a killed run left behind.
    let records = maas.admin("GET", "dnsresources/", &[]);
    for record in records.as_array().into_iter().flatten() {
        let fqdn = record["fqdn"].as_str().unwrap_or_default();
        if fqdn.starts_with(&format!("{CLUSTER}-")) && fqdn.ends_with(DOMAIN) {
            let id = record["id"].as_i64().expect("record id");
            admin
                .delete_dns_resource(id)
                .expect("delete a stale record");
        }
    }
    let cp = support::control_plane();
    let ns = cp.new_namespace("power");
    cp.apply(&json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "MaasCluster", "name": CLUSTER}},
    }));
    let cluster = cp
        .get(&ns, "clusters.cluster.x-k8s.io", CLUSTER)
        .expect("the Cluster");
    cp.apply(&json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasCluster",
        "metadata": {"name": CLUSTER, "namespace": ns,
                     "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                          "kind": "Cluster", "name": CLUSTER,
                                          "uid": cluster["metadata"]["uid"], "controller": true,
                                          "blockOwnerDeletion": true}]},
        "spec": {"dnsDomain": DOMAIN},
    }));
    cp.kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        CLUSTER,
        "-n",
        &ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);
    let mut capmaas = Capmaas::start_with_maas(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        real_maas::URL,
        &maas.admin_key,
        cp.dir.join(format!("capmaas-{ns}.log")),
        &[format!("--namespace={ns}")],
    );
    capmaas.wait_ready(60);
    let id = maas.system_id("cp-2");
    cp.add_machine(
        &ns,
        CLUSTER,
        "w-0",
        false,
        json!({"image": CUSTOM_IMAGE, "minCPU": 4, "minMemory": 8192,
               "resourcePool": "cp-pool", "machineSelector": {"hostname": "cp-2"}}),
    );
    support::eventually(120, "capmaas deploys cp-2", || {
        capmaas.assert_running();
        (admin.machine(id).ok()?.status == MachineStatus::Deploying).then_some(())
    });
    maas.complete_deployment(id);
    support::eventually(120, "w-0 deployed and running", || {
        capmaas.assert_running();
        let mm = cp.get(&ns, "maasmachines", "w-0")?;
        objects::condition_is(&mm, "MachineDeployed", "True").then_some(())
    });

    let before = machine_events(maas, id, 0)
        .iter()
        .map(|(event, _)| *event)
        .max()
        .unwrap_or(0);
    maas.set_power_state(id, "unknown");
    let mm = support::eventually(90, "MachinePowerStateUnknown on w-0", || {
        capmaas.assert_running();
        let mm = cp.get(&ns, "maasmachines", "w-0")?;
        let deployed = objects::condition(&mm, "MachineDeployed")?;
        (deployed["reason"] == "MachinePowerStateUnknown").then(|| deployed.clone())
    });
    assert_eq!(mm["status"], "False", "{mm}");
    let message = mm["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"unknown\"") && message.contains("not powering it on"),
        "{mm}"
    );
    // More than a watch interval (15 s) and a power-on requeue later.
    std::thread::sleep(Duration::from_secs(20));
    capmaas.assert_running();
    let since = machine_events(maas, id, before);
    assert!(
        since
            .iter()
            .all(|(_, kind)| kind != "User powering up node"),
        "MAAS was asked to power cp-2 on: {since:?}"
    );
    let power_ons = story::metric_sum(
        &capmaas.metrics(),
        "maas_api_requests_total",
        &["operation=\"power_on\""],
    );
    assert_eq!(power_ons, 0.0, "capmaas's own count of power_on requests");
    assert_eq!(
        admin.machine(id).expect("cp-2").status,
        MachineStatus::Deployed
    );

    // Deleting releases cp-2 and deletes the cluster's record.
    for (kind, name) in [
        ("maasmachines", "w-0"),
        ("machines.cluster.x-k8s.io", "w-0"),
        ("maasclusters", CLUSTER),
    ] {
        story::delete_no_wait(cp, &ns, kind, name);
    }
    support::eventually(90, "the MaasCluster gone", || {
        capmaas.assert_running();
        cp.get(&ns, "maasclusters", CLUSTER).is_none().then_some(())
    });
    maas.wait_status(id, "Ready", Duration::from_secs(30));
}

/// `capmaas doctor` (the real binary) against real MAAS 3.4.8, with the
/// credentials as Secrets often carry them (a trailing newline on both):
/// the key is valid, the version read from MAAS itself.
#[test]
fn doctor_reports_the_version_of_real_maas() {
    let Some(maas) = real_maas::world("doctor_reports_the_version_of_real_maas") else {
        return;
    };
    let cp = support::control_plane();
    for (key, user) in [(&maas.operator_key, OPERATOR), (&maas.admin_key, "admin")] {
        let out = std::process::Command::new(story::capmaas_bin())
            .arg("doctor")
            .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
            .env_remove("KUBECONFIG")
            .env("MAAS_ENDPOINT", format!("{}\n", real_maas::URL))
            .env("MAAS_API_KEY", format!("{key}\n"))
            .output()
            .expect("run capmaas doctor");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("[ OK ] API key: valid, MAAS user {user:?}")),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("[ OK ] MAAS version: 3.4.8\n"), "{text}");
        assert!(!text.contains("pool rights"), "{text}");
    }
}
