//! Deploy an allocated machine: image check, swap off, user data from the
//! bootstrap Secret, `op=deploy` with the spec's deploy options (refused
//! before allocating when this MAAS release lacks one).
//!
//! A failed deploy keeps the allocation (the providerID Cluster API may
//! already have copied stays valid); a deploy MAAS refused is tried again
//! from seconds growing to minutes (`retry.rs`).

use std::time::Duration;

use super::allocate::require_image;
use super::{retry, MachineReconciling, Step};
use crate::api::maas_machine as mm_api;
use crate::controllers::identity::Identity;
use crate::controllers::Error;
use crate::maas::{self, DeployRequest, MaasVersion, MachineStatus};
use crate::runtime::Action;

/// How often a machine refused for a deploy option its MAAS lacks looks
/// again: the refusal stands until MAAS is upgraded (or the field goes, which
/// wakes the machine at once), so no retry loop, only a slow check.
pub(super) const UNSUPPORTED_RECHECK: Duration = Duration::from_secs(600);

/// Deploy options only newer MAAS releases have: the spec field, the MAAS
/// parameter, the first release that reads it. An older MAAS does not
/// refuse the parameter, it ignores it (3.4.8 reads only the deploy
/// parameters it knows), so asking for it there would silently deploy
/// without it. Only `true` needs the release: `false` is what an older
/// MAAS does anyway.
const VERSIONED_OPTIONS: [VersionedOption; 2] = [
    VersionedOption {
        field: "enableHwSync",
        param: "enable_hw_sync",
        since: MaasVersion::new(3, 2, 0),
        value: |spec| spec.options().enable_hw_sync,
    },
    VersionedOption {
        field: "enableKernelCrashDump",
        param: "enable_kernel_crash_dump",
        since: MaasVersion::new(3, 6, 0),
        value: |spec| spec.options().enable_kernel_crash_dump,
    },
];

struct VersionedOption {
    field: &'static str,
    param: &'static str,
    since: MaasVersion,
    value: fn(&mm_api::MaasMachineSpec) -> Option<bool>,
}

/// Whether `spec` asks for a deploy option only newer MAAS releases have.
pub(crate) fn asks_versioned_options(spec: &mm_api::MaasMachineSpec) -> bool {
    VERSIONED_OPTIONS
        .iter()
        .any(|option| (option.value)(spec) == Some(true))
}

/// The deploy options `spec` asks for that MAAS release `running` lacks,
/// each said as `spec.<field>: true needs MAAS <major.minor> or newer
/// (<parameter>)`; empty when it has them all. Shared with `capmaas doctor`.
pub(crate) fn options_missing_from(
    spec: &mm_api::MaasMachineSpec,
    running: MaasVersion,
) -> Vec<String> {
    VERSIONED_OPTIONS
        .iter()
        .filter(|option| (option.value)(spec) == Some(true) && running < option.since)
        .map(|option| {
            format!(
                "spec.{}: true needs MAAS {}.{} or newer ({})",
                option.field, option.since.major, option.since.minor, option.param
            )
        })
        .collect()
}

