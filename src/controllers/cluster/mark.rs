//! What marks a MAAS object as this MaasCluster's: its identity
//! `capmaas/<namespace>/<name>/<nonce>` (`controllers::identity`, the same
//! scheme as a MaasMachine's), kept in the annotation `identity::ANNOTATION`.
//! Chosen once and persisted before the first MAAS write that carries it,
//! it survives `clusterctl move` (annotations are moved, UIDs are not) and
//! names only its own object, so a tenant cannot write another cluster's.
//!
//! A VIP reservation carries it as the `mac=` of the reserve call: a
//! locally administered unicast MAC from the SHA-256 of the identity
//! (MAAS has no free text on a reservation, but lists the MAC). The API
//! server DNS record carries it as a TXT record on its name,
//! `capmaas-owner=<SHA-256 of the identity, 32 hex digits>` (MAAS has no
//! description on a DNS resource, but lists its `resource_records`; the
//! hash keeps namespace and name out of public DNS).

use serde_json::json;

use super::ClusterReconciling;
use crate::controllers::identity::{self, Identity, Recorded};
use crate::controllers::Error;

/// The cluster's identity, chosen and persisted (guarded by
/// resourceVersion) if it has none, or one naming another object.
pub(super) fn ensure_identity(r: &mut ClusterReconciling) -> Result<Identity, Error> {
    let foreign = match Identity::recorded(&r.object.metadata) {
        Recorded::Valid(identity) => return Ok(identity),
        Recorded::Missing => None,
        Recorded::Foreign(value) => Some(value),
    };
    let Some(identity) = Identity::new_for(&r.object.metadata) else {
        return Err(Error::Retry(format!(
            "{}: the namespace and name are too long for a MAAS identity",
            r.key()
        )));
    };
    if let Some(foreign) = foreign {
        r.warning_event(
            "IdentityReplaced",
            &format!(
                "annotation {} named another object ({foreign:?}); this MaasCluster's identity \
                 is {identity}",
                identity::ANNOTATION
            ),
        );
    }
    let version = r.object.metadata.resource_version.clone();
    r.patch(&json!({"metadata": {
        "annotations": {identity::ANNOTATION: identity.as_str()},
        "resourceVersion": version,
    }}))?;
    r.object.metadata.annotations.insert(
        identity::ANNOTATION.to_string(),
        identity.as_str().to_string(),
    );
    Ok(identity)
}

/// The MAC that marks a reservation as `identity`'s: `x2:xx:xx:xx:xx:xx`
/// (locally administered, unicast, so never a real NIC's), the first six
/// bytes of SHA-256 (rustls's ring provider; no crate of its own).
pub(super) fn reservation_mac(identity: &Identity) -> Result<String, Error> {
    let bytes = sha256(identity, "reservation mark")?;
    let (Some(first), Some(rest)) = (bytes.first(), bytes.get(1..6)) else {
        return Err(Error::Retry(
            "short SHA-256 for the reservation mark".into(),
        ));
    };
    let mut mac = format!("{:02x}", (first & 0xfc) | 0x02);
    for b in rest {
        mac.push_str(&format!(":{b:02x}"));
    }
    Ok(mac)
}

/// The TXT data that marks a DNS record as `identity`'s.
pub(super) fn dns_mark(identity: &Identity) -> Result<String, Error> {
    let bytes = sha256(identity, "ownership mark")?;
    let hex: String = bytes.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Ok(format!("{DNS_MARK_PREFIX}{hex}"))
}

pub(super) const DNS_MARK_PREFIX: &str = "capmaas-owner=";

/// SHA-256 from rustls's ring provider (no crate of its own), for the
/// mark `what`.
fn sha256(identity: &Identity, what: &str) -> Result<Vec<u8>, Error> {
    rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .map(|suite| {
            suite
                .common
                .hash_provider
                .hash(identity.as_str().as_bytes())
                .as_ref()
                .to_vec()
        })
        .ok_or_else(|| Error::Retry(format!("no SHA-256 for the {what}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectMeta;

    fn identity(ns: &str, name: &str, uid: &str) -> Identity {
        let meta = ObjectMeta {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            ..ObjectMeta::default()
        };
        Identity::new_for(&meta).unwrap()
    }

    #[test]
    fn the_reservation_mac_is_a_local_unicast_mac_per_identity() {
        let a = reservation_mac(&identity("team-a", "c1", "u1")).unwrap();
        assert_eq!(a.len(), 17, "{a}");
        let first = u8::from_str_radix(&a[..2], 16).unwrap();
        assert_eq!(first & 0x03, 0x02, "locally administered, unicast: {a}");
        assert_eq!(a, reservation_mac(&identity("team-a", "c1", "u1")).unwrap());
        assert_ne!(a, reservation_mac(&identity("team-b", "c1", "u1")).unwrap());
        assert_ne!(a, reservation_mac(&identity("team-a", "c1", "u2")).unwrap());
    }

    #[test]
    fn the_dns_mark_is_a_hash_of_the_identity() {
        let a = dns_mark(&identity("team-a", "c1", "u1")).unwrap();
        assert!(a.starts_with("capmaas-owner="), "{a}");
        assert_eq!(a.len(), "capmaas-owner=".len() + 32);
        assert!(!a.contains("team-a"), "no names in public DNS: {a}");
        assert_eq!(a, dns_mark(&identity("team-a", "c1", "u1")).unwrap());
        assert_ne!(a, dns_mark(&identity("team-b", "c1", "u1")).unwrap());
    }
}
