#!/usr/bin/env bash
# Builds the k8s-testbin multi-call binary (kube-apiserver, etcd, kubectl) into
# the ignored cache directory, only when go.mod, go.sum or main.go changed.
# Prints the directory holding the binary and its symlinks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CAPMAAS_TEST_CACHE:-$root/.cache}
kube_version=$(sed -n 's/^\tk8s.io\/kubernetes v\(.*\)$/\1/p; s/^require k8s.io\/kubernetes v\(.*\)$/\1/p' "$here/go.mod" | head -n1)
minor=${kube_version#1.}; minor=${minor%%.*}
stamp=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)
out=$cache/k8s-testbin-$stamp
if [[ ! -x $out/k8s-testbin ]]; then
  echo "building k8s-testbin v$kube_version into $out (cold builds take minutes)" >&2
  start=$(date +%s)
  mkdir -p "$out.tmp"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=v$kube_version -X k8s.io/component-base/version.gitTreeState=clean" \
    -o "$out.tmp/k8s-testbin" .)
  for n in kube-apiserver etcd kubectl; do ln -sf k8s-testbin "$out.tmp/$n"; done
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "built k8s-testbin in $(( $(date +%s) - start ))s" >&2
fi
ln -sfn "$(basename "$out")" "$cache/k8s-testbin"
echo "$cache/k8s-testbin"
