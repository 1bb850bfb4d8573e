//! The watch stream: events decoded one at a time from a chunked body.
//!
//! The API server writes one JSON object per event (`{"type": ..., "object":
//! ...}`), in practice one per line. The objects are self-framing, so we run
//! serde_json's streaming deserializer over the body instead of splitting on
//! newlines: each `next()` reads exactly one event from the socket and never
//! buffers the stream.
//!
//! Each object is decoded straight into the caller's type `T` (a typed
//! struct, `serde_json::Value`, or `Box<RawValue>` to decode later), from
//! the event's own bytes: there is no intermediate `Value`.
//!
//! The stream ends (`None`) when the server closes the body, normally at
//! `timeoutSeconds`; the caller then watches again from the last
//! resourceVersion it saw. After the first `Err` the stream is finished:
//! an ERROR event with code 410 yields [`Error::Gone`] (re-list), a cut
//! connection or client timeout yields [`Error::Transient`].

use std::io::{BufReader, Read};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::{self, Error, Status};
use super::limit::EventMark;

/// One change to a watched object, decoded as `T`.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<T = Value> {
    Added(T),
    Modified(T),
    /// The object's last state before deletion.
    Deleted(T),
    /// Progress marker: nothing changed, but the collection is now at
    /// `resource_version`; resume from it after the stream ends.
    Bookmark {
        resource_version: String,
    },
}

impl WatchEvent<Value> {
    /// The resourceVersion to resume from after this event.
    pub fn resource_version(&self) -> Option<&str> {
        match self {
            WatchEvent::Added(obj) | WatchEvent::Modified(obj) | WatchEvent::Deleted(obj) => {
                super::meta::resource_version(obj)
            }
            WatchEvent::Bookmark { resource_version } => Some(resource_version),
        }
    }
}

impl<T> WatchEvent<T> {
    /// The object of an Added/Modified/Deleted event.
    pub fn object(&self) -> Option<&T> {
        match self {
            WatchEvent::Added(obj) | WatchEvent::Modified(obj) | WatchEvent::Deleted(obj) => {
                Some(obj)
            }
            WatchEvent::Bookmark { .. } => None,
        }
    }
}

/// The wire form of one event; the object is decoded once its type is
/// known (a Status for ERROR, metadata only for BOOKMARK, `T` otherwise).
#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    object: Option<Box<RawValue>>,
}

impl RawEvent {
    fn object_text(&self) -> &str {
        self.object.as_deref().map_or("null", RawValue::get)
    }
}

/// What a BOOKMARK carries.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Bookmark {
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct BookmarkMeta {
    resource_version: String,
}

type Events = serde_json::StreamDeserializer<
    'static,
    serde_json::de::IoRead<BufReader<Box<dyn Read + Send>>>,
    RawEvent,
>;

/// An open watch: an iterator of events, see the module docs.
pub struct WatchStream<T = Value> {
    /// "GET /apis/...", for error context.
    request: String,
    events: Events,
    /// Told after each event, so that the size limit counts per event.
    mark: EventMark,
    finished: bool,
    _objects: std::marker::PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for WatchStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("request", &self.request)
            .field("finished", &self.finished)
            .finish()
    }
}

impl<T: DeserializeOwned> WatchStream<T> {
    /// `body` is held to a size per event by a `limit::PerEventLimit`
    /// that `mark` resets.
    pub(crate) fn new(
        request: String,
        body: Box<dyn Read + Send>,
        mark: EventMark,
    ) -> WatchStream<T> {
        let events = serde_json::Deserializer::from_reader(BufReader::new(body)).into_iter();
        WatchStream {
            request,
            events,
            mark,
            finished: false,
            _objects: std::marker::PhantomData,
        }
    }

    fn decode(&self, raw: RawEvent) -> Result<WatchEvent<T>, Error> {
        let object = || {
            serde_json::from_str::<T>(raw.object_text()).map_err(|e| Error::Decode {
                request: self.request.clone(),
                message: format!("{} event: {e}", raw.event_type),
            })
        };
        match raw.event_type.as_str() {
            "ADDED" => Ok(WatchEvent::Added(object()?)),
            "MODIFIED" => Ok(WatchEvent::Modified(object()?)),
            "DELETED" => Ok(WatchEvent::Deleted(object()?)),
            "BOOKMARK" => match serde_json::from_str::<Bookmark>(raw.object_text()) {
                Ok(b) if !b.metadata.resource_version.is_empty() => Ok(WatchEvent::Bookmark {
                    resource_version: b.metadata.resource_version,
                }),
                _ => Err(Error::Decode {
                    request: self.request.clone(),
                    message: "BOOKMARK event without metadata.resourceVersion".to_string(),
                }),
            },
            "ERROR" => {
                let status: Status = serde_json::from_str(raw.object_text()).unwrap_or_default();
                // A Status without a code still means the watch failed.
                let code = if status.code == 0 { 500 } else { status.code };
                Err(error::classify(self.request.clone(), code, status, None))
            }
            other => Err(Error::Decode {
                request: self.request.clone(),
                message: format!("unknown watch event type {other:?}"),
            }),
        }
    }
}

