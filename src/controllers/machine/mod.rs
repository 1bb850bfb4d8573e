//! The MaasMachine reconciler: one bare-metal machine from MAAS for one
//! Cluster API Machine.
//!
//! ```text
//! owners ─► paused? ─► deleting? ─► finalizer ─► identity ─► MAAS credentials
//!   ─► cluster infrastructure? ─► bootstrap data?
//!   ─► find our allocation (proven ours) or allocate (allocate.rs)
//!   ─► static addresses from IPAM pools (ipam.rs) ─► deploy (deploy.rs)
//!   ─► observe MAAS: status, power on, DNS attachment, Node providerID (observe.rs, dns.rs, node.rs)
//! control plane: our pre-drain hook on the Machine; Machine deleting: leave DNS, wait the TTL,
//!   then let Cluster API drain (drain.rs)
//! delete: leave DNS ─► release what MAAS shows under our identity (release.rs)
//!   ─► unlink static addresses, delete IPAddressClaims (ipam.rs) ─► finalizer
//! ```
//!
//! Each step is a function of `MachineReconciling` (the shared scaffold
//! of `controllers::reconciling` with this kind's `Facts`): the whole
//! status is computed in memory and written once at the end, as a diff
//! against what was read.

mod allocate;
mod deploy;
mod dns;
pub mod drain;
#[cfg(test)]
mod drain_tests;
#[cfg(test)]
mod identity_tests;
pub mod ipam;
#[cfg(test)]
mod ipam_tests;
mod node;
pub(crate) use deploy::{asks_versioned_options, options_missing_from};
pub(crate) use node::find_node;
mod observe;
mod release;
mod retry;
mod reuse;
#[cfg(test)]
mod reuse_tests;
#[cfg(test)]
mod tests;
mod vm;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::identity::{self, Identity, Recorded};
use super::ports::Kind;
use super::reconciling::{OwnKind, Reconciling};
use super::{Context, Error};
use crate::api::capi::{self, Cluster};
use crate::api::conditions::Condition;
use crate::api::maas_machine::{self as mm_api, FINALIZER};
use crate::api::{MaasCluster, MaasMachine, MaasMachineStatus, ObjectMeta};
use crate::runtime::Action;

/// How often to look at a CP machine's DNS attachment while it is pending.
/// The MaasCluster reconciler wakes the control-plane machines when it
/// changes the record; this requeue is the safety net.
const DNS_PENDING_REQUEUE: Duration = Duration::from_secs(10);

pub fn reconcile(ctx: &Context, namespace: &str, name: &str) -> Result<Action, Error> {
    let Some(maas_machine) = ctx.kube.maas_machine(namespace, name) else {
        drain::release_orphaned_hooks(ctx, namespace, name)?;
        return Ok(Action::Done);
    };
    let deleting = maas_machine.metadata.is_being_deleted();
    let mut r = Reconciling::new(ctx, Arc::unwrap_or_clone(maas_machine));
    let result = r.run();
    match r.finish(result) {
        // The cache still held the object after our finalizer went and the
        // API server deleted it: that deletion is finished, not failed.
        Err(e) if deleting && e.is_kube_not_found() => Ok(Action::Done),
        other => other,
    }
}

/// The objects a MaasMachine hangs off. Any may be missing: Cluster API
/// sets the owner reference after creating the object, and during deletion
/// the owners may already be gone.
pub(crate) struct Owners {
    pub machine: Option<Arc<capi::Machine>>,
    pub cluster: Option<Arc<Cluster>>,
    pub maas_cluster: Option<Arc<MaasCluster>>,
}

impl Owners {
    fn find(ctx: &Context, mm: &MaasMachine) -> Owners {
        let ns = &mm.metadata.namespace;
        let machine = mm
            .owner_machine_name()
            .and_then(|name| ctx.kube.machine(ns, name));
        let cluster_name = mm
            .metadata
            .labels
            .get(capi::CLUSTER_NAME_LABEL)
            .cloned()
            .or_else(|| machine.as_ref().map(|m| m.spec.cluster_name.clone()))
            .filter(|n| !n.is_empty());
        let cluster = cluster_name.and_then(|n| ctx.kube.cluster(ns, &n));
        let maas_cluster = cluster
            .as_ref()
            .and_then(|c| c.spec.infrastructure_ref.as_ref())
            .and_then(|r| ctx.kube.maas_cluster(ns, &r.name));
        Owners {
            machine,
            cluster,
            maas_cluster,
        }
    }
}

/// What a MaasMachine reconcile learns on the way.
#[derive(Default)]
pub(crate) struct Facts {
    /// Labelled `cluster.x-k8s.io/control-plane` (the MaasMachine or its Machine).
    pub is_control_plane: bool,
    /// MAAS has the image (already asked during this reconcile).
    pub image_found: bool,
    /// This MAAS release has every deploy option the spec asks for
    /// (already asked during this reconcile).
    pub options_supported: bool,
    /// The bootstrap data is cloud-config (its Secret already read during
    /// this reconcile).
    pub bootstrap_format_ok: bool,
    /// Its Machine is being deleted: out of the DNS record (drain.rs).
    pub leaving: bool,
}

