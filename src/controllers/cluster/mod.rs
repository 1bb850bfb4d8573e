//! The MaasCluster reconciler: the API server endpoint of one cluster, kept
//! as a MAAS DNS record (round robin over the control-plane machines), or
//! in VIP mode (`spec.controlPlaneVIP`) an address reserved in MAAS.
//!
//! ```text
//! externally managed? (left to its owner) ─► owner Cluster ─► paused? ─► deleting? ─► finalizer ─► MAAS credentials ─► failure domains
//!   ─► DNS name (persisted first, used by no other MaasCluster) ─► DNS record
//!   ─► controlPlaneEndpoint ─► provisioned
//!   ─► DNS attachments (dns.rs) ─► workload API available? (api_poller)
//! VIP mode, after failure domains: VIP reserved in MAAS (vip.rs) ─► controlPlaneEndpoint ─► provisioned ─► workload API available?
//! delete: wait for MaasMachines ─► MAAS credentials ─► delete the DNS record (VIP mode: release the VIP) ─► finalizer
//! ```
//!
//! The steps are methods of `ClusterReconciling`, the shared scaffold of
//! `controllers::reconciling` for this kind.

mod dns;
mod mark;
#[cfg(test)]
mod tests;
mod vip;
#[cfg(test)]
mod vip_tests;

pub(crate) use dns::{is_running, role, Role};

use std::sync::Arc;
use std::time::Duration;

use super::ports::Kind;
use super::reconciling::{OwnKind, Reconciling};
use super::{Context, Error};
use crate::api::capi::{self, Cluster};
use crate::api::conditions::{self, Condition, Desired};
use crate::api::maas_cluster::{self as mc_api, ControlPlaneVip, FINALIZER};
use crate::api::{
    FailureDomain, Initialization, MaasCluster, MaasClusterStatus, MaasMachine, ObjectMeta,
};
use crate::runtime::Action;

/// While the cluster's MaasMachines are still being deleted: the safety
/// net; the deletion of each MaasMachine wakes the MaasCluster
/// (`mappers::on_maas_machine`).
const DELETE_WAIT: Duration = Duration::from_secs(30);

pub fn reconcile(ctx: &Context, namespace: &str, name: &str) -> Result<Action, Error> {
    let Some(maas_cluster) = ctx.kube.maas_cluster(namespace, name) else {
        ctx.api_watch.forget(namespace, name);
        return Ok(Action::Done);
    };
    let mut r = Reconciling::new(ctx, Arc::unwrap_or_clone(maas_cluster));
    let result = r.run();
    r.finish(result)
}

impl OwnKind for MaasCluster {
    type Status = MaasClusterStatus;
    type Facts = ();
    const KIND: Kind = Kind::MaasCluster;
    const FINALIZER: &'static str = FINALIZER;

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
    fn status(&self) -> Option<&MaasClusterStatus> {
        self.status.as_ref()
    }
    fn conditions(status: &MaasClusterStatus) -> &[Condition] {
        &status.conditions
    }
    fn conditions_mut(status: &mut MaasClusterStatus) -> &mut Vec<Condition> {
        &mut status.conditions
    }
    fn ready_of(_: &()) -> Vec<&'static str> {
        vec![
            mc_api::CREDENTIALS_READY,
            mc_api::LOAD_BALANCER_READY,
            mc_api::API_SERVER_AVAILABLE,
        ]
    }
}

/// A MaasCluster reconcile in progress (see [`Reconciling`]).
pub(crate) type ClusterReconciling<'c> = Reconciling<'c, MaasCluster>;

