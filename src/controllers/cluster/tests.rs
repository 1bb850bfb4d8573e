//! MaasCluster reconcile steps against the in-memory fakes.

use std::time::Duration;

use serde_json::json;

use crate::api::conditions::{self, Status};
use crate::api::maas_cluster as mc_api;
use crate::controllers::fake::{World, CAPI_CLUSTER, CAPI_MACHINE, MAAS_CLUSTER, MAAS_MACHINE};
use crate::controllers::maas_view::DNS_TTL;
use crate::controllers::ports::{Kind, MaasApi};
use crate::controllers::Error;
use crate::runtime::Action;

const NS: &str = "ns";

fn reconcile(w: &World) -> Result<Action, Error> {
    super::reconcile(&w.ctx, NS, "c1")
}

fn dns_name(w: &World) -> String {
    w.maas_cluster(NS, "c1").dns_name().unwrap().to_string()
}

fn record_ips(w: &World) -> Vec<String> {
    let records = w.maas.dns_records();
    assert_eq!(records.len(), 1, "{records:?}");
    let mut ips = records[0].ip_addresses.clone();
    ips.sort();
    ips
}

/// A MaasMachine of cluster c1 as the machine controller leaves it.
fn machine(w: &World, name: &str, control_plane: bool, state: &str, powered: bool, ip: &str) {
    w.machine(NS, "c1", name, control_plane);
    w.edit(MAAS_MACHINE, NS, name, |v| {
        v["status"] = json!({
            "ready": state == "Deployed", "machineState": state, "machinePowered": powered,
            "addresses": [{"type": "ExternalIP", "address": ip}, {"type": "InternalIP", "address": ip}]
        })
    });
}

/// The API poller has seen the API server at `ip` answer.
fn answers(w: &World, ip: &str) {
    w.api_watch.answering.lock().unwrap().insert(ip.to_string());
}

fn probed(w: &World) -> Vec<String> {
    let mut ips: Vec<String> = w
        .api_watch
        .watched_addresses
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect();
    ips.sort();
    ips
}

#[test]
fn waits_for_the_owner_cluster() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["ownerReferences"] = json!([])
    });
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty());
    assert!(w.maas_cluster(NS, "c1").metadata.finalizers.is_empty());
}

#[test]
fn names_the_record_persists_the_name_first_and_provisions() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);

    let mc = w.maas_cluster(NS, "c1");
    assert_eq!(mc.metadata.finalizers, vec![mc_api::FINALIZER.to_string()]);
    let name = dns_name(&w);
    let (prefix, domain) = name.split_once('.').unwrap();
    assert_eq!(domain, "maas");
    let suffix = prefix.strip_prefix("c1-").unwrap();
    assert_eq!(suffix.len(), 6);
    assert!(suffix
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));

    // The name is in the status before MAAS is asked to create the record.
    let name_write = w
        .kube
        .writes()
        .iter()
        .position(|wr| wr.status && wr.patch["status"]["network"]["dnsName"] == json!(name));
    assert!(name_write.is_some());
    let records = w.maas.dns_records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].fqdn, name);
    assert_eq!(records[0].address_ttl, Some(10));

    let endpoint = mc.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        (name.as_str(), 6443)
    );
    let status = mc.status();
    assert!(status.ready);
    assert_eq!(
        status.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    assert!(conditions::is_true(
        mc.conditions(),
        mc_api::LOAD_BALANCER_READY
    ));
    assert_eq!(
        conditions::get(mc.conditions(), mc_api::API_SERVER_AVAILABLE)
            .unwrap()
            .reason,
        mc_api::API_SERVER_NOT_READY
    );
    assert_eq!(
        conditions::get(mc.conditions(), conditions::PAUSED)
            .unwrap()
            .status,
        Status::False
    );
    assert!(w
        .api_watch
        .watched
        .lock()
        .unwrap()
        .contains(&(NS.to_string(), "c1".to_string())));
    // Failure domains from the MAAS zones.
    let fds: Vec<String> = status
        .failure_domains
        .iter()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(fds, vec!["az1", "az2"]);
    assert!(status
        .failure_domains
        .iter()
        .all(|f| f.control_plane == Some(true)));
    assert!(w
        .kube
        .event_reasons()
        .contains(&"DNSRecordCreated".to_string()));
}