impl OwnKind for MaasMachine {
    type Status = MaasMachineStatus;
    type Facts = Facts;
    const KIND: Kind = Kind::MaasMachine;
    const FINALIZER: &'static str = FINALIZER;

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn status(&self) -> Option<&MaasMachineStatus> {
        self.status.as_ref()
    }
    fn conditions(status: &MaasMachineStatus) -> &[Condition] {
        &status.conditions
    }
    fn conditions_mut(status: &mut MaasMachineStatus) -> &mut Vec<Condition> {
        &mut status.conditions
    }
    fn ready_of(facts: &Facts) -> Vec<&'static str> {
        let mut of = vec![mm_api::MACHINE_DEPLOYED];
        if facts.is_control_plane {
            of.push(mm_api::DNS_ATTACHED);
        }
        of
    }
}

/// A MaasMachine reconcile in progress (see [`Reconciling`]).
pub(crate) type MachineReconciling<'c> = Reconciling<'c, MaasMachine>;

impl MachineReconciling<'_> {
    /// The story of a MaasMachine.
    fn run(&mut self) -> Result<Action, Error> {
        let owners = Owners::find(self.ctx, &self.object);
        // A control-plane machine joins the cluster's DNS record; an
        // externally managed MaasCluster has none of ours to join.
        // Nor has one whose endpoint is the user's (custom-dns-provided).
        self.facts.is_control_plane = self.object.is_control_plane(owners.machine.as_deref())
            && !owners
                .maas_cluster
                .as_deref()
                .is_some_and(|c| c.is_externally_managed() || c.has_custom_endpoint());
        self.facts.leaving = owners
            .machine
            .as_ref()
            .is_some_and(|m| m.metadata.is_being_deleted());
        if self.paused(owners.cluster.as_deref()) {
            return Ok(Action::Done);
        }
        if self.object.metadata.is_being_deleted() {
            return release::delete(self, &owners);
        }
        let (Some(machine), Some(cluster)) = (&owners.machine, &owners.cluster) else {
            // Without its Cluster there is no record to leave: a deleting
            // Machine's drain is not held.
            if let Some(machine) = owners.machine.as_deref().filter(|_| self.facts.leaving) {
                drain::release_hook(self.ctx, machine)?;
            }
            log::info!("{}: waiting for the owner Machine and Cluster", self.key());
            return Ok(Action::Done);
        };
        self.ensure_finalizer()?;
        drain::ensure_hook(self, machine, owners.maas_cluster.as_deref())?;
        if let Some(action) = self.refuse_unsupported(owners.maas_cluster.as_deref()) {
            return Ok(action);
        }
        let identity = self.ensure_identity()?;
        let identity_ref = owners
            .maas_cluster
            .as_ref()
            .and_then(|c| c.spec.identity_ref.clone());
        if let Err(e) = self.connect_maas(identity_ref.as_ref()) {
            self.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::CREDENTIALS_UNAVAILABLE,
                e.message(),
            );
            return Err(e.into());
        }
        if let Some(action) = drain::hold_drain(self, machine, cluster, &owners)? {
            return Ok(action);
        }
        let Some((identity, chosen_now)) = identity else {
            return allocate::refuse_unadopted(self);
        };
        if chosen_now {
            self.maas()?.chose_identity(identity.as_str());
        }
        if !cluster.infrastructure_provisioned() {
            self.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                "",
            );
            return Ok(Action::Done);
        }
        let Some(bootstrap_secret) = machine.bootstrap_secret() else {
            self.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::WAITING_FOR_BOOTSTRAP_DATA,
                "",
            );
            return Ok(Action::Done);
        };
        // Checked before allocating (a machine with nothing under it yet);
        // an allocated one is checked again where it would be deployed.
        if self.object.system_id().is_none() {
            if let Some(action) = deploy::refuse_unsupported_format(self, bootstrap_secret)? {
                return Ok(action);
            }
        }
        let host = match allocate::find_or_allocate(
            self,
            machine,
            owners.maas_cluster.as_deref(),
            &identity,
        )? {
            Step::Continue(host) => host,
            Step::Stop(action) => return Ok(action),
        };
        let host = match ipam::ensure_static_addresses(
            self,
            host,
            &cluster.metadata.name,
            owners.maas_cluster.as_deref(),
        )? {
            Step::Continue(host) => host,
            Step::Stop(action) => return Ok(action),
        };
        let host = match deploy::ensure_deploying(self, host, bootstrap_secret, &identity)? {
            Step::Continue(host) => host,
            Step::Stop(action) => return Ok(action),
        };
        observe::observe(self, &host, &owners)
    }

    /// Before anything is allocated, a machine asking for what capmaas
    /// does not do (a VM other than `spec.lxd`/`spec.virsh` ones: a
    /// `spec.parent` without them, the MaasCluster's LXD hosts ...; a
    /// `spec.staticIP` MAAS cannot set) stops here, with no MAAS
    /// call: a bare-metal machine in its place would be a silent lie. A machine that has one already (in
    /// `spec.systemID`) is not affected: refusing it now would only take
    /// away what runs.
    fn refuse_unsupported(&mut self, maas_cluster: Option<&MaasCluster>) -> Option<Action> {
        if self.object.system_id().is_some() {
            return None;
        }
        let cluster_lxd = maas_cluster.is_some_and(MaasCluster::lxd_hosts_enabled);
        let message = match self.object.unsupported_field(cluster_lxd) {
            Some(field) => format!(
                "{field} asks for a virtual machine capmaas does not make (it composes VMs \
                 for spec.lxd.enabled or spec.virsh.enabled only): remove the field (nothing \
                 was allocated)"
            ),
            None => format!(
                "{} (nothing was allocated)",
                ipam::static_ip_refusal(&self.object)?
            ),
        };
        self.not_deployed(
            mm_api::UNSUPPORTED_FIELD,
            mm_api::UNSUPPORTED_FIELD,
            message,
        );
        Some(Action::Done)
    }

    /// `MachineDeployed` False with `reason`, and a Warning Event
    /// (`event_reason`) only when the condition did not say so already: a
    /// refusal every reconcile repeats is one Event, not one per reconcile.
    pub(super) fn not_deployed(
        &mut self,
        reason: &'static str,
        event_reason: &str,
        message: String,
    ) {
        let reported = self
            .condition(mm_api::MACHINE_DEPLOYED)
            .is_some_and(|c| c.reason == reason && c.message == message);
        if !reported {
            self.warning_event(event_reason, &message);
        }
        self.set_false(mm_api::MACHINE_DEPLOYED, reason, message);
    }

    /// The object's identity (see `controllers::identity`), chosen and
    /// persisted before any MAAS call that could use it; true when chosen
    /// by this call. An annotation naming another object (copied, or
    /// written to claim someone else's machine) is replaced: the object
    /// never had a machine under it. None for an object the Go provider
    /// allocated (see below).
    fn ensure_identity(&mut self) -> Result<Option<(Identity, bool)>, Error> {
        let foreign = match Identity::recorded(&self.object.metadata) {
            Recorded::Valid(identity) => return Ok(Some((identity, false))),
            Recorded::Missing => None,
            Recorded::Foreign(value) => Some(value),
        };
        // A systemID without an identity: the Go provider allocated it
        // (capmaas records the identity before it allocates). Only an
        // administrator's `capmaas adopt` gives it one; until then it is
        // never touched, and without an identity it stays recognisable.
        if foreign.is_none() && self.object.system_id().is_some() {
            return Ok(None);
        }
        let Some(identity) = Identity::new_for(&self.object.metadata) else {
            let message = "the namespace and name are too long for a MAAS identity \
                           (at most 255 characters with the UID)";
            self.set_false(
                mm_api::MACHINE_DEPLOYED,
                mm_api::MACHINE_DEPLOY_FAILED,
                message,
            );
            return Err(Error::Retry(format!("{}: {message}", self.key())));
        };
        if let Some(foreign) = foreign {
            self.warning_event("IdentityReplaced",
                &format!(
                    "annotation {} named another object ({foreign:?}); this MaasMachine's identity is {identity}",
                    identity::ANNOTATION
                ),
            );
        }
        let version = self.object.metadata.resource_version.clone();
        self.patch(&json!({"metadata": {
            "annotations": {identity::ANNOTATION: identity.as_str()},
            "resourceVersion": version,
        }}))?;
        self.object.metadata.annotations.insert(
            identity::ANNOTATION.to_string(),
            identity.as_str().to_string(),
        );
        Ok(Some((identity, true)))
    }
}

