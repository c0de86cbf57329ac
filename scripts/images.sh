#!/usr/bin/env bash
# Builds the example images from this checkout with Podman, as a user
# would with `docker build`, and checks them:
#
# * examples/docker/Dockerfile: the binary runs (`--version`, `check`), it
#   is the stripped `dist` build, nftables/iproute2/iptables are in;
# * examples/toxiproxy-image/Dockerfile: started as Toxiproxy's image is,
#   it announces its API as Toxiproxy does, and the API flow works through
#   the image's own /toxiproxy-cli (create, toxic add, list, inspect,
#   toggle, delete) — what compose health checks and CI scripts call.
#
# Where the base images the Dockerfiles name cannot be pulled (no registry
# reachable), they are stood in for by images built here — Debian's
# packages with mmdebstrap, and the Rust toolchain from rustup for the
# build stage — passed as the Dockerfiles' RUST_IMAGE and BASE_IMAGE build
# arguments (the stand-ins are kept for the next run; the images built
# from this checkout and everything started are removed).
#
# Exit 0: all good; 1: a check failed; 3: a prerequisite is missing (not
# root, no podman or mmdebstrap), which CI counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."

say() { echo "images.sh: $*"; }
if [ "$(id -u)" != 0 ] || ! command -v podman >/dev/null || ! command -v mmdebstrap >/dev/null; then
  say "needs root, podman and mmdebstrap"
  exit 3
fi
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/tests/support/containers.conf}"
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
[ -n "$codename" ] || { say "cannot tell this Debian release"; exit 3; }

tag="nctest-img-$$"
app="localhost/$tag-netchaos"
toxi="localhost/$tag-toxiproxy"
net="$tag-net"
# The builds leave their build stage as untagged images: those that were
# not there before go too.
untagged() { podman images -q --filter dangling=true | sort -u; }
before=$(untagged)
cleanup() {
  podman rm -f -t 0 "$tag-toxi" >/dev/null 2>&1
  podman network rm -f "$net" >/dev/null 2>&1
  podman rmi -f "$app" "$toxi" >/dev/null 2>&1
  comm -13 <(echo "$before") <(untagged) | xargs -r podman rmi -f >/dev/null 2>&1
}
trap cleanup EXIT

# The base images: the real ones where they can be pulled, else stand-ins.
# A stand-in trusts what this machine trusts (its own CAs, as where
# traffic passes a TLS-inspecting proxy): the build stage fetches crates.
trust_hook='cp -a /usr/local/share/ca-certificates/. "$1/usr/local/share/ca-certificates/" 2>/dev/null; chroot "$1" update-ca-certificates >/dev/null 2>&1 || true'

args=()
if ! timeout 60 podman pull -q docker.io/library/debian:bookworm-slim >/dev/null 2>&1 ||
  ! timeout 300 podman pull -q docker.io/library/rust:1-bookworm >/dev/null 2>&1; then
  base="localhost/netchaos-stand-in-debian:$codename"
  rust="localhost/netchaos-stand-in-rust:$codename"
  if ! podman image exists "$base"; then
    say "no registry: building $base from Debian packages"
    mmdebstrap --quiet --variant=minbase --include=ca-certificates --customize-hook="$trust_hook" \
      "$codename" - |
      podman import - "$base" >/dev/null 2>&1 ||
      { podman rmi -f "$base" >/dev/null 2>&1; say "could not build $base"; exit 1; }
  fi
  rustup_init="https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  if ! podman image exists "$rust"; then
    say "no registry: building $rust (Debian packages, the toolchain from rustup)"
    mmdebstrap --quiet --variant=minbase --include=ca-certificates,curl,gcc,libc6-dev,git \
      --customize-hook="$trust_hook" \
      --customize-hook="chroot \"\$1\" sh -c 'set -e; export CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup; curl -sSfo /tmp/rustup-init $rustup_init; chmod +x /tmp/rustup-init; /tmp/rustup-init -q -y --profile minimal --default-toolchain stable --no-modify-path >/dev/null; rm /tmp/rustup-init; /usr/local/cargo/bin/cargo --version'" \
      "$codename" - |
      podman import --change 'ENV CARGO_HOME=/usr/local/cargo' --change 'ENV RUSTUP_HOME=/usr/local/rustup' \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$rust" >/dev/null 2>&1 && podman run --rm "$rust" cargo --version ||
      { podman rmi -f "$rust" >/dev/null 2>&1; say "could not build $rust"; exit 1; }
  fi
  args=(--build-arg "BASE_IMAGE=$base" --build-arg "RUST_IMAGE=$rust")
