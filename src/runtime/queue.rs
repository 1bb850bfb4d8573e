//! The work queue: which keys need a reconcile, and when.
//!
//! Semantics follow client-go's `util/workqueue` (queue.go,
//! delaying_queue.go, rate_limiting_queue.go), so anyone who knows
//! controller-runtime can predict what happens:
//!
//! - A key is queued at most once, however often it is added (`dirty` set).
//! - A key is never handed to two workers at once (`processing` set).
//! - A key added while a worker processes it is parked in `dirty` and queued
//!   again by [`WorkQueue::done`]: an update during a reconcile causes exactly
//!   one more pass.
//! - [`WorkQueue::add_after`] keeps the *earliest* time asked for a key.
//! - [`WorkQueue::add_rate_limited`] delays by the larger of a per-key
//!   exponential backoff and an overall token bucket; [`WorkQueue::forget`]
//!   resets the key's backoff after a success.
//! - [`WorkQueue::shutdown`] wakes every blocked [`WorkQueue::get`], which
//!   then returns `None`. Unlike client-go, keys still queued at shutdown are
//!   dropped rather than drained: the next process (or leader) lists every
//!   object again and re-queues them anyway, and a prompt stop matters more.
//!
//! Everything lives behind one mutex and one condvar. Delayed keys sit in
//! an ordered set; there is no timer thread: a blocked `get` sleeps until
//! the earliest delayed key is due and moves due keys into the queue itself.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::ObjectKey;
use crate::clock::later;
use crate::metrics;

/// A sleeping `get` wakes at least this often even with nothing due, as a
/// guard against a missed wake-up (client-go's `maxWait`).
const MAX_WAIT: Duration = Duration::from_secs(10);

/// How [`WorkQueue::add_rate_limited`] spaces out retries.
///
/// The delay for a key is `max(per_key, bucket)` where `per_key` is
/// `base_delay × 2^failures` capped at `max_delay`, and `bucket` is the wait
/// for a token from an overall bucket of `qps` tokens per second holding at
/// most `burst` tokens (client-go's `DefaultControllerRateLimiter`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// First retry delay. Default 5 ms (client-go).
    pub base_delay: Duration,
    /// Longest per-key delay. Default 300 s, not client-go's 1000 s: a MAAS
    /// or API server outage is the usual cause of a long error streak, and
    /// once it ends every failing machine should be retried within minutes,
    /// not a quarter of an hour later. 1,000 keys at the cap still cost only
    /// about 3 retries a second.
    pub max_delay: Duration,
    /// Sustained retries per second over all keys. Default 10 (client-go).
    pub qps: f64,
    /// Retries allowed at once before `qps` applies. Default 100 (client-go).
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(300),
            qps: 10.0,
            burst: 100,
        }
    }
}

/// A de-duplicating, rate-limited queue of [`ObjectKey`]s shared by the
/// informer handlers that add keys and the workers that process them.
///
/// Cheap to clone; all clones are the same queue.
///
/// Every key returned by [`get`](WorkQueue::get) must be handed back with
/// [`done`](WorkQueue::done), or it is never processed again.
#[derive(Clone)]
pub struct WorkQueue {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    limit: RateLimit,
    state: Mutex<State>,
    /// Signalled when a key becomes ready, a delayed key gets an earlier
    /// time, or the queue shuts down.
    changed: Condvar,
}

struct State {
    /// Keys ready to be handed out, in order.
    queue: VecDeque<ObjectKey>,
    /// Keys that need processing: everything in `queue`, plus keys added
    /// while being processed (queued again on `done`).
    dirty: HashSet<ObjectKey>,
    /// Keys handed to a worker and not yet `done`, with the time of `get`.
    processing: HashMap<ObjectKey, Instant>,
    /// When each dirty key was added, for the queue-duration histogram.
    added_at: HashMap<ObjectKey, Instant>,
    /// Delayed keys by due time, each once (an earlier time replaces a
    /// later one). A controller keeps most of its objects here (a poll,
    /// the safety net of the MAAS watch), so the key is shared with
    /// `due_at`, not copied.
    delayed: BTreeSet<(Instant, Arc<ObjectKey>)>,
    /// The due time of each delayed key.
    due_at: HashMap<Arc<ObjectKey>, Instant>,
    /// Consecutive rate-limited adds per key since its last `forget`.
    failures: HashMap<ObjectKey, u32>,
    bucket: TokenBucket,
    shutting_down: bool,
}

