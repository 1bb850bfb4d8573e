//! Where the API server is and how to prove who we are to it.
//!
//! Three sources, one [`Config`]:
//! - a kubeconfig file ([`Config::from_kubeconfig_file`]), for development;
//! - kubeconfig bytes ([`Config::from_kubeconfig_yaml`]), also used for the
//!   workload clusters' `<cluster>-kubeconfig` Secrets;
//! - the pod's service account ([`Config::in_cluster`]).
//!
//! [`Config::infer`] picks one the way kubectl users expect.
//!
//! Credentials (tokens, client keys) live only in private fields; `Debug`
//! prints which kind of credential is configured, never its value.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use super::error::Error;
use super::limit::DEFAULT_MAX_OBJECT_BYTES;

/// The service-account directory kubelet mounts into every pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Default budget for one non-watch request, from connect to the last body
/// byte.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default budget for the TCP connect alone (the TLS handshake counts
/// against `timeout`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection and credentials for one API server.
#[derive(Clone)]
pub struct Config {
    /// Base URL, e.g. `https://10.0.0.1:6443`, without a trailing slash.
    pub server: String,
    /// The default namespace: the context's namespace, or the pod's.
    pub namespace: Option<String>,
    /// Budget for each non-watch request (see [`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Largest single object read (see [`DEFAULT_MAX_OBJECT_BYTES`]); a
    /// watch event may be this large, a list page its size times 128 KiB.
    /// Set lower for peers that only answer small calls, such as workload
    /// clusters reached through a user-supplied kubeconfig.
    pub max_object_bytes: u64,
    pub(crate) root_certs: Vec<Certificate<'static>>,
    pub(crate) client_cert: Option<ClientCert>,
    /// Only ever true when a kubeconfig says `insecure-skip-tls-verify: true`.
    pub(crate) insecure_skip_tls_verify: bool,
    pub(crate) auth: Auth,
    /// Connect to this address instead of resolving the server's host,
    /// still verifying the certificate for that host: one API server
    /// behind a name, seen as a client resolving the name to it would.
    pub connect_to: Option<std::net::IpAddr>,
}

/// How requests authenticate beyond the TLS client certificate.
#[derive(Clone)]
pub(crate) enum Auth {
    None,
    /// A fixed bearer token (kubeconfig `token`, a TokenRequest result).
    Bearer(String),
    /// A token file re-read periodically and after a 401: the projected
    /// service-account token is rotated by kubelet (kubeconfig `tokenFile`
    /// too).
    TokenFile(PathBuf),
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match &self.auth {
            Auth::None => "none".to_string(),
            Auth::Bearer(_) => "bearer token (redacted)".to_string(),
            Auth::TokenFile(path) => format!("token file {}", path.display()),
        };
        f.debug_struct("Config")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_object_bytes", &self.max_object_bytes)
            .field("root_certs", &self.root_certs.len())
            .field("client_cert", &self.client_cert.is_some())
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("auth", &auth)
            .finish()
    }
}

impl Config {
    /// A config for `server` with no credentials, verifying the server
    /// against `ca_pem` (or the public web PKI roots when `None`).
    pub fn new(server: &str, ca_pem: Option<&[u8]>) -> Result<Config, Error> {
        let root_certs = match ca_pem {
            Some(pem) => parse_certificates(pem, "CA")?,
            None => Vec::new(),
        };
        Ok(Config {
            server: server.trim_end_matches('/').to_string(),
            namespace: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
            root_certs,
            client_cert: None,
            insecure_skip_tls_verify: false,
            auth: Auth::None,
            connect_to: None,
        })
    }

    /// The same server and CA, authenticating with `token` instead of the
    /// current credentials (the client certificate is dropped).
    pub fn with_bearer_token(mut self, token: impl Into<String>) -> Config {
        self.client_cert = None;
        self.auth = Auth::Bearer(token.into());
        self
    }

