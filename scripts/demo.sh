#!/usr/bin/env bash
# Builds netchaos and runs its demo: a real client against a built-in server
# through each fault. Installs the Rust toolchain with rustup if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust-env.sh
ensure_rust
cargo build --release --quiet
exec ./target/release/netchaos demo "$@"