fi

fail=0
check() { # check WHAT COMMAND...: runs it, says ok or FAILED
  local what=$1; shift
  if "$@"; then say "ok: $what"; else say "FAILED: $what"; fail=1; fi
}

build() { # build DOCKERFILE IMAGE: quietly; the build's output if it fails
  local file=$1 image=$2 t0=$SECONDS log
  log=$(mktemp)
  if podman build "${args[@]}" -f "$file" -t "$image" . >"$log" 2>&1; then
    say "built $image from $file in $((SECONDS - t0)) s"
    rm -f "$log"
  else
    say "FAILED: podman build -f $file:"
    tail -40 "$log"
    rm -f "$log"
    return 1
  fi
}

# (Both Dockerfiles' build stages are the same: the second build takes it
# from the first's cache.)
if build examples/docker/Dockerfile "$app"; then
  version=$(podman run --rm "$app" --version 2>&1)
  check "netchaos --version in the image ($version)" grep -q '^netchaos ' <<<"$version"
  check "netchaos check flaky in the image" podman run --rm "$app" check flaky
  size=$(podman run --rm --entrypoint stat "$app" -c %s /usr/local/bin/netchaos)
  check "the shipped binary is stripped ($size bytes, under 25 MB)" test "$size" -lt 25000000
  check "nft, ip and iptables are in the image" \
    podman run --rm --entrypoint sh "$app" -c 'for c in nft ip iptables-restore; do command -v $c >/dev/null || exit 1; done' 
else
  fail=1
fi

if build examples/toxiproxy-image/Dockerfile "$toxi"; then
  podman network create --internal "$net" >/dev/null
  podman run -d --name "$tag-toxi" --network "$net" "$toxi" >/dev/null
  cli() { podman exec "$tag-toxi" /toxiproxy-cli "$@"; }
  for _ in $(seq 50); do cli list >/dev/null 2>&1 && break; sleep 0.2; done
  check "the API answers toxiproxy-cli" cli list
  check "it announces its API as Toxiproxy does" \
    sh -c "podman logs '$tag-toxi' 2>&1 | grep -q 'Starting Toxiproxy HTTP server'"
  # (Not on a terminal, toxiproxy-cli prints no header: nothing, here.)
  check "toxiproxy-cli list (no proxies yet)" test -z "$(cli list)"
  check "toxiproxy-cli create" sh -c "podman exec '$tag-toxi' /toxiproxy-cli create -l 127.0.0.1:26379 -u 127.0.0.1:6379 redis | grep -q 'Created new proxy redis'"
  check "toxiproxy-cli toxic add" sh -c "podman exec '$tag-toxi' /toxiproxy-cli toxic add -t latency -a latency=100 redis | grep -q \"Added downstream latency toxic 'latency_downstream' on proxy 'redis'\""
  check "toxiproxy-cli list" sh -c "podman exec '$tag-toxi' /toxiproxy-cli list | grep -q '^redis.127.0.0.1:26379.127.0.0.1:6379.enabled.1'"
  check "toxiproxy-cli inspect" sh -c "podman exec '$tag-toxi' /toxiproxy-cli inspect redis | grep -q 'latency=100'"
  check "toxiproxy-cli toggle" sh -c "podman exec '$tag-toxi' /toxiproxy-cli toggle redis | grep -q 'Proxy redis is now disabled'"
  check "toxiproxy-cli delete" sh -c "podman exec '$tag-toxi' /toxiproxy-cli delete redis | grep -q 'Deleted proxy redis'"
else
  fail=1
fi
exit "$fail"
