//! The MAAS event log: the event types a machine's life produces (names,
//! descriptions and levels from `EVENT_DETAILS`, canonical/maas 3.5.4
//! `src/provisioningserver/events.py`), how they are recorded (request
//! events `src/maasserver/models/node.py` `_register_request_event`, status
//! changes `src/maasserver/models/signals/events.py`), and the
//! `GET events/?op=query` answer (`src/maasserver/api/events.py`).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::{Outcome, User, World};
use crate::status::Status;

/// MAAS's event levels (Python logging levels, plus AUDIT = 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Audit = 0,
    Debug = 10,
    Info = 20,
    Warning = 30,
    Error = 40,
    Critical = 50,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Audit => "AUDIT",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warning => "WARNING",
            Level::Error => "ERROR",
            Level::Critical => "CRITICAL",
        }
    }

    /// `LOGGING_LEVELS_BY_NAME` (`src/maasserver/models/eventtype.py`).
    pub fn from_name(name: &str) -> Option<Level> {
        [
            Level::Audit,
            Level::Debug,
            Level::Info,
            Level::Warning,
            Level::Error,
            Level::Critical,
        ]
        .into_iter()
        .find(|l| l.name() == name)
    }
}

/// An entry of `EVENT_DETAILS`: the description is what the API shows as
/// the event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventType {
    pub description: &'static str,
    pub level: Level,
}

const fn kind(description: &'static str, level: Level) -> EventType {
    EventType { description, level }
}

// The event types a machine's life produces (MAAS 3.5.4 EVENT_DETAILS).
pub const NODE_POWER_ON_STARTING: EventType = kind("Powering on", Level::Info);
pub const NODE_POWER_OFF_STARTING: EventType = kind("Powering off", Level::Info);
pub const NODE_POWER_CYCLE_STARTING: EventType = kind("Power cycling", Level::Info);
pub const NODE_POWERED_ON: EventType = kind("Node powered on", Level::Debug);
pub const NODE_POWERED_OFF: EventType = kind("Node powered off", Level::Debug);
pub const NODE_PXE_REQUEST: EventType = kind("PXE Request", Level::Debug);
pub const NODE_CHANGED_STATUS: EventType = kind("Node changed status", Level::Debug);
pub const NODE_INSTALL_EVENT: EventType = kind("Node installation", Level::Debug);
pub const NODE_INSTALL_EVENT_FAILED: EventType = kind("Node installation failure", Level::Error);
pub const REQUEST_NODE_ACQUIRE: EventType = kind("User acquiring node", Level::Debug);
pub const REQUEST_NODE_START_DEPLOYMENT: EventType = kind("User starting deployment", Level::Debug);
pub const REQUEST_NODE_START: EventType = kind("User powering up node", Level::Debug);
pub const REQUEST_NODE_STOP: EventType = kind("User powering down node", Level::Debug);
pub const REQUEST_NODE_RELEASE: EventType = kind("User releasing node", Level::Debug);
pub const REQUEST_NODE_ERASE_DISK: EventType = kind("User erasing disk", Level::Debug);
pub const REQUEST_NODE_ABORT_DEPLOYMENT: EventType = kind("User aborting deployment", Level::Debug);
pub const REQUEST_NODE_MARK_BROKEN: EventType = kind("User marking node broken", Level::Debug);
pub const REQUEST_NODE_MARK_FIXED: EventType = kind("User marking node fixed", Level::Debug);
pub const REQUEST_NODE_MARK_FAILED_SYSTEM: EventType = kind("Marking node failed", Level::Error);
pub const DEPLOYING: EventType = kind("Deploying", Level::Info);
pub const DEPLOYED: EventType = kind("Deployed", Level::Info);
pub const PERFORMING_PXE_BOOT: EventType = kind("Performing PXE boot", Level::Info);
pub const LOADING_EPHEMERAL: EventType = kind("Loading ephemeral", Level::Info);
pub const CONFIGURING_STORAGE: EventType = kind("Configuring storage", Level::Info);
pub const INSTALLING_OS: EventType = kind("Installing OS", Level::Info);
pub const CONFIGURING_OS: EventType = kind("Configuring OS", Level::Info);
pub const REBOOTING: EventType = kind("Rebooting", Level::Info);
pub const RELEASING: EventType = kind("Releasing", Level::Info);
pub const RELEASED: EventType = kind("Released", Level::Info);
pub const ABORTED_DEPLOYMENT: EventType = kind("Aborted deployment", Level::Info);

