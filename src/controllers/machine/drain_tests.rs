//! The pre-drain hook of control-plane Machines (drain.rs) against the
//! in-memory fakes, with the MaasCluster reconciler keeping the record as
//! it does in the controller.

use std::time::Duration;

use serde_json::json;

use super::drain::{LEAVING_DNS, LEFT_DNS, LEFT_DNS_AT, PRE_DRAIN_HOOK};
use crate::api::conditions;
use crate::api::maas_machine as mm_api;
use crate::controllers::fake::{World, CAPI_CLUSTER, CAPI_MACHINE, MAAS_CLUSTER, MAAS_MACHINE};
use crate::controllers::ports::Clock;
use crate::kube::time;
use crate::runtime::Action;

const NS: &str = "ns";

fn reconcile(w: &World, name: &str) -> Action {
    super::reconcile(&w.ctx, NS, name).unwrap()
}

fn reconcile_cluster(w: &World) {
    crate::controllers::cluster::reconcile(&w.ctx, NS, "c1").unwrap();
}

fn has_hook(w: &World, machine: &str) -> bool {
    let m = w.kube.get(CAPI_MACHINE, NS, machine).unwrap();
    m["metadata"]["annotations"][PRE_DRAIN_HOOK] == json!("capmaas")
}

fn reason(w: &World, name: &str) -> String {
    let mm = w.maas_machine(NS, name);
    conditions::get(mm.conditions(), mm_api::DNS_ATTACHED)
        .map(|c| c.reason.to_string())
        .unwrap_or_default()
}

fn ip_of(w: &World, name: &str) -> String {
    w.maas_machine(NS, name)
        .status()
        .addresses
        .iter()
        .find(|a| a.type_ == "ExternalIP")
        .unwrap()
        .address
        .clone()
}

fn record_ips(w: &World) -> Vec<String> {
    let mut ips: Vec<String> = w
        .maas
        .dns_records()
        .into_iter()
        .flat_map(|r| r.ip_addresses)
        .collect();
    ips.sort();
    ips
}

/// Cluster c1 with these machines deployed and, for the control planes,
/// in the record (which the MaasCluster reconciler created).
fn running(w: &World, control_planes: &[&str], workers: &[&str]) {
    w.cluster(NS, "c1");
    let all = control_planes.iter().map(|n| (*n, true));
    let all: Vec<(&str, bool)> = all.chain(workers.iter().map(|n| (*n, false))).collect();
    for (name, cp) in &all {
        w.machine(NS, "c1", name, *cp);
    }
    // The record's name first, so the machines see it.
    reconcile_cluster(w);
    for (name, _) in &all {
        reconcile(w, name);
    }
    w.maas.finish_deployments();
    for (name, _) in &all {
        reconcile(w, name);
    }
    reconcile_cluster(w);
    for (name, _) in &all {
        reconcile(w, name);
    }
    let mut expected: Vec<String> = control_planes.iter().map(|n| ip_of(w, n)).collect();
    expected.sort();
    assert_eq!(record_ips(w), expected);
}

#[test]
fn control_plane_machines_get_the_hook_and_workers_do_not() {
    let w = World::new(2);
    running(&w, &["cp1"], &["w1"]);
    assert!(has_hook(&w, "cp1"));
    assert!(!has_hook(&w, "w1"));
    assert!(conditions::is_true(
        w.maas_machine(NS, "cp1").conditions(),
        mm_api::DNS_ATTACHED
    ));
}

#[test]
fn a_vip_clusters_control_planes_get_no_hook() {
    // No DNS record to leave: kube-vip moves the VIP itself.
    let w = World::new(1);
    w.cluster(NS, "c1");
    w.edit(MAAS_CLUSTER, NS, "c1", |v| {
        v["spec"]["controlPlaneVIP"] = json!({"address": "10.0.0.50"})
    });
    w.machine(NS, "c1", "cp1", true);
    reconcile_cluster(&w);
    reconcile(&w, "cp1");
    w.maas.finish_deployments();
    reconcile(&w, "cp1");
    assert!(!has_hook(&w, "cp1"));
    assert!(w.maas.dns_records().is_empty());
}

