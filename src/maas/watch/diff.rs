//! One source's snapshot and how a new list changes it: which machines
//! appeared, changed (and in which fields) or vanished. Pure functions over
//! plain data; the watch thread calls them under the snapshot's lock.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use super::{ListedMachine, MachineChange, SourceId};
use crate::maas::{Machine, MachineStatus};

/// A source's machines by system_id. Each entry is its own key: a map from
/// a separate key would hold a second copy of every system_id (about 40
/// bytes a machine, 1,000 machines in a big source).
#[derive(Default, Debug)]
pub struct Machines(HashSet<Entry>);

/// An entry of [`Machines`], hashed and compared by its machine's
/// system_id, and found by it (`Borrow<str>` hashes as the `str` does).
#[derive(Debug)]
struct Entry(ListedMachine);

impl Entry {
    fn system_id(&self) -> &str {
        &self.0.machine.system_id
    }
}

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        self.system_id()
    }
}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.system_id().hash(state);
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.system_id() == other.system_id()
    }
}

impl Eq for Entry {}

impl Machines {
    pub fn with_capacity(capacity: usize) -> Machines {
        Machines(HashSet::with_capacity(capacity))
    }

    pub fn get(&self, system_id: &str) -> Option<&ListedMachine> {
        self.0.get(system_id).map(|entry| &entry.0)
    }

    pub fn contains(&self, system_id: &str) -> bool {
        self.0.contains(system_id)
    }

    /// Adds the machine, or replaces the entry of its system_id.
    pub fn insert(&mut self, listed: ListedMachine) {
        self.0.replace(Entry(listed));
    }

    pub fn remove(&mut self, system_id: &str) -> Option<ListedMachine> {
        self.0.take(system_id).map(|entry| entry.0)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The machines, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &ListedMachine> {
        self.0.iter().map(|entry| &entry.0)
    }
}

/// States in which MAAS is working on a machine (or about to: Allocated
/// waits for its deploy), so its event log tells a story worth following.
/// Failed states are not here: the interval that sees a machine fail still
/// fetches its events once, as it leaves transit.
pub fn in_transit(status: &MachineStatus) -> bool {
    use MachineStatus::*;
    matches!(
        status,
        Allocated
            | Deploying
            | Releasing
            | DiskErasing
            | Commissioning
            | Testing
            | EnteringRescueMode
            | ExitingRescueMode
    )
}

/// The fields of a machine the controllers act on, by name, that differ.
/// `status_message` is left out on purpose: it follows every event of a
/// deployment, and the events are reported on their own.
pub fn changed_fields(old: &Machine, new: &Machine) -> Vec<&'static str> {
    let mut fields = Vec::new();
    let mut check = |name: &'static str, differs: bool| {
        if differs {
            fields.push(name);
        }
    };
    check("status", old.status != new.status);
    check("power_state", old.power_state != new.power_state);
    check("ip_addresses", old.ip_addresses != new.ip_addresses);
    check("owner", old.owner != new.owner);
    check("owner_data", old.owner_data != new.owner_data);
    check(
        "hostname",
        old.hostname != new.hostname || old.fqdn != new.fqdn,
    );
    check("zone", old.zone != new.zone);
    check("pool", old.pool != new.pool);
    check("tag_names", old.tag_names != new.tag_names);
    check("locked", old.locked != new.locked);
    fields
}

/// Whether the machine now stands for another allocation than before:
/// another owner, or another capmaas identity. Its earlier event log is
/// then someone else's story.
pub fn changed_hands(old: &Machine, new: &Machine) -> bool {
    old.owner != new.owner || old.identity() != new.identity()
}

