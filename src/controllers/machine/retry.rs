//! A step MAAS refused (no machine matches the constraints, a constraint
//! MAAS rejects, a deployment it will not start) is tried again later:
//! after [`FIRST_RETRY`], then twice as long each time, at most
//! [`MAX_RETRY`]. MAAS is shared infrastructure; a refusal rarely goes away
//! within seconds.
//!
//! The `MachineDeployed` condition says when the next try is, and that is
//! also where the schedule is kept: its message ends with
//! `; next try at <RFC 3339 time> (in <N>s)`. So it survives a restart and
//! costs no extra write, and a reconcile that comes earlier (a watch event,
//! the resync, an owner's change) waits for that time instead of asking
//! MAAS again. A change of the MaasMachine's spec (a new generation) ends
//! the wait: the user may have fixed the constraint.

use std::time::Duration;

use super::MachineReconciling;
use crate::api::maas_machine as mm_api;
use crate::kube::time;
use crate::runtime::Action;

/// The first wait after a refusal.
pub const FIRST_RETRY: Duration = Duration::from_secs(10);
/// The longest wait between two tries.
pub const MAX_RETRY: Duration = Duration::from_secs(300);
const NEXT_TRY: &str = "; next try at ";

/// MAAS refused a step: a Warning event with `message` (the same words
/// each time, so repeats are counted on one Event), the condition with the
/// next try, and the requeue at that time.
pub(super) fn refused(r: &mut MachineReconciling, event_reason: &str, message: &str) -> Action {
    let previous = r
        .condition(mm_api::MACHINE_DEPLOYED)
        .filter(|c| c.reason == mm_api::MACHINE_DEPLOY_FAILED)
        .and_then(|c| schedule(&c.message))
        .map(|(_, delay)| delay);
    let delay = match previous {
        Some(delay) => (delay * 2).clamp(FIRST_RETRY, MAX_RETRY),
        None => FIRST_RETRY,
    };
    let at = r.ctx.clock.now().saturating_add(delay.as_secs());
    r.warning_event(event_reason, message);
    r.set_false(
        mm_api::MACHINE_DEPLOYED,
        mm_api::MACHINE_DEPLOY_FAILED,
        format!(
            "{message}{NEXT_TRY}{} (in {}s)",
            time::time_of_unix_seconds(at),
            delay.as_secs()
        ),
    );
    Action::RequeueAfter(delay)
}

/// While a refused step of this generation waits for its next try: the
/// requeue until then (the condition stays as it is).
pub(super) fn waiting(r: &MachineReconciling) -> Option<Action> {
    let condition = r
        .condition(mm_api::MACHINE_DEPLOYED)
        .filter(|c| c.reason == mm_api::MACHINE_DEPLOY_FAILED)?;
    if condition.observed_generation != Some(r.object.metadata.generation) {
        return None;
    }
    let (at, _) = schedule(&condition.message)?;
    let now = r.ctx.clock.now();
    // The status is ours, but a wait longer than the longest we write is
    // not one we wrote.
    (at > now).then(|| Action::RequeueAfter(Duration::from_secs(at - now).min(MAX_RETRY)))
}

/// The next try (Unix seconds) and the wait that led to it, from a
/// condition message written by [`refused`].
fn schedule(message: &str) -> Option<(u64, Duration)> {
    let (_, rest) = message.rsplit_once(NEXT_TRY)?;
    let (at, delay) = rest.split_once(" (in ")?;
    let delay = delay.strip_suffix("s)")?.parse().ok()?;
    Some((time::unix_seconds(at)?, Duration::from_secs(delay)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_read_back_from_the_message() {
        let at = 1_700_000_000;
        let message = format!(
            "allocating a machine: No available machine matches; x; next try at {} (in 40s)",
            time::time_of_unix_seconds(at)
        );
        assert_eq!(schedule(&message), Some((at, Duration::from_secs(40))));
        assert_eq!(schedule("allocating a machine: no"), None);
        assert_eq!(
            schedule("next try at yesterday (in 40s); next try at now (in s)"),
            None
        );
    }
}
