//! A client of the workload API during a rollout: every 100 ms it resolves
//! the API server name (the system resolver: inside the KCP lab, the MAAS
//! simulator's DNS) and calls `GET /api/v1/nodes?limit=1` the way a client
//! that opens a new connection each time does: the resolved addresses in
//! turn (the starting one rotating per call, as DNS round-robin rotates
//! answers), a 1 s connect and 2 s request budget each, the TLS
//! certificate verified against the cluster CA.
//!
//! ```ignore
//! let probe = ApiProbe::start(&kubeconfig, &host, None, Instant::now());
//! // ... roll out ...
//! let report = probe.stop();
//! println!("{report}");
//! ```
//!
//! Two figures come out: calls that failed on every address (what a client
//! that tries each address sees), and calls whose first address failed
//! (what a client that picks one address and gives up sees), each with the
//! longest stretch of consecutive failures.
//!
//! With `dns_cache: Some(ttl)` the probe resolves at most once per `ttl`
//! and keeps using the answer in between, as a client or stub resolver
//! that honours the record's TTL does.

use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capmaas::kube;
use crossbeam_channel::{bounded, Receiver, Sender};

/// How often the probe calls.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// One call.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Since the probe started.
    pub at: Duration,
    pub resolved: Vec<IpAddr>,
    /// The addresses tried, in order, with the error of each failed one.
    pub attempts: Vec<(IpAddr, Option<String>)>,
    /// Resolving failed (then nothing was tried).
    pub resolve_error: Option<String>,
}

impl Sample {
    /// Some address answered.
    pub fn ok(&self) -> bool {
        self.attempts.iter().any(|(_, e)| e.is_none())
    }

    /// The first address answered.
    pub fn first_ok(&self) -> bool {
        self.attempts.first().is_some_and(|(_, e)| e.is_none())
    }
}

pub struct ApiProbe {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Vec<Sample>>>,
    started: Instant,
    dns_cache: Option<Duration>,
}

impl ApiProbe {
    /// Starts probing `host`:6443 with the client certificate and CA of
    /// the workload `kubeconfig`; sample times count from `started`.
    pub fn start(
        kubeconfig: &Path,
        host: &str,
        dns_cache: Option<Duration>,
        started: Instant,
    ) -> ApiProbe {
        let config =
            kube::Config::from_kubeconfig_file(kubeconfig, None).expect("workload kubeconfig");
        let host = host.to_string();
        let (stop_tx, stop_rx) = bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("api-probe".into())
            .spawn(move || run(config, &host, dns_cache, started, stop_rx))
            .expect("spawning the API probe");
        ApiProbe {
            stop: Some(stop_tx),
            thread: Some(thread),
            started,
            dns_cache,
        }
    }

    /// Stops probing; the calls made and their figures.
    pub fn stop(mut self) -> Report {
        drop(self.stop.take());
        let samples = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        Report {
            samples,
            duration: self.started.elapsed(),
            dns_cache: self.dns_cache,
        }
    }
}

impl Drop for ApiProbe {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    config: kube::Config,
    host: &str,
    dns_cache: Option<Duration>,
    started: Instant,
    stop: Receiver<()>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = Instant::now();
    let mut cached: Option<(Instant, Vec<IpAddr>)> = None;
    for call in 0usize.. {
        let fresh = |c: &Option<(Instant, Vec<IpAddr>)>| match (c, dns_cache) {
            (Some((at, _)), Some(ttl)) => at.elapsed() < ttl,
            _ => false,
        };
        if !fresh(&cached) {
            cached = None;
        }
        let sample = probe_once(&config, host, call, started, cached.as_ref().map(|c| &c.1));
        if cached.is_none() && dns_cache.is_some() && sample.resolve_error.is_none() {
            cached = Some((Instant::now(), sample.resolved.clone()));
        }
        samples.push(sample);
        next += INTERVAL;
        let wait = next.saturating_duration_since(Instant::now());
        match stop.recv_timeout(wait) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => break,
        }
        // A slow call does not make the next ones bunch up.
        next = next.max(Instant::now());
    }
    samples
}

