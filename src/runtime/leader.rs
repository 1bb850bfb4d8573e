//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` package does it, so our replicas and tools that read
//! Leases see the usual record.
//!
//! One thread per process:
//!
//! 1. **Standby**: every `retry_period` (jittered up to 2.2×) read the Lease.
//!    Create it if missing. Take it over (a `resourceVersion`-guarded PUT;
//!    a 409 means another replica won the race) when its holder is empty or
//!    its record has not changed for `leaseDurationSeconds` *as measured on
//!    our clock since we first saw that record*: the timestamps inside the
//!    Lease are never compared with our clock, so clock skew does not matter.
//! 2. **Leader**: every `retry_period` renew (`renewTime = now`). The
//!    [`LeaderGate`] stays open until the start of the last successful renew
//!    plus `renew_deadline`, and closes by itself after that even if this
//!    thread is stuck in a slow request.
//! 3. **Lost**: no renew succeeded within `renew_deadline`, or someone else
//!    holds the Lease. The gate closes for good and [`LeaderElector::lost`]
//!    fires. We do not try to lead again: the choice, as in
//!    controller-runtime, is that the process exits (non-zero) and Kubernetes
//!    restarts the pod as a fresh standby. Reconciles in flight may finish
//!    or be cut off; both are safe because reconciles are idempotent (there
//!    is no fencing, so a brief overlap of two leaders is possible anyway).
//! 4. **Release** on clean shutdown ([`LeaderElector::release`], after the
//!    workers have stopped): PUT `holderIdentity: ""` and
//!    `leaseDurationSeconds: 1`, so a standby takes over at its next retry
//!    instead of waiting out the lease.
//!
//! Defaults follow controller-runtime: lease 15 s, renew deadline 10 s,
//! retry 2 s.

use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Value};

use crate::backoff::{random_between, random_u64};
use crate::clock::later;
use crate::kube::{self, merge_patch as patch, resources::LEASES, Client};
use crate::metrics;

/// Where this process stands in the election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Not (yet) the leader; trying to acquire the Lease.
    Standby,
    /// Holds the Lease; workers may reconcile.
    Leader,
    /// Was the leader and lost the Lease (or released it). Final: the
    /// process is expected to exit.
    Lost,
}

/// The switch workers check before each reconcile.
///
/// Cheap to clone. A leader's gate is open only until its last successful
/// renewal plus the renew deadline: if the elector thread hangs in a slow
/// request, the gate closes on time by itself.
#[derive(Clone)]
pub struct LeaderGate {
    inner: Arc<GateInner>,
}

struct GateInner {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Clone, Copy)]
enum GateState {
    Standby,
    /// Leading; `until` is `None` when there is no election at all.
    Leading {
        until: Option<Instant>,
    },
    Lost,
}

impl std::fmt::Debug for LeaderGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LeaderGate")
            .field(&self.leadership())
            .finish()
    }
}

impl LeaderGate {
    /// A gate that is always open: for running without leader election.
    pub fn always_open() -> LeaderGate {
        LeaderGate::with_state(GateState::Leading { until: None })
    }

    /// A closed gate, for a [`LeaderElector`] to open.
    pub fn standby() -> LeaderGate {
        LeaderGate::with_state(GateState::Standby)
    }

    fn with_state(state: GateState) -> LeaderGate {
        LeaderGate {
            inner: Arc::new(GateInner {
                state: Mutex::new(state),
                changed: Condvar::new(),
            }),
        }
    }

    /// Whether work may be done right now.
    pub fn is_leader(&self) -> bool {
        self.leadership() == Leadership::Leader
    }

    /// The current standing, for health reporting.
    pub fn leadership(&self) -> Leadership {
        match *self.lock() {
            GateState::Standby => Leadership::Standby,
            GateState::Leading { until: None } => Leadership::Leader,
            GateState::Leading { until: Some(t) } if Instant::now() < t => Leadership::Leader,
            // Past the renew deadline: treat as lost even before the elector
            // thread says so.
            GateState::Leading { .. } | GateState::Lost => Leadership::Lost,
        }
    }

    /// Blocks until this process leads, leadership is lost, or `timeout`
    /// passes; returns the standing at that moment.
    pub fn wait_for_leadership(&self, timeout: Duration) -> Leadership {
        let deadline = later(Instant::now(), timeout);
        let mut state = self.lock();
        while matches!(*state, GateState::Standby) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .inner
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(state);
        self.leadership()
    }

