//! The real Cluster API managers (core, KubeadmControlPlane, kubeadm
//! bootstrap), each run out of cluster next to the test control plane (see
//! shared/reference/capi-core-local.md for why each step is needed).
//!
//! ```ignore
//! let cp = support::control_plane();
//! let capi = support::capi::CapiManager::start(cp); // the core manager
//! let kcp = CapiManager::start_provider(cp, Provider::KubeadmControlPlane);
//! // Cluster API objects are now defaulted, validated and converted by the
//! // real webhooks, and reconciled by the real controllers.
//! drop(capi); // webhook configurations removed, CRDs back to conversion
//!             // None, manager stopped
//! ```
//!
//! What `start_provider` does, in order:
//! 1. builds (or finds in `.cache/`) the managers with
//!    `tests/capi-testbin/build.sh`, which also copies each provider's CRD
//!    bases and `config/webhook/manifests.yaml` beside them;
//! 2. issues a serving certificate for 127.0.0.1 signed by the control
//!    plane's CA (the webhook server cannot be turned off, and it exits
//!    without `tls.crt`/`tls.key`);
//! 3. starts the manager: leader election off (there is no in-cluster
//!    namespace), health and diagnostics on loopback ports, the webhook
//!    server on a free port (it binds every interface: there is no host flag);
//! 4. waits for `/readyz` (it only answers once the webhook server serves TLS);
//! 5. labels the provider's CRDs with the contract versions they serve
//!    (`cluster.x-k8s.io/v1beta2: v1beta2`, as the release's kustomize
//!    does; Cluster API reads a referenced object's contract from them),
//!    registers the provider's Mutating/ValidatingWebhookConfiguration with
//!    `service:` references rewritten to `url: https://127.0.0.1:PORT/...`
//!    and the CA as `caBundle`, and points its CRDs' conversion at
//!    `/convert` on the same server;
//! 6. waits until a server-side dry-run create shows the webhooks in effect
//!    (a bare MachineDeployment or KubeadmControlPlane comes back
//!    defaulted, an ignition KubeadmConfig is refused): the apiserver picks
//!    up webhook configurations asynchronously, and an object created
//!    before that skips them.
//!
//! The manager runs under a guard (tests/support/guard.rs), so it also dies
//! when the test binary dies without unwinding. With a panic, `Drop` runs as
//! usual.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use super::guard::Guarded;
use super::{repo_root, ControlPlane};

/// Names of the core's registered webhook configurations (kustomize would
/// prefix the upstream names with `capi-` in a release the same way).
pub const MUTATING_CONFIG: &str = "capi-mutating-webhook-configuration";
pub const VALIDATING_CONFIG: &str = "capi-validating-webhook-configuration";

/// Group of the Cluster API core objects; tests always write v1beta2.
pub const CAPI_API_VERSION: &str = "cluster.x-k8s.io/v1beta2";
pub const KCP_API_VERSION: &str = "controlplane.cluster.x-k8s.io/v1beta2";
pub const CABPK_API_VERSION: &str = "bootstrap.cluster.x-k8s.io/v1beta2";

/// The Cluster API managers tests/capi-testbin builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    Core,
    KubeadmControlPlane,
    KubeadmBootstrap,
}

impl Provider {
    pub fn binary(self) -> &'static str {
        match self {
            Provider::Core => "cluster-api-manager",
            Provider::KubeadmControlPlane => "kcp-manager",
            Provider::KubeadmBootstrap => "cabpk-manager",
        }
    }

    /// Its directory under the build's `manifests/`.
    fn manifests(self) -> &'static str {
        match self {
            Provider::Core => "core",
            Provider::KubeadmControlPlane => "kcp",
            Provider::KubeadmBootstrap => "cabpk",
        }
    }

    /// The prefix a release's kustomize gives its webhook configurations.
    pub fn config_prefix(self) -> &'static str {
        match self {
            Provider::Core => "capi-",
            Provider::KubeadmControlPlane => "capi-kubeadm-control-plane-",
            Provider::KubeadmBootstrap => "capi-kubeadm-bootstrap-",
        }
    }

    /// A server-side dry-run create that only succeeds (`Ok(check)`) or
    /// fails (`Err(text)`) the expected way once the webhooks are in effect.
    fn webhook_probe(self) -> (Value, WebhookEffect) {
        let meta = json!({"name": "capi-webhook-probe", "namespace": "default"});
        match self {
            Provider::Core => (
                json!({
                    "apiVersion": CAPI_API_VERSION,
                    "kind": "MachineDeployment",
                    "metadata": meta,
                    "spec": {
                        "clusterName": "probe",
                        "template": {"spec": {
                            "clusterName": "probe",
                            "bootstrap": {"dataSecretName": "probe"},
                            "infrastructureRef": {
                                "apiGroup": "infrastructure.cluster.x-k8s.io",
                                "kind": "MaasMachineTemplate",
                                "name": "probe",
                            },
                        }},
                    },
                }),
                WebhookEffect::Defaults("/spec/rollout/strategy/type", "RollingUpdate"),
            ),
            Provider::KubeadmControlPlane => (
                json!({
                    "apiVersion": KCP_API_VERSION,
                    "kind": "KubeadmControlPlane",
                    "metadata": meta,
                    "spec": {
                        "version": "1.26.4",
                        "machineTemplate": {"spec": {"infrastructureRef": {
                            "apiGroup": "infrastructure.cluster.x-k8s.io",
                            "kind": "MaasMachineTemplate",
                            "name": "probe",
                        }}},
                    },
                }),
                WebhookEffect::Defaults("/spec/version", "v1.26.4"),
            ),
            Provider::KubeadmBootstrap => (
                json!({
                    "apiVersion": CABPK_API_VERSION,
                    "kind": "KubeadmConfig",
                    "metadata": meta,
                    "spec": {"format": "ignition"},
                }),
                WebhookEffect::Refuses("KubeadmBootstrapFormatIgnition"),
            ),
        }
    }
}