    /// `--kubeconfig PATH` if given, else the first existing file in
    /// `$KUBECONFIG`, else the pod's service account. Uses the kubeconfig's
    /// current context.
    pub fn infer(kubeconfig: Option<&Path>) -> Result<Config, Error> {
        if let Some(path) = kubeconfig {
            return Config::from_kubeconfig_file(path, None);
        }
        if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            let paths: Vec<PathBuf> = std::env::split_paths(&list).collect();
            return match paths.iter().find(|p| p.is_file()) {
                Some(path) => Config::from_kubeconfig_file(path, None),
                None => Err(Error::config(format!(
                    "KUBECONFIG is set but names no existing file: {}",
                    std::env::join_paths(&paths)
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ))),
            };
        }
        Config::in_cluster()
    }

    /// Reads a kubeconfig file; relative paths inside it are resolved
    /// against its directory, as kubectl does.
    pub fn from_kubeconfig_file(path: &Path, context: Option<&str>) -> Result<Config, Error> {
        let yaml = std::fs::read(path)
            .map_err(|e| Error::config(format!("reading kubeconfig {}: {e}", path.display())))?;
        let base_dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Config::from_kubeconfig_yaml(&yaml, context, Some(&base_dir))
            .map_err(|e| Error::config(format!("kubeconfig {}: {}", path.display(), e.message())))
    }

    /// Parses kubeconfig YAML and selects `context` (or `current-context`).
    ///
    /// `base_dir` is the directory relative file references resolve against.
    /// Without it (a kubeconfig taken from a Secret) any file reference
    /// (`certificate-authority`, `client-key`, `tokenFile`, ...) is refused:
    /// whoever can write the Secret must not be able to make us read our own
    /// files, such as our service-account token, and send them to a server
    /// of their choosing.
    pub fn from_kubeconfig_yaml(
        yaml: &[u8],
        context: Option<&str>,
        base_dir: Option<&Path>,
    ) -> Result<Config, Error> {
        // The YAML error says where and what, never quoting the document
        // (it holds secrets). The tree is typed by serde_json.
        let tree = super::yaml::to_json(yaml)
            .map_err(|e| Error::config(format!("invalid kubeconfig YAML {e}")))?;
        // serde_json's message may quote a value (a token of the wrong
        // type, say): say only what kind of mistake it is.
        let kubeconfig: Kubeconfig = serde_json::from_value(tree).map_err(|_| {
            Error::config(
                "invalid kubeconfig: a field has the wrong type or a required one is missing",
            )
        })?;

        let context_name = match context {
            Some(name) => name.to_string(),
            None => kubeconfig
                .current_context
                .filter(|c| !c.is_empty())
                .ok_or_else(|| Error::config("no context given and current-context is empty"))?,
        };
        let context = kubeconfig
            .contexts
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == context_name)
            .ok_or_else(|| Error::config(format!("context {context_name:?} not found")))?
            .context;
        let cluster = kubeconfig
            .clusters
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == context.cluster)
            .ok_or_else(|| Error::config(format!("cluster {:?} not found", context.cluster)))?
            .cluster;
        let user = match context.user.as_deref() {
            None | Some("") => UserEntry::default(),
            Some(user_name) => {
                kubeconfig
                    .users
                    .unwrap_or_default()
                    .into_iter()
                    .find(|u| u.name == user_name)
                    .ok_or_else(|| Error::config(format!("user {user_name:?} not found")))?
                    .user
            }
        };

        let server = cluster
            .server
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Error::config(format!("cluster {:?} has no server", context.cluster)))?;
        let ca_pem = inline_or_file(
            cluster.certificate_authority_data.as_deref(),
            cluster.certificate_authority.as_deref(),
            base_dir,
            "certificate-authority",
        )?;
        if cluster.insecure_skip_tls_verify && ca_pem.is_some() {
            // client-go refuses this combination too: which one was meant?
            return Err(Error::config(
                "certificate-authority and insecure-skip-tls-verify are both set",
            ));
        }
        if user.exec.is_some() || user.auth_provider.is_some() {
            return Err(Error::config(
                "exec and auth-provider credential plugins are not supported; \
                 use a client certificate or a token",
            ));
        }
        if user.username.is_some() || user.password.is_some() {
            return Err(Error::config("basic authentication is not supported"));
        }

        let mut config = Config::new(&server, ca_pem.as_deref())?;
        config.namespace = context.namespace.filter(|n| !n.is_empty());
        config.insecure_skip_tls_verify = cluster.insecure_skip_tls_verify;

        let cert_pem = inline_or_file(
            user.client_certificate_data.as_deref(),
            user.client_certificate.as_deref(),
            base_dir,
            "client-certificate",
        )?;
        let key_pem = inline_or_file(
            user.client_key_data.as_deref(),
            user.client_key.as_deref(),
            base_dir,
            "client-key",
        )?;
        config.client_cert = match (cert_pem, key_pem) {
            (Some(cert), Some(key)) => Some(client_cert(&cert, &key)?),
            (None, None) => None,
            _ => {
                return Err(Error::config(
                    "client certificate and client key must be given together",
                ))
            }
        };

        config.auth = match (user.token.filter(|t| !t.is_empty()), user.token_file) {
            (Some(token), _) => {
                check_token(&token)?;
                Auth::Bearer(token)
            }
            (None, Some(file)) => {
                let path = resolve(&file, base_dir, "tokenFile")?;
                read_token(&path)?;
                Auth::TokenFile(path)
            }
            (None, None) => Auth::None,
        };
        Ok(config)
    }

    /// The pod's service account: `$KUBERNETES_SERVICE_HOST:PORT`, the
    /// mounted token (re-read as kubelet rotates it), CA and namespace
    /// (`$POD_NAMESPACE` first, as client-go does).
    pub fn in_cluster() -> Result<Config, Error> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        let pod_namespace = std::env::var("POD_NAMESPACE").ok();
        in_cluster_from(Path::new(SERVICE_ACCOUNT_DIR), &host, &port, pod_namespace)
    }

    /// The rustls settings for this server.
    pub(crate) fn tls_config(&self) -> TlsConfig {
        let mut tls = TlsConfig::builder()
            .client_cert(self.client_cert.clone())
            .disable_verification(self.insecure_skip_tls_verify);
        if !self.root_certs.is_empty() {
            tls = tls.root_certs(RootCerts::new_with_certs(&self.root_certs));
        }
        tls.build()
    }
}

