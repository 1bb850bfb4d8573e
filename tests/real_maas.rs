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
//! real MAAS (`a_deployed_machine_whose_power_is_unknown_is_never_powered_on`,
//! and `capmaas_killed_while_allocating_and_deploying_keeps_one_machine_each`:
//! SIGKILL at an allocation and at a deploy call, then the cluster torn
//! down), and `capmaas adopt` of a machine deployed the Go provider's way
//! (`capmaas_adopt_takes_over_a_machine_deployed_in_real_maas`). The
//! README story with the Cluster API managers and KCP is tests/real_maas_kcp.rs.
//!
//!     cargo test --test real_maas -- --nocapture
//!
//! Needs `../shared/real-maas` (or `$CAPMAAS_SHARED/real-maas`) and root;
//! elsewhere it says why it skips, and under `CI=true` it fails.
//!
//! The tests share one MAAS and its seeded machines: each test works on
//! machines no other test touches (named below).

mod support;

use capmaas::maas::MaasApi;
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
    let raw = maas.admin("GET", &format!("machines/{id}/"), &[]);
    assert_eq!(
        (&raw["osystem"], &raw["distro_series"]),
        (&json!("custom"), &json!("u-2204-0-k-1264-0"))
    );
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

// ---- crashes and teardown on real MAAS (issue 20 item 3)

/// The Cluster `name` in `ns` with its MaasCluster (`spec`, owned by the
/// Cluster as Cluster API sets it), the Cluster marked provisioned as
/// Cluster API marks it once the MaasCluster is.
fn cluster_with_maas_cluster(cp: &support::ControlPlane, ns: &str, name: &str, spec: Value) {
    cp.apply(&json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                       "kind": "MaasCluster", "name": name}},
    }));
    let cluster = cp
        .get(ns, "clusters.cluster.x-k8s.io", name)
        .expect("the Cluster");
    cp.apply(&json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasCluster",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"cluster.x-k8s.io/cluster-name": name},
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                                          "kind": "Cluster", "name": name,
                                          "uid": cluster["metadata"]["uid"], "controller": true,
                                          "blockOwnerDeletion": true}]},
        "spec": spec,
    }));
    cp.kubectl(&[
        "patch",
        "clusters.cluster.x-k8s.io",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"initialization":{"infrastructureProvisioned":true}}}"#,
    ]);
}

