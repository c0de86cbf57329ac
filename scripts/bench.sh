#!/usr/bin/env bash
# Measures netchaos against baselines taken in the same run, and writes the
# results to docs/benchmarks.md (or --out FILE).
#
#   peers       direct loopback, `netchaos proxy` with no fault (the fast
#               path: small messages and bulk), with `latency:delay=0` (every byte through
#               the user-space fault pipeline), socat and haproxy (tcp mode)
#               when installed, measured round by round, interleaved:
#               single-stream iperf3 throughput, 64-byte echo round trips
#               (p50/p99 of --rtt-samples each round), and connection setup
#               (connect + 1-byte echo + close, 2 clients); medians of rounds
#   idle        RSS and file descriptors of netchaos holding 5,000 idle
#               connections (each with its upstream dialled)
#   run         startup cost of `netchaos run -- true` against plain `true`,
#               and a single iperf3 stream from a command wrapped by
#               `netchaos run` (interception + relay) against direct
#   HTTP        keep-alive requests per second on one connection and one large
#               download, HTTP and HTTPS, direct vs through the HTTP layer
#               (an HTTP fault that never fires, so every request is parsed;
#               HTTPS terminated and re-originated), rounds interleaved; and
#               the HTTP layer recording every attempt (--records --events);
#               beside it in the same rounds, the HTTP peers when installed:
#               haproxy (mode http), nginx (proxy_pass, keep-alive upstream),
#               each terminating TLS and re-originating it, and mitmproxy
#               (reverse mode; its mitmdump from PATH or target/bench-venv)
#   mock        `netchaos mock`: non-streamed one-token answers per second from
#               1, 4 and 16 keep-alive connections (ttft 0: due at once), and
#               200 concurrent streams at 50 tokens/s, each stream's rate
#   records     a generated event log of 1,000,000 attempt lines judged by
#               `netchaos records --expect …` (seven checks): wall time and
#               peak RSS (the issue's bound: ≤ 100 MB, about 15 s or less)
#
# usage: scripts/bench.sh [--seconds N] [--rounds N] [--idle N] [--rtt-samples N] [--out FILE]
set -euo pipefail
# `times`, $EPOCHREALTIME and awk print a decimal point whatever the locale.
export LC_ALL=C
cd "$(dirname "$0")/.."

SECS=5 ROUNDS=3 IDLE=5000 OUT=docs/benchmarks.md RTT_N=10000
while (($#)); do
  case "$1" in
    --seconds) SECS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --idle) IDLE=$2; shift 2 ;;
    --rtt-samples) RTT_N=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# The tools and the peers (haproxy, socat; nginx for HTTP), installed when they can be
# (root, apt): a fresh machine has neither peer, and a table without them
# says nothing about where netchaos stands.
missing=()
for tool in iperf3 python3 haproxy socat nginx; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Bounded (a host whose egress hangs), and one package at a time: one
    # that cannot be found leaves the others installed.
    timeout 300 apt-get update -qq >/dev/null 2>&1 || true
    for p in "${missing[@]}"; do
      timeout 300 apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
        echo "bench.sh: could not install $p" >&2
    done
    # Debian starts haproxy's and nginx's own services on install; the
    # benchmark runs its own, and leaves nothing running behind it.
    for svc in haproxy nginx; do
      if [[ " ${missing[*]} " == *" $svc "* ]] && [ -d /run/systemd/system ]; then
        systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
      fi
    done
  else
    echo "bench.sh: not installing ${missing[*]} (needs root and apt-get)" >&2
  fi
fi
for tool in iperf3 python3; do
  command -v "$tool" >/dev/null || { echo "bench.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
for peer in haproxy socat nginx; do
  command -v "$peer" >/dev/null || echo "bench.sh: $peer is not installed: it is left out of the peers (apt-get install $peer)" >&2
done
# mitmproxy (PyPI) in a venv of its own under target/, pinned.
MITMDUMP=$(command -v mitmdump || true)
if [ -z "$MITMDUMP" ]; then
  if [ ! -x target/bench-venv/bin/mitmdump ]; then
    echo "bench.sh: installing mitmproxy 11.0.2 into target/bench-venv" >&2
    { python3 -m venv target/bench-venv && timeout 600 target/bench-venv/bin/pip install -q mitmproxy==11.0.2; } >/dev/null 2>&1 ||
      echo "bench.sh: could not install mitmproxy" >&2
  fi
  [ -x target/bench-venv/bin/mitmdump ] && MITMDUMP=$PWD/target/bench-venv/bin/mitmdump
fi
[ -n "$MITMDUMP" ] || echo "bench.sh: mitmproxy is not installed: it is left out of the HTTP peers" >&2

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

# A free port below the ephemeral range: a port the kernel hands out for
# bind(0) may be taken by an outgoing connection before a peer (socat,
# haproxy) binds it.
free_port() {
  python3 -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 32000); s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try: s.bind(("0.0.0.0", p)); print(p); break
    except OSError: pass
    finally: s.close()'
}

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