/// The Cluster API feature gates a manager starts with; the default is
/// v1.13's shipped defaults (MachinePool on, ClusterTopology off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// ClusterClass and managed topologies: the core's topology
    /// controllers, and the ClusterClass template webhooks of the core, KCP
    /// and CABPK (they refuse templates while it is off).
    pub cluster_topology: bool,
}

/// How a webhook probe shows the webhooks are in effect.
enum WebhookEffect {
    /// The JSON pointer comes back with this value.
    Defaults(&'static str, &'static str),
    /// The create is refused with a message containing this text.
    Refuses(&'static str),
}

pub struct CapiManager {
    cp: &'static ControlPlane,
    pub provider: Provider,
    process: Guarded,
    /// Scratch directory: certificates, rendered manifests, the log.
    pub dir: PathBuf,
    /// The manager's combined stdout/stderr.
    pub log: PathBuf,
    /// The directory of the managers, `clusterctl`, `workload-sim` and
    /// `manifests/`.
    pub bin_dir: PathBuf,
    /// e.g. `v1.13.6`.
    pub version: String,
    pub webhook_port: u16,
    pub health_addr: SocketAddr,
    pub diagnostics_addr: SocketAddr,
    /// Names of the provider's CRDs, whose conversion points at this manager.
    crds: Vec<String>,
}

/// Runs `tests/capi-testbin/build.sh` (a no-op when the cached build is
/// current) and returns the directory it prints.
pub fn build() -> PathBuf {
    let script = repo_root().join("tests/capi-testbin/build.sh");
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed ({})",
        script.display(),
        out.status
    );
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = PathBuf::from(dir);
    for provider in [
        Provider::Core,
        Provider::KubeadmControlPlane,
        Provider::KubeadmBootstrap,
    ] {
        assert!(
            dir.join(provider.binary()).is_file(),
            "no {} in {}",
            provider.binary(),
            dir.display()
        );
    }
    dir
}

/// Verbosity of the manager's log (`--v`); `CAPI_MANAGER_V` overrides the
/// default of 2 (4 shows every reconcile).
fn verbosity() -> String {
    std::env::var("CAPI_MANAGER_V").unwrap_or_else(|_| "2".to_string())
}

impl CapiManager {
    /// The core manager.
    pub fn start(cp: &'static ControlPlane) -> CapiManager {
        CapiManager::start_provider(cp, Provider::Core)
    }

    pub fn start_provider(cp: &'static ControlPlane, provider: Provider) -> CapiManager {
        CapiManager::start_provider_with(cp, provider, FeatureGates::default())
    }

