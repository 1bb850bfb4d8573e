//! `MaasMachine` and `MaasMachineTemplate` (infrastructure.cluster.x-k8s.io/v1beta1),
//! field names as in the Go provider; status follows the Cluster API v1beta2
//! contract with the legacy `ready` flag kept for v1beta1 readers.
//!
//! The types name what the controllers read and write; decoding drops the
//! rest (e.g. the Go provider's `spec.lxd.vmConfig`), see `api::meta` for why that
//! is safe.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::capi;
use super::conditions::Condition;
use super::maas_cluster::Initialization;
use super::meta::ObjectMeta;

pub const KIND: &str = "MaasMachine";
pub const FINALIZER: &str = "maasmachine.infrastructure.cluster.x-k8s.io";
/// Set on a MaasMachine together with its `spec.systemID` when capmaas
/// allocated the MAAS machine, to the `agent_name` the allocation carries.
/// On delete it says that MAAS's list by `agent_name`, not the recorded
/// system ID, tells which machines are still ours: a machine released before
/// a crash may since belong to someone else. Objects written by the Go
/// provider lack it and keep its behaviour (the recorded machine is released).
pub const AGENT_NAME_ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/agent-name";

/// Condition types and reasons, byte-identical to the Go provider.
pub const MACHINE_DEPLOYED: &str = "MachineDeployed";
pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
pub const MACHINE_NOT_FOUND: &str = "MachineNotFound";
pub const MACHINE_DEPLOY_STARTED: &str = "MachineDeployStartedReason";
pub const MACHINE_DEPLOY_FAILED: &str = "MachineDeployFailed";
pub const MACHINE_DEPLOYING: &str = "MachineDeploying";
pub const MACHINE_TERMINATED: &str = "MachineTerminatedReason";
pub const MACHINE_POWERED_OFF: &str = "MachinePoweredOff";
pub const MACHINE_STATE_UNDEFINED: &str = "MachineStateUndefined";
/// Ours: a deployed machine whose power state MAAS does not know
/// (`unknown`, `error`): left alone, never powered on (on IPMI MAAS's power
/// on is `ipmipower --cycle --on-if-off`, a hard reset of a running node
/// whose BMC did not answer).
pub const MACHINE_POWER_STATE_UNKNOWN: &str = "MachinePowerStateUnknown";
pub const DELETED: &str = "Deleted";
pub const DNS_ATTACHED: &str = "DNSAttached";
pub const DNS_ATTACH_PENDING: &str = "DNSAttachPending";
pub const DNS_DETACH_PENDING: &str = "DNSDetachPending";
/// Ours (the Go provider has no such condition): whether the workload Node
/// carries this machine's providerID.
/// Ours: the recorded MAAS machine is not this MaasMachine's (MAAS does not
/// list it under the object's identity), so it is never touched.
pub const MACHINE_NOT_OWNED: &str = "MachineNotOwned";
/// Ours: `SwapDisabled` says whether MAAS's swap was set to 0 before deploy.
pub const SWAP_DISABLED: &str = "SwapDisabled";
/// `MachineDeployed` reason: the spec asks for a deploy option this MAAS
/// release does not have; nothing is deployed until MAAS is upgraded or the
/// field removed.
pub const UNSUPPORTED_BY_MAAS: &str = "UnsupportedByMAAS";
/// MAAS refused the machine edit (restricted users may not): deployed
/// with MAAS's swap setting.
pub const SWAP_UPDATE_SKIPPED: &str = "SwapUpdateSkipped";
/// Swap is left as MAAS has it, as configured.
pub const SWAP_UPDATE_DISABLED: &str = "SwapUpdateDisabled";
/// Ours: the MAAS credentials of the machine's cluster cannot be used.
pub const CREDENTIALS_UNAVAILABLE: &str = super::maas_cluster::CREDENTIALS_UNAVAILABLE;
pub const NODE_PROVIDER_ID_SET: &str = "NodeProviderIDSet";
/// With `spec.failureDomainFallback`: was the machine allocated in the
/// failure domain asked for? False (reason `FailureDomainFallback`) names
/// the zone it got instead. Informational: not part of `Ready`.
pub const FAILURE_DOMAIN_MATCHED: &str = "FailureDomainMatched";
pub const FAILURE_DOMAIN_FALLBACK: &str = "FailureDomainFallback";
pub const WAITING_FOR_NODE: &str = "WaitingForNode";
pub const NODE_PROVIDER_ID_MISMATCH: &str = "NodeProviderIDMismatch";

