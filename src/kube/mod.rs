//! Raw Kubernetes REST over ureq: config, requests, typed errors, the watch
//! stream. Blocking, no async runtime; objects are `serde_json::Value`,
//! except where the caller asks for its own type (list pages and watch
//! events decode straight into any `T: DeserializeOwned`).
//!
//! ```text
//! config.rs     Config: kubeconfig (file or bytes) or in-cluster service account
//! client.rs     Client: every verb through one send() (URL, auth, deadline, status)
//! error.rs      Error: one enum, classified from the HTTP status + Status body
//! watch.rs      WatchStream: streaming decoder of watch events
//! yaml.rs       kubeconfig YAML to a serde_json::Value (bounded, core schema)
//! limit.rs      response size limits (per call, per watch event)
//! resources.rs  Resource (group/version/plural) + constants, URL paths
//! meta.rs       metadata readers for serde_json::Value objects
//! time.rs       metav1.Time / MicroTime formatting and RFC 3339 reading
//! ```
//!
//! # API
//!
//! ```text
//! Config::infer(Option<&Path>)              --kubeconfig, else $KUBECONFIG, else in-cluster
//! Config::from_kubeconfig_file(path, ctx)   relative paths resolve against the file's dir
//! Config::from_kubeconfig_yaml(bytes, ctx, base_dir)   workload `<cluster>-kubeconfig` Secrets:
//!                                           base_dir None => file references refused
//! Config::in_cluster()                      token file re-read every 60 s and after a 401
//! Config::new(server, ca_pem).with_bearer_token(t)
//! pub fields: server, namespace, timeout (30 s), connect_timeout (10 s),
//!            max_object_bytes (4 MiB; workload clusters get less)
//!
//! Client::new(Config) -> Result<Client>     Clone + Send + Sync, shares one ureq Agent
//! client.with_timeout(Duration) -> Client   same connections, other per-request deadline
//! client.with_own_connections() -> Client   same server and credentials, its own connections
//! client.close()                            cuts those connections: a blocked watch returns at once
//! client.default_namespace() / server()
//! get(r, ns, name)                          -> Value
//! list(r, ns, &ListParams)                  -> ObjectList { items, resource_version }
//!                                              (all pages; 410 on continue => relist)
//! list_map(r, ns, &ListParams, f)           -> (Vec<U>, resource_version), each item decoded
//!                                              as T and passed through `f` as its page arrives
//! watch::<T>(r, ns, &WatchParams)           -> WatchStream<T>: Iterator<Item = Result<WatchEvent<T>>>
//! create(r, ns, &obj) / replace(r, ns, name, &obj)
//! create_subresource(r, ns, name, "token", &obj)   e.g. TokenRequest
//! patch_merge / patch_status_merge (r, ns, name, &patch)
//! patch_json(r, ns, name, &ops) / replace_status(r, ns, name, &obj)     (feature test-api)
//! delete(r, ns, name, Option<Propagation>)  -> ()
//! add_finalizer(r, &obj, f) / remove_finalizer(r, &obj, f)  -> Value   (feature test-api)
//!                                           JSON patch that first `test`s the whole finalizer
//!                                           list read in `obj`: Conflict if it changed since;
//!                                           no request if nothing to do; ns/name from `obj`
//! get_raw("/readyz")                        -> (status, body), status not classified
//! check_credentials()                       -> Some(user) | None (cannot tell) | Err (refused)
//! ```
//!
//! Methods marked `feature test-api` are used only by the tests; the tests
//! turn the feature on through the crate's dev-dependency on itself.
//!
//! `r` is a [`Resource`] (constants in [`resources`]); `ns` is
//! `Option<&str>`: required for namespaced objects, `None` on list/watch
//! means all namespaces.
//!
//! # Errors
//!
//! No status code is swallowed. [`Error`] variants: `NotFound`, `Conflict`
//! (stale resourceVersion, or a guarded finalizer patch whose list changed),
//! `AlreadyExists`, `Gone` (410: re-list), `Invalid` (422, with causes),
//! `Unauthorized`, `Forbidden`, `TooManyRequests` (`retry_after()`),
//! `Transient` (connect, timeout, 5xx, broken stream), `Tls`, `Other`,
//! `Config`, `Decode`. Helpers: `is_not_found()`, `is_conflict()`,
//! `is_gone()`, `is_transient()`, `retry_after()`, `status()`.
//!
//! # For the informer (src/runtime)
//!
//! ```text
//! let list = client.list(&r, ns, &lp)?;                 // items + list resourceVersion
//! let mut rv = list.resource_version;
//! loop {
//!     let wp = WatchParams { timeout_seconds: jittered_300_to_600, ..WatchParams::after_list(&lp, &rv) };
//!     for event in client.watch(&r, ns, &wp)? {         // Err(Gone) here or in the stream => relist
//!         let event = event?;
//!         if let Some(v) = event.resource_version() { rv = v.to_string(); }
//!         match event { Added(o) | Modified(o) => upsert, Deleted(o) => remove, Bookmark {..} => {} }
//!     }                                                 // clean end => watch again from rv
//! }
//! ```
//!
//! The informer itself lists and watches `Box<RawValue>` items and decodes
//! each into its typed object once (an object that does not decode is
//! skipped, not the whole page or stream).
//!
//! # Limits
//!
//! Every body read is capped by what that call can return, counted after
//! gzip decoding: one object `max_object_bytes`, a list page its `limit` x
//! 128 KiB (at least one object), one watch event `max_object_bytes`, error
//! and non-resource bodies 64 KiB. Over the cap is `Error::Decode` naming
//! the server and the limit (see `limit.rs`).
//!
//! The watch's client-side deadline is `timeout_seconds` + 15 s, so a
//! silent connection cannot hang the thread for longer than that; `close()`
//! ends it at once.

mod client;
mod config;
mod error;
mod limit;
pub mod merge_patch;
pub mod meta;
pub mod resources;
pub mod time;
mod watch;
mod yaml;

pub use client::{Client, ListParams, ObjectList, Propagation, WatchParams, DEFAULT_PAGE_SIZE};
pub use config::{Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, SERVICE_ACCOUNT_DIR};
pub use error::{Error, StatusCause};
pub use limit::DEFAULT_MAX_OBJECT_BYTES;
pub use resources::Resource;
pub use watch::{WatchEvent, WatchStream};

/// Entry points for the fuzz campaign (`tests/fuzz.rs`) into decoders that
/// production reaches only over HTTP: the watch stream and the `Status`
/// classification. Test builds only (feature `test-api`).
#[cfg(any(test, feature = "test-api"))]
pub mod fuzz {
    /// The watch stream decoder over `body`, each event held to
    /// `max_event_bytes` as [`super::Client::watch`] does.
    pub fn watch_stream(body: Vec<u8>, max_event_bytes: u64) -> super::WatchStream {
        let (reader, mark) = super::limit::per_event(std::io::Cursor::new(body), max_event_bytes);
        super::WatchStream::new("WATCH /fuzz".into(), Box::new(reader), mark)
    }

    /// The error a non-2xx answer with this status and body becomes.
    pub fn status_error(status: u16, body: &[u8]) -> super::Error {
        super::error::from_status("GET /fuzz".into(), status, body, None)
    }
}
