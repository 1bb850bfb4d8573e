//! maas-sim on the wire: the answers real MAAS gives, checked with raw HTTP
//! rather than through our client (which would hide some of them). The
//! binary's command line is tested in its own package
//! (`tests/maas-sim/tests/cli.rs`).

mod support;

use capmaas::maas::MaasApi;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use capmaas::maas::ApiKey;
use serde_json::{json, Value};
use support::maas_sim::MaasSim;

struct Raw {
    agent: ureq::Agent,
    key: ApiKey,
    api: String,
}

struct Answer {
    status: u16,
    content_type: String,
    location: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl Raw {
    fn new(sim: &MaasSim) -> Raw {
        Raw::with_key(sim, &sim.api_key)
    }

    /// Signs with `key` (e.g. `sim.key_of("tenant-a")`).
    fn with_key(sim: &MaasSim, key: &str) -> Raw {
        Raw {
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .new_agent(),
            key: ApiKey::parse(key).unwrap(),
            api: format!("{}/api/2.0/", sim.url),
        }
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        auth: Option<String>,
        body: Option<(&str, String)>,
    ) -> Answer {
        let url = format!("{}{path}", self.api);
        let result = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = if method == "PUT" {
                    self.agent.put(&url)
                } else {
                    self.agent.post(&url)
                };
                if let Some(a) = auth {
                    r = r.header("Authorization", a);
                }
                let (content_type, body) =
                    body.unwrap_or(("application/x-www-form-urlencoded", String::new()));
                r.content_type(content_type).send(body.as_str())
            }
        };
        let mut response = result.unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header("content-type").unwrap_or_default();
        let location = header("location");
        Answer {
            status: response.status().as_u16(),
            content_type,
            location,
            body: response.body_mut().read_to_string().unwrap(),
        }
    }

    fn signed(&self, method: &str, path: &str, form: Option<&str>) -> Answer {
        self.send(
            method,
            path,
            Some(self.key.authorization_header()),
            form.map(|f| ("application/x-www-form-urlencoded", f.to_owned())),
        )
    }
}

#[test]
fn story_inventory_file_is_the_embedded_default() {
    let on_disk = std::fs::read_to_string(support::maas_sim::story_inventory_path()).unwrap();
    assert_eq!(on_disk, maas_sim::DEFAULT_INVENTORY);
}

#[test]
fn paths_ops_and_anonymous_calls() {
    let sim = MaasSim::start(None);
    let raw = Raw::new(&sim);

    let a = raw.signed("GET", "zones", None);
    assert_eq!(a.status, 301);
    assert!(a.location.unwrap().ends_with("/MAAS/api/2.0/zones/"));

    // Anonymous; answered as real MAAS 3.4.8 does (VersionHandler): the
    // version up to its qualifier, `subversion` always empty.
    let a = raw.send("GET", "version/", None, None);
    assert_eq!(a.status, 200);
    assert!(a.json()["capabilities"].is_array());
    assert_eq!(a.json()["version"], "3.4.8");
    assert_eq!(a.json()["subversion"], "");
    let mut newer = support::maas_sim::story_inventory();
    newer["settings"]["maas_version"] = serde_json::json!("3.8.0");
    let newer = MaasSim::start(Some(&newer));
    let version = newer.client().version().unwrap();
    assert_eq!(version.version, "3.8.0");
    assert!(version.has_pool_entitlements());

    let a = raw.send("GET", "machines/", None, None);
    assert_eq!(
        (a.status, a.body.as_str()),
        (400, "Unrecognised signature: method=GET op=None")
    );
    let a = raw.send("GET", "zones/", None, None);
    assert_eq!(
        (a.status, a.body.as_str(), a.content_type.as_str()),
        (401, "Forbidden", "text/plain")
    );

    let a = raw.signed("POST", "machines/?op=frobnicate", Some(""));
    assert_eq!(
        (a.status, a.body.as_str()),
        (400, "Unrecognised signature: method=POST op=frobnicate")
    );

    // op in the form body works as well as in the query string.
    let a = raw.signed("POST", "machines/", Some("op=allocate&pool=cp-pool"));
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["status_name"], "Allocated");
    assert_eq!(a.json()["constraints_by_type"], json!({}));

    let a = raw.signed("POST", "machines/?op=allocate", Some("frobnicate=1"));
    assert_eq!(a.status, 400);
    assert_eq!(a.json(), json!({"frobnicate": ["No such constraint."]}));

    let a = raw.signed("POST", "machines/?op=allocate", Some("system_id=abc123"));
    assert_eq!(
        (a.status, a.body.as_str()),
        (409, "No machine with system ID abc123 available.")
    );
    let a = raw.signed("POST", "machines/?op=allocate", Some("mem=lots"));
    assert_eq!(
        a.json(),
        json!({"mem": ["Invalid memory: number of MiB required."]})
    );

    let a = raw.signed("GET", "machines/?frobnicate=1", None);
    assert_eq!(a.json(), json!({"frobnicate": ["No such constraint."]}));
}

#[test]
fn multipart_bodies_are_accepted() {
    let sim = MaasSim::start(None);
    let raw = Raw::new(&sim);
    let body = "--BOUNDARY\r\nContent-Disposition: form-data; name=\"pool\"\r\n\r\nworker-pool\r\n\
                --BOUNDARY\r\nContent-Disposition: form-data; name=\"tags\"\r\n\r\nworker\r\n\
                --BOUNDARY\r\nContent-Disposition: form-data; name=\"agent_name\"\r\n\r\nmultipart\r\n--BOUNDARY--\r\n";
    let a = raw.send(
        "POST",
        "machines/?op=allocate",
        Some(raw.key.authorization_header()),
        Some(("multipart/form-data; boundary=BOUNDARY", body.to_owned())),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["pool"]["name"], "worker-pool");
    assert_eq!(
        sim.machine_state(a.json()["system_id"].as_str().unwrap())["agent_name"],
        "multipart"
    );
}

#[test]
fn oauth_nonce_replay_stale_timestamp_and_wrong_method() {
    let sim = MaasSim::start(None);
    let raw = Raw::new(&sim);
    let header = raw.key.authorization_header_with("fixed-nonce-1", now());
    assert_eq!(
        raw.send("GET", "zones/", Some(header.clone()), None).status,
        200
    );
    let a = raw.send("GET", "zones/", Some(header), None);
    assert_eq!(
        (a.status, a.body.as_str()),
        (
            401,
            "Authorization Error: 'Nonce already used: fixed-nonce-1'"
        )
    );
    assert!(a.content_type.starts_with("text/html"));

    let stale = now() - 1000;
    let a = raw.send(
        "GET",
        "zones/",
        Some(raw.key.authorization_header_with("n2", stale)),
        None,
    );
    assert_eq!(a.status, 401);
    assert!(
        a.body.starts_with(&format!(
            "Authorization Error: 'Expired timestamp: given {stale} and now "
        )),
        "{}",
        a.body
    );

    let hmac = raw
        .key
        .authorization_header_with("n3", now())
        .replace("PLAINTEXT", "HMAC-SHA1");
    let a = raw.send("GET", "zones/", Some(hmac), None);
    assert_eq!(a.status, 401);
    assert!(a.body.contains("Invalid signature"), "{}", a.body);

    // The MAAS docs' curl form: unquoted, unencoded signature, with a realm.
    let key: Vec<&str> = sim.api_key.split(':').collect();
    let curl = format!(
        "OAuth realm=\"\", oauth_consumer_key={}, oauth_token={}, oauth_signature_method=PLAINTEXT, \
         oauth_signature=&{}, oauth_nonce=curl-1, oauth_timestamp={}",
        key[0],
        key[1],
        key[2],
        now()
    );
    assert_eq!(raw.send("GET", "zones/", Some(curl), None).status, 200);
}