    /// Opens (or keeps open) the gate until `until`; false if it had
    /// already closed. A gate that expired stays closed even if a late
    /// renew succeeds: workers that saw it closed have stopped for good, so
    /// the elector must treat that as a loss too.
    pub fn lead_until(&self, until: Instant) -> bool {
        let mut state = self.lock();
        let open = match *state {
            GateState::Standby => true,
            GateState::Leading { until: None } => true,
            GateState::Leading { until: Some(t) } => Instant::now() < t,
            GateState::Lost => false,
        };
        *state = if open {
            GateState::Leading { until: Some(until) }
        } else {
            GateState::Lost
        };
        self.inner.changed.notify_all();
        open
    }

    /// Closes the gate for good.
    pub fn lose(&self) {
        *self.lock() = GateState::Lost;
        self.inner.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        crate::sync::lock(&self.inner.state)
    }
}

/// Where the Lease lives and how it is held. Build with
/// [`LeaderConfig::new`]; every default is on its field.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    pub namespace: String,
    /// The Lease's name, e.g. `capmaas-leader-election`.
    pub name: String,
    /// Who we are in `holderIdentity`. Default: [`default_identity`].
    pub identity: String,
    /// How long others wait after the last change they saw before taking
    /// over. Default 15 s.
    pub lease_duration: Duration,
    /// How long a leader keeps working without a successful renew. Default
    /// 10 s.
    pub renew_deadline: Duration,
    /// Time between attempts. Default 2 s.
    pub retry_period: Duration,
}

impl LeaderConfig {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> LeaderConfig {
        LeaderConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// client-go's rule: `lease_duration > renew_deadline > 1.2 ×
    /// retry_period`, so a leader gives up before others may take over and
    /// gets at least one retry before giving up.
    pub fn validate(&self) -> io::Result<()> {
        let invalid = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        if self.lease_duration <= self.renew_deadline {
            return invalid(format!(
                "leader election: lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return invalid(format!(
                "leader election: renew deadline ({:?}) must be longer than 1.2 × the retry period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        if self.lease_duration < Duration::from_secs(1) || self.name.is_empty() {
            return invalid(
                "leader election: needs a Lease name and a lease of at least 1s".into(),
            );
        }
        Ok(())
    }
}

/// `<hostname>_<8 random hex digits>`: the pod name identifies the replica
/// for people; the suffix keeps a restarted container with the same name
/// from being mistaken for its predecessor.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "capmaas".to_string());
    format!("{host}_{:08x}", random_u64() as u32)
}

/// A running election: its gate, its loss signal and its thread.
pub struct LeaderElector {
    gate: LeaderGate,
    identity: String,
    lost: Receiver<()>,
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

impl LeaderElector {
    /// Validates `config` and starts the election thread, which opens and
    /// closes `gate` (a [`LeaderGate::standby`] the caller may already have
    /// handed to workers and probes). Requests use `client` with the renew
    /// deadline as their timeout.
    pub fn spawn(
        client: Client,
        config: LeaderConfig,
        gate: LeaderGate,
    ) -> io::Result<LeaderElector> {
        config.validate()?;
        let (lost_tx, lost) = crossbeam_channel::bounded(1);
        let (stop, stop_rx) = crossbeam_channel::bounded(1);
        let identity = config.identity.clone();
        let mut elector = Elector {
            client: client.with_timeout(config.renew_deadline),
            config,
            gate: gate.clone(),
            lease: None,
            observed: None,
            lost_tx,
            stop: stop_rx,
        };
        let handle = thread::Builder::new()
            .name("leader-election".to_string())
            .spawn(move || elector.run())?;
        Ok(LeaderElector {
            gate,
            identity,
            lost,
            stop,
            handle,
        })
    }

    /// The gate it opens and closes (the one given to `spawn`).
    pub fn gate(&self) -> LeaderGate {
        self.gate.clone()
    }

    /// Receives one message when leadership is lost (and disconnects when
    /// the election thread ends). The process should then exit non-zero.
    pub fn lost(&self) -> Receiver<()> {
        self.lost.clone()
    }

    /// Our `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether we lead right now.
    pub fn is_leader(&self) -> bool {
        self.gate.is_leader()
    }

