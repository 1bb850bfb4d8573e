//! The local lab: the README story running on this machine, for people to
//! watch and poke. Run it with `tests/lab.sh up` (and `tests/lab.sh down`);
//! the script runs this ignored test in the background:
//!
//!     cargo test --test lab -- --ignored --nocapture
//!
//! It starts the real control plane, the real Cluster API core manager,
//! `maas-sim` with the story inventory, `capmaas` and the node helper,
//! applies the story (tests/support/story.rs) in namespace `default`, prints
//! a table of MaasMachines and Machines whenever it changes, announces when
//! every machine is Ready, and then keeps running (still printing changes)
//! until the file `stop` appears in the lab directory.
//!
//! Lab directory: `$CAPMAAS_LAB_DIR`, default `<repo>/.cache/lab`. It gets
//! `kubeconfig` (a copy of the control plane's admin kubeconfig), `env`
//! (paths for tests/lab.sh) and `capmaas.log`. The simulator's deploy time is
//! `$CAPMAAS_LAB_DEPLOY_SECONDS` (default 5).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::story::{LabOptions, StoryLab, CLUSTER, MD};

/// The line tests/lab.sh waits for.
const READY_LINE: &str = "LAB READY: every machine is Ready";

fn lab_dir() -> PathBuf {
    std::env::var_os("CAPMAAS_LAB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::repo_root().join(".cache/lab"))
}

fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

#[test]
#[ignore = "the local lab; run with tests/lab.sh up"]
fn lab() {
    let dir = lab_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let stop_file = dir.join("stop");
    let _ = std::fs::remove_file(&stop_file);
    let deploy_seconds: f64 = std::env::var("CAPMAAS_LAB_DEPLOY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);

    let started = Instant::now();
    let mut options = LabOptions::new(dir.clone());
    options.namespace = Some("default".into());
    options.deploy_seconds = deploy_seconds;
    let mut lab = StoryLab::start(options);

    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(&lab.cp.kubeconfig, &kubeconfig).unwrap();
    let kubectl = lab.cp.bin_dir.join("kubectl");
    std::fs::write(
        dir.join("env"),
        format!(
            "KUBECTL={}\nKUBECONFIG={}\nNAMESPACE={}\nMAAS_URL={}\nCAPMAAS_LOG={}\nCAPI_LOG={}\nCONTROL_PLANE_DIR={}\n",
            kubectl.display(),
            kubeconfig.display(),
            lab.ns,
            lab.sim.url,
            lab.capmaas.log.display(),
            lab.capi.log.display(),
            lab.cp.dir.display(),
        ),
    )
    .unwrap();

    lab.apply_story();
    println!(
        "lab [{:>5.1}s] applied the story: Cluster {CLUSTER}, 3 control-plane Machines, MachineDeployment {MD} of 5",
        started.elapsed().as_secs_f64()
    );
    let print = |s: &support::story::Snapshot| print!("\n--- {}\n{}", now(), s.table());
    let snapshot = lab.wait_all_ready(900, Duration::from_secs(1), print);
    let k = format!(
        "{} --kubeconfig {}",
        kubectl.display(),
        kubeconfig.display()
    );
    println!(
        "\n{READY_LINE} ({}/{}) after {:.1}s\n\
         \n  kubeconfig: {}\n\
         \n  {k} get maasmachines\
         \n  {k} get machines\
         \n  {k} scale machinedeployment {MD} --replicas=2\
         \n  tests/lab.sh status\
         \n  tests/lab.sh down\n\
         \nlogs: capmaas {}, cluster-api {}; the lab keeps running and prints every change.\n",
        snapshot.ready_count(),
        snapshot.expected_machines(),
        started.elapsed().as_secs_f64(),
        kubeconfig.display(),
        lab.capmaas.log.display(),
        lab.capi.log.display(),
    );

    let mut last = snapshot;
    while !stop_file.exists() {
        lab.check_processes();
        match lab.snapshot() {
            Ok(s) if s != last => {
                print(&s);
                if s.all_ready() && !last.all_ready() {
                    println!("every machine is Ready again ({})", s.ready_count());
                }
                last = s;
            }
            Ok(_) => {}
            Err(e) => println!("lab: reading the story: {e}"),
        }
        lab.nudge_machines();
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("lab: stop file found, tearing down");
    let _ = std::fs::remove_file(&stop_file);
}
