//! The MaasMachine reconciler: one bare-metal machine from MAAS for one
//! Cluster API Machine.
//!
//! ```text
//! owners ─► paused? ─► deleting? ─► finalizer ─► cluster infrastructure? ─► bootstrap data?
//!   ─► find our allocation or allocate (allocate.rs) ─► deploy (deploy.rs)
//!   ─► observe MAAS: status, power on, DNS attachment, Node providerID (observe.rs, dns.rs, node.rs)
//! delete: leave DNS ─► release (release.rs) ─► finalizer
//! ```
//!
//! The whole status is computed in memory and written once at the end, as a
//! diff against what was read ([`Reconciling::finish`]).

mod allocate;
mod deploy;
mod dns;
mod node;
mod observe;
mod release;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use super::ports::{EventType, Kind};
use super::{finalizer, status, Context, Error};
use crate::api::capi::{self, Cluster, Machine};
use crate::api::conditions::{self, Desired};
use crate::api::maas_machine::{self as mm_api, FINALIZER};
use crate::api::{MaasCluster, MaasMachine, MaasMachineStatus};
use crate::runtime::Action;

/// How often to look at a CP machine's DNS attachment while it is pending.
/// The MaasCluster reconciler wakes the control-plane machines when it
/// changes the record; this requeue is the safety net.
const DNS_PENDING_REQUEUE: Duration = Duration::from_secs(10);

pub fn reconcile(ctx: &Context, namespace: &str, name: &str) -> Result<Action, Error> {
    let Some(maas_machine) = ctx.kube.maas_machine(namespace, name) else {
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
    pub machine: Option<Arc<Machine>>,
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

    /// Paused if the Cluster says so or the MaasMachine carries the annotation.
    fn paused_because(&self, mm: &MaasMachine) -> Option<String> {
        let by_cluster = self.cluster.as_ref().is_some_and(|c| c.is_paused());
        let by_annotation = mm.metadata.has_annotation(capi::PAUSED_ANNOTATION);
        match (by_cluster, by_annotation) {
            (false, false) => None,
            (true, false) => Some("Cluster spec.paused is set to true".into()),
            (false, true) => Some(format!(
                "MaasMachine has the {} annotation",
                capi::PAUSED_ANNOTATION
            )),
            (true, true) => Some(format!(
                "Cluster spec.paused is set to true, MaasMachine has the {} annotation",
                capi::PAUSED_ANNOTATION
            )),
        }
    }
}

/// One reconcile in progress: the object as read, the status being built.
pub(crate) struct Reconciling<'c> {
    ctx: &'c Context,
    mm: MaasMachine,
    old_status: Option<MaasMachineStatus>,
    status: MaasMachineStatus,
    now: String,
    /// Recompute `Ready` at the end (not while paused).
    summarize: bool,
    /// The object may be gone (finalizer removed): write nothing more.
    done_with_object: bool,
    /// Labelled `cluster.x-k8s.io/control-plane` (the MaasMachine or its Machine).
    is_control_plane: bool,
    /// MAAS has the image (already asked during this reconcile).
    image_found: bool,
}