#[test]
fn machine_json_has_every_key_of_real_maas() {
    let sim = MaasSim::start(None);
    let raw = Raw::new(&sim);
    let machine = raw
        .signed("POST", "machines/?op=allocate", Some("pool=cp-pool"))
        .json();
    let newer = [
        "workload_annotations",
        "ephemeral_deploy",
        "hardware_uuid",
        "network_test_status",
        "network_test_status_name",
        "numanode_set",
        "parent",
        "is_dpu",
        "enable_hw_sync",
    ];
    for key in newer {
        assert!(machine.get(key).is_some(), "missing {key}");
    }
    let fixture = PathBufs::fixture("machine-allocated.json");
    let Some(path) = fixture else {
        support::skip::skip(
            "the fixture comparison",
            "../shared/maas-fixtures not found (set CAPMAAS_SHARED to the folder holding it)",
        );
        return;
    };
    let real: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let missing: Vec<&String> = real
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| machine.get(k.as_str()).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "simulator machine JSON lacks {missing:?}"
    );
    for key in ["zone", "pool", "domain", "boot_interface"] {
        let want: Vec<&String> = real[key].as_object().unwrap().keys().collect();
        for k in want {
            assert!(machine[key].get(k.as_str()).is_some(), "{key}.{k} missing");
        }
    }
}

struct PathBufs;

impl PathBufs {
    fn fixture(name: &str) -> Option<std::path::PathBuf> {
        let path = support::skip::shared_dir().join("maas-fixtures").join(name);
        path.exists().then_some(path)
    }
}

#[test]
fn deployment_completes_on_its_own() {
    let sim = MaasSim::start_with_args(
        None,
        &["--deploy-seconds", "0.2", "--release-seconds", "0.2"],
    );
    let client = sim.client();
    let host = client
        .allocate(&capmaas::maas::AllocateRequest {
            pool: Some("cp-pool".into()),
            ..Default::default()
        })
        .unwrap();
    client.deploy(&host.system_id, &Default::default()).unwrap();
    let status = wait_for(&sim, &host.system_id, "Deployed");
    assert_eq!(status, "Deployed");
    client
        .release(&host.system_id, &Default::default())
        .unwrap();
    assert_eq!(wait_for(&sim, &host.system_id, "Ready"), "Ready");
}

