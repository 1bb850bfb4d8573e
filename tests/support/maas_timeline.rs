//! What MAAS went through during a rollout, sampled every 100 ms from the
//! simulator's `/_sim/state`: each machine's status changes and each change
//! of the addresses of one DNS record, with their times. Used to check the
//! order of events, e.g. that a control-plane machine left the API server
//! record before MAAS started releasing it.
//!
//! ```ignore
//! let timeline = MaasTimeline::start(&sim.base, "prod-cluster-abcdef.maas", Instant::now());
//! // ... roll out ...
//! let events = timeline.stop();
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};
use serde_json::Value;

use super::story::http_get;

const INTERVAL: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A machine's MAAS status name changed (from, to).
    Status {
        hostname: String,
        ip: String,
        from: String,
        to: String,
    },
    /// The record's addresses changed.
    Record { ips: BTreeSet<String> },
}

#[derive(Clone, Debug)]
pub struct Event {
    pub at: Duration,
    pub change: Change,
}

pub struct MaasTimeline {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Vec<Event>>>,
}

impl MaasTimeline {
    /// `base` is the simulator's `http://127.0.0.1:PORT`; `record` the DNS
    /// record's FQDN; event times count from `started`.
    pub fn start(base: &str, record: &str, started: Instant) -> MaasTimeline {
        let addr: SocketAddr = base
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("simulator address {base}: {e}"));
        let record = record.to_string();
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("maas-timeline".into())
            .spawn(move || {
                let mut events = Vec::new();
                let mut statuses: BTreeMap<String, String> = BTreeMap::new();
                // MAAS drops a released machine's automatic address: events
                // carry the last address each machine had.
                let mut last_ip: BTreeMap<String, String> = BTreeMap::new();
                let mut ips: Option<BTreeSet<String>> = None;
                loop {
                    if let Some(state) = state(addr) {
                        let at = started.elapsed();
                        for m in state["machines"].as_array().into_iter().flatten() {
                            let hostname = text(&m["hostname"]);
                            let to = text(&m["status_name"]);
                            if let Some(ip) = m["ip_addresses"][0].as_str() {
                                last_ip.insert(hostname.clone(), ip.to_string());
                            }
                            let from = statuses.insert(hostname.clone(), to.clone());
                            // The first sample is recorded too (from "").
                            if from.as_ref() != Some(&to) {
                                let ip = last_ip.get(&hostname).cloned().unwrap_or_default();
                                events.push(Event {
                                    at,
                                    change: Change::Status {
                                        hostname,
                                        ip,
                                        from: from.unwrap_or_default(),
                                        to,
                                    },
                                });
                            }
                        }
                        let now: BTreeSet<String> = state["dns_resources"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|d| d["fqdn"] == record.as_str())
                            .flat_map(|d| d["ip_addresses"].as_array().cloned().unwrap_or_default())
                            .map(|ip| text(&ip))
                            .collect();
                        // The first sample is recorded too: the record's
                        // addresses when the timeline starts.
                        if ips.as_ref() != Some(&now) {
                            events.push(Event {
                                at,
                                change: Change::Record { ips: now.clone() },
                            });
                            ips = Some(now);
                        }
                    }
                    match stop_rx.recv_timeout(INTERVAL) {
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        _ => return events,
                    }
                }
            })
            .expect("spawning the MAAS timeline");
        MaasTimeline {
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn stop(mut self) -> Vec<Event> {
        drop(self.stop.take());
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for MaasTimeline {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn state(addr: SocketAddr) -> Option<Value> {
    match http_get(addr, "/_sim/state") {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The hostname and MAAS status of the machine with address `ip` at `at`.
pub fn status_at(events: &[Event], ip: &str, at: Duration) -> Option<(String, String)> {
    events
        .iter()
        .take_while(|e| e.at <= at)
        .filter_map(|e| match &e.change {
            Change::Status {
                hostname,
                ip: i,
                to,
                ..
            } if i == ip => Some((hostname.clone(), to.clone())),
            _ => None,
        })
        .last()
}

/// For each machine that MAAS started releasing: when it did, and when its
/// address last left the record before that (None: it was still in the
/// record when the release began).
pub fn release_order(events: &[Event]) -> Vec<(String, Duration, Option<Duration>)> {
    let mut out = Vec::new();
    for e in events {
        let Change::Status {
            hostname, ip, to, ..
        } = &e.change
        else {
            continue;
        };
        if to != "Releasing" {
            continue;
        }
        let mut in_record = None;
        let mut left_at = None;
        for r in events.iter().take_while(|r| r.at <= e.at) {
            if let Change::Record { ips } = &r.change {
                let now = ips.contains(ip);
                if in_record == Some(true) && !now {
                    left_at = Some(r.at);
                }
                if now {
                    left_at = None;
                }
                in_record = Some(now);
            }
        }
        let still_in = in_record == Some(true);
        out.push((
            hostname.clone(),
            e.at,
            if still_in { None } else { left_at },
        ));
    }
    out
}

/// When `ip` last left the record (None: never, or it is still in it).
pub fn left_record_at(events: &[Event], ip: &str) -> Option<Duration> {
    let mut in_record = false;
    let mut left_at = None;
    for e in events {
        if let Change::Record { ips } = &e.change {
            let now = ips.contains(ip);
            if in_record && !now {
                left_at = Some(e.at);
            }
            if now {
                left_at = None;
            }
            in_record = now;
        }
    }
    left_at
}
