//! The one error type of the `kube` layer.
//!
//! Every HTTP status the API server answers with is classified here, from
//! the status code and the `Status` body the server sends with it, so callers
//! match on meaning (`NotFound`, `Conflict`, `Gone`, ...) instead of numbers.
//! Each request-related variant carries `request` ("GET /api/v1/..."), the
//! context a log line needs; no variant ever carries a credential.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// The longest `Retry-After` of the API server (or a proxy in front of it)
/// honoured: the number is the peer's, the wait is ours.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A failed Kubernetes API call, configuration or decode step.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// 404: the object (or its namespace, or the resource type) does not exist.
    NotFound { request: String, message: String },
    /// 409 with reason `Conflict`: a write carried a stale
    /// `metadata.resourceVersion`, or a guarded finalizer patch found the
    /// finalizers changed since they were read. Re-read and retry.
    Conflict { request: String, message: String },
    /// 409 with reason `AlreadyExists`: a create found the name taken.
    AlreadyExists { request: String, message: String },
    /// 410 (`Gone` / `Expired`), as the HTTP status or as a watch ERROR event:
    /// the resourceVersion or continue token is too old. Re-list.
    Gone { request: String, message: String },
    /// 422: the object failed validation; `causes` names the fields.
    Invalid {
        request: String,
        message: String,
        causes: Vec<StatusCause>,
    },
    /// 401: the credentials were refused. A token file is re-read on the next
    /// request.
    Unauthorized { request: String, message: String },
    /// 403: authenticated, but RBAC denies the verb.
    Forbidden { request: String, message: String },
    /// 429: throttled; wait `retry_after` (from the `Retry-After` header or
    /// the Status details) before retrying.
    TooManyRequests {
        request: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// Worth retrying with backoff: connection refused or reset, timeout,
    /// a 5xx, a stream cut short. `status` is set when the server answered.
    Transient {
        request: String,
        status: Option<u16>,
        message: String,
    },
    /// TLS handshake or certificate verification failed (wrong CA, wrong
    /// client certificate); retrying will not help until the config changes.
    Tls { request: String, message: String },
    /// Any other status (400, 405, 415, ...), with the server's reason.
    Other {
        request: String,
        status: u16,
        reason: String,
        message: String,
    },
    /// The configuration (kubeconfig, in-cluster files, certificates) is
    /// unusable.
    Config(String),
    /// The server answered 2xx but the body was not what we expected.
    Decode { request: String, message: String },
}

