"""A small HTTP/1.1 server for the HTTP-layer tests, on loopback.

python3 httpd.py [--bind ADDR] [--cert CERT --key KEY]   prints its port, then serves:

  GET  /p/N          200, body "body-N;" * 10 (content-length), keep-alive
  GET  /big/N        200, N bytes of a fixed pattern (content-length)
  GET  /sse/N        200 text/event-stream, N events {"i": i}, one chunk each
  GET  /sse-len/N    the same N events with a Content-Length, in one piece
  GET  /sse-gz/N     the same, gzip-compressed when Accept-Encoding asks
  POST /echo         200, the request body back (any framing in)
  POST /v1/messages  an Anthropic Messages API answer, "hello" with stop_reason
                     end_turn: JSON, or its event stream when the body asks
  POST /v1/chat/completions  an OpenAI Chat Completions answer, "hello" with
                     finish_reason stop: JSON, or its chunks when the body
                     asks (a usage chunk without choices too, when asked)
  POST /v1/responses an OpenAI Responses API answer, "hello", status
                     completed: JSON, or its typed event stream when asked
                     (a reasoning item first when the body asks for reasoning)
  POST /v1beta/models/M:generateContent        a Gemini API answer, "hello",
  POST /v1beta/models/M:streamGenerateContent  finishReason STOP: JSON, or
                     two chunks as an event stream (alt=sse)
  POST /api/chat     an Ollama chat answer, "hello", done_reason stop: its
                     NDJSON stream (three lines; model llama-nolf: the last
                     without its LF), or JSON with stream false
  POST …/publishers/anthropic/models/M:rawPredict        the same, as Google's
  POST …/publishers/anthropic/models/M:streamRawPredict  Vertex AI serves it
  POST /model/M/invoke                       Amazon Bedrock: an Anthropic
  POST /model/M/invoke-with-response-stream  answer as JSON, or its events in
                     Bedrock chunks (AWS's binary event stream, base64 JSON);
                     M amazon.nova…: Nova's (stopReason), meta.llama…:
                     Llama's (stop_reason stop); mistral…, cohere.command-r…,
                     cohere.command…, ai21.jamba…, amazon.titan-text…: those
                     providers' own shapes (BEDROCK_MODELS)
  POST /model/M/converse         Bedrock's Converse API: "hello", stopReason
  POST /model/M/converse-stream  end_turn: JSON, or its typed event frames
  ANY  /echo-head/…  200, the request line and headers as received
  GET  /ws           101 Switching Protocols, then echoes raw bytes
  GET  /close        200 with Connection: close, then closes
  GET  /json         200 application/json, a message with "stop_reason":
                     "end_turn" (gzip-compressed when Accept-Encoding asks)
  GET  /json-chunked the same, uncompressed, in two chunks
  GET  /json-close   the same as HTTP/1.0, its end the connection's close
  GET  /ndjson       200 application/x-ndjson, two lines in two chunks

Each response is written in one piece with TCP_NODELAY, so timing is the
relay's, not Nagle's. Ends when stdin closes (the test dropped it).
"""
import base64
import binascii
import gzip
import http.server
import json
import socketserver
import ssl
import struct
import sys
import threading
import time


