//! Runs the MAAS simulator (the `maas-sim` package, a dev-dependency) in
//! this test process and drives its `/_sim/` controls over HTTP, as a test
//! would drive a real MAAS.
//!
//! ```ignore
//! let sim = MaasSim::start(None);                                   // story inventory
//! let sim = MaasSim::start_with_args(None, &["--deploy-seconds", "0.5"]);
//! let client = sim.client();                                        // capmaas::maas::Client
//! sim.power_off(&system_id);
//! sim.set_fault(json!({"method": "POST", "endpoint": "machines/", "op": "allocate", "status": 503, "times": 2}));
//! assert!(sim.state()["machines"].as_array().unwrap().iter().all(|m| m["owner"].is_null()));
//! ```
//! In process rather than as a child process: `CARGO_BIN_EXE_<name>` only
//! names binaries of the test's own package, and building another
//! package's binary from a test races with cargo's own build. The server
//! is stopped when the `MaasSim` is dropped (every connection closed, every
//! thread joined); the `maas-sim` binary is `cargo run -p maas-sim`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

/// The story inventory the simulator embeds (the same file).
pub fn story_inventory_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/inventory/story.json")
}

/// `tests/inventory/tenants.json`: two non-admin users, each with its own
/// key and (RBAC-style) only its own pool.
pub fn tenants_inventory_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/inventory/tenants.json")
}

pub fn story_inventory() -> Value {
    let text =
        std::fs::read_to_string(story_inventory_path()).expect("read tests/inventory/story.json");
    serde_json::from_str(&text).expect("story.json is JSON")
}

pub struct MaasSim {
    /// `http://127.0.0.1:PORT/MAAS` — what users put in MAAS_ENDPOINT.
    pub url: String,
    /// `http://127.0.0.1:PORT` — where `/_sim/` lives.
    pub base: String,
    /// The first (admin) key of the inventory.
    pub api_key: String,
    /// Every key of the inventory, with its username and admin flag.
    pub api_keys: Vec<(String, String, bool)>,
    server: Option<maas_sim::Server>,
    agent: ureq::Agent,
}

impl MaasSim {
    /// Starts a simulator with `inventory` (the story inventory when None)
    /// on a free loopback port.
    pub fn start(inventory: Option<&Value>) -> MaasSim {
        MaasSim::start_with_args(inventory, &[])
    }

    /// Starts the simulator with an inventory file (e.g. one under
    /// `tests/inventory/`) and extra arguments.
    pub fn start_from_file(inventory: &Path, args: &[&str]) -> MaasSim {
        let text = std::fs::read_to_string(inventory)
            .unwrap_or_else(|e| panic!("{}: {e}", inventory.display()));
        let value: Value = serde_json::from_str(&text).expect("inventory is JSON");
        MaasSim::start_with_args(Some(&value), args)
    }

    /// As [`MaasSim::start`], with the binary's arguments such as
    /// `["--deploy-seconds", "0.5"]` (see `maas-sim --help`).
    pub fn start_with_args(inventory: Option<&Value>, args: &[&str]) -> MaasSim {
        let inventory_value = inventory.cloned().unwrap_or_else(story_inventory);
        let mut options = match maas_sim::Options::from_args(args) {
            Ok(maas_sim::Command::Serve(options)) => options,
            Ok(other) => panic!("maas-sim arguments {args:?} ask for {other:?}, not a server"),
            Err(e) => panic!("maas-sim arguments {args:?}: {e}"),
        };
        options.inventory = maas_sim::Inventory::from_json(&inventory_value.to_string())
            .unwrap_or_else(|e| panic!("maas-sim inventory: {e}"));
        options.listen = "127.0.0.1:0".into();
        let server = maas_sim::start_with(*options)
            .unwrap_or_else(|e| panic!("maas-sim did not start: {e}"));
        MaasSim::with(server.base_url(), &inventory_value, Some(server))
    }

