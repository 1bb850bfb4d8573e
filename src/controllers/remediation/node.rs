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

use std::time::Duration;

use super::{RemediationReconciling, Target};
use crate::api::conditions::Desired;
use crate::api::maas_remediation as api;
use crate::controllers::machine::node_names;
use crate::controllers::ports::{EventType, NodeInfo};
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
    let mut failure = None;
    for candidate in node_names(&host.hostname) {
        match r.ctx.workload.node(&ns, &cluster, &candidate) {
            Ok(Some(_)) => {
                // Recorded first: a crash after the taint still takes it off.
                r.status.out_of_service_node = Some(candidate.clone());
                r.write_status()?;
                match r
                    .ctx
                    .workload
                    .set_node_out_of_service(&ns, &cluster, &candidate, true)
                {
                    Ok(()) => {
                        let message = format!(
                            "Node {candidate} tainted {}: its pods are deleted and their volumes detached while MAAS machine {} is off",
                            crate::controllers::ports::OUT_OF_SERVICE_TAINT,
                            host.system_id
                        );
                        r.set(
                            Desired::true_(
                                api::NODE_OUT_OF_SERVICE,
                                api::OUT_OF_SERVICE_TAINT_ADDED,
                            )
                            .with_message(&message),
                        );
                        r.event(EventType::Normal, "NodeOutOfService", &message);
                        return Ok(());
                    }
                    Err(e) => {
                        failure = Some(format!("tainting Node {candidate}: {e}"));
                        break;
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                failure = Some(format!("reading the Node of {}: {e}", host.hostname));
                break;
            }
        }
    }
    let message =
        failure.unwrap_or_else(|| format!("no Node named after MAAS hostname {:?}", host.hostname));
    r.set(Desired::false_(
        api::NODE_OUT_OF_SERVICE,
        api::OUT_OF_SERVICE_TAINT_FAILED,
        format!("{message}; the power cycle goes on"),
    ));
    r.event(
        EventType::Warning,
        api::OUT_OF_SERVICE_TAINT_FAILED,
        &message,
    );
    Ok(())
}

/// Takes the taint off the recorded Node once it is Ready again, that is
/// Ready since the power cycle started (a Node never seen down still shows
/// the Ready of before), or gone; `always`: at once, the remediation
/// ending. `Some(wait)`: the Node is still out of service; look again then.
pub(super) fn bring_back(
    r: &mut RemediationReconciling,
    target_cluster: &str,
    always: bool,
) -> Result<Option<Duration>, Error> {
    let Some(node) = r.status.out_of_service_node.clone() else {
        return Ok(None);
    };
    let ns = r.object.metadata.namespace.clone();
    if !always {
        let found = r
            .ctx
            .workload
            .node(&ns, target_cluster, &node)
            .map_err(Error::Workload)?;
        let cycle_started = r
            .status
            .last_remediated
            .as_deref()
            .and_then(kube::time::unix_seconds)
            .unwrap_or(0);
        let back = |info: &NodeInfo| {
            info.ready_since
                .as_deref()
                .and_then(kube::time::unix_seconds)
                .is_some_and(|since| since >= cycle_started)
        };
        match found {
            Some(info) if info.out_of_service && !back(&info) => return Ok(Some(NODE_POLL)),
            _ => {}
        }
    }
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
    r.status.out_of_service_node = None;
    let message = format!("Node {node}: out-of-service taint removed");
    r.set(Desired::false_(
        api::NODE_OUT_OF_SERVICE,
        api::NODE_BACK_IN_SERVICE,
        message.clone(),
    ));
    r.event(EventType::Normal, api::NODE_BACK_IN_SERVICE, &message);
    Ok(None)
}