#[test]
fn api_server_port_comes_from_the_cluster_and_a_set_endpoint_is_kept() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(CAPI_CLUSTER, NS, "c1", |v| {
        v["spec"]["clusterNetwork"] = json!({"apiServerPort": 7443})
    });
    reconcile(&w).unwrap();
    assert_eq!(
        w.maas_cluster(NS, "c1")
            .spec
            .control_plane_endpoint
            .unwrap()
            .port,
        7443
    );

    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "vip.example.com", "port": 443})
    });
    reconcile(&w).unwrap();
    let endpoint = w
        .maas_cluster(NS, "c1")
        .spec
        .control_plane_endpoint
        .unwrap();
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("vip.example.com", 443)
    );
}

#[test]
fn spec_failure_domains_win_over_zones() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["failureDomains"] = json!(["z2", "z1"])
    });
    reconcile(&w).unwrap();
    let fds: Vec<String> = w
        .maas_cluster(NS, "c1")
        .status()
        .failure_domains
        .iter()
        .map(|f| f.name.clone())
        .collect();
    assert_eq!(fds, vec!["z1", "z2"]);
    assert!(!w.maas.calls().contains(&"zones".to_string()));
}

#[test]
fn an_existing_record_is_found_by_name_not_created_again() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    // A crash after the name was persisted and the record created, before
    // the rest of the status was written.
    w.edit(
        MAAS_CLUSTER,
        NS,
        "c1",
        |v| v["status"] = json!({"ready": false, "network": {"dnsName": "c1-xyz123.maas"}}),
    );
    w.maas.add_dns("c1-xyz123.maas", &[]);
    reconcile(&w).unwrap();
    assert_eq!(w.maas.dns_records().len(), 1);
    assert_eq!(dns_name(&w), "c1-xyz123.maas");
    assert!(!w
        .maas
        .calls()
        .iter()
        .any(|c| c.starts_with("create_dns_resource")));
}

#[test]
fn a_stale_cache_cannot_pick_a_second_name() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    let before = w.kube.get(MAAS_CLUSTER, NS, "c1").unwrap();
    reconcile(&w).unwrap();
    let name = dns_name(&w);
    w.kube
        .stale
        .lock()
        .unwrap()
        .insert((MAAS_CLUSTER, NS.into(), "c1".into()), before);
    let err = reconcile(&w).unwrap_err();
    assert!(matches!(err, Error::Kube(_)), "{err}");
    assert_eq!(dns_name(&w), name, "the stored name is unchanged");
    assert_eq!(w.maas.dns_records().len(), 1, "no second record");
}

#[test]
fn a_cluster_moved_without_status_adopts_its_marked_endpoint_record() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    let name = dns_name(&w);
    let record = w.maas.dns_records()[0].clone();
    assert_eq!(record.resource_records.len(), 1, "marked: {record:?}");
    assert!(record.resource_records[0]
        .rrdata
        .starts_with("capmaas-owner="));
    // `clusterctl move`: spec and annotations copied, status not, new UID.
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["status"] = json!({});
        v["metadata"]["uid"] = json!("moved-uid");
    });
    w.maas.clear_calls();
    reconcile(&w).unwrap();
    assert_eq!(dns_name(&w), name);
    assert_eq!(
        w.maas.dns_records(),
        vec![record],
        "the same record, unchanged"
    );
    assert!(!w.maas.calls().iter().any(|c| c.starts_with("create_dns")));
}

