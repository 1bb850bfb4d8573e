//! Objects and MAAS machines as the Go provider (spectrocloud
//! cluster-api-provider-maas) leaves them, and `capmaas adopt` as an
//! administrator runs it: for the migration tests.
#![allow(dead_code)]

use capmaas::maas::MaasApi;
use std::process::{Command, Output};

use capmaas::maas::{AllocateRequest, DeployRequest};
use serde_json::{json, Value};

use super::maas_sim::MaasSim;
use super::story;
use super::ControlPlane;

/// The finalizer the Go provider puts on a MaasMachine (capmaas uses the
/// same name).
pub const FINALIZER: &str = "maasmachine.infrastructure.cluster.x-k8s.io";

/// `capmaas adopt ARGS` against `cp`, with the simulator's admin key as
/// the controller-wide credentials.
pub fn adopt(cp: &ControlPlane, sim: &MaasSim, args: &[&str]) -> Output {
    adopt_against(cp, &sim.url, &sim.api_key, args)
}

/// `capmaas adopt ARGS` against `cp` and the MAAS at `url` (e.g. real
/// MAAS) with `api_key` as the controller-wide credentials.
pub fn adopt_against(cp: &ControlPlane, url: &str, api_key: &str, args: &[&str]) -> Output {
    Command::new(story::capmaas_bin())
        .arg("adopt")
        .args(args)
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .env("MAAS_ENDPOINT", url)
        .env("MAAS_API_KEY", api_key)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run capmaas adopt")
}

/// Allocates and deploys the machine `hostname` the Go provider's way: no
/// agent_name, no owner data. Returns its system_id.
pub fn go_provider_machine(sim: &MaasSim, hostname: &str) -> String {
    let maas = sim.client();
    let request = AllocateRequest {
        name: Some(hostname.to_string()),
        ..AllocateRequest::default()
    };
    let machine = maas.allocate(&request).expect("allocate");
    let deploy = DeployRequest {
        image: Some("ubuntu/jammy".into()),
        ..DeployRequest::default()
    };
    maas.deploy(&machine.system_id, &deploy).expect("deploy");
    machine.system_id
}

/// A MaasMachine of the story's cluster as the Go provider wrote it: the
/// machine recorded in `spec`, no identity annotation.
pub fn maas_machine(ns: &str, name: &str, system_id: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasMachine",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"cluster.x-k8s.io/cluster-name": story::CLUSTER}},
        "spec": {"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 1024,
                 "systemID": system_id, "providerID": format!("maas:///zone-a/{system_id}")},
    })
}

/// What the Go provider writes through the status subresource once it has
/// the machine (a tenant's role does not grant `maasmachines/status`).
pub fn record_status(cp: &ControlPlane, ns: &str, name: &str, hostname: &str) {
    let status = json!({"status": {"hostname": hostname, "machineState": "Deployed"}});
    cp.kubectl(&[
        "patch",
        "maasmachine",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

/// The story cluster's MaasMachine `name` for `system_id` as Cluster API
/// and the Go provider leave it: its Machine (made here), owned by it, and
/// with `hostname` recorded in its status when given.
pub fn owned_maas_machine(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    system_id: &str,
    hostname: Option<&str>,
) {
    let machine = super::objects::machine(ns, story::CLUSTER, name, false);
    cp.kubectl_stdin(&["apply", "-f", "-"], &machine.to_string());
    let uid = cp.kubectl(&[
        "get",
        "machine",
        name,
        "-n",
        ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let mut object = maas_machine(ns, name, system_id);
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": super::capi::CAPI_API_VERSION, "kind": "Machine", "name": name,
        "uid": uid.trim(), "controller": true, "blockOwnerDeletion": true,
    }]);
    cp.kubectl_stdin(&["apply", "-f", "-"], &object.to_string());
    if let Some(hostname) = hostname {
        record_status(cp, ns, name, hostname);
    }
}
