//! Which MAAS machine belongs to which MaasMachine: the identity capmaas
//! records on both sides, and the one check every action on a machine goes
//! through.
//!
//! The identity of a MaasMachine is `capmaas/<namespace>/<name>/<nonce>`,
//! kept in the annotation [`ANNOTATION`]. It is chosen once (the nonce is
//! the object's UID at that moment) and persisted before the first MAAS
//! write, so it survives `clusterctl move`, which recreates every object
//! with a new UID but carries annotations. It can name only its own object:
//! an annotation whose namespace/name part is not the object's own is
//! ignored, so a tenant writing annotations on its objects cannot claim a
//! machine allocated for an object in another namespace.
//!
//! In MAAS the identity is stored twice:
//! - as the allocation's `agent_name` (set by `allocate` in the same
//!   transaction as the allocation, so a crash right after it still finds
//!   the machine with `GET machines/?agent_name=`), and
//! - as the workload annotation [`OWNER_DATA_KEY`] (shown in every machine
//!   JSON, so every read verifies ownership at no extra call; MAAS clears
//!   it on release, so a machine that changed hands never carries it).
//!   MAAS 3.0 renamed owner data to workload annotations and kept the old
//!   names as aliases of the same store: [`write`] uses the op this MAAS
//!   has, and the identity is read from either field (`maas::Machine`'s
//!   `owner_data` holds both), so a machine marked by an older capmaas
//!   stays ours across a MAAS upgrade.
//!
//! A recorded `spec.systemID` is acted on (deploy, power, DNS, release) only
//! when MAAS shows that machine under this identity ([`Ownership::Ours`]).

use super::maas_view::MaasView;
use crate::api::ObjectMeta;
use crate::maas;

/// The MaasMachine annotation holding its identity. Its name predates the
/// identity rules: capmaas before them wrote `capmaas/<ns>/<name>/<uid>`
/// there at allocation, which is a valid identity, so such objects keep
/// theirs.
pub use crate::api::maas_machine::AGENT_NAME_ANNOTATION as ANNOTATION;

/// The MAAS workload annotation (owner data) key carrying the identity
/// (MAAS allows `[\w.-]+`).
pub use crate::maas::IDENTITY_KEY as OWNER_DATA_KEY;

/// MAAS stores `agent_name` in a 255-character column.
const MAX_LEN: usize = 255;

/// `capmaas/`, as the MAAS watch recognises identities.
const PREFIX: &str = crate::maas::IDENTITY_PREFIX;

/// The identity of one MaasMachine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity(String);

/// Annotation `capmaas adopt` writes on a MaasMachine it adopts: `pending`
/// together with the identity, before the MAAS owner data; the identity
/// once done (a change the controller watches, so it looks again at once).
pub const ADOPTED_ANNOTATION: &str = "capmaas.infrastructure.cluster.x-k8s.io/adopted";
pub const ADOPTION_PENDING: &str = "pending";

/// Whether an allocated machine under no identity of ours may still become
/// this object's through `capmaas adopt`: the object came from the Go
/// provider (a systemID but never an identity of capmaas's, which capmaas
/// always records before it allocates) or an adoption is under way. A
/// capmaas-made object's machine that MAAS shows under no identity was
/// released (the answer lost in a crash) and taken since: never ours again.
pub fn may_be_adopted(meta: &ObjectMeta) -> bool {
    matches!(Identity::recorded(meta), Recorded::Missing)
        || meta.annotations.contains_key(ADOPTED_ANNOTATION)
}

/// What the object's annotation says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A valid identity of this very object.
    Valid(Identity),
    /// No annotation: the object never had an identity.
    Missing,
    /// An annotation that names another object (copied or forged) or is
    /// malformed; never used.
    Foreign(String),
}

impl Identity {
    /// The identity recorded on the object.
    pub fn recorded(meta: &ObjectMeta) -> Recorded {
        let Some(value) = meta.annotations.get(ANNOTATION) else {
            return Recorded::Missing;
        };
        let nonce = value
            .strip_prefix(&own_prefix(meta))
            .filter(|nonce| !nonce.is_empty() && !nonce.contains('/'));
        match nonce {
            Some(_) if value.len() <= MAX_LEN => Recorded::Valid(Identity(value.clone())),
            _ => Recorded::Foreign(value.clone()),
        }
    }

