#!/usr/bin/env bash
# Builds the Cluster API managers and tools at the versions pinned in go.mod
# into the ignored cache directory, only when go.mod, go.sum or the Go
# sources here changed:
#   cluster-api-manager  the core manager          (sigs.k8s.io/cluster-api)
#   kcp-manager          KubeadmControlPlane       (.../controlplane/kubeadm)
#   cabpk-manager        kubeadm bootstrap         (.../bootstrap/kubeadm)
#   clusterctl                                     (.../cmd/clusterctl)
#   workload-sim         the KCP lab's machines on Cluster API's in-memory
#                        workload cluster server   (./workload-sim)
# Next to the binaries it copies the manifests the tests need from the same
# module version: manifests/{core,kcp,cabpk}/crd-bases/*.yaml and
# manifests/{core,kcp,cabpk}/webhook.yaml. Prints that directory (keyed by
# the inputs' hash, so worktrees with different go.mod files sharing one
# cache never see each other's build); `.cache/capi-testbin` is a symlink
# to the last one built or used, for people.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CAPMAAS_TEST_CACHE:-$root/.cache}
capi_version=$(sed -n 's/^\tsigs.k8s.io\/cluster-api \(v[^ ]*\).*$/\1/p' "$here/go.mod" | head -n1)
if [[ -z $capi_version ]]; then
  echo "cannot find the sigs.k8s.io/cluster-api version in $here/go.mod" >&2
  exit 1
fi
major=${capi_version#v}; major=${major%%.*}
minor=${capi_version#v*.}; minor=${minor%%.*}
stamp=$(cat "$here/go.mod" "$here/go.sum" "$here"/workload-sim/*.go | sha256sum | cut -c1-16)
out=$cache/capi-testbin-$stamp
binaries=(cluster-api-manager kcp-manager cabpk-manager clusterctl workload-sim)
complete() {
  local b
  for b in "${binaries[@]}"; do [[ -x $out/$b ]] || return 1; done
  [[ -f $out/manifests/cabpk/webhook.yaml ]]
}
if ! complete; then
  echo "building cluster-api $capi_version into $out (cold builds take many minutes)" >&2
  start=$(date +%s)
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/manifests"
  pkg=sigs.k8s.io/cluster-api/version
  ldflags="-s -w -X $pkg.gitVersion=$capi_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  # One `go build` for most mains lets the compiler share the common
  # dependency tree. The two kubeadm mains share a package name, hence a
  # second build for the bootstrap one (its dependencies are cached by then).
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp/" \
    sigs.k8s.io/cluster-api sigs.k8s.io/cluster-api/controlplane/kubeadm \
    sigs.k8s.io/cluster-api/cmd/clusterctl ./workload-sim)
  mv "$out.tmp/cluster-api" "$out.tmp/cluster-api-manager"
  mv "$out.tmp/kubeadm" "$out.tmp/kcp-manager"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp/cabpk-manager" \
    sigs.k8s.io/cluster-api/bootstrap/kubeadm)
  src=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  for provider in core:. kcp:controlplane/kubeadm cabpk:bootstrap/kubeadm; do
    name=${provider%%:*} dir=$src/${provider#*:}
    mkdir -p "$out.tmp/manifests/$name"
    cp -r "$dir/config/crd/bases" "$out.tmp/manifests/$name/crd-bases"
    cp "$dir/config/webhook/manifests.yaml" "$out.tmp/manifests/$name/webhook.yaml"
  done
  echo "$capi_version" > "$out.tmp/VERSION"
  # The module cache is read-only; the copies must be writable so the cache dir can be removed.
  chmod -R u+w "$out.tmp/manifests"
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "built cluster-api $capi_version in $(( $(date +%s) - start ))s" >&2
fi
ln -sfn "$(basename "$out")" "$cache/capi-testbin"
echo "$out"
