#!/usr/bin/env bash
# Builds the fully static capmaas binary (musl; rustls + ring, no OpenSSL, no
# libc at run time) and prints its size.
#
#   deploy/build-static.sh            -> target/x86_64-unknown-linux-musl/release/capmaas
#   CARGO_TARGET_DIR=DIR deploy/build-static.sh   -> DIR/x86_64-unknown-linux-musl/release/capmaas
#
# Installs what is missing: the rustup target and musl-gcc (Debian/Ubuntu
# package musl-tools; ring compiles a little C and assembly with it).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
target=x86_64-unknown-linux-musl

if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
if ! command -v musl-gcc >/dev/null; then
  if command -v apt-get >/dev/null; then
    sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq musl-tools
  else
    echo "musl-gcc not found: install musl-tools (or a musl cross compiler)" >&2
    exit 1
  fi
fi

cd "$root"
# The release profile (Cargo.toml) already asks for size: opt-level z, LTO,
# one codegen unit, stripped, panic = abort.
CC_x86_64_unknown_linux_musl=musl-gcc \
  cargo build --locked --release --target "$target" --bin capmaas
bin=${CARGO_TARGET_DIR:-$root/target}/$target/release/capmaas
bytes=$(stat -c %s "$bin")
echo "$bin"
echo "size: $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.2f MiB", b / 1048576 }'))"
if command -v file >/dev/null; then file "$bin"; fi
