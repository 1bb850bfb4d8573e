//! Static addresses from Cluster API IPAM (`spec.network`): one
//! `IPAddressClaim` per pool, named `<MaasMachine>-<n>` so that a crash, a
//! repeat or a new allocation for the same MaasMachine finds the same claim
//! (and so the same address); the IPAM provider answers with an
//! `IPAddress`; each address is linked STATIC on the chosen interface in
//! MAAS, in the subnet whose CIDR is its network, while the machine is
//! Allocated (MAAS allows interface edits only then, not once deploying).
//!
//! ```text
//! allocated ─► claims exist? (create) ─► answered? (wait) ─► IPAddresses
//!   ─► interface has a STATIC link with the address? ─► else unlink the
//!      interface's other links on that subnet, link_subnet mode=STATIC
//! delete (after release): MAAS done releasing ─► unlink our addresses
//!   (MAAS keeps STATIC links on release) ─► delete the claims
//! ```
//!
//! The Go fork's `spec.staticIP {ip, cidr, gateway, nameservers}` is one
//! more address, linked the same way without a claim: in the MAAS subnet
//! whose CIDR is `cidr`, on `network.interface`, else
//! `apiServerInterfaceName`, else the boot interface.

use std::net::IpAddr;
use std::time::Duration;

use serde_json::{json, Value};

use super::{poll_interval, retry, MachineReconciling, Step};
use crate::api::capi;
use crate::api::ipam::{self, IpAddress, IpAddressClaim, IpAddressSpec, PoolRef};
use crate::api::maas_machine::{self as mm_api, MachineNetwork, StaticIp};
use crate::api::{maas_cluster, MaasCluster, MaasMachine};
use crate::controllers::identity::{self, Identity, Ownership};
use crate::controllers::Error;
use crate::maas::{self, LinkMode, MachineStatus};
use crate::runtime::Action;

/// Condition: whether the static addresses are set on the machine in MAAS.
pub const STATIC_ADDRESSES_READY: &str = "StaticAddressesReady";
/// The IPAM provider has not answered a claim yet.
pub const WAITING_FOR_IP_ADDRESS: &str = "WaitingForIPAddress";
/// The addresses are linked STATIC on the interface in MAAS.
pub const STATIC_ADDRESSES_LINKED: &str = "StaticAddressesLinked";
/// An address cannot be set (no such interface or subnet, MAAS refused).
pub const STATIC_ADDRESS_FAILED: &str = "StaticAddressFailed";

/// How long a deletion waits for MAAS to finish releasing the machine
/// before the static addresses can be unlinked.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// The pools of `spec.network`, if any.
fn network(mm: &MaasMachine) -> Option<&MachineNetwork> {
    mm.spec
        .options()
        .network
        .as_ref()
        .filter(|n| !n.addresses_from_pools.is_empty())
}

/// The claim for the `index`th pool: named after the MaasMachine, so every
/// reconcile of it (after a crash, for a new allocation) finds it again.
/// Always a valid name: a MaasMachine gets this far only with an identity,
/// `capmaas/<namespace>/<name>/<uid>` in at most 255 characters, so its
/// name is far shorter than the 253 a claim's may have.
pub fn claim_name(mm: &MaasMachine, index: usize) -> String {
    match reused_claims(mm) {
        Some(prefix) => format!("{prefix}-{index}"),
        None => format!("{}-{index}", mm.metadata.name),
    }
}

/// With `spec.nodeReuse` the claims go with the MAAS machine instead:
/// named `<cluster>-<systemID>-<n>` and owned by the MaasCluster, they
/// outlive a release for reuse, so the MaasMachine that takes the machine
/// back finds the same claim, the same address, and MAAS's STATIC link of
/// it still on the interface (MAAS keeps STATIC links on release).
fn reused_claims(mm: &MaasMachine) -> Option<String> {
    let cluster = mm.metadata.labels.get(capi::CLUSTER_NAME_LABEL)?;
    let system_id = mm.system_id()?;
    mm.spec
        .options()
        .node_reuse
        .then(|| format!("{cluster}-{system_id}"))
}

