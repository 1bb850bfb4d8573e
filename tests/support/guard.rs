//! A child process that cannot outlive the test: it runs under a small bash
//! guard that sends it SIGTERM when the guard's standard input (a pipe only
//! the test holds) closes, so it also stops when the test binary dies
//! without unwinding. Its stdout and stderr go to a log file.
//!
//! ```ignore
//! let mut p = Guarded::spawn("workload-sim", &bin, &args, &[], &log);
//! p.assert_running();
//! p.stop(Duration::from_secs(10)); // also on drop
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The guard: the program runs in the background; a second background job
/// waits for EOF on fd 3 (our pipe; explicit because bash gives background
/// jobs /dev/null as stdin) and then sends SIGTERM. The guard itself exits
/// with the program, so `try_wait` sees a crash.
const GUARD_SCRIPT: &str = r#"trap '' INT HUP
exec 3<&0
"$@" </dev/null 3<&- &
pid=$!
echo "$pid" > "$GUARD_PID_FILE"
( cat <&3 >/dev/null; kill "$pid" 2>/dev/null ) &
exec 3<&-
wait "$pid""#;

pub struct Guarded {
    /// What the program is, for messages.
    pub what: String,
    pub log: PathBuf,
    pub pid: u32,
    guard: Child,
}

impl Guarded {
    /// Starts `program args...` with `env` added and the Kubernetes
    /// in-cluster variables removed (controller-runtime's "running in a
    /// pod" detection keys off them).
    pub fn spawn(
        what: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Guarded {
        let pid_file = log.with_extension("pid");
        let _ = std::fs::remove_file(&pid_file);
        let log_file = std::fs::File::create(log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let guard = Command::new("bash")
            .arg("-c")
            .arg(GUARD_SCRIPT)
            .arg("guard")
            .arg(program)
            .args(args)
            .env("GUARD_PID_FILE", &pid_file)
            .envs(env.iter().copied())
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .env_remove("POD_UID")
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone().expect("cloning the log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
        let pid = read_pid(&pid_file, what);
        Guarded {
            what: what.to_string(),
            log: log.to_path_buf(),
            pid,
            guard,
        }
    }

    /// The exit status, once the program has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.guard.try_wait().ok().flatten()
    }

    /// Panics (with the log's tail) if the program has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.exited() {
            panic!(
                "{} exited ({status}); last log lines of {}:\n{}",
                self.what,
                self.log.display(),
                self.log_tail(40)
            );
        }
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, then up to `grace` for a clean exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        drop(self.guard.stdin.take());
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill")
            .arg("-9")
            .arg(self.pid.to_string())
            .status();
        let _ = self.guard.kill();
        let _ = self.guard.wait();
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.stop(Duration::from_secs(10));
        }
    }
}

fn read_pid(pid_file: &Path, what: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "the guard of {what} wrote no pid to {}",
            pid_file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
