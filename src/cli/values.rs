//! What a flag's value may be: each parser names the flag in its error, so
//! a typo fails at start with the flag, what it expects and what it got
//! (cut short), instead of as a 400 from the API server later.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Longest flag value read at all: no legitimate value comes near it, and a
/// bound keeps every error message short.
pub const MAX_VALUE_LEN: usize = 4096;

/// The range each duration flag accepts: a zero or a year-long period is a
/// typo, not a setting, and refusing it at start beats a busy loop or an
/// overflow later.
fn duration_range(name: &str) -> (Duration, Duration) {
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    match name {
        // Every object re-reconciled; below 1s the resync is a busy loop.
        "sync-period" => (s(1), s(24 * 3600)),
        // One list of every machine per MAAS user and interval: below 5s
        // that is a heavy load on MAAS; above an hour, nothing is watched.
        "maas-watch-interval" => (s(5), s(3600)),
        "leader-elect-lease-duration" => (s(1), s(3600)),
        "leader-elect-renew-deadline" | "leader-elect-retry-period" => (ms(100), s(3600)),
        // 0 is allowed: stop at once on SIGTERM.
        "shutdown-timeout" => (Duration::ZERO, s(3600)),
        _ => (ms(1), s(24 * 3600)),
    }
}

/// Worker threads per kind: at least one, at most what a MAAS region and an
/// API server should be asked to serve from one process.
const MAX_CONCURRENCY: usize = 256;

pub fn parse_count(name: &str, value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_CONCURRENCY).contains(&n) => Ok(n),
        _ => Err(format!(
            "--{name}: expected a whole number from 1 to {MAX_CONCURRENCY}, got {}",
            shown(value)
        )),
    }
}

/// A switch's `=VALUE`: `true` or `false`, nothing else. `--apply=no`
/// must not apply, and guessing what `0`, `off` or `maybe` mean is how a
/// dry run turns into a real one.
pub fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!(
            "--{name}: expected --{name}, --{name}=true or --{name}=false, got {}",
            shown(value)
        )),
    }
}

/// `500ms`, `15s`, `10m`, `2h`, `1m30s` (Go's `time.ParseDuration` subset),
/// within the flag's [`duration_range`]. Overflow is an error, never a
/// panic.
pub fn parse_duration(name: &str, value: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "--{name}: expected a duration such as 30s, 10m or 1h30m, got {}",
            shown(value)
        )
    };
    let (min, max) = duration_range(name);
    let out_of_range = || {
        format!(
            "--{name}: {} is out of range; expected {} to {}",
            shown(value),
            human(min),
            human(max)
        )
    };
    if value.is_empty() || value.len() > 64 {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        // A number too big for u64 is out of range, not malformed.
        let number: u64 = rest[..digits].parse().map_err(|_| out_of_range())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            _ => return Err(bad()),
        };
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or_else(out_of_range)?;
        rest = &rest[unit_len..];
    }
    if total < min || total > max {
        return Err(out_of_range());
    }
    Ok(total)
}

/// A duration as the flags write it (`90s` → `1m30s`).
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (ms, "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// `host:port`, `:port` (all interfaces), or `0` (disabled). The port must
/// be a real one: port 0 would bind somewhere no probe or scraper can know.
pub fn parse_address(name: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "0" || value.is_empty() {
        return Ok(None);
    }
    let full = match value.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => value.to_string(),
    };
    let addr: SocketAddr = full.parse().map_err(|_| {
        format!(
            "--{name}: expected host:port (an IP address and a port), :port or 0, got {}",
            shown(value)
        )
    })?;
    if addr.port() == 0 {
        return Err(format!(
            "--{name}: port 0 is not allowed (use 0 alone to disable), got {}",
            shown(value)
        ));
    }
    Ok(Some(addr))
}

/// A comma-separated list of MAAS endpoints, as API roots (so that
/// `http://h:5240/MAAS` and `http://h:5240/MAAS/api/2.0/` are one).
pub fn parse_endpoints(name: &str, value: &str) -> Result<Vec<String>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(|url| crate::maas::client::api_root(url).map_err(|e| format!("--{name}: {e}")))
        .collect()
}

pub fn parse_path(name: &str, value: &str) -> Result<PathBuf, String> {
    if value.is_empty() || value.len() > MAX_VALUE_LEN || value.contains('\0') {
        return Err(format!(
            "--{name}: expected a file path, got {}",
            shown(value)
        ));
    }
    Ok(PathBuf::from(value))
}

/// Which Kubernetes naming rule a flag value follows.
#[derive(Clone, Copy)]
pub enum NameRule {
    /// RFC 1123 label: namespaces (63 characters, `a-z 0-9 -`).
    Label,
    /// RFC 1123 subdomain: object names such as the Lease (253, also `.`).
    Subdomain,
    /// A label value: 63 characters of `A-Z a-z 0-9 - _ .`, starting and
    /// ending alphanumeric.
    LabelValue,
}

/// An empty value means "unset"; anything else must follow `rule`, so a
/// typo fails at start instead of as a 400 from the API server later.
pub fn parse_name(name: &str, value: &str, rule: NameRule) -> Result<Option<String>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    let (max, allowed, what): (usize, fn(char) -> bool, &str) = match rule {
        NameRule::Label => (
            63,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-',
            "a namespace name (at most 63 of a-z, 0-9, '-')",
        ),
        NameRule::Subdomain => (
            253,
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.',
            "an object name (at most 253 of a-z, 0-9, '-', '.')",
        ),
        NameRule::LabelValue => (
            63,
            |c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'),
            "a label value (at most 63 of A-Z, a-z, 0-9, '-', '_', '.')",
        ),
    };
    let ends_ok = value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    if value.len() > max || !value.chars().all(allowed) || !ends_ok {
        return Err(format!(
            "--{name}: expected {what}, starting and ending with a letter or digit, got {}",
            shown(value)
        ));
    }
    Ok(Some(value.to_string()))
}

/// A flag value quoted for an error message, cut short if long.
pub fn shown(value: &str) -> String {
    const MAX: usize = 80;
    if value.len() <= MAX {
        return format!("{value:?}");
    }
    let mut cut = MAX;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{:?}... ({} bytes)", &value[..cut], value.len())
}

/// An RFC 3339 time (`2026-12-01T00:00:00Z`, an offset allowed), as Unix
/// seconds.
pub fn parse_time(name: &str, value: &str) -> Result<u64, String> {
    crate::kube::time::unix_seconds(value).ok_or_else(|| {
        format!(
            "--{name}: expected an RFC 3339 time such as 2026-12-01T00:00:00Z, got {}",
            shown(value)
        )
    })
}
