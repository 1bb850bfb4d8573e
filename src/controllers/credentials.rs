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
//!
//! - Every client in use is a source of the MAAS watch (listed as the user
//!   it authenticates as); each cluster's MAAS reads machines from that
//!   source's view ([`MaasView`]). The sources are updated whenever the set
//!   of clients changes (a new Secret, a rotated key, an idle client gone).
//!
//! Keys of the Secret, the same as the controller-wide Secret
//! `capmaas-manager-bootstrap-credentials`: `MAAS_ENDPOINT`, `MAAS_API_KEY`
//! and, optionally, `MAAS_CA_CERT` (PEM; else the controller's
//! `--maas-ca-file`, else the public roots).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use super::adapters::{self, ClientCache};
use super::maas_view::{MaasView, SourceView};
use super::ports::{MaasApi, MaasClients};
use crate::api::maas_cluster::IDENTITY_KIND_SECRET;
use crate::api::IdentityRef;
use crate::kube::{self, resources::SECRETS};
use crate::maas::watch::{SourceId, WatchHandle};
use crate::maas::{self, StartCheck};

pub const ENDPOINT_KEY: &str = "MAAS_ENDPOINT";
pub const API_KEY_KEY: &str = "MAAS_API_KEY";
pub const CA_CERT_KEY: &str = "MAAS_CA_CERT";

/// A client unused this long is dropped (its cluster is gone or idle).
const CLIENT_IDLE: Duration = Duration::from_secs(30 * 60);
/// At most this many per-cluster clients are kept.
const MAX_CLIENTS: usize = 256;

/// Why a cluster's MAAS cannot be used; the message is for a condition and
/// never carries the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialsError {
    /// The Secret is missing or unusable: a user must fix it.
    Invalid(String),
    /// MAAS answered and refused the credentials (or is not MAAS, or TLS
    /// failed): waiting will not fix it.
    Refused(String),
    /// The Secret or MAAS could not be read now: retried with backoff.
    Unavailable(String),
}

impl CredentialsError {
    pub fn message(&self) -> &str {
        match self {
            CredentialsError::Invalid(m)
            | CredentialsError::Refused(m)
            | CredentialsError::Unavailable(m) => m,
        }
    }
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CredentialsError {}

/// One cluster's MAAS, as built from its Secret.
#[derive(Clone)]
struct Resolved {
    client: maas::Client,
    api: Arc<MaasView>,
    /// The MAAS user the credentials authenticate as (from `whoami`).
    username: String,
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
            default: Arc::new(MaasView::new(Arc::new(adapters::Maas {
                client: default.clone(),
            }))),
            default_client: default,
            default_username,
            kube,
            ca_pem,
            clients: Mutex::new(ClientCache::new(CLIENT_IDLE, MAX_CLIENTS)),
            watch: None,
            watched: Mutex::new(Vec::new()),
        }
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
            self.cache()
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
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if *watched != ids {
            *watched = ids;
            watch.set_sources(sources);
        }
    }

    fn cache(&self) -> MutexGuard<'_, ClientCache<(String, String), Resolved>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
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
        let version = kube::meta::resource_version(&secret)
            .unwrap_or_default()
            .to_string();
        if let Some(resolved) = self.cache().get(&key, &version, Instant::now()) {
            return Ok(resolved);
        }
        let config = client_config(&secret, &what, self.ca_pem.as_deref())?;
        let client = maas::Client::new(config)
            .map_err(|e| CredentialsError::Invalid(format!("{what}: {e}")))?;
        let username = match client.start_check() {
            StartCheck::Ready(user) => user.username,
            StartCheck::Refused(why) => {
                return Err(CredentialsError::Refused(format!("{what}: {why}")))
            }
            StartCheck::Unreachable(e) => {
                return Err(CredentialsError::Unavailable(format!(
                    "{what}: MAAS not reachable: {e}"
                )))
            }
        };
        for warning in client.security_warnings() {
            log::warn!("{what}: {warning}");
        }
        log::info!("{what}: MAAS {} as user {username:?}", client.api_root());
        let api = MaasView::new(Arc::new(adapters::Maas {
            client: client.clone(),
        }));
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
        self.cache()
            .put(key, version, resolved.clone(), Instant::now());
        Ok(resolved)
    }
}

impl MaasClients for Credentials {
    fn for_cluster(
        &self,
        namespace: &str,
        identity: Option<&IdentityRef>,
    ) -> Result<Arc<dyn MaasApi>, CredentialsError> {
        let api: Arc<dyn MaasApi> = match identity {
            None => self.default.clone(),
            Some(identity) => self.resolve(namespace, identity)?.api,
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
    let value = |key: &str| -> Result<Option<Vec<u8>>, CredentialsError> {
        let Some(encoded) = super::adapters::secret_data(secret, key) else {
            return Ok(None);
        };
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map(Some)
            .map_err(|e| invalid(format!("key {key} is not base64: {e}")))
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
    let api_key = maas::ApiKey::parse(&text(API_KEY_KEY)?).map_err(|_| {
        invalid(format!(
            "{API_KEY_KEY} is not a MAAS API key (expected three parts <consumer>:<token>:<secret>)"
        ))
    })?;
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
    fn unusable_secrets_say_why_and_never_show_the_key() {
        let cases = [
            (json!({"data": {}}), "has no key MAAS_ENDPOINT"),
            (
                json!({"data": {ENDPOINT_KEY: b64("http://m/MAAS")}}),
                "has no key MAAS_API_KEY",
            ),
            (
                json!({"data": {ENDPOINT_KEY: b64("http://m/MAAS"), API_KEY_KEY: b64("secret-but-wrong")}}),
                "is not a MAAS API key",
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
