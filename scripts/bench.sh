#!/usr/bin/env bash
# Measures netchaos against baselines taken in the same run, and writes the
# results to docs/benchmarks.md (or --out FILE).
#
#   throughput  single iperf3 stream: direct loopback, through `netchaos proxy`
#               with no fault (splice path), with `latency:delay=0` (every byte
#               through the user-space fault pipeline), and through socat when
#               installed; reported as ratios to direct
#   round trip  64-byte request/response, p50 and p99, direct vs netchaos
#   setup rate  connect + 1-byte echo + close per second, direct vs netchaos
#   idle        RSS and file descriptors of netchaos holding 5,000 idle
#               connections (each with its upstream dialled)
#   run         startup cost of `netchaos run -- true` against plain `true`,
#               and a single iperf3 stream from a command wrapped by
#               `netchaos run` (interception + relay) against direct
#   HTTP        keep-alive requests per second on one connection and one large
#               download, HTTP and HTTPS, direct vs through the HTTP layer
#               (an HTTP fault that never fires, so every request is parsed;
#               HTTPS terminated and re-originated), rounds interleaved
#
# usage: scripts/bench.sh [--seconds N] [--rounds N] [--idle N] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=5 ROUNDS=3 IDLE=5000 OUT=docs/benchmarks.md
while (($#)); do
  case "$1" in
    --seconds) SECS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --idle) IDLE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
for tool in iperf3 python3; do
  command -v "$tool" >/dev/null || { echo "bench.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done

cargo build --release --quiet --bin netchaos --example bench_client --example http_bench
NC=target/release/netchaos
BC=target/release/examples/bench_client
HB=target/release/examples/http_bench
ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}" $(cat "$WORK"/*.pid 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_proxy NAME UPSTREAM [FAULT...]: prints the proxy's address; its pid
# goes to $WORK/NAME.pid (it runs in a command substitution, so the pid
# cannot be kept in a variable, and netchaos must not hold its stdout).
start_proxy() {
  local name=$1 upstream=$2; shift 2
  local args=(--upstream "$upstream")
  for f in "$@"; do args+=(--fault "$f"); done
  start_proxy_args "$name" "${args[@]}"
}

