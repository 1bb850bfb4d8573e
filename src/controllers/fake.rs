//! In-memory fakes of the ports, for unit tests of the reconcile steps.
//!
//! `FakeKube` stores objects as JSON and applies merge patches the way the
//! API server does (including the resourceVersion precondition), so a test
//! can run a reconcile, then another on the result, like the real loop.
//! `FakeMaas` is a tiny MAAS: a pool of machines, allocation by constraints,
//! deploy/release/power state transitions, DNS records, boot resources; each
//! call is logged, and failures can be injected. `FakeView` is the MAAS
//! watch's view of it, listed when a test says so (`World::watched`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::maas_view::{MaasView, WatchView};
use super::ports::CredentialsError;
use super::ports::*;
use super::{Context, Options};
use crate::api::capi::{self, Cluster};
use crate::api::ipam::{IpAddress, IpAddressClaim};
use crate::api::{Condition, MaasCluster, MaasMachine, MaasRemediation};
use crate::kube;
use crate::maas;
use crate::maas::watch::{ListedMachine, Lookup};
use crate::maas::{
    AllocateRequest, BootResource, DeployRequest, DnsResource, IpReservation, MachineFilter,
    MachineStatus, PowerState, ReleaseRequest, ReserveFrom,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap()
}

#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub kind: Kind,
    pub name: String,
    pub status: bool,
    pub patch: Value,
}

type SecretData = BTreeMap<String, Vec<u8>>;
/// (kind, namespace, name)
type StoredKey = (&'static str, String, String);

#[derive(Default)]
pub struct FakeKube {
    pub objects: Mutex<HashMap<StoredKey, Value>>,
    pub secrets: Mutex<HashMap<(String, String), SecretData>>,
    pub writes: Mutex<Vec<Write>>,
    pub events: Mutex<Vec<(String, EventType, String, String)>>,
    pub next_rv: Mutex<u64>,
    /// Serve this object instead of the stored one once (a stale cache).
    pub stale: Mutex<HashMap<StoredKey, Value>>,
    /// IPAddressClaim creates and deletes, in order (`create <name>`).
    pub ipam_calls: Mutex<Vec<String>>,
}

const CLUSTER: &str = "Cluster";
const MACHINE: &str = "Machine";
pub const IP_ADDRESS_CLAIM: &str = "IPAddressClaim";
pub const IP_ADDRESS: &str = "IPAddress";

impl FakeKube {
    pub fn put(&self, kind: &'static str, obj: Value) {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let mut obj = obj;
        obj["metadata"]["namespace"] = json!(ns);
        if obj["metadata"]["resourceVersion"].is_null() {
            obj["metadata"]["resourceVersion"] = json!(self.bump());
        }
        lock(&self.objects).insert((kind, ns, name), obj);
    }

    pub fn get(&self, kind: &'static str, ns: &str, name: &str) -> Option<Value> {
        lock(&self.objects)
            .get(&(kind, ns.to_string(), name.to_string()))
            .cloned()
    }

    pub fn remove(&self, kind: &'static str, ns: &str, name: &str) {
        lock(&self.objects).remove(&(kind, ns.to_string(), name.to_string()));
    }

    pub fn put_secret(&self, ns: &str, name: &str, key: &str, value: &[u8]) {
        lock(&self.secrets)
            .entry((ns.into(), name.into()))
            .or_default()
            .insert(key.into(), value.to_vec());
    }

    pub fn writes(&self) -> Vec<Write> {
        lock(&self.writes).clone()
    }

    pub fn clear_writes(&self) {
        lock(&self.writes).clear();
        lock(&self.events).clear();
    }

    pub fn event_reasons(&self) -> Vec<String> {
        lock(&self.events).iter().map(|e| e.2.clone()).collect()
    }

    fn bump(&self) -> String {
        let mut rv = lock(&self.next_rv);
        *rv += 1;
        rv.to_string()
    }

    fn read<T: serde::de::DeserializeOwned>(
        &self,
        kind: &'static str,
        ns: &str,
        name: &str,
    ) -> Option<Arc<T>> {
        let key = (kind, ns.to_string(), name.to_string());
        let value = lock(&self.stale)
            .remove(&key)
            .or_else(|| lock(&self.objects).get(&key).cloned())?;
        Some(Arc::new(serde_json::from_value(value).unwrap()))
    }

    fn apply(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<String, kube::Error> {
        lock(&self.writes).push(Write {
            kind,
            name: name.into(),
            status,
            patch: patch.clone(),
        });
        let key = (kind.as_str(), ns.to_string(), name.to_string());
        let mut objects = lock(&self.objects);
        let obj = stored(&mut objects, &key)?;
        let mut patch = patch.clone();
        if let Some(rv) = patch["metadata"]["resourceVersion"].as_str() {
            if rv != obj["metadata"]["resourceVersion"].as_str().unwrap_or("") {
                return Err(kube::Error::Conflict {
                    request: format!("PATCH {name}"),
                    message: "the object has been modified".into(),
                });
            }
            patch["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
        }
        // A status patch changes only status; a main-resource patch never does.
        let patch = if status {
            json!({"status": patch.get("status").cloned().unwrap_or(Value::Null)})
        } else {
            if let Some(p) = patch.as_object_mut() {
                p.remove("status");
            }
            patch
        };
        crate::kube::merge_patch::apply(obj, &patch);
        let rv = self.bump();
        obj["metadata"]["resourceVersion"] = json!(rv);
        // The API server deletes an object whose deletion is pending once its
        // last finalizer is gone.
        let deleting = !obj["metadata"]["deletionTimestamp"].is_null();
        let no_finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty());
        if deleting && no_finalizers {
            objects.remove(&key);
        }
        Ok(rv)
    }
}

/// The stored object a write is for, or the API server's NotFound.
fn stored<'a>(
    objects: &'a mut HashMap<StoredKey, Value>,
    key: &StoredKey,
) -> Result<&'a mut Value, kube::Error> {
    let (kind, ns, name) = key;
    objects.get_mut(key).ok_or_else(|| kube::Error::NotFound {
        request: format!("PATCH {kind} {ns}/{name}"),
        message: format!("{kind} {name:?} not found"),
    })
}

