#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit and integration tests,
# the aarch64 cross build (tests under qemu) and a short fuzzing round.
# `scripts/test.sh --quick` runs the fast tier only (below).
#
# As root on a Debian-like machine it first installs what the tests use
# (apt: curl, python3, iproute2, nftables, iptables, iperf3, socat, nodejs,
# npm, a JDK, Go, chromium, python3-venv, podman, mmdebstrap, ...; a
# Debian base image for the container tests; into target/test-venv with
# pip: requests, httpx, h2, toxiproxy-python, anthropic, openai, google-genai, junitparser,
# ollama, boto3, grpcio, kubernetes-validate; into target/node-clients with npm:
# toxiproxy-node-client, openai, @anthropic-ai/sdk, @grpc/grpc-js), a Rust toolchain with rustup when
# there is none, and for the later stages an aarch64 cross compiler with
# qemu-user and cargo-fuzz on a nightly toolchain. Opt-outs:
# NETCHAOS_NO_CROSS=1 skips the aarch64 stage, NETCHAOS_NO_IMAGES=1 the
# example image builds (scripts/images.sh), NETCHAOS_NO_VM=1 the VM
# stage (scripts/vm.sh: Debian's kernel under qemu) and
# NETCHAOS_FUZZ_SECONDS=0 the fuzzing (all refused in CI).
#
# Every download and build happens first; then the tests run inside a
# network namespace of their own (only `lo`), so that no test can reach
# past this machine even by mistake. Every stage runs even when an earlier
# one failed, and the failures are listed at the end. With CI set, a test
# that lacks a tool or privilege it needs fails instead of skipping.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=()
stage() { echo; echo "== $*"; }
fail_stage() { failed+=("$1"); echo "test.sh: FAILED: $1" >&2; }

# The toolchain, formatting, lints and the layer map: the first stages of
# both tiers.
lint_stages() {
  source scripts/rust-env.sh
  ensure_rust fmt:rustfmt clippy:clippy
  stage "cargo fmt --check"
  cargo fmt --check || fail_stage "cargo fmt --check"
  # cargo fmt never sees modules declared inside a macro (the fault
  # registry's): every file, by name.
  find src tests examples build.rs -name '*.rs' -print0 |
    xargs -0 rustfmt --edition 2024 --check || fail_stage "rustfmt --check (every file)"
  stage "cargo clippy"
  cargo clippy --all-targets -- -D warnings || fail_stage "cargo clippy"
  # The layer map in src/lib.rs, true: no module outside it, no arrow
  # back up, no cycle.
  stage "module graph (scripts/modgraph.py)"
  python3 scripts/modgraph.py || fail_stage "module graph (scripts/modgraph.py)"
}

