//! Thin adapters from the reconcilers' ports to the real clients: [`Kube`]
//! (informer caches + `kube::Client` + events) and [`Workload`] (workload
//! clusters through their kubeconfig Secrets). MAAS needs none:
//! `maas::Client` implements [`MaasApi`] itself, and [`super::credentials`]
//! hands out each cluster's.
//! No decisions are made here, only translations.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::api::capi::{self, Cluster};
use crate::api::ipam::{IpAddress, IpAddressClaim};
use crate::api::{Condition, MaasCluster, MaasMachine, MaasRemediation};
use crate::controllers::caches::Caches;
use crate::controllers::ports::*;
use crate::kube::resources::{
    IP_ADDRESSES, IP_ADDRESS_CLAIMS, MAAS_CLUSTERS, MAAS_MACHINES, MAAS_REMEDIATIONS, MACHINES,
    NODES, SECRETS,
};
use crate::kube::{self, Resource};
use crate::runtime::{EventRecorder, ObjectKey, WorkQueue};
use crate::sync::lock;

pub struct Kube {
    pub client: kube::Client,
    pub caches: Caches,
    pub events: EventRecorder,
}

/// Who owns the fields capmaas sets by server-side apply.
const FIELD_MANAGER: &str = "capmaas";

fn resource(kind: Kind) -> &'static Resource {
    match kind {
        Kind::MaasCluster => &MAAS_CLUSTERS,
        Kind::MaasMachine => &MAAS_MACHINES,
        Kind::MaasRemediation => &MAAS_REMEDIATIONS,
        Kind::Machine => &MACHINES,
    }
}

pub(super) fn resource_version(obj: &Value) -> String {
    kube::meta::resource_version(obj)
        .unwrap_or_default()
        .to_string()
}

impl KubeApi for Kube {
    fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>> {
        self.caches.clusters.get(&ObjectKey::new(namespace, name))
    }

    fn machine(&self, namespace: &str, name: &str) -> Option<Arc<capi::Machine>> {
        self.caches.machines.get(&ObjectKey::new(namespace, name))
    }

    fn maas_cluster(&self, namespace: &str, name: &str) -> Option<Arc<MaasCluster>> {
        self.caches
            .maas_clusters
            .get(&ObjectKey::new(namespace, name))
    }

    fn maas_clusters(&self) -> Vec<Arc<MaasCluster>> {
        self.caches.maas_clusters.list()
    }

    fn maas_machine(&self, namespace: &str, name: &str) -> Option<Arc<MaasMachine>> {
        self.caches
            .maas_machines
            .get(&ObjectKey::new(namespace, name))
    }

    fn maas_remediation(&self, namespace: &str, name: &str) -> Option<Arc<MaasRemediation>> {
        self.caches
            .maas_remediations
            .get(&ObjectKey::new(namespace, name))
    }

    fn maas_machines_of_cluster(&self, namespace: &str, cluster: &str) -> Vec<Arc<MaasMachine>> {
        self.caches.maas_machines_of_cluster(namespace, cluster)
    }

    fn machines_of_maas_machine(
        &self,
        namespace: &str,
        maas_machine: &str,
    ) -> Vec<Arc<capi::Machine>> {
        self.caches
            .machines
            .list_namespace(namespace)
            .into_iter()
            .filter(|m| {
                m.spec.infrastructure_ref.as_ref().is_some_and(|r| {
                    r.kind == crate::api::maas_machine::KIND && r.name == maas_machine
                })
            })
            .collect()
    }

    fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, kube::Error> {
        let Some(secret) = get_if_exists(&self.client, &SECRETS, Some(namespace), name)? else {
            return Ok(None);
        };
        secret_bytes(&secret, key).map_err(|e| kube::Error::Decode {
            request: format!("Secret {namespace}/{name}"),
            message: format!("key {key}: {e}"),
        })
    }

    fn ip_address_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<IpAddressClaim>, kube::Error> {
        get_typed(&self.client, &IP_ADDRESS_CLAIMS, namespace, name)
    }

    fn create_ip_address_claim(&self, namespace: &str, claim: &Value) -> Result<(), kube::Error> {
        self.client
            .create(&IP_ADDRESS_CLAIMS, Some(namespace), claim)
            .map(|_| ())
    }

