//! The informer: one thread per watched kind that keeps a [`Store`] in sync
//! with the API server and tells a handler about every change.
//!
//! Objects are decoded once, straight from the list page or watch event
//! bytes into the store's type `T` (see [`Object`]); serde skips what `T`
//! does not name, which is the cache's projection. The store is created by
//! the caller and handed in, so whoever reads it (mappers, reconcilers) can
//! hold it before the informer exists.
//!
//! The thread runs a small explicit state machine (modelled on kube-runtime's
//! `watcher.rs`), one transition per [`Watcher::step`]:
//!
//! ```text
//!            ┌──────────── 410 Gone (watch request or ERROR event) ─────────────┐
//!            ▼                                                                  │
//!         Empty ── list (paged) ok ──► Listed{rv} ── watch opened ──► Watching{rv, stream}
//!           ▲ │                          ▲   │                         │  event: apply, rv = event's
//!           └─┘ list error: backoff      │   └─┘ watch error: backoff  │  bookmark: rv = bookmark's
//!                                        └── clean end of stream ──────┤
//!                                        └── stream error: backoff ────┘
//! ```
//!
//! - A (re)list replaces the store's content and reports the difference:
//!   `Added` for new objects, `Modified` for changed ones (by
//!   resourceVersion), `Deleted` for objects that vanished while we were not
//!   watching. Unchanged objects are not reported; periodic re-queues are
//!   [`spawn_resync`](super::spawn_resync)'s job.
//! - A watch runs from the last resourceVersion seen (an event's or a
//!   bookmark's), with `allowWatchBookmarks` and a server-side timeout picked
//!   at random in 5–10 minutes (client-go's spread), so many informers do not
//!   re-watch in lockstep. When the server closes the watch, the informer
//!   re-watches from where it was: nothing is lost or repeated.
//! - An event whose resourceVersion equals the cached one is a repeat and is
//!   not reported again.
//! - An object that does not decode as `T` (a bug in `T`, since the API
//!   server validates objects against their schema) is logged, counted in
//!   `informer_errors_total`, and treated as absent: it is not cached, and a
//!   cached older version is dropped (reported as `Deleted`). The watch goes
//!   on; one bad object does not stop the others.
//! - Errors other than 410 back off 0.8 s, doubling to 30 s (with jitter),
//!   reset by the next success; a 429's `Retry-After` is honoured. A watch
//!   that ends within a second (or half its timeout) without any event
//!   counts as an error (a broken proxy would otherwise make us spin).
//!
//! The store is updated before the handler is called, so a reconcile
//! triggered by an event always reads at least that version.
//!
//! Stopping: the thread ends when `shutdown` fires, checked between events.
//! A watch blocked on a quiet connection would only notice at its next event
//! (minutes away), so each informer talks over connections of its own and
//! [`Informer::stop`] closes them: the blocked read returns at once and the
//! thread ends.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use super::object::Head;
use super::{Object, ObjectKey, Shutdown, Store};
use crate::backoff::{random_between, Backoff};
use crate::clock::later;
use crate::kube::{self, Client, Resource, WatchEvent};
use crate::metrics;

/// A watch closed sooner than this without any event is suspicious.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// What to watch and how. Build with [`InformerConfig::new`] and the
/// setters; every default is documented on its field.
#[derive(Clone, Debug)]
pub struct InformerConfig {
    pub resource: Resource,
    /// Names the informer in logs, its thread and the `informer` label of
    /// its metrics. Default: the resource's plural (`maasmachines`).
    pub name: String,
    /// Watch one namespace only. Default: all namespaces.
    pub namespace: Option<String>,
    /// Server-side label filter, e.g. for Secrets or `--watch-filter`.
    /// Default: none.
    pub label_selector: Option<String>,
    /// Server-side field filter. Default: none.
    pub field_selector: Option<String>,
    /// Objects per list page. Default 500 (client-go's pager, kube-rs).
    pub page_size: u32,
    /// Server-side watch timeout, chosen at random between the two for each
    /// watch. Default 5 to 10 minutes (client-go). Tests use short ones to
    /// force re-watches.
    pub watch_timeout: (Duration, Duration),
    /// First error backoff. Default 0.8 s (client-go and kube-rs).
    pub initial_backoff: Duration,
    /// Longest error backoff. Default 30 s.
    pub max_backoff: Duration,
    /// Start by watching from this resourceVersion instead of listing. The
    /// store only counts as synced after a list, so this exists for tests
    /// that need the 410 path (a version too old forces a relist).
    #[doc(hidden)]
    pub start_from: Option<String>,
}