fn in_cluster_from(
    dir: &Path,
    host: &str,
    port: &str,
    pod_namespace: Option<String>,
) -> Result<Config, Error> {
    if host.is_empty() || port.is_empty() {
        return Err(Error::config(
            "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) \
             and no kubeconfig given",
        ));
    }
    // An IPv6 service address needs brackets to be joined with its port.
    let server = if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    };
    let ca_path = dir.join("ca.crt");
    let ca = std::fs::read(&ca_path)
        .map_err(|e| Error::config(format!("reading {}: {e}", ca_path.display())))?;
    let mut config = Config::new(&server, Some(&ca))?;

    let token_path = dir.join("token");
    read_token(&token_path)?;
    config.auth = Auth::TokenFile(token_path);

    config.namespace = match pod_namespace.filter(|n| !n.is_empty()) {
        Some(ns) => Some(ns),
        None => std::fs::read_to_string(dir.join("namespace"))
            .ok()
            .map(|ns| ns.trim().to_string())
            .filter(|ns| !ns.is_empty()),
    };
    Ok(config)
}

/// Reads a bearer token file. The error names the file, never its content.
pub(crate) fn read_token(path: &Path) -> Result<String, Error> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| Error::config(format!("reading token file {}: {e}", path.display())))?;
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(Error::config(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    check_token(&token).map_err(|e| match e {
        Error::Config(why) => Error::config(format!("token file {}: {why}", path.display())),
        other => other,
    })?;
    Ok(token)
}

/// A bearer token must fit in an HTTP header: visible ASCII, no spaces.
/// Anything else (a line break inside the token, a pasted prefix) can never
/// work, so it is refused when the config is built rather than failing
/// every request forever. The message never shows the token.
pub(crate) fn check_token(token: &str) -> Result<(), Error> {
    match token.bytes().position(|b| !(0x21..=0x7e).contains(&b)) {
        None => Ok(()),
        Some(at) => Err(Error::config(format!(
            "the bearer token has a character that cannot go into an HTTP header at \
             byte {at} of {} (a line break or space inside it?); the token is not shown",
            token.len()
        ))),
    }
}

fn resolve(file: &str, base_dir: Option<&Path>, what: &str) -> Result<PathBuf, Error> {
    let Some(base_dir) = base_dir else {
        return Err(Error::config(format!(
            "{what}: file references are not allowed in a kubeconfig given as bytes"
        )));
    };
    let path = Path::new(file);
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    })
}

/// `*-data` (base64) wins over the file reference, as in client-go.
fn inline_or_file(
    data: Option<&str>,
    file: Option<&str>,
    base_dir: Option<&Path>,
    what: &str,
) -> Result<Option<Vec<u8>>, Error> {
    if let Some(data) = data.filter(|d| !d.is_empty()) {
        let compact: String = data.chars().filter(|c| !c.is_whitespace()).collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|_| Error::config(format!("{what}-data is not valid base64")))?;
        return Ok(Some(bytes));
    }
    match file.filter(|f| !f.is_empty()) {
        None => Ok(None),
        Some(file) => {
            let path = resolve(file, base_dir, what)?;
            let bytes = std::fs::read(&path)
                .map_err(|e| Error::config(format!("{what}: reading {}: {e}", path.display())))?;
            Ok(Some(bytes))
        }
    }
}

