//! What a test does when this machine lacks something it needs: outside CI
//! it says so loudly and passes; under `CI=true` it fails naming what is
//! missing, because CI installs everything (`.ci/run`) and a skip there
//! would pass without proving anything.
//!
//! Test files that do not use `tests/support` include this file alone:
//! `#[path = "support/skip.rs"] mod skip;`.
#![allow(dead_code)]

use std::io::Write as _;

/// Whether this run is CI (`CI=true`, as CI services set it).
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Reports that `test` cannot run here because of `why`; returns only
/// outside CI (the caller then returns), panics under `CI=true`.
pub fn skip(test: &str, why: &str) {
    assert!(
        !on_ci(),
        "{test} cannot run: {why}. CI never skips: .ci/run must install what it needs"
    );
    // Straight to stderr, past the harness's capture of print macros: a
    // skip is seen even when the test passes without --nocapture.
    let line = "!".repeat(72);
    let _ = writeln!(
        std::io::stderr(),
        "{line}\nSKIPPED {test}: {why}\n(under CI=true this is a failure)\n{line}"
    );
}

/// The folder beside the checkout that holds the test material too big or
/// too foreign for the repository (`maas-fixtures`, `real-maas`):
/// `$CAPMAAS_SHARED` when set (a git worktree elsewhere), else `../shared`.
pub fn shared_dir() -> std::path::PathBuf {
    match std::env::var_os("CAPMAAS_SHARED") {
        Some(dir) if !dir.is_empty() => dir.into(),
        _ => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}
