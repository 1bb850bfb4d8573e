//! `machines/` and `machines/{system_id}/`: lists, the machine operations
//! and the bulk release, with MAAS's permission checks.

use serde_json::{json, Value};

use super::{not_allowed, unknown_op};
use crate::http::{Request, Response};
use crate::render;
use crate::status::Status;
use crate::world::{Failure, Outcome, User, World};

pub(super) fn list_machines(
    world: &World,
    user: &User,
    params: &[(String, String)],
    allocated_only: bool,
) -> Outcome<Response> {
    // The filters the simulator implements. Real MAAS knows more (not_*,
    // arch, cpu_count ...); refusing them here is better than ignoring them.
    #[rustfmt::skip]
    const KNOWN: &[&str] = &[
        "id", "hostname", "mac_address", "domain", "zone", "pool", "agent_name", "status",
        "tags", "owner", "power_state",
    ];
    let mut bad = serde_json::Map::new();
    for (k, _) in params {
        if !KNOWN.contains(&k.as_str()) {
            bad.insert(k.clone(), json!(["No such constraint."]));
        }
    }
    if !bad.is_empty() {
        return Err(Failure::Fields(400, Value::Object(bad)));
    }
    let names = world.unknown_names(params);
    if !names.is_empty() {
        return Err(Failure::Fields(400, Value::Object(names)));
    }
    let all = |key: &str| -> Vec<&str> {
        params
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let any_of = |key: &str, value: &str| {
        let wanted = all(key);
        wanted.is_empty() || wanted.contains(&value)
    };
    let tags = all("tags");
    let list: Vec<String> = world
        .machines
        .iter()
        .filter(|m| world.can_view(m, user))
        .filter(|m| {
            !allocated_only
                || (m.status == Status::Allocated && m.owner.as_deref() == Some(&user.username))
        })
        .filter(|m| any_of("id", &m.system_id))
        .filter(|m| any_of("hostname", &m.hostname))
        .filter(|m| any_of("domain", world.domain_name(m.domain_id)))
        .filter(|m| any_of("zone", &m.zone))
        .filter(|m| any_of("pool", &m.pool))
        .filter(|m| any_of("agent_name", &m.agent_name))
        .filter(|m| any_of("status", m.status.filter_word()))
        .filter(|m| any_of("power_state", &m.power_state))
        .filter(|m| {
            let macs = all("mac_address");
            macs.is_empty() || macs.iter().any(|mac| m.has_mac(mac))
        })
        .filter(|m| any_of("owner", m.owner.as_deref().unwrap_or("")))
        .filter(|m| tags.iter().all(|t| m.tags.iter().any(|x| x == t)))
        .map(|m| render::machine_text(world, m))
        .collect();
    Ok(Response::json_text(200, format!("[{}]", list.join(","))))
}

/// `POST machines/?op=release` (`MachinesHandler.release`): unknown ids →
/// 400, ids the caller may not edit → 403, Ready is skipped, anything
/// outside `RELEASABLE_STATUSES` (Releasing included) → 409; answers the
/// ids it started releasing. (Set semantics: the lists in the messages
/// follow the machines' order here, Python's set order there.)
pub(super) fn bulk_release(
    world: &mut World,
    user: &User,
    params: &[(String, String)],
) -> Outcome<Response> {
    let mut wanted: Vec<&str> = Vec::new();
    for (k, v) in params {
        if k == "machines" && !wanted.contains(&v.as_str()) {
            wanted.push(v);
        }
    }
    let unknown: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|id| world.machine_index(id).is_err())
        .collect();
    if !unknown.is_empty() {
        return Err(Failure::Text(
            400,
            format!("Unknown machine(s): {}.", unknown.join(", ")),
        ));
    }
    let indexes: Vec<usize> = (0..world.machines.len())
        .filter(|&i| wanted.contains(&world.machines[i].system_id.as_str()))
        .collect();
    let denied: Vec<&str> = indexes
        .iter()
        .map(|&i| &world.machines[i])
        .filter(|m| m.locked || !world.can_deploy(m, user))
        .map(|m| m.system_id.as_str())
        .collect();
    if !denied.is_empty() {
        return Err(Failure::Text(
            403,
            format!(
                "You don't have the required permission to release the following machine(s): {}.",
                denied.join(", ")
            ),
        ));
    }
    let bad: Vec<String> = indexes
        .iter()
        .map(|&i| &world.machines[i])
        .filter(|m| m.status != Status::Ready && !m.status.releasable())
        .map(|m| format!("{} ('{}')", m.system_id, m.status.name()))
        .collect();
    if !bad.is_empty() {
        return Err(Failure::Text(
            409,
            format!(
                "Machine(s) cannot be released in their current state: {}.",
                bad.join(", ")
            ),
        ));
    }
    let comment: Vec<(String, String)> = params
        .iter()
        .filter(|(k, _)| k == "comment")
        .cloned()
        .collect();
    let mut released = Vec::new();
    for i in indexes {
        if world.machines[i].status != Status::Ready {
            world.release(i, user, &comment)?;
            released.push(world.machines[i].system_id.clone());
        }
    }
    Ok(Response::json(200, &json!(released)))
}

