//! `/_sim/` test controls (no authentication): inspect and steer the world.
//!
//! | call | effect |
//! | --- | --- |
//! | `GET /_sim/state` | machines (status, status_message, error_description, owner, agent_name, owner data, IPs, interfaces with links, `last_release`: who released it with which erase flags and comment) and DNS resources |
//! | `GET /_sim/calls`, `DELETE /_sim/calls` | request counts by `"METHOD pattern[ op=OP]"`; reset |
//! | `GET /_sim/stats` | `{"connections": n}`: TCP connections accepted so far |
//! | `POST /_sim/faults` (JSON [`Fault`]), `GET`, `DELETE /_sim/faults` | add, list, clear fault rules |
//! | `POST /_sim/settings` `{"deploy_seconds": n, "release_seconds": n, "latency_ms": n}` | change timings; `latency_ms`: every API call (not `/_sim/`) takes at least that long |
//! | `POST /_sim/machines` (JSON inventory machine) | add a machine → `{"system_id"}` |
//! | `DELETE /_sim/machines/{id}` | remove a machine |
//! | `POST /_sim/machines/{id}/power-off`, `power-on`, `power-unknown`, `power-error` | change the power state behind MAAS's back |
//! | `POST /_sim/machines/{id}/fail-deployment` `[{"reason": "..."}]` | fail the running deployment now, or the next one, with this curtin message |
//! | `POST /_sim/machines/{id}/mark-broken` `[{"user": "admin", "comment": "..."}]` | an operator marks it broken (`Node.mark_broken`: released first if releasable, then Broken) |
//! | `POST /_sim/machines/{id}/complete` | finish a pending deploy/release/erasure now |
//! | `POST /_sim/machines/{id}/release` `[{"user", "erase", "quick_erase", "secure_erase", "comment"}]` | an operator (default: the first admin) releases it behind the client's back, as `op=release` would |
//! | `POST /_sim/machines/{id}/redeploy` `[{"user", "distro_series", "agent_name", "comment"}]` | someone (default: its owner) releases it (finished at once: owner data, agent_name gone) and deploys it again from Ready |

use serde_json::{json, Value};

use crate::http::{Request, Response};
use crate::inventory::MachineEntry;
use crate::world::{Fault, User, World};

fn bad(message: impl Into<String>) -> Response {
    Response::json(400, &json!({"error": message.into()}))
}

fn not_found() -> Response {
    Response::json(404, &json!({"error": "no such machine"}))
}

/// The user a control acts as: the one named, else the inventory's first
/// admin (an operator in MAAS's UI).
fn acting_user(world: &World, name: Option<String>) -> Result<User, Response> {
    let found = world
        .credentials
        .iter()
        .map(|c| &c.user)
        .find(|u| match &name {
            Some(name) => &u.username == name,
            None => u.is_superuser,
        });
    match (found, name) {
        (Some(user), _) => Ok(user.clone()),
        (None, Some(name)) => Err(bad(format!("no user {name} in the inventory"))),
        (None, None) => Ok(User {
            username: "admin".into(),
            is_superuser: true,
            pools: None,
            deploy_pools: None,
        }),
    }
}

