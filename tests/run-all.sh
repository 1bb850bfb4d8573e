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
cargo test --workspace --all-targets --locked --no-run
# Two lanes. The lab binaries run every test inside network namespaces of
# their own (tests/support/netns.rs): their ports, addresses and DNS cannot
# meet the other binaries', and they spend most of their time waiting on
# Cluster API managers, so they run beside the rest instead of after it.
lab_lane=(kcp_lab clusterclass remediation)
other_tests=()
while read -r name; do
  [[ " ${lab_lane[*]} " == *" $name "* ]] || other_tests+=(--test "$name")
done < <(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"]:
            print(t["name"])')
(
  status=0
  for name in "${lab_lane[@]}"; do
    cargo test --locked --no-fail-fast --test "$name" || status=1
  done
  exit $status
) >target/test-output-lab.log 2>&1 &
lab_pid=$!
main_status=0
cargo test --workspace --lib --bins "${other_tests[@]}" --locked --no-fail-fast \
  2>&1 | tee target/test-output.log || main_status=1
lab_status=0
wait "$lab_pid" || lab_status=1
step "cargo test, lab lane (${lab_lane[*]})"
cat target/test-output-lab.log
# A green run must have run tests: count them from the harness summaries.
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' \
  target/test-output.log target/test-output-lab.log
((main_status == 0 && lab_status == 0))
