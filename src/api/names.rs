//! Names in cached objects held without an allocation when capmaas knows
//! them.
//!
//! Thousands of cached objects repeat the same few dozen strings: condition
//! types and reasons, label and annotation keys, owner references' API
//! versions and kinds, address types. musl's allocator takes 32–48 bytes
//! for each such small string, about 15 per MaasMachine. A [`Name`] that
//! equals one of the constants below is a reference to it instead; any
//! other value (a reason another controller wrote, a user's label) is owned
//! as before. The table changes no value, only how it is held, and nothing
//! a tenant writes makes it grow.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use serde::de::{Deserializer, Error, Visitor};

use super::{capi, conditions, maas_cluster, maas_machine, maas_remediation};

/// A string that is usually a known name: reads, compares and prints as a
/// `&str`; decoded with [`decode`].
pub type Name = Cow<'static, str>;

/// `text` as a [`Name`]: the constant when capmaas knows it.
pub fn name(text: &str) -> Name {
    match known(text) {
        Some(constant) => Cow::Borrowed(constant),
        None => Cow::Owned(text.to_owned()),
    }
}

/// `text` as a [`Name`], keeping its allocation when it is not known.
pub fn name_from(text: String) -> Name {
    match known(&text) {
        Some(constant) => Cow::Borrowed(constant),
        None => Cow::Owned(text),
    }
}

fn known(text: &str) -> Option<&'static str> {
    static SORTED: OnceLock<Vec<&'static str>> = OnceLock::new();
    let sorted = SORTED.get_or_init(|| {
        let mut names = KNOWN.to_vec();
        names.sort_unstable();
        names.dedup();
        names
    });
    let at = sorted.binary_search(&text).ok()?;
    sorted.get(at).copied()
}

/// Decodes a JSON string as a [`Name`] (`#[serde(deserialize_with)]`).
pub fn decode<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Name, D::Error> {
    struct Text;
    impl Visitor<'_> for Text {
        type Value = Name;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: Error>(self, text: &str) -> Result<Name, E> {
            Ok(name(text))
        }
        fn visit_string<E: Error>(self, text: String) -> Result<Name, E> {
            Ok(name_from(text))
        }
    }
    deserializer.deserialize_str(Text)
}

