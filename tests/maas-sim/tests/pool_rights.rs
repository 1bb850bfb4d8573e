//! Allocation as MAAS plays it for rights per resource pool and for
//! `dry_run`: from 3.8 on a user's groups hold `can_deploy_machines` per
//! pool (`deploy_pools` in the inventory); allocation
//! (`get_available_machines_for_acquisition`, `NodePermission.edit`) offers
//! only machines in those pools, while the user still lists every pool and
//! the free machines in each (`can_view_available_machines`). A `dry_run`
//! allocation picks a machine without acquiring it.

mod wire;

use std::net::TcpStream;

use serde_json::Value;

const ADMIN: &str = "ck:tk:secret";
const ALICE: &str = "ck2:tk2:secret2";

fn inventory(version: &str, deploy_pools: &str) -> Result<maas_sim::Server, String> {
    let inventory = maas_sim::Inventory::from_json(&format!(
        r#"{{"api_keys": [{{"key": "{ADMIN}"}},
                          {{"key": "{ALICE}", "username": "alice", "is_superuser": false
                            {deploy_pools}}}],
            "pools": [{{"name": "granted"}}, {{"name": "other"}}],
            "machines": [{{"hostname": "g-1", "pool": "granted"}},
                         {{"hostname": "o-1", "pool": "other"}}],
            "settings": {{"maas_version": "{version}"}}}}"#
    ))?;
    maas_sim::start("127.0.0.1:0", inventory).map_err(|e| e.to_string())
}

struct Sim {
    _server: maas_sim::Server,
    stream: TcpStream,
}

impl Sim {
    fn new(version: &str, deploy_pools: &str) -> Sim {
        let server = inventory(version, deploy_pools).unwrap();
        let stream = TcpStream::connect(server.addr()).unwrap();
        Sim {
            _server: server,
            stream,
        }
    }

    fn call(&mut self, key: &str, method: &str, path: &str, form: &str) -> (u16, String) {
        let path = format!("/MAAS/api/2.0/{path}");
        wire::send_form(&mut self.stream, key, method, &path, form);
        let (head, body) = wire::receive(&mut self.stream);
        let status = head[9..12].parse().unwrap();
        (status, String::from_utf8(body).unwrap())
    }

    fn json(&mut self, key: &str, method: &str, path: &str, form: &str) -> Value {
        let (status, body) = self.call(key, method, path, form);
        assert_eq!(status, 200, "{method} {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    fn allocate(&mut self, key: &str, form: &str) -> (u16, String) {
        self.call(key, "POST", "machines/?op=allocate", form)
    }

    /// (status_name, owner) of the machine named `hostname`, as admin sees it.
    fn state(&mut self, hostname: &str) -> (String, Value) {
        let listed = self.json(ADMIN, "GET", &format!("machines/?hostname={hostname}"), "");
        let m = &listed[0];
        (
            m["status_name"].as_str().unwrap().to_string(),
            m["owner"].clone(),
        )
    }
}

#[test]
fn a_dry_run_picks_a_machine_and_changes_nothing() {
    let mut sim = Sim::new("3.4.8", "");
    let picked = sim.json(
        ADMIN,
        "POST",
        "machines/?op=allocate",
        "pool=granted&dry_run=true",
    );
    assert_eq!(picked["hostname"], "g-1");
    assert_eq!(sim.state("g-1"), ("Ready".into(), Value::Null));
    let events = sim.json(ADMIN, "GET", "events/?op=query&level=DEBUG", "");
    assert_eq!(events["count"], 0, "a dry run acquires nothing: {events}");
    // Only a real allocation takes it.
    sim.json(ADMIN, "POST", "machines/?op=allocate", "pool=granted");
    assert_eq!(sim.state("g-1").0, "Allocated");
    let events = sim.json(ADMIN, "GET", "events/?op=query&level=DEBUG", "");
    assert!(
        events.to_string().contains("User acquiring node"),
        "{events}"
    );
    let (status, body) = sim.allocate(ADMIN, "pool=granted&dry_run=true");
    assert_eq!(status, 409, "{body}");
}

#[test]
fn from_3_8_a_user_allocates_only_where_it_may_deploy() {
    let mut sim = Sim::new("3.8.0", r#", "deploy_pools": ["granted"]"#);
    // Every pool is listed, and the free machines of each.
    let pools = sim.json(ALICE, "GET", "resourcepools/", "");
    let names: Vec<&str> = pools
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "granted", "other"]);
    let other = sim.json(ALICE, "GET", "machines/?pool=other&status=ready", "");
    assert_eq!(other[0]["hostname"], "o-1");

    // But a free machine in a pool without can_deploy_machines is never
    // offered, dry run or not.
    for form in ["pool=other&dry_run=true", "pool=other", "name=o-1"] {
        let (status, body) = sim.allocate(ALICE, form);
        assert_eq!(status, 409, "{form}: {body}");
        assert!(body.starts_with("No available machine matches"), "{body}");
    }
    let picked = sim.json(
        ALICE,
        "POST",
        "machines/?op=allocate",
        "pool=granted&dry_run=true",
    );
    assert_eq!(picked["hostname"], "g-1");
    let picked = sim.json(ALICE, "POST", "machines/?op=allocate", "");
    assert_eq!(picked["hostname"], "g-1", "no pool asked: its pools only");
    let (status, body) = sim.allocate(ALICE, "");
    assert_eq!(status, 409, "o-1 is free but not Alice's to take: {body}");
    assert_eq!(sim.state("o-1"), ("Ready".into(), Value::Null));

    // The administrator holds every right.
    let picked = sim.json(ADMIN, "POST", "machines/?op=allocate", "pool=other");
    assert_eq!(picked["hostname"], "o-1");
}

#[test]
fn deploy_rights_per_pool_need_maas_3_8() {
    // Without them, every pool (the built-in Users group's rights)...
    let mut sim = Sim::new("3.8.0", "");
    let picked = sim.json(
        ALICE,
        "POST",
        "machines/?op=allocate",
        "pool=other&dry_run=true",
    );
    assert_eq!(picked["hostname"], "o-1", "absent: every pool");
    // ...and a 3.7 MAAS has no such rights to give.
    let refused = inventory("3.7.3", r#", "deploy_pools": ["granted"]"#).err();
    assert!(
        refused.as_deref().is_some_and(|e| e.contains("MAAS 3.8")),
        "{refused:?}"
    );
    let refused = inventory("3.8.0", r#", "deploy_pools": ["nowhere"]"#).err();
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.contains("unknown pool nowhere")),
        "{refused:?}"
    );
}
