//! The one error type of the MAAS client.
//!
//! Every error says which operation failed and, when MAAS answered, carries
//! the status and MAAS's body (text, or the JSON field errors of a form
//! validation). Callers decide with [`Error::is_transient`],
//! [`Error::is_not_found`], [`Error::is_conflict`], [`Error::is_refused`]
//! rather than by matching message text, which MAAS has changed between
//! releases.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What went wrong, from the caller's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad configuration: API key, endpoint, CA bundle. Never retried.
    Config,
    /// No connection was made (DNS, refused, connect timeout): the request
    /// certainly did not reach MAAS, so it is safe to repeat any call.
    Connect,
    /// The call timed out after the request may have been sent.
    Timeout,
    /// The connection broke mid-exchange (reset, protocol error): MAAS may or
    /// may not have acted on the request.
    Transport,
    /// TLS setup or certificate verification failed. Not retried: a wrong CA
    /// does not fix itself.
    Tls,
    /// MAAS answered with a non-success status; see [`Error::status`].
    Status,
    /// MAAS answered 2xx but the body was not what we expected.
    Decode,
}

/// The body of an error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaasBody {
    /// No body (e.g. MAAS's 403 for node permission failures).
    Empty,
    /// A text/plain (or HTML) message.
    Text(String),
    /// Form validation errors, `{"field": ["message", ...]}`; `__all__` holds
    /// the non-field errors.
    FieldErrors(BTreeMap<String, Vec<String>>),
}

impl MaasBody {
    /// Interprets a response body: a JSON object of string lists is field
    /// errors; anything else is kept as text (HTML trimmed to its first line
    /// of meaningful text would lose information, so it is kept whole but
    /// capped in length).
    pub fn parse(body: &str) -> MaasBody {
        let trimmed = body.trim();
        if trimmed.is_empty() {
            return MaasBody::Empty;
        }
        if trimmed.starts_with('{') {
            if let Ok(fields) = serde_json::from_str::<BTreeMap<String, Vec<String>>>(trimmed) {
                return MaasBody::FieldErrors(fields);
            }
        }
        const MAX: usize = 2000;
        let mut text = trimmed.to_owned();
        if text.len() > MAX {
            let mut cut = MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("...");
        }
        MaasBody::Text(text)
    }
}

/// How much of a peer's body an error shows: the endpoint is a tenant's
/// choice, and errors end up in conditions and Events.
pub const SHOWN_BODY_CHARS: usize = 200;
/// The same for a detail that quotes a body after our own words.
const SHOWN_DETAIL_CHARS: usize = 400;

impl MaasBody {
    /// The whole body as kept (up to 2,000 characters, scrubbed of the
    /// key), for a debug log line; errors show [`SHOWN_BODY_CHARS`].
    pub fn full_text(&self) -> String {
        match self {
            MaasBody::Empty => String::new(),
            MaasBody::Text(text) => text.clone(),
            MaasBody::FieldErrors(fields) => fields
                .iter()
                .map(|(field, messages)| format!("{field}: {}", messages.join(" ")))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// A peer's text fit for one line of a condition or an Event: control
/// characters and runs of whitespace become one space, and at most `max`
/// characters are kept.
pub fn sanitised(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut chars = 0;
    let mut space = false;
    for c in text.trim().chars() {
        if c.is_whitespace() || c.is_control() {
            space = true;
            continue;
        }
        if chars >= max {
            out.push_str("...");
            return out;
        }
        if space && !out.is_empty() {
            out.push(' ');
            chars += 1;
        }
        space = false;
        out.push(c);
        chars += 1;
    }
    out
}

impl fmt::Display for MaasBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaasBody::Empty => f.write_str("(empty body)"),
            _ => f.write_str(&sanitised(&self.full_text(), SHOWN_BODY_CHARS)),
        }
    }
}

/// An error from one client operation (after any retries).
#[derive(Debug, Clone)]
pub struct Error {
    op: &'static str,
    kind: ErrorKind,
    status: Option<u16>,
    body: MaasBody,
    retry_after: Option<Duration>,
    detail: String,
    attempts: u32,
}

impl Error {
    /// An error without an HTTP answer (also handy for fakes in tests).
    pub fn new(op: &'static str, kind: ErrorKind, detail: impl Into<String>) -> Error {
        Error {
            op,
            kind,
            status: None,
            body: MaasBody::Empty,
            retry_after: None,
            detail: detail.into(),
            attempts: 1,
        }
    }

