//! The machine lifecycle: allocate, deploy, release, power, owner data,
//! broken/fixed, and the admin update, each answering as MAAS does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::events;
use super::network::parse_interfaces_constraint;
use super::{
    fail, field_error, split_list, truthy, BootResourceRec, Failure, Machine, Outcome, Scheduled,
    Step, User, World,
};
use crate::status::Status;

impl World {
    // ---- allocate --------------------------------------------------------

    /// The name checks `FilterNodeForm` makes for allocate and for lists
    /// (`clean_zone`, `clean_pool`, `clean_tags`, `clean_owner` in
    /// `src/maasserver/node_constraint_filter_forms.py`): each unknown name
    /// is a field error, all of them in one 400.
    pub fn unknown_names(&self, params: &[(String, String)]) -> Map<String, Value> {
        let mut errors = Map::new();
        let given = |key: &str| -> Vec<String> {
            params
                .iter()
                .filter(|(k, _)| k == key)
                .flat_map(|(_, v)| split_list(v))
                .collect()
        };
        for field in ["zone", "not_in_zone"] {
            let unknown: Vec<String> = given(field)
                .into_iter()
                .filter(|z| !self.zones.iter().any(|x| &x.name == z))
                .collect();
            if !unknown.is_empty() {
                errors.insert(
                    field.into(),
                    json!([format!("No such zone(s): {}.", unknown.join(", "))]),
                );
            }
        }
        for field in ["pool", "not_in_pool"] {
            let unknown: Vec<String> = given(field)
                .into_iter()
                .filter(|p| !self.pools.iter().any(|x| &x.name == p))
                .collect();
            if !unknown.is_empty() {
                errors.insert(
                    field.into(),
                    json!([format!("No such pool(s): {}.", unknown.join(", "))]),
                );
            }
        }
        let unknown: Vec<String> = given("tags")
            .into_iter()
            .chain(given("not_tags"))
            .filter(|t| !self.tags.contains(t))
            .map(|t| format!("'{t}'"))
            .collect();
        if !unknown.is_empty() {
            errors.insert(
                "tags".into(),
                json!([format!("No such tag(s): {}.", unknown.join(", "))]),
            );
        }
        // Owners are given whole (no comma splitting); the first unknown one
        // is named.
        if let Some((_, owner)) = params
            .iter()
            .find(|(k, v)| k == "owner" && !self.credentials.iter().any(|c| &c.user.username == v))
        {
            errors.insert(
                "owner".into(),
                json!([format!("No such owner: '{owner}'.")]),
            );
        }
        errors
    }

