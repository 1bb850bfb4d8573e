//! Kubernetes Events (core/v1), as `kubectl describe` shows them.
//!
//! A reconcile calls [`EventRecorder::normal`] or [`EventRecorder::warning`]
//! and moves on: the call only puts the event on a bounded channel (dropping
//! it, with a debug log, if the channel is full). Background threads write
//! them, so an event never blocks or fails a reconcile.
//!
//! There are [`WRITERS`] writer threads, each with its own channel; an
//! object's events always go to the same one (by a hash of its uid), so they
//! are written in order and aggregated in one place. One writer could not
//! keep up with a thousand machines deploying at once (each deployment
//! mirrors a dozen MAAS events): a write is one API round trip.
//!
//! Each writer keeps client-go's two protections against floods:
//!
//! - **Aggregation**: repeats of the same (object uid, type, reason,
//!   message) within [`DEDUP_WINDOW`] of the previous occurrence do not
//!   create new Event objects; they merge-patch `count` and `lastTimestamp`
//!   of the first one. If that Event has meanwhile expired (the API server
//!   deletes Events after an hour), a new one is created.
//! - **Per-object rate limit**: writes for one object draw from a token
//!   bucket of 25 that refills one token every 5 minutes (client-go's
//!   `EventSourceObjectSpamFilter`). A throttled repeat still counts: the
//!   next write that gets through carries the full `count`.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use serde::Serialize;
use serde_json::{json, Value};

use super::join_within;
use crate::clock::{later, system_later};
use crate::kube::{self, resources::EVENTS, Client};

/// Repeats closer together than this are aggregated into one Event.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Writer threads (each object's events go to one of them).
pub const WRITERS: usize = 4;
/// Events waiting to be written, per writer; more are dropped.
const CHANNEL_CAPACITY: usize = 1024;
/// Aggregation entries remembered at most per writer: 3,584 in all, about
/// client-go's LRU size (4,096). The most a table of 1,024 slots holds
/// (hashbrown fills 7/8 of them): 128 more would double it.
const TRACKED_PER_WRITER: usize = 896;
/// Per-object token bucket: burst and refill interval.
const OBJECT_BURST: f32 = 25.0;
const OBJECT_REFILL: Duration = Duration::from_secs(5 * 60);
/// Longest message we send (the API accepts more, humans read less).
const MAX_MESSAGE_BYTES: usize = 1024;
/// How often a writer forgets expired series and full buckets, so their
/// room is given back after a burst (a thousand machines deploying leave
/// `MAX_TRACKED` series behind) rather than kept until the next one.
const FORGET_EVERY: Duration = Duration::from_secs(60);
/// Timeout of each Event write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Records Events about objects. Cheap to clone; the writer threads end
/// at [`close`](EventRecorder::close), or when the last clone is dropped.
#[derive(Clone)]
pub struct EventRecorder {
    /// One channel per writer thread.
    senders: Arc<[Sender<Message>]>,
    /// The writer threads, joined by `close`.
    writers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

enum Message {
    /// Boxed: a bounded channel holds a slot of the message's size for each
    /// of its `CHANNEL_CAPACITY` places from the start, waiting or not.
    Record(Box<Occurrence>),
    /// Reply once everything sent before has been written.
    Flush(Sender<()>),
    /// Write everything sent before, then end.
    Close,
}

/// One recorded event, waiting in a writer's channel. Up to
/// `WRITERS * CHANNEL_CAPACITY` of them wait while a thousand machines
/// deploy, so each holds its strings once.
struct Occurrence {
    involved: InvolvedObject,
    event_type: &'static str,
    reason: String,
    message: String,
    at: SystemTime,
}

impl EventRecorder {
    /// Starts the writer thread. `component` is `source.component` and
    /// `reportingComponent` (e.g. `capmaas`); `instance` is `source.host`
    /// and `reportingInstance` (e.g. the pod name).
    pub fn spawn(client: Client, component: &str, instance: &str) -> io::Result<EventRecorder> {
        let mut senders = Vec::with_capacity(WRITERS);
        let mut writers = Vec::with_capacity(WRITERS);
        for index in 0..WRITERS {
            let (sender, receiver) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
            let mut writer = Writer {
                client: client.with_timeout(WRITE_TIMEOUT),
                component: component.to_string(),
                instance: truncate(instance, 128).to_string(),
                started: Instant::now(),
                series: HashMap::new(),
                buckets: HashMap::new(),
            };
            let spawned = thread::Builder::new()
                .name(format!("event-recorder-{index}"))
                .spawn(move || writer.run(receiver));
            match spawned {
                Ok(handle) => writers.push(handle),
                Err(e) => {
                    // The writers already started end when their channels close.
                    drop(senders);
                    join_within(writers, WRITE_TIMEOUT);
                    return Err(e);
                }
            }
            senders.push(sender);
        }
        Ok(EventRecorder {
            senders: senders.into(),
            writers: Arc::new(Mutex::new(writers)),
        })
    }