    fn delete_ip_address_claim(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        match self
            .client
            .delete(&IP_ADDRESS_CLAIMS, Some(namespace), name, None)
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    fn ip_address(&self, namespace: &str, name: &str) -> Result<Option<IpAddress>, kube::Error> {
        get_typed(&self.client, &IP_ADDRESSES, namespace, name)
    }

    fn patch(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<String, kube::Error> {
        let updated = self
            .client
            .patch_merge(resource(kind), Some(namespace), name, patch)?;
        Ok(resource_version(&updated))
    }

    fn patch_status(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<String, kube::Error> {
        let updated =
            self.client
                .patch_status_merge(resource(kind), Some(namespace), name, patch)?;
        Ok(resource_version(&updated))
    }

    fn apply_machine_condition(
        &self,
        namespace: &str,
        name: &str,
        condition: &Condition,
    ) -> Result<(), kube::Error> {
        let obj = json!({
            "apiVersion": MACHINES.api_version(),
            "kind": MACHINES.kind,
            "metadata": {"name": name, "namespace": namespace},
            "status": {"conditions": [condition]}
        });
        self.client
            .apply_status(&MACHINES, Some(namespace), name, FIELD_MANAGER, &obj)
            .map(|_| ())
    }

    fn event(&self, target: &EventTarget, type_: EventType, reason: &str, message: &str) {
        let obj = json!({
            "apiVersion": resource(target.kind).api_version(),
            "kind": target.kind.as_str(),
            "metadata": {"name": target.name, "namespace": target.namespace, "uid": target.uid}
        });
        match type_ {
            EventType::Normal => self.events.normal(&obj, reason, message),
            EventType::Warning => self.events.warning(&obj, reason, message),
        }
    }
}

impl MachineQueue for WorkQueue {
    fn reconcile_soon(&self, namespace: &str, name: &str) {
        self.add(ObjectKey::new(namespace, name));
    }
}

/// Workload clusters, reached with the kubeconfig of Secret
/// `<cluster>-kubeconfig` (key `value`). The Secret is read on every call
/// (the control plane rotates its client certificate), but the client, with
/// its open connections, is rebuilt only when the Secret's resourceVersion
/// changed: no new TLS handshake per probe or Node lookup.
pub struct Workload {
    /// The management cluster, for the Secret GET.
    management: kube::Client,
    /// Deadline of each request to a workload API server.
    timeout: Duration,
    clients: Mutex<ClientCache<(String, String), kube::Client>>,
}

/// A workload client unused this long is dropped (the cluster is gone or
/// nothing needs it now; rebuilding costs one handshake).
const WORKLOAD_CLIENT_IDLE: Duration = Duration::from_secs(10 * 60);
/// Largest answer read from a workload API server: we only read one Node
/// (a few KiB; kubelet reports at most 50 images) or probe with a list of one.
const WORKLOAD_MAX_OBJECT_BYTES: u64 = 1024 * 1024;
/// At most this many workload clients are kept.
const MAX_WORKLOAD_CLIENTS: usize = 128;

impl Workload {
    pub fn new(management: kube::Client, timeout: Duration) -> Workload {
        Workload {
            management,
            timeout,
            clients: Mutex::new(ClientCache::new(WORKLOAD_CLIENT_IDLE, MAX_WORKLOAD_CLIENTS)),
        }
    }

    fn client(&self, namespace: &str, cluster: &str) -> Result<kube::Client, kube::Error> {
        let secret = self.kubeconfig_secret(namespace, cluster)?;
        let key = (namespace.to_string(), cluster.to_string());
        let version = resource_version(&secret);
        let cached = lock(&self.clients).get(&key, &version, Instant::now());
        if let Some(client) = cached {
            return Ok(client);
        }
        let config = self.config(namespace, cluster, &secret)?;
        let client = kube::Client::new(config)?;
        lock(&self.clients).put(key, version, client.clone(), Instant::now());
        Ok(client)
    }

    fn kubeconfig_secret(&self, namespace: &str, cluster: &str) -> Result<Value, kube::Error> {
        let secret_name = capi::kubeconfig_secret_name(cluster);
        self.management.get(&SECRETS, Some(namespace), &secret_name)
    }

    /// The client settings of the kubeconfig in `secret`, with our timeouts
    /// and answer size limit.
    fn config(
        &self,
        namespace: &str,
        cluster: &str,
        secret: &Value,
    ) -> Result<kube::Config, kube::Error> {
        let secret_name = capi::kubeconfig_secret_name(cluster);
        let unusable =
            |why: String| kube::Error::Config(format!("Secret {namespace}/{secret_name}: {why}"));
        let yaml = secret_bytes(secret, "value")
            .map_err(|e| unusable(e.to_string()))?
            .ok_or_else(|| unusable("no key \"value\"".to_string()))?;
        // No base directory: a kubeconfig from a Secret may not name files.
        let mut config = kube::Config::from_kubeconfig_yaml(&yaml, None, None)
            .map_err(|e| unusable(format!("kubeconfig: {}", e.message())))?;
        config.timeout = self.timeout;
        config.connect_timeout = config.connect_timeout.min(self.timeout);
        // A user-supplied peer answering small calls (a Node, /api/v1/nodes?limit=1).
        config.max_object_bytes = WORKLOAD_MAX_OBJECT_BYTES;
        Ok(config)
    }
}

/// Clients by key, each valid for the one Secret resourceVersion it was
/// built from; entries idle for `idle` are forgotten, and the least recently
/// used one makes room when `cap` is reached.
pub(crate) struct ClientCache<K, C> {
    entries: HashMap<K, CachedClient<C>>,
    idle: Duration,
    cap: usize,
}

struct CachedClient<C> {
    resource_version: String,
    client: C,
    last_used: Instant,
}

impl<K: Eq + Hash + Clone, C: Clone> ClientCache<K, C> {
    pub(crate) fn new(idle: Duration, cap: usize) -> Self {
        ClientCache {
            entries: HashMap::new(),
            idle,
            cap,
        }
    }

    /// The client built from this resourceVersion, if any (an empty version,
    /// which no stored Secret has, never matches).
    pub(crate) fn get(&mut self, key: &K, resource_version: &str, now: Instant) -> Option<C> {
        self.forget_idle(now);
        let entry = self.entries.get_mut(key)?;
        if resource_version.is_empty() || entry.resource_version != resource_version {
            return None;
        }
        entry.last_used = now;
        Some(entry.client.clone())
    }

    pub(crate) fn put(&mut self, key: K, resource_version: String, client: C, now: Instant) {
        self.forget_idle(now);
        if !self.entries.contains_key(&key) && self.entries.len() >= self.cap {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(
            key,
            CachedClient {
                resource_version,
                client,
                last_used: now,
            },
        );
    }

    /// Every client held now.
    pub(crate) fn values(&self) -> impl Iterator<Item = &C> {
        self.entries.values().map(|e| &e.client)
    }

    fn forget_idle(&mut self, now: Instant) {
        let idle = self.idle;
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.last_used) < idle);
    }
}

impl WorkloadApi for Workload {
    fn probe(&self, namespace: &str, cluster: &str) -> Result<(), kube::Error> {
        list_one_node(&self.client(namespace, cluster)?)
    }

    fn probe_address(
        &self,
        namespace: &str,
        cluster: &str,
        address: &str,
    ) -> Result<(), kube::Error> {
        // The kubeconfig's server (the DNS name), reached at this one
        // address: the certificate is verified for the name, as a client
        // that resolved the name to this machine would (kubeadm puts the
        // endpoint's name in every control plane's certificate; an address
        // the DNS record is given, e.g. a second NIC's, need not be in it).
        let address: std::net::IpAddr = address
            .parse()
            .map_err(|_| kube::Error::Config(format!("{address:?} is not an IP address")))?;
        let secret = self.kubeconfig_secret(namespace, cluster)?;
        let mut config = self.config(namespace, cluster, &secret)?;
        config.connect_to = Some(address);
        list_one_node(&kube::Client::new(config)?)
    }

    fn node(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
    ) -> Result<Option<NodeInfo>, kube::Error> {
        let client = self.client(namespace, cluster)?;
        let Some(node) = get_if_exists(&client, &NODES, None, node_name)? else {
            return Ok(None);
        };
        Ok(Some(NodeInfo {
            name: node_name.to_string(),
            provider_id: node
                .pointer("/spec/providerID")
                .and_then(Value::as_str)
                .map(str::to_string),
            ready_since: ready_since(&node),
            out_of_service: out_of_service_index(&node).is_some(),
            uid: node
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            labels: string_map(node.pointer("/metadata/labels")),
            annotations: string_map(node.pointer("/metadata/annotations")),
        }))
    }

    fn set_node_provider_id(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
        provider_id: &str,
    ) -> Result<(), kube::Error> {
        let patch = json!({"spec": {"providerID": provider_id}});
        patch_node(&self.client(namespace, cluster)?, node_name, &patch)
    }

    fn patch_node_metadata(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
        metadata: &Value,
    ) -> Result<(), kube::Error> {
        let patch = json!({ "metadata": metadata });
        patch_node(&self.client(namespace, cluster)?, node_name, &patch)
    }

    fn set_node_out_of_service(
        &self,
        namespace: &str,
        cluster: &str,
        node_name: &str,
        out_of_service: bool,
    ) -> Result<(), kube::Error> {
        let client = self.client(namespace, cluster)?;
        let node = client.get(&NODES, None, node_name)?;
        let mut taints = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        match (out_of_service_index(&node), out_of_service) {
            (Some(_), true) | (None, false) => return Ok(()),
            (Some(at), false) => {
                taints.remove(at);
            }
            (None, true) => taints.push(json!({
                "key": OUT_OF_SERVICE_TAINT,
                "value": "nodeshutdown",
                "effect": "NoExecute",
            })),
        }
        // A merge patch replaces the whole list: the resourceVersion makes
        // it fail (Conflict, retried) rather than drop a taint written since.
        let patch = json!({
            "metadata": {"resourceVersion": node.pointer("/metadata/resourceVersion")},
            "spec": {"taints": taints},
        });
        patch_node(&client, node_name, &patch)
    }
}

/// JSON merge patch of a workload cluster's Node.
fn patch_node(client: &kube::Client, node_name: &str, patch: &Value) -> Result<(), kube::Error> {
    client
        .patch_merge(&NODES, None, node_name, patch)
        .map(|_| ())
}

fn string_map(value: Option<&Value>) -> std::collections::BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn ready_since(node: &Value) -> Option<String> {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_string)
}

fn out_of_service_index(node: &Value) -> Option<usize> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)?
        .iter()
        .position(|t| t["key"] == OUT_OF_SERVICE_TAINT && t["effect"] == "NoExecute")
}