impl WorkQueue {
    /// A queue named `name` (the `name` label of its metrics) with the
    /// default [`RateLimit`].
    pub fn new(name: &str) -> WorkQueue {
        WorkQueue::with_rate_limit(name, RateLimit::default())
    }

    /// A queue with a custom retry policy.
    pub fn with_rate_limit(name: &str, limit: RateLimit) -> WorkQueue {
        let state = State {
            queue: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashMap::new(),
            added_at: HashMap::new(),
            delayed: BTreeSet::new(),
            due_at: HashMap::new(),
            failures: HashMap::new(),
            bucket: TokenBucket::new(limit.qps, limit.burst),
            shutting_down: false,
        };
        WorkQueue {
            inner: Arc::new(Inner {
                name: name.to_string(),
                limit,
                state: Mutex::new(state),
                changed: Condvar::new(),
            }),
        }
    }

    /// The queue's name, as given to [`new`](WorkQueue::new).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Marks `key` as needing a reconcile now. A no-op if it is already
    /// waiting, or after shutdown.
    pub fn add(&self, key: ObjectKey) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        self.add_locked(&mut state, key, Instant::now());
    }

    /// Marks `key` as needing a reconcile once `delay` has passed. If the key
    /// is already waiting for a later time, the earlier time wins.
    pub fn add_after(&self, key: ObjectKey, delay: Duration) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        let now = Instant::now();
        if delay.is_zero() {
            self.add_locked(&mut state, key, now);
            return;
        }
        let due = later(now, delay);
        let key = match state.due_at.get_key_value(&key) {
            Some((_, &existing)) if existing <= due => return,
            Some((shared, &existing)) => {
                let shared = Arc::clone(shared);
                state.delayed.remove(&(existing, Arc::clone(&shared)));
                shared
            }
            None => Arc::new(key),
        };
        state.due_at.insert(Arc::clone(&key), due);
        state.delayed.insert((due, key));
        // A sleeping getter may be waiting for a later key; let one
        // recompute its sleep.
        self.inner.changed.notify_one();
    }

    /// Re-adds `key` after a failed reconcile, delayed by the [`RateLimit`].
    pub fn add_rate_limited(&self, key: ObjectKey) {
        let delay = {
            let mut state = self.lock();
            if state.shutting_down {
                return;
            }
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let per_key = backoff(&self.inner.limit, *failures);
            *failures = failures.saturating_add(1);
            per_key.max(state.bucket.reserve(Instant::now()))
        };
        metrics::counter_inc(
            "workqueue_retries_total",
            "Total number of retries handled by the work queue.",
            &[("name", &self.inner.name)],
        );
        self.add_after(key, delay);
    }

    /// Clears the backoff of `key`: its next failure starts again at the
    /// base delay. Call after a successful reconcile.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().failures.remove(key);
    }

    /// How many rate-limited adds `key` has had since its last `forget`.
    pub fn num_requeues(&self, key: &ObjectKey) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Blocks until a key is ready and hands it out; the caller must call
    /// [`done`](WorkQueue::done) with it afterwards. Returns `None` once the
    /// queue is shut down.
    pub fn get(&self) -> Option<ObjectKey> {
        let mut state = self.lock();
        loop {
            if state.shutting_down {
                return None;
            }
            let now = Instant::now();
            // Each promoted key wakes one more getter (in `add_locked`).
            self.promote_due(&mut state, now);
            if let Some(key) = state.queue.pop_front() {
                state.dirty.remove(&key);
                state.processing.insert(key.clone(), now);
                if let Some(added) = state.added_at.remove(&key) {
                    metrics::observe(
                        "workqueue_queue_duration_seconds",
                        "How long in seconds a key stays in the work queue before being handed out.",
                        &[("name", &self.inner.name)],
                        now.saturating_duration_since(added).as_secs_f64(),
                    );
                }
                self.record_depth(&state);
                return Some(key);
            }
            give_back_room(&mut state);
            let sleep = match state.delayed.first() {
                Some((due, _)) => due.saturating_duration_since(now).min(MAX_WAIT),
                None => MAX_WAIT,
            };
            state = self
                .inner
                .changed
                .wait_timeout(state, sleep)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Marks the processing of `key` as finished. If it was added again
    /// meanwhile, it is queued again now.
    pub fn done(&self, key: &ObjectKey) {
        let mut state = self.lock();
        // A `done` without a `get` must not queue the key a second time.
        let Some(started) = state.processing.remove(key) else {
            return;
        };
        metrics::observe(
            "workqueue_work_duration_seconds",
            "How long in seconds processing a key from the work queue takes.",
            &[("name", &self.inner.name)],
            started.elapsed().as_secs_f64(),
        );
        if state.dirty.contains(key) && !state.shutting_down {
            state.queue.push_back(key.clone());
            self.record_depth(&state);
            self.inner.changed.notify_one();
        }
    }

    /// The number of keys ready to be handed out (not counting delayed keys
    /// or keys being processed).
    pub fn len(&self) -> usize {
        let mut state = self.lock();
        self.promote_due(&mut state, Instant::now());
        state.queue.len()
    }

    /// Whether no key is ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: every blocked and future `get` returns `None`, adds
    /// are ignored. Keys being processed may still be marked `done`.
    pub fn shutdown(&self) {
        let mut state = self.lock();
        state.shutting_down = true;
        state.queue.clear();
        state.delayed.clear();
        state.due_at.clear();
        self.record_depth(&state);
        self.inner.changed.notify_all();
    }

    /// Whether [`shutdown`](WorkQueue::shutdown) has been called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.inner.state)
    }

    fn add_locked(&self, state: &mut State, key: ObjectKey, now: Instant) {
        if state.dirty.contains(&key) {
            return;
        }
        metrics::counter_inc(
            "workqueue_adds_total",
            "Total number of adds handled by the work queue.",
            &[("name", &self.inner.name)],
        );
        state.added_at.insert(key.clone(), now);
        state.dirty.insert(key.clone());
        if state.processing.contains_key(&key) {
            // Queued again by `done`.
            return;
        }
        state.queue.push_back(key);
        self.record_depth(state);
        self.inner.changed.notify_one();
    }

    /// Moves every delayed key that is due into the queue.
    fn promote_due(&self, state: &mut State, now: Instant) {
        while state.delayed.first().is_some_and(|(due, _)| *due <= now) {
            let Some((_, key)) = state.delayed.pop_first() else {
                break;
            };
            state.due_at.remove(&key);
            // Its last holder now: unwrapped without a copy.
            let key = Arc::try_unwrap(key).unwrap_or_else(|shared| (*shared).clone());
            self.add_locked(state, key, now);
        }
    }

    fn record_depth(&self, state: &State) {
        metrics::gauge_set(
            "workqueue_depth",
            "Current number of keys ready in the work queue.",
            &[("name", &self.inner.name)],
            state.queue.len() as f64,
        );
    }
}

