# Sourced by demo.sh, test.sh, cross.sh and vm.sh: puts a Rust toolchain on PATH, installing
# it with rustup (https://rustup.rs) when the machine has none, with the
# components the given script needs (rustfmt and clippy for the tests).
# shellcheck shell=bash
ensure_rust() {
  if ! command -v cargo >/dev/null; then
    if [ ! -x "$HOME/.cargo/bin/cargo" ]; then
      echo "$(basename "$0"): installing the Rust toolchain with rustup (https://rustup.rs)"
      command -v curl >/dev/null || {
        echo "$(basename "$0"): need curl (apt-get install curl) or a Rust toolchain" >&2
        exit 1
      }
      curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    fi
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  local c
  for c in "$@"; do
    if ! cargo "${c%%:*}" --version >/dev/null 2>&1; then
      rustup component add "${c#*:}"
    fi
  done
}

# Cargo's settings for the aarch64 cross build (cross.sh, vm.sh): Debian's
# gcc-aarch64-linux-gnu links, and qemu-user runs what cargo runs.
cross_env() {
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
  export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
}
