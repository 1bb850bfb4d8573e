//! Orphans: machines MAAS shows under a capmaas identity that no object
//! claims (after a crash, a deleted namespace, a hand edit). Reporting
//! only: nothing here releases anything.

use std::sync::Arc;

use crate::maas::{Machine, MachineStatus};

/// What [`find_orphans`] found, each list ordered by system_id.
#[derive(Debug, Clone, Default)]
pub struct Orphans {
    /// Carry a capmaas identity (owner data `capmaas-identity`) that
    /// nobody claims.
    pub unclaimed: Vec<Arc<Machine>>,
    /// Owned by the listed user but carry no capmaas identity: machines
    /// the Go provider deployed (until adopted), machines allocated by hand
    /// with the same account, or an allocation whose owner data a crash
    /// kept from being written (its `agent_name` settles which; MAAS's
    /// machine JSON does not show it).
    pub unmarked: Vec<Arc<Machine>>,
}

impl Orphans {
    pub fn is_empty(&self) -> bool {
        self.unclaimed.is_empty() && self.unmarked.is_empty()
    }
}

/// Sorts `machines` (one MAAS user's, from a list or the watch's view) by
/// whether an identity the caller knows claims them. Machines on their way
/// back to the pool (Releasing, Disk erasing) are nobody's orphans.
pub fn find_orphans(machines: &[Arc<Machine>], is_claimed: impl Fn(&str) -> bool) -> Orphans {
    let mut orphans = Orphans::default();
    for machine in machines {
        if matches!(
            machine.status,
            MachineStatus::Releasing | MachineStatus::DiskErasing
        ) || machine.owner.is_none()
        {
            continue;
        }
        match machine.identity() {
            Some(identity) if is_claimed(identity) => {}
            Some(_) => orphans.unclaimed.push(Arc::clone(machine)),
            None => orphans.unmarked.push(Arc::clone(machine)),
        }
    }
    orphans
        .unclaimed
        .sort_by(|a, b| a.system_id.cmp(&b.system_id));
    orphans
        .unmarked
        .sort_by(|a, b| a.system_id.cmp(&b.system_id));
    orphans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maas::IDENTITY_KEY;

    fn machine(id: &str, status: MachineStatus, identity: Option<&str>) -> Arc<Machine> {
        let mut m = Machine {
            system_id: id.into(),
            status,
            owner: Some("capmaas".into()),
            ..Machine::default()
        };
        if let Some(identity) = identity {
            m.owner_data.insert(IDENTITY_KEY.into(), identity.into());
        }
        Arc::new(m)
    }

    #[test]
    fn unclaimed_identities_and_unmarked_machines_are_told_apart() {
        let machines = vec![
            machine("claimed", MachineStatus::Deployed, Some("capmaas/ns/a/1")),
            machine("orphan", MachineStatus::Deployed, Some("capmaas/gone/b/2")),
            machine(
                "leaving",
                MachineStatus::Releasing,
                Some("capmaas/gone/c/3"),
            ),
            machine("by-hand", MachineStatus::Deployed, None),
            machine("foreign", MachineStatus::Allocated, Some("not-ours")),
        ];
        let orphans = find_orphans(&machines, |id| id == "capmaas/ns/a/1");
        let ids = |v: &[Arc<Machine>]| v.iter().map(|m| m.system_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&orphans.unclaimed), ["orphan"]);
        // A value without the capmaas prefix is not a capmaas identity.
        assert_eq!(ids(&orphans.unmarked), ["by-hand", "foreign"]);
        assert!(find_orphans(&machines[..1], |_| true).is_empty());
    }
}
