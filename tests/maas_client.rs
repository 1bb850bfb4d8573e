//! The MAAS client against the simulator: every operation and every error
//! class, over real HTTP.

mod support;

use capmaas::maas::MaasApi;
use std::sync::Arc;
use std::time::Duration;

use capmaas::maas::{
    AllocateRequest, AnnotationsOp, ApiKey, Client, DeployRequest, ErrorKind, EventLevel,
    EventQuery, MaasBody, MachineFilter, MachineStatus, PowerState, ReleaseRequest, IDENTITY_KEY,
};
use serde_json::json;
use support::maas_sim::MaasSim;

fn sim() -> MaasSim {
    MaasSim::start(None)
}

fn allocate_cp(client: &Client, agent: &str) -> capmaas::maas::Machine {
    client
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            tags: vec!["control-plane".into()],
            agent_name: Some(agent.into()),
            comment: Some(format!("capmaas test {agent}")),
            ..AllocateRequest::default()
        })
        .expect("allocate a control-plane machine")
}

#[test]
fn check_and_whoami_with_endpoint_as_users_write_it() {
    let sim = sim();
    for endpoint in [sim.url.clone(), format!("{}/", sim.url)] {
        let mut config = sim.client_config(&sim.api_key);
        config.endpoint = endpoint;
        let client = Client::new(config).unwrap();
        client.check().unwrap();
        let me = client.whoami().unwrap();
        assert_eq!(me.username, "admin");
        assert!(me.is_superuser);
    }
}

#[test]
fn bad_keys_give_401_and_never_show_the_secret() {
    let sim = sim();
    let real = sim.api_key.clone();
    let parts: Vec<&str> = real.split(':').collect();
    let real_secret = parts[2];
    let cases = [
        (
            format!("NoSuchConsumer0000:{}:{}", parts[1], parts[2]),
            "Invalid API key.",
        ),
        (
            format!("{}:NoSuchToken0000000:{}", parts[0], parts[2]),
            "Invalid access token",
        ),
        (
            format!("{}:{}:WrongSecretWrongSecretWrongSecr", parts[0], parts[1]),
            "Invalid signature",
        ),
    ];
    for (key, expected) in cases {
        let client = Client::new(sim.client_config(&key)).unwrap();
        let err = client.check().unwrap_err();
        assert!(err.is_unauthorized(), "{err}");
        assert!(!err.is_transient(), "{err}");
        assert_eq!(err.attempts(), 1, "401 must not be retried: {err}");
        let shown = format!("{err} {err:?} {}", err.message());
        assert!(shown.contains(expected), "{shown}");
        assert!(
            !shown.contains(real_secret),
            "the real secret leaked: {shown}"
        );
        assert!(
            !shown.contains("WrongSecretWrongSecret"),
            "our secret leaked: {shown}"
        );
    }
}

#[test]
fn malformed_key_is_rejected_before_any_request() {
    let err = ApiKey::parse("SimConsumerKey0001:SimTokenSecret000000000000000001").unwrap_err();
    let message = capmaas::maas::Error::from(err).to_string();
    assert!(message.contains("invalid MAAS API key"), "{message}");
    assert!(!message.contains("SimTokenSecret"), "{message}");
}

#[test]
fn list_and_filter_machines() {
    let sim = sim();
    let client = sim.client();
    let all = client.machines(&MachineFilter::default()).unwrap();
    assert_eq!(all.len(), 11);
    assert!(all.iter().all(|m| m.status == MachineStatus::Ready));

    let cp = client
        .machines(&MachineFilter {
            pool: Some("cp-pool".into()),
            ..MachineFilter::default()
        })
        .unwrap();
    assert_eq!(cp.len(), 4);
    assert!(cp
        .iter()
        .all(|m| m.pool == "cp-pool" && m.tag_names == ["control-plane"]));

    let workers_b = client
        .machines(&MachineFilter {
            zone: Some("zone-b".into()),
            tags: vec!["worker".into()],
            ..MachineFilter::default()
        })
        .unwrap();
    assert_eq!(workers_b.len(), 3);
    assert!(workers_b.iter().all(|m| m.zone == "zone-b"));

    let one = client
        .machines(&MachineFilter::by_hostname("worker-3"))
        .unwrap();
    assert_eq!(one.len(), 1);
    let read = client.machine(&one[0].system_id).unwrap();
    assert_eq!(read.hostname, "worker-3");
    assert_eq!(read.fqdn, "worker-3.maas");
    assert_eq!(read.cpu_count, 16);
    assert_eq!(read.memory, 65536);
    assert_eq!(read.storage_gb(), 1200.0);
    assert_eq!(read.power_state, PowerState::Off);
    assert!(read.boot_interface.is_some());

    let by_id = client
        .machines(&MachineFilter {
            system_ids: vec![read.system_id.clone()],
            ..MachineFilter::default()
        })
        .unwrap();
    assert_eq!(by_id, vec![read]);
}

/// The MAAS watch's list: every machine of one owner, whatever its state;
/// a release takes it out; a machine of another user never shows.
#[test]
fn machines_owned_by_lists_every_state_of_one_owner() {
    let sim = MaasSim::start_with_args(None, &["--release-seconds", "0"]);
    let admin = sim.client();
    assert!(admin.machines_owned_by("admin").unwrap().is_empty());
    let allocated = allocate_cp(&admin, "ns/a");
    let deploying = allocate_cp(&admin, "ns/b");
    admin
        .deploy(&deploying.system_id, &DeployRequest::default())
        .unwrap();
    let operator = sim.client_for("operator");
    let theirs = operator
        .allocate(&AllocateRequest {
            pool: Some("worker-pool".into()),
            ..AllocateRequest::default()
        })
        .unwrap();
    let mut owned: Vec<(String, MachineStatus)> = admin
        .machines_owned_by("admin")
        .unwrap()
        .into_iter()
        .map(|m| (m.system_id.clone(), m.status.clone()))
        .collect();
    owned.sort_by(|x, y| x.0.cmp(&y.0));
    let mut expected = vec![
        (allocated.system_id.clone(), MachineStatus::Allocated),
        (deploying.system_id.clone(), MachineStatus::Deploying),
    ];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(owned, expected);
    let mine = operator.machines_owned_by("operator").unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].system_id, theirs.system_id);

    admin
        .release(&allocated.system_id, &ReleaseRequest::default())
        .unwrap();
    let owned = admin.machines_owned_by("admin").unwrap();
    assert_eq!(owned.len(), 1, "a released machine leaves its owner's list");
    assert_eq!(owned[0].system_id, deploying.system_id);

    // An unknown user is an error, not an empty list (`clean_owner`).
    let err = admin.machines_owned_by("nobody").unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    assert!(err.message().contains("No such owner: 'nobody'."), "{err}");
}