/// `failureReason` value (Cluster API `MachineStatusError`).
pub const UPDATE_MACHINE_ERROR: &str = "UpdateMachineError";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasMachine {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MaasMachineSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MaasMachineStatus>,
}

/// `spec`. The fields most MaasMachines set are held inline, the options
/// few set in one box ([`MachineOptions`]): the informer cache holds a
/// MaasMachine per machine, and those options, unset, took 536 of its 1,176
/// bytes. On the wire every field is at the same level, as in the Go
/// provider ([`SpecFields`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "SpecFields", into = "SpecFields")]
pub struct MaasMachineSpec {
    pub failure_domain: Option<String>,
    pub system_id: Option<String>,
    pub provider_id: Option<String>,
    pub resource_pool: Option<String>,
    pub min_cpu: Option<i64>,
    pub min_memory: Option<i64>,
    pub min_disk_size: Option<i64>,
    pub tags: Vec<String>,
    pub image: String,
    /// None while every option is unset (decoding never boxes unset
    /// options). Read through [`options`](Self::options).
    pub options: Option<Box<MachineOptions>>,
}

impl MaasMachineSpec {
    /// The rarely set options (all unset when there is no box).
    pub fn options(&self) -> &MachineOptions {
        static UNSET: MachineOptions = MachineOptions::UNSET;
        self.options.as_deref().unwrap_or(&UNSET)
    }

    /// The options to change (boxing them first if there is no box).
    pub fn options_mut(&mut self) -> &mut MachineOptions {
        self.options.get_or_insert_with(Box::default)
    }
}

/// The options of `spec` that few MaasMachines set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineOptions {
    /// Go: deploy to memory (MAAS `ephemeral_deploy`).
    pub deploy_in_memory: bool,
    // Ours (the Go provider has none of the rest): more of MAAS's allocation constraints, passed through
    // verbatim, and per-machine choices.
    /// MAAS tags the machine must not carry (`not_tags`).
    pub not_tags: Vec<String>,
    /// `amd64`, `arm64/generic`, ... (`arch`).
    pub architecture: Option<String>,
    /// MAAS's storage constraint (`storage`, e.g. `root:100(ssd),data:500`);
    /// replaces the root size minDiskSize asks for.
    pub storage: Option<String>,
    /// MAAS's interfaces constraint (`interfaces`, e.g.
    /// `eth0:subnet=10.0.0.0/24;eth1:fabric=storage`).
    pub interfaces: Option<String>,
    /// Zones the machine must not be in (`not_in_zone`).
    pub not_in_zones: Vec<String>,
    /// Allocate exactly this machine (by system ID or hostname), through the
    /// normal allocation: MAAS gives it only if it is free and this MAAS
    /// user may take it.
    pub machine_selector: Option<MachineSelector>,
    /// How to erase the disks on release: `None`, `Quick`, `Secure`, `Full`;
    /// unset: the controller's `--release-erase` (Full or None).
    pub disk_erase: Option<String>,
    /// Which of a multi-NIC machine's addresses are its own: they alone go
    /// into the API server's DNS record (control plane) and
    /// `status.addresses`. Unset: every address MAAS reports.
    pub address_selector: Option<AddressSelector>,
    /// Static addresses from Cluster API IPAM pools, set on one interface
    /// in MAAS before the machine deploys.
    pub network: Option<MachineNetwork>,
    /// The kernel to deploy (MAAS deploy `hwe_kernel`, e.g. `hwe-24.04`,
    /// `ga-22.04`); unset: MAAS's choice for the image.
    pub hwe_kernel: Option<String>,
    /// When the failure domain's zone has no matching machine, allocate in
    /// another zone of the cluster instead of waiting (off: wait, as the Go
    /// provider does).
    pub failure_domain_fallback: bool,
    /// Node reuse (Metal3's `nodeReuse`): a machine of a MachineDeployment
    /// or control plane is released without erasing its disks and taken
    /// again by the next Machine of that MachineDeployment or control
    /// plane (see `controllers::machine::reuse`). Off by default.
    pub node_reuse: bool,
    /// Set MAAS's swap to 0 before deploying (an admin-only machine edit);
    /// unset: the controller's `--no-swap-update` decides.
    pub disable_swap: Option<bool>,
    /// Collect kernel crash dumps on the deployed machine (MAAS 3.6+
    /// `enable_kernel_crash_dump`); unset: MAAS's global setting. `true` on
    /// an older MAAS is refused before deploy (`UnsupportedByMAAS`).
    pub enable_kernel_crash_dump: Option<bool>,
    /// Periodic hardware sync of the deployed machine (MAAS 3.2+
    /// `enable_hw_sync`); `true` on an older MAAS is refused before deploy.
    pub enable_hw_sync: Option<bool>,
    // The Go provider's (and its forks') fields that capmaas either maps
    // onto its own or refuses (`unsupported_field`): decoded so that a VM
    // asked for is never silently a bare-metal machine.
    /// Go: `enabled: true` composes an LXD VM on a MAAS VM host
    /// (`controllers::machine::vm`) instead of allocating a machine.
    pub lxd: Option<GoLxd>,
    /// Go: the VM host's machine (system ID) of a VM: written once the VM
    /// is composed; set before, it pins the host. Refused without a VM.
    pub parent: Option<String>,
    /// `enabled: true`: a VM on a virsh VM host (as `lxd`); another
    /// shape is refused.
    pub virsh: Option<serde_json::Value>,
    /// Go fork: the interface whose address is the machine's own; read as
    /// `addressSelector: {interface: NAME}` when that is unset.
    pub api_server_interface_name: Option<String>,
    /// Go fork: one static address, linked STATIC in MAAS before deploy
    /// like the addresses of `network` (controllers::machine::ipam).
    pub static_ip: Option<StaticIp>,
}