# --- peers: throughput, round trips, setup rate, interleaved --------------------
# Every relay column is measured in the same round, one after the other,
# round after round, so that noise from a shared machine hits them alike.
IPORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPORT" >/dev/null 2>&1 &
PIDS+=($!)
IPERF_PID=$!
coproc ECHO { "$BC" server; }
PIDS+=("$ECHO_PID")
read -r EADDR <&"${ECHO[0]}"
sleep 0.3
# bash may run the coprocess's one command in a subshell of its own.
ECHO_SRV=$ECHO_PID
[ "$(cat "/proc/$ECHO_PID/comm")" = bench_client ] || ECHO_SRV=$(pgrep -P "$ECHO_PID" -x bench_client)
declare -A TP RT SU   # relay -> "iperf-addr", "echo-addr"
declare -A TPPID RTPID # relay -> the pid serving TP / RT (none for direct)
TP[direct]="127.0.0.1:$IPORT" RT[direct]=$EADDR
TP[netchaos]=$(start_proxy pass "127.0.0.1:$IPORT")
RT[netchaos]=$(start_proxy rtt "$EADDR")
TP[userspace]=$(start_proxy user "127.0.0.1:$IPORT" "latency:delay=0,stream=both")
RT[userspace]=$(start_proxy rttuser "$EADDR" "latency:delay=0,stream=both")
TPPID[netchaos]=$(cat "$WORK/pass.pid") RTPID[netchaos]=$(cat "$WORK/rtt.pid")
TPPID[userspace]=$(cat "$WORK/user.pid") RTPID[userspace]=$(cat "$WORK/rttuser.pid")
PEERS=()
if command -v socat >/dev/null; then
  for k in TP RT; do
    port=$(free_port)
    up=$([ $k = TP ] && echo "127.0.0.1:$IPORT" || echo "$EADDR")
    socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork,nodelay" "TCP:$up,nodelay" &
    PIDS+=($!)
    eval "$k[socat]=127.0.0.1:$port ${k}PID[socat]=$!"
  done
  PEERS+=(socat)
fi
if command -v haproxy >/dev/null; then
  for k in TP RT; do
    port=$(free_port)
    up=$([ $k = TP ] && echo "127.0.0.1:$IPORT" || echo "$EADDR")
    printf 'global\n maxconn 4000\ndefaults\n mode tcp\n timeout connect 5s\n timeout client 1h\n timeout server 1h\nlisten x\n bind 127.0.0.1:%s\n server s %s\n' \
      "$port" "$up" >"$WORK/haproxy-$k.cfg"
    haproxy -f "$WORK/haproxy-$k.cfg" -db >/dev/null 2>&1 &
    PIDS+=($!)
    eval "$k[haproxy]=127.0.0.1:$port ${k}PID[haproxy]=$!"
  done
  PEERS+=(haproxy)
fi
sleep 0.5
RELAYS=(direct netchaos userspace "${PEERS[@]}")
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

