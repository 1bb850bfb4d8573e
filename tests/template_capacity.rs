//! Autoscaling from zero: capmaas writes MaasMachineTemplate
//! `status.capacity` and `status.nodeInfo` from the smallest MAAS machine
//! matching the template's constraints, accepted by the real API server's
//! CRD schema, and refreshed when the template changes and at an interval
//! (simulator inventory: 6 workers with 16 or 32 CPUs, 4 control-plane
//! machines with 8).

mod support;

use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::story::{self, Capmaas};
use support::ControlPlane;

fn status(cp: &ControlPlane, ns: &str, name: &str) -> Value {
    let out = cp.kubectl(&["get", "maasmachinetemplate", name, "-n", ns, "-o", "json"]);
    let template: Value = serde_json::from_str(&out).expect("kubectl -o json");
    template["status"].clone()
}

#[test]
fn templates_state_the_smallest_matching_machine_and_follow_changes() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("capacity");
    let sim = MaasSim::start(None);
    let workers = story::maas_machine_template(&ns);
    let name = workers["metadata"]["name"].as_str().unwrap().to_string();
    let mut nothing = story::maas_machine_template(&ns);
    nothing["metadata"]["name"] = json!("nothing-matches");
    nothing["spec"]["template"]["spec"]["tags"] = json!(["gpu"]);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [workers, nothing]});
    cp.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());

    let dir = support::tempdir("capmaas-capacity").unwrap();
    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        dir.join("capmaas.log"),
        &[format!("--namespace={ns}")],
    );
    capmaas.wait_ready(60);

    // worker-pool + tag worker + at least 8 CPUs / 16 GiB: worker-1..6;
    // the smallest have 16 CPUs and 65536 MiB.
    let first = support::eventually(30, "capacity of the worker template", || {
        let s = status(cp, &ns, &name);
        s["capacity"].is_object().then_some(s)
    });
    assert_eq!(
        first,
        json!({"capacity": {"cpu": "16", "memory": "65536Mi"},
               "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}),
    );
    // No MAAS machine carries the gpu tag: nothing is promised.
    assert!(status(cp, &ns, "nothing-matches")["capacity"].is_null());

    // A spec change is followed without waiting for the refresh interval
    // (10 min by default): the control-plane machines, 8 CPUs, 32 GiB,
    // with a root disk of at least 100 GB.
    let patch = json!({"spec": {"template": {"spec": {
        "resourcePool": "cp-pool", "tags": ["control-plane"], "minDiskSize": 100}}}});
    cp.kubectl(&[
        "patch",
        "maasmachinetemplate",
        &name,
        "-n",
        &ns,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    let second = support::eventually(30, "capacity after the spec change", || {
        let s = status(cp, &ns, &name);
        (s["capacity"]["cpu"] == "8").then_some(s)
    });
    assert_eq!(
        second["capacity"],
        json!({"cpu": "8", "memory": "32768Mi", "ephemeral-storage": "100G"})
    );
    capmaas.assert_running();
    drop(capmaas);

    // And at an interval (--sync-period): a machine MAAS gains later, with
    // no template change, is counted at the next refresh.
    let mut capmaas = Capmaas::start(
        &story::capmaas_bin(),
        &cp.kubeconfig,
        &sim,
        dir.join("capmaas-2.log"),
        &[format!("--namespace={ns}"), "--sync-period=3s".to_string()],
    );
    capmaas.wait_ready(60);
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(status(cp, &ns, "nothing-matches")["capacity"].is_null());
    sim.add_machine(
        json!({"hostname": "gpu-1", "cpu_count": 12, "memory": 49152,
                           "disks_gb": [500], "pool": "worker-pool", "tags": ["worker", "gpu"]}),
    );
    let gpu = support::eventually(30, "capacity from the new gpu machine", || {
        let s = status(cp, &ns, "nothing-matches");
        s["capacity"].is_object().then_some(s)
    });
    assert_eq!(gpu["capacity"], json!({"cpu": "12", "memory": "49152Mi"}));
    capmaas.assert_running();
}