    /// Records a `Normal` event about `obj`.
    pub fn normal(&self, obj: &Value, reason: &str, message: &str) {
        self.record(obj, "Normal", reason, message);
    }

    /// Records a `Warning` event about `obj`.
    pub fn warning(&self, obj: &Value, reason: &str, message: &str) {
        self.record(obj, "Warning", reason, message);
    }

    /// Waits until every event recorded before this call has been written
    /// (or given up on), at most `timeout`; true if it got there.
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = later(Instant::now(), timeout);
        let (done_tx, done_rx) = crossbeam_channel::bounded(self.senders.len());
        for sender in self.senders.iter() {
            let left = deadline.saturating_duration_since(Instant::now());
            if sender
                .send_timeout(Message::Flush(done_tx.clone()), left)
                .is_err()
            {
                return false;
            }
        }
        (0..self.senders.len()).all(|_| done_rx.recv_deadline(deadline).is_ok())
    }

    /// Writes every event recorded before this call (for at most
    /// `timeout`), then ends and joins the writer threads; later events are
    /// dropped. True if the writers finished in time. For shutdown, when
    /// clones may still live in threads that did not finish.
    pub fn close(&self, timeout: Duration) -> bool {
        let deadline = later(Instant::now(), timeout);
        for sender in self.senders.iter() {
            let left = deadline.saturating_duration_since(Instant::now());
            if sender.send_timeout(Message::Close, left).is_err() {
                return false;
            }
        }
        let writers = std::mem::take(&mut *crate::sync::lock(&self.writers));
        writers.is_empty()
            || join_within(writers, deadline.saturating_duration_since(Instant::now()))
    }

    fn record(&self, obj: &Value, event_type: &'static str, reason: &str, message: &str) {
        let Some(occurrence) = Occurrence::of(obj, event_type, reason, message) else {
            log::debug!("event {reason} not recorded: the object has no name");
            return;
        };
        let Some(sender) = self.senders.get(writer_of(&occurrence.object_id())) else {
            return;
        };
        match sender.try_send(Message::Record(Box::new(occurrence))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                log::debug!("event {reason} dropped: too many events waiting")
            }
            Err(TrySendError::Disconnected(_)) => {
                log::debug!("event {reason} dropped: the recorder has stopped")
            }
        }
    }
}

/// The Event's `involvedObject`.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct InvolvedObject {
    api_version: Option<String>,
    kind: Option<String>,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<String>,
}

impl Occurrence {
    fn of(obj: &Value, event_type: &'static str, reason: &str, message: &str) -> Option<Self> {
        let non_empty = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_string);
        let involved = InvolvedObject {
            api_version: obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .map(Into::into),
            kind: obj.get("kind").and_then(Value::as_str).map(Into::into),
            name: kube::meta::name(obj)?.to_string(),
            namespace: non_empty(kube::meta::namespace(obj)),
            uid: non_empty(kube::meta::uid(obj)),
            resource_version: kube::meta::resource_version(obj).map(Into::into),
        };
        Some(Occurrence {
            involved,
            event_type,
            reason: truncate(reason, 128).to_string(),
            message: truncate(message, MAX_MESSAGE_BYTES).to_string(),
            at: SystemTime::now(),
        })
    }

    fn object_name(&self) -> &str {
        &self.involved.name
    }

    /// Where the Event lives: the object's namespace, `default` for
    /// cluster-scoped objects.
    fn namespace(&self) -> &str {
        self.involved.namespace.as_deref().unwrap_or("default")
    }

    /// Aggregation and rate-limit identity: the uid, or `ns/name` if none.
    fn object_id(&self) -> String {
        match &self.involved.uid {
            Some(uid) => uid.clone(),
            None => format!(
                "{}/{}",
                self.involved.namespace.as_deref().unwrap_or(""),
                self.involved.name
            ),
        }
    }
}

