#!/usr/bin/env bash
# A real project's network test suite, directly and under `netchaos run`
# with no fault: urllib3's own (from its source distribution, pinned), in
# a network namespace with no route out, as its CI would run it in a
# sandbox. Prints both wall times, the outcome counts, and every test
# whose outcome differs (passed, failed, error, skipped), from pytest's
# JUnit reports. A benchmark, run by hand (docs/fidelity.md has the
# latest figures): a few minutes, and it needs PyPI.
#
# usage: scripts/urllib3-suite.sh [--netchaos BIN] [PYTEST ARGS...]
#
# Its servers are urllib3's own dummy servers on loopback; nothing leaves
# the namespace (its resolver, the host's, is unreachable from there, as
# it is in a sandbox). Needs root (unshare --net) and python3-venv.
# urllib3 pins hypercorn to a fork on GitHub, which cannot be fetched
# here: PyPI's hypercorn stands in, and the few tests that need the fork
# fail alike on both sides.
set -uo pipefail
cd "$(dirname "$0")/.."

URLLIB3=2.5.0
nc=target/release/netchaos
if [ "${1:-}" = "--netchaos" ]; then
  nc=$2
  shift 2
fi
say() { echo "urllib3-suite.sh: $*"; }
[ "$(id -u)" = 0 ] || { say "needs root (a network namespace of its own)"; exit 3; }
[ -x "$nc" ] || { say "no $nc: cargo build --release (or --netchaos BIN)"; exit 3; }
nc=$(realpath "$nc")

work=$PWD/target/urllib3-suite
venv=$work/venv
src=$work/urllib3-$URLLIB3
mkdir -p "$work"
if [ ! -d "$src" ]; then
  python3 -m venv "$venv" || { say "cannot make a venv (python3-venv)"; exit 3; }
  "$venv/bin/pip" download -q --no-deps --no-binary :all: "urllib3==$URLLIB3" -d "$work" &&
    tar -C "$work" -xzf "$work/urllib3-$URLLIB3.tar.gz" || { say "cannot fetch urllib3 $URLLIB3"; exit 3; }
  # Its dev dependency group at the versions of its uv.lock (a newer
  # pytest turns a deprecation into a collection error), hypercorn 0.15.0
  # from PyPI in place of the fork.
  "$venv/bin/pip" install -q "anyio[trio]==4.8.0" "cryptography==44.0.2" "h2==4.1.0" "httpx==0.28.1" \
    "hypercorn==0.15.0" "idna==3.10" "pyopenssl==25.0.0" "pysocks==1.7.1" "pytest==8.3.4" "pytest-socket==0.7.0" \
    "pytest-timeout==2.3.1" "quart==0.20.0" "quart-trio==0.12.0" "trustme==1.2.1" "trio==0.27.0" &&
    "$venv/bin/pip" install -q -e "$src" || { rm -rf "$src"; say "cannot install the test dependencies"; exit 3; }
fi

# One side: the suite in a fresh namespace (loopback up, no route out),
# wrapped by `netchaos run` or not; its wall time to $work/SIDE.time.
side() {
  local name=$1 wrap=$2
  shift 2
  local report=$work/$name.xml
  unshare --net sh -c '
    ip link set lo up
    cd "$1"; shift
    name=$1 report=$2 wrap=$3 nc=$4 venv=$5; shift 5
    start=$(date +%s.%N)
    if [ "$wrap" = run ]; then
      "$nc" -q run -- "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout 120 --basetemp="$report.tmp" --junitxml="$report" "$@" >"$report.log" 2>&1
    else
      "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout 120 --basetemp="$report.tmp" --junitxml="$report" "$@" >"$report.log" 2>&1
    fi
    end=$(date +%s.%N)
    echo "$start $end" > "$report.time"
  ' sh "$src" "$name" "$report" "$wrap" "$nc" "$venv" "$@"
}

say "urllib3 $URLLIB3's suite, directly (in a namespace with no route out)"
side direct none "$@"
say "the same under netchaos run (no fault): $nc"
side run run "$@"

"$venv/bin/python" - "$work/direct.xml" "$work/run.xml" <<'EOF'
import sys, collections, xml.etree.ElementTree as ET
def outcomes(path):
    out = {}
    for tc in ET.parse(path).iter("testcase"):
        name = tc.get("classname", "") + "::" + tc.get("name", "")
        kind = "passed"
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed"}.get(child.tag, child.tag)
                break
        out[name] = (kind, float(tc.get("time", 0)))
    return out
d, r = outcomes(sys.argv[1]), outcomes(sys.argv[2])
def wall(p):
    a, b = open(p + ".time").read().split()
    return float(b) - float(a)
times = [wall(p) for p in sys.argv[1:3]]
for label, o, t in (("directly", d, times[0]), ("under run", r, times[1])):
    c = collections.Counter(k for k, _ in o.values())
    print(f"{label:10} {t:7.1f} s  {len(o)} tests: " + ", ".join(f"{k} {c[k]}" for k in sorted(c)))
diff = sorted(n for n in set(d) | set(r) if d.get(n, ("absent", 0))[0] != r.get(n, ("absent", 0))[0])
print(f"outcomes that differ: {len(diff)}")
for n in diff:
    print(f"  {n}: directly {d.get(n, ('absent', 0))[0]}, under run {r.get(n, ('absent', 0))[0]}")
slow = sorted(((r[n][1] - d[n][1], n) for n in set(d) & set(r)), reverse=True)[:10]
print("slowest under run against directly (seconds):")
for dt, n in slow:
    print(f"  +{dt:6.2f}  {n}  ({d[n][1]:.2f} → {r[n][1]:.2f})")
EOF
