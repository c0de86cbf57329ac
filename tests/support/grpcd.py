"""A small gRPC server (grpcio, HTTP/2) for the HTTP/2 tests, on loopback.

python3 grpcd.py [--cert CERT --key KEY] [--max-age MS]   prints its port,
then serves, until its standard input closes, messages as raw bytes (no
protobuf); with --max-age, each connection is sent away (GOAWAY) that long
after it opened, its calls in flight let finish:

  /test.Echo/Unary    the request back, prefixed "echo:"
  /test.Echo/Stream   the request's number N: N messages "msg-I", 50 ms apart
  /test.Echo/Chat     each message back, prefixed "echo:", as it comes
  /test.Echo/Count    how many Unary calls it has had, as text
  /test.Echo/Sleep    the request back after the request's number of seconds
  /test.Echo/Fail     the request's number N: N messages "msg-I", then the
                      call fails DATA_LOSS, "lost 50% ✓"
"""

import sys
import threading
import time
from concurrent import futures

import grpc

calls = 0
lock = threading.Lock()


def unary(req, ctx):
    global calls
    with lock:
        calls += 1
    return b"echo:" + req


def stream(req, ctx):
    for i in range(int(req or b"3")):
        if i:
            time.sleep(0.05)
        yield f"msg-{i}".encode()


def chat(reqs, ctx):
    for r in reqs:
        yield b"echo:" + r


def sleep(req, ctx):
    time.sleep(float(req))
    return req


def fail(req, ctx):
    for i in range(int(req or b"1")):
        yield f"msg-{i}".encode()
    ctx.abort(grpc.StatusCode.DATA_LOSS, "lost 50% ✓")


def count(req, ctx):
    with lock:
        return str(calls).encode()


def main():
    handler = grpc.method_handlers_generic_handler(
        "test.Echo",
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
            "Count": grpc.unary_unary_rpc_method_handler(count),
            "Sleep": grpc.unary_unary_rpc_method_handler(sleep),
            "Fail": grpc.unary_stream_rpc_method_handler(fail),
        },
    )
    options = []
    if "--max-age" in sys.argv:
        age = int(sys.argv[sys.argv.index("--max-age") + 1])
        options = [("grpc.max_connection_age_ms", age),
                   ("grpc.max_connection_age_grace_ms", 30000)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    server.add_generic_rpc_handlers((handler,))
    if "--cert" in sys.argv:
        cert = open(sys.argv[sys.argv.index("--cert") + 1], "rb").read()
        key = open(sys.argv[sys.argv.index("--key") + 1], "rb").read()
        creds = grpc.ssl_server_credentials([(key, cert)])
        port = server.add_secure_port("127.0.0.1:0", creds)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(0)


main()