/// Before deploying an allocated machine: its addresses claimed, answered
/// and linked STATIC in MAAS; otherwise the reconcile stops here (waiting
/// for the IPAM provider, or MAAS refused and the step is tried again
/// later). A machine past Allocated passes unchanged: its links were set
/// before it deployed, and MAAS would not change them now.
pub(super) fn ensure_static_addresses(
    r: &mut MachineReconciling,
    host: maas::Machine,
    cluster: &str,
    maas_cluster: Option<&MaasCluster>,
) -> Result<Step<maas::Machine>, Error> {
    let pools = network(&r.object).cloned();
    let static_ip = r.object.spec.options().static_ip.clone();
    if pools.is_none() && static_ip.is_none() {
        return Ok(Step::Continue(host));
    }
    if host.status != MachineStatus::Allocated {
        return Ok(Step::Continue(host));
    }
    let claimed = match &pools {
        Some(network) => claimed_addresses(r, network, cluster, maas_cluster)?,
        None => Done(Vec::new()),
    };
    let given = match static_ip.as_ref().map(static_address) {
        None => Done(None),
        Some(StaticAddress::Ready(address)) => Done(Some(*address)),
        Some(StaticAddress::Waiting) => Blocked("spec.staticIP.ip to be filled in".to_string()),
        // Set after allocation (the address filled in late): said here.
        Some(StaticAddress::Refused(message)) => {
            if r.condition_reason(STATIC_ADDRESSES_READY) != Some(STATIC_ADDRESS_FAILED) {
                r.warning_event(STATIC_ADDRESS_FAILED, &message);
            }
            not_ready(r, STATIC_ADDRESS_FAILED, message);
            return Ok(Step::Stop(Action::Done));
        }
    };
    let addresses = match (claimed, given) {
        (Done(mut addresses), Done(given)) => {
            addresses.extend(given);
            addresses
        }
        (Blocked(waiting_for), _) | (_, Blocked(waiting_for)) => {
            let message = format!("waiting for {waiting_for}");
            not_ready(r, WAITING_FOR_IP_ADDRESS, message);
            let age = r.condition_age(STATIC_ADDRESSES_READY);
            return Ok(Step::Stop(Action::RequeueAfter(poll_interval(age))));
        }
    };
    if let Some(wait) = retry::waiting(r) {
        return Ok(Step::Stop(wait));
    }
    remember_ours(r, &host)?;
    let interface = pools
        .as_ref()
        .and_then(|n| n.interface.clone())
        .or_else(|| r.object.spec.options().api_server_interface_name.clone())
        .filter(|name| !name.is_empty());
    match link_addresses(r, &host, interface.as_deref(), &addresses)? {
        Done(linked) => {
            r.set_true(STATIC_ADDRESSES_READY, STATIC_ADDRESSES_LINKED);
            if !linked.is_empty() {
                r.normal_event(
                    STATIC_ADDRESSES_LINKED,
                    &format!(
                        "Linked {} STATIC on MAAS machine {}",
                        linked.join(", "),
                        host.system_id
                    ),
                );
            }
            Ok(Step::Continue(host))
        }
        Blocked(message) => {
            r.set_false(
                STATIC_ADDRESSES_READY,
                STATIC_ADDRESS_FAILED,
                message.clone(),
            );
            Ok(Step::Stop(retry::refused(
                r,
                STATIC_ADDRESS_FAILED,
                &message,
            )))
        }
    }
}

/// The addresses are not ready, and so the machine is not deployed.
fn not_ready(r: &mut MachineReconciling, reason: &str, message: String) {
    r.set_false(STATIC_ADDRESSES_READY, reason, message.clone());
    r.set_false(mm_api::MACHINE_DEPLOYED, reason, message);
}

/// How a part of the address work ended: done, or blocked, with why (a
/// condition's message: what is waited for, or what MAAS refused).
enum Outcome<T> {
    Done(T),
    Blocked(String),
}
use Outcome::{Blocked, Done};