/// What capmaas writes itself and reads back from the objects it caches,
/// and what Cluster API and Kubernetes write into them.
const KNOWN: &[&str] = &[
    super::API_VERSION,
    "cluster.x-k8s.io/v1beta1",
    "cluster.x-k8s.io/v1beta2",
    "MachineSet",
    "KubeadmControlPlane",
    "ExternalIP",
    "InternalIP",
    "ExternalDNS",
    "InternalDNS",
    "Hostname",
    // Condition types and reasons, labels, annotations, finalizers.
    conditions::READY,
    conditions::PAUSED,
    conditions::PAUSED_REASON,
    conditions::NOT_PAUSED_REASON,
    conditions::ISSUES_REPORTED,
    conditions::UNKNOWN_REPORTED,
    conditions::INFO_REPORTED,
    maas_machine::KIND,
    maas_machine::FINALIZER,
    maas_machine::AGENT_NAME_ANNOTATION,
    maas_machine::MACHINE_DEPLOYED,
    maas_machine::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
    maas_machine::WAITING_FOR_BOOTSTRAP_DATA,
    maas_machine::MACHINE_NOT_FOUND,
    maas_machine::MACHINE_DEPLOY_STARTED,
    maas_machine::MACHINE_DEPLOY_FAILED,
    maas_machine::MACHINE_DEPLOYING,
    maas_machine::MACHINE_TERMINATED,
    maas_machine::MACHINE_POWERED_OFF,
    maas_machine::MACHINE_STATE_UNDEFINED,
    maas_machine::MACHINE_POWER_STATE_UNKNOWN,
    maas_machine::DELETED,
    maas_machine::DNS_ATTACHED,
    maas_machine::DNS_ATTACH_PENDING,
    maas_machine::DNS_DETACH_PENDING,
    maas_machine::MACHINE_NOT_OWNED,
    maas_machine::SWAP_DISABLED,
    maas_machine::UNSUPPORTED_BY_MAAS,
    maas_machine::SWAP_UPDATE_SKIPPED,
    maas_machine::SWAP_UPDATE_DISABLED,
    maas_machine::CREDENTIALS_UNAVAILABLE,
    maas_machine::NODE_PROVIDER_ID_SET,
    maas_machine::FAILURE_DOMAIN_MATCHED,
    maas_machine::FAILURE_DOMAIN_FALLBACK,
    maas_machine::WAITING_FOR_NODE,
    maas_machine::NODE_PROVIDER_ID_MISMATCH,
    maas_machine::UPDATE_MACHINE_ERROR,
    maas_machine::VM_NAME_ANNOTATION,
    maas_machine::UNSUPPORTED_FIELD,
    maas_machine::UNSUPPORTED_BOOTSTRAP_FORMAT,
    maas_cluster::KIND,
    maas_cluster::FINALIZER,
    maas_cluster::LOAD_BALANCER_READY,
    maas_cluster::LOAD_BALANCER_FAILED,
    maas_cluster::WAIT_FOR_DNS_NAME,
    maas_cluster::API_SERVER_AVAILABLE,
    maas_cluster::API_SERVER_NOT_READY,
    maas_cluster::WAITING_FOR_CLUSTER,
    maas_cluster::DELETING,
    maas_cluster::CREDENTIALS_READY,
    maas_cluster::CREDENTIALS_UNAVAILABLE,
    maas_cluster::DNS_NAME_IN_USE,
    maas_cluster::DNS_RECORD_NOT_OURS,
    maas_cluster::CONTROL_PLANE_VIP_RESERVED,
    maas_cluster::CONTROL_PLANE_VIP_IN_USE,
    maas_cluster::CONTROL_PLANE_VIP_FAILED,
    maas_cluster::CONTROL_PLANE_VIP,
    maas_cluster::VIP_RESERVING,
    maas_cluster::CUSTOM_DNS_ANNOTATION,
    maas_cluster::CUSTOM_ENDPOINT,
    maas_cluster::WAITING_FOR_CUSTOM_ENDPOINT,
    maas_cluster::UNSUPPORTED_FIELD,
    maas_cluster::VIP_RESERVED,
    maas_cluster::VIP_EXTERNAL,
    maas_cluster::IDENTITY_KIND_SECRET,
    maas_remediation::KIND,
    maas_remediation::TEMPLATE_KIND,
    maas_remediation::FINALIZER,
    maas_remediation::REBOOT,
    maas_remediation::PHASE_RUNNING,
    maas_remediation::PHASE_WAITING,
    maas_remediation::PHASE_DELETING_MACHINE,
    maas_remediation::PHASE_FAILED,
    maas_remediation::POWER_CYCLED,
    maas_remediation::POWERING_OFF,
    maas_remediation::POWER_OFF_REQUESTED,
    maas_remediation::POWERING_ON,
    maas_remediation::POWER_ON_REQUESTED,
    maas_remediation::POWER_CYCLE_TIMED_OUT,
    maas_remediation::OWNER_REMEDIATION_REQUESTED,
    maas_remediation::RETRIES_EXHAUSTED,
    maas_remediation::MARKED_BROKEN,
    maas_remediation::NODE_OUT_OF_SERVICE,
    maas_remediation::OUT_OF_SERVICE_TAINT_ADDED,
    maas_remediation::OUT_OF_SERVICE_TAINT_FAILED,
    maas_remediation::NODE_BACK_IN_SERVICE,
    maas_remediation::CANNOT_POWER_CYCLE,
    maas_remediation::MACHINE_NOT_FOUND,
    maas_remediation::NOT_A_MAAS_MACHINE,
    maas_remediation::MACHINE_NOT_OWNED,
    maas_remediation::CREDENTIALS_UNAVAILABLE,
    maas_remediation::HISTORY_ANNOTATION,
    maas_remediation::MACHINE_OWNER_REMEDIATED,
    maas_remediation::WAITING_FOR_REMEDIATION,
    capi::GROUP,
    capi::CLUSTER_KIND,
    capi::MACHINE_KIND,
    capi::CLUSTER_NAME_LABEL,
    capi::CONTROL_PLANE_LABEL,
    capi::PAUSED_ANNOTATION,
    capi::MANAGED_BY_ANNOTATION,
    capi::WATCH_FILTER_LABEL,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_are_borrowed_and_others_owned() {
        assert!(matches!(name(conditions::READY), Cow::Borrowed(_)));
        assert!(matches!(
            name_from(capi::CLUSTER_NAME_LABEL.to_string()),
            Cow::Borrowed(_)
        ));
        let other = name("SomeoneElsesReason");
        assert!(matches!(other, Cow::Owned(_)));
        assert_eq!(other, "SomeoneElsesReason");
        let condition: conditions::Condition = serde_json::from_value(serde_json::json!({
            "type": "Ready", "status": "False", "reason": "Custom\u{e9}", "lastTransitionTime": ""
        }))
        .unwrap();
        assert!(matches!(condition.type_, Cow::Borrowed("Ready")));
        assert_eq!(condition.reason, "Customé");
        assert!(serde_json::from_value::<conditions::Condition>(
            serde_json::json!({"type": 1, "status": "True"})
        )
        .is_err());
    }
}
