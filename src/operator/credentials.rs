//! The MAAS credentials of each cluster: a MaasCluster's `spec.identityRef`
//! names a Secret in its own namespace holding the MAAS endpoint and API key
//! of that tenant's MAAS user (its pools, its quota, its permissions);
//! without one, the controller-wide credentials (`MAAS_ENDPOINT`,
//! `MAAS_API_KEY`) are used.
//!
//! - A Secret is only ever read in the namespace of the object that names
//!   it, so a tenant can point its cluster at its own credentials only.
//! - The Secret is read (one GET) whenever a cluster's MAAS is asked for;
//!   the client built from it, with its open connections and the MAAS user
//!   it authenticates as, is kept for that Secret's resourceVersion and
//!   rebuilt when the Secret changes (a rotated key takes effect at once).
//! - A new client is checked with `whoami` before use: a wrong key is a
//!   clear condition on the cluster, not an error at the first allocation.
//!   The check runs on a thread of its own (at most [`MAX_CHECKS`] at
//!   once): a reconcile waits for it up to [`CHECK_WAIT`], so a tenant's
//!   silent endpoint holds no shared worker for its 30 s timeout. A failed
//!   check is remembered for its Secret's version and tried again after a
//!   backoff (5 s doubling to 5 minutes); a changed Secret is checked at
//!   once.
//! - With `--maas-endpoint-allow`, a Secret's endpoint must be one of the
//!   listed MAAS endpoints (compared as API roots, `.../MAAS/api/2.0/`):
//!   any other is refused before any request is made to it.
//! - What a tenant's endpoint answers reaches the cluster's condition only
//!   as the client's short, sanitised error (see `maas::MaasBody`).
//!
//! - Every client in use is a source of the MAAS watch (listed as the user
//!   it authenticates as); each cluster's MAAS reads machines from that
//!   source's view ([`MaasView`]). [`SourceTenants`] records which
//!   namespaces use which source, so that what a source lists wakes and
//!   writes Events on that source's own objects only. The sources are updated whenever the set
//!   of clients changes (a new Secret, a rotated key, an idle client gone).
//!
//! Keys of the Secret, the same as the controller-wide Secret
//! `capmaas-manager-bootstrap-credentials`: `MAAS_ENDPOINT`, `MAAS_API_KEY`
//! and, optionally, `MAAS_CA_CERT` (PEM; else the controller's
//! `--maas-ca-file`, else the public roots).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::adapters::{resource_version, secret_bytes, ClientCache};
use crate::api::maas_cluster::IDENTITY_KIND_SECRET;
use crate::api::IdentityRef;
use crate::controllers::maas_view::{MaasView, SourceView};
use crate::controllers::ports::{CredentialsError, MaasClients};
use crate::kube::{self, resources::SECRETS};
use crate::maas::watch::{SourceId, WatchHandle};
use crate::maas::{self, StartCheck};
use crate::sync::lock;

pub const ENDPOINT_KEY: &str = "MAAS_ENDPOINT";
pub const API_KEY_KEY: &str = "MAAS_API_KEY";
pub const CA_CERT_KEY: &str = "MAAS_CA_CERT";

/// A client unused this long is dropped (its cluster is gone or idle).
const CLIENT_IDLE: Duration = Duration::from_secs(30 * 60);
/// At most this many per-cluster clients are kept.
const MAX_CLIENTS: usize = 256;
/// How long a reconcile waits for the credentials check it started; a
/// slower MAAS answers to a later reconcile.
pub const CHECK_WAIT: Duration = Duration::from_secs(1);
/// Credentials checks running at once (each a thread and a connection).
pub const MAX_CHECKS: usize = 16;
/// Retry delays of a failed check: first, and longest.
const CHECK_BACKOFF: Duration = Duration::from_secs(5);
const MAX_CHECK_BACKOFF: Duration = Duration::from_secs(300);