/// What `spec.staticIP` gives.
#[derive(Debug, PartialEq)]
enum StaticAddress {
    Ready(Box<IpAddress>),
    /// `ip` is empty: an IPAM controller outside capmaas fills it in.
    Waiting,
    Refused(String),
}

/// `spec.staticIP` as the address to link. Refused: an `ip` that is not
/// an address, a missing `cidr` (it names the MAAS subnet) or one that
/// does not hold `ip`, and `nameservers` (MAAS gives a machine its
/// subnet's DNS servers, not per-machine ones). The gateway is checked
/// against the MAAS subnet's when linking, as an IPAM pool's is.
fn static_address(given: &StaticIp) -> StaticAddress {
    let ip = given.ip.trim();
    if ip.is_empty() {
        return StaticAddress::Waiting;
    }
    if ip.parse::<IpAddr>().is_err() {
        return StaticAddress::Refused(format!("spec.staticIP.ip {ip:?} is not an IP address"));
    }
    let Some(prefix) = given
        .cidr
        .split_once('/')
        .and_then(|(_, bits)| bits.parse::<u8>().ok())
    else {
        return StaticAddress::Refused(format!(
            "spec.staticIP.cidr {:?} is not a CIDR; it names the MAAS subnet of {ip}",
            given.cidr
        ));
    };
    if !subnet_holds(&given.cidr, ip, prefix) {
        return StaticAddress::Refused(format!(
            "spec.staticIP.ip {ip} is not in spec.staticIP.cidr {}",
            given.cidr
        ));
    }
    if !given.nameservers.is_empty() {
        return StaticAddress::Refused(
            "spec.staticIP.nameservers: MAAS gives a machine its subnet's DNS servers; set them \
             on the MAAS subnet and leave this empty"
                .to_string(),
        );
    }
    let mut address = IpAddress::default();
    address.metadata.name = STATIC_IP_SOURCE.to_string();
    address.spec = IpAddressSpec {
        address: ip.to_string(),
        prefix,
        gateway: Some(given.gateway.clone()).filter(|g| !g.is_empty()),
    };
    StaticAddress::Ready(Box::new(address))
}

/// Why `spec.staticIP` cannot be set in MAAS, as far as the spec alone
/// tells (the gateway is checked against MAAS's subnet when linking).
pub(super) fn static_ip_refusal(mm: &MaasMachine) -> Option<String> {
    match static_address(mm.spec.options().static_ip.as_ref()?) {
        StaticAddress::Refused(message) => Some(message),
        StaticAddress::Ready(_) | StaticAddress::Waiting => None,
    }
}

/// The name an address of `spec.staticIP` goes by in messages.
const STATIC_IP_SOURCE: &str = "spec.staticIP";

/// Where an address comes from, for messages.
fn source(address: &IpAddress) -> String {
    if address.metadata.name == STATIC_IP_SOURCE {
        STATIC_IP_SOURCE.to_string()
    } else {
        format!("IPAddress {}", address.metadata.name)
    }
}

/// Stores `status.machineState` before the first link: a deletion
/// unlinks only on a machine this object observed as its own, so a crash
/// right after linking must not leave that unknown (and the link behind).
fn remember_ours(r: &mut MachineReconciling, host: &maas::Machine) -> Result<(), Error> {
    if r.status.machine_state.is_some() {
        return Ok(());
    }
    // Linking happens only while the machine is Allocated.
    let state = Some(host.status_name.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "Allocated".to_string());
    let patch = json!({"status": {"machineState": state}});
    r.patch_status_now(&patch, |status| {
        status.machine_state = Some(state.clone());
    })
}

