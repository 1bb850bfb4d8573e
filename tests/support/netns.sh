#!/usr/bin/env bash
# A network namespace of the KCP lab (tests/support/netns.rs).
#
#   netns.sh create NAME NAMESERVER ADDRESS...
#       creates namespace NAME with its loopback up, every ADDRESS (/32) on
#       that loopback, and /etc/netns/NAME/resolv.conf naming NAMESERVER
#       (`ip netns exec` bind-mounts it over /etc/resolv.conf, so every
#       process inside resolves names through it)
#   netns.sh delete NAME
#       stops every process still in the namespace (by pid, TERM then
#       KILL), deletes it and /etc/netns/NAME; idempotent
#   netns.sh delete-on-eof NAME
#       waits until its standard input closes, then deletes: the test keeps
#       the write end of the pipe, so its exit (even a kill -9) cleans up
#   netns.sh check
#       exits 0 when this process may create namespaces, else says why
set -euo pipefail

log() { echo "netns: $*" >&2; }

check() {
  if [[ $(id -u) != 0 ]]; then
    echo "not root (creating a network namespace and /etc/netns/ needs root)"
    return 1
  fi
  if ! command -v ip >/dev/null; then
    echo "no ip command (iproute2)"
    return 1
  fi
  local probe=capmaas-probe-$$
  if ! out=$(ip netns add "$probe" 2>&1); then
    echo "ip netns add failed: $out"
    return 1
  fi
  ip netns del "$probe"
}

create() {
  local name=$1 nameserver=$2 address
  shift 2
  ip netns add "$name"
  # A failed setup must not leave the namespace behind.
  trap 'delete "$name"' ERR
  ip -n "$name" link set lo up
  for address in "$@"; do
    ip -n "$name" addr add "$address/32" dev lo
  done
  mkdir -p "/etc/netns/$name"
  printf 'nameserver %s\noptions timeout:1 attempts:2\n' "$nameserver" >"/etc/netns/$name/resolv.conf"
  trap - ERR
}

delete() {
  local name=$1 pids
  if ip netns list | grep -qw -- "$name"; then
    pids=$(ip netns pids "$name" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      log "stopping processes left in $name: $(echo $pids)"
      kill -TERM $pids 2>/dev/null || true
      for _ in $(seq 50); do
        pids=$(ip netns pids "$name" 2>/dev/null || true)
        [[ -z $pids ]] && break
        sleep 0.1
      done
      [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$name"
  fi
  rm -rf "/etc/netns/$name"
  # The parent, when we made it and nothing else uses it.
  rmdir /etc/netns 2>/dev/null || true
}

delete_on_eof() {
  # Ctrl-C, and timeout(1) or a group kill's TERM, reach the whole process
  # group: ignore them so that the cleanup runs once the test is gone.
  trap '' INT HUP TERM
  cat >/dev/null || true
  delete "$1"
}

case ${1:-} in
  check) check ;;
  create) [[ $# -ge 3 ]] || { echo "usage: $0 create NAME NAMESERVER ADDRESS..." >&2; exit 2; }; shift; create "$@" ;;
  delete) [[ $# -eq 2 ]] || { echo "usage: $0 delete NAME" >&2; exit 2; }; delete "$2" ;;
  delete-on-eof) [[ $# -eq 2 ]] || { echo "usage: $0 delete-on-eof NAME" >&2; exit 2; }; delete_on_eof "$2" ;;
  *) echo "usage: $0 check | create NAME NAMESERVER ADDRESS... | delete NAME | delete-on-eof NAME" >&2; exit 2 ;;
esac
