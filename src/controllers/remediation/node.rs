//! The Node of a power-cycled machine: while MAAS reports the machine off,
//! the Node carries Kubernetes' out-of-service taint, so that its stateful
//! pods are deleted and their volumes detached and attached elsewhere
//! (non-graceful node shutdown) instead of waiting for a machine that may
//! not come back. The taint comes off once the Node is Ready again, or
//! when the remediation ends.
//!
//! The taint is best effort on the way in (a workload API that does not
//! answer must not stop the power cycle that may fix it) and insisted on
//! on the way out (a Node left out of service runs no pods).
//!
//! The Node's labels and annotations (what users and their tools set:
//! roles, storage topology, scheduling hints) are saved when the machine
//! goes off; a Node deleted and registered anew while it was down (a new
//! uid) gets back those it lacks, never over what the new Node has.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::{RemediationReconciling, Target};
use crate::api::conditions::Desired;
use crate::api::maas_remediation::{self as api, SavedNode};
use crate::controllers::machine::find_node;
use crate::controllers::ports::{NodeInfo, OUT_OF_SERVICE_TAINT};
use crate::controllers::Error;
use crate::{kube, maas};

/// How often the Node is looked at while it is out of service.
pub(super) const NODE_POLL: Duration = Duration::from_secs(10);

/// MAAS reports the machine off: its Node (named after the MAAS hostname)
/// gets the taint, and the remediation records which Node it was.
pub(super) fn take_out_of_service(
    r: &mut RemediationReconciling,
    target: &Target,
    host: &maas::Machine,
) -> Result<(), Error> {
    if r.status.out_of_service_node.is_some() {
        return Ok(());
    }
    let ns = r.object.metadata.namespace.clone();
    let cluster = target.machine.spec.cluster_name.clone();
    let message = match find_node(r.ctx.workload.as_ref(), &ns, &cluster, &host.hostname) {
        Ok(Some(info)) => {
            let candidate = info.name.clone();
            // Recorded first: a crash after the taint still takes it off.
            r.status.out_of_service_node = Some(candidate.clone());
            r.status.saved_node = Some(save(info));
            r.write_status()?;
            match r
                .ctx
                .workload
                .set_node_out_of_service(&ns, &cluster, &candidate, true)
            {
                Ok(()) => {
                    let message = format!(
                        "Node {candidate} tainted {}: its pods are deleted and their volumes detached while MAAS machine {} is off",
                        OUT_OF_SERVICE_TAINT,
                        host.system_id
                    );
                    r.set(
                        Desired::true_(api::NODE_OUT_OF_SERVICE, api::OUT_OF_SERVICE_TAINT_ADDED)
                            .with_message(&message),
                    );
                    r.normal_event("NodeOutOfService", &message);
                    return Ok(());
                }
                Err(e) => format!("tainting Node {candidate}: {e}"),
            }
        }
        Ok(None) => format!("no Node named after MAAS hostname {:?}", host.hostname),
        Err(e) => format!("reading the Node of {}: {e}", host.hostname),
    };
    r.set_false(
        api::NODE_OUT_OF_SERVICE,
        api::OUT_OF_SERVICE_TAINT_FAILED,
        format!("{message}; the power cycle goes on"),
    );
    r.warning_event(api::OUT_OF_SERVICE_TAINT_FAILED, &message);
    Ok(())
}

