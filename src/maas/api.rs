//! The MAAS operations the controllers use, as one trait: [`Client`]
//! implements it (each operation is written there once, in its
//! `impl MaasApi for Client`), the unit tests' fake MAAS
//! (`controllers::fake::FakeMaas`) implements it in memory, and the
//! controllers reach it through one `Arc<dyn MaasApi>` under their view of
//! MAAS (`controllers::maas_view::MaasView`). The client's other calls
//! (inventory, `whoami`) are its own methods.
//!
//! Errors are the client's [`Error`], classified by its methods
//! (`is_transient`, `is_not_found`, `is_conflict`, `is_refused`); the fake
//! builds the same errors.

#[cfg(doc)]
use super::Client;
use super::{
    AllocateRequest, AnnotationsOp, BootResource, ComposeRequest, DeployRequest, DnsResource,
    Error, Event, EventQuery, IpReservation, Machine, MachineFilter, ReleaseRequest, ReserveFrom,
    Subnet, VersionInfo, VmHost, Zone,
};

pub trait MaasApi: Send + Sync {
    /// `GET version/`: the MAAS release and its capabilities.
    fn version(&self) -> Result<VersionInfo, Error>;

    fn machine(&self, system_id: &str) -> Result<Machine, Error>;

    /// Lists machines matching `filter` (owner data is matched locally).
    fn machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>, Error>;

    /// Allocates one machine. Sent at most once (see the module docs): on a
    /// transient error, look for a machine with your `agent_name` first.
    fn allocate(&self, req: &AllocateRequest) -> Result<Machine, Error>;

    /// Deploys an Allocated (or Ready) machine. Sent at most once: a repeat
    /// of a deploy that worked answers 409, so on a transient error re-read
    /// the machine instead.
    fn deploy(&self, system_id: &str, req: &DeployRequest) -> Result<Machine, Error>;

    /// Releases a machine back to the pool (no-op when already Ready or
    /// Releasing, so safe to repeat).
    fn release(&self, system_id: &str, req: &ReleaseRequest) -> Result<Machine, Error>;

    /// `GET events/?op=query`: the machines' event log, newest first (node
    /// reuse reads who released a machine last, and why).
    fn events(&self, query: &EventQuery) -> Result<Vec<Event>, Error>;

    /// [`Client::power_on`] with a comment MAAS records in the machine's
    /// event log (who asked, and why).
    fn power_on_with_comment(
        &self,
        system_id: &str,
        comment: Option<&str>,
    ) -> Result<Machine, Error>;

    /// [`Client::power_off`] with a comment MAAS records in the machine's
    /// event log (who asked, and why).
    fn power_off_with_comment(
        &self,
        system_id: &str,
        comment: Option<&str>,
    ) -> Result<Machine, Error>;

    /// Marks a machine Broken with `comment` (MAAS shows it as the reason),
    /// so that nobody allocates it until an administrator marks it fixed.
    /// Only the owner may (403 otherwise); a machine still allocated or
    /// deployed is released on the way (MAAS 3.4.8). Safe to repeat: a
    /// Broken machine stays Broken.
    fn mark_broken(&self, system_id: &str, comment: &str) -> Result<Machine, Error>;

    /// `PUT machines/{id}/` with the given fields, e.g. `("swap_size", "0")`.
    /// Needs an admin key.
    fn update_machine(&self, system_id: &str, fields: &[(&str, &str)]) -> Result<Machine, Error>;

    /// Merges workload annotations (owner data) with `op` (see
    /// [`VersionInfo::annotations_op`]); `None` deletes a key. The caller
    /// must own the machine.
    fn set_annotations(
        &self,
        system_id: &str,
        op: AnnotationsOp,
        data: &[(&str, Option<&str>)],
    ) -> Result<Machine, Error>;

    fn subnets(&self) -> Result<Vec<Subnet>, Error>;

    /// `op=link_subnet mode=STATIC`: `ip` on interface `interface_id` of
    /// the machine, in `subnet_id`. MAAS allows it only while the machine
    /// is New, Ready, Allocated or Broken. Sent at most once: a repeat of a
    /// link that was made answers "already in use"; read the machine first.
    fn link_subnet_static(
        &self,
        system_id: &str,
        interface_id: i64,
        subnet_id: i64,
        ip: &str,
    ) -> Result<(), Error>;

    /// `op=unlink_subnet`: removes link `link_id` of the interface (and
    /// frees its address). Sent at most once, like the link.
    fn unlink_subnet(&self, system_id: &str, interface_id: i64, link_id: i64) -> Result<(), Error>;

    /// DNS resources with exactly this fqdn (`[]` when none; a 404 means the
    /// domain does not exist).
    fn dns_resources(&self, fqdn: &str) -> Result<Vec<DnsResource>, Error>;

    /// Creates `fqdn` with these addresses. Sent at most once: on a transient
    /// error, look it up with [`Client::dns_resources`] before creating again.
    fn create_dns_resource(
        &self,
        fqdn: &str,
        ttl: u32,
        ips: &[String],
    ) -> Result<DnsResource, Error>;

    /// `POST dnsresourcerecords/`: adds a TXT record with `rrdata` to the
    /// name `fqdn` (MAAS adds it to the DNS resource of that name, listed
    /// in its `resource_records`). Sent at most once.
    fn create_dns_txt(&self, fqdn: &str, rrdata: &str) -> Result<(), Error>;

    /// Replaces the whole address set (an empty slice clears it).
    fn set_dns_resource_ips(&self, id: i64, ips: &[String]) -> Result<DnsResource, Error>;

    /// Deletes a DNS resource. A 404 comes back as an error; callers
    /// deleting idempotently treat [`Error::is_not_found`] as success.
    fn delete_dns_resource(&self, id: i64) -> Result<(), Error>;

    /// `GET ipaddresses/`: the addresses this MAAS user reserved (only
    /// `ip` when given). MAAS lists only the caller's own reservations to
    /// non-administrators, and to administrators unless they ask for more.
    fn ip_reservations(&self, ip: Option<&str>) -> Result<Vec<IpReservation>, Error>;

    /// `reserve_ip` with `mac=<mac>`: MAAS links the address STATIC to an
    /// interface of that MAC (made for it, no machine's; gone again when
    /// the address is released) and lists it in the reservation's
    /// `interface_set`, which marks the reservation as its maker's.
    fn reserve_ip_marked(&self, from: &ReserveFrom, mac: &str) -> Result<IpReservation, Error>;

    /// `POST ipaddresses/?op=release`: releases one of this user's
    /// reservations (never with `force`, so never someone else's). An
    /// address that is not (or no longer) reserved answers 400.
    fn release_ip(&self, ip: &str) -> Result<(), Error>;

    fn zones(&self) -> Result<Vec<Zone>, Error>;

    fn boot_resources(&self) -> Result<Vec<BootResource>, Error>;

    // VM hosts (MAAS ≤ 3.8; later ones answer 410 Gone), for a MaasMachine
    // asking for a VM (`controllers::machine::vm`).
    fn vm_hosts(&self) -> Result<Vec<VmHost>, Error>;

    /// `op=compose` on VM host `host_id`; the new machine's system_id. Sent
    /// at most once: on a transient error look for the VM by its hostname.
    fn compose(&self, host_id: i64, req: &ComposeRequest) -> Result<String, Error>;

    /// `DELETE machines/<id>/`: a composed VM is decomposed on its host.
    fn delete_machine(&self, system_id: &str) -> Result<(), Error>;
}
