//! `capmaas adopt` on the real API server and the MAAS simulator: objects
//! written the Go provider's way (a recorded `spec.systemID`, no identity
//! anywhere) become capmaas's with one explicit, reviewed step, and nothing
//! that is not theirs is ever adopted.

mod support;

use serde_json::{json, Value};
use support::go_provider::{adopt, go_provider_machine, maas_machine, owned_maas_machine};
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

fn line<'a>(out: &'a str, object: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{object} ")))
        .unwrap_or_else(|| panic!("no line for {object} in:\n{out}"))
}

#[test]
fn go_provider_machines_are_adopted_once_and_nothing_else_is() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("adopt");
    let tenant = cp.new_namespace("adopt-tenant");
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
        .take(5)
        .collect();
    let [a, b, c, d, ready] = [&hosts[0], &hosts[1], &hosts[2], &hosts[3], &hosts[4]];
    let (go_a, go_b, go_c, go_d) = (
        go_provider_machine(&sim, a),
        go_provider_machine(&sim, b),
        go_provider_machine(&sim, c),
        go_provider_machine(&sim, d),
    );
    let ready_id = sim.system_id(ready);
    apply(cp, &[story::cluster(&ns), story::maas_cluster(&ns)]);
    for (name, id, host) in [("go-a", &go_a, a), ("go-b", &go_b, b), ("go-c", &go_c, c)] {
        owned_maas_machine(cp, &ns, name, id, Some(host));
    }
    // A Ready machine is nobody's: nothing to adopt.
    owned_maas_machine(cp, &ns, "ready", &ready_id, Some(ready));
    // Issue 19 item 6: a tenant names go-c's machine from its own
    // namespace, with a whole owner chain of its own; it cannot write
    // status, so the Go provider's hostname mark is missing.
    apply(cp, &[story::cluster(&tenant), story::maas_cluster(&tenant)]);
    owned_maas_machine(cp, &tenant, "thief", &go_c, None);
    // And in the cluster's namespace, pointing its owner reference at
    // go-b's Machine (whose infrastructureRef is go-b, not this).
    let mut borrowed = maas_machine(&ns, "borrowed", &go_b);
    let go_b_uid = cp.kubectl(&[
        "get",
        "machine",
        "go-b",
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    borrowed["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "go-b",
        "uid": go_b_uid.trim(), "controller": true,
    }]);
    apply(cp, &[borrowed]);
    // Two objects with every mark naming one machine: neither is adopted
    // until the administrator narrows the scope to the older one.
    owned_maas_machine(cp, &ns, "dup-old", &go_d, Some(d));
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let between = capmaas::kube::time::time(std::time::SystemTime::now());
    std::thread::sleep(std::time::Duration::from_millis(1100));
    owned_maas_machine(cp, &ns, "dup-new", &go_d, Some(d));
    let before = sim.state();
    let scope = ["--namespace", ns.as_str(), "--namespace", tenant.as_str()];

    // A dry run changes nothing and says what would happen, and why not.
    let dry = adopt(cp, &sim, &scope);
    let out = String::from_utf8_lossy(&dry.stdout);
    assert_eq!(dry.status.code(), Some(1), "refusals make it fail: {out}");
    for name in ["go-a", "go-b", "go-c"] {
        assert!(
            line(&out, &format!("{ns}/{name}")).contains(&format!("adopt as capmaas/{ns}/{name}/")),
            "{out}"
        );
    }
    assert!(
        line(&out, &format!("{tenant}/thief")).contains("REFUSED: no status.hostname"),
        "{out}"
    );
    assert!(
        line(&out, &format!("{ns}/borrowed")).contains("REFUSED: its owner Machine"),
        "{out}"
    );
    for name in ["dup-old", "dup-new"] {
        assert!(
            line(&out, &format!("{ns}/{name}")).contains("all carry the Go provider's marks"),
            "{out}"
        );
    }
    assert!(
        line(&out, &format!("{ns}/ready")).contains("not allocated to anyone"),
        "{out}"
    );
    assert!(out.contains("dry run: nothing was changed"), "{out}");
    assert_eq!(sim.state()["machines"], before["machines"], "dry run");

    // Issue 21 item 1: `--apply=false` used to apply.
    let mut no = scope.to_vec();
    no.push("--apply=false");
    let no = adopt(cp, &sim, &no);
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

    // --cluster: only that cluster's MaasMachines.
    let other = adopt(cp, &sim, &["--namespace", &ns, "--cluster", "another"]);
    let out = String::from_utf8_lossy(&other.stdout);
    assert!(
        out.contains("no MaasMachine records a MAAS machine"),
        "{out}"
    );

    let mut args = scope.to_vec();
    args.extend(["--created-before", between.as_str(), "--apply"]);
    let applied = adopt(cp, &sim, &args);
    let out = String::from_utf8_lossy(&applied.stdout);
    assert!(
        out.contains("4 adopted, 0 already adopted, 4 refused, 0 failed"),
        "{out}"
    );
    assert!(
        line(&out, &format!("{ns}/dup-new")).contains("created at or after --created-before"),
        "{out}"
    );
    for (name, id) in [
        ("go-a", &go_a),
        ("go-b", &go_b),
        ("go-c", &go_c),
        ("dup-old", &go_d),
    ] {
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
    assert_eq!(owner_data(&sim, &ready_id), json!({}), "untouched");

    // Running it again is harmless, and the tenant's object still gets
    // nothing: the machine is go-c's now.
    let again = adopt(
        cp,
        &sim,
        &["--namespace", &ns, "--namespace", &tenant, "--apply"],
    );
    let out = String::from_utf8_lossy(&again.stdout);
    assert!(out.contains("0 adopted, 4 already adopted"), "{out}");
    assert!(
        line(&out, &format!("{tenant}/thief")).contains(&format!("belongs to capmaas/{ns}/go-c/")),
        "{out}"
    );

    // Usage errors are exit code 2.
    let none = adopt(cp, &sim, &[]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("--all-namespaces"));
}
