//! metav1-style conditions (the Cluster API v1beta2 contract) and the helpers
//! the controllers use to set them.
//!
//! Rules kept here so every caller gets them right:
//! - `lastTransitionTime` moves only when `status` changes (metav1 semantics),
//!   so a reason or message update does not look like a new transition;
//! - `observedGeneration` is the generation the controller acted on;
//! - `reason` is never empty (the metav1 schema requires it).
//! - `Ready` summarises a given list of conditions the way Cluster API's
//!   default merge strategy does; `Paused` is never part of it.

use serde::{Deserialize, Serialize};

use super::names::{self, Name};

pub const READY: &str = "Ready";
pub const PAUSED: &str = "Paused";

/// Reasons of the `Paused` condition (Cluster API v1beta2).
pub const PAUSED_REASON: &str = "Paused";
pub const NOT_PAUSED_REASON: &str = "NotPaused";

/// Reasons of a `Ready` summary (Cluster API's `DefaultMergeStrategy`).
pub const ISSUES_REPORTED: &str = "IssuesReported";
pub const UNKNOWN_REPORTED: &str = "UnknownReported";
pub const INFO_REPORTED: &str = "InfoReported";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    True,
    False,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type", deserialize_with = "names::decode")]
    pub type_: Name,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A `Box<str>` (16 bytes, not 24): it keeps a Condition at 112 bytes,
    /// so a list of five fits musl's 576-byte size class (at 120 bytes it
    /// took the 672-byte one).
    #[serde(default)]
    pub last_transition_time: Box<str>,
    #[serde(default, deserialize_with = "names::decode")]
    pub reason: Name,
    #[serde(default)]
    pub message: String,
}

/// What a controller wants a condition to say; `set` turns it into a stored
/// [`Condition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired<'a> {
    pub type_: &'a str,
    pub status: Status,
    pub reason: &'a str,
    pub message: String,
}

impl<'a> Desired<'a> {
    pub fn true_(type_: &'a str, reason: &'a str) -> Self {
        Desired {
            type_,
            status: Status::True,
            reason,
            message: String::new(),
        }
    }
    pub fn false_(type_: &'a str, reason: &'a str, message: impl Into<String>) -> Self {
        Desired {
            type_,
            status: Status::False,
            reason,
            message: message.into(),
        }
    }
    pub fn unknown(type_: &'a str, reason: &'a str, message: impl Into<String>) -> Self {
        Desired {
            type_,
            status: Status::Unknown,
            reason,
            message: message.into(),
        }
    }
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }
}

pub fn get<'c>(conditions: &'c [Condition], type_: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == Status::True)
}

/// Sets a condition. `now` (RFC 3339) is used only when the status changes or
/// the condition is new.
pub fn set(conditions: &mut Vec<Condition>, desired: Desired<'_>, generation: i64, now: &str) {
    let reason = if desired.reason.is_empty() {
        "NoReasonReported"
    } else {
        desired.reason
    };
    let observed_generation = (generation > 0).then_some(generation);
    match conditions.iter_mut().find(|c| c.type_ == desired.type_) {
        Some(existing) => {
            if existing.status != desired.status || existing.last_transition_time.is_empty() {
                existing.last_transition_time = now.into();
            }
            existing.status = desired.status;
            existing.reason = names::name(reason);
            existing.message = desired.message;
            existing.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: names::name(desired.type_),
            status: desired.status,
            observed_generation,
            last_transition_time: now.into(),
            reason: names::name(reason),
            message: desired.message,
        }),
    }
}

/// Sets `Ready` from the given condition types: any False → False
/// (`IssuesReported`), else any Unknown or missing → Unknown
/// (`UnknownReported`), else True (`InfoReported`). The message names the
/// conditions that decided it, like Cluster API's summary does.
pub fn set_ready_summary(conditions: &mut Vec<Condition>, of: &[&str], generation: i64, now: &str) {
    let mut issues = Vec::new();
    let mut unknowns = Vec::new();
    let mut infos = Vec::new();
    for type_ in of {
        match get(conditions, type_) {
            Some(c) if c.status == Status::False => issues.push(describe(c)),
            Some(c) if c.status == Status::True => {
                if !c.message.is_empty() {
                    infos.push(describe(c))
                }
            }
            Some(c) => unknowns.push(describe(c)),
            None => unknowns.push(format!("* {type_}: Condition not yet reported")),
        }
    }
    let desired = if !issues.is_empty() {
        Desired::false_(READY, ISSUES_REPORTED, issues.join("\n"))
    } else if !unknowns.is_empty() {
        Desired::unknown(READY, UNKNOWN_REPORTED, unknowns.join("\n"))
    } else {
        Desired {
            type_: READY,
            status: Status::True,
            reason: INFO_REPORTED,
            message: infos.join("\n"),
        }
    };
    set(conditions, desired, generation, now);
}

fn describe(c: &Condition) -> String {
    if c.message.is_empty() {
        format!("* {}: {}", c.type_, c.reason)
    } else {
        format!("* {}: {}", c.type_, c.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_conditions_fit_musls_576_byte_class() {
        // 5 × size + musl's 4-byte header <= 576.
        let size = std::mem::size_of::<Condition>();
        assert!(size <= 112, "Condition is {size} bytes inline");
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut cs = Vec::new();
        set(
            &mut cs,
            Desired::false_("MachineDeployed", "WaitingForBootstrapData", ""),
            1,
            "t1",
        );
        set(
            &mut cs,
            Desired::false_("MachineDeployed", "MachineDeploying", "x"),
            2,
            "t2",
        );
        assert_eq!(&*cs[0].last_transition_time, "t1");
        assert_eq!(cs[0].reason, "MachineDeploying");
        assert_eq!(cs[0].observed_generation, Some(2));
        set(
            &mut cs,
            Desired::true_("MachineDeployed", "MachineDeployed"),
            2,
            "t3",
        );
        assert_eq!(&*cs[0].last_transition_time, "t3");
        assert_eq!(cs[0].status, Status::True);
        assert_eq!(cs[0].message, "");
    }

    #[test]
    fn ready_summary_prefers_issues_then_unknowns() {
        let mut cs = Vec::new();
        set_ready_summary(&mut cs, &["A", "B"], 1, "t");
        assert_eq!(get(&cs, READY).unwrap().status, Status::Unknown);
        set(&mut cs, Desired::true_("A", "Ok"), 1, "t");
        set(
            &mut cs,
            Desired::false_("B", "Broken", "disk on fire"),
            1,
            "t",
        );
        set_ready_summary(&mut cs, &["A", "B"], 1, "t");
        let ready = get(&cs, READY).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_ref()),
            (Status::False, ISSUES_REPORTED)
        );
        assert_eq!(ready.message, "* B: disk on fire");
        set(&mut cs, Desired::true_("B", "Ok"), 1, "t");
        set_ready_summary(&mut cs, &["A", "B"], 1, "t");
        assert!(is_true(&cs, READY));
    }

    #[test]
    fn stored_condition_keeps_metav1_shape() {
        let mut cs = Vec::new();
        set(
            &mut cs,
            Desired::false_("Paused", "", ""),
            0,
            "2026-01-01T00:00:00Z",
        );
        let v = serde_json::to_value(&cs[0]).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "Paused", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z",
                               "reason": "NoReasonReported", "message": ""})
        );
    }
}
