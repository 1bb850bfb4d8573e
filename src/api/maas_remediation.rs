//! `MaasRemediation` and `MaasRemediationTemplate`
//! (infrastructure.cluster.x-k8s.io/v1beta1): Cluster API's external
//! remediation for MAAS machines, modelled on CAPM3's `Metal3Remediation`
//! (`spec.strategy {type, retryLimit, timeout}`, status `{phase,
//! retryCount, lastRemediated}`).
//!
//! A MachineHealthCheck whose `spec.remediation.templateRef` names a
//! MaasRemediationTemplate creates one MaasRemediation per unhealthy
//! Machine, with the Machine's name and namespace and an owner reference to
//! it, and deletes it once the Machine is healthy again. What capmaas does
//! with it is in `controllers::remediation`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::capi;
use super::conditions::Condition;
use super::meta::ObjectMeta;

pub const KIND: &str = "MaasRemediation";
pub const TEMPLATE_KIND: &str = "MaasRemediationTemplate";
pub const FINALIZER: &str = "maasremediation.infrastructure.cluster.x-k8s.io";

/// The one strategy: power-cycle the MAAS machine.
pub const REBOOT: &str = "Reboot";
pub const DEFAULT_RETRY_LIMIT: u32 = 1;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// `status.phase`, CAPM3's values.
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_WAITING: &str = "Waiting";
pub const PHASE_DELETING_MACHINE: &str = "Deleting machine";
pub const PHASE_FAILED: &str = "Failed";

/// Condition: the current power cycle. False while it runs (the reason
/// says which step, and is what a restarted controller resumes from), True
/// once MAAS reported the machine on again.
pub const POWER_CYCLED: &str = "PowerCycled";
/// Reasons of [`POWER_CYCLED`], in order. `*ing` is the intent, persisted
/// before the MAAS call; `*Requested` is written after MAAS accepted it.
pub const POWERING_OFF: &str = "PoweringOff";
pub const POWER_OFF_REQUESTED: &str = "PowerOffRequested";
pub const POWERING_ON: &str = "PoweringOn";
pub const POWER_ON_REQUESTED: &str = "PowerOnRequested";
/// The power cycle did not finish within `timeout`.
pub const POWER_CYCLE_TIMED_OUT: &str = "PowerCycleTimedOut";

/// Condition: capmaas handed the Machine back to its owner (the Machine's
/// `OwnerRemediated` condition set to False), so Cluster API replaces it.
pub const OWNER_REMEDIATION_REQUESTED: &str = "OwnerRemediationRequested";
/// Reasons of [`OWNER_REMEDIATION_REQUESTED`].
pub const RETRIES_EXHAUSTED: &str = "RetriesExhausted";
/// Condition (True, same reason) once the retries are spent: the machine
/// is Broken in MAAS, so nobody allocates it until an administrator marks
/// it fixed; its message names the machine and the comment MAAS shows.
pub const MARKED_BROKEN: &str = "MarkedBroken";
/// Condition: True (reason `OutOfServiceTaintAdded`) while the Node has
/// the `node.kubernetes.io/out-of-service` taint capmaas gave it when MAAS
/// reported the machine off; False `NodeBackInService` once taken off, or
/// `OutOfServiceTaintFailed` when the workload API could not be written
/// (the power cycle goes on).
pub const NODE_OUT_OF_SERVICE: &str = "NodeOutOfService";
pub const OUT_OF_SERVICE_TAINT_ADDED: &str = "OutOfServiceTaintAdded";
pub const OUT_OF_SERVICE_TAINT_FAILED: &str = "OutOfServiceTaintFailed";
pub const NODE_BACK_IN_SERVICE: &str = "NodeBackInService";
pub const CANNOT_POWER_CYCLE: &str = "CannotPowerCycle";
/// Condition reason when there is nothing capmaas may act on (no such
/// Machine, or not a MaasMachine's).
pub const MACHINE_NOT_FOUND: &str = "MachineNotFound";
pub const NOT_A_MAAS_MACHINE: &str = "NotAMaasMachine";
/// Condition reason when MAAS does not show the machine under the
/// MaasMachine's identity (controllers::identity): never power-cycled, and
/// not handed back either (its deletion would not release it).
pub const MACHINE_NOT_OWNED: &str = super::maas_machine::MACHINE_NOT_OWNED;
/// Condition reason when the cluster's MAAS credentials cannot be used.
pub const CREDENTIALS_UNAVAILABLE: &str = super::maas_machine::CREDENTIALS_UNAVAILABLE;

/// On a MaasMachine: the power cycles of its current run of remediations,
/// `{"retryCount":N,"lastRemediated":"<RFC 3339>"}`. A MachineHealthCheck
/// deletes a MaasRemediation as soon as the Node's condition changed more
/// recently than its timeout (which a reboot always does), and creates a
/// new one when the Node is still unhealthy; the count lives here so that
/// the new one goes on counting instead of power-cycling forever.
pub const HISTORY_ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/remediation";
/// A remediation within this long of the previous power cycle continues its
/// count (Cluster API's KubeadmControlPlane `minHealthyPeriod` default).
pub const MIN_HEALTHY_PERIOD: Duration = Duration::from_secs(3600);

