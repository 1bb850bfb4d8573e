//! Graceful shutdown: one signal every thread can wait on, SIGTERM/SIGINT
//! wired to it, and a bounded join.
//!
//! The intended sequence (what Kubernetes expects of a pod that gets
//! SIGTERM, within `terminationGracePeriodSeconds`; `operator`
//! runs it):
//!
//! ```text
//! let shutdown = Shutdown::new();
//! listen_for_signals(&shutdown)?;          // SIGTERM/SIGINT → trigger
//! ... spawn informers (they get `shutdown`), leader elector, workers ...
//! shutdown.wait();                         // or select! on lost leadership
//! queue.shutdown();                        // workers take no new key
//! join_within(workers, deadline);          // current keys finish, or not
//! events.close(..); elector.release();     // standby takes over at once
//! informer.stop();                         // cuts its watch, joins its thread
//! join_within(the rest, ..)                // signal, resync, poller threads
//! ```
//!
//! A second SIGTERM/SIGINT exits at once with status 1, for an operator who
//! does not want to wait.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::clock::later;
use crate::sync::lock;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// How often the signal thread looks at the flag the signal handler sets.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// A one-shot "stop now" signal shared by every thread.
///
/// Cheap to clone. Triggering it drops the only sender of an internal
/// channel, so every clone of [`receiver`](Shutdown::receiver) becomes ready
/// at once: threads can `select!` on it next to their own channels.
#[derive(Clone)]
pub struct Shutdown {
    triggered: Arc<AtomicBool>,
    sender: Arc<Mutex<Option<Sender<()>>>>,
    receiver: Receiver<()>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A signal that has not fired yet.
    pub fn new() -> Shutdown {
        let (sender, receiver) = crossbeam_channel::bounded(0);
        Shutdown {
            triggered: Arc::new(AtomicBool::new(false)),
            sender: Arc::new(Mutex::new(Some(sender))),
            receiver,
        }
    }

    /// Fires the signal. Idempotent.
    pub fn trigger(&self) {
        self.triggered.store(true, Ordering::SeqCst);
        // Dropping the sender disconnects the channel: every receiver wakes.
        lock(&self.sender).take();
    }

    /// Whether the signal has fired.
    pub fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    /// A channel that never carries a message and disconnects when the
    /// signal fires; `recv` on it returns `Err` at that moment. For use in
    /// `crossbeam_channel::select!`.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.receiver
    }

    /// Sleeps for `duration` or until the signal fires, whichever is first;
    /// returns true if the signal has fired.
    pub fn sleep(&self, duration: Duration) -> bool {
        match self.receiver.recv_timeout(duration) {
            Err(RecvTimeoutError::Timeout) => self.is_triggered(),
            // Nothing is ever sent; anything else means disconnected.
            _ => true,
        }
    }

    /// Blocks until the signal fires.
    pub fn wait(&self) {
        let _ = self.receiver.recv();
    }
}

/// Fires `shutdown` on the first SIGTERM or SIGINT; a second one exits the
/// process at once with status 1.
///
/// Uses `signal_hook::flag` (the handler only sets an atomic, no `unsafe`
/// here) and a small thread that turns the flag into [`Shutdown::trigger`].
pub fn listen_for_signals(shutdown: &Shutdown) -> io::Result<JoinHandle<()>> {
    use signal_hook::consts::{SIGINT, SIGTERM};

    let received = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        // Order matters: the conditional exit is registered first so that it
        // sees the flag as set only from the second signal on.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&received))?;
        signal_hook::flag::register(signal, Arc::clone(&received))?;
    }
    let shutdown = shutdown.clone();
    thread::Builder::new()
        .name("signals".to_string())
        .spawn(move || {
            while !received.load(Ordering::SeqCst) {
                if shutdown.sleep(SIGNAL_POLL) {
                    return; // triggered by someone else
                }
            }
            log::info!("termination signal received; shutting down (send again to exit at once)");
            shutdown.trigger();
        })
}

/// Waits for every thread to finish, but no longer than `deadline` in
/// total; returns true if all finished. Threads still running are left
/// behind (the process is about to exit).
pub fn join_within(handles: Vec<JoinHandle<()>>, deadline: Duration) -> bool {
    let until = later(Instant::now(), deadline);
    let mut pending = handles;
    loop {
        let (finished, running): (Vec<_>, Vec<_>) =
            pending.into_iter().partition(|h| h.is_finished());
        for handle in finished {
            if handle.join().is_err() {
                log::error!("a worker thread panicked during shutdown");
            }
        }
        if running.is_empty() {
            return true;
        }
        if Instant::now() >= until {
            log::warn!(
                "{} thread(s) still busy after the shutdown deadline; exiting anyway",
                running.len()
            );
            return false;
        }
        pending = running;
        thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_wakes_every_clone() {
        let shutdown = Shutdown::new();
        assert!(!shutdown.is_triggered());
        assert!(!shutdown.sleep(Duration::from_millis(1)));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let s = shutdown.clone();
                thread::spawn(move || s.sleep(Duration::from_secs(600)))
            })
            .collect();
        shutdown.trigger();
        shutdown.trigger();
        for w in waiters {
            assert!(w.join().unwrap());
        }
        assert!(shutdown.sleep(Duration::from_secs(600)));
    }

    #[test]
    fn join_within_reports_stragglers() {
        let quick = thread::spawn(|| {});
        assert!(join_within(vec![quick], Duration::from_secs(60)));
        let gate = Shutdown::new();
        let slow = {
            let gate = gate.clone();
            thread::spawn(move || gate.wait())
        };
        assert!(!join_within(vec![slow], Duration::from_millis(50)));
        gate.trigger();
    }
}