/// The hash keys of [`SeriesKey`] and [`ObjectHash`]: random per process,
/// so no one can craft two series that merge or two objects that share a
/// rate limit.
fn hash_keys() -> &'static RandomState {
    static HASH_KEYS: OnceLock<RandomState> = OnceLock::new();
    HASH_KEYS.get_or_init(RandomState::new)
}

/// Aggregation key: a 128-bit digest of object, type, reason and message
/// (a writer keeps up to `TRACKED_PER_WRITER` of them: 16 bytes each
/// instead of a copy of the message). By chance, two of the 3,584 series
/// collide with a probability of about 2^-105.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SeriesKey(u64, u64);

impl SeriesKey {
    fn of(object_id: &str, occ: &Occurrence) -> SeriesKey {
        let keys = hash_keys();
        // A tuple of strings hashes each with its end marked, so different
        // parts never read the same.
        let parts = (object_id, occ.event_type, &occ.reason, &occ.message);
        SeriesKey(keys.hash_one((0u8, parts)), keys.hash_one((1u8, parts)))
    }
}

/// The rate limit's key: a 64-bit digest of the object id (8 bytes instead
/// of a copy of the uid). Two of a thousand objects share a bucket with a
/// probability of about 2^-45; they would then share its 25 writes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct ObjectHash(u64);

impl ObjectHash {
    fn of(object_id: &str) -> ObjectHash {
        ObjectHash(hash_keys().hash_one(object_id))
    }
}

/// A writer's clock: whole seconds since it started. 4 bytes where an
/// `Instant` takes 16, in every series and bucket; the windows it measures
/// are minutes long.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Secs(u32);

impl Secs {
    fn since(self, earlier: Secs) -> Duration {
        Duration::from_secs(u64::from(self.0.saturating_sub(earlier.0)))
    }

