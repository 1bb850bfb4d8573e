//! The informer against a real kube-apiserver + etcd: the initial list,
//! live adds/updates/deletes, resuming across server-closed watches without
//! losing or repeating an event, the 410 relist, label selectors, and a
//! prompt stop of an idle watch.

mod support;

use std::time::Duration;

use capmaas::kube::resources::{CLUSTERS, CONFIG_MAPS, SECRETS};
use capmaas::kube::{Client, Config};
use capmaas::runtime::{Event, Informer, InformerConfig, ObjectKey, Shutdown, Store};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde_json::{json, Value};

/// Bound for "eventually"; never a performance assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);

fn admin() -> Client {
    let cp = support::control_plane();
    Client::new(Config::infer(Some(&cp.kubeconfig)).unwrap()).unwrap()
}

fn configmap(name: &str, n: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"n": n.to_string()}})
}

/// What a handler saw, in a form easy to compare.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Added(String, String),
    Modified(String, String),
    Deleted(String),
}

/// Starts an informer whose handler reports `Seen` entries (with the
/// ConfigMap's `data.n` for adds and updates).
fn start(config: InformerConfig, shutdown: &Shutdown) -> (Store<Value>, Receiver<Seen>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let handler = move |event: &Event<Value>| {
        let obj = event.object();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let n = obj["data"]["n"].as_str().unwrap_or("").to_string();
        let seen = match event {
            Event::Added(_) => Seen::Added(name, n),
            Event::Modified { .. } => Seen::Modified(name, n),
            Event::Deleted(_) => Seen::Deleted(name),
        };
        let _ = tx.send(seen);
    };
    let store = Store::new();
    Informer::spawn(admin(), config, store.clone(), handler, shutdown.clone()).unwrap();
    (store, rx)
}

fn next(rx: &Receiver<Seen>) -> Seen {
    rx.recv_timeout(EVENTUALLY).expect("an informer event")
}

fn metric(name: &str, informer: &str) -> u64 {
    let prefix = format!("{name}{{informer=\"{informer}\"}} ");
    capmaas::metrics::render()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
        .unwrap_or(0)
}

#[test]
fn sees_the_initial_list_then_adds_updates_and_deletes() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-informer");
    for (name, n) in [("a", 1), ("b", 2)] {
        client
            .create(&CONFIG_MAPS, Some(&ns), &configmap(name, n))
            .unwrap();
    }
    let shutdown = Shutdown::new();
    let config = InformerConfig::new(CONFIG_MAPS).namespace(Some(ns.clone()));
    let (store, rx) = start(config, &shutdown);

    let mut initial = vec![next(&rx), next(&rx)];
    initial.sort();
    assert_eq!(
        initial,
        [
            Seen::Added("a".into(), "1".into()),
            Seen::Added("b".into(), "2".into())
        ]
    );
    assert!(store.wait_until_synced(EVENTUALLY));
    // The namespace's default kube-root-ca.crt ConfigMap may appear too; we
    // only look at ours.
    let a = store.get(&ObjectKey::new(&ns, "a")).unwrap();
    assert_eq!(a["data"]["n"], "1");
    assert!(
        a["metadata"].get("managedFields").is_none(),
        "managedFields are dropped from the cache"
    );

    client
        .create(&CONFIG_MAPS, Some(&ns), &configmap("c", 3))
        .unwrap();
    assert_eq!(next(&rx), Seen::Added("c".into(), "3".into()));
    client
        .patch_merge(&CONFIG_MAPS, Some(&ns), "a", &json!({"data": {"n": "10"}}))
        .unwrap();
    assert_eq!(next(&rx), Seen::Modified("a".into(), "10".into()));
    // The store holds the new version by the time the handler runs.
    assert_eq!(
        store.get(&ObjectKey::new(&ns, "a")).unwrap()["data"]["n"],
        "10"
    );
    client.delete(&CONFIG_MAPS, Some(&ns), "b", None).unwrap();
    assert_eq!(next(&rx), Seen::Deleted("b".into()));
    assert!(store.get(&ObjectKey::new(&ns, "b")).is_none());
    assert_eq!(store.list_namespace(&ns).len(), store.len());
    shutdown.trigger();
}

