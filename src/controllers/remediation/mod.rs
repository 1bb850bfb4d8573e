//! The MaasRemediation reconciler: Cluster API external remediation of one
//! unhealthy Machine by power-cycling its MAAS machine, then, if that does
//! not help, handing the Machine back to its owner for replacement.
//!
//! ```text
//! owner Machine ─► paused? ─► deleting? (power back on, finalizer) ─► Machine deleting? ─► finalizer
//!   MAAS of the cluster (identityRef)
//!   phase ""       ─► an earlier remediation's count within 1 h? continue it (Waiting)
//!                     else power cycle 1 (cycle.rs)
//!   phase Running  ─► power off ─► MAAS reports off ─► power on ─► MAAS reports on ─► Waiting
//!   phase Waiting  ─► lastRemediated + timeout passed: next power cycle, or, after
//!                     retryLimit cycles, hand back: Machine OwnerRemediated=False
//!                     ─► phase "Deleting machine" (Cluster API deletes and replaces it)
//! ```
//!
//! The contract (Cluster API's MachineHealthCheck proposal, external
//! remediation): the MachineHealthCheck creates the MaasRemediation with
//! the Machine's name when the Machine fails its checks, and deletes it when
//! the Machine is healthy again; that deletion is the only success signal.
//! To give up, the remediation controller sets the Machine's v1beta2
//! condition `OwnerRemediated` to False (reason `WaitingForRemediation`),
//! which makes the MachineSet or KubeadmControlPlane delete and replace the
//! Machine; capmaas then releases the MAAS machine as for any deletion.
//!
//! Crash safety: each step is persisted before its MAAS call (the
//! `PowerCycled` condition's reason is the step), and each MAAS call is safe
//! to repeat, so a restarted controller resumes from the status. The power
//! cycles are also counted on the MaasMachine (annotation
//! `capmaas.infrastructure.cluster.x-k8s.io/remediation`), because the
//! MachineHealthCheck deletes and recreates the MaasRemediation whenever
//! the Node's condition changes during a reboot.

mod cycle;
mod node;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use super::ports::CredentialsError;
use super::ports::Kind;
use super::reconciling::{OwnKind, Reconciling};
use super::{Context, Error};
use crate::api::capi::{self, Machine};
use crate::api::conditions::{Condition, Desired, Status};
use crate::api::maas_remediation::{self as api, FINALIZER};
use crate::api::{MaasMachine, MaasRemediation, MaasRemediationStatus, ObjectMeta};
use crate::kube;
use crate::runtime::Action;

pub fn reconcile(ctx: &Context, namespace: &str, name: &str) -> Result<Action, Error> {
    let Some(remediation) = ctx.kube.maas_remediation(namespace, name) else {
        return Ok(Action::Done);
    };
    let deleting = remediation.metadata.is_being_deleted();
    let mut r = Reconciling::new(ctx, Arc::unwrap_or_clone(remediation));
    // A remediation has no Ready of its own: its phase is the summary.
    r.summarize = false;
    let result = r.run();
    match r.finish(result) {
        // Our finalizer was the last: the object is gone, the deletion done.
        Err(e) if deleting && e.is_kube_not_found() => Ok(Action::Done),
        other => other,
    }
}

/// While a power cycle of the MaasMachine's machine is in progress, the
/// message to show instead of powering it on: a deployed machine found off
/// is powered on by the MaasMachine reconciler otherwise, which would cut
/// the power cycle short before it was observed off.
pub(crate) fn power_cycle_in_progress(ctx: &Context, maas_machine: &MaasMachine) -> Option<String> {
    let machine = maas_machine.owner_machine_name()?;
    let ns = &maas_machine.metadata.namespace;
    let remediation = ctx.kube.maas_remediation(ns, machine)?;
    let running = remediation.status.as_ref().map(|s| s.phase.as_str()) == Some(api::PHASE_RUNNING);
    (running && !remediation.metadata.is_being_deleted())
        .then(|| format!("power-cycled by MaasRemediation {ns}/{machine}"))
}

