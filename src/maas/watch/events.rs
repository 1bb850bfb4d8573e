//! The MAAS event log of one source's machines in transit: which events are
//! new, and which are ours to report.
//!
//! MAAS numbers events with one growing id over all machines, and
//! `events/?op=query&id=..&after=N` returns the oldest events above `N`
//! (up to `limit`). Each tracked machine has a *floor*: its events up to
//! the floor are reported already, or are not ours to report. One call per
//! interval (per [`ID_CHUNK`] machines) asks for everything above the
//! lowest floor and keeps, per machine, what lies above its own.
//!
//! Where a floor starts is what keeps reports true:
//!
//! - A machine that enters transit while it stays in our list (Deployed →
//!   Releasing) starts at the cursor as it was at the *previous* list: its
//!   transit began after that list, and every event created since has a
//!   larger id. (Starting at the newest id seen would lose the events of
//!   its first seconds, whose ids may be below the other machines' latest.)
//! - A machine that is new in our list, or changed hands (another owner,
//!   another capmaas identity), was someone else's before: its floor moves
//!   up to its allocation to our MAAS user, the status event `From 'Ready'
//!   to 'Allocated' (to <user>)` MAAS records in the same transaction
//!   (`emit_state_transition_event`, `src/maasserver/models/signals/
//!   events.py`). One DEBUG query finds it, only in intervals where such
//!   machines show up.
//! - At start the cursor is the newest event MAAS has (one `limit=1` call
//!   before the first list): what happened before the watch started is not
//!   replayed.
//!
//! A step either reports and moves the floors, or fails and changes
//! nothing but the boundaries it found: the next interval asks again.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::Reader;
use crate::maas::{Error, Event, EventLevel, EventQuery, MAX_EVENT_LIMIT};

/// Machines per query: each adds about 10 bytes to the URL, and request
/// lines longer than 8 KiB are refused by a default nginx in front of MAAS.
pub const ID_CHUNK: usize = 250;
/// Machines per boundary query: their DEBUG events (curtin's chatter
/// included) since the previous list must fit one page.
const BOUNDARY_CHUNK: usize = 50;
/// Pages of [`MAX_EVENT_LIMIT`] events per chunk and interval; the rest
/// waits for the next interval.
const MAX_PAGES: usize = 4;
/// The event type of a status change (`NODE_CHANGED_STATUS`,
/// `src/maascommon/events.py`).
const STATUS_CHANGED: &str = "Node changed status";

/// The events step's memory for one source.
#[derive(Debug, Default)]
pub struct EventLog {
    /// The largest event id seen in any answer (None before the mark).
    cursor: Option<i64>,
    /// The cursor when the previous list completed.
    cursor_at_previous_list: Option<i64>,
    /// Tracked machines and their floors.
    floors: HashMap<String, i64>,
    /// Tracked machines whose floor still has to move up to their
    /// allocation to us.
    unbounded: HashSet<String>,
}

impl EventLog {
    /// Whether the log needs its starting point ([`EventLog::mark`]) before
    /// the first list.
    pub fn needs_mark(&self) -> bool {
        self.cursor.is_none()
    }

    /// Takes the newest event id MAAS shows this user as the starting point.
    pub fn mark(&mut self, reader: &dyn Reader) -> Result<(), Error> {
        let newest = reader.events(&EventQuery {
            level: Some(EventLevel::Debug),
            limit: Some(1),
            ..EventQuery::default()
        })?;
        self.cursor = Some(newest.iter().map(|e| e.id).max().unwrap_or(0));
        Ok(())
    }

    /// After a successful list: the machines to follow from now on
    /// (`tracked`), and those among them that are new to us or changed
    /// hands since the previous list (`newcomers`). Machines no longer
    /// tracked are forgotten.
    pub fn track(&mut self, tracked: &HashSet<String>, newcomers: &HashSet<String>) {
        let entry_floor = self.cursor_at_previous_list.or(self.cursor).unwrap_or(0);
        self.cursor_at_previous_list = self.cursor;
        self.floors.retain(|id, _| tracked.contains(id));
        self.unbounded.retain(|id| tracked.contains(id));
        for id in tracked {
            let floor = self.floors.entry(id.clone()).or_insert(entry_floor);
            if newcomers.contains(id) {
                // Keep what was reported, never go below the new start.
                *floor = (*floor).max(entry_floor);
                self.unbounded.insert(id.clone());
            }
        }
    }

