#!/usr/bin/env bash
# The project's one test command (README "Run all tests"; .ci/run calls it).
# Builds the test tooling from Go modules (cached in .cache/ until go.mod/go.sum
# change), checks formatting and lints, then runs every test of the workspace
# (capmaas and the maas-sim package under tests/maas-sim): unit tests,
# integration tests on a real kube-apiserver + etcd and the MAAS simulator,
# the end-to-end story, and conformance with the real Cluster API core.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "test control plane (kube-apiserver, etcd, kubectl from Go modules)"
tests/k8s-testbin/build.sh
if [[ -x tests/capi-testbin/build.sh ]]; then
  step "Cluster API core manager and clusterctl (from Go modules)"
  tests/capi-testbin/build.sh
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The product alone, without the test-only client methods (feature
# test-api, which the tests turn on): no dead code hides behind them.
cargo clippy --lib --bins --locked -- -D warnings

step "cargo test"
cargo test --workspace --all-targets --locked --no-fail-fast 2>&1 | tee target/test-output.log
# A green run must have run tests: count them from the harness summaries.
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' target/test-output.log