impl KubeApi for FakeKube {
    fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>> {
        self.read(CLUSTER, namespace, name)
    }
    fn machine(&self, namespace: &str, name: &str) -> Option<Arc<capi::Machine>> {
        self.read(MACHINE, namespace, name)
    }
    fn maas_cluster(&self, namespace: &str, name: &str) -> Option<Arc<MaasCluster>> {
        self.read(Kind::MaasCluster.as_str(), namespace, name)
    }
    fn maas_machine(&self, namespace: &str, name: &str) -> Option<Arc<MaasMachine>> {
        self.read(Kind::MaasMachine.as_str(), namespace, name)
    }
    fn maas_remediation(&self, namespace: &str, name: &str) -> Option<Arc<MaasRemediation>> {
        self.read(Kind::MaasRemediation.as_str(), namespace, name)
    }
    fn maas_clusters(&self) -> Vec<Arc<MaasCluster>> {
        lock(&self.objects)
            .iter()
            .filter(|((kind, _, _), _)| *kind == Kind::MaasCluster.as_str())
            .map(|(_, v)| Arc::new(serde_json::from_value(v.clone()).unwrap()))
            .collect()
    }
    fn maas_machines_of_cluster(&self, namespace: &str, cluster: &str) -> Vec<Arc<MaasMachine>> {
        let objects = lock(&self.objects);
        let mut out: Vec<Arc<MaasMachine>> = objects
            .iter()
            .filter(|((kind, ns, _), v)| {
                *kind == Kind::MaasMachine.as_str()
                    && ns == namespace
                    && v["metadata"]["labels"][crate::api::capi::CLUSTER_NAME_LABEL]
                        == json!(cluster)
            })
            .map(|(_, v)| Arc::new(serde_json::from_value(v.clone()).unwrap()))
            .collect();
        out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        out
    }
    fn machines_of_maas_machine(
        &self,
        namespace: &str,
        maas_machine: &str,
    ) -> Vec<Arc<capi::Machine>> {
        lock(&self.objects)
            .iter()
            .filter(|((kind, ns, _), v)| {
                *kind == MACHINE
                    && ns == namespace
                    && v["spec"]["infrastructureRef"]["kind"] == json!("MaasMachine")
                    && v["spec"]["infrastructureRef"]["name"] == json!(maas_machine)
            })
            .map(|(_, v)| Arc::new(serde_json::from_value(v.clone()).unwrap()))
            .collect()
    }
    fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, kube::Error> {
        Ok(lock(&self.secrets)
            .get(&(namespace.into(), name.into()))
            .and_then(|s| s.get(key).cloned()))
    }
    fn ip_address_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<IpAddressClaim>, kube::Error> {
        Ok(self
            .read(IP_ADDRESS_CLAIM, namespace, name)
            .map(Arc::unwrap_or_clone))
    }
    fn create_ip_address_claim(&self, namespace: &str, claim: &Value) -> Result<(), kube::Error> {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default();
        if self.get(IP_ADDRESS_CLAIM, namespace, name).is_some() {
            return Err(kube::Error::AlreadyExists {
                request: format!("POST ipaddressclaims/{name}"),
                message: format!("ipaddressclaims {name:?} already exists"),
            });
        }
        lock(&self.ipam_calls).push(format!("create {name}"));
        self.put(IP_ADDRESS_CLAIM, claim.clone());
        Ok(())
    }
    fn delete_ip_address_claim(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        lock(&self.ipam_calls).push(format!("delete {name}"));
        self.remove(IP_ADDRESS_CLAIM, namespace, name);
        Ok(())
    }
    fn ip_address(&self, namespace: &str, name: &str) -> Result<Option<IpAddress>, kube::Error> {
        Ok(self
            .read(IP_ADDRESS, namespace, name)
            .map(Arc::unwrap_or_clone))
    }
    fn patch(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<String, kube::Error> {
        self.apply(kind, namespace, name, patch, false)
    }
    fn patch_status(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<String, kube::Error> {
        self.apply(kind, namespace, name, patch, true)
    }
    /// Server-side apply of one entry of a list-map keyed by type.
    fn apply_machine_condition(
        &self,
        namespace: &str,
        name: &str,
        condition: &Condition,
    ) -> Result<(), kube::Error> {
        let key = (MACHINE, namespace.to_string(), name.to_string());
        let mut objects = lock(&self.objects);
        let machine = stored(&mut objects, &key)?;
        let entry = serde_json::to_value(condition).unwrap();
        let mut conditions: Vec<Value> = machine["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| c["type"] != entry["type"]);
        conditions.push(entry);
        machine["status"]["conditions"] = Value::Array(conditions);
        Ok(())
    }
    fn event(&self, target: &EventTarget, type_: EventType, reason: &str, message: &str) {
        lock(&self.events).push((target.name.clone(), type_, reason.into(), message.into()));
    }
}

/// Which call fails next, and how.
#[derive(Default)]
pub struct Faults {
    /// `op` name → error returned (once) instead of doing the call.
    pub once: HashMap<&'static str, maas::Error>,
    /// Allocate succeeds in MAAS but the answer is lost (crash/timeout).
    pub lose_allocate_answer: bool,
    /// Deploy starts in MAAS but the answer is lost.
    pub lose_deploy_answer: bool,
    /// An address is reserved in MAAS but the answer is lost.
    pub lose_reserve_answer: bool,
}

#[derive(Default)]
pub struct FakeMaas {
    pub machines: Mutex<BTreeMap<String, maas::Machine>>,
    pub agent_names: Mutex<HashMap<String, String>>,
    pub dns: Mutex<BTreeMap<i64, DnsResource>>,
    pub images: Mutex<Vec<BootResource>>,
    pub zones: Mutex<Vec<String>>,
    pub calls: Mutex<Vec<String>>,
    pub faults: Mutex<Faults>,
    pub deploys: Mutex<Vec<(String, DeployRequest)>>,
    pub releases: Mutex<Vec<(String, ReleaseRequest)>>,
    /// The user requests MAAS logged (allocate, release), oldest first.
    pub events: Mutex<Vec<maas::Event>>,
    pub allocations: Mutex<Vec<AllocateRequest>>,
    pub subnets: Mutex<Vec<maas::Subnet>>,
    next_dns_id: Mutex<i64>,
    /// This user's address reservations (`ipaddresses/?op=reserve`).
    pub reservations: Mutex<Vec<IpReservation>>,
    /// Addresses MAAS uses otherwise (machines, other users' reservations).
    pub addresses_in_use: Mutex<HashSet<String>>,
    /// Subnets (by the name or CIDR a spec gives) and their free addresses,
    /// lowest first.
    pub free_addresses: Mutex<BTreeMap<String, Vec<String>>>,
    next_link_id: Mutex<i64>,
    /// The MAAS user this fake's key authenticates as.
    pub user: String,
    /// What `version/` answers; empty: "3.6.0".
    pub version: Mutex<String>,
    /// VM hosts (`vm-hosts/`); a version 3.9 or later answers 410.
    pub vm_hosts: Mutex<Vec<maas::VmHost>>,
    pub composed: Mutex<Vec<(i64, maas::ComposeRequest)>>,
    pub deleted: Mutex<Vec<String>>,
}

impl FakeMaas {
    /// What `version/` answers, without counting a call.
    fn version_info(&self) -> maas::VersionInfo {
        let version = lock(&self.version).clone();
        maas::VersionInfo {
            version: if version.is_empty() {
                "3.6.0".into()
            } else {
                version
            },
            subversion: String::new(),
            capabilities: Vec::new(),
        }
    }

    pub fn with_machines(n: usize) -> FakeMaas {
        let maas = FakeMaas {
            user: "capmaas".into(),
            ..FakeMaas::default()
        };
        for i in 0..n {
            maas.add_ready(&format!("sys{i:03}"), &format!("host-{i}"), "az1", 4, 8192);
        }
        *lock(&maas.zones) = vec!["az1".into(), "az2".into()];
        *lock(&maas.subnets) = vec![
            maas::Subnet {
                id: 1,
                name: "pxe".into(),
                cidr: "10.0.0.0/24".into(),
                gateway_ip: Some("10.0.0.1".into()),
            },
            maas::Subnet {
                id: 2,
                name: "public".into(),
                cidr: "192.168.50.0/24".into(),
                gateway_ip: Some("192.168.50.1".into()),
            },
        ];
        *lock(&maas.images) = vec![
            BootResource {
                id: 1,
                kind: "Synced".into(),
                name: "ubuntu/jammy".into(),
                architecture: "amd64/ga-22.04".into(),
                ..Default::default()
            },
            BootResource {
                id: 2,
                kind: "Uploaded".into(),
                name: "u-2204-0-k-1264-0".into(),
                architecture: "amd64/generic".into(),
                ..Default::default()
            },
        ];
        maas
    }

    pub fn add_ready(&self, system_id: &str, hostname: &str, zone: &str, cpus: u32, memory: u64) {
        let n: i64 = system_id.trim_start_matches("sys").parse().unwrap_or(0);
        let boot = maas::Interface { id: n * 10 };
        // An AUTO link on subnet 1, as commissioning leaves it.
        let interfaces = vec![maas::MachineInterface {
            id: n * 10,
            name: "eth0".into(),
            links: vec![maas::InterfaceLink {
                id: 1000 + n,
                mode: maas::LinkMode::Auto,
                ip: None,
                subnet_id: Some(1),
                ..maas::InterfaceLink::default()
            }],
        }];
        let host = maas::Machine {
            boot_interface: Some(boot),
            interfaces,
            system_id: system_id.into(),
            hostname: hostname.into(),
            fqdn: format!("{hostname}.maas"),
            status: MachineStatus::Ready,
            status_name: "Ready".into(),
            power_state: PowerState::Off,
            zone: zone.into(),
            pool: "default".into(),
            cpu_count: cpus,
            memory,
            swap_size: Some(1 << 30),
            ..maas::Machine::default()
        };
        lock(&self.machines).insert(system_id.into(), host);
    }

    pub fn host(&self, system_id: &str) -> maas::Machine {
        lock(&self.machines)[system_id].clone()
    }

    /// Changes a machine as an admin would in MAAS (zone, pool, tags).
    pub fn edit_host(&self, system_id: &str, f: impl FnOnce(&mut maas::Machine)) {
        if let Some(host) = lock(&self.machines).get_mut(system_id) {
            f(host);
        }
    }

    pub fn set_state(&self, system_id: &str, status: MachineStatus, name: &str, power: PowerState) {
        let mut machines = lock(&self.machines);
        let host = machines.get_mut(system_id).unwrap();
        host.status = status;
        host.status_name = name.into();
        host.power_state = power;
    }

    /// Finishes every deployment in progress.
    pub fn finish_deployments(&self) {
        for host in lock(&self.machines).values_mut() {
            if host.status == MachineStatus::Deploying {
                host.status = MachineStatus::Deployed;
                host.status_name = "Deployed".into();
            }
        }
    }

    /// The next `op` call fails as MAAS answering `status` with `body`.
    pub fn fail_once(&self, op: &'static str, status: u16, body: &str) {
        lock(&self.faults)
            .once
            .insert(op, maas::Error::from_response(op, status, body, None));
    }

    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    pub fn clear_calls(&self) {
        lock(&self.calls).clear();
    }

    pub fn allocated(&self) -> Vec<String> {
        lock(&self.machines)
            .values()
            .filter(|h| h.status != MachineStatus::Ready)
            .map(|h| h.system_id.clone())
            .collect()
    }

    pub fn add_dns(&self, fqdn: &str, ips: &[&str]) -> i64 {
        let mut id = lock(&self.next_dns_id);
        *id += 1;
        let record = DnsResource {
            id: *id,
            fqdn: fqdn.into(),
            address_ttl: Some(10),
            ip_addresses: ips.iter().map(|s| s.to_string()).collect(),
            ..DnsResource::default()
        };
        lock(&self.dns).insert(*id, record);
        *id
    }

    pub fn dns_records(&self) -> Vec<DnsResource> {
        lock(&self.dns).values().cloned().collect()
    }

    /// The addresses this user has reserved, sorted.
    pub fn reserved_ips(&self) -> Vec<String> {
        let mut ips: Vec<String> = lock(&self.reservations)
            .iter()
            .map(|r| r.ip.clone())
            .collect();
        ips.sort();
        ips
    }

    /// A reservation made by hand (outside capmaas) for this user.
    pub fn add_reservation(&self, ip: &str) {
        lock(&self.reservations).push(IpReservation {
            ip: ip.into(),
            alloc_type_name: "User reserved".into(),
            ..IpReservation::default()
        });
    }

    fn call(&self, op: &'static str, detail: &str) -> Result<(), maas::Error> {
        lock(&self.calls).push(format!("{op} {detail}").trim().to_string());
        match lock(&self.faults).once.remove(op) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn interface_editable(host: &maas::Machine, operation: &str) -> Result<(), maas::Error> {
        match host.status {
            MachineStatus::New
            | MachineStatus::Ready
            | MachineStatus::Allocated
            | MachineStatus::Broken => Ok(()),
            _ => Err(maas::Error::from_response(
                "interface",
                409,
                &format!(
                    "Cannot {operation} interface because the machine is not New, Ready, \
                     Allocated, or Broken."
                ),
                None,
            )),
        }
    }

    /// Logs a user request as MAAS's `_register_request_event` does.
    pub fn request_event(&self, system_id: &str, kind: &str, comment: Option<&str>) {
        let mut events = lock(&self.events);
        let description = match comment.filter(|c| !c.is_empty()) {
            Some(c) => format!("({}) - {c}", self.user),
            None => format!("({})", self.user),
        };
        let id = i64::try_from(events.len()).unwrap_or(0) + 1;
        events.push(maas::Event {
            id,
            system_id: system_id.into(),
            hostname: String::new(),
            username: self.user.clone(),
            level: maas::EventLevel::Debug,
            created: String::new(),
            kind: kind.into(),
            description,
        });
    }

    fn not_found(op: &'static str) -> maas::Error {
        maas::Error::from_response(op, 404, "No Machine matches the given query.", None)
    }

    /// `op` on one machine: recorded (and failed when told to), then `edit`
    /// under the machines' lock; an unknown machine is MAAS's 404.
    fn on_host<T>(
        &self,
        op: &'static str,
        system_id: &str,
        edit: impl FnOnce(&mut maas::Machine) -> Result<T, maas::Error>,
    ) -> Result<T, maas::Error> {
        self.call(op, system_id)?;
        let mut machines = lock(&self.machines);
        let host = machines
            .get_mut(system_id)
            .ok_or_else(|| Self::not_found(op))?;
        edit(host)
    }
}

impl MaasApi for FakeMaas {
    fn machine(&self, system_id: &str) -> Result<maas::Machine, maas::Error> {
        self.call("machine", system_id)?;
        lock(&self.machines)
            .get(system_id)
            .cloned()
            .ok_or_else(|| Self::not_found("machine"))
    }

    /// As MAAS, by agent name and owner (what the controllers ask by).
    fn machines(&self, filter: &MachineFilter) -> Result<Vec<maas::Machine>, maas::Error> {
        match filter.hostnames.first() {
            Some(hostname) => self.call("machines_by_hostname", hostname)?,
            None => self.call("machines_by_agent_name", "")?,
        }
        let agents = lock(&self.agent_names);
        Ok(lock(&self.machines)
            .values()
            .filter(|h| {
                filter
                    .agent_name
                    .as_ref()
                    .is_none_or(|agent_name| agents.get(&h.system_id) == Some(agent_name))
                    && filter
                        .owner
                        .as_ref()
                        .is_none_or(|o| h.owner.as_ref() == Some(o))
                    && (filter.hostnames.is_empty() || filter.hostnames.contains(&h.hostname))
            })
            .cloned()
            .collect())
    }

    fn allocate(&self, req: &AllocateRequest) -> Result<maas::Machine, maas::Error> {
        self.call("allocate", "")?;
        lock(&self.allocations).push(req.clone());
        let mut machines = lock(&self.machines);
        let candidate = machines.values_mut().find(|h| {
            h.status == MachineStatus::Ready
                && req.system_id.as_ref().is_none_or(|id| &h.system_id == id)
                && req.cpu_count.is_none_or(|c| h.cpu_count >= c)
                && req.mem.is_none_or(|m| h.memory >= m)
                && req.zone.as_ref().is_none_or(|z| &h.zone == z)
                && req.tags.iter().all(|t| h.tag_names.contains(t))
                && req.system_id.as_ref().is_none_or(|s| &h.system_id == s)
        });
        let Some(host) = candidate else {
            return Err(maas::Error::from_response(
                "allocate",
                409,
                &format!(
                    "No available machine matches constraints: cpu_count={:?} mem={:?}",
                    req.cpu_count, req.mem
                ),
                None,
            ));
        };
        host.status = MachineStatus::Allocated;
        host.status_name = "Allocated".into();
        host.owner = Some(self.user.clone());
        if let Some(agent) = &req.agent_name {
            lock(&self.agent_names).insert(host.system_id.clone(), agent.clone());
        }
        let host = host.clone();
        drop(machines);
        self.request_event(
            &host.system_id,
            "User acquiring node",
            req.comment.as_deref(),
        );
        if std::mem::take(&mut lock(&self.faults).lose_allocate_answer) {
            return Err(maas::Error::new(
                "allocate",
                maas::ErrorKind::Timeout,
                "timed out reading the response",
            ));
        }
        Ok(host)
    }

    /// Only `swap_size=0`, the one field the controllers set.
    fn update_machine(
        &self,
        system_id: &str,
        fields: &[(&str, &str)],
    ) -> Result<maas::Machine, maas::Error> {
        assert_eq!(fields, [("swap_size", "0")], "the fake sets no other field");
        self.on_host("disable_swap", system_id, |host| {
            host.swap_size = Some(0);
            Ok(host.clone())
        })
    }

    fn deploy(&self, system_id: &str, req: &DeployRequest) -> Result<maas::Machine, maas::Error> {
        self.on_host("deploy", system_id, |host| {
            if !matches!(host.status, MachineStatus::Allocated | MachineStatus::Ready) {
                return Err(maas::Error::from_response(
                    "deploy",
                    409,
                    &format!(
                        "Can't deploy a machine that is in the '{}' state",
                        host.status_name
                    ),
                    None,
                ));
            }
            host.status = MachineStatus::Deploying;
            host.status_name = "Deploying".into();
            host.power_state = PowerState::On;
            let n = system_id
                .trim_start_matches("sys")
                .parse::<u32>()
                .unwrap_or(0);
            let static_ips: Vec<String> = host
                .interfaces
                .iter()
                .flat_map(|i| &i.links)
                .filter(|l| l.mode == maas::LinkMode::Static)
                .filter_map(|l| l.ip.clone())
                .collect();
            host.ip_addresses = if static_ips.is_empty() {
                vec![format!("10.0.0.{}", n + 10)]
            } else {
                static_ips
            };
            if let Some(agent) = &req.agent_name {
                lock(&self.agent_names).insert(system_id.into(), agent.clone());
            }
            lock(&self.deploys).push((system_id.into(), req.clone()));
            if std::mem::take(&mut lock(&self.faults).lose_deploy_answer) {
                return Err(maas::Error::new(
                    "deploy",
                    maas::ErrorKind::Timeout,
                    "timed out reading the response",
                ));
            }
            Ok(host.clone())
        })
    }

    fn release(&self, system_id: &str, req: &ReleaseRequest) -> Result<maas::Machine, maas::Error> {
        let host = self.on_host("release", system_id, |host| {
            host.status = MachineStatus::Ready;
            host.status_name = "Ready".into();
            host.power_state = PowerState::Off;
            host.ip_addresses.clear();
            host.owner = None;
            host.owner_data.clear();
            lock(&self.agent_names).remove(system_id);
            lock(&self.releases).push((system_id.into(), req.clone()));
            Ok(host.clone())
        })?;
        self.request_event(system_id, "User releasing node", req.comment.as_deref());
        Ok(host)
    }

    fn events(&self, query: &maas::EventQuery) -> Result<Vec<maas::Event>, maas::Error> {
        let first = query.system_ids.first().map_or("", String::as_str);
        self.call("events", first)?;
        Ok(lock(&self.events)
            .iter()
            .rev()
            .filter(|e| query.system_ids.is_empty() || query.system_ids.contains(&e.system_id))
            .cloned()
            .collect())
    }

    fn power_on_with_comment(
        &self,
        system_id: &str,
        _comment: Option<&str>,
    ) -> Result<maas::Machine, maas::Error> {
        self.on_host("power_on", system_id, |host| {
            host.power_state = PowerState::On;
            Ok(host.clone())
        })
    }

    fn power_off_with_comment(
        &self,
        system_id: &str,
        _comment: Option<&str>,
    ) -> Result<maas::Machine, maas::Error> {
        self.on_host("power_off", system_id, |host| {
            host.power_state = PowerState::Off;
            Ok(host.clone())
        })
    }

    /// As MAAS 3.4.8 (and the simulator): a machine still ours is released
    /// on the way (owner and agent name cleared; owner data too when it
    /// was off, else the release never finishes), then Broken.
    fn mark_broken(&self, system_id: &str, comment: &str) -> Result<maas::Machine, maas::Error> {
        self.on_host("mark_broken", system_id, |host| {
            host.status = MachineStatus::Broken;
            host.status_name = "Broken".into();
            host.status_message = Some(comment.into());
            host.owner = None;
            if host.power_state == PowerState::Off {
                host.owner_data.clear();
            }
            lock(&self.agent_names).remove(system_id);
            Ok(host.clone())
        })
    }

    fn boot_resources(&self) -> Result<Vec<BootResource>, maas::Error> {
        self.call("boot_resources", "")?;
        Ok(lock(&self.images).clone())
    }

    fn version(&self) -> Result<maas::VersionInfo, maas::Error> {
        self.call("version", "")?;
        Ok(self.version_info())
    }

    fn zones(&self) -> Result<Vec<maas::Zone>, maas::Error> {
        self.call("zones", "")?;
        Ok(lock(&self.zones)
            .iter()
            .map(|name| maas::Zone {
                name: name.clone(),
                ..maas::Zone::default()
            })
            .collect())
    }

    fn vm_hosts(&self) -> Result<Vec<maas::VmHost>, maas::Error> {
        self.call("vm_hosts", "")?;
        let gone = maas::MaasVersion::parse(&self.version_info().version)
            .is_some_and(|v| v >= maas::MaasVersion::new(3, 9, 0));
        if gone {
            return Err(maas::Error::from_response(
                "vmhosts_list",
                410,
                "Gone",
                None,
            ));
        }
        Ok(lock(&self.vm_hosts).clone())
    }

    /// A VM as MAAS composes one: commissioning, unowned, on its host
    /// (whose free resources shrink).
    fn compose(&self, host_id: i64, req: &maas::ComposeRequest) -> Result<String, maas::Error> {
        self.call("compose_vm", &req.hostname)?;
        lock(&self.composed).push((host_id, req.clone()));
        let mut hosts = lock(&self.vm_hosts);
        let Some(host) = hosts.iter_mut().find(|h| h.id == host_id) else {
            return Err(maas::Error::from_response(
                "vmhost_compose",
                404,
                "No Pod matches the given query.",
                None,
            ));
        };
        host.free_cores -= f64::from(req.cores);
        host.free_memory -= req.memory_mib as f64;
        host.free_storage -= req.disk_gb as f64 * 1e9;
        let system_id = format!("vm{:03}", lock(&self.composed).len());
        let vm = maas::Machine {
            system_id: system_id.clone(),
            hostname: req.hostname.clone(),
            fqdn: format!("{}.maas", req.hostname),
            status: MachineStatus::Commissioning,
            status_name: "Commissioning".into(),
            power_type: host.kind.clone(),
            zone: host.zone.clone(),
            pool: "default".into(),
            cpu_count: req.cores,
            memory: req.memory_mib,
            pod: Some(host.name.clone()),
            ..maas::Machine::default()
        };
        lock(&self.machines).insert(system_id.clone(), vm);
        Ok(system_id)
    }

    fn delete_machine(&self, system_id: &str) -> Result<(), maas::Error> {
        self.call("delete_machine", system_id)?;
        lock(&self.machines)
            .remove(system_id)
            .ok_or_else(|| Self::not_found("machine_delete"))?;
        lock(&self.agent_names).remove(system_id);
        lock(&self.deleted).push(system_id.into());
        Ok(())
    }

    fn dns_resources(&self, fqdn: &str) -> Result<Vec<DnsResource>, maas::Error> {
        self.call("dns_resources", fqdn)?;
        Ok(lock(&self.dns)
            .values()
            .filter(|r| r.fqdn == fqdn)
            .cloned()
            .collect())
    }

    fn create_dns_resource(
        &self,
        fqdn: &str,
        ttl: u32,
        ips: &[String],
    ) -> Result<DnsResource, maas::Error> {
        self.call("create_dns_resource", fqdn)?;
        let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
        let id = self.add_dns(fqdn, &ips);
        let mut dns = lock(&self.dns);
        let record = dns.get_mut(&id).unwrap();
        record.address_ttl = Some(ttl);
        Ok(record.clone())
    }

    /// As MAAS: on the record of that name, made (without addresses) if
    /// there is none.
    fn create_dns_txt(&self, fqdn: &str, rrdata: &str) -> Result<(), maas::Error> {
        self.call("create_dns_txt", &format!("{fqdn} {rrdata}"))?;
        let exists = lock(&self.dns).values().any(|r| r.fqdn == fqdn);
        if !exists {
            self.add_dns(fqdn, &[]);
        }
        let mut dns = lock(&self.dns);
        for record in dns.values_mut().filter(|r| r.fqdn == fqdn) {
            record.resource_records.push(maas::DnsRecordData {
                id: 1,
                rrtype: "TXT".into(),
                rrdata: rrdata.into(),
            });
        }
        Ok(())
    }

    fn set_dns_resource_ips(&self, id: i64, ips: &[String]) -> Result<DnsResource, maas::Error> {
        self.call("set_dns_resource_ips", &ips.join(" "))?;
        let mut dns = lock(&self.dns);
        let record = dns.get_mut(&id).ok_or_else(|| {
            maas::Error::from_response(
                "set_dns",
                404,
                "No DNSResource matches the given query.",
                None,
            )
        })?;
        record.ip_addresses = ips.to_vec();
        Ok(record.clone())
    }

    fn delete_dns_resource(&self, id: i64) -> Result<(), maas::Error> {
        self.call("delete_dns_resource", &id.to_string())?;
        lock(&self.dns).remove(&id).map(|_| ()).ok_or_else(|| {
            maas::Error::from_response(
                "delete_dns",
                404,
                "No DNSResource matches the given query.",
                None,
            )
        })
    }

    fn ip_reservations(&self, ip: Option<&str>) -> Result<Vec<IpReservation>, maas::Error> {
        self.call("ip_reservations", ip.unwrap_or_default())?;
        Ok(lock(&self.reservations)
            .iter()
            .filter(|r| ip.is_none_or(|ip| r.ip == ip))
            .cloned()
            .collect())
    }

    /// As MAAS: an address anyone holds is "already in use" (404), an
    /// unknown subnet is a 400, a full one a 503.
    fn reserve_ip_marked(
        &self,
        from: &ReserveFrom,
        mark: &str,
    ) -> Result<IpReservation, maas::Error> {
        let detail = match from {
            ReserveFrom::Address(ip) => format!("ip={ip}"),
            ReserveFrom::Subnet(subnet) => format!("subnet={subnet}"),
        };
        self.call("reserve_ip", &detail)?;
        let taken = |ip: &str| {
            lock(&self.addresses_in_use).contains(ip)
                || lock(&self.reservations).iter().any(|r| r.ip == ip)
        };
        let ip = match from {
            ReserveFrom::Address(ip) if taken(ip) => {
                return Err(maas::Error::from_response(
                    "reserve_ip",
                    404,
                    &format!("The IP address {ip} is already in use."),
                    None,
                ))
            }
            ReserveFrom::Address(ip) => ip.clone(),
            ReserveFrom::Subnet(subnet) => {
                let Some(free) = lock(&self.free_addresses).get(subnet).cloned() else {
                    return Err(maas::Error::from_response(
                        "reserve_ip",
                        400,
                        &format!("Unable to identify subnet: {subnet}."),
                        None,
                    ));
                };
                match free.into_iter().find(|ip| !taken(ip)) {
                    Some(ip) => ip,
                    None => {
                        return Err(maas::Error::from_response(
                            "reserve_ip",
                            503,
                            &format!("No more IPs available in subnet: {subnet}."),
                            None,
                        ))
                    }
                }
            }
        };
        let reservation = IpReservation {
            ip,
            alloc_type_name: "User reserved".into(),
            interface_set: vec![maas::ReservationInterface {
                mac_address: mark.to_string(),
            }],
            ..IpReservation::default()
        };
        lock(&self.reservations).push(reservation.clone());
        if lock(&self.faults).lose_reserve_answer {
            lock(&self.faults).lose_reserve_answer = false;
            return Err(maas::Error::from_response("reserve_ip", 504, "", None));
        }
        Ok(reservation)
    }

    fn release_ip(&self, ip: &str) -> Result<(), maas::Error> {
        self.call("release_ip", ip)?;
        let mut reservations = lock(&self.reservations);
        match reservations.iter().position(|r| r.ip == ip) {
            Some(i) => {
                reservations.remove(i);
                Ok(())
            }
            None => Err(maas::Error::from_response(
                "release_ip",
                400,
                &format!(
                    "IP address {ip} does not exist, is not the correct type of address, \
                     or does not belong to the requesting user."
                ),
                None,
            )),
        }
    }

    fn subnets(&self) -> Result<Vec<maas::Subnet>, maas::Error> {
        self.call("subnets", "")?;
        Ok(lock(&self.subnets).clone())
    }

    /// As MAAS: only while New, Ready, Allocated or Broken; an address
    /// any machine has already is "in use"; a STATIC link replaces the
    /// interface's DHCP link.
    fn link_subnet_static(
        &self,
        system_id: &str,
        interface_id: i64,
        subnet_id: i64,
        ip: &str,
    ) -> Result<(), maas::Error> {
        self.call("link_subnet", &format!("{system_id} {interface_id} {ip}"))?;
        let mut machines = lock(&self.machines);
        if machines
            .values()
            .flat_map(|m| m.interfaces.iter().flat_map(|i| &i.links))
            .any(|l| l.ip.as_deref() == Some(ip))
        {
            return Err(maas::Error::from_response(
                "link_subnet",
                404,
                "IP address is already in use.",
                None,
            ));
        }
        let host = machines
            .get_mut(system_id)
            .ok_or_else(|| Self::not_found("link_subnet"))?;
        Self::interface_editable(host, "link subnet")?;
        let iface = host
            .interfaces
            .iter_mut()
            .find(|i| i.id == interface_id)
            .ok_or_else(|| Self::not_found("link_subnet"))?;
        let mut id = lock(&self.next_link_id);
        *id += 1;
        iface
            .links
            .retain(|l| !matches!(l.mode, maas::LinkMode::Dhcp | maas::LinkMode::LinkUp));
        iface.links.push(maas::InterfaceLink {
            id: *id,
            mode: maas::LinkMode::Static,
            ip: Some(ip.into()),
            subnet_id: Some(subnet_id),
            ..maas::InterfaceLink::default()
        });
        Ok(())
    }

    fn unlink_subnet(
        &self,
        system_id: &str,
        interface_id: i64,
        link_id: i64,
    ) -> Result<(), maas::Error> {
        self.call(
            "unlink_subnet",
            &format!("{system_id} {interface_id} {link_id}"),
        )?;
        let mut machines = lock(&self.machines);
        let host = machines
            .get_mut(system_id)
            .ok_or_else(|| Self::not_found("unlink_subnet"))?;
        Self::interface_editable(host, "unlink subnet")?;
        let iface = host
            .interfaces
            .iter_mut()
            .find(|i| i.id == interface_id)
            .ok_or_else(|| Self::not_found("unlink_subnet"))?;
        let before = iface.links.len();
        iface.links.retain(|l| l.id != link_id);
        if iface.links.len() == before {
            return Err(maas::Error::from_response(
                "unlink_subnet",
                400,
                &format!("{{\"id\": [\"'{link_id}' is not a valid id.\"]}}"),
                None,
            ));
        }
        Ok(())
    }

    fn set_annotations(
        &self,
        system_id: &str,
        op: maas::AnnotationsOp,
        data: &[(&str, Option<&str>)],
    ) -> Result<maas::Machine, maas::Error> {
        let name = op.as_str();
        self.call(name, system_id)?;
        // MAAS 2.x does not know the new op (piston's answer to an unknown
        // op); 3.x keeps set_owner_data as an alias.
        if op == maas::AnnotationsOp::SetWorkloadAnnotations
            && self.version_info().annotations_op() == maas::AnnotationsOp::SetOwnerData
        {
            return Err(maas::Error::from_response(
                name,
                400,
                &format!("Unrecognised signature: method=POST op={name}"),
                None,
            ));
        }
        let mut machines = lock(&self.machines);
        let host = machines
            .get_mut(system_id)
            .ok_or_else(|| Self::not_found(name))?;
        // MAAS: only the owner may, even an admin gets 409.
        if host.owner.as_deref() != Some(self.user.as_str()) {
            return Err(maas::Error::from_response(
                name,
                409,
                "Cannot set workload annotation: it hasn't been acquired.",
                None,
            ));
        }
        for (key, value) in data {
            match value {
                Some(value) => host.owner_data.insert(key.to_string(), value.to_string()),
                None => host.owner_data.remove(key),
            };
        }
        Ok(host.clone())
    }
}

/// The MAAS watch's view of a [`FakeMaas`], as `WatchHandle` keeps it:
/// [`FakeView::list`] takes what a list of its user's machines would show
/// now; answers recorded after a list are newer than it; the view is fresh
/// until [`FakeView::go_stale`].
pub struct FakeView {
    maas: Arc<FakeMaas>,
    machines: Mutex<HashMap<String, ListedMachine>>,
    fresh: Mutex<bool>,
}

impl FakeView {
    pub fn new(maas: Arc<FakeMaas>) -> FakeView {
        FakeView {
            maas,
            machines: Mutex::new(HashMap::new()),
            fresh: Mutex::new(false),
        }
    }

    /// One list: every machine the user owns, as MAAS has it now.
    pub fn list(&self) {
        let now = Instant::now();
        let listed = lock(&self.maas.machines)
            .values()
            .filter(|m| m.owner.as_deref() == Some(self.maas.user.as_str()))
            .map(|m| {
                let entry = ListedMachine {
                    machine: Arc::new(m.clone()),
                    observed_at: now,
                    first_seen: now,
                };
                (m.system_id.clone(), entry)
            })
            .collect();
        *lock(&self.machines) = listed;
        *lock(&self.fresh) = true;
    }

    /// Lists fail from now on: the view is kept, but it is not fresh.
    pub fn go_stale(&self) {
        *lock(&self.fresh) = false;
    }
}

/// How long a recorded answer stands in for a list (the watch's two
/// intervals at the default 15 s).
const FAKE_FRESH_FOR: Duration = Duration::from_secs(30);

impl WatchView for FakeView {
    fn lookup(&self, system_id: &str) -> Lookup {
        let fresh = *lock(&self.fresh);
        match lock(&self.machines).get(system_id) {
            Some(entry) if fresh || entry.observed_at.elapsed() < FAKE_FRESH_FOR => {
                Lookup::Owned(entry.clone())
            }
            None if fresh => Lookup::NotOwned,
            _ => Lookup::Unknown,
        }
    }

    fn record(&self, machine: &maas::Machine) {
        let mut machines = lock(&self.machines);
        if machine.owner.as_deref() != Some(self.maas.user.as_str()) {
            machines.remove(&machine.system_id);
            return;
        }
        let now = Instant::now();
        let first_seen = machines
            .get(&machine.system_id)
            .map_or(now, |known| known.first_seen);
        machines.insert(
            machine.system_id.clone(),
            ListedMachine {
                machine: Arc::new(machine.clone()),
                observed_at: now,
                first_seen,
            },
        );
    }

    fn is_fresh(&self) -> bool {
        *lock(&self.fresh)
    }
}

/// Each cluster's MAAS, as the real [`MaasClients`] hands it out: a
/// [`MaasView`] over the client, here the controller-wide fake and one
/// fake per identity Secret (`namespace`, `name`) a test registers.
pub struct FakeClients {
    pub default: Arc<MaasView>,
    pub tenants: Mutex<HashMap<(String, String), Arc<MaasView>>>,
}

impl FakeClients {
    pub fn new(default: Arc<FakeMaas>, clock: Arc<FakeClock>) -> FakeClients {
        FakeClients {
            default: Arc::new(MaasView::with_clock(default, clock)),
            tenants: Mutex::new(HashMap::new()),
        }
    }
}

impl MaasClients for FakeClients {
    fn for_cluster(
        &self,
        namespace: &str,
        identity: Option<&crate::api::IdentityRef>,
    ) -> Result<Arc<MaasView>, CredentialsError> {
        let Some(identity) = identity else {
            return Ok(self.default.clone());
        };
        let tenants = lock(&self.tenants);
        match tenants.get(&(namespace.to_string(), identity.name.clone())) {
            Some(maas) => Ok(maas.clone()),
            None => Err(CredentialsError::Invalid(format!(
                "Secret {namespace}/{} (spec.identityRef) does not exist",
                identity.name
            ))),
        }
    }
}

/// A workload API server that does not answer.
pub fn refused(cluster: &str) -> kube::Error {
    kube::Error::Transient {
        request: format!("GET https://{cluster}:6443/api/v1/nodes?limit=1"),
        status: None,
        message: "connection refused".into(),
    }
}

/// A write to a Node the workload cluster does not have.
fn no_node(node_name: &str) -> kube::Error {
    kube::Error::NotFound {
        request: format!("PATCH /api/v1/nodes/{node_name}"),
        message: "node not found".into(),
    }
}

/// When a fake Node turned Ready unless a test says otherwise.
pub const NODE_READY_LONG_AGO: &str = "2020-01-01T00:00:00Z";

#[derive(Default)]
pub struct FakeWorkload {
    /// (cluster, node name) → providerID ("" = unset).
    pub nodes: Mutex<HashMap<(String, String), String>>,
    pub up: Mutex<HashSet<String>>,
    /// Machine addresses whose API server answers.
    pub up_addresses: Mutex<HashSet<String>>,
    /// (cluster, node name) → the Node's labels.
    pub node_labels: Mutex<HashMap<(String, String), BTreeMap<String, String>>>,
    /// (cluster, node name) → when its Ready turned True (absent: long
    /// ago, [`NODE_READY_LONG_AGO`]; `None`: not Ready).
    pub ready_since: Mutex<HashMap<(String, String), Option<String>>>,
    /// (cluster, node name) of Nodes with the out-of-service taint.
    pub out_of_service: Mutex<HashSet<(String, String)>>,
    /// Every taint change: (node name, added).
    pub taint_writes: Mutex<Vec<(String, bool)>>,
    /// (cluster, node name) → its uid (absent: `uid-node-<name>`).
    pub node_uids: Mutex<HashMap<(String, String), String>>,
    /// (cluster, node name) → the Node's annotations.
    pub node_annotations: Mutex<HashMap<(String, String), BTreeMap<String, String>>>,
}

impl WorkloadApi for FakeWorkload {
    fn probe(&self, _namespace: &str, cluster: &str) -> Result<(), kube::Error> {
        if lock(&self.up).contains(cluster) {
            Ok(())
        } else {
            Err(refused(cluster))
        }
    }
    fn probe_address(
        &self,
        _namespace: &str,
        _cluster: &str,
        address: &str,
    ) -> Result<(), kube::Error> {
        if lock(&self.up_addresses).contains(address) {
            Ok(())
        } else {
            Err(refused(address))
        }
    }
    fn node(
        &self,
        _namespace: &str,
        cluster: &str,
        node_name: &str,
    ) -> Result<Option<NodeInfo>, kube::Error> {
        Ok(lock(&self.nodes)
            .get(&(cluster.into(), node_name.into()))
            .map(|p| {
                let key = (cluster.to_string(), node_name.to_string());
                NodeInfo {
                    name: node_name.into(),
                    provider_id: (!p.is_empty()).then(|| p.clone()),
                    ready_since: lock(&self.ready_since)
                        .get(&key)
                        .cloned()
                        .unwrap_or_else(|| Some(NODE_READY_LONG_AGO.into())),
                    out_of_service: lock(&self.out_of_service).contains(&key),
                    uid: lock(&self.node_uids)
                        .get(&key)
                        .cloned()
                        .unwrap_or_else(|| format!("uid-node-{node_name}")),
                    labels: lock(&self.node_labels)
                        .get(&key)
                        .cloned()
                        .unwrap_or_default(),
                    annotations: lock(&self.node_annotations)
                        .get(&key)
                        .cloned()
                        .unwrap_or_default(),
                }
            }))
    }
    /// Merge patch of the Node's labels and annotations.
    fn patch_node_metadata(
        &self,
        _namespace: &str,
        cluster: &str,
        node_name: &str,
        metadata: &Value,
    ) -> Result<(), kube::Error> {
        let key = (cluster.to_string(), node_name.to_string());
        if !lock(&self.nodes).contains_key(&key) {
            return Err(no_node(node_name));
        }
        for (field, stored) in [
            ("labels", &self.node_labels),
            ("annotations", &self.node_annotations),
        ] {
            let mut all = lock(stored);
            let node = all.entry(key.clone()).or_default();
            for (k, v) in metadata[field].as_object().into_iter().flatten() {
                match v.as_str() {
                    Some(v) => node.insert(k.clone(), v.to_string()),
                    None => node.remove(k),
                };
            }
        }
        Ok(())
    }
    fn set_node_out_of_service(
        &self,
        _namespace: &str,
        cluster: &str,
        node_name: &str,
        out_of_service: bool,
    ) -> Result<(), kube::Error> {
        let key = (cluster.to_string(), node_name.to_string());
        if !lock(&self.up).contains(cluster) {
            return Err(refused(cluster));
        }
        if !lock(&self.nodes).contains_key(&key) {
            return Err(no_node(node_name));
        }
        let mut tainted = lock(&self.out_of_service);
        let changed = if out_of_service {
            tainted.insert(key)
        } else {
            tainted.remove(&key)
        };
        if changed {
            lock(&self.taint_writes).push((node_name.into(), out_of_service));
        }
        Ok(())
    }
    fn set_node_provider_id(
        &self,
        _namespace: &str,
        cluster: &str,
        node_name: &str,
        provider_id: &str,
    ) -> Result<(), kube::Error> {
        let mut nodes = lock(&self.nodes);
        let p = nodes
            .get_mut(&(cluster.into(), node_name.into()))
            .ok_or_else(|| no_node(node_name))?;
        if !p.is_empty() {
            return Err(kube::Error::Invalid {
                request: format!("PATCH /api/v1/nodes/{node_name}"),
                message: "spec.providerID: Forbidden: node updates may not change providerID except from \"\" to valid".into(),
                causes: Vec::new(),
            });
        }
        *p = provider_id.into();
        Ok(())
    }
}

#[derive(Default)]
pub struct FakeApiWatch {
    pub watched: Mutex<HashSet<(String, String)>>,
    pub online: Mutex<HashSet<(String, String)>>,
    /// Machine addresses being probed.
    pub watched_addresses: Mutex<HashSet<String>>,
    /// Machine addresses whose API answered.
    pub answering: Mutex<HashSet<String>>,
}

impl ApiWatch for FakeApiWatch {
    fn watch(&self, namespace: &str, maas_cluster: &str, _cluster: &str) {
        lock(&self.watched).insert((namespace.into(), maas_cluster.into()));
    }
    fn take_online(&self, namespace: &str, maas_cluster: &str) -> bool {
        lock(&self.online).remove(&(namespace.into(), maas_cluster.into()))
    }
    fn forget(&self, namespace: &str, maas_cluster: &str) {
        lock(&self.watched).remove(&(namespace.into(), maas_cluster.into()));
    }
    fn address_answers(&self, _ns: &str, _mc: &str, _cluster: &str, address: &str) -> bool {
        if lock(&self.answering).contains(address) {
            return true;
        }
        lock(&self.watched_addresses).insert(address.into());
        false
    }
    fn keep_addresses(&self, _ns: &str, _mc: &str, keep: &[String]) {
        lock(&self.watched_addresses).retain(|a| keep.contains(a));
    }
}

/// Records the MaasMachines asked to be reconciled, in order.
#[derive(Default)]
pub struct FakeMachineQueue {
    pub added: Mutex<Vec<(String, String)>>,
}

impl FakeMachineQueue {
    /// The names asked for since the last call, sorted.
    pub fn take_names(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.added).drain(..).map(|(_, n)| n).collect();
        names.sort();
        names
    }
}

impl MachineQueue for FakeMachineQueue {
    fn reconcile_soon(&self, namespace: &str, name: &str) {
        lock(&self.added).push((namespace.into(), name.into()));
    }
}

pub struct FakeClock(pub Mutex<u64>);

impl FakeClock {
    pub fn advance(&self, secs: u64) {
        *lock(&self.0) += secs;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> u64 {
        *lock(&self.0)
    }
}

/// A test world: fakes plus the context that uses them.
pub struct World {
    pub kube: Arc<FakeKube>,
    /// The controller-wide MAAS.
    pub maas: Arc<FakeMaas>,
    pub clients: Arc<FakeClients>,
    pub workload: Arc<FakeWorkload>,
    pub api_watch: Arc<FakeApiWatch>,
    pub machine_queue: Arc<FakeMachineQueue>,
    pub clock: Arc<FakeClock>,
    pub ctx: Context,
}

impl World {
    pub fn new(machines: usize) -> World {
        World::with_options(machines, Options::default())
    }

    pub fn with_options(machines: usize, options: Options) -> World {
        let kube = Arc::new(FakeKube::default());
        let maas = Arc::new(FakeMaas::with_machines(machines));
        let clock = Arc::new(FakeClock(Mutex::new(1_700_000_000)));
        let clients = Arc::new(FakeClients::new(maas.clone(), clock.clone()));
        let workload = Arc::new(FakeWorkload::default());
        let api_watch = Arc::new(FakeApiWatch::default());
        let machine_queue = Arc::new(FakeMachineQueue::default());
        let ctx = Context {
            kube: kube.clone(),
            maas: clients.clone(),
            workload: workload.clone(),
            api_watch: api_watch.clone(),
            machine_queue: machine_queue.clone(),
            clock: clock.clone(),
            options,
        };
        World {
            kube,
            maas,
            clients,
            workload,
            api_watch,
            machine_queue,
            clock,
            ctx,
        }
    }

    /// A Cluster `c1` (infrastructure provisioned) with MaasCluster `c1`.
    pub fn cluster(&self, ns: &str, name: &str) {
        self.kube.put(CLUSTER, json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "MaasCluster", "name": name}},
            "status": {"initialization": {"infrastructureProvisioned": true}}
        }));
        self.kube.put(Kind::MaasCluster.as_str(), json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasCluster",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-mc-{name}"), "generation": 1,
                         "labels": {"cluster.x-k8s.io/cluster-name": name},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": name, "uid": format!("uid-{name}")}]},
            "spec": {"dnsDomain": "maas"}
        }));
    }

    /// Like [`World::cluster`], with its own MAAS: a fake with `machines`
    /// Ready machines behind the identity Secret `tenant-maas` its
    /// MaasCluster's `spec.identityRef` names.
    pub fn cluster_with_own_maas(&self, ns: &str, name: &str, machines: usize) -> Arc<FakeMaas> {
        let maas = Arc::new(FakeMaas::with_machines(machines));
        let view = Arc::new(MaasView::with_clock(maas.clone(), self.clock.clone()));
        lock(&self.clients.tenants).insert((ns.into(), "tenant-maas".into()), view);
        self.cluster(ns, name);
        self.edit(Kind::MaasCluster.as_str(), ns, name, |v| {
            v["spec"]["identityRef"] = json!({"kind": "Secret", "name": "tenant-maas"})
        });
        maas
    }

    /// A Machine + MaasMachine pair with a bootstrap Secret.
    pub fn machine(&self, ns: &str, cluster: &str, name: &str, control_plane: bool) {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        if control_plane {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        }
        self.kube.put(MACHINE, json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-m-{name}"), "labels": labels,
                         "finalizers": ["machine.cluster.x-k8s.io"]},
            "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                     "infrastructureRef": {"kind": "MaasMachine", "name": name}}
        }));
        self.kube.put(Kind::MaasMachine.as_str(), json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-mm-{name}"), "generation": 1, "labels": labels,
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name, "uid": format!("uid-m-{name}")}]},
            "spec": {"image": "custom/u-2204-0-k-1264-0", "minCPU": 2, "minMemory": 4096}
        }));
        self.kube.put_secret(
            ns,
            &format!("{name}-bootstrap"),
            "value",
            b"#cloud-config\n",
        );
    }

    /// Gives the controller-wide [`MaasView`] a watch view the test lists
    /// ([`FakeView::list`]), as the real controller's once the MAAS watch
    /// runs.
    pub fn watched(&self) -> Arc<FakeView> {
        let view = Arc::new(FakeView::new(self.maas.clone()));
        self.clients.default.attach(Box::new(view.clone()));
        view
    }

    pub fn maas_machine(&self, ns: &str, name: &str) -> MaasMachine {
        serde_json::from_value(self.kube.get(Kind::MaasMachine.as_str(), ns, name).unwrap())
            .unwrap()
    }

    pub fn maas_cluster(&self, ns: &str, name: &str) -> MaasCluster {
        serde_json::from_value(self.kube.get(Kind::MaasCluster.as_str(), ns, name).unwrap())
            .unwrap()
    }

    pub fn edit(&self, kind: &'static str, ns: &str, name: &str, f: impl FnOnce(&mut Value)) {
        let mut v = self.kube.get(kind, ns, name).unwrap();
        f(&mut v);
        v["metadata"]["resourceVersion"] = Value::Null;
        self.kube.put(kind, v);
    }

    /// Marks an object as being deleted (as the API server does on DELETE
    /// of an object with finalizers).
    pub fn delete(&self, kind: &'static str, ns: &str, name: &str) {
        self.edit(kind, ns, name, |v| {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")
        });
    }
}

pub const MAAS_MACHINE: &str = "MaasMachine";
pub const MAAS_REMEDIATION: &str = "MaasRemediation";
pub const CAPI_MACHINE: &str = MACHINE;
pub const MAAS_CLUSTER: &str = "MaasCluster";
pub const CAPI_CLUSTER: &str = CLUSTER;