/// Polls the state until the machine reaches `want` (or 30 s pass, then
/// returns whatever it is, for the assertion to report).
fn wait_for(sim: &MaasSim, system_id: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = sim.machine_state(system_id)["status_name"]
            .as_str()
            .unwrap()
            .to_owned();
        if status == want || Instant::now() > deadline {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn controls_add_remove_and_state() {
    let sim = MaasSim::start(Some(&json!({
        "api_keys": [{"key": "ck:tk:secretsecret"}],
        "zones": [{"name": "z1"}],
        "boot_resources": [{"name": "ubuntu/jammy", "architecture": "amd64/ga-22.04"}],
        "machines": [{"hostname": "only-one", "zone": "z1", "ip_addresses": ["127.0.2.10"]}]
    })));
    let client = sim.client();
    assert_eq!(client.machines(&Default::default()).unwrap().len(), 1);
    let id = sim.add_machine(json!({"hostname": "extra", "cpu_count": 2, "memory": 2048}));
    assert_eq!(client.machine(&id).unwrap().hostname, "extra");
    sim.remove_machine(&id);
    assert!(client.machine(&id).unwrap_err().is_not_found());

    let host = client.allocate(&Default::default()).unwrap();
    assert_eq!(host.hostname, "only-one");
    let err = client.allocate(&Default::default()).unwrap_err();
    assert_eq!(
        (err.http_status(), err.message().as_str()),
        (Some(409), "No machine available.")
    );
    client.deploy(&host.system_id, &Default::default()).unwrap();
    let state = sim.state();
    assert_eq!(state["machines"][0]["status_name"], "Deploying");
    assert_eq!(state["machines"][0]["owner"], "admin");
    assert_eq!(state["machines"][0]["ip_addresses"], json!(["127.0.2.10"]));
    assert_eq!(state["dns_resources"], json!([]));

    // A rule with rate 0 never fires.
    sim.set_fault(json!({"status": 503, "rate": 0.0}));
    client.zones().unwrap();
}

fn tenants() -> MaasSim {
    MaasSim::start_from_file(&support::maas_sim::tenants_inventory_path(), &[])
}

fn hostnames(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|m| m["hostname"].as_str().unwrap().to_owned())
        .collect()
}

/// Two tenants with their own users, keys and (RBAC) pools: each sees the
/// free machines of its pool and its own; another tenant's machine is a 403
/// with an empty body for every read and write, as `get_node_or_404`
/// answers; an admin sees everything but may not set another user's owner
/// data (409) or mark its machine broken (403).
#[test]
fn tenants_see_and_touch_only_their_own() {
    let sim = tenants();
    let admin = Raw::new(&sim);
    let a = Raw::with_key(&sim, &sim.key_of("tenant-a"));
    let b = Raw::with_key(&sim, &sim.key_of("tenant-b"));

    let listed = a.signed("GET", "machines/", None);
    assert_eq!(listed.status, 200);
    let names = hostnames(&listed.json());
    assert_eq!(names.len(), 8, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("a-")), "{names:?}");
    assert_eq!(
        hostnames(&admin.signed("GET", "machines/", None).json()).len(),
        17
    );
    let pools = a.signed("GET", "resourcepools/", None).json();
    assert_eq!(pools.as_array().unwrap().len(), 1);
    assert_eq!(pools[0]["name"], "tenant-a-pool");
    let b_pool = admin
        .signed("GET", "resourcepool/tenant-b-pool/", None)
        .json();
    let a_reads_b_pool = a.signed("GET", &format!("resourcepool/{}/", b_pool["id"]), None);
    assert_eq!(
        (a_reads_b_pool.status, a_reads_b_pool.body.as_str()),
        (403, "")
    );
    let users = admin.signed("GET", "users/", None).json();
    assert_eq!(users.as_array().unwrap().len(), 3);

    // Tenant B cannot take from tenant A's pool: no candidate, a 409.
    let a_taken = b.signed("POST", "machines/?op=allocate", Some("pool=tenant-a-pool"));
    assert_eq!(a_taken.status, 409, "{}", a_taken.body);
    assert_eq!(
        a_taken.body,
        "No available machine matches constraints: [('pool', ['tenant-a-pool'])] \
         (resolved to \"pool=tenant-a-pool\")"
    );

    let mine = a
        .signed(
            "POST",
            "machines/?op=allocate",
            Some("pool=tenant-a-pool&tags=control-plane&agent_name=capmaas%2Fns-a%2Fcp-0%2Fu1"),
        )
        .json();
    assert_eq!(mine["owner"], "tenant-a");
    let id = mine["system_id"].as_str().unwrap().to_owned();
    let path = format!("machines/{id}/");

    // Tenant B: 403 with an empty body for every call on it.
    for (method, op) in [
        ("GET", ""),
        ("GET", "?op=query_power_state"),
        ("POST", "?op=deploy"),
        ("POST", "?op=release"),
        ("POST", "?op=power_on"),
        ("POST", "?op=power_off"),
        ("POST", "?op=set_owner_data"),
        ("POST", "?op=mark_broken"),
        ("PUT", ""),
    ] {
        let form = (method != "GET").then_some("x=1");
        let answer = b.signed(method, &format!("{path}{op}"), form);
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (403, ""),
            "tenant-b {method} {op}"
        );
    }
    assert!(hostnames(&b.signed("GET", "machines/", None).json())
        .iter()
        .all(|n| n.starts_with("b-")));

    // Owner data: only the owner sets it, even against an admin; keys
    // checked only when set; rendered twice; the owner and agent_name
    // filters find it.
    let by_admin = admin.signed("POST", &format!("{path}?op=set_owner_data"), Some("k=v"));
    assert_eq!(
        (by_admin.status, by_admin.body.as_str()),
        (
            409,
            "Cannot set workload annotation: it hasn't been acquired."
        )
    );
    let bad_key = a.signed(
        "POST",
        &format!("{path}?op=set_owner_data"),
        Some("ok=1&bad%2Fkey=2"),
    );
    assert_eq!(
        (bad_key.status, bad_key.body.as_str()),
        (500, "Invalid character in key name")
    );
    let set = a
        .signed(
            "POST",
            &format!("{path}?op=set_workload_annotations"),
            Some("capmaas-identity=capmaas%2Fns-a%2Fcp-0%2Fu1&bad%2Fkey="),
        )
        .json();
    assert_eq!(
        set["owner_data"],
        json!({"capmaas-identity": "capmaas/ns-a/cp-0/u1"}),
        "the bad key rolled back with its request, the deletion of an absent bad key is fine"
    );
    assert_eq!(set["workload_annotations"], set["owner_data"]);
    let found = admin.signed(
        "GET",
        "machines/?owner=tenant-a&agent_name=capmaas%2Fns-a%2Fcp-0%2Fu1",
        None,
    );
    assert_eq!(
        hostnames(&found.json()),
        vec![mine["hostname"].as_str().unwrap()]
    );
    assert!(hostnames(&admin.signed("GET", "machines/?owner=tenant-b", None).json()).is_empty());
    let nobody = admin.signed("GET", "machines/?owner=nobody&pool=nopool", None);
    assert_eq!(nobody.status, 400);
    assert_eq!(
        nobody.json(),
        json!({"owner": ["No such owner: 'nobody'."], "pool": ["No such pool(s): nopool."]})
    );

    // Admin-only update; mark_broken only by the owner.
    let update = a.signed("PUT", &path, Some("swap_size=0"));
    assert_eq!((update.status, update.body.as_str()), (403, ""));
    assert_eq!(
        admin.signed("PUT", &path, Some("swap_size=0")).json()["swap_size"],
        0
    );
    let broken_by_admin = admin.signed("POST", &format!("{path}?op=mark_broken"), Some(""));
    assert_eq!(
        (broken_by_admin.status, broken_by_admin.body.as_str()),
        (403, "")
    );
    let spare = admin
        .signed("GET", "machines/?hostname=spare-1", None)
        .json()[0]["system_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let unowned = admin.signed(
        "POST",
        &format!("machines/{spare}/?op=mark_broken"),
        Some(""),
    );
    assert_eq!(
        unowned.status, 403,
        "an unowned machine has no owner to mark it"
    );

    // Release clears the owner data.
    let released = a
        .signed("POST", &format!("{path}?op=release"), Some(""))
        .json();
    assert_eq!(released["status_name"], "Ready");
    assert_eq!(released["owner_data"], json!({}));
    assert_eq!(released["owner"], Value::Null);
}

/// A locked machine refuses edits, also to an admin, but can be unlocked.
#[test]
fn locked_machines_refuse_edits() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0"]);
    let raw = Raw::new(&sim);
    let m = raw
        .signed("POST", "machines/?op=allocate", Some("pool=cp-pool"))
        .json();
    let path = format!("machines/{}/", m["system_id"].as_str().unwrap());
    assert_eq!(
        raw.signed("POST", &format!("{path}?op=deploy"), Some(""))
            .status,
        200
    );
    assert_eq!(
        raw.signed("POST", &format!("{path}?op=lock"), Some(""))
            .json()["locked"],
        true
    );
    for op in ["release", "power_off", "set_owner_data", "mark_fixed"] {
        let answer = raw.signed("POST", &format!("{path}?op={op}"), Some("a=b"));
        assert_eq!((answer.status, answer.body.as_str()), (403, ""), "{op}");
    }
    assert_eq!(raw.signed("PUT", &path, Some("swap_size=0")).status, 403);
    assert_eq!(raw.signed("GET", &path, None).status, 200);
    assert_eq!(
        raw.signed("POST", &format!("{path}?op=unlock"), Some(""))
            .json()["locked"],
        false
    );
    assert_eq!(
        raw.signed("POST", &format!("{path}?op=release"), Some(""))
            .status,
        200
    );
}

/// The bulk release answers as `MachinesHandler.release`: unknown ids are a
/// 400, machines the caller may not edit a 403, Releasing is not
/// releasable, Ready is skipped.
#[test]
fn bulk_release_checks_ids_permissions_and_states() {
    let sim = tenants();
    let admin = Raw::new(&sim);
    let a = Raw::with_key(&sim, &sim.key_of("tenant-a"));
    let b = Raw::with_key(&sim, &sim.key_of("tenant-b"));
    let unknown = a.signed("POST", "machines/?op=release", Some("machines=nosuch"));
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (400, "Unknown machine(s): nosuch.")
    );
    let mine = a
        .signed("POST", "machines/?op=allocate", Some("pool=tenant-a-pool"))
        .json();
    let id = mine["system_id"].as_str().unwrap();
    let denied = b.signed(
        "POST",
        "machines/?op=release",
        Some(&format!("machines={id}")),
    );
    assert_eq!(
        (denied.status, denied.body),
        (
            403,
            format!(
                "You don't have the required permission to release the following machine(s): {id}."
            )
        )
    );
    let ready = admin
        .signed("GET", "machines/?hostname=a-cp-4", None)
        .json()[0]["system_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let released = a.signed(
        "POST",
        "machines/?op=release",
        Some(&format!("machines={id}&machines={ready}&comment=bye")),
    );
    assert_eq!(released.json(), json!([id]), "the Ready one is skipped");
}

