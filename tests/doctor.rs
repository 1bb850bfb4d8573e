//! `capmaas doctor` on the real API server and the MAAS simulator: a sound
//! setup passes, then each check is made to fail in turn (a missing image,
//! pool, tag, zone, DNS domain, too little capacity, a bad API key, an
//! unreachable MAAS, TLS against a plain-http MAAS, a non-admin user, a
//! deploy option the MAAS release lacks, a pool a MAAS 3.8 user may not
//! allocate from), and orphans are reported, planned and released only with
//! `--apply`.
//!
//! One test function: doctor reads every namespace, so the phases must not
//! run in parallel against the same control plane.

mod support;

use capmaas::maas::MaasApi;
use std::process::{Command, Output};

use capmaas::maas::{AllocateRequest, IDENTITY_KEY};
use serde_json::{json, Value};
use support::maas_sim::MaasSim;
use support::story;
use support::ControlPlane;

const ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/agent-name";

fn doctor_with(cp: &ControlPlane, endpoint: &str, key: &str, args: &[&str]) -> (i32, String) {
    let out: Output = Command::new(story::capmaas_bin())
        .arg("doctor")
        .args(args)
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .env("MAAS_ENDPOINT", endpoint)
        .env("MAAS_API_KEY", key)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run capmaas doctor");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn doctor(cp: &ControlPlane, sim: &MaasSim, args: &[&str]) -> (i32, String) {
    doctor_with(cp, &sim.url, &sim.api_key, args)
}

fn apply(cp: &ControlPlane, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    cp.kubectl_stdin(&["apply", "-f", "-"], &list.to_string());
}

fn line<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{out}"))
}

/// Allocates a free machine in the simulator under `identity`.
fn allocated_under(sim: &MaasSim, hostname: &str, identity: &str) -> String {
    let maas = sim.client();
    let machine = maas
        .allocate(&AllocateRequest {
            name: Some(hostname.into()),
            agent_name: Some(identity.into()),
            ..AllocateRequest::default()
        })
        .expect("allocate");
    maas.set_owner_data(&machine.system_id, &[(IDENTITY_KEY, Some(identity))])
        .expect("owner data");
    machine.system_id
}