/// One address per pool, in pool order; `Blocked(what)` while a claim is
/// created now or not answered yet (or a claim of the name is left from a
/// deleted MaasMachine and still going away).
fn claimed_addresses(
    r: &mut MachineReconciling,
    network: &MachineNetwork,
    cluster: &str,
    maas_cluster: Option<&MaasCluster>,
) -> Result<Outcome<Vec<IpAddress>>, Error> {
    let namespace = r.object.metadata.namespace.clone();
    let mut addresses = Vec::new();
    let mut waiting = Vec::new();
    for (index, pool) in network.addresses_from_pools.iter().enumerate() {
        let name = claim_name(&r.object, index);
        let pool_text = format!("{}/{}", pool.kind, pool.name);
        let Some(claim) = r.ctx.kube.ip_address_claim(&namespace, &name)? else {
            create_claim(r, &name, pool, cluster, maas_cluster)?;
            waiting.push(format!("IPAddressClaim {name} (pool {pool_text})"));
            continue;
        };
        if !is_ours(&r.object, &claim) {
            let message = format!(
                "IPAddressClaim {namespace}/{name} exists and is not this MaasMachine's; \
                 delete it or rename the MaasMachine"
            );
            r.set_false(
                STATIC_ADDRESSES_READY,
                STATIC_ADDRESS_FAILED,
                message.clone(),
            );
            return Err(Error::Retry(message));
        }
        if claim.metadata.is_being_deleted() {
            waiting.push(format!(
                "IPAddressClaim {name} of a former MaasMachine of this name to go away"
            ));
            continue;
        }
        let address = match &claim.status.address_ref {
            Some(address_ref) if !address_ref.name.is_empty() => r
                .ctx
                .kube
                .ip_address(&namespace, &address_ref.name)?
                .filter(|a| !a.spec.address.is_empty()),
            _ => None,
        };
        match address {
            Some(address) => addresses.push(address),
            None => waiting.push(format!(
                "an address for IPAddressClaim {name} from pool {pool_text}"
            )),
        }
    }
    if waiting.is_empty() {
        Ok(Done(addresses))
    } else {
        Ok(Blocked(waiting.join(", ")))
    }
}

/// A claim of our name is ours if a MaasMachine of our name owns it (the
/// UID is not compared: `clusterctl move` gives both new UIDs); with node
/// reuse, if a MaasCluster does.
fn is_ours(mm: &MaasMachine, claim: &IpAddressClaim) -> bool {
    if reused_claims(mm).is_some() {
        return claim
            .metadata
            .owner(crate::api::GROUP, maas_cluster::KIND)
            .is_some();
    }
    claim
        .metadata
        .owner(crate::api::GROUP, mm_api::KIND)
        .is_some_and(|o| o.name == mm.metadata.name)
}

fn create_claim(
    r: &mut MachineReconciling,
    name: &str,
    pool: &PoolRef,
    cluster: &str,
    maas_cluster: Option<&MaasCluster>,
) -> Result<(), Error> {
    let meta = &r.object.metadata;
    let owner = match maas_cluster.filter(|_| reused_claims(&r.object).is_some()) {
        Some(c) => (maas_cluster::KIND, &c.metadata.name, &c.metadata.uid),
        None => (mm_api::KIND, &meta.name, &meta.uid),
    };
    let claim: Value = json!({
        "apiVersion": ipam::API_VERSION,
        "kind": ipam::CLAIM_KIND,
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": {capi::CLUSTER_NAME_LABEL: cluster},
            "ownerReferences": [{
                "apiVersion": crate::api::API_VERSION,
                "kind": owner.0,
                "name": owner.1,
                "uid": owner.2,
                "controller": true,
            }],
        },
        "spec": {"clusterName": cluster, "poolRef": pool},
    });
    match r.ctx.kube.create_ip_address_claim(&meta.namespace, &claim) {
        // Created by a reconcile whose answer was lost: read next time.
        Err(e) if e.is_already_exists() => Ok(()),
        Err(e) => Err(e.into()),
        Ok(()) => {
            r.normal_event(
                "IPAddressClaimCreated",
                &format!("Claimed an address from {} {}", pool.kind, pool.name),
            );
            Ok(())
        }
    }
}

