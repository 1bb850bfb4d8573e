//! The MAAS API 2.0 surface of the simulator: authentication, routing and
//! the answers real MAAS gives (bodies and status codes from maas-api.md).

use serde_json::{json, Value};

use crate::http::{Request, Response};
use crate::render;
use crate::world::network::subnet_json;
use crate::world::vmhosts;

mod machines;
mod network;
use crate::world::{now_unix, Failure, Outcome, User, World};

/// The `/MAAS/api/2.0/` path split into its resource pattern and id.
pub struct Route {
    /// e.g. `machines/{id}/` — used for call counts and fault matching.
    pub pattern: String,
    pub segments: Vec<String>,
}

impl Route {
    pub fn parse(rel: &str) -> Route {
        let segments: Vec<String> = rel
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        // Collections alternate with ids: `nodes/{id}/interfaces/{id}/`.
        let pattern: String = segments
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i % 2 == 1 {
                    "{id}/".to_owned()
                } else {
                    format!("{s}/")
                }
            })
            .collect();
        Route { pattern, segments }
    }
}

/// Parses `Authorization: OAuth k="v", ...` into its parameters.
fn oauth_params(header: &str) -> Option<Vec<(String, String)>> {
    let rest = header.strip_prefix("OAuth ")?;
    Some(
        rest.split(',')
            .filter(|pair| !pair.contains("realm"))
            .filter_map(|pair| {
                let (k, v) = pair.trim().split_once('=')?;
                Some((
                    k.trim().to_owned(),
                    crate::http::percent_decode(v.trim().trim_matches('"'), false),
                ))
            })
            .collect(),
    )
}

fn oauth_error(message: &str) -> Response {
    Response::html(401, &format!("Authorization Error: {message}"))
        .with_header("WWW-Authenticate", "OAuth realm=\"OAuth\"")
}

/// Checks the PLAINTEXT OAuth header the way piston3 does, in its order:
/// consumer, token, timestamp, nonce, signature.
pub fn authenticate(
    world: &mut World,
    req: &Request,
    route: &Route,
    op: Option<&str>,
) -> Result<User, Response> {
    const NEEDED: [&str; 6] = [
        "oauth_consumer_key",
        "oauth_token",
        "oauth_signature",
        "oauth_signature_method",
        "oauth_timestamp",
        "oauth_nonce",
    ];
    let params = req
        .header("authorization")
        .and_then(oauth_params)
        .unwrap_or_default();
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if !NEEDED.iter().all(|n| get(n).is_some()) {
        // Collections with an anonymous handler answer 400; the rest 401.
        let anonymous =
            matches!(route.pattern.as_str(), "machines/" | "nodes/") && req.method == "GET";
        return Err(if anonymous {
            Response::text(
                400,
                &format!(
                    "Unrecognised signature: method=GET op={}",
                    op.unwrap_or("None")
                ),
            )
        } else {
            Response {
                content_type: "text/plain",
                ..Response::text(401, "Forbidden")
            }
        });
    }
    let (ck, tk, sig, method, ts, nonce) = (
        get("oauth_consumer_key").unwrap_or(""),
        get("oauth_token").unwrap_or(""),
        get("oauth_signature").unwrap_or(""),
        get("oauth_signature_method").unwrap_or(""),
        get("oauth_timestamp").unwrap_or(""),
        get("oauth_nonce").unwrap_or(""),
    );
    if get("oauth_version").is_some_and(|v| v != "1.0") {
        return Err(oauth_error("'OAuth version 2.0 not supported.'"));
    }
    if !world.credentials.iter().any(|c| c.consumer_key == ck) {
        return Err(oauth_error("Invalid API key."));
    }
    let Some(cred) = world
        .credentials
        .iter()
        .find(|c| c.consumer_key == ck && c.token_key == tk)
        .cloned()
    else {
        return Err(oauth_error(&format!("'Invalid access token: {tk}'")));
    };
    let now = now_unix();
    let Ok(stamp) = ts.parse::<u64>() else {
        return Err(Response::text(
            400,
            &format!("Bad Request: invalid oauth_timestamp {ts:?}"),
        ));
    };
    if now.abs_diff(stamp) > 300 {
        return Err(oauth_error(&format!(
            "'Expired timestamp: given {stamp} and now {now} has a greater difference than threshold 300'"
        )));
    }
    let key = (tk.to_owned(), nonce.to_owned());
    if world.nonces.contains_key(&key) {
        return Err(oauth_error(&format!("'Nonce already used: {nonce}'")));
    }
    if world.nonces.len() > 100_000 {
        world.nonces.retain(|_, t| now.abs_diff(*t) <= 300);
    }
    world.nonces.insert(key, stamp);
    let expected = format!("&{}", cred.token_secret);
    if method != "PLAINTEXT" || sig != expected {
        // Real MAAS echoes the expected signature; so do we, so that the
        // client's redaction is tested against the real thing.
        return Err(oauth_error(&format!(
            "'Invalid signature. Expected signature base string: {expected}'"
        )));
    }
    Ok(cred.user)
}

