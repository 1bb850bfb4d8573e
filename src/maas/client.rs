//! The blocking MAAS client: one `ureq` agent, one request flow, retries.
//!
//! Every operation goes through `Client::call`: build the URL and the
//! urlencoded form, sign with a fresh OAuth nonce, send, classify the answer,
//! and retry transient failures with backoff (honouring `Retry-After`).
//!
//! Retrying writes: most MAAS writes are safe to repeat (release, power,
//! owner data, PUTs set values, DELETE of a gone object is a 404 the caller
//! treats as done). Three are not: `allocate` (a repeat allocates a second
//! machine), `deploy` (a repeat answers 409 although the first worked) and
//! DNS resource creation (a repeat answers 400 duplicate). Those are sent
//! *at most once* unless we know MAAS did not act: the connection was never
//! made, or MAAS itself answered 503 or 409+`Retry-After` (MAAS runs each
//! request in one transaction, so an error answer means nothing changed). A
//! timeout or broken connection after sending is returned to the caller as a
//! transient error; the caller then finds what the first attempt did
//! (allocations by `agent_name`, DNS records by fqdn) before trying again.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use super::api::MaasApi;
use super::auth::ApiKey;
use super::decode::{self, Charged};
use super::error::{redact_url, userinfo, Error, ErrorKind, MaasBody, Secrets};
use super::form::{encode_pairs, percent_encode};
use super::types::*;
use super::version::{AnnotationsOp, VersionInfo};
use crate::backoff::Backoff;
use crate::clock::peer_seconds;
use crate::metrics;
use crate::sync::lock;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The largest body a successful answer to `op` can legitimately have,
/// counted after gzip decoding (ureq counts decoded bytes, so this also
/// caps a compression bomb). A bigger answer is an error, not retried:
/// reading it would cost the memory the cap protects, and a repeat would
/// bring the same body. One machine's JSON is about 18 KiB.
fn body_limit(op: &str) -> u64 {
    match op {
        // Filtered by agent_name, hostname or system_id, or (the MAAS
        // watch) every machine of one owner: room for about 1,800 machines
        // of real MAAS's 18 KiB (3,500 of the simulator's 9 KiB).
        "machines_list" => 32 * MIB,
        // At most 1,000 events (`MAX_EVENT_LIMIT`) of a few hundred bytes;
        // a curtin failure's description can run to a few KiB.
        "events_query" => 4 * MIB,
        // Small objects, a few hundred bytes to 1 KiB each.
        "dnsresources_list"
        | "domains_list"
        | "zones_list"
        | "resourcepools_list"
        | "vmhosts_list"
        | "boot_resources_list" => MIB,
        // One object (machine, DNS resource, user, power state).
        _ => 4 * MIB,
    }
}

/// The most machines one list may hold: room for a full `machines_list`
/// body of the simulator's smallest machines (about 3,500) and twice real
/// MAAS's (about 1,800). More is a `Decode` error of that list.
pub const MAX_LISTED_MACHINES: usize = 5_000;

/// What a 2xx body of at most `body_limit` bytes may decode to beyond its
/// strings (which the body cap bounds): half as much again
/// ([`decode`](super::decode) says what is counted). A real machine list
/// decodes to about a tenth of its size.
fn decode_budget(body_limit: u64) -> usize {
    usize::try_from(body_limit / 2).unwrap_or(usize::MAX)
}

/// Each connection's read and write buffers. ureq's defaults (128 KiB
/// each, zero-filled when a connection is made) kept 256 KiB resident per
/// pooled connection, and the pool holds one per busy worker and listing
/// thread (about 35 while 1,000 machines deploy, so every KiB here counts
/// 35 times at the memory peak). The read buffer holds a response's head
/// (MAAS sends well under 2 KiB; longer than [`MAX_RESPONSE_HEAD`] is an
/// error), the write buffer a request's head (path, query and OAuth
/// header; an events query for 250 machines is about 3 KiB). Bodies
/// stream through both at any size.
const CONNECTION_READ_BUFFER: usize = 16 * KIB as usize;
const CONNECTION_WRITE_BUFFER: usize = 8 * KIB as usize;
/// Below the read buffer, so a longer head is a clear error rather than
/// ureq's "made no progress".
const MAX_RESPONSE_HEAD: usize = 8 * KIB as usize;
/// Largest error body read: MAAS's are a line of text or a few field
/// errors; a bigger one is cut, the status still classifies the error.
const MAX_ERROR_BODY: u64 = 64 * KIB;
/// First retry delay; doubled per attempt up to [`MAX_BACKOFF`].
const BASE_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// We honour `Retry-After` but never wait longer than this per attempt: a
/// reconcile worker has other objects to serve, and the number is the
/// peer's (bounded where it is read, so no caller sees a bigger one).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// MAAS answers `query_power_state` only after asking the BMC, which it
/// allows 60 s; this one call gets at least that long.
#[cfg(any(test, feature = "test-api"))]
const POWER_QUERY_TIMEOUT: Duration = Duration::from_secs(75);

/// How to reach MAAS.
#[derive(Clone)]
pub struct ClientConfig {
    /// As users write it: `http://10.11.130.11:5240/MAAS` (trailing slash or
    /// `/api/2.0` suffix tolerated).
    pub endpoint: String,
    pub api_key: ApiKey,
    /// Overall limit for one attempt (connect, send, receive the body);
    /// `query_power_state` gets at least 75 s, as MAAS waits on the BMC.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// PEM bundle of the CA(s) that signed MAAS's certificate. When set, it
    /// *replaces* the built-in Mozilla roots (MAAS TLS normally uses a
    /// private CA).
    pub extra_ca_pem: Option<Vec<u8>>,
    /// Retries after the first attempt for transient errors.
    pub max_retries: u32,
}

