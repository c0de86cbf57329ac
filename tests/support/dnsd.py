"""A tiny authoritative DNS responder for tests: answers A queries for the
names given on the command line, every other query with an empty NOERROR
(or NXDOMAIN for unknown names). Prints its port, then serves until stdin
closes.

usage: python3 dnsd.py NAME=IPV4 [NAME=IPV4 ...]
"""
import socket
import struct
import sys
import threading

records = dict(arg.split("=", 1) for arg in sys.argv[1:])
records = {k.lower().rstrip("."): v for k, v in records.items()}

sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
print(sock.getsockname()[1], flush=True)


def qname(data, off):
    labels = []
    while data[off]:
        n = data[off]
        labels.append(data[off + 1 : off + 1 + n].decode())
        off += 1 + n
    return ".".join(labels).lower(), off + 1


def answer(query):
    ident, flags, qd = struct.unpack("!HHH", query[:6])
    name, end = qname(query, 12)
    qtype, qclass = struct.unpack("!HH", query[end : end + 4])
    question = query[12 : end + 4]
    known = name in records
    rcode = 0 if known else 3
    answers = b""
    count = 0
    if known and qtype == 1:
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + socket.inet_aton(records[name])
        count = 1
    header = struct.pack("!HHHHHH", ident, 0x8180 | rcode, 1, count, 0, 0)
    return header + question + answers


def serve():
    while True:
        data, addr = sock.recvfrom(4096)
        try:
            sock.sendto(answer(data), addr)
        except Exception as e:  # a malformed query: ignore it
            print("dnsd:", e, file=sys.stderr)


threading.Thread(target=serve, daemon=True).start()
sys.stdin.read()
