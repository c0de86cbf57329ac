#!/usr/bin/env python3
"""Timing probes for scripts/bench.sh: how precisely a delay reaches a client.

Each probe pauses 10 ms between samples, as an interactive client would, so
that every sample meets the machine as it is after a short idle (a CPU that
has fallen asleep wakes late, on a virtual machine by up to milliseconds).

  timing.py echo HOST:PORT N      64-byte echo round trips (ms): "p50 p99"
  timing.py connect HOST:PORT N   connect() times (ms): "p50 p99"
  timing.py wake N                the floor: a process blocked in recv() for
                                  50 ms, woken by a byte that a spinning
                                  process sends exactly on time; how long it
                                  took (ms): "p50 p99". No fault injector can
                                  deliver a 50 ms delay to a client more
                                  precisely than the client itself wakes.
"""

import os
import socket
import sys
import time

PAUSE = 0.01


def quantiles(ts):
    ts = sorted(ts)
    n = len(ts)
    return f"{ts[n // 2]:.3f} {ts[min(n - 1, int(n * 0.99))]:.3f}"


def addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def echo(target, n):
    s = socket.create_connection(addr(target), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ts = []
    for _ in range(n):
        time.sleep(PAUSE)
        t = time.perf_counter()
        s.sendall(b"x" * 64)
        got = 0
        while got < 64:
            b = s.recv(64 - got)
            if not b:
                sys.exit("timing.py: the echo server closed the connection")
            got += len(b)
        ts.append((time.perf_counter() - t) * 1e3)
    s.close()
    return ts


def connect(target, n):
    ts = []
    for _ in range(n):
        time.sleep(PAUSE)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(10)
        t = time.perf_counter()
        s.connect(addr(target))
        ts.append((time.perf_counter() - t) * 1e3)
        s.close()
    return ts


def wake(n):
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        for _ in range(n):
            t0 = float(b.recv(64).decode())
            while time.perf_counter() < t0 + 0.05:
                pass
            b.send(b"x")
        os._exit(0)
    b.close()
    ts = []
    for _ in range(n):
        time.sleep(PAUSE)
        t0 = time.perf_counter()
        a.send(repr(t0).encode())
        a.recv(1)
        ts.append((time.perf_counter() - t0) * 1e3)
    os.waitpid(pid, 0)
    return ts


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "echo" and len(sys.argv) == 4:
        print(quantiles(echo(sys.argv[2], int(sys.argv[3]))))
    elif what == "connect" and len(sys.argv) == 4:
        print(quantiles(connect(sys.argv[2], int(sys.argv[3]))))
    elif what == "wake" and len(sys.argv) == 3:
        print(quantiles(wake(int(sys.argv[2]))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