    pub fn allocate(&mut self, user: &User, params: &[(String, String)]) -> Outcome<usize> {
        // AcquireNodeForm's fields; anything else but IGNORED is a 400.
        #[rustfmt::skip]
        const CONSTRAINTS: &[&str] = &[
            "name", "system_id", "arch", "cpu_count", "mem", "tags", "not_tags", "zone",
            "not_in_zone", "pool", "not_in_pool", "storage", "subnets", "not_subnets", "fabrics",
            "not_fabrics", "fabric_classes", "not_fabric_classes", "vlans", "not_vlans",
            "link_speed", "interfaces", "devices", "cpu_speed", "owner", "power_state",
            "deployment_target", "pod", "not_pod", "pod_type", "not_pod_type",
        ];
        #[rustfmt::skip]
        const IGNORED: &[&str] = &[
            "op", "agent_name", "comment", "bridge_all", "bridge_type", "bridge_stp", "bridge_fd",
            "dry_run", "verbose",
        ];
        let mut bad: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, _) in params {
            if !CONSTRAINTS.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()) {
                bad.insert(k.clone(), vec!["No such constraint.".into()]);
            }
        }
        if !bad.is_empty() {
            return Err(Failure::Fields(400, json!(bad)));
        }
        let all = |key: &str| -> Vec<String> {
            params
                .iter()
                .filter(|(k, _)| k == key)
                .flat_map(|(_, v)| split_list(v))
                .collect()
        };
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };

        let cpu = match one("cpu_count") {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => return field_error("cpu_count", "Invalid CPU count: number required."),
            },
            None => None,
        };
        let mem = match one("mem") {
            Some(v) => match v.trim().parse::<f64>() {
                Ok(n) => Some(n),
                Err(_) => return field_error("mem", "Invalid memory: number of MiB required."),
            },
            None => None,
        };
        let names = self.unknown_names(params);
        if !names.is_empty() {
            return Err(Failure::Fields(400, Value::Object(names)));
        }
        let zones = all("zone");
        let not_zones = all("not_in_zone");
        let pools = all("pool");
        let not_pools = all("not_in_pool");
        let tags = all("tags");
        let not_tags = all("not_tags");
        let arches = all("arch");
        for arch in &arches {
            let family = arch.split('/').next().unwrap_or("");
            if !["amd64", "arm64", "i386", "armhf", "ppc64el", "s390x"].contains(&family) {
                return field_error("arch", "Architecture not recognised.");
            }
        }
        let storage = match one("storage") {
            Some(v) => match parse_storage(&v) {
                Some(s) => s,
                None => {
                    return field_error(
                        "storage",
                        format!("Malformed storage constraint, \"{v}\"."),
                    )
                }
            },
            None => Vec::new(),
        };
        let interfaces = match one("interfaces").map(|v| parse_interfaces_constraint(&v)) {
            Some(Ok(wanted)) => wanted,
            Some(Err(message)) => return field_error("interfaces", message),
            None => Vec::new(),
        };
        let name = one("name");
        let system_id = one("system_id");

        let mut candidates: Vec<usize> = (0..self.machines.len())
            .filter(|&i| {
                let m = &self.machines[i];
                m.status == Status::Ready
                    && !m.locked
                    && self.can_deploy(m, user)
                    && cpu.is_none_or(|c| f64::from(m.cpu_count) >= c)
                    && mem.is_none_or(|c| m.memory as f64 >= c)
                    && (zones.is_empty() || zones.contains(&m.zone))
                    && !not_zones.contains(&m.zone)
                    && (pools.is_empty() || pools.contains(&m.pool))
                    && !not_pools.contains(&m.pool)
                    && tags.iter().all(|t| m.tags.contains(t))
                    && !not_tags.iter().any(|t| m.tags.contains(t))
                    && (arches.is_empty()
                        || arches.iter().any(|a| {
                            a == &m.architecture
                                || !a.contains('/') && m.architecture.starts_with(&format!("{a}/"))
                        }))
                    && name.as_ref().is_none_or(|n| {
                        n == &m.hostname
                            || *n == format!("{}.{}", m.hostname, self.domain_name(m.domain_id))
                    })
                    && system_id.as_ref().is_none_or(|s| s == &m.system_id)
                    && storage_fits(&storage, &m.disks_gb)
                    && self.interfaces_match(&m.interfaces, &interfaces)
            })
            .collect();
        candidates.sort_by(|&a, &b| {
            let cost = |m: &Machine| f64::from(m.cpu_count) + m.memory as f64 / 1024.0;
            let (ma, mb) = (&self.machines[a], &self.machines[b]);
            cost(ma).total_cmp(&cost(mb)).then(ma.seq.cmp(&mb.seq))
        });
        let Some(&index) = candidates.first() else {
            if let Some(id) = system_id {
                return fail(409, format!("No machine with system ID {id} available."));
            }
            let given: Vec<&(String, String)> = params
                .iter()
                .filter(|(k, _)| CONSTRAINTS.contains(&k.as_str()))
                .collect();
            if given.is_empty() {
                return fail(409, "No machine available.");
            }
            return fail(409, no_match_message(&given));
        };
        if one("dry_run").is_some_and(|v| truthy(&v)) {
            return Ok(index);
        }
        let comment = one("comment");
        self.acquire(
            index,
            user,
            one("agent_name").unwrap_or_default(),
            comment.as_deref(),
        );
        Ok(index)
    }

    // ---- deploy ----------------------------------------------------------

    /// Every `<os>/<release>` a deploy may name.
    pub fn distro_choices(&self) -> Vec<(String, String, String)> {
        let mut choices: Vec<(String, String, String)> = self
            .boot_resources
            .iter()
            .filter_map(|b| {
                let (os, series) = deployable_os_release(b)?;
                Some((os, series, b.architecture.clone()))
            })
            .collect();
        choices.sort();
        choices
    }

    /// Resolves a `distro_series` value to (osystem, series, architectures).
    fn resolve_series(&self, wanted: &str) -> Option<(String, String, Vec<String>)> {
        let aliases = [
            ("18.04", "bionic"),
            ("20.04", "focal"),
            ("22.04", "jammy"),
            ("24.04", "noble"),
        ];
        let (want_os, want_series) = match wanted.split_once('/') {
            Some((os, s)) => (Some(os), s),
            None => (None, wanted),
        };
        let want_series = aliases
            .iter()
            .find(|(v, _)| *v == want_series)
            .map(|(_, n)| *n)
            .unwrap_or(want_series);
        let matching: Vec<(String, String, String)> = self
            .distro_choices()
            .into_iter()
            .filter(|(os, series, _)| series == want_series && want_os.is_none_or(|w| w == os))
            .collect();
        let (os, series, _) = matching.first()?.clone();
        let arches = matching.into_iter().map(|(_, _, a)| a).collect();
        Some((os, series, arches))
    }

    /// `Machine.acquire`: the request event, then owner, agent_name and
    /// Allocated.
    fn acquire(&mut self, index: usize, user: &User, agent_name: String, comment: Option<&str>) {
        let now = Instant::now();
        self.request_event(
            index,
            events::REQUEST_NODE_ACQUIRE,
            user,
            "acquire",
            comment,
            now,
        );
        let m = &mut self.machines[index];
        m.owner = Some(user.username.clone());
        m.agent_name = agent_name;
        self.set_status(index, Status::Allocated, now);
    }

    /// `MachineHandler.deploy` (MAAS 3.5): a Ready machine is acquired
    /// first (its `agent_name` and `comment` go to the acquisition; on an
    /// Allocated machine `agent_name` is ignored), then the form is
    /// checked, then `power_on` starts the deployment. Every check comes
    /// before any change, as the request's transaction would roll back.
    pub fn deploy(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let one = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        if ["install_kvm", "register_vmhost"]
            .iter()
            .any(|k| one(k).is_some_and(|v| truthy(&v)))
            && !user.is_superuser
        {
            return fail(403, "Only administratros can deploy VM hosts");
        }
        let m = &self.machines[index];
        match m.status {
            Status::Ready => {
                if m.owner.as_deref().is_some_and(|o| o != user.username) {
                    return fail(409, "Can't allocate a machine belonging to another user.");
                }
            }
            Status::Allocated => {}
            other => {
                return fail(
                    409,
                    format!(
                        "Can't deploy a machine that is in the '{}' state",
                        other.name()
                    ),
                )
            }
        }
        let wanted = one("distro_series")
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.settings.default_distro_series.clone());
        let Some((os, series, arches)) = self.resolve_series(&wanted) else {
            let mut names: Vec<String> = self
                .distro_choices()
                .into_iter()
                .map(|(os, s, _)| format!("'{os}/{s}'"))
                .collect();
            names.dedup();
            let mut list = vec!["''".to_owned()];
            list.extend(names);
            return Err(Failure::Fields(
                400,
                json!({"distro_series": [format!(
                    "'{wanted}' is not a valid distro_series.  It should be one of: {}.",
                    list.join(", ")
                )]}),
            ));
        };
        let m = &self.machines[index];
        let family = m.architecture.split('/').next().unwrap_or("");
        if !arches.iter().any(|a| a.split('/').next() == Some(family)) {
            return fail(
                400,
                format!(
                    "Deployment operating system {os}/{series} is unavailable for {}.",
                    m.architecture
                ),
            );
        }
        if let Some(kernel) = one("hwe_kernel").filter(|k| !k.is_empty()) {
            if !(kernel.starts_with("ga-") || kernel.starts_with("hwe-")) {
                return field_error(
                    "hwe_kernel",
                    format!(
                        "{kernel} is not available for {os}/{series} on {}.",
                        m.architecture
                    ),
                );
            }
        }
        // Options this release does not know are ignored, not refused.
        let since = |major: u32, minor: u32| self.settings.release_at_least(major, minor);
        let enable_hw_sync = since(3, 2) && one("enable_hw_sync").is_some_and(|v| truthy(&v));
        let enable_kernel_crash_dump =
            since(3, 6) && one("enable_kernel_crash_dump").is_some_and(|v| truthy(&v));
        // `MachineForm.clean` (3.4.8): LINUX_OSYSTEMS and custom images only.
        if enable_hw_sync && !["ubuntu", "centos", "rhel", "custom"].contains(&os.as_str()) {
            return field_error(
                "enable_hw_sync",
                "Hardware sync is only supported for Linux based image deploys.",
            );
        }
        let comment = one("comment");
        // Claimed "post commit" in MAAS; here first, so that exhaustion
        // changes nothing.
        let ready = m.status == Status::Ready;
        self.claim_auto_ips(index)?;
        if ready {
            let agent_name = one("agent_name").unwrap_or_default();
            self.acquire(index, user, agent_name, comment.as_deref());
        }
        let m = &mut self.machines[index];
        m.osystem = os;
        m.distro_series = series;
        m.hwe_kernel = Some(
            one("hwe_kernel")
                .filter(|k| !k.is_empty())
                .unwrap_or_else(|| "ga-22.04".into()),
        );
        m.ephemeral_deploy = one("ephemeral_deploy").is_some_and(|v| truthy(&v));
        m.enable_hw_sync = enable_hw_sync;
        m.enable_kernel_crash_dump = enable_kernel_crash_dump;
        m.user_data = one("user_data");
        self.start_deployment(index, user, comment.as_deref());
        Ok(())
    }

    /// `Node.start` on an Allocated machine: the request event, Deploying,
    /// the power-on, then the deployment's steps spread over
    /// `deploy_seconds` (curtin's stages as MAAS records them: PXE boot,
    /// ephemeral, storage, OS, curthooks, reboot, cloud-init).
    fn start_deployment(&mut self, index: usize, user: &User, comment: Option<&str>) {
        let now = Instant::now();
        self.request_event(
            index,
            events::REQUEST_NODE_START_DEPLOYMENT,
            user,
            "start",
            comment,
            now,
        );
        self.set_status(index, Status::Deploying, now);
        self.record(index, events::DEPLOYING, "", "", "", now);
        // The power-on runs after MAAS's answer (post-commit, through the
        // rack): the answer reports the power state as stored, `on` comes
        // with the BMC's confirmation (Step::PoweredOn). The manual power
        // driver cannot start a machine: no power-on at all (real MAAS
        // 3.4.8, `Node._start`: `if not power_info.can_be_started`).
        if self.machines[index].power_type != "manual" {
            let powered = self.machines[index].power_state == "on";
            let power = if powered {
                events::NODE_POWER_CYCLE_STARTING
            } else {
                events::NODE_POWER_ON_STARTING
            };
            self.record(index, power, "", "", "", now);
        }
        let m = &mut self.machines[index];
        m.error_description.clear();
        let failing = m.fail_reason.is_some();
        let (steps, before_failure): (&[(f64, Step)], usize) = if m.ephemeral_deploy {
            (&EPHEMERAL_STEPS, EPHEMERAL_STEPS_BEFORE_FAILURE)
        } else {
            (&DEPLOY_STEPS, DEPLOY_STEPS_BEFORE_FAILURE)
        };
        let duration = Duration::from_secs_f64(self.settings.deploy_seconds.max(0.0));
        if failing {
            self.schedule(index, now, duration, &steps[..before_failure]);
            self.schedule(index, now, duration, &[(0.80, Step::DeployDone)]);
        } else {
            self.schedule(index, now, duration, steps);
        }
    }

    /// Appends `plan` (fractions of `duration` from `start`) to the
    /// machine's timeline.
    fn schedule(&mut self, index: usize, start: Instant, duration: Duration, plan: &[(f64, Step)]) {
        let m = &mut self.machines[index];
        for (fraction, step) in plan {
            m.timeline.push_back(Scheduled {
                at: start + duration.mul_f64(*fraction),
                step: step.clone(),
            });
        }
    }

    /// Applies a step that fell due at `at` (see [`World::advance`]).
    pub(super) fn apply(&mut self, index: usize, step: Step, at: Instant) {
        match step {
            Step::Event(kind, description, action) => {
                self.record(index, kind, description, "", action, at)
            }
            Step::PoweredOn => {
                if self.machines[index].power_type != "manual" {
                    self.machines[index].power_state = "on".into();
                    self.record(index, events::NODE_POWERED_ON, "", "", "", at);
                }
            }
            Step::DeployDone => self.finish_deployment(index, at),
            Step::CommissionDone => {
                self.machines[index].power_state = "off".into();
                self.set_status(index, Status::Ready, at);
            }
            Step::ReleaseDone => {
                self.machines[index].power_state = "off".into();
                self.record(index, events::NODE_POWERED_OFF, "", "", "", at);
                self.finalize_release(index, at);
            }
            Step::EraseDone => {
                // The erasure's cloud-init finished: `node.release()` with no
                // user, then the power-off is confirmed.
                self.record(index, events::REQUEST_NODE_RELEASE, "", "", "release", at);
                self.clear_deployment(index);
                self.set_status(index, Status::Releasing, at);
                self.record(index, events::RELEASING, "", "", "", at);
                self.record(index, events::NODE_POWER_OFF_STARTING, "", "", "", at);
                self.machines[index].power_state = "off".into();
                self.record(index, events::NODE_POWERED_OFF, "", "", "", at);
                self.finalize_release(index, at);
            }
        }
    }

    /// The end of a deployment: Deployed, or, when a failure was asked
    /// for, what MAAS does when curtin reports one (the metadata server's
    /// `NODE_INSTALL_EVENT_FAILED`, then `mark_failed` with its comment).
    fn finish_deployment(&mut self, index: usize, at: Instant) {
        match self.machines[index].fail_reason.take() {
            Some(reason) => {
                self.record(
                    index,
                    events::NODE_INSTALL_EVENT_FAILED,
                    format!("'curtin' {reason}"),
                    "",
                    "cmd-install",
                    at,
                );
                self.record(
                    index,
                    events::REQUEST_NODE_MARK_FAILED_SYSTEM,
                    INSTALLATION_FAILED,
                    "",
                    "mark_failed",
                    at,
                );
                self.set_status(index, Status::FailedDeployment, at);
                self.machines[index].error_description = INSTALLATION_FAILED.into();
            }
            None => {
                self.set_status(index, Status::Deployed, at);
                self.record(index, events::DEPLOYED, "", "", "", at);
            }
        }
    }

    // ---- release ---------------------------------------------------------

    /// `MachineHandler.release`: Ready and Releasing are no-ops; a
    /// releasable machine starts releasing: with any erase flag through
    /// Disk erasing (the `wipe-disks` script, `ReleaseForm.clean`), else
    /// Releasing until the power-off is confirmed, or Ready at once when
    /// the power is already off or cannot be controlled (`manual`).
    pub fn release(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let status = self.machines[index].status;
        if matches!(status, Status::Ready | Status::Releasing) {
            return Ok(());
        }
        if !status.releasable() {
            return fail(
                409,
                format!(
                    "Machine cannot be released in its current state ('{}').",
                    status.name()
                ),
            );
        }
        let flag = |key: &str| params.iter().any(|(k, v)| k == key && truthy(v));
        let (erase, quick, secure) = (flag("erase"), flag("quick_erase"), flag("secure_erase"));
        let comment = params
            .iter()
            .find(|(k, _)| k == "comment")
            .map(|(_, v)| v.as_str());
        let now = Instant::now();
        let release_for = Duration::from_secs_f64(self.settings.release_seconds.max(0.0));
        self.machines[index].last_release = Some(json!({
            "user": user.username, "erase": erase, "quick_erase": quick,
            "secure_erase": secure, "comment": comment,
        }));
        if erase || quick || secure {
            self.request_event(
                index,
                events::REQUEST_NODE_ERASE_DISK,
                user,
                "start disk erasing",
                comment,
                now,
            );
            self.set_status(index, Status::DiskErasing, now);
            let power = if self.machines[index].power_state == "on" {
                events::NODE_POWER_CYCLE_STARTING
            } else {
                events::NODE_POWER_ON_STARTING
            };
            self.record(index, power, "", "", "", now);
            self.machines[index].power_state = "on".into();
            self.schedule(index, now, release_for, &ERASE_STEPS);
            return Ok(());
        }
        self.request_event(
            index,
            events::REQUEST_NODE_RELEASE,
            user,
            "release",
            comment,
            now,
        );
        self.start_release(index, now);
        Ok(())
    }

    /// `Node._release`: Releasing, the deployment's settings cleared, the
    /// power-off asked for; finished at once when the power is off or
    /// cannot be controlled, else when the power-off is confirmed.
    fn start_release(&mut self, index: usize, now: Instant) {
        let release_for = Duration::from_secs_f64(self.settings.release_seconds.max(0.0));
        let m = &mut self.machines[index];
        let powered_off = m.power_state == "off";
        let manual = m.power_type == "manual";
        m.timeline.clear();
        m.fail_reason = None;
        self.clear_deployment(index);
        self.set_status(index, Status::Releasing, now);
        self.record(index, events::RELEASING, "", "", "", now);
        if powered_off || manual {
            self.finalize_release(index, now);
            return;
        }
        self.record(index, events::NODE_POWER_OFF_STARTING, "", "", "", now);
        if release_for.is_zero() {
            self.apply(index, Step::ReleaseDone, now);
        } else {
            self.schedule(index, now, release_for, &[(1.0, Step::ReleaseDone)]);
        }
    }

    /// What `_release` clears at once.
    fn clear_deployment(&mut self, index: usize) {
        let m = &mut self.machines[index];
        m.agent_name.clear();
        m.osystem.clear();
        m.distro_series.clear();
        m.hwe_kernel = None;
        m.enable_hw_sync = false;
    }

    /// `Node._finalize_release`: Ready, no owner, owner data deleted, the
    /// deployment's addresses released.
    fn finalize_release(&mut self, index: usize, at: Instant) {
        self.set_status(index, Status::Ready, at);
        self.release_auto_ips(index);
        let m = &mut self.machines[index];
        m.owner = None;
        m.owner_data.clear();
        m.ephemeral_deploy = false;
        m.user_data = None;
        m.timeline.clear();
        self.record(index, events::RELEASED, "", "", "", at);
    }

    // ---- power -----------------------------------------------------------

    /// `NodeHandler.power_on`: an unowned machine cannot start; on an
    /// Allocated machine it is a deployment with the defaults.
    pub fn power_on(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let m = &self.machines[index];
        if m.owner.is_none() {
            return fail(409, "Can't start node: it hasn't been allocated.");
        }
        if m.status == Status::Allocated {
            let defaults: Vec<(String, String)> = params
                .iter()
                .filter(|(k, _)| k == "user_data" || k == "comment")
                .cloned()
                .collect();
            return self.deploy(index, user, &defaults);
        }
        let comment = params
            .iter()
            .find(|(k, _)| k == "comment")
            .map(|(_, v)| v.as_str());
        let now = Instant::now();
        self.request_event(
            index,
            events::REQUEST_NODE_START,
            user,
            "start",
            comment,
            now,
        );
        self.record(index, events::NODE_POWER_ON_STARTING, "", "", "", now);
        self.machines[index].power_state = "on".into();
        self.record(index, events::NODE_POWERED_ON, "", "", "", now);
        Ok(())
    }

    /// `NodeHandler.power_off`: no state check; a power type MAAS cannot
    /// drive (`manual`) is left alone.
    pub fn power_off(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let comment = params
            .iter()
            .find(|(k, _)| k == "comment")
            .map(|(_, v)| v.as_str());
        let now = Instant::now();
        self.request_event(index, events::REQUEST_NODE_STOP, user, "stop", comment, now);
        if self.machines[index].power_type == "manual" {
            return Ok(());
        }
        self.record(index, events::NODE_POWER_OFF_STARTING, "", "", "", now);
        self.machines[index].power_state = "off".into();
        self.record(index, events::NODE_POWERED_OFF, "", "", "", now);
        Ok(())
    }

    // ---- owner data ------------------------------------------------------

    /// `set_workload_annotations` and, its deprecated alias since MAAS 3.0,
    /// `set_owner_data`: one store (`OwnerData`), merged key by key.
    pub fn set_owner_data(
        &mut self,
        index: usize,
        user: &User,
        params: &[(String, String)],
    ) -> Outcome<()> {
        let m = &self.machines[index];
        if m.owner.as_deref() != Some(&user.username) {
            let refusal = if self.settings.release_at_least(3, 0) {
                "Cannot set workload annotation: it hasn't been acquired."
            } else {
                "Cannot set owner data: it hasn't been allocated."
            };
            return fail(409, refusal);
        }
        // `request.POST.items()`: each key once, with its last value. Only
        // keys being set are checked against `DATA_KEY_RE` (`[\w.-]+$`,
        // `src/maasserver/models/ownerdata.py`); the ValueError is an
        // unhandled 500 and the request's transaction is rolled back.
        let mut items: Vec<(&str, &str)> = Vec::new();
        for (k, v) in params.iter().filter(|(k, _)| k != "op") {
            match items.iter_mut().find(|(key, _)| key == k) {
                Some(item) => item.1 = v,
                None => items.push((k, v)),
            }
        }
        if items.iter().any(|(k, v)| !v.is_empty() && !is_data_key(k)) {
            return fail(500, "Invalid character in key name");
        }
        let m = &mut self.machines[index];
        for (k, v) in items {
            if v.is_empty() {
                m.owner_data.remove(k);
            } else {
                m.owner_data.insert(k.to_owned(), v.to_owned());
            }
        }
        Ok(())
    }

    // ---- other machine ops -------------------------------------------------

    /// `abort_deploying`: back to Allocated, the power-off asked for.
    pub fn abort(&mut self, index: usize, user: &User, comment: Option<&str>) -> Outcome<()> {
        let m = &self.machines[index];
        if m.status != Status::Deploying {
            return fail(
                409,
                format!(
                    "Cannot abort in current state: node {} is in state {}.",
                    m.system_id,
                    m.status.name()
                ),
            );
        }
        let now = Instant::now();
        self.request_event(
            index,
            events::REQUEST_NODE_ABORT_DEPLOYMENT,
            user,
            "abort deploying",
            comment,
            now,
        );
        self.record(index, events::ABORTED_DEPLOYMENT, "", "", "", now);
        self.set_status(index, Status::Allocated, now);
        let m = &mut self.machines[index];
        m.timeline.clear();
        m.fail_reason = None;
        m.power_state = "off".into();
        Ok(())
    }

    /// `Node.mark_broken` (MAAS 3.5): a releasable machine is released
    /// first (`_release`: settings cleared, powered off, finished at once
    /// only if it was off), then Broken with no owner. A machine that was
    /// on keeps its owner data and addresses: MAAS finishes a release only
    /// from Releasing.
    pub fn mark_broken(&mut self, index: usize, user: &User, comment: Option<&str>) {
        let now = Instant::now();
        self.request_event(
            index,
            events::REQUEST_NODE_MARK_BROKEN,
            user,
            "mark broken",
            comment,
            now,
        );
        // MAAS keeps `previous_status` per save (a signal on the node),
        // and mark_broken saves once: a Deployed machine marked broken
        // remembers Deployed through its release (mark_fixed returns it
        // to Deployed; real MAAS 3.4.8).
        let before = self.machines[index].status;
        if self.machines[index].status.releasable() {
            let m = &mut self.machines[index];
            m.timeline.clear();
            m.fail_reason = None;
            let powered_off = m.power_state == "off" || m.power_type == "manual";
            self.clear_deployment(index);
            self.set_status(index, Status::Releasing, now);
            self.record(index, events::RELEASING, "", "", "", now);
            if powered_off {
                self.finalize_release(index, now);
            } else {
                self.record(index, events::NODE_POWER_OFF_STARTING, "", "", "", now);
                self.machines[index].power_state = "off".into();
                self.record(index, events::NODE_POWERED_OFF, "", "", "", now);
            }
        }
        self.machines[index].timeline.clear();
        self.set_status(index, Status::Broken, now);
        let m = &mut self.machines[index];
        m.previous_status = before;
        m.owner = None;
        m.error_description = comment.unwrap_or_default().to_owned();
    }

    /// `Node.mark_fixed`: Broken → Deployed if it was Deployed just
    /// before, else Ready.
    pub fn mark_fixed(&mut self, index: usize, user: &User, comment: Option<&str>) -> Outcome<()> {
        if self.machines[index].status != Status::Broken {
            return fail(409, "Can't mark a non-broken node as 'Ready'.");
        }
        let now = Instant::now();
        self.request_event(
            index,
            events::REQUEST_NODE_MARK_FIXED,
            user,
            "mark fixed",
            comment,
            now,
        );
        let next = if self.machines[index].previous_status == Status::Deployed {
            Status::Deployed
        } else {
            Status::Ready
        };
        self.set_status(index, next, now);
        let m = &mut self.machines[index];
        m.error_description.clear();
        m.osystem.clear();
        m.distro_series.clear();
        m.hwe_kernel = None;
        Ok(())
    }

    pub fn update_machine(&mut self, index: usize, params: &[(String, String)]) -> Outcome<()> {
        let mut swap = None;
        let mut zone = None;
        let mut pool = None;
        let mut domain = None;
        for (k, v) in params {
            match k.as_str() {
                "swap_size" => match parse_size(v) {
                    Some(n) => swap = Some(n),
                    None => {
                        return field_error("swap_size", "Invalid size for swap: ".to_owned() + v)
                    }
                },
                "zone" => match self.zones.iter().find(|z| &z.name == v) {
                    Some(z) => zone = Some(z.name.clone()),
                    None => {
                        return field_error(
                            "zone",
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    }
                },
                "pool" => match self.pools.iter().find(|p| &p.name == v) {
                    Some(p) => pool = Some(p.name.clone()),
                    None => {
                        return field_error(
                            "pool",
                            format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                        )
                    }
                },
                "domain" => {
                    match self
                        .domains
                        .iter()
                        .find(|d| &d.name == v || d.id.to_string() == *v)
                    {
                        Some(d) => domain = Some(d.id),
                        None => {
                            return field_error(
                                "domain",
                                format!(
                                "Select a valid choice. {v} is not one of the available choices."
                            ),
                            )
                        }
                    }
                }
                _ => {}
            }
        }
        let m = &mut self.machines[index];
        for (k, v) in params {
            match k.as_str() {
                "hostname" if !v.is_empty() => m.hostname = v.clone(),
                "description" => m.description = v.clone(),
                _ => {}
            }
        }
        if let Some(s) = swap {
            m.swap_size = Some(s);
        }
        if let Some(z) = zone {
            m.zone = z;
        }
        if let Some(p) = pool {
            m.pool = p;
        }
        if let Some(d) = domain {
            m.domain_id = d;
        }
        Ok(())
    }
}

