//! Deploy an allocated machine: image check, swap off, user data from the
//! bootstrap Secret, `op=deploy`.
//!
//! A failed deploy keeps the allocation (the providerID Cluster API may
//! already have copied stays valid); a deploy MAAS refused is tried again
//! from seconds growing to minutes (`retry.rs`).

use super::allocate::require_image;
use super::{retry, MachineReconciling, Step};
use crate::api::maas_machine as mm_api;
use crate::api::Desired;
use crate::controllers::identity::Identity;
use crate::controllers::ports::EventType;
use crate::controllers::Error;
use crate::maas::{self, DeployRequest, MachineStatus};

/// Starts a deployment if the machine waits for one; otherwise passes the
/// machine through unchanged.
pub(super) fn ensure_deploying(
    r: &mut MachineReconciling,
    host: maas::Machine,
    bootstrap_secret: &str,
    identity: &Identity,
) -> Result<Step<maas::Machine>, Error> {
    // Only a machine allocated to us waits for a deployment: a Ready one
    // is nobody's (and never reaches here: it carries no identity).
    if host.status != MachineStatus::Allocated {
        return Ok(Step::Continue(host));
    }
    if let Some(wait) = retry::waiting(r) {
        return Ok(Step::Stop(wait));
    }
    require_image(r)?;

    let namespace = r.object.metadata.namespace.clone();
    let user_data = match r
        .ctx
        .kube
        .secret_value(&namespace, bootstrap_secret, "value")
    {
        Ok(Some(data)) => data,
        Ok(None) => {
            let message = format!(
                "bootstrap data Secret {namespace}/{bootstrap_secret} has no key \"value\" (yet)"
            );
            r.event(EventType::Warning, "FailedGetBootstrapData", &message);
            r.set(Desired::false_(
                mm_api::MACHINE_DEPLOYED,
                mm_api::WAITING_FOR_BOOTSTRAP_DATA,
                message.clone(),
            ));
            return Err(Error::Retry(message));
        }
        Err(e) => {
            r.event(EventType::Warning, "FailedGetBootstrapData", &e.to_string());
            return Err(e.into());
        }
    };

    let system_id = host.system_id.clone();
    if !r.ctx.options.no_swap_update && host.swap_size != Some(0) {
        if let Err(e) = r.maas()?.disable_swap(&system_id) {
            let message = format!(
                "setting swap_size=0 on {system_id}: {} (a non-admin MAAS key needs --no-swap-update)",
                e.message()
            );
            return deploy_failed(r, message);
        }
    }

    let request = DeployRequest {
        image: Some(r.object.spec.image.clone()),
        user_data: Some(user_data),
        ephemeral_deploy: r.object.spec.deploy_in_memory,
        agent_name: Some(identity.as_str().to_string()),
        comment: Some(format!("capmaas: {}", r.key())),
        ..DeployRequest::default()
    };
    match r.maas()?.deploy(&system_id, &request) {
        Ok(deploying) => {
            let message = format!(
                "Deploying MAAS machine {system_id} with image {:?}",
                r.object.spec.image
            );
            r.event(EventType::Normal, "MachineDeployStarted", &message);
            Ok(Step::Continue(deploying))
        }
        Err(e) if e.is_refused() => deploy_failed(
            r,
            format!(
                "deploying {system_id} with image {:?}: {}",
                r.object.spec.image,
                e.message()
            ),
        ),
        Err(e) => Err(e.into()),
    }
}

/// MAAS refused to prepare or start the deployment: tried again later.
fn deploy_failed(
    r: &mut MachineReconciling,
    message: String,
) -> Result<Step<maas::Machine>, Error> {
    Ok(Step::Stop(retry::refused(
        r,
        "MachineDeployFailed",
        &message,
    )))
}
