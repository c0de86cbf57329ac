#!/usr/bin/env bash
# Builds netchaos and runs its demo: a real client against a built-in server
# through each fault. Installs the Rust toolchain with rustup if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] || {
    echo "demo.sh: installing the Rust toolchain with rustup (https://rustup.rs)"
    command -v curl >/dev/null || { echo "demo.sh: need curl (apt-get install curl) or a Rust toolchain" >&2; exit 1; }
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  }
  export PATH="$HOME/.cargo/bin:$PATH"
fi
cargo build --release --quiet
exec ./target/release/netchaos demo "$@"