/// `GET events/?op=query` for one machine, `extra` appended to the query.
fn events(raw: &Raw, system_id: &str, extra: &str) -> Value {
    let answer = raw.signed(
        "GET",
        &format!("events/?op=query&id={system_id}{extra}"),
        None,
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

/// The `type` of each event, newest first.
fn types(page: &Value) -> Vec<String> {
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

fn machine_status(raw: &Raw, system_id: &str) -> Value {
    raw.signed("GET", &format!("machines/{system_id}/"), None)
        .json()
}

/// A deployment's event log as MAAS 3.5 records it: DEBUG request and
/// status events, the INFO status messages of PXE boot, the ephemeral
/// image and curtin's stages, spread over the deployment (they appear as
/// time passes), newest first, with MAAS's paging URIs.
#[test]
fn events_follow_allocation_and_deployment() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "3"]);
    let raw = Raw::new(&sim);
    let m = raw
        .signed(
            "POST",
            "machines/?op=allocate",
            Some("pool=cp-pool&comment=for+ns%2Fcp-0"),
        )
        .json();
    let id = m["system_id"].as_str().unwrap().to_owned();
    assert_eq!(events(&raw, &id, "")["count"], 0, "acquiring is DEBUG");
    let debug = events(&raw, &id, "&level=DEBUG");
    assert_eq!(
        types(&debug),
        ["Node changed status", "User acquiring node"]
    );
    let e = &debug["events"];
    assert_eq!(
        e[0]["description"],
        "From 'Ready' to 'Allocated' (to admin)"
    );
    assert_eq!(e[0]["username"], "unknown");
    assert_eq!(e[1]["description"], "(admin) - for ns/cp-0");
    assert_eq!(e[1]["username"], "admin");
    assert_eq!(e[1]["node"], id.as_str());
    assert_eq!(e[1]["hostname"], m["hostname"]);
    assert_eq!(e[1]["level"], "DEBUG");
    assert!(e[0]["id"].as_u64().unwrap() > e[1]["id"].as_u64().unwrap());
    let created = e[0]["created"].as_str().unwrap();
    assert_eq!(
        &created[3..5],
        ", ",
        "e.g. 'Fri, 07 Dec. 2018 20:11:08': {created}"
    );

    assert_eq!(
        raw.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""))
            .status,
        200
    );
    assert_eq!(types(&events(&raw, &id, "")), ["Powering on", "Deploying"]);
    let full = [
        "Deployed",
        "Performing PXE boot",
        "Rebooting",
        "Configuring OS",
        "Installing OS",
        "Configuring storage",
        "Loading ephemeral",
        "Performing PXE boot",
        "Powering on",
        "Deploying",
    ];
    // Part-way, the log is an older part of the full one.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen_partial = false;
    loop {
        let before = types(&events(&raw, &id, ""));
        let status = machine_status(&raw, &id);
        let after = types(&events(&raw, &id, ""));
        let now: Vec<&str> = after.iter().map(String::as_str).collect();
        assert!(full.ends_with(&now), "{now:?} is not a tail of {full:?}");
        if status["status_name"] == "Deploying" && now.len() > 2 && before == after {
            seen_partial = true;
            // Nothing happened around the read: the machine's status
            // message is its newest INFO event.
            assert_eq!(status["status_message"], now[0]);
        }
        if status["status_name"] == "Deployed" || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(seen_partial, "no event appeared while it deployed");
    let done = events(&raw, &id, "");
    assert_eq!(types(&done), full);
    assert_eq!(machine_status(&raw, &id)["status_message"], "Deployed");
    let debug = types(&events(&raw, &id, "&level=DEBUG"));
    for debug_only in [
        "User starting deployment",
        "Node powered on",
        "PXE Request",
        "Node installation",
    ] {
        assert!(
            debug.iter().any(|t| t == debug_only),
            "{debug_only} in {debug:?}"
        );
    }

    // Paging: limit, next_uri (newer) and prev_uri (older), as MAAS builds
    // them from the request's parameters.
    let page = events(&raw, &id, "&limit=3");
    assert_eq!(page["count"], 3);
    let ids: Vec<u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        page["next_uri"],
        format!(
            "/MAAS/api/2.0/events/?op=query&id={id}&limit=3&after={}",
            ids[0]
        )
    );
    assert_eq!(
        page["prev_uri"],
        format!(
            "/MAAS/api/2.0/events/?op=query&id={id}&limit=3&before={}",
            ids[2]
        )
    );
    let older = raw.signed(
        "GET",
        page["prev_uri"]
            .as_str()
            .unwrap()
            .trim_start_matches("/MAAS/api/2.0/"),
        None,
    );
    assert_eq!(types(&older.json()), full[3..6]);
    let newer = events(&raw, &id, &format!("&after={}", ids[2]));
    assert_eq!(
        types(&newer),
        full[..2],
        "after: newest first, all newer than the id"
    );
    let none = events(&raw, &id, &format!("&after={}", ids[0]));
    assert_eq!(none["count"], 0);
    assert_eq!(
        none["prev_uri"],
        format!(
            "/MAAS/api/2.0/events/?op=query&id={id}&before={}",
            ids[0] + 1
        )
    );

    // Filters other than id; bad parameters.
    let hostname = m["hostname"].as_str().unwrap();
    assert_eq!(
        types(
            &raw.signed(
                "GET",
                &format!("events/?op=query&hostname={hostname}&level=ERROR"),
                None
            )
            .json()
        ),
        Vec::<String>::new()
    );
    for (query, body) in [
        ("level=BOGUS", "Unrecognised log level: BOGUS"),
        (
            "limit=1001",
            "Requested number of events 1001 is greater than limit: 1000",
        ),
        ("limit=x", "Invalid limit: Please enter an integer value"),
        (
            "after=1&before=9",
            "There is undetermined behaviour when both `after` and `before` are specified.",
        ),
        ("mac_address=nope", "Invalid MAC address(es): nope"),
    ] {
        let a = raw.signed("GET", &format!("events/?op=query&{query}"), None);
        assert_eq!((a.status, a.body.as_str()), (400, body), "{query}");
    }
}