    pub fn start_provider_with(
        cp: &'static ControlPlane,
        provider: Provider,
        gates: FeatureGates,
    ) -> CapiManager {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let bin_dir = build();
        let version = std::fs::read_to_string(bin_dir.join("VERSION"))
            .map(|v| v.trim().to_string())
            .unwrap_or_default();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = cp.dir.join(format!("{}-{n}", provider.binary()));
        let cert_dir = dir.join("certs");
        std::fs::create_dir_all(&cert_dir).expect("creating the manager's directory");

        let (crt, key) = cp.issue_serving_cert(&format!("capi-webhook-{n}"), &["127.0.0.1"]);
        std::fs::copy(&crt, cert_dir.join("tls.crt")).expect("copying tls.crt");
        std::fs::copy(&key, cert_dir.join("tls.key")).expect("copying tls.key");

        let free_port = super::story::free_port;
        let webhook_port = free_port();
        let health_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let diagnostics_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let log = dir.join("manager.log");

        let args: Vec<String> = vec![
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            "--leader-elect=false".into(),
            format!("--webhook-port={webhook_port}"),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            format!("--health-addr={health_addr}"),
            // Plain HTTP /metrics on loopback; the default is HTTPS on :8443
            // with TokenReview authorization.
            format!("--diagnostics-address={diagnostics_addr}"),
            "--insecure-diagnostics".into(),
            // The shipped defaults of v1.13 unless `gates` says otherwise,
            // written out so a bump that changes them shows up here.
            format!(
                "--feature-gates=MachinePool=true,ClusterTopology={}",
                gates.cluster_topology
            ),
            format!("--v={}", verbosity()),
        ];
        let process = Guarded::spawn(
            provider.binary(),
            &bin_dir.join(provider.binary()),
            &args,
            &[],
            &log,
        );
        let crds = crd_names(
            &bin_dir
                .join("manifests")
                .join(provider.manifests())
                .join("crd-bases"),
        );
        let mut manager = CapiManager {
            cp,
            provider,
            process,
            dir,
            log,
            bin_dir,
            version,
            webhook_port,
            health_addr,
            diagnostics_addr,
            crds,
        };
        manager.wait_ready();
        manager.label_contract_versions();
        manager.register_webhooks();
        manager.wait_webhooks();
        manager
    }

    /// Panics (with the log's tail) if the manager has exited.
    pub fn assert_running(&mut self) {
        self.process.assert_running();
    }

    /// The last `lines` lines of the manager's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Lines of the manager's log containing every one of `needles`.
    pub fn log_lines(&self, needles: &[&str]) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_string)
            .collect()
    }

    /// Plain-HTTP GET on the health or diagnostics address; (status, body).
    pub fn http_get(&self, addr: SocketAddr, path: &str) -> Option<(u16, String)> {
        http_get(addr, path)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.assert_running();
            if let Some((200, _)) = http_get(self.health_addr, "/readyz") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after 120s; log {}:\n{}",
                self.provider.binary(),
                self.log.display(),
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn ca_bundle(&self) -> String {
        let pem = std::fs::read(&self.cp.ca_file).expect("reading the control plane CA");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    /// The labels a release's kustomize puts on every Cluster API CRD.
    fn label_contract_versions(&self) {
        let mut args = vec!["label", "crd", "--overwrite"];
        args.extend(self.crds.iter().map(String::as_str));
        args.extend([
            "cluster.x-k8s.io/v1beta1=v1beta1",
            "cluster.x-k8s.io/v1beta2=v1beta2",
        ]);
        self.cp.kubectl(&args);
    }

    /// Registers the webhook configurations and the CRD conversion webhook.
    fn register_webhooks(&self) {
        let path = self
            .bin_dir
            .join("manifests")
            .join(self.provider.manifests())
            .join("webhook.yaml");
        let manifests = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let list = render_provider_webhook_configurations(
            &manifests,
            self.provider.config_prefix(),
            self.webhook_port,
            &self.ca_bundle(),
        );
        let rendered = self.dir.join("webhook-configurations.json");
        std::fs::write(&rendered, serde_json::to_vec_pretty(&list).expect("JSON"))
            .expect("writing");
        self.cp
            .kubectl_stdin(&["apply", "-f", "-"], &list.to_string());

        let conversion = json!({"spec": {"conversion": {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{}/convert", self.webhook_port),
                    "caBundle": self.ca_bundle(),
                },
            },
        }}});
        for crd in &self.crds {
            self.cp.kubectl(&[
                "patch",
                "crd",
                crd,
                "--type=merge",
                "-p",
                &conversion.to_string(),
            ]);
        }
    }

    /// Loops on a dry-run probe until the webhooks answer.
    fn wait_webhooks(&mut self) {
        let (probe, effect) = self.provider.webhook_probe();
        let probe = probe.to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last: String;
        loop {
            self.assert_running();
            let answer = self.cp.try_kubectl(
                &["create", "--dry-run=server", "-o", "json", "-f", "-"],
                &probe,
            );
            match (&effect, answer) {
                (WebhookEffect::Defaults(pointer, want), Ok(out)) => {
                    let obj: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
                    if obj.pointer(pointer).and_then(Value::as_str) == Some(*want) {
                        return;
                    }
                    last = "created without defaults".into();
                }
                (WebhookEffect::Refuses(text), Err(e)) if e.contains(text) => return,
                (WebhookEffect::Refuses(_), Ok(_)) => last = "created, not refused".into(),
                (_, Err(e)) => last = e,
            }
            assert!(
                Instant::now() < deadline,
                "{} webhooks not in effect after 60s (last: {last}); log:\n{}",
                self.provider.binary(),
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for CapiManager {
    /// Unregisters first: with `failurePolicy: Fail`, every later write of a
    /// Cluster API object would fail while the configurations point at a
    /// stopped server. Never panics (it may run during a panic).
    fn drop(&mut self) {
        let prefix = self.provider.config_prefix();
        for (kind, name) in [
            (
                "mutatingwebhookconfiguration",
                format!("{prefix}mutating-webhook-configuration"),
            ),
            (
                "validatingwebhookconfiguration",
                format!("{prefix}validating-webhook-configuration"),
            ),
        ] {
            if let Err(e) = self
                .cp
                .try_kubectl(&["delete", kind, &name, "--ignore-not-found"], "")
            {
                eprintln!("capi teardown: deleting {kind} {name}: {e}");
            }
        }
        let none =
            json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}}).to_string();
        for crd in &self.crds {
            if let Err(e) = self
                .cp
                .try_kubectl(&["patch", "crd", crd, "--type=merge", "-p", &none], "")
            {
                eprintln!("capi teardown: resetting conversion of {crd}: {e}");
            }
        }
        // The manager's graceful shutdown takes up to 30 s.
        self.process.stop(Duration::from_secs(30));
    }
}

