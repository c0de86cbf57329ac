"""Writes to a server that never reads until no write has gone through for
2 s (60 s at most) and prints the bytes the path accepted; with --detail,
also the client socket's send buffer and MSS.

usage: write_until_blocked.py HOST PORT [--detail]
Used by tests/connect.rs and scripts/backpressure.sh."""
import select, socket, sys, time

s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.setblocking(False)
total, idle, buf = 0, None, b"x" * 65536
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        total += s.send(buf)
        idle = None
    except BlockingIOError:
        idle = idle or time.monotonic()
        if time.monotonic() - idle > 2.0:
            break
        select.select([], [s], [], 0.1)
if sys.argv[3:] == ["--detail"]:
    sndbuf = s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    mss = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    print(f"{total} (sndbuf {sndbuf}, mss {mss})")
else:
    print(total)