/// The MAAS watch passes its last list (sorted by system_id): a machine
/// MAAS shows as it was comes back as that list's `Arc`, so the view and
/// the new list hold it once; a changed one is decoded anew.
#[test]
fn a_list_shares_the_previous_lists_unchanged_machines() {
    let sim = sim();
    let admin = sim.client();
    let still = allocate_cp(&admin, "ns/still");
    let edited = allocate_cp(&admin, "ns/edited");
    let mut first = admin.machines_owned_by("admin").unwrap();
    first.sort_by(|x, y| x.system_id.cmp(&y.system_id));
    admin
        .set_owner_data(&edited.system_id, &[("note", Some("edited"))])
        .unwrap();
    let second = admin
        .machines_owned_by_reusing("admin", first.clone())
        .unwrap();
    assert_eq!(second.len(), 2);
    let old = |id: &str| first.iter().find(|m| m.system_id == id).unwrap();
    let new = |id: &str| second.iter().find(|m| m.system_id == id).unwrap();
    assert!(Arc::ptr_eq(new(&still.system_id), old(&still.system_id)));
    assert!(!Arc::ptr_eq(new(&edited.system_id), old(&edited.system_id)));
    assert_eq!(
        new(&edited.system_id)
            .owner_data
            .get("note")
            .map(String::as_str),
        Some("edited")
    );
    // Without a previous list every machine is new.
    let third = admin.machines_owned_by("admin").unwrap();
    assert!(third
        .iter()
        .all(|m| !second.iter().any(|s| Arc::ptr_eq(s, m))));
}

/// `events/?op=query`: newest first, `after` pages forward from the oldest,
/// ids repeat, levels filter, and a failed deployment carries curtin's
/// reason.
#[test]
fn events_query_follows_a_deployment() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0.2"]);
    let client = sim.client();
    let a = allocate_cp(&client, "ns/a");
    let b = allocate_cp(&client, "ns/b");
    sim.fail_deployment_because(&b.system_id, "disk on fire");
    for id in [&a.system_id, &b.system_id] {
        client.deploy(id, &DeployRequest::default()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        client.machine(&a.system_id).unwrap().status,
        MachineStatus::Deployed
    );

    let info = |after, ids: &[&str]| {
        client
            .events(&EventQuery {
                system_ids: ids.iter().map(|s| s.to_string()).collect(),
                after,
                level: Some(EventLevel::Info),
                limit: Some(1000),
            })
            .unwrap()
    };
    let a_events = info(None, &[&a.system_id]);
    let ids: Vec<i64> = a_events.iter().map(|e| e.id).collect();
    let mut newest_first = ids.clone();
    newest_first.sort_by(|x, y| y.cmp(x));
    assert_eq!(ids, newest_first, "newest first");
    assert!(a_events.iter().all(|e| e.system_id == a.system_id));
    let kinds: Vec<&str> = a_events.iter().rev().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"Deploying"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"Deployed"), "{kinds:?}");
    assert!(kinds.contains(&"Performing PXE boot"), "{kinds:?}");
    assert!(kinds.contains(&"Installing OS"), "{kinds:?}");
    assert!(
        a_events.iter().all(|e| e.level != EventLevel::Debug),
        "INFO and above"
    );

    // `after` with a small limit: the oldest events above it, still
    // answered newest first.
    let oldest = *ids.last().unwrap();
    let page = client
        .events(&EventQuery {
            system_ids: vec![a.system_id.clone()],
            after: Some(oldest),
            level: Some(EventLevel::Info),
            limit: Some(2),
        })
        .unwrap();
    let page_ids: Vec<i64> = page.iter().map(|e| e.id).collect();
    let mut expected: Vec<i64> = ids.iter().copied().filter(|id| *id > oldest).collect();
    expected.sort();
    expected.truncate(2);
    expected.reverse();
    assert_eq!(page_ids, expected);

    // Both machines in one call; the failed one tells why.
    let both = info(Some(oldest - 1), &[&a.system_id, &b.system_id]);
    assert!(both.iter().any(|e| e.system_id == a.system_id));
    let failure = both
        .iter()
        .find(|e| e.system_id == b.system_id && e.kind == "Node installation failure")
        .expect("curtin's failure is logged");
    assert_eq!(failure.level, EventLevel::Error);
    assert!(failure.level.is_problem());
    assert!(failure.description.contains("disk on fire"), "{failure:?}");

    // DEBUG adds the status changes, with the allocation to its user.
    let debug = client
        .events(&EventQuery {
            system_ids: vec![a.system_id.clone()],
            level: Some(EventLevel::Debug),
            ..EventQuery::default()
        })
        .unwrap();
    assert!(debug.iter().any(|e| e.kind == "Node changed status"
        && e.description == "From 'Ready' to 'Allocated' (to admin)"));
    // A limit over MAAS's maximum is sent as the maximum, not refused.
    let capped = client
        .events(&EventQuery {
            limit: Some(5000),
            ..EventQuery::default()
        })
        .unwrap();
    assert!(!capped.is_empty());
}

