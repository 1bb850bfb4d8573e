//! Plays kubelet for the conformance tests: registers a Node, named after the
//! MAAS hostname, when the simulator reports a machine Deployed. Nothing else:
//! no providerID (capmaas sets it on the Node, and Cluster API must then
//! match it to the Machine), no status updates, no deletion (Cluster API
//! deletes Nodes of scaled-down Machines; the test deletes what is left).
//!
//! ```ignore
//! let nodes = support::nodes::NodeHelper::start(cp, move || sim_machines());
//! // ... every machine that turns Deployed gets its Node once
//! nodes.registered(); // names of the Nodes created so far
//! ```
//!
//! A Node is registered once per deployment: a machine seen Deployed again
//! after leaving that state (released and deployed anew) registers again, but
//! a Node deleted while its machine stays Deployed is not brought back (a
//! real kubelet would, but Cluster API deletes Nodes only of Machines it is
//! deleting, whose MAAS machines are about to be released).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Sender};
use serde_json::{json, Value};

use super::ControlPlane;

/// What the helper needs to know of one MAAS machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineView {
    pub system_id: String,
    pub hostname: String,
    /// MAAS `status_name == "Deployed"`.
    pub deployed: bool,
}

/// The simulator's machines as the helper needs them, read from its
/// `/_sim/state` at `base` (the simulator's URL).
pub fn sim_views(base: &str) -> Result<Vec<MachineView>, String> {
    let state: Value = ureq::get(&format!("{base}/_sim/state"))
        .call()
        .map_err(|e| e.to_string())?
        .body_mut()
        .read_json()
        .map_err(|e| e.to_string())?;
    Ok(state["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| MachineView {
            system_id: m["system_id"].as_str().unwrap_or_default().into(),
            hostname: m["hostname"].as_str().unwrap_or_default().into(),
            deployed: m["status_name"] == "Deployed",
        })
        .collect())
}

pub struct NodeHelper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    registered: Arc<Mutex<Vec<String>>>,
}

/// How often the simulator is asked for its machines.
const POLL: Duration = Duration::from_millis(200);

impl NodeHelper {
    /// Starts the polling thread. `machines` lists the simulator's machines;
    /// an `Err` is printed and the next poll tries again.
    pub fn start<F>(cp: &'static ControlPlane, mut machines: F) -> NodeHelper
    where
        F: FnMut() -> Result<Vec<MachineView>, String> + Send + 'static,
    {
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let registered = Arc::new(Mutex::new(Vec::new()));
        let log = registered.clone();
        let thread = std::thread::Builder::new()
            .name("node-helper".into())
            .spawn(move || {
                let mut was_deployed: HashMap<String, bool> = HashMap::new();
                loop {
                    match machines() {
                        Ok(list) => {
                            for m in list {
                                let before = was_deployed.insert(m.system_id.clone(), m.deployed);
                                if m.deployed && before != Some(true) {
                                    register_node(cp, &m.hostname);
                                    log.lock().unwrap().push(m.hostname.clone());
                                }
                            }
                        }
                        Err(e) => eprintln!("node helper: listing simulator machines: {e}"),
                    }
                    if !matches!(
                        stop_rx.recv_timeout(POLL),
                        Err(crossbeam_channel::RecvTimeoutError::Timeout)
                    ) {
                        return;
                    }
                }
            })
            .expect("spawning the node helper");
        NodeHelper {
            stop: Some(stop_tx),
            thread: Some(thread),
            registered,
        }
    }

    /// Names of the Nodes registered so far, in order.
    pub fn registered(&self) -> Vec<String> {
        self.registered.lock().unwrap().clone()
    }
}

impl Drop for NodeHelper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A Node as kubelet registers it, Ready and without pressure (Cluster API's
/// NodeHealthy needs all four conditions; Node status may be set on create).
/// The uninitialized taint is Cluster API's to remove once it has a Machine.
fn node_manifest(hostname: &str) -> Value {
    let condition = |type_: &str, status: &str, reason: &str| json!({"type": type_, "status": status, "reason": reason, "message": "registered by the conformance node helper"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": hostname, "labels": {"kubernetes.io/hostname": hostname}},
        "spec": {"taints": [{"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}]},
        "status": {"conditions": [
            condition("Ready", "True", "KubeletReady"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        ]},
    })
}

fn register_node(cp: &ControlPlane, hostname: &str) {
    match cp.try_kubectl(&["create", "-f", "-"], &node_manifest(hostname).to_string()) {
        Ok(_) => println!("node helper: registered Node {hostname}"),
        Err(e) if e.contains("AlreadyExists") || e.contains("already exists") => {
            println!("node helper: Node {hostname} already registered")
        }
        Err(e) => eprintln!("node helper: registering Node {hostname}: {e}"),
    }
}