impl InformerConfig {
    pub fn new(resource: Resource) -> InformerConfig {
        InformerConfig {
            resource,
            name: resource.plural.to_string(),
            namespace: None,
            label_selector: None,
            field_selector: None,
            page_size: 500,
            watch_timeout: (Duration::from_secs(300), Duration::from_secs(600)),
            initial_backoff: Duration::from_millis(800),
            max_backoff: Duration::from_secs(30),
            start_from: None,
        }
    }

    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    pub fn namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    pub fn watch_timeout(mut self, min: Duration, max: Duration) -> Self {
        self.watch_timeout = (min, max.max(min));
        self
    }

    /// Name plus namespace, for log lines.
    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} in {ns}", self.name),
            None => self.name.clone(),
        }
    }
}

/// One change reported to an informer's handler, after the store has
/// applied it. Objects are the cached ones (the same `Arc`s the store
/// holds).
#[derive(Debug)]
pub enum Event<T> {
    /// The object appeared: in the first list, a relist, or the watch.
    Added(Arc<T>),
    /// The object changed (its resourceVersion differs from the cached one).
    Modified { old: Arc<T>, new: Arc<T> },
    /// The object is gone; this is its last known state.
    Deleted(Arc<T>),
}

impl<T> Clone for Event<T> {
    fn clone(&self) -> Self {
        match self {
            Event::Added(obj) => Event::Added(Arc::clone(obj)),
            Event::Modified { old, new } => Event::Modified {
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Event::Deleted(obj) => Event::Deleted(Arc::clone(obj)),
        }
    }
}

impl<T: Object> Event<T> {
    /// The object as it is now (for `Deleted`: as it was last).
    pub fn object(&self) -> &Arc<T> {
        match self {
            Event::Added(obj) | Event::Deleted(obj) => obj,
            Event::Modified { new, .. } => new,
        }
    }

    /// The key of the object.
    pub fn key(&self) -> Option<ObjectKey> {
        self.object().key()
    }
}

/// A running informer: its thread and the connections only it uses.
pub struct Informer {
    name: String,
    /// The informer's own connections (none for test sources), closed by
    /// [`Informer::stop`].
    connections: Option<Client>,
    handle: JoinHandle<()>,
}

impl Informer {
    /// Starts the watch thread for `config.resource`, filling `store`.
    /// `handler` is called on that thread for every [`Event`]; keep it quick
    /// (map to keys and add them to a queue). The thread talks to the API
    /// server over connections of its own (same server and credentials as
    /// `client`), so [`stop`](Informer::stop) can cut them without touching
    /// anyone else's requests.
    pub fn spawn<T: Object>(
        client: Client,
        config: InformerConfig,
        store: Store<T>,
        handler: impl Fn(&Event<T>) + Send + 'static,
        shutdown: Shutdown,
    ) -> io::Result<Informer> {
        let client = client.with_own_connections();
        let source = KubeSource {
            client: client.clone(),
            config: config.clone(),
        };
        let mut informer = Informer::spawn_with_source(source, config, store, handler, shutdown)?;
        informer.connections = Some(client);
        Ok(informer)
    }