/// The `(osystem, release)` a boot resource offers to deploy. Synced images
/// are named `os/release`; uploaded custom images are stored without their
/// `custom/` (a bare name is a custom release, as MAAS lists them); the
/// bootloaders (`grub-*`, `pxelinux`, `uboot`) are boot resources one cannot
/// deploy.
fn deployable_os_release(b: &BootResourceRec) -> Option<(String, String)> {
    let name = b.name.trim();
    match name.split_once('/') {
        Some((os, _))
            if os.starts_with("grub") || os.starts_with("pxelinux") || os.starts_with("uboot") =>
        {
            None
        }
        Some((os, release)) => Some((os.to_owned(), release.to_owned())),
        None if !name.is_empty() => Some(("custom".to_owned(), name.to_owned())),
        None => None,
    }
}

/// curtin's default failure message (its `cmd-install` stage).
pub(super) const DEFAULT_CURTIN_FAILURE: &str = "curtin command install";
/// `mark_failed`'s comment when curtin fails (`api_twisted.py`).
const INSTALLATION_FAILED: &str =
    "Installation failed (refer to the installation log for more information).";

/// A deployment as MAAS records it (fractions of `deploy_seconds`): the
/// power-on, the PXE boot into the ephemeral image, curtin's stages (the
/// INFO events of `EVENT_STATUS_MESSAGES` with curtin's own DEBUG
/// messages), the reboot, the local boot and cloud-init's final stage.
const DEPLOY_STEPS: [(f64, Step); 16] = [
    (0.05, Step::PoweredOn),
    (
        0.10,
        Step::Event(events::NODE_PXE_REQUEST, "installation", ""),
    ),
    (0.10, Step::Event(events::PERFORMING_PXE_BOOT, "", "")),
    (0.20, Step::Event(events::LOADING_EPHEMERAL, "", "")),
    (
        0.30,
        Step::Event(events::CONFIGURING_STORAGE, "", STAGE_PARTITIONING),
    ),
    (
        0.30,
        Step::Event(
            events::NODE_INSTALL_EVENT,
            "'curtin' configuring storage",
            STAGE_PARTITIONING,
        ),
    ),
    (0.45, Step::Event(events::INSTALLING_OS, "", STAGE_EXTRACT)),
    (
        0.45,
        Step::Event(
            events::NODE_INSTALL_EVENT,
            "'curtin' writing install sources to disk",
            STAGE_EXTRACT,
        ),
    ),
    (
        0.65,
        Step::Event(events::CONFIGURING_OS, "", STAGE_CURTHOOKS),
    ),
    (
        0.65,
        Step::Event(
            events::NODE_INSTALL_EVENT,
            "'curtin' configuring installed system",
            STAGE_CURTHOOKS,
        ),
    ),
    (
        0.80,
        Step::Event(
            events::NODE_INSTALL_EVENT,
            "'curtin' curtin command install",
            "cmd-install",
        ),
    ),
    (0.80, Step::Event(events::REBOOTING, "", "")),
    (
        0.90,
        Step::Event(events::NODE_PXE_REQUEST, "local boot", ""),
    ),
    (0.90, Step::Event(events::PERFORMING_PXE_BOOT, "", "")),
    (
        0.95,
        Step::Event(
            events::NODE_INSTALL_EVENT,
            "'cloudinit' running modules for final",
            "modules-final",
        ),
    ),
    (1.00, Step::DeployDone),
];
/// How many of [`DEPLOY_STEPS`] a failing deployment goes through: curtin
/// fails at the end of its install command, after configuring the OS.
const DEPLOY_STEPS_BEFORE_FAILURE: usize = 10;
/// A deployment to memory (`ephemeral_deploy`): no curtin, no reboot.
const EPHEMERAL_STEPS: [(f64, Step); 6] = [
    (0.05, Step::PoweredOn),
    (
        0.10,
        Step::Event(events::NODE_PXE_REQUEST, "installation", ""),
    ),
    (0.10, Step::Event(events::PERFORMING_PXE_BOOT, "", "")),
    (0.30, Step::Event(events::LOADING_EPHEMERAL, "", "")),
    (
        0.90,
        Step::Event(
            events::NODE_INSTALL_EVENT,
            "'cloudinit' running modules for final",
            "modules-final",
        ),
    ),
    (1.00, Step::DeployDone),
];
/// How many of [`EPHEMERAL_STEPS`] a failing deployment to memory goes
/// through.
const EPHEMERAL_STEPS_BEFORE_FAILURE: usize = 4;
/// A disk erasure (fractions of `release_seconds`): the ephemeral boot that
/// runs `wipe-disks`, then MAAS releases the machine.
const ERASE_STEPS: [(f64, Step); 5] = [
    (0.05, Step::Event(events::NODE_POWERED_ON, "", "")),
    (
        0.15,
        Step::Event(events::NODE_PXE_REQUEST, "commissioning", ""),
    ),
    (0.15, Step::Event(events::PERFORMING_PXE_BOOT, "", "")),
    (0.30, Step::Event(events::LOADING_EPHEMERAL, "", "")),
    (1.00, Step::EraseDone),
];
const STAGE_PARTITIONING: &str = "cmd-install/stage-partitioning";
const STAGE_EXTRACT: &str = "cmd-install/stage-extract";
const STAGE_CURTHOOKS: &str = "cmd-install/stage-curthooks";