    /// One interval's events: per machine, its new events oldest first,
    /// machines in the order of their first new event. No call when nothing
    /// is tracked.
    pub fn poll(
        &mut self,
        reader: &dyn Reader,
        user: &str,
        level: &EventLevel,
    ) -> Result<Vec<(String, Vec<Event>)>, Error> {
        if self.floors.is_empty() {
            return Ok(Vec::new());
        }
        self.find_boundaries(reader, user)?;
        let mut floors = self.floors.clone();
        let mut found: BTreeMap<String, Vec<Event>> = BTreeMap::new();
        let mut ids: Vec<&String> = self.floors.keys().collect();
        ids.sort();
        let mut cursor = self.cursor;
        for chunk in ids.chunks(ID_CHUNK) {
            let mut after = chunk
                .iter()
                .filter_map(|id| floors.get(*id))
                .min()
                .copied()
                .unwrap_or(0);
            for _ in 0..MAX_PAGES {
                let mut page = reader.events(&EventQuery {
                    system_ids: chunk.iter().map(|id| (*id).clone()).collect(),
                    after: Some(after),
                    level: Some(level.clone()),
                    limit: Some(MAX_EVENT_LIMIT),
                })?;
                let full = page.len() >= MAX_EVENT_LIMIT as usize;
                page.sort_by_key(|e| e.id);
                for event in page {
                    after = after.max(event.id);
                    cursor = cursor.max(Some(event.id));
                    let Some(floor) = floors.get_mut(&event.system_id) else {
                        continue;
                    };
                    if event.id > *floor {
                        *floor = event.id;
                        found
                            .entry(event.system_id.clone())
                            .or_default()
                            .push(event);
                    }
                }
                if !full {
                    break;
                }
            }
            // Every event of these machines up to `after` has been seen.
            for id in chunk {
                if let Some(floor) = floors.get_mut(*id) {
                    *floor = (*floor).max(after);
                }
            }
        }
        self.floors = floors;
        self.cursor = cursor;
        let mut batches: Vec<(String, Vec<Event>)> = found.into_iter().collect();
        batches.sort_by_key(|(_, events)| events.first().map(|e| e.id));
        Ok(batches)
    }