    fn spawn_with_source<T: Object>(
        source: impl Source<T> + 'static,
        config: InformerConfig,
        store: Store<T>,
        handler: impl Fn(&Event<T>) + Send + 'static,
        shutdown: Shutdown,
    ) -> io::Result<Informer> {
        let name = config.describe();
        let mut watcher = Watcher {
            name: name.clone(),
            metric_label: config.name.clone(),
            start_from: config.start_from.clone(),
            source: Box::new(source),
            store,
            handler: Box::new(handler),
            // client-go's jitter: each delay between one and two steps.
            backoff: Backoff::new(config.initial_backoff, config.max_backoff).with_jitter(1.0, 2.0),
            watch_timeout: config.watch_timeout,
            shutdown,
        };
        let handle = thread::Builder::new()
            .name(format!("informer-{}", config.name))
            .spawn(move || watcher.run())?;
        Ok(Informer {
            name,
            connections: None,
            handle,
        })
    }

    /// Ends the thread; call after `shutdown` fired. Closes the informer's
    /// connections, so a list or a watch blocked on a quiet connection
    /// returns at once, then waits for the thread (which, seeing `shutdown`,
    /// neither retries nor logs the cut as an error).
    pub fn stop(self) {
        if let Some(client) = &self.connections {
            client.close();
        }
        if self.handle.join().is_err() {
            log::error!("the informer thread for {} panicked", self.name);
        }
    }
}

type EventStream = Box<dyn Iterator<Item = Result<WatchEvent<Box<RawValue>>, kube::Error>> + Send>;

/// One listed object, decoded: its key and the object (`None` when it does
/// not decode as the store's type).
type Listed<T> = (ObjectKey, Option<Arc<T>>);
type ListResult<T> = Result<(Vec<Listed<T>>, String), kube::Error>;

/// Where objects come from: the API server, or a fake in unit tests. Both
/// hand over each object's JSON text; the watcher decodes it.
trait Source<T>: Send {
    /// A complete, paged list: the objects, each passed through `prepare`
    /// as it arrives, and the list's resourceVersion.
    fn list(
        &mut self,
        prepare: &mut dyn FnMut(Box<RawValue>) -> Option<Listed<T>>,
    ) -> ListResult<T>;
    /// A watch of changes after `resource_version`, closed by the server
    /// after `timeout`.
    fn watch(
        &mut self,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<EventStream, kube::Error>;
}

struct KubeSource {
    client: Client,
    config: InformerConfig,
}

impl<T> Source<T> for KubeSource {
    fn list(
        &mut self,
        prepare: &mut dyn FnMut(Box<RawValue>) -> Option<Listed<T>>,
    ) -> ListResult<T> {
        let params = kube::ListParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            limit: Some(self.config.page_size),
        };
        self.client.list_map(
            &self.config.resource,
            self.config.namespace.as_deref(),
            &params,
            prepare,
        )
    }

    fn watch(
        &mut self,
        resource_version: &str,
        timeout: Duration,
    ) -> Result<EventStream, kube::Error> {
        let params = kube::WatchParams {
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            resource_version: Some(resource_version.to_string()),
            timeout_seconds: u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX),
            allow_bookmarks: true,
        };
        let stream = self.client.watch(
            &self.config.resource,
            self.config.namespace.as_deref(),
            &params,
        )?;
        Ok(Box::new(stream))
    }
}

/// The watcher's states; see the module docs for the transitions.
enum State {
    /// Nothing trustworthy is known: list everything.
    Empty,
    /// The store is in sync as of `resource_version`: watch from there.
    Listed { resource_version: String },
    /// A watch is open; `resource_version` is the last one seen on it.
    Watching {
        resource_version: String,
        stream: EventStream,
        /// Ending before this without any event is suspicious (a broken
        /// proxy): back off before watching again.
        suspicious_before: Instant,
        events: u64,
    },
}

type Handler<T> = Box<dyn Fn(&Event<T>) + Send>;

/// The informer thread's state machine (see the module docs).
struct Watcher<T> {
    /// "maasmachines in ns", for log lines.
    name: String,
    /// The `informer` label of the metrics.
    metric_label: String,
    start_from: Option<String>,
    source: Box<dyn Source<T>>,
    store: Store<T>,
    handler: Handler<T>,
    backoff: Backoff,
    watch_timeout: (Duration, Duration),
    shutdown: Shutdown,
}

