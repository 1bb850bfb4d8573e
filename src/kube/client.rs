//! The blocking API client. Every verb goes through [`Client::send`]: build
//! the URL, attach the credential, send with a deadline, classify the
//! status. The verbs only choose method, path, query and body, and decode.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use ureq::http::{self, Method};
use ureq::{AsSendBody, Body};

use super::config::{self, Auth, Config};
use super::error::{self, Error};
use super::limit::{self, MAX_SMALL_BODY};
#[cfg(any(test, feature = "test-api"))]
use super::meta;
use super::resources::{encode, Resource};
use super::watch::WatchStream;
use crate::clock::peer_seconds;
use crate::sync::lock;

/// client-go's file token source re-reads the token this often.
const TOKEN_REREAD_INTERVAL: Duration = Duration::from_secs(60);
/// Page size when [`ListParams::limit`] is unset (client-go's pager default).
pub const DEFAULT_PAGE_SIZE: u32 = 500;
/// How far the client-side deadline of a watch lies beyond its
/// `timeoutSeconds`: the server closes first; this only catches a server or
/// proxy that never does.
const WATCH_DEADLINE_MARGIN: Duration = Duration::from_secs(15);
/// How often `list` restarts after its continue token expired mid-way.
const MAX_LIST_RESTARTS: u32 = 3;
/// Distinct API server warning texts remembered (to log each at WARN once).
const MAX_WARNINGS_REMEMBERED: usize = 64;

/// The API server warning texts already logged at WARN in this process.
/// The same warning comes back on every request of a kind (e.g. our
/// finalizer names, which must stay Go-compatible, on every finalizer add):
/// once is news, repeats are noise.
static WARNINGS_SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Is this the first time `text` is seen (and room is left to remember it)?
fn first_sighting(seen: &mut BTreeSet<String>, text: &str) -> bool {
    if seen.contains(text) || seen.len() >= MAX_WARNINGS_REMEMBERED {
        return false;
    }
    seen.insert(text.to_string())
}

const JSON: &str = "application/json";
const MERGE_PATCH: &str = "application/merge-patch+json";
/// Server-side apply; JSON is YAML.
const APPLY_PATCH: &str = "application/apply-patch+yaml";
#[cfg(any(test, feature = "test-api"))]
const JSON_PATCH: &str = "application/json-patch+json";

/// Selectors and page size for [`Client::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Page size; `None` means [`DEFAULT_PAGE_SIZE`]. `list` always returns
    /// every item, following continue tokens.
    pub limit: Option<u32>,
}

impl ListParams {
    pub fn labels(selector: impl Into<String>) -> ListParams {
        ListParams {
            label_selector: Some(selector.into()),
            ..ListParams::default()
        }
    }
}

/// Parameters of [`Client::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Only changes after this version (from a list or a previous event).
    /// `None` starts with synthetic ADDED events for every existing object.
    pub resource_version: Option<String>,
    /// The server ends the watch cleanly after this long; the client gives
    /// up a little later. Default 290 s.
    pub timeout_seconds: u32,
    /// Ask for BOOKMARK events. Default true.
    pub allow_bookmarks: bool,
}

impl Default for WatchParams {
    fn default() -> Self {
        WatchParams {
            label_selector: None,
            field_selector: None,
            resource_version: None,
            timeout_seconds: 290,
            allow_bookmarks: true,
        }
    }
}

impl WatchParams {
    /// The watch that continues a [`Client::list`] with the same selectors.
    pub fn after_list(list: &ListParams, resource_version: &str) -> WatchParams {
        WatchParams {
            label_selector: list.label_selector.clone(),
            field_selector: list.field_selector.clone(),
            resource_version: Some(resource_version.to_string()),
            ..WatchParams::default()
        }
    }
}

/// The items of a list and the collection's resourceVersion at that moment
/// (a consistent snapshot across pages): watch from it to see what changed
/// since.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectList {
    /// Each item has `apiVersion` and `kind` filled in (built-in lists omit
    /// them on the wire).
    pub items: Vec<Value>,
    pub resource_version: String,
}

/// What happens to dependents when an owner is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted first; the owner waits for them.
    Foreground,
    /// The owner goes at once; the garbage collector deletes dependents.
    Background,
    /// Dependents stay, their owner references removed.
    Orphan,
}