/// One cluster's MAAS, as built from its Secret.
#[derive(Clone)]
struct Resolved {
    client: maas::Client,
    api: Arc<MaasView>,
    /// The MAAS user the credentials authenticate as (from `whoami`).
    username: String,
}

/// Which namespaces use which MAAS watch source: the watch's reports of a
/// source concern the objects of those namespaces only (a tenant's
/// endpoint lists whatever it likes, under any system ID).
#[derive(Default)]
pub struct SourceTenants {
    namespaces: Mutex<HashMap<SourceId, HashSet<String>>>,
}

impl SourceTenants {
    /// `namespace` reads MAAS through `source`.
    pub fn record(&self, source: &SourceId, namespace: &str) {
        let mut map = lock(&self.namespaces);
        let namespaces = map.entry(source.clone()).or_default();
        if !namespaces.contains(namespace) {
            namespaces.insert(namespace.to_string());
        }
    }

    /// Whether `source` is one the objects of `namespace` read MAAS through.
    pub fn serves(&self, source: &SourceId, namespace: &str) -> bool {
        lock(&self.namespaces)
            .get(source)
            .is_some_and(|namespaces| namespaces.contains(namespace))
    }

    /// Forgets the sources no longer in use.
    fn retain(&self, sources: &[SourceId]) {
        lock(&self.namespaces).retain(|source, _| sources.contains(source));
    }
}

/// One identity Secret's credentials check, by Secret.
enum Check {
    /// Running on its own thread, for this Secret version.
    Running { version: String },
    /// Done: the client and its user, to be taken into the cache.
    Passed {
        version: String,
        client: maas::Client,
        username: String,
    },
    /// Failed: the answer for this version until `retry_at`.
    Failed {
        version: String,
        error: CredentialsError,
        retry_at: Instant,
        failures: u32,
    },
}

impl Check {
    fn version(&self) -> &str {
        match self {
            Check::Running { version }
            | Check::Passed { version, .. }
            | Check::Failed { version, .. } => version,
        }
    }

    /// A failed check, answered as is until its backoff is over.
    fn failed(version: String, error: CredentialsError, failures_before: u32) -> Check {
        let failures = failures_before.saturating_add(1);
        let delay = CHECK_BACKOFF
            .saturating_mul(1 << failures.saturating_sub(1).min(8))
            .min(MAX_CHECK_BACKOFF);
        Check::Failed {
            version,
            error,
            retry_at: crate::clock::later(Instant::now(), delay),
            failures,
        }
    }
}

/// The checks, shared with their threads.
#[derive(Default)]
struct Checks {
    by_secret: Mutex<HashMap<(String, String), Check>>,
    finished: Condvar,
}

/// The real [`MaasClients`]: the controller-wide client plus the clients
/// built from identity Secrets.
pub struct Credentials {
    default_client: maas::Client,
    default: Arc<MaasView>,
    /// The controller-wide user: known from the start-up check, or once
    /// MAAS answered it later.
    default_username: Arc<OnceLock<String>>,
    kube: kube::Client,
    /// The controller's `--maas-ca-file`, for Secrets without `MAAS_CA_CERT`.
    ca_pem: Option<Vec<u8>>,
    clients: Mutex<ClientCache<(String, String), Resolved>>,
    watch: Option<WatchHandle>,
    /// The watch's sources as last set.
    watched: Mutex<Vec<SourceId>>,
    tenants: Arc<SourceTenants>,
    checks: Arc<Checks>,
    /// `--maas-endpoint-allow`, as API roots; empty: any endpoint.
    allowed_endpoints: Vec<String>,
}

impl Credentials {
    /// `default` is the controller-wide client; `default_username` its MAAS
    /// user, filled in by the start-up check (maybe later: MAAS may be
    /// unreachable at start).
    pub fn new(
        default: maas::Client,
        default_username: Arc<OnceLock<String>>,
        kube: kube::Client,
        ca_pem: Option<Vec<u8>>,
    ) -> Credentials {
        Credentials {
            default: Arc::new(MaasView::new(Arc::new(default.clone()))),
            default_client: default,
            default_username,
            kube,
            ca_pem,
            clients: Mutex::new(ClientCache::new(CLIENT_IDLE, MAX_CLIENTS)),
            watch: None,
            watched: Mutex::new(Vec::new()),
            tenants: Arc::new(SourceTenants::default()),
            checks: Arc::new(Checks::default()),
            allowed_endpoints: Vec::new(),
        }
    }