/// Before allocating and before deploying: a deploy option this MAAS
/// release lacks stops the machine with `MachineDeployed` False,
/// `UnsupportedByMAAS` (and one Warning event), looked at again every
/// [`UNSUPPORTED_RECHECK`]. `None`: go on. MAAS is asked its version only
/// when the spec asks for such an option.
pub(super) fn refuse_unsupported_options(
    r: &mut MachineReconciling,
) -> Result<Option<Action>, Error> {
    if r.facts.options_supported {
        return Ok(None);
    }
    if !asks_versioned_options(&r.object.spec) {
        r.facts.options_supported = true;
        return Ok(None);
    }
    let info = r.maas()?.version()?;
    let Some(running) = MaasVersion::parse(&info.version) else {
        // Not a release number: MAAS will judge the options itself.
        log::warn!(
            "{}: MAAS reports version {:?}, not a release number; sending the deploy options \
             unchecked",
            r.key(),
            info.version
        );
        r.facts.options_supported = true;
        return Ok(None);
    };
    let missing = options_missing_from(&r.object.spec, running);
    if missing.is_empty() {
        r.facts.options_supported = true;
        return Ok(None);
    }
    let message = format!(
        "{}; this MAAS is {}, which would ignore it: upgrade MAAS or remove the field \
         (nothing was deployed)",
        missing.join("; "),
        info.version
    );
    r.not_deployed(
        mm_api::UNSUPPORTED_BY_MAAS,
        mm_api::UNSUPPORTED_BY_MAAS,
        message,
    );
    Ok(Some(Action::RequeueAfter(UNSUPPORTED_RECHECK)))
}

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
    if let Some(wait) = refuse_unsupported_options(r)? {
        return Ok(Step::Stop(wait));
    }
    require_image(r)?;
    if let Some(action) = refuse_unsupported_format(r, bootstrap_secret)? {
        return Ok(Step::Stop(action));
    }

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
            r.warning_event("FailedGetBootstrapData", &message);
            r.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::WAITING_FOR_BOOTSTRAP_DATA,
                message.clone(),
            );
            return Err(Error::Retry(message));
        }
        Err(e) => {
            r.warning_event("FailedGetBootstrapData", &e.to_string());
            return Err(e.into());
        }
    };

    let system_id = host.system_id.clone();
    if let Some(wait) = disable_swap(r, &host)? {
        return Ok(Step::Stop(wait));
    }

    let request = DeployRequest {
        image: Some(r.object.spec.image.clone()),
        user_data: Some(user_data),
        ephemeral_deploy: r.object.spec.options().deploy_in_memory,
        hwe_kernel: r.object.spec.options().hwe_kernel.clone(),
        enable_hw_sync: r.object.spec.options().enable_hw_sync,
        enable_kernel_crash_dump: r.object.spec.options().enable_kernel_crash_dump,
        agent_name: Some(identity.as_str().to_string()),
        comment: Some(format!("capmaas: {}", r.key())),
    };
    match r
        .maas()?
        .write(&system_id, |client| client.deploy(&system_id, &request))
    {
        Ok(deploying) => {
            let message = format!(
                "Deploying MAAS machine {system_id} with image {:?}",
                r.object.spec.image
            );
            r.normal_event("MachineDeployStarted", &message);
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

/// MAAS hands user data to cloud-init, so only cloud-config bootstrap data
/// can boot a node (Cluster API's bootstrap Secret says which in `format`;
/// none means cloud-config). Anything else, Ignition above all, is refused
/// with a condition and one Warning, and waits for the user: deploying it
/// would give a machine that never joins. `Some`: refused.
pub(super) fn refuse_unsupported_format(
    r: &mut MachineReconciling,
    bootstrap_secret: &str,
) -> Result<Option<Action>, Error> {
    if r.facts.bootstrap_format_ok {
        return Ok(None);
    }
    let namespace = r.object.metadata.namespace.clone();
    let format = r
        .ctx
        .kube
        .secret_value(&namespace, bootstrap_secret, "format")?;
    let format = match format.as_deref().map(String::from_utf8_lossy) {
        Some(f) if !f.trim().is_empty() && f.trim() != "cloud-config" => {
            f.chars().take(40).collect::<String>()
        }
        _ => {
            r.facts.bootstrap_format_ok = true;
            return Ok(None);
        }
    };
    let message = format!(
        "bootstrap data Secret {namespace}/{bootstrap_secret} has format {format:?}: MAAS \
         deploys cloud-config user data only (cloud-init); use a bootstrap provider \
         configured for cloud-config (nothing is deployed with it)"
    );
    r.not_deployed(
        mm_api::UNSUPPORTED_BOOTSTRAP_FORMAT,
        mm_api::UNSUPPORTED_BOOTSTRAP_FORMAT,
        message,
    );
    Ok(Some(Action::Done))
}

/// Kubernetes wants swap off: MAAS's `swap_size=0` before deploying,
/// unless the machine (`spec.disableSwap: false`) or the controller
/// (`--no-swap-update`) says not to. MAAS lets only administrators edit a
/// machine: a restricted user's 403 is reported on `SwapDisabled` and the
/// deployment goes on (the bootstrap data turns swap off anyway in the
/// usual templates) instead of failing. `Some`: MAAS refused the edit
/// otherwise; the deployment waits for the next try.
fn disable_swap(r: &mut MachineReconciling, host: &maas::Machine) -> Result<Option<Action>, Error> {
    let wanted = r
        .object
        .spec
        .options()
        .disable_swap
        .unwrap_or(!r.ctx.options.no_swap_update);
    if !wanted {
        r.set_false(
            mm_api::SWAP_DISABLED,
            mm_api::SWAP_UPDATE_DISABLED,
            "swap left as MAAS has it (spec.disableSwap: false or --no-swap-update)",
        );
        return Ok(None);
    }
    if host.swap_size == Some(0) {
        r.set_true(mm_api::SWAP_DISABLED, mm_api::SWAP_DISABLED);
        return Ok(None);
    }
    let swap_off = [("swap_size", "0")];
    match r.maas()?.write(&host.system_id, |client| {
        client.update_machine(&host.system_id, &swap_off).map(drop)
    }) {
        Ok(()) => {
            r.set_true(mm_api::SWAP_DISABLED, mm_api::SWAP_DISABLED);
            Ok(None)
        }
        Err(e) if e.is_forbidden() => {
            let message = format!(
                "MAAS refused to set swap_size=0 on {} ({}): only MAAS administrators may edit \
                 machines; deploying with MAAS's swap setting (spec.disableSwap: false skips the edit)",
                host.system_id,
                e.message()
            );
            if r.condition_reason(mm_api::SWAP_DISABLED) != Some(mm_api::SWAP_UPDATE_SKIPPED) {
                r.warning_event(mm_api::SWAP_UPDATE_SKIPPED, &message);
            }
            r.set_false(mm_api::SWAP_DISABLED, mm_api::SWAP_UPDATE_SKIPPED, message);
            Ok(None)
        }
        Err(e) if e.is_transient() => Err(e.into()),
        Err(e) => {
            let message = format!("setting swap_size=0 on {}: {}", host.system_id, e.message());
            Ok(Some(retry::refused(r, "MachineDeployFailed", &message)))
        }
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
