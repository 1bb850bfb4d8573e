//! The event recorder against a real kube-apiserver: repeats aggregate into
//! one Event with a count, distinct messages make distinct Events, and the
//! per-object rate limit caps API writes, and a burst about many objects is
//! written whole.

mod support;

use std::time::Duration;

use capmaas::kube::resources::{CONFIG_MAPS, EVENTS};
use capmaas::kube::{Client, Config, ListParams};
use capmaas::runtime::EventRecorder;
use serde_json::{json, Value};

const EVENTUALLY: Duration = Duration::from_secs(60);

fn admin() -> Client {
    let cp = support::control_plane();
    Client::new(Config::infer(Some(&cp.kubeconfig)).unwrap()).unwrap()
}

/// A real object to record events about.
fn subject(client: &Client, ns: &str, name: &str) -> Value {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    client.create(&CONFIG_MAPS, Some(ns), &cm).unwrap()
}

fn events_about(client: &Client, ns: &str, name: &str) -> Vec<Value> {
    let params = ListParams {
        field_selector: Some(format!("involvedObject.name={name}")),
        ..ListParams::default()
    };
    client.list(&EVENTS, Some(ns), &params).unwrap().items
}

#[test]
fn the_same_event_twice_is_one_event_with_count_two() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-events");
    let obj = subject(&client, &ns, "subject");
    let recorder = EventRecorder::spawn(admin(), "capmaas-test", "test-instance").unwrap();

    recorder.warning(&obj, "AllocateFailed", "no machine matches");
    recorder.warning(&obj, "AllocateFailed", "no machine matches");
    recorder.normal(&obj, "Deployed", "machine deployed");
    assert!(recorder.flush(EVENTUALLY));

    let events = events_about(&client, &ns, "subject");
    assert_eq!(events.len(), 2, "{events:#?}");
    let failed = events
        .iter()
        .find(|e| e["reason"] == "AllocateFailed")
        .unwrap();
    assert_eq!(failed["count"], 2);
    assert_eq!(failed["type"], "Warning");
    assert_eq!(failed["message"], "no machine matches");
    assert_eq!(failed["involvedObject"]["uid"], obj["metadata"]["uid"]);
    assert_eq!(failed["involvedObject"]["kind"], "ConfigMap");
    assert_eq!(failed["source"]["component"], "capmaas-test");
    assert_eq!(failed["reportingInstance"], "test-instance");
    let deployed = events.iter().find(|e| e["reason"] == "Deployed").unwrap();
    assert_eq!(deployed["count"], 1);
    assert_eq!(deployed["type"], "Normal");
}

#[test]
fn a_hot_loop_is_capped_per_object() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-events-flood");
    let hot = subject(&client, &ns, "hot");
    let calm = subject(&client, &ns, "calm");
    let recorder = EventRecorder::spawn(admin(), "capmaas-test", "test-instance").unwrap();

    // 60 distinct messages about one object: only the burst (25) gets
    // written; another object is not affected.
    for i in 0..60 {
        recorder.normal(&hot, "Tick", &format!("tick {i}"));
    }
    recorder.normal(&calm, "Tick", "tick");
    assert!(recorder.flush(EVENTUALLY));

    assert_eq!(events_about(&client, &ns, "hot").len(), 25);
    assert_eq!(events_about(&client, &ns, "calm").len(), 1);
}

#[test]
fn close_writes_what_was_recorded_then_ends_the_writer() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-events-close");
    let obj = subject(&client, &ns, "closing");
    let recorder = EventRecorder::spawn(admin(), "capmaas-test", "test-instance").unwrap();
    let clone_held_elsewhere = recorder.clone();

    recorder.normal(&obj, "Released", "before close");
    assert!(recorder.close(EVENTUALLY), "the writer thread ended");
    clone_held_elsewhere.normal(&obj, "Late", "after close");
    assert!(!clone_held_elsewhere.flush(Duration::from_secs(1)));

    let reasons: Vec<Value> = events_about(&client, &ns, "closing")
        .iter()
        .map(|e| e["reason"].clone())
        .collect();
    assert_eq!(reasons, [json!("Released")]);
}

#[test]
fn a_burst_about_many_objects_is_written_whole() {
    // A thousand machines deploying at once: more events than one writer's
    // queue holds, all recorded in a moment, none dropped.
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-events-burst");
    let recorder = EventRecorder::spawn(admin(), "capmaas-test", "test-instance").unwrap();
    let objects = 1500;
    for i in 0..objects {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("m{i}"), "namespace": ns, "uid": format!("uid-{i}")}});
        recorder.normal(&obj, "MAASDeployed", "deployed");
    }
    assert!(recorder.flush(Duration::from_secs(300)));
    let written = client
        .list(&EVENTS, Some(&ns), &ListParams::default())
        .unwrap()
        .items
        .len();
    assert_eq!(written, objects);
}