    #[cfg(test)]
    fn after(self, d: Duration) -> Secs {
        Secs(
            self.0
                .saturating_add(u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
        )
    }
}

/// The Event object a series of repeats is written to. Its namespace and
/// name follow from the occurrence (the key names the object) and
/// `first_at`. 24 bytes: a writer holds up to `TRACKED_PER_WRITER`.
#[derive(Clone)]
struct Series {
    /// The first occurrence, in nanoseconds since the Unix epoch: the
    /// Event's `firstTimestamp` and its name.
    first_at: u64,
    /// Occurrences (client-go's `count` is an int32 too).
    count: u32,
    last_seen: Secs,
    /// Whether the Event object exists (its create may have been throttled
    /// or failed; then the next occurrence creates it).
    created: bool,
}

/// The writer thread's state.
struct Writer {
    client: Client,
    component: String,
    instance: String,
    /// The zero of its [`Secs`].
    started: Instant,
    series: HashMap<SeriesKey, Series>,
    buckets: HashMap<ObjectHash, Bucket>,
}

impl Writer {
    fn run(&mut self, receiver: Receiver<Message>) {
        let mut forgot_at = self.now();
        loop {
            let message = receiver.recv_timeout(FORGET_EVERY);
            let now = self.now();
            if now.since(forgot_at) >= FORGET_EVERY {
                forget_expired(&mut self.series, &mut self.buckets, now);
                self.series.shrink_to_fit();
                self.buckets.shrink_to_fit();
                forgot_at = now;
            }
            match message {
                Ok(Message::Record(occurrence)) => self.write(*occurrence),
                Ok(Message::Flush(done)) => {
                    let _ = done.send(());
                }
                Ok(Message::Close) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Whole seconds since the writer started (saturating after 136 years).
    fn now(&self) -> Secs {
        Secs(u32::try_from(self.started.elapsed().as_secs()).unwrap_or(u32::MAX))
    }

    fn write(&mut self, occ: Occurrence) {
        let now = self.now();
        let object_id = occ.object_id();
        let key = SeriesKey::of(&object_id, &occ);
        let timestamp = kube::time::time(occ.at);
        match self.series.get_mut(&key) {
            Some(series) if now.since(series.last_seen) < DEDUP_WINDOW => {
                series.count = series.count.saturating_add(1);
                series.last_seen = now;
            }
            _ => {
                make_room(&mut self.series, &mut self.buckets, now);
                self.series.insert(
                    key,
                    Series {
                        first_at: unix_nanos(occ.at),
                        count: 1,
                        last_seen: now,
                        created: false,
                    },
                );
            }
        }

        let bucket = self
            .buckets
            .entry(ObjectHash::of(&object_id))
            .or_insert_with(|| Bucket::new(now));
        if !bucket.take(now) {
            log::debug!(
                "event {} about {} throttled (too many events for one object)",
                occ.reason,
                occ.object_name()
            );
            return;
        }

        let Some(series) = self.series.get(&key) else {
            return;
        };
        let result = if !series.created {
            self.create(&occ, series, &timestamp)
        } else {
            let patch = json!({"count": series.count, "lastTimestamp": timestamp});
            let name = event_name(occ.object_name(), series.first_at);
            match self
                .client
                .patch_merge(&EVENTS, Some(occ.namespace()), &name, &patch)
            {
                Ok(_) => Ok(()),
                // The Event expired meanwhile: start a new series.
                Err(e) if e.is_not_found() => self.restart_series(&occ, &key, &timestamp),
                Err(e) => Err(e),
            }
        };
        match result {
            Ok(()) => {
                if let Some(series) = self.series.get_mut(&key) {
                    series.created = true;
                }
            }
            Err(e) => log::warn!(
                "could not record event {} about {}: {e}",
                occ.reason,
                occ.object_name()
            ),
        }
    }

    fn restart_series(
        &mut self,
        occ: &Occurrence,
        key: &SeriesKey,
        timestamp: &str,
    ) -> Result<(), kube::Error> {
        let Some(series) = self.series.get_mut(key) else {
            return Ok(());
        };
        series.first_at = unix_nanos(occ.at);
        series.count = 1;
        let series = series.clone();
        self.create(occ, &series, timestamp)
    }

    fn create(
        &self,
        occ: &Occurrence,
        series: &Series,
        timestamp: &str,
    ) -> Result<(), kube::Error> {
        // Nanoseconds since the epoch in a u64 reach the year 2554, within
        // what SystemTime holds; the fallback only keeps the lint honest.
        let first_at =
            system_later(UNIX_EPOCH, Duration::from_nanos(series.first_at)).unwrap_or(UNIX_EPOCH);
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": event_name(occ.object_name(), series.first_at),
                "namespace": occ.namespace(),
            },
            "involvedObject": occ.involved,
            "type": occ.event_type,
            "reason": occ.reason,
            "message": occ.message,
            "count": series.count,
            "firstTimestamp": kube::time::time(first_at),
            "lastTimestamp": timestamp,
            "source": {"component": self.component, "host": self.instance},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        });
        self.client
            .create(&EVENTS, Some(occ.namespace()), &event)
            .map(|_| ())
    }
}

/// Keeps the aggregation and bucket maps bounded before a new series is
/// added: forget expired series first, then the least recently seen.
fn make_room(
    series: &mut HashMap<SeriesKey, Series>,
    buckets: &mut HashMap<ObjectHash, Bucket>,
    now: Secs,
) {
    if series.len() >= TRACKED_PER_WRITER {
        forget_expired(series, buckets, now);
    }
    while series.len() >= TRACKED_PER_WRITER {
        let oldest = series
            .iter()
            .min_by_key(|(_, s)| s.last_seen)
            .map(|(k, _)| *k);
        match oldest {
            Some(key) => series.remove(&key),
            None => break,
        };
    }
    // A removed entry may leave a tombstone that keeps its slot. Once they
    // have taken the table's last free one, the next insert would double
    // the table, half-empty as it is: rebuild it for one more instead.
    if series.len() == series.capacity() {
        let mut rebuilt = HashMap::with_capacity(series.len() + 1);
        rebuilt.extend(series.drain());
        *series = rebuilt;
    }
}

/// Drops the series no repeat can join any more and the buckets that are
/// full again (a full bucket is the same as no bucket).
fn forget_expired(
    series: &mut HashMap<SeriesKey, Series>,
    buckets: &mut HashMap<ObjectHash, Bucket>,
    now: Secs,
) {
    series.retain(|_, s| now.since(s.last_seen) < DEDUP_WINDOW);
    buckets.retain(|_, b| !b.is_full(now));
}

/// The writer thread of an object: the same one for all its events.
fn writer_of(object_id: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    object_id.hash(&mut hasher);
    // Lossless enough: only the remainder matters.
    (hasher.finish() % WRITERS as u64) as usize
}

/// `<object name>.<hex nanoseconds>`, as client-go names Events; `nanos`
/// is [`unix_nanos`].
fn event_name(object_name: &str, nanos: u64) -> String {
    format!("{object_name}.{nanos:x}")
}

/// Nanoseconds since the Unix epoch (0 before it, saturating in 2554).
fn unix_nanos(at: SystemTime) -> u64 {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX)
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char
/// boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The per-object token bucket (8 bytes: one per object with recent
/// Events, which for a burst of 11 takes 55 minutes to refill).
struct Bucket {
    tokens: f32,
    refilled_at: Secs,
}

impl Bucket {
    fn new(now: Secs) -> Bucket {
        Bucket {
            tokens: OBJECT_BURST,
            refilled_at: now,
        }
    }

