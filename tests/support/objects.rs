//! Small builders and readers for the objects the end-to-end tests write and
//! read while they play Cluster API's part.

use serde_json::{json, Value};

use super::capi::CAPI_API_VERSION;
use super::story::{bootstrap_secret_name, INFRA_API_VERSION, INFRA_GROUP};

/// The labels Cluster API puts on a Machine and its MaasMachine.
pub fn machine_labels(cluster: &str, control_plane: bool) -> Value {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    labels
}

/// The Machine Cluster API creates for one machine; its bootstrap data is
/// the Secret `<name>-bootstrap`.
pub fn machine(ns: &str, cluster: &str, name: &str, control_plane: bool) -> Value {
    json!({
        "apiVersion": CAPI_API_VERSION, "kind": "Machine",
        "metadata": {"name": name, "namespace": ns, "labels": machine_labels(cluster, control_plane)},
        "spec": {
            "clusterName": cluster,
            "bootstrap": {"dataSecretName": bootstrap_secret_name(name)},
            "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "MaasMachine", "name": name},
        },
    })
}

/// The MaasMachine owned (controller reference) by the Machine of the same
/// name whose uid is `machine_uid`.
pub fn owned_maas_machine(
    ns: &str,
    cluster: &str,
    name: &str,
    control_plane: bool,
    machine_uid: &str,
    spec: Value,
) -> Value {
    json!({
        "apiVersion": INFRA_API_VERSION, "kind": "MaasMachine",
        "metadata": {
            "name": name, "namespace": ns, "labels": machine_labels(cluster, control_plane),
            "ownerReferences": [{"apiVersion": CAPI_API_VERSION, "kind": "Machine", "name": name, "uid": machine_uid,
                                  "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": spec,
    })
}

/// The status condition of type `type_`, if the object has one.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether the object's condition `type_` has status `status`.
pub fn condition_is(obj: &Value, type_: &str, status: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == status)
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

/// The first owner reference of kind `kind`.
pub fn owner<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == kind)
}

/// A JSON string's text; empty when absent or not a string.
pub fn string(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}