/// Issue 19: a Cluster named `x` whose endpoint names an existing record
/// `x-abc123.<domain>` (another management cluster's, or anyone's) must
/// not adopt it: refused, named, never emptied, repointed or deleted.
#[test]
fn an_endpoint_naming_a_record_without_our_mark_is_refused_and_left_alone() {
    for theirs in [None, Some("capmaas-owner=0123456789abcdef0123456789abcdef")] {
        let w = World::new(0);
        w.cluster(NS, "c1");
        w.edit(MAAS_CLUSTER, NS, "c1", |v| {
            v["spec"]["controlPlaneEndpoint"] = json!({"host": "c1-abc123.maas", "port": 6443})
        });
        let id = w.maas.add_dns("c1-abc123.maas", &["10.0.0.5"]);
        if let Some(mark) = theirs {
            w.maas.create_dns_txt("c1-abc123.maas", mark).unwrap();
        }
        let before = w.maas.dns_records();
        w.maas.clear_calls();
        machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
        let err = reconcile(&w).unwrap_err();
        assert!(err.to_string().contains("c1-abc123.maas"), "{err}");
        let mc = w.maas_cluster(NS, "c1");
        let lb = conditions::get(mc.conditions(), mc_api::LOAD_BALANCER_READY).unwrap();
        assert_eq!(lb.reason, mc_api::DNS_RECORD_NOT_OURS);
        assert!(lb.message.contains("c1-abc123.maas"), "{}", lb.message);
        assert!(w
            .kube
            .event_reasons()
            .contains(&mc_api::DNS_RECORD_NOT_OURS.to_string()));
        assert!(mc.dns_name().is_none(), "not adopted");

        w.delete(MAAS_CLUSTER, NS, "c1");
        w.kube.remove(MAAS_MACHINE, NS, "cp1");
        reconcile(&w).unwrap();
        assert_eq!(w.maas.dns_records(), before, "{theirs:?}: untouched");
        assert!(w.maas.dns_records().iter().any(|r| r.id == id));
        assert!(!w.maas.calls().iter().any(|c| c.starts_with("set_dns")
            || c.starts_with("delete_dns")
            || c.starts_with("create_dns")));
    }
}

/// The mark is written right after the record: a crash between the two
/// calls (the name is in our status, chosen before creating) is repaired,
/// and a record of an earlier capmaas (status, no mark) is marked.
#[test]
fn a_record_of_our_status_name_without_a_mark_is_marked() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.maas.fail_once("create_dns_txt", 503, "busy");
    assert!(reconcile(&w).is_err());
    assert!(w.maas.dns_records()[0].resource_records.is_empty());
    reconcile(&w).unwrap();
    let record = &w.maas.dns_records()[0];
    assert_eq!(record.txt().count(), 1, "{record:?}");
    assert!(w
        .kube
        .event_reasons()
        .contains(&"DNSRecordMarked".to_string()));
    w.delete(MAAS_CLUSTER, NS, "c1");
    reconcile(&w).unwrap();
    assert!(w.maas.dns_records().is_empty());
}

#[test]
fn record_holds_the_running_control_plane_and_is_written_only_on_change() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    machine(&w, "cp2", true, "Deploying", true, "10.0.0.2");
    machine(&w, "cp3", true, "Allocated", false, "10.0.0.3");
    machine(&w, "w1", false, "Deployed", true, "10.0.0.9");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);

    // A joining control plane waits until its own API server answers.
    machine(&w, "cp3", true, "Deployed", true, "10.0.0.3");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);
    assert_eq!(probed(&w), vec!["10.0.0.3"]);
    answers(&w, "10.0.0.3");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    assert!(probed(&w).is_empty(), "attached: no longer probed");
    assert!(w
        .kube
        .event_reasons()
        .contains(&"DNSRecordUpdated".to_string()));

    w.maas.clear_calls();
    w.kube.clear_writes();
    reconcile(&w).unwrap();
    assert!(
        !w.maas
            .calls()
            .iter()
            .any(|c| c.starts_with("set_dns") || c.starts_with("create_dns")),
        "{:?}",
        w.maas.calls()
    );
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
}

