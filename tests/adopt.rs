//! `capmaas adopt` on the real API server and the MAAS simulator: objects
//! written the Go provider's way (a recorded `spec.systemID`, no identity
//! anywhere) become capmaas's with one explicit, reviewed step, and nothing
//! that is not theirs is ever adopted.

mod support;

use serde_json::{json, Value};
use support::go_provider::{adopt, go_provider_machine, maas_machine};
use support::maas_sim::MaasSim;
use support::story;

const ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/agent-name";

fn apply(cp: &support::ControlPlane, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    cp.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
}

fn owner_data(sim: &MaasSim, system_id: &str) -> Value {
    sim.machine_state(system_id)["owner_data"].clone()
}

#[test]
fn go_provider_machines_are_adopted_once_and_nothing_else_is() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("adopt");
    let sim = MaasSim::start(None);
    // Deployed at once: a deployment in progress changes the machines'
    // status messages, which "the dry run changes nothing" compares.
    sim.set_timings(0.0, 0.0);
    let hosts: Vec<String> = sim.state()["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status_name"] == "Ready")
        .map(|m| m["hostname"].as_str().unwrap().to_string())
        .take(4)
        .collect();
    let [a, b, c, ready] = [&hosts[0], &hosts[1], &hosts[2], &hosts[3]];
    let (go_a, go_b, dup) = (
        go_provider_machine(&sim, a),
        go_provider_machine(&sim, b),
        go_provider_machine(&sim, c),
    );
    let ready_id = sim.system_id(ready);
    apply(
        cp,
        &[
            story::cluster(&ns),
            story::maas_cluster(&ns),
            maas_machine(&ns, "go-a", &go_a),
            maas_machine(&ns, "go-b", &go_b),
            // Two objects naming one machine: neither is adopted.
            maas_machine(&ns, "dup-1", &dup),
            maas_machine(&ns, "dup-2", &dup),
            // A Ready machine is nobody's: nothing to adopt.
            maas_machine(&ns, "ready", &ready_id),
        ],
    );
    let before = sim.state();

    // A dry run changes nothing and says what would happen.
    let dry = adopt(cp, &sim, &["--namespace", &ns]);
    let out = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(dry.status.code(), Some(1), "refusals make it fail: {out}");
    assert!(
        out.contains(&format!("adopt as capmaas/{ns}/go-a/")),
        "{out}"
    );
    assert!(out.contains("several MaasMachines name"), "{out}");
    assert!(out.contains("not allocated to anyone"), "{out}");
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    assert_eq!(sim.state()["machines"], before["machines"], "dry run");

    // Issue 21 item 1: `--apply=false` used to apply.
    let no = adopt(cp, &sim, &["--namespace", &ns, "--apply=false"]);
    let out = String::from_utf8_lossy(&no.stdout);
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    assert_eq!(sim.state()["machines"], before["machines"], "--apply=false");
    let maybe = adopt(cp, &sim, &["--namespace", &ns, "--apply=maybe"]);
    let err = String::from_utf8_lossy(&maybe.stderr);
    assert_eq!(maybe.status.code(), Some(2), "{err}");
    assert!(
        err.contains("capmaas adopt: --apply: expected --apply, --apply=true or --apply=false, got \"maybe\""),
        "{err}"
    );
    assert!(maybe.stdout.is_empty(), "refused before doing anything");
    assert_eq!(sim.state()["machines"], before["machines"], "--apply=maybe");

    let applied = adopt(cp, &sim, &["--namespace", &ns, "--apply"]);
    let out = String::from_utf8_lossy(&applied.stdout);
    assert!(
        out.contains("2 adopted, 0 already adopted, 3 refused, 0 failed"),
        "{out}"
    );
    for (name, id) in [("go-a", &go_a), ("go-b", &go_b)] {
        let annotation = cp.kubectl(&[
            "get",
            "maasmachine",
            name,
            "-n",
            &ns,
            "-o",
            &format!(
                "jsonpath={{.metadata.annotations.{}}}",
                ANNOTATION.replace('.', "\\.")
            ),
        ]);
        assert!(
            annotation.starts_with(&format!("capmaas/{ns}/{name}/")),
            "{annotation}"
        );
        assert_eq!(owner_data(&sim, id)["capmaas-identity"], json!(annotation));
    }
    for id in [&dup, &ready_id] {
        assert_eq!(owner_data(&sim, id), json!({}), "{id} untouched");
    }

    // Running it again is harmless.
    let again = adopt(cp, &sim, &["--namespace", &ns, "--apply"]);
    let out = String::from_utf8_lossy(&again.stdout);
    assert!(out.contains("0 adopted, 2 already adopted"), "{out}");

    // Usage errors are exit code 2.
    let none = adopt(cp, &sim, &[]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("--all-namespaces"));
}