impl ClusterReconciling<'_> {
    /// The story of a MaasCluster.
    fn run(&mut self) -> Result<Action, Error> {
        if self.object.is_externally_managed() {
            return self.leave_to_owner();
        }
        let owner_name = self
            .object
            .metadata
            .owner(capi::GROUP, capi::CLUSTER_KIND)
            .map(|o| o.name.clone());
        let cluster = owner_name
            .as_ref()
            .and_then(|n| self.ctx.kube.cluster(&self.object.metadata.namespace, n));
        if self.paused(cluster.as_deref()) {
            return Ok(Action::Done);
        }
        if self.object.metadata.is_being_deleted() {
            return self.delete(owner_name);
        }
        let Some(cluster) = cluster else {
            log::info!(
                "{}: waiting for Cluster API to set the owner Cluster",
                self.key()
            );
            self.set_false(
                mc_api::LOAD_BALANCER_READY,
                mc_api::WAITING_FOR_CLUSTER,
                "waiting for the owner Cluster",
            );
            return Ok(Action::Done);
        };
        if self.object.lxd_hosts_enabled() {
            return Ok(self.refuse_lxd_hosts());
        }
        self.ensure_finalizer()?;
        self.credentials()?;
        self.failure_domains();
        if let Some(vip) = self.object.spec.control_plane_vip.clone() {
            return self.run_with_vip(&cluster, &vip);
        }
        if self.object.has_custom_endpoint() {
            return self.run_with_custom_endpoint(&cluster);
        }

        let dns_name = dns::ensure_name(self, &cluster)?;
        let machines = self
            .ctx
            .kube
            .maas_machines_of_cluster(&self.object.metadata.namespace, &cluster.metadata.name);
        // A new record starts with the machines a new cluster's record gets.
        let initial = dns::attachments(&machines, |m| self.role(m), &[], |_| false);
        let record =
            match dns::ensure_record(self, &dns_name, initial.ips.as_deref().unwrap_or(&[])) {
                Ok(record) => record,
                Err(e) if e.is_maas_unavailable() => return Err(e),
                Err(e) => {
                    self.warning_event(mc_api::LOAD_BALANCER_FAILED, &e.to_string());
                    self.set_false(
                        mc_api::LOAD_BALANCER_READY,
                        mc_api::LOAD_BALANCER_FAILED,
                        e.to_string(),
                    );
                    return Err(e);
                }
            };
        self.ensure_endpoint(&cluster, &dns_name)?;
        self.set_true(mc_api::LOAD_BALANCER_READY, mc_api::LOAD_BALANCER_READY);
        self.provisioned();

        let (ns, name) = (
            self.object.metadata.namespace.clone(),
            self.object.metadata.name.clone(),
        );
        let api_watch = self.ctx.api_watch.clone();
        let unchecked = self.ctx.options.dns_attach_without_api_check;
        let attachments = dns::attachments(
            &machines,
            |m| self.role(m),
            &record.ip_addresses,
            |ip| unchecked || api_watch.address_answers(&ns, &name, &cluster.metadata.name, ip),
        );
        let waiting = attachments.waiting.clone();
        let changed = dns::update_attachments(self, &record, attachments.ips)?;
        self.ctx.api_watch.keep_addresses(&ns, &name, &waiting);
        if changed {
            // The control-plane machines wait on the record (DNSAttached, or
            // release once their address is out): wake them now instead of
            // at their next DNS requeue.
            for m in machines.iter().filter(|m| self.is_control_plane(m)) {
                let meta = &m.metadata;
                self.ctx
                    .machine_queue
                    .reconcile_soon(&meta.namespace, &meta.name);
            }
        }
        self.api_server_available(&cluster);
        Ok(Action::Done)
    }

    /// VIP mode: the endpoint is the address reserved in MAAS (kube-vip on
    /// the control-plane machines holds it); no DNS record, so no machine
    /// waits on one.
    fn run_with_vip(&mut self, cluster: &Cluster, vip: &ControlPlaneVip) -> Result<Action, Error> {
        let address = match vip::ensure(self, vip) {
            Ok(address) => address,
            Err(Error::Maas(e)) if !e.is_transient() => {
                let message = format!("listing the MAAS user's reserved addresses: {e}");
                return Err(vip::failed(self, message));
            }
            Err(e) => return Err(e),
        };
        self.ensure_endpoint(cluster, &address)?;
        self.set(
            Desired::true_(
                mc_api::LOAD_BALANCER_READY,
                mc_api::CONTROL_PLANE_VIP_RESERVED,
            )
            .with_message(format!(
                "control-plane VIP {address} is reserved in MAAS (no DNS record)"
            )),
        );
        self.provisioned();
        self.api_server_available(cluster);
        Ok(Action::Done)
    }

    /// The Go provider's HCP mode (`spec.lxdConfig.enabled`: the machines
    /// become LXD VM hosts) is not capmaas's: refused before anything is
    /// made in MAAS, so no machine is allocated either (they wait for the
    /// cluster's infrastructure).
    fn refuse_lxd_hosts(&mut self) -> Action {
        let message = "spec.lxdConfig.enabled asks for LXD VM hosts; capmaas deploys \
                       bare-metal MAAS machines only: remove the field (nothing was made in MAAS)";
        if self.condition_reason(mc_api::LOAD_BALANCER_READY) != Some(mc_api::UNSUPPORTED_FIELD) {
            self.warning_event(mc_api::UNSUPPORTED_FIELD, message);
        }
        self.set_false(
            mc_api::LOAD_BALANCER_READY,
            mc_api::UNSUPPORTED_FIELD,
            message,
        );
        Action::Done
    }

    /// The Go provider's `spectrocloud.com/custom-dns-provided`: the
    /// endpoint is the user's (`spec.controlPlaneEndpoint`, else the
    /// Cluster's); no DNS record is made for it, and none is deleted with
    /// the cluster unless capmaas made it before the mark (its name is in
    /// `status.network.dnsName`).
    fn run_with_custom_endpoint(&mut self, cluster: &Cluster) -> Result<Action, Error> {
        let own = self
            .object
            .spec
            .control_plane_endpoint
            .as_ref()
            .is_some_and(|e| !e.host.is_empty());
        let on_cluster = cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| e.is_valid())
            .map(|e| e.host.clone());
        match (own, on_cluster) {
            (true, _) => {}
            (false, Some(host)) => self.ensure_endpoint(cluster, &host)?,
            (false, None) => {
                self.set_false(
                    mc_api::LOAD_BALANCER_READY,
                    mc_api::WAITING_FOR_CUSTOM_ENDPOINT,
                    format!(
                        "{} is set: waiting for spec.controlPlaneEndpoint (no DNS record is made)",
                        mc_api::CUSTOM_DNS_ANNOTATION
                    ),
                );
                return Ok(Action::Done);
            }
        }
        self.set(
            Desired::true_(mc_api::LOAD_BALANCER_READY, mc_api::CUSTOM_ENDPOINT).with_message(
                format!(
                    "{} is set: the endpoint is the user's (no DNS record)",
                    mc_api::CUSTOM_DNS_ANNOTATION
                ),
            ),
        );
        self.provisioned();
        self.api_server_available(cluster);
        Ok(Action::Done)
    }

    /// The infrastructure is ready (both contracts' flags).
    fn provisioned(&mut self) {
        self.status.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        self.status.ready = true;
    }

    /// An externally managed MaasCluster (the Cluster API contract): its
    /// owner provides the endpoint and writes the status; capmaas adds no
    /// finalizer, creates no DNS record and writes nothing. One exception:
    /// our finalizer, left from before the annotation was added, is taken
    /// off a deleting object (MAAS untouched: the record, if any, is the
    /// owner's now), so the deletion does not hang on a controller that
    /// no longer manages it.
    fn leave_to_owner(&mut self) -> Result<Action, Error> {
        let (ns, name) = (
            self.object.metadata.namespace.clone(),
            self.object.metadata.name.clone(),
        );
        self.ctx.api_watch.forget(&ns, &name);
        if self.object.metadata.is_being_deleted() && self.has_finalizer() {
            log::info!(
                "{}: externally managed ({}) and deleting: removing our finalizer, MAAS untouched",
                self.key(),
                capi::MANAGED_BY_ANNOTATION
            );
            return self.let_go();
        }
        log::debug!(
            "{}: externally managed ({}): left to its owner",
            self.key(),
            capi::MANAGED_BY_ANNOTATION
        );
        self.write_nothing_more();
        Ok(Action::Done)
    }

    /// Connects to the cluster's MAAS with its credentials; says on
    /// `CredentialsReady` whether that worked and, if not, why.
    fn credentials(&mut self) -> Result<(), Error> {
        let identity = self.object.spec.identity_ref.clone();
        match self.connect_maas(identity.as_ref()) {
            Ok(()) => {
                self.set_true(mc_api::CREDENTIALS_READY, mc_api::CREDENTIALS_READY);
                Ok(())
            }
            Err(e) => {
                self.report(
                    mc_api::CREDENTIALS_READY,
                    mc_api::CREDENTIALS_UNAVAILABLE,
                    e.message(),
                );
                Err(e.into())
            }
        }
    }

    /// Condition `type_` False for `reason`, with a Warning event (of the
    /// same reason) when the message is new: a failure every reconcile
    /// repeats is one Event, not one per reconcile.
    fn report(&mut self, type_: &str, reason: &str, message: &str) {
        let reported = self.condition(type_).is_some_and(|c| c.message == message);
        if !reported {
            self.warning_event(reason, message);
        }
        self.set_false(type_, reason, message);
    }

    /// Another MaasCluster of this controller for which `is` holds, as
    /// `namespace/name` (who else claims a DNS name or a VIP).
    fn other_cluster_where(&self, is: impl Fn(&MaasCluster) -> bool) -> Option<String> {
        let me = (&self.object.metadata.namespace, &self.object.metadata.name);
        self.ctx
            .kube
            .maas_clusters()
            .into_iter()
            .filter(|other| (&other.metadata.namespace, &other.metadata.name) != me)
            .find(|other| is(other))
            .map(|other| format!("{}/{}", other.metadata.namespace, other.metadata.name))
    }

    /// What `m` is to the DNS record (see [`dns::role`]).
    fn role(&self, m: &MaasMachine) -> Role {
        dns::role(self.ctx.kube.as_ref(), m)
    }

    /// See [`MaasMachine::is_control_plane`].
    fn is_control_plane(&self, m: &MaasMachine) -> bool {
        self.role(m) != Role::Worker
    }

    /// `spec.failureDomains` if given, else the MAAS zones (asked once, while
    /// the status has none), as the v1beta2 list.
    fn failure_domains(&mut self) {
        let names: Vec<String> = if !self.object.spec.failure_domains.is_empty() {
            self.object.spec.failure_domains.clone()
        } else if self.status.failure_domains.is_empty() {
            match self.maas().and_then(|maas| Ok(maas.client().zones()?)) {
                Ok(zones) => zones.into_iter().map(|zone| zone.name).collect(),
                Err(e) => {
                    log::warn!(
                        "{}: listing MAAS zones for failure domains: {e}",
                        self.key()
                    );
                    return;
                }
            }
        } else {
            return;
        };
        let mut names = names;
        names.sort();
        names.dedup();
        self.status.failure_domains = names
            .into_iter()
            .filter(|n| !n.is_empty())
            .map(|name| FailureDomain {
                name,
                control_plane: Some(true),
                attributes: None,
            })
            .collect();
    }

    /// `spec.controlPlaneEndpoint` = the DNS name and the Cluster's API
    /// server port, unless someone already set an endpoint (here or on the
    /// Cluster).
    fn ensure_endpoint(&mut self, cluster: &Cluster, dns_name: &str) -> Result<(), Error> {
        if self
            .object
            .spec
            .control_plane_endpoint
            .as_ref()
            .is_some_and(|e| !e.host.is_empty())
        {
            return Ok(());
        }
        // An endpoint the user gave the Cluster wins (Cluster API keeps the
        // Cluster's own); otherwise ours: the DNS name.
        let endpoint = match cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| e.is_valid())
        {
            Some(user_set) => user_set.clone(),
            None => mc_api::ApiEndpoint {
                host: dns_name.to_string(),
                port: cluster.api_server_port(),
            },
        };
        self.patch(&serde_json::json!({"spec": {"controlPlaneEndpoint": endpoint}}))?;
        self.object.spec.control_plane_endpoint = Some(endpoint);
        Ok(())
    }

    /// `APIServerAvailable`: once the poller has seen the workload API
    /// answer. Until then the poller thread probes it and re-queues us.
    fn api_server_available(&mut self, cluster: &Cluster) {
        if conditions::is_true(&self.status.conditions, mc_api::API_SERVER_AVAILABLE) {
            return;
        }
        let (ns, name) = (
            self.object.metadata.namespace.clone(),
            self.object.metadata.name.clone(),
        );
        if self.ctx.api_watch.take_online(&ns, &name) {
            self.set_true(mc_api::API_SERVER_AVAILABLE, mc_api::API_SERVER_AVAILABLE);
            self.normal_event(
                "APIServerAvailable",
                "The workload cluster's API server answers",
            );
            return;
        }
        self.ctx.api_watch.watch(&ns, &name, &cluster.metadata.name);
        self.set_false(
            mc_api::API_SERVER_AVAILABLE,
            mc_api::API_SERVER_NOT_READY,
            "waiting for the workload API server to answer",
        );
    }

    fn delete(&mut self, owner_name: Option<String>) -> Result<Action, Error> {
        let (ns, name) = (
            self.object.metadata.namespace.clone(),
            self.object.metadata.name.clone(),
        );
        self.ctx.api_watch.forget(&ns, &name);
        if !self.has_finalizer() {
            self.summarize = false;
            return Ok(Action::Done);
        }
        let cluster_name = self
            .object
            .metadata
            .labels
            .get(capi::CLUSTER_NAME_LABEL)
            .cloned()
            .or(owner_name);
        if let Some(cluster_name) = &cluster_name {
            let remaining = self
                .ctx
                .kube
                .maas_machines_of_cluster(&ns, cluster_name)
                .len();
            if remaining > 0 {
                let message = format!("waiting for {remaining} MaasMachines to be deleted");
                self.summarize = false;
                self.set_false(conditions::READY, mc_api::DELETING, message);
                return Ok(Action::RequeueAfter(DELETE_WAIT));
            }
        }
        self.credentials()?;
        let done = if self.object.spec.control_plane_vip.is_some() {
            vip::release(self)?;
            "control-plane VIP released"
        } else if self.object.has_custom_endpoint() && self.object.dns_name().is_none() {
            "the endpoint is the user's (no DNS record)"
        } else {
            dns::delete_record(self, cluster_name.as_deref())?;
            "DNS record deleted"
        };
        self.set_false(conditions::READY, mc_api::DELETING, done);
        self.finish_deletion()
    }
}