/// One object by a direct GET, decoded into `T`; `Ok(None)` on 404.
fn get_typed<T: serde::de::DeserializeOwned>(
    client: &kube::Client,
    resource: &Resource,
    namespace: &str,
    name: &str,
) -> Result<Option<T>, kube::Error> {
    let Some(obj) = get_if_exists(client, resource, Some(namespace), name)? else {
        return Ok(None);
    };
    serde_json::from_value(obj)
        .map(Some)
        .map_err(|e| kube::Error::Decode {
            request: format!("GET {} {namespace}/{name}", resource.kind),
            message: e.to_string(),
        })
}

/// `GET /api/v1/nodes?limit=1` answered 200: the API server serves
/// clients (the request a client makes, authenticated and authorised;
/// `/readyz` is not served by every API server a lab runs).
fn list_one_node(client: &kube::Client) -> Result<(), kube::Error> {
    const NODES_PAGE: &str = "/api/v1/nodes?limit=1";
    match client.get_raw(NODES_PAGE)? {
        (200, _) => Ok(()),
        (status, _) => Err(kube::Error::Other {
            request: format!("GET {NODES_PAGE}"),
            status,
            reason: String::new(),
            message: format!("listing nodes answered HTTP {status}"),
        }),
    }
}

/// One object by a direct GET; `Ok(None)` on 404.
fn get_if_exists(
    client: &kube::Client,
    resource: &Resource,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    match client.get(resource, namespace, name) {
        Ok(obj) => Ok(Some(obj)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// A Secret's `data[key]`, decoded from base64; `Ok(None)` when absent.
pub(super) fn secret_bytes(
    secret: &Value,
    key: &str,
) -> Result<Option<Vec<u8>>, base64::DecodeError> {
    let encoded = secret.get("data").and_then(|d| d.get(key)?.as_str());
    encoded
        .map(|e| base64::engine::general_purpose::STANDARD.decode(e))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_reused_until_the_secret_changes() {
        let mut cache = ClientCache::new(Duration::from_secs(600), 8);
        let t0 = Instant::now();
        assert_eq!(cache.get(&"c1", "5", t0), None);
        cache.put("c1", "5".to_string(), 1, t0);
        assert_eq!(cache.get(&"c1", "5", t0), Some(1));
        assert_eq!(cache.get(&"c2", "5", t0), None, "per cluster");
        // The certificate was rotated: the old client is not handed out.
        assert_eq!(cache.get(&"c1", "6", t0), None);
        cache.put("c1", "6".to_string(), 2, t0);
        assert_eq!(cache.get(&"c1", "6", t0), Some(2));
        assert_eq!(cache.get(&"c1", "", t0), None);
    }

    #[test]
    fn idle_clients_are_forgotten_and_the_size_is_capped() {
        let mut cache = ClientCache::new(Duration::from_secs(600), 2);
        let t0 = Instant::now();
        let later = |secs| t0 + Duration::from_secs(secs);
        cache.put("a", "1".to_string(), 1, t0);
        cache.put("b", "1".to_string(), 2, later(1));
        assert_eq!(cache.get(&"a", "1", later(2)), Some(1));
        // Full: the least recently used (b) makes room.
        cache.put("c", "1".to_string(), 3, later(3));
        assert_eq!(cache.entries.len(), 2);
        assert_eq!(cache.get(&"b", "1", later(4)), None);
        assert_eq!(cache.get(&"a", "1", later(4)), Some(1));
        assert_eq!(cache.get(&"c", "1", later(4)), Some(3));
        // Unused for the idle time: gone.
        assert_eq!(cache.get(&"a", "1", later(4 + 600)), None);
        assert!(cache.entries.is_empty());
    }
}
