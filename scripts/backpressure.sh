#!/usr/bin/env bash
# Back-pressure beside a real path (#49): how many bytes a client's send()
# accepts before it blocks, towards a server that never reads, directly and
# under `netchaos run`; and what a single iperf3 stream carries under `run`
# (the fast path's throughput, which a fix must keep). Two servers: one
# across a veth at MTU 1500 with segmentation offloads off (an Ethernet
# path, in a namespace of the script's own) and one on loopback.
# See docs/fidelity.md ("Where netchaos still differs").
#
# Runs as root in a network namespace of its own (it makes one with
# `unshare -n` when not told it is already inside one); everything it makes
# goes with it.
#
# usage: scripts/backpressure.sh [ROUNDS]     (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z ${BP_INSIDE:-} ]]; then
  for t in ip ethtool iperf3 python3 unshare; do
    command -v "$t" >/dev/null || { echo "backpressure.sh: needs $t" >&2; exit 1; }
  done
  cargo build --release --quiet --bin netchaos
  exec env BP_INSIDE=1 unshare -n "$0" "$@"
fi

NC=$PWD/target/release/netchaos
WRITE="$PWD/tests/support/write_until_blocked.py"
ROUNDS=${1:-2}
NS=bp-peer-$$
DIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT

# Accepts and holds every connection, never reading (at most 50 at once).
cat >"$DIR/sink.py" <<'EOF'
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(64)
held = []
while True:
    c, _ = l.accept()
    held.append(c)
    if len(held) > 50:
        held.pop(0).close()
EOF

ip link set lo up
ip netns add "$NS"
ip link add bp-h type veth peer name bp-p
ip link set bp-p netns "$NS"
ip addr add 10.77.0.1/24 dev bp-h
ip link set bp-h up mtu 1500
ip -n "$NS" addr add 10.77.0.2/24 dev bp-p
ip -n "$NS" link set bp-p up mtu 1500
ip -n "$NS" link set lo up
# One segment per packet, as a NIC cuts them.
ethtool -K bp-h tso off gso off gro off >/dev/null
ip netns exec "$NS" ethtool -K bp-p tso off gso off gro off >/dev/null

ip netns exec "$NS" python3 "$DIR/sink.py" 10.77.0.2 9000 & PIDS+=($!)
python3 "$DIR/sink.py" 127.0.0.1 9001 & PIDS+=($!)
ip netns exec "$NS" iperf3 -s -p 5201 >/dev/null 2>&1 & PIDS+=($!)
iperf3 -s -p 5202 -B 127.0.0.1 >/dev/null 2>&1 & PIDS+=($!)
sleep 0.5

gbits() { awk '/receiver/ {print $7}'; }
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r"
  echo "  accepted, veth:     direct $(python3 "$WRITE" 10.77.0.2 9000 --detail)"
  echo "                      run    $("$NC" -qq run -- python3 "$WRITE" 10.77.0.2 9000 --detail)"
  echo "  accepted, loopback: direct $(python3 "$WRITE" 127.0.0.1 9001 --detail)"
  echo "                      run    $("$NC" -qq run -- python3 "$WRITE" 127.0.0.1 9001 --detail)"
  echo "  iperf3 under run, Gbit/s: veth up $("$NC" -qq run -- iperf3 -c 10.77.0.2 -p 5201 -t 3 -f g | gbits)," \
    "loopback up $("$NC" -qq run -- iperf3 -c 127.0.0.1 -p 5202 -t 3 -f g | gbits)," \
    "down $("$NC" -qq run -- iperf3 -R -c 127.0.0.1 -p 5202 -t 3 -f g | gbits)"
done
