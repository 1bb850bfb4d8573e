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
    #[serde(rename = "type")]
    pub type_: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub last_transition_time: String,
    #[serde(default)]
    pub reason: String,
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

/// Has the condition this status and reason already?
pub fn has_reason(conditions: &[Condition], type_: &str, reason: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.reason == reason)
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
                existing.last_transition_time = now.to_string();
            }
            existing.status = desired.status;
            existing.reason = reason.to_string();
            existing.message = desired.message;
            existing.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: desired.type_.to_string(),
            status: desired.status,
            observed_generation,
            last_transition_time: now.to_string(),
            reason: reason.to_string(),
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

/// The current time as RFC 3339 UTC with second precision, as Kubernetes
/// writes `metav1.Time`.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_rfc3339(secs)
}

/// Seconds since the Unix epoch → `YYYY-MM-DDTHH:MM:SSZ`.
pub fn format_rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm)` → seconds since the Unix epoch.
/// Lenient on purpose: it is only used to age conditions.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut offset = 0i64;
    if let Some(pos) = s[19..].find(['+', '-']) {
        let tz = &s[19 + pos..];
        let sign = if tz.starts_with('-') { -1 } else { 1 };
        let oh = tz.get(1..3)?.parse::<i64>().ok()?;
        let om = tz.get(4..6)?.parse::<i64>().ok()?;
        offset = sign * (oh * 3600 + om * 60);
    }
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset;
    u64::try_from(secs).ok()
}

// Howard Hinnant's civil-calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(cs[0].last_transition_time, "t1");
        assert_eq!(cs[0].reason, "MachineDeploying");
        assert_eq!(cs[0].observed_generation, Some(2));
        set(
            &mut cs,
            Desired::true_("MachineDeployed", "MachineDeployed"),
            2,
            "t3",
        );
        assert_eq!(cs[0].last_transition_time, "t3");
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
            (ready.status, ready.reason.as_str()),
            (Status::False, ISSUES_REPORTED)
        );
        assert_eq!(ready.message, "* B: disk on fire");
        set(&mut cs, Desired::true_("B", "Ok"), 1, "t");
        set_ready_summary(&mut cs, &["A", "B"], 1, "t");
        assert!(is_true(&cs, READY));
    }

    #[test]
    fn rfc3339_round_trips() {
        for secs in [0u64, 951_782_400, 1_700_000_000, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&format_rfc3339(secs)), Some(secs));
        }
        assert_eq!(format_rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000)
        );
        assert_eq!(parse_rfc3339("garbage"), None);
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