/// A failed deployment, a release, power calls and an operator marking a
/// machine broken, each with the events MAAS records; another tenant sees
/// none of them.
#[test]
fn events_of_failure_release_power_and_broken() {
    let sim = MaasSim::start_from_file(
        &support::maas_sim::tenants_inventory_path(),
        &["--deploy-seconds", "5", "--release-seconds", "5"],
    );
    let a = Raw::with_key(&sim, &sim.key_of("tenant-a"));
    let b = Raw::with_key(&sim, &sim.key_of("tenant-b"));
    let m = a
        .signed("POST", "machines/?op=allocate", Some("pool=tenant-a-pool"))
        .json();
    let id = m["system_id"].as_str().unwrap().to_owned();
    a.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""));
    assert_eq!(
        sim.fail_deployment_because(&id, "Unable to find a boot disk"),
        "Failed deployment"
    );
    let errors = events(&a, &id, "&level=ERROR");
    assert_eq!(
        types(&errors),
        ["Marking node failed", "Node installation failure"]
    );
    let installation_failed =
        "Installation failed (refer to the installation log for more information).";
    assert_eq!(errors["events"][0]["description"], installation_failed);
    assert_eq!(
        errors["events"][1]["description"],
        "'curtin' Unable to find a boot disk"
    );
    let failed = machine_status(&a, &id);
    assert_eq!(failed["error_description"], installation_failed);
    assert_eq!(
        failed["status_message"],
        format!("Marking node failed - {installation_failed}")
    );
    assert_eq!(
        failed["power_state"], "on",
        "mark_failed does not power off"
    );
    assert_eq!(
        events(&b, &id, "&level=DEBUG")["count"],
        0,
        "not tenant B's machine"
    );

    let released = a.signed(
        "POST",
        &format!("machines/{id}/?op=release"),
        Some("comment=bye"),
    );
    assert_eq!(released.json()["status_name"], "Releasing");
    assert_eq!(sim.complete(&id), "Ready");
    assert_eq!(
        types(&events(&a, &id, "&limit=3")),
        ["Released", "Powering off", "Releasing"]
    );
    let debug = events(&a, &id, "&level=DEBUG&limit=6");
    assert_eq!(
        types(&debug),
        [
            "Released",
            "Node changed status",
            "Node powered off",
            "Powering off",
            "Releasing",
            "Node changed status"
        ]
    );
    assert_eq!(
        debug["events"][1]["description"],
        "From 'Releasing' to 'Ready'"
    );
    let requests = events(&a, &id, "&level=DEBUG&owner=tenant-a&limit=1");
    assert_eq!(types(&requests), ["User releasing node"]);
    assert_eq!(requests["events"][0]["description"], "(tenant-a) - bye");

    // Power calls, then an operator marks the deployed machine broken: it
    // is released first (powered off), then Broken with no owner.
    let m = a
        .signed("POST", &format!("machines/{id}/?op=deploy"), Some(""))
        .json();
    assert_eq!(m["status_name"], "Deploying");
    assert_eq!(sim.complete(&id), "Deployed");
    a.signed("POST", &format!("machines/{id}/?op=power_off"), Some(""));
    a.signed(
        "POST",
        &format!("machines/{id}/?op=power_on"),
        Some("comment=back"),
    );
    assert_eq!(
        types(&events(&a, &id, "&level=DEBUG&limit=6")),
        [
            "Node powered on",
            "Powering on",
            "User powering up node",
            "Node powered off",
            "Powering off",
            "User powering down node"
        ]
    );
    assert_eq!(sim.mark_broken(&id), "Broken");
    let broken = Raw::new(&sim)
        .signed("GET", &format!("machines/{id}/"), None)
        .json();
    assert_eq!(broken["owner"], Value::Null);
    assert_eq!(broken["power_state"], "off");
    let admin = Raw::new(&sim);
    let log = events(&admin, &id, "&level=DEBUG&limit=8");
    assert_eq!(
        types(&log),
        [
            "Node changed status",
            "Node powered off",
            "Powering off",
            "Releasing",
            "Node changed status",
            "User marking node broken",
            "Node powered on",
            "Powering on",
        ]
    );
    assert_eq!(
        log["events"][0]["description"],
        "From 'Releasing' to 'Broken'"
    );
    assert_eq!(log["events"][5]["description"], "(admin)");
}

/// The DNS responder serves what the API changes: DNS resources as they
/// are created, updated and deleted, and a machine's FQDN while it has
/// addresses.
#[test]
fn dns_follows_the_api() {
    let sim = MaasSim::start_with_args(
        None,
        &[
            "--dns-listen",
            "127.0.0.1:0",
            "--deploy-seconds",
            "0",
            "--release-seconds",
            "0",
        ],
    );
    let dns = sim.dns_addr().expect("--dns-listen");
    let raw = Raw::new(&sim);
    let resolve = |name: &str| maas_sim::dns::lookup(dns, name, 1, false).unwrap();
    let addresses = |name: &str| -> Vec<String> {
        resolve(name)
            .addresses
            .iter()
            .map(|(ip, _)| ip.to_string())
            .collect()
    };
    assert_eq!(resolve("api.k8s.maas").rcode, 3);
    let created = raw
        .signed(
            "POST",
            "dnsresources/",
            Some("fqdn=api.k8s.maas&address_ttl=10&ip_addresses=127.11.130.21+127.11.130.22"),
        )
        .json();
    let api = resolve("api.k8s.maas");
    assert_eq!(api.rcode, 0);
    assert!(api.addresses.iter().all(|(_, ttl)| *ttl == 10));
    assert_eq!(
        addresses("api.k8s.maas"),
        ["127.11.130.21", "127.11.130.22"]
    );
    let path = format!("dnsresources/{}/", created["id"]);
    raw.signed(
        "PUT",
        &path,
        Some("ip_addresses=127.11.130.23&address_ttl="),
    );
    let updated = resolve("api.k8s.maas");
    assert_eq!(
        updated.addresses,
        [("127.11.130.23".parse().unwrap(), 30)],
        "without address_ttl: the domain's TTL"
    );

    let m = raw
        .signed("POST", "machines/?op=allocate", Some("name=cp-1"))
        .json();
    let id = m["system_id"].as_str().unwrap();
    assert_eq!(resolve("cp-1.maas").rcode, 3, "no address while Allocated");
    raw.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""));
    assert_eq!(addresses("cp-1.maas"), ["127.11.130.21"]);
    raw.signed("POST", &format!("machines/{id}/?op=release"), Some(""));
    assert_eq!(
        resolve("cp-1.maas").rcode,
        3,
        "released: its address is gone"
    );
    assert_eq!(resolve("cp-1.example.org").rcode, 5, "not a MAAS domain");
}