/// One object as the server sent it, decoded.
enum Decoded<T> {
    /// Read as `T`.
    Object(ObjectKey, T),
    /// Not readable as `T` (logged); the key and version from its metadata.
    Unreadable(ObjectKey, String),
    /// No metadata.name (logged).
    Nameless,
}

impl<T: Object> Watcher<T> {
    fn run(&mut self) {
        let mut state = match self.start_from.take() {
            Some(resource_version) => State::Listed { resource_version },
            None => State::Empty,
        };
        while !self.shutdown.is_triggered() {
            state = self.step(state);
        }
        log::debug!("informer for {} stopped", self.name);
    }

    fn step(&mut self, state: State) -> State {
        match state {
            State::Empty => {
                let (name, metric_label) = (self.name.clone(), self.metric_label.clone());
                let mut prepare = |raw: Box<RawValue>| match decode::<T>(&name, &metric_label, &raw)
                {
                    Decoded::Object(key, obj) => Some((key, Some(Arc::new(obj)))),
                    Decoded::Unreadable(key, _) => Some((key, None)),
                    Decoded::Nameless => None,
                };
                match self.source.list(&mut prepare) {
                    Ok((items, resource_version)) => {
                        self.count(
                            "informer_lists_total",
                            "Complete lists (initial and after 410).",
                        );
                        log::debug!(
                            "informer for {}: listed {} at resourceVersion {resource_version}",
                            self.name,
                            items.len()
                        );
                        self.apply_list(items);
                        self.backoff.reset();
                        State::Listed { resource_version }
                    }
                    Err(error) => {
                        self.back_off("list", &error);
                        State::Empty
                    }
                }
            }
            State::Listed { resource_version } => {
                let timeout = random_between(self.watch_timeout.0, self.watch_timeout.1);
                match self.source.watch(&resource_version, timeout) {
                    Ok(stream) => {
                        self.count("informer_watches_total", "Watches opened.");
                        let short = VERY_SHORT_WATCH.min(timeout / 2);
                        State::Watching {
                            resource_version,
                            stream,
                            suspicious_before: later(Instant::now(), short),
                            events: 0,
                        }
                    }
                    Err(error) if error.is_gone() => {
                        log::info!(
                            "informer for {}: resourceVersion {resource_version} expired; relisting",
                            self.name
                        );
                        State::Empty
                    }
                    Err(error) => {
                        self.back_off("watch", &error);
                        State::Listed { resource_version }
                    }
                }
            }
            State::Watching {
                resource_version,
                mut stream,
                suspicious_before,
                events,
            } => match stream.next() {
                Some(Ok(event)) => {
                    let resource_version = self.apply_event(event).unwrap_or(resource_version);
                    self.backoff.reset();
                    State::Watching {
                        resource_version,
                        stream,
                        suspicious_before,
                        events: events + 1,
                    }
                }
                Some(Err(error)) if error.is_gone() => {
                    log::info!(
                        "informer for {}: watch expired at resourceVersion {resource_version}; relisting",
                        self.name
                    );
                    State::Empty
                }
                Some(Err(error)) => {
                    self.back_off("watch stream", &error);
                    State::Listed { resource_version }
                }
                None => {
                    if events == 0 && Instant::now() < suspicious_before {
                        let error = kube::Error::Transient {
                            request: format!("watch {}", self.name),
                            status: None,
                            message: "watch closed at once without events".to_string(),
                        };
                        self.back_off("watch", &error);
                    }
                    State::Listed { resource_version }
                }
            },
        }
    }