fn parse_certificates(pem: &[u8], what: &str) -> Result<Vec<Certificate<'static>>, Error> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(_) => return Err(Error::config(format!("{what}: invalid PEM"))),
        }
    }
    if certs.is_empty() {
        return Err(Error::config(format!("{what}: no PEM certificate found")));
    }
    Ok(certs)
}

fn client_cert(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientCert, Error> {
    let chain = parse_certificates(cert_pem, "client-certificate")?;
    let mut key: Option<PrivateKey<'static>> = None;
    for item in ureq::tls::parse_pem(key_pem) {
        match item {
            Ok(PemItem::PrivateKey(k)) if key.is_none() => key = Some(k),
            Ok(_) => {}
            // Say nothing about the content: it is a private key.
            Err(_) => return Err(Error::config("client-key: invalid PEM")),
        }
    }
    let key = key.ok_or_else(|| Error::config("client-key: no PEM private key found"))?;
    check_key_pair(cert_pem, key_pem)?;
    Ok(ClientCert::new_with_certs(&chain, key))
}

/// rustls refuses a key that does not match its certificate, and ureq
/// panics when that happens on first connect: check here instead.
fn check_key_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|_| Error::config("client-certificate: invalid PEM"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|_| Error::config("client-key: no usable PEM private key"))?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, key, &provider)
        .map(|_| ())
        .map_err(|e| Error::config(format!("client certificate and key unusable: {e}")))
}

