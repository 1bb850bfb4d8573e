#!/usr/bin/env bash
# The local lab, running in the background on this machine.
#
# As root (the default): the KCP lab (tests/kcp_lab.rs `lab`): the cluster
# `clusterctl generate cluster` renders with deploy/clusterctl/ (a
# KubeadmControlPlane and a MachineDeployment with kubeadm bootstrap), run by
# the real Cluster API core, KCP and CABPK managers, maas-sim and capmaas,
# the machines booting into Cluster API's in-memory workload cluster server
# (workload-sim), all inside a network namespace whose DNS is the
# simulator's. Everything listens inside that namespace only: run kubectl
# through `ip netns exec` (the commands are printed).
# Otherwise (or with CAPMAAS_LAB=story): the README story (tests/lab.rs: the
# real core manager, maas-sim, capmaas and a node helper playing kubelet),
# on loopback.
#
#   tests/lab.sh up       build what is needed, start the lab, follow its log
#                         until every machine is Ready, return (the lab keeps
#                         running)
#   tests/lab.sh status   the machines now, and the lab's pids
#   tests/lab.sh logs     follow the lab's log (Ctrl-C stops following only)
#   tests/lab.sh down     stop everything; checks that no process (and no
#                         network namespace) is left
#
# The lab runs `cargo test --test kcp_lab lab` (or `--test lab`) in a
# session of its own, so every process it starts shares one process group,
# recorded in .cache/lab/pgid. Files: .cache/lab/lab.log (progress), the
# component logs, kubeconfig, env. CAPMAAS_LAB_DEPLOY_SECONDS sets the
# simulated deploy time.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
lab=${CAPMAAS_LAB_DIR:-$root/.cache/lab}
log=$lab/lab.log
pgid_file=$lab/pgid
ready_line='LAB READY: every machine is Ready'
# The first run builds the control plane, Cluster API and Rust binaries.
up_timeout=${CAPMAAS_LAB_UP_TIMEOUT:-1800}

say() { echo "lab: $*" >&2; }

# Which lab `up` starts: kcp when this process may create network
# namespaces, else the story lab, saying why.
lab_kind() {
  local why
  if [[ ${CAPMAAS_LAB:-} == story ]]; then
    echo story
  elif why=$("$here/support/netns.sh" check); then
    echo kcp
  else
    say "the KCP lab needs its own network namespace and $why; starting the story lab instead"
    echo story
  fi
}

running_pgid() {
  [[ -f $pgid_file ]] || return 1
  local pgid
  pgid=$(cat "$pgid_file")
  [[ -n $pgid ]] && pgrep -g "$pgid" >/dev/null 2>&1 && echo "$pgid"
}

build() {
  say "building (cached after the first run; a cold build takes many minutes)"
  (cd "$root" && cargo test --no-run --test "$1") >&2
  "$root/tests/k8s-testbin/build.sh" >/dev/null
  "$root/tests/capi-testbin/build.sh" >/dev/null
}

up() {
  if pgid=$(running_pgid); then
    say "already running (process group $pgid); tests/lab.sh down first"
    exit 1
  fi
  mkdir -p "$lab"
  local kind test
  kind=$(lab_kind)
  test=$([[ $kind == kcp ]] && echo kcp_lab || echo lab)
  build "$test"
  rm -f "$lab/stop" "$lab/env" "$lab/kubeconfig"
  echo "$kind" >"$lab/kind"
  : >"$log"
  # setsid: a new session and process group whose id is this bash's pid,
  # which then becomes cargo. Every descendant (test binary, control plane
  # and its watchdog, Cluster API managers, maas-sim, capmaas, and for the
  # KCP lab the network namespace's watchdog) inherits it.
  (cd "$root" && exec setsid bash -c 'echo $$ >"$0"; exec cargo test --test "$1" -- --exact lab --ignored --nocapture' \
    "$pgid_file" "$test" </dev/null >>"$log" 2>&1) &
  for _ in $(seq 50); do [[ -s $pgid_file ]] && break; sleep 0.1; done
  local pgid
  pgid=$(cat "$pgid_file")
  say "started the $kind lab (process group $pgid), log $log"
  # Follow the log until the ready line, a failure, or the lab's exit.
  local deadline=$(($(date +%s) + up_timeout)) shown=0 lines
  while true; do
    lines=$(wc -l <"$log")
    if ((lines > shown)); then
      sed -n "$((shown + 1)),${lines}p" "$log"
      shown=$lines
    fi
    if grep -q "$ready_line" "$log"; then
      # Print the rest of the announcement (it follows the ready line).
      sleep 0.5
      sed -n "$((shown + 1)),\$p" "$log"
      say "up; it keeps running. tests/lab.sh status | logs | down"
      return 0
    fi
    if ! pgrep -g "$pgid" >/dev/null 2>&1; then
      say "the lab exited before every machine was Ready; see $log"
      exit 1
    fi
    if grep -qE "panicked at|test result: FAILED|^error(\[|:)" "$log"; then
      sleep 2
      sed -n "$((shown + 1)),\$p" "$log"
      say "the lab failed; see $log. Stopping it."
      down
      exit 1
    fi
    if (($(date +%s) > deadline)); then
      say "not ready after ${up_timeout}s; see $log. Stopping it."
      down
      exit 1
    fi
    sleep 1
  done
}