    /// Stops the election; if we lead, hands the Lease back so a standby
    /// takes over at once. Call after the workers have stopped.
    pub fn release(self) {
        let _ = self.stop.send(());
        if self.handle.join().is_err() {
            log::error!("the leader election thread panicked");
        }
    }
}

/// The `spec` of a Lease, as far as the election reads it.
#[derive(Clone, Debug, PartialEq)]
struct LeaseRecord {
    holder: String,
    duration: Duration,
    transitions: i64,
    /// The whole spec as read, compared to notice any change (a renew
    /// changes `renewTime`).
    raw: Value,
}

impl LeaseRecord {
    fn of(lease: &Value) -> LeaseRecord {
        let spec = lease.get("spec").cloned().unwrap_or(Value::Null);
        let field = |name: &str| spec.get(name);
        LeaseRecord {
            holder: field("holderIdentity")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            duration: Duration::from_secs(
                field("leaseDurationSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            ),
            transitions: field("leaseTransitions")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            raw: spec,
        }
    }
}

/// The state of the election thread.
struct Elector {
    client: Client,
    config: LeaderConfig,
    gate: LeaderGate,
    /// The Lease as last written or read by us (for guarded PUTs).
    lease: Option<Value>,
    /// The last record seen and when (on our clock) it was first seen.
    observed: Option<(LeaseRecord, Instant)>,
    lost_tx: Sender<()>,
    stop: Receiver<()>,
}

impl Elector {
    fn run(&mut self) {
        let lease = format!("{}/{}", self.config.namespace, self.config.name);
        log::info!(
            "leader election: {} waiting for Lease {lease}",
            self.config.identity
        );
        set_leader_metric(&self.config.name, false);
        // Standby: try until we lead or are told to stop.
        loop {
            let attempt = Instant::now();
            match self.try_acquire_or_renew(false) {
                Ok(true) => {
                    // From standby the gate always opens (if this attempt
                    // was so slow that the window is already over, the
                    // renew loop below reports the loss).
                    self.gate
                        .lead_until(later(attempt, self.config.renew_deadline));
                    break;
                }
                Ok(false) => {}
                Err(e) => log::warn!("leader election: cannot read or take Lease {lease}: {e}"),
            }
            let retry = self.config.retry_period;
            if self.stop_requested(random_between(retry, retry.mul_f64(2.2))) {
                return;
            }
        }
        log::info!(
            "leader election: {} now leads (Lease {lease})",
            self.config.identity
        );
        set_leader_metric(&self.config.name, true);

        // Leader: renew until stopped or lost.
        let mut last_renew = Instant::now();
        loop {
            if self.stop_requested(self.config.retry_period) {
                self.gate.lose();
                self.release();
                set_leader_metric(&self.config.name, false);
                return;
            }
            let attempt = Instant::now();
            match self.try_acquire_or_renew(true) {
                Ok(true) => {
                    last_renew = attempt;
                    if !self
                        .gate
                        .lead_until(later(attempt, self.config.renew_deadline))
                    {
                        self.lose(&format!(
                            "Lease {lease} renewed only after the renew deadline ({:?})",
                            self.config.renew_deadline
                        ));
                        return;
                    }
                }
                Ok(false) => {
                    let holder = self.observed.as_ref().map(|(r, _)| r.holder.clone());
                    self.lose(&format!(
                        "Lease {lease} is now held by {}",
                        holder.unwrap_or_default()
                    ));
                    return;
                }
                Err(e) => log::warn!("leader election: renewing Lease {lease} failed: {e}"),
            }
            if last_renew.elapsed() >= self.config.renew_deadline {
                self.lose(&format!(
                    "no renew of Lease {lease} succeeded within {:?}",
                    self.config.renew_deadline
                ));
                return;
            }
        }
    }

    fn lose(&mut self, why: &str) {
        log::error!("leader election: leadership lost: {why}");
        self.gate.lose();
        set_leader_metric(&self.config.name, false);
        let _ = self.lost_tx.try_send(());
    }

    /// Sleeps `d`; true if `release` was called (or the elector dropped).
    fn stop_requested(&self, d: Duration) -> bool {
        !matches!(self.stop.recv_timeout(d), Err(RecvTimeoutError::Timeout))
    }

    /// One round of client-go's `tryAcquireOrRenew`; true if we hold the
    /// Lease afterwards. `leading` enables the fast path: renew from our
    /// own last write without reading first.
    fn try_acquire_or_renew(&mut self, leading: bool) -> Result<bool, kube::Error> {
        let ns = Some(self.config.namespace.as_str());
        let now = kube::time::micro_time(SystemTime::now());
        if leading {
            if let Some(mut lease) = self.lease.clone() {
                patch::apply(
                    &mut lease,
                    &json!({"spec": {"renewTime": now, "leaseDurationSeconds": self.lease_seconds()}}),
                );
                match self.client.replace(&LEASES, ns, &self.config.name, &lease) {
                    Ok(written) => {
                        self.remember(written);
                        return Ok(true);
                    }
                    // Someone wrote (or deleted) the Lease: read it and
                    // decide below.
                    Err(e) if e.is_conflict() || e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
        }

        let lease = match self.client.get(&LEASES, ns, &self.config.name) {
            Ok(lease) => lease,
            Err(e) if e.is_not_found() => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                    "spec": {
                        "holderIdentity": self.config.identity,
                        "leaseDurationSeconds": self.lease_seconds(),
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": 0,
                    }
                });
                return match self.client.create(&LEASES, ns, &lease) {
                    Ok(created) => {
                        self.remember(created);
                        Ok(true)
                    }
                    Err(e) if e.is_already_exists() => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };

        let record = LeaseRecord::of(&lease);
        let seen_at = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record.clone(), seen_at));
        let ours = record.holder == self.config.identity;
        if !record.holder.is_empty() && !ours && seen_at.elapsed() < record.duration {
            return Ok(false); // held by someone alive
        }

        let mut taken = lease;
        patch::apply(
            &mut taken,
            &json!({"spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": self.lease_seconds(),
                "renewTime": now,
            }}),
        );
        if !ours {
            patch::apply(
                &mut taken,
                &json!({"spec": {"acquireTime": now, "leaseTransitions": record.transitions.saturating_add(1)}}),
            );
        }
        // The GET's resourceVersion makes this a compare-and-swap.
        match self.client.replace(&LEASES, ns, &self.config.name, &taken) {
            Ok(written) => {
                self.remember(written);
                Ok(true)
            }
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Hands the Lease back: empty holder, 1 s duration.
    fn release(&mut self) {
        let Some(mut lease) = self.lease.take() else {
            return;
        };
        let now = kube::time::micro_time(SystemTime::now());
        patch::apply(
            &mut lease,
            &json!({"spec": {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": now,
                "acquireTime": now,
            }}),
        );
        let ns = Some(self.config.namespace.as_str());
        match self.client.replace(&LEASES, ns, &self.config.name, &lease) {
            Ok(_) => log::info!("leader election: released Lease {}", self.config.name),
            // A conflict means someone else already took over: nothing to do.
            Err(e) => log::warn!(
                "leader election: could not release Lease {}: {e}",
                self.config.name
            ),
        }
    }

    fn remember(&mut self, lease: Value) {
        self.observed = Some((LeaseRecord::of(&lease), Instant::now()));
        self.lease = Some(lease);
    }

    fn lease_seconds(&self) -> u64 {
        self.config.lease_duration.as_secs().max(1)
    }
}

fn set_leader_metric(name: &str, leading: bool) {
    metrics::gauge_set(
        "leader_election_master_status",
        "Whether this process currently leads (1) or not (0), per Lease.",
        &[("name", name)],
        if leading { 1.0 } else { 0.0 },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_opens_expires_and_closes_for_good() {
        assert!(LeaderGate::always_open().is_leader());

        let gate = LeaderGate::standby();
        assert_eq!(gate.leadership(), Leadership::Standby);
        assert_eq!(
            gate.wait_for_leadership(Duration::from_millis(10)),
            Leadership::Standby
        );

        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.wait_for_leadership(Duration::from_secs(60)))
        };
        gate.lead_until(Instant::now() + Duration::from_secs(600));
        assert_eq!(waiter.join().unwrap(), Leadership::Leader);

        // A renew deadline in the past closes the gate by itself, and a
        // late renew does not reopen it.
        assert!(gate.lead_until(Instant::now() - Duration::from_millis(1)));
        assert!(!gate.is_leader());
        assert_eq!(gate.leadership(), Leadership::Lost);
        assert!(!gate.lead_until(Instant::now() + Duration::from_secs(600)));
        assert_eq!(gate.leadership(), Leadership::Lost, "expiry is final");

        let gate = LeaderGate::standby();
        gate.lose();
        assert!(!gate.lead_until(Instant::now() + Duration::from_secs(600)));
        assert_eq!(gate.leadership(), Leadership::Lost, "loss is final");
    }

    #[test]
    fn config_validation_follows_client_go() {
        let config = LeaderConfig::new("ns", "lease");
        assert!(config.validate().is_ok());
        assert!(config.identity.contains('_'));
        let mut bad = config.clone();
        bad.renew_deadline = bad.lease_duration;
        assert!(bad.validate().is_err());
        let mut bad = config.clone();
        bad.retry_period = Duration::from_secs(9);
        assert!(bad.validate().is_err());
    }

    #[test]
    fn identities_differ_per_process_start() {
        assert_ne!(default_identity(), default_identity());
    }
}