fn two_networks() -> Value {
    json!({
        "api_keys": [{"key": "ck:tk:secretsecret"}],
        "domains": [{"name": "k8s.maas", "ttl": 30}],
        "subnet": {"cidr": "127.11.130.0/24", "gateway_ip": "127.11.130.1", "name": "lab"},
        "subnets": [{"cidr": "127.20.0.0/24", "name": "storage", "vlan": {"vid": 20, "fabric": "fabric-1"}}],
        "boot_resources": [{"name": "ubuntu/jammy", "architecture": "amd64/ga-22.04"}],
        "machines": [{"hostname": "cp-1", "domain": "k8s.maas", "interfaces": [
            {"name": "eth0", "mac_address": "52:54:00:aa:00:01",
             "links": [{"ip_address": "127.11.130.21"}]},
            {"name": "eth1", "mac_address": "52:54:00:aa:01:01",
             "links": [{"subnet": "storage", "mode": "auto"}]},
            {"name": "eth2", "links": [{"subnet": "127.20.0.0/24", "mode": "link_up"}]}
        ]}]
    })
}

/// Machines with several interfaces on several subnets: `interface_set`
/// with links carrying their subnets, `ip_addresses` listing every
/// address once deployed (boot interface first), `subnets/` and
/// `subnets/{id}/`.
#[test]
fn multi_nic_machines_and_subnets() {
    let sim = MaasSim::start_with_args(
        Some(&two_networks()),
        &[
            "--deploy-seconds",
            "0",
            "--release-seconds",
            "0",
            "--dns-listen",
            "127.0.0.1:0",
        ],
    );
    let raw = Raw::new(&sim);
    let subnets = raw.signed("GET", "subnets/", None).json();
    let cidrs: Vec<&str> = subnets
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["cidr"].as_str().unwrap())
        .collect();
    assert_eq!(cidrs, ["127.11.130.0/24", "127.20.0.0/24"]);
    let storage = &subnets[1];
    assert_eq!(storage["name"], "storage");
    assert_eq!(storage["vlan"]["vid"], 20);
    assert_eq!(storage["vlan"]["fabric"], "fabric-1");
    assert_eq!(storage["gateway_ip"], Value::Null);
    assert_eq!(storage["resource_uri"], "/MAAS/api/2.0/subnets/2/");
    for key in [
        "id",
        "name",
        "description",
        "vlan",
        "space",
        "cidr",
        "gateway_ip",
        "dns_servers",
        "rdns_mode",
        "active_discovery",
        "allow_dns",
        "allow_proxy",
        "managed",
        "disabled_boot_architectures",
        "resource_uri",
    ] {
        assert!(storage.get(key).is_some(), "subnet lacks {key}");
    }
    assert_eq!(raw.signed("GET", "subnets/2/", None).json(), *storage);
    assert_eq!(
        raw.signed("GET", "subnets/name:storage/", None).json(),
        *storage
    );
    let missing = raw.signed("GET", "subnets/99/", None);
    assert_eq!(
        (missing.status, missing.body.as_str()),
        (404, "No Subnet matches the given query.")
    );

    let m = raw.signed("POST", "machines/?op=allocate", Some("")).json();
    let id = m["system_id"].as_str().unwrap().to_owned();
    let names: Vec<&str> = m["interface_set"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["eth0", "eth1", "eth2"]);
    assert_eq!(m["boot_interface"]["name"], "eth0");
    assert_eq!(m["ip_addresses"], json!([]));
    assert!(m["interface_set"][0]["links"][0]
        .get("ip_address")
        .is_none());
    assert_eq!(m["interface_set"][2]["links"][0]["mode"], "link_up");
    assert_eq!(m["default_gateways"]["ipv4"]["gateway_ip"], "127.11.130.1");

    let answer = raw
        .signed("POST", &format!("machines/{id}/?op=deploy"), Some(""))
        .json();
    // Real MAAS claims AUTO addresses after its deploy answer.
    assert_eq!(answer["ip_addresses"], json!([]));
    let deployed = machine_status(&raw, &id);
    assert_eq!(
        deployed["ip_addresses"],
        json!(["127.11.130.21", "127.20.0.1"])
    );
    let eth1 = &deployed["interface_set"][1];
    assert_eq!(eth1["links"][0]["ip_address"], "127.20.0.1");
    assert_eq!(eth1["links"][0]["subnet"]["cidr"], "127.20.0.0/24");
    assert_eq!(eth1["vlan"]["vid"], 20);
    assert_eq!(deployed["interface_set"][0]["vlan"]["vid"], 0);
    let by_mac = raw.signed("GET", "machines/?mac_address=52:54:00:AA:01:01", None);
    assert_eq!(hostnames(&by_mac.json()), ["cp-1"]);
    let dns = sim.dns_addr().unwrap();
    let found = maas_sim::dns::lookup(dns, "cp-1.k8s.maas", 1, false).unwrap();
    assert_eq!(found.addresses.len(), 2);

    raw.signed("POST", &format!("machines/{id}/?op=release"), Some(""));
    let released = machine_status(&raw, &id);
    assert_eq!(released["ip_addresses"], json!([]));
    assert_eq!(
        sim.machine_state(&id)["interfaces"][1]["links"][0]["ip_address"],
        Value::Null
    );
}