/// The permission a machine operation needs (`get_node_or_404(perm=...)`
/// in `src/maasserver/api/machines.py` and `nodes.py`, MAAS 3.5).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Perm {
    View,
    Edit,
    Lock,
    Admin,
}

fn perm_for(method: &str, op: Option<&str>) -> Perm {
    match (method, op) {
        ("GET", _) => Perm::View,
        ("POST", Some("lock" | "unlock")) => Perm::Lock,
        ("POST", Some("mark_fixed")) | ("PUT" | "DELETE", None) => Perm::Admin,
        _ => Perm::Edit,
    }
}

pub(super) fn machine_call(
    world: &mut World,
    user: &User,
    req: &Request,
    id: &str,
    op: Option<&str>,
    params: &[(String, String)],
) -> Outcome<Response> {
    let index = world.machine_index(id)?;
    // `get_node_or_404`: a locked machine refuses edit (and admin) access;
    // a permission failure is a 403 with an empty body.
    let m = &world.machines[index];
    let allowed = match perm_for(&req.method, op) {
        Perm::View | Perm::Lock => world.can_view(m, user),
        Perm::Edit => !m.locked && world.can_view(m, user),
        Perm::Admin => !m.locked && user.is_superuser,
    };
    if !allowed {
        return Err(Failure::Text(403, String::new()));
    }
    let machine_json = |w: &World| Ok(Response::json(200, &render::machine(w, &w.machines[index])));
    match (req.method.as_str(), op) {
        ("GET", None) => machine_json(world),
        ("GET", Some("query_power_state")) if world.settings.no_rack_controller => {
            Err(Failure::Text(
                503,
                format!(
                    "No rack controllers can access the BMC of node {}",
                    world.machines[index].hostname
                ),
            ))
        }
        ("GET", Some("query_power_state")) => Ok(Response::json(
            200,
            &json!({"state": world.machines[index].power_state}),
        )),
        ("POST", Some(op @ ("deploy" | "power_on"))) => {
            // Real MAAS claims a deployment's AUTO addresses post-commit
            // (`Node._start`): its answer shows the links as they were.
            let before = world.machines[index].interfaces.clone();
            if op == "deploy" {
                world.deploy(index, user, params)?;
            } else {
                world.power_on(index, user, params)?;
            }
            let mut answered = world.machines[index].clone();
            answered.interfaces = before;
            Ok(Response::json(200, &render::machine(world, &answered)))
        }
        ("POST", Some("release")) => {
            world.release(index, user, params)?;
            machine_json(world)
        }
        ("POST", Some("power_off")) => {
            world.power_off(index, user, params)?;
            if world.machines[index].power_type == "manual" {
                return Ok(Response::json(200, &Value::Null));
            }
            machine_json(world)
        }
        ("POST", Some("set_workload_annotations")) if !world.settings.release_at_least(3, 0) => {
            // The op came with MAAS 3.0 (set_owner_data renamed).
            unknown_op(req, op)
        }
        ("POST", Some("set_owner_data" | "set_workload_annotations")) => {
            world.set_owner_data(index, user, params)?;
            machine_json(world)
        }
        ("POST", Some("abort")) => {
            world.abort(index, user, comment(params))?;
            machine_json(world)
        }
        ("POST", Some("mark_broken")) => {
            // `if node.owner_id != request.user.id: raise MAASAPIForbidden()`:
            // only the owner, even for admins, and never an unowned machine.
            if world.machines[index].owner.as_deref() != Some(user.username.as_str()) {
                return Err(Failure::Text(403, String::new()));
            }
            world.mark_broken(index, user, comment(params));
            machine_json(world)
        }
        ("POST", Some("mark_fixed")) => {
            world.mark_fixed(index, user, comment(params))?;
            machine_json(world)
        }
        ("POST", Some("lock" | "unlock")) => {
            let lock = op == Some("lock");
            let m = &mut world.machines[index];
            if lock && !matches!(m.status, Status::Deployed | Status::Deploying) {
                return Err(Failure::Text(
                    409,
                    "Can't lock, node is not deployed or deploying".into(),
                ));
            }
            m.locked = lock;
            machine_json(world)
        }
        ("PUT", None) => {
            world.update_machine(index, params)?;
            machine_json(world)
        }
        ("DELETE", None) => {
            world.machines.remove(index);
            Ok(Response::empty(204))
        }
        (_, Some(_)) => unknown_op(req, op),
        (_, None) => not_allowed(),
    }
}

fn comment(params: &[(String, String)]) -> Option<&str> {
    params
        .iter()
        .find(|(k, _)| k == "comment")
        .map(|(_, v)| v.as_str())
}