impl<T: DeserializeOwned> Iterator for WatchStream<T> {
    type Item = Result<WatchEvent<T>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let result = match self.events.next()? {
            Ok(raw) => {
                self.mark.event_done();
                self.decode(raw)
            }
            // One event over the size limit: the server sent what no object
            // can be; not a broken connection, so not transient.
            Err(e) if e.io_error_kind() == Some(std::io::ErrorKind::FileTooLarge) => {
                Err(Error::Decode {
                    request: self.request.clone(),
                    message: e.to_string(),
                })
            }
            // I/O failure (reset, client timeout) or a body cut mid-event:
            // the watch is broken, not the data.
            Err(e) if e.is_io() || e.is_eof() => Err(Error::Transient {
                request: self.request.clone(),
                status: None,
                message: format!("watch stream interrupted: {e}"),
            }),
            Err(e) => Err(Error::Decode {
                request: self.request.clone(),
                message: format!("watch event: {e}"),
            }),
        };
        self.finished = result.is_err();
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// Hands out its data a few bytes per read, like a chunked body
    /// arriving in pieces, and counts what was consumed.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        then: Option<io::ErrorKind>,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.pos >= self.data.len() {
                return match self.then {
                    Some(kind) => Err(io::Error::new(kind, "connection reset")),
                    None => Ok(0),
                };
            }
            let n = self.step.min(buf.len()).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn stream(data: &str, step: usize, then: Option<io::ErrorKind>) -> WatchStream {
        let reader = Trickle {
            data: data.as_bytes().to_vec(),
            pos: 0,
            step,
            then,
        };
        let (reader, mark) = crate::kube::limit::per_event(reader, 1024);
        WatchStream::new("GET /api/v1/configmaps".to_string(), Box::new(reader), mark)
    }

    const EVENTS: &str = concat!(
        r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"10"}}}"#,
        "\n",
        r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"11"},"data":{"k":"line1\nline2 {"}}}"#,
        "\n",
        r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"15"}}}"#,
        "\n",
        r#"{"type":"DELETED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"16"}}}"#,
        "\n",
    );

    #[test]
    fn decodes_events_in_order_from_small_chunks() {
        let events: Vec<_> = stream(EVENTS, 7, None).collect::<Result<_, _>>().unwrap();
        assert_eq!(events.len(), 4);
        assert!(matches!(&events[0], WatchEvent::Added(o) if o["metadata"]["name"] == "a"));
        assert!(
            matches!(&events[1], WatchEvent::Modified(o) if o["data"]["k"] == "line1\nline2 {")
        );
        assert_eq!(
            events[2],
            WatchEvent::Bookmark {
                resource_version: "15".into()
            }
        );
        assert!(matches!(&events[3], WatchEvent::Deleted(_)));
        let rvs: Vec<_> = events
            .iter()
            .map(|e| e.resource_version().unwrap())
            .collect();
        assert_eq!(rvs, ["10", "11", "15", "16"]);
    }

    #[test]
    fn yields_an_event_before_the_rest_of_the_stream_arrives() {
        // The reader fails right after the first event: if the decoder
        // buffered ahead, the first event would be lost to the error.
        let first_line = EVENTS.lines().next().unwrap();
        let mut s = stream(first_line, 5, Some(io::ErrorKind::ConnectionReset));
        assert!(matches!(s.next(), Some(Ok(WatchEvent::Added(_)))));
        assert!(matches!(s.next(), Some(Err(Error::Transient { .. }))));
        assert!(s.next().is_none());
    }

    #[test]
    fn expired_error_event_is_gone_and_ends_the_stream() {
        let data = concat!(
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"10"}}}"#,
            "\n",
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (20)","reason":"Expired","code":410}}"#,
            "\n",
            r#"{"type":"ADDED","object":{"metadata":{"name":"b","resourceVersion":"30"}}}"#,
        );
        let mut s = stream(data, 64, None);
        assert!(matches!(s.next(), Some(Ok(WatchEvent::Added(_)))));
        match s.next() {
            Some(Err(Error::Gone { message, .. })) => assert!(message.contains("too old")),
            other => panic!("expected Gone, got {other:?}"),
        }
        assert!(s.next().is_none());
    }

    #[test]
    fn other_error_events_are_classified_by_code() {
        let data = r#"{"type":"ERROR","object":{"kind":"Status","code":500,"message":"etcd"}}"#;
        let mut s = stream(data, 64, None);
        assert!(matches!(s.next(), Some(Err(e)) if e.is_transient()));
    }

    #[test]
    fn clean_eof_ends_and_truncation_is_transient() {
        assert!(stream("", 8, None).next().is_none());
        assert!(stream("\n  \n", 8, None).next().is_none());
        let cut = &EVENTS[..40];
        let mut s = stream(cut, 8, None);
        assert!(matches!(s.next(), Some(Err(Error::Transient { .. }))));
        assert!(s.next().is_none());
    }

    /// Issue 12 item 1: one event may be as large as one object, not more.
    #[test]
    fn an_oversized_event_is_a_decode_error_after_the_good_ones() {
        let big = format!(
            "{}\n{{\"type\":\"ADDED\",\"object\":{{\"data\":\"{}\"}}}}\n",
            EVENTS.lines().next().unwrap(),
            "x".repeat(64 * 1024)
        );
        let mut s = stream(&big, 4096, None);
        assert!(matches!(s.next(), Some(Ok(WatchEvent::Added(_)))));
        match s.next() {
            Some(Err(Error::Decode { message, .. })) => {
                assert!(message.contains("larger than 1 KiB"), "{message}")
            }
            other => panic!("expected Decode, got {other:?}"),
        }
        assert!(s.next().is_none());
        // Many events, each under the limit, are fine however long the stream.
        let many = EVENTS.repeat(100);
        assert_eq!(stream(&many, 512, None).filter(Result::is_ok).count(), 400);
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let mut s = stream("<html>proxy error</html>", 8, None);
        assert!(matches!(s.next(), Some(Err(Error::Decode { .. }))));
        let mut s = stream(r#"{"type":"SURPRISE","object":{}}"#, 8, None);
        assert!(matches!(s.next(), Some(Err(Error::Decode { .. }))));
    }
}
