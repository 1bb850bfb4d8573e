//! Test support: one real control plane (kube-apiserver + etcd built from Go
//! modules, Cluster API CRDs installed) per test binary, and a second one for
//! the tests that need two management clusters (`clusterctl move`).
//!
//! Tests isolate themselves by namespace (`new_namespace`). The processes are
//! torn down when the test binary exits, however it exits: a watchdog process
//! (`control-plane.sh stop-on-eof`) holds the read end of a pipe whose write end
//! only this process has, and stops the control plane when it reads EOF.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

pub mod api_probe;
pub mod capi;
pub mod clusterctl;
pub mod go_provider;
pub mod guard;
pub mod ipam;
pub mod kcp_lab;
pub mod maas_sim;
pub mod maas_timeline;
pub mod netns;
pub mod nodes;
pub mod objects;
pub mod real_maas;
pub mod service_account;
pub mod skip;
pub mod story;
pub mod workload_sim;

pub struct ControlPlane {
    /// `https://127.0.0.1:PORT`
    pub server: String,
    /// The etcd client URL (`http://127.0.0.1:PORT`), e.g. for compaction.
    pub etcd: String,
    pub dir: PathBuf,
    /// Admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
    pub ca_file: PathBuf,
    pub ca_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    /// Holds `kube-apiserver`, `etcd` and `kubectl`.
    pub bin_dir: PathBuf,
    watchdog: Mutex<Child>,
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/maas-fixtures` beside the checkout (see [`skip::shared_dir`]),
/// when present.
pub fn fixtures_dir() -> Option<PathBuf> {
    let dir = skip::shared_dir().join("maas-fixtures");
    dir.is_dir().then_some(dir)
}

/// The control plane of this test binary, started on first use.
pub fn control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}")))
}

/// A second control plane of this test binary (a `clusterctl move` target),
/// independent of the first: its own etcd, API server, CA and directory,
/// torn down by its own watchdog the same way.
pub fn second_control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| {
        ControlPlane::start().unwrap_or_else(|e| panic!("second control plane: {e}"))
    })
}

impl ControlPlane {
    fn start() -> Result<ControlPlane, String> {
        let script = repo_root().join("tests/support/control-plane.sh");
        // Not under the scratch root: this watchdog reads its pid files at
        // exit, while the scratch root's watchdog may already be deleting.
        let dir = fresh_dir(&std::env::temp_dir(), "capmaas-cp")?;
        // The watchdog goes first, so that a failed start is cleaned up too.
        let watchdog = Command::new(&script)
            .arg("stop-on-eof")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawning watchdog: {e}"))?;
        let status = Command::new(&script)
            .arg("start")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .status()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !status.success() {
            return Err(format!(
                "{} start failed ({status}); logs in {}",
                script.display(),
                dir.display()
            ));
        }
        let env = std::fs::read_to_string(dir.join("env")).map_err(|e| e.to_string())?;
        let var = |key: &str| -> Result<String, String> {
            env.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
                .map(str::to_string)
                .ok_or_else(|| format!("{key} missing from env file"))
        };
        let pki = dir.join("pki");
        Ok(ControlPlane {
            server: var("SERVER")?,
            etcd: var("ETCD")?,
            kubeconfig: dir.join("kubeconfig"),
            ca_file: pki.join("ca.crt"),
            ca_key: pki.join("ca.key"),
            admin_cert: pki.join("admin.crt"),
            admin_key: pki.join("admin.key"),
            bin_dir: PathBuf::from(var("BIN")?),
            dir,
            watchdog: Mutex::new(watchdog),
        })
    }

    /// Runs kubectl with the admin kubeconfig; panics on failure, returns stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_stdin(args, "")
    }

    /// Runs kubectl with `input` on its standard input.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> String {
        match self.try_kubectl(args, input) {
            Ok(out) => out,
            Err(e) => panic!("kubectl {}: {e}", args.join(" ")),
        }
    }

    /// Runs kubectl; `Err(stderr)` when it fails.
    pub fn try_kubectl(&self, args: &[&str], input: &str) -> Result<String, String> {
        let mut child = Command::new(self.bin_dir.join("kubectl"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `kubectl apply` of one object.
    pub fn apply(&self, obj: &serde_json::Value) {
        self.kubectl_stdin(&["apply", "-f", "-"], &obj.to_string());
    }

    /// One object as JSON, if it exists.
    pub fn get(&self, ns: &str, kind: &str, name: &str) -> Option<serde_json::Value> {
        let out = self
            .try_kubectl(&["get", kind, name, "-n", ns, "-o", "json"], "")
            .ok()?;
        serde_json::from_str(&out).ok()
    }

    /// What Cluster API does for one machine of `cluster`: the bootstrap
    /// Secret, the Machine, and the MaasMachine it owns (labels + owner
    /// reference).
    pub fn add_machine(
        &self,
        ns: &str,
        cluster: &str,
        name: &str,
        control_plane: bool,
        spec: serde_json::Value,
    ) {
        self.apply(&capi::bootstrap_secret(
            ns,
            &story::bootstrap_secret_name(name),
            cluster,
        ));
        self.apply(&objects::machine(ns, cluster, name, control_plane));
        let machine = self
            .get(ns, "machines.cluster.x-k8s.io", name)
            .unwrap_or_else(|| panic!("Machine {ns}/{name} not found"));
        let machine_uid = objects::string(&machine["metadata"]["uid"]);
        self.apply(&objects::owned_maas_machine(
            ns,
            cluster,
            name,
            control_plane,
            &machine_uid,
            spec,
        ));
    }

    /// Creates a namespace with a name unique to this process.
    pub fn new_namespace(&self, prefix: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.kubectl(&["create", "namespace", &name]);
        name
    }

    /// Issues a serving certificate for `ips` (and localhost) signed by the
    /// control plane's CA; returns (certificate, key) paths.
    pub fn issue_serving_cert(&self, name: &str, ips: &[&str]) -> (PathBuf, PathBuf) {
        let script = repo_root().join("tests/support/control-plane.sh");
        let status = Command::new(script)
            .arg("cert")
            .arg(&self.dir)
            .arg(name)
            .args(ips)
            .status()
            .expect("running control-plane.sh cert");
        assert!(status.success(), "issuing certificate {name}");
        let pki = self.dir.join("pki");
        (
            pki.join(format!("{name}.crt")),
            pki.join(format!("{name}.key")),
        )
    }

    /// Stops the control plane now (tests of teardown; normally the watchdog
    /// does this when the test binary exits).
    pub fn stop(&self) {
        if let Ok(mut child) = self.watchdog.lock() {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

/// A fresh directory under this test binary's scratch root, which is removed
/// when the binary exits, however it exits (set `CAPMAAS_KEEP_TEST_DIRS=1` to
/// keep it for a post-mortem).
pub fn tempdir(prefix: &str) -> Result<PathBuf, String> {
    fresh_dir(scratch_root()?, prefix)
}

/// The scratch root: one directory per test binary and a watchdog (`sh`)
/// holding the read end of a pipe whose write end only this process has; at
/// EOF (the process is gone) it deletes the root.
fn scratch_root() -> Result<&'static Path, String> {
    static ROOT: OnceLock<Result<(PathBuf, Mutex<Child>), String>> = OnceLock::new();
    let root = ROOT.get_or_init(|| {
        let root = fresh_dir(&std::env::temp_dir(), "capmaas-tests")?;
        let keep = std::env::var_os("CAPMAAS_KEEP_TEST_DIRS").is_some_and(|v| !v.is_empty());
        let cleanup = if keep {
            "cat >/dev/null"
        } else {
            "cat >/dev/null; rm -rf -- \"$0\""
        };
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!("trap '' INT HUP TERM; {cleanup}"))
            .arg(&root)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawning the scratch directory's watchdog: {e}"))?;
        Ok((root, Mutex::new(watchdog)))
    });
    match root {
        Ok((path, _)) => Ok(path),
        Err(e) => Err(e.clone()),
    }
}

/// A fresh directory under `parent`, named after `prefix`, this process and
/// a counter.
fn fresh_dir(parent: &Path, prefix: &str) -> Result<PathBuf, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = parent.join(format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Polls `check` every 100 ms until it returns `Some`, or panics with `what`
/// after `seconds`.
pub fn eventually<T>(seconds: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Some(v) = check() {
            return v;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {seconds}s waiting for {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Polls `check` every 500 ms, printing how long `what` took; panics after
/// `seconds` with `diagnostics()` (what MAAS and the cluster looked like).
pub fn wait_explained<T>(
    seconds: u64,
    what: &str,
    diagnostics: impl Fn() -> String,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            println!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
            return v;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(seconds),
            "timed out after {seconds}s waiting for {what}\n{}",
            diagnostics()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}
