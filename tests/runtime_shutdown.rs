//! SIGTERM handling in a real process: the first signal starts a graceful
//! shutdown (workers finish their current key, the process exits 0), a
//! second one exits at once with status 1.
//!
//! The process under test is this test binary run again with `--ignored
//! --exact signalled_worker` (see [`signalled_worker`]); signals are sent
//! with the `kill` command, so the test itself needs no `unsafe`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use capmaas::runtime::{
    join_within, listen_for_signals, run_workers, Action, LeaderGate, ObjectKey, Shutdown,
    WorkQueue,
};
use crossbeam_channel::Receiver;

const EVENTUALLY: Duration = Duration::from_secs(60);

/// The helper process: one worker busy with a slow key when the signal
/// comes. With `SLOW_DRAIN` set, the drain never ends (to test the second
/// signal). Prints `READY`, `STOPPING`, `FINISHED <key>`, `EXITING`.
#[test]
#[ignore = "helper process for the shutdown tests"]
fn signalled_worker() {
    let slow_drain = std::env::var_os("SLOW_DRAIN").is_some();
    let shutdown = Shutdown::new();
    listen_for_signals(&shutdown).unwrap();
    let queue = WorkQueue::new("signalled");
    let started = Arc::new(AtomicBool::new(false));
    let reconcile = {
        let (shutdown, started) = (shutdown.clone(), started.clone());
        move |key: &ObjectKey| -> Result<Action, String> {
            started.store(true, Ordering::SeqCst);
            // Busy until the signal arrives, then a little more: the key
            // must be allowed to finish.
            shutdown.wait();
            if slow_drain {
                std::thread::sleep(Duration::from_secs(3600));
            }
            std::thread::sleep(Duration::from_millis(200));
            println!("FINISHED {key}");
            Ok(Action::Done)
        }
    };
    let workers = run_workers(
        "signalled",
        queue.clone(),
        1,
        reconcile,
        LeaderGate::always_open(),
    );
    queue.add(ObjectKey::new("ns", "busy"));
    while !started.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("READY");
    shutdown.wait();
    println!("STOPPING");
    queue.shutdown();
    let drained = join_within(workers, Duration::from_secs(3600));
    println!("EXITING drained={drained}");
}

fn spawn_helper(slow_drain: bool) -> (Child, Receiver<String>) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--ignored", "--exact", "signalled_worker", "--nocapture"])
        .stdout(Stdio::piped());
    if slow_drain {
        command.env("SLOW_DRAIN", "1");
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

fn wait_for_line(lines: &Receiver<String>, prefix: &str) -> String {
    loop {
        let line = lines
            .recv_timeout(EVENTUALLY)
            .unwrap_or_else(|_| panic!("the helper never printed {prefix}"));
        if line.starts_with(prefix) {
            return line;
        }
    }
}

fn send_sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn sigterm_lets_the_current_key_finish_then_exits_zero() {
    let (mut child, lines) = spawn_helper(false);
    wait_for_line(&lines, "READY");
    send_sigterm(&child);
    wait_for_line(&lines, "STOPPING");
    assert_eq!(wait_for_line(&lines, "FINISHED"), "FINISHED ns/busy");
    assert_eq!(wait_for_line(&lines, "EXITING"), "EXITING drained=true");
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_second_sigterm_exits_at_once_with_status_one() {
    let (mut child, lines) = spawn_helper(true);
    wait_for_line(&lines, "READY");
    send_sigterm(&child);
    wait_for_line(&lines, "STOPPING");
    // The drain is stuck; the operator insists.
    send_sigterm(&child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
}
