//! The real MAAS 3.4.8 region (`../shared/real-maas`, see its README) as a
//! test world: started once per test binary, seeded through the API with
//! what the README story needs, its machines played through MAAS's own
//! metadata API exactly as booting machines talk to MAAS
//! (`../shared/reference/real-maas.md`).
//!
//! ```ignore
//! let Some(maas) = real_maas::world("my_test") else { return }; // skipped (never on CI)
//! let client = maas.admin_client();
//! ```
//!
//! Lifecycle. There is one real MAAS per machine (ports 5240 and 5250), so
//! the world is serialised across processes: the first `world()` of a test
//! binary runs `flock $STATE/lock bash -c 'start.sh; cat >/dev/null; stop.sh'`
//! as a watchdog. It holds the lock while MAAS runs (another binary, or
//! another `cargo test`, waits for it), prints the admin key, then waits for
//! EOF on its stdin, a pipe whose write end only this process has: when the
//! test binary exits, however it exits, the watchdog stops regiond and
//! PostgreSQL and releases the lock. A MAAS that was already running before
//! (a developer's) is left running. The state (packages' virtualenv,
//! database) stays in `$CAPMAAS_TEST_CACHE/real-maas` (else
//! `.cache/real-maas`), so later starts are warm.
//!
//! Seeding is idempotent (pools, zones, tags, the `k8s.maas` domain, the
//! subnet, the custom image, users and their keys are created when
//! missing); the machines are deleted and created again each run, so every
//! run starts from Ready machines whatever the last one left.
//!
//! Without `../shared/real-maas` (or `$CAPMAAS_SHARED/real-maas`), or
//! when not root (start.sh runs PostgreSQL as `postgres`), the test says
//! why and passes; under `CI=true` it fails (tests/support/skip.rs).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use capmaas::maas::{ApiKey, Client, ClientConfig};
use serde_json::{json, Value};

use super::skip;

pub const URL: &str = "http://127.0.0.1:5240/MAAS";
pub const DOMAIN: &str = "k8s.maas";
pub const CUSTOM_IMAGE: &str = "custom/u-2204-0-k-1264-0";
pub const SUBNET: &str = "127.11.130.0/24";
/// A user without admin rights, with keys of its own.
pub const OPERATOR: &str = "operator";

type Seeded = (
    &'static str,
    &'static str,
    &'static str,
    u32,
    u64,
    &'static [&'static str],
);

/// The story's machines (tests/inventory/story.json), fewer of them: name,
/// pool, zone, CPUs, memory (MiB), tags.
pub const MACHINES: &[Seeded] = &[
    ("cp-1", "cp-pool", "zone-a", 8, 32768, &["control-plane"]),
    ("cp-2", "cp-pool", "zone-b", 8, 32768, &["control-plane"]),
    ("worker-1", "worker-pool", "zone-a", 16, 65536, &["worker"]),
    ("worker-2", "worker-pool", "zone-b", 16, 65536, &["worker"]),
    (
        "worker-5",
        "worker-pool",
        "zone-a",
        32,
        131072,
        &["worker", "gpu"],
    ),
    ("spare-1", "default", "default", 4, 16384, &[]),
];
/// The pool of [`CRASH_MACHINES`]: no other test asks for it, and none of
/// the story's machines is in it.
pub const CRASH_POOL: &str = "crash-pool";

/// Machines alike, for the crash tests (tests/real_maas.rs): one more than
/// they allocate, so a second allocation for the same MaasMachine would
/// find a machine and show.
pub const CRASH_MACHINES: &[Seeded] = &[
    ("crash-1", CRASH_POOL, "default", 4, 8192, &[]),
    ("crash-2", CRASH_POOL, "default", 4, 8192, &[]),
    ("crash-3", CRASH_POOL, "default", 4, 8192, &[]),
];
/// The pool of [`ADOPT_MACHINES`]: the machine the adoption test deploys
/// the Go provider's way, out of every other test's reach.
pub const ADOPT_POOL: &str = "adopt-pool";
pub const ADOPT_MACHINES: &[Seeded] = &[("adopt-1", ADOPT_POOL, "zone-a", 4, 8192, &[])];