/// After a burst (every object queued at start, and at each resync) a
/// table keeps its largest size; a getter with nothing to hand out gives
/// most of it back from those that are mostly empty. (The delayed set is a
/// B-tree, which frees its nodes as it goes.)
fn give_back_room(state: &mut State) {
    /// Below this, a table is not worth shrinking.
    const SMALL: usize = 64;
    let roomy = |len: usize, capacity: usize| capacity > SMALL && len < capacity / 4;
    if roomy(state.queue.len(), state.queue.capacity()) {
        state.queue.shrink_to(state.queue.len() * 2);
    }
    if roomy(state.dirty.len(), state.dirty.capacity()) {
        state.dirty.shrink_to(state.dirty.len() * 2);
    }
    if roomy(state.processing.len(), state.processing.capacity()) {
        state.processing.shrink_to(state.processing.len() * 2);
    }
    if roomy(state.added_at.len(), state.added_at.capacity()) {
        state.added_at.shrink_to(state.added_at.len() * 2);
    }
    if roomy(state.due_at.len(), state.due_at.capacity()) {
        state.due_at.shrink_to(state.due_at.len() * 2);
    }
    if roomy(state.failures.len(), state.failures.capacity()) {
        state.failures.shrink_to(state.failures.len() * 2);
    }
}

