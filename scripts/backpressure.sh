#!/usr/bin/env bash
# Back-pressure beside a real path (#49): how many bytes a client's send()
# accepts before it blocks, towards a server that never reads, directly and
# under `netchaos run`; and what a single iperf3 stream carries under `run`
# (the fast path's throughput, which a fix must keep); and the same for a
# service of the command's own inside its namespace (a server that never
# reads, one whose client never reads, iperf3). Two servers: one
# across a veth at MTU 1500 with segmentation offloads off (an Ethernet
# path, in a namespace of the script's own) and one on loopback.
# See docs/fidelity.md ("Where netchaos still differs").
#
# Runs as root in a network namespace of its own (it makes one with
# `unshare -n` when not told it is already inside one); everything it makes
# goes with it.
#
# With BP_BASELINE=/path/to/netchaos, each round also measures that binary
# (a build from before a change), interleaved with this tree's.
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
# A service of the command's own, inside its namespace: a server that
# never reads (upload) and one that writes to a client that never reads
# (download), then iperf3 up and down, all on that namespace's loopback.
cat >"$DIR/inside.sh" <<EOF
python3 "$DIR/sink.py" 127.0.0.1 9101 & a=\$!
python3 "$DIR/source.py" 127.0.0.1 9102 & b=\$!
iperf3 -s -p 5301 -B 127.0.0.1 >/dev/null 2>&1 & c=\$!
sleep 0.5
echo "upload \$(python3 "$WRITE" 127.0.0.1 9101), download \$(python3 "$DIR/source.py" 127.0.0.1 9102 --client);" \\
  "iperf3 up \$(iperf3 -c 127.0.0.1 -p 5301 -t 3 -f g | awk '/receiver/ {print \$7}')," \\
  "down \$(iperf3 -R -c 127.0.0.1 -p 5301 -t 3 -f g | awk '/receiver/ {print \$7}')"
kill \$a \$b \$c
EOF
# Server: writes to each client until no write has gone through for 2 s,
# then sends the count on the client's second connection; --client:
# connects, never reads, and prints what the server's send() took.
cat >"$DIR/source.py" <<'EOF'
import select, socket, sys, time
host, port = sys.argv[1], int(sys.argv[2])
if sys.argv[3:] == ["--client"]:
    idle = socket.create_connection((host, port))
    report = socket.create_connection((host, port))
    print(report.makefile().readline().strip())
    sys.exit()
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((host, port))
l.listen(8)
while True:
    c, _ = l.accept()
    r, _ = l.accept()
    c.setblocking(False)
    total, since = 0, None
    while since is None or time.monotonic() - since < 2.0:
        try:
            total += c.send(b"x" * 65536)
            since = None
        except BlockingIOError:
            since = since or time.monotonic()
            select.select([], [c], [], 0.1)
    r.sendall(f"{total}\n".encode())
    c.close()
    r.close()
EOF

# Each round: directly, then under `run`, then under BP_BASELINE (another
# netchaos binary, e.g. the previous build) when given.
RUNS=("$NC")
[[ -n ${BP_BASELINE:-} ]] && RUNS+=("$BP_BASELINE")
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r"
  echo "  direct: veth $(python3 "$WRITE" 10.77.0.2 9000 --detail)," \
    "loopback $(python3 "$WRITE" 127.0.0.1 9001 --detail)"
  echo "    inside a namespace: $(unshare -n sh -c "ip link set lo up; sh $DIR/inside.sh")"
  for nc in "${RUNS[@]}"; do
    echo "  run ($nc):"
    echo "    accepted: veth $("$nc" -qq run -- python3 "$WRITE" 10.77.0.2 9000 --detail)," \
      "loopback $("$nc" -qq run -- python3 "$WRITE" 127.0.0.1 9001 --detail)"
    echo "    iperf3, Gbit/s: veth up $("$nc" -qq run -- iperf3 -c 10.77.0.2 -p 5201 -t 3 -f g | gbits)," \
      "loopback up $("$nc" -qq run -- iperf3 -c 127.0.0.1 -p 5202 -t 3 -f g | gbits)," \
      "down $("$nc" -qq run -- iperf3 -R -c 127.0.0.1 -p 5202 -t 3 -f g | gbits)"
    echo "    the command's own service: $("$nc" -qq run -- sh "$DIR/inside.sh")"
  done
done