/// The machines of tests/real_maas.rs: each test works on its own.
pub const TEST_MACHINES: &[&[Seeded]] = &[MACHINES, CRASH_MACHINES, ADOPT_MACHINES, REUSE_MACHINES];

/// The README story's machines for tests/real_maas_kcp.rs (a binary of
/// its own: it runs the Cluster API managers, which would reconcile every
/// other test's Machines): three control planes, one per zone, and
/// two workers, with the story's pools, tags and hardware.
pub const STORY_MACHINES: &[&[Seeded]] = &[&[
    ("cp-1", "cp-pool", "zone-a", 8, 32768, &["control-plane"]),
    ("cp-2", "cp-pool", "zone-b", 8, 32768, &["control-plane"]),
    ("cp-3", "cp-pool", "default", 8, 32768, &["control-plane"]),
    ("worker-1", "worker-pool", "zone-a", 16, 65536, &["worker"]),
    ("worker-2", "worker-pool", "zone-b", 16, 65536, &["worker"]),
]];

/// The pool of [`REUSE_MACHINES`] (node reuse, tests/real_maas.rs): no
/// other test asks for it.
pub const REUSE_POOL: &str = "reuse-pool";
pub const REUSE_MACHINES: &[Seeded] = &[("reuse-1", REUSE_POOL, "default", 4, 8192, &[])];
const DISK_BYTES: u64 = 120 * 1_000_000_000;

pub struct RealMaas {
    pub admin_key: String,
    /// The API key of [`OPERATOR`].
    pub operator_key: String,
    /// hostname → system_id of the seeded machines, in the order seeded.
    pub machines: Vec<(String, String)>,
    kit: PathBuf,
    state: PathBuf,
    agent: ureq::Agent,
    _watchdog: Mutex<(Child, ChildStdin)>,
}

/// The world of tests/real_maas.rs ([`TEST_MACHINES`]), started and
/// seeded on first use in this test binary; `None` (after saying why)
/// where it cannot run outside CI.
pub fn world(test: &str) -> Option<&'static RealMaas> {
    world_with(test, TEST_MACHINES)
}

/// The world with `machines` seeded (the first call of the test binary
/// chooses them; a binary passes always the same).
pub fn world_with(test: &str, machines: &'static [&'static [Seeded]]) -> Option<&'static RealMaas> {
    // Started at most once: a start that failed fails every test after it
    // without starting or seeding again.
    static WORLD: OnceLock<Result<RealMaas, Unavailable>> = OnceLock::new();
    let world = WORLD.get_or_init(|| {
        std::panic::catch_unwind(|| RealMaas::start(machines)).unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(Unavailable::Broken(why))
        })
    });
    match world {
        Ok(world) => Some(world),
        Err(Unavailable::Missing(why)) => {
            skip::skip(test, why);
            None
        }
        Err(Unavailable::Broken(why)) => panic!("the real MAAS world failed to start: {why}"),
    }
}

enum Unavailable {
    /// Something this machine lacks (a skip outside CI).
    Missing(String),
    /// It should have worked: a failure.
    Broken(String),
}

fn state_dir() -> PathBuf {
    match std::env::var_os("CAPMAAS_TEST_CACHE") {
        Some(cache) if !cache.is_empty() => PathBuf::from(cache).join("real-maas"),
        _ => super::repo_root().join(".cache/real-maas"),
    }
}