/// The result of a step that may end the reconcile early.
pub(crate) enum Step<T> {
    Continue(T),
    Stop(Action),
}

/// While MAAS is busy with a machine, look again soon, then less often the
/// longer nothing changes: a quarter of the time spent so far, 5 s to 2 min.
pub(crate) fn poll_interval(age_secs: u64) -> Duration {
    Duration::from_secs((age_secs / 4).clamp(5, 120))
}

/// While the MAAS watch lists the machine's MAAS, a change of the machine
/// wakes its MaasMachine: this is only the safety net.
pub(crate) const WATCHED_REQUEUE: Duration = Duration::from_secs(300);

/// When to look at a machine MAAS is busy with again: at `polling` when
/// nothing else will say it changed, else when the watch reports it (with
/// [`WATCHED_REQUEUE`] as the safety net). A watch whose lists fail keeps
/// its view and reports what changed meanwhile once a list succeeds again;
/// the safety net covers a watch that stays broken (the reconcile then
/// finds the view stale and polls).
pub(crate) fn next_look(r: &MachineReconciling, polling: Duration) -> Action {
    let watched = r.maas().is_ok_and(|maas| maas.is_watched());
    Action::RequeueAfter(if watched {
        polling.max(WATCHED_REQUEUE)
    } else {
        polling
    })
}