impl MachineOptions {
    const UNSET: MachineOptions = MachineOptions {
        deploy_in_memory: false,
        failure_domain_fallback: false,
        node_reuse: false,
        disable_swap: None,
        enable_kernel_crash_dump: None,
        enable_hw_sync: None,
        not_tags: Vec::new(),
        architecture: None,
        storage: None,
        interfaces: None,
        not_in_zones: Vec::new(),
        machine_selector: None,
        disk_erase: None,
        address_selector: None,
        network: None,
        hwe_kernel: None,
        lxd: None,
        parent: None,
        virsh: None,
        api_server_interface_name: None,
        static_ip: None,
    };
}

/// `spec` as the API has it: [`MaasMachineSpec`]'s fields and its
/// [`MachineOptions`] at one level, field names and order as before the
/// options were boxed (so the JSON written is the same).
#[derive(Serialize, Deserialize)]
struct SpecFields {
    #[serde(
        rename = "failureDomain",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    failure_domain: Option<String>,
    #[serde(rename = "systemID", default, skip_serializing_if = "Option::is_none")]
    system_id: Option<String>,
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    provider_id: Option<String>,
    #[serde(
        rename = "resourcePool",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    resource_pool: Option<String>,
    #[serde(rename = "minCPU", default, skip_serializing_if = "Option::is_none")]
    min_cpu: Option<i64>,
    #[serde(rename = "minMemory", default, skip_serializing_if = "Option::is_none")]
    min_memory: Option<i64>,
    #[serde(
        rename = "minDiskSize",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    min_disk_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
    #[serde(default)]
    image: String,
    #[serde(
        rename = "deployInMemory",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    deploy_in_memory: bool,
    #[serde(rename = "notTags", default, skip_serializing_if = "Vec::is_empty")]
    not_tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    storage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    interfaces: Option<String>,
    #[serde(rename = "notInZones", default, skip_serializing_if = "Vec::is_empty")]
    not_in_zones: Vec<String>,
    #[serde(
        rename = "machineSelector",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    machine_selector: Option<MachineSelector>,
    #[serde(
        rename = "failureDomainFallback",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    failure_domain_fallback: bool,
    #[serde(
        rename = "nodeReuse",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    node_reuse: bool,
    #[serde(rename = "diskErase", default, skip_serializing_if = "Option::is_none")]
    disk_erase: Option<String>,
    #[serde(
        rename = "disableSwap",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    disable_swap: Option<bool>,
    #[serde(
        rename = "addressSelector",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    address_selector: Option<AddressSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    network: Option<MachineNetwork>,
    #[serde(rename = "hweKernel", default, skip_serializing_if = "Option::is_none")]
    hwe_kernel: Option<String>,
    #[serde(
        rename = "enableKernelCrashDump",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    enable_kernel_crash_dump: Option<bool>,
    #[serde(
        rename = "enableHwSync",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    enable_hw_sync: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lxd: Option<GoLxd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    virsh: Option<serde_json::Value>,
    #[serde(
        rename = "apiServerInterfaceName",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    api_server_interface_name: Option<String>,
    #[serde(rename = "staticIP", default, skip_serializing_if = "Option::is_none")]
    static_ip: Option<StaticIp>,
}