gbps() { # ADDR: a relay may still be closing the last test's connections
  # ("the server is busy"): a few tries.
  local out
  for _ in 1 2 3 4 5; do
    if out=$(iperf3 -c "${1%:*}" -p "${1##*:}" -t "$SECS" -J 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["end"]["sum_received"]; print("%.2f" % (r["bits_per_second"]/1e9))' 2>/dev/null); then
      echo "$out"
      return
    fi
    sleep 1
  done
  echo "bench.sh: iperf3 through $1 failed 5 times" >&2
  exit 1
}

# Where the CPU goes: CPU seconds each role spent (/proc for the server
# and the relay, the shell's child times for the client), summed over
# rounds, for the throughput and the setup measurements, and the wall time
# they took: what a relayed path costs, and how fast it could go if it
# kept every core busy.
TICK=$(getconf CLK_TCK)
# cpu FIELDS PID...: CPU seconds in /proc/PID/stat's FIELDS ("14 16":
# user time, the process's and its reaped children's; "15 17": system).
cpu() {
  local fields=$1 t=0 p; shift
  for p in "$@"; do
    t=$((t + $(awk -v f="$fields" '{n = split(f, i, " "); for (k = 1; k <= n; k++) s += $i[k]; print s}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  awk -v t="$t" -v k="$TICK" 'BEGIN {printf "%.3f\n", t / k}'
}
# The shell's reaped children (the clients): `times` in this shell, not a
# subshell, which would count only its own.
clients_cpu() {
  times >"$WORK/times"
  awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } } END { printf "%.3f\n", t }' "$WORK/times"
}
# measured PREFIX RELAY SERVER-PID RELAY-PID... -- CMD...: runs CMD in this
# shell (its output in $OUTV) and adds each role's CPU seconds to
# PREFIX_C[RELAY] (client), PREFIX_S (server), PREFIX_U and PREFIX_K
# (the relay's user and system time), and the wall time to PREFIX_T.
declare -A TH_C TH_S TH_U TH_K TH_T TH_N SU_C SU_S SU_U SU_K SU_T SU_N
measured() {
  local pre=$1 n=$2 srv=$3; shift 3
  local relay=()
  while [ "$1" != -- ]; do relay+=("$1"); shift; done
  shift
  local c0 s0 u0=0 k0=0 t0 c1 s1 u1=0 k1=0 t1 ppids
  # A relay's forked children (socat's) count once reaped: the last run's
  # are waited for (bounded), so that they are not counted in this one.
  if ((${#relay[@]})); then
    ppids=$(IFS=,; echo "${relay[*]}")
    for _ in $(seq 40); do pgrep -P "$ppids" >/dev/null || break; sleep 0.05; done
  fi
  # The clients' times are read closest to CMD: what reads the others
  # runs as this shell's children too.
  s0=$(cpu "14 15" "$srv")
  if ((${#relay[@]})); then u0=$(cpu "14 16" "${relay[@]}") k0=$(cpu "15 17" "${relay[@]}"); fi
  clients_cpu >"$WORK/c0"
  t0=$EPOCHREALTIME
  OUTV=$("$@")
  t1=$EPOCHREALTIME
  clients_cpu >"$WORK/c1"
  s1=$(cpu "14 15" "$srv")
  if ((${#relay[@]})); then u1=$(cpu "14 16" "${relay[@]}") k1=$(cpu "15 17" "${relay[@]}"); fi
  c0=$(cat "$WORK/c0") c1=$(cat "$WORK/c1")
  add() { local -n m=${pre}_$1; m[$n]=$(awk -v a="${m[$n]:-0}" -v b="$2" -v c="$3" 'BEGIN {printf "%.6f\n", a + c - b}'); }
  add C "$c0" "$c1"
  add S "$s0" "$s1"
  add U "$u0" "$u1"
  add K "$k0" "$k1"
  add T "$t0" "$t1"
}

declare -A G P50 P99 CPS
# Each round starts one relay later: connections left in TIME_WAIT by a
# round's setup measurements slow the ones after them (a longer port
# search in connect()), and no relay should always come last.
ORDER=("${RELAYS[@]}")
for r in $(seq "$ROUNDS"); do
  echo "peers round $r/$ROUNDS: ${ORDER[*]}" >&2
  for n in "${ORDER[@]}"; do
    measured TH "$n" "$IPERF_PID" ${TPPID[$n]:-} -- gbps "${TP[$n]}"
    G[$n]+=" $OUTV"
    TH_N[$n]=$(python3 -c "print(${TH_N[$n]:-0} + $OUTV * $SECS / 8)") # GB
    read -r a b < <("$BC" rtt "${RT[$n]}" "$RTT_N")
    # Reaped now, so that its CPU is not counted as the setup client's.
    wait $! 2>/dev/null || true
    P50[$n]+=" $a" P99[$n]+=" $b"
    if [ "$n" != userspace ]; then
      measured SU "$n" "$ECHO_SRV" ${RTPID[$n]:-} -- "$BC" connrate "${RT[$n]}" 2 2
      CPS[$n]+=" $OUTV"
      SU_N[$n]=$(python3 -c "print(${SU_N[$n]:-0} + $OUTV * 2)") # connections
    fi
  done
  ORDER=("${ORDER[@]:1}" "${ORDER[0]}")
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
for n in "${RELAYS[@]}"; do
  G[$n]=$(echo "${G[$n]}" | median)
  P50[$n]=$(echo "${P50[$n]}" | median) P99[$n]=$(echo "${P99[$n]}" | median)
  [ -n "${CPS[$n]:-}" ] && CPS[$n]=$(echo "${CPS[$n]}" | median)
done
D=${G[direct]} P=${G[netchaos]} U=${G[userspace]}
RD50=${P50[direct]} RD99=${P99[direct]} RP50=${P50[netchaos]} RP99=${P99[netchaos]}
CD=${CPS[direct]} CP=${CPS[netchaos]}

# A single iperf3 stream from inside `netchaos run` (namespace + redirect),
# each round beside a direct one: the ratio is to direct in the same rounds
# (measured after the peers' rounds, direct's rate there may differ).
W="" WD=""
RUN_OK=1
"$NC" -qq run -- true 2>"$WORK/run.err" || RUN_OK=0
if ((RUN_OK)); then
  for r in $(seq "$ROUNDS"); do
    echo "wrapped throughput round $r/$ROUNDS" >&2
    WD+=" $(gbps "127.0.0.1:$IPORT")"
    W+=" $("$NC" -qq run -- iperf3 -c 127.0.0.1 -p "$IPORT" -t "$SECS" -J 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["end"]["sum_received"]; print("%.2f" % (r["bits_per_second"]/1e9))')"
  done
  W=$(echo "$W" | median) WD=$(echo "$WD" | median)
fi

# --- run startup --------------------------------------------------------------
if ((RUN_OK)); then
  echo "run startup" >&2
  read -r T0 T1 < <(python3 - "$NC" <<'PY'
import subprocess, sys, time, statistics
runs = {"true": [], "run": []}
for _ in range(20):  # interleaved, medians
    for k, cmd in (("true", ["true"]), ("run", [sys.argv[1], "-qq", "run", "--", "true"])):
        t = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs[k].append((time.monotonic() - t) * 1000)
print(f"{statistics.median(runs['true']):.1f} {statistics.median(runs['run']):.1f}")
PY
)
fi

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

# --- timing faults ---------------------------------------------------------------
# 50 ms asked, samples 10 ms apart (each after a short idle, as a client
# meets a delay): `latency` on replies through a proxy, against the direct
# round trip; `connect_delay` under `run`, against run's own connect; and
# the floor, a client woken after 50 ms by a byte sent exactly on time
# (scripts/timing.py wake): how late the client itself wakes.
TPROBE="python3 scripts/timing.py"
LPROXY=$(start_proxy latency "$EADDR" "latency:delay=50ms,stream=downstream")
TN=200
TE="" TL="" TC0="" TC1="" TW=""
# One probe's "p50,p99"; a failed probe is said and leaves a gap.
probe() {
  local out
  if out=$("$@" 2>>"$WORK/timing.err"); then
    echo "${out// /,}"
  else
    echo "bench.sh: timing probe failed: $* (see below)" >&2
    tail -3 "$WORK/timing.err" >&2
  fi
}
for r in $(seq "$ROUNDS"); do
  echo "timing faults round $r/$ROUNDS" >&2
  TE+=" $(probe $TPROBE echo "$EADDR" $TN)"
  TL+=" $(probe $TPROBE echo "$LPROXY" $TN)"
  if ((RUN_OK)); then
    TC0+=" $(probe "$NC" -qq run -- $TPROBE connect "$EADDR" $TN)"
    TC1+=" $(probe "$NC" -qq run --fault connect_delay:delay=50ms -- $TPROBE connect "$EADDR" $TN)"
  fi
  TW+=" $(probe $TPROBE wake $TN)"
done
# p50 (field 1) or p99 (field 2), the median over rounds; "—" for none.
q() {
  local m
  m=$(echo "$1" | tr ' ' '\n' | grep -v '^$' | cut -d, -f"$2" | median) || true
  echo "${m:-—}"
}

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
HREC=$(start_proxy_args hrec --upstream "$HPLAIN" --fault "$NOFIRE" --records \
  --events "$WORK/records-run.jsonl")
HSLAYER=$(start_proxy_args hslayer --upstream-tls "$HTLS" --upstream-ca "$WORK/httpd-ca.pem" \
  --tls --tls-ca-out "$WORK/nc-ca.pem" --fault "$NOFIRE")
RPS_SECS=$(python3 -c "print(max(1, $SECS // 2))")
HR="" HRP="" HD="" HS="" HL="" HTD="" HTL="" HDP="" HLP="" HTDP="" HTLP="" GD="" GL="" GTD="" GTL=""

# The HTTP peers, each serving HTTP and HTTPS (their own certificate, from a
# CA made here) and dialling the same server over HTTP and over TLS (checking
# its certificate), keeping upstream connections alive as netchaos does.
HPEERS=()
declare -A HPA HPT HPCA
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=bench-peers-ca -addext basicConstraints=critical,CA:TRUE \
  -keyout "$WORK/peer-ca.key" -out "$WORK/peer-ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
  -keyout "$WORK/peer.key" -out "$WORK/peer.csr" 2>/dev/null
openssl x509 -req -in "$WORK/peer.csr" -CA "$WORK/peer-ca.pem" -CAkey "$WORK/peer-ca.key" \
  -CAcreateserial -days 2 -extfile <(printf 'subjectAltName=IP:127.0.0.1\n') \
  -out "$WORK/peer.pem" 2>/dev/null
cat "$WORK/peer.pem" "$WORK/peer.key" >"$WORK/peer-haproxy.pem"
# wait_port PORT: until something listens there (5 s at most).
wait_port() {
  for _ in $(seq 100); do
    (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
if command -v haproxy >/dev/null; then
  p1=$(free_port) p2=$(free_port)
  cat >"$WORK/haproxy-http.cfg" <<HAP
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend plain
  bind 127.0.0.1:$p1
  default_backend plain
frontend tls
  bind 127.0.0.1:$p2 ssl crt $WORK/peer-haproxy.pem
  default_backend tls
backend plain
  server s $HPLAIN
backend tls
  server s $HTLS ssl verify required ca-file $WORK/httpd-ca.pem verifyhost 127.0.0.1
HAP
  haproxy -f "$WORK/haproxy-http.cfg" -db >"$WORK/haproxy-http.log" 2>&1 &
  echo $! >"$WORK/haproxy-http.pid"
  if wait_port "$p1" && wait_port "$p2"; then
    HPEERS+=(haproxy); HPA[haproxy]=127.0.0.1:$p1 HPT[haproxy]=127.0.0.1:$p2 HPCA[haproxy]=$WORK/peer-ca.pem
  else echo "bench.sh: haproxy (mode http) did not start: $(cat "$WORK/haproxy-http.log")" >&2; fi
fi
if command -v nginx >/dev/null; then
  p1=$(free_port) p2=$(free_port)
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx/nginx.conf" <<NGX
worker_processes auto;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events {}
http {
  access_log off;
  client_body_temp_path $WORK/nginx; proxy_temp_path $WORK/nginx;
  fastcgi_temp_path $WORK/nginx; uwsgi_temp_path $WORK/nginx; scgi_temp_path $WORK/nginx;
  keepalive_requests 1000000;
  upstream plain { server $HPLAIN; keepalive 16; keepalive_requests 1000000; }
  upstream tls { server $HTLS; keepalive 16; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$p1;
    location / { proxy_pass http://plain; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
  server {
    listen 127.0.0.1:$p2 ssl;
    ssl_certificate $WORK/peer.pem; ssl_certificate_key $WORK/peer.key;
    location / {
      proxy_pass https://tls; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off;
      proxy_ssl_verify on; proxy_ssl_trusted_certificate $WORK/httpd-ca.pem; proxy_ssl_name 127.0.0.1;
      proxy_ssl_session_reuse on;
    }
  }
}
NGX
  nginx -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" >"$WORK/nginx.log" 2>&1 &
  echo $! >"$WORK/nginx.pid"
  if wait_port "$p1" && wait_port "$p2"; then
    HPEERS+=(nginx); HPA[nginx]=127.0.0.1:$p1 HPT[nginx]=127.0.0.1:$p2 HPCA[nginx]=$WORK/peer-ca.pem
  else echo "bench.sh: nginx did not start: $(cat "$WORK/nginx.log" "$WORK/nginx/error.log" 2>/dev/null)" >&2; fi
fi
if [ -n "$MITMDUMP" ]; then
  p1=$(free_port) p2=$(free_port)
  # Its CA (made on first start in confdir) is what HTTPS clients trust.
  "$MITMDUMP" -q --set confdir="$WORK/mitm" --listen-host 127.0.0.1 \
    --mode "reverse:http://$HPLAIN@$p1" --mode "reverse:https://$HTLS@$p2" \
    --set ssl_verify_upstream_trusted_ca="$WORK/httpd-ca.pem" --set stream_large_bodies=64k \
    --set connection_strategy=lazy >"$WORK/mitm.log" 2>&1 &
  echo $! >"$WORK/mitm.pid"
  if wait_port "$p1" && wait_port "$p2"; then
    HPEERS+=(mitmproxy); HPA[mitmproxy]=127.0.0.1:$p1 HPT[mitmproxy]=127.0.0.1:$p2
    HPCA[mitmproxy]=$WORK/mitm/mitmproxy-ca-cert.pem
  else echo "bench.sh: mitmproxy did not start: $(cat "$WORK/mitm.log")" >&2; fi
fi
declare -A PRPS PRPSP PTRPS PTRPSP PGET PTGET
# measure_peer NAME: one round of the four measures through a peer, kept
# only if all four worked (a peer that fails is left out, not the report).
measure_peer() {
  local n=$1 a b c d e f
  read -r a b < <("$HB" rps "${HPA[$n]}" "$RPS_SECS") && [ -n "$b" ] || return 1
  read -r c d < <("$HB" rps "${HPT[$n]}" "$RPS_SECS" "${HPCA[$n]}") && [ -n "$d" ] || return 1
  e=$("$HB" get "${HPA[$n]}" 1073741824) || return 1
  f=$("$HB" get "${HPT[$n]}" 536870912 "${HPCA[$n]}") || return 1
  PRPS[$n]+=" $a" PRPSP[$n]+=" $b" PTRPS[$n]+=" $c" PTRPSP[$n]+=" $d" PGET[$n]+=" $e" PTGET[$n]+=" $f"
}

for r in $(seq "$ROUNDS"); do
  echo "HTTP round $r/$ROUNDS" >&2
  read -r a b < <("$HB" rps "$HPLAIN" "$RPS_SECS"); HD+=" $a"; HDP+=" $b"
  read -r a _ < <("$HB" rps "$HSPLICE" "$RPS_SECS"); HS+=" $a"
  read -r a b < <("$HB" rps "$HLAYER" "$RPS_SECS"); HL+=" $a"; HLP+=" $b"
  read -r a b < <("$HB" rps "$HREC" "$RPS_SECS"); HR+=" $a"; HRP+=" $b"
  read -r a b < <("$HB" rps "$HTLS" "$RPS_SECS" "$WORK/httpd-ca.pem"); HTD+=" $a"; HTDP+=" $b"
  read -r a b < <("$HB" rps "$HSLAYER" "$RPS_SECS" "$WORK/nc-ca.pem"); HTL+=" $a"; HTLP+=" $b"
  GD+=" $("$HB" get "$HPLAIN" 1073741824)"
  GL+=" $("$HB" get "$HLAYER" 1073741824)"
  GTD+=" $("$HB" get "$HTLS" 536870912 "$WORK/httpd-ca.pem")"
  GTL+=" $("$HB" get "$HSLAYER" 536870912 "$WORK/nc-ca.pem")"
  for n in "${HPEERS[@]}"; do
    measure_peer "$n" 2>>"$WORK/peers.err" || echo "bench.sh: a round through $n failed (left out of its medians)" >&2
  done
done
# The peers are done: they should not share the machine with what follows.
for p in haproxy-http nginx mitm; do
  { [ -f "$WORK/$p.pid" ] && kill "$(cat "$WORK/$p.pid")" 2>/dev/null && rm -f "$WORK/$p.pid"; } || true
done
# A peer no round went through has no row.
kept=()
for n in "${HPEERS[@]}"; do [ -n "${PRPS[$n]:-}" ] && kept+=("$n"); done
HPEERS=("${kept[@]}")
for v in HD HS HL HR HRP HTD HTL HDP HLP HTDP HTLP GD GL GTD GTL; do
  printf -v "$v" '%s' "$(echo "${!v}" | median)"
done
for n in "${HPEERS[@]}"; do
  for t in PRPS PRPSP PTRPS PTRPSP PGET PTGET; do
    declare -n arr=$t
    arr[$n]=$(echo "${arr[$n]}" | median)
    unset -n arr
  done
done
exec {HTTPD[1]}>&-

# --- mock -----------------------------------------------------------------------
echo "mock: answers per second, 200 concurrent streams" >&2
MOCK_FAST=$(free_port) MOCK_PACED=$(free_port)
"$NC" mock -q --listen "127.0.0.1:$MOCK_FAST" --ttft 0 --tokens-per-s 100000 >/dev/null 2>&1 &
PIDS+=("$!")
"$NC" mock -q --listen "127.0.0.1:$MOCK_PACED" --ttft 100ms --tokens-per-s 50 >/dev/null 2>&1 &
PIDS+=("$!")
sleep 1
declare -A MOCK_RPS MOCK_P50
for c in 1 4 16; do
  read -r MOCK_RPS[$c] MOCK_P50[$c] < <("$HB" answers "127.0.0.1:$MOCK_FAST" "$SECS" "$c")
done
read -r MOCK_STREAM_RATE MOCK_STREAM_WORST < <("$HB" streams "127.0.0.1:$MOCK_PACED" 200 100 50)

# --- records ------------------------------------------------------------------
# A million attempt lines (8 in 10 answered, the rest 529 or 429, bodies
# all different), judged by seven checks; the peak RSS of the judging
# process as the kernel counts it (getrusage of the child).
echo "records: generating and judging 1,000,000 attempt lines" >&2
python3 - "$WORK/records.jsonl" <<'PY'
import json, random, sys
random.seed(1)
with open(sys.argv[1], "w") as f:
    t = 0.0
    for i in range(1_000_000):
        t += 0.001
        st = random.choice([200] * 8 + [529, 429])
        f.write(json.dumps({"v": 1, "time": "2026-12-05T00:00:00.000Z", "t": round(t + 0.05, 6),
            "event": "attempt", "conn": i // 10, "client": "10.0.0.1:40000",
            "dst": "198.18.0.1:443", "host": "api.anthropic.com", "start": round(t, 6),
            "http": {"request": i % 10, "proto": "http/1.1", "method": "POST",
                     "path": "/v1/messages", "host": "api.anthropic.com",
                     "model": "claude-sonnet-4-5",
                     "headers": {"x-stainless-retry-count": "0", "user-agent": "Anthropic/Python 2.17.0"},
                     "status": st, "body": "%016x" % random.getrandbits(64)},
            "error": None, "ms": 50.0, "head_ms": 49.0, "first_ms": 49.5,
            "faults": ["http_status"] if st != 200 else []}, separators=(",", ":")) + "\n")
PY
REC_MB=$(du -m "$WORK/records.jsonl" | cut -f1)
read -r REC_S REC_RSS < <(python3 - "$NC" "$WORK/records.jsonl" <<'PY'
import resource, subprocess, sys, time
checks = ["success_rate=0.5", "latency_p95=1s", "max_attempts=3", "backoff",
          "breaker=5,cooloff=10s", "retry_after_honoured", "jitter"]
args = [sys.argv[1], "records", sys.argv[2]] + [a for c in checks for a in ("--expect", c)]
t = time.monotonic()
subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
took = time.monotonic() - t
print(f"{took:.1f}", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)
rm -f "$WORK/records.jsonl"

# --- report ---------------------------------------------------------------------
{
  echo "# Benchmarks"
  echo
  echo "Produced by \`scripts/bench.sh --seconds $SECS --rounds $ROUNDS --idle $IDLE\` on $(date -u +%Y-%m-%d),"
  echo "$(nproc) cores, Linux $(uname -r), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
  echo "Ratios are against direct loopback measured in the same run; absolute"
  echo "numbers on shared machines are noisy. Throughput is the median of $ROUNDS"
  echo "single-stream iperf3 runs of ${SECS}s each. On 2 cores the iperf3 client,"
  echo "its server and the relay share two CPUs: a relay's throughput ratio is"
  echo "bounded by the CPU it takes from the endpoints, not by its design alone."
  echo
  echo "Load average (1, 5, 15 min) before the peer rounds: $LOAD0; after: $LOAD1."
  echo
  echo "### Side by side (interleaved rounds: ${RELAYS[*]}, each round starting one relay later; medians of $ROUNDS)"
  echo
  echo "Round trips: $RTT_N 64-byte echoes per round (p99 of each round, then"
  echo "the median of rounds). Setup: connect + 1-byte echo + close, 2 clients, 2 s."
  echo
  echo "| relay | throughput | ×direct | RTT p50 | added p50 | RTT p99 | added p99 | setup /s | ×direct |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for n in "${RELAYS[@]}"; do
    label=$n
    [ "$n" = netchaos ] && label="netchaos (no fault: the fast path)"
    [ "$n" = userspace ] && label="netchaos, \`latency:delay=0\` both ways (user-space fault path)"
    [ "$n" = haproxy ] && label="haproxy $(haproxy -v 2>/dev/null | awk 'NR == 1 {print $3}') (tcp mode)"
    [ "$n" = socat ] && label="socat $(socat -V 2>/dev/null | awk '/socat version/ {print $3}')"
    if [ -n "${CPS[$n]:-}" ]; then setup="${CPS[$n]} | $(ratio "${CPS[$n]}" "$CD")×"; else setup="— | —"; fi
    echo "| $label | ${G[$n]} Gbit/s | $(ratio "${G[$n]}" "$D")× | ${P50[$n]} µs | $(python3 -c "print(f'{${P50[$n]}-$RD50:+.1f}')") µs | ${P99[$n]} µs | $(python3 -c "print(f'{${P99[$n]}-$RD99:+.1f}')") µs | $setup |"
  done
  echo
  echo "Goals (issue 15): throughput ≥ 0.85× (user-space path ≥ 0.6×), added round trip"
  echo "below every peer's at p50 and p99 and ≤ 25 µs at p50 on an idle machine, setup ≥ 0.8×."
  echo
  echo "Where the CPU goes, in the same rounds: CPU time (user + system) of the"
  echo "client (iperf3 -c; the setup client), the server (iperf3 -s; the echo"
  echo "server) and the relay (its user and system time; socat's with its forked"
  echo "children), per GB carried and per connection set up. \"Busy\": cores"
  echo "kept busy on average. \"Ceiling\": how fast the path would go with all"
  echo "$(nproc) cores busy at that cost, against direct's measured rate; \"without"
  echo "the relay's user time\": the ceiling of a relay whose own code cost"
  echo "nothing, left with the kernel's work for a second TCP connection."
  echo
  cost_table() { # PREFIX UNIT-NAME SCALE SECONDS-PER-ROUND
    local pre=$1 unit=$2 scale=$3 secs=$4 n
    echo "| relay | client | server | relay user + sys | total ($unit) | busy | ceiling ×direct | without the relay's user time |"
    echo "|---|---|---|---|---|---|---|---|"
    for n in "${RELAYS[@]}"; do
      local -n C=${pre}_C S=${pre}_S U=${pre}_U K=${pre}_K T=${pre}_T N=${pre}_N
      [ -n "${N[$n]:-}" ] || continue
      python3 - "$n" "${C[$n]}" "${S[$n]}" "${U[$n]}" "${K[$n]}" "${T[$n]}" "${N[$n]}" \
        "${N[direct]}" "$((ROUNDS * secs))" "$scale" "$(nproc)" <<'PY'
import sys
n, c, s, u, k, t, units, dunits, dt, scale, cores = sys.argv[1:]
c, s, u, k, t, units, dunits, dt, scale, cores = map(float, (c, s, u, k, t, units, dunits, dt, scale, cores))
if units <= 0 or dunits <= 0:
    print(f"| {n} | — | — | — | — | — | — | — |")
    sys.exit()
per = lambda x: x / units * scale
total = c + s + u + k
# Direct's rate over the measured seconds (the wall time also holds each
# client's start and end).
direct_rate = dunits / dt
ceil = cores / (total / units) / direct_rate
floor = cores / ((total - u) / units) / direct_rate
print(f"| {n} | {per(c):.0f} | {per(s):.0f} | {per(u):.0f} + {per(k):.0f} | {per(total):.0f} | "
      f"{total / t:.2f} | {ceil:.2f}× | {floor:.2f}× |")
PY
    done
  }
  echo "Throughput, CPU ms per GB:"
  echo
  cost_table TH "ms/GB" 1000 "$SECS"
  echo
  echo "Setup, CPU µs per connection:"
  echo
  cost_table SU "µs/connection" 1000000 2
  echo
  echo "| measure | direct | netchaos | ratio | target |"
  echo "|---|---|---|---|---|"
  if ((RUN_OK)); then
    echo "| throughput, \`netchaos run -- iperf3 -c\` (namespace, redirect, relay; direct in the same rounds) | $WD Gbit/s | $W Gbit/s | $(ratio "$W" "$WD")× | — |"
  fi
  echo "| 64 one-byte slices 1000 µs apart (median of 7) | 64 ms asked | $SLICE ms | — | ≤ 70 ms (Toxiproxy 71 ms) |"
  echo "| $IDLE idle connections: RSS | — | $RSS_MB MB (+$RSS_D MB over idle netchaos) | — | ≤ 50 MB |"
  echo "| $IDLE idle connections: file descriptors | — | $((FD1 - FD0)) ($FDPC per connection) | — | ≤ 2.2 |"
  if ((RUN_OK)); then
    echo "| startup: \`netchaos run -- true\` vs \`true\` (medians of 20, interleaved, as $(id -un)) | $T0 ms | $T1 ms | $(python3 -c "print(f'{$T1-$T0:+.1f}')") ms | ≤ +30 ms |"
  else
    echo "| \`netchaos run\` | — | not available: $(head -1 "$WORK/run.err") | — | — |"
  fi
  echo
  echo "Timing faults (issue 18): 50 ms asked; $TN samples 10 ms apart per round, p50 and p99"
  echo "each the median of $ROUNDS rounds. \"Over the path\": what the fault adds beyond 50 ms"
  echo "and the same path without it. The floor is how late a client blocked for 50 ms"
  echo "wakes when a byte is sent to it exactly on time (\`scripts/timing.py wake\`): no"
  echo "delay reaches a client more precisely than that."
  echo
  echo "| measure | without the fault p50 / p99 | with it p50 / p99 | over the path p50 / p99 | target |"
  echo "|---|---|---|---|---|"
  over() { if [ "$1" = — ] || [ "$2" = — ]; then echo —; else python3 -c "print(f'{$1-50-$2:+.2f}')"; fi; }
  echo "| \`latency\` 50 ms on replies, 64-byte echo through \`proxy\` | $(q "$TE" 1) / $(q "$TE" 2) ms | $(q "$TL" 1) / $(q "$TL" 2) ms | $(over "$(q "$TL" 1)" "$(q "$TE" 1)") / $(over "$(q "$TL" 2)" "$(q "$TE" 2)") ms | ±0.2 / ±1 ms |"
  if ((RUN_OK)); then
    echo "| \`connect_delay\` 50 ms, \`connect()\` under \`run\` | $(q "$TC0" 1) / $(q "$TC0" 2) ms | $(q "$TC1" 1) / $(q "$TC1" 2) ms | $(over "$(q "$TC1" 1)" "$(q "$TC0" 1)") / $(over "$(q "$TC1" 2)" "$(q "$TC0" 2)") ms | ±0.2 / ±1 ms |"
  fi
  echo "| floor: a client's own wake after 50 ms, byte sent on time | — | $(q "$TW" 1) / $(q "$TW" 2) ms | $(over "$(q "$TW" 1)" 0) / $(over "$(q "$TW" 2)" 0) ms | — |"
  echo
  echo "HTTP layer: one keep-alive connection sending GET requests for a 100-byte"
  echo "body for ${RPS_SECS}s, and one GET of 1 GiB (HTTPS: 512 MiB), medians of $ROUNDS"
  echo "interleaved rounds. \"HTTP layer\" is a proxy with an HTTP fault that never"
  echo "fires (\`$NOFIRE\`): every request and response is parsed."
  echo "HTTPS through netchaos is terminated (the proxy's CA) and re-originated."
  echo
  echo "| measure | direct | netchaos | ratio | per request |"
  echo "|---|---|---|---|---|"
  echo "| HTTP requests/s, no HTTP fault (fast path) | $HD /s | $HS /s | $(ratio "$HS" "$HD")× | — |"
  echo "| HTTP requests/s, HTTP layer | $HD /s | $HL /s | $(ratio "$HL" "$HD")× | p50 $HDP → $HLP µs ($(python3 -c "print(f'{$HLP-$HDP:+.1f}')") µs) |"
  echo "| HTTP requests/s, HTTP layer, every attempt recorded (\`--records --events\`) | $HD /s | $HR /s | $(ratio "$HR" "$HD")× | p50 $HDP → $HRP µs ($(python3 -c "print(f'{$HRP-$HDP:+.1f}')") µs) |"
  echo "| HTTPS requests/s, HTTP layer (TLS terminated and re-originated) | $HTD /s | $HTL /s | $(ratio "$HTL" "$HTD")× | p50 $HTDP → $HTLP µs ($(python3 -c "print(f'{$HTLP-$HTDP:+.1f}')") µs) |"
  echo "| HTTP download, HTTP layer | $GD Gbit/s | $GL Gbit/s | $(ratio "$GL" "$GD")× | — |"
  echo "| HTTPS download, HTTP layer | $GTD Gbit/s | $GTL Gbit/s | $(ratio "$GTL" "$GTD")× | — |"
  echo
  if ((${#HPEERS[@]})); then
    echo "The HTTP layer beside HTTP peers, in the same interleaved rounds (medians"
    echo "of $ROUNDS): haproxy in \`mode http\` (keep-alive, \`http-reuse always\`), nginx"
    echo "(\`proxy_pass\` to a keep-alive upstream, no buffering) and mitmproxy"
    echo "(reverse mode, bodies over 64 KiB streamed), each serving HTTPS with a"
    echo "certificate of its own and re-originating TLS to the same server, checking"
    echo "its certificate, as netchaos does. Requests/s on one keep-alive connection"
    echo "(100-byte bodies; \"added\": the p50 round trip over direct's), and one"
    echo "download (HTTP 1 GiB, HTTPS 512 MiB)."
    echo
    echo "| HTTP layer of | HTTP req/s | ×direct | added p50 | HTTPS req/s | ×direct | added p50 | HTTP download | HTTPS download |"
    echo "|---|---|---|---|---|---|---|---|---|"
    added() { python3 -c "print(f'{$1-$2:+.1f} µs')"; }
    echo "| netchaos (an HTTP fault that never fires) | $HL | $(ratio "$HL" "$HD")× | $(added "$HLP" "$HDP") | $HTL | $(ratio "$HTL" "$HTD")× | $(added "$HTLP" "$HTDP") | $GL Gbit/s | $GTL Gbit/s |"
    for n in "${HPEERS[@]}"; do
      case $n in
        haproxy) label="haproxy $(haproxy -v 2>/dev/null | awk 'NR == 1 {print $3}') (mode http)" ;;
        nginx) label="nginx $(nginx -v 2>&1 | sed 's/.*nginx\///')" ;;
        mitmproxy) label="mitmproxy $("$MITMDUMP" --version 2>/dev/null | awk '/Mitmproxy/ {print $2}')" ;;
        *) label=$n ;;
      esac
      echo "| $label | ${PRPS[$n]} | $(ratio "${PRPS[$n]}" "$HD")× | $(added "${PRPSP[$n]}" "$HDP") | ${PTRPS[$n]} | $(ratio "${PTRPS[$n]}" "$HTD")× | $(added "${PTRPSP[$n]}" "$HTDP") | ${PGET[$n]} Gbit/s | ${PTGET[$n]} Gbit/s |"
    done
    echo
  fi
  echo "The built-in mock (\`netchaos mock\`): non-streamed Anthropic Messages answers"
  echo "of one token (ttft 0: due at once), a load client of 1, 4 and 16 keep-alive"
  echo "connections for ${SECS}s; and 200 streams at once (at most 100 tokens each; the"
  echo "mock's answers run 24 to 96) at 50 tokens/s, each stream's rate measured at the"
  echo "client."
  echo
  echo "| measure | netchaos | target |"
  echo "|---|---|---|"
  for c in 1 4 16; do
    echo "| answers/s, $c connection(s) | ${MOCK_RPS[$c]} /s (p50 ${MOCK_P50[$c]} µs) | thousands/s |"
  done
  echo "| 200 concurrent streams at 50 tokens/s: median rate, worst stream's deviation | ${MOCK_STREAM_RATE} tokens/s, ${MOCK_STREAM_WORST} % | within 10 % |"
  echo
  echo "Request records (drills, issue 43): an event log of 1,000,000 \`attempt\`"
  echo "lines (${REC_MB} MB) judged by \`netchaos records --expect\` with seven checks"
  echo "(success_rate, latency_p95, max_attempts, backoff, breaker, retry_after_honoured,"
  echo "jitter), table to /dev/null; peak RSS of that process."
  echo
  echo "| measure | netchaos | target |"
  echo "|---|---|---|"
  echo "| 1,000,000 attempt lines judged: wall time | ${REC_S} s | ≤ 15 s |"
  echo "| 1,000,000 attempt lines judged: peak RSS | ${REC_RSS} MB | ≤ 100 MB |"
  echo
  echo "For scale ([architecture.md](architecture.md#where-to-measure), same kind of machine): Toxiproxy 2.12 passes about"
  echo "0.2× direct loopback, adds about 100 µs to a 64-byte round trip and holds"
  echo "5,000 idle connections in about 336 MB. Toxiproxy cannot be fetched here"
  echo "(only package registries are reachable: no release binary, no Go module download), so it is not measured in this run."
} >"$OUT.new"
# The hand-written sections after the measured ones (## headings: how the
# relay spends its time) are the old file's, kept as they were.
if [ -f "$OUT" ] && grep -q '^## ' "$OUT"; then
  { echo; awk '/^## / {keep = 1} keep' "$OUT"; } >>"$OUT.new"
fi
mv "$OUT.new" "$OUT"
cat "$OUT"
