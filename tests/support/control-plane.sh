#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver from tests/k8s-testbin)
# on free loopback ports, for tests and for the local lab.
#
#   control-plane.sh start DIR   certificates, etcd, kube-apiserver, admin
#                                kubeconfig (DIR/kubeconfig), Cluster API CRDs
#                                and this project's crds/;
#                                returns once /readyz answers and every CRD is
#                                Established; DIR/env holds the addresses
#   control-plane.sh stop DIR    stops both processes (idempotent)
#   control-plane.sh stop-on-eof DIR
#                                waits until its standard input closes, then
#                                stops: a test process keeps the write end of
#                                a pipe open, so its exit (even a panic or a
#                                kill -9) tears the control plane down and
#                                removes DIR (kept if CAPMAAS_KEEP_TEST_DIRS
#                                is set)
#   control-plane.sh cert DIR NAME IP...
#                                issues DIR/pki/NAME.{crt,key}, a serving
#                                certificate for the given IPs and localhost,
#                                signed by the control plane's CA (webhooks)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
capi_version=$(sed -n 's/^\tsigs.k8s.io\/cluster-api v\([^ ]*\).*$/\1/p' "$root/tests/capi-testbin/go.mod" | head -n1)
capi_version=${capi_version:-1.13.6}

log() { echo "control-plane: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

issue_cert() { # DIR NAME SUBJECT EXTFILE-CONTENT
  local pki=$1/pki name=$2 subject=$3 ext=$4
  openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$pki/$name.key" \
    -out "$pki/$name.csr" 2>/dev/null
  printf '%b' "$ext" >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

make_pki() {
  local dir=$1 pki=$1/pki
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=capmaas-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  issue_cert "$dir" apiserver "/CN=kube-apiserver" \
    'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n'
  # O=system:masters makes the holder cluster-admin under RBAC.
  issue_cert "$dir" admin "/O=system:masters/CN=admin" \
    'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n'
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

wait_for() { # SECONDS DESCRIPTION COMMAND...
  local deadline=$(($(date +%s) + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    if (($(date +%s) > deadline)); then
      log "timed out waiting for $what"
      return 1
    fi
    sleep 0.2
  done
}

capi_crd_dirs() {
  local mod
  mod=$(cd "$root/tests/capi-testbin" && go mod download -json "sigs.k8s.io/cluster-api@v$capi_version" |
    sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  [[ -d $mod ]] || { log "cannot find sigs.k8s.io/cluster-api@v$capi_version in the module cache"; return 1; }
  echo "$mod/config/crd/bases $mod/bootstrap/kubeadm/config/crd/bases $mod/controlplane/kubeadm/config/crd/bases"
}

start() {
  local dir=$1 bin
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # A failed start must not leave half a control plane running.
  trap 'stop "$dir"' ERR
  bin=$("$root/tests/k8s-testbin/build.sh")
  make_pki "$dir"
  local etcd_port peer_port api_port
  # Three distinct ports: a port just closed may be handed out again.
  etcd_port=$(free_port)
  peer_port=$(free_port)
  while [[ $peer_port == "$etcd_port" ]]; do peer_port=$(free_port); done
  api_port=$(free_port)
  while [[ $api_port == "$etcd_port" || $api_port == "$peer_port" ]]; do api_port=$(free_port); done

  "$bin/etcd" --name=default --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="default=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level=warn \
    --listen-metrics-urls="" </dev/null >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  wait_for 30 etcd curl -sf "http://127.0.0.1:$etcd_port/health"

  # --advertise-address: without a default route the server refuses to start.
  "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none \
    --profiling=false --cert-dir="$dir/certs" </dev/null >"$dir/apiserver.log" 2>&1 &
  echo $! >"$dir/apiserver.pid"

  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $dir/pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $dir/pki/admin.crt
    client-key: $dir/pki/admin.key
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
EOF
  cat >"$dir/env" <<EOF
SERVER=https://127.0.0.1:$api_port
ETCD=http://127.0.0.1:$etcd_port
KUBECONFIG=$dir/kubeconfig
BIN=$bin
EOF
  wait_for 90 "kube-apiserver /readyz" curl -sf --cacert "$dir/pki/ca.crt" \
    --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "https://127.0.0.1:$api_port/readyz" ||
    { tail -n 30 "$dir/apiserver.log" >&2; return 1; }

  # The Cluster API base CRDs carry no conversion stanza (kustomize adds the
  # webhook in a release), so both served versions use conversion None and
  # no webhook is needed. Tests create v1beta2 objects only: with None, a
  # v1beta1 read of a v1beta2 object would only have its apiVersion rewritten.
  local kubectl="$bin/kubectl --kubeconfig=$dir/kubeconfig"
  for d in $(capi_crd_dirs); do
    $kubectl apply --server-side -f "$d" >/dev/null
  done
  # Our own CRDs too, so tests never race each other installing them.
  if compgen -G "$root/crds/*.yaml" >/dev/null; then
    $kubectl apply --server-side -f "$root/crds" >/dev/null
  fi
  $kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
  trap - ERR
  log "ready at https://127.0.0.1:$api_port (kubeconfig $dir/kubeconfig)"
}

stop() {
  local dir=$1 name pid
  for name in apiserver etcd; do
    [[ -f $dir/$name.pid ]] || continue
    pid=$(cat "$dir/$name.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$name.pid"
  done
}

stop_on_eof() {
  # Ctrl-C in a terminal reaches the whole process group: ignore it here so
  # the teardown below still runs once the test process is gone.
  trap '' INT HUP TERM
  cat >/dev/null || true
  stop "$1"
  # Its etcd data and logs go with it, unless kept for a post-mortem.
  [[ -n ${CAPMAAS_KEEP_TEST_DIRS:-} ]] || rm -rf -- "$1"
}

case ${1:-}:${2:+dir} in
  start:dir) start "$2" ;;
  stop:dir) stop "$2" ;;
  stop-on-eof:dir) stop_on_eof "$2" ;;
  cert:dir)
    [[ $# -ge 4 ]] || { echo "usage: $0 cert DIR NAME IP..." >&2; exit 2; }
    dir=$2 name=$3; shift 3
    sans="DNS:localhost"
    for ip in "$@"; do sans="$sans,IP:$ip"; done
    issue_cert "$dir" "$name" "/CN=$name" \
      "subjectAltName=$sans\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    ;;
  *)
    echo "usage: $0 {start|stop|stop-on-eof} DIR | cert DIR NAME IP..." >&2
    exit 2
    ;;
esac