    /// Replaces the store with a fresh list and reports the difference.
    fn apply_list(&mut self, items: Vec<Listed<T>>) {
        let mut objects = Vec::with_capacity(items.len());
        // Added (no old version) or modified (with the old version).
        let mut changed: Vec<(Option<Arc<T>>, Arc<T>)> = Vec::new();
        for (key, obj) in items {
            // Unreadable objects are left out: they read as absent.
            let Some(obj) = obj else { continue };
            match self.store.get(&key) {
                None => changed.push((None, Arc::clone(&obj))),
                Some(old) if old.resource_version() != obj.resource_version() => {
                    changed.push((Some(old), Arc::clone(&obj)))
                }
                Some(_) => {}
            }
            objects.push(obj);
        }
        let gone = self.store.replace(objects);
        self.store.mark_synced();
        for (old, new) in changed {
            self.notify(&match old {
                None => Event::Added(new),
                Some(old) => Event::Modified { old, new },
            });
        }
        for obj in gone {
            self.notify(&Event::Deleted(obj));
        }
    }

    /// Applies one watch event; returns its resourceVersion (to resume from).
    fn apply_event(&mut self, event: WatchEvent<Box<RawValue>>) -> Option<String> {
        let (raw, deleted) = match event {
            WatchEvent::Added(raw) | WatchEvent::Modified(raw) => (raw, false),
            WatchEvent::Deleted(raw) => (raw, true),
            WatchEvent::Bookmark { resource_version } => return Some(resource_version),
        };
        let (key, obj) = match decode::<T>(&self.name, &self.metric_label, &raw) {
            Decoded::Object(key, obj) => (key, Arc::new(obj)),
            Decoded::Unreadable(key, resource_version) => {
                // Absent, as far as readers are concerned.
                if let Some(old) = self.store.remove(&key) {
                    self.notify(&Event::Deleted(old));
                }
                return Some(resource_version).filter(|rv| !rv.is_empty());
            }
            Decoded::Nameless => return None,
        };
        let resource_version = Some(obj.resource_version().to_string()).filter(|rv| !rv.is_empty());
        let event = if deleted {
            // Only report what we knew: a repeated DELETE finds nothing.
            match self.store.remove(&key) {
                Some(_) => Event::Deleted(obj),
                None => return resource_version,
            }
        } else {
            match self.store.upsert(Arc::clone(&obj)) {
                None => Event::Added(obj),
                Some(old) if old.resource_version() == obj.resource_version() => {
                    return resource_version
                }
                Some(old) => Event::Modified { old, new: obj },
            }
        };
        self.notify(&event);
        resource_version
    }

    /// Calls the handler. A panicking handler is logged and survives (in
    /// builds that unwind): one bad object must not stop the informer and
    /// leave its cache silently stale.
    fn notify(&self, event: &Event<T>) {
        let handler = &self.handler;
        if panic::catch_unwind(AssertUnwindSafe(|| handler(event))).is_err() {
            log::error!(
                "informer for {}: the event handler panicked on {}",
                self.name,
                event.key().map(|k| k.to_string()).unwrap_or_default()
            );
        }
    }

    fn count(&self, name: &'static str, help: &'static str) {
        count(&self.metric_label, name, help);
    }

    /// Logs `error` and sleeps out the backoff (or the server's
    /// `Retry-After`), waking early on shutdown. Silent once shutdown has
    /// begun: then the error is [`Informer::stop`] closing the connection.
    fn back_off(&mut self, what: &str, error: &kube::Error) {
        if self.shutdown.is_triggered() {
            return;
        }
        self.count(
            "informer_errors_total",
            "List and watch failures (410 excluded), and objects that could not be decoded.",
        );
        let mut delay = self.backoff.next_delay();
        if let Some(retry_after) = error.retry_after() {
            delay = delay.max(retry_after);
        }
        match error {
            kube::Error::Unauthorized { .. } | kube::Error::Forbidden { .. } => log::error!(
                "informer for {}: {what} refused (check credentials and RBAC): {error}; retrying in {delay:?}",
                self.name
            ),
            _ => log::warn!(
                "informer for {}: {what} failed: {error}; retrying in {delay:?}",
                self.name
            ),
        }
        self.shutdown.sleep(delay);
    }
}

fn count(metric_label: &str, name: &'static str, help: &'static str) {
    metrics::counter_inc(name, help, &[("informer", metric_label)]);
}