impl Propagation {
    fn as_str(self) -> &'static str {
        match self {
            Propagation::Foreground => "Foreground",
            Propagation::Background => "Background",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// A Kubernetes API client. Cheap to clone; clones share one connection
/// pool and token cache. `Send + Sync`.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Deadline of each non-watch request.
    timeout: Duration,
}

struct Inner {
    agent: ureq::Agent,
    server: String,
    /// See [`Config::max_object_bytes`].
    max_object_bytes: u64,
    namespace: Option<String>,
    auth: Auth,
    token_cache: Mutex<Option<CachedToken>>,
}

struct CachedToken {
    token: String,
    read_at: Instant,
    /// Set after a 401: the file may hold a newer token.
    stale: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.inner.server)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// One request, before credentials: what `send` needs.
struct Request<'a> {
    method: Method,
    path: String,
    query: Vec<(&'static str, String)>,
    body: Option<(&'static str, Vec<u8>)>,
    timeout: Duration,
    /// For errors: e.g. "GET /api/v1/namespaces/x/configmaps/y".
    what: &'a str,
}

/// Resolves every host to one address (the port stays the URL's): the
/// URL keeps its name, so TLS verifies the certificate for that name.
/// (ureq's resolver interface is not under semver: Cargo.lock pins it.)
#[derive(Debug)]
struct PinnedResolver(std::net::IpAddr);

impl ureq::unversioned::resolver::Resolver for PinnedResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        _config: &ureq::config::Config,
        _timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let port = uri.port_u16().unwrap_or(443);
        let mut addresses = self.empty();
        addresses.push(std::net::SocketAddr::new(self.0, port));
        Ok(addresses)
    }
}