/// The v1beta2 condition on a Machine that hands it to its owner
/// (MachineSet or control plane) for remediation, and its reason.
pub const MACHINE_OWNER_REMEDIATED: &str = "OwnerRemediated";
pub const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasRemediation {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: MaasRemediationSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MaasRemediationStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MaasRemediationSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RemediationStrategy>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStrategy {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
    /// A Go duration (`10m`, `1h30m`, `90s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaasRemediationStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Power cycles started for this Machine (including those of earlier
    /// MaasRemediations within [`MIN_HEALTHY_PERIOD`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_count: u32,
    /// When the current (last) power cycle started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_remediated: Option<String>,
    /// The Node given the out-of-service taint while its machine was off,
    /// until the taint is taken off again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_service_node: Option<String>,
    /// The Node as it was when its machine went off: put back on a Node
    /// registered anew (a new uid) once the machine is up again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_node: Option<SavedNode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A Node's name, uid and the labels and annotations it carried.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedNode {
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl MaasRemediation {
    /// The Machine to remediate: the owner Machine (the MachineHealthCheck
    /// sets it), else the Machine of the same name.
    pub fn machine_name(&self) -> &str {
        self.metadata
            .owner(capi::GROUP, capi::MACHINE_KIND)
            .map_or(self.metadata.name.as_str(), |o| o.name.as_str())
    }

    pub fn retry_limit(&self) -> u32 {
        self.strategy()
            .and_then(|s| s.retry_limit)
            .unwrap_or(DEFAULT_RETRY_LIMIT)
            .max(1)
    }

    /// `spec.strategy.timeout`, or [`DEFAULT_TIMEOUT`] when unset or not a
    /// duration (the CRD's pattern rejects those).
    pub fn timeout(&self) -> Duration {
        self.strategy()
            .and_then(|s| s.timeout.as_deref())
            .and_then(parse_duration)
            .unwrap_or(DEFAULT_TIMEOUT)
    }

    /// `spec.strategy.type`; `Reboot` when unset.
    pub fn strategy_type(&self) -> &str {
        self.strategy()
            .and_then(|s| s.type_.as_deref())
            .unwrap_or(REBOOT)
    }

    fn strategy(&self) -> Option<&RemediationStrategy> {
        self.spec.strategy.as_ref()
    }
}

/// What [`HISTORY_ANNOTATION`] holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    pub retry_count: u32,
    pub last_remediated: String,
}

impl History {
    /// The history recorded on a MaasMachine; `None` when absent or not ours
    /// to read.
    pub fn of(meta: &ObjectMeta) -> Option<History> {
        let value = meta.annotations.get(HISTORY_ANNOTATION)?;
        serde_json::from_str(value).ok()
    }

    pub fn to_annotation(&self) -> String {
        // Two plain fields: cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A Go `time.Duration` string (`300ms`, `1.5h`, `2h45m`): one or more
/// decimal numbers, each with a unit of `ns`, `us`, `µs`, `ms`, `s`, `m`,
/// `h`. `None` for anything else (a bare number, a sign, no digits).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * seconds;
        rest = after;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("10m"), Some(600.0));
        assert_eq!(secs("1h30m"), Some(5400.0));
        assert_eq!(secs("1.5h"), Some(5400.0));
        assert_eq!(secs("90s"), Some(90.0));
        assert_eq!(secs("2h45m10s"), Some(9910.0));
        assert_eq!(secs("300ms"), Some(0.3));
        assert_eq!(secs("0s"), Some(0.0));
        for bad in ["", "10", "m", "-5m", "5 m", "1d", ".m", "5m3", "1e3s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_remediation_from_the_machine_health_check_reads_back() {
        let r: MaasRemediation = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "MaasRemediation",
            "metadata": {"name": "md-0-abc", "namespace": "ns",
                         "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                         "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                                              "name": "md-0-abc", "uid": "u1"}]},
            "spec": {"strategy": {"type": "Reboot", "retryLimit": 3, "timeout": "5m"}},
            "status": {"phase": "Waiting", "retryCount": 2, "lastRemediated": "2026-01-01T00:00:00Z"}
        }))
        .unwrap();
        assert_eq!(r.machine_name(), "md-0-abc");
        assert_eq!(r.retry_limit(), 3);
        assert_eq!(r.timeout(), Duration::from_secs(300));
        assert_eq!(r.strategy_type(), REBOOT);
        let status = r.status.as_ref().unwrap();
        assert_eq!((status.phase.as_str(), status.retry_count), ("Waiting", 2));

        let defaults = MaasRemediation::default();
        assert_eq!(defaults.retry_limit(), DEFAULT_RETRY_LIMIT);
        assert_eq!(defaults.timeout(), DEFAULT_TIMEOUT);
    }

    #[test]
    fn history_round_trips_through_its_annotation() {
        let h = History {
            retry_count: 2,
            last_remediated: "2026-01-01T00:00:00Z".into(),
        };
        let mut meta = ObjectMeta::default();
        meta.annotations
            .insert(HISTORY_ANNOTATION.into(), h.to_annotation());
        assert_eq!(History::of(&meta), Some(h));
        meta.annotations
            .insert(HISTORY_ANNOTATION.into(), "garbage".into());
        assert_eq!(History::of(&meta), None);
    }
}
