#!/usr/bin/env bash
# Builds netchaos, puts it on PATH, and runs its demo: a real client against
# a built-in server through each fault. Installs the Rust toolchain with
# rustup if it is missing.
#
# The binary is the one that ships (the `dist` profile: stripped, 14 MB
# where the release build with its line tables is 79 MB), copied to
# ~/.local/bin/netchaos (NETCHAOS_NO_INSTALL=1 leaves it in target/dist/
# only); `cargo install --path .` puts it in ~/.cargo/bin instead.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/rust-env.sh
ensure_rust
echo "demo.sh: building netchaos (the first build takes a few minutes)" >&2
cargo build --profile dist
bin=./target/dist/netchaos
if [ -z "${NETCHAOS_NO_INSTALL:-}" ]; then
  mkdir -p "$HOME/.local/bin"
  cp "$bin" "$HOME/.local/bin/netchaos.new" && mv "$HOME/.local/bin/netchaos.new" "$HOME/.local/bin/netchaos"
  echo "demo.sh: installed netchaos as $HOME/.local/bin/netchaos" >&2
  case ":$PATH:" in
    *":$HOME/.local/bin:"*) ;;
    *) echo "demo.sh: $HOME/.local/bin is not on your PATH; add it (export PATH=\"\$HOME/.local/bin:\$PATH\") or run $bin" >&2 ;;
  esac
fi
exec "$bin" demo "$@"