impl Client {
    /// Builds the HTTPS agent for `config` (whose TLS material was checked
    /// when the config was built).
    pub fn new(config: Config) -> Result<Client, Error> {
        if let Auth::Bearer(token) = &config.auth {
            config::check_token(token)?;
        }
        if config.insecure_skip_tls_verify {
            log::warn!(
                "TLS verification of {} is disabled (insecure-skip-tls-verify in kubeconfig)",
                config.server
            );
        }
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(config.tls_config())
            .timeout_connect(Some(config.connect_timeout))
            .timeout_global(Some(config.timeout))
            .user_agent(concat!("capmaas/", env!("CARGO_PKG_VERSION")))
            .accept(JSON)
            .input_buffer_size(limit::CONNECTION_READ_BUFFER)
            .output_buffer_size(limit::CONNECTION_WRITE_BUFFER)
            .max_response_header_size(limit::MAX_RESPONSE_HEAD)
            .build();
        let agent = match config.connect_to {
            None => agent_config.new_agent(),
            Some(address) => ureq::Agent::with_parts(
                agent_config,
                ureq::unversioned::transport::DefaultConnector::default(),
                PinnedResolver(address),
            ),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                agent,
                server: config.server,
                max_object_bytes: config.max_object_bytes,
                namespace: config.namespace,
                auth: config.auth,
                token_cache: Mutex::new(None),
            }),
            timeout: config.timeout,
        })
    }

    /// The same client (shared connections) with another per-request
    /// deadline, e.g. short probes of workload clusters.
    pub fn with_timeout(&self, timeout: Duration) -> Client {
        Client {
            inner: Arc::clone(&self.inner),
            timeout,
        }
    }

    /// The same server and credentials over connections of its own, which
    /// [`close`](Client::close) can cut without touching this client's. For
    /// a long-lived watch that must stop at once on shutdown.
    pub fn with_own_connections(&self) -> Client {
        Client {
            inner: Arc::new(Inner {
                agent: ureq::Agent::new_with_config(self.inner.agent.config().clone()),
                server: self.inner.server.clone(),
                max_object_bytes: self.inner.max_object_bytes,
                namespace: self.inner.namespace.clone(),
                auth: self.inner.auth.clone(),
                token_cache: Mutex::new(None),
            }),
            timeout: self.timeout,
        }
    }

    /// Closes every connection of this client and of the clones sharing
    /// them: a request in flight, a watch blocked on a read included, fails
    /// at once, and later requests fail too.
    pub fn close(&self) {
        self.inner.agent.clone().shutdown();
    }

    /// A start-up check of our credentials: who the API server takes us
    /// for, from a SelfSubjectReview (which every authenticated user may
    /// create, Kubernetes 1.28+). `Ok(Some(user))`: authenticated.
    /// `Ok(None)`: cannot tell now (unreachable, 5xx, an older server, a
    /// policy forbidding the review); the caller goes on and its requests
    /// retry. `Err`: the credentials or TLS settings are refused, which
    /// waiting will not fix.
    pub fn check_credentials(&self) -> Result<Option<String>, Error> {
        let review = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
        });
        let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews".to_string();
        let answer = self.send_value(Method::POST, path, Vec::new(), JSON, &review);
        match answer {
            Ok(review) => Ok(Some(
                review
                    .pointer("/status/userInfo/username")
                    .and_then(Value::as_str)
                    .unwrap_or("(no user name)")
                    .to_string(),
            )),
            Err(e @ (Error::Unauthorized { .. } | Error::Tls { .. } | Error::Config(_))) => Err(e),
            Err(e) => {
                log::debug!("credentials not checked at start: {e}");
                Ok(None)
            }
        }
    }

    /// The config's default namespace (kubeconfig context, or the pod's).
    pub fn default_namespace(&self) -> Option<&str> {
        self.inner.namespace.as_deref()
    }

    pub fn server(&self) -> &str {
        &self.inner.server
    }

    pub fn get(&self, r: &Resource, ns: Option<&str>, name: &str) -> Result<Value, Error> {
        let path = object_path(r, ns, name, None)?;
        self.json(Method::GET, path, Vec::new(), None)
    }

    /// Every object matching `p`, page by page, and the list's
    /// resourceVersion. A continue token that expires half-way (410) restarts
    /// the list from the first page, so the result is always one snapshot.
    pub fn list(
        &self,
        r: &Resource,
        ns: Option<&str>,
        p: &ListParams,
    ) -> Result<ObjectList, Error> {
        let (items, resource_version) = self.list_map(r, ns, p, |mut item: Value| {
            fill_type(&mut item, r);
            Some(item)
        })?;
        Ok(ObjectList {
            items,
            resource_version,
        })
    }

    /// [`list`](Client::list), with each object decoded as `T` and passed
    /// through `f` as its page arrives (`None` drops it): a large list never
    /// exists whole, only as what `f` keeps (informers keep typed objects;
    /// `T` may be `Box<RawValue>` to decode each item later). Items are as
    /// the server sent them: without `apiVersion` and `kind`. A restart
    /// after an expired continue token discards what `f` returned so far, so
    /// the result is still one snapshot.
    pub fn list_map<T: DeserializeOwned, U>(
        &self,
        r: &Resource,
        ns: Option<&str>,
        p: &ListParams,
        mut f: impl FnMut(T) -> Option<U>,
    ) -> Result<(Vec<U>, String), Error> {
        let path = r.path(ns, None, None);
        let mut restarts = 0;
        'restart: loop {
            let mut items = Vec::new();
            let mut continue_token: Option<String> = None;
            loop {
                let mut query = selectors(&p.label_selector, &p.field_selector);
                query.push(("limit", p.limit.unwrap_or(DEFAULT_PAGE_SIZE).to_string()));
                if let Some(token) = &continue_token {
                    query.push(("continue", token.clone()));
                }
                let page_size = p.limit.unwrap_or(DEFAULT_PAGE_SIZE);
                let page_limit = limit::list_page_limit(page_size, self.inner.max_object_bytes);
                let page: ListPage<T> =
                    match self.json_limited(Method::GET, path.clone(), query, None, page_limit) {
                        Err(e) if e.is_gone() && continue_token.is_some() => {
                            if restarts >= MAX_LIST_RESTARTS {
                                return Err(e);
                            }
                            restarts += 1;
                            log::debug!("{}: continue token expired, listing again", path);
                            continue 'restart;
                        }
                        result => result?,
                    };
                items.extend(
                    page.items
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(&mut f),
                );
                match page.metadata.continue_token {
                    Some(token) if !token.is_empty() => continue_token = Some(token),
                    _ => return Ok((items, page.metadata.resource_version)),
                }
            }
        }
    }

    /// Opens a watch. Errors before the first event (including a 410 for an
    /// expired `resource_version`) come back here; later ones from the
    /// stream. The client deadline is `timeout_seconds` plus a margin.
    /// Objects are decoded as `T` (`Value`, a typed struct, or
    /// `Box<RawValue>`).
    pub fn watch<T: DeserializeOwned>(
        &self,
        r: &Resource,
        ns: Option<&str>,
        p: &WatchParams,
    ) -> Result<WatchStream<T>, Error> {
        let path = r.path(ns, None, None);
        let mut query = selectors(&p.label_selector, &p.field_selector);
        query.push(("watch", "true".to_string()));
        if let Some(rv) = &p.resource_version {
            query.push(("resourceVersion", rv.clone()));
        }
        if p.allow_bookmarks {
            query.push(("allowWatchBookmarks", "true".to_string()));
        }
        query.push(("timeoutSeconds", p.timeout_seconds.to_string()));
        let timeout = Duration::from_secs(u64::from(p.timeout_seconds)) + WATCH_DEADLINE_MARGIN;
        let what = format!("WATCH {path}");
        let response = self.send(Request {
            method: Method::GET,
            path,
            query,
            body: None,
            timeout,
            what: &what,
        })?;
        let response = self.check(&what, response)?;
        // The stream is unbounded by nature; each event is not.
        let (reader, mark) = limit::per_event(
            response.into_body().into_reader(),
            self.inner.max_object_bytes,
        );
        let what = format!("{what} (from {})", self.inner.server);
        Ok(WatchStream::new(what, Box::new(reader), mark))
    }

    /// Creates `obj` (POST to the collection). `AlreadyExists` if taken.
    pub fn create(&self, r: &Resource, ns: Option<&str>, obj: &Value) -> Result<Value, Error> {
        let path = r.path(ns, None, None);
        self.send_value(Method::POST, path, Vec::new(), JSON, obj)
    }

    /// POST to a subresource of an existing object, e.g. a ServiceAccount's
    /// `token` (TokenRequest) or a Pod's `eviction`.
    pub fn create_subresource(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        subresource: &str,
        obj: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, Some(subresource))?;
        self.send_value(Method::POST, path, Vec::new(), JSON, obj)
    }

    /// Replaces the whole object (PUT). `obj` must carry the
    /// `metadata.resourceVersion` it was read at; `Conflict` if stale.
    /// Fields `obj` lacks are dropped: prefer a patch.
    pub fn replace(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, None)?;
        self.send_value(Method::PUT, path, Vec::new(), JSON, obj)
    }

    /// RFC 7386 merge patch: maps merge, lists are replaced, `null` deletes.
    /// Put `metadata.resourceVersion` in the patch for optimistic locking.
    pub fn patch_merge(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, None)?;
        self.send_value(Method::PATCH, path, Vec::new(), MERGE_PATCH, patch)
    }

    /// RFC 6902 JSON patch (`ops` is an array of operations). A failing
    /// `test` op comes back as `Invalid` (422).
    #[cfg(any(test, feature = "test-api"))]
    pub fn patch_json(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        ops: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, None)?;
        self.send_value(Method::PATCH, path, Vec::new(), JSON_PATCH, ops)
    }

    /// Merge patch on the `status` subresource (only `.status` is applied).
    pub fn patch_status_merge(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, Some("status"))?;
        self.send_value(Method::PATCH, path, Vec::new(), MERGE_PATCH, patch)
    }

    /// Server-side apply on the `status` subresource as `field_manager`,
    /// taking over fields other managers set (`force`). `obj` carries
    /// `apiVersion`, `kind`, `metadata.name` and only the fields to own: in
    /// a list-type map (e.g. Cluster API's `status.conditions`, keyed by
    /// type) only the entries sent are set, the others stay.
    pub fn apply_status(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        field_manager: &str,
        obj: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, Some("status"))?;
        let query = vec![
            ("fieldManager", field_manager.to_string()),
            ("force", "true".to_string()),
        ];
        self.send_value(Method::PATCH, path, query, APPLY_PATCH, obj)
    }

    /// PUT on the `status` subresource: replaces `.status`, guarded by the
    /// object's `metadata.resourceVersion`.
    #[cfg(any(test, feature = "test-api"))]
    pub fn replace_status(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> Result<Value, Error> {
        let path = object_path(r, ns, name, Some("status"))?;
        self.send_value(Method::PUT, path, Vec::new(), JSON, obj)
    }

    /// Deletes the object. With finalizers it stays (with a
    /// deletionTimestamp) until they are removed. `NotFound` if absent.
    pub fn delete(
        &self,
        r: &Resource,
        ns: Option<&str>,
        name: &str,
        propagation: Option<Propagation>,
    ) -> Result<(), Error> {
        let path = object_path(r, ns, name, None)?;
        let query = match propagation {
            Some(p) => vec![("propagationPolicy", p.as_str().to_string())],
            None => Vec::new(),
        };
        self.json::<Value>(Method::DELETE, path, query, None)
            .map(|_| ())
    }

    /// Adds `finalizer` to `obj` (as last read) unless present, with a JSON
    /// patch that first tests the finalizer list is still what `obj` shows:
    /// a concurrent change fails with `Conflict` instead of being clobbered.
    /// Returns the updated object (or `obj` itself if nothing to do).
    #[cfg(any(test, feature = "test-api"))]
    pub fn add_finalizer(
        &self,
        r: &Resource,
        obj: &Value,
        finalizer: &str,
    ) -> Result<Value, Error> {
        let current = meta::finalizers(obj);
        if current.contains(&finalizer) {
            return Ok(obj.clone());
        }
        let ops = if current.is_empty() {
            // An empty list is stored as an absent field; `test` for null
            // matches both.
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
            ])
        } else {
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": current},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
            ])
        };
        self.guarded_patch(r, obj, &ops)
    }

    /// Removes `finalizer` from `obj` (as last read) if present, guarded like
    /// [`Client::add_finalizer`]: `Conflict` if the list changed meanwhile.
    #[cfg(any(test, feature = "test-api"))]
    pub fn remove_finalizer(
        &self,
        r: &Resource,
        obj: &Value,
        finalizer: &str,
    ) -> Result<Value, Error> {
        let current = meta::finalizers(obj);
        let Some(index) = current.iter().position(|f| *f == finalizer) else {
            return Ok(obj.clone());
        };
        let ops = serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ]);
        self.guarded_patch(r, obj, &ops)
    }

    /// GET of a non-resource path such as `/readyz` or `/version`: the
    /// status and body as they came (transport failures are still errors).
    pub fn get_raw(&self, path_and_query: &str) -> Result<(u16, String), Error> {
        // A query in `path_and_query` (e.g. `/readyz?verbose`) is sent as
        // written.
        let path = path_and_query.to_string();
        let what = format!("GET {path}");
        let response = self.send(Request {
            method: Method::GET,
            path,
            query: Vec::new(),
            body: None,
            timeout: self.timeout,
            what: &what,
        })?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .into_with_config()
            .limit(MAX_SMALL_BODY)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| self.body_error(&what, e, MAX_SMALL_BODY))?;
        Ok((status, body))
    }

    #[cfg(any(test, feature = "test-api"))]
    fn guarded_patch(&self, r: &Resource, obj: &Value, ops: &Value) -> Result<Value, Error> {
        let name = meta::name(obj).unwrap_or_default();
        match self.patch_json(r, meta::namespace(obj), name, ops) {
            // A JSON patch that does not apply comes back as a bare 422
            // ("the server rejected our request due to an error in our
            // request", no causes); validation failures always name their
            // field. Our ops apply whenever the `test` passes, so a bare
            // 422 means the finalizers changed since `obj` was read.
            Err(Error::Invalid {
                request,
                message,
                causes,
            }) if causes.is_empty() => Err(Error::Conflict {
                request,
                message: format!("finalizers changed since read ({message})"),
            }),
            other => other,
        }
    }

    /// [`json`](Client::json) with `body` encoded as the request body.
    fn send_value(
        &self,
        method: Method,
        path: String,
        query: Vec<(&'static str, String)>,
        content_type: &'static str,
        body: &Value,
    ) -> Result<Value, Error> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| Error::Config(format!("encoding request body: {e}")))?;
        self.json(method, path, query, Some((content_type, bytes)))
    }

    /// Sends and decodes a JSON answer of one object (an empty body reads as
    /// `null`); non-2xx become errors.
    fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        query: Vec<(&'static str, String)>,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<T, Error> {
        self.json_limited(method, path, query, body, self.inner.max_object_bytes)
    }

    /// [`json`](Client::json) with a body of up to `limit` decoded bytes.
    fn json_limited<T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        query: Vec<(&'static str, String)>,
        body: Option<(&'static str, Vec<u8>)>,
        limit: u64,
    ) -> Result<T, Error> {
        let what = format!("{method} {path}");
        let response = self.send(Request {
            method,
            path,
            query,
            body,
            timeout: self.timeout,
            what: &what,
        })?;
        let response = self.check(&what, response)?;
        let bytes = response
            .into_body()
            .into_with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|e| self.body_error(&what, e, limit))?;
        let bytes = if bytes.is_empty() {
            b"null".to_vec()
        } else {
            bytes
        };
        // from_str, not from_slice: every JSON body is decoded through the
        // one `StrRead` (each reader type costs a copy of every Deserialize
        // impl: ~100 KB of static binary for from_slice's `SliceRead`).
        let text = match std::str::from_utf8(&bytes) {
            Ok(text) => text,
            Err(e) => {
                return Err(Error::Decode {
                    request: what,
                    message: format!("the body is not UTF-8: {e}"),
                })
            }
        };
        serde_json::from_str(text).map_err(|e| Error::Decode {
            request: what,
            message: e.to_string(),
        })
    }

    /// A failure while reading a body: over `limit` names the server and is
    /// a [`Error::Decode`] (not transient: the same call brings the same
    /// body); anything else is classified as a transport failure.
    fn body_error(&self, what: &str, e: ureq::Error, limit: u64) -> Error {
        match e {
            ureq::Error::BodyExceedsLimit(_) => Error::Decode {
                request: what.to_string(),
                message: format!(
                    "{} sent more than {} (after decompression), more than this call \
                     can return; not read further",
                    self.inner.server,
                    limit::human(limit)
                ),
            },
            other => transport_error(what, other),
        }
    }

    /// The one place a request goes out: URL, credential, deadline, send,
    /// metrics. Any HTTP status is returned as a response; see `check`.
    fn send(&self, req: Request<'_>) -> Result<http::Response<Body>, Error> {
        let mut url = format!("{}{}", self.inner.server, req.path);
        for (i, (key, value)) in req.query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(key);
            url.push('=');
            url.push_str(&encode(value));
        }
        let mut builder = http::Request::builder()
            .method(req.method.clone())
            .uri(&url);
        if let Some(token) = self.bearer_token()? {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        if let Some((content_type, _)) = &req.body {
            builder = builder.header("Content-Type", *content_type);
        }

        let started = Instant::now();
        let result = match req.body {
            Some((_, bytes)) => self.run(builder.body(bytes), req.timeout, req.what),
            None => self.run(builder.body(()), req.timeout, req.what),
        };
        let code = match &result {
            Ok(response) => response.status().as_str().to_string(),
            Err(_) => "<error>".to_string(),
        };
        crate::metrics::counter_inc(
            "rest_client_requests_total",
            "Kubernetes API requests by method and status code.",
            &[("code", &code), ("method", req.method.as_str())],
        );
        crate::metrics::observe(
            "rest_client_request_duration_seconds",
            "Kubernetes API request latency (until response headers) by method.",
            &[("verb", req.method.as_str())],
            started.elapsed().as_secs_f64(),
        );
        let response = result?;
        for warning in response.headers().get_all("warning") {
            let text = String::from_utf8_lossy(warning.as_bytes());
            let first = first_sighting(&mut lock(&WARNINGS_SEEN), &text);
            if first {
                log::warn!("{}: API server warning: {text}", req.what);
            } else {
                log::debug!("{}: API server warning (again): {text}", req.what);
            }
        }
        Ok(response)
    }

    fn run<B: AsSendBody>(
        &self,
        request: Result<http::Request<B>, http::Error>,
        timeout: Duration,
        what: &str,
    ) -> Result<http::Response<Body>, Error> {
        let request = request.map_err(|e| Error::Config(format!("{what}: bad request: {e}")))?;
        let request = self
            .inner
            .agent
            .configure_request(request)
            .timeout_global(Some(timeout))
            .build();
        self.inner
            .agent
            .run(request)
            .map_err(|e| transport_error(what, e))
    }

    /// Passes 2xx through; turns anything else into a typed error, read from
    /// the `Status` body.
    fn check(
        &self,
        what: &str,
        response: http::Response<Body>,
    ) -> Result<http::Response<Body>, Error> {
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        if status == 401 {
            self.mark_token_stale();
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| peer_seconds(v, error::MAX_RETRY_AFTER));
        // An unreadable error body still leaves the status to classify by.
        let body = response
            .into_body()
            .into_with_config()
            .limit(MAX_SMALL_BODY)
            .read_to_vec()
            .unwrap_or_default();
        Err(error::from_status(
            what.to_string(),
            status,
            &body,
            retry_after,
        ))
    }

    /// The bearer token for the next request. A token file is re-read every
    /// minute and after a 401 (kubelet rotates projected tokens); if the
    /// re-read fails, the last good token is used and the read retried.
    fn bearer_token(&self) -> Result<Option<String>, Error> {
        let path = match &self.inner.auth {
            Auth::None => return Ok(None),
            Auth::Bearer(token) => return Ok(Some(token.clone())),
            Auth::TokenFile(path) => path,
        };
        let mut cache = lock(&self.inner.token_cache);
        if let Some(cached) = cache.as_ref() {
            if !cached.stale && cached.read_at.elapsed() < TOKEN_REREAD_INTERVAL {
                return Ok(Some(cached.token.clone()));
            }
        }
        match config::read_token(path) {
            Ok(token) => {
                *cache = Some(CachedToken {
                    token: token.clone(),
                    read_at: Instant::now(),
                    stale: false,
                });
                Ok(Some(token))
            }
            Err(e) => match cache.as_ref() {
                Some(cached) => {
                    log::warn!("{e}; using the previous token");
                    Ok(Some(cached.token.clone()))
                }
                None => Err(e),
            },
        }
    }

    fn mark_token_stale(&self) {
        let mut cache = lock(&self.inner.token_cache);
        if let Some(cached) = cache.as_mut() {
            cached.stale = true;
        }
    }
}