#[test]
fn reconciles_in_a_row_read_the_record_once_and_an_unknown_write_reads_again() {
    let w = World::new(0);
    w.watched();
    w.cluster(NS, "c1");
    for ip in ["10.0.0.2", "10.0.0.3", "10.0.0.4"] {
        answers(&w, ip);
    }
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    reconcile(&w).unwrap();
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    machine(&w, "cp3", true, "Deployed", true, "10.0.0.3");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    let reads = |w: &World| {
        w.maas
            .calls()
            .iter()
            .filter(|c| c.starts_with("dns_resources"))
            .count()
    };
    assert_eq!(reads(&w), 1, "{:?}", w.maas.calls());

    // A write that failed (its outcome unknown): MAAS is read again.
    machine(&w, "cp4", true, "Deployed", true, "10.0.0.4");
    w.maas.fail_once("set_dns_resource_ips", 503, "busy");
    assert!(reconcile(&w).is_err());
    w.maas.clear_calls();
    reconcile(&w).unwrap();
    assert_eq!(reads(&w), 1, "{:?}", w.maas.calls());
    assert_eq!(
        record_ips(&w),
        vec!["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    );
}

#[test]
fn drift_in_maas_is_repaired() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    reconcile(&w).unwrap();
    let id = w.maas.dns_records()[0].id;
    w.maas
        .dns
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .ip_addresses = vec!["192.168.1.1".into()];
    // Seen once the record read last is older than the view keeps it.
    w.clock.advance(DNS_TTL.as_secs());
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1"]);
}

#[test]
fn dns_is_never_emptied_while_control_plane_machines_exist() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);

    // One powered off: it leaves, the other stays.
    machine(&w, "cp1", true, "Deployed", false, "10.0.0.1");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);

    // Both off (power blip): the record keeps what it had.
    machine(&w, "cp2", true, "Deployed", false, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);

    // Back on: cp2 is still in the record, cp1 rejoins once its API answers.
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);
    answers(&w, "10.0.0.1");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);
}