fn probe_once(
    config: &kube::Config,
    host: &str,
    call: usize,
    started: Instant,
    cached: Option<&Vec<IpAddr>>,
) -> Sample {
    let at = started.elapsed();
    let lookup = match cached {
        Some(ips) => Ok(ips.clone()),
        None => (host, 6443)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect()),
    };
    let mut resolved: Vec<IpAddr> = match lookup {
        Ok(ips) => ips,
        Err(e) => {
            return Sample {
                at,
                resolved: Vec::new(),
                attempts: Vec::new(),
                resolve_error: Some(e.to_string()),
            }
        }
    };
    resolved.dedup();
    let n = resolved.len().max(1);
    let order: Vec<IpAddr> = (0..resolved.len())
        .map(|i| resolved[(call + i) % n])
        .collect();
    let mut attempts = Vec::new();
    for ip in order {
        let error = call_address(config, ip).err();
        let ok = error.is_none();
        attempts.push((ip, error));
        if ok {
            break;
        }
    }
    Sample {
        at,
        resolved,
        attempts,
        resolve_error: None,
    }
}

/// One call on a new connection to `ip` (the serving certificate names
/// the machine's IP, as kubeadm's does).
fn call_address(config: &kube::Config, ip: IpAddr) -> Result<(), String> {
    let mut config = config.clone();
    config.server = format!("https://{ip}:6443");
    config.connect_timeout = Duration::from_secs(1);
    config.timeout = Duration::from_secs(2);
    let client = kube::Client::new(config).map_err(|e| e.to_string())?;
    match client.get_raw("/api/v1/nodes?limit=1") {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => Err(format!("HTTP {status}: {}", body.trim())),
        Err(e) => Err(e.to_string()),
    }
}

/// The figures of a probe run.
pub struct Report {
    pub samples: Vec<Sample>,
    pub duration: Duration,
    /// How long the probe kept a DNS answer (None: resolved every call).
    pub dns_cache: Option<Duration>,
}

/// Failed calls and their longest consecutive stretch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    pub failed: usize,
    pub share: f64,
    /// From the first failed call of the longest stretch to the next call
    /// that answered (or the end).
    pub longest_outage: Duration,
}

impl Report {
    pub fn calls(&self) -> usize {
        self.samples.len()
    }

    /// Calls that failed on every address.
    pub fn any_address(&self) -> Figures {
        self.figures(Sample::ok)
    }

    /// Calls whose first address failed.
    pub fn first_address(&self) -> Figures {
        self.figures(Sample::first_ok)
    }

    fn figures(&self, ok: impl Fn(&Sample) -> bool) -> Figures {
        let failed = self.samples.iter().filter(|s| !ok(s)).count();
        let mut longest = Duration::ZERO;
        let mut since: Option<Duration> = None;
        for s in &self.samples {
            match (ok(s), since) {
                (false, None) => since = Some(s.at),
                (true, Some(start)) => {
                    longest = longest.max(s.at - start);
                    since = None;
                }
                _ => {}
            }
        }
        if let Some(start) = since {
            longest = longest.max(self.duration.saturating_sub(start));
        }
        Figures {
            failed,
            share: if self.samples.is_empty() {
                0.0
            } else {
                failed as f64 / self.samples.len() as f64
            },
            longest_outage: longest,
        }
    }

    /// Distinct errors with how often each was seen (an address's error
    /// with the address dropped, so they group).
    pub fn errors(&self) -> Vec<(String, usize)> {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for s in &self.samples {
            if let Some(e) = &s.resolve_error {
                *counts.entry(format!("resolve: {e}")).or_default() += 1;
            }
            for (ip, e) in &s.attempts {
                if let Some(e) = e {
                    let e = e.replace(&ip.to_string(), "IP");
                    *counts.entry(e).or_default() += 1;
                }
            }
        }
        let mut out: Vec<(String, usize)> = counts.into_iter().collect();
        out.sort_by_key(|e| std::cmp::Reverse(e.1));
        out
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let any = self.any_address();
        let first = self.first_address();
        let dns = match self.dns_cache {
            Some(ttl) => format!("DNS answers kept {}s", ttl.as_secs()),
            None => "resolving every call".to_string(),
        };
        writeln!(
            f,
            "API probe ({dns}): {} calls in {:.1}s (every {} ms)",
            self.calls(),
            self.duration.as_secs_f64(),
            INTERVAL.as_millis()
        )?;
        writeln!(
            f,
            "  trying every address: {} failed ({:.2}%), longest outage {:.1}s",
            any.failed,
            any.share * 100.0,
            any.longest_outage.as_secs_f64()
        )?;
        writeln!(
            f,
            "  first address only:   {} failed ({:.2}%), longest outage {:.1}s",
            first.failed,
            first.share * 100.0,
            first.longest_outage.as_secs_f64()
        )?;
        for (error, n) in self.errors().iter().take(8) {
            writeln!(f, "  {n:>5} x {error}")?;
        }
        Ok(())
    }
}