/// `ipaddresses/?op=reserve|release` and the list, as
/// `IPAddressesHandler` answers them: a reserved address is never handed to
/// a machine, even one the inventory planned it for.
#[test]
fn reserved_addresses_are_never_handed_out() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0", "--release-seconds", "0"]);
    let admin = Raw::new(&sim);
    let operator = Raw::with_key(&sim, &sim.non_admin_key().unwrap());

    let vip = admin.signed(
        "POST",
        "ipaddresses/?op=reserve",
        Some("ip=127.11.130.200&hostname=prod-vip.k8s.maas"),
    );
    assert_eq!(vip.status, 200, "{}", vip.body);
    let vip = vip.json();
    assert_eq!(vip["ip"], "127.11.130.200");
    assert_eq!(vip["alloc_type"], 4);
    assert_eq!(vip["alloc_type_name"], "User reserved");
    assert_eq!(vip["owner"]["username"], "admin");
    assert_eq!(vip["subnet"]["cidr"], "127.11.130.0/24");
    assert_eq!(vip["interface_set"], json!([]));
    let record = admin
        .signed("GET", "dnsresources/?fqdn=prod-vip.k8s.maas", None)
        .json();
    assert_eq!(record[0]["ip_addresses"][0]["ip"], "127.11.130.200");

    for (form, status, body) in [
        (
            "ip=127.11.130.200",
            404,
            "The IP address 127.11.130.200 is already in use.",
        ),
        (
            "ip=192.168.99.1",
            400,
            "No known subnet for IP address: 192.168.99.1.",
        ),
        (
            "subnet=10.99.0.0/24",
            400,
            "Unable to identify subnet: 10.99.0.0/24.",
        ),
        (
            "hostname=x",
            400,
            "Must supply either the 'subnet' or the 'ip' parameter.",
        ),
    ] {
        let a = admin.signed("POST", "ipaddresses/?op=reserve", Some(form));
        assert_eq!((a.status, a.body.as_str()), (status, body), "{form}");
    }
    let bad = admin.signed("POST", "ipaddresses/?op=reserve", Some("ip=nope"));
    assert_eq!(
        bad.json(),
        json!({"ip_address": ["Enter a valid IPv4 or IPv6 address."]})
    );
    // The next free address: not the gateway, nor one planned for a machine.
    let next = admin
        .signed(
            "POST",
            "ipaddresses/?op=reserve",
            Some("subnet=127.11.130.0/24"),
        )
        .json();
    assert_eq!(next["ip"], "127.11.130.2");
    // cp-1 is planned to get .21 when it deploys; reserved first, it does not.
    let taken = admin
        .signed("POST", "ipaddresses/?op=reserve", Some("ip=127.11.130.21"))
        .json();
    assert_eq!(taken["ip"], "127.11.130.21");
    let cp1 = admin
        .signed("POST", "machines/?op=allocate", Some("name=cp-1"))
        .json();
    let id = cp1["system_id"].as_str().unwrap();
    admin.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""));
    let deployed = machine_status(&admin, id);
    assert_eq!(deployed["ip_addresses"], json!(["127.11.130.3"]));

    let mine = admin.signed("GET", "ipaddresses/", None).json();
    let ips: Vec<&str> = mine
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ip"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["127.11.130.200", "127.11.130.2", "127.11.130.21"]);
    assert_eq!(
        operator.signed("GET", "ipaddresses/", None).json(),
        json!([])
    );
    let all = operator.signed("GET", "ipaddresses/?all=true", None);
    assert_eq!(
        (all.status, all.body.as_str()),
        (403, "Listing all IP addresses requires admin privileges.")
    );
    let everything = admin.signed("GET", "ipaddresses/?all=true", None).json();
    let auto = everything
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ip"] == "127.11.130.3")
        .expect("the machine's address");
    assert_eq!(
        (auto["alloc_type"].clone(), auto["alloc_type_name"].clone()),
        (json!(0), json!("Automatic"))
    );
    assert_eq!(auto["interface_set"][0]["system_id"], id);

    let not_theirs = operator.signed("POST", "ipaddresses/?op=release", Some("ip=127.11.130.200"));
    assert_eq!(not_theirs.status, 400);
    assert!(not_theirs.body.starts_with(
        "IP address 127.11.130.200 does not exist, is not the correct type of address, or does not \
         belong to the requesting user.\nIf you are sure"
    ));
    let forced = operator.signed(
        "POST",
        "ipaddresses/?op=release",
        Some("ip=127.11.130.200&force=true"),
    );
    assert_eq!(
        (forced.status, forced.body.as_str()),
        (
            403,
            "Force-releasing an IP address requires admin privileges."
        )
    );
    let released = admin.signed("POST", "ipaddresses/?op=release", Some("ip=127.11.130.200"));
    assert_eq!((released.status, released.body.as_str()), (204, ""));
    let record = admin
        .signed("GET", "dnsresources/?fqdn=prod-vip.k8s.maas", None)
        .json();
    assert_eq!(
        record[0]["ip_addresses"],
        json!([]),
        "the address left its DNS record"
    );
    let again = admin.signed(
        "POST",
        "ipaddresses/?op=release",
        Some("ip=127.11.130.200&force=true"),
    );
    assert_eq!(
        (again.status, again.body.as_str()),
        (400, "IP address 127.11.130.200 does not exist.")
    );
}

/// `nodes/{id}/interfaces/{id}/?op=link_subnet|unlink_subnet`: admin only,
/// in New/Ready/Allocated/Broken only; a STATIC link's address is taken at
/// once, is the machine's address when it deploys, and stays after release.
#[test]
fn static_links_give_machines_their_address() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0", "--release-seconds", "0"]);
    let admin = Raw::new(&sim);
    let operator = Raw::with_key(&sim, &sim.non_admin_key().unwrap());
    let cp2 = admin.signed("GET", "machines/?hostname=cp-2", None).json()[0].clone();
    let id = cp2["system_id"].as_str().unwrap().to_owned();
    let eth0 = &cp2["interface_set"][0];
    let auto_link = eth0["links"][0]["id"].clone();
    let iface = format!("nodes/{id}/interfaces/{}/", eth0["id"]);
    assert_eq!(admin.signed("GET", &iface, None).json()["name"], "eth0");
    let listed = admin
        .signed("GET", &format!("nodes/{id}/interfaces/"), None)
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 1);

    let link =
        |raw: &Raw, form: &str| raw.signed("POST", &format!("{iface}?op=link_subnet"), Some(form));
    let denied = link(&operator, "mode=STATIC&subnet=1");
    assert_eq!((denied.status, denied.body.as_str()), (403, ""));
    for (form, errors) in [
        ("subnet=1", json!({"mode": ["This field is required."]})),
        (
            "mode=bogus&subnet=1",
            json!({"mode": ["'bogus' is not a valid mode.  It should be one of: 'AUTO', 'DHCP', 'STATIC', 'LINK_UP'."]}),
        ),
        (
            "mode=STATIC",
            json!({"subnet": ["This field is required."]}),
        ),
        (
            "mode=STATIC&subnet=1&ip_address=10.9.9.9",
            json!({"ip_address": ["IP address is not in the given subnet 'lab:127.11.130.0/24(vid=0)'."]}),
        ),
        (
            "mode=DHCP&subnet=1&default_gateway=true",
            json!({"default_gateway": ["Cannot use in mode 'dhcp'."]}),
        ),
        (
            "mode=LINK_UP",
            json!({"mode": ["Cannot configure interface to link up (with no IP address) while other links are already configured. Specify force=True to override this behavior and delete all links."]}),
        ),
    ] {
        let a = link(&admin, form);
        assert_eq!((a.status, a.json()), (400, errors), "{form}");
    }
    admin.signed("POST", "ipaddresses/?op=reserve", Some("ip=127.11.130.150"));
    let in_use = link(&admin, "mode=STATIC&subnet=1&ip_address=127.11.130.150");
    assert_eq!(
        (in_use.status, in_use.body.as_str()),
        (404, "IP address is already in use.")
    );

    let linked = link(
        &admin,
        "mode=static&subnet=127.11.130.0/24&ip_address=127.11.130.151&default_gateway=true",
    );
    assert_eq!(linked.status, 200, "{}", linked.body);
    let links = linked.json()["links"].clone();
    assert_eq!(links[1]["mode"], "static");
    assert_eq!(links[1]["ip_address"], "127.11.130.151");
    let static_link = links[1]["id"].clone();
    let unlinked = admin.signed(
        "POST",
        &format!("{iface}?op=unlink_subnet"),
        Some(&format!("id={auto_link}")),
    );
    assert_eq!(unlinked.json()["links"].as_array().unwrap().len(), 1);
    let bad_id = admin.signed("POST", &format!("{iface}?op=unlink_subnet"), Some("id=999"));
    assert_eq!(
        bad_id.json(),
        json!({"id": [format!("'999' is not a valid id.  It should be one of: '{static_link}'.")]})
    );
    let ready = machine_status(&admin, &id);
    assert_eq!(
        ready["ip_addresses"],
        json!(["127.11.130.151"]),
        "a STATIC address is there at once"
    );
    assert_eq!(
        ready["default_gateways"]["ipv4"],
        json!({"gateway_ip": "127.11.130.1", "link_id": static_link})
    );

    admin.signed("POST", "machines/?op=allocate", Some("name=cp-2"));
    let deployed = admin
        .signed("POST", &format!("machines/{id}/?op=deploy"), Some(""))
        .json();
    assert_eq!(deployed["ip_addresses"], json!(["127.11.130.151"]));
    let late = link(&admin, "mode=AUTO&subnet=1");
    assert_eq!(
        (late.status, late.body.as_str()),
        (409, "Cannot link subnet interface because the machine is not New, Ready, Allocated, or Broken.")
    );
    admin.signed("POST", &format!("machines/{id}/?op=release"), Some(""));
    let released = machine_status(&admin, &id);
    assert_eq!(released["status_name"], "Ready");
    assert_eq!(
        released["ip_addresses"],
        json!(["127.11.130.151"]),
        "STATIC stays"
    );

    // The last link removed: a LINK_UP remains.
    let last = admin.signed(
        "POST",
        &format!("{iface}?op=unlink_subnet"),
        Some(&format!("id={static_link}")),
    );
    assert_eq!(last.json()["links"][0]["mode"], "link_up");
    assert_eq!(
        machine_status(&admin, &id)["default_gateways"]["ipv4"]["link_id"],
        Value::Null
    );
    let unknown = admin.signed("GET", &format!("nodes/{id}/interfaces/999/"), None);
    assert_eq!(
        (unknown.status, unknown.body.as_str()),
        (404, "No Interface matches the given query.")
    );
}