#[test]
fn resumes_across_closed_watches_without_losing_or_repeating_events() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-resume");
    let shutdown = Shutdown::new();
    let name = format!("resume-{ns}");
    // The server closes every watch after one second: the changes below
    // span several watches, each resumed from the last version seen.
    let config = InformerConfig::new(CONFIG_MAPS)
        .name(name.as_str())
        .namespace(Some(ns.clone()))
        .field_selector("metadata.name=counter")
        .watch_timeout(Duration::from_secs(1), Duration::from_secs(1));
    let (store, rx) = start(config, &shutdown);
    assert!(store.wait_until_synced(EVENTUALLY));

    const UPDATES: u64 = 25;
    client
        .create(&CONFIG_MAPS, Some(&ns), &configmap("counter", 0))
        .unwrap();
    for n in 1..=UPDATES {
        std::thread::sleep(Duration::from_millis(200));
        client
            .patch_merge(
                &CONFIG_MAPS,
                Some(&ns),
                "counter",
                &json!({"data": {"n": n.to_string()}}),
            )
            .unwrap();
    }
    client
        .delete(&CONFIG_MAPS, Some(&ns), "counter", None)
        .unwrap();

    let mut expected = vec![Seen::Added("counter".into(), "0".into())];
    expected.extend((1..=UPDATES).map(|n| Seen::Modified("counter".into(), n.to_string())));
    expected.push(Seen::Deleted("counter".into()));
    let seen: Vec<Seen> = expected.iter().map(|_| next(&rx)).collect();
    assert_eq!(seen, expected, "every change exactly once, in order");
    // Nothing more trickles in after another watch round trip or two.
    match rx.recv_timeout(Duration::from_secs(3)) {
        Err(RecvTimeoutError::Timeout) => {}
        other => panic!("unexpected extra event {other:?}"),
    }
    assert!(
        metric("informer_watches_total", &name) >= 3,
        "the changes spanned several watches"
    );
    assert_eq!(
        metric("informer_lists_total", &name),
        1,
        "closed watches resume; they do not relist"
    );
    shutdown.trigger();
}

#[test]
fn a_too_old_resource_version_relists() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-gone");
    for i in 0..3 {
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": format!("g{i}")}, "spec": {"paused": true},
        });
        client.create(&CLUSTERS, Some(&ns), &cluster).unwrap();
    }
    let shutdown = Shutdown::new();
    let name = format!("gone-{ns}");
    // The Cluster watch cache began when the CRD was installed, long after
    // version 1: the first watch gets 410 and the informer must relist.
    let mut config = InformerConfig::new(CLUSTERS)
        .name(name.as_str())
        .namespace(Some(ns.clone()));
    config.start_from = Some("1".to_string());
    let (store, rx) = start(config, &shutdown);

    assert!(store.wait_until_synced(EVENTUALLY), "relisted after 410");
    let mut seen: Vec<Seen> = (0..3).map(|_| next(&rx)).collect();
    seen.sort();
    let expected: Vec<Seen> = (0..3)
        .map(|i| Seen::Added(format!("g{i}"), String::new()))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(metric("informer_lists_total", &name), 1);
    assert_eq!(
        metric("informer_errors_total", &name),
        0,
        "410 is not an error"
    );

    // And it watches on from the list.
    client.delete(&CLUSTERS, Some(&ns), "g1", None).unwrap();
    assert_eq!(next(&rx), Seen::Deleted("g1".into()));
    assert_eq!(store.len(), 2);
    shutdown.trigger();
}

#[test]
fn a_label_selector_keeps_other_objects_out() {
    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-labels");
    let secret = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "labels": labels}, "stringData": {"k": "v"}})
    };
    client
        .create(
            &SECRETS,
            Some(&ns),
            &secret("watched", json!({"cluster.x-k8s.io/cluster-name": "c1"})),
        )
        .unwrap();
    client
        .create(&SECRETS, Some(&ns), &secret("ignored", json!({})))
        .unwrap();
    let shutdown = Shutdown::new();
    let config = InformerConfig::new(SECRETS)
        .namespace(Some(ns.clone()))
        .label_selector("cluster.x-k8s.io/cluster-name");
    let (store, rx) = start(config, &shutdown);
    assert_eq!(next(&rx), Seen::Added("watched".into(), String::new()));
    assert!(store.wait_until_synced(EVENTUALLY));
    client
        .create(&SECRETS, Some(&ns), &secret("also-ignored", json!({})))
        .unwrap();
    client
        .create(
            &SECRETS,
            Some(&ns),
            &secret("second", json!({"cluster.x-k8s.io/cluster-name": "c2"})),
        )
        .unwrap();
    assert_eq!(next(&rx), Seen::Added("second".into(), String::new()));
    let mut names: Vec<String> = store.keys().into_iter().map(|k| k.name).collect();
    names.sort();
    assert_eq!(names, ["second", "watched"]);
    shutdown.trigger();
}