/// Issue 14 item 2: the old control plane's address is out of the record
/// before Cluster API drains it, and the drain waits the record's TTL
/// after that, counted from a recorded time (a restart does not shorten
/// or restart it).
#[test]
fn a_deleted_control_plane_leaves_dns_then_waits_the_ttl_before_its_drain() {
    let w = World::new(2);
    running(&w, &["cp1", "cp2"], &[]);
    let (ip1, ip2) = (ip_of(&w, "cp1"), ip_of(&w, "cp2"));
    w.delete(CAPI_MACHINE, NS, "cp1");

    // Still in the record: the drain is held.
    assert_eq!(
        reconcile(&w, "cp1"),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    assert_eq!(reason(&w, "cp1"), LEAVING_DNS);
    assert!(has_hook(&w, "cp1"));

    // The MaasCluster takes it out (the Machine's deletion woke it).
    reconcile_cluster(&w);
    assert_eq!(record_ips(&w), vec![ip2.clone()]);
    assert!(!record_ips(&w).contains(&ip1));
    let left_at = w.clock.now();
    assert_eq!(
        reconcile(&w, "cp1"),
        Action::RequeueAfter(Duration::from_secs(10)),
        "the record's TTL"
    );
    assert_eq!(reason(&w, "cp1"), LEFT_DNS);
    let recorded = w.maas_machine(NS, "cp1").status().left_dns_at;
    assert_eq!(recorded, Some(time::time_of_unix_seconds(left_at)));
    assert!(has_hook(&w, "cp1"));
    assert!(w.kube.event_reasons().contains(&LEFT_DNS.to_string()));

    // Later (or after a restart): the wait counts from the recorded time.
    w.clock.advance(4);
    assert_eq!(
        reconcile(&w, "cp1"),
        Action::RequeueAfter(Duration::from_secs(6))
    );
    assert_eq!(
        w.maas_machine(NS, "cp1").status().left_dns_at,
        Some(time::time_of_unix_seconds(left_at)),
        "written once"
    );
    assert!(has_hook(&w, "cp1"));
    w.clock.advance(6);
    reconcile(&w, "cp1");
    assert!(!has_hook(&w, "cp1"), "the drain may go on");
    assert!(w.kube.event_reasons().contains(&"DrainAllowed".to_string()));
    // Nothing was released: that comes after the drain, with the MaasMachine.
    assert!(w.maas.releases.lock().unwrap().is_empty());
    assert_eq!(record_ips(&w), vec![ip2]);
}

/// Issue 19 item 1: the tenant sets the annotation where versions before
/// issue 19 kept the time (to a number whose requeue overflowed the clock
/// and aborted the process), and forges the status too: neither drives the
/// wait, which is never longer than the record's TTL. The annotation is
/// removed: a machine mid-wait from an older version waits one TTL again.
#[test]
fn a_tenants_left_dns_at_never_drives_the_drains_clock() {
    let w = World::new(2);
    running(&w, &["cp1", "cp2"], &[]);
    w.delete(CAPI_MACHINE, NS, "cp1");
    reconcile(&w, "cp1");
    reconcile_cluster(&w);
    let left_at = w.clock.now();
    for forged in ["18446744073709551615", "0", "-1", "soon"] {
        w.edit(MAAS_MACHINE, NS, "cp1", |mm| {
            mm["metadata"]["annotations"][LEFT_DNS_AT] = json!(forged);
        });
        let action = reconcile(&w, "cp1");
        assert_eq!(
            action,
            Action::RequeueAfter(Duration::from_secs(10)),
            "{forged}: the record's TTL from our own record"
        );
        let mm = w.maas_machine(NS, "cp1");
        assert!(
            !mm.metadata.has_annotation(LEFT_DNS_AT),
            "{forged}: removed"
        );
        assert_eq!(
            mm.status().left_dns_at,
            Some(time::time_of_unix_seconds(left_at))
        );
        assert!(has_hook(&w, "cp1"));
    }
    // A status time still to come (or one far in the future) is not ours:
    // the wait starts again from now, one TTL.
    w.edit(MAAS_MACHINE, NS, "cp1", |mm| {
        mm["status"]["leftDNSAt"] = json!("9999-12-31T23:59:59Z");
    });
    assert_eq!(
        reconcile(&w, "cp1"),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    w.clock.advance(10);
    reconcile(&w, "cp1");
    assert!(!has_hook(&w, "cp1"), "the drain may go on");
}

#[test]
fn the_last_control_plane_keeps_its_address_and_does_not_hold_the_drain() {
    let w = World::new(2);
    running(&w, &["cp1"], &["w1"]);
    let ip = ip_of(&w, "cp1");
    w.delete(CAPI_MACHINE, NS, "cp1");
    reconcile_cluster(&w);
    assert_eq!(record_ips(&w), vec![ip.clone()], "never emptied");
    reconcile(&w, "cp1");
    assert!(!has_hook(&w, "cp1"));
    assert_eq!(record_ips(&w), vec![ip]);
}

#[test]
fn a_deleting_cluster_does_not_hold_the_drain() {
    let w = World::new(2);
    running(&w, &["cp1", "cp2"], &[]);
    w.delete(CAPI_CLUSTER, NS, "c1");
    w.delete(CAPI_MACHINE, NS, "cp1");
    reconcile(&w, "cp1");
    assert!(!has_hook(&w, "cp1"));
}

/// A successor that runs but whose API does not answer yet: the old one
/// stays in the record and its drain waits for the handover.
#[test]
fn the_drain_waits_until_a_successor_answers() {
    let w = World::new(3);
    running(&w, &["old", "keep"], &[]);
    // Only "new" and "old" are candidates for the handover: "keep" goes too.
    w.delete(CAPI_MACHINE, NS, "keep");
    reconcile(&w, "keep");
    w.machine(NS, "c1", "new", true);
    reconcile(&w, "new");
    w.maas.finish_deployments();
    reconcile(&w, "new");
    w.delete(CAPI_MACHINE, NS, "old");
    reconcile_cluster(&w);
    let old = ip_of(&w, "old");
    assert!(record_ips(&w).contains(&old));
    assert_eq!(
        reconcile(&w, "old"),
        Action::RequeueAfter(Duration::from_secs(10))
    );
    assert_eq!(reason(&w, "old"), LEAVING_DNS);

    let new = ip_of(&w, "new");
    w.api_watch.answering.lock().unwrap().insert(new.clone());
    reconcile_cluster(&w);
    assert_eq!(record_ips(&w), vec![new]);
    reconcile(&w, "old");
    assert_eq!(reason(&w, "old"), LEFT_DNS);
    assert!(has_hook(&w, "old"));
}

#[test]
fn the_hook_never_outlives_the_maas_machine_or_the_cluster() {
    let w = World::new(3);
    running(&w, &["cp1", "cp2", "cp3"], &[]);
    // The MaasMachine deleted by hand: its deletion takes the hook off.
    w.delete(MAAS_MACHINE, NS, "cp1");
    reconcile(&w, "cp1");
    assert!(!has_hook(&w, "cp1"));

    // The MaasMachine gone altogether (the Machine's deletion enqueues it
    // by its infrastructureRef): the hook is taken off too.
    w.delete(CAPI_MACHINE, NS, "cp2");
    w.kube.remove(MAAS_MACHINE, NS, "cp2");
    assert!(has_hook(&w, "cp2"));
    assert_eq!(reconcile(&w, "cp2"), Action::Done);
    assert!(!has_hook(&w, "cp2"));

    // Its Cluster gone: there is no record to leave.
    w.kube.remove(CAPI_CLUSTER, NS, "c1");
    w.delete(CAPI_MACHINE, NS, "cp3");
    reconcile(&w, "cp3");
    assert!(!has_hook(&w, "cp3"));
}