/// One recorded event.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: u64,
    pub system_id: String,
    pub hostname: String,
    /// The user responsible, "" for system events (shown as "unknown").
    pub username: String,
    pub kind: EventType,
    pub description: String,
    pub action: String,
    pub created: SystemTime,
}

/// The latest INFO-or-above event of a machine: its `status_message` is
/// "type" or "type - description", its `status_action` the action
/// (`Node.status_message`, `status_event`).
#[derive(Debug, Clone, Default)]
pub struct StatusEvent {
    pub message: Option<String>,
    pub action: Option<String>,
}

/// Events kept at most; the oldest go first (a long-running lab must not
/// grow without bound).
const MAX_EVENTS: usize = 200_000;
/// `DEFAULT_EVENT_LOG_LIMIT`, `MAX_EVENT_LOG_COUNT`.
const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

impl World {
    /// Wall-clock time of an instant (events scheduled in the past are
    /// recorded lazily, with the time they were due).
    pub fn wall_time(&self, at: Instant) -> SystemTime {
        let (epoch, wall) = self.clock;
        match at.checked_duration_since(epoch) {
            Some(d) => wall + d,
            None => wall - epoch.duration_since(at),
        }
    }

    /// Records an event for machine `index` at `at`.
    pub fn record(
        &mut self,
        index: usize,
        kind: EventType,
        description: impl Into<String>,
        username: &str,
        action: &str,
        at: Instant,
    ) {
        let created = self.wall_time(at);
        self.next_event_id += 1;
        let m = &mut self.machines[index];
        let event = Event {
            id: self.next_event_id,
            system_id: m.system_id.clone(),
            hostname: m.hostname.clone(),
            username: username.to_owned(),
            kind,
            description: description.into(),
            action: action.to_owned(),
            created,
        };
        if kind.level >= Level::Info {
            m.status_event = StatusEvent {
                message: Some(if event.description.is_empty() {
                    kind.description.to_owned()
                } else {
                    format!("{} - {}", kind.description, event.description)
                }),
                action: Some(event.action.clone()),
            };
        }
        if self.events.len() >= MAX_EVENTS {
            self.events.drain(..MAX_EVENTS / 10);
        }
        self.events.push(event);
    }

    /// A user's request (`_register_request_event`): the description is
    /// "(user)" or "(user) - comment"; the comment is also kept on the
    /// machine for `/_sim/state`.
    pub fn request_event(
        &mut self,
        index: usize,
        kind: EventType,
        user: &User,
        action: &str,
        comment: Option<&str>,
        at: Instant,
    ) {
        let comment = comment.filter(|c| !c.is_empty());
        let description = match comment {
            Some(c) => format!("({}) - {c}", user.username),
            None => format!("({})", user.username),
        };
        if let Some(c) = comment {
            self.machines[index].comments.push(c.to_owned());
        }
        self.record(index, kind, description, &user.username, action, at);
    }

    /// Changes the status and records it as MAAS's status signal does:
    /// "From 'Ready' to 'Allocated' (to admin)".
    pub fn set_status(&mut self, index: usize, status: Status, at: Instant) {
        let m = &mut self.machines[index];
        let old = m.status;
        if old == status {
            return;
        }
        m.previous_status = old;
        m.status = status;
        let mut description = format!("From '{}' to '{}'", old.name(), status.name());
        if status == Status::Allocated {
            if let Some(owner) = &m.owner {
                description.push_str(&format!(" (to {owner})"));
            }
        }
        self.record(index, NODE_CHANGED_STATUS, description, "", "", at);
    }