/// The per-key delay after `failures` earlier failures.
fn backoff(limit: &RateLimit, failures: u32) -> Duration {
    // 2^failures overflows nothing in f64 until 2^1023; min() caps it.
    let exponent = failures.min(1000) as i32;
    let secs = limit.base_delay.as_secs_f64() * 2f64.powi(exponent);
    if !secs.is_finite() || secs >= limit.max_delay.as_secs_f64() {
        limit.max_delay
    } else {
        Duration::from_secs_f64(secs)
    }
}

/// An overall retry budget, like golang.org/x/time/rate's `Reserve`: each
/// retry takes a token, tokens refill at `qps` up to `burst`, and a retry
/// that finds the bucket empty is delayed until its token will exist.
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    fn new(qps: f64, burst: u32) -> TokenBucket {
        TokenBucket {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            refilled_at: Instant::now(),
        }
    }

    /// Takes one token and returns how long its holder must wait for it.
    fn reserve(&mut self, now: Instant) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO; // no overall limit
        }
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.refilled_at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread;

    /// Generous bound for "eventually"; never a performance assertion.
    const EVENTUALLY: Duration = Duration::from_secs(20);

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    /// A queue whose retries are not slowed by the overall bucket.
    fn unthrottled(name: &str) -> WorkQueue {
        WorkQueue::with_rate_limit(
            name,
            RateLimit {
                qps: 0.0,
                ..RateLimit::default()
            },
        )
    }

    /// `get` on another thread, so a test can bound how long it waits.
    fn get_within(queue: &WorkQueue, bound: Duration) -> Option<ObjectKey> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let q = queue.clone();
        thread::spawn(move || {
            let _ = tx.send(q.get());
        });
        rx.recv_timeout(bound).ok().flatten()
    }

    #[test]
    fn adds_of_one_key_queue_it_once() {
        let queue = WorkQueue::new("test-dedup");
        queue.add(key("a"));
        queue.add(key("b"));
        queue.add(key("a"));
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.get(), Some(key("a")));
        assert_eq!(queue.get(), Some(key("b")));
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn a_key_added_while_processing_is_queued_again_once_on_done() {
        let queue = WorkQueue::new("test-dirty");
        queue.add(key("a"));
        let got = queue.get().unwrap();
        queue.add(key("a"));
        queue.add(key("a"));
        assert_eq!(queue.len(), 0, "must not be handed out while processing");
        queue.done(&got);
        assert_eq!(queue.len(), 1);
        let again = queue.get().unwrap();
        assert_eq!(again, key("a"));
        queue.done(&again);
        assert_eq!(queue.len(), 0, "exactly one more pass");
    }

    #[test]
    fn concurrent_adds_and_workers_never_process_one_key_twice_at_once() {
        const KEYS: usize = 20;
        const ADDERS: usize = 8;
        const ADDS_PER_ADDER: usize = 2000;
        const WORKERS: usize = 8;

        let queue = WorkQueue::new("test-concurrent");
        let in_flight = Arc::new(Mutex::new(HashSet::new()));
        let processed = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));

        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (queue, in_flight) = (queue.clone(), in_flight.clone());
                let (processed, overlaps) = (processed.clone(), overlaps.clone());
                thread::spawn(move || {
                    while let Some(k) = queue.get() {
                        if !in_flight.lock().unwrap().insert(k.clone()) {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::yield_now();
                        in_flight.lock().unwrap().remove(&k);
                        processed.fetch_add(1, Ordering::SeqCst);
                        queue.done(&k);
                    }
                })
            })
            .collect();

        let adders: Vec<_> = (0..ADDERS)
            .map(|a| {
                let queue = queue.clone();
                thread::spawn(move || {
                    for i in 0..ADDS_PER_ADDER {
                        queue.add(key(&format!("k{}", (i + a) % KEYS)));
                    }
                })
            })
            .collect();
        for adder in adders {
            adder.join().unwrap();
        }

        // Every key added after its last processing started gets one more
        // pass; wait until nothing is left.
        let start = Instant::now();
        loop {
            let idle = {
                let s = queue.lock();
                s.queue.is_empty() && s.processing.is_empty() && s.dirty.is_empty()
            };
            if idle {
                break;
            }
            assert!(start.elapsed() < EVENTUALLY, "queue never drained");
            thread::sleep(Duration::from_millis(5));
        }
        queue.shutdown();
        for worker in workers {
            worker.join().unwrap();
        }

        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "a key ran twice at once"
        );
        let processed = processed.load(Ordering::SeqCst);
        assert!(processed >= KEYS, "every key processed, got {processed}");
    }

    #[test]
    fn add_after_keeps_the_earliest_time() {
        let queue = WorkQueue::new("test-after");
        queue.add_after(key("a"), Duration::from_secs(3600));
        queue.add_after(key("a"), Duration::from_millis(10));
        queue.add_after(key("a"), Duration::from_secs(7200));
        {
            let state = queue.lock();
            assert_eq!(state.delayed.len(), 1, "the later times are gone");
            let (_, delayed) = state.delayed.first().unwrap();
            let (shared, _) = state.due_at.get_key_value(&key("a")).unwrap();
            assert!(Arc::ptr_eq(delayed, shared), "one copy of the key");
        }
        assert_eq!(get_within(&queue, EVENTUALLY), Some(key("a")));
        // The superseded later entries must not produce a second pass soon.
        assert_eq!(queue.lock().due_at.len(), 0);
        assert_eq!(queue.len(), 0);
    }

    /// The tables a thousand keys grew are given back once they are handed
    /// out and done.
    #[test]
    fn a_burst_gives_its_room_back() {
        let queue = WorkQueue::new("test-room");
        for i in 0..1000 {
            queue.add(key(&format!("k{i}")));
        }
        for _ in 0..1000 {
            let k = queue.get().unwrap();
            queue.done(&k);
        }
        let roomy = |queue: &WorkQueue| {
            let s = queue.lock();
            [
                s.queue.capacity(),
                s.dirty.capacity(),
                s.added_at.capacity(),
            ]
        };
        assert!(
            roomy(&queue).iter().all(|c| *c >= 1000),
            "{:?}",
            roomy(&queue)
        );
        // A getter that finds nothing to hand out shrinks them.
        assert_eq!(get_within(&queue, Duration::from_millis(50)), None);
        let start = Instant::now();
        while roomy(&queue).iter().any(|c| *c > 64) {
            assert!(start.elapsed() < EVENTUALLY, "{:?}", roomy(&queue));
            thread::sleep(Duration::from_millis(5));
        }
        queue.shutdown();
    }

    #[test]
    fn add_after_does_not_hand_out_before_due() {
        let queue = WorkQueue::new("test-not-due");
        queue.add_after(key("later"), Duration::from_secs(3600));
        assert_eq!(queue.len(), 0);
        assert_eq!(get_within(&queue, Duration::from_millis(200)), None);
        queue.shutdown();
    }

    #[test]
    fn backoff_doubles_per_failure_and_forget_resets_it() {
        let limit = RateLimit::default();
        assert_eq!(backoff(&limit, 0), Duration::from_millis(5));
        assert_eq!(backoff(&limit, 1), Duration::from_millis(10));
        assert_eq!(backoff(&limit, 4), Duration::from_millis(80));
        assert_eq!(backoff(&limit, 40), limit.max_delay);
        assert_eq!(backoff(&limit, u32::MAX), limit.max_delay);

        let queue = unthrottled("test-backoff");
        for expected in 1..=3 {
            queue.add_rate_limited(key("a"));
            assert_eq!(queue.num_requeues(&key("a")), expected);
        }
        assert_eq!(queue.num_requeues(&key("b")), 0, "per-key");
        queue.forget(&key("a"));
        assert_eq!(queue.num_requeues(&key("a")), 0);
        // The retries themselves arrive (once: they were merged).
        assert_eq!(get_within(&queue, EVENTUALLY), Some(key("a")));
    }

    #[test]
    fn rate_limited_add_waits_for_the_backoff() {
        let queue = WorkQueue::with_rate_limit(
            "test-backoff-wait",
            RateLimit {
                base_delay: Duration::from_secs(3600),
                max_delay: Duration::from_secs(7200),
                qps: 0.0,
                burst: 0,
            },
        );
        queue.add_rate_limited(key("a"));
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.lock().due_at.len(), 1);
    }

    #[test]
    fn token_bucket_allows_a_burst_then_spaces_out() {
        let now = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(now), Duration::ZERO);
        }
        let fourth = bucket.reserve(now);
        let fifth = bucket.reserve(now);
        assert!(fourth > Duration::from_millis(90) && fourth <= Duration::from_millis(100));
        assert!(fifth > fourth, "later reservations wait longer");
        // Tokens come back with time.
        let mut bucket = TokenBucket::new(10.0, 1);
        assert_eq!(bucket.reserve(now), Duration::ZERO);
        assert_eq!(bucket.reserve(now + Duration::from_secs(1)), Duration::ZERO);
    }

    #[test]
    fn shutdown_unblocks_every_getter() {
        let queue = WorkQueue::new("test-shutdown");
        let (tx, rx) = crossbeam_channel::unbounded();
        for _ in 0..4 {
            let (queue, tx) = (queue.clone(), tx.clone());
            thread::spawn(move || {
                let _ = tx.send(queue.get());
            });
        }
        queue.add_after(key("far"), Duration::from_secs(3600));
        queue.shutdown();
        for _ in 0..4 {
            assert_eq!(rx.recv_timeout(EVENTUALLY), Ok(None));
        }
        queue.add(key("late"));
        assert_eq!(queue.get(), None, "adds after shutdown are ignored");
    }

    /// Issue 19 item 1: a requeue after a delay no clock can add (a
    /// tenant's number once reached here) is a requeue a day later, and
    /// the queue keeps serving the other keys.
    #[test]
    fn a_delay_past_the_clocks_range_is_clamped() {
        let queue = WorkQueue::new("test-overflowing-delay");
        queue.add_after(key("forged"), Duration::from_secs(u64::MAX));
        queue.add_after(key("forged-too"), Duration::MAX);
        queue.add_after(key("other"), Duration::from_millis(10));
        assert_eq!(queue.get(), Some(key("other")));
        queue.done(&key("other"));
        assert_eq!(queue.len(), 0, "the forged keys wait (a day)");
    }

    #[test]
    fn a_stray_done_does_not_duplicate_a_queued_key() {
        let queue = WorkQueue::new("test-stray-done");
        queue.add(key("a"));
        queue.done(&key("a"));
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn done_after_shutdown_is_harmless() {
        let queue = WorkQueue::new("test-done-after-shutdown");
        queue.add(key("a"));
        let k = queue.get().unwrap();
        queue.add(key("a"));
        queue.shutdown();
        queue.done(&k);
        assert_eq!(queue.len(), 0);
    }
}