    /// Records which namespaces use which source in `tenants` (the MAAS
    /// watch's router reads it).
    pub fn with_tenants(mut self, tenants: Arc<SourceTenants>) -> Credentials {
        self.tenants = tenants;
        self
    }

    /// Per-cluster credentials may only name these MAAS endpoints (API
    /// roots, see [`maas::client::api_root`]); empty: any.
    pub fn with_allowed_endpoints(mut self, api_roots: Vec<String>) -> Credentials {
        self.allowed_endpoints = api_roots;
        self
    }

    /// Lists every client's machines with `watch`, and reads them from its
    /// view (see [`Credentials::sync_watch`]).
    pub fn with_watch(mut self, watch: WatchHandle) -> Credentials {
        self.watch = Some(watch);
        self.sync_watch();
        self
    }

    /// Every MAAS client in use with the user it authenticates as: the
    /// controller-wide one (when its user is known) and each cluster's.
    pub fn clients(&self) -> Vec<(maas::Client, String)> {
        let mut out: Vec<(maas::Client, String)> = self
            .default_username
            .get()
            .map(|user| (self.default_client.clone(), user.clone()))
            .into_iter()
            .collect();
        out.extend(
            lock(&self.clients)
                .values()
                .map(|r| (r.client.clone(), r.username.clone())),
        );
        out
    }

    /// Gives the watch the sources of [`Credentials::clients`] when they
    /// changed, and the controller-wide client its view once its user is
    /// known. Cheap when nothing changed: called at every `for_cluster`.
    pub fn sync_watch(&self) {
        let Some(watch) = &self.watch else {
            return;
        };
        if let (Some(user), false) = (self.default_username.get(), self.default.is_attached()) {
            self.default.attach(Box::new(SourceView {
                handle: watch.clone(),
                source: SourceId::of(&self.default_client, user),
            }));
        }
        let mut sources: Vec<(SourceId, maas::Client)> = self
            .clients()
            .into_iter()
            .map(|(client, user)| (SourceId::of(&client, &user), client))
            .collect();
        sources.sort_by(|a, b| a.0.cmp(&b.0));
        sources.dedup_by(|a, b| a.0 == b.0);
        let ids: Vec<SourceId> = sources.iter().map(|(id, _)| id.clone()).collect();
        let mut watched = lock(&self.watched);
        if *watched != ids {
            self.tenants.retain(&ids);
            *watched = ids;
            watch.set_sources(sources);
        }
    }

    fn resolve(
        &self,
        namespace: &str,
        identity: &IdentityRef,
    ) -> Result<Resolved, CredentialsError> {
        let name = &identity.name;
        let what = format!("Secret {namespace}/{name} (spec.identityRef)");
        if !identity.kind.is_empty() && identity.kind != IDENTITY_KIND_SECRET {
            return Err(CredentialsError::Invalid(format!(
                "spec.identityRef kind {:?} is not supported; use {IDENTITY_KIND_SECRET}",
                identity.kind
            )));
        }
        let secret = match self.kube.get(&SECRETS, Some(namespace), name) {
            Ok(secret) => secret,
            Err(e) if e.is_not_found() => {
                return Err(CredentialsError::Invalid(format!("{what} does not exist")))
            }
            Err(e @ kube::Error::Forbidden { .. }) => {
                return Err(CredentialsError::Invalid(format!(
                    "{what} cannot be read by capmaas: {e}"
                )))
            }
            Err(e) => {
                return Err(CredentialsError::Unavailable(format!(
                    "reading {what}: {e}"
                )))
            }
        };
        let key = (namespace.to_string(), name.clone());
        let version = resource_version(&secret);
        if let Some(resolved) = lock(&self.clients).get(&key, &version, Instant::now()) {
            return Ok(resolved);
        }
        let (client, username) = self.checked(key.clone(), &version, &secret, &what)?;
        for warning in client.security_warnings() {
            log::warn!("{what}: {warning}");
        }
        log::info!("{what}: MAAS {} as user {username:?}", client.api_root());
        let api = MaasView::new(Arc::new(client.clone()));
        if let Some(watch) = &self.watch {
            api.attach(Box::new(SourceView {
                handle: watch.clone(),
                source: SourceId::of(&client, &username),
            }));
        }
        let resolved = Resolved {
            client,
            api: Arc::new(api),
            username,
        };
        lock(&self.clients).put(key, version, resolved.clone(), Instant::now());
        Ok(resolved)
    }