fn unknown_op(req: &Request, op: Option<&str>) -> Outcome<Response> {
    Ok(Response::text(
        400,
        &format!(
            "Unrecognised signature: method={} op={}",
            req.method,
            op.unwrap_or("None")
        ),
    ))
}

fn not_allowed() -> Outcome<Response> {
    Ok(Response::empty(405))
}

fn admin_only(user: &User) -> Outcome<()> {
    if user.is_superuser {
        Ok(())
    } else {
        Err(Failure::Text(
            403,
            "This method is reserved for admin users.".into(),
        ))
    }
}

pub fn failure_response(f: Failure) -> Response {
    match f {
        Failure::Text(404, text) => Response {
            content_type: "text/plain",
            ..Response::text(404, &text)
        },
        Failure::Text(status, text) => Response::text(status, &text),
        Failure::Fields(status, value) => Response::json(status, &value),
    }
}

/// Handles an authenticated API request against the world.
pub fn handle(
    world: &mut World,
    user: &User,
    req: &Request,
    route: &Route,
    op: Option<&str>,
    params: &[(String, String)],
) -> Response {
    match dispatch(world, user, req, route, op, params) {
        Ok(response) => response,
        Err(f) => failure_response(f),
    }
}

fn dispatch(
    world: &mut World,
    user: &User,
    req: &Request,
    route: &Route,
    op: Option<&str>,
    params: &[(String, String)],
) -> Outcome<Response> {
    let seg: Vec<&str> = route.segments.iter().map(String::as_str).collect();
    let method = req.method.as_str();
    match (seg.as_slice(), method, op) {
        (["users"], "GET", Some("whoami")) => Ok(Response::json(
            200,
            &render::user(&user.username, user.is_superuser),
        )),
        (["users"], "GET", None) => {
            // One entry per user, however many keys it has.
            let mut users: Vec<&User> = Vec::new();
            for c in &world.credentials {
                if !users.iter().any(|u| u.username == c.user.username) {
                    users.push(&c.user);
                }
            }
            let users: Vec<Value> = users
                .into_iter()
                .map(|u| render::user(&u.username, u.is_superuser))
                .collect();
            Ok(Response::json(200, &json!(users)))
        }
        (["machines"], "GET", None) => machines::list_machines(world, user, params, false),
        (["machines"], "GET", Some("list_allocated")) => {
            machines::list_machines(world, user, params, true)
        }
        (["machines"], "POST", Some("allocate")) => {
            let index = world.allocate(user, params)?;
            let mut v = render::machine(world, &world.machines[index]);
            v["constraints_by_type"] = json!({});
            Ok(Response::json(200, &v))
        }
        (["machines"], "POST", Some("release")) => machines::bulk_release(world, user, params),
        (["machines"], _, _) => unknown_op(req, op),
        (["subnets"], "GET", None) => Ok(Response::json(
            200,
            &json!(world.subnets.iter().map(subnet_json).collect::<Vec<_>>()),
        )),
        (["subnets", id], "GET", None) => match world.subnet_by_ref(id) {
            Some(s) => Ok(Response::json(200, &subnet_json(s))),
            None => Err(Failure::Text(
                404,
                "No Subnet matches the given query.".into(),
            )),
        },
        (["ipaddresses"], _, _) => network::ip_addresses(world, user, req, op, params),
        (["nodes", id, "interfaces"], _, _) => {
            network::interfaces(world, user, req, id, None, op, params)
        }
        (["nodes", id, "interfaces", iface], _, _) => {
            network::interfaces(world, user, req, id, Some(iface), op, params)
        }
        (["events"], "GET", Some("query")) => {
            Ok(Response::json(200, &world.query_events(user, &req.query)?))
        }
        (["machines", id], _, _) => machines::machine_call(world, user, req, id, op, params),
        // VM hosts (MAAS ≤ 3.8; `pods/` is their older name), gone after.
        ([c, ..], _, _) if is_vm_hosts(c) && !world.has_vm_hosts() => {
            Err(Failure::Text(410, vmhosts::REMOVED.into()))
        }
        ([c], "GET", None) if is_vm_hosts(c) => Ok(Response::json(
            200,
            &json!((0..world.vm_hosts.len())
                .map(|i| world.vm_host_json(i))
                .collect::<Vec<_>>()),
        )),
        ([c, id], "GET", None) if is_vm_hosts(c) => Ok(Response::json(
            200,
            &world.vm_host_json(world.vm_host_index(id)?),
        )),
        ([c, id], "POST", Some("compose")) if is_vm_hosts(c) => {
            admin_only(user)?;
            let host = world.vm_host_index(id)?;
            let vm = world.compose(host, params)?;
            let system_id = &world.machines[vm].system_id;
            Ok(Response::json(
                200,
                &json!({"system_id": system_id,
                        "resource_uri": format!("/MAAS/api/2.0/machines/{system_id}/")}),
            ))
        }
        (["dnsresources"], "GET", None) => {
            let found = world.list_dns(params)?;
            let list: Vec<Value> = found
                .iter()
                .map(|&i| render::dns_resource(world, &world.dns[i]))
                .collect();
            Ok(Response::json(200, &json!(list)))
        }
        (["dnsresources"], "POST", None) => {
            admin_only(user)?;
            let i = world.create_dns(params)?;
            dns_json(world, i)
        }
        (["dnsresources"], _, Some(_)) => unknown_op(req, op),
        (["dnsresources"], _, None) => not_allowed(),
        (["dnsresources", id], "GET", None) => dns_json(world, world.dns_index(id)?),
        (["dnsresources", id], "PUT", None) => {
            let i = world.dns_index(id)?;
            admin_only(user)?;
            world.update_dns(i, params)?;
            dns_json(world, i)
        }
        (["dnsresources", id], "DELETE", None) => {
            let i = world.dns_index(id)?;
            admin_only(user)?;
            world.dns.remove(i);
            Ok(Response::empty(204))
        }
        (["dnsresources", _], _, Some(_)) => unknown_op(req, op),
        (["dnsresourcerecords"], "POST", None) => {
            admin_only(user)?;
            let (i, j) = world.create_dns_data(params)?;
            let rec = &world.dns[i];
            Ok(Response::json(
                200,
                &render::dns_data(world, rec, &rec.data[j]),
            ))
        }
        (["domains"], "GET", None) => {
            let list: Vec<Value> = world
                .domains
                .iter()
                .map(|d| render::domain(world, d))
                .collect();
            Ok(Response::json(200, &json!(list)))
        }
        (["domains", id], "GET", None) => {
            match world.domains.iter().find(|d| d.id.to_string() == *id) {
                Some(d) => Ok(Response::json(200, &render::domain(world, d))),
                None => Err(Failure::Text(
                    404,
                    "No Domain matches the given query.".into(),
                )),
            }
        }
        (["zones"], "GET", None) => {
            let mut zones: Vec<&crate::world::Named> = world.zones.iter().collect();
            zones.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(Response::json(
                200,
                &json!(zones.into_iter().map(render::zone).collect::<Vec<_>>()),
            ))
        }
        (["zones", name], "GET", None) => match world.zones.iter().find(|z| z.name == *name) {
            Some(z) => Ok(Response::json(200, &render::zone(z))),
            None => Err(Failure::Text(
                404,
                "No Zone matches the given query.".into(),
            )),
        },
        // With RBAC a user lists only the pools it may view, and reading
        // another is a 403 (`ResourcePoolHandler`, `get_resource_pool_or_404`).
        (["resourcepools"], "GET", None) => Ok(Response::json(
            200,
            &json!(world
                .pools
                .iter()
                .filter(|p| world.pool_visible(&p.name, user))
                .map(render::pool)
                .collect::<Vec<_>>()),
        )),
        (["resourcepool", id], "GET", None) => {
            match world
                .pools
                .iter()
                .find(|p| p.id.to_string() == *id || p.name == *id)
            {
                Some(p) if !world.pool_visible(&p.name, user) => {
                    Err(Failure::Text(403, String::new()))
                }
                Some(p) => Ok(Response::json(200, &render::pool(p))),
                None => Err(Failure::Text(
                    404,
                    "No ResourcePool matches the given query.".into(),
                )),
            }
        }
        (["boot-resources"], "GET", None) => {
            let kind = params
                .iter()
                .find(|(k, _)| k == "type")
                .map(|(_, v)| v.as_str());
            let filter = match kind {
                None | Some("all") => None,
                Some("synced") => Some("Synced"),
                Some("uploaded") => Some("Uploaded"),
                Some(other) => {
                    return Err(Failure::Text(
                        400,
                        format!("'{other}' is not a valid boot resource type. Available types: ['synced', 'uploaded']"),
                    ))
                }
            };
            let list: Vec<Value> = world
                .boot_resources
                .iter()
                .filter(|b| filter.is_none_or(|k| b.kind == k))
                .map(|b| render::boot_resource(b, false))
                .collect();
            Ok(Response::json(200, &json!(list)))
        }
        (["boot-resources"], "GET", Some("is_importing")) => Ok(Response::json(200, &json!(false))),
        (["boot-resources", id], "GET", None) => match world
            .boot_resources
            .iter()
            .find(|b| b.id.to_string() == *id)
        {
            Some(b) => Ok(Response::json(200, &render::boot_resource(b, true))),
            None => Err(Failure::Text(
                404,
                "No BootResource matches the given query.".into(),
            )),
        },
        (["tags"], "GET", None) => {
            let list: Vec<Value> = world
                .tags
                .iter()
                .map(|t| {
                    json!({"name": t, "definition": "", "comment": "", "kernel_opts": "",
                                "resource_uri": format!("/MAAS/api/2.0/tags/{t}/")})
                })
                .collect();
            Ok(Response::json(200, &json!(list)))
        }
        (["tags", name], "GET", tag_op) if tag_op.is_none() || tag_op == Some("machines") => {
            if !world.tags.iter().any(|t| t == name) {
                return Err(Failure::Text(404, "No Tag matches the given query.".into()));
            }
            if tag_op.is_none() {
                return Ok(Response::json(
                    200,
                    &json!({"name": name, "definition": "", "comment": "",
                    "kernel_opts": "", "resource_uri": format!("/MAAS/api/2.0/tags/{name}/")}),
                ));
            }
            let list: Vec<Value> = world
                .machines
                .iter()
                .filter(|m| m.tags.iter().any(|t| t == name) && world.can_view(m, user))
                .map(|m| render::machine(world, m))
                .collect();
            Ok(Response::json(200, &json!(list)))
        }
        (["tags", name], "POST", Some("update_nodes")) => {
            admin_only(user)?;
            let name = name.to_string();
            if !world.tags.contains(&name) {
                return Err(Failure::Text(404, "No Tag matches the given query.".into()));
            }
            let (mut added, mut removed) = (0, 0);
            for (k, id) in params {
                let Some(m) = world.machines.iter_mut().find(|m| &m.system_id == id) else {
                    continue;
                };
                if k == "add" && !m.tags.contains(&name) {
                    m.tags.push(name.clone());
                    added += 1;
                } else if k == "remove" && m.tags.contains(&name) {
                    m.tags.retain(|t| t != &name);
                    removed += 1;
                }
            }
            Ok(Response::json(
                200,
                &json!({"added": added, "removed": removed}),
            ))
        }
        (_, _, Some(_)) if !seg.is_empty() && is_known_collection(seg[0]) => unknown_op(req, op),
        (_, _, None) if !seg.is_empty() && is_known_collection(seg[0]) => not_allowed(),
        _ => Ok(Response::html(404, "<h1>Not Found</h1>")),
    }
}