    /// A simulator running elsewhere (the `maas-sim` binary as a child
    /// process, for a benchmark that measures this process alone) at `url`
    /// (`http://127.0.0.1:PORT/MAAS`), serving `inventory`: the same
    /// controls; dropping it stops nothing.
    pub fn attach(url: &str, inventory: &Value) -> MaasSim {
        MaasSim::with(url.to_owned(), inventory, None)
    }

    fn with(url: String, inventory_value: &Value, server: Option<maas_sim::Server>) -> MaasSim {
        let base = url.trim_end_matches("/MAAS").to_owned();
        let api_keys: Vec<(String, String, bool)> = inventory_value["api_keys"]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .map(|k| {
                        (
                            k["key"].as_str().unwrap_or_default().to_owned(),
                            k["username"].as_str().unwrap_or("admin").to_owned(),
                            k["is_superuser"].as_bool().unwrap_or(true),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let api_key = api_keys.first().map(|k| k.0.clone()).unwrap_or_default();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .new_agent();
        MaasSim {
            url,
            base,
            api_key,
            api_keys,
            server,
            agent,
        }
    }

    /// Where the DNS responder listens, when started with
    /// `["--dns-listen", "127.0.0.1:0"]`; query it with
    /// `maas_sim::dns::lookup(addr, name, 1 /* A */, false /* UDP */)`.
    pub fn dns_addr(&self) -> Option<std::net::SocketAddr> {
        self.server.as_ref().and_then(|s| s.dns_addr())
    }

    /// Stops the simulator now (as dropping it does): clients see MAAS go
    /// away.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
    }

    /// A client for the admin key with quick retries suitable for tests.
    pub fn client(&self) -> capmaas::maas::Client {
        capmaas::maas::Client::new(self.client_config(&self.api_key)).expect("client")
    }

    pub fn client_config(&self, key: &str) -> capmaas::maas::ClientConfig {
        let mut config = capmaas::maas::ClientConfig::new(
            self.url.clone(),
            capmaas::maas::ApiKey::parse(key).expect("inventory key parses"),
        );
        config.timeout = Duration::from_secs(10);
        config.connect_timeout = Duration::from_secs(2);
        config
    }

    /// The first key of `username` in the inventory.
    pub fn key_of(&self, username: &str) -> String {
        self.api_keys
            .iter()
            .find(|k| k.1 == username)
            .map(|k| k.0.clone())
            .unwrap_or_else(|| panic!("no API key for user {username} in the inventory"))
    }

    /// A client with the key of `username`.
    pub fn client_for(&self, username: &str) -> capmaas::maas::Client {
        capmaas::maas::Client::new(self.client_config(&self.key_of(username))).expect("client")
    }

    /// The key of the first non-admin user in the inventory.
    pub fn non_admin_key(&self) -> Option<String> {
        self.api_keys.iter().find(|k| !k.2).map(|k| k.0.clone())
    }

    fn control(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/_sim/{path}", self.base);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, Some(body)) => self
                .agent
                .post(&url)
                .content_type("application/json")
                .send(body.to_string().as_str()),
            (_, None) => self.agent.post(&url).send_empty(),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("control body");
        assert_eq!(status, 200, "{method} {url}: {text}");
        serde_json::from_str(&text).expect("control JSON")
    }

    /// `{"machines": [...], "dns_resources": [...]}`.
    pub fn state(&self) -> Value {
        self.control("GET", "state", None)
    }

    /// One machine of [`MaasSim::state`] by system_id or hostname.
    pub fn machine_state(&self, id_or_hostname: &str) -> Value {
        self.state()["machines"]
            .as_array()
            .and_then(|ms| {
                ms.iter()
                    .find(|m| m["system_id"] == id_or_hostname || m["hostname"] == id_or_hostname)
                    .cloned()
            })
            .unwrap_or_else(|| panic!("no machine {id_or_hostname} in the simulator"))
    }

    /// Request counts by `"METHOD pattern[ op=OP]"`, e.g. `"POST machines/ op=allocate"`.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        serde_json::from_value(self.control("GET", "calls", None)).expect("calls map")
    }

    pub fn call_count(&self, key: &str) -> u64 {
        self.calls().get(key).copied().unwrap_or(0)
    }

    /// TCP connections the simulator has accepted (including ours for
    /// `/_sim/` calls).
    pub fn connections(&self) -> u64 {
        self.control("GET", "stats", None)["connections"]
            .as_u64()
            .expect("connections")
    }

    pub fn reset_calls(&self) {
        self.control("DELETE", "calls", None);
    }

    /// Adds a fault rule (see `maas_sim::Fault`): `method`, `endpoint`
    /// (`machines/{id}/`), `op`, `status`, `body`, `retry_after`,
    /// `latency_ms`, `drop`, `drop_after`, `rate`, `times`.
    pub fn set_fault(&self, fault: Value) {
        self.control("POST", "faults", Some(fault));
    }

    pub fn clear_faults(&self) {
        self.control("DELETE", "faults", None);
    }

    pub fn set_timings(&self, deploy_seconds: f64, release_seconds: f64) {
        self.control(
            "POST",
            "settings",
            Some(json!({"deploy_seconds": deploy_seconds, "release_seconds": release_seconds})),
        );
    }

    /// Every API call (not `/_sim/`) takes at least `ms` from now on.
    pub fn set_latency_ms(&self, ms: u64) {
        self.control("POST", "settings", Some(json!({"latency_ms": ms})));
    }

    /// An operator releases it behind the client's back; `body` may name
    /// `user`, `erase`, `quick_erase`, `secure_erase`, `comment`.
    pub fn release_out_of_band(&self, system_id: &str, body: Value) -> String {
        self.machine_action_with(system_id, "release", body)
    }

    /// Someone (default: its owner) releases it and deploys it again;
    /// `body` may name `user`, `distro_series`, `agent_name`, `comment`.
    pub fn redeploy_out_of_band(&self, system_id: &str, body: Value) -> String {
        self.machine_action_with(system_id, "redeploy", body)
    }

    fn machine_action_with(&self, system_id: &str, action: &str, body: Value) -> String {
        self.control(
            "POST",
            &format!("machines/{system_id}/{action}"),
            Some(body),
        )["status_name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn machine_action(&self, system_id: &str, action: &str) -> String {
        self.control("POST", &format!("machines/{system_id}/{action}"), None)["status_name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn power_off(&self, system_id: &str) {
        self.machine_action(system_id, "power-off");
    }

    pub fn power_on(&self, system_id: &str) {
        self.machine_action(system_id, "power-on");
    }

    /// MAAS loses track of the power state: `"unknown"` or `"error"`.
    pub fn power_state_lost(&self, system_id: &str, state: &str) {
        self.machine_action(system_id, &format!("power-{state}"));
    }

    /// Fails the running deployment now, or the machine's next one.
    pub fn fail_deployment(&self, system_id: &str) -> String {
        self.machine_action(system_id, "fail-deployment")
    }

    /// Fails the running (or next) deployment with curtin's `reason`.
    pub fn fail_deployment_because(&self, system_id: &str, reason: &str) -> String {
        self.machine_action_with(system_id, "fail-deployment", json!({"reason": reason}))
    }

    /// An operator (the inventory's first admin) marks it broken.
    pub fn mark_broken(&self, system_id: &str) -> String {
        self.machine_action(system_id, "mark-broken")
    }

    /// Finishes a pending deploy or release now; returns the new status name.
    pub fn complete(&self, system_id: &str) -> String {
        self.machine_action(system_id, "complete")
    }

    /// Adds a machine (inventory form, e.g. `{"hostname": "extra-1", "pool": "cp-pool"}`).
    pub fn add_machine(&self, machine: Value) -> String {
        self.control("POST", "machines", Some(machine))["system_id"]
            .as_str()
            .expect("system_id")
            .to_owned()
    }

    pub fn remove_machine(&self, system_id: &str) {
        self.control("DELETE", &format!("machines/{system_id}"), None);
    }

    /// system_id of the machine with this hostname.
    pub fn system_id(&self, hostname: &str) -> String {
        self.machine_state(hostname)["system_id"]
            .as_str()
            .expect("system_id")
            .to_owned()
    }
}

impl Drop for MaasSim {
    fn drop(&mut self) {
        self.stop();
    }
}