/// Links each address STATIC on the interface unless MAAS shows it so
/// already; returns the addresses linked now, or why it cannot be done.
fn link_addresses(
    r: &MachineReconciling,
    host: &maas::Machine,
    wanted: Option<&str>,
    addresses: &[IpAddress],
) -> Result<Outcome<Vec<String>>, Error> {
    let boot = host.boot_interface.as_ref().map(|i| i.id);
    let interface = host.interfaces.iter().find(|i| match wanted {
        Some(name) => i.name == name,
        None => Some(i.id) == boot,
    });
    let Some(interface) = interface else {
        return Ok(Blocked(format!(
            "MAAS machine {} has no interface {}",
            host.system_id,
            wanted.unwrap_or("to boot from")
        )));
    };
    let mut subnets: Option<Vec<maas::Subnet>> = None;
    let mut linked = Vec::new();
    for address in addresses {
        let ip = &address.spec.address;
        if interface
            .links
            .iter()
            .any(|l| l.mode == LinkMode::Static && l.ip.as_deref() == Some(ip))
        {
            continue;
        }
        let subnets = match &subnets {
            Some(subnets) => subnets,
            None => subnets.insert(r.maas()?.client().subnets()?),
        };
        let Some(subnet) = subnets
            .iter()
            .find(|s| subnet_holds(&s.cidr, ip, address.spec.prefix))
        else {
            return Ok(Blocked(format!(
                "no MAAS subnet is {ip}/{}'s network ({})",
                address.spec.prefix,
                source(address)
            )));
        };
        // MAAS configures the subnet's gateway on a STATIC link, not the
        // pool's: a machine deployed with another gateway than the IPAM
        // pool meant may have no route out, so a mismatch stops here.
        if let Some(gateway) = address.spec.gateway.as_deref().filter(|g| !g.is_empty()) {
            if subnet.gateway_ip.as_deref() != Some(gateway) {
                return Ok(Blocked(format!(
                    "{} says gateway {gateway}, MAAS subnet {} has {}: MAAS \
                     configures its subnet's gateway, so make the gateway match it",
                    source(address),
                    subnet.cidr,
                    subnet.gateway_ip.as_deref().unwrap_or("none")
                )));
            }
        }
        // The interface's AUTO or DHCP link on this subnet would give it a
        // second address there when it deploys.
        for link in interface
            .links
            .iter()
            .filter(|l| l.subnet_id == Some(subnet.id))
        {
            match r.maas()?.write(&host.system_id, |client| {
                client.unlink_subnet(&host.system_id, interface.id, link.id)
            }) {
                Ok(()) => {}
                Err(e) if e.is_refused() => {
                    return Ok(Blocked(refusal(
                        format!(
                            "unlinking the {} link of {} on {}",
                            link.mode.as_str(),
                            interface.name,
                            host.system_id
                        ),
                        &e,
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        }
        match r.maas()?.write(&host.system_id, |client| {
            client.link_subnet_static(&host.system_id, interface.id, subnet.id, ip)
        }) {
            Ok(()) => linked.push(format!("{ip} on {}", interface.name)),
            Err(e) if e.is_refused() => {
                return Ok(Blocked(refusal(
                    format!(
                        "linking {ip} STATIC on {} of {} (subnet {})",
                        interface.name, host.system_id, subnet.cidr
                    ),
                    &e,
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Done(linked))
}

/// Why an interface call was refused, in MAAS's words; a 403 says who may.
fn refusal(doing: String, e: &maas::Error) -> String {
    if e.is_forbidden() {
        format!(
            "{doing}: MAAS lets only administrators edit a machine's interfaces ({})",
            e.message()
        )
    } else {
        format!("{doing}: {}", e.message())
    }
}

/// Whether `cidr` (a MAAS subnet) is the network of `ip`/`prefix`.
fn subnet_holds(cidr: &str, ip: &str, prefix: u8) -> bool {
    let Some((network, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(network), Ok(bits), Ok(ip)) = (
        network.parse::<IpAddr>(),
        bits.parse::<u8>(),
        ip.parse::<IpAddr>(),
    ) else {
        return false;
    };
    network.is_ipv4() == ip.is_ipv4()
        && bits == prefix
        && masked(ip, bits).is_some_and(|net| masked(network, bits) == Some(net))
}

fn masked(ip: IpAddr, bits: u8) -> Option<u128> {
    let (value, width) = match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    };
    if bits > width {
        return None;
    }
    let host_bits = u32::from(width - bits);
    Some(value.checked_shr(host_bits).unwrap_or(0))
}

/// On delete, after the release: MAAS keeps STATIC links when it releases
/// a machine, so our addresses are unlinked once MAAS is done releasing
/// (interface edits are refused before), then the claims are deleted and
/// the IPAM provider frees the addresses. `Some`: wait for MAAS.
/// Released for node reuse: nothing unlinked, no claim deleted (they
/// belong to the machine, see [`claim_name`]).
pub(super) fn release_static_addresses(
    r: &mut MachineReconciling,
    identity: Option<&Identity>,
    kept_for_reuse: bool,
) -> Result<Option<Action>, Error> {
    if kept_for_reuse && reused_claims(&r.object).is_some() {
        return Ok(None);
    }
    let pools = network(&r.object).map_or(0, |n| n.addresses_from_pools.len());
    let mut ips: Vec<String> = r
        .object
        .spec
        .options()
        .static_ip
        .iter()
        .map(|s| s.ip.trim().to_string())
        .filter(|ip| !ip.is_empty())
        .collect();
    if pools == 0 && ips.is_empty() {
        return Ok(None);
    }
    let namespace = r.object.metadata.namespace.clone();
    let mut claims = Vec::new();
    for index in 0..pools {
        let name = claim_name(&r.object, index);
        let Some(claim) = r.ctx.kube.ip_address_claim(&namespace, &name)? else {
            continue;
        };
        if !is_ours(&r.object, &claim) {
            continue;
        }
        if let Some(address_ref) = &claim.status.address_ref {
            if let Some(address) = r.ctx.kube.ip_address(&namespace, &address_ref.name)? {
                ips.push(address.spec.address);
            }
        }
        // Deleted by an earlier reconcile; the IPAM provider's finalizer
        // keeps it until the address is free.
        if !claim.metadata.is_being_deleted() {
            claims.push(name);
        }
    }
    if let Some(system_id) = r.object.system_id().map(str::to_string) {
        if !ips.is_empty() {
            if let Some(wait) = unlink_addresses(r, &system_id, &ips, identity)? {
                return Ok(Some(wait));
            }
        }
    }
    for name in claims {
        r.ctx.kube.delete_ip_address_claim(&namespace, &name)?;
        r.normal_event(
            "IPAddressClaimDeleted",
            &format!("Deleted IPAddressClaim {name}"),
        );
    }
    Ok(None)
}

fn unlink_addresses(
    r: &mut MachineReconciling,
    system_id: &str,
    ips: &[String],
    identity: Option<&Identity>,
) -> Result<Option<Action>, Error> {
    let host = match r.maas()?.machine(system_id) {
        Ok(host) => host,
        Err(e) if e.is_not_found() || e.is_forbidden() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let ours: Vec<(i64, i64, String)> = host
        .interfaces
        .iter()
        .flat_map(|i| {
            i.links
                .iter()
                .filter(|l| {
                    l.mode == LinkMode::Static && l.ip.as_ref().is_some_and(|ip| ips.contains(ip))
                })
                .map(|l| (i.id, l.id, l.ip.clone().unwrap_or_default()))
        })
        .collect();
    if ours.is_empty() {
        return Ok(None);
    }
    let owned_now = identity.is_some_and(|id| identity::ownership(&host, id) == Ownership::Ours);
    let observed = r.status.machine_state.is_some();
    match unlink_decision(&host.status, owned_now, observed) {
        Unlink::Now => {}
        Unlink::AfterRelease => {
            r.set_false(
                STATIC_ADDRESSES_READY,
                mm_api::DELETED,
                format!("waiting for MAAS to release {system_id} to unlink its static addresses"),
            );
            return Ok(Some(Action::RequeueAfter(RELEASE_WAIT)));
        }
        Unlink::Never => {
            let whose = if observed {
                format!("is {:?}", host.status_name)
            } else {
                "was never this MaasMachine's".to_string()
            };
            r.warning_event(
                STATIC_ADDRESS_FAILED,
                &format!(
                    "MAAS machine {system_id} {whose}: its static addresses {} stay linked",
                    ips.join(", ")
                ),
            );
            return Ok(None);
        }
    }
    for (interface_id, link_id, ip) in ours {
        match r.maas()?.write(system_id, |client| {
            client.unlink_subnet(system_id, interface_id, link_id)
        }) {
            Ok(()) => {}
            Err(e) if e.is_refused() => r.warning_event(
                STATIC_ADDRESS_FAILED,
                &format!(
                    "unlinking {ip} from MAAS machine {system_id}: {}",
                    e.message()
                ),
            ),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// What a deletion does with the STATIC links of our addresses on the
/// recorded machine.
#[derive(Debug, PartialEq, Eq)]
enum Unlink {
    Now,
    /// MAAS refuses interface edits while releasing.
    AfterRelease,
    Never,
}

/// Only on a machine that is ours: allocated under our identity now, or
/// one this object observed as its own (`status.machineState`, written
/// only for our machine, before any link; `spec.systemID` cannot change)
/// and that is now released. A `spec.systemID` naming a machine we never
/// had, with a claim answered by the tenant's own pool, must not unlink an
/// address an administrator pinned on it.
fn unlink_decision(status: &MachineStatus, owned_now: bool, observed: bool) -> Unlink {
    match status {
        MachineStatus::Allocated if owned_now => Unlink::Now,
        MachineStatus::Releasing | MachineStatus::DiskErasing if observed || owned_now => {
            Unlink::AfterRelease
        }
        MachineStatus::New | MachineStatus::Ready | MachineStatus::Broken if observed => {
            Unlink::Now
        }
        _ => Unlink::Never,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subnet_holds_an_address_of_its_network_and_prefix() {
        assert!(subnet_holds("10.0.0.0/24", "10.0.0.57", 24));
        assert!(
            !subnet_holds("10.0.0.0/24", "10.0.0.57", 25),
            "prefix differs"
        );
        assert!(!subnet_holds("10.0.0.0/24", "10.0.1.57", 24));
        assert!(subnet_holds("2001:db8::/64", "2001:db8::12", 64));
        assert!(!subnet_holds("2001:db8::/64", "10.0.0.1", 64));
        assert!(subnet_holds("0.0.0.0/0", "8.8.8.8", 0));
        assert!(!subnet_holds("10.0.0.0/33", "10.0.0.1", 33));
        assert!(!subnet_holds("garbage", "10.0.0.1", 24));
    }

    #[test]
    fn addresses_are_unlinked_only_on_a_machine_that_is_ours() {
        use MachineStatus::*;
        // Ours now, or observed as ours and released since.
        assert_eq!(unlink_decision(&Allocated, true, true), Unlink::Now);
        assert_eq!(unlink_decision(&Ready, false, true), Unlink::Now);
        assert_eq!(unlink_decision(&Broken, false, true), Unlink::Now);
        assert_eq!(
            unlink_decision(&Releasing, false, true),
            Unlink::AfterRelease
        );
        assert_eq!(
            unlink_decision(&DiskErasing, true, false),
            Unlink::AfterRelease
        );
        // Never ours: a spec.systemID naming someone else's or nobody's machine.
        assert_eq!(unlink_decision(&Ready, false, false), Unlink::Never);
        assert_eq!(unlink_decision(&New, false, false), Unlink::Never);
        assert_eq!(unlink_decision(&Releasing, false, false), Unlink::Never);
        assert_eq!(unlink_decision(&Allocated, false, true), Unlink::Never);
        assert_eq!(unlink_decision(&Deployed, false, true), Unlink::Never);
    }
}
