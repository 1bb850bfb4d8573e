#!/usr/bin/env bash
# Builds the Cluster API core manager (`cluster-api-manager`) and `clusterctl` at the
# version pinned in go.mod (tool directives) into the ignored cache directory, only
# when go.mod or go.sum changed. Next to the binaries it copies the manifests the
# conformance test needs from the same module version: the CRD bases
# (manifests/crd-bases/*.yaml) and the webhook configurations
# (manifests/webhook.yaml). Prints the directory; `.cache/capi-testbin` is a stable
# symlink to it.
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
stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
out=$cache/capi-testbin-$stamp
if [[ ! -x $out/cluster-api-manager || ! -x $out/clusterctl || ! -f $out/manifests/webhook.yaml ]]; then
  echo "building cluster-api $capi_version into $out (cold builds take many minutes)" >&2
  start=$(date +%s)
  rm -rf "$out.tmp"
  mkdir -p "$out.tmp/manifests"
  pkg=sigs.k8s.io/cluster-api/version
  # One `go build` for both mains lets the compiler share the common dependency tree.
  (cd "$here" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $pkg.gitVersion=$capi_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
    -o "$out.tmp/" sigs.k8s.io/cluster-api sigs.k8s.io/cluster-api/cmd/clusterctl)
  mv "$out.tmp/cluster-api" "$out.tmp/cluster-api-manager"
  src=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  cp -r "$src/config/crd/bases" "$out.tmp/manifests/crd-bases"
  cp "$src/config/webhook/manifests.yaml" "$out.tmp/manifests/webhook.yaml"
  echo "$capi_version" > "$out.tmp/VERSION"
  # The module cache is read-only; the copies must be writable so the cache dir can be removed.
  chmod -R u+w "$out.tmp/manifests"
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "built cluster-api $capi_version in $(( $(date +%s) - start ))s" >&2
fi
ln -sfn "$(basename "$out")" "$cache/capi-testbin"
echo "$cache/capi-testbin"