impl From<SpecFields> for MaasMachineSpec {
    fn from(f: SpecFields) -> MaasMachineSpec {
        let options = MachineOptions {
            deploy_in_memory: f.deploy_in_memory,
            failure_domain_fallback: f.failure_domain_fallback,
            node_reuse: f.node_reuse,
            disable_swap: f.disable_swap,
            enable_kernel_crash_dump: f.enable_kernel_crash_dump,
            enable_hw_sync: f.enable_hw_sync,
            not_tags: f.not_tags,
            architecture: f.architecture,
            storage: f.storage,
            interfaces: f.interfaces,
            not_in_zones: f.not_in_zones,
            machine_selector: f.machine_selector,
            disk_erase: f.disk_erase,
            address_selector: f.address_selector,
            network: f.network,
            hwe_kernel: f.hwe_kernel,
            lxd: f.lxd,
            parent: f.parent,
            virsh: f.virsh,
            api_server_interface_name: f.api_server_interface_name,
            static_ip: f.static_ip,
        };
        MaasMachineSpec {
            failure_domain: f.failure_domain,
            system_id: f.system_id,
            provider_id: f.provider_id,
            resource_pool: f.resource_pool,
            min_cpu: f.min_cpu,
            min_memory: f.min_memory,
            min_disk_size: f.min_disk_size,
            tags: f.tags,
            image: f.image,
            options: (options != MachineOptions::UNSET).then(|| Box::new(options)),
        }
    }
}

impl From<MaasMachineSpec> for SpecFields {
    fn from(spec: MaasMachineSpec) -> SpecFields {
        let o = spec.options.map(|o| *o).unwrap_or_default();
        SpecFields {
            failure_domain: spec.failure_domain,
            system_id: spec.system_id,
            provider_id: spec.provider_id,
            resource_pool: spec.resource_pool,
            min_cpu: spec.min_cpu,
            min_memory: spec.min_memory,
            min_disk_size: spec.min_disk_size,
            tags: spec.tags,
            image: spec.image,
            deploy_in_memory: o.deploy_in_memory,
            not_tags: o.not_tags,
            architecture: o.architecture,
            storage: o.storage,
            interfaces: o.interfaces,
            not_in_zones: o.not_in_zones,
            machine_selector: o.machine_selector,
            failure_domain_fallback: o.failure_domain_fallback,
            node_reuse: o.node_reuse,
            disk_erase: o.disk_erase,
            disable_swap: o.disable_swap,
            address_selector: o.address_selector,
            network: o.network,
            hwe_kernel: o.hwe_kernel,
            enable_kernel_crash_dump: o.enable_kernel_crash_dump,
            enable_hw_sync: o.enable_hw_sync,
            lxd: o.lxd,
            parent: o.parent,
            virsh: o.virsh,
            api_server_interface_name: o.api_server_interface_name,
            static_ip: o.static_ip,
        }
    }
}

/// The Go provider's `spec.lxd`; of `vmConfig` only `diskSize` is read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoLxd {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(rename = "vmConfig", default, skip_serializing_if = "Option::is_none")]
    pub vm_config: Option<serde_json::Value>,
}

/// The Go provider's VM disk when `vmConfig.diskSize` is unset (GB).
pub const DEFAULT_VM_DISK_GB: u64 = 60;

/// The Go fork's `spec.staticIP`. An empty `ip` means an external IPAM
/// controller has yet to fill it in: the machine waits before deploying.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaticIp {
    #[serde(default)]
    pub ip: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cidr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
}

