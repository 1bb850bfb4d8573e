//! Sets `Node.spec.providerID` in the workload cluster, so Cluster API can
//! match the Node to its Machine. Done once the machine is deployed and the
//! MaasCluster reports the workload API available; remembered with the
//! `NodeProviderIDSet` condition so it costs nothing afterwards.
//!
//! `spec.providerID` of a Node can be set only once: a Node that already
//! carries another one is reported on the condition, not retried forever.

use super::{poll_interval, MachineReconciling};
use crate::api::capi::Cluster;
use crate::api::conditions;
use crate::api::maas_cluster::API_SERVER_AVAILABLE;
use crate::api::maas_machine as mm_api;
use crate::api::{Desired, MaasCluster};
use crate::controllers::ports::EventType;
use crate::controllers::Error;
use crate::runtime::Action;

pub(super) fn ensure_provider_id(
    r: &mut MachineReconciling,
    cluster: &Cluster,
    maas_cluster: Option<&MaasCluster>,
    hostname: &str,
) -> Result<Option<Action>, Error> {
    if conditions::is_true(&r.status.conditions, mm_api::NODE_PROVIDER_ID_SET) {
        return Ok(None);
    }
    let Some(provider_id) = r.object.spec.provider_id.clone() else {
        return Ok(None);
    };
    let api_up =
        maas_cluster.is_some_and(|mc| conditions::is_true(mc.conditions(), API_SERVER_AVAILABLE));
    if !api_up {
        // The MaasCluster's update re-queues us when the API comes up.
        r.set(Desired::false_(
            mm_api::NODE_PROVIDER_ID_SET,
            mm_api::WAITING_FOR_NODE,
            "waiting for the workload API server",
        ));
        return Ok(None);
    }

    let namespace = r.object.metadata.namespace.clone();
    let cluster_name = cluster.metadata.name.clone();
    let mut node = None;
    for candidate in node_names(hostname) {
        match r.ctx.workload.node(&namespace, &cluster_name, &candidate) {
            Ok(Some(found)) => {
                node = Some(found);
                break;
            }
            Ok(None) => {}
            Err(e) => {
                r.set(Desired::false_(
                    mm_api::NODE_PROVIDER_ID_SET,
                    mm_api::WAITING_FOR_NODE,
                    e.to_string(),
                ));
                return Ok(Some(wait(r)));
            }
        }
    }
    let Some(node) = node else {
        let message = format!(
            "no Node named {:?} in the workload cluster yet",
            hostname.to_lowercase()
        );
        r.set(Desired::false_(
            mm_api::NODE_PROVIDER_ID_SET,
            mm_api::WAITING_FOR_NODE,
            message,
        ));
        return Ok(Some(wait(r)));
    };
    match node.provider_id.as_deref().filter(|p| !p.is_empty()) {
        Some(existing) if existing == provider_id => {}
        Some(existing) => {
            let message = format!(
                "Node {} has providerID {existing:?}, expected {provider_id:?}; spec.providerID of a Node cannot change",
                node.name
            );
            if r.condition_reason(mm_api::NODE_PROVIDER_ID_SET)
                != Some(mm_api::NODE_PROVIDER_ID_MISMATCH)
            {
                r.event(EventType::Warning, "NodeProviderUpdateFailed", &message);
            }
            r.set(Desired::false_(
                mm_api::NODE_PROVIDER_ID_SET,
                mm_api::NODE_PROVIDER_ID_MISMATCH,
                message,
            ));
            return Ok(None);
        }
        None => {
            if let Err(e) = r.ctx.workload.set_node_provider_id(
                &namespace,
                &cluster_name,
                &node.name,
                &provider_id,
            ) {
                let message = e.to_string();
                r.event(EventType::Warning, "NodeProviderUpdateFailed", &message);
                r.set(Desired::false_(
                    mm_api::NODE_PROVIDER_ID_SET,
                    mm_api::WAITING_FOR_NODE,
                    message,
                ));
                return Err(Error::Workload(e));
            }
        }
    }
    r.set(Desired::true_(
        mm_api::NODE_PROVIDER_ID_SET,
        mm_api::NODE_PROVIDER_ID_SET,
    ));
    Ok(None)
}

fn wait(r: &MachineReconciling) -> Action {
    Action::RequeueAfter(poll_interval(r.condition_age(mm_api::NODE_PROVIDER_ID_SET)))
}

/// The Node is named after the MAAS hostname: exactly, else its short name.
fn node_names(hostname: &str) -> Vec<String> {
    let exact = hostname.to_lowercase();
    let mut names = vec![exact.clone()];
    if let Some((short, _domain)) = exact.split_once('.') {
        names.push(short.to_string());
    }
    names.retain(|n| !n.is_empty());
    names
}
