//! Response size limits: how much each kind of answer may legitimately be,
//! and the reader that holds a watch stream to a limit per event.
//!
//! ureq counts a body limit in decoded bytes (after gzip), so the limits
//! also cap a compression bomb. Exceeding one is a [`Error::Decode`] naming
//! the server, never retried by the client: the same request would bring
//! the same body.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(doc)]
use super::error::Error;

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;

/// One object: etcd refuses objects over 1.5 MiB (and the API server
/// requests over 3 MiB), so 4 MiB holds any real one with its envelope.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 4 * MIB;
/// The average an item of a list page may take; a page may be this times
/// its `limit` (our objects are 5-30 KiB with managedFields).
pub(crate) const LIST_ITEM_BUDGET: u64 = 128 * KIB;
/// A `Status` error body, or a non-resource answer such as `/readyz`.
pub(crate) const MAX_SMALL_BODY: u64 = 64 * KIB;

/// Each HTTP connection's read and write buffers (ureq's defaults are
/// 128 KiB each, zero-filled when a connection is made, so resident for
/// every open connection: pooled, or held by a watch; with 1,000 machines
/// deploying that was about 7 MiB, BENCHMARKS.md). The read buffer
/// holds a response's head, whose limit is [`MAX_RESPONSE_HEAD`]; the write
/// buffer holds a request's head (the bearer token is its largest part,
/// 1-2 KiB for a service account's). Bodies stream through both at any
/// size. 16 connections are open at idle with 1,000 machines (6 watches
/// and the pool): 24 KiB each instead of 48 is 0.4 MiB less resident.
pub(crate) const CONNECTION_READ_BUFFER: usize = 16 * KIB as usize;
pub(crate) const CONNECTION_WRITE_BUFFER: usize = 8 * KIB as usize;
/// The longest response head (status line and headers) accepted: below the
/// read buffer, so a longer one is a clear error (ureq's
/// `LargeResponseHeader`) rather than ureq's "made no progress". API
/// servers send well under 2 KiB.
pub(crate) const MAX_RESPONSE_HEAD: usize = 8 * KIB as usize;

/// The limit of one list page of `page_size` items.
pub(crate) fn list_page_limit(page_size: u32, max_object: u64) -> u64 {
    max_object.max(u64::from(page_size).saturating_mul(LIST_ITEM_BUDGET))
}

/// `4 MiB`, `64 KiB`: limits as people read them.
pub(crate) fn human(bytes: u64) -> String {
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// Counts the bytes read since the last event; an event that grows past
/// `max` fails the read with [`io::ErrorKind::FileTooLarge`]. The watch
/// stream calls [`EventMark::event_done`] after each event it decoded (the
/// count runs up to one buffer ahead, which the limit's margin absorbs).
pub(crate) struct PerEventLimit<R> {
    inner: R,
    since_event: Arc<AtomicU64>,
    max: u64,
}

/// The watch stream's handle on a [`PerEventLimit`].
#[derive(Clone, Debug)]
pub(crate) struct EventMark(Arc<AtomicU64>);

impl EventMark {
    pub(crate) fn event_done(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

pub(crate) fn per_event<R: Read>(inner: R, max: u64) -> (PerEventLimit<R>, EventMark) {
    let since_event = Arc::new(AtomicU64::new(0));
    let mark = EventMark(since_event.clone());
    (
        PerEventLimit {
            inner,
            since_event,
            max,
        },
        mark,
    )
}

impl<R: Read> Read for PerEventLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let used = self.since_event.load(Ordering::Relaxed);
        if used > self.max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!(
                    "one watch event is larger than {} (after decompression)",
                    human(self.max)
                ),
            ));
        }
        let n = self.inner.read(buf)?;
        self.since_event.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_over_the_limit_fails_the_read_and_a_mark_resets_it() {
        let data = [b' '; 100];
        let (mut reader, mark) = per_event(&data[..], 30);
        let mut buf = [0u8; 20];
        assert_eq!(reader.read(&mut buf).unwrap(), 20);
        assert_eq!(reader.read(&mut buf).unwrap(), 20);
        let err = reader.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(err.to_string().contains("30 bytes"), "{err}");
        mark.event_done();
        assert_eq!(reader.read(&mut buf).unwrap(), 20);
    }

    #[test]
    fn page_limits_grow_with_the_page() {
        assert_eq!(list_page_limit(1, 4 * MIB), 4 * MIB);
        assert_eq!(list_page_limit(500, 4 * MIB), 500 * 128 * KIB);
        assert_eq!(human(4 * MIB), "4 MiB");
        assert_eq!(human(64 * KIB), "64 KiB");
    }
}