/// Go fork annotation: the VM's stable hostname (an LXD VM); refused.
pub const VM_NAME_ANNOTATION: &str = "maas.spectrocloud.com/vm-name";
/// `MachineDeployed` reason: a VM was asked for (`spec.lxd.enabled`,
/// `spec.virsh.enabled`) of a MAAS without VM hosts (removed after 3.8).
pub const VM_HOSTS_UNSUPPORTED: &str = "VMHostsUnsupported";
/// `MachineDeployed` reason: a field asks for something capmaas does not
/// do (a VM); nothing is allocated.
pub const UNSUPPORTED_FIELD: &str = "UnsupportedField";
/// `MachineDeployed` reason: the bootstrap data is not cloud-config (the
/// Secret's `format` is `ignition`, say), which MAAS hands to cloud-init;
/// nothing is allocated, nothing deployed.
pub const UNSUPPORTED_BOOTSTRAP_FORMAT: &str = "UnsupportedBootstrapFormat";

/// `spec.network`: one address is claimed from each pool
/// (`IPAddressClaim` `<MaasMachine name>-<n>`, n counting from 0) and
/// linked STATIC on `interface` (default: the machine's boot interface),
/// in the MAAS subnet whose CIDR is the address's network and prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineNetwork {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(
        rename = "addressesFromPools",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub addresses_from_pools: Vec<super::ipam::PoolRef>,
}

/// Addresses by MAAS subnet (CIDR or name) and/or interface name; an
/// address must match every field given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}

/// One machine to allocate, named by MAAS system ID or hostname.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineSelector {
    #[serde(rename = "systemID", default, skip_serializing_if = "Option::is_none")]
    pub system_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

/// `spec.diskErase`: what MAAS does to the disks on release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskErase {
    None,
    /// Wipe the start and end of each disk (`quick_erase`).
    Quick,
    /// The drive's secure erase, else a full wipe (`secure_erase`).
    Secure,
    /// Overwrite every disk (`erase`).
    Full,
}

impl DiskErase {
    /// The value of `spec.diskErase` (the CRD allows only these).
    pub fn parse(value: &str) -> Option<DiskErase> {
        match value {
            "None" => Some(DiskErase::None),
            "Quick" => Some(DiskErase::Quick),
            "Secure" => Some(DiskErase::Secure),
            "Full" => Some(DiskErase::Full),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasMachineStatus {
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_state: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub machine_powered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(
        rename = "dnsAttached",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub dns_attached: bool,
    /// When (`metav1.Time`) the address of a deleting control plane was
    /// seen out of the API server's DNS record: its drain waits the
    /// record's TTL from then. In the status, where a tenant cannot write.
    #[serde(rename = "leftDNSAt", default, skip_serializing_if = "Option::is_none")]
    pub left_dns_at: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<MachineAddress>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// The labels capmaas put on the Node from MAAS's facts (zone, pool,
    /// tags): what to take off again when MAAS changes them. In status,
    /// where tenants do not write.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// `spec.nodeReuse`: the MAAS machine this object took again after
    /// another Machine of its MachineDeployment or control plane released
    /// it for reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_machine: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MachineAddress {
    #[serde(rename = "type", deserialize_with = "super::names::decode")]
    pub type_: super::names::Name,
    pub address: String,
}

impl MaasMachine {
    pub fn status(&self) -> MaasMachineStatus {
        self.status.clone().unwrap_or_default()
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or(&[])
    }

    /// The name of the Cluster API Machine that owns this one (by owner
    /// reference; set by Cluster API soon after creation).
    pub fn owner_machine_name(&self) -> Option<&str> {
        self.metadata
            .owner(capi::GROUP, capi::MACHINE_KIND)
            .map(|o| o.name.as_str())
    }

    /// Labelled `cluster.x-k8s.io/control-plane`, or owned by a Machine
    /// (`owner`, see [`owner_machine_name`](Self::owner_machine_name)) that
    /// is: without a control-plane provider stamping the label, only the
    /// Machine carries it.
    pub fn is_control_plane(&self, owner: Option<&capi::Machine>) -> bool {
        self.metadata.has_label(capi::CONTROL_PLANE_LABEL)
            || owner.is_some_and(capi::Machine::is_control_plane)
    }

    /// The first field asking for what capmaas does not do (a VM instead
    /// of a bare-metal machine), by its path; None when there is none.
    /// `cluster_lxd` is the MaasCluster's `spec.lxdConfig.enabled`.
    pub fn unsupported_field(&self, cluster_lxd: bool) -> Option<&'static str> {
        let spec = self.spec.options();
        // A virsh value other than `{enabled: <bool>}` says nothing we can read.
        let virsh_unreadable = spec.virsh.as_ref().is_some_and(|v| {
            !v.is_null() && !v.get("enabled").is_some_and(serde_json::Value::is_boolean)
        });
        if spec.parent.as_deref().is_some_and(|p| !p.is_empty()) && self.vm_kind().is_none() {
            Some("spec.parent")
        } else if virsh_unreadable {
            Some("spec.virsh")
        } else if self.metadata.has_annotation(VM_NAME_ANNOTATION) {
            Some("metadata.annotations[maas.spectrocloud.com/vm-name]")
        } else if cluster_lxd {
            Some("MaasCluster spec.lxdConfig.enabled")
        } else {
            None
        }
    }

    /// The VM host type (`lxd`, `virsh`) of the VM this object asks for
    /// instead of a bare-metal machine; None for a bare-metal machine.
    pub fn vm_kind(&self) -> Option<&'static str> {
        let spec = self.spec.options();
        if spec.lxd.as_ref().and_then(|l| l.enabled) == Some(true) {
            Some("lxd")
        } else if spec.virsh.as_ref().and_then(|v| v.get("enabled"))
            == Some(&serde_json::Value::Bool(true))
        {
            Some("virsh")
        } else {
            None
        }
    }

    /// The VM's disk in GB, as the Go provider sizes it: the larger of
    /// `minDiskSize` and `lxd.vmConfig.diskSize` (default 60).
    pub fn vm_disk_gb(&self) -> u64 {
        let disk_size = self
            .spec
            .options()
            .lxd
            .as_ref()
            .and_then(|l| l.vm_config.as_ref())
            .and_then(|c| c.get("diskSize"))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(DEFAULT_VM_DISK_GB);
        let min = self
            .spec
            .min_disk_size
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0);
        disk_size.max(min)
    }

    /// Which addresses are the machine's own: `spec.addressSelector`, else
    /// the Go fork's `spec.apiServerInterfaceName` as an interface selector.
    pub fn address_selector(&self) -> Option<AddressSelector> {
        let options = self.spec.options();
        options.address_selector.clone().or_else(|| {
            options
                .api_server_interface_name
                .as_ref()
                .filter(|name| !name.is_empty())
                .map(|name| AddressSelector {
                    subnet: None,
                    interface: Some(name.clone()),
                })
        })
    }

    pub fn is_provisioned(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.initialization.as_ref())
            .and_then(|i| i.provisioned)
            .unwrap_or(false)
    }

