//! An in-memory MAAS for the watch's unit tests: one user's machine list
//! and an event log queried with `events/?op=query`'s semantics (ids grow
//! over all machines; `after` gives the oldest `limit` above it, answered
//! newest first; without it, the newest `limit`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Reader;
use crate::maas::{Error, Event, EventLevel, EventQuery, MaasBody, Machine, MAX_EVENT_LIMIT};

#[derive(Default)]
struct State {
    machines: BTreeMap<String, Machine>,
    events: Vec<Event>,
    fail_lists: u32,
    fail_events: u32,
    retry_after: Option<Duration>,
    list_calls: u32,
    event_calls: u32,
    max_ids: usize,
}

pub struct FakeMaas {
    user: String,
    state: Mutex<State>,
}

fn rank(level: &EventLevel) -> u8 {
    match level {
        EventLevel::Audit => 0,
        EventLevel::Debug => 10,
        EventLevel::Info | EventLevel::Other(_) => 20,
        EventLevel::Warning => 30,
        EventLevel::Error => 40,
        EventLevel::Critical => 50,
    }
}

impl FakeMaas {
    /// A MAAS whose key belongs to `user`.
    pub fn new(user: &str) -> FakeMaas {
        FakeMaas {
            user: user.into(),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Records an event; returns its id.
    pub fn event(&self, system_id: &str, kind: &str, description: &str, level: &str) -> i64 {
        let mut state = self.state();
        let id = state.events.len() as i64 + 1;
        state.events.push(Event {
            id,
            system_id: system_id.into(),
            hostname: format!("host-{system_id}"),
            username: "unknown".into(),
            level: EventLevel::parse(level),
            created: "Thu, 01 Jan. 2026 00:00:00".into(),
            kind: kind.into(),
            description: description.into(),
        });
        id
    }

    /// The status event MAAS records when `user` allocates the machine.
    pub fn allocate(&self, system_id: &str, user: &str) -> i64 {
        self.event(
            system_id,
            "Node changed status",
            &format!("From 'Ready' to 'Allocated' (to {user})"),
            "DEBUG",
        )
    }

    /// Puts a machine into MAAS (owned by whoever `machine.owner` says).
    pub fn put(&self, machine: Machine) {
        self.state()
            .machines
            .insert(machine.system_id.clone(), machine);
    }

    pub fn remove(&self, system_id: &str) {
        self.state().machines.remove(system_id);
    }

    /// Changes a machine in place.
    pub fn edit(&self, system_id: &str, edit: impl FnOnce(&mut Machine)) {
        if let Some(m) = self.state().machines.get_mut(system_id) {
            edit(m);
        }
    }

    /// The next `n` lists answer 503 (with this `Retry-After`).
    pub fn fail_lists(&self, n: u32, retry_after: Option<Duration>) {
        let mut state = self.state();
        state.fail_lists = n;
        state.retry_after = retry_after;
    }

    /// The next `n` event queries answer 503.
    pub fn fail_events(&self, n: u32) {
        self.state().fail_events = n;
    }

    pub fn list_calls(&self) -> u32 {
        self.state().list_calls
    }

    pub fn event_calls(&self) -> u32 {
        self.state().event_calls
    }

    pub fn max_ids_per_call(&self) -> usize {
        self.state().max_ids
    }
}

impl Reader for FakeMaas {
    fn machines_owned_by(&self, owner: &str) -> Result<Vec<Arc<Machine>>, Error> {
        let mut state = self.state();
        state.list_calls += 1;
        assert_eq!(owner, self.user, "the watch lists its own user's machines");
        if state.fail_lists > 0 {
            state.fail_lists -= 1;
            return Err(Error::status(
                "machines_list",
                503,
                MaasBody::Empty,
                state.retry_after,
            ));
        }
        Ok(state
            .machines
            .values()
            .filter(|m| m.owner.as_deref() == Some(owner))
            .map(|m| Arc::new(m.clone()))
            .collect())
    }

    fn events(&self, query: &EventQuery) -> Result<Vec<Event>, Error> {
        let mut state = self.state();
        state.event_calls += 1;
        state.max_ids = state.max_ids.max(query.system_ids.len());
        if state.fail_events > 0 {
            state.fail_events -= 1;
            return Err(Error::status("events_query", 503, MaasBody::Empty, None));
        }
        let min = rank(query.level.as_ref().unwrap_or(&EventLevel::Info));
        let limit = query.limit.unwrap_or(100).clamp(1, MAX_EVENT_LIMIT) as usize;
        let matching = state.events.iter().filter(|e| {
            (query.system_ids.is_empty() || query.system_ids.contains(&e.system_id))
                && rank(&e.level) >= min
        });
        Ok(match query.after {
            Some(after) => {
                let mut oldest: Vec<Event> = matching
                    .filter(|e| e.id > after)
                    .take(limit)
                    .cloned()
                    .collect();
                oldest.reverse();
                oldest
            }
            None => {
                let mut all: Vec<Event> = matching.cloned().collect();
                all.reverse();
                all.truncate(limit);
                all
            }
        })
    }
}