// The kubeconfig subset we read (client-go tools/clientcmd/api/v1/types.go).
// No Debug derives: these structs hold credentials.

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Option<Vec<NamedCluster>>,
    #[serde(default)]
    users: Option<Vec<NamedUser>>,
    #[serde(default)]
    contexts: Option<Vec<NamedContext>>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: ClusterEntry,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct ClusterEntry {
    server: Option<String>,
    certificate_authority_data: Option<String>,
    certificate_authority: Option<String>,
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: UserEntry,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct UserEntry {
    client_certificate_data: Option<String>,
    client_certificate: Option<String>,
    client_key_data: Option<String>,
    client_key: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<serde::de::IgnoredAny>,
    auth_provider: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: ContextEntry,
}

#[derive(Deserialize)]
struct ContextEntry {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // A throwaway self-signed EC P-256 certificate and its key (test data
    // generated for these tests; protects nothing).
    const CERT_PEM: &str = include_str!("testdata/client.crt");
    const KEY_PEM: &str = include_str!("testdata/client.key");
    const OTHER_KEY_PEM: &str = include_str!("testdata/other.key");

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn kubeconfig(user: &str) -> String {
        format!(
            "apiVersion: v1
kind: Config
current-context: dev
preferences: {{}}
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: {ca}
- name: c2
  cluster:
    server: https://c2.example:6443
contexts:
- name: dev
  context: {{cluster: c1, user: u1, namespace: team-a}}
- name: other
  context: {{cluster: c2, user: u2}}
users:
- name: u1
  user:
{user}
- name: u2
  user:
    token: other-token
",
            ca = b64(CERT_PEM)
        )
    }

    #[test]
    fn client_certificate_data() {
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}",
            b64(CERT_PEM),
            b64(KEY_PEM)
        );
        let config =
            Config::from_kubeconfig_yaml(kubeconfig(&user).as_bytes(), None, None).unwrap();
        assert_eq!(config.server, "https://10.0.0.1:6443");
        assert_eq!(config.namespace.as_deref(), Some("team-a"));
        assert_eq!(config.root_certs.len(), 1);
        assert!(config.client_cert.is_some());
        assert!(matches!(config.auth, Auth::None));
        assert!(!config.insecure_skip_tls_verify);
        assert!(config.tls_config().client_cert().is_some());
    }

    #[test]
    fn named_context_and_token_never_in_debug() {
        let user = "    token: t0p-s3cret";
        let yaml = kubeconfig(user);
        let dev = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap();
        assert!(matches!(&dev.auth, Auth::Bearer(t) if t == "t0p-s3cret"));
        assert!(!format!("{dev:?}").contains("t0p-s3cret"));

        let other = Config::from_kubeconfig_yaml(yaml.as_bytes(), Some("other"), None).unwrap();
        assert_eq!(other.server, "https://c2.example:6443");
        assert_eq!(other.namespace, None);
        assert!(other.root_certs.is_empty());
        assert!(matches!(&other.auth, Auth::Bearer(t) if t == "other-token"));

        let missing = Config::from_kubeconfig_yaml(yaml.as_bytes(), Some("nope"), None);
        assert!(matches!(missing, Err(Error::Config(m)) if m.contains("nope")));
    }

    #[test]
    fn mismatched_key_is_a_config_error_not_a_panic() {
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}",
            b64(CERT_PEM),
            b64(OTHER_KEY_PEM)
        );
        let err =
            Config::from_kubeconfig_yaml(kubeconfig(&user).as_bytes(), None, None).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
    }

    #[test]
    fn file_references_resolve_against_base_dir_and_are_refused_without_one() {
        let dir = std::env::temp_dir().join(format!("kube-config-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pki")).unwrap();
        std::fs::write(dir.join("pki/client.crt"), CERT_PEM).unwrap();
        std::fs::write(dir.join("pki/client.key"), KEY_PEM).unwrap();
        std::fs::write(dir.join("pki/ca.crt"), CERT_PEM).unwrap();
        std::fs::write(dir.join("token"), "file-token\n").unwrap();
        let yaml = format!(
            "current-context: x
clusters: [{{name: c, cluster: {{server: 'https://h:1', certificate-authority: pki/ca.crt}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
users: [{{name: u, user: {{client-certificate: pki/client.crt, client-key: {}/pki/client.key, tokenFile: token}}}}]
",
            dir.display()
        );
        let path = dir.join("config");
        std::fs::write(&path, &yaml).unwrap();

        let config = Config::infer(Some(&path)).unwrap();
        assert_eq!(config.root_certs.len(), 1);
        assert!(config.client_cert.is_some());
        assert!(matches!(&config.auth, Auth::TokenFile(p) if p == &dir.join("token")));

        let refused = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap_err();
        assert!(refused.message().contains("not allowed"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The `<cluster>-kubeconfig` Secret as Cluster API writes it
    /// (client-go's clientcmd: keys sorted, block style, `preferences: {}`),
    /// and the same document in flow style with quoted values.
    #[test]
    fn the_kubeconfig_cluster_api_writes() {
        let (ca, cert, key) = (b64(CERT_PEM), b64(CERT_PEM), b64(KEY_PEM));
        let block = format!(
            "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: https://10.0.0.10:6443
  name: w1
contexts:
- context:
    cluster: w1
    user: w1-admin
  name: w1-admin@w1
current-context: w1-admin@w1
kind: Config
preferences: {{}}
users:
- name: w1-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
"
        );
        let flow = format!(
            "{{\"apiVersion\": \"v1\", \"kind\": 'Config', current-context: 'w1-admin@w1',
 clusters: [{{name: \"w1\", cluster: {{server: \"https://10.0.0.10:6443\",
   certificate-authority-data: \"{ca}\"}}}}],
 contexts: [{{name: w1-admin@w1, context: {{cluster: 'w1', user: \"w1-admin\"}}}}],
 users: [{{name: w1-admin, user: {{client-certificate-data: '{cert}', client-key-data: \"{key}\"}}}}]}}"
        );
        for yaml in [block, flow] {
            let config = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap();
            assert_eq!(config.server, "https://10.0.0.10:6443");
            assert_eq!(config.root_certs.len(), 1);
            assert!(config.client_cert.is_some());
            assert!(!config.insecure_skip_tls_verify);
        }
    }

    #[test]
    fn insecure_only_when_asked_and_never_with_a_ca() {
        let insecure = "current-context: x
clusters: [{name: c, cluster: {server: 'https://h:1', insecure-skip-tls-verify: true}}]
contexts: [{name: x, context: {cluster: c}}]
";
        let config = Config::from_kubeconfig_yaml(insecure.as_bytes(), None, None).unwrap();
        assert!(config.insecure_skip_tls_verify);
        assert!(config.tls_config().disable_verification());
        // Not a YAML 1.2 boolean (`yes`), or quoted: a string, refused
        // rather than guessed either way.
        for not_bool in ["yes", "'true'"] {
            let yaml = insecure.replace("true}", &format!("{not_bool}}}"));
            let err = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap_err();
            assert!(err.to_string().contains("wrong type"), "{err}");
        }

        let both = format!(
            "current-context: x
clusters: [{{name: c, cluster: {{server: 'https://h:1', insecure-skip-tls-verify: true, certificate-authority-data: {}}}}}]
contexts: [{{name: x, context: {{cluster: c}}}}]
",
            b64(CERT_PEM)
        );
        assert!(Config::from_kubeconfig_yaml(both.as_bytes(), None, None).is_err());
    }

    #[test]
    fn unsupported_and_broken_configs_are_errors() {
        let exec = "current-context: x
clusters: [{name: c, cluster: {server: 'https://h:1'}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
users: [{name: u, user: {exec: {command: aws, args: [eks, get-token]}}}]
";
        let err = Config::from_kubeconfig_yaml(exec.as_bytes(), None, None).unwrap_err();
        assert!(err.message().contains("exec"));

        let secret = "s3cret-value";
        let broken = format!("current-context: [\nusers: {secret}: : :");
        let err = Config::from_kubeconfig_yaml(broken.as_bytes(), None, None).unwrap_err();
        assert!(!err.to_string().contains(secret), "{err}");

        // Well-formed YAML of the wrong shape: a token that is a number.
        let yaml = kubeconfig("    token: 918273645546372819");
        let err = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap_err();
        assert!(err.to_string().contains("wrong type"), "{err}");
        assert!(!err.to_string().contains("918273645546372819"), "{err}");

        let bad_b64 = "current-context: x
clusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority-data: '!!!'}}]
contexts: [{name: x, context: {cluster: c}}]
";
        assert!(Config::from_kubeconfig_yaml(bad_b64.as_bytes(), None, None).is_err());
    }

    /// Issue 12 item 5: a token with a line break inside made every request
    /// fail to build, and the informers retried that forever.
    #[test]
    fn tokens_that_cannot_be_a_header_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("kube-badtoken-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), CERT_PEM).unwrap();
        std::fs::write(dir.join("token"), "eyJhbGciOi\nsecretpart\n").unwrap();
        let err = in_cluster_from(&dir, "10.96.0.1", "443", None).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("cannot go into an HTTP header"), "{shown}");
        assert!(!shown.contains("secretpart"), "{shown}");
        std::fs::remove_dir_all(&dir).unwrap();

        let yaml = kubeconfig("    token: \"abc def\"");
        let err = Config::from_kubeconfig_yaml(yaml.as_bytes(), None, None).unwrap_err();
        assert!(err.to_string().contains("HTTP header"), "{err}");
        assert!(check_token("eyJhbGciOiJSUzI1NiJ9.e30.c2ln").is_ok());
    }

    #[test]
    fn billion_laughs_and_deep_nesting_are_refused() {
        let mut laughs = String::from("a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
        for i in 1..12u8 {
            let (prev, cur) = ((b'a' + i - 1) as char, (b'a' + i) as char);
            laughs.push_str(&format!("{cur}: &{cur} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        laughs.push_str("current-context: *l\n");
        let err = Config::from_kubeconfig_yaml(laughs.as_bytes(), None, None).unwrap_err();
        assert!(err.to_string().contains("invalid kubeconfig YAML"), "{err}");
        let deep = format!("clusters: {}{}", "[".repeat(100), "]".repeat(100));
        assert!(Config::from_kubeconfig_yaml(deep.as_bytes(), None, None).is_err());
    }

    #[test]
    fn in_cluster_reads_service_account_files() {
        let dir = std::env::temp_dir().join(format!("kube-sa-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.crt"), CERT_PEM).unwrap();
        std::fs::write(dir.join("token"), "sa-token\n").unwrap();
        std::fs::write(dir.join("namespace"), "capmaas-system\n").unwrap();

        let config = in_cluster_from(&dir, "10.96.0.1", "443", None).unwrap();
        assert_eq!(config.server, "https://10.96.0.1:443");
        assert_eq!(config.namespace.as_deref(), Some("capmaas-system"));
        assert!(matches!(&config.auth, Auth::TokenFile(p) if p == &dir.join("token")));

        let v6 = in_cluster_from(&dir, "fd00::1", "443", Some("pod-ns".into())).unwrap();
        assert_eq!(v6.server, "https://[fd00::1]:443");
        assert_eq!(v6.namespace.as_deref(), Some("pod-ns"));

        assert!(in_cluster_from(&dir, "", "443", None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
