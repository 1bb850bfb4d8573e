//! `ipaddresses/` (reserve, release, list) and
//! `nodes/{system_id}/interfaces/[{id}/]` (read, `link_subnet`,
//! `unlink_subnet`), with MAAS's permission checks: interfaces are read with
//! view rights on the machine and changed only with admin rights
//! (`get_interface_or_404(..., NodePermission.admin)`: 403, empty body).

use serde_json::{json, Value};

use super::{not_allowed, unknown_op};
use crate::http::{Request, Response};
use crate::render;
use crate::world::{Failure, Outcome, User, World};

pub(super) fn ip_addresses(
    world: &mut World,
    user: &User,
    req: &Request,
    op: Option<&str>,
    params: &[(String, String)],
) -> Outcome<Response> {
    match (req.method.as_str(), op) {
        ("GET", None) => Ok(Response::json(200, &world.list_ips(user, params)?)),
        ("POST", Some("reserve")) => {
            let i = world.reserve_ip(user, params)?;
            Ok(Response::json(
                200,
                &world.reservation_json(&world.reservations[i]),
            ))
        }
        ("POST", Some("release")) => {
            world.release_ip(user, params)?;
            Ok(Response::empty(204))
        }
        (_, Some(_)) => unknown_op(req, op),
        (_, None) => not_allowed(),
    }
}

/// `nodes/{system_id}/interfaces/` and `.../{id}/`.
pub(super) fn interfaces(
    world: &mut World,
    user: &User,
    req: &Request,
    system_id: &str,
    interface: Option<&str>,
    op: Option<&str>,
    params: &[(String, String)],
) -> Outcome<Response> {
    let Ok(index) = world.machine_index(system_id) else {
        return Err(Failure::Text(
            404,
            match interface {
                Some(_) => "No Interface matches the given query.".into(),
                None => "No Node matches the given query.".into(),
            },
        ));
    };
    let m = &world.machines[index];
    let can_view = world.can_view(m, user);
    let can_admin = user.is_superuser && !m.locked;
    let Some(id) = interface else {
        return match (req.method.as_str(), op) {
            ("GET", None) if can_view => {
                let list: Vec<Value> = m
                    .interfaces
                    .iter()
                    .map(|i| render::interface(world, m, i))
                    .collect();
                Ok(Response::json(200, &json!(list)))
            }
            ("GET", None) => Err(Failure::Text(403, String::new())),
            (_, Some(_)) => unknown_op(req, op),
            (_, None) => not_allowed(),
        };
    };
    let i = world.interface_index(index, id)?;
    let answer = |w: &World| {
        let m = &w.machines[index];
        Ok(Response::json(
            200,
            &render::interface(w, m, &m.interfaces[i]),
        ))
    };
    match (req.method.as_str(), op) {
        ("GET", None) if can_view => answer(world),
        ("POST", Some("link_subnet" | "unlink_subnet")) if can_admin => {
            if op == Some("link_subnet") {
                world.link_subnet(index, i, params)?;
            } else {
                world.unlink_subnet(index, i, params)?;
            }
            answer(world)
        }
        ("GET", None) | ("POST", Some("link_subnet" | "unlink_subnet")) => {
            Err(Failure::Text(403, String::new()))
        }
        (_, Some(_)) => unknown_op(req, op),
        (_, None) => not_allowed(),
    }
}