    /// `GET events/?op=query`. `query` is the whole query string, `op`
    /// included, in request order (the paging URIs repeat it).
    pub fn query_events(&self, user: &User, query: &[(String, String)]) -> Outcome<Value> {
        let one = |key: &str| {
            query
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let all = |key: &str| -> Vec<&str> {
            query
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        let int = |key: &str| -> Outcome<Option<i64>> {
            match one(key) {
                None => Ok(None),
                Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| {
                    super::Failure::Text(
                        400,
                        format!("Invalid {key}: Please enter an integer value"),
                    )
                }),
            }
        };
        let after = int("after")?;
        let before = int("before")?;
        let level_name = one("level").unwrap_or("INFO");
        let limit = int("limit")?.unwrap_or(DEFAULT_LIMIT);
        if limit > MAX_LIMIT {
            return Err(super::Failure::Text(
                400,
                format!("Requested number of events {limit} is greater than limit: {MAX_LIMIT}"),
            ));
        }
        let limit = limit.max(1) as usize;
        let macs = all("mac_address");
        let bad_macs: Vec<&str> = macs.iter().copied().filter(|m| !is_mac(m)).collect();
        if !bad_macs.is_empty() {
            return Err(super::Failure::Text(
                400,
                format!("Invalid MAC address(es): {}", bad_macs.join(", ")),
            ));
        }
        let Some(level) = Level::from_name(level_name) else {
            return Err(super::Failure::Text(
                400,
                format!("Unrecognised log level: {level_name}"),
            ));
        };
        // The machines: visible to the caller, filtered like
        // `filtered_nodes_list_from_request`.
        let ids = all("id");
        let hostnames = all("hostname");
        let domains = all("domain");
        let zone = one("zone");
        let pool = one("pool");
        let agent_name = one("agent_name");
        let nodes: std::collections::HashSet<&str> = self
            .machines
            .iter()
            .filter(|m| self.can_view(m, user))
            .filter(|m| ids.is_empty() || ids.contains(&m.system_id.as_str()))
            .filter(|m| macs.is_empty() || macs.iter().any(|mac| m.has_mac(mac)))
            .filter(|m| hostnames.is_empty() || hostnames.contains(&m.hostname.as_str()))
            .filter(|m| domains.is_empty() || domains.contains(&self.domain_name(m.domain_id)))
            .filter(|m| zone.is_none_or(|z| z == m.zone))
            .filter(|m| pool.is_none_or(|p| p == m.pool))
            .filter(|m| agent_name.is_none_or(|a| a == m.agent_name))
            .map(|m| m.system_id.as_str())
            .collect();
        let owner = one("owner");
        let matches = |e: &&Event| {
            nodes.contains(e.system_id.as_str())
                && if level == Level::Audit {
                    e.kind.level == Level::Audit
                } else {
                    e.kind.level >= level
                }
                && owner.is_none_or(|o| o == e.username)
        };
        let events: Vec<&Event> =
            match (after, before) {
                (None, None) => self
                    .events
                    .iter()
                    .rev()
                    .filter(matches)
                    .take(limit)
                    .collect(),
                (None, Some(b)) => self
                    .events
                    .iter()
                    .rev()
                    .filter(|e| (e.id as i64) < b)
                    .filter(matches)
                    .take(limit)
                    .collect(),
                (Some(a), None) => {
                    let mut oldest_first: Vec<&Event> = self
                        .events
                        .iter()
                        .filter(|e| (e.id as i64) > a)
                        .filter(matches)
                        .take(limit)
                        .collect();
                    oldest_first.reverse();
                    oldest_first
                }
                (Some(_), Some(_)) => return Err(super::Failure::Text(
                    400,
                    "There is undetermined behaviour when both `after` and `before` are specified."
                        .into(),
                )),
            };

        let next_uri = match (events.first(), before) {
            (Some(newest), _) => Some(page_uri(query, "before", "after", newest.id.to_string())),
            (None, None) => Some(page_uri(query, "before", "after", String::new())),
            (None, Some(b)) => Some(page_uri(query, "before", "after", (b - 1).to_string())),
        };
        let prev_uri = match (events.last(), after) {
            (Some(oldest), _) => Some(page_uri(query, "after", "before", oldest.id.to_string())),
            (None, None) => None,
            (None, Some(a)) => Some(page_uri(query, "after", "before", (a + 1).to_string())),
        };
        Ok(json!({
            "count": events.len(),
            "events": events.iter().map(|e| event_json(e)).collect::<Vec<_>>(),
            "next_uri": next_uri,
            "prev_uri": prev_uri,
        }))
    }
}

/// `event_to_dict`.
fn event_json(e: &Event) -> Value {
    json!({
        "username": if e.username.is_empty() { "unknown" } else { &e.username },
        "node": e.system_id,
        "hostname": e.hostname,
        "id": e.id,
        "level": e.kind.level.name(),
        "created": format_created(e.created),
        "type": e.kind.description,
        "description": e.description,
    })
}

/// The paging URIs of `EventsHandler.query`: the request's parameters that
/// are in `all_params` (`get_overridden_query_dict` over a QueryDict: each
/// key once, with its *last* value, in first-appearance order), without
/// `drop`, then `set=value` (omitted when `value` is empty, as
/// `urlencode(doseq=True)` omits an empty list), urlencoded with
/// `quote_plus`.
fn page_uri(query: &[(String, String)], drop: &str, set: &str, value: String) -> String {
    const ALL_PARAMS: &[&str] = &[
        "agent_name",
        "domain",
        "hostname",
        "id",
        "level",
        "limit",
        "mac_address",
        "op",
        "zone",
        "owner",
    ];
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for (k, v) in query {
        if !ALL_PARAMS.contains(&k.as_str()) || k == drop {
            continue;
        }
        match pairs.iter_mut().find(|(key, _)| key == k) {
            Some(pair) => pair.1 = v,
            None => pairs.push((k, v)),
        }
    }
    let mut out = String::from("/MAAS/api/2.0/events/");
    let mut encoded: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", quote_plus(k), quote_plus(v)))
        .collect();
    if !value.is_empty() {
        encoded.push(format!("{set}={}", quote_plus(&value)));
    }
    if !encoded.is_empty() {
        out.push('?');
        out.push_str(&encoded.join("&"));
    }
    out
}

/// Python's `urllib.parse.quote_plus`.
fn quote_plus(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `MAC_FIELD_RE`-like: six pairs of hex digits separated by `:` or `-`.
fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// `created.strftime("%a, %d %b. %Y %H:%M:%S")`, in UTC (the region's time
/// zone), e.g. `Fri, 07 Dec. 2018 20:11:08`.
pub fn format_created(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {}. {} {:02}:{:02}:{:02}",
        WEEKDAYS[days.rem_euclid(7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A Django `DateTimeField` as the API renders it:
/// `2018-12-14T20:01:45.856` (UTC, milliseconds).
pub fn format_iso(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 → (year, month 1..=12, day 1..=31), the
/// proleptic Gregorian algorithm of Howard Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn created_is_formatted_like_maas() {
        // The date of the events-query example in MAAS's API docs.
        let t = UNIX_EPOCH + Duration::from_secs(1_544_213_468);
        assert_eq!(format_created(t), "Fri, 07 Dec. 2018 20:11:08");
        assert_eq!(format_created(UNIX_EPOCH), "Thu, 01 Jan. 1970 00:00:00");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_created(leap), "Tue, 29 Feb. 2000 00:00:00");
        let iso = UNIX_EPOCH + Duration::from_millis(1_544_817_705_856);
        assert_eq!(format_iso(iso), "2018-12-14T20:01:45.856");
    }

    #[test]
    fn paging_uris_follow_querydict_semantics() {
        let q: Vec<(String, String)> = [
            ("op", "query"),
            ("id", "aaa"),
            ("id", "bbb"),
            ("limit", "5"),
            ("before", "9"),
            ("bogus", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            page_uri(&q, "before", "after", "12".into()),
            "/MAAS/api/2.0/events/?op=query&id=bbb&limit=5&after=12"
        );
        assert_eq!(
            page_uri(&q, "after", "before", "3".into()),
            "/MAAS/api/2.0/events/?op=query&id=bbb&limit=5&before=3"
        );
        assert_eq!(quote_plus("a b/c"), "a+b%2Fc");
    }

    #[test]
    fn levels_and_macs() {
        assert_eq!(Level::from_name("WARNING"), Some(Level::Warning));
        assert_eq!(Level::from_name("info"), None);
        assert!(Level::Info > Level::Debug && Level::Debug > Level::Audit);
        assert!(is_mac("52:54:00:AA:00:01"));
        assert!(is_mac("52-54-00-aa-00-01"));
        assert!(!is_mac("52:54:00:aa:00"));
    }
}
