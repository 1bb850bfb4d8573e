#!/usr/bin/env bash
# Builds the static binary, then the FROM-scratch image around it.
#
#   deploy/build-image.sh [IMAGE]     default IMAGE: localhost/capmaas:0.1.0
#                                     (the name deploy/manager.yaml uses)
#   CONTAINER_ENGINE=podman deploy/build-image.sh
#   CONTAINER_ENGINE=buildah deploy/build-image.sh   (daemonless; tests/image.rs uses it)
#
# Then push it: docker push IMAGE (podman push IMAGE; buildah push IMAGE
# docker://IMAGE) and set it in the Deployment (deploy/README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
image=${1:-localhost/capmaas:0.1.0}
engine=${CONTAINER_ENGINE:-docker}
"$root/deploy/build-static.sh"
# The build context is the binary alone, not target/ (gigabytes of objects).
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "${CARGO_TARGET_DIR:-$root/target}/x86_64-unknown-linux-musl/release/capmaas" "$context/"
"$engine" build -f "$root/deploy/Dockerfile" -t "$image" "$context"