#[test]
fn informer_events_reach_workers_through_the_queue() {
    use capmaas::runtime::{join_within, run_workers, Action, LeaderGate, WorkQueue};
    use std::sync::{Arc, Mutex};

    let cp = support::control_plane();
    let client = admin();
    let ns = cp.new_namespace("rt-wiring");
    let shutdown = Shutdown::new();
    let queue = WorkQueue::new(&format!("wiring-{ns}"));
    let handler = {
        let queue = queue.clone();
        move |event: &Event<Value>| {
            if let Some(key) = event.key() {
                queue.add(key);
            }
        }
    };
    let config = InformerConfig::new(CONFIG_MAPS)
        .namespace(Some(ns.clone()))
        .field_selector("metadata.name=wired");
    let store = Store::<Value>::new();
    Informer::spawn(admin(), config, store.clone(), handler, shutdown.clone()).unwrap();
    assert!(store.wait_until_synced(EVENTUALLY));

    // The reconcile reads the cache, as controllers do, and records what
    // it saw.
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let reconcile = {
        let (store, seen) = (store.clone(), seen.clone());
        move |key: &ObjectKey| -> Result<Action, String> {
            let n = store
                .get(key)
                .map(|o| o["data"]["n"].as_str().unwrap_or("").to_string())
                .unwrap_or_else(|| "gone".to_string());
            seen.lock().unwrap().push(n);
            Ok(Action::Done)
        }
    };
    let workers = run_workers(
        "wiring",
        queue.clone(),
        2,
        reconcile,
        LeaderGate::always_open(),
    );

    client
        .create(&CONFIG_MAPS, Some(&ns), &configmap("wired", 1))
        .unwrap();
    support::eventually(60, "a reconcile of the new object", || {
        seen.lock()
            .unwrap()
            .contains(&"1".to_string())
            .then_some(())
    });
    client
        .patch_merge(
            &CONFIG_MAPS,
            Some(&ns),
            "wired",
            &json!({"data": {"n": "2"}}),
        )
        .unwrap();
    support::eventually(60, "a reconcile of the update", || {
        (seen.lock().unwrap().last() == Some(&"2".to_string())).then_some(())
    });
    client
        .delete(&CONFIG_MAPS, Some(&ns), "wired", None)
        .unwrap();
    support::eventually(60, "a reconcile after the delete", || {
        (seen.lock().unwrap().last() == Some(&"gone".to_string())).then_some(())
    });

    queue.shutdown();
    shutdown.trigger();
    assert!(join_within(workers, EVENTUALLY));
}

#[test]
fn stop_ends_an_idle_watch_at_once() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("rt-stop");
    let shutdown = Shutdown::new();
    let name = format!("stop-{ns}");
    // A quiet namespace and a long server-side timeout: the watch would sit
    // in a read for ten minutes if nothing cut its connection.
    let config = InformerConfig::new(CONFIG_MAPS)
        .name(name.as_str())
        .namespace(Some(ns.clone()))
        .watch_timeout(Duration::from_secs(600), Duration::from_secs(600));
    let store = Store::<Value>::new();
    let informer =
        Informer::spawn(admin(), config, store.clone(), |_| {}, shutdown.clone()).unwrap();
    assert!(store.wait_until_synced(EVENTUALLY));
    support::eventually(60, "the watch is open", || {
        (metric("informer_watches_total", &name) >= 1).then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));

    shutdown.trigger();
    let (done_tx, done) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        informer.stop();
        let _ = done_tx.send(());
    });
    // Not a performance bound: without the cut, the thread would wait for
    // the next event, at the earliest the server's bookmark about a minute
    // into the watch.
    done.recv_timeout(Duration::from_secs(20))
        .expect("stop returns without waiting for the watch's next event");
    assert_eq!(
        metric("informer_errors_total", &name),
        0,
        "the cut connection is not reported as an error"
    );
}
