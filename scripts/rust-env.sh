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

# The aarch64 cross toolchain (cross.sh, vm.sh): Debian's
# gcc-aarch64-linux-gnu, its libc and qemu-user (installed as root with
# apt-get), and rustup's target. Fails with what to install.
ensure_cross() {
  local t=aarch64-unknown-linux-gnu
  if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "$(basename "$0"): installing the aarch64 cross compiler and qemu-user"
      local pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; }
    fi
  fi
  command -v aarch64-linux-gnu-gcc >/dev/null ||
    { echo "$(basename "$0"): aarch64-linux-gnu-gcc not found: apt-get install gcc-aarch64-linux-gnu" >&2; return 1; }
  command -v qemu-aarch64 >/dev/null ||
    { echo "$(basename "$0"): qemu-aarch64 not found: apt-get install qemu-user" >&2; return 1; }
  if ! rustup target list --installed | grep -qx "$t"; then
    echo "$(basename "$0"): adding the rust target $t"
    rustup target add "$t"
  fi
}