#[test]
fn allocate_records_identity_and_picks_the_cheapest_match() {
    let sim = sim();
    let client = sim.client();
    let host = client
        .allocate(&AllocateRequest {
            pool: Some("worker-pool".into()),
            tags: vec!["worker".into()],
            cpu_count: Some(8),
            mem: Some(32768),
            min_disk_gb: Some(200),
            agent_name: Some("ns/mm-worker-0".into()),
            comment: Some("capmaas ns/mm-worker-0".into()),
            ..AllocateRequest::default()
        })
        .unwrap();
    assert_eq!(host.status, MachineStatus::Allocated);
    assert_eq!(host.owner.as_deref(), Some("admin"));
    assert_eq!(
        host.cpu_count, 16,
        "the 16-core workers cost less than the 32-core ones"
    );
    let state = sim.machine_state(&host.system_id);
    assert_eq!(state["agent_name"], "ns/mm-worker-0");
    assert_eq!(state["comments"], json!(["capmaas ns/mm-worker-0"]));

    let mine = client
        .machines(&MachineFilter::by_agent_name("ns/mm-worker-0"))
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].system_id, host.system_id);
    assert!(client
        .machines(&MachineFilter::by_agent_name("someone-else"))
        .unwrap()
        .is_empty());

    // Dry run picks without allocating.
    let dry = client
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            dry_run: true,
            ..AllocateRequest::default()
        })
        .unwrap();
    assert_eq!(dry.status, MachineStatus::Ready);
}

#[test]
fn allocate_errors_are_permanent_and_typed() {
    let sim = sim();
    let client = sim.client();
    let err = client
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            mem: Some(1 << 30),
            ..AllocateRequest::default()
        })
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert!(!err.is_transient());
    assert_eq!(err.attempts(), 1);
    assert_eq!(
        err.body(),
        &MaasBody::Text(
            "No available machine matches constraints: [('mem', ['1073741824']), ('pool', ['cp-pool'])] \
             (resolved to \"mem=1073741824.0 pool=cp-pool\")"
                .into()
        )
    );

    let err = client
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            min_disk_gb: Some(500),
            ..AllocateRequest::default()
        })
        .unwrap_err();
    assert!(err.is_conflict(), "cp machines have 120 GB disks: {err}");

    let err = client
        .allocate(&AllocateRequest {
            zone: Some("zone-z".into()),
            ..AllocateRequest::default()
        })
        .unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    let MaasBody::FieldErrors(fields) = err.body() else {
        panic!("{err:?}")
    };
    assert_eq!(fields["zone"], vec!["No such zone(s): zone-z.".to_owned()]);

    let err = client
        .allocate(&AllocateRequest {
            tags: vec!["no-such-tag".into()],
            ..AllocateRequest::default()
        })
        .unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    assert!(
        err.message().contains("No such tag(s): 'no-such-tag'."),
        "{err}"
    );

    // Exhaust the pool: 4 control-plane machines, the fifth allocate fails.
    for i in 0..4 {
        allocate_cp(&client, &format!("cp-{i}"));
    }
    let err = client
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            ..AllocateRequest::default()
        })
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
}

/// A request body far larger than a connection's 8 KiB write buffer is
/// sent whole: a deploy's user data (bootstrap data runs to tens of KiB).
#[test]
fn a_body_larger_than_the_connection_buffer_is_sent_whole() {
    let sim = sim();
    let client = sim.client();
    let host = allocate_cp(&client, "ns/cp-0");
    let user_data: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    client
        .deploy(
            &host.system_id,
            &DeployRequest {
                image: Some("custom/u-2204-0-k-1264-0".into()),
                user_data: Some(user_data.clone()),
                ..DeployRequest::default()
            },
        )
        .unwrap();
    let state = sim.machine_state(&host.system_id);
    let sent = state["user_data"].as_str().unwrap();
    assert_eq!(sent.len(), user_data.len().div_ceil(3) * 4);
    assert!(sent.starts_with("YWJjZGVmZ2hpamts"), "{}", &sent[..16]);
}

#[test]
fn deploy_custom_image_with_user_data_then_release_with_erase() {
    let sim = sim();
    let client = sim.client();
    let host = allocate_cp(&client, "ns/cp-0");
    let deployed = client
        .deploy(
            &host.system_id,
            &DeployRequest {
                image: Some("custom/u-2204-0-k-1264-0".into()),
                user_data: Some(b"#cloud-config\nruncmd: [echo hi]\n".to_vec()),
                ..DeployRequest::default()
            },
        )
        .unwrap();
    assert_eq!(deployed.status, MachineStatus::Deploying);
    let raw = raw_machine(&sim, &host.system_id);
    assert_eq!(
        (&raw["osystem"], &raw["distro_series"]),
        (&json!("custom"), &json!("u-2204-0-k-1264-0"))
    );
    // As real MAAS 3.4.8 answers: power as stored, and no AUTO address
    // yet (MAAS claims them after its answer); the next read has them.
    assert_eq!(deployed.power_state, PowerState::Off);
    assert!(
        deployed.ip_addresses.is_empty(),
        "{:?}",
        deployed.ip_addresses
    );
    assert!(!client
        .machine(&host.system_id)
        .unwrap()
        .ip_addresses
        .is_empty());
    let state = sim.machine_state(&host.system_id);
    assert_eq!(
        state["user_data"],
        "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFtlY2hvIGhpXQo="
    );

    assert_eq!(sim.complete(&host.system_id), "Deployed");
    let read = client.machine(&host.system_id).unwrap();
    assert_eq!(read.status, MachineStatus::Deployed);
    assert_eq!(read.status_name, "Deployed");

    // Deploying a Deployed machine is a state conflict.
    let err = client
        .deploy(&host.system_id, &DeployRequest::default())
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    assert_eq!(
        err.message(),
        "Can't deploy a machine that is in the 'Deployed' state"
    );

    let released = client
        .release(
            &host.system_id,
            &ReleaseRequest {
                erase: true,
                comment: Some("bye".into()),
                ..ReleaseRequest::default()
            },
        )
        .unwrap();
    assert_eq!(released.status, MachineStatus::DiskErasing);
    assert_eq!(sim.complete(&host.system_id), "Ready");
    let state = sim.machine_state(&host.system_id);
    assert_eq!(state["owner"], json!(null));
    assert_eq!(state["agent_name"], "");
    assert_eq!(state["osystem"], "");
    assert_eq!(state["ip_addresses"], json!([]));
    assert_eq!(state["comments"], json!(["capmaas test ns/cp-0", "bye"]));

    // Releasing a Ready machine is a no-op, so release is safe to repeat.
    let again = client
        .release(&host.system_id, &ReleaseRequest::default())
        .unwrap();
    assert_eq!(again.status, MachineStatus::Ready);
}

