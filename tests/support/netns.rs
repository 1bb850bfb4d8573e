//! Runs a test inside a network namespace of its own, so that it can give
//! machines real IP addresses and resolve names through the MAAS
//! simulator's DNS without touching the host's network.
//!
//! ```ignore
//! #[test]
//! fn my_lab_test() {
//!     let Some(_inside) = netns::run_inside("my_lab_test", &network) else {
//!         return; // outer process: the test ran inside and passed (or skipped)
//!     };
//!     // ... here every address of `network` is on the loopback, and
//!     // /etc/resolv.conf names `network.nameserver`
//! }
//! ```
//!
//! The outer test process creates the namespace (tests/support/netns.sh:
//! loopback up, the addresses as /32 on it, `/etc/netns/<name>/resolv.conf`)
//! and runs its own test binary again inside it with `ip netns exec`,
//! filtered to the one test, with `CAPMAAS_NETNS=<name>` set. Everything the
//! test starts (API server, etcd, Cluster API managers, simulator, capmaas,
//! workload-sim) then runs inside, and only addresses inside are used.
//! When the inner run ends, however it ends, the namespace, its leftover
//! processes and `/etc/netns/<name>` are removed: by `Drop`, and by a
//! watchdog (`netns.sh delete-on-eof`) if the test process dies without
//! unwinding.
//!
//! Creating namespaces needs root; elsewhere the test prints why it skips
//! and passes (CI runs as root).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use super::repo_root;

/// Set in the inner process: the name of the namespace it runs in.
pub const ENV: &str = "CAPMAAS_NETNS";

/// What the namespace holds.
pub struct Network {
    /// Name prefix; the process id is appended.
    pub prefix: &'static str,
    /// The one `nameserver` of the namespace's resolv.conf.
    pub nameserver: String,
    /// Addresses put on the namespace's loopback (the nameserver's too).
    pub addresses: Vec<String>,
}

/// The namespace this process runs in, when it is the inner run.
pub fn current() -> Option<String> {
    std::env::var(ENV).ok().filter(|n| !n.is_empty())
}

/// In the inner process: `Some(namespace name)`, run the test. In the outer
/// one: runs `test` (its name in this test binary) inside a new namespace
/// and returns `None` once it passed (panics if it failed); also `None`,
/// after saying why, where namespaces cannot be created.
pub fn run_inside(test: &str, network: &Network) -> Option<String> {
    if let Some(name) = current() {
        return Some(name);
    }
    if let Err(why) = can_create() {
        super::skip::skip(
            test,
            &format!(
                "it runs its lab in a network namespace of its own, and {why}; run it as root (CI does)"
            ),
        );
        return None;
    }
    // One lab at a time: each is a whole cluster, and two would share 2
    // cores (the harness runs a binary's tests in parallel).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let ns = Namespace::create(network);
    println!("{test}: running inside network namespace {}", ns.name);
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(&exe)
        .args([
            test,
            "--exact",
            "--nocapture",
            "--include-ignored",
            "--test-threads=1",
        ])
        .env(ENV, &ns.name)
        .stdin(Stdio::null())
        .status()
        .expect("running ip netns exec");
    drop(ns);
    assert!(
        status.success(),
        "{test} failed inside its network namespace ({status}); its output is above"
    );
    None
}

/// `Ok` when this process may create network namespaces, else why not.
pub fn can_create() -> Result<(), String> {
    let out = Command::new(script())
        .arg("check")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running netns.sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

fn script() -> PathBuf {
    repo_root().join("tests/support/netns.sh")
}

/// The name [`run_inside`] gives the namespace it creates for `network`
/// (known to the outer process before the inner one runs).
pub fn name(network: &Network) -> String {
    format!("{}-{}", network.prefix, std::process::id())
}

/// A created namespace; removed on drop.
pub struct Namespace {
    pub name: String,
    watchdog: Child,
}

impl Namespace {
    pub fn create(network: &Network) -> Namespace {
        let name = name(network);
        // The watchdog goes first, so that a failed setup is cleaned up too.
        let watchdog = Command::new(script())
            .args(["delete-on-eof", &name])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawning the namespace watchdog");
        let status = Command::new(script())
            .args(["create", &name, &network.nameserver])
            .args(&network.addresses)
            .stdin(Stdio::null())
            .status()
            .expect("running netns.sh create");
        assert!(status.success(), "creating network namespace {name}");
        Namespace { name, watchdog }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // EOF on the watchdog's stdin: it stops what is left and deletes.
        drop(self.watchdog.stdin.take());
        let _ = self.watchdog.wait();
    }
}