    /// A new identity for an object that has none; `None` when the object
    /// has no UID yet or the names are too long for MAAS.
    pub fn new_for(meta: &ObjectMeta) -> Option<Identity> {
        if meta.uid.is_empty() || meta.name.is_empty() || meta.namespace.is_empty() {
            return None;
        }
        let value = format!("{}{}", own_prefix(meta), meta.uid);
        (value.len() <= MAX_LEN).then_some(Identity(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `capmaas/<namespace>/<name>/`: Kubernetes names contain no `/`, so this
/// prefix names exactly one object.
fn own_prefix(meta: &ObjectMeta) -> String {
    format!("{PREFIX}{}/{}/", meta.namespace, meta.name)
}

/// Whether a MAAS machine is this object's, as far as one machine JSON tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Owner data carries this identity.
    Ours,
    /// Owner data carries no capmaas identity: either an allocation whose
    /// owner data was not written yet (a crash between the two calls; the
    /// `agent_name` list settles it) or a machine capmaas never allocated
    /// (unallocated, someone else's, or the Go provider's before adoption).
    Unmarked,
    /// Owner data names another identity: never ours.
    Other(String),
}

pub fn ownership(machine: &maas::Machine, identity: &Identity) -> Ownership {
    match machine.owner_data.get(OWNER_DATA_KEY) {
        Some(value) if value == identity.as_str() => Ownership::Ours,
        Some(value) if !value.is_empty() => Ownership::Other(value.clone()),
        _ => Ownership::Unmarked,
    }
}

/// Writes `identity` into a machine we own, with the op this MAAS has
/// (`set_workload_annotations`, or `set_owner_data` before MAAS 3.0). The
/// version comes from the MAAS view's cache: no extra call per machine.
pub fn write(
    maas: &MaasView,
    system_id: &str,
    identity: &Identity,
) -> Result<maas::Machine, maas::Error> {
    let op = maas.version()?.annotations_op();
    let data = [(OWNER_DATA_KEY, Some(identity.as_str()))];
    maas.write(system_id, |client| {
        client.set_annotations(system_id, op, &data)
    })
}

/// Whether MAAS shows the machine under any capmaas identity.
pub fn marked(machine: &maas::Machine) -> bool {
    machine
        .owner_data
        .get(OWNER_DATA_KEY)
        .is_some_and(|v| !v.is_empty())
}

/// Why a recorded machine is not acted on, in words for a condition. The
/// object's author named the system ID, perhaps another tenant's: the
/// message says "not yours" and nothing of whose it is (no MAAS owner, no
/// other object's namespace, name or uid).
pub fn not_ours_message(system_id: &str, machine: Option<&maas::Machine>) -> String {
    let Some(machine) = machine else {
        return format!(
            "MAAS machine {system_id} is not allocated to this MaasMachine (it does not exist or is not visible to this MAAS user); left alone"
        );
    };
    let state = &machine.status_name;
    match (machine.owner.as_deref(), machine.owner_data.get(OWNER_DATA_KEY)) {
        (None, _) => format!(
            "MAAS machine {system_id} is {state:?} and not allocated to anyone, so not to this MaasMachine; capmaas deploys only machines it allocated itself; left alone"
        ),
        (Some(_), Some(other)) if !other.is_empty() => format!(
            "MAAS machine {system_id} belongs to another MaasMachine, not this one; left alone"
        ),
        (Some(_), _) => format!(
            "MAAS machine {system_id} ({state}) carries no capmaas identity; if the Go provider deployed it, an administrator adopts it with `capmaas adopt`; left alone"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ns: &str, name: &str, uid: &str, annotation: Option<&str>) -> ObjectMeta {
        let mut m = ObjectMeta {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            ..ObjectMeta::default()
        };
        if let Some(a) = annotation {
            m.annotations.insert(ANNOTATION.into(), a.into());
        }
        m
    }

    fn machine(owner: Option<&str>, identity: Option<&str>) -> maas::Machine {
        let mut m = maas::Machine {
            system_id: "abc123".into(),
            status_name: "Deployed".into(),
            owner: owner.map(str::to_string),
            ..maas::Machine::default()
        };
        if let Some(id) = identity {
            m.owner_data.insert(OWNER_DATA_KEY.into(), id.into());
        }
        m
    }

    #[test]
    fn a_new_identity_names_the_object_and_survives_a_new_uid() {
        let before_move = meta("team-a", "cp-0", "uid-1", None);
        let id = Identity::new_for(&before_move).unwrap();
        assert_eq!(id.as_str(), "capmaas/team-a/cp-0/uid-1");
        // clusterctl move: same namespace/name and annotation, new UID.
        let after_move = meta("team-a", "cp-0", "uid-2", Some(id.as_str()));
        assert_eq!(Identity::recorded(&after_move), Recorded::Valid(id));
    }

    #[test]
    fn an_annotation_naming_another_object_is_foreign() {
        for forged in [
            "capmaas/victim/cp-0/uid-9",
            "capmaas/team-a/cp-1/uid-9",
            "capmaas/team-a/cp-0/",
            "capmaas/team-a/cp-0/a/b",
            "capmaas/team-a/cp-0",
            "other/team-a/cp-0/x",
            "",
        ] {
            let m = meta("team-a", "cp-0", "u", Some(forged));
            assert_eq!(
                Identity::recorded(&m),
                Recorded::Foreign(forged.into()),
                "{forged}"
            );
        }
        // A namespace that is a prefix of another does not match it.
        let m = meta("team", "a-cp-0", "u", Some("capmaas/team-a/cp-0/u"));
        assert!(matches!(Identity::recorded(&m), Recorded::Foreign(_)));
        assert_eq!(
            Identity::recorded(&meta("n", "m", "u", None)),
            Recorded::Missing
        );
    }

    #[test]
    fn no_identity_without_uid_or_when_maas_cannot_store_it() {
        assert_eq!(Identity::new_for(&meta("ns", "m", "", None)), None);
        let long = "x".repeat(253);
        assert_eq!(Identity::new_for(&meta("ns", &long, "uid", None)), None);
        let too_long = format!("capmaas/ns/{long}/uid");
        assert!(matches!(
            Identity::recorded(&meta("ns", &long, "uid", Some(&too_long))),
            Recorded::Foreign(_)
        ));
    }

    #[test]
    fn ownership_is_read_from_owner_data() {
        let id = Identity::new_for(&meta("ns", "m", "u", None)).unwrap();
        assert_eq!(
            ownership(&machine(Some("capmaas"), Some(id.as_str())), &id),
            Ownership::Ours
        );
        assert_eq!(
            ownership(&machine(Some("capmaas"), None), &id),
            Ownership::Unmarked
        );
        assert_eq!(
            ownership(&machine(Some("capmaas"), Some("")), &id),
            Ownership::Unmarked
        );
        assert_eq!(
            ownership(&machine(Some("capmaas"), Some("capmaas/x/y/z")), &id),
            Ownership::Other("capmaas/x/y/z".into())
        );
    }

    #[test]
    fn messages_say_why_a_machine_is_left_alone() {
        assert!(not_ours_message("abc123", None).contains("does not exist or is not visible"));
        let ready = maas::Machine {
            status_name: "Ready".into(),
            ..machine(None, None)
        };
        assert!(not_ours_message("abc123", Some(&ready)).contains("not allocated to anyone"));
        let other = machine(Some("capmaas"), Some("capmaas/victim/cp-0/u"));
        let why = not_ours_message("abc123", Some(&other));
        assert!(why.contains("belongs to another MaasMachine"), "{why}");
        for secret in ["victim", "cp-0", "capmaas\"", "/u"] {
            assert!(!why.contains(secret), "{secret} shown: {why}");
        }
        let go = machine(Some("admin"), None);
        let why = not_ours_message("abc123", Some(&go));
        assert!(why.contains("capmaas adopt"), "{why}");
        assert!(!why.contains("\"admin\""), "the owner is not shown: {why}");
    }
}