impl ClientConfig {
    /// Defaults: 30 s timeout, 10 s connect timeout, 3 retries, no extra CA.
    pub fn new(endpoint: impl Into<String>, api_key: ApiKey) -> ClientConfig {
        ClientConfig {
            endpoint: endpoint.into(),
            api_key,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            extra_ca_pem: None,
            max_retries: 3,
        }
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("endpoint", &redact_url(&self.endpoint))
            .field("api_key", &self.api_key)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("extra_ca_pem", &self.extra_ca_pem.as_ref().map(|p| p.len()))
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// Whether a request may be sent again when we do not know its fate.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Repeat {
    Safe,
    AtMostOnce,
}

/// One API request, before signing.
struct Call<'a> {
    op: &'static str,
    method: Method,
    /// Relative to `/api/2.0/`, with its trailing slash.
    path: String,
    /// Query parameters; `op` goes here, as the MAAS CLI does.
    query: Vec<(&'a str, String)>,
    /// Form body for POST/PUT.
    form: Vec<(&'a str, String)>,
    repeat: Repeat,
}

impl<'a> Call<'a> {
    /// A call with no query and no form.
    fn new(op: &'static str, method: Method, path: impl Into<String>, repeat: Repeat) -> Call<'a> {
        Call {
            op,
            method,
            path: path.into(),
            query: Vec::new(),
            form: Vec::new(),
            repeat,
        }
    }

    /// A GET, which is always safe to repeat.
    fn get(op: &'static str, path: impl Into<String>) -> Call<'a> {
        Call::new(op, Method::Get, path, Repeat::Safe)
    }

    /// A DELETE: safe to repeat (a gone object answers 404).
    fn delete(op: &'static str, path: impl Into<String>) -> Call<'a> {
        Call::new(op, Method::Delete, path, Repeat::Safe)
    }

    fn post(op: &'static str, path: impl Into<String>, repeat: Repeat) -> Call<'a> {
        Call::new(op, Method::Post, path, repeat)
    }

    /// A PUT: it sets values, so it is safe to repeat.
    fn put(op: &'static str, path: impl Into<String>) -> Call<'a> {
        Call::new(op, Method::Put, path, Repeat::Safe)
    }

    fn query(self, query: Vec<(&'a str, String)>) -> Call<'a> {
        Call { query, ..self }
    }

    /// `?op=<name>`: which of the endpoint's operations (as the MAAS CLI sends it).
    fn operation(self, name: &str) -> Call<'a> {
        self.query(vec![("op", name.to_owned())])
    }

    fn form(self, form: Vec<(&'a str, String)>) -> Call<'a> {
        Call { form, ..self }
    }
}

/// What [`Client::start_check`] found.
#[derive(Debug)]
pub enum StartCheck {
    /// MAAS answered and accepted the key: the key's user.
    Ready(User),
    /// MAAS cannot be reached now (no connection, timeout, 5xx): report
    /// not ready and check again.
    Unreachable(Error),
    /// MAAS answered but refuses the key, or is not MAAS, or TLS fails: a
    /// configuration error that waiting will not fix. The message says
    /// what to check.
    Refused(String),
}

/// A cheap-to-clone handle; all clones share one connection pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Per handle, so that [`Client::with_max_retries`] can share the agent.
    max_retries: u32,
}

struct Inner {
    agent: ureq::Agent,
    /// `http://host:5240/MAAS/api/2.0/`, as given (a `user:password@` in
    /// it is never used: the OAuth header replaces the Basic auth ureq
    /// would make of it).
    request_root: String,
    /// The same without `user:password@`: for logs and errors.
    api_root: String,
    key: ApiKey,
    /// Scrubbed from every error: the key's parts and the endpoint's userinfo.
    secrets: Secrets,
    /// Only the power query (a test-only call) reads it.
    #[cfg(any(test, feature = "test-api"))]
    timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("api_root", &self.inner.api_root)
            .finish_non_exhaustive()
    }
}

/// `http://h:5240/MAAS`, `.../MAAS/`, `.../MAAS/api/2.0/` → `.../MAAS/api/2.0/`.
pub fn api_root(endpoint: &str) -> Result<String, Error> {
    let config_err = |msg: String| Error::new("config", ErrorKind::Config, msg);
    let trimmed = endpoint.trim().trim_end_matches('/');
    // Messages show the endpoint without any user:password.
    let shown = redact_url(trimmed);
    let Some((scheme, rest)) = trimmed.split_once("://") else {
        return Err(config_err(format!(
            "MAAS endpoint {shown:?} has no scheme; expected e.g. http://10.0.0.1:5240/MAAS"
        )));
    };
    if scheme != "http" && scheme != "https" {
        return Err(config_err(format!(
            "MAAS endpoint {shown:?} must start with http:// or https://"
        )));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(config_err(format!("MAAS endpoint {shown:?} has no host")));
    }
    // Surrounding whitespace (a Secret's trailing newline) is trimmed
    // above; any left inside is a pasting mistake that would otherwise
    // reach the HTTP library as an opaque URL error.
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(config_err(format!(
            "MAAS endpoint {shown:?} contains whitespace or control characters \
             (a line break or space inside the URL)"
        )));
    }
    if trimmed.contains(['?', '#']) {
        return Err(config_err(format!(
            "MAAS endpoint {shown:?} must not contain a query or fragment"
        )));
    }
    let base = trimmed.strip_suffix("/api/2.0").unwrap_or(trimmed);
    Ok(format!("{base}/api/2.0/"))
}

impl Client {
    /// Builds the agent. Fails on a malformed endpoint or CA bundle; the key
    /// was already checked by [`ApiKey::parse`].
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let api_root = api_root(&config.endpoint)?;
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(pem) = &config.extra_ca_pem {
            let mut certs = Vec::new();
            for item in ureq::tls::parse_pem(pem) {
                match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(Error::new(
                            "config",
                            ErrorKind::Config,
                            format!("MAAS CA bundle: {e}"),
                        ))
                    }
                }
            }
            if certs.is_empty() {
                return Err(Error::new(
                    "config",
                    ErrorKind::Config,
                    "MAAS CA bundle contains no PEM certificate",
                ));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(config.connect_timeout))
            .timeout_global(Some(config.timeout))
            // A redirect means a wrong endpoint (http→https, missing
            // /MAAS); following it would turn a POST into a GET.
            .max_redirects(0)
            .max_idle_connections(32)
            .max_idle_connections_per_host(32)
            .user_agent(concat!("capmaas/", env!("CARGO_PKG_VERSION")))
            .accept("application/json")
            .tls_config(tls.build())
            .input_buffer_size(CONNECTION_READ_BUFFER)
            .output_buffer_size(CONNECTION_WRITE_BUFFER)
            .max_response_header_size(MAX_RESPONSE_HEAD)
            .build();
        let secrets = Secrets::new(
            config
                .api_key
                .parts()
                .into_iter()
                .chain(userinfo(&api_root)),
        );
        let client = Client {
            inner: Arc::new(Inner {
                agent: ureq::Agent::new_with_config(agent_config),
                api_root: redact_url(&api_root),
                request_root: api_root,
                secrets,
                key: config.api_key,
                #[cfg(any(test, feature = "test-api"))]
                timeout: config.timeout,
            }),
            max_retries: config.max_retries,
        };
        for warning in client.security_warnings() {
            warn_once(&client.inner.api_root, &warning);
        }
        Ok(client)
    }

    /// The `.../api/2.0/` root all paths hang off, without any
    /// `user:password@` (fit for logs).
    pub fn api_root(&self) -> &str {
        &self.inner.api_root
    }

    /// What a security review of this configuration would flag; logged at
    /// WARN once per endpoint when a client is built, and meant for a
    /// `capmaas doctor` report. Today: an `http://` endpoint, over which
    /// every request carries the token secret in clear (OAuth PLAINTEXT
    /// signs with the secret itself), and a `user:password@` in it.
    pub fn security_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.inner.request_root.starts_with("http://") {
            warnings.push(format!(
                "MAAS endpoint {} is plain http://: every request carries the API key's \
                 token secret in clear (OAuth PLAINTEXT), readable by anyone on the path; \
                 use https:// (MAAS serves TLS on port 5443 once enabled) or a network you trust",
                self.inner.api_root
            ));
        }
        if userinfo(&self.inner.request_root).is_some() {
            warnings.push(format!(
                "MAAS endpoint {} carries a user:password, which is never used (MAAS \
                 authenticates with the API key); remove it from MAAS_ENDPOINT",
                self.inner.api_root
            ));
        }
        warnings
    }

    // ---- identity --------------------------------------------------------

    /// A cheap authenticated call: succeeds when MAAS is reachable and the
    /// key is valid.
    pub fn check(&self) -> Result<(), Error> {
        self.whoami().map(|_| ())
    }

    /// The start-up check: one `whoami`, classified for a process that is
    /// about to start working (see [`StartCheck`]). Transient failures are
    /// not retried here; [`Client::recheck_until_ready`] does that.
    pub fn start_check(&self) -> StartCheck {
        let err = match self.whoami_once() {
            Ok(user) => return StartCheck::Ready(user),
            Err(err) => err,
        };
        if err.is_transient() {
            return StartCheck::Unreachable(err);
        }
        let root = &self.inner.api_root;
        let hint = match (err.kind(), err.http_status()) {
            (_, Some(401)) => format!(
                "MAAS at {root} refused the API key (401): check MAAS_API_KEY \
                 (`maas apikey --username <user>` prints a valid one)"
            ),
            (_, Some(403)) => format!(
                "MAAS at {root} answered 403 to the key's own user lookup: the key's \
                 user may not use the API"
            ),
            (_, Some(300..=399 | 404)) => format!(
                "{root} is not the MAAS API (it answered {} to users/?op=whoami): check \
                 MAAS_ENDPOINT's scheme, host and /MAAS path",
                err.http_status().unwrap_or_default()
            ),
            (ErrorKind::Tls, _) => format!(
                "TLS to MAAS at {root} failed: check --maas-ca-file (the CA that signed \
                 MAAS's certificate) and the endpoint's host name"
            ),
            (ErrorKind::Decode, _) => {
                format!("{root} does not answer like MAAS: check MAAS_ENDPOINT")
            }
            _ => format!("MAAS at {root} cannot be used"),
        };
        StartCheck::Refused(format!("{hint} ({err})"))
    }

    /// Repeats [`Client::start_check`] with backoff (up to 30 s apart) while
    /// MAAS is unreachable, reporting every outcome; returns the first that
    /// is not `Unreachable`, or `None` when `stop` fires.
    pub fn recheck_until_ready(
        &self,
        mut report: impl FnMut(&StartCheck),
        stop: &crossbeam_channel::Receiver<()>,
    ) -> Option<StartCheck> {
        let mut attempt = 0;
        loop {
            let check = self.start_check();
            report(&check);
            if !matches!(check, StartCheck::Unreachable(_)) {
                return Some(check);
            }
            attempt += 1;
            // 2 s, 4 s, 8 s, 16 s, then every 30 s.
            let delay = Duration::from_secs(1 << attempt.min(5)).min(MAX_RETRY_AFTER);
            if stop.recv_timeout(delay) != Err(crossbeam_channel::RecvTimeoutError::Timeout) {
                return None;
            }
        }
    }

    /// `whoami` without the client's retries: a start-up check reports at
    /// once and retries on its own schedule.
    fn whoami_once(&self) -> Result<User, Error> {
        let body = self.attempt(&whoami_call())?;
        serde_json::from_str(&body).map_err(|e| {
            Error::new(
                "whoami",
                ErrorKind::Decode,
                format!("unexpected JSON ({e}): {}", snippet(&body)),
            )
            .scrubbed(&self.inner.secrets)
        })
    }

    /// The same client (one connection pool) making at most `retries`
    /// retries per call: for a caller with its own retry schedule, such as
    /// the MAAS watch, which tries again next interval.
    pub fn with_max_retries(&self, retries: u32) -> Client {
        Client {
            inner: Arc::clone(&self.inner),
            max_retries: retries,
        }
    }

    /// The user the API key belongs to.
    pub fn whoami(&self) -> Result<User, Error> {
        self.json(whoami_call())
    }

    // ---- machines --------------------------------------------------------

    /// Every machine `owner` (a MAAS username) holds, whatever its state:
    /// `GET machines/?owner=` matches the owner's username exactly
    /// (`owner__username__in`, `FilterNodeForm.NODE_FILTERS` in
    /// canonical/maas), and MAAS clears the owner on release, so a machine
    /// released behind our back leaves this list. An unknown username is a
    /// 400 (`No such owner: '<name>'.`), never an empty list.
    /// Each machine is decoded straight into the `Arc` the MAAS watch's
    /// view keeps it in.
    pub fn machines_owned_by(&self, owner: &str) -> Result<Vec<Arc<Machine>>, Error> {
        self.machines_owned_by_reusing(owner, Vec::new())
    }

    /// [`Client::machines_owned_by`], answering a machine MAAS shows as it
    /// is in `previous` (sorted by system_id) with that `Arc`: the MAAS
    /// watch's last list, most of which is as it was.
    pub fn machines_owned_by_reusing(
        &self,
        owner: &str,
        previous: Vec<Arc<Machine>>,
    ) -> Result<Vec<Arc<Machine>>, Error> {
        let filter = MachineFilter {
            owner: Some(owner.to_owned()),
            ..MachineFilter::default()
        };
        decode::with_previous(previous, || self.shared_machines(&filter))
    }

    fn shared_machines(&self, filter: &MachineFilter) -> Result<Vec<Arc<Machine>>, Error> {
        let call = Call::get("machines_list", "machines/").query(filter.query());
        let Charged::<decode::SharedMachine, MAX_LISTED_MACHINES>(machines) =
            self.json_streamed(call)?;
        Ok(machines
            .into_iter()
            .map(|decode::SharedMachine(machine)| machine)
            .filter(|m| filter.matches_owner_data(m))
            .collect())
    }

    /// Powers a machine on. On an Allocated machine MAAS starts a deployment.
    pub fn power_on(&self, system_id: &str) -> Result<Machine, Error> {
        self.power_on_with_comment(system_id, None)
    }

    /// Powers a machine off (hard; a Deployed machine stays Deployed).
    /// MAAS answers `null` for power types it cannot stop (`manual`); we
    /// then read the machine back.
    pub fn power_off(&self, system_id: &str) -> Result<Machine, Error> {
        self.power_off_with_comment(system_id, None)
    }

    /// Asks the BMC (through MAAS) for the current power state. Only the
    /// tests use it (feature `test-api`).
    #[cfg(any(test, feature = "test-api"))]
    pub fn query_power_state(&self, system_id: &str) -> Result<PowerState, Error> {
        #[derive(serde::Deserialize)]
        struct Answer {
            state: PowerState,
        }
        let call = Call::get("query_power_state", machine_path(system_id));
        let answer: Answer = self.json(call.operation("query_power_state"))?;
        Ok(answer.state)
    }

    /// [`Client::set_annotations`] with `set_owner_data`, which every MAAS
    /// release to date has (deprecated from 3.0 on).
    pub fn set_owner_data(
        &self,
        system_id: &str,
        data: &[(&str, Option<&str>)],
    ) -> Result<Machine, Error> {
        self.set_annotations(system_id, AnnotationsOp::SetOwnerData, data)
    }

    // ---- interfaces and subnets -----------------------------------------

    // ---- events ----------------------------------------------------------

    // ---- DNS -------------------------------------------------------------

    pub fn dns_resource(&self, id: i64) -> Result<DnsResource, Error> {
        self.json(Call::get("dnsresource_read", format!("dnsresources/{id}/")))
    }

    // ---- IP reservations ---------------------------------------------------

    /// `POST ipaddresses/?op=reserve`: an address MAAS will never hand to
    /// a machine, reserved for this MAAS user (no DNS name is asked for).
    /// Sent at most once: a repeat of a reservation that worked answers
    /// "already in use", so on a transient error list the reservations.
    pub fn reserve_ip(&self, from: &ReserveFrom) -> Result<IpReservation, Error> {
        self.reserve(from, None)
    }

    fn reserve(&self, from: &ReserveFrom, mac: Option<&str>) -> Result<IpReservation, Error> {
        let mut form = match from {
            ReserveFrom::Address(ip) => vec![("ip", ip.clone())],
            ReserveFrom::Subnet(subnet) => vec![("subnet", subnet.clone())],
        };
        if let Some(mac) = mac {
            form.push(("mac", mac.to_string()));
        }
        let call = Call::post("ipaddresses_reserve", "ipaddresses/", Repeat::AtMostOnce);
        self.json(call.operation("reserve").form(form))
    }

    // ---- inventory -------------------------------------------------------

    pub fn domains(&self) -> Result<Vec<Domain>, Error> {
        self.list("domains_list", "domains/")
    }

    pub fn resource_pools(&self) -> Result<Vec<ResourcePool>, Error> {
        self.list("resourcepools_list", "resourcepools/")
    }

    pub fn tags(&self) -> Result<Vec<Tag>, Error> {
        self.list("tags_list", "tags/")
    }

    /// Lists boot resources and checks `image` against them.
    pub fn check_image(&self, image: &str) -> Result<super::ImageCheck, Error> {
        Ok(super::check_image(image, &self.boot_resources()?))
    }

    // ---- plumbing --------------------------------------------------------

    fn list<T: DeserializeOwned>(&self, op: &'static str, path: &str) -> Result<Vec<T>, Error> {
        self.json(Call::get(op, path))
    }

    fn machine_op<T: DeserializeOwned>(
        &self,
        op: &'static str,
        system_id: &str,
        form: Vec<(&str, String)>,
        repeat: Repeat,
    ) -> Result<T, Error> {
        let call = Call::post(op, machine_path(system_id), repeat);
        self.json(call.operation(op).form(form))
    }

    fn json<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<T, Error> {
        let op = call.op;
        let body = self.call(call)?;
        let budget = decode_budget(body_limit(op));
        decode::with_budget(budget, || serde_json::from_str(&body)).map_err(|e| {
            Error::new(
                op,
                ErrorKind::Decode,
                format!("unexpected JSON ({e}): {}", snippet(&body)),
            )
            .scrubbed(&self.inner.secrets)
        })
    }

    /// Like [`Client::json`], decoding the body as it arrives: for lists,
    /// whose text would otherwise be held whole (tens of MiB for a large
    /// MAAS) next to what is decoded from it.
    fn json_streamed<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<T, Error> {
        self.call_reading(call, read_json)
    }

    /// Sends `call`, retrying transient failures as the module docs say.
    /// Returns the body of a 2xx answer.
    fn call(&self, call: Call<'_>) -> Result<String, Error> {
        self.call_reading(call, read_text)
    }

    /// [`Client::call`], with `read` turning a 2xx body into the answer.
    fn call_reading<T>(&self, call: Call<'_>, read: ReadBody<T>) -> Result<T, Error> {
        let mut attempt = 0;
        let mut backoff = retry_backoff();
        loop {
            attempt += 1;
            let err = match self.attempt_reading(&call, read) {
                Ok(body) => return Ok(body),
                Err(err) => err,
            };
            if attempt > self.max_retries || !may_retry(&err, call.repeat) {
                return Err(err.with_attempts(attempt));
            }
            let delay = err
                .retry_after()
                .map(|d| d.min(MAX_RETRY_AFTER))
                .unwrap_or_else(|| backoff.next_delay());
            log::debug!(
                "MAAS {} failed (attempt {attempt}), retrying in {delay:?}: {err}",
                call.op
            );
            std::thread::sleep(delay);
        }
    }

    /// One signed HTTP exchange, with metrics; the 2xx body as text.
    fn attempt(&self, call: &Call<'_>) -> Result<String, Error> {
        self.attempt_reading(call, read_text)
    }

    /// One signed HTTP exchange, with metrics; `read` reads a 2xx body.
    fn attempt_reading<T>(&self, call: &Call<'_>, read: ReadBody<T>) -> Result<T, Error> {
        let inner = &self.inner;
        let mut url = format!("{}{}", inner.request_root, call.path);
        if !call.query.is_empty() {
            url.push('?');
            url.push_str(&encode_pairs(&call.query));
        }
        let auth = inner.key.authorization_header();
        let started = Instant::now();
        let result = match call.method {
            #[cfg(any(test, feature = "test-api"))]
            Method::Get if call.op == "query_power_state" => inner
                .agent
                .get(&url)
                .config()
                .timeout_global(Some(inner.timeout.max(POWER_QUERY_TIMEOUT)))
                .build()
                .header("Authorization", &auth)
                .call(),
            Method::Get => inner.agent.get(&url).header("Authorization", &auth).call(),
            Method::Delete => inner
                .agent
                .delete(&url)
                .header("Authorization", &auth)
                .call(),
            Method::Post | Method::Put => {
                let request = if call.method == Method::Post {
                    inner.agent.post(&url)
                } else {
                    inner.agent.put(&url)
                };
                request
                    .header("Authorization", &auth)
                    .content_type("application/x-www-form-urlencoded")
                    .send(encode_pairs(&call.form).as_str())
            }
        };
        let outcome = match result {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let location = response
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| peer_seconds(v, MAX_RETRY_AFTER));
                if (200..300).contains(&status) {
                    let limit = body_limit(call.op);
                    read(response.body_mut(), limit).map_err(|e| match e {
                        BodyError::Json(e) if decode::is_over_bound(&e) => Error::new(
                            call.op,
                            ErrorKind::Decode,
                            format!(
                                "{} sent more than one answer to {} may hold ({e}); \
                                 not read further, not retried",
                                inner.api_root, call.op
                            ),
                        ),
                        BodyError::Json(e) => {
                            Error::new(call.op, ErrorKind::Decode, format!("unexpected JSON ({e})"))
                        }
                        BodyError::Read(ureq::Error::BodyExceedsLimit(_)) => Error::new(
                            call.op,
                            ErrorKind::Decode,
                            format!(
                                "{} sent more than {} MiB (after decompression) in answer to {}, \
                                 more than that call can return; not read further, not retried",
                                inner.api_root,
                                limit / MIB,
                                call.op
                            ),
                        ),
                        BodyError::Read(e) => body_read_error(call.op, &inner.api_root, e),
                    })
                } else {
                    match response
                        .body_mut()
                        .with_config()
                        .limit(MAX_ERROR_BODY)
                        .lossy_utf8(true)
                        .read_to_string()
                    {
                        Ok(body) => {
                            let body = match (status, location) {
                                (300..=399, Some(to)) => MaasBody::Text(format!(
                                    "redirected to {to}; check the MAAS endpoint (scheme, host, /MAAS path)"
                                )),
                                _ => MaasBody::parse(&body),
                            };
                            Err(Error::status(call.op, status, body, retry_after))
                        }
                        Err(ureq::Error::BodyExceedsLimit(_)) => Err(Error::status(
                            call.op,
                            status,
                            MaasBody::Text(format!(
                                "(error body from {} larger than {} KiB, not read)",
                                inner.api_root,
                                MAX_ERROR_BODY / KIB
                            )),
                            retry_after,
                        )),
                        Err(e) => Err(body_read_error(call.op, &inner.api_root, e)),
                    }
                }
            }
            Err(e) => Err(transport_error(call.op, e)),
        };
        let code = match &outcome {
            Ok(_) => "2xx".to_owned(),
            Err(e) => match e.http_status() {
                Some(s) => s.to_string(),
                None => format!("{:?}", e.kind()).to_lowercase(),
            },
        };
        metrics::counter_inc(
            "maas_api_requests_total",
            "MAAS API requests by client operation and result (HTTP status, 2xx, or error kind).",
            &[("operation", call.op), ("code", &code)],
        );
        metrics::observe(
            "maas_api_request_duration_seconds",
            "Duration of one MAAS API request attempt.",
            &[("operation", call.op)],
            started.elapsed().as_secs_f64(),
        );
        log::trace!(
            "MAAS {} {} {} -> {code}",
            call.op,
            call.method.as_str(),
            call.path
        );
        outcome.map_err(|e| e.scrubbed(&inner.secrets))
    }
}

impl MaasApi for Client {
    // ---- VM hosts (MAAS ≤ 3.8; later ones answer 410 Gone) -------------

    fn vm_hosts(&self) -> Result<Vec<VmHost>, Error> {
        // One JSON value, read field by field: no decoder of its own.
        let hosts: serde_json::Value = self.json(Call::get("vmhosts_list", "vm-hosts/"))?;
        let hosts = hosts.as_array().map(Vec::as_slice).unwrap_or_default();
        Ok(hosts.iter().map(VmHost::from_json).collect())
    }

    /// Composes a VM on VM host `host_id`; returns its system_id (MAAS
    /// answers `{system_id, resource_uri}`). Sent at most once: on a
    /// transient error look for the VM by its hostname first.
    fn compose(&self, host_id: i64, req: &ComposeRequest) -> Result<String, Error> {
        let call = Call::post(
            "vmhost_compose",
            format!("vm-hosts/{host_id}/"),
            Repeat::AtMostOnce,
        );
        let composed: Machine = self.json(call.operation("compose").form(req.form()))?;
        Ok(composed.system_id)
    }

    /// `DELETE machines/<id>/`: a composed VM is decomposed on its host.
    fn delete_machine(&self, system_id: &str) -> Result<(), Error> {
        self.call(Call::delete("machine_delete", machine_path(system_id)))
            .map(|_| ())
    }

    /// `GET events/?op=query`: the machines' event log, **newest first**
    /// as MAAS answers (also with `after`, where MAAS picks the oldest
    /// `limit` events after it and then reverses them). Events of machines
    /// the user may not view are never listed.
    fn events(&self, query: &EventQuery) -> Result<Vec<Event>, Error> {
        #[derive(serde::Deserialize)]
        struct Answer {
            // Never more than asked for (at most MAX_EVENT_LIMIT).
            events: Charged<Event, { MAX_EVENT_LIMIT as usize }>,
        }
        let answer: Answer =
            self.json(Call::get("events_query", "events/").query(query.query()))?;
        Ok(answer.events.0)
    }

    fn version(&self) -> Result<VersionInfo, Error> {
        self.json(Call::get("version", "version/"))
    }

    fn machine(&self, system_id: &str) -> Result<Machine, Error> {
        self.json(Call::get("machine_read", machine_path(system_id)))
    }

    fn machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>, Error> {
        let machines = self.shared_machines(filter)?;
        Ok(machines.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    fn allocate(&self, req: &AllocateRequest) -> Result<Machine, Error> {
        let call = Call::post("allocate", "machines/", Repeat::AtMostOnce);
        self.json(call.operation("allocate").form(req.form()))
    }

    fn deploy(&self, system_id: &str, req: &DeployRequest) -> Result<Machine, Error> {
        self.machine_op("deploy", system_id, req.form(), Repeat::AtMostOnce)
    }

    fn release(&self, system_id: &str, req: &ReleaseRequest) -> Result<Machine, Error> {
        self.machine_op("release", system_id, req.form(), Repeat::Safe)
    }

    fn power_on_with_comment(
        &self,
        system_id: &str,
        comment: Option<&str>,
    ) -> Result<Machine, Error> {
        self.machine_op("power_on", system_id, comment_form(comment), Repeat::Safe)
    }

    fn power_off_with_comment(
        &self,
        system_id: &str,
        comment: Option<&str>,
    ) -> Result<Machine, Error> {
        let form = comment_form(comment);
        let answer: Option<Machine> =
            self.machine_op("power_off", system_id, form, Repeat::Safe)?;
        match answer {
            Some(machine) => Ok(machine),
            None => self.machine(system_id),
        }
    }

    fn mark_broken(&self, system_id: &str, comment: &str) -> Result<Machine, Error> {
        let form = vec![("comment", comment.to_owned())];
        self.machine_op("mark_broken", system_id, form, Repeat::Safe)
    }

    fn update_machine(&self, system_id: &str, fields: &[(&str, &str)]) -> Result<Machine, Error> {
        let form = fields.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        self.json(Call::put("machine_update", machine_path(system_id)).form(form))
    }

    fn set_annotations(
        &self,
        system_id: &str,
        op: AnnotationsOp,
        data: &[(&str, Option<&str>)],
    ) -> Result<Machine, Error> {
        let form = data
            .iter()
            .map(|(k, v)| (*k, v.unwrap_or("").to_owned()))
            .collect();
        self.machine_op(op.as_str(), system_id, form, Repeat::Safe)
    }

    fn subnets(&self) -> Result<Vec<Subnet>, Error> {
        self.list("subnets_list", "subnets/")
    }

    fn link_subnet_static(
        &self,
        system_id: &str,
        interface_id: i64,
        subnet_id: i64,
        ip: &str,
    ) -> Result<(), Error> {
        let path = interface_path(system_id, interface_id);
        let call = Call::post("interface_link_subnet", path, Repeat::AtMostOnce);
        self.call(call.operation("link_subnet").form(vec![
            ("mode", "STATIC".into()),
            ("subnet", subnet_id.to_string()),
            ("ip_address", ip.to_owned()),
        ]))
        .map(|_| ())
    }

    fn unlink_subnet(&self, system_id: &str, interface_id: i64, link_id: i64) -> Result<(), Error> {
        let path = interface_path(system_id, interface_id);
        let call = Call::post("interface_unlink_subnet", path, Repeat::AtMostOnce);
        self.call(
            call.operation("unlink_subnet")
                .form(vec![("id", link_id.to_string())]),
        )
        .map(|_| ())
    }

    fn dns_resources(&self, fqdn: &str) -> Result<Vec<DnsResource>, Error> {
        let call =
            Call::get("dnsresources_list", "dnsresources/").query(vec![("fqdn", fqdn.to_owned())]);
        let found: Vec<DnsResource> = self.json(call)?;
        // MAAS filters by name and domain; compare whole names ourselves in
        // case a version matches more loosely.
        Ok(found
            .into_iter()
            .filter(|r| {
                r.fqdn
                    .trim_end_matches('.')
                    .eq_ignore_ascii_case(fqdn.trim_end_matches('.'))
            })
            .collect())
    }

    fn create_dns_resource(
        &self,
        fqdn: &str,
        ttl: u32,
        ips: &[String],
    ) -> Result<DnsResource, Error> {
        let call = Call::post("dnsresource_create", "dnsresources/", Repeat::AtMostOnce);
        self.json(call.form(vec![
            ("fqdn", fqdn.to_owned()),
            ("address_ttl", ttl.to_string()),
            ("ip_addresses", ips.join(" ")),
        ]))
    }

    fn create_dns_txt(&self, fqdn: &str, rrdata: &str) -> Result<(), Error> {
        let call = Call::post(
            "dnsresourcerecord_create",
            "dnsresourcerecords/",
            Repeat::AtMostOnce,
        );
        self.call(call.form(vec![
            ("fqdn", fqdn.to_owned()),
            ("rrtype", "TXT".to_owned()),
            ("rrdata", rrdata.to_owned()),
        ]))
        .map(|_| ())
    }

    fn set_dns_resource_ips(&self, id: i64, ips: &[String]) -> Result<DnsResource, Error> {
        let call = Call::put("dnsresource_update", format!("dnsresources/{id}/"));
        self.json(call.form(vec![("ip_addresses", ips.join(" "))]))
    }

    fn delete_dns_resource(&self, id: i64) -> Result<(), Error> {
        self.call(Call::delete(
            "dnsresource_delete",
            format!("dnsresources/{id}/"),
        ))
        .map(|_| ())
    }

    fn ip_reservations(&self, ip: Option<&str>) -> Result<Vec<IpReservation>, Error> {
        let query = ip.map(|ip| vec![("ip", ip.to_owned())]).unwrap_or_default();
        self.json(Call::get("ipaddresses_list", "ipaddresses/").query(query))
    }

    fn reserve_ip_marked(&self, from: &ReserveFrom, mac: &str) -> Result<IpReservation, Error> {
        self.reserve(from, Some(mac))
    }

    fn release_ip(&self, ip: &str) -> Result<(), Error> {
        let call = Call::post("ipaddresses_release", "ipaddresses/", Repeat::Safe);
        self.call(call.operation("release").form(vec![("ip", ip.to_owned())]))
            .map(|_| ())
    }

    fn zones(&self) -> Result<Vec<Zone>, Error> {
        self.list("zones_list", "zones/")
    }

    fn boot_resources(&self) -> Result<Vec<BootResource>, Error> {
        self.list("boot_resources_list", "boot-resources/")
    }
}

/// How [`Client::attempt_reading`] turns a 2xx body (read up to the limit
/// given) into an answer.
type ReadBody<T> = fn(&mut ureq::Body, u64) -> Result<T, BodyError>;

/// Why a 2xx body could not be read.
enum BodyError {
    /// The transfer failed, or the body is over the limit.
    Read(ureq::Error),
    /// It arrived, but is not the JSON expected.
    Json(serde_json::Error),
}

fn read_text(body: &mut ureq::Body, limit: u64) -> Result<String, BodyError> {
    body.with_config()
        .limit(limit)
        .lossy_utf8(false)
        .read_to_string()
        .map_err(BodyError::Read)
}

/// Decodes the body as it arrives, through a small buffer.
fn read_json<T: DeserializeOwned>(body: &mut ureq::Body, limit: u64) -> Result<T, BodyError> {
    let reader = std::io::BufReader::with_capacity(
        64 * KIB as usize,
        body.with_config().limit(limit).reader(),
    );
    decode::with_budget(decode_budget(limit), || serde_json::from_reader(reader)).map_err(|e| {
        if e.is_io() {
            // ureq's own error (over the limit, timeout) travels wrapped in
            // the io::Error; `From` unwraps it.
            BodyError::Read(ureq::Error::from(std::io::Error::from(e)))
        } else {
            BodyError::Json(e)
        }
    })
}

/// Classifies a failure to read an answer's body. The caller scrubs the
/// text.
fn body_read_error(op: &'static str, api_root: &str, e: ureq::Error) -> Error {
    match e {
        // Not UTF-8, or a corrupt gzip stream: MAAS answered, but not with
        // what we can read.
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => Error::new(
            op,
            ErrorKind::Decode,
            format!("{api_root} sent an unreadable body: {e}"),
        ),
        e => transport_error(op, e),
    }
}

/// Endpoints already warned about: a client is built per credential, the
/// warning is news once.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn warn_once(root: &str, warning: &str) {
    let key = format!("{root} {warning}");
    if lock(&WARNED).insert(key) {
        log::warn!("{warning}");
    }
}

fn comment_form(comment: Option<&str>) -> Vec<(&'static str, String)> {
    comment
        .map(|c| vec![("comment", c.to_owned())])
        .unwrap_or_default()
}

fn whoami_call() -> Call<'static> {
    Call::get("whoami", "users/").operation("whoami")
}

fn machine_path(system_id: &str) -> String {
    format!("machines/{}/", percent_encode(system_id))
}

fn interface_path(system_id: &str, interface_id: i64) -> String {
    format!(
        "nodes/{}/interfaces/{interface_id}/",
        percent_encode(system_id)
    )
}

fn snippet(body: &str) -> String {
    let mut cut = body.len().min(200);
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    body[..cut].to_owned()
}

/// Whether to try again; see the module docs for the at-most-once rule.
fn may_retry(err: &Error, repeat: Repeat) -> bool {
    if !err.is_transient() {
        return false;
    }
    match repeat {
        Repeat::Safe => true,
        Repeat::AtMostOnce => match err.kind() {
            ErrorKind::Connect => true,
            ErrorKind::Status => {
                matches!(err.http_status(), Some(503))
                    || (err.http_status() == Some(409) && err.retry_after().is_some())
            }
            _ => false,
        },
    }
}

/// 200 ms, 400 ms, 800 ms ... capped at 5 s, with ±25 % jitter so that many
/// workers do not retry in lockstep.
fn retry_backoff() -> Backoff {
    Backoff::new(BASE_BACKOFF, MAX_BACKOFF).with_jitter(0.75, 1.25)
}

/// Classifies a failure to get an answer. The caller scrubs the text.
fn transport_error(op: &'static str, e: ureq::Error) -> Error {
    use std::io::ErrorKind as Io;
    use ureq::Timeout;
    let kind = match &e {
        ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => ErrorKind::Connect,
        ureq::Error::Timeout(_) => ErrorKind::Timeout,
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => ErrorKind::Connect,
        // rustls reports handshake failures (unknown CA, bad name) as I/O
        // errors wrapping a rustls::Error; they are permanent, not transport.
        ureq::Error::Io(io)
            if io
                .get_ref()
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
        {
            ErrorKind::Tls
        }
        ureq::Error::Io(io) => match io.kind() {
            Io::ConnectionRefused
            | Io::NotFound
            | Io::AddrNotAvailable
            | Io::HostUnreachable
            | Io::NetworkUnreachable => ErrorKind::Connect,
            Io::TimedOut | Io::WouldBlock => ErrorKind::Timeout,
            _ => ErrorKind::Transport,
        },
        ureq::Error::Tls(_) | ureq::Error::Pem(_) | ureq::Error::Rustls(_) => ErrorKind::Tls,
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::InvalidProxyUrl => {
            ErrorKind::Config
        }
        _ => ErrorKind::Transport,
    };
    Error::new(op, kind, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_forms_all_lead_to_one_api_root() {
        for endpoint in [
            "http://10.11.130.11:5240/MAAS",
            "http://10.11.130.11:5240/MAAS/",
            "http://10.11.130.11:5240/MAAS/api/2.0",
            "http://10.11.130.11:5240/MAAS/api/2.0/",
            " http://10.11.130.11:5240/MAAS\n",
            "http://10.11.130.11:5240/MAAS/\r\n",
            "\t http://10.11.130.11:5240/MAAS  \n\n",
        ] {
            assert_eq!(
                api_root(endpoint).unwrap(),
                "http://10.11.130.11:5240/MAAS/api/2.0/",
                "{endpoint:?}"
            );
        }
        assert_eq!(
            api_root("https://maas.example.com:5443/MAAS").unwrap(),
            "https://maas.example.com:5443/MAAS/api/2.0/"
        );
    }

    #[test]
    fn bad_endpoints_are_config_errors() {
        for endpoint in [
            "10.0.0.1:5240/MAAS",
            "ftp://x/MAAS",
            "http:///MAAS",
            "http://x/MAAS?a=b",
        ] {
            let err = api_root(endpoint).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::Config, "{endpoint}");
        }
    }

    #[test]
    fn whitespace_inside_an_endpoint_is_named_not_sent() {
        for endpoint in [
            "http://10.0.0.1:5240/MAAS\nhttp://10.0.0.2:5240/MAAS",
            "http://10.0.0.1:5240\n/MAAS",
            "http://10.0.0.1 :5240/MAAS",
            "http://10.0.0.1:5240/MA\tAS",
            "http://10.0.0.1:5240/MAAS\u{0}",
        ] {
            let err = api_root(endpoint).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::Config, "{endpoint:?}");
            assert!(
                err.to_string().contains("whitespace or control characters"),
                "{err}"
            );
        }
        // Shown without its password, with the line break escaped.
        let err = api_root("http://u:hunter22@m:5240\n/MAAS").unwrap_err();
        assert!(!err.to_string().contains("hunter22"), "{err}");
        assert!(err.to_string().contains("\\n"), "{err}");
    }

    #[test]
    fn at_most_once_retries_only_when_maas_surely_did_nothing() {
        let connect = Error::new("allocate", ErrorKind::Connect, "refused");
        let timeout = Error::new("allocate", ErrorKind::Timeout, "timed out");
        let broken = Error::new("allocate", ErrorKind::Transport, "reset");
        let busy = Error::status("allocate", 503, MaasBody::Empty, None);
        let conflict_retry = Error::status(
            "allocate",
            409,
            MaasBody::Empty,
            Some(Duration::from_secs(5)),
        );
        let gateway = Error::status("allocate", 504, MaasBody::Empty, None);
        let conflict = Error::status("allocate", 409, MaasBody::Empty, None);
        for e in [&connect, &busy, &conflict_retry] {
            assert!(may_retry(e, Repeat::AtMostOnce), "{e}");
        }
        for e in [&timeout, &broken, &gateway, &conflict] {
            assert!(!may_retry(e, Repeat::AtMostOnce), "{e}");
        }
        for e in [
            &connect,
            &timeout,
            &broken,
            &busy,
            &conflict_retry,
            &gateway,
        ] {
            assert!(may_retry(e, Repeat::Safe), "{e}");
        }
        assert!(!may_retry(&conflict, Repeat::Safe));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let backoff = |attempt| {
            let mut b = retry_backoff();
            let mut delay = b.next_delay();
            for _ in 1..attempt {
                delay = b.next_delay();
            }
            delay
        };
        assert!(backoff(1) <= Duration::from_millis(250));
        assert!(backoff(3) >= Duration::from_millis(600));
        assert!(backoff(30) <= Duration::from_millis(6250));
    }

    #[test]
    fn bad_ca_bundle_is_a_config_error() {
        let key = ApiKey::parse("a:b:c").unwrap();
        let mut config = ClientConfig::new("http://127.0.0.1:1/MAAS", key);
        config.extra_ca_pem = Some(b"not a certificate".to_vec());
        let err = Client::new(config).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Config);
    }
}