/// Once the Node is Ready again, that is Ready since the power cycle
/// started (a Node never seen down still shows the Ready of before), or
/// gone: puts back what a Node registered anew lacks, and takes the taint
/// off; `always`: the taint at once, the remediation ending. `Some(wait)`:
/// the Node is not back yet; look again then.
pub(super) fn bring_back(
    r: &mut RemediationReconciling,
    target_cluster: &str,
    always: bool,
) -> Result<Option<Duration>, Error> {
    let tracked = r
        .status
        .out_of_service_node
        .clone()
        .or_else(|| r.status.saved_node.as_ref().map(|s| s.name.clone()));
    let Some(node) = tracked else {
        return Ok(None);
    };
    let ns = r.object.metadata.namespace.clone();
    // Whether the taint may still be on the Node: only a Node just read
    // without it (or gone) needs no call to take it off.
    let mut tainted = true;
    if !always {
        let found = r
            .ctx
            .workload
            .node(&ns, target_cluster, &node)
            .map_err(Error::Workload)?;
        let cycle_started = r.cycle_started();
        let back = |info: &NodeInfo| {
            info.ready_since
                .as_deref()
                .and_then(kube::time::unix_seconds)
                .is_some_and(|since| since >= cycle_started)
        };
        if let Some(info) = &found {
            if !back(info) {
                return Ok(Some(NODE_POLL));
            }
            restore(r, target_cluster, info)?;
        }
        tainted = found.is_some_and(|info| info.out_of_service);
    }
    r.status.saved_node = None;
    if r.status.out_of_service_node.is_none() {
        return Ok(None);
    }
    if tainted {
        match r
            .ctx
            .workload
            .set_node_out_of_service(&ns, target_cluster, &node, false)
        {
            Ok(()) => {}
            // Gone with its machine: nothing left to take off.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(Error::Workload(e)),
        }
    }
    r.status.out_of_service_node = None;
    let message = format!("Node {node}: out-of-service taint removed");
    r.set_false(
        api::NODE_OUT_OF_SERVICE,
        api::NODE_BACK_IN_SERVICE,
        message.clone(),
    );
    r.normal_event(api::NODE_BACK_IN_SERVICE, &message);
    Ok(None)
}

/// The most of a Node's metadata kept (bytes of keys and values): status
/// stays small however much a Node carries.
const SAVED_BYTES: usize = 32 * 1024;

/// What to put back on a Node registered anew: every label and annotation
/// but kubectl's copy of the last applied object (large, and rewritten by
/// the next apply), within [`SAVED_BYTES`].
fn save(info: NodeInfo) -> SavedNode {
    let mut budget = SAVED_BYTES;
    let mut keep = |map: BTreeMap<String, String>| -> BTreeMap<String, String> {
        map.into_iter()
            .filter(|(k, _)| k != "kubectl.kubernetes.io/last-applied-configuration")
            .filter(|(k, v)| match budget.checked_sub(k.len() + v.len()) {
                Some(left) => {
                    budget = left;
                    true
                }
                None => false,
            })
            .collect()
    };
    let labels = keep(info.labels);
    let annotations = keep(info.annotations);
    SavedNode {
        name: info.name,
        uid: info.uid,
        labels,
        annotations,
    }
}

/// A Node with another uid than the saved one was registered anew while
/// its machine was down: it gets back the saved labels and annotations it
/// lacks.
fn restore(r: &mut RemediationReconciling, cluster: &str, now: &NodeInfo) -> Result<(), Error> {
    let Some(saved) = r.status.saved_node.clone() else {
        return Ok(());
    };
    if saved.uid.is_empty() || saved.uid == now.uid {
        return Ok(());
    }
    let missing = |saved: &BTreeMap<String, String>, has: &BTreeMap<String, String>| {
        saved
            .iter()
            .filter(|(k, _)| !has.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    let labels = missing(&saved.labels, &now.labels);
    let annotations = missing(&saved.annotations, &now.annotations);
    if labels.is_empty() && annotations.is_empty() {
        return Ok(());
    }
    let ns = r.object.metadata.namespace.clone();
    r.ctx
        .workload
        .patch_node_metadata(
            &ns,
            cluster,
            &now.name,
            &json!({"labels": labels, "annotations": annotations}),
        )
        .map_err(Error::Workload)?;
    let message = format!(
        "Node {} was registered anew while its machine was down: {} label(s) and {} annotation(s) it had before put back",
        now.name,
        labels.len(),
        annotations.len()
    );
    r.normal_event("NodeMetadataRestored", &message);
    Ok(())
}