def aws_frame(event_type, payload):
    """One frame of AWS's binary event stream: an event of this type."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(headers) + len(body) + 4, len(headers))
    frame = prelude + struct.pack(">I", binascii.crc32(prelude)) + headers + body
    return frame + struct.pack(">I", binascii.crc32(frame))


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}



# Other model providers on Bedrock's InvokeModel, by model ID prefix (the
# first that matches): a whole answer, and its stream's chunks, each ending
# the way a finished answer does, as AWS's model parameter pages give them.
def _cohere_r(text, final):
    return {"response_id": "r1", "text": text, "generation_id": "g1", "chat_history": [],
            "finish_reason": final}


def _jamba(part, final, key="delta"):
    return {"id": "j1", "choices": [{"index": 0, key: {"role": "assistant", "content": part},
                                     "finish_reason": final}]}


BEDROCK_MODELS = [
    ("mistral.mistral-large-2407", (  # chat completion: choices, stop_reason
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "stop_reason": "stop"}]},
        [{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hel"}, "stop_reason": None}]},
         {"choices": [{"index": 0, "message": {"role": "assistant", "content": "lo"}, "stop_reason": "stop"}]}])),
    ("mistral.", (  # text completion: outputs
        {"outputs": [{"text": "hello", "stop_reason": "stop"}]},
        [{"outputs": [{"text": "hel", "stop_reason": None}]},
         {"outputs": [{"text": "lo", "stop_reason": "stop"}]}])),
    ("cohere.command-r", (
        _cohere_r("hello", "COMPLETE"),
        [{"is_finished": False, "event_type": "stream-start", "generation_id": "g1"},
         {"is_finished": False, "event_type": "text-generation", "text": "hel"},
         {"is_finished": False, "event_type": "text-generation", "text": "lo"},
         {"is_finished": True, "event_type": "stream-end", "finish_reason": "COMPLETE",
          "response": _cohere_r("hello", "COMPLETE")}])),
    ("cohere.command", (  # the older Command: generations
        {"id": "c1", "prompt": "hi", "generations": [
            {"id": "g1", "text": "hello", "finish_reason": "COMPLETE", "is_finished": True}]},
        [{"text": "hel", "is_finished": False}, {"text": "lo", "is_finished": False},
         {"is_finished": True, "finish_reason": "COMPLETE", "response": {"id": "c1", "generations": [
             {"id": "g1", "text": "hello", "finish_reason": "COMPLETE"}]}}])),
    ("ai21.jamba", (
        _jamba("hello", "stop", key="message"),
        [_jamba("hel", None), _jamba("lo", "stop")])),
    ("amazon.titan-text", (
        {"inputTextTokenCount": 3, "results": [{"tokenCount": 1, "outputText": "hello",
                                                "completionReason": "FINISHED"}]},
        [{"index": 0, "inputTextTokenCount": 3, "totalOutputTextTokenCount": 1, "outputText": "hel",
          "completionReason": None},
         {"index": 0, "inputTextTokenCount": None, "totalOutputTextTokenCount": 2, "outputText": "lo",
          "completionReason": "FINISHED"}])),
]

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'X'}\r\n"
        for k, v in headers:
            head += f"{k}: {v}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        self.wfile.write(head.encode() + body)
        self.wfile.flush()

    def echo_head(self):
        self.reply(200, (self.requestline + "\r\n" + str(self.headers)).encode())

    def do_GET(self):
        parts = self.path.split("/")
        if self.path.startswith("/echo-head/"):
            self.echo_head()
        elif self.path.startswith("/p/"):
            self.reply(200, (f"body-{parts[2]};" * 10).encode())
        elif self.path.startswith("/big/"):
            n = int(parts[2])
            self.reply(200, (bytes(range(251)) * (n // 251 + 1))[:n])
        elif self.path.startswith("/sse-gz/"):
            n = int(parts[2])
            evs = "".join(f"event: delta\ndata: {json.dumps({'i': i})}\n\n" for i in range(n))
            body, headers = evs.encode(), [("Content-Type", "text/event-stream")]
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            self.reply(200, body, headers)
        elif self.path.startswith("/sse-len/"):
            n = int(parts[2])
            evs = "".join(f"event: delta\ndata: {json.dumps({'i': i})}\n\n" for i in range(n))
            self.reply(200, evs.encode(), [("Content-Type", "text/event-stream")])
        elif self.path.startswith("/sse/"):
            n = int(parts[2])
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            self.wfile.flush()
            for i in range(n):
                ev = f"event: delta\ndata: {json.dumps({'i': i})}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                self.wfile.flush()
                time.sleep(0.005)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif self.path == "/ws" and self.headers.get("Upgrade"):
            self.wfile.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
            )
            self.wfile.flush()
            while True:
                b = self.connection.recv(65536)
                if not b:
                    break
                self.connection.sendall(b)
            self.close_connection = True
        elif self.path == "/http10":
            # An HTTP/1.0 answer without keep-alive: the connection ends.
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            self.wfile.flush()
            time.sleep(0.05)
            self.close_connection = True
        elif self.path == "/json":
            body = json.dumps(MESSAGE).encode()
            headers = [("Content-Type", "application/json")]
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
            self.reply(200, body, headers)
        elif self.path == "/json-chunked":
            body = json.dumps(MESSAGE).encode()
            half = len(body) // 2
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (body[:half], body[half:]))
                + b"0\r\nX-Trailer: 1\r\n\r\n"
            )
            self.wfile.flush()
        elif self.path == "/json-close":
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
            self.wfile.write(json.dumps(MESSAGE).encode())
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/ndjson":
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (b'{"i":0}\n', b'{"i":1}\n'))
                + b"0\r\n\r\n"
            )
            self.wfile.flush()
        elif self.path == "/close":
            self.close_connection = True
            self.reply(200, b"bye", [("Connection", "close")])
        else:
            self.reply(404, b"not found")

    def do_get(self):
        # A method of its own (methods are case-sensitive, RFC 9110 §9.1),
        # which this server answers and keeps the connection for.
        self.reply(200, b"lowercase get")

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/echo-head/"):
            self.echo_head()
            return
        if self.path.endswith((":rawPredict", ":streamRawPredict")):  # Anthropic on Vertex AI
            self.messages(json.loads(body or b"{}"))
            return
        if self.path.startswith("/v1/messages"):
            self.messages(json.loads(body or b"{}"))
            return
        if self.path.startswith("/v1/chat/completions"):
            self.completions(json.loads(body or b"{}"))
            return
        if self.path.startswith("/v1/responses"):
            self.openai_responses(json.loads(body or b"{}"))
            return
        if self.path.startswith("/v1beta/models/"):
            self.gemini()
            return
        if self.path == "/api/chat":
            self.ollama(json.loads(body or b"{}"))
            return
        if self.path.startswith("/model/"):
            self.bedrock(self.path.rsplit("/", 1)[1], json.loads(body or b"{}"))
            return
        self.reply(200, body)

    def messages(self, req):
        usage = {"input_tokens": 3, "output_tokens": 1}
        message = {"id": "msg_1", "type": "message", "role": "assistant",
                   "model": req.get("model", "claude-test"), "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": usage}
        if not req.get("stream"):
            message.update(content=[{"type": "text", "text": "hello"}], stop_reason="end_turn")
            self.reply(200, json.dumps(message).encode(), [("Content-Type", "application/json")])
            return
        events = self.anthropic_events(message)
        self.event_stream([f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events])

    @staticmethod
    def anthropic_events(message):
        return [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "hello"}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 1}}),
            ("message_stop", {"type": "message_stop"}),
        ]

    def bedrock(self, action, req):
        json_type = [("Content-Type", "application/json")]
        stream = [("X-Amzn-Bedrock-Content-Type", "application/json")]
        model = self.path.split("/")[2]

        def chunks(events):
            return [aws_frame("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode(),
                                        "p": "abcdefgh"}) for e in events]
        if action in ("invoke", "invoke-with-response-stream") and model.startswith("amazon.nova"):
            usage = {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}
            if action == "invoke":
                self.reply(200, json.dumps({
                    "output": {"message": {"role": "assistant", "content": [{"text": "hello"}]}},
                    "stopReason": "end_turn", "usage": usage}).encode(), json_type)
                return
            self.event_stream(chunks([
                {"messageStart": {"role": "assistant"}},
                {"contentBlockDelta": {"delta": {"text": "hello"}, "contentBlockIndex": 0}},
                {"contentBlockStop": {"contentBlockIndex": 0}},
                {"messageStop": {"stopReason": "end_turn"}},
                {"metadata": {"usage": usage}},
            ]), "application/vnd.amazon.eventstream", stream)
            return
        if action in ("invoke", "invoke-with-response-stream") and model.startswith("meta.llama"):
            if action == "invoke":
                self.reply(200, json.dumps({"generation": "hello", "prompt_token_count": 3,
                                            "generation_token_count": 1, "stop_reason": "stop"}).encode(),
                           json_type)
                return
            self.event_stream(chunks([
                {"generation": "hel", "prompt_token_count": 3, "generation_token_count": 1, "stop_reason": None},
                {"generation": "lo", "prompt_token_count": None, "generation_token_count": 2, "stop_reason": "stop"},
            ]), "application/vnd.amazon.eventstream", stream)
            return
        for prefix, (whole, streamed) in BEDROCK_MODELS:
            if action in ("invoke", "invoke-with-response-stream") and model.startswith(prefix):
                if action == "invoke":
                    self.reply(200, json.dumps(whole).encode(), json_type)
                else:
                    self.event_stream(chunks(streamed), "application/vnd.amazon.eventstream", stream)
                return
        if action in ("invoke", "invoke-with-response-stream"):
            usage = {"input_tokens": 3, "output_tokens": 1}
            message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                       "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
            if action == "invoke":
                message.update(content=[{"type": "text", "text": "hello"}], stop_reason="end_turn")
                self.reply(200, json.dumps(message).encode(), json_type)
                return
            frames = chunks([data for _, data in self.anthropic_events(message)])
            self.event_stream(frames, "application/vnd.amazon.eventstream", stream)
            return
        usage = {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}
        if action == "converse":
            self.reply(200, json.dumps({
                "output": {"message": {"role": "assistant", "content": [{"text": "hello"}]}},
                "stopReason": "end_turn", "usage": usage, "metrics": {"latencyMs": 1},
            }).encode(), json_type)
            return
        frames = [aws_frame(t, dict(d, p="abcd")) for t, d in [
            ("messageStart", {"role": "assistant"}),
            ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hel"}}),
            ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "lo"}}),
            ("contentBlockStop", {"contentBlockIndex": 0}),
            ("messageStop", {"stopReason": "end_turn"}),
            ("metadata", {"usage": usage, "metrics": {"latencyMs": 1}}),
        ]]
        self.event_stream(frames, "application/vnd.amazon.eventstream", stream)


    def completions(self, req):
        model = req.get("model", "gpt-test")
        head = {"id": "chatcmpl-1", "created": 1, "model": model}
        usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        if not req.get("stream"):
            answer = dict(head, object="chat.completion", usage=usage, choices=[{
                "index": 0, "finish_reason": "stop", "logprobs": None,
                "message": {"role": "assistant", "content": "hello"}}])
            self.reply(200, json.dumps(answer).encode(), [("Content-Type", "application/json")])
            return

        def chunk(delta, finish):
            return dict(head, object="chat.completion.chunk", choices=[
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])
        chunks = [chunk({"role": "assistant", "content": ""}, None),
                  chunk({"content": "hel"}, None), chunk({"content": "lo"}, None),
                  chunk({}, "stop")]
        if req.get("stream_options", {}).get("include_usage"):
            chunks.append(dict(head, object="chat.completion.chunk", choices=[], usage=usage))
        self.event_stream([f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"])

    def openai_responses(self, req):  # (`responses` is the base class's status table)
        text = {"type": "output_text", "text": "hello", "annotations": []}
        item = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [text]}
        usage = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4,
                 "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        response = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
                    "error": None, "incomplete_details": None, "instructions": None,
                    "max_output_tokens": None, "model": req.get("model", "gpt-test"),
                    "output": [item], "parallel_tool_calls": True, "tool_choice": "auto",
                    "tools": [], "usage": usage}
        if req.get("reasoning"):
            # A reasoning model's answer: its reasoning item comes first.
            response["output"] = [{"type": "reasoning", "id": "rs_1", "summary": []}, item]
        if not req.get("stream"):
            self.reply(200, json.dumps(response).encode(), [("Content-Type", "application/json")])
            return
        at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        started = dict(response, status="in_progress", output=[], usage=None)
        events = [
            {"type": "response.created", "response": started},
            {"type": "response.output_item.added", "output_index": 0,
             "item": dict(item, status="in_progress", content=[])},
            dict(at, type="response.content_part.added", part=dict(text, text="")),
            dict(at, type="response.output_text.delta", delta="hel", logprobs=[]),
            dict(at, type="response.output_text.delta", delta="lo", logprobs=[]),
            dict(at, type="response.output_text.done", text="hello", logprobs=[]),
            dict(at, type="response.content_part.done", part=text),
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]
        self.event_stream([
            f"event: {e['type']}\ndata: {json.dumps(dict(e, sequence_number=n))}\n\n"
            for n, e in enumerate(events)
        ])

    def gemini(self):
        model = self.path.split("/")[3].split(":")[0]

        def chunk(text, finish):
            candidate = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
            if finish:
                candidate["finishReason"] = finish
            return {"candidates": [candidate], "modelVersion": model, "responseId": "r1",
                    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1,
                                      "totalTokenCount": 4}}
        if ":streamGenerateContent" not in self.path:
            self.reply(200, json.dumps(chunk("hello", "STOP")).encode(),
                       [("Content-Type", "application/json")])
            return
        self.event_stream([f"data: {json.dumps(c)}\r\n\r\n" for c in (chunk("hel", None), chunk("lo", "STOP"))])

    def ollama(self, req):
        def line(content, done):
            out = {"model": req.get("model", "llama-test"), "created_at": "2026-12-04T00:00:00Z",
                   "message": {"role": "assistant", "content": content}, "done": done}
            if done:
                out.update(done_reason="stop", total_duration=1000, eval_count=1)
            return out
        if req.get("stream") is False:
            self.reply(200, json.dumps(line("hello", True)).encode(),
                       [("Content-Type", "application/json; charset=utf-8")])
            return
        lines = [json.dumps(c) + "\n" for c in (line("hel", False), line("lo", False), line("", True))]
        if req.get("model") == "llama-nolf":
            lines[-1] = lines[-1].rstrip("\n")  # JSON Lines allows a last line without its LF
        self.event_stream(lines, "application/x-ndjson")

    def event_stream(self, events, content_type="text/event-stream", headers=()):
        """A streamed response (text/event-stream by default), one chunk per event."""
        self.wfile.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n".encode()
            + "".join(f"{k}: {v}\r\n" for k, v in headers).encode()
            + b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for ev in events:
            ev = ev if isinstance(ev, bytes) else ev.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    bind = sys.argv[sys.argv.index("--bind") + 1] if "--bind" in sys.argv else "127.0.0.1"
    srv = Server((bind, 0), Handler)
    if "--cert" in sys.argv:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(
            sys.argv[sys.argv.index("--cert") + 1], sys.argv[sys.argv.index("--key") + 1]
        )
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    sys.stdin.read()


main()