/// The snapshot after a list that started at `listed_at`, and what changed.
///
/// An entry newer than the list (recorded from a write's answer after the
/// list was sent) is kept as it is, present or not in the list: the list
/// may predate the write. Everything else follows the list.
pub fn apply_list(
    source: &SourceId,
    old: &Machines,
    list: Vec<Arc<Machine>>,
    listed_at: Instant,
) -> (Machines, Vec<MachineChange>) {
    let mut next = Machines::with_capacity(list.len());
    let mut changes = Vec::new();
    for machine in list {
        if machine.system_id.is_empty() {
            continue;
        }
        let entry = match old.get(&machine.system_id) {
            Some(known) if known.observed_at > listed_at => known.clone(),
            Some(known) => {
                let fields = changed_fields(&known.machine, &machine);
                if !fields.is_empty() {
                    changes.push(MachineChange::Changed {
                        source: source.clone(),
                        old: Arc::clone(&known.machine),
                        new: Arc::clone(&machine),
                        fields,
                    });
                }
                // One copy of a machine as it was: whoever still holds the
                // old `Arc` (a reconcile, a change being handled) shares it.
                let same = Arc::ptr_eq(&known.machine, &machine) || *known.machine == *machine;
                let machine = if same {
                    Arc::clone(&known.machine)
                } else {
                    machine
                };
                ListedMachine {
                    machine,
                    observed_at: listed_at,
                    first_seen: known.first_seen,
                }
            }
            None => {
                changes.push(MachineChange::Appeared {
                    source: source.clone(),
                    machine: Arc::clone(&machine),
                });
                ListedMachine {
                    machine,
                    observed_at: listed_at,
                    first_seen: listed_at,
                }
            }
        };
        next.insert(entry);
    }
    for known in old.values() {
        if next.contains(&known.machine.system_id) {
            continue;
        }
        if known.observed_at > listed_at {
            next.insert(known.clone());
        } else {
            changes.push(MachineChange::Vanished {
                source: source.clone(),
                last: Arc::clone(&known.machine),
            });
        }
    }
    (next, changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maas::{PowerState, IDENTITY_KEY};
    use std::time::Duration;

    fn source() -> SourceId {
        SourceId::new("http://maas/MAAS/api/2.0/", "capmaas")
    }

    fn machine(id: &str, status: MachineStatus) -> Machine {
        Machine {
            system_id: id.into(),
            status_name: status.name().into(),
            status,
            power_state: PowerState::On,
            owner: Some("capmaas".into()),
            ..Machine::default()
        }
    }

    fn snapshot(machines: &[Machine], at: Instant) -> Machines {
        let mut snapshot = Machines::default();
        for m in machines {
            snapshot.insert(ListedMachine {
                machine: Arc::new(m.clone()),
                observed_at: at,
                first_seen: at,
            });
        }
        snapshot
    }

    fn shared(list: Vec<Machine>) -> Vec<Arc<Machine>> {
        list.into_iter().map(Arc::new).collect()
    }

    fn kinds(changes: &[MachineChange]) -> Vec<String> {
        let mut v: Vec<String> = changes
            .iter()
            .map(|c| match c {
                MachineChange::Appeared { machine, .. } => format!("+{}", machine.system_id),
                MachineChange::Changed { new, fields, .. } => {
                    format!("~{} {}", new.system_id, fields.join(","))
                }
                MachineChange::Vanished { last, .. } => format!("-{}", last.system_id),
                MachineChange::Events { machine, .. } => format!("e{}", machine.system_id),
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn reports_exactly_what_appeared_changed_or_vanished() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(15);
        let old = snapshot(
            &[
                machine("same", MachineStatus::Deployed),
                machine("off", MachineStatus::Deployed),
                machine("gone", MachineStatus::Deployed),
                machine("chatty", MachineStatus::Deploying),
            ],
            t0,
        );
        let mut off = machine("off", MachineStatus::Deployed);
        off.power_state = PowerState::Off;
        let mut chatty = machine("chatty", MachineStatus::Deploying);
        chatty.status_message = Some("Installing OS".into());
        let list = vec![
            machine("same", MachineStatus::Deployed),
            off,
            chatty,
            machine("new", MachineStatus::Allocated),
        ];
        let (next, changes) = apply_list(&source(), &old, shared(list), t1);
        assert_eq!(kinds(&changes), ["+new", "-gone", "~off power_state"]);
        assert_eq!(next.len(), 4);
        assert_eq!(
            next.get("same").unwrap().first_seen,
            t0,
            "first sight is kept"
        );
        assert_eq!(next.get("same").unwrap().observed_at, t1);
        assert_eq!(next.get("new").unwrap().first_seen, t1);
        assert_eq!(
            next.get("chatty")
                .unwrap()
                .machine
                .status_message
                .as_deref(),
            Some("Installing OS"),
            "unreported fields are still refreshed"
        );
        let vanished = changes
            .iter()
            .find_map(|c| match c {
                MachineChange::Vanished { last, .. } => Some(last),
                _ => None,
            })
            .unwrap();
        assert_eq!(vanished.status, MachineStatus::Deployed, "last known state");
    }

    #[test]
    fn a_machine_listed_as_it_was_keeps_its_arc() {
        let t0 = Instant::now();
        let old = snapshot(
            &[
                machine("same", MachineStatus::Deployed),
                machine("chatty", MachineStatus::Deploying),
            ],
            t0,
        );
        let mut chatty = machine("chatty", MachineStatus::Deploying);
        chatty.status_message = Some("Installing OS".into());
        let list = shared(vec![machine("same", MachineStatus::Deployed), chatty]);
        let (next, changes) = apply_list(&source(), &old, list.clone(), t0);
        assert!(changes.is_empty(), "{:?}", kinds(&changes));
        assert!(Arc::ptr_eq(
            &next.get("same").unwrap().machine,
            &old.get("same").unwrap().machine
        ));
        assert!(!Arc::ptr_eq(&next.get("same").unwrap().machine, &list[0]));
        assert!(
            Arc::ptr_eq(&next.get("chatty").unwrap().machine, &list[1]),
            "any difference, reported or not, takes the new one"
        );
    }

    #[test]
    fn every_acted_on_field_counts() {
        let base = machine("m", MachineStatus::Deployed);
        type Edit = Box<dyn Fn(&mut Machine)>;
        let edits: Vec<(&str, Edit)> = vec![
            ("status", Box::new(|m| m.status = MachineStatus::Broken)),
            (
                "power_state",
                Box::new(|m| m.power_state = PowerState::Error),
            ),
            (
                "ip_addresses",
                Box::new(|m| m.ip_addresses = vec!["10.0.0.9".into()]),
            ),
            ("owner", Box::new(|m| m.owner = None)),
            (
                "owner_data",
                Box::new(|m| {
                    m.owner_data
                        .insert(IDENTITY_KEY.into(), "capmaas/a/b/c".into());
                }),
            ),
            ("hostname", Box::new(|m| m.fqdn = "m.other".into())),
            ("zone", Box::new(|m| m.zone = "z2".into())),
            ("pool", Box::new(|m| m.pool = "p2".into())),
            ("locked", Box::new(|m| m.locked = true)),
        ];
        for (field, edit) in edits {
            let mut new = base.clone();
            edit(&mut new);
            assert_eq!(changed_fields(&base, &new), [field]);
        }
        let mut quiet = base.clone();
        quiet.status_message = Some("Rebooting".into());
        assert!(changed_fields(&base, &quiet).is_empty());
    }

    #[test]
    fn machines_are_found_and_replaced_by_system_id() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut machines = snapshot(
            &[
                machine("abc", MachineStatus::Deployed),
                machine("def", MachineStatus::Ready),
            ],
            t0,
        );
        machines.insert(ListedMachine {
            machine: Arc::new(machine("abc", MachineStatus::Releasing)),
            observed_at: t1,
            first_seen: t0,
        });
        assert_eq!(machines.len(), 2, "the same system_id is one entry");
        let abc = machines.get("abc").unwrap();
        assert_eq!(
            (&abc.machine.status, abc.observed_at),
            (&MachineStatus::Releasing, t1)
        );
        assert!(machines.contains("def") && !machines.contains("ab"));
        assert_eq!(machines.remove("def").unwrap().machine.system_id, "def");
        assert!(machines.get("def").is_none());
        let ids: Vec<&str> = machines
            .values()
            .map(|m| m.machine.system_id.as_str())
            .collect();
        assert_eq!(ids, ["abc"]);
    }

    #[test]
    fn an_entry_recorded_after_the_list_was_sent_wins() {
        let t0 = Instant::now();
        let list_sent = t0 + Duration::from_secs(1);
        let recorded_at = t0 + Duration::from_secs(2);
        let mut old = snapshot(&[machine("kept", MachineStatus::Deployed)], t0);
        // The controller allocated `fresh` and recorded MAAS's answer while
        // the list (sent before the allocation) was on its way.
        old.insert(ListedMachine {
            machine: Arc::new(machine("fresh", MachineStatus::Allocated)),
            observed_at: recorded_at,
            first_seen: recorded_at,
        });
        let (next, changes) = apply_list(
            &source(),
            &old,
            shared(vec![machine("kept", MachineStatus::Deployed)]),
            list_sent,
        );
        assert!(changes.is_empty(), "{:?}", kinds(&changes));
        assert_eq!(next.get("fresh").unwrap().observed_at, recorded_at);
        // A later list without it reports it gone.
        let (_, changes) = apply_list(
            &source(),
            &next,
            vec![],
            recorded_at + Duration::from_secs(1),
        );
        assert_eq!(kinds(&changes), ["-fresh", "-kept"]);
    }

    #[test]
    fn transit_and_hands() {
        assert!(in_transit(&MachineStatus::Deploying));
        assert!(in_transit(&MachineStatus::Allocated));
        assert!(!in_transit(&MachineStatus::Deployed));
        assert!(!in_transit(&MachineStatus::FailedDeployment));
        let a = machine("m", MachineStatus::Deployed);
        let mut b = a.clone();
        b.owner_data
            .insert(IDENTITY_KEY.into(), "capmaas/ns/x/1".into());
        assert!(changed_hands(&a, &b));
        let mut c = a.clone();
        c.owner_data.insert("other".into(), "x".into());
        assert!(
            !changed_hands(&a, &c),
            "other owner data is not a new owner"
        );
    }
}