impl<'c> Reconciling<'c> {
    fn new(ctx: &'c Context, mm: MaasMachine) -> Reconciling<'c> {
        let old_status = mm.status.clone();
        let status = mm.status();
        Reconciling {
            ctx,
            mm,
            old_status,
            status,
            now: ctx.now_rfc3339(),
            summarize: true,
            done_with_object: false,
            is_control_plane: false,
            image_found: false,
        }
    }

    /// The story of a MaasMachine.
    fn run(&mut self) -> Result<Action, Error> {
        let owners = Owners::find(self.ctx, &self.mm);
        self.is_control_plane = self.mm.is_control_plane(owners.machine.as_deref());
        if let Some(why) = owners.paused_because(&self.mm) {
            self.set(
                Desired::true_(conditions::PAUSED, conditions::PAUSED_REASON).with_message(why),
            );
            self.summarize = false;
            return Ok(Action::Done);
        }
        self.set(Desired::false_(
            conditions::PAUSED,
            conditions::NOT_PAUSED_REASON,
            "",
        ));
        if self.mm.metadata.is_being_deleted() {
            return release::delete(self, &owners);
        }
        let (Some(machine), Some(cluster)) = (&owners.machine, &owners.cluster) else {
            log::info!("{}: waiting for the owner Machine and Cluster", self.key());
            return Ok(Action::Done);
        };
        finalizer::ensure(
            self.ctx.kube.as_ref(),
            Kind::MaasMachine,
            &mut self.mm.metadata,
            FINALIZER,
        )?;
        if !cluster.infrastructure_provisioned() {
            self.set(Desired::false_(
                mm_api::MACHINE_DEPLOYED,
                mm_api::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                "",
            ));
            return Ok(Action::Done);
        }
        let Some(bootstrap_secret) = machine.bootstrap_secret() else {
            self.set(Desired::false_(
                mm_api::MACHINE_DEPLOYED,
                mm_api::WAITING_FOR_BOOTSTRAP_DATA,
                "",
            ));
            return Ok(Action::Done);
        };
        let host = match allocate::find_or_allocate(self, machine)? {
            Step::Continue(host) => host,
            Step::Stop(action) => return Ok(action),
        };
        let host = match deploy::ensure_deploying(self, host, bootstrap_secret)? {
            Step::Continue(host) => host,
            Step::Stop(action) => return Ok(action),
        };
        observe::observe(self, &host, &owners)
    }

    /// Sets `Ready` and writes the status diff, whatever the story returned.
    fn finish(mut self, result: Result<Action, Error>) -> Result<Action, Error> {
        if self.done_with_object {
            return result;
        }
        if self.summarize {
            let mut of = vec![mm_api::MACHINE_DEPLOYED];
            if self.is_control_plane {
                of.push(mm_api::DNS_ATTACHED);
            }
            let generation = self.mm.metadata.generation;
            conditions::set_ready_summary(&mut self.status.conditions, &of, generation, &self.now);
        }
        let written = self.write_status();
        status::settle(&self.key(), result, written)
    }

    fn write_status(&mut self) -> Result<(), Error> {
        let kube = self.ctx.kube.as_ref();
        if status::write(
            kube,
            Kind::MaasMachine,
            &mut self.mm.metadata,
            self.old_status.as_ref(),
            &self.status,
        )? {
            self.old_status = Some(self.status.clone());
        }
        Ok(())
    }

    fn set(&mut self, desired: Desired<'_>) {
        let generation = self.mm.metadata.generation;
        conditions::set(&mut self.status.conditions, desired, generation, &self.now);
    }

    fn condition_reason(&self, type_: &str) -> Option<&str> {
        conditions::get(&self.status.conditions, type_).map(|c| c.reason.as_str())
    }

    /// Seconds since the condition last changed status (0 if unknown).
    fn condition_age(&self, type_: &str) -> u64 {
        conditions::get(&self.status.conditions, type_)
            .and_then(|c| conditions::parse_rfc3339(&c.last_transition_time))
            .map(|since| self.ctx.clock.now().saturating_sub(since))
            .unwrap_or(0)
    }

    fn event(&self, type_: EventType, reason: &str, message: &str) {
        self.ctx
            .record_event(Kind::MaasMachine, &self.mm.metadata, type_, reason, message);
    }

    fn key(&self) -> String {
        format!(
            "MaasMachine {}/{}",
            self.mm.metadata.namespace, self.mm.metadata.name
        )
    }

    /// The identity MAAS stores with our allocation (`agent_name`), unique
    /// per MaasMachine object: how a crash between allocate and the status
    /// write finds its machine again instead of allocating a second one.
    fn agent_name(&self) -> String {
        let m = &self.mm.metadata;
        format!("capmaas/{}/{}/{}", m.namespace, m.name, m.uid)
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