impl OwnKind for MaasRemediation {
    type Status = MaasRemediationStatus;
    type Facts = ();
    const KIND: Kind = Kind::MaasRemediation;
    const FINALIZER: &'static str = FINALIZER;

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn status(&self) -> Option<&MaasRemediationStatus> {
        self.status.as_ref()
    }
    fn conditions(status: &MaasRemediationStatus) -> &[Condition] {
        &status.conditions
    }
    fn conditions_mut(status: &mut MaasRemediationStatus) -> &mut Vec<Condition> {
        &mut status.conditions
    }
    fn ready_of(_: &()) -> Vec<&'static str> {
        Vec::new()
    }
}

/// A MaasRemediation reconcile in progress (see [`Reconciling`]).
pub(crate) type RemediationReconciling<'c> = Reconciling<'c, MaasRemediation>;

impl RemediationReconciling<'_> {
    /// The story of a MaasRemediation.
    fn run(&mut self) -> Result<Action, Error> {
        let ns = self.object.metadata.namespace.clone();
        let machine = self.ctx.kube.machine(&ns, self.object.machine_name());
        let cluster_name = self
            .object
            .metadata
            .label(capi::CLUSTER_NAME_LABEL)
            .map(str::to_string)
            .or_else(|| machine.as_ref().map(|m| m.spec.cluster_name.clone()))
            .filter(|n| !n.is_empty());
        let cluster = cluster_name.and_then(|n| self.ctx.kube.cluster(&ns, &n));
        if self.paused(cluster.as_deref()) {
            return Ok(Action::Done);
        }
        if self.object.metadata.is_being_deleted() {
            return self.delete(machine.as_deref());
        }
        if matches!(
            self.phase(),
            api::PHASE_DELETING_MACHINE | api::PHASE_FAILED
        ) {
            return Ok(Action::Done);
        }
        let Some(machine) = machine else {
            let message = format!("Machine {ns}/{} not found", self.object.machine_name());
            return Ok(self.fail(api::MACHINE_NOT_FOUND, message));
        };
        let infra = machine
            .spec
            .infrastructure_ref
            .as_ref()
            .filter(|r| r.kind == crate::api::maas_machine::KIND && !r.name.is_empty())
            .map(|r| r.name.clone());
        let Some(maas_machine_name) = infra else {
            let message = format!(
                "Machine {ns}/{} is not a MaasMachine's; capmaas leaves it alone",
                machine.metadata.name
            );
            return Ok(self.fail(api::NOT_A_MAAS_MACHINE, message));
        };
        if self.object.strategy_type() != api::REBOOT {
            let message = format!("unsupported strategy {:?}", self.object.strategy_type());
            return Ok(self.fail("UnsupportedStrategy", message));
        }
        if machine.metadata.is_being_deleted() {
            // Its owner is replacing it already: nothing to power-cycle.
            self.status.phase = api::PHASE_DELETING_MACHINE.into();
            self.normal_event(
                "MachineDeleting",
                &format!("Machine {ns}/{} is being deleted", machine.metadata.name),
            );
            return Ok(Action::Done);
        }
        self.ensure_finalizer()?;
        if let Err(e) = self.connect(&machine) {
            let message = format!("MAAS credentials of the cluster: {}", e.message());
            self.warning_event(api::CREDENTIALS_UNAVAILABLE, &message);
            return Err(e.into());
        }
        let target = Target {
            maas_machine: self.ctx.kube.maas_machine(&ns, &maas_machine_name),
            machine,
            maas_machine_name,
        };
        match self.phase() {
            api::PHASE_RUNNING => cycle::step(self, &target),
            api::PHASE_WAITING => self.wait(&target),
            _ => self.start(&target),
        }
    }

    fn phase(&self) -> &str {
        &self.status.phase
    }

    /// Connects to the MAAS of the Machine's cluster (its MaasCluster's
    /// `spec.identityRef`, else the controller's credentials), the MAAS
    /// the MaasMachine reconciler allocated the machine from.
    fn connect(&mut self, machine: &Machine) -> Result<(), CredentialsError> {
        let ns = &self.object.metadata.namespace;
        let identity_ref = self
            .ctx
            .kube
            .cluster(ns, &machine.spec.cluster_name)
            .and_then(|c| c.spec.infrastructure_ref.clone())
            .and_then(|r| self.ctx.kube.maas_cluster(ns, &r.name))
            .and_then(|c| c.spec.identity_ref.clone());
        self.connect_maas(identity_ref.as_ref())
    }

    /// A new MaasRemediation: it continues the count of an earlier one of
    /// this Machine within [`api::MIN_HEALTHY_PERIOD`], else starts the
    /// first power cycle.
    fn start(&mut self, target: &Target) -> Result<Action, Error> {
        let now = self.ctx.clock.now();
        let earlier = target
            .maas_machine
            .as_deref()
            .and_then(|mm| api::History::of(&mm.metadata))
            .filter(|h| {
                kube::time::unix_seconds(&h.last_remediated)
                    .is_some_and(|at| now.saturating_sub(at) < api::MIN_HEALTHY_PERIOD.as_secs())
            });
        let Some(earlier) = earlier else {
            return cycle::start(self, target);
        };
        self.status.retry_count = earlier.retry_count;
        self.status.last_remediated = Some(earlier.last_remediated.clone());
        self.status.phase = api::PHASE_WAITING.into();
        let message = format!(
            "power cycle {} of {} started at {} by an earlier MaasRemediation of this Machine",
            earlier.retry_count,
            self.object.retry_limit(),
            earlier.last_remediated
        );
        self.set(Desired::true_(api::POWER_CYCLED, api::POWER_CYCLED).with_message(&message));
        self.normal_event("RemediationContinued", &message);
        self.wait(target)
    }

    /// Waiting for the MachineHealthCheck to find the Machine healthy (it
    /// then deletes us) until `lastRemediated + timeout`; then the next
    /// power cycle, or the hand-back after `retryLimit` of them.
    fn wait(&mut self, target: &Target) -> Result<Action, Error> {
        let left = self.attempt_left();
        let cluster = target.machine.spec.cluster_name.clone();
        // The Node out of service is looked at often; a workload API that
        // does not answer (a control plane rebooting) delays nothing else.
        let node_poll = match node::bring_back(self, &cluster, false) {
            Ok(poll) => poll,
            Err(e) => {
                log::info!("{}: out-of-service Node not checked: {e}", self.key());
                Some(node::NODE_POLL)
            }
        };
        if let Some(poll) = node_poll.filter(|_| !left.is_zero()) {
            return Ok(Action::RequeueAfter(poll.min(left)));
        }
        if !left.is_zero() {
            return Ok(Action::RequeueAfter(left));
        }
        let (count, limit) = (self.status.retry_count, self.object.retry_limit());
        if count < limit {
            return cycle::start(self, target);
        }
        let message = format!(
            "the Machine is still unhealthy {} after power cycle {count} of {limit}",
            describe(self.object.timeout())
        );
        cycle::mark_broken(self, target, &message)?;
        self.hand_back(api::RETRIES_EXHAUSTED, message)
    }

    /// Time left of the current attempt: a power cycle and the Node's
    /// recovery share `timeout` from `lastRemediated` (CAPM3's clock).
    fn attempt_left(&self) -> Duration {
        let ends = self
            .cycle_started()
            .saturating_add(self.object.timeout().as_secs());
        Duration::from_secs(ends.saturating_sub(self.ctx.clock.now()))
    }

    /// When the current power cycle started (Unix seconds; 0 before any).
    fn cycle_started(&self) -> u64 {
        self.status
            .last_remediated
            .as_deref()
            .and_then(kube::time::unix_seconds)
            .unwrap_or(0)
    }

    /// Gives the Machine back to its owner: `OwnerRemediated=False` on the
    /// Machine (the MachineSet or control plane then deletes and replaces
    /// it), then phase `Deleting machine`. Written to the Machine first and
    /// recorded after: repeating it after a crash is harmless, skipping it
    /// would leave the Machine unhealthy for good.
    fn hand_back(&mut self, reason: &str, message: String) -> Result<Action, Error> {
        let ns = self.object.metadata.namespace.clone();
        let machine = self.object.machine_name().to_string();
        let condition = Condition {
            type_: api::MACHINE_OWNER_REMEDIATED.into(),
            status: Status::False,
            observed_generation: None,
            last_transition_time: self.now.as_str().into(),
            reason: api::WAITING_FOR_REMEDIATION.into(),
            message: format!("capmaas: {message}; replace the Machine"),
        };
        match self
            .ctx
            .kube
            .apply_machine_condition(&ns, &machine, &condition)
        {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {
                return Ok(self.fail(
                    api::MACHINE_NOT_FOUND,
                    format!("Machine {ns}/{machine} not found"),
                ))
            }
            Err(e) => return Err(e.into()),
        }
        self.set(Desired::true_(api::OWNER_REMEDIATION_REQUESTED, reason).with_message(&message));
        self.status.phase = api::PHASE_DELETING_MACHINE.into();
        self.warning_event(
            "MachineHandedBack",
            &format!("{message}: Machine {ns}/{machine} handed back to its owner for replacement"),
        );
        Ok(Action::Done)
    }

    /// Nothing capmaas may act on: phase `Failed`, once.
    fn fail(&mut self, reason: &str, message: String) -> Action {
        if self.phase() != api::PHASE_FAILED {
            self.warning_event("RemediationFailed", &message);
        }
        self.status.phase = api::PHASE_FAILED.into();
        self.set_false(api::OWNER_REMEDIATION_REQUESTED, reason, message);
        Action::Done
    }

    /// The MachineHealthCheck found the Machine healthy (or the Machine is
    /// gone): a power cycle cut short is finished by powering the machine
    /// on, then the finalizer goes.
    fn delete(&mut self, machine: Option<&Machine>) -> Result<Action, Error> {
        if !self.has_finalizer() {
            return Ok(Action::Done);
        }
        if self.phase() == api::PHASE_RUNNING {
            if let Some(machine) = machine.filter(|m| !m.metadata.is_being_deleted()) {
                // Without MAAS, the MaasMachine reconciler powers the
                // deployed machine on once this remediation is gone.
                match self.connect(machine) {
                    Ok(()) => cycle::power_on_after_cut(self, machine)?,
                    Err(e) => log::warn!("{}: not powering on: {e}", self.key()),
                }
            }
        }
        if let Some(cluster) = machine.map(|m| m.spec.cluster_name.clone()) {
            match node::bring_back(self, &cluster, true) {
                Ok(_) => {}
                // Retried: a Node left out of service runs no pods.
                Err(Error::Workload(e)) if e.is_transient() => return Err(Error::Workload(e)),
                Err(e) => log::warn!(
                    "{}: out-of-service taint left on Node {:?}: {e}",
                    self.key(),
                    self.status.out_of_service_node
                ),
            }
        }
        let count = self.status.retry_count;
        self.normal_event(
            "RemediationEnded",
            &format!("MaasRemediation deleted after {count} power cycle(s)"),
        );
        self.finish_deletion()
    }
}

/// What a remediation acts on.
pub(crate) struct Target {
    pub machine: Arc<Machine>,
    pub maas_machine: Option<Arc<MaasMachine>>,
    /// The Machine's `spec.infrastructureRef.name`.
    pub maas_machine_name: String,
}

/// `10m`, `90s`, `1h30m`: a duration as a person writes it.
fn describe(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}