#[test]
fn deploy_ubuntu_ephemeral_and_by_series() {
    let sim = sim();
    let client = sim.client();
    let a = allocate_cp(&client, "a");
    let m = client
        .deploy(
            &a.system_id,
            &DeployRequest {
                image: Some("ubuntu/noble".into()),
                ephemeral_deploy: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(m.status, MachineStatus::Deploying);
    let raw = raw_machine(&sim, &a.system_id);
    assert_eq!(
        (&raw["osystem"], &raw["distro_series"]),
        (&json!("ubuntu"), &json!("noble"))
    );
    assert_eq!(raw["ephemeral_deploy"], true);
    let b = allocate_cp(&client, "b");
    let m = client
        .deploy(
            &b.system_id,
            &DeployRequest {
                image: Some("jammy".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(m.status, MachineStatus::Deploying);
    let raw = raw_machine(&sim, &b.system_id);
    assert_eq!(
        (&raw["osystem"], &raw["distro_series"]),
        (&json!("ubuntu"), &json!("jammy"))
    );
}

#[test]
fn deploy_unknown_image_is_400_and_changes_nothing() {
    let sim = sim();
    let client = sim.client();
    let host = allocate_cp(&client, "x");
    let err = client
        .deploy(
            &host.system_id,
            &DeployRequest {
                image: Some("custom/u-2204-0-k-9999-0".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    let MaasBody::FieldErrors(fields) = err.body() else {
        panic!("{err:?}")
    };
    let message = &fields["distro_series"][0];
    assert!(
        message.starts_with(
            "'custom/u-2204-0-k-9999-0' is not a valid distro_series.  It should be one of: '', "
        ),
        "{message}"
    );
    assert!(message.contains("'custom/u-2204-0-k-1264-0'"), "{message}");
    assert_eq!(
        client.machine(&host.system_id).unwrap().status,
        MachineStatus::Allocated
    );

    let check = client.check_image("u-2204-0-k-1265-0").unwrap();
    assert!(!check.exists);
    assert_eq!(check.closest[0], "custom/u-2204-0-k-1264-0");
    let check = client.check_image("u-2204-0-k-1264-0").unwrap();
    assert_eq!(check.canonical.as_deref(), Some("custom/u-2204-0-k-1264-0"));
}

/// Issue 22 item 4: every `<os>/<series>` form goes whole in
/// `distro_series` and MAAS resolves it (`ubuntu/noble`: osystem ubuntu,
/// series noble); an OS or series MAAS has no image for is MAAS's 400
/// listing the valid choices, and the machine stays Allocated.
#[test]
fn deploy_resolves_os_series_and_refuses_unknown_os_or_series() {
    let sim = sim();
    let client = sim.client();
    for (image, os, series) in [
        ("ubuntu/noble", "ubuntu", "noble"),
        ("custom/u-2204-0-k-1264-0", "custom", "u-2204-0-k-1264-0"),
    ] {
        let host = allocate_cp(&client, image);
        let m = client
            .deploy(
                &host.system_id,
                &DeployRequest {
                    image: Some(image.into()),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(m.status, MachineStatus::Deploying, "{image}");
        let raw = raw_machine(&sim, &host.system_id);
        assert_eq!(
            (&raw["osystem"], &raw["distro_series"]),
            (&json!(os), &json!(series)),
            "{image}"
        );
    }
    let host = allocate_cp(&client, "unknown");
    for image in ["rhel/9", "centos/centos70", "ubuntu/plucky", "debian/noble"] {
        let err = client
            .deploy(
                &host.system_id,
                &DeployRequest {
                    image: Some(image.into()),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(err.is_bad_request(), "{image}: {err}");
        let MaasBody::FieldErrors(fields) = err.body() else {
            panic!("{image}: {err:?}")
        };
        let message = &fields["distro_series"][0];
        assert!(
            message.starts_with(&format!(
                "'{image}' is not a valid distro_series.  It should be one of: '', "
            )),
            "{message}"
        );
        assert!(message.contains("'ubuntu/noble'"), "{message}");
    }
    assert_eq!(
        client.machine(&host.system_id).unwrap().status,
        MachineStatus::Allocated
    );
}

/// Issue 22 item 5: workload annotations as the simulator's MAAS release
/// has them. From 3.0 on (3.4.8, the real MAAS of the tests)
/// `set_workload_annotations` and `set_owner_data` write one store, shown
/// as both `workload_annotations` and `owner_data`; 2.x knows only the
/// owner data names and refuses the new op as an unknown one.
#[test]
fn workload_annotations_follow_the_maas_release() {
    for version in ["2.9.2", "3.4.8"] {
        let renamed = version.starts_with('3');
        let mut inventory = support::maas_sim::story_inventory();
        inventory["settings"]["maas_version"] = json!(version);
        let sim = MaasSim::start(Some(&inventory));
        let client = sim.client();
        let op = client.version().unwrap().annotations_op();
        assert_eq!(
            op == AnnotationsOp::SetWorkloadAnnotations,
            renamed,
            "{version}"
        );
        let host = allocate_cp(&client, "annotations");
        let id = host.system_id.as_str();
        let identity = "capmaas/ns/m1/uid-1";

        let m = client
            .set_annotations(id, op, &[(IDENTITY_KEY, Some(identity)), ("k", Some("v"))])
            .unwrap();
        assert_eq!(m.identity(), Some(identity), "{version}");
        let raw = raw_machine(&sim, id);
        assert_eq!(raw["owner_data"]["k"], "v", "{version}");
        if renamed {
            assert_eq!(raw["workload_annotations"], raw["owner_data"], "{version}");
            // The deprecated alias deletes from the same store.
            client.set_owner_data(id, &[("k", None)]).unwrap();
            let raw = raw_machine(&sim, id);
            assert_eq!(
                raw["workload_annotations"],
                json!({IDENTITY_KEY: identity}),
                "{version}"
            );
        } else {
            assert!(raw.get("workload_annotations").is_none(), "{raw}");
            let err = client
                .set_annotations(id, AnnotationsOp::SetWorkloadAnnotations, &[("k", None)])
                .unwrap_err();
            assert!(err.is_bad_request(), "{version}: {err}");
            assert_eq!(
                err.message(),
                "Unrecognised signature: method=POST op=set_workload_annotations"
            );
        }

        // Only the owner writes them; MAAS's words changed with the name.
        let spare = &client
            .machines(&MachineFilter::by_hostname("spare-1"))
            .unwrap()[0];
        let err = client
            .set_annotations(&spare.system_id, op, &[("k", Some("v"))])
            .unwrap_err();
        assert!(err.is_conflict(), "{version}: {err}");
        let refusal = if renamed {
            "Cannot set workload annotation: it hasn't been acquired."
        } else {
            "Cannot set owner data: it hasn't been allocated."
        };
        assert_eq!(err.message(), refusal, "{version}");
    }
}

/// `GET machines/{id}/` as MAAS answers it, every field.
fn raw_machine(sim: &MaasSim, system_id: &str) -> serde_json::Value {
    let key = capmaas::maas::ApiKey::parse(&sim.api_key).unwrap();
    let mut response = ureq::get(format!("{}/api/2.0/machines/{system_id}/", sim.url))
        .header("Authorization", key.authorization_header())
        .call()
        .unwrap();
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
}

/// Issue 22 item 6: the deploy options as the simulator's MAAS release
/// takes them. 3.4.8 ignores `enable_kernel_crash_dump` (it reads only the
/// parameters it knows): that silent drop is why capmaas checks
/// `version/` first. 3.6 keeps both.
#[test]
fn deploy_options_follow_the_maas_release() {
    for (version, crash_dump) in [("3.4.8", false), ("3.6.0", true)] {
        let mut inventory = support::maas_sim::story_inventory();
        inventory["settings"]["maas_version"] = json!(version);
        let sim = MaasSim::start(Some(&inventory));
        let client = sim.client();
        assert_eq!(client.version().unwrap().version, version);
        let host = allocate_cp(&client, "options");
        let m = client
            .deploy(
                &host.system_id,
                &DeployRequest {
                    image: Some("ubuntu/noble".into()),
                    hwe_kernel: Some("hwe-24.04".into()),
                    enable_hw_sync: Some(true),
                    enable_kernel_crash_dump: Some(true),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(m.status, MachineStatus::Deploying, "{version}");
        // The machine as MAAS answers it (a raw read: the client's type
        // leaves these fields out).
        let raw = raw_machine(&sim, &host.system_id);
        assert_eq!(raw["hwe_kernel"], "hwe-24.04", "{version}");
        assert_eq!(raw["enable_hw_sync"], true, "{version}");
        assert_eq!(raw["enable_kernel_crash_dump"], crash_dump, "{version}");
    }
}

#[test]
fn power_update_owner_data_and_not_found() {
    let sim = sim();
    let client = sim.client();
    let host = allocate_cp(&client, "p");
    let id = host.system_id.as_str();

    let err = client
        .power_on(
            &client
                .machines(&MachineFilter::by_hostname("spare-1"))
                .unwrap()[0]
                .system_id,
        )
        .unwrap_err();
    assert!(err.is_conflict(), "power_on an unallocated machine: {err}");
    assert_eq!(err.message(), "Can't start node: it hasn't been allocated.");

    let m = client.update_machine(id, &[("swap_size", "0")]).unwrap();
    assert_eq!(m.swap_size, Some(0));

    let m = client
        .set_owner_data(
            id,
            &[("cluster", Some("ns/c1")), ("machine", Some("ns/m1"))],
        )
        .unwrap();
    assert_eq!(
        m.owner_data.get("cluster").map(String::as_str),
        Some("ns/c1")
    );
    let m = client.set_owner_data(id, &[("machine", None)]).unwrap();
    assert_eq!(m.owner_data.len(), 1);
    let found = client
        .machines(&MachineFilter {
            owner_data: vec![("cluster".into(), "ns/c1".into())],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(found.len(), 1);

    assert_eq!(client.query_power_state(id).unwrap(), PowerState::Off);
    let m = client
        .power_on_with_comment(id, Some("capmaas: start ns/p"))
        .unwrap();
    assert_eq!(
        m.status,
        MachineStatus::Deploying,
        "power_on on Allocated starts a deployment"
    );
    // The BMC confirms the power-on later (real MAAS learns it after its
    // answer).
    assert_eq!(m.power_state, PowerState::Off);
    sim.complete(id);
    assert_eq!(client.query_power_state(id).unwrap(), PowerState::On);
    assert_eq!(sim.machine_state(id)["comments"][1], "capmaas: start ns/p");
    let m = client.power_off(id).unwrap();
    assert_eq!(m.power_state, PowerState::Off);
    sim.power_on(id);
    assert_eq!(client.query_power_state(id).unwrap(), PowerState::On);

    let err = client.machine("nosuch").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.message(), "No Machine matches the given query.");
    assert!(client
        .release("nosuch", &ReleaseRequest::default())
        .unwrap_err()
        .is_not_found());
}

#[test]
fn release_of_deployed_machine_goes_through_releasing() {
    let sim = MaasSim::start_with_args(None, &["--release-seconds", "600"]);
    let client = sim.client();
    let host = allocate_cp(&client, "r");
    client
        .deploy(&host.system_id, &DeployRequest::default())
        .unwrap();
    sim.complete(&host.system_id);
    let m = client
        .release(&host.system_id, &ReleaseRequest::default())
        .unwrap();
    assert_eq!(m.status, MachineStatus::Releasing);
    assert_eq!(
        m.owner.as_deref(),
        Some("admin"),
        "owner stays until the release completes"
    );
    assert_eq!(sim.complete(&host.system_id), "Ready");
    let m = client.machine(&host.system_id).unwrap();
    assert_eq!(m.owner, None);
    assert!(m.owner_data.is_empty());

    // A powered-off machine is released at once.
    let host = allocate_cp(&client, "r2");
    let m = client
        .release(&host.system_id, &ReleaseRequest::default())
        .unwrap();
    assert_eq!(m.status, MachineStatus::Ready);
}

#[test]
fn failed_deployment_and_broken_machines() {
    let sim = sim();
    let client = sim.client();
    let host = allocate_cp(&client, "f");
    client
        .deploy(&host.system_id, &DeployRequest::default())
        .unwrap();
    assert_eq!(sim.fail_deployment(&host.system_id), "Failed deployment");
    let m = client.machine(&host.system_id).unwrap();
    assert_eq!(m.status, MachineStatus::FailedDeployment);
    let err = client
        .deploy(&host.system_id, &DeployRequest::default())
        .unwrap_err();
    assert!(err.is_conflict());
    // A failed deployment leaves the machine on (MAAS's mark_failed does not
    // power it off), so its release waits for the power-off.
    assert_eq!(
        client
            .release(&host.system_id, &ReleaseRequest::default())
            .unwrap()
            .status,
        MachineStatus::Releasing
    );
    assert_eq!(sim.complete(&host.system_id), "Ready");

    let other = allocate_cp(&client, "g");
    sim.mark_broken(&other.system_id);
    assert_eq!(
        client.machine(&other.system_id).unwrap().status,
        MachineStatus::Broken
    );
    assert!(client
        .deploy(&other.system_id, &DeployRequest::default())
        .unwrap_err()
        .is_conflict());
    assert_eq!(
        client
            .release(&other.system_id, &ReleaseRequest::default())
            .unwrap()
            .status,
        MachineStatus::Ready
    );
}

#[test]
fn dns_resource_lifecycle() {
    let sim = sim();
    let client = sim.client();
    let fqdn = "c1-api.k8s.maas";
    assert!(client.dns_resources(fqdn).unwrap().is_empty());
    let ips = vec!["127.11.130.21".to_owned(), "127.11.130.22".to_owned()];
    let created = client.create_dns_resource(fqdn, 10, &ips).unwrap();
    assert_eq!(created.fqdn, fqdn);
    assert_eq!(created.address_ttl, Some(10));
    assert_eq!(created.ip_addresses, ips);

    let found = client.dns_resources(fqdn).unwrap();
    assert_eq!(found, vec![created.clone()]);
    assert_eq!(client.dns_resource(created.id).unwrap(), created);

    let err = client.create_dns_resource(fqdn, 10, &ips).unwrap_err();
    assert!(err.is_bad_request(), "{err}");
    assert_eq!(err.attempts(), 1);
    assert!(
        err.message()
            .contains("Labels must be unique within their zone."),
        "{err}"
    );

    let updated = client
        .set_dns_resource_ips(created.id, &["127.11.130.23".to_owned()])
        .unwrap();
    assert_eq!(updated.ip_addresses, vec!["127.11.130.23"]);
    assert_eq!(
        updated.address_ttl,
        Some(10),
        "fields left out keep their value"
    );
    let state = sim.state();
    assert_eq!(
        state["dns_resources"],
        json!([{"id": created.id, "fqdn": fqdn, "address_ttl": 10, "ip_addresses": ["127.11.130.23"]}])
    );
    assert!(client
        .set_dns_resource_ips(created.id, &[])
        .unwrap()
        .ip_addresses
        .is_empty());

    client.delete_dns_resource(created.id).unwrap();
    assert!(client
        .delete_dns_resource(created.id)
        .unwrap_err()
        .is_not_found());
    assert!(client.dns_resources(fqdn).unwrap().is_empty());

    let err = client.dns_resources("api.no-such-domain").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.message(), "No Domain matches the given query.");
}

/// TXT records (`POST dnsresourcerecords/`, the mark capmaas writes on its
/// API server record): listed in the name's `resource_records`; on a name
/// without a record MAAS makes one (no addresses); admins only; gone with
/// the record.
#[test]
fn dns_txt_records_are_listed_with_their_name() {
    let sim = sim();
    let client = sim.client();
    let fqdn = "c1-api.k8s.maas";
    let created = client
        .create_dns_resource(fqdn, 10, &["127.11.130.21".to_owned()])
        .unwrap();
    client.create_dns_txt(fqdn, "capmaas-owner=abc").unwrap();
    let found = client.dns_resources(fqdn).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, created.id);
    assert_eq!(found[0].ip_addresses, ["127.11.130.21"]);
    assert_eq!(found[0].txt().collect::<Vec<_>>(), ["capmaas-owner=abc"]);
    assert_eq!(found[0].resource_records[0].rrtype, "TXT");

    client.create_dns_txt("other.k8s.maas", "x=1").unwrap();
    let other = client.dns_resources("other.k8s.maas").unwrap();
    assert!(other[0].ip_addresses.is_empty(), "{other:?}");
    assert_eq!(other[0].txt().collect::<Vec<_>>(), ["x=1"]);
    let err = client
        .create_dns_txt("x.no-such-domain", "x=1")
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");

    let key = sim.non_admin_key().unwrap();
    let operator = Client::new(sim.client_config(&key)).unwrap();
    let err = operator
        .create_dns_txt(fqdn, "capmaas-owner=def")
        .unwrap_err();
    assert!(err.is_forbidden(), "{err}");
    assert_eq!(client.dns_resources(fqdn).unwrap()[0].txt().count(), 1);

    client.delete_dns_resource(created.id).unwrap();
    assert!(client.dns_resources(fqdn).unwrap().is_empty());
}

#[test]
fn non_admin_key_is_forbidden_to_write_dns() {
    let sim = sim();
    let key = sim
        .non_admin_key()
        .expect("story inventory has a non-admin key");
    let client = Client::new(sim.client_config(&key)).unwrap();
    assert!(!client.whoami().unwrap().is_superuser);
    let err = client
        .create_dns_resource("x.k8s.maas", 10, &[])
        .unwrap_err();
    assert!(err.is_forbidden(), "{err}");
    assert!(!err.is_transient());
    assert_eq!(err.message(), "This method is reserved for admin users.");
}

#[test]
fn inventory_lists() {
    let sim = sim();
    let client = sim.client();
    let zones: Vec<String> = client
        .zones()
        .unwrap()
        .into_iter()
        .map(|z| z.name)
        .collect();
    assert_eq!(zones, ["default", "zone-a", "zone-b"]);
    let pools: Vec<String> = client
        .resource_pools()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(pools, ["default", "cp-pool", "worker-pool"]);
    let domains = client.domains().unwrap();
    assert!(domains
        .iter()
        .any(|d| d.name == "maas" && d.is_default && d.id == 0));
    assert!(domains
        .iter()
        .any(|d| d.name == "k8s.maas" && d.ttl == Some(30)));
    let images = client.boot_resources().unwrap();
    assert!(images
        .iter()
        .any(|b| b.name == "u-2204-0-k-1264-0" && b.kind == "Uploaded"));
}

#[test]
fn transient_503_is_retried_honouring_retry_after() {
    let sim = sim();
    let client = sim.client();
    let id = sim.system_id("cp-1");
    sim.set_fault(json!({"method": "GET", "endpoint": "machines/{id}/", "status": 503, "retry_after": 0, "times": 2}));
    sim.reset_calls();
    let m = client.machine(&id).unwrap();
    assert_eq!(m.system_id, id);
    assert_eq!(sim.call_count("GET machines/{id}/"), 3);

    // 409 with Retry-After is MAAS's "database busy": retried too.
    sim.set_fault(json!({"endpoint": "machines/", "op": "allocate", "status": 409, "retry_after": 0, "times": 1}));
    sim.reset_calls();
    allocate_cp(&client, "busy");
    assert_eq!(
        sim.call_count("POST machines/ op=allocate"),
        2,
        "503/409+Retry-After mean MAAS did nothing"
    );

    // 503 on allocate is retried as well.
    sim.set_fault(json!({"endpoint": "machines/", "op": "allocate", "status": 503, "times": 1}));
    sim.reset_calls();
    allocate_cp(&client, "busy2");
    assert_eq!(sim.call_count("POST machines/ op=allocate"), 2);
}

#[test]
fn retries_are_bounded() {
    let sim = sim();
    let mut config = sim.client_config(&sim.api_key);
    config.max_retries = 2;
    let client = Client::new(config).unwrap();
    sim.set_fault(json!({"endpoint": "zones/", "status": 503, "retry_after": 0}));
    let err = client.zones().unwrap_err();
    assert!(err.is_transient());
    assert_eq!(err.http_status(), Some(503));
    assert_eq!(err.retry_after(), Some(Duration::ZERO));
    assert_eq!(err.attempts(), 3);
    assert_eq!(sim.call_count("GET zones/"), 3);
}

#[test]
fn permanent_errors_are_not_retried() {
    let sim = sim();
    let client = sim.client();
    sim.set_fault(json!({"endpoint": "zones/", "status": 400, "body": "bad"}));
    let err = client.zones().unwrap_err();
    assert!(err.is_bad_request());
    assert_eq!(sim.call_count("GET zones/"), 1);
    sim.clear_faults();
    sim.set_fault(json!({"endpoint": "resourcepools/", "status": 409, "body": "state"}));
    let err = client.resource_pools().unwrap_err();
    assert!(err.is_conflict());
    assert_eq!(sim.call_count("GET resourcepools/"), 1);
}

#[test]
fn dropped_connections_are_retried_for_reads() {
    let sim = sim();
    let client = sim.client();
    sim.set_fault(json!({"endpoint": "domains/", "drop": true, "times": 2}));
    assert!(!client.domains().unwrap().is_empty());
    assert_eq!(sim.call_count("GET domains/"), 3);
}

#[test]
fn allocate_is_not_repeated_when_the_answer_is_lost() {
    let sim = sim();
    let client = sim.client();
    // MAAS allocates, then the connection breaks before the answer arrives.
    sim.set_fault(
        json!({"endpoint": "machines/", "op": "allocate", "drop_after": true, "times": 1}),
    );
    let err = client
        .allocate(&AllocateRequest {
            pool: Some("cp-pool".into()),
            agent_name: Some("ns/lost".into()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.attempts(), 1);
    assert_eq!(
        sim.call_count("POST machines/ op=allocate"),
        1,
        "a retry could allocate twice"
    );
    // The caller finds the allocation by its identity.
    let mine = client
        .machines(&MachineFilter::by_agent_name("ns/lost"))
        .unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].status, MachineStatus::Allocated);

    // Same for DNS creation.
    sim.set_fault(
        json!({"method": "POST", "endpoint": "dnsresources/", "drop_after": true, "times": 1}),
    );
    let err = client
        .create_dns_resource("lost.k8s.maas", 10, &[])
        .unwrap_err();
    assert_eq!(err.attempts(), 1);
    assert_eq!(client.dns_resources("lost.k8s.maas").unwrap().len(), 1);
}

#[test]
fn timeouts_are_transient_and_retried_only_when_safe() {
    let sim = sim();
    let mut config = sim.client_config(&sim.api_key);
    config.timeout = Duration::from_millis(300);
    config.max_retries = 1;
    let client = Client::new(config).unwrap();
    sim.set_fault(json!({"endpoint": "zones/", "latency_ms": 1500}));
    let err = client.zones().unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Timeout, "{err}");
    assert!(err.is_transient());
    assert_eq!(err.attempts(), 2);

    sim.set_fault(json!({"endpoint": "machines/", "op": "allocate", "latency_ms": 1500}));
    let err = client.allocate(&AllocateRequest::default()).unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Timeout, "{err}");
    assert_eq!(err.attempts(), 1, "a timed-out allocate may have worked");

    // MAAS asks the BMC synchronously: query_power_state may take longer
    // than the usual timeout.
    let id = sim.system_id("cp-1");
    sim.set_fault(json!({"op": "query_power_state", "latency_ms": 1000}));
    assert_eq!(client.query_power_state(&id).unwrap(), PowerState::Off);
}

#[test]
fn connection_refused_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let key = ApiKey::parse("a:b:c").unwrap();
    let mut config = capmaas::maas::ClientConfig::new(format!("http://127.0.0.1:{port}/MAAS"), key);
    config.max_retries = 1;
    let err = Client::new(config)
        .unwrap()
        .allocate(&AllocateRequest::default())
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Connect, "{err}");
    assert!(err.is_transient());
    assert_eq!(
        err.attempts(),
        2,
        "nothing reached MAAS, so even allocate is retried"
    );
}

#[test]
fn metrics_count_requests_by_operation_and_code() {
    let sim = sim();
    let client = sim.client();
    client.zones().unwrap();
    let _ = client.machine("nosuch");
    let text = capmaas::metrics::render();
    assert!(
        text.contains("maas_api_requests_total{operation=\"zones_list\",code=\"2xx\"}"),
        "{text}"
    );
    assert!(
        text.contains("maas_api_requests_total{operation=\"machine_read\",code=\"404\"}"),
        "{text}"
    );
    assert!(
        text.contains("maas_api_request_duration_seconds_count{operation=\"zones_list\"}"),
        "{text}"
    );
}

#[test]
fn one_client_reuses_its_connection() {
    let sim = sim();
    let before = sim.connections();
    let client = sim.client();
    for _ in 0..20 {
        client.zones().unwrap();
    }
    let clone = client.clone();
    clone.domains().unwrap();
    // One for the client (clones share the pool), at most one more for our
    // own /_sim/ agent should it have dropped its idle connection.
    let opened = sim.connections() - before;
    assert!(
        (1..=2).contains(&opened),
        "{opened} connections for 21 sequential calls"
    );
}

#[test]
fn debug_output_never_shows_the_key() {
    let sim = sim();
    let config = sim.client_config(&sim.api_key);
    let secret = sim.api_key.split(':').nth(2).unwrap().to_owned();
    let client = Client::new(config.clone()).unwrap();
    for shown in [
        format!("{config:?}"),
        format!("{client:?}"),
        format!("{:?}", config.api_key),
    ] {
        assert!(!shown.contains(&secret), "{shown}");
        assert!(!shown.contains("SimTokenKey"), "{shown}");
    }
}

#[test]
fn concurrent_allocations_never_share_a_machine() {
    let sim = sim();
    let client = sim.client();
    let results: Vec<Result<String, capmaas::maas::Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let client = client.clone();
                scope.spawn(move || {
                    client
                        .allocate(&AllocateRequest {
                            pool: Some("cp-pool".into()),
                            agent_name: Some(format!("racer-{i}")),
                            ..AllocateRequest::default()
                        })
                        .map(|m| m.system_id)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut won: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    let lost = results
        .iter()
        .filter(|r| r.as_ref().is_err_and(|e| e.is_conflict()))
        .count();
    won.sort();
    won.dedup();
    assert_eq!(won.len(), 4, "{results:?}");
    assert_eq!(lost, 4, "{results:?}");
}

/// The interface calls of static addresses: subnets, unlink of the AUTO
/// link, link STATIC, as MAAS answers them (an address in use, a machine
/// past Allocated, a non-admin).
#[test]
fn subnets_and_static_links_on_an_allocated_machine() {
    let sim = sim();
    let client = sim.client();
    let subnets = client.subnets().unwrap();
    let lab = subnets
        .iter()
        .find(|s| s.cidr == "127.11.130.0/24")
        .expect("the lab subnet");
    assert_eq!(lab.gateway_ip.as_deref(), Some("127.11.130.1"));

    let host = allocate_cp(&client, "ns/static");
    let boot = host.boot_interface.expect("boot interface");
    let eth0 = host.interfaces.iter().find(|i| i.id == boot.id).unwrap();
    let auto = eth0
        .links
        .iter()
        .find(|l| l.mode == capmaas::maas::LinkMode::Auto)
        .unwrap();
    assert_eq!(auto.subnet_id, Some(lab.id));

    // A restricted user may not edit interfaces (403).
    let operator = sim.client_for("operator");
    let err = operator
        .link_subnet_static(&host.system_id, eth0.id, lab.id, "127.11.130.240")
        .unwrap_err();
    assert!(err.is_forbidden(), "{err}");

    client
        .unlink_subnet(&host.system_id, eth0.id, auto.id)
        .unwrap();
    client
        .link_subnet_static(&host.system_id, eth0.id, lab.id, "127.11.130.240")
        .unwrap();
    let read = client.machine(&host.system_id).unwrap();
    let eth0 = read.interfaces.iter().find(|i| i.id == boot.id).unwrap();
    assert_eq!(eth0.links.len(), 1, "{:?}", eth0.links);
    assert_eq!(eth0.links[0].mode, capmaas::maas::LinkMode::Static);
    assert_eq!(eth0.links[0].ip.as_deref(), Some("127.11.130.240"));
    assert_eq!(eth0.links[0].subnet_id, Some(lab.id));

    // The same address again is "already in use"; an unknown link id is a
    // form error.
    let err = client
        .link_subnet_static(&host.system_id, eth0.id, lab.id, "127.11.130.240")
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = client
        .unlink_subnet(&host.system_id, eth0.id, 999_999)
        .unwrap_err();
    assert!(err.is_bad_request(), "{err}");

    // Deploying: MAAS refuses interface edits (409).
    client
        .deploy(&host.system_id, &DeployRequest::default())
        .unwrap();
    let err = client
        .unlink_subnet(&host.system_id, eth0.id, eth0.links[0].id)
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    client
        .release(&host.system_id, &ReleaseRequest::default())
        .unwrap();
}