#[test]
fn doctor_passes_a_sound_setup_and_fails_each_broken_check() {
    let cp = support::control_plane();
    let ns = cp.new_namespace("doctor");
    let sim = MaasSim::start(None);

    // A sound setup: the story's cluster, a control-plane machine, a
    // template and a MachineDeployment of 2 (6 worker machines match).
    let mut objects = vec![story::maas_cluster(&ns), story::cluster(&ns)];
    objects.extend(story::control_plane_machine(&ns, "cp-0"));
    objects.push(story::maas_machine_template(&ns));
    objects.push(story::machine_deployment(&ns, 2));
    apply(cp, &objects);
    let (code, out) = doctor(cp, &sim, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line(&out, "[ OK ] MAAS reachable:").contains("plain http"),
        "{out}"
    );
    assert!(line(&out, "[ OK ] API key:").contains("\"admin\""), "{out}");
    line(&out, "[ OK ] rights: MAAS administrator");
    // Real MAAS 3.4.8 answers "3.4.8"; before 3.8 there is no pool note.
    line(&out, "[ OK ] MAAS version: 3.4.8");
    assert!(!out.contains("pool rights"), "{out}");
    assert!(
        line(&out, "[WARN] transport:").contains("plain http://"),
        "{out}"
    );
    line(&out, &format!("[ OK ] image {}:", story::IMAGE));
    line(&out, "[ OK ] resource pool worker-pool:");
    line(&out, "[ OK ] resource pool cp-pool:");
    line(&out, "[ OK ] tag worker:");
    line(&out, "[ OK ] DNS domain k8s.maas:");
    let capacity = line(
        &out,
        &format!("[ OK ] capacity of MaasMachineTemplate {ns}/"),
    );
    assert!(
        capacity.contains("6 free machines match; 2 replicas asked"),
        "{out}"
    );
    line(&out, "[ OK ] orphans:");
    assert!(out.trim_end().ends_with("0 failed"), "{out}");

    // Each reference broken in turn, and more replicas than machines.
    let mut template = story::maas_machine_template(&ns);
    template["metadata"]["name"] = json!("broken");
    template["spec"]["template"]["spec"] = json!({
        "image": "custom/u-2204-0-k-1264-1", "resourcePool": "no-such-pool",
        "tags": ["worker", "no-such-tag"], "failureDomain": "no-such-zone",
        "minCPU": 8, "minMemory": 16384,
    });
    let mut deployment = story::machine_deployment(&ns, 40);
    deployment["metadata"]["name"] = json!("big");
    deployment["spec"]["template"]["spec"]["infrastructureRef"]["name"] = json!("broken");
    let mut other_cluster = story::maas_cluster(&ns);
    other_cluster["metadata"]["name"] = json!("other");
    other_cluster["spec"]["dnsDomain"] = json!("no-such.domain");
    apply(cp, &[template, deployment, other_cluster]);
    let (code, out) = doctor(cp, &sim, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line(&out, "[FAIL] image custom/u-2204-0-k-1264-1:")
            .contains(&format!("did you mean {}", story::IMAGE)),
        "{out}"
    );
    line(&out, "[FAIL] resource pool no-such-pool:");
    line(&out, "[FAIL] tag no-such-tag:");
    line(&out, "[FAIL] zone no-such-zone:");
    line(&out, "[FAIL] DNS domain no-such.domain:");
    assert!(
        line(
            &out,
            &format!("[FAIL] capacity of MaasMachineTemplate {ns}/broken:")
        )
        .contains("short by 40"),
        "{out}"
    );
    line(&out, "[ OK ] tag worker:");
    for kind in [
        "maasmachinetemplate/broken",
        "machinedeployment/big",
        "maascluster/other",
    ] {
        cp.kubectl(&["delete", kind, "-n", &ns, "--wait=false"]);
    }

    // Orphans: one machine under an identity nobody claims, one claimed.
    let orphan_identity = format!("capmaas/{ns}/gone/uid-1");
    let orphan = allocated_under(&sim, "worker-5", &orphan_identity);
    let claimed_identity = format!("capmaas/{ns}/claimed/uid-2");
    let claimed = allocated_under(&sim, "worker-6", &claimed_identity);
    let mut claimed_object = story::control_plane_machine(&ns, "claimed")[0].clone();
    claimed_object["metadata"]["annotations"] = json!({ANNOTATION: claimed_identity});
    claimed_object["spec"]["systemID"] = json!(claimed);
    apply(cp, &[claimed_object]);
    let (code, out) = doctor(cp, &sim, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line(&out, "[FAIL] orphans:").contains("1 machines"),
        "{out}"
    );
    assert!(line(&out, &orphan).contains(&orphan_identity), "{out}");
    assert!(
        !out.contains(&claimed),
        "a claimed machine is no orphan: {out}"
    );
    assert!(out.contains("--release-orphans"), "{out}");

    // The plan changes nothing.
    let before = sim.state()["machines"].clone();
    let (code, out) = doctor(cp, &sim, &["--release-orphans"]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, &orphan).ends_with("would release"), "{out}");
    assert!(out.contains("dry run: nothing was released"), "{out}");
    assert_eq!(sim.state()["machines"], before, "dry run");
    // Issue 21 item 1: `--apply=false` used to release.
    let (code, out) = doctor(cp, &sim, &["--release-orphans", "--apply=false"]);
    assert_eq!(code, 1, "{out}");
    assert!(line(&out, &orphan).ends_with("would release"), "{out}");
    assert_eq!(
        sim.state()["machines"],
        before,
        "--apply=false releases nothing"
    );
    for bad in [
        ["--release-orphans", "--apply=maybe"],
        ["--release-orphans", "--apply=0"],
        ["--release-orphans=no", "--apply"],
    ] {
        let (code, out) = doctor(cp, &sim, &bad);
        assert_eq!(code, 2, "{bad:?}: {out}");
        assert!(out.starts_with("capmaas doctor: --"), "{bad:?}: {out}");
        assert!(out.contains("expected"), "{bad:?}: {out}");
    }
    assert_eq!(
        sim.state()["machines"],
        before,
        "refused flags release nothing"
    );

    let (code, out) = doctor(cp, &sim, &["--release-orphans", "--apply"]);
    assert_eq!(code, 0, "{out}");
    assert!(line(&out, &orphan).ends_with("released"), "{out}");
    let released = sim.machine_state(&orphan);
    assert_ne!(released["status_name"], "Allocated", "{released}");
    assert_eq!(sim.machine_state(&claimed)["status_name"], "Allocated");
    assert_eq!(
        sim.machine_state(&claimed)["owner_data"][IDENTITY_KEY],
        json!(claimed_identity)
    );

    // Credentials and reachability.
    let (code, out) = doctor_with(cp, &sim.url, "aaaa:bbbb:cccc", &[]);
    assert_eq!(code, 1, "{out}");
    line(&out, "[ OK ] MAAS reachable:");
    line(&out, "[FAIL] API key:");
    let closed = format!("http://127.0.0.1:{}/MAAS", story::free_port());
    let (code, out) = doctor_with(cp, &closed, &sim.api_key, &[]);
    assert_eq!(code, 1, "{out}");
    line(&out, "[FAIL] MAAS reachable:");
    let tls = sim.url.replace("http://", "https://");
    let (code, out) = doctor_with(cp, &tls, &sim.api_key, &[]);
    assert_eq!(code, 1, "{out}");
    line(&out, "[FAIL] MAAS reachable:");
    if let Some(key) = sim.non_admin_key() {
        let (_, out) = doctor_with(cp, &sim.url, &key, &[]);
        assert!(
            line(&out, "[WARN] rights:").contains("not a MAAS administrator"),
            "{out}"
        );
    }

    // Values as Secrets carry them (issue 22 item 7): a trailing newline
    // or spaces around the endpoint and the key are trimmed, at start-up
    // from the environment and in a cluster's identity Secret alike.
    let (code, out) = doctor_with(
        cp,
        &format!(" {}\n", sim.url),
        &format!("{}\r\n", sim.api_key),
        &[],
    );
    assert_eq!(code, 0, "{out}");
    line(&out, "[ OK ] API key:");
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "padded-maas", "namespace": ns},
        "stringData": {"MAAS_ENDPOINT": format!("{}/\n", sim.url),
                       "MAAS_API_KEY": format!("  {}\n", sim.api_key)}});
    let mut tenant = story::maas_cluster(&ns);
    tenant["metadata"]["name"] = json!("tenant");
    tenant["spec"]["identityRef"] = json!({"kind": "Secret", "name": "padded-maas"});
    apply(cp, &[secret, tenant]);
    let (code, out) = doctor(cp, &sim, &[]);
    assert_eq!(code, 0, "{out}");
    line(
        &out,
        &format!("[ OK ] credentials of MaasCluster {ns}/tenant (Secret padded-maas): valid"),
    );
    // Garbage inside a value is refused, naming the value, never showing
    // the key; no request is made with it.
    let (consumer, rest) = sim.api_key.split_once(':').expect("three-part key");
    let garbled = format!("{consumer}:{rest}\nleftover-from-a-paste");
    let (code, out) = doctor_with(cp, &sim.url, &garbled, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("MAAS_API_KEY: invalid MAAS API key: the token secret contains whitespace"),
        "{out}"
    );
    for part in garbled.split([':', '\n']) {
        assert!(!out.contains(part), "{part:?} shown in {out}");
    }
    let broken_url = sim.url.replacen("//", "//\n", 1);
    let (code, out) = doctor_with(cp, &broken_url, &sim.api_key, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("MAAS_ENDPOINT: ")
            && out.contains("contains whitespace or control characters"),
        "{out}"
    );
    // A deploy option this MAAS release lacks (issue 22): the option and
    // the template asking for it are named.
    let mut spare = story::maas_machine_template(&ns);
    spare["metadata"]["name"] = json!("spare");
    spare["spec"]["template"]["spec"]["resourcePool"] = json!("spare-pool");
    spare["spec"]["template"]["spec"]["enableKernelCrashDump"] = json!(true);
    apply(cp, &[spare]);
    let (code, out) = doctor(cp, &sim, &[]);
    assert_eq!(code, 1, "{out}");
    let options = line(&out, "[FAIL] deploy options:");
    assert!(
        options.contains("spec.enableKernelCrashDump: true needs MAAS 3.6 or newer")
            && options.contains("this MAAS is 3.4.8")
            && options.contains(&format!("MaasMachineTemplate {ns}/spare")),
        "{out}"
    );

    // From MAAS 3.8 on, a non-admin user's rights per resource pool (its
    // groups' can_deploy_machines) are probed with dry-run allocations:
    // worker-pool shows Ready machines but offers none, spare-pool has no
    // machine to tell by.
    let mut inventory = support::maas_sim::story_inventory();
    inventory["settings"]["maas_version"] = json!("3.8.0");
    inventory["pools"]
        .as_array_mut()
        .expect("story pools")
        .push(json!({"name": "spare-pool"}));
    for key in inventory["api_keys"].as_array_mut().expect("story keys") {
        if key["is_superuser"] == json!(false) {
            key["deploy_pools"] = json!(["cp-pool", "spare-pool"]);
        }
    }
    let sim38 = MaasSim::start(Some(&inventory));
    let key = sim38
        .non_admin_key()
        .expect("story.json has a non-admin user");
    let before = sim38.state()["machines"].clone();
    let (code, out) = doctor_with(cp, &sim38.url, &key, &[]);
    assert_eq!(code, 1, "{out}");
    line(&out, "[ OK ] MAAS version: 3.8.0");
    line(&out, "[ OK ] deploy options:");
    assert!(
        line(&out, "[ OK ] pool rights cp-pool:").contains("a dry run picked cp-"),
        "{out}"
    );
    let denied = line(&out, "[FAIL] pool rights worker-pool:");
    assert!(
        denied.contains("cannot allocate from pool worker-pool")
            && denied.contains("can_deploy_machines on pool worker-pool")
            && denied.contains(&format!("MaasMachineTemplate {ns}/")),
        "{out}"
    );
    assert!(
        line(&out, "[WARN] pool rights spare-pool:").contains("cannot tell"),
        "{out}"
    );
    assert_eq!(
        sim38.state()["machines"],
        before,
        "dry runs allocate nothing"
    );
    let (_, out) = doctor(cp, &sim38, &[]);
    line(&out, "[ OK ] MAAS version: 3.8.0");
    assert!(
        !out.contains("pool rights"),
        "admins hold every right: {out}"
    );
    cp.kubectl(&[
        "delete",
        "maasmachinetemplate/spare",
        "-n",
        &ns,
        "--wait=false",
    ]);

    // Usage errors are exit code 2.
    let (code, out) = doctor(cp, &sim, &["--apply"]);
    assert_eq!(code, 2, "{out}");
}