pub fn handle(world: &mut World, req: &Request, rel: &str) -> Response {
    let seg: Vec<&str> = rel.split('/').filter(|s| !s.is_empty()).collect();
    match (req.method.as_str(), seg.as_slice()) {
        ("GET", ["state"]) => Response::json(200, &world.state_json()),
        ("GET", ["calls"]) => Response::json(200, &json!(world.calls)),
        ("GET", ["stats"]) => Response::json(200, &json!({"connections": world.connections})),
        ("DELETE", ["calls"]) => {
            world.calls.clear();
            Response::json(200, &json!({}))
        }
        ("GET", ["faults"]) => Response::json(200, &json!(world.faults)),
        ("DELETE", ["faults"]) => {
            world.faults.clear();
            Response::json(200, &json!({}))
        }
        ("POST", ["faults"]) => match serde_json::from_slice::<Fault>(&req.body) {
            Ok(fault) => {
                world.faults.push(fault);
                Response::json(200, &json!({"faults": world.faults.len()}))
            }
            Err(e) => bad(format!("invalid fault: {e}")),
        },
        ("POST", ["settings"]) => match serde_json::from_slice::<Value>(&req.body) {
            Ok(v) => {
                if let Some(n) = v.get("deploy_seconds").and_then(Value::as_f64) {
                    world.settings.deploy_seconds = n;
                }
                if let Some(n) = v.get("release_seconds").and_then(Value::as_f64) {
                    world.settings.release_seconds = n;
                }
                if let Some(n) = v.get("latency_ms").and_then(Value::as_u64) {
                    world.settings.latency_ms = n;
                }
                Response::json(
                    200,
                    &json!({"deploy_seconds": world.settings.deploy_seconds,
                            "release_seconds": world.settings.release_seconds,
                            "latency_ms": world.settings.latency_ms}),
                )
            }
            Err(e) => bad(format!("invalid settings: {e}")),
        },
        ("POST", ["machines"]) => match serde_json::from_slice::<MachineEntry>(&req.body) {
            Ok(entry) => match world.add_machine(&entry) {
                Ok(id) => Response::json(200, &json!({"system_id": id})),
                Err(e) => bad(e),
            },
            Err(e) => bad(format!("invalid machine: {e}")),
        },
        ("DELETE", ["machines", id]) => match world.machine_index(id) {
            Ok(i) => {
                world.machines.remove(i);
                Response::json(200, &json!({}))
            }
            Err(_) => not_found(),
        },
        ("POST", ["machines", id, action]) => {
            let Ok(i) = world.machine_index(id) else {
                return not_found();
            };
            let body: Value = if req.body.is_empty() {
                json!({})
            } else {
                match serde_json::from_slice(&req.body) {
                    Ok(v) => v,
                    Err(e) => return bad(format!("invalid JSON body: {e}")),
                }
            };
            let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_owned);
            match *action {
                // Behind MAAS's back (a BMC, a hand on the button): MAAS's
                // power polling sees the new state; no event is recorded.
                "power-off" => world.machines[i].power_state = "off".into(),
                "power-on" => world.machines[i].power_state = "on".into(),
                // A BMC that did not answer (MAAS's `unknown` and `error`).
                "power-unknown" => world.machines[i].power_state = "unknown".into(),
                "power-error" => world.machines[i].power_state = "error".into(),
                "fail-deployment" => world.fail_deployment(i, text("reason")),
                "mark-broken" => {
                    let user = match acting_user(world, text("user")) {
                        Ok(user) => user,
                        Err(response) => return response,
                    };
                    world.mark_broken(i, &user, text("comment").as_deref())
                }
                "complete" => world.complete(i),
                // An operator releases it behind the client's back.
                "release" => {
                    let user = match acting_user(world, text("user")) {
                        Ok(user) => user,
                        Err(response) => return response,
                    };
                    let mut form: Vec<(String, String)> = ["erase", "quick_erase", "secure_erase"]
                        .iter()
                        .filter(|k| body.get(**k).and_then(Value::as_bool) == Some(true))
                        .map(|k| (k.to_string(), "true".to_owned()))
                        .collect();
                    form.extend(text("comment").map(|c| ("comment".to_owned(), c)));
                    if let Err(f) = world.release(i, &user, &form) {
                        return crate::api::failure_response(f);
                    }
                }
                // Someone releases and deploys it again (by default its
                // owner's account): the release finishes at once, then a
                // deployment as `user` from Ready, as MAAS's deploy does.
                "redeploy" => {
                    let user = match acting_user(
                        world,
                        text("user").or_else(|| world.machines[i].owner.clone()),
                    ) {
                        Ok(user) => user,
                        Err(response) => return response,
                    };
                    if let Err(f) = world.release(i, &user, &[]) {
                        return crate::api::failure_response(f);
                    }
                    world.complete(i);
                    let form: Vec<(String, String)> = ["distro_series", "agent_name", "comment"]
                        .iter()
                        .filter_map(|k| text(k).map(|v| (k.to_string(), v)))
                        .collect();
                    if let Err(f) = world.deploy(i, &user, &form) {
                        return crate::api::failure_response(f);
                    }
                }
                _ => return bad(format!("unknown action {action}")),
            }
            Response::json(
                200,
                &json!({"status_name": world.machines[i].status.name()}),
            )
        }
        _ => Response::json(404, &json!({"error": "unknown /_sim/ call"})),
    }
}
