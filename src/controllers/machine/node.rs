//! Sets `Node.spec.providerID` in the workload cluster, so Cluster API can
//! match the Node to its Machine. Done once the machine is deployed and the
//! MaasCluster reports the workload API available; remembered with the
//! `NodeProviderIDSet` condition so it costs nothing afterwards.
//!
//! `spec.providerID` of a Node can be set only once: a Node that already
//! carries another one is reported on the condition, not retried forever.
//!
//! With the providerID, the Node gets MAAS's facts as labels (the zone as
//! `topology.kubernetes.io/zone`, the pool and each tag under
//! `maas.capmaas.io/`), kept in step when MAAS changes them: the labels
//! applied are recorded in status, so a change costs one PATCH and an
//! unchanged machine costs nothing (`--no-node-maas-labels` turns it off).

use std::collections::BTreeMap;

use serde_json::json;

use super::{poll_interval, MachineReconciling};
use crate::api::capi::Cluster;
use crate::api::conditions;
use crate::api::maas_cluster::API_SERVER_AVAILABLE;
use crate::api::maas_machine as mm_api;
use crate::api::MaasCluster;
use crate::controllers::ports::{NodeInfo, WorkloadApi};
use crate::controllers::Error;
use crate::runtime::Action;
use crate::{kube, maas};

/// The well-known label for the machine's failure domain.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The MAAS resource pool the machine came from.
pub const POOL_LABEL: &str = "maas.capmaas.io/pool";
/// Each MAAS tag of the machine: `maas.capmaas.io/tag.<tag>: "true"`.
pub const TAG_LABEL_PREFIX: &str = "maas.capmaas.io/tag.";

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
        r.set_false(
            mm_api::NODE_PROVIDER_ID_SET,
            mm_api::WAITING_FOR_NODE,
            "waiting for the workload API server",
        );
        return Ok(None);
    }

    let namespace = r.object.metadata.namespace.clone();
    let cluster_name = cluster.metadata.name.clone();
    let node = match find_node(r.ctx.workload.as_ref(), &namespace, &cluster_name, hostname) {
        Ok(node) => node,
        Err(e) => {
            r.set_false(
                mm_api::NODE_PROVIDER_ID_SET,
                mm_api::WAITING_FOR_NODE,
                e.to_string(),
            );
            return Ok(Some(wait(r)));
        }
    };
    let Some(node) = node else {
        let message = format!(
            "no Node named {:?} in the workload cluster yet",
            hostname.to_lowercase()
        );
        r.set_false(
            mm_api::NODE_PROVIDER_ID_SET,
            mm_api::WAITING_FOR_NODE,
            message,
        );
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
                r.warning_event("NodeProviderUpdateFailed", &message);
            }
            r.set_false(
                mm_api::NODE_PROVIDER_ID_SET,
                mm_api::NODE_PROVIDER_ID_MISMATCH,
                message,
            );
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
                r.warning_event("NodeProviderUpdateFailed", &message);
                r.set_false(
                    mm_api::NODE_PROVIDER_ID_SET,
                    mm_api::WAITING_FOR_NODE,
                    message,
                );
                return Err(Error::Workload(e));
            }
        }
    }
    r.set_true(mm_api::NODE_PROVIDER_ID_SET, mm_api::NODE_PROVIDER_ID_SET);
    Ok(None)
}

/// Puts MAAS's facts on the Node as labels once its providerID is set, and
/// keeps them in step: labels capmaas applied earlier that MAAS no longer
/// gives are removed; labels of anyone else are never touched.
pub(super) fn ensure_node_labels(
    r: &mut MachineReconciling,
    cluster: &Cluster,
    host: &maas::Machine,
) -> Result<Option<Action>, Error> {
    if r.ctx.options.no_node_maas_labels
        || !conditions::is_true(&r.status.conditions, mm_api::NODE_PROVIDER_ID_SET)
    {
        return Ok(None);
    }
    let wanted = maas_labels(host);
    if wanted == r.status.node_labels {
        return Ok(None);
    }
    let namespace = r.object.metadata.namespace.clone();
    let cluster_name = cluster.metadata.name.clone();
    let node = match find_node(
        r.ctx.workload.as_ref(),
        &namespace,
        &cluster_name,
        &host.hostname,
    ) {
        Ok(node) => node,
        Err(e) => {
            log::info!("{}: labelling the Node waits: {e}", r.key());
            return Ok(Some(wait(r)));
        }
    };
    // The Node is gone (deleted by hand, or being replaced): nothing to
    // label; the providerID step notices a recreated one.
    let Some(node) = node else {
        return Ok(None);
    };
    let mut patch: BTreeMap<String, Option<String>> = r
        .status
        .node_labels
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .map(|k| (k.clone(), None))
        .collect();
    patch.extend(wanted.iter().map(|(k, v)| (k.clone(), Some(v.clone()))));
    match r.ctx.workload.patch_node_metadata(
        &namespace,
        &cluster_name,
        &node.name,
        &json!({ "labels": patch }),
    ) {
        Ok(()) => {
            r.normal_event(
                "NodeLabelled",
                &format!(
                    "Node {} labelled with MAAS's zone, pool and tags ({} labels)",
                    node.name,
                    wanted.len()
                ),
            );
            r.status.node_labels = wanted;
            Ok(None)
        }
        Err(e) => {
            r.warning_event(
                "NodeLabelsFailed",
                &format!("labelling Node {}: {e}", node.name),
            );
            Ok(Some(wait(r)))
        }
    }
}

/// The labels MAAS's facts give a Node. A zone, pool or tag that cannot be
/// a label (longer than 63 characters, or other characters than
/// Kubernetes allows) is left out rather than refused by the API server.
pub(crate) fn maas_labels(host: &maas::Machine) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if is_label_value(&host.zone) && !host.zone.is_empty() {
        labels.insert(ZONE_LABEL.to_string(), host.zone.clone());
    }
    if is_label_value(&host.pool) && !host.pool.is_empty() {
        labels.insert(POOL_LABEL.to_string(), host.pool.clone());
    }
    for tag in &host.tag_names {
        let key = format!("{TAG_LABEL_PREFIX}{tag}");
        if key.len() - "maas.capmaas.io/".len() <= 63 && is_label_value(tag) && !tag.is_empty() {
            labels.insert(key, "true".to_string());
        }
    }
    labels
}

/// A label value (and a label name's syntax): at most 63 characters of
/// `[A-Za-z0-9_.-]`, beginning and ending with an alphanumeric.
fn is_label_value(v: &str) -> bool {
    let alnum_ends = v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric());
    v.len() <= 63
        && alnum_ends
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn wait(r: &MachineReconciling) -> Action {
    Action::RequeueAfter(poll_interval(r.condition_age(mm_api::NODE_PROVIDER_ID_SET)))
}

/// The workload cluster's Node of the MAAS machine `hostname` (see
/// [`node_names`]); the first error ends the search.
pub(crate) fn find_node(
    workload: &dyn WorkloadApi,
    namespace: &str,
    cluster: &str,
    hostname: &str,
) -> Result<Option<NodeInfo>, kube::Error> {
    for candidate in node_names(hostname) {
        if let Some(node) = workload.node(namespace, cluster, &candidate)? {
            return Ok(Some(node));
        }
    }
    Ok(None)
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