#[test]
fn moved_control_plane_machines_keep_the_record_until_each_is_observed() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);

    // After `clusterctl move` (status not copied) the machine controller
    // has seen cp1 again, not yet cp2: the record does not shrink.
    w.edit(MAAS_MACHINE, NS, "cp2", |v| {
        v["spec"]["systemID"] = json!("abc123");
        v["status"] = json!({"conditions": [{"type": "Paused", "status": "False",
            "reason": "NotPaused", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    });
    w.maas.clear_calls();
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);
    // Nor when it waits for the cluster's infrastructure (the moved Cluster
    // has no status yet either).
    w.edit(MAAS_MACHINE, NS, "cp2", |v| {
        v["status"] = json!({"conditions": [{"type": "MachineDeployed", "status": "False",
            "reason": "WaitingForClusterInfrastructure", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    });
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);
    assert!(
        !w.maas.calls().iter().any(|c| c.starts_with("set_dns")),
        "{:?}",
        w.maas.calls()
    );

    // A machine the controller looked at and refused (no state, but a
    // MachineDeployed condition) does not freeze the record.
    w.edit(MAAS_MACHINE, NS, "cp2", |v| {
        v["status"] = json!({"conditions": [{"type": "MachineDeployed", "status": "False",
            "reason": "MachineNotOwned", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    });
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1"]);
}

#[test]
fn deleting_control_plane_machines_leave_the_record() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    w.delete(MAAS_MACHINE, NS, "cp1");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);
    // The last one leaves too when it is deleted (cluster teardown).
    w.delete(MAAS_MACHINE, NS, "cp2");
    reconcile(&w).unwrap();
    assert!(record_ips(&w).is_empty());
}

/// Issue 14 item 2, the first half of a rolling upgrade without failed
/// calls: a new control plane joins only once its API answers; the old
/// one's address leaves as soon as its Machine is being deleted (before
/// Cluster API drains it and KCP removes its etcd member), but never
/// before a successor is in the record.
#[test]
fn a_rolling_replacement_joins_answering_machines_and_leaves_before_the_drain() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    // A new cluster: the first control plane joins at once (kubeadm init
    // reaches its API through the name before that API serves).
    machine(&w, "old", true, "Deploying", true, "10.0.0.1");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1"]);

    // Its replacement runs, its API not answering yet.
    machine(&w, "new", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1"]);
    // KCP deletes the old Machine already (no successor answers): the old
    // address stays rather than empty the record or publish a dead one.
    w.delete(CAPI_MACHINE, NS, "old");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1"]);
    assert_eq!(probed(&w), vec!["10.0.0.2"]);

    // The new API answers: it joins and the leaving one goes, in one write.
    answers(&w, "10.0.0.2");
    w.maas.clear_calls();
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);
    let writes: Vec<String> = w
        .maas
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("set_dns"))
        .collect();
    assert_eq!(writes.len(), 1, "{writes:?}");

    // The whole control plane leaving (cluster deletion): the record keeps
    // what it has until the MaasMachines go.
    machine(&w, "other", true, "Deployed", true, "10.0.0.3");
    answers(&w, "10.0.0.3");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2", "10.0.0.3"]);
    w.delete(CAPI_MACHINE, NS, "new");
    w.delete(CAPI_MACHINE, NS, "other");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2", "10.0.0.3"]);
}

/// `--dns-attach-without-api-check`: a running control plane joins at once
/// and nothing is probed.
#[test]
fn without_the_api_check_a_running_control_plane_joins_at_once() {
    let w = World::with_options(
        0,
        crate::controllers::Options {
            dns_attach_without_api_check: true,
            ..Default::default()
        },
    );
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    reconcile(&w).unwrap();
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);
    assert!(probed(&w).is_empty());
}

/// Real MAAS gives addresses during deployment, not in the deploy answer
/// (issue 20 item 7): three control planes whose addresses appear at
/// different polls all reach the record at defaults (the join probe on):
/// the first joins at once (a new cluster), each later one once its API
/// answers, none is lost while another is still without an address.
#[test]
fn control_planes_whose_addresses_come_at_different_polls_all_join_with_the_probe() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    let deploying_without_address = |name: &str| {
        w.machine(NS, "c1", name, true);
        w.edit(MAAS_MACHINE, NS, name, |v| {
            v["status"] = json!({"ready": false, "machineState": "Deploying",
                                 "machinePowered": false, "addresses": []})
        });
    };
    for name in ["cp1", "cp2", "cp3"] {
        deploying_without_address(name);
    }
    reconcile(&w).unwrap();
    assert!(w
        .maas
        .dns_records()
        .iter()
        .all(|r| r.ip_addresses.is_empty()));

    machine(&w, "cp2", true, "Deploying", true, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);

    machine(&w, "cp3", true, "Deploying", true, "10.0.0.3");
    reconcile(&w).unwrap();
    assert_eq!(
        record_ips(&w),
        vec!["10.0.0.2"],
        "cp3's API does not answer yet"
    );
    assert_eq!(probed(&w), vec!["10.0.0.3"]);

    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    answers(&w, "10.0.0.3");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2", "10.0.0.3"]);
    assert_eq!(probed(&w), vec!["10.0.0.1"]);

    answers(&w, "10.0.0.1");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    assert!(probed(&w).is_empty());
}

#[test]
fn a_dns_change_wakes_the_control_plane_machines_and_nothing_else_does() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    machine(&w, "cp2", true, "Deployed", true, "10.0.0.2");
    machine(&w, "w1", false, "Deployed", true, "10.0.0.9");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1", "10.0.0.2"]);
    w.machine_queue.take_names();

    // Nothing changed: nobody is woken.
    reconcile(&w).unwrap();
    assert!(w.machine_queue.take_names().is_empty());

    // cp1 is deleted: its address leaves the record and the control-plane
    // machines (cp1 waiting to release among them) are woken, the worker not.
    w.delete(MAAS_MACHINE, NS, "cp1");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);
    assert_eq!(w.machine_queue.take_names(), vec!["cp1", "cp2"]);

    reconcile(&w).unwrap();
    assert!(w.machine_queue.take_names().is_empty());

    // The record is left as it is while no control-plane machine runs
    // (power blip): no write, no wake-up.
    machine(&w, "cp2", true, "Deployed", false, "10.0.0.2");
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.2"]);
    assert!(w.machine_queue.take_names().is_empty());
}

#[test]
fn api_server_available_once_the_poller_saw_it() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    assert!(!conditions::is_true(
        w.maas_cluster(NS, "c1").conditions(),
        conditions::READY
    ));
    w.api_watch
        .online
        .lock()
        .unwrap()
        .insert((NS.into(), "c1".into()));
    reconcile(&w).unwrap();
    let mc = w.maas_cluster(NS, "c1");
    assert!(conditions::is_true(
        mc.conditions(),
        mc_api::API_SERVER_AVAILABLE
    ));
    assert!(conditions::is_true(mc.conditions(), conditions::READY));
}