/// The identity capmaas records on `obj` (a MaasMachine or MaasCluster).
fn identity_of(obj: &Value) -> String {
    obj["metadata"]["annotations"][capmaas::api::maas_machine::AGENT_NAME_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// SHA-256, as capmaas's marks take it (rustls's ring provider).
fn sha256(text: &str) -> Vec<u8> {
    rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .expect("a TLS 1.3 suite")
        .common
        .hash_provider
        .hash(text.as_bytes())
        .as_ref()
        .to_vec()
}

/// A cluster identity's DNS mark, the TXT data capmaas writes on its
/// record: `capmaas-owner=` and 32 hex digits of SHA-256 of the identity.
fn expected_dns_mark(identity: &str) -> String {
    let hex: String = sha256(identity)[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("capmaas-owner={hex}")
}

/// A cluster identity's reservation mark, the `mac=` of its reserve call:
/// the first six bytes of SHA-256, made locally administered unicast.
fn expected_reservation_mac(identity: &str) -> String {
    let digest = sha256(identity);
    let mut mac = format!("{:02x}", (digest[0] & 0xfc) | 0x02);
    for b in &digest[1..6] {
        mac.push_str(&format!(":{b:02x}"));
    }
    mac
}

/// Waits inside MAAS's database until `condition` (SQL) holds: a
/// PL/pgSQL loop looking every millisecond, each look with a fresh
/// snapshot, so a change MAAS commits is seen within a few milliseconds,
/// before capmaas has read MAAS's answer to the call that made it (MAAS
/// commits as it sends its answer).
fn wait_in_database(maas: &real_maas::RealMaas, what: &str, condition: &str) {
    let waited = maas.sql(&format!(
        "do $$ begin \
           while not ({condition}) and clock_timestamp() < now() + interval '120 seconds' loop \
             perform pg_sleep(0.001); \
           end loop; \
         end $$; \
         select {condition};"
    ));
    assert_eq!(
        waited.trim(),
        "t",
        "timed out after 120 s waiting for {what}"
    );
}

/// SIGKILL, as an OOM kill or a node loss ends capmaas.
fn kill_9(mut capmaas: Capmaas) {
    capmaas.assert_running();
    drop(capmaas);
}

/// crash-1..3 (CRASH_POOL), the cluster `crash` (DNS mode) with a worker
/// and a control plane, and the real `capmaas` binary killed with SIGKILL
/// twice:
/// - right after MAAS committed the worker's allocation (the database shows
///   it under the worker's identity as agent_name): capmaas never read
///   MAAS's answer, so neither spec.systemID nor the owner data are
///   written; if the window is missed, they may be, and the checks below
///   hold either way (the window hit is printed);
/// - right after MAAS took the control plane's deploy call (the database
///   shows it Deploying).
///
/// Restarted each time, capmaas finds both allocations again by
/// agent_name: each MaasMachine ends Ready on the one MAAS machine
/// allocated under its identity (agent_name and owner data, as real MAAS
/// stores and lists them), the third machine was never allocated. The
/// cluster's DNS record carries the cluster's TXT mark as real MAAS stores
/// it. Deleting the cluster leaves MAAS clean: no machine allocated under
/// an identity or owned in the pool, no record (nor its TXT) left.
#[test]
fn capmaas_killed_while_allocating_and_deploying_keeps_one_machine_each() {
    const CLUSTER: &str = "crash";
    let Some(maas) =
        real_maas::world("capmaas_killed_while_allocating_and_deploying_keeps_one_machine_each")
    else {
        return;
    };
    let started = std::time::Instant::now();
    let admin = maas.admin_client();
    // The cluster's records; first those a killed run left behind (its
    // machines are seeded again).
    let cluster_records = || -> Vec<Value> {
        let all = maas.admin("GET", &format!("dnsresources/?domain={DOMAIN}"), &[]);
        all.as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                r["fqdn"]
                    .as_str()
                    .is_some_and(|f| f.starts_with(&format!("{CLUSTER}-")))
            })
            .cloned()
            .collect()
    };
    for record in cluster_records() {
        admin
            .delete_dns_resource(record["id"].as_i64().expect("record id"))
            .expect("delete a stale record");
    }
    let cp = support::control_plane();
    let ns = cp.new_namespace("crash");
    cluster_with_maas_cluster(cp, &ns, CLUSTER, json!({"dnsDomain": DOMAIN}));
    let start = |run: u32| {
        let mut capmaas = Capmaas::start_with_maas(
            &story::capmaas_bin(),
            &cp.kubeconfig,
            real_maas::URL,
            &maas.admin_key,
            cp.dir.join(format!("capmaas-{ns}-{run}.log")),
            &[
                format!("--namespace={ns}"),
                "--maas-watch-interval=5s".into(),
            ],
        );
        capmaas.wait_ready(60);
        capmaas
    };
    let spec = json!({"image": CUSTOM_IMAGE, "minCPU": 2, "minMemory": 4096,
                      "resourcePool": real_maas::CRASH_POOL});
    let identity = |name: &str| -> String {
        let mm = cp.get(&ns, "maasmachines", name).expect("the MaasMachine");
        // Chosen from the object's UID and recorded before the first MAAS
        // write (the annotation is checked against it below).
        format!(
            "capmaas/{ns}/{name}/{}",
            mm["metadata"]["uid"].as_str().expect("uid")
        )
    };

    // 1. Killed as MAAS commits the worker's allocation.
    let capmaas = start(1);
    cp.add_machine(&ns, CLUSTER, "w-0", false, spec.clone());
    let worker = identity("w-0");
    let allocated = format!("select system_id from maasserver_node where agent_name = '{worker}'");
    wait_in_database(
        maas,
        "MAAS allocating a machine to w-0",
        &format!("exists ({allocated})"),
    );
    kill_9(capmaas);
    let worker_id = maas.sql(&allocated).trim().to_owned();
    let recorded = cp.get(&ns, "maasmachines", "w-0").expect("w-0")["spec"]["systemID"].clone();
    let marked = admin
        .machine(&worker_id)
        .expect("the allocated machine")
        .owner_data;
    let window = format!(
        "killed at w-0's allocation ({worker_id}): spec.systemID {}, owner data {}",
        if recorded.is_string() {
            "written"
        } else {
            "not written"
        },
        if marked.contains_key(IDENTITY_KEY) {
            "written"
        } else {
            "not written"
        },
    );
    eprintln!("{window}");

    // 2. Killed as MAAS takes the control plane's deploy call.
    cp.add_machine(&ns, CLUSTER, "cp-0", true, spec.clone());
    let control_plane = identity("cp-0");
    let capmaas = start(2);
    // 9: NODE_STATUS.DEPLOYING
    let deploying = format!(
        "select system_id from maasserver_node where agent_name = '{control_plane}' and status = 9"
    );
    wait_in_database(
        maas,
        "MAAS deploying cp-0",
        &format!("exists ({deploying})"),
    );
    kill_9(capmaas);
    let cp_id = maas.sql(&deploying).trim().to_owned();
    let cp_0 = cp.get(&ns, "maasmachines", "cp-0").expect("cp-0");
    let deploy_window = format!(
        "killed at cp-0's deployment ({cp_id}): spec.systemID {}, MachineDeployed {}",
        if cp_0["spec"]["systemID"].is_string() {
            "written"
        } else {
            "not written"
        },
        objects::condition(&cp_0, "MachineDeployed")
            .map(|c| format!("{}", c["reason"]))
            .unwrap_or_else(|| "not set yet".into())
    );
    eprintln!("{deploy_window}");

    // 3. Restarted: both deployments played, both Ready on their machines.
    let mut capmaas = start(3);
    for id in [&worker_id, &cp_id] {
        support::eventually(120, "capmaas deploying both machines", || {
            capmaas.assert_running();
            (admin.machine(id).ok()?.status == MachineStatus::Deploying).then_some(())
        });
        maas.complete_deployment(id);
    }
    for (name, id) in [("w-0", &worker_id), ("cp-0", &cp_id)] {
        let mm = support::eventually(120, "w-0 and cp-0 Ready", || {
            capmaas.assert_running();
            let mm = cp.get(&ns, "maasmachines", name)?;
            (mm["status"]["ready"] == true).then_some(mm)
        });
        assert_eq!(mm["spec"]["systemID"], id.as_str(), "{name}: {mm}");
    }
    // Checked with capmaas down, so that nothing moves under the checks.
    kill_9(capmaas);

    // One machine under each identity, as real MAAS stores and lists it,
    // allocated and deployed once (MAAS's own events).
    for (name, identity, id) in [
        ("w-0", &worker, &worker_id),
        ("cp-0", &control_plane, &cp_id),
    ] {
        let mm = cp.get(&ns, "maasmachines", name).expect("MaasMachine");
        assert_eq!(&identity_of(&mm), identity, "the identity of {name}");
        let by_agent = admin
            .machines(&MachineFilter::by_agent_name(identity))
            .expect("machines by agent_name");
        let by_agent: Vec<&str> = by_agent.iter().map(|m| m.system_id.as_str()).collect();
        assert_eq!(
            by_agent,
            [id.as_str()],
            "MAAS machines with agent_name {identity}"
        );
        let by_owner_data = admin
            .machines(&MachineFilter {
                owner_data: vec![(IDENTITY_KEY.into(), identity.clone())],
                ..MachineFilter::default()
            })
            .expect("machines");
        let by_owner_data: Vec<&str> = by_owner_data.iter().map(|m| m.system_id.as_str()).collect();
        assert_eq!(
            by_owner_data,
            [id.as_str()],
            "MAAS machines with owner data {identity}"
        );
        // The machine JSON real MAAS answers: the owner data key and value
        // exactly as capmaas wrote them, the machine deployed to us.
        let raw = maas.admin("GET", &format!("machines/{id}/"), &[]);
        assert_eq!(raw["owner_data"][IDENTITY_KEY], identity.as_str(), "{raw}");
        assert_eq!(raw["owner"], "admin");
        assert_eq!(raw["status_name"], "Deployed");
        let events = machine_events(maas, id, 0);
        for request in ["User acquiring node", "User starting deployment"] {
            let times = events.iter().filter(|(_, kind)| kind == request).count();
            assert_eq!(times, 1, "{name}: {request:?} once: {events:?}");
        }
    }
    let in_pool = admin
        .machines(&MachineFilter {
            pool: Some(real_maas::CRASH_POOL.into()),
            ..MachineFilter::default()
        })
        .expect("the pool's machines");
    let mut owned: Vec<&str> = in_pool
        .iter()
        .filter(|m| m.owner.is_some())
        .map(|m| m.system_id.as_str())
        .collect();
    owned.sort();
    let mut ours = vec![worker_id.as_str(), cp_id.as_str()];
    ours.sort();
    assert_eq!(owned, ours, "no machine allocated but the two: {in_pool:?}");

    // The cluster's record: cp-0's address and the cluster's TXT mark, as
    // real MAAS stores and lists them.
    let mc = cp.get(&ns, "maasclusters", CLUSTER).expect("MaasCluster");
    let dns_name = mc["status"]["network"]["dnsName"]
        .as_str()
        .unwrap_or_else(|| panic!("no DNS name: {mc}"))
        .to_owned();
    let suffix = dns_name
        .strip_prefix(&format!("{CLUSTER}-"))
        .and_then(|rest| rest.strip_suffix(&format!(".{DOMAIN}")))
        .unwrap_or_default();
    assert_eq!(suffix.len(), 6, "<cluster>-<6 chars>.<domain>: {dns_name}");
    let mark = expected_dns_mark(&identity_of(&mc));
    let cp_ips = admin.machine(&cp_id).expect("cp-0's machine").ip_addresses;
    assert!(!cp_ips.is_empty(), "cp-0 has an address in MAAS");
    let mut capmaas = start(4);
    let record = support::eventually(60, "cp-0's address in the record", || {
        capmaas.assert_running();
        let listed = maas.admin("GET", &format!("dnsresources/?fqdn={dns_name}"), &[]);
        let record = listed.as_array()?.first()?.clone();
        (record["ip_addresses"]
            .as_array()?
            .iter()
            .any(|a| cp_ips.iter().any(|ip| a["ip"] == ip.as_str())))
        .then_some((listed, record))
    });
    let (listed, record) = record;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    let txt: Vec<&Value> = record["resource_records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["rrtype"] == "TXT")
        .collect();
    assert_eq!(txt.len(), 1, "one TXT record: {record}");
    assert_eq!(txt[0]["rrdata"], mark.as_str(), "{record}");
    let parsed = admin.dns_resources(&dns_name).expect("the record");
    assert!(
        parsed[0]
            .resource_records
            .iter()
            .any(|r| r.rrtype == "TXT" && r.rrdata == mark),
        "{parsed:?}"
    );

    // Teardown: the cluster's objects deleted, MAAS left clean.
    for (kind, name) in [
        ("maasmachines", "w-0"),
        ("maasmachines", "cp-0"),
        ("machines.cluster.x-k8s.io", "w-0"),
        ("machines.cluster.x-k8s.io", "cp-0"),
        ("maasclusters", CLUSTER),
        ("clusters.cluster.x-k8s.io", CLUSTER),
    ] {
        story::delete_no_wait(cp, &ns, kind, name);
    }
    support::eventually(120, "the MaasMachines and the MaasCluster gone", || {
        capmaas.assert_running();
        (cp.get(&ns, "maasmachines", "w-0").is_none()
            && cp.get(&ns, "maasmachines", "cp-0").is_none()
            && cp.get(&ns, "maasclusters", CLUSTER).is_none())
        .then_some(())
    });
    for id in [&worker_id, &cp_id] {
        let m = maas.wait_status(id, "Ready", Duration::from_secs(30));
        assert_eq!(m["owner"], Value::Null, "{m}");
        assert_eq!(m["owner_data"], json!({}), "{m}");
    }
    for identity in [&worker, &control_plane] {
        let left = admin
            .machines(&MachineFilter::by_agent_name(identity))
            .expect("machines by agent_name");
        assert!(left.is_empty(), "allocated under {identity}: {left:?}");
    }
    let owned = admin
        .machines(&MachineFilter {
            pool: Some(real_maas::CRASH_POOL.into()),
            owner: Some("admin".into()),
            ..MachineFilter::default()
        })
        .expect("owned machines");
    assert!(
        owned.is_empty(),
        "owned in {}: {owned:?}",
        real_maas::CRASH_POOL
    );
    let records = maas.admin("GET", &format!("dnsresources/?fqdn={dns_name}"), &[]);
    assert_eq!(records, json!([]), "the cluster's record is left");
    assert!(cluster_records().is_empty(), "a {CLUSTER}- record is left");
    let data = maas.admin("GET", &format!("dnsresourcerecords/?fqdn={dns_name}"), &[]);
    assert_eq!(data, json!([]), "resource records of {dns_name} are left");
    // A DNS-mode cluster reserves no address; none may carry its mark.
    // (VIP mode's marked reservation, `mac=`, is answered 500 by this MAAS
    // region as packaged in ../shared/real-maas: its piston3 port calls the
    // reservation interface's `parents` many-to-many manager while
    // rendering, so it is not exercised here.)
    let marked_reservations: Vec<_> = admin
        .ip_reservations(None)
        .expect("reservations")
        .into_iter()
        .filter(|r| r.has_mac(&expected_reservation_mac(&identity_of(&mc))))
        .collect();
    assert!(marked_reservations.is_empty(), "{marked_reservations:?}");
    eprintln!(
        "{window}; {deploy_window}; the whole test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---- adoption on real MAAS (issue 20 item 3)

/// adopt-1 (ADOPT_POOL), allocated and deployed the Go provider's way (no
/// agent_name, no owner data) as admin, the world playing its deployment;
/// its MaasMachine and Machine as Cluster API and the Go provider leave
/// them (the machine in `spec.systemID`, the hostname in status, the owner
/// chain). And spare-1, never allocated, named by a second one. `capmaas
/// adopt` (the real binary) against real MAAS: the dry run says what it
/// would do and changes nothing in MAAS; `--apply` writes the identity
/// into adopt-1's owner data as real MAAS stores it, and leaves spare-1
/// alone; run again, it has nothing left to do.
#[test]
fn capmaas_adopt_takes_over_a_machine_deployed_in_real_maas() {
    use support::go_provider::{adopt_against, owned_maas_machine};
    let Some(maas) = real_maas::world("capmaas_adopt_takes_over_a_machine_deployed_in_real_maas")
    else {
        return;
    };
    let admin = maas.admin_client();
    let id = maas.system_id("adopt-1");
    let spare = maas.system_id("spare-1");
    let allocated = admin
        .allocate(&AllocateRequest {
            name: Some("adopt-1".into()),
            ..AllocateRequest::default()
        })
        .expect("allocate adopt-1");
    assert_eq!(allocated.system_id, id);
    admin
        .deploy(
            id,
            &DeployRequest {
                image: Some(CUSTOM_IMAGE.into()),
                ..DeployRequest::default()
            },
        )
        .expect("deploy adopt-1");
    maas.complete_deployment(id);

    let cp = support::control_plane();
    let ns = cp.new_namespace("adopt");
    for object in [story::cluster(&ns), story::maas_cluster(&ns)] {
        cp.apply(&object);
    }
    owned_maas_machine(cp, &ns, "go-a", id, Some("adopt-1"));
    owned_maas_machine(cp, &ns, "go-ready", spare, Some("spare-1"));
    let adopt = |args: &[&str]| -> (Option<i32>, String) {
        let mut all = vec!["--namespace", ns.as_str()];
        all.extend_from_slice(args);
        let out = adopt_against(cp, real_maas::URL, &maas.admin_key, &all);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let line = |out: &str, name: &str| -> String {
        out.lines()
            .find(|l| l.starts_with(&format!("{ns}/{name} ")))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{out}"))
            .to_owned()
    };
    let machine_json = |id: &str| maas.admin("GET", &format!("machines/{id}/"), &[]);
    let before = machine_json(id);
    assert_eq!(before["owner_data"], json!({}), "{before}");
    assert_eq!(before["status_name"], "Deployed");

    let (code, out) = adopt(&[]);
    assert_eq!(code, Some(1), "spare-1's refusal makes it fail: {out}");
    assert!(
        line(&out, "go-a").contains(&format!("adopt as capmaas/{ns}/go-a/")),
        "{out}"
    );
    assert!(
        line(&out, "go-ready").contains("not allocated to anyone"),
        "{out}"
    );
    assert!(
        out.contains("1 to adopt, 0 already adopted, 1 refused, 0 failed"),
        "{out}"
    );
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    assert_eq!(machine_json(id)["owner_data"], json!({}), "dry run");

    let (code, out) = adopt(&["--apply"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("1 adopted, 0 already adopted, 1 refused, 0 failed"),
        "{out}"
    );
    let mm = cp.get(&ns, "maasmachines", "go-a").expect("go-a");
    let identity = identity_of(&mm);
    assert!(identity.starts_with(&format!("capmaas/{ns}/go-a/")), "{mm}");
    assert!(
        line(&out, "go-a").contains(&format!("adopted as {identity}")),
        "{out}"
    );
    // As real MAAS stores and lists it: the owner data, the machine
    // still deployed to its owner, found by the identity.
    let after = machine_json(id);
    assert_eq!(
        after["owner_data"][IDENTITY_KEY],
        identity.as_str(),
        "{after}"
    );
    assert_eq!(after["status_name"], "Deployed", "{after}");
    assert_eq!(after["owner"], "admin", "{after}");
    let found = admin
        .machines(&MachineFilter {
            owner_data: vec![(IDENTITY_KEY.into(), identity.clone())],
            ..MachineFilter::default()
        })
        .expect("machines by owner data");
    let found: Vec<&str> = found.iter().map(|m| m.system_id.as_str()).collect();
    assert_eq!(found, [id]);
    let spare_after = machine_json(spare);
    assert_eq!(spare_after["status_name"], "Ready", "{spare_after}");
    assert_eq!(spare_after["owner_data"], json!({}), "{spare_after}");

    let (_, out) = adopt(&["--apply"]);
    assert!(out.contains("0 adopted, 1 already adopted"), "{out}");

    admin
        .release(id, &ReleaseRequest::default())
        .expect("release adopt-1");
    maas.wait_status(id, "Ready", Duration::from_secs(30));
}

/// Node reuse on real MAAS (issue 23 items 2 and 3), with the product's
/// client, on reuse-1: allocated, an address linked STATIC, released
/// without erase with capmaas's reuse mark in the comment. MAAS makes it
/// Ready at once (power type manual), keeps the STATIC link, erases
/// nothing, and logs the release as the newest user request with the mark
/// at the end of its description: what capmaas checks before taking a
/// machine back. `allocate system_id=` then takes it again.
#[test]
fn a_release_for_reuse_keeps_the_static_link_and_is_found_again() {
    let Some(maas) =
        real_maas::world("a_release_for_reuse_keeps_the_static_link_and_is_found_again")
    else {
        return;
    };
    let admin = maas.admin_client();
    let id = maas.system_id("reuse-1");
    let allocate = || AllocateRequest {
        system_id: Some(id.to_string()),
        agent_name: Some("capmaas/reuse/w-0/uid".into()),
        ..AllocateRequest::default()
    };
    assert_eq!(admin.allocate(&allocate()).expect("allocate").system_id, id);
    let host = admin.machine(id).expect("reuse-1");
    let boot = host.boot_interface.as_ref().expect("boot interface").id;
    let interface = host.interfaces.iter().find(|i| i.id == boot).unwrap();
    let subnet = admin
        .subnets()
        .expect("subnets")
        .into_iter()
        .find(|s| s.cidr == SUBNET)
        .expect("the world's subnet");
    for link in interface
        .links
        .iter()
        .filter(|l| l.subnet_id == Some(subnet.id))
    {
        admin.unlink_subnet(id, boot, link.id).expect("unlink AUTO");
    }
    let address = "127.11.130.91";
    admin
        .link_subnet_static(id, boot, subnet.id, address)
        .expect("link STATIC");

    let mark = "node reuse by MachineDeployment/md-0 of reuse/real";
    let released = admin
        .release(
            id,
            &ReleaseRequest {
                comment: Some(format!("capmaas: reuse/w-0 deleted; {mark}")),
                ..ReleaseRequest::default()
            },
        )
        .expect("release");
    assert_eq!(
        released.status,
        MachineStatus::Ready,
        "manual power: at once"
    );
    let host = admin.machine(id).expect("reuse-1");
    assert!(host.owner.is_none());
    let links: Vec<_> = host
        .interfaces
        .iter()
        .flat_map(|i| &i.links)
        .filter(|l| l.mode == capmaas::maas::LinkMode::Static)
        .filter_map(|l| l.ip.clone())
        .collect();
    assert_eq!(links, [address], "MAAS keeps STATIC links on release");
    let events = admin
        .events(&EventQuery {
            system_ids: vec![id.to_string()],
            level: Some(capmaas::maas::EventLevel::Debug),
            limit: Some(50),
            after: None,
        })
        .expect("events");
    let request = events
        .iter()
        .find(|e| e.kind.starts_with("User "))
        .expect("a user request");
    assert_eq!(request.kind, "User releasing node", "{events:?}");
    assert!(request.description.ends_with(mark), "{request:?}");
    assert!(
        events.iter().all(|e| e.kind != "User erasing disk"),
        "released without erase: {events:?}"
    );

    // Taken back; then left as the next run expects it (Ready, its
    // commissioning link back).
    assert_eq!(admin.allocate(&allocate()).expect("again").system_id, id);
    let host = admin.machine(id).expect("reuse-1");
    for link in host
        .interfaces
        .iter()
        .flat_map(|i| &i.links)
        .filter(|l| l.mode == capmaas::maas::LinkMode::Static)
    {
        admin
            .unlink_subnet(id, boot, link.id)
            .expect("unlink STATIC");
    }
    admin
        .release(id, &ReleaseRequest::default())
        .expect("release at the end");
}

/// `dry_run=true` on `op=allocate`, which `capmaas doctor` sends to probe a
/// non-admin user's rights per pool on MAAS 3.8: real MAAS 3.4.8 picks the
/// machine it would allocate and acquires nothing (no owner, still Ready,
/// no acquire event). Machine: spare-1, the only one in the default pool,
/// never allocated.
#[test]
fn a_dry_run_allocation_picks_a_machine_and_acquires_nothing() {
    let Some(maas) = real_maas::world("a_dry_run_allocation_picks_a_machine_and_acquires_nothing")
    else {
        return;
    };
    let spare = maas.system_id("spare-1");
    let admin = maas.admin_client();
    let acquisitions = || {
        admin
            .events(&EventQuery {
                system_ids: vec![spare.to_string()],
                level: Some(capmaas::maas::EventLevel::Debug),
                limit: Some(100),
                after: None,
            })
            .expect("events of spare-1")
            .iter()
            .filter(|e| e.kind == "User acquiring node")
            .count()
    };
    let before = acquisitions();
    for (who, client) in [(OPERATOR, maas.operator_client()), ("admin", admin.clone())] {
        let picked = client
            .allocate(&AllocateRequest {
                pool: Some("default".into()),
                dry_run: true,
                ..AllocateRequest::default()
            })
            .unwrap_or_else(|e| panic!("dry run as {who}: {e}"));
        assert_eq!(picked.system_id, spare, "{who}");
        let host = admin.machine(spare).expect("spare-1");
        assert_eq!(host.status, MachineStatus::Ready, "{who}");
        assert_eq!(host.owner, None, "{who}");
    }
    assert_eq!(acquisitions(), before, "a dry run acquires nothing");
    // Nothing to pick is the allocation's own 409.
    let refused = maas
        .operator_client()
        .allocate(&AllocateRequest {
            pool: Some("default".into()),
            tags: vec!["gpu".into()],
            dry_run: true,
            ..AllocateRequest::default()
        })
        .expect_err("no gpu machine in the default pool");
    assert!(refused.is_conflict(), "{refused}");
}
