//! The test plays a Cluster API IPAM provider (the in-cluster provider's
//! module is not served here), the way the story tests play Cluster API:
//! on the real API server with Cluster API's `ipam.cluster.x-k8s.io` CRDs,
//! it answers each IPAddressClaim of one namespace per the IPAM contract,
//! as the in-cluster provider does:
//!
//! - a claim of a known pool gets the pool's lowest free address as an
//!   `IPAddress` of the claim's name (`spec.claimRef`, `spec.poolRef`,
//!   `spec.address`, `spec.prefix`, `spec.gateway`; owned by the claim), a
//!   finalizer that keeps the claim until the address is released, and
//!   `status.addressRef` with the `Ready` condition;
//! - a claim being deleted has its address deleted, then its finalizer
//!   removed.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use capmaas::kube::resources::{IP_ADDRESSES, IP_ADDRESS_CLAIMS};
use capmaas::kube::{self, ListParams};
use serde_json::{json, Value};

/// The in-cluster provider's finalizer on the claims it answered.
pub const RELEASE_FINALIZER: &str = "ipam.cluster.x-k8s.io/ReleaseAddress";

/// A pool: `first`..=`last` in a network of `prefix` bits, with a gateway.
#[derive(Debug, Clone)]
pub struct Pool {
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
}

pub struct IpamProvider {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl IpamProvider {
    /// Answers the claims of `namespace` from `pools` (by pool name) until
    /// dropped.
    pub fn start(client: kube::Client, namespace: &str, pools: BTreeMap<String, Pool>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let namespace = namespace.to_string();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = answer_claims(&client, &namespace, &pools) {
                        eprintln!("test IPAM provider: {e}");
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        };
        IpamProvider {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for IpamProvider {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn answer_claims(
    client: &kube::Client,
    ns: &str,
    pools: &BTreeMap<String, Pool>,
) -> Result<(), kube::Error> {
    let claims = client.list(&IP_ADDRESS_CLAIMS, Some(ns), &ListParams::default())?;
    let addresses = client.list(&IP_ADDRESSES, Some(ns), &ListParams::default())?;
    let mut taken: Vec<String> = addresses
        .items
        .iter()
        .filter_map(|a| a["spec"]["address"].as_str().map(str::to_string))
        .collect();
    for claim in &claims.items {
        let name = claim["metadata"]["name"].as_str().unwrap_or_default();
        let finalizers = claim["metadata"]["finalizers"].as_array();
        let has_finalizer = finalizers.is_some_and(|f| f.iter().any(|x| x == RELEASE_FINALIZER));
        if !claim["metadata"]["deletionTimestamp"].is_null() {
            if has_finalizer {
                match client.delete(&IP_ADDRESSES, Some(ns), name, None) {
                    Err(e) if !e.is_not_found() => return Err(e),
                    _ => {}
                }
                let patch = json!({"metadata": {"finalizers": []}});
                client.patch_merge(&IP_ADDRESS_CLAIMS, Some(ns), name, &patch)?;
            }
            continue;
        }
        if !claim["status"]["addressRef"]["name"].is_null() {
            continue;
        }
        let pool_ref = &claim["spec"]["poolRef"];
        let Some(pool) = pool_ref["name"].as_str().and_then(|p| pools.get(p)) else {
            continue;
        };
        let Some(address) = (u32::from(pool.first)..=u32::from(pool.last))
            .map(|n| Ipv4Addr::from(n).to_string())
            .find(|a| !taken.contains(a))
        else {
            continue;
        };
        let uid = claim["metadata"]["uid"].clone();
        // The finalizer first: an address never outlives its release.
        if !has_finalizer {
            let patch = json!({"metadata": {"finalizers": [RELEASE_FINALIZER]}});
            client.patch_merge(&IP_ADDRESS_CLAIMS, Some(ns), name, &patch)?;
        }
        let ip_address = json!({
            "apiVersion": IP_ADDRESSES.api_version(), "kind": "IPAddress",
            "metadata": {"name": name, "namespace": ns,
                         "ownerReferences": [{"apiVersion": IP_ADDRESS_CLAIMS.api_version(),
                                              "kind": "IPAddressClaim", "name": name, "uid": uid,
                                              "controller": true}]},
            "spec": {"claimRef": {"name": name}, "poolRef": pool_ref.clone(),
                     "address": address, "prefix": pool.prefix, "gateway": pool.gateway.to_string()},
        });
        match client.create(&IP_ADDRESSES, Some(ns), &ip_address) {
            Err(e) if !e.is_already_exists() => return Err(e),
            _ => {}
        }
        taken.push(address);
        let status = json!({"status": {
            "addressRef": {"name": name},
            "conditions": [ready_condition()],
        }});
        client.patch_status_merge(&IP_ADDRESS_CLAIMS, Some(ns), name, &status)?;
    }
    Ok(())
}

fn ready_condition() -> Value {
    json!({"type": "Ready", "status": "True", "reason": "Allocated", "message": "",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}
