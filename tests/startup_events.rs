//! The MAAS start-up check's outcome as an Event on the controller's Pod
//! (downward API `POD_NAMESPACE`, `POD_NAME`, `POD_UID`), so that `kubectl
//! describe pod` says why the pod is not ready: the real binary against the
//! real API server, once with MAAS unreachable and once with the simulator.

mod support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use capmaas::kube::resources::EVENTS;
use capmaas::kube::{Client, Config, ListParams};
use serde_json::Value;
use support::maas_sim::MaasSim;

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(ns: &str, pod: &str, uid: &str, endpoint: &str, key: &str) -> Running {
    let cp = support::control_plane();
    let child = Command::new(env!("CARGO_BIN_EXE_capmaas"))
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .arg("--metrics-bind-address=0")
        .arg("--health-probe-bind-address=0")
        .arg("--leader-elect=false")
        .arg(format!("--namespace={ns}"))
        .env_remove("KUBECONFIG")
        .env("MAAS_ENDPOINT", endpoint)
        .env("MAAS_API_KEY", key)
        .env("POD_NAMESPACE", ns)
        .env("POD_NAME", pod)
        .env("POD_UID", uid)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running(child)
}

/// Events about the Pod, as `kubectl describe pod` finds them (by uid).
fn pod_events(ns: &str, uid: &str) -> Vec<Value> {
    let cp = support::control_plane();
    let client = Client::new(Config::infer(Some(&cp.kubeconfig)).unwrap()).unwrap();
    let params = ListParams {
        field_selector: Some(format!("involvedObject.uid={uid}")),
        ..ListParams::default()
    };
    client.list(&EVENTS, Some(ns), &params).unwrap().items
}

fn event_with_reason(ns: &str, uid: &str, reason: &str) -> Option<Value> {
    pod_events(ns, uid)
        .into_iter()
        .find(|e| e["reason"] == reason)
}

#[test]
fn an_unreachable_maas_is_an_event_on_the_pod() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("startup-unreachable");
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let endpoint = format!("http://127.0.0.1:{port}/MAAS");
    let _capmaas = start(&ns, "capmaas-abc", "uid-unreachable", &endpoint, "a:b:c");

    let event = support::eventually(60, "a MAASUnreachable Event on the pod", || {
        event_with_reason(&ns, "uid-unreachable", "MAASUnreachable")
    });
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["kind"], "Pod");
    assert_eq!(event["involvedObject"]["name"], "capmaas-abc");
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("not reachable"), "{message}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(
        event_with_reason(&ns, "uid-unreachable", "MAASReady").is_none(),
        "{:#?}",
        pod_events(&ns, "uid-unreachable")
    );
}

#[test]
fn a_reachable_maas_is_a_ready_event_on_the_pod_and_the_key_never_shows() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("startup-ready");
    let sim = MaasSim::start(None);
    let _capmaas = start(&ns, "capmaas-def", "uid-ready", &sim.url, &sim.api_key);

    let event = support::eventually(60, "a MAASReady Event on the pod", || {
        event_with_reason(&ns, "uid-ready", "MAASReady")
    });
    assert_eq!(event["type"], "Normal");
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("authenticated as"), "{message}");
    for part in sim.api_key.split(':') {
        assert!(!message.contains(part), "{message}");
    }
}

/// Issue 22 item 7: Secret values often end in a newline (`echo` into a
/// file, `--from-file`); the Go provider turned that into an opaque URL
/// error. Trimmed, they work; garbage inside is refused at once, naming
/// the value and never showing the key.
#[test]
fn values_with_trailing_newlines_start_and_garbage_inside_is_named() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("startup-newlines");
    let sim = MaasSim::start(None);
    let endpoint = format!("{}\n", sim.url);
    let key = format!("{}\n", sim.api_key);
    let capmaas = start(&ns, "capmaas-nl", "uid-newlines", &endpoint, &key);
    let event = support::eventually(60, "a MAASReady Event on the pod", || {
        event_with_reason(&ns, "uid-newlines", "MAASReady")
    });
    let message = event["message"].as_str().unwrap();
    assert!(message.contains("authenticated as"), "{message}");
    drop(capmaas);

    let calls_before = sim.calls();
    let garbled = format!("{}\nleftover-from-a-paste", sim.api_key);
    let out = Command::new(env!("CARGO_BIN_EXE_capmaas"))
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .arg("--metrics-bind-address=0")
        .arg("--health-probe-bind-address=0")
        .arg("--leader-elect=false")
        .env_remove("KUBECONFIG")
        .env("MAAS_ENDPOINT", &sim.url)
        .env("MAAS_API_KEY", &garbled)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("MAAS_API_KEY: invalid MAAS API key: the token secret contains whitespace"),
        "{stderr}"
    );
    for part in garbled.split([':', '\n']) {
        assert!(!stderr.contains(part), "{part:?} shown in {stderr}");
    }
    assert_eq!(
        sim.calls(),
        calls_before,
        "no request may carry a refused key"
    );
}