/// Python's `re.match(r"[\w.-]+$", key)`: one or more word characters,
/// dots or dashes, and `$` also matches before one final newline.
fn is_data_key(key: &str) -> bool {
    let key = key.strip_suffix('\n').unwrap_or(key);
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '-')
}

/// `label:size(tags),size,...` → sizes in GB (tags are ignored).
pub(super) fn parse_storage(v: &str) -> Option<Vec<f64>> {
    let mut sizes = Vec::new();
    for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let entry = entry.split('(').next()?;
        let size = entry.rsplit(':').next()?;
        sizes.push(size.trim().parse::<f64>().ok()?);
    }
    Some(sizes)
}

/// The first size is for the boot disk, the rest for other distinct disks.
fn storage_fits(wanted: &[f64], disks: &[u64]) -> bool {
    let Some((&root, rest)) = wanted.split_first() else {
        return true;
    };
    let Some((&boot, others)) = disks.split_first() else {
        return false;
    };
    if (boot as f64) < root {
        return false;
    }
    let mut free: Vec<u64> = others.to_vec();
    for &need in rest {
        match free.iter().position(|&d| d as f64 >= need) {
            Some(i) => {
                free.remove(i);
            }
            None => return false,
        }
    }
    true
}

/// Bytes with optional K/M/G/T suffix.
fn parse_size(v: &str) -> Option<i64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], 1i64 << 10),
        'M' | 'm' => (&v[..v.len() - 1], 1 << 20),
        'G' | 'g' => (&v[..v.len() - 1], 1 << 30),
        'T' | 't' => (&v[..v.len() - 1], 1 << 40),
        _ => (v, 1),
    };
    let n: f64 = num.parse().ok()?;
    (n >= 0.0).then_some((n * mult as f64) as i64)
}

