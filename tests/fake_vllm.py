"""Local servers that answer as vLLM's OpenAI API does, for the tests of module_utils/openai_client.py and of
the modules that talk to vLLM (no Docker): Handler and its `server` fixture, whose model name picks the
answer; Scripted and its `scripted` fixture, whose answers each test scripts; serving, which runs any
handler for the length of a with block."""
import contextlib
import http.server
import json
import sys
import threading
import time

import pytest

FIRST_TOKEN_DELAY_S = 0.2


class Handler(http.server.BaseHTTPRequestHandler):
    """GET /health and /v1/models; POST /v1/chat/completions, whose model name picks the answer."""

    seen = []

    def log_message(self, *args):
        pass

    def answer(self, status, body, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.path.endswith("/v1/models"):
            self.answer(200, json.dumps({"object": "list", "data": [{"id": "Qwen3-VL-8B-Instruct"}]}).encode())
        else:
            self.answer(200, b"ok", "text/plain")

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, self.headers.get("Authorization")))
        kind = request["model"]
        if kind == "http_500":
            return self.answer(500, b'{"error": "boom"}')
        if not request.get("stream"):
            return self.answer(200, json.dumps({"id": "chatcmpl-1", "choices": [
                {"message": {"role": "assistant", "content": "a picture"}}],
                "usage": {"prompt_tokens": 318, "completion_tokens": 2, "total_tokens": 320}}).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def event(payload):
            self.wfile.write(b"data: " + payload.encode() + b"\n\n")
            self.wfile.flush()

        event(json.dumps({"id": "chatcmpl-7", "choices": [{"delta": {"role": "assistant"}}]}))
        time.sleep(FIRST_TOKEN_DELAY_S if kind != "stall" else 3)
        for word in ("a", " picture", " of"):
            event(json.dumps({"id": "chatcmpl-7", "choices": [{"delta": {"content": word}}]}))
        if kind != "no_usage":
            event(json.dumps({"id": "chatcmpl-7", "choices": [],
                              "usage": {"prompt_tokens": 318, "completion_tokens": 3, "total_tokens": 321}}))
        if kind != "cut":
            event("[DONE]")


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client that leaves mid-answer, as the tests make clients do, is no server error worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serving(handler):
    """The base URL of a local server whose requests handler answers, for the length of the with block."""
    httpd = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server():
    Handler.seen = []
    with serving(Handler) as url:
        yield url


MODEL = "Qwen3-VL-8B-Instruct"


class Scripted(http.server.BaseHTTPRequestHandler):
    """GET /health answers 200 and /v1/models `models`; a chat request gets `chat`: (status, body) for a whole
    answer, or a list of lines (bytes) for a stream of server-sent events."""

    models = (200, json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode())
    chat = (200, b"{}")
    chats = 0

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer(*(self.models if self.path.endswith("/v1/models") else (200, b"")))

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).chats += 1
        if not isinstance(self.chat, list):
            return self.answer(*self.chat)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for line in self.chat:
            self.wfile.write(line + b"\n\n")


@pytest.fixture
def scripted():
    """The base URL of a Scripted server; each test sets Scripted.chat (and models) to what it needs."""
    with serving(Scripted) as url:
        yield url
    Scripted.models = (200, json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode())
    Scripted.chat, Scripted.chats = (200, b"{}"), 0
