"""A real delayed path for the tests: a point-to-point link of two TUN
devices, one in the caller's network namespace and one in NETNS, joined by
this process, which holds every packet DELAY_MS milliseconds (each way)
before passing it on. The kernel sees a path with a round trip of twice the
delay, MTU 1500 and one segment per packet (TUN has no offloads): what
netem's `delay` gives, where the kernel has no sch_netem.

usage: tunpath.py DELAY_MS NETNS OUTER_IF INNER_IF OUTER_IP INNER_IP

Prints "ready" once both ends are up; runs until stdin closes.
"""

import collections
import fcntl
import os
import select
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def ip(*args):
    subprocess.run(["ip", *args], check=True)


def main():
    delay_ms, netns, outer, inner, outer_ip, inner_ip = sys.argv[1:7]
    delay = float(delay_ms) / 1000
    a, b = tun(outer), tun(inner)
    ip("link", "set", inner, "netns", netns)
    ip("addr", "add", outer_ip, "peer", inner_ip, "dev", outer)
    # A deep queue towards this process, so that a moment descheduled
    # costs delay, not the drops of the default 500 packets.
    ip("link", "set", outer, "mtu", "1500", "txqueuelen", "10000", "up")
    ip("-n", netns, "addr", "add", inner_ip, "peer", outer_ip, "dev", inner)
    ip("-n", netns, "link", "set", inner, "mtu", "1500", "txqueuelen", "10000", "up")
    print("ready", flush=True)
    # A constant delay keeps each direction's packets in order: a FIFO each.
    lines = {a: collections.deque(), b: collections.deque()}
    other = {a: b, b: a}
    stdin = sys.stdin.fileno()
    while True:
        now = time.monotonic()
        due = [q[0][0] for q in lines.values() if q]
        timeout = max(0.0, min(due) - now) if due else None
        ready, _, _ = select.select([a, b, stdin], [], [], timeout)
        now = time.monotonic()
        if stdin in ready and not os.read(stdin, 4096):
            return
        for fd in (a, b):
            if fd in ready:
                # Bounded: what arrived since the last wake-up.
                for _ in range(256):
                    try:
                        lines[other[fd]].append((now + delay, os.read(fd, 65536)))
                    except BlockingIOError:
                        break
        for fd, q in lines.items():
            while q and q[0][0] <= now:
                try:
                    os.write(fd, q.popleft()[1])
                except OSError:
                    pass


if __name__ == "__main__":
    main()