#[derive(Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
struct ListPage<T> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Option<Vec<T>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

fn fill_type(item: &mut Value, r: &Resource) {
    if let Some(map) = item.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(r.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(r.kind.to_string()));
    }
}

fn selectors(labels: &Option<String>, fields: &Option<String>) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if let Some(s) = labels.as_ref().filter(|s| !s.is_empty()) {
        query.push(("labelSelector", s.clone()));
    }
    if let Some(s) = fields.as_ref().filter(|s| !s.is_empty()) {
        query.push(("fieldSelector", s.clone()));
    }
    query
}

fn object_path(
    r: &Resource,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
) -> Result<String, Error> {
    if name.is_empty() {
        return Err(Error::Config(format!("{}: empty object name", r.plural)));
    }
    if r.namespaced && ns.is_none_or(str::is_empty) {
        return Err(Error::Config(format!(
            "{} {name:?}: namespaced resource needs a namespace",
            r.plural
        )));
    }
    Ok(r.path(ns, Some(name), sub))
}

/// Classifies a failure to get an answer at all.
fn transport_error(what: &str, e: ureq::Error) -> Error {
    let request = what.to_string();
    match e {
        ureq::Error::Tls(m) => Error::Tls {
            request,
            message: m.to_string(),
        },
        ureq::Error::Pem(e) => Error::Tls {
            request,
            message: e.to_string(),
        },
        ureq::Error::Rustls(e) => Error::Tls {
            request,
            message: e.to_string(),
        },
        // rustls reports handshake failures (unknown CA, bad certificate)
        // as I/O errors wrapping its own error.
        ureq::Error::Io(io) if io.get_ref().is_some_and(|e| e.is::<rustls::Error>()) => {
            Error::Tls {
                request,
                message: io.to_string(),
            }
        }
        ureq::Error::BodyExceedsLimit(limit) => Error::Decode {
            request,
            message: format!("response body larger than {limit} bytes"),
        },
        ureq::Error::BadUri(m) => Error::Config(format!("{what}: bad URL: {m}")),
        ureq::Error::Timeout(t) => Error::Transient {
            request,
            status: None,
            message: format!("timed out ({t})"),
        },
        other => Error::Transient {
            request,
            status: None,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources::{CONFIG_MAPS, NODES};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::thread::JoinHandle;

    /// A plain-HTTP server answering one connection per canned response, in
    /// order; returns its base URL and, at the end, each request's head.
    fn serve(responses: Vec<(u16, &'static str, String)>) -> (String, JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let mut heads = Vec::new();
            for (status, extra_headers, body) in responses {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if line == "\r\n" || line.is_empty() {
                        break;
                    }
                    head.push_str(&line);
                }
                // Read the body too: closing a socket with unread bytes in it
                // makes the kernel send a reset, which can reach the client
                // before our answer does.
                let length = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                let mut body_in = vec![0; length];
                reader.read_exact(&mut body_in).unwrap();
                heads.push(head);
                let mut stream = reader.into_inner();
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra_headers}\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
            heads
        });
        (url, handle)
    }

    fn client_for(url: &str) -> Client {
        Client::new(Config::new(url, None).unwrap()).unwrap()
    }

    #[test]
    fn each_distinct_warning_is_news_once_and_the_memory_is_bounded() {
        let mut seen = BTreeSet::new();
        let finalizer = r#"299 - "metadata.finalizers: prefer a domain-qualified finalizer name""#;
        assert!(first_sighting(&mut seen, finalizer));
        assert!(!first_sighting(&mut seen, finalizer));
        assert!(first_sighting(&mut seen, "299 - \"another\""));
        for i in 0..100 {
            first_sighting(&mut seen, &format!("299 - \"warning {i}\""));
        }
        assert_eq!(seen.len(), MAX_WARNINGS_REMEMBERED);
        assert!(!first_sighting(&mut seen, "299 - \"one too many\""));
        assert!(!first_sighting(&mut seen, finalizer));
    }

    #[test]
    fn list_starts_over_when_the_continue_token_expires() {
        let page = |items: &str, rv: &str, cont: &str| {
            (
                200,
                "",
                format!(
                    r#"{{"metadata":{{"resourceVersion":"{rv}","continue":"{cont}"}},"items":[{items}]}}"#
                ),
            )
        };
        let a = r#"{"metadata":{"name":"a"}}"#;
        let b = r#"{"metadata":{"name":"b"}}"#;
        let expired =
            r#"{"kind":"Status","code":410,"reason":"Expired","message":"continue token expired"}"#;
        let (url, server) = serve(vec![
            page(a, "5", "tok+/="),
            (410, "", expired.to_string()),
            page(a, "9", "t2"),
            page(b, "9", ""),
        ]);
        let params = ListParams {
            limit: Some(1),
            ..ListParams::labels("app=x")
        };
        let list = client_for(&url)
            .list(&CONFIG_MAPS, Some("ns"), &params)
            .unwrap();
        let names: Vec<_> = list.items.iter().filter_map(meta::name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(list.resource_version, "9");

        let heads = server.join().unwrap();
        let lines: Vec<&str> = heads.iter().map(|h| h.lines().next().unwrap()).collect();
        assert_eq!(
            lines,
            [
                "GET /api/v1/namespaces/ns/configmaps?labelSelector=app%3Dx&limit=1 HTTP/1.1",
                "GET /api/v1/namespaces/ns/configmaps?labelSelector=app%3Dx&limit=1&continue=tok%2B%2F%3D HTTP/1.1",
                "GET /api/v1/namespaces/ns/configmaps?labelSelector=app%3Dx&limit=1 HTTP/1.1",
                "GET /api/v1/namespaces/ns/configmaps?labelSelector=app%3Dx&limit=1&continue=t2 HTTP/1.1",
            ]
        );
    }

    #[test]
    fn retry_after_header_and_server_errors_are_classified() {
        let throttled =
            r#"{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}"#;
        let (url, server) = serve(vec![
            (429, "Retry-After: 7\r\n", throttled.to_string()),
            (
                429,
                "Retry-After: 18446744073709551615\r\n",
                throttled.to_string(),
            ),
            (503, "", "<html>unavailable</html>".to_string()),
        ]);
        let client = client_for(&url);
        let err = client.get(&CONFIG_MAPS, Some("ns"), "x").unwrap_err();
        assert!(matches!(err, Error::TooManyRequests { .. }), "{err}");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
        // Issue 19 item 2: the peer's number, bounded where it is read.
        let err = client.get(&CONFIG_MAPS, Some("ns"), "x").unwrap_err();
        assert_eq!(err.retry_after(), Some(error::MAX_RETRY_AFTER));
        let err = client.get(&CONFIG_MAPS, Some("ns"), "x").unwrap_err();
        assert!(
            matches!(
                err,
                Error::Transient {
                    status: Some(503),
                    ..
                }
            ),
            "{err}"
        );
        server.join().unwrap();

        // Nobody listening any more: a transport failure, also transient.
        let err = client.get(&CONFIG_MAPS, Some("ns"), "x").unwrap_err();
        assert!(
            matches!(err, Error::Transient { status: None, .. }),
            "{err}"
        );
    }

    #[test]
    fn writes_send_the_patch_content_types_and_bearer_token() {
        let ok = || (200, "", "{}".to_string());
        let (url, server) = serve(vec![ok(), ok(), ok(), ok(), ok()]);
        let client =
            Client::new(Config::new(&url, None).unwrap().with_bearer_token("tkn")).unwrap();
        let patch = serde_json::json!({});
        client
            .patch_merge(&CONFIG_MAPS, Some("ns"), "x", &patch)
            .unwrap();
        client
            .patch_json(&CONFIG_MAPS, Some("ns"), "x", &serde_json::json!([]))
            .unwrap();
        client
            .patch_status_merge(&CONFIG_MAPS, Some("ns"), "x", &patch)
            .unwrap();
        client
            .delete(&CONFIG_MAPS, Some("ns"), "x", Some(Propagation::Foreground))
            .unwrap();
        client
            .apply_status(&CONFIG_MAPS, Some("ns"), "x", "capmaas", &patch)
            .unwrap();
        let heads = server.join().unwrap();
        let has = |i: usize, needle: &str| {
            heads[i]
                .to_ascii_lowercase()
                .contains(&needle.to_ascii_lowercase())
        };
        assert!(has(0, "PATCH /api/v1/namespaces/ns/configmaps/x HTTP/1.1"));
        assert!(has(0, "content-type: application/merge-patch+json"));
        assert!(has(0, "authorization: Bearer tkn"));
        assert!(has(1, "content-type: application/json-patch+json"));
        assert!(has(
            2,
            "PATCH /api/v1/namespaces/ns/configmaps/x/status HTTP/1.1"
        ));
        assert!(has(
            3,
            "DELETE /api/v1/namespaces/ns/configmaps/x?propagationPolicy=Foreground HTTP/1.1"
        ));
        assert!(has(
            4,
            "PATCH /api/v1/namespaces/ns/configmaps/x/status?fieldManager=capmaas&force=true HTTP/1.1"
        ));
        assert!(has(4, "content-type: application/apply-patch+yaml"));
    }

    #[test]
    fn object_paths_need_name_and_namespace() {
        assert_eq!(
            object_path(&CONFIG_MAPS, Some("ns"), "x", None).unwrap(),
            "/api/v1/namespaces/ns/configmaps/x"
        );
        assert!(object_path(&CONFIG_MAPS, None, "x", None).is_err());
        assert!(object_path(&CONFIG_MAPS, Some(""), "x", None).is_err());
        assert!(object_path(&CONFIG_MAPS, Some("ns"), "", None).is_err());
        assert_eq!(
            object_path(&NODES, None, "n1", None).unwrap(),
            "/api/v1/nodes/n1"
        );
    }

    #[test]
    fn fills_type_only_when_missing() {
        let mut item = serde_json::json!({"metadata": {"name": "a"}});
        fill_type(&mut item, &CONFIG_MAPS);
        assert_eq!(item["apiVersion"], "v1");
        assert_eq!(item["kind"], "ConfigMap");
        let mut item = serde_json::json!({"apiVersion": "x/v9", "kind": "K"});
        fill_type(&mut item, &CONFIG_MAPS);
        assert_eq!(item["apiVersion"], "x/v9");
    }

    #[test]
    fn selectors_skip_empty() {
        let q = selectors(&Some("a=b".into()), &Some(String::new()));
        assert_eq!(q, vec![("labelSelector", "a=b".to_string())]);
    }

    #[test]
    fn token_file_is_cached_and_re_read_after_a_401() {
        let dir = std::env::temp_dir().join(format!("kube-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let mut config = Config::new("https://127.0.0.1:1", None).unwrap();
        config.auth = Auth::TokenFile(path.clone());
        let client = Client::new(config).unwrap();
        assert_eq!(client.bearer_token().unwrap().as_deref(), Some("first"));

        // Rotated on disk: the cached token is used until it is a minute
        // old or the server refuses it.
        std::fs::write(&path, "second\n").unwrap();
        assert_eq!(client.bearer_token().unwrap().as_deref(), Some("first"));
        client.mark_token_stale();
        assert_eq!(client.bearer_token().unwrap().as_deref(), Some("second"));

        // A failed re-read keeps the last good token.
        std::fs::remove_file(&path).unwrap();
        client.mark_token_stale();
        assert_eq!(client.bearer_token().unwrap().as_deref(), Some("second"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn client_is_send_sync_and_stream_is_send() {
        fn check<T: Send + Sync>() {}
        fn check_send<T: Send>() {}
        check::<Client>();
        check_send::<WatchStream>();
    }
}