/// One entry of `Status.details.causes`, e.g. which field failed validation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct StatusCause {
    /// Machine-readable cause, e.g. `FieldValueRequired`.
    #[serde(rename = "reason")]
    pub reason: String,
    pub message: String,
    /// The field path, e.g. `spec.replicas`.
    pub field: String,
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists { .. })
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }

    /// True for errors a plain retry with backoff may cure: transport
    /// failures, timeouts, 5xx and 429.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Transient { .. } | Error::TooManyRequests { .. }
        )
    }

    /// How long the server asked us to wait (429 only).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::TooManyRequests { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The HTTP status the server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::NotFound { .. } => Some(404),
            Error::Conflict { .. } | Error::AlreadyExists { .. } => Some(409),
            Error::Gone { .. } => Some(410),
            Error::Invalid { .. } => Some(422),
            Error::Unauthorized { .. } => Some(401),
            Error::Forbidden { .. } => Some(403),
            Error::TooManyRequests { .. } => Some(429),
            Error::Transient { status, .. } => *status,
            Error::Other { status, .. } => Some(*status),
            Error::Tls { .. } | Error::Config(_) | Error::Decode { .. } => None,
        }
    }

    /// The server's (or our) message, without the request context.
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound { message, .. }
            | Error::Conflict { message, .. }
            | Error::AlreadyExists { message, .. }
            | Error::Gone { message, .. }
            | Error::Invalid { message, .. }
            | Error::Unauthorized { message, .. }
            | Error::Forbidden { message, .. }
            | Error::TooManyRequests { message, .. }
            | Error::Transient { message, .. }
            | Error::Tls { message, .. }
            | Error::Other { message, .. }
            | Error::Decode { message, .. } => message,
            Error::Config(message) => message,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::Config(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotFound { request, message } => write!(f, "{request}: not found: {message}"),
            Error::Conflict { request, message } => write!(f, "{request}: conflict: {message}"),
            Error::AlreadyExists { request, message } => {
                write!(f, "{request}: already exists: {message}")
            }
            Error::Gone { request, message } => write!(f, "{request}: gone (410): {message}"),
            Error::Invalid {
                request,
                message,
                causes,
            } => {
                write!(f, "{request}: invalid: {message}")?;
                for cause in causes {
                    write!(f, "; {}: {}", cause.field, cause.message)?;
                }
                Ok(())
            }
            Error::Unauthorized { request, message } => {
                write!(f, "{request}: unauthorized (401): {message}")
            }
            Error::Forbidden { request, message } => {
                write!(f, "{request}: forbidden (403): {message}")
            }
            Error::TooManyRequests {
                request,
                message,
                retry_after,
            } => {
                write!(f, "{request}: too many requests (429): {message}")?;
                if let Some(d) = retry_after {
                    write!(f, " (retry after {}s)", d.as_secs())?;
                }
                Ok(())
            }
            Error::Transient {
                request,
                status: Some(status),
                message,
            } => write!(f, "{request}: server error {status}: {message}"),
            Error::Transient {
                request,
                status: None,
                message,
            } => write!(f, "{request}: {message}"),
            Error::Tls { request, message } => write!(f, "{request}: tls: {message}"),
            Error::Other {
                request,
                status,
                reason,
                message,
            } => write!(f, "{request}: status {status} {reason}: {message}"),
            Error::Config(message) => write!(f, "kubernetes client config: {message}"),
            Error::Decode { request, message } => {
                write!(f, "{request}: unexpected response: {message}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// The `metav1.Status` body of a failed call (or of a watch ERROR event).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Status {
    pub message: String,
    pub reason: String,
    pub code: u16,
    pub details: Option<StatusDetails>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct StatusDetails {
    pub causes: Vec<StatusCause>,
    pub retry_after_seconds: Option<u64>,
}

/// Turns a non-2xx answer into an [`Error`]. `body` is the raw response body
/// (usually a `Status`; proxies may send plain text); `retry_after` is the
/// parsed `Retry-After` header.
pub(crate) fn from_status(
    request: String,
    http_status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
) -> Error {
    // from_str, not from_slice: every JSON body is decoded through the one
    // `StrRead` (each reader type costs a copy of every Deserialize impl).
    let json = std::str::from_utf8(body).map(serde_json::from_str::<Status>);
    let status: Status = match json {
        Ok(Ok(status)) => status,
        _ => Status {
            message: text_excerpt(body),
            ..Status::default()
        },
    };
    classify(request, http_status, status, retry_after)
}

/// Classifies a `Status` by its code (the HTTP status, or `Status.code` for
/// watch ERROR events) and reason.
pub(crate) fn classify(
    request: String,
    code: u16,
    status: Status,
    retry_after: Option<Duration>,
) -> Error {
    let Status {
        message,
        reason,
        details,
        ..
    } = status;
    let details = details.unwrap_or_default();
    match code {
        404 => Error::NotFound { request, message },
        409 if reason == "AlreadyExists" => Error::AlreadyExists { request, message },
        409 => Error::Conflict { request, message },
        410 => Error::Gone { request, message },
        422 => Error::Invalid {
            request,
            message,
            causes: details.causes,
        },
        401 => Error::Unauthorized { request, message },
        403 => Error::Forbidden { request, message },
        429 => Error::TooManyRequests {
            request,
            message,
            retry_after: retry_after.or_else(|| {
                details
                    .retry_after_seconds
                    .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER))
            }),
        },
        500..=599 => Error::Transient {
            request,
            status: Some(code),
            message,
        },
        _ => Error::Other {
            request,
            status: code,
            reason,
            message,
        },
    }
}

/// The start of a non-JSON error body, for the message: enough to recognise
/// a proxy's error page, never a whole document.
fn text_excerpt(body: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(body.get(..MAX).unwrap_or(body));
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> String {
        "GET /api/v1/namespaces/ns/configmaps/x".to_string()
    }

    #[test]
    fn classifies_status_bodies() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"configmaps \"x\" not found","reason":"NotFound","code":404}"#;
        let err = from_status(req(), 404, body, None);
        assert!(err.is_not_found());
        assert_eq!(err.message(), "configmaps \"x\" not found");

        let exists = br#"{"reason":"AlreadyExists","message":"exists","code":409}"#;
        assert!(from_status(req(), 409, exists, None).is_already_exists());
        let conflict = br#"{"reason":"Conflict","message":"modified","code":409}"#;
        assert!(from_status(req(), 409, conflict, None).is_conflict());
        let expired = br#"{"reason":"Expired","message":"too old","code":410}"#;
        assert!(from_status(req(), 410, expired, None).is_gone());
        assert!(from_status(req(), 503, b"", None).is_transient());
        assert!(matches!(
            from_status(req(), 403, b"{}", None),
            Error::Forbidden { .. }
        ));
        assert!(matches!(
            from_status(req(), 401, b"{}", None),
            Error::Unauthorized { .. }
        ));
        assert!(matches!(
            from_status(req(), 415, br#"{"reason":"UnsupportedMediaType"}"#, None),
            Error::Other { status: 415, ref reason, .. } if reason == "UnsupportedMediaType"
        ));
    }

    #[test]
    fn invalid_carries_causes() {
        let body = br#"{"reason":"Invalid","message":"bad","code":422,"details":{"name":"x",
            "causes":[{"reason":"FieldValueRequired","message":"Required value","field":"metadata.name"}]}}"#;
        match from_status(req(), 422, body, None) {
            Error::Invalid { causes, .. } => {
                assert_eq!(causes.len(), 1);
                assert_eq!(causes[0].field, "metadata.name");
                assert_eq!(causes[0].reason, "FieldValueRequired");
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn too_many_requests_prefers_header_then_details() {
        let body = br#"{"reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":7}}"#;
        let from_details = from_status(req(), 429, body, None);
        assert_eq!(from_details.retry_after(), Some(Duration::from_secs(7)));
        let from_header = from_status(req(), 429, body, Some(Duration::from_secs(3)));
        assert_eq!(from_header.retry_after(), Some(Duration::from_secs(3)));
        assert!(from_header.is_transient());
        let huge = br#"{"code":429,"details":{"retryAfterSeconds":18446744073709551615}}"#;
        let bounded = from_status(req(), 429, huge, None);
        assert_eq!(bounded.retry_after(), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn non_json_bodies_become_a_short_message() {
        let page = "<html>".repeat(100);
        let err = from_status(req(), 502, page.as_bytes(), None);
        assert!(err.is_transient());
        assert!(err.message().len() <= 200);
        assert!(err.to_string().contains("server error 502"));
    }
}