# --quick: the edit-test loop's tier — formatting, lints, and the tests
# that need neither root, nor a namespace, nor an installed client: the
# unit and in-process tests (the engines on a paused clock, the parsers,
# the fuzz corpus) and the command line's own checks. Half a minute once
# built (a few from scratch); it installs nothing but a Rust toolchain
# where there is none, and needs no root.
if [ "${1:-}" = "--quick" ]; then
  shift
  lint_stages
  stage "unit and in-process tests"
  cargo test --lib --bins "$@" || fail_stage "cargo test --lib --bins"
  cargo test --test fuzz_corpus --test bad_input "$@" || fail_stage "cargo test (corpus, bad input)"
  echo
  if ((${#failed[@]})); then
    echo "test.sh --quick: ${#failed[@]} stage(s) failed:"
    for f in "${failed[@]}"; do echo "  - $f"; done
    exit 1
  fi
  echo "test.sh --quick: all stages passed (the whole suite: scripts/test.sh)"
  exit 0
fi

packages=(curl python3 python3-requests iproute2 nftables iptables util-linux procps iperf3 socat ethtool)
# Headless Chromium opens the HTML reports (tests/report.rs).
command -v chromium >/dev/null || packages+=(chromium)
# Clients for the HTTPS tests, unless the machine has its own.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
command -v java >/dev/null || packages+=(default-jdk-headless)
command -v go >/dev/null || packages+=(golang-go)
# A container runtime for tests/containers.rs: rootful Podman with runc,
# catatonit for pods' infra containers, netavark and aardvark-dns (the
# tests' containers find each other by name on an internal network, which
# CNI cannot do; tests/support/containers.conf picks netavark), and
# mmdebstrap to build the base image from Debian packages (below; no image
# registry is needed).
packages+=(podman runc catatonit netavark aardvark-dns mmdebstrap)
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

# The image tests/containers.rs runs: Debian's minbase of the host's own
# release (the netchaos binary the tests mount in then finds its glibc),
# Python, nftables, iptables (kernels without nft_queue) and iproute2;
# built once per machine, kept by Podman.
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
export NETCHAOS_TEST_IMAGE="localhost/netchaos-test-base:${codename:-none}"
export CONTAINERS_CONF="$PWD/tests/support/containers.conf"
if [ "$(id -u)" = 0 ] && [ -n "$codename" ] && command -v podman >/dev/null &&
  command -v mmdebstrap >/dev/null && ! podman image exists "$NETCHAOS_TEST_IMAGE" 2>/dev/null; then
  echo "test.sh: building $NETCHAOS_TEST_IMAGE with mmdebstrap"
  { mmdebstrap --quiet --variant=minbase --include=python3-minimal,iproute2,nftables,iptables,procps \
      "$codename" - | podman import - "$NETCHAOS_TEST_IMAGE" >/dev/null 2>&1; } ||
    echo "test.sh: could not build $NETCHAOS_TEST_IMAGE" >&2
fi

# The Python client tests use `requests`, `httpx`, a Toxiproxy client
# written by someone else (toxiproxy-python) and Anthropic's, OpenAI's,
# Google's (Gemini), Ollama's and AWS's (boto3, for Bedrock) SDKs and
# grpcio. They go into a virtual environment of the project's
# (target/test-venv), never into the system's interpreter; its bin/ comes
# first on PATH for the tests, so their `python3` is the venv's. The Node,
# Java and Go clients are the machine's; Node's packages go to
# target/node-clients (below).
# The LLM SDKs and the HTTP clients are pinned: tests pin how these
# versions meet the faults (anthropic 2.17 began wrapping a broken
# stream in its own APIConnectionError; unpinned, a release turned CI red).
# h2 is httpx's HTTP/2 (`http2=True`) and the HTTP/2 test servers'.
# grpcio 1.75.0: from 1.75.1 on, a completed call's `_Rendezvous.__del__`
# can deadlock the client (grpc/grpc#43421; a CI run hung on it).
venv="$PWD/target/test-venv"
if [ ! -x "$venv/bin/python3" ]; then
  mkdir -p target
  python3 -m venv "$venv" 2>/dev/null ||
    { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null &&
      apt-get install -y -qq --no-install-recommends python3-venv >/dev/null && python3 -m venv "$venv"; } ||
    echo "test.sh: cannot make a Python virtual environment in $venv" >&2
fi
if [ -x "$venv/bin/python3" ]; then
  export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
fi
for mod in requests:requests==2.34.2 httpx:httpx==0.29.0 toxiproxy:toxiproxy-python anthropic:anthropic==2.17.0 \
  openai:openai==3.60.0 google.genai:google-genai==3.6.1 ollama:ollama==0.6.3 \
  boto3:boto3==1.43.11 grpc:grpcio==1.75.0 h2:h2==4.4.1 junitparser:junitparser==3.2.0 \
  kubernetes_validate:kubernetes-validate==1.37.0; do
  spec=${mod#*:}
  if [[ $spec == *==* ]]; then
    have=$(python3 -c "import importlib.metadata as m; print(m.version('${spec%%==*}'))" 2>/dev/null)
    [ "$have" = "${spec#*==}" ] && continue
  elif python3 -c "import ${mod%%:*}" 2>/dev/null; then
    continue
  fi
  if [ -n "${VIRTUAL_ENV:-}" ]; then
    python3 -m pip install -q "$spec" 2>/dev/null || echo "test.sh: could not pip install $spec" >&2
  else
    echo "test.sh: not installing $spec outside a virtual environment; tests that need it will say so" >&2
  fi
done

# toxiproxy-node-client (npm, pinned), for the Toxiproxy drop-in tests,
# OpenAI's and Anthropic's Node SDKs (pinned, as above), for the LLM fault
# tests, and grpc-js (pinned) for the gRPC ones; installed again when one
# is missing or another version.
node_clients="$PWD/target/node-clients"
node_packages=(toxiproxy-node-client@4.1.0 openai@6.49.0 @anthropic-ai/sdk@1.17.0 @grpc/grpc-js@1.14.1)
node_stale=0
for pkg in "${node_packages[@]}"; do
  name=${pkg%@*}
  [ -z "$name" ] && name=$pkg
  want=${pkg#"$name"}
  have=$(node -p "require('$node_clients/node_modules/$name/package.json').version" 2>/dev/null) || have=
  if [ -z "$have" ] || { [ -n "$want" ] && [ "$have" != "${want#@}" ]; }; then
    node_stale=1
  fi
done
if command -v npm >/dev/null && [ "$node_stale" = 1 ]; then
  npm install --silent --no-audit --no-fund --prefix "$node_clients" "${node_packages[@]}" >/dev/null 2>&1 ||
    echo "test.sh: could not npm install ${node_packages[*]}" >&2
fi
if [ -d "$node_clients/node_modules/toxiproxy-node-client" ]; then
  export NETCHAOS_NODE_MODULES="$node_clients/node_modules"
fi

lint_stages

stage "cargo test (build)"
if ! cargo test --all-targets --no-run "$@"; then
  fail_stage "cargo test (build)"
else
  # The tests themselves, in a network namespace of their own: root makes
  # one directly; a user needs an (unprivileged) user namespace for it.
  log=$(mktemp)
  # Kept until the summary at the end has listed the failing tests.
  trap 'rm -f "$log" "$log.failures"' EXIT
  inner='ip link set lo up && exec cargo test --offline --all-targets --no-fail-fast "$@"'
  if [ "$(id -u)" = 0 ]; then
    isolate=(unshare --net)
  else
    isolate=(unshare --user --map-current-user --net)
  fi
  if ! "${isolate[@]}" true 2>/dev/null; then
    if [ -n "${CI:-}" ]; then
      echo "test.sh: cannot make a network namespace for the tests (${isolate[*]})" >&2
      isolate=(false)
    else
      echo "test.sh: cannot make a network namespace for the tests; running them in this one" >&2
      isolate=(env)
      inner='exec cargo test --offline --all-targets --no-fail-fast "$@"'
    fi
  fi
  stage "cargo test (in a network namespace of its own: ${isolate[*]})"
  "${isolate[@]}" sh -c "$inner" sh "$@" 2>&1 | tee "$log"
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    fail_stage "cargo test"
    # The failing tests, and the test binaries they are in.
    grep -E '^test .* FAILED$|^    [a-z_:0-9]+$|error: test failed|^ +`--(test|lib|bin) ' "$log" |
      sed 's/^/  /' >"$log.failures" || true
  fi
fi

# Tests that meet a kernel feature absent here check the error netchaos
# gives instead; name what they could not measure (cargo hides their output).
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
  ! unshare -n sh -c 'tc qdisc add dev lo root netem delay 1ms' 2>/dev/null; then
  echo "SKIPPED (kernel feature absent): sch_netem — tests/netem.rs checked the 'modprobe sch_netem' error here; the VM stage measures netem on Debian's kernel"
fi

# The example images, built from this checkout with Podman and checked
# (scripts/images.sh; stand-in base images where no registry is
# reachable). NETCHAOS_NO_IMAGES=1 skips it locally (never in CI).
stage "images (scripts/images.sh)"
if [ -n "${NETCHAOS_NO_IMAGES:-}" ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: the example images (NETCHAOS_NO_IMAGES is set)"
else
  images_rc=0
  bash scripts/images.sh || images_rc=$?
  if [ "$images_rc" = 3 ] && [ -z "${CI:-}" ]; then
    echo "SKIPPED: the example images (a prerequisite is missing; see above)"
  elif [ "$images_rc" != 0 ]; then
    fail_stage "images (scripts/images.sh)"
  fi
fi

# What ships: the wheel, the .deb and the static binary, built and each
# installed into a clean place and used (scripts/package.sh --check).
# NETCHAOS_NO_PACKAGES=1 skips it locally (never in CI).
stage "packages (scripts/package.sh --check)"
if [ -n "${NETCHAOS_NO_PACKAGES:-}" ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: the packages (NETCHAOS_NO_PACKAGES is set)"
else
  package_rc=0
  bash scripts/package.sh --check || package_rc=$?
  if [ "$package_rc" = 3 ] && [ -z "${CI:-}" ]; then
    echo "SKIPPED: the packages (a prerequisite is missing; see above)"
  elif [ "$package_rc" != 0 ]; then
    fail_stage "packages (scripts/package.sh --check)"
  fi
fi

# aarch64: cross build, unit tests and a smoke test under qemu-aarch64.
# NETCHAOS_NO_CROSS=1 skips it locally (never in CI).
stage "aarch64 (scripts/cross.sh)"
if [ -n "${NETCHAOS_NO_CROSS:-}" ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: aarch64 build (NETCHAOS_NO_CROSS is set)"
else
  bash scripts/cross.sh || fail_stage "aarch64 (scripts/cross.sh)"
fi

# Debian's own kernel (6.1) under qemu: netem measured on traffic, and run,
# attach and the SYN gate on that kernel (tests/vm). NETCHAOS_VM_ARCHES
# picks the architectures (default both); NETCHAOS_NO_VM=1 skips the stage
# locally (never in CI).
stage "VM: Debian's kernel under qemu (scripts/vm.sh)"
if [ -n "${NETCHAOS_NO_VM:-}" ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: the VM stage (NETCHAOS_NO_VM is set)"
else
  for vm_arch in ${NETCHAOS_VM_ARCHES:-x86_64 aarch64}; do
    vm_rc=0
    bash scripts/vm.sh "$vm_arch" || vm_rc=$?
    if [ "$vm_rc" = 3 ] && [ -z "${CI:-}" ]; then
      echo "SKIPPED: the $vm_arch VM (a prerequisite is missing; see above)"
    elif [ "$vm_rc" != 0 ]; then
      fail_stage "VM $vm_arch (scripts/vm.sh)"
    fi
  done
fi

# Fuzzing: each cargo-fuzz target for a short bounded time where nightly
# is installed (tests/fuzz_corpus.rs replays the corpus in any case).
stage "fuzz (scripts/fuzz.sh)"
fuzz_secs=${NETCHAOS_FUZZ_SECONDS:-15}
if [ "$fuzz_secs" = 0 ] && [ -z "${CI:-}" ]; then
  echo "SKIPPED: fuzzing (NETCHAOS_FUZZ_SECONDS=0)"
else
  fuzz_rc=0
  bash scripts/fuzz.sh --seconds "$((fuzz_secs > 0 ? fuzz_secs : 15))" || fuzz_rc=$?
  if [ "$fuzz_rc" = 3 ]; then
    echo "SKIPPED: fuzzing needs the nightly toolchain and cargo-fuzz; the corpus ran as regression tests"
  elif [ "$fuzz_rc" = 4 ]; then
    fail_stage "fuzz (the fuzz targets did not build)"
  elif [ "$fuzz_rc" != 0 ]; then
    fail_stage "fuzz (a crash: the input is in fuzz/regressions/)"
  fi
fi

echo
if ((${#failed[@]})); then
  echo "test.sh: ${#failed[@]} stage(s) failed:"
  for f in "${failed[@]}"; do echo "  - $f"; done
  if [ -n "${log:-}" ] && [ -s "$log.failures" ]; then
    echo "failing tests:"
    cat "$log.failures"
  fi
  exit 1
fi
echo "test.sh: all stages passed"
