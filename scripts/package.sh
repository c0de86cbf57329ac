#!/usr/bin/env bash
# Builds what ships from this checkout, into target/:
#
# * target/wheels/netchaos-VERSION-py3-none-manylinux_*.whl: `pip install`
#   puts the netchaos binary on the environment's PATH (maturin's `bin`
#   bindings, as ruff and uv ship theirs; pyproject.toml);
# * target/debian/netchaos_VERSION-1_ARCH.deb: the binary, every manual
#   page and the bash, zsh and fish completions (cargo-deb; Cargo.toml's
#   [package.metadata.deb]);
# * target/ARCH-unknown-linux-musl/dist/netchaos: a static binary for any
#   Linux of this machine's architecture (musl; ring builds with musl-gcc).
#
# All three are the `dist` profile: no debug info, stripped. The tools go
# into project-local places (maturin into target/package-venv, cargo-deb
# into target/tools), pinned; as root with apt-get, musl-tools (the static
# build) and dpkg-dev (dpkg-shlibdeps: the .deb's Depends) are installed.
#
# --check (scripts/test.sh's packages stage) also installs each into a
# clean place and uses it: the wheel into a fresh virtual environment, the
# .deb into a fresh Debian container (Podman; `--version`, `man
# netchaos`, `man netchaos-run`, bash completion of `netchaos ru`), and
# the wheel's and the static binary's `netchaos run` against a server on
# loopback (an HTTP fault, and HTTPS through the built-in mock: the TLS
# stack in the static build). Run it inside a network namespace of its
# own (test.sh does): the servers it starts listen on loopback only.
#
# Exit 0: all good; 1: a build or check failed; 3: a prerequisite is
# missing (CI counts it as a failure).
set -uo pipefail
cd "$(dirname "$0")/.."

say() { echo "package.sh: $*"; }
check=0
case "${1:-}" in
  --check) check=1 ;;
  --checks-only) check=2 ;; # (itself, in the network namespace it made)
  "") ;;
  *) say "usage: scripts/package.sh [--check]"; exit 2 ;;
esac
if [ "$check" = 1 ] && [ "$(id -u)" != 0 ]; then
  say "--check needs root (a network namespace, Podman)"
  exit 3
fi
MATURIN_VERSION=1.16.0
CARGO_DEB_VERSION=3.8.0
arch=$(uname -m)
musl_target="$arch-unknown-linux-musl"
deb_image() {
  echo "localhost/netchaos-deb-check:$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-none}")"
}
failed=()
fail() { failed+=("$1"); say "FAILED: $1" >&2; }

bin=target/dist/netchaos