/// `No available machine matches constraints: [('cpu_count', ['4'])] (resolved to "cpu_count=4.0")`
fn no_match_message(given: &[&(String, String)]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut values: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, v) in given {
        if !order.contains(&k.as_str()) {
            order.push(k);
        }
        values.entry(k).or_default().push(v);
    }
    let repr: Vec<String> = order
        .iter()
        .map(|k| {
            let vs: Vec<String> = values[k].iter().map(|v| format!("'{v}'")).collect();
            format!("('{k}', [{}])", vs.join(", "))
        })
        .collect();
    let resolved: Vec<String> = values
        .iter()
        .map(|(k, vs)| {
            let joined: Vec<String> = vs
                .iter()
                .map(|v| match *k {
                    "cpu_count" | "mem" => v
                        .parse::<f64>()
                        .map(|n| format!("{n:?}"))
                        .unwrap_or_else(|_| v.to_string()),
                    _ => v.to_string(),
                })
                .collect();
            format!("{k}={}", joined.join(","))
        })
        .collect();
    format!(
        "No available machine matches constraints: [{}] (resolved to \"{}\")",
        repr.join(", "),
        resolved.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_match_message_matches_maas_format() {
        let a = ("cpu_count".to_owned(), "4".to_owned());
        let b = ("mem".to_owned(), "8192".to_owned());
        let c = ("pool".to_owned(), "default".to_owned());
        let d = ("zone".to_owned(), "default".to_owned());
        assert_eq!(
            no_match_message(&[&a, &b, &c, &d]),
            "No available machine matches constraints: [('cpu_count', ['4']), ('mem', ['8192']), \
             ('pool', ['default']), ('zone', ['default'])] (resolved to \"cpu_count=4.0 mem=8192.0 \
             pool=default zone=default\")"
        );
    }

    #[test]
    fn storage_constraints() {
        assert_eq!(parse_storage("root:50,100(ssd)"), Some(vec![50.0, 100.0]));
        assert_eq!(parse_storage("x:y"), None);
        assert!(storage_fits(&[50.0], &[120]));
        assert!(!storage_fits(&[200.0], &[120, 960]));
        assert!(storage_fits(&[100.0, 500.0], &[120, 960]));
        assert!(!storage_fits(&[100.0, 500.0, 500.0], &[120, 960]));
    }

    #[test]
    fn owner_data_keys_follow_maas_pattern() {
        assert!(is_data_key("capmaas-identity"));
        assert!(is_data_key("a.b_c-9"));
        assert!(is_data_key("ключ"));
        assert!(is_data_key("trailing\n"));
        assert!(!is_data_key(""));
        assert!(!is_data_key("a/b"));
        assert!(!is_data_key("a b"));
        assert!(!is_data_key("a\n\n"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
    }
}