#[test]
fn delete_waits_for_machines_then_deletes_the_record_and_the_finalizer() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    reconcile(&w).unwrap();
    assert_eq!(w.maas.dns_records().len(), 1);

    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(
        reconcile(&w).unwrap(),
        Action::RequeueAfter(Duration::from_secs(30))
    );
    assert_eq!(w.maas.dns_records().len(), 1, "kept while machines remain");
    let ready = conditions::get(w.maas_cluster(NS, "c1").conditions(), conditions::READY)
        .cloned()
        .unwrap();
    assert_eq!(ready.reason, mc_api::DELETING);

    w.kube.remove(MAAS_MACHINE, NS, "cp1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.dns_records().is_empty(), "record deleted");
    assert!(
        w.kube.get(MAAS_CLUSTER, NS, "c1").is_none(),
        "finalizer removed"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&"DNSRecordDeleted".to_string()));
    assert!(
        w.api_watch.watched.lock().unwrap().is_empty(),
        "poller forgot it"
    );
}

#[test]
fn delete_with_the_record_already_gone_completes() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    w.maas.dns.lock().unwrap().clear();
    w.delete(MAAS_CLUSTER, NS, "c1");
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.kube.get(MAAS_CLUSTER, NS, "c1").is_none());
}

#[test]
fn paused_cluster_touches_nothing() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(CAPI_CLUSTER, NS, "c1", |v| {
        v["spec"]["paused"] = json!(true)
    });
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty());
    let mc = w.maas_cluster(NS, "c1");
    let paused = conditions::get(mc.conditions(), conditions::PAUSED).unwrap();
    assert_eq!(paused.status, Status::True);
    assert!(paused.message.contains("spec.paused"));
    assert!(mc.dns_name().is_none());
    let writes = w.kube.writes();
    assert!(
        writes
            .iter()
            .all(|wr| wr.kind == Kind::MaasCluster && wr.status),
        "{writes:?}"
    );
}

#[test]
fn a_second_reconcile_writes_nothing() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    w.kube.clear_writes();
    w.maas.clear_calls();
    w.clock.advance(600);
    reconcile(&w).unwrap();
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
    assert_eq!(
        w.maas.calls(),
        vec![format!("dns_resources {}", dns_name(&w))]
    );
}

#[test]
fn an_endpoint_set_on_the_cluster_is_adopted() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(CAPI_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "api.example.com", "port": 443})
    });
    reconcile(&w).unwrap();
    let mc = w.maas_cluster(NS, "c1");
    let endpoint = mc.spec.control_plane_endpoint.unwrap();
    assert_eq!(
        (endpoint.host.as_str(), endpoint.port),
        ("api.example.com", 443)
    );
    // The DNS record is still managed under our own name.
    assert!(mc
        .status
        .unwrap()
        .network
        .unwrap()
        .dns_name
        .starts_with("c1-"));
}

#[test]
fn a_maas_outage_changes_no_status_and_a_refusal_is_reported() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    w.kube.clear_writes();
    // The record read last is older than the view keeps it: MAAS is asked.
    w.clock.advance(DNS_TTL.as_secs());
    w.maas.fail_once("dns_resources", 503, "503");
    assert!(reconcile(&w).is_err());
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
    w.maas
        .fail_once("dns_resources", 404, "No Domain matches the given query.");
    assert!(reconcile(&w).is_err());
    let mc = w.maas_cluster(NS, "c1");
    let lb = conditions::get(mc.conditions(), mc_api::LOAD_BALANCER_READY).unwrap();
    assert_eq!(lb.reason, mc_api::LOAD_BALANCER_FAILED);
    assert!(lb.message.contains("No Domain matches"), "{}", lb.message);
    assert!(w
        .kube
        .event_reasons()
        .contains(&mc_api::LOAD_BALANCER_FAILED.to_string()));
}

#[test]
fn a_control_plane_label_on_the_machine_alone_puts_it_in_dns() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    machine(&w, "cp1", true, "Deployed", true, "10.0.0.1");
    // Cluster API keeps only cluster-name on the MaasMachine; the Machine has the label.
    w.edit(MAAS_MACHINE, NS, "cp1", |v| {
        v["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "c1"})
    });
    reconcile(&w).unwrap();
    assert_eq!(record_ips(&w), vec!["10.0.0.1"]);
}