    /// Moves the floors of machines new to us up to their allocation to
    /// `user`. A page that comes back full may hide a later allocation:
    /// then nothing on it is taken as ours (the floor goes to its end).
    fn find_boundaries(&mut self, reader: &dyn Reader, user: &str) -> Result<(), Error> {
        if self.unbounded.is_empty() {
            return Ok(());
        }
        let allocated_to_us = format!("(to {user})");
        let mut ids: Vec<String> = self.unbounded.iter().cloned().collect();
        ids.sort();
        for chunk in ids.chunks(BOUNDARY_CHUNK) {
            let after = chunk
                .iter()
                .filter_map(|id| self.floors.get(id))
                .min()
                .copied()
                .unwrap_or(0);
            let page = reader.events(&EventQuery {
                system_ids: chunk.to_vec(),
                after: Some(after),
                level: Some(EventLevel::Debug),
                limit: Some(MAX_EVENT_LIMIT),
            })?;
            let full = page.len() >= MAX_EVENT_LIMIT as usize;
            let page_end = page.iter().map(|e| e.id).max();
            self.cursor = self.cursor.max(page_end);
            for id in chunk {
                let allocation = page
                    .iter()
                    .filter(|e| &e.system_id == id)
                    .filter(|e| {
                        e.kind == STATUS_CHANGED && e.description.ends_with(&allocated_to_us)
                    })
                    .map(|e| e.id)
                    .max();
                let floor = self.floors.get_mut(id);
                match (floor, allocation, full) {
                    // Just below: at DEBUG level the allocation itself is ours.
                    (Some(floor), Some(at), false) => *floor = (*floor).max(at - 1),
                    (Some(floor), _, true) => *floor = (*floor).max(page_end.unwrap_or(0)),
                    // No allocation to us since the previous list: it came
                    // to us otherwise (visibility, an admin's edit); follow
                    // it from there.
                    _ => {}
                }
                self.unbounded.remove(id);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeMaas;
    use super::*;

    fn set(ids: &[&str]) -> HashSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn messages(batches: &[(String, Vec<Event>)]) -> Vec<String> {
        batches
            .iter()
            .flat_map(|(id, events)| events.iter().map(move |e| format!("{id}: {}", e.message())))
            .collect()
    }

    /// A log marked at the fake's current end, as the watch starts it.
    fn started(maas: &FakeMaas) -> EventLog {
        let mut log = EventLog::default();
        log.mark(maas).unwrap();
        log
    }

    #[test]
    fn nothing_tracked_costs_no_call() {
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        let calls = maas.event_calls();
        log.track(&set(&[]), &set(&[]));
        assert!(log
            .poll(&maas, "capmaas", &EventLevel::Info)
            .unwrap()
            .is_empty());
        assert_eq!(maas.event_calls(), calls);
    }

    #[test]
    fn a_deployment_is_reported_once_in_order_and_history_is_not_replayed() {
        let maas = FakeMaas::new("capmaas");
        maas.event("old", "Deploying", "", "INFO");
        let mut log = started(&maas);
        // Allocated and deployed by us after the mark.
        maas.allocate("m1", "capmaas");
        maas.event("m1", "Deploying", "", "INFO");
        maas.event("m1", "Powering on", "", "INFO");
        log.track(&set(&["m1", "old"]), &set(&["m1", "old"]));
        let first = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(messages(&first), ["m1: Deploying", "m1: Powering on"]);
        maas.event("m1", "Performing PXE boot", "", "INFO");
        maas.event("m1", "curtin chatter", "", "DEBUG");
        maas.event("other", "Deploying", "", "INFO");
        log.track(&set(&["m1", "old"]), &set(&[]));
        let second = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(messages(&second), ["m1: Performing PXE boot"]);
        log.track(&set(&["m1", "old"]), &set(&[]));
        assert!(log
            .poll(&maas, "capmaas", &EventLevel::Info)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_machine_entering_transit_keeps_its_first_events() {
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        maas.allocate("busy", "capmaas");
        log.track(&set(&["busy"]), &set(&["busy"]));
        log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        // Interval N-1: `quiet` (Deployed, ours) is listed, not in transit;
        // then it starts releasing, and `busy` logs newer events before
        // the events step of N-1 runs.
        log.track(&set(&["busy"]), &set(&[]));
        maas.event("quiet", "Releasing", "", "INFO");
        maas.event("busy", "Installing OS", "", "INFO");
        let n1 = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(messages(&n1), ["busy: Installing OS"]);
        // Interval N lists `quiet` Releasing.
        log.track(&set(&["busy", "quiet"]), &set(&[]));
        let n = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(messages(&n), ["quiet: Releasing"]);
    }

    #[test]
    fn a_newcomer_gets_only_what_followed_its_allocation_to_us() {
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        log.track(&set(&[]), &set(&[]));
        // Between two lists: someone else's release, then our allocation.
        maas.event("m", "Releasing", "", "INFO");
        maas.event("m", "Released", "", "INFO");
        maas.allocate("m", "capmaas");
        maas.event("m", "Deploying", "", "INFO");
        log.track(&set(&["m"]), &set(&["m"]));
        let batches = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(messages(&batches), ["m: Deploying"]);
        // At DEBUG level the allocation itself is reported as ours.
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        maas.allocate("m", "someone");
        maas.allocate("m", "capmaas");
        log.track(&set(&["m"]), &set(&["m"]));
        let batches = log.poll(&maas, "capmaas", &EventLevel::Debug).unwrap();
        assert_eq!(
            messages(&batches),
            ["m: Node changed status - From 'Ready' to 'Allocated' (to capmaas)"]
        );
    }

    #[test]
    fn changing_hands_in_transit_drops_the_previous_story() {
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        maas.allocate("m", "capmaas");
        log.track(&set(&["m"]), &set(&["m"]));
        log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        // Released by one MaasMachine and allocated to another between two
        // lists: the identity changed, the old release is not the new one's.
        maas.event("m", "Releasing", "", "INFO");
        maas.allocate("m", "capmaas");
        maas.event("m", "Deploying", "", "INFO");
        log.track(&set(&["m"]), &set(&["m"]));
        let batches = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(messages(&batches), ["m: Deploying"]);
    }

    #[test]
    fn a_failed_step_changes_nothing_and_the_next_one_reports_it_all() {
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        maas.allocate("m", "capmaas");
        maas.event("m", "Deploying", "", "INFO");
        log.track(&set(&["m"]), &set(&["m"]));
        maas.fail_events(1);
        assert!(log.poll(&maas, "capmaas", &EventLevel::Info).is_err());
        maas.event("m", "Node installation failure", "'curtin' boom", "ERROR");
        log.track(&set(&["m"]), &set(&[]));
        let batches = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        assert_eq!(
            messages(&batches),
            [
                "m: Deploying",
                "m: Node installation failure - 'curtin' boom"
            ]
        );
        assert_eq!(batches[0].1[1].level, EventLevel::Error);
    }

    #[test]
    fn many_machines_and_many_events_are_paged_and_chunked() {
        let maas = FakeMaas::new("capmaas");
        let mut log = started(&maas);
        let ids: Vec<String> = (0..600).map(|i| format!("m{i:03}")).collect();
        for id in &ids {
            maas.allocate(id, "capmaas");
        }
        let tracked: HashSet<String> = ids.iter().cloned().collect();
        log.track(&tracked, &tracked);
        for round in 0..5 {
            for id in &ids {
                maas.event(id, "Step", &round.to_string(), "INFO");
            }
        }
        let batches = log.poll(&maas, "capmaas", &EventLevel::Info).unwrap();
        let total: usize = batches.iter().map(|(_, e)| e.len()).sum();
        assert_eq!(total, 3000);
        assert_eq!(batches.len(), 600);
        for (_, events) in &batches {
            let rounds: Vec<&str> = events.iter().map(|e| e.description.as_str()).collect();
            assert_eq!(rounds, ["0", "1", "2", "3", "4"]);
        }
        assert!(
            maas.max_ids_per_call() <= ID_CHUNK,
            "{} ids in one call",
            maas.max_ids_per_call()
        );
        log.track(&tracked, &set(&[]));
        assert!(log
            .poll(&maas, "capmaas", &EventLevel::Info)
            .unwrap()
            .is_empty());
    }
}