/// `metadata.name` of every CRD file in `dir` (the module's config/crd/bases).
fn crd_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
    {
        let path = entry.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).expect("reading a CRD");
            let crd: Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
            let name = crd["metadata"]["name"]
                .as_str()
                .expect("CRD name")
                .to_string();
            names.push(name);
        }
    }
    names.sort();
    assert!(!names.is_empty(), "no CRDs in {}", dir.display());
    names
}

/// The core's webhook configurations (see
/// [`render_provider_webhook_configurations`]), named `capi-...`.
pub fn render_webhook_configurations(manifests_yaml: &str, port: u16, ca_bundle: &str) -> Value {
    render_provider_webhook_configurations(
        manifests_yaml,
        Provider::Core.config_prefix(),
        port,
        ca_bundle,
    )
}

/// Rewrites a provider's config/webhook/manifests.yaml for an out-of-cluster
/// server: each `clientConfig.service{name,namespace,path}` becomes
/// `clientConfig{url: https://127.0.0.1:PORT<path>, caBundle}`, and the
/// objects get `prefix`. Returns a `v1/List`.
pub fn render_provider_webhook_configurations(
    manifests_yaml: &str,
    prefix: &str,
    port: u16,
    ca_bundle: &str,
) -> Value {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(manifests_yaml).expect("parsing webhook manifests");
    let mut items = Vec::new();
    for mut doc in docs.into_iter().filter(|d| d.is_object()) {
        let name = doc["metadata"]["name"]
            .as_str()
            .expect("webhook configuration name")
            .to_string();
        doc["metadata"]["name"] = Value::String(format!("{prefix}{name}"));
        for webhook in doc["webhooks"].as_array_mut().expect("webhooks list") {
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .expect("service path in webhook clientConfig")
                .to_string();
            webhook["clientConfig"] = json!({
                "url": format!("https://127.0.0.1:{port}{path}"),
                "caBundle": ca_bundle,
            });
        }
        items.push(doc);
    }
    assert_eq!(
        items.len(),
        2,
        "expected one mutating and one validating configuration"
    );
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// The `<cluster>-kubeconfig` Secret Cluster API uses to reach the workload
/// cluster, pointing at the test control plane itself (inline CA and admin
/// client certificate, since file paths would be read by the manager). It
/// must carry the cluster-name label: the manager reads Secrets through a
/// cache filtered on it, and an unlabelled Secret is invisible.
pub fn kubeconfig_secret(cp: &ControlPlane, namespace: &str, cluster: &str) -> Value {
    let b64 = |p: &Path| {
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display())))
    };
    // JSON is YAML: clientcmd parses it as a kubeconfig.
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": cp.server,
            "certificate-authority-data": b64(&cp.ca_file),
        }}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": b64(&cp.admin_cert),
            "client-key-data": b64(&cp.admin_key),
        }}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "admin"}}],
        "current-context": cluster,
    });
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": format!("{cluster}-kubeconfig"),
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": kubeconfig.to_string()},
    })
}

/// A pre-made bootstrap data Secret (the bootstrap-config contract's format:
/// key `value`, plus `format`), referenced by `spec.bootstrap.dataSecretName`.
pub fn bootstrap_secret(namespace: &str, name: &str, cluster: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\nruncmd:\n- echo capmaas-conformance\n", "format": "cloud-config"},
    })
}

/// Minimal HTTP/1.0 GET (health probes and metrics are plain HTTP).
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}