    /// The MAAS system id: `spec.systemID`, else the text after the last `/`
    /// of `spec.providerID` (objects written by older providers).
    pub fn system_id(&self) -> Option<&str> {
        if let Some(id) = self.spec.system_id.as_deref().filter(|s| !s.is_empty()) {
            return Some(id);
        }
        let provider_id = self.spec.provider_id.as_deref()?;
        let id = provider_id.rsplit('/').next()?;
        (!id.is_empty() && provider_id.contains("://")).then_some(id)
    }
}

/// `maas:///<zone>/<system-id>` (three slashes; the zone may be empty).
pub fn provider_id(zone: &str, system_id: &str) -> String {
    format!("maas:///{zone}/{system_id}")
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasMachineTemplate {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MaasMachineTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MaasMachineTemplateStatus>,
}

/// What a machine built from the template has at least, for the
/// cluster-autoscaler's scale from zero (Cluster API's optional
/// `status.capacity` and `status.nodeInfo` of infrastructure templates).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasMachineTemplateStatus {
    /// Kubernetes quantities by resource name: `cpu`, `memory`,
    /// `ephemeral-storage`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub capacity: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// `kubernetes.io/arch`: `amd64`, `arm64`, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub architecture: String,
    /// `kubernetes.io/os`: `linux` or `windows`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operating_system: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasMachineTemplateSpec {
    #[serde(default)]
    pub template: MaasMachineTemplateResource,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasMachineTemplateResource {
    #[serde(default)]
    pub spec: MaasMachineSpec,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_field_names_round_trip() {
        let input = serde_json::json!({
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"failureDomain": "z1", "systemID": "abc123", "providerID": "maas:///z1/abc123",
                     "resourcePool": "p", "minCPU": 2, "minMemory": 4096, "minDiskSize": 20,
                     "tags": ["a"], "image": "custom/u-2204", "deployInMemory": true},
            "status": {"ready": true, "initialization": {"provisioned": true}, "machineState": "Deployed",
                       "machinePowered": true, "hostname": "h", "dnsAttached": true,
                       "addresses": [{"type": "ExternalIP", "address": "10.0.0.1"}],
                       "failureReason": "UpdateMachineError", "failureMessage": "x"}
        });
        let m: MaasMachine = serde_json::from_value(input.clone()).unwrap();
        assert_eq!(m.spec.min_cpu, Some(2));
        assert_eq!(m.system_id(), Some("abc123"));
        assert!(m.is_provisioned());
        assert_eq!(serde_json::to_value(&m).unwrap(), input);
    }

    /// The options are boxed in memory only: every field reads and writes
    /// as before, in the same order, and a spec without options has no box.
    #[test]
    fn the_boxed_options_keep_the_wire_format() {
        let every_field = r#"{"failureDomain":"z1","systemID":"abc","providerID":"maas:///z1/abc","resourcePool":"p","minCPU":2,"minMemory":4096,"minDiskSize":20,"tags":["a"],"image":"u","deployInMemory":true,"notTags":["gpu"],"architecture":"amd64","storage":"root:100","interfaces":"eth0:space=s","notInZones":["z2"],"machineSelector":{"systemID":"abc","hostname":"h"},"failureDomainFallback":true,"nodeReuse":true,"diskErase":"Quick","disableSwap":false,"addressSelector":{"subnet":"10.0.0.0/24","interface":"eth1"},"network":{"interface":"eth1","addressesFromPools":[{"apiGroup":"ipam.cluster.x-k8s.io","kind":"InClusterIPPool","name":"pool"}]},"hweKernel":"hwe-24.04","enableKernelCrashDump":true,"enableHwSync":false,"lxd":{"enabled":true,"vmConfig":{"diskSize":60}},"parent":"host1","virsh":{"enabled":false},"apiServerInterfaceName":"eth1","staticIP":{"ip":"10.0.0.5","cidr":"10.0.0.0/24","gateway":"10.0.0.1","nameservers":["10.0.0.2"]}}"#;
        let spec: MaasMachineSpec = serde_json::from_str(every_field).unwrap();
        assert_eq!(spec.options().parent.as_deref(), Some("host1"));
        assert_eq!(spec.options().not_tags, ["gpu"]);
        assert_eq!(serde_json::to_string(&spec).unwrap(), every_field);

        let common = r#"{"failureDomain":"z1","systemID":"abc","providerID":"maas:///z1/abc","resourcePool":"p","minCPU":2,"minMemory":4096,"minDiskSize":20,"tags":["a"],"image":"u"}"#;
        let spec: MaasMachineSpec = serde_json::from_str(common).unwrap();
        assert!(spec.options.is_none(), "no box without options");
        assert_eq!(spec.options(), &MachineOptions::default());
        assert_eq!(serde_json::to_string(&spec).unwrap(), common);

        // One option set boxes them; unset again, it is not written.
        let mut spec = spec;
        spec.options_mut().hwe_kernel = Some("ga-22.04".into());
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["hweKernel"],
            "ga-22.04"
        );
        spec.options_mut().hwe_kernel = None;
        assert_eq!(serde_json::to_string(&spec).unwrap(), common);
        // Empty and null values decode as absent ones did, and are left
        // out as before.
        let empty: MaasMachineSpec =
            serde_json::from_str(r#"{"image":"u","notTags":[],"parent":null}"#).unwrap();
        assert!(empty.options.is_none());
        assert_eq!(serde_json::to_string(&empty).unwrap(), r#"{"image":"u"}"#);
        // Errors name the field as before.
        let err = serde_json::from_str::<MaasMachineSpec>(r#"{"notTags":"gpu"}"#).unwrap_err();
        assert!(err.to_string().contains("expected a sequence"), "{err}");
    }

    /// The informer cache holds an `Arc<MaasMachine>` per machine: 16
    /// bytes more, and musl's allocator adds a 4-byte header. Up to 648
    /// bytes that fits its 672-byte size class; the next one is 800.
    #[test]
    fn a_cached_maas_machine_stays_small() {
        let size = std::mem::size_of::<MaasMachine>();
        assert!(size <= 648, "MaasMachine is {size} bytes inline");
    }

    #[test]
    fn decoding_drops_what_is_not_read() {
        let whole = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasMachine",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u", "resourceVersion": "5", "generation": 3,
                         "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                         "annotations": {"cluster.x-k8s.io/cloned-from-name": "t"},
                         "finalizers": [FINALIZER],
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                                              "name": "m", "uid": "mu", "controller": true}],
                         "creationTimestamp": "2026-01-01T00:00:00Z", "generateName": "m-",
                         "managedFields": [{"manager": "capmaas"}]},
            "spec": {"image": "ubuntu/jammy", "systemID": "abc",
                     "lxd": {"enabled": false, "vmConfig": {"diskSize": 60}},
                     "somethingNewInSpec": true},
            "status": {"ready": true, "conditions": [{"type": "Ready", "status": "True", "reason": "R",
                                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                       "somethingNew": 1}
        });
        let m: MaasMachine = serde_json::from_value(whole).unwrap();
        assert!(m.metadata.has_finalizer(FINALIZER));
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({
                "metadata": {"name": "m", "namespace": "ns", "uid": "u", "resourceVersion": "5", "generation": 3,
                             "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                             "annotations": {"cluster.x-k8s.io/cloned-from-name": "t"},
                             "finalizers": [FINALIZER],
                             "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                                                  "name": "m", "uid": "mu"}]},
                "spec": {"image": "ubuntu/jammy", "systemID": "abc",
                         "lxd": {"enabled": false, "vmConfig": {"diskSize": 60}}},
                "status": {"ready": true, "conditions": [{"type": "Ready", "status": "True", "reason": "R",
                                                          "lastTransitionTime": "2026-01-01T00:00:00Z",
                                                          "message": ""}]}
            })
        );
    }

    #[test]
    fn system_id_falls_back_to_provider_id() {
        let mut m = MaasMachine::default();
        assert_eq!(m.system_id(), None);
        m.spec.provider_id = Some(provider_id("", "xyz789"));
        assert_eq!(m.spec.provider_id.as_deref(), Some("maas:////xyz789"));
        assert_eq!(m.system_id(), Some("xyz789"));
        m.spec.provider_id = Some("maas:///z1/".into());
        assert_eq!(m.system_id(), None);
    }

    #[test]
    fn api_server_interface_name_is_an_interface_selector() {
        let mut m = MaasMachine::default();
        assert_eq!(m.address_selector(), None);
        m.spec.options_mut().api_server_interface_name = Some("eth1".into());
        let by_name = AddressSelector {
            subnet: None,
            interface: Some("eth1".into()),
        };
        assert_eq!(m.address_selector(), Some(by_name));
        // capmaas's own field wins.
        let own = AddressSelector {
            subnet: Some("10.0.0.0/24".into()),
            interface: None,
        };
        m.spec.options_mut().address_selector = Some(own.clone());
        assert_eq!(m.address_selector(), Some(own));
    }

    #[test]
    fn go_vm_fields_are_named_by_path() {
        let m: MaasMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"},
            "spec": {"image": "u", "lxd": {"enabled": false}, "parent": "", "virsh": null}
        }))
        .unwrap();
        assert_eq!(m.unsupported_field(false), None);
        assert_eq!(
            m.unsupported_field(true),
            Some("MaasCluster spec.lxdConfig.enabled")
        );
        let vm: MaasMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"}, "spec": {"image": "u", "lxd": {"enabled": true}}
        }))
        .unwrap();
        assert_eq!(vm.unsupported_field(false), None);
        assert_eq!(vm.vm_kind(), Some("lxd"));
        assert_eq!(vm.vm_disk_gb(), DEFAULT_VM_DISK_GB);
        let virsh: MaasMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"},
            "spec": {"image": "u", "virsh": {"enabled": true}, "parent": "h1", "minDiskSize": 80}
        }))
        .unwrap();
        assert_eq!(
            (virsh.unsupported_field(false), virsh.vm_kind()),
            (None, Some("virsh"))
        );
        assert_eq!(
            virsh.vm_disk_gb(),
            80,
            "the larger of minDiskSize and diskSize"
        );
        let parent_alone: MaasMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"}, "spec": {"image": "u", "parent": "h1", "virsh": {"enabled": false}}
        }))
        .unwrap();
        assert_eq!(parent_alone.unsupported_field(false), Some("spec.parent"));
    }

    #[test]
    fn template_reads_the_machine_spec() {
        let t: MaasMachineTemplate = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "t"},
            "spec": {"template": {"spec": {"image": "ubuntu/jammy", "minCPU": 1, "minMemory": 1024}}}
        }))
        .unwrap();
        assert_eq!(t.spec.template.spec.image, "ubuntu/jammy");
    }
}