#[test]
fn another_namespaces_dns_name_cannot_be_taken_over() {
    // The victim: cluster `c1` in namespace `victim`, with its record.
    let w = World::new(0);
    w.cluster("victim", "c1");
    super::reconcile(&w.ctx, "victim", "c1").unwrap();
    let victims = w
        .maas_cluster("victim", "c1")
        .dns_name()
        .unwrap()
        .to_string();
    let record = w.maas.dns_records()[0].clone();
    w.maas
        .set_dns_resource_ips(record.id, &["10.0.0.9".into()])
        .unwrap();
    // A tenant names its cluster the same and copies the endpoint.
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneEndpoint"] = json!({"host": victims, "port": 6443})
    });
    machine(&w, "cp0", true, "Deployed", true, "10.6.6.6");
    w.maas.clear_calls();
    assert!(reconcile(&w).is_err());
    let c = w.maas_cluster(NS, "c1");
    let lb = conditions::get(c.conditions(), mc_api::LOAD_BALANCER_READY).unwrap();
    assert_eq!(lb.reason, mc_api::DNS_NAME_IN_USE);
    assert!(lb.message.contains("victim/c1"), "{}", lb.message);
    assert_eq!(c.dns_name(), None, "the name is not claimed");
    assert_eq!(w.maas.dns_records()[0].ip_addresses, vec!["10.0.0.9"]);
    // Deleting the tenant's cluster does not delete the victim's record.
    w.delete(MAAS_CLUSTER, NS, "c1");
    w.kube.remove(MAAS_MACHINE, NS, "cp0");
    reconcile(&w).unwrap();
    assert_eq!(w.maas.dns_records().len(), 1);
    assert!(
        !w.maas
            .calls()
            .iter()
            .any(|c| c.starts_with("set_dns") || c.starts_with("delete_dns")),
        "{:?}",
        w.maas.calls()
    );
    // The victim keeps working.
    super::reconcile(&w.ctx, "victim", "c1").unwrap();
    let v = w.maas_cluster("victim", "c1");
    assert!(conditions::is_true(
        v.conditions(),
        mc_api::LOAD_BALANCER_READY
    ));
}

#[test]
fn credentials_ready_says_whether_the_clusters_maas_can_be_used() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    let c = w.maas_cluster(NS, "c1");
    assert!(conditions::is_true(
        c.conditions(),
        mc_api::CREDENTIALS_READY
    ));

    w.cluster(NS, "c2");
    w.edit(MAAS_CLUSTER, NS, "c2", |v| {
        v["spec"]["identityRef"] = json!({"kind": "Secret", "name": "nope"})
    });
    w.maas.clear_calls();
    assert!(matches!(
        super::reconcile(&w.ctx, NS, "c2"),
        Err(Error::Credentials(_))
    ));
    let c = w.maas_cluster(NS, "c2");
    let cond = conditions::get(c.conditions(), mc_api::CREDENTIALS_READY).unwrap();
    assert_eq!(cond.status, Status::False);
    assert_eq!(cond.reason, mc_api::CREDENTIALS_UNAVAILABLE);
    assert!(cond.message.contains("ns/nope"), "{}", cond.message);
    let ready = conditions::get(c.conditions(), conditions::READY).unwrap();
    assert_eq!(ready.status, Status::False);
    assert!(
        w.maas.calls().is_empty(),
        "no MAAS call with unknown credentials"
    );
    assert!(w
        .kube
        .event_reasons()
        .contains(&mc_api::CREDENTIALS_UNAVAILABLE.to_string()));
}

#[test]
fn an_externally_managed_cluster_is_left_to_its_owner() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["annotations"] = json!({"cluster.x-k8s.io/managed-by": "my-lb-operator"})
    });
    w.machine(NS, "c1", "cp1", true);
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());
    assert!(w.kube.writes().is_empty(), "{:?}", w.kube.writes());
    assert!(w.maas.dns_records().is_empty());
    let mc = w.maas_cluster(NS, "c1");
    assert!(mc.metadata.finalizers.is_empty());
    assert!(mc.status.is_none());
    assert!(w.api_watch.watched.lock().unwrap().is_empty());
}

