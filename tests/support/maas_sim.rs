//! Starts `maas-sim` for a test and drives its `/_sim/` controls.
//!
//! ```ignore
//! let sim = MaasSim::start(env!("CARGO_BIN_EXE_maas-sim"), None);   // story inventory
//! let client = sim.client();                                        // capmaas::maas::Client
//! sim.power_off(&system_id);
//! sim.set_fault(json!({"method": "POST", "endpoint": "machines/", "op": "allocate", "status": 503, "times": 2}));
//! assert!(sim.state()["machines"].as_array().unwrap().iter().all(|m| m["owner"].is_null()));
//! ```
//! The process is killed when the `MaasSim` is dropped.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

/// The story inventory the simulator embeds (same bytes).
pub fn story_inventory_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/inventory/story.json")
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
    child: Child,
    inventory_file: Option<PathBuf>,
    agent: ureq::Agent,
}

impl MaasSim {
    /// Starts the simulator binary (`env!("CARGO_BIN_EXE_maas-sim")`) with
    /// `inventory` (the story inventory when None) on a free port.
    pub fn start(bin: impl AsRef<Path>, inventory: Option<&Value>) -> MaasSim {
        MaasSim::start_with_args(bin, inventory, &[])
    }

    /// Starts the simulator with an inventory file (e.g. one under
    /// `tests/inventory/`) and extra arguments.
    pub fn start_from_file(bin: impl AsRef<Path>, inventory: &Path, args: &[&str]) -> MaasSim {
        let text = std::fs::read_to_string(inventory)
            .unwrap_or_else(|e| panic!("{}: {e}", inventory.display()));
        let value: Value = serde_json::from_str(&text).expect("inventory is JSON");
        MaasSim::start_with_args(bin, Some(&value), args)
    }

    /// As [`MaasSim::start`], with extra arguments such as
    /// `["--deploy-seconds", "0.5"]`.
    pub fn start_with_args(
        bin: impl AsRef<Path>,
        inventory: Option<&Value>,
        args: &[&str],
    ) -> MaasSim {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let inventory_value = inventory.cloned().unwrap_or_else(story_inventory);
        let inventory_file = inventory.map(|value| {
            let path = std::env::temp_dir().join(format!(
                "maas-sim-{}-{}.json",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&path, value.to_string()).expect("write inventory file");
            path
        });
        let mut command = Command::new(bin.as_ref());
        command.args(["--listen", "127.0.0.1:0"]);
        if let Some(path) = &inventory_file {
            command.arg("--inventory").arg(path);
        }
        command.args(args);
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.as_ref().display()));
        let mut first_line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout)
            .read_line(&mut first_line)
            .expect("read maas-sim stdout");
        let url = first_line.trim().to_owned();
        if !url.starts_with("http://") {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            let _ = child.kill();
            panic!("maas-sim did not start: stdout {first_line:?}, stderr {stderr:?}");
        }
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
            child,
            inventory_file,
            agent,
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

    /// Adds a fault rule (see `capmaas::sim::Fault`): `method`, `endpoint`
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

    /// Fails the running deployment now, or the machine's next one.
    pub fn fail_deployment(&self, system_id: &str) -> String {
        self.machine_action(system_id, "fail-deployment")
    }

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
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(path) = &self.inventory_file {
            let _ = std::fs::remove_file(path);
        }
    }
}