# Network namespaces of KCP labs and tests whose process is gone: the lab
# namespace of this checkout (env file), and any capmaas-kcp-PID left by a
# killed run. Namespaces of live processes are left alone.
remove_namespaces() {
  local name pid
  for name in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^capmaas-kcp-' || true); do
    pid=${name##*-}
    if ! kill -0 "$pid" 2>/dev/null; then
      say "removing network namespace $name"
      "$here/support/netns.sh" delete "$name"
    fi
  done
}

down() {
  local pgid
  if ! pgid=$(running_pgid); then
    say "not running"
    rm -f "$pgid_file"
    [[ $(id -u) == 0 ]] && remove_namespaces
    return 0
  fi
  # Gracefully first: the test returns, drops everything, and the control
  # plane's watchdog stops etcd and kube-apiserver when the test binary exits.
  touch "$lab/stop"
  for _ in $(seq 300); do
    pgrep -g "$pgid" >/dev/null 2>&1 || break
    sleep 0.1
  done
  if pgrep -g "$pgid" >/dev/null 2>&1; then
    say "still running after 30s; SIGTERM to process group $pgid"
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 100); do
      pgrep -g "$pgid" >/dev/null 2>&1 || break
      sleep 0.1
    done
  fi
  if pgrep -g "$pgid" >/dev/null 2>&1; then
    say "SIGKILL to process group $pgid"
    kill -KILL -- "-$pgid" 2>/dev/null || true
    sleep 0.5
  fi
  if pgrep -g "$pgid" >/dev/null 2>&1; then
    say "processes left in group $pgid:"
    pgrep -a -g "$pgid" >&2 || true
    exit 1
  fi
  rm -f "$pgid_file" "$lab/stop"
  [[ $(id -u) == 0 ]] && remove_namespaces
  if [[ $(id -u) == 0 ]] && ip netns list 2>/dev/null | grep -q '^capmaas-kcp-'; then
    say "network namespaces still present (of other live runs):"
    ip netns list | grep '^capmaas-kcp-' >&2 || true
  fi
  say "down: no process left in group $pgid"
}

status() {
  local pgid
  if ! pgid=$(running_pgid); then
    say "not running"
    exit 1
  fi
  # shellcheck source=/dev/null
  source "$lab/env" 2>/dev/null || { say "starting (no $lab/env yet); see $log"; exit 0; }
  local k=("$KUBECTL" --kubeconfig "$KUBECONFIG" -n "$NAMESPACE")
  # The KCP lab's API server listens inside its network namespace only.
  [[ -n ${NETNS:-} ]] && k=(ip netns exec "$NETNS" "${k[@]}")
  [[ -n ${NETNS:-} ]] && { "${k[@]}" get kubeadmcontrolplanes; echo; }
  "${k[@]}" get maasmachines -o custom-columns='MAASMACHINE:.metadata.name,STATE:.status.machineState,SYSTEM ID:.spec.systemID,PROVIDER ID:.spec.providerID,READY:.status.ready'
  echo
  "${k[@]}" get machines
  echo
  "${k[@]}" get machinedeployments
  echo
  echo "kubectl:    ${k[*]:0:${#k[@]}-2}"
  echo "logs:       $log, $CAPMAAS_LOG, $CAPI_LOG${KCP_LOG:+, $KCP_LOG, $CABPK_LOG, $WORKLOAD_SIM_LOG}"
  echo "processes:  group $pgid"
  pgrep -a -g "$pgid" | cut -c1-150 | sed 's/^/  /'
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  logs) exec tail -n +1 -f "$log" ;;
  *)
    echo "usage: $0 up|status|logs|down" >&2
    exit 2
    ;;
esac
