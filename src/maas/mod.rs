//! The blocking MAAS API 2.0 client. It knows nothing of Kubernetes.
//!
//! ```text
//! ApiKey::parse("consumer:token:secret") -> Result<ApiKey, InvalidApiKey>   // Debug/Display redacted
//! ClientConfig { endpoint, api_key, timeout, connect_timeout, extra_ca_pem, max_retries }
//! ClientConfig::new(endpoint, api_key)       // 30 s / 10 s / no CA / 3 retries
//! Client::new(ClientConfig) -> Result<Client, Error>   // Clone + Send + Sync, one ureq agent
//!
//! MaasApi (trait, api.rs): the operations the controllers use, implemented
//! by Client; use `capmaas::maas::MaasApi` to call them on a Client.
//!
//! client.api_root() -> &str                                 // user:password@ redacted
//! client.security_warnings() -> Vec<String>                 // http:// etc.; WARNed once at new()
//! client.check() -> Result<(), Error>                       // users/?op=whoami
//! client.start_check() -> StartCheck::{Ready(User) | Unreachable(Error) | Refused(message)}
//! client.recheck_until_ready(report, &stop) -> Option<StartCheck>   // backoff while Unreachable
//! client.whoami() -> Result<User, Error>
//! client.version() -> Result<VersionInfo, Error>          // version/ (MaasVersion::parse)
//! client.with_max_retries(n) -> Client                      // same pool, own retry count
//! client.machine(system_id) -> Result<Machine, Error>
//! client.machines(&MachineFilter) -> Result<Vec<Machine>, Error>
//! client.machines_owned_by(username) -> Result<Vec<Arc<Machine>>, Error> // every state
//! client.machines_owned_by_reusing(username, previous) -> ...  // equal machines keep previous's Arc
//! client.events(&EventQuery { system_ids, after, level, limit }) -> Result<Vec<Event>, Error>  // newest first
//! client.allocate(&AllocateRequest) -> Result<Machine, Error>          // at most once
//! client.deploy(system_id, &DeployRequest) -> Result<Machine, Error>   // at most once
//! client.release(system_id, &ReleaseRequest) -> Result<Machine, Error>
//! client.power_on(system_id) -> Result<Machine, Error>
//! client.power_off(system_id) -> Result<Machine, Error>
//! client.power_off_with_comment(system_id, Some(comment)) -> Result<Machine, Error>
//! client.power_on_with_comment(system_id, Some(comment)) -> Result<Machine, Error>
//! client.query_power_state(system_id) -> Result<PowerState, Error>     (feature test-api)
//! client.update_machine(system_id, &[("swap_size", "0")]) -> Result<Machine, Error>
//! client.set_annotations(system_id, AnnotationsOp, &[(key, Some(value) | None)]) -> Result<Machine, Error>
//! client.set_owner_data(system_id, &[(key, Some(value) | None)]) -> Result<Machine, Error>   // op SetOwnerData
//! version_info.annotations_op() -> AnnotationsOp   // set_workload_annotations from 3.0, else set_owner_data
//! client.dns_resources(fqdn) -> Result<Vec<DnsResource>, Error>
//! client.dns_resource(id) -> Result<DnsResource, Error>
//! client.create_dns_resource(fqdn, ttl, &ips) -> Result<DnsResource, Error>   // at most once
//! client.set_dns_resource_ips(id, &ips) -> Result<DnsResource, Error>
//! client.delete_dns_resource(id) -> Result<(), Error>
//! client.create_dns_txt(fqdn, rrdata) -> Result<(), Error>   // at most once; in resource_records
//! client.ip_reservations(Some(ip) | None) -> Result<Vec<IpReservation>, Error>   // the user's own
//! client.reserve_ip(&ReserveFrom::Address(ip) | Subnet(s)) -> Result<IpReservation, Error>  // at most once
//! client.reserve_ip_marked(&from, mac) -> Result<IpReservation, Error>  // listed with interface_set[].mac_address
//! client.release_ip(ip) -> Result<(), Error>
//! client.domains() / zones() / resource_pools() / boot_resources()
//! client.check_image(image) -> Result<ImageCheck, Error>
//! check_image(image, &[BootResource]) -> ImageCheck { exists, canonical, closest }
//!
//! machine.identity() -> Option<&str>        // IDENTITY_KEY in workload annotations or owner data
//!
//! watch::MaasWatch::spawn(WatchConfig, handler, stop) -> MaasWatch     // see [`watch`]
//!
//! Error: op(), kind() (Config|Connect|Timeout|Transport|Tls|Status|Decode), http_status(),
//!        body() (MaasBody::Empty|Text|FieldErrors), retry_after(), attempts(), message(),
//!        is_transient(), is_not_found(), is_conflict(), is_unauthorized(), is_forbidden(),
//!        is_bad_request(), is_refused() (any of the five before: MAAS said no)
//! ```
//!
//! Secrets: every error (and so every condition, Event and log line built
//! from one) is scrubbed of the API key's three parts and the endpoint's
//! `user:password@`; MAAS echoes the token key and the expected signature
//! in its 401 bodies. [`redact_url`] does the same for URLs.
//!
//! Retries: transient errors (no connection, timeouts, broken connections,
//! 5xx, 409 with `Retry-After`) are retried up to `max_retries` times with
//! backoff, honouring `Retry-After`. `allocate`, `deploy`,
//! `create_dns_resource` and `reserve_ip` are *at most once*: they are
//! repeated only when MAAS surely did nothing (see [`client`]'s docs). After a transient error from
//! `allocate`, find the machine by `agent_name` before allocating again.
//!
//! Metrics: `maas_api_requests_total{operation,code}` and
//! `maas_api_request_duration_seconds{operation}`, one sample per attempt.

mod api;
mod auth;
pub mod client;
mod decode;
mod error;
mod form;
pub mod image;
mod types;
mod version;
pub mod watch;

pub use api::MaasApi;
pub use auth::{ApiKey, InvalidApiKey};
pub use client::{Client, ClientConfig, StartCheck};
pub use error::{redact_url, Error, ErrorKind, MaasBody};
pub use form::{encode_pairs, percent_encode};
pub use image::{canonical_name, check_image, ImageCheck};
pub use types::*;
pub use version::{AnnotationsOp, MaasVersion, VersionInfo};

impl From<InvalidApiKey> for Error {
    fn from(e: InvalidApiKey) -> Error {
        Error::new("config", ErrorKind::Config, e.to_string())
    }
}
