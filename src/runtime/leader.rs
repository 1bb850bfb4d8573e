//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! (The elector itself lands next; this file holds the gate the workers
//! check.)

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

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

impl LeaderGate {
    /// A gate that is always open: for running without leader election.
    pub fn always_open() -> LeaderGate {
        LeaderGate::with_state(GateState::Leading { until: None })
    }

    /// A closed gate, opened by a [`LeaderElector`](super::LeaderElector).
    pub(crate) fn standby() -> LeaderGate {
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
        let deadline = Instant::now() + timeout;
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

    /// Opens (or keeps open) the gate until `until`.
    pub(crate) fn lead_until(&self, until: Instant) {
        let mut state = self.lock();
        if !matches!(*state, GateState::Lost) {
            *state = GateState::Leading { until: Some(until) };
            self.inner.changed.notify_all();
        }
    }

    /// Closes the gate for good.
    pub(crate) fn lose(&self) {
        *self.lock() = GateState::Lost;
        self.inner.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
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

        // A renew deadline in the past closes the gate by itself.
        gate.lead_until(Instant::now() - Duration::from_millis(1));
        assert!(!gate.is_leader());
        assert_eq!(gate.leadership(), Leadership::Lost);

        gate.lose();
        gate.lead_until(Instant::now() + Duration::from_secs(600));
        assert_eq!(gate.leadership(), Leadership::Lost, "loss is final");
    }
}