/// `erase`, `quick_erase` and `secure_erase` each take the machine
/// through Disk erasing (`ReleaseForm.clean` adds the `wipe-disks` script
/// for any of them); `/_sim/state` records which were asked for.
#[test]
fn release_erase_modes_are_recorded() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0", "--release-seconds", "30"]);
    let raw = Raw::new(&sim);
    for (form, erase, quick, secure) in [
        ("erase=true", true, false, false),
        ("quick_erase=true&comment=fast", false, true, false),
        ("erase=true&secure_erase=true", true, false, true),
        ("", false, false, false),
    ] {
        let m = raw
            .signed("POST", "machines/?op=allocate", Some("pool=cp-pool"))
            .json();
        let id = m["system_id"].as_str().unwrap().to_owned();
        raw.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""));
        let released = raw
            .signed("POST", &format!("machines/{id}/?op=release"), Some(form))
            .json();
        let wipe = erase || quick || secure;
        assert_eq!(
            released["status_name"],
            if wipe { "Disk erasing" } else { "Releasing" },
            "{form}"
        );
        let last = &sim.machine_state(&id)["last_release"];
        assert_eq!(
            (
                last["erase"].clone(),
                last["quick_erase"].clone(),
                last["secure_erase"].clone()
            ),
            (json!(erase), json!(quick), json!(secure)),
            "{form}"
        );
        assert_eq!(last["user"], "admin");
        if wipe {
            assert_eq!(
                released["osystem"], "ubuntu",
                "cleared when MAAS releases it after the erasure, not before"
            );
            let log = events(&raw, &id, "&level=DEBUG&limit=3");
            assert_eq!(
                types(&log)[..2],
                ["Power cycling".to_owned(), "Node changed status".to_owned()][..]
            );
            assert_eq!(
                log["events"][1]["description"],
                "From 'Deployed' to 'Disk erasing'"
            );
            assert_eq!(log["events"][2]["type"], "User erasing disk");
        }
        assert_eq!(sim.complete(&id), "Ready");
        let done = machine_status(&raw, &id);
        assert_eq!(
            (done["owner"].clone(), done["osystem"].clone()),
            (Value::Null, json!(""))
        );
        assert_eq!(
            events(&raw, &id, "&limit=1")["events"][0]["type"],
            "Released"
        );
    }
}

/// Out-of-band controls for the MAAS watch tests (issue 11): an operator's
/// release, a redeploy that loses the owner data, and latency on every
/// API call.
#[test]
fn out_of_band_release_redeploy_and_latency() {
    let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0", "--release-seconds", "30"]);
    let admin = Raw::new(&sim);
    let operator = Raw::with_key(&sim, &sim.non_admin_key().unwrap());
    let m = operator
        .signed(
            "POST",
            "machines/?op=allocate",
            Some("pool=cp-pool&agent_name=capmaas%2Fns%2Fm%2F1"),
        )
        .json();
    let id = m["system_id"].as_str().unwrap().to_owned();
    operator.signed(
        "POST",
        &format!("machines/{id}/?op=set_owner_data"),
        Some("capmaas-identity=ns%2Fm"),
    );
    operator.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""));
    assert_eq!(machine_status(&operator, &id)["status_name"], "Deployed");

    assert_eq!(
        sim.release_out_of_band(&id, json!({"comment": "reclaimed"})),
        "Releasing"
    );
    let log = events(&admin, &id, "&level=DEBUG&limit=4");
    let release = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "User releasing node")
        .expect("the operator's release");
    assert_eq!(release["description"], "(admin) - reclaimed");
    assert_eq!(sim.machine_state(&id)["last_release"]["user"], "admin");
    assert_eq!(sim.complete(&id), "Ready");

    // Redeployed by its owner's account: the release finished, then a new
    // allocation and deployment; the owner data and agent_name are gone.
    let m = operator
        .signed(
            "POST",
            "machines/?op=allocate",
            Some(&format!("system_id={id}&agent_name=a1")),
        )
        .json();
    assert_eq!(m["status_name"], "Allocated");
    operator.signed(
        "POST",
        &format!("machines/{id}/?op=set_owner_data"),
        Some("capmaas-identity=ns%2Fm"),
    );
    operator.signed("POST", &format!("machines/{id}/?op=deploy"), Some(""));
    assert_eq!(sim.redeploy_out_of_band(&id, json!({})), "Deploying");
    let state = sim.machine_state(&id);
    assert_eq!(state["owner"], "operator");
    assert_eq!(state["owner_data"], json!({}));
    assert_eq!(state["agent_name"], "");
    let redeployed = types(&events(&admin, &id, "&level=DEBUG&limit=30"));
    for step in [
        "Released",
        "User acquiring node",
        "User starting deployment",
    ] {
        assert!(
            redeployed.iter().any(|t| t == step),
            "{step} in {redeployed:?}"
        );
    }

    // Latency on every API call, not on /_sim/.
    sim.set_latency_ms(300);
    let started = Instant::now();
    assert_eq!(admin.signed("GET", "users/?op=whoami", None).status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    sim.set_latency_ms(0);
}