fn dns_json(world: &World, index: usize) -> Outcome<Response> {
    Ok(Response::json(
        200,
        &render::dns_resource(world, &world.dns[index]),
    ))
}

fn is_vm_hosts(name: &str) -> bool {
    matches!(name, "vm-hosts" | "pods")
}

fn is_known_collection(name: &str) -> bool {
    matches!(
        name,
        "users"
            | "events"
            | "subnets"
            | "ipaddresses"
            | "nodes"
            | "machines"
            | "dnsresources"
            | "dnsresourcerecords"
            | "domains"
            | "zones"
            | "resourcepools"
            | "resourcepool"
            | "boot-resources"
            | "tags"
            | "vm-hosts"
            | "pods"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_have_stable_patterns() {
        assert_eq!(Route::parse("machines/").pattern, "machines/");
        assert_eq!(Route::parse("machines/abc123/").pattern, "machines/{id}/");
        assert_eq!(
            Route::parse("nodes/abc123/interfaces/7/").pattern,
            "nodes/{id}/interfaces/{id}/"
        );
    }

    #[test]
    fn oauth_header_parsing_accepts_unquoted_and_realm() {
        let p =
            oauth_params("OAuth realm=\"\", oauth_signature=%26abc, oauth_nonce=\"n\"").unwrap();
        assert_eq!(
            p,
            vec![
                ("oauth_signature".into(), "&abc".into()),
                ("oauth_nonce".into(), "n".into())
            ]
        );
        assert!(oauth_params("Bearer x").is_none());
    }
}