    /// An HTTP error answer (also handy for fakes in tests).
    pub fn status(
        op: &'static str,
        status: u16,
        body: MaasBody,
        retry_after: Option<Duration>,
    ) -> Error {
        Error {
            status: Some(status),
            body,
            retry_after,
            ..Error::new(op, ErrorKind::Status, "")
        }
    }

    /// An HTTP error answer from its raw body text.
    pub fn from_response(
        op: &'static str,
        status: u16,
        body: &str,
        retry_after: Option<Duration>,
    ) -> Error {
        Error::status(op, status, MaasBody::parse(body), retry_after)
    }

    pub(crate) fn with_attempts(mut self, attempts: u32) -> Error {
        self.attempts = attempts;
        self
    }

    /// The client operation, e.g. `allocate`, `dnsresource_update`.
    pub fn op(&self) -> &'static str {
        self.op
    }

    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The HTTP status when MAAS answered.
    pub fn http_status(&self) -> Option<u16> {
        self.status
    }

    /// MAAS's error body ([`MaasBody::Empty`] when there was no answer).
    pub fn body(&self) -> &MaasBody {
        &self.body
    }

    /// How many attempts were made (1 = no retry).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The server's `Retry-After`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Worth trying again later: no connection, timeouts, broken
    /// connections, 5xx, and the 409 that MAAS sends with `Retry-After` when
    /// its database transaction kept conflicting. A 409 without
    /// `Retry-After` is a state or constraint error and is permanent.
    pub fn is_transient(&self) -> bool {
        match self.kind {
            ErrorKind::Connect | ErrorKind::Timeout | ErrorKind::Transport => true,
            ErrorKind::Status => match self.status {
                Some(s) if s >= 500 => true,
                Some(409) => self.retry_after.is_some(),
                _ => false,
            },
            ErrorKind::Config | ErrorKind::Tls | ErrorKind::Decode => false,
        }
    }

    /// 404: the machine, DNS resource, domain ... does not exist.
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404)
    }

    /// A permanent 409: no machine matches, or the operation is illegal in
    /// the machine's current state.
    pub fn is_conflict(&self) -> bool {
        self.status == Some(409) && self.retry_after.is_none()
    }

    /// 410: MAAS removed the feature (VM hosts after 3.8).
    pub fn is_gone(&self) -> bool {
        self.status == Some(410)
    }

    /// 401: the API key is wrong (or MAAS forgot it).
    pub fn is_unauthorized(&self) -> bool {
        self.status == Some(401)
    }

    /// 403: the key's user may not do this (e.g. a non-admin key).
    pub fn is_forbidden(&self) -> bool {
        self.status == Some(403)
    }

    /// 400: MAAS rejected the parameters (unknown image, zone, pool, tag...).
    pub fn is_bad_request(&self) -> bool {
        self.status == Some(400)
    }

    /// MAAS answered and said no (400, 401, 403, 404, a permanent 409):
    /// repeating the same call will not help until something changes, so
    /// it is worth a condition, not just a log line.
    pub fn is_refused(&self) -> bool {
        self.is_bad_request()
            || self.is_unauthorized()
            || self.is_forbidden()
            || self.is_not_found()
            || self.is_conflict()
    }

    /// A one-line human message without the operation prefix: MAAS's body,
    /// or the transport detail.
    pub fn message(&self) -> String {
        match self.kind {
            ErrorKind::Status => self.body.to_string(),
            ErrorKind::Decode => sanitised(&self.detail, SHOWN_DETAIL_CHARS),
            _ => self.detail.clone(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MAAS {}: ", self.op)?;
        match (&self.kind, self.status) {
            (ErrorKind::Status, Some(status)) => {
                write!(f, "HTTP {status}{}: {}", reason(status), self.body)?
            }
            (ErrorKind::Config, _) => write!(f, "configuration: {}", self.detail)?,
            (ErrorKind::Connect, _) => write!(f, "cannot connect: {}", self.detail)?,
            (ErrorKind::Timeout, _) => write!(f, "timed out: {}", self.detail)?,
            (ErrorKind::Transport, _) => write!(f, "connection failed: {}", self.detail)?,
            (ErrorKind::Tls, _) => write!(f, "TLS: {}", self.detail)?,
            (ErrorKind::Decode, _) => write!(
                f,
                "unexpected response: {}",
                sanitised(&self.detail, SHOWN_DETAIL_CHARS)
            )?,
            (ErrorKind::Status, None) => write!(f, "{}", self.detail)?,
        }
        if self.attempts > 1 {
            write!(f, " (after {} attempts)", self.attempts)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

fn reason(status: u16) -> &'static str {
    match status {
        301 | 302 | 307 | 308 => " Redirect",
        400 => " Bad Request",
        401 => " Unauthorized",
        403 => " Forbidden",
        404 => " Not Found",
        405 => " Method Not Allowed",
        409 => " Conflict",
        500 => " Internal Server Error",
        502 => " Bad Gateway",
        503 => " Service Unavailable",
        504 => " Gateway Timeout",
        _ => "",
    }
}

/// What must never appear in an error or a log line: the three parts of
/// the API key (MAAS's 401 bodies echo the token key, e.g. `Invalid access
/// token: <token_key>`, and the expected signature, i.e. the token secret)
/// and the endpoint's `user:password@`.
#[derive(Clone, Default)]
pub(crate) struct Secrets {
    words: Vec<String>,
}

impl Secrets {
    /// Parts shorter than 4 characters are not scrubbed: they are no secret
    /// and would shred every message (real MAAS key parts are 18+).
    pub(crate) fn new<'a>(words: impl IntoIterator<Item = &'a str>) -> Secrets {
        let mut words: Vec<String> = words
            .into_iter()
            .filter(|w| w.len() >= 4)
            .map(str::to_owned)
            .collect();
        // Longest first, so that a word containing another is replaced whole.
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        Secrets { words }
    }

    /// `text` without the secrets, and without the signature MAAS echoes
    /// after a wrong secret (which is the real token secret).
    pub(crate) fn scrub(&self, text: &str) -> String {
        const ECHO: &str = "Expected signature base string:";
        let mut out = match text.find(ECHO) {
            Some(at) => {
                let end = text[at..].find('\'').map(|q| at + q).unwrap_or(text.len());
                format!("{}{ECHO} <redacted>{}", &text[..at], &text[end..])
            }
            None => text.to_owned(),
        };
        for word in &self.words {
            if out.contains(word.as_str()) {
                out = out.replace(word.as_str(), "<redacted>");
            }
        }
        out
    }
}

impl Error {
    /// The same error with every text it carries scrubbed of `secrets`.
    pub(crate) fn scrubbed(mut self, secrets: &Secrets) -> Error {
        self.detail = secrets.scrub(&self.detail);
        self.body = match self.body {
            MaasBody::Empty => MaasBody::Empty,
            MaasBody::Text(text) => MaasBody::Text(secrets.scrub(&text)),
            MaasBody::FieldErrors(fields) => MaasBody::FieldErrors(
                fields
                    .into_iter()
                    .map(|(k, v)| {
                        (
                            secrets.scrub(&k),
                            v.iter().map(|m| secrets.scrub(m)).collect(),
                        )
                    })
                    .collect(),
            ),
        };
        self
    }
}

/// `scheme://user:password@host/...` → `scheme://<redacted>@host/...`: a URL
/// fit for logs and errors. Anything else is returned as it is.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<redacted>{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// The `user:password` of a URL, if any (to scrub it from errors).
pub(crate) fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    authority.rfind('@').map(|at| &authority[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_errors_are_parsed() {
        let body = MaasBody::parse(r#"{"distro_series": ["'x' is not valid."]}"#);
        let MaasBody::FieldErrors(fields) = &body else {
            panic!("{body:?}")
        };
        assert_eq!(
            fields["distro_series"],
            vec!["'x' is not valid.".to_owned()]
        );
        assert_eq!(body.to_string(), "distro_series: 'x' is not valid.");
    }

    #[test]
    fn text_and_empty_bodies() {
        assert_eq!(MaasBody::parse(" \n"), MaasBody::Empty);
        assert_eq!(
            MaasBody::parse("No Machine matches the given query."),
            MaasBody::Text("No Machine matches the given query.".into())
        );
    }

    /// Issue 19 item 8: a peer's body reaches errors (and so conditions
    /// and Events) as one short line; the debug log can have it all.
    #[test]
    fn a_peer_body_is_shown_short_on_one_line() {
        let sent = "line one\n\u{1b}[31m<b>x</b>\t\r\n".repeat(100);
        let body = MaasBody::parse(&sent);
        let shown = Error::status("whoami", 401, body.clone(), None).to_string();
        assert!(!shown.contains(['\n', '\r', '\t', '\u{1b}']), "{shown:?}");
        assert!(shown.starts_with("MAAS whoami: HTTP 401 Unauthorized: line one [31m<b>x</b> line"));
        assert!(shown.chars().count() < SHOWN_BODY_CHARS + 60, "{shown}");
        assert!(shown.ends_with("..."), "{shown}");
        assert!(body.full_text().len() > 1900, "the log keeps up to 2,000");
        assert_eq!(sanitised("  a \n\n b  ", 10), "a b");
        assert_eq!(sanitised("abcdef", 3), "abc...");
        let fields = MaasBody::parse(r#"{"name": ["bad\nname"]}"#);
        assert_eq!(fields.to_string(), "name: bad name");
    }

    #[test]
    fn classification() {
        let e = |s, ra: Option<u64>| {
            Error::status("x", s, MaasBody::Empty, ra.map(Duration::from_secs))
        };
        assert!(e(503, None).is_transient());
        assert!(e(500, None).is_transient());
        assert!(e(409, Some(5)).is_transient());
        assert!(!e(409, Some(5)).is_conflict());
        assert!(!e(409, None).is_transient());
        assert!(e(409, None).is_conflict());
        for s in [400, 401, 403, 404] {
            assert!(!e(s, None).is_transient(), "{s}");
            assert!(e(s, None).is_refused(), "{s}");
        }
        assert!(e(409, None).is_refused());
        assert!(!e(409, Some(5)).is_refused() && !e(503, None).is_refused());
        assert!(!Error::new("x", ErrorKind::Timeout, "t").is_refused());
        assert!(e(404, None).is_not_found());
        assert!(Error::new("x", ErrorKind::Connect, "refused").is_transient());
        assert!(Error::new("x", ErrorKind::Timeout, "t").is_transient());
        assert!(!Error::new("x", ErrorKind::Tls, "bad cert").is_transient());
        assert!(!Error::new("x", ErrorKind::Config, "bad").is_transient());
    }

    #[test]
    fn redacts_echoed_signature_and_own_secret() {
        let secrets = Secrets::new(["MySecret99", "ab"]);
        let body = "Authorization Error: 'Invalid signature. Expected signature base string: &RealSecret123'";
        let out = secrets.scrub(body);
        assert!(!out.contains("RealSecret123"), "{out}");
        assert!(out.ends_with("<redacted>'"), "{out}");
        assert_eq!(
            secrets.scrub("token MySecret99 here, ab stays"),
            "token <redacted> here, ab stays"
        );
    }

    /// Issue 12 item 4: MAAS's 401 for an unknown token names the token key,
    /// which ended up in conditions and Events.
    #[test]
    fn scrubbed_errors_carry_no_key_part() {
        let secrets = Secrets::new(["Ck9aXhYcVbPqRsTuWz", "Tk2bYcZdAeBfCgDhEi", "S3cr3t"]);
        let err = Error::from_response(
            "machine_read",
            401,
            "Authorization Error: 'Invalid access token: Tk2bYcZdAeBfCgDhEi'",
            None,
        )
        .scrubbed(&secrets);
        let fields = Error::from_response(
            "allocate",
            400,
            r#"{"Ck9aXhYcVbPqRsTuWz": ["consumer Ck9aXhYcVbPqRsTuWz unknown"]}"#,
            None,
        )
        .scrubbed(&secrets);
        let transport = Error::new("x", ErrorKind::Transport, "sent S3cr3t").scrubbed(&secrets);
        for shown in [
            err.to_string(),
            err.message(),
            fields.to_string(),
            format!("{fields:?}"),
            transport.to_string(),
        ] {
            assert!(!shown.contains("Tk2b"), "{shown}");
            assert!(!shown.contains("Ck9a"), "{shown}");
            assert!(!shown.contains("S3cr3t"), "{shown}");
        }
        assert!(err.is_unauthorized(), "scrubbing keeps the classification");
    }

    #[test]
    fn userinfo_is_redacted_from_urls() {
        assert_eq!(
            redact_url("https://admin:hunter2@maas.example:5443/MAAS/api/2.0/"),
            "https://<redacted>@maas.example:5443/MAAS/api/2.0/"
        );
        assert_eq!(
            redact_url("http://10.0.0.1:5240/MAAS"),
            "http://10.0.0.1:5240/MAAS"
        );
        assert_eq!(redact_url("http://h/MAAS?x=a@b"), "http://h/MAAS?x=a@b");
        assert_eq!(userinfo("http://u:p@h/MAAS"), Some("u:p"));
        assert_eq!(userinfo("http://h/a@b"), None);
    }
}