#[test]
fn an_externally_managed_cluster_being_deleted_loses_only_our_finalizer() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    reconcile(&w).unwrap();
    let records_before = w.maas.dns_records();
    assert_eq!(records_before.len(), 1);
    // The owner takes over, then deletes it.
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["annotations"] = json!({"cluster.x-k8s.io/managed-by": ""});
        v["metadata"]["finalizers"] = json!([mc_api::FINALIZER, "owner.example/keep"]);
    });
    w.delete(MAAS_CLUSTER, NS, "c1");
    w.kube.clear_writes();
    w.maas.clear_calls();
    assert_eq!(reconcile(&w).unwrap(), Action::Done);
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());
    assert_eq!(w.maas.dns_records(), records_before, "MAAS untouched");
    let writes = w.kube.writes();
    assert_eq!(writes.len(), 1, "only the finalizer: {writes:?}");
    assert!(!writes[0].status);
    assert_eq!(
        w.maas_cluster(NS, "c1").metadata.finalizers,
        vec!["owner.example/keep".to_string()]
    );
}

/// Issue 22: the Go provider's `spectrocloud.com/custom-dns-provided`
/// (any value): the user's endpoint is used, no DNS record is made, none
/// is deleted with the cluster, and its control planes wait on none.
#[test]
fn a_custom_dns_cluster_uses_the_users_endpoint_and_no_record() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["metadata"]["annotations"] = json!({mc_api::CUSTOM_DNS_ANNOTATION: ""})
    });
    // No endpoint yet: waits, makes nothing.
    reconcile(&w).unwrap();
    let c = conditions::get(
        w.maas_cluster(NS, "c1").conditions(),
        mc_api::LOAD_BALANCER_READY,
    )
    .cloned()
    .unwrap();
    assert_eq!(c.reason, mc_api::WAITING_FOR_CUSTOM_ENDPOINT);
    assert!(!w.maas_cluster(NS, "c1").status().ready);

    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneEndpoint"] = json!({"host": "api.example.test", "port": 6443})
    });
    reconcile(&w).unwrap();
    let mc = w.maas_cluster(NS, "c1");
    let c = conditions::get(mc.conditions(), mc_api::LOAD_BALANCER_READY)
        .cloned()
        .unwrap();
    assert_eq!(
        (c.status, c.reason.as_ref()),
        (Status::True, mc_api::CUSTOM_ENDPOINT)
    );
    assert!(mc.status().ready);
    assert_eq!(mc.dns_name(), None);
    assert_eq!(
        mc.spec.control_plane_endpoint.unwrap().host,
        "api.example.test"
    );
    assert!(w.maas.dns_records().is_empty());
    assert!(
        !w.maas.calls().iter().any(|c| c.contains("dns")),
        "{:?}",
        w.maas.calls()
    );

    // A record of that name made by someone else is not ours to delete.
    w.maas.add_dns("api.example.test", &["10.0.0.9"]);
    w.delete(MAAS_CLUSTER, NS, "c1");
    reconcile(&w).unwrap();
    assert_eq!(w.maas.dns_records().len(), 1);
    assert!(w.kube.get(MAAS_CLUSTER, NS, "c1").is_none());
}

/// Issue 22: the Go provider's HCP mode (`spec.lxdConfig.enabled`) is
/// refused before anything is made in MAAS.
#[test]
fn lxd_hosts_are_refused_before_any_maas_call() {
    let w = World::new(0);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["lxdConfig"] = json!({"enabled": true, "nicType": "bridged"})
    });
    reconcile(&w).unwrap();
    reconcile(&w).unwrap();
    let mc = w.maas_cluster(NS, "c1");
    let c = conditions::get(mc.conditions(), mc_api::LOAD_BALANCER_READY)
        .cloned()
        .unwrap();
    assert_eq!(
        (c.status, c.reason.as_ref()),
        (Status::False, mc_api::UNSUPPORTED_FIELD)
    );
    assert!(
        c.message.contains("spec.lxdConfig.enabled"),
        "{}",
        c.message
    );
    assert!(w.maas.calls().is_empty(), "{:?}", w.maas.calls());
    assert!(!mc.status().ready);
    let warnings = w
        .kube
        .event_reasons()
        .into_iter()
        .filter(|r| r == mc_api::UNSUPPORTED_FIELD)
        .count();
    assert_eq!(warnings, 1);
}
