"""A tiny authoritative DNS responder for tests, on loopback, over UDP and
TCP (the same port): answers A (and AAAA) queries for the names given on
the command line, every other query for them with an empty NOERROR, and
unknown names with NXDOMAIN. Prints its port, then serves until stdin
closes. With --log FILE, appends a line "TRANSPORT NAME QTYPE" per query.

usage: python3 dnsd.py [--log FILE] NAME=IP [NAME=IP ...]
"""
import ipaddress
import socket
import struct
import sys
import threading

args = sys.argv[1:]
log = None
if args[:1] == ["--log"]:
    log = open(args[1], "a", buffering=1)
    args = args[2:]
records = {}
for arg in args:
    name, ip = arg.split("=", 1)
    records.setdefault(name.lower().rstrip("."), []).append(ipaddress.ip_address(ip))

# The kernel picks a free UDP port; the same TCP port may be taken by a
# parallel test's connection, so try a bounded number of ports.
for attempt in range(50):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    port = udp.getsockname()[1]
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        tcp.bind(("127.0.0.1", port))
        break
    except OSError:
        udp.close()
        tcp.close()
else:
    sys.exit("dnsd: no port free for both UDP and TCP after 50 tries")
tcp.listen(16)
print(port, flush=True)


def qname(data, off):
    labels = []
    while data[off]:
        n = data[off]
        labels.append(data[off + 1 : off + 1 + n].decode())
        off += 1 + n
    return ".".join(labels).lower(), off + 1


def answer(query, transport):
    ident, flags, qd = struct.unpack("!HHH", query[:6])
    name, end = qname(query, 12)
    qtype, qclass = struct.unpack("!HH", query[end : end + 4])
    if log:
        log.write(f"{transport} {name} {qtype}\n")
    question = query[12 : end + 4]
    known = name in records
    rcode = 0 if known else 3
    answers = b""
    count = 0
    for ip in records.get(name, []):
        if qtype == 1 and ip.version == 4:
            answers += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + ip.packed
            count += 1
        elif qtype == 28 and ip.version == 6:
            answers += b"\xc0\x0c" + struct.pack("!HHIH", 28, 1, 30, 16) + ip.packed
            count += 1
    header = struct.pack("!HHHHHH", ident, 0x8180 | rcode, 1, count, 0, 0)
    return header + question + answers


def serve_udp():
    while True:
        data, addr = udp.recvfrom(4096)
        try:
            udp.sendto(answer(data, "udp"), addr)
        except Exception as e:  # a malformed query: ignore it
            print("dnsd:", e, file=sys.stderr)


def read_exact(c, n):
    buf = b""
    while len(buf) < n:
        got = c.recv(n - len(buf))
        if not got:
            raise EOFError
        buf += got
    return buf


def serve_tcp_client(c):
    c.settimeout(10)
    try:
        while True:
            (n,) = struct.unpack("!H", read_exact(c, 2))
            a = answer(read_exact(c, n), "tcp")
            c.sendall(struct.pack("!H", len(a)) + a)
    except Exception:
        pass
    finally:
        c.close()


def serve_tcp():
    while True:
        c, _ = tcp.accept()
        threading.Thread(target=serve_tcp_client, args=(c,), daemon=True).start()


threading.Thread(target=serve_udp, daemon=True).start()
threading.Thread(target=serve_tcp, daemon=True).start()
sys.stdin.read()