impl RealMaas {
    /// `Err` only for what makes the test skip (outside CI); anything
    /// wrong once MAAS is there panics.
    fn start(machines: &'static [&'static [Seeded]]) -> Result<RealMaas, Unavailable> {
        let kit = skip::shared_dir().join("real-maas");
        if !kit.join("start.sh").is_file() {
            return Err(Unavailable::Missing(format!(
                "the real MAAS kit {} is not there (set CAPMAAS_SHARED to the folder holding real-maas/)",
                kit.display()
            )));
        }
        let uid = Command::new("id").arg("-u").output().expect("id -u");
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err(Unavailable::Missing(
                "not root: real MAAS's start.sh runs PostgreSQL as postgres (CI runs as root)"
                    .into(),
            ));
        }
        let state = state_dir();
        std::fs::create_dir_all(&state).expect("real MAAS state directory");
        let started = Instant::now();
        // The watchdog: holds the machine's one-MAAS lock while MAAS runs
        // and stops what it started when our end of its stdin closes.
        let script = r#"
            pid="$REALMAAS_DIR/run/regiond.pid"
            if [ -f "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null; then keep=1; else keep=0; fi
            "$KIT/start.sh" </dev/null || exit 1
            cat >/dev/null
            [ "$keep" = 1 ] || "$KIT/stop.sh"
        "#;
        let mut child = Command::new("flock")
            .arg("-w")
            .arg("1800")
            .arg(state.join("lock"))
            .args(["bash", "-c", script])
            .env("REALMAAS_DIR", &state)
            .env("KIT", &kit)
            .current_dir(&state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("flock runs (util-linux)");
        let stdin = child.stdin.take().expect("watchdog stdin");
        let stdout = child.stdout.take().expect("watchdog stdout");
        let mut admin_key = None;
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("start.sh output");
            if let Some(key) = line.strip_prefix("MAAS_API_KEY=") {
                admin_key = Some(key.trim().to_owned());
                break;
            }
        }
        let Some(admin_key) = admin_key else {
            let status = child.wait();
            panic!(
                "real MAAS did not start ({status:?}); its log is above and in {}/run/regiond.log",
                state.display()
            );
        };
        eprintln!(
            "real MAAS up after {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .new_agent();
        let mut world = RealMaas {
            admin_key,
            operator_key: String::new(),
            machines: Vec::new(),
            kit,
            state,
            agent,
            _watchdog: Mutex::new((child, stdin)),
        };
        let seeding = Instant::now();
        world.seed(machines);
        eprintln!(
            "real MAAS seeded in {:.1} s",
            seeding.elapsed().as_secs_f64()
        );
        Ok(world)
    }

    pub fn admin_client(&self) -> Client {
        self.client(&self.admin_key)
    }

    pub fn operator_client(&self) -> Client {
        self.client(&self.operator_key)
    }

    pub fn client(&self, key: &str) -> Client {
        let mut config = ClientConfig::new(URL, ApiKey::parse(key).expect("MAAS key parses"));
        config.timeout = Duration::from_secs(60);
        config.max_retries = 1;
        Client::new(config).expect("client")
    }

    pub fn system_id(&self, hostname: &str) -> &str {
        self.machines
            .iter()
            .find(|(h, _)| h == hostname)
            .map(|(_, id)| id.as_str())
            .unwrap_or_else(|| panic!("no seeded machine {hostname}"))
    }

    // ---- raw API 2.0 (OAuth 1.0a PLAINTEXT), for what the product never calls

    /// `METHOD api/2.0/PATH` with a form body; → (status, body).
    pub fn api(&self, key: &str, method: &str, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let url = format!("{URL}/api/2.0/{path}");
        let auth = oauth_header(key);
        let body = capmaas::maas::encode_pairs(form);
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Authorization", auth)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .expect("request");
        self.send(request, &format!("{method} {path}"))
    }

    /// Like [`RealMaas::api`] as admin, expecting 2xx JSON.
    pub fn admin(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        let (status, body) = self.api(&self.admin_key, method, path, form);
        assert!(
            (200..300).contains(&status),
            "{method} {path} {form:?}: HTTP {status}: {body}"
        );
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    fn send(&self, request: ureq::http::Request<String>, what: &str) -> (u16, String) {
        let mut response = self
            .agent
            .run(request)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(8 << 20)
            .read_to_string()
            .unwrap_or_else(|e| panic!("{what}: body: {e}"));
        (status, text)
    }

    /// Python in MAAS's Django environment (`shell.sh`): what only the
    /// database can do. Panics with its output unless it exits 0.
    pub fn shell(&self, python: &str) -> String {
        let mut child = Command::new(self.kit.join("shell.sh"))
            .env("REALMAAS_DIR", &self.state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("shell.sh runs");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(python.as_bytes())
            .expect("script to shell.sh");
        drop(stdin);
        let out = child.wait_with_output().expect("shell.sh output");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "shell.sh: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// SQL on MAAS's database (PostgreSQL on its unix socket), for the
    /// few facts only a machine's boot environment or a BMC would change:
    /// milliseconds, where `shell.sh` takes seconds to start Django.
    /// Returns psql's unaligned rows.
    pub fn sql(&self, statement: &str) -> String {
        let out = Command::new("psql")
            .arg("-h")
            .arg(self.state.join("db"))
            .args([
                "-U",
                "postgres",
                "-d",
                "maas",
                "-tAq",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
            ])
            .arg(statement)
            .stdin(Stdio::null())
            .output()
            .expect("psql runs");
        assert!(
            out.status.success(),
            "psql {statement}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    // ---- seeding

    fn seed(&mut self, machines: &'static [&'static [Seeded]]) {
        let machines: Vec<&'static Seeded> = machines.iter().copied().flatten().collect();
        let names = |list: &Value| -> Vec<String> {
            list.as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["name"].as_str().map(str::to_owned))
                .collect()
        };
        let pools = names(&self.admin("GET", "resourcepools/", &[]));
        let wanted: std::collections::BTreeSet<&str> = ["cp-pool", "worker-pool"]
            .into_iter()
            .chain(machines.iter().map(|m| m.1))
            .collect();
        for pool in wanted {
            if pool != "default" && !pools.iter().any(|p| p == pool) {
                self.admin("POST", "resourcepools/", &[("name", pool)]);
            }
        }
        let zones = names(&self.admin("GET", "zones/", &[]));
        for zone in ["zone-a", "zone-b"] {
            if !zones.iter().any(|z| z == zone) {
                self.admin("POST", "zones/", &[("name", zone)]);
            }
        }
        let tags = names(&self.admin("GET", "tags/", &[]));
        for tag in ["control-plane", "worker", "gpu"] {
            if !tags.iter().any(|t| t == tag) {
                self.admin("POST", "tags/", &[("name", tag)]);
            }
        }
        if !names(&self.admin("GET", "domains/", &[]))
            .iter()
            .any(|d| d == DOMAIN)
        {
            self.admin(
                "POST",
                "domains/",
                &[("name", DOMAIN), ("authoritative", "true"), ("ttl", "30")],
            );
        }
        let subnets = self.admin("GET", "subnets/", &[]);
        let subnet_id = match subnets
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["cidr"] == SUBNET)
        {
            Some(s) => s["id"].clone(),
            None => self.admin(
                "POST",
                "subnets/",
                &[
                    ("cidr", SUBNET),
                    ("gateway_ip", "127.11.130.1"),
                    ("name", "lab"),
                ],
            )["id"]
                .clone(),
        };
        self.seed_custom_image();
        self.operator_key = self.seed_user(OPERATOR);
        self.seed_machines(&machines, &subnet_id.to_string());
    }

    /// `custom/u-2204-0-k-1264-0`, uploaded as users do (multipart
    /// `boot-resources/` POST with the image's content); a few bytes stand
    /// for the tarball, nothing boots it.
    fn seed_custom_image(&self) {
        let resources = self.admin("GET", "boot-resources/", &[]);
        let name = CUSTOM_IMAGE.trim_start_matches("custom/");
        let present = resources
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == name || r["name"] == CUSTOM_IMAGE);
        if present {
            return;
        }
        let boundary = "capmaas-real-maas-boundary";
        let mut body = String::new();
        for (field, value) in [
            ("name", CUSTOM_IMAGE),
            ("title", "Ubuntu 22.04 + Kubernetes 1.26.4"),
            ("architecture", "amd64/generic"),
            ("filetype", "tgz"),
            ("base_image", "ubuntu/jammy"),
        ] {
            body.push_str(&format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n{value}\r\n"
            ));
        }
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"content\"; filename=\"root.tgz\"\r\n\
             Content-Type: application/octet-stream\r\n\r\nnot really an image\r\n--{boundary}--\r\n"
        ));
        let request = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("{URL}/api/2.0/boot-resources/"))
            .header("Authorization", oauth_header(&self.admin_key))
            .header(
                "Content-Type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body)
            .expect("request");
        let (status, text) = self.send(request, "POST boot-resources/");
        assert!(
            (200..300).contains(&status),
            "uploading {CUSTOM_IMAGE}: HTTP {status}: {text}"
        );
    }

    /// A non-admin user (created through the API when missing) and its API
    /// key (MAAS hands a user's key only to that user's web login or to
    /// `maas-region apikey`; the test reads it from the database).
    fn seed_user(&self, username: &str) -> String {
        let users = self.admin("GET", "users/", &[]);
        let exists = users
            .as_array()
            .into_iter()
            .flatten()
            .any(|u| u["username"] == username);
        if !exists {
            self.admin(
                "POST",
                "users/",
                &[
                    ("username", username),
                    ("email", &format!("{username}@example.com")),
                    ("password", "operator-password"),
                    ("is_superuser", "0"),
                ],
            );
        }
        // MAAS makes a user's first key when it creates the user.
        let key = self.sql(&format!(
            "select c.key || ':' || t.key || ':' || t.secret from piston3_token t \
             join piston3_consumer c on t.consumer_id = c.id \
             join auth_user u on t.user_id = u.id \
             where u.username = '{username}' and t.token_type = 2 and t.is_approved \
             order by t.id limit 1"
        ));
        let key = key.trim();
        assert!(!key.is_empty(), "no API key for {username}");
        key.to_owned()
    }

    /// Each machine on a thread of its own: MAAS answers a write in about
    /// a second on a loaded machine, and each machine takes a dozen.
    fn seed_machines(&mut self, machines: &[&'static Seeded], subnet_id: &str) {
        let this = &*self;
        let existing = this.admin("GET", "machines/", &[]);
        let ids: Vec<String> = std::thread::scope(|scope| {
            // Whatever the last run left (deployed, broken, allocated) goes.
            let gone: Vec<_> = existing
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["system_id"].as_str())
                .map(|id| scope.spawn(move || this.delete_machine(id)))
                .collect();
            gone.into_iter().for_each(join);
            let made: Vec<_> = machines
                .iter()
                .enumerate()
                .map(|(i, machine)| scope.spawn(move || this.seed_machine(i, machine, subnet_id)))
                .collect();
            made.into_iter().map(join).collect()
        });
        self.machines = machines
            .iter()
            .zip(ids)
            .map(|(m, id)| (m.0.to_owned(), id))
            .collect();
    }

    fn delete_machine(&self, id: &str) {
        let (status, body) = self.api(&self.admin_key, "DELETE", &format!("machines/{id}/"), &[]);
        assert!(
            (200..300).contains(&status),
            "deleting {id}: HTTP {status}: {body}"
        );
    }

    /// One machine: enlisted, commissioned (results passed, then the OK
    /// signal, as its ephemeral environment ends commissioning), then the
    /// hardware facts commissioning would have found.
    fn seed_machine(&self, i: usize, machine: &Seeded, subnet_id: &str) -> String {
        let (hostname, pool, zone, cpus, mem, tags) = *machine;
        let mac = format!("52:54:00:13:00:{:02x}", i + 1);
        let m = self.admin(
            "POST",
            "machines/",
            &[
                ("hostname", hostname),
                ("architecture", "amd64/generic"),
                ("mac_addresses", &mac),
                ("power_type", "manual"),
                ("domain", DOMAIN),
            ],
        );
        let id = m["system_id"].as_str().expect("system_id").to_owned();
        self.pass_commissioning_results(&id);
        self.signal(&id, &[("status", "OK")]);
        self.wait_status(&id, "Ready", Duration::from_secs(60));
        self.admin(
            "PUT",
            &format!("machines/{id}/"),
            &[
                ("cpu_count", &cpus.to_string()),
                ("memory", &mem.to_string()),
                ("pool", pool),
                ("zone", zone),
            ],
        );
        self.admin(
            "POST",
            &format!("nodes/{id}/blockdevices/"),
            &[
                ("name", "sda"),
                ("size", &DISK_BYTES.to_string()),
                ("block_size", "512"),
                ("model", "QEMU HARDDISK"),
                ("serial", &format!("disk-{hostname}")),
            ],
        );
        self.admin(
            "POST",
            &format!("machines/{id}/"),
            &[("op", "set_storage_layout"), ("storage_layout", "flat")],
        );
        let iface = m["boot_interface"]["id"].to_string();
        self.admin(
            "POST",
            &format!("nodes/{id}/interfaces/{iface}/"),
            &[
                ("op", "link_subnet"),
                ("mode", "AUTO"),
                ("subnet", subnet_id),
            ],
        );
        for tag in tags {
            self.admin(
                "POST",
                &format!("tags/{tag}/"),
                &[("op", "update_nodes"), ("add", &id)],
            );
        }
        id
    }

    // ---- playing the machines (metadata API, and the BMC through the database)

    /// The commissioning scripts' results, as a machine that ran them
    /// would upload them: passed (otherwise MAAS sends it back to New).
    fn pass_commissioning_results(&self, system_id: &str) {
        self.sql(&format!(
            "update maasserver_scriptresult set status = 2, exit_status = 0 \
             where script_set_id = (select current_commissioning_script_set_id \
             from maasserver_node where system_id = '{system_id}')"
        ));
    }

    /// The node's current metadata token (consumer key, token key, secret)
    /// from the preseed a booting machine fetches. It changes at each
    /// stage (allocation, deployment).
    fn node_token(&self, system_id: &str) -> (String, String, String) {
        let url = format!("{URL}/metadata/latest/by-id/{system_id}/?op=get_preseed");
        let request = ureq::http::Request::builder()
            .method("GET")
            .uri(&url)
            .body(String::new())
            .expect("request");
        let (status, preseed) = self.send(request, "get_preseed");
        assert_eq!(status, 200, "get_preseed {system_id}: {preseed}");
        let field = |name: &str| -> String {
            preseed
                .lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
                .map(|v| v.trim().trim_matches(|c| c == '\'' || c == '"').to_owned())
                .unwrap_or_else(|| panic!("no {name} in the preseed of {system_id}:\n{preseed}"))
        };
        (
            field("consumer_key"),
            field("token_key"),
            field("token_secret"),
        )
    }

    fn metadata(
        &self,
        system_id: &str,
        method: &str,
        path: &str,
        content_type: &str,
        body: String,
    ) -> (u16, String) {
        let (consumer, token, secret) = self.node_token(system_id);
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{URL}/metadata/{path}"))
            .header("Authorization", oauth_parts(&consumer, &token, &secret))
            .header("Content-Type", content_type)
            .body(body)
            .expect("request");
        self.send(request, &format!("metadata {method} {path}"))
    }

    /// `op=signal` with these fields, as the machine's environment sends it.
    pub fn signal(&self, system_id: &str, fields: &[(&str, &str)]) {
        let mut form = vec![("op", "signal")];
        form.extend_from_slice(fields);
        let body = capmaas::maas::encode_pairs(&form);
        let (status, text) = self.metadata(
            system_id,
            "POST",
            "2012-03-01/",
            "application/x-www-form-urlencoded",
            body,
        );
        assert_eq!(status, 200, "signal {fields:?} from {system_id}: {text}");
    }

    /// A deployment that succeeds: curtin's install reports, then the
    /// installed system's first boot fetches its user data (MAAS marks the
    /// machine Deployed), and the BMC reports power on.
    pub fn complete_deployment(&self, system_id: &str) {
        for event in ["start", "finish"] {
            self.curtin_report(system_id, event, "SUCCESS", "curtin command install");
        }
        let (status, text) = self.metadata(
            system_id,
            "GET",
            "2012-03-01/user-data",
            "text/plain",
            String::new(),
        );
        assert!(
            status == 200 || status == 404,
            "user-data of {system_id}: HTTP {status}: {text}"
        );
        self.wait_status(system_id, "Deployed", Duration::from_secs(30));
        self.set_power_state(system_id, "on");
    }

    /// One of curtin's reports on its `cmd-install` stage.
    fn curtin_report(&self, system_id: &str, event: &str, result: &str, description: &str) {
        let report = json!({
            "event_type": event, "origin": "curtin", "name": "cmd-install",
            "description": description, "result": result, "timestamp": 0,
        });
        let (status, text) = self.metadata(
            system_id,
            "POST",
            &format!("status/{system_id}"),
            "application/json",
            report.to_string(),
        );
        // 204: MAAS keeps the report and answers nothing.
        assert_eq!(
            status, 204,
            "curtin {event} {result} from {system_id}: {text}"
        );
    }

    /// A deployment that fails: curtin reports its install failed with
    /// `error` (MAAS records it as an event), then the installer signals
    /// FAILED (MAAS marks the machine Failed deployment with its own
    /// words; a signal's `error` is not kept while deploying).
    pub fn fail_deployment(&self, system_id: &str, error: &str) {
        self.curtin_report(system_id, "start", "SUCCESS", "curtin command install");
        self.curtin_report(system_id, "finish", "FAIL", error);
        self.signal(system_id, &[("status", "FAILED"), ("error", error)]);
        self.wait_status(system_id, "Failed deployment", Duration::from_secs(30));
    }

    /// What the BMC reports (`on`, `off`, `unknown`, `error`): the manual
    /// power driver reports nothing, so the stored state is set directly.
    pub fn set_power_state(&self, system_id: &str, state: &str) {
        let updated = self.sql(&format!(
            "update maasserver_node set power_state = '{state}' \
             where system_id = '{system_id}' returning 1"
        ));
        assert_eq!(updated.trim(), "1", "power state of {system_id}");
    }

    pub fn wait_status(&self, system_id: &str, status: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let m = self.admin("GET", &format!("machines/{system_id}/"), &[]);
            if m["status_name"] == status {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "{system_id} is {} ({}), not {status}, after {within:?}",
                m["status_name"],
                m["status_message"]
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// Resident memory of real MAAS now, in KiB: regiond with its
    /// workers, and PostgreSQL with its backends (each process tree's
    /// VmRSS summed; shared pages count in every process).
    pub fn memory_kib(&self) -> (u64, u64) {
        let pid_in = |file: PathBuf| -> Option<u32> {
            let text = std::fs::read_to_string(file).ok()?;
            text.lines().next()?.trim().parse().ok()
        };
        let tree = |pid: Option<u32>| pid.map_or(0, process_tree_rss_kib);
        (
            tree(pid_in(self.state.join("run/regiond.pid"))),
            tree(pid_in(self.state.join("db/data/postmaster.pid"))),
        )
    }
}

/// VmRSS of `root` and every process descending from it, in KiB.
fn process_tree_rss_kib(root: u32) -> u64 {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    tree.iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A scoped thread's result, its panic passed on as is.
fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `Authorization` for a MAAS key (`consumer:token:secret`), OAuth 1.0a
/// PLAINTEXT as MAAS's CLI signs.
pub fn oauth_header(key: &str) -> String {
    let mut parts = key.splitn(3, ':');
    let (Some(consumer), Some(token), Some(secret)) = (parts.next(), parts.next(), parts.next())
    else {
        panic!("a MAAS key is consumer:token:secret")
    };
    oauth_parts(consumer, token, secret)
}

fn oauth_parts(consumer: &str, token: &str, secret: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let nonce = format!("{}-{}", std::process::id(), now.as_nanos());
    let timestamp = now.as_secs();
    format!(
        "OAuth oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
         oauth_consumer_key=\"{consumer}\", oauth_token=\"{token}\", \
         oauth_signature=\"&{secret}\", oauth_nonce=\"{nonce}\", oauth_timestamp=\"{timestamp}\""
    )
}