    /// The checked client of a Secret version not in the cache: the result
    /// of its check, started here when there is none (or its backoff is
    /// over), waited for up to [`CHECK_WAIT`].
    fn checked(
        &self,
        key: (String, String),
        version: &str,
        secret: &Value,
        what: &str,
    ) -> Result<(maas::Client, String), CredentialsError> {
        let mut checks = lock(&self.checks.by_secret);
        let now = Instant::now();
        let mut failures = 0;
        match checks.get(&key) {
            Some(check) if check.version() != version => {}
            Some(Check::Failed {
                error,
                retry_at,
                failures: before,
                ..
            }) => {
                if now < *retry_at {
                    return Err(error.clone());
                }
                failures = *before;
            }
            Some(Check::Running { .. }) => return Err(not_answered_yet(what)),
            Some(Check::Passed { .. }) => return self.take_passed(&mut checks, &key, what),
            None => {}
        }
        let running = checks
            .values()
            .filter(|c| matches!(c, Check::Running { .. }))
            .count();
        if running >= MAX_CHECKS {
            return Err(CredentialsError::Unavailable(format!(
                "{what}: {running} MAAS credentials checks in progress; trying again later"
            )));
        }
        let client = self.client_for(secret, what)?;
        checks.insert(
            key.clone(),
            Check::Running {
                version: version.to_string(),
            },
        );
        let shared = Arc::clone(&self.checks);
        let (thread_key, thread_version, thread_what) =
            (key.clone(), version.to_string(), what.to_string());
        let spawned = std::thread::Builder::new()
            .name("maas-credentials-check".into())
            .spawn(move || {
                let outcome = match check(&client, &thread_what) {
                    Ok(username) => Check::Passed {
                        version: thread_version,
                        client,
                        username,
                    },
                    Err(error) => Check::failed(thread_version, error, failures),
                };
                let mut checks = lock(&shared.by_secret);
                // A newer version's check replaced this one: drop the answer.
                if checks.get(&thread_key).map(Check::version) == Some(outcome.version()) {
                    checks.insert(thread_key, outcome);
                }
                drop(checks);
                shared.finished.notify_all();
            });
        if let Err(e) = spawned {
            checks.remove(&key);
            return Err(CredentialsError::Unavailable(format!(
                "{what}: cannot start the credentials check: {e}"
            )));
        }
        let deadline = crate::clock::later(Instant::now(), CHECK_WAIT);
        loop {
            match checks.get(&key) {
                Some(Check::Passed { .. }) => return self.take_passed(&mut checks, &key, what),
                Some(Check::Failed { error, .. }) => return Err(error.clone()),
                _ => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(not_answered_yet(what));
            }
            checks = self
                .checks
                .finished
                .wait_timeout(checks, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn take_passed(
        &self,
        checks: &mut HashMap<(String, String), Check>,
        key: &(String, String),
        what: &str,
    ) -> Result<(maas::Client, String), CredentialsError> {
        match checks.remove(key) {
            Some(Check::Passed {
                client, username, ..
            }) => Ok((client, username)),
            _ => Err(CredentialsError::Unavailable(format!(
                "{what}: the credentials check is being repeated"
            ))),
        }
    }

    /// The client a Secret describes, not checked yet.
    fn client_for(&self, secret: &Value, what: &str) -> Result<maas::Client, CredentialsError> {
        let config = client_config(secret, what, self.ca_pem.as_deref())?;
        let root = maas::client::api_root(&config.endpoint)
            .map_err(|e| CredentialsError::Invalid(format!("{what}: key {ENDPOINT_KEY}: {e}")))?;
        if !self.allowed_endpoints.is_empty() && !self.allowed_endpoints.contains(&root) {
            return Err(CredentialsError::Invalid(format!(
                "{what}: MAAS endpoint {} is not one this controller may use \
                 (--maas-endpoint-allow); ask its operator",
                maas::redact_url(&root)
            )));
        }
        maas::Client::new(config).map_err(|e| CredentialsError::Invalid(format!("{what}: {e}")))
    }
}

/// One message while a check runs, however many reconciles ask (a
/// condition that does not flap, one Event).
fn not_answered_yet(what: &str) -> CredentialsError {
    CredentialsError::Unavailable(format!(
        "{what}: checking the credentials with MAAS (not answered yet)"
    ))
}

/// Checks a new client with `whoami`: its MAAS user.
fn check(client: &maas::Client, what: &str) -> Result<String, CredentialsError> {
    match client.start_check() {
        StartCheck::Ready(user) => Ok(user.username),
        StartCheck::Refused(why) => Err(CredentialsError::Refused(format!("{what}: {why}"))),
        StartCheck::Unreachable(e) => Err(CredentialsError::Unavailable(format!(
            "{what}: MAAS not reachable: {e}"
        ))),
    }
}

impl MaasClients for Credentials {
    fn for_cluster(
        &self,
        namespace: &str,
        identity: Option<&IdentityRef>,
    ) -> Result<Arc<MaasView>, CredentialsError> {
        let api = match identity {
            None => {
                if let Some(user) = self.default_username.get() {
                    self.tenants
                        .record(&SourceId::of(&self.default_client, user), namespace);
                }
                self.default.clone()
            }
            Some(identity) => {
                let resolved = self.resolve(namespace, identity)?;
                self.tenants.record(
                    &SourceId::of(&resolved.client, &resolved.username),
                    namespace,
                );
                resolved.api
            }
        };
        self.sync_watch();
        Ok(api)
    }
}

/// The MAAS client settings in an identity Secret.
fn client_config(
    secret: &Value,
    what: &str,
    default_ca: Option<&[u8]>,
) -> Result<maas::ClientConfig, CredentialsError> {
    let invalid = |why: String| CredentialsError::Invalid(format!("{what}: {why}"));
    let value = |key: &str| {
        secret_bytes(secret, key).map_err(|e| invalid(format!("key {key} is not base64: {e}")))
    };
    let text = |key: &str| -> Result<String, CredentialsError> {
        let bytes = value(key)?.ok_or_else(|| invalid(format!("has no key {key}")))?;
        let text =
            String::from_utf8(bytes).map_err(|_| invalid(format!("key {key} is not text")))?;
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err(invalid(format!("key {key} is empty")));
        }
        Ok(text)
    };
    let endpoint = text(ENDPOINT_KEY)?;
    // InvalidApiKey says what is wrong without the key.
    let api_key = maas::ApiKey::parse(&text(API_KEY_KEY)?)
        .map_err(|e| invalid(format!("key {API_KEY_KEY}: {e}")))?;
    let mut config = maas::ClientConfig::new(endpoint, api_key);
    config.extra_ca_pem = match value(CA_CERT_KEY)? {
        Some(pem) => Some(pem),
        None => default_ca.map(<[u8]>::to_vec),
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_secret_gives_endpoint_key_and_ca() {
        let secret = json!({"data": {
            ENDPOINT_KEY: b64("http://maas.example:5240/MAAS\n"),
            API_KEY_KEY: b64("aaa:bbb:ccc"),
            CA_CERT_KEY: b64("PEM"),
        }});
        let config = client_config(&secret, "Secret ns/s", None).unwrap();
        assert_eq!(config.endpoint, "http://maas.example:5240/MAAS");
        assert_eq!(config.extra_ca_pem.as_deref(), Some(&b"PEM"[..]));
        let without_ca =
            json!({"data": {ENDPOINT_KEY: b64("http://m/MAAS"), API_KEY_KEY: b64("a:b:c")}});
        let config = client_config(&without_ca, "s", Some(b"CONTROLLER")).unwrap();
        assert_eq!(config.extra_ca_pem.as_deref(), Some(&b"CONTROLLER"[..]));
    }

    #[test]
    fn secret_values_with_line_breaks_around_them_work() {
        // `echo` into a file, `kubectl create secret --from-file`: a
        // trailing newline (or CRLF) on both values.
        let secret = json!({"data": {
            ENDPOINT_KEY: b64(" http://maas.example:5240/MAAS/\r\n"),
            API_KEY_KEY: b64("\tck:tk:secretpart\n"),
        }});
        let config = client_config(&secret, "Secret ns/s", None).unwrap();
        assert_eq!(
            config.api_key,
            maas::ApiKey::parse("ck:tk:secretpart").unwrap()
        );
        let credentials = Credentials::new(
            maas::Client::new(maas::ClientConfig::new(
                "http://controller:5240/MAAS",
                maas::ApiKey::parse("a:b:c").unwrap(),
            ))
            .unwrap(),
            Default::default(),
            kube::Client::new(kube::Config::new("http://127.0.0.1:1", None).unwrap()).unwrap(),
            None,
        );
        let client = credentials.client_for(&secret, "Secret ns/s").unwrap();
        assert_eq!(client.api_root(), "http://maas.example:5240/MAAS/api/2.0/");
    }

    #[test]
    fn a_line_break_inside_a_secret_value_is_named_and_never_shows_the_key() {
        let key_with_garbage = json!({"data": {
            ENDPOINT_KEY: b64("http://m/MAAS"),
            API_KEY_KEY: b64("ck:tk:secretpart\nleftover-garbage"),
        }});
        let err = client_config(&key_with_garbage, "Secret ns/s", None).unwrap_err();
        assert!(matches!(err, CredentialsError::Invalid(_)), "{err:?}");
        assert!(
            err.message().contains(
                "key MAAS_API_KEY: invalid MAAS API key: the token secret contains whitespace"
            ),
            "{err}"
        );
        for part in ["secretpart", "leftover-garbage", "ck:tk"] {
            assert!(!err.message().contains(part), "{err}");
        }
    }

    #[test]
    fn unusable_secrets_say_why_and_never_show_the_key() {
        let cases = [
            (json!({"data": {}}), "has no key MAAS_ENDPOINT"),
            (
                json!({"data": {ENDPOINT_KEY: b64("http://m/MAAS")}}),
                "has no key MAAS_API_KEY",
            ),
            (
                json!({"data": {ENDPOINT_KEY: b64("http://m/MAAS"), API_KEY_KEY: b64("secret-but-wrong")}}),
                "key MAAS_API_KEY: invalid MAAS API key: it has 1 colon-separated parts",
            ),
            (
                json!({"data": {ENDPOINT_KEY: "***", API_KEY_KEY: b64("a:b:c")}}),
                "is not base64",
            ),
            (
                json!({"data": {ENDPOINT_KEY: b64("  "), API_KEY_KEY: b64("a:b:c")}}),
                "is empty",
            ),
        ];
        for (secret, needle) in cases {
            let err = client_config(&secret, "Secret ns/s", None).unwrap_err();
            assert!(matches!(err, CredentialsError::Invalid(_)), "{err:?}");
            assert!(err.message().contains(needle), "{err}");
            assert!(err.message().starts_with("Secret ns/s"), "{err}");
            assert!(!err.message().contains("secret-but-wrong"), "{err}");
        }
    }
}