# maturin, cargo-deb, and for the static build musl-gcc and the target.
tools() {
  pyenv="$PWD/target/package-venv"
  if [ ! -x "$pyenv/bin/maturin" ] || [ "$("$pyenv/bin/maturin" --version 2>/dev/null)" != "maturin $MATURIN_VERSION" ]; then
    python3 -m venv "$pyenv" && "$pyenv/bin/pip" install -q "maturin==$MATURIN_VERSION" ||
      { say "cannot install maturin $MATURIN_VERSION into $pyenv (python3-venv and PyPI needed)"; exit 3; }
  fi
  if [ "$(target/tools/bin/cargo-deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
    say "installing cargo-deb $CARGO_DEB_VERSION into target/tools"
    cargo install -q --locked --root target/tools --version "$CARGO_DEB_VERSION" cargo-deb ||
      { say "cannot install cargo-deb"; exit 3; }
  fi
  local need=()
  command -v musl-gcc >/dev/null || need+=(musl-tools)
  command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
  if ((${#need[@]})) && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  command -v dpkg-shlibdeps >/dev/null ||
    { say "cannot find dpkg-shlibdeps (apt install dpkg-dev): the .deb would not say what it depends on"; exit 3; }
  # (Captured, not piped into grep -q: under pipefail a grep that stops
  # early fails the pipe.)
  installed() { local t; t=$(rustup target list --installed 2>/dev/null); grep -qx "$musl_target" <<<"$t"; }
  installed || rustup target add "$musl_target" >&2 || true
  musl=1
  if ! command -v musl-gcc >/dev/null || ! installed; then
    musl=0
    say "no static build: needs musl-gcc (apt install musl-tools) and \`rustup target add $musl_target\`"
  fi

}

# The wheel, the .deb, the static binary.
build() {
  # The wheel's build is the dist binary the .deb packs too (one build).
  rm -f target/wheels/netchaos-*.whl
  "$pyenv/bin/maturin" build --quiet --out target/wheels || { say "the wheel did not build"; exit 1; }
  wheel=$(ls target/wheels/netchaos-*.whl)
  assets=target/dist-assets
  rm -rf "$assets" target/debian
  mkdir -p "$assets/completions"
  "$bin" man --dir "$assets/man" &&
    "$bin" completions bash >"$assets/completions/netchaos.bash" &&
    "$bin" completions zsh >"$assets/completions/_netchaos" &&
    "$bin" completions fish >"$assets/completions/netchaos.fish" ||
    { say "the manual pages or completions did not generate"; exit 1; }
  target/tools/bin/cargo-deb --quiet --no-build --profile dist -o target/debian/ >/dev/null ||
    { say "the .deb did not build"; exit 1; }
  deb=$(ls target/debian/netchaos_*.deb)
  static=
  if [ "$musl" = 1 ]; then
    cargo build --quiet --profile dist --target "$musl_target" || { say "the static build failed"; exit 1; }
    static="target/$musl_target/dist/netchaos"
  fi
  say "built $wheel"
  say "built $deb"
  if [ -n "$static" ]; then say "built $static"; fi
}

# Before the checks, which run offline: the musl build is there, and so
# is the container the .deb is installed into.
prepare_checks() {
  [ "$musl" = 1 ] || { say "no static build to check (musl-gcc or the $musl_target target missing)"; exit 3; }
  # The container the .deb is installed into: Debian's minbase with man-db
  # and bash-completion, built once per machine (it needs the network).
  if [ "$(id -u)" = 0 ] && command -v podman >/dev/null && command -v mmdebstrap >/dev/null; then
    export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/tests/support/containers.conf}"
    image=$(deb_image)
    if ! podman image exists "$image"; then
      say "building $image (Debian minbase, man-db, bash-completion) with mmdebstrap"
      mmdebstrap --quiet --variant=minbase --include=man-db,bash-completion "${image##*:}" - |
        podman import - "$image" >/dev/null 2>&1 || podman rmi -f "$image" >/dev/null 2>&1
    fi
  fi
}

# Each package installed into a clean place and used; in a network
# namespace of its own (the servers it starts listen on loopback).
checks() {
  wheel=$(ls target/wheels/netchaos-*.whl)
  deb=$(ls target/debian/netchaos_*.deb)
  static="target/$musl_target/dist/netchaos"
  tmp=$(mktemp -d)
  server_pid=
  cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -rf "$tmp"
  }
  trap cleanup EXIT
  want_version=$("$bin" --version)

  # The wheel, into a fresh virtual environment, offline.
  python3 -m venv "$tmp/venv" && "$tmp/venv/bin/pip" install -q --no-index --no-deps "$wheel" ||
    fail "pip install of the wheel"
  got=$("$tmp/venv/bin/netchaos" --version 2>&1)
  [ "$got" = "$want_version" ] && say "wheel: $got" || fail "wheel: --version said '$got', not '$want_version'"

  # A server on loopback and a resolver that answers nothing (no name leaves).
  printf 'hello\n' >"$tmp/index.html"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 -m http.server "$port" --bind 127.0.0.1 --directory "$tmp" >/dev/null 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$port/" && break
    sleep 0.1
  done
  echo 'nameserver 127.0.0.1' >"$tmp/resolv.conf"

  # A binary's `run`: the request reaches the server (200), a fault answers
  # in its place (503), and HTTPS to a mocked provider host goes through
  # the run's CA (the TLS stack at work).
  exercise() {
    local what=$1 nc=$2 code
    code=$("$nc" -q run --resolv-conf "$tmp/resolv.conf" -- curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")
    [ "$code" = 200 ] || { fail "$what: run without a fault gave '$code', not 200"; return; }
    code=$("$nc" -q run --resolv-conf "$tmp/resolv.conf" --fault http_status:status=503 -- \
      curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")
    [ "$code" = 503 ] || { fail "$what: http_status 503 gave '$code'"; return; }
    code=$("$nc" -q run --resolv-conf "$tmp/resolv.conf" --mock anthropic --fault http_status:status=529,envelope=auto -- \
      curl -s -o /dev/null -w '%{http_code}' https://api.anthropic.com/v1/messages \
      -H 'content-type: application/json' -d '{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}')
    [ "$code" = 529 ] || { fail "$what: HTTPS through the mock gave '$code', not 529"; return; }
    say "$what: run passes, faults HTTP, terminates HTTPS"
  }
  exercise wheel "$tmp/venv/bin/netchaos"

  if [ -n "$static" ]; then
    local headers
    headers=$(readelf -lW "$static"; readelf -d "$static" 2>/dev/null)
    if grep -q 'INTERP\|NEEDED' <<<"$headers"; then
      fail "static: $static is dynamically linked"
    else
      got=$("$static" --version 2>&1)
      [ "$got" = "$want_version" ] && say "static: $got (no interpreter, no shared libraries)" ||
        fail "static: --version said '$got'"
      exercise static "$static"
    fi
  fi

  # The .deb says what it needs (dpkg-shlibdeps found the C library).
  local depends
  depends=$(dpkg-deb -f "$deb" Depends)
  case "$depends" in
    *libc6*) say ".deb: Depends: $depends" ;;
    *) fail ".deb: its Depends ('$depends') does not name libc6" ;;
  esac

  # The .deb, into a fresh Debian container with man-db and bash-completion:
  # what a user who installs it gets.
  if [ "$(id -u)" != 0 ] || ! command -v podman >/dev/null || ! command -v mmdebstrap >/dev/null; then
    fail ".deb: installing it needs root, podman and mmdebstrap"
  else
    export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/tests/support/containers.conf}"
    image=$(deb_image)
    if ! podman image exists "$image"; then
      fail ".deb: no $image to install it into (mmdebstrap failed; see above)"
    else
      # shellcheck disable=SC2016 # expanded in the container
      out=$(podman run --rm --network none -v "$PWD/$deb:/tmp/netchaos.deb:ro" "$image" bash -c '
        dpkg -i /tmp/netchaos.deb >/dev/null || exit 1
        netchaos --version
        man -P cat netchaos 2>/dev/null | grep -c "netchaos" >/dev/null && echo "man: netchaos"
        man -P cat netchaos-run 2>/dev/null | grep -q -- "--fault" && echo "man: netchaos-run"
        # As an interactive shell loads it: bash-completion finds the
        # file the package put there, by the command name.
        source /usr/share/bash-completion/bash_completion
        _completion_loader netchaos
        COMP_WORDS=(netchaos ru); COMP_CWORD=1; COMP_LINE="netchaos ru"; COMP_POINT=${#COMP_LINE}
        "$(complete -p netchaos | sed "s/.*-F \([^ ]*\).*/\1/")" netchaos ru netchaos
        echo "completion: ${COMPREPLY[*]}"
        dpkg -r netchaos >/dev/null && hash -r && ! command -v netchaos && echo "removed"
      ' 2>&1)
      echo "$out" | sed 's/^/  /'
      grep -qx "$want_version" <<<"$out" || fail ".deb: --version in the container"
      grep -qx "man: netchaos" <<<"$out" && grep -qx "man: netchaos-run" <<<"$out" || fail ".deb: man pages"
      grep -q "^completion: .*\brun\b" <<<"$out" || fail ".deb: bash completion of 'netchaos ru'"
      grep -qx "removed" <<<"$out" || fail ".deb: dpkg -r"
    fi
  fi

}

case "$check" in
  0) tools && build; exit ;;
  1)
    tools && build && prepare_checks || exit
    exec unshare --net sh -c 'ip link set lo up && exec bash scripts/package.sh --checks-only'
    ;;
  2) checks ;;
esac
if ((${#failed[@]})); then
  say "${#failed[@]} check(s) failed:"
  for f in "${failed[@]}"; do echo "  - $f"; done
  exit 1
fi
say "all checks passed"
