#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests.
# As root on a Debian-like machine it first installs the system packages the
# tests use (curl, python3, iproute2, nftables, iperf3, ...). With CI set, a
# test that lacks a tool or privilege it needs fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(curl python3 python3-requests iproute2 nftables iptables util-linux procps iperf3 socat)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "test.sh: not installing ${missing[*]} (needs root and apt-get); tests that need them will say so" >&2
  fi
fi

# The Python client tests use `requests` and a Toxiproxy client written by
# someone else (toxiproxy-python), from whichever python3 is first on PATH.
for mod in requests:requests toxiproxy:toxiproxy-python; do
  if ! python3 -c "import ${mod%%:*}" 2>/dev/null; then
    python3 -m pip install -q "${mod#*:}" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "${mod#*:}" 2>/dev/null ||
      echo "test.sh: could not pip install ${mod#*:}" >&2
  fi
done

source scripts/rust-env.sh
ensure_rust fmt:rustfmt clippy:clippy

echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy"
cargo clippy --all-targets -- -D warnings
echo "== cargo test"
cargo test --all-targets "$@"
# Tests that meet a kernel feature absent here check the error netchaos
# gives instead; name what they could not measure (cargo hides their output).
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
  ! unshare -n sh -c 'tc qdisc add dev lo root netem delay 1ms' 2>/dev/null; then
  echo "SKIPPED (kernel feature absent): sch_netem — tests/netem.rs checked the 'modprobe sch_netem' error instead of measuring netem delay"
fi
# aarch64: cross build, unit tests and a smoke test under qemu-aarch64.
# NETCHAOS_NO_CROSS=1 skips it locally (never in CI).
echo "== aarch64 (scripts/cross.sh)"
if [ -n "${NETCHAOS_NO_CROSS:-}" ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: aarch64 build (NETCHAOS_NO_CROSS is set)"
else
  bash scripts/cross.sh
fi
# Fuzzing: each cargo-fuzz target for a short bounded time where nightly
# is installed (tests/fuzz_corpus.rs replays the corpus in any case).
echo "== fuzz (scripts/fuzz.sh)"
fuzz_rc=0
bash scripts/fuzz.sh --seconds "${NETCHAOS_FUZZ_SECONDS:-15}" || fuzz_rc=$?
if [ "$fuzz_rc" = 3 ]; then
  echo "SKIPPED: fuzzing needs the nightly toolchain and cargo-fuzz; the corpus ran as regression tests"
elif [ "$fuzz_rc" != 0 ]; then
  echo "fuzzing found a crash (see above; the input is in fuzz/regressions/)" >&2
  exit 1
fi
