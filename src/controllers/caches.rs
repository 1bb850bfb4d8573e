//! The informer caches the controllers read: one typed store per watched
//! kind, created before the informers that fill them (see
//! [`operator`](crate::operator)) and shared by the informers, the event
//! mappers and the Kubernetes adapter.

use std::sync::Arc;
use std::time::Duration;

use crate::api::capi::{Cluster, Machine, CLUSTER_NAME_LABEL};
use crate::api::{MaasCluster, MaasMachine, MaasRemediation};
use crate::runtime::{ObjectKey, Shutdown, Store};

#[derive(Clone, Default)]
pub struct Caches {
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    pub maas_clusters: Store<MaasCluster>,
    pub maas_machines: Store<MaasMachine>,
    pub maas_remediations: Store<MaasRemediation>,
}

impl Caches {
    /// Empty stores, not yet synced.
    pub fn new() -> Caches {
        Caches::default()
    }

    /// Blocks until every store has been listed once; false if `shutdown`
    /// fired first.
    pub fn wait_until_synced(&self, shutdown: &Shutdown) -> bool {
        let stores: [(&str, &dyn Fn(Duration) -> bool); 5] = [
            ("clusters", &|t| self.clusters.wait_until_synced(t)),
            ("machines", &|t| self.machines.wait_until_synced(t)),
            ("maasclusters", &|t| self.maas_clusters.wait_until_synced(t)),
            ("maasmachines", &|t| self.maas_machines.wait_until_synced(t)),
            ("maasremediations", &|t| {
                self.maas_remediations.wait_until_synced(t)
            }),
        ];
        for (name, wait_until_synced) in stores {
            while !wait_until_synced(Duration::from_secs(1)) {
                if shutdown.is_triggered() {
                    return false;
                }
                log::debug!("waiting for the {name} cache");
            }
        }
        true
    }

    /// The MaasMachines of one cluster: labelled
    /// `cluster.x-k8s.io/cluster-name=<cluster>` in its namespace.
    pub fn maas_machines_of_cluster(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Vec<Arc<MaasMachine>> {
        let mut machines: Vec<Arc<MaasMachine>> = self
            .maas_machines
            .list_namespace(namespace)
            .into_iter()
            .filter(|m| m.metadata.label(CLUSTER_NAME_LABEL) == Some(cluster))
            .collect();
        machines.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        machines
    }

    /// The Machine named by a MaasMachine's owner reference, if cached.
    pub fn owner_machine(&self, maas_machine: &MaasMachine) -> Option<Arc<Machine>> {
        let name = maas_machine.owner_machine_name()?;
        self.machines
            .get(&ObjectKey::new(&maas_machine.metadata.namespace, name))
    }
}