# start_proxy_args NAME ARGS...: the same, with the proxy's own arguments.
start_proxy_args() {
  local name=$1; shift
  local args=(proxy -q --listen 127.0.0.1:0 "$@")
  "$NC" "${args[@]}" >/dev/null 2>"$WORK/$name.log" &
  echo $! >"$WORK/$name.pid"
  for _ in $(seq 100); do
    if grep -q "listening on" "$WORK/$name.log"; then
      sed -n 's/.* listening on \(https:\/\/\)\{0,1\}\([^ ]*\) .*/\2/p' "$WORK/$name.log" | head -1
      return
    fi
    sleep 0.05
  done
  echo "bench.sh: netchaos did not start: $(cat "$WORK/$name.log")" >&2
  exit 1
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

# --- throughput -----------------------------------------------------------
IPORT=$(free_port)
iperf3 -s -p "$IPORT" >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5
PASS=$(start_proxy pass "127.0.0.1:$IPORT")
USER=$(start_proxy user "127.0.0.1:$IPORT" "latency:delay=0,stream=both")
SOCAT=""
if command -v socat >/dev/null; then
  SPORT=$(free_port)
  socat "TCP-LISTEN:$SPORT,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$IPORT" &
  PIDS+=($!)
  SOCAT="127.0.0.1:$SPORT"
  sleep 0.3
fi

gbps() { # ADDR
  iperf3 -c "${1%:*}" -p "${1##*:}" -t "$SECS" -J |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["end"]["sum_received"]; print("%.2f" % (r["bits_per_second"]/1e9))'
}

D="" P="" U="" S=""
for r in $(seq "$ROUNDS"); do
  echo "throughput round $r/$ROUNDS" >&2
  D+=" $(gbps "127.0.0.1:$IPORT")"
  P+=" $(gbps "$PASS")"
  U+=" $(gbps "$USER")"
  [ -n "$SOCAT" ] && S+=" $(gbps "$SOCAT")"
done
# A single iperf3 stream from inside `netchaos run` (namespace + redirect).
W=""
RUN_OK=1
"$NC" -qq run -- true 2>"$WORK/run.err" || RUN_OK=0
if ((RUN_OK)); then
  for r in $(seq "$ROUNDS"); do
    echo "wrapped throughput round $r/$ROUNDS" >&2
    W+=" $("$NC" -qq run -- iperf3 -c 127.0.0.1 -p "$IPORT" -t "$SECS" -J 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["end"]["sum_received"]; print("%.2f" % (r["bits_per_second"]/1e9))')"
  done
  W=$(echo "$W" | median)
fi
D=$(echo "$D" | median) P=$(echo "$P" | median) U=$(echo "$U" | median)
[ -n "$SOCAT" ] && S=$(echo "$S" | median)

# --- run startup --------------------------------------------------------------
mean_ms() { # N CMD...: mean wall time of N runs
  local n=$1; shift
  python3 - "$n" "$@" <<'PY'
import subprocess, sys, time
n = int(sys.argv[1]); cmd = sys.argv[2:]
t = time.monotonic()
for _ in range(n):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(f"{(time.monotonic() - t) / n * 1000:.1f}")
PY
}
if ((RUN_OK)); then
  echo "run startup" >&2
  T0=$(mean_ms 20 true)
  T1=$(mean_ms 20 "$NC" -qq run -- true)
fi

# --- round trips and setup rate ---------------------------------------------
coproc ECHO { "$BC" server; }
PIDS+=("$ECHO_PID")
read -r EADDR <&"${ECHO[0]}"
RPROXY=$(start_proxy rtt "$EADDR")
echo "round trips" >&2
read -r RD50 RD99 < <("$BC" rtt "$EADDR" 20000)
read -r RP50 RP99 < <("$BC" rtt "$RPROXY" 20000)
echo "setup rate" >&2
CD=$("$BC" connrate "$EADDR" 3 2)
CP=$("$BC" connrate "$RPROXY" 3 2)

# --- timer precision --------------------------------------------------------------
# 64 one-byte slices 1000 µs apart (Toxiproxy's own timing check): asked
# 64 ms; a millisecond timer makes ~130.
SPROXY=$(start_proxy slicer "$EADDR" "slicer:size=1,delay=1000us,stream=upstream")
echo "slicer timing" >&2
SLICE=$(python3 - "${SPROXY%:*}" "${SPROXY##*:}" <<'PY'
import socket, sys, time, statistics
res = []
for _ in range(7):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    t = time.monotonic(); s.sendall(b"x" * 64); got = 0
    while got < 64:
        got += len(s.recv(64))
    res.append((time.monotonic() - t) * 1000); s.close()
print(f"{statistics.median(res):.1f}")
PY
)

# --- idle connections ---------------------------------------------------------
IPROXY=$(start_proxy idle "$EADDR")
IPID=$(cat "$WORK/idle.pid")
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
RSS0=$(rss_kb "$IPID") FD0=$(fds "$IPID")
echo "idle: opening $IDLE connections" >&2
coproc IDLEC { "$BC" idle "$IPROXY" "$IDLE"; }
PIDS+=("$IDLEC_PID")
read -r ready <&"${IDLEC[0]}"
[ "$ready" = ready ] || { echo "bench.sh: idle client failed" >&2; exit 1; }
sleep 1
RSS1=$(rss_kb "$IPID") FD1=$(fds "$IPID")
exec {IDLEC[1]}>&-

RSS_MB=$(python3 -c "print(f'{$RSS1/1024:.1f}')")
RSS_D=$(python3 -c "print(f'{($RSS1-$RSS0)/1024:.1f}')")
FDPC=$(python3 -c "print(f'{($FD1-$FD0)/$IDLE:.2f}')")

# --- HTTP layer -------------------------------------------------------------------
coproc HTTPD { "$HB" server "$WORK/httpd-ca.pem"; }
PIDS+=("$HTTPD_PID")
read -r HPLAIN HTLS <&"${HTTPD[0]}"
NOFIRE="http_status:status=503,probability=0"
HSPLICE=$(start_proxy hsplice "$HPLAIN")
HLAYER=$(start_proxy hlayer "$HPLAIN" "$NOFIRE")
HSLAYER=$(start_proxy_args hslayer --upstream-tls "$HTLS" --upstream-ca "$WORK/httpd-ca.pem" \
  --tls --tls-ca-out "$WORK/nc-ca.pem" --fault "$NOFIRE")
RPS_SECS=$(python3 -c "print(max(1, $SECS // 2))")
HD="" HS="" HL="" HTD="" HTL="" HDP="" HLP="" HTDP="" HTLP="" GD="" GL="" GTD="" GTL=""
for r in $(seq "$ROUNDS"); do
  echo "HTTP round $r/$ROUNDS" >&2
  read -r a b < <("$HB" rps "$HPLAIN" "$RPS_SECS"); HD+=" $a"; HDP+=" $b"
  read -r a _ < <("$HB" rps "$HSPLICE" "$RPS_SECS"); HS+=" $a"
  read -r a b < <("$HB" rps "$HLAYER" "$RPS_SECS"); HL+=" $a"; HLP+=" $b"
  read -r a b < <("$HB" rps "$HTLS" "$RPS_SECS" "$WORK/httpd-ca.pem"); HTD+=" $a"; HTDP+=" $b"
  read -r a b < <("$HB" rps "$HSLAYER" "$RPS_SECS" "$WORK/nc-ca.pem"); HTL+=" $a"; HTLP+=" $b"
  GD+=" $("$HB" get "$HPLAIN" 1073741824)"
  GL+=" $("$HB" get "$HLAYER" 1073741824)"
  GTD+=" $("$HB" get "$HTLS" 536870912 "$WORK/httpd-ca.pem")"
  GTL+=" $("$HB" get "$HSLAYER" 536870912 "$WORK/nc-ca.pem")"
done
for v in HD HS HL HTD HTL HDP HLP HTDP HTLP GD GL GTD GTL; do
  printf -v "$v" '%s' "$(echo "${!v}" | median)"
done
exec {HTTPD[1]}>&-

# --- report ---------------------------------------------------------------------
{
  echo "# Benchmarks"
  echo
  echo "Produced by \`scripts/bench.sh --seconds $SECS --rounds $ROUNDS --idle $IDLE\` on $(date -u +%Y-%m-%d),"
  echo "$(nproc) cores, Linux $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "Ratios are against direct loopback measured in the same run; absolute"
  echo "numbers on shared machines are noisy. Throughput is the median of $ROUNDS"
  echo "single-stream iperf3 runs of ${SECS}s each."
  echo
  echo "| measure | direct | netchaos | ratio | target |"
  echo "|---|---|---|---|---|"
  echo "| throughput, no fault (splice) | $D Gbit/s | $P Gbit/s | $(ratio "$P" "$D")× | ≥ 0.8× |"
  echo "| throughput, \`latency:delay=0\` both ways (user-space fault path) | $D Gbit/s | $U Gbit/s | $(ratio "$U" "$D")× | ≥ 0.4× |"
  [ -n "$SOCAT" ] && echo "| throughput through socat (reference) | $D Gbit/s | $S Gbit/s (socat) | $(ratio "$S" "$D")× | — |"
  if ((RUN_OK)); then
    echo "| throughput, \`netchaos run -- iperf3 -c\` (namespace, redirect, relay) | $D Gbit/s | $W Gbit/s | $(ratio "$W" "$D")× | — |"
  fi
  echo "| 64-byte round trip p50 | $RD50 µs | $RP50 µs | $(python3 -c "print(f'{$RP50-$RD50:+.1f}')") µs | ≤ +30 µs |"
  echo "| 64-byte round trip p99 | $RD99 µs | $RP99 µs | $(python3 -c "print(f'{$RP99-$RD99:+.1f}')") µs | — |"
  echo "| connection setup (2 clients) | $CD /s | $CP /s | $(ratio "$CP" "$CD")× | — |"
  echo "| 64 one-byte slices 1000 µs apart (median of 7) | 64 ms asked | $SLICE ms | — | ≤ 70 ms (Toxiproxy 71 ms) |"
  echo "| $IDLE idle connections: RSS | — | $RSS_MB MB (+$RSS_D MB over idle netchaos) | — | ≤ 50 MB |"
  echo "| $IDLE idle connections: file descriptors | — | $((FD1 - FD0)) ($FDPC per connection) | — | ≤ 2.2 |"
  if ((RUN_OK)); then
    echo "| startup: \`netchaos run -- true\` vs \`true\` (mean of 20, as $(id -un)) | $T0 ms | $T1 ms | $(python3 -c "print(f'{$T1-$T0:+.1f}')") ms | — |"
  else
    echo "| \`netchaos run\` | — | not available: $(head -1 "$WORK/run.err") | — | — |"
  fi
  echo
  echo "HTTP layer: one keep-alive connection sending GET requests for a 100-byte"
  echo "body for ${RPS_SECS}s, and one GET of 1 GiB (HTTPS: 512 MiB), medians of $ROUNDS"
  echo "interleaved rounds. \"HTTP layer\" is a proxy with an HTTP fault that never"
  echo "fires (\`$NOFIRE\`): every request and response is parsed."
  echo "HTTPS through netchaos is terminated (the proxy's CA) and re-originated."
  echo
  echo "| measure | direct | netchaos | ratio | per request |"
  echo "|---|---|---|---|---|"
  echo "| HTTP requests/s, no HTTP fault (splice) | $HD /s | $HS /s | $(ratio "$HS" "$HD")× | — |"
  echo "| HTTP requests/s, HTTP layer | $HD /s | $HL /s | $(ratio "$HL" "$HD")× | p50 $HDP → $HLP µs ($(python3 -c "print(f'{$HLP-$HDP:+.1f}')") µs) |"
  echo "| HTTPS requests/s, HTTP layer (TLS terminated and re-originated) | $HTD /s | $HTL /s | $(ratio "$HTL" "$HTD")× | p50 $HTDP → $HTLP µs ($(python3 -c "print(f'{$HTLP-$HTDP:+.1f}')") µs) |"
  echo "| HTTP download, HTTP layer | $GD Gbit/s | $GL Gbit/s | $(ratio "$GL" "$GD")× | — |"
  echo "| HTTPS download, HTTP layer | $GTD Gbit/s | $GTL Gbit/s | $(ratio "$GTL" "$GTD")× | — |"
  echo
  echo "For scale (DESIGN.md, same kind of machine): Toxiproxy 2.12 passes about"
  echo "0.2× direct loopback, adds about 100 µs to a 64-byte round trip and holds"
  echo "5,000 idle connections in about 336 MB. Toxiproxy is not installable here"
  echo "(no Go toolchain or release download), so it is not measured in this run."
} >"$OUT.new"
mv "$OUT.new" "$OUT"
cat "$OUT"
