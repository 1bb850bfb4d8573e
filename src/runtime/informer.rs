//! The informer: one thread per watched kind that keeps a [`Store`] in sync
//! with the API server and tells a handler about every change.
//!
//! The thread runs a small explicit state machine (modelled on kube-runtime's
//! `watcher.rs`), one transition per `Machine::step`:
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
//! - Errors other than 410 back off 0.8 s, doubling to 30 s (with jitter),
//!   reset by the next success; a 429's `Retry-After` is honoured. A watch
//!   that ends within a second (or half its timeout) without any event
//!   counts as an error (a broken proxy would otherwise make us spin).
//!
//! The store is updated before the handler is called, so a reconcile
//! triggered by an event always reads at least that version.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cache::{decode, encode, slim, Encoded, Store};
use super::{random_between, ObjectKey, Shutdown};
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
    /// Applied to every object before it is cached (after `managedFields`
    /// are dropped), to keep only what the controllers read: the memory
    /// budget is per cached object. Default: none.
    pub transform: Option<fn(&mut Value)>,
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
            transform: None,
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

    pub fn transform(mut self, transform: fn(&mut Value)) -> Self {
        self.transform = Some(transform);
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
/// applied it. Objects are the cached (slimmed) versions.
#[derive(Clone, Debug)]
pub enum Event {
    /// The object appeared: in the first list, a relist, or the watch.
    Added(Arc<Value>),
    /// The object changed (its resourceVersion differs from the cached one).
    Modified { old: Arc<Value>, new: Arc<Value> },
    /// The object is gone; this is its last known state.
    Deleted(Arc<Value>),
}

impl Event {
    /// The object as it is now (for `Deleted`: as it was last).
    pub fn object(&self) -> &Arc<Value> {
        match self {
            Event::Added(obj) | Event::Deleted(obj) => obj,
            Event::Modified { new, .. } => new,
        }
    }

    /// The key of the object.
    pub fn key(&self) -> Option<ObjectKey> {
        ObjectKey::of(self.object())
    }
}

/// A running informer: its store and its thread.
pub struct Informer {
    store: Store,
    handle: JoinHandle<()>,
}

impl Informer {
    /// Starts the watch thread for `config.resource`. `handler` is called on
    /// that thread for every [`Event`]; keep it quick (map to keys and add
    /// them to a queue). The thread ends when `shutdown` fires (checked
    /// between events, so possibly only after the current watch ends).
    pub fn spawn(
        client: Client,
        config: InformerConfig,
        handler: impl Fn(&Event) + Send + 'static,
        shutdown: Shutdown,
    ) -> io::Result<Informer> {
        let source = KubeSource {
            client,
            config: config.clone(),
        };
        Informer::spawn_with_source(source, config, handler, shutdown)
    }

    fn spawn_with_source(
        source: impl Source + 'static,
        config: InformerConfig,
        handler: impl Fn(&Event) + Send + 'static,
        shutdown: Shutdown,
    ) -> io::Result<Informer> {
        let store = Store::new();
        let mut machine = Machine {
            name: config.describe(),
            metric_label: config.name.clone(),
            start_from: config.start_from.clone(),
            transform: config.transform,
            source: Box::new(source),
            store: store.clone(),
            handler: Box::new(handler),
            backoff: Backoff::new(config.initial_backoff, config.max_backoff),
            watch_timeout: config.watch_timeout,
            shutdown,
        };
        let handle = thread::Builder::new()
            .name(format!("informer-{}", config.name))
            .spawn(move || machine.run())?;
        Ok(Informer { store, handle })
    }

    /// The store this informer fills.
    pub fn store(&self) -> Store {
        self.store.clone()
    }

    /// Waits for the thread to end (after shutdown).
    pub fn join(self) {
        if self.handle.join().is_err() {
            log::error!("an informer thread panicked");
        }
    }
}

type EventStream = Box<dyn Iterator<Item = Result<WatchEvent, kube::Error>> + Send>;

/// One listed object as it will be cached.
type Listed = (ObjectKey, Encoded);
type ListResult = Result<(Vec<Listed>, String), kube::Error>;

/// Where objects come from: the API server, or a fake in unit tests.
trait Source: Send {
    /// A complete, paged list: the objects, each passed through `prepare`
    /// as it arrives, and the list's resourceVersion.
    fn list(&mut self, prepare: &mut dyn FnMut(Value) -> Option<Listed>) -> ListResult;
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

impl Source for KubeSource {
    fn list(&mut self, prepare: &mut dyn FnMut(Value) -> Option<Listed>) -> ListResult {
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

struct Machine {
    /// "maasmachines in ns", for log lines.
    name: String,
    /// The `informer` label of the metrics.
    metric_label: String,
    start_from: Option<String>,
    transform: Option<fn(&mut Value)>,
    source: Box<dyn Source>,
    store: Store,
    handler: Box<dyn Fn(&Event) + Send>,
    backoff: Backoff,
    watch_timeout: (Duration, Duration),
    shutdown: Shutdown,
}

impl Machine {
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
            State::Empty => match self.source.list(&mut |obj| listed(self.transform, obj)) {
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
            },
            State::Listed { resource_version } => {
                let timeout = random_between(self.watch_timeout.0, self.watch_timeout.1);
                match self.source.watch(&resource_version, timeout) {
                    Ok(stream) => {
                        self.count("informer_watches_total", "Watches opened.");
                        let short = VERY_SHORT_WATCH.min(timeout / 2);
                        State::Watching {
                            resource_version,
                            stream,
                            suspicious_before: Instant::now() + short,
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
                    let resource_version = event
                        .resource_version()
                        .map(str::to_string)
                        .unwrap_or(resource_version);
                    self.apply_event(event);
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
    /// Objects are decoded one at a time as they are reported, so a large
    /// list never exists whole as `Value`s.
    fn apply_list(&mut self, items: Vec<Listed>) {
        // Added (no old version) or modified (with the old version).
        let mut changed: Vec<(ObjectKey, Option<Arc<Value>>)> = Vec::new();
        for (key, text) in &items {
            match self.store.get_encoded(key) {
                None => changed.push((key.clone(), None)),
                Some(old_text) if old_text != *text => {
                    let old = decode(key, &old_text);
                    let new = decode(key, text);
                    if let (Some(old), Some(new)) = (old, new) {
                        if resource_version(&old) != resource_version(&new) {
                            changed.push((key.clone(), Some(old)));
                        }
                    }
                }
                Some(_) => {}
            }
        }
        let gone = self.store.replace(items.into_iter().collect());
        self.store.mark_synced();
        for (key, old) in changed {
            let Some(new) = self.store.get(&key) else {
                continue;
            };
            self.notify(&match old {
                None => Event::Added(new),
                Some(old) => Event::Modified { old, new },
            });
        }
        for obj in gone {
            self.notify(&Event::Deleted(obj));
        }
    }

    fn apply_event(&mut self, event: WatchEvent) {
        let (obj, deleted) = match event {
            WatchEvent::Added(obj) | WatchEvent::Modified(obj) => (obj, false),
            WatchEvent::Deleted(obj) => (obj, true),
            WatchEvent::Bookmark { .. } => return,
        };
        let obj = Arc::new(prepare(self.transform, obj));
        let Some(key) = ObjectKey::of(&obj) else {
            log::warn!(
                "informer for {}: event for an object without a name",
                self.name
            );
            return;
        };
        let event = if deleted {
            // Only report what we knew: a repeated DELETE finds nothing.
            match self.store.remove(&key) {
                Some(_) => Event::Deleted(obj),
                None => return,
            }
        } else {
            match self.store.upsert(key, &obj) {
                None => Event::Added(obj),
                Some(old) if resource_version(&old) == resource_version(&obj) => return,
                Some(old) => Event::Modified { old, new: obj },
            }
        };
        self.notify(&event);
    }

    /// Calls the handler. A panicking handler is logged and survives (in
    /// builds that unwind): one bad object must not stop the informer and
    /// leave its cache silently stale.
    fn notify(&self, event: &Event) {
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
        metrics::counter_inc(name, help, &[("informer", &self.metric_label)]);
    }

    /// Logs `error` and sleeps out the backoff (or the server's
    /// `Retry-After`), waking early on shutdown.
    fn back_off(&mut self, what: &str, error: &kube::Error) {
        self.count(
            "informer_errors_total",
            "List and watch failures (410 excluded).",
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

/// The object as it is cached.
fn prepare(transform: Option<fn(&mut Value)>, obj: Value) -> Value {
    let mut obj = slim(obj);
    if let Some(transform) = transform {
        transform(&mut obj);
    }
    obj
}

/// A listed object prepared and encoded for the store; `None` without a
/// name.
fn listed(transform: Option<fn(&mut Value)>, obj: Value) -> Option<Listed> {
    let obj = prepare(transform, obj);
    let key = ObjectKey::of(&obj)?;
    Some((key, encode(&obj)))
}

fn resource_version(obj: &Value) -> Option<&str> {
    kube::meta::resource_version(obj)
}

/// Exponential backoff with jitter: each delay is the current step plus up
/// to the same again at random (client-go's jitter factor 1.0), capped at
/// `max`; the step doubles per failure and resets on success.
struct Backoff {
    initial: Duration,
    max: Duration,
    step: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            step: initial,
        }
    }

    fn next_delay(&mut self) -> Duration {
        let delay = random_between(self.step, self.step * 2).min(self.max);
        self.step = (self.step * 2).min(self.max);
        delay
    }

    fn reset(&mut self) {
        self.step = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{Receiver, Sender};
    use serde_json::json;
    use std::sync::Mutex;

    const EVENTUALLY: Duration = Duration::from_secs(20);

    fn obj(name: &str, rv: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv,
               "managedFields": [{"manager": "x"}]}, "spec": {"unread": "by controllers"}})
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

    impl Source for FakeSource {
        fn list(&mut self, prepare: &mut dyn FnMut(Value) -> Option<Listed>) -> ListResult {
            self.calls.lock().unwrap().push("list".into());
            match self.script.recv() {
                Ok(Script::List(items, rv)) => Ok((
                    items.into_iter().filter_map(prepare).collect(),
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
                    // Delay the end so it is not a "very short watch".
                    let end = Instant::now() + VERY_SHORT_WATCH;
                    Ok(Box::new(events.into_iter().chain(std::iter::from_fn(
                        move || {
                            thread::sleep(end.saturating_duration_since(Instant::now()));
                            None
                        },
                    ))))
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
        store: Store,
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
        config = config.transform(|obj| {
            if let Some(obj) = obj.as_object_mut() {
                obj.remove("spec");
            }
        });
        let handler = move |event: &Event| {
            let rv = resource_version(event.object()).unwrap_or("").to_string();
            let name = event.key().unwrap().name;
            assert_ne!(name, "boom", "a handler bug");
            let text = match event {
                Event::Added(_) => format!("added {name} {rv}"),
                Event::Modified { .. } => format!("modified {name} {rv}"),
                Event::Deleted(_) => format!("deleted {name} {rv}"),
            };
            let _ = events_tx.send(text);
        };
        let informer =
            Informer::spawn_with_source(source, config, handler, Shutdown::new()).unwrap();
        Harness {
            script: script_tx,
            calls,
            events: events_rx,
            store: informer.store(),
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
        let cached = h.store.get(&ObjectKey::new("ns", "a")).unwrap();
        assert!(cached["metadata"].get("managedFields").is_none());
        assert!(cached.get("spec").is_none(), "the transform ran");

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
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(800), Duration::from_secs(30));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1600));
        let second = b.next_delay();
        assert!(second >= Duration::from_millis(1600));
        for _ in 0..10 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(1600));
    }
}