    fn refill(&mut self, now: Secs) {
        let earned = now.since(self.refilled_at).as_secs_f32() / OBJECT_REFILL.as_secs_f32();
        self.tokens = (self.tokens + earned).min(OBJECT_BURST);
        self.refilled_at = now;
    }

    fn take(&mut self, now: Secs) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn is_full(&mut self, now: Secs) -> bool {
        self.refill(now);
        self.tokens >= OBJECT_BURST
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occurrences_describe_the_object() {
        let obj = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasMachine",
            "metadata": {"name": "m1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}});
        let occ = Occurrence::of(&obj, "Warning", "AllocateFailed", "no machines").unwrap();
        assert_eq!(occ.namespace(), "ns");
        assert_eq!(occ.object_id(), "u1");
        assert_eq!(
            serde_json::to_value(&occ.involved).unwrap(),
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasMachine",
                   "name": "m1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"})
        );
        let node = json!({"kind": "Node", "metadata": {"name": "n1"}});
        let occ = Occurrence::of(&node, "Normal", "R", "m").unwrap();
        assert_eq!(occ.namespace(), "default");
        assert_eq!(occ.object_id(), "/n1");
        assert_eq!(
            serde_json::to_value(&occ.involved).unwrap(),
            json!({"apiVersion": null, "kind": "Node", "name": "n1"})
        );
        assert!(Occurrence::of(&json!({}), "Normal", "R", "m").is_none());
    }

    #[test]
    fn series_keys_differ_when_any_part_does() {
        let obj = json!({"kind": "MaasMachine", "metadata": {"name": "m1", "namespace": "ns", "uid": "u1"}});
        let key = |object_id: &str, event_type: &'static str, reason: &str, message: &str| {
            let occ = Occurrence::of(&obj, event_type, reason, message).unwrap();
            SeriesKey::of(object_id, &occ)
        };
        assert!(key("u1", "Normal", "A", "b") == key("u1", "Normal", "A", "b"));
        assert!(key("u1", "Normal", "A", "b") != key("u1", "Normal", "Ab", ""));
        assert!(key("u1", "Normal", "A", "b") != key("u1", "Normal", "A", "c"));
        assert!(key("u1", "Normal", "A", "b") != key("u1", "Warning", "A", "b"));
        assert!(key("u1", "Normal", "A", "b") != key("u2", "Normal", "A", "b"));
        assert!(key("u1N", "ormal", "A", "b") != key("u1", "Normal", "A", "b"));
    }

