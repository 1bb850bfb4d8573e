//! `workload-sim` (tests/capi-testbin/workload-sim): the KCP lab's machines.
//! When MAAS reports a machine Deployed it boots it into its workload
//! cluster on Cluster API's in-memory workload cluster server (the Node;
//! for control-plane machines also the static pods, the etcd member and an
//! API server on the machine's IP:6443); when MAAS releases it, it powers
//! it off. It must run inside the lab's network namespace: it listens on
//! the machines' addresses and resolves the clusters' DNS names.
//!
//! ```ignore
//! let sim = WorkloadSim::start(cp, &maas_sim, dir);
//! sim.booted()?; // what is booted now, from its GET /state
//! sim.set_node_ready("worker-3", "False", true); // a sick kubelet a reboot heals
//! ```
//!
//! A Deployed machine that MAAS powers off (a power cycle) stops its
//! kubelet: its Node goes Ready=Unknown until MAAS powers it on again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::capi;
use super::guard::Guarded;
use super::maas_sim::MaasSim;
use super::story::{free_port, http_get};
use super::ControlPlane;

/// One booted machine, as GET /state lists it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Booted {
    #[serde(rename = "systemID")]
    pub system_id: String,
    pub hostname: String,
    pub ip: String,
    pub namespace: String,
    pub cluster: String,
    pub machine: String,
    pub control_plane: bool,
    /// `IP:6443` of its API server (control-plane machines).
    #[serde(default)]
    pub api_server: String,
    /// MAAS powered it off while Deployed: its kubelet is stopped.
    #[serde(default)]
    pub down: bool,
}

#[derive(Deserialize)]
struct State {
    machines: Vec<Booted>,
}

pub struct WorkloadSim {
    process: Guarded,
    pub status_addr: SocketAddr,
}

impl WorkloadSim {
    /// Starts it against the management cluster `cp` and the simulator; its
    /// log is `dir/workload-sim.log` (`WORKLOAD_SIM_V=4` logs every
    /// workload API request).
    pub fn start(cp: &ControlPlane, maas: &MaasSim, dir: &Path) -> WorkloadSim {
        WorkloadSim::start_with_state(cp, &maas.base, dir)
    }

    /// As [`WorkloadSim::start`], reading the machines from
    /// `base/_sim/state` (the simulator's shape: `{"machines": [{system_id,
    /// hostname, status_name, power_state, ip_addresses}]}`), which a test
    /// may serve from another MAAS.
    pub fn start_with_state(cp: &ControlPlane, base: &str, dir: &Path) -> WorkloadSim {
        let bin = capi::build().join("workload-sim");
        let status_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let verbosity = std::env::var("WORKLOAD_SIM_V").unwrap_or_else(|_| "1".into());
        let args = vec![
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            format!("--maas-sim={base}"),
            format!("--status-addr={status_addr}"),
            format!("--v={verbosity}"),
        ];
        let process = Guarded::spawn(
            "workload-sim",
            &bin,
            &args,
            &[],
            &dir.join("workload-sim.log"),
        );
        let mut sim = WorkloadSim {
            process,
            status_addr,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while sim.booted().is_err() {
            sim.assert_running();
            assert!(
                Instant::now() < deadline,
                "workload-sim does not answer on {status_addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        sim
    }

    pub fn log(&self) -> &Path {
        &self.process.log
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    pub fn assert_running(&mut self) {
        self.process.assert_running();
    }

    /// Sets the Node's Ready condition now (`"False"`: a kubelet reporting
    /// NotReady, `"Unknown"`: one that stopped posting, `"True"`: healthy
    /// again). Unless `reboot_heals`, the Node comes back with the same
    /// condition after MAAS power-cycles the machine; a release clears it.
    pub fn set_node_ready(&self, hostname: &str, ready: &str, reboot_heals: bool) {
        let body =
            serde_json::json!({"hostname": hostname, "ready": ready, "rebootHeals": reboot_heals})
                .to_string();
        let mut stream = TcpStream::connect_timeout(&self.status_addr, Duration::from_secs(2))
            .expect("connecting to workload-sim");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "POST /health HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.status_addr,
            body.len()
        )
        .expect("writing to workload-sim");
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        assert!(
            response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
            "POST /health {body}: {response}"
        );
    }

    /// The machines booted now, by hostname.
    pub fn booted(&self) -> Result<Vec<Booted>, String> {
        match http_get(self.status_addr, "/state") {
            Some((200, body)) => serde_json::from_str::<State>(&body)
                .map(|s| s.machines)
                .map_err(|e| format!("decoding /state: {e}")),
            Some((status, body)) => Err(format!("GET /state: HTTP {status}: {body}")),
            None => Err(format!("GET http://{}/state: no answer", self.status_addr)),
        }
    }
}