/// Decodes one object's JSON as `T` (then [`Object::trim`]s it). An object
/// that does not decode is logged and counted; its key comes from its
/// metadata alone.
fn decode<T: Object>(name: &str, metric_label: &str, raw: &RawValue) -> Decoded<T> {
    match serde_json::from_str::<T>(raw.get()) {
        Ok(mut obj) => match obj.key() {
            Some(key) => {
                obj.trim();
                Decoded::Object(key, obj)
            }
            None => {
                log::warn!("informer for {name}: an object without a name");
                Decoded::Nameless
            }
        },
        Err(error) => {
            let head: Head = serde_json::from_str(raw.get()).unwrap_or_default();
            count(
                metric_label,
                "informer_errors_total",
                "List and watch failures (410 excluded), and objects that could not be decoded.",
            );
            match ObjectKey::from_parts(&head.metadata.namespace, &head.metadata.name) {
                Some(key) => {
                    log::error!(
                        "informer for {name}: cannot read {key}; treated as absent: {error}"
                    );
                    Decoded::Unreadable(key, head.metadata.resource_version)
                }
                None => {
                    log::warn!("informer for {name}: an object without a name: {error}");
                    Decoded::Nameless
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{Receiver, Sender};
    use serde::Deserialize;
    use serde_json::{json, Value};
    use std::sync::Mutex;

    const EVENTUALLY: Duration = Duration::from_secs(20);

    /// The typed object the test informer caches: only what it names.
    #[derive(Deserialize, Debug)]
    struct Thing {
        metadata: ThingMeta,
        spec: ThingSpec,
    }

    #[derive(Deserialize, Debug)]
    #[serde(rename_all = "camelCase")]
    struct ThingMeta {
        name: String,
        namespace: String,
        resource_version: String,
    }

    #[derive(Deserialize, Debug)]
    struct ThingSpec {
        n: u32,
    }

    impl Object for Thing {
        fn namespace(&self) -> &str {
            &self.metadata.namespace
        }
        fn name(&self) -> &str {
            &self.metadata.name
        }
        fn resource_version(&self) -> &str {
            &self.metadata.resource_version
        }
    }

    fn obj(name: &str, rv: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv,
               "managedFields": [{"manager": "x"}]}, "spec": {"n": 7, "unread": "by controllers"}})
    }

    /// An object that is not a `Thing` (spec.n is not a number).
    fn unreadable(name: &str, rv: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv},
               "spec": {"n": "seven"}})
    }

    fn raw(obj: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&obj).unwrap()
    }

    /// What the fake API server does on the next call.
    enum Script {
        List(Vec<Value>, &'static str),
        ListFails,
        Watch(Vec<Result<WatchEvent, kube::Error>>),
        WatchGone,
    }

    /// A source that follows a script and records the calls made.
    struct FakeSource {
        script: Receiver<Script>,
        calls: Arc<Mutex<Vec<String>>>,
    }

    impl Source<Thing> for FakeSource {
        fn list(
            &mut self,
            prepare: &mut dyn FnMut(Box<RawValue>) -> Option<Listed<Thing>>,
        ) -> ListResult<Thing> {
            self.calls.lock().unwrap().push("list".into());
            match self.script.recv() {
                Ok(Script::List(items, rv)) => Ok((
                    items.into_iter().map(raw).filter_map(prepare).collect(),
                    rv.to_string(),
                )),
                Ok(Script::ListFails) => Err(transient()),
                _ => Err(transient()),
            }
        }

        fn watch(&mut self, rv: &str, _: Duration) -> Result<EventStream, kube::Error> {
            self.calls.lock().unwrap().push(format!("watch {rv}"));
            match self.script.recv() {
                Ok(Script::Watch(events)) => {
                    let events = events.into_iter().map(|e| {
                        e.map(|e| match e {
                            WatchEvent::Added(o) => WatchEvent::Added(raw(o)),
                            WatchEvent::Modified(o) => WatchEvent::Modified(raw(o)),
                            WatchEvent::Deleted(o) => WatchEvent::Deleted(raw(o)),
                            WatchEvent::Bookmark { resource_version } => {
                                WatchEvent::Bookmark { resource_version }
                            }
                        })
                    });
                    // Delay the end so it is not a "very short watch".
                    let end = Instant::now() + VERY_SHORT_WATCH;
                    Ok(Box::new(events.chain(std::iter::from_fn(move || {
                        thread::sleep(end.saturating_duration_since(Instant::now()));
                        None
                    }))))
                }
                Ok(Script::WatchGone) => Err(gone()),
                // Script exhausted: block, as an idle watch would.
                _ => {
                    thread::sleep(Duration::from_secs(3600));
                    Err(transient())
                }
            }
        }
    }

    fn transient() -> kube::Error {
        kube::Error::Transient {
            request: "test".into(),
            status: Some(503),
            message: "unavailable".into(),
        }
    }

    fn gone() -> kube::Error {
        kube::Error::Gone {
            request: "test".into(),
            message: "too old resource version".into(),
        }
    }

    struct Harness {
        script: Sender<Script>,
        calls: Arc<Mutex<Vec<String>>>,
        events: Receiver<String>,
        store: Store<Thing>,
    }

    fn start() -> Harness {
        let (script_tx, script_rx) = crossbeam_channel::unbounded();
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let source = FakeSource {
            script: script_rx,
            calls: calls.clone(),
        };
        let mut config = InformerConfig::new(kube::resources::CONFIG_MAPS);
        config.initial_backoff = Duration::from_millis(1);
        config.max_backoff = Duration::from_millis(2);
        let handler = move |event: &Event<Thing>| {
            let rv = event.object().resource_version().to_string();
            let name = event.key().unwrap().name;
            assert_ne!(name, "boom", "a handler bug");
            let text = match event {
                Event::Added(_) => format!("added {name} {rv}"),
                Event::Modified { .. } => format!("modified {name} {rv}"),
                Event::Deleted(_) => format!("deleted {name} {rv}"),
            };
            let _ = events_tx.send(text);
        };
        let store = Store::new();
        Informer::spawn_with_source(source, config, store.clone(), handler, Shutdown::new())
            .unwrap();
        Harness {
            script: script_tx,
            calls,
            events: events_rx,
            store,
        }
    }

    impl Harness {
        fn expect(&self, expected: &[&str]) {
            let mut got: Vec<String> = expected
                .iter()
                .map(|_| self.events.recv_timeout(EVENTUALLY).expect("event"))
                .collect();
            got.sort();
            let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
            expected.sort();
            assert_eq!(got, expected);
        }

        fn wait_for_call(&self, call: &str) {
            let start = Instant::now();
            while !self.calls.lock().unwrap().iter().any(|c| c == call) {
                assert!(start.elapsed() < EVENTUALLY, "no call {call}");
                thread::sleep(Duration::from_millis(2));
            }
        }
    }

    #[test]
    fn lists_then_watches_and_resumes_from_the_last_resource_version() {
        let h = start();
        h.script
            .send(Script::List(vec![obj("a", "1"), obj("b", "2")], "5"))
            .unwrap();
        h.expect(&["added a 1", "added b 2"]);
        assert!(h.store.is_synced());
        // Decoded once, as the store's type.
        let cached = h.store.get(&ObjectKey::new("ns", "a")).unwrap();
        assert_eq!((cached.metadata.name.as_str(), cached.spec.n), ("a", 7));

        h.script
            .send(Script::Watch(vec![
                Ok(WatchEvent::Modified(obj("a", "6"))),
                // A repeat of what is cached is not reported again.
                Ok(WatchEvent::Modified(obj("a", "6"))),
                Ok(WatchEvent::Added(obj("c", "7"))),
                Ok(WatchEvent::Deleted(obj("b", "8"))),
                Ok(WatchEvent::Bookmark {
                    resource_version: "9".into(),
                }),
            ]))
            .unwrap();
        h.expect(&["modified a 6", "added c 7", "deleted b 8"]);
        // After a clean end the watch resumes from the bookmark, no relist.
        h.wait_for_call("watch 9");
        assert_eq!(
            h.calls
                .lock()
                .unwrap()
                .iter()
                .filter(|c| *c == "list")
                .count(),
            1
        );
        assert_eq!(h.store.len(), 2);
        assert!(h.events.try_recv().is_err(), "no duplicate events");
    }

    #[test]
    fn gone_relists_and_reports_what_changed_meanwhile() {
        let h = start();
        h.script
            .send(Script::List(
                vec![obj("a", "1"), obj("b", "2"), obj("c", "3")],
                "3",
            ))
            .unwrap();
        h.expect(&["added a 1", "added b 2", "added c 3"]);
        // The watch fails with 410 mid-stream.
        h.script
            .send(Script::Watch(vec![
                Ok(WatchEvent::Modified(obj("a", "4"))),
                Err(gone()),
            ]))
            .unwrap();
        h.expect(&["modified a 4"]);
        // Meanwhile b was deleted, c changed, d created; a is unchanged.
        h.script
            .send(Script::List(
                vec![obj("a", "4"), obj("c", "10"), obj("d", "11")],
                "12",
            ))
            .unwrap();
        h.expect(&["deleted b 2", "modified c 10", "added d 11"]);
        h.wait_for_call("watch 12");
        assert!(h.events.try_recv().is_err(), "a was not reported again");
        let mut keys = h.store.keys();
        keys.sort();
        assert_eq!(
            keys,
            ["a", "c", "d"].map(|n| ObjectKey::new("ns", n)).to_vec()
        );
    }

    #[test]
    fn watch_request_gone_relists_and_errors_back_off_and_retry() {
        let h = start();
        h.script.send(Script::ListFails).unwrap();
        h.script
            .send(Script::List(vec![obj("a", "1")], "1"))
            .unwrap();
        h.expect(&["added a 1"]);
        h.script
            .send(Script::Watch(vec![Err(transient())]))
            .unwrap();
        // A transient stream error re-watches from the same version.
        h.script.send(Script::WatchGone).unwrap();
        h.script.send(Script::List(vec![], "20")).unwrap();
        h.expect(&["deleted a 1"]);
        h.wait_for_call("watch 20");
        let calls = h.calls.lock().unwrap().clone();
        assert_eq!(
            calls[..6],
            ["list", "list", "watch 1", "watch 1", "list", "watch 20"]
        );
    }

    #[test]
    fn a_panicking_handler_does_not_stop_the_informer() {
        let h = start();
        h.script
            .send(Script::List(vec![obj("boom", "1"), obj("a", "2")], "2"))
            .unwrap();
        h.expect(&["added a 2"]);
        h.script
            .send(Script::Watch(vec![Ok(WatchEvent::Added(obj("c", "3")))]))
            .unwrap();
        h.expect(&["added c 3"]);
        assert_eq!(h.store.len(), 3, "the store applied every change");
    }

    #[test]
    fn an_object_that_does_not_decode_reads_as_absent() {
        let h = start();
        h.script
            .send(Script::List(vec![obj("a", "1"), unreadable("b", "2")], "2"))
            .unwrap();
        h.expect(&["added a 1"]);
        assert!(h.store.get(&ObjectKey::new("ns", "b")).is_none());
        h.script
            .send(Script::Watch(vec![
                // a breaks: its cached version goes (reported as deleted).
                Ok(WatchEvent::Modified(unreadable("a", "3"))),
                // b is fixed: it appears.
                Ok(WatchEvent::Modified(obj("b", "4"))),
            ]))
            .unwrap();
        h.expect(&["deleted a 1", "added b 4"]);
        // The watch went on and resumes after the last event.
        h.wait_for_call("watch 4");
        assert_eq!(h.store.keys(), vec![ObjectKey::new("ns", "b")]);
    }
}