    #[test]
    fn expired_series_and_full_buckets_are_forgotten() {
        let obj = json!({"kind": "MaasMachine", "metadata": {"name": "m1", "namespace": "ns", "uid": "u1"}});
        let start = Secs(7);
        let mut series = HashMap::new();
        for (message, last_seen) in [("old", start), ("recent", start.after(DEDUP_WINDOW))] {
            let occ = Occurrence::of(&obj, "Normal", "R", message).unwrap();
            let entry = Series {
                first_at: unix_nanos(occ.at),
                count: 1,
                last_seen,
                created: true,
            };
            series.insert(SeriesKey::of("u1", &occ), entry);
        }
        let mut drawn = Bucket::new(start);
        assert!(drawn.take(start));
        let mut buckets = HashMap::from([
            (ObjectHash::of("full"), Bucket::new(start)),
            (ObjectHash::of("drawn"), drawn),
        ]);

        forget_expired(&mut series, &mut buckets, start.after(DEDUP_WINDOW));
        let recent = Occurrence::of(&obj, "Normal", "R", "recent").unwrap();
        assert_eq!(series.len(), 1);
        assert!(series.contains_key(&SeriesKey::of("u1", &recent)));
        // The drawn bucket has long refilled by then.
        assert!(buckets.is_empty());

        let mut drawn = Bucket::new(start);
        assert!(drawn.take(start));
        let mut buckets = HashMap::from([(ObjectHash::of("drawn"), drawn)]);
        forget_expired(&mut series, &mut buckets, start.after(OBJECT_REFILL / 2));
        assert_eq!(buckets.len(), 1, "a bucket still refilling is kept");
    }

    /// At the cap, each new series replaces the least recently seen one,
    /// and the table keeps its size however many come and go (evicted, or
    /// expired: a second per series lets them expire 600 at a time).
    #[test]
    fn a_full_writer_forgets_the_least_recently_seen_and_keeps_its_table() {
        for series_per_second in [10, 1] {
            let mut series = HashMap::new();
            let mut buckets = HashMap::new();
            for i in 0..4 * TRACKED_PER_WRITER {
                let now = Secs(u32::try_from(i / series_per_second).unwrap());
                make_room(&mut series, &mut buckets, now);
                let entry = Series {
                    first_at: 0,
                    count: 1,
                    last_seen: now,
                    created: true,
                };
                series.insert(SeriesKey(i as u64, 0), entry);
                assert!(series.len() <= TRACKED_PER_WRITER);
                assert!(
                    series.capacity() < 2 * TRACKED_PER_WRITER,
                    "the table doubled at {i}: room for {}",
                    series.capacity()
                );
            }
            if series_per_second == 10 {
                // The last ones seen are kept (but for ties within their
                // first second).
                let last = 4 * TRACKED_PER_WRITER as u64;
                let kept = (last - TRACKED_PER_WRITER as u64..last)
                    .filter(|i| series.contains_key(&SeriesKey(*i, 0)))
                    .count();
                assert!(kept >= TRACKED_PER_WRITER - 10, "{kept}");
            }
        }
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(1000);
        let cut = truncate(&long, MAX_MESSAGE_BYTES);
        assert!(cut.len() <= MAX_MESSAGE_BYTES);
        assert!(cut.len() >= MAX_MESSAGE_BYTES - 1);
        assert_eq!(truncate("short", 10), "short");
    }

    #[test]
    fn bucket_allows_a_burst_then_refills_slowly() {
        let now = Secs(0);
        let mut bucket = Bucket::new(now);
        for _ in 0..25 {
            assert!(bucket.take(now));
        }
        assert!(!bucket.take(now));
        assert!(!bucket.take(now.after(OBJECT_REFILL / 2)));
        assert!(bucket.take(now.after(OBJECT_REFILL)));
        // Credit for part of a token is kept across takes.
        let mut bucket = Bucket::new(now);
        for _ in 0..25 {
            assert!(bucket.take(now));
        }
        for second in (60..300).step_by(60) {
            assert!(!bucket.take(now.after(Duration::from_secs(second))));
        }
        assert!(bucket.take(now.after(OBJECT_REFILL)));
    }

    #[test]
    fn an_object_always_goes_to_the_same_writer_and_objects_spread() {
        assert_eq!(writer_of("uid-1"), writer_of("uid-1"));
        let used: std::collections::HashSet<usize> =
            (0..100).map(|i| writer_of(&format!("uid-{i}"))).collect();
        assert_eq!(used.len(), WRITERS);
    }

    #[test]
    fn event_names_are_unique_per_time() {
        let t = UNIX_EPOCH + Duration::from_nanos(0x1234);
        assert_eq!(event_name("m1", unix_nanos(t)), "m1.1234");
        assert_eq!(unix_nanos(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
