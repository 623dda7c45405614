#!/usr/bin/env python3
"""A ground-truth OpenAI chat server for measuring benchmark clients: every answer keeps a set schedule.

A streamed chat request gets its first token TTFT after its body was read and each next one TPOT later, as
vLLM streams them (chunked transfer encoding; the role and the first token in one chunk, one chunk a token,
the last with finish_reason "length", a usage chunk when stream_options.include_usage asks for it, then
`data: [DONE]`); always max_tokens tokens, as with ignore_eos. One asyncio loop serves every connection, and
a body's image is never parsed: only the few bytes of its header are read, for its prompt tokens. So at
concurrency 64 with 1920x1080 bodies the sink stays cheap enough on a small machine that what a client
measures beyond the schedule is the client's.

Every finished request is one JSON line of the log: id, status, max_tokens, body bytes, and the wall times
(Unix seconds) it was received (connection accepted, or its first bytes on a kept-alive connection), its
body read, its first token and last byte written, each next to the time the schedule intended, so the
sink's own lateness is in its log too.

Usage: python benchmarks/sink.py --log FILE [--port 0] [--ttft-ms 500] [--tpot-ms 40] [--model NAME]
It prints `listening on http://127.0.0.1:PORT` once it accepts connections, and stops on SIGTERM or SIGINT.
"""
import argparse
import asyncio
import base64
import binascii
import json
import os
import signal
import struct
import sys
import time

MODEL = "Qwen3-VL-8B-Instruct"
# Qwen3-VL's vision tokens: one per 32x32 pixels after resizing to a multiple of 32, plus the two that
# bracket an image, so uncapped 1920x1080 is the 2040 + 2 a vLLM server reports (1224 under the role's pixel cap).
PIXELS_PER_TOKEN_SIDE = 32
IMAGE_BRACKET_TOKENS = 2
# A text token per this many characters of prompt: near enough for a count the clients only report.
CHARACTERS_PER_TOKEN = 2
HEADER_END = b"\r\n\r\n"
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
               b"transfer-encoding: chunked\r\n\r\n")
LAST_CHUNK = b"0\r\n\r\n"
DONE = b"data: [DONE]\n\n"
# The log's moments, kept as loop (monotonic) time until written.
TIME_FIELDS = ("received_s", "body_read_s", "intended_first_token_s", "intended_finished_s", "first_token_s",
               "finished_s")


def json_answer(status, payload):
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status, b"OK" if status == 200 else b"Error", len(body), body)


def chunk(data):
    """One chunk of chunked transfer encoding."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def image_tokens(data_url):
    """The prompt tokens of the image of a data URL (its first 80 bytes will do), from the first 24 bytes of its
    PNG (32 base64 characters: the signature, then the IHDR's width and height); 0 for another kind of image,
    whose size is not at its start."""
    kind, _comma, data = data_url.partition(b",")
    try:
        header = base64.b64decode(data[:32]) if kind.endswith(b";base64") else b""
    except binascii.Error:
        return 0
    if header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        return 0
    width, height = struct.unpack(">II", header[16:24])
    return (max(1, round(width / PIXELS_PER_TOKEN_SIDE)) * max(1, round(height / PIXELS_PER_TOKEN_SIDE))
            + IMAGE_BRACKET_TOKENS)


def read_request(body):
    """(the request without its images' data, prompt tokens) of a chat body: data URLs hold no quote, so each is
    cut out with two finds, and the rest, a few hundred bytes, is parsed as JSON."""
    parts, tokens, at, search = [], 0, 0, 0
    while True:
        start = body.find(b'"data:', search)
        if start < 0:
            break
        end = body.find(b'"', start + 1)
        if end < 0:
            raise ValueError("a string that does not end")
        search = end + 1
        if body[start - 1:start] == b"\\":  # an escaped quote in a text, not the start of a string
            continue
        tokens += image_tokens(body[start + 1:min(end, start + 81)])
        parts.append(body[at:start])
        parts.append(b'""')
        at = end + 1
    parts.append(body[at:])
    request = json.loads(b"".join(parts))
    for message in request.get("messages") or []:
        content = message.get("content")
        texts = [content] if isinstance(content, str) else [
            part.get("text") or "" for part in content or [] if isinstance(part, dict)]
        tokens += sum(len(text) for text in texts) // CHARACTERS_PER_TOKEN + 1
    return request, tokens


class Sink:
    """What every connection shares: the schedule, the log and a request counter."""

    def __init__(self, log, ttft_s, tpot_s, model):
        self.log, self.ttft_s, self.tpot_s, self.model = log, ttft_s, tpot_s, model
        self.count = 0
        # Times are taken from the loop's monotonic clock and written as wall time with one offset, so a log's
        # times compare with each other exactly.
        self.wall_offset = time.time() - time.monotonic()
        self.prefix = "chatcmpl-%d-" % os.getpid()

    def write_log(self, record):
        for name in TIME_FIELDS:
            if record[name] is not None:
                record[name] = round(record[name] + self.wall_offset, 6)
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()


class Connection(asyncio.Protocol):
    """One client connection: requests in turn, kept alive until the client closes it."""

    def __init__(self, sink, loop):
        self.sink, self.loop = sink, loop
        self.transport = None
        self.buffer = bytearray()
        self.received = None  # when the request being read began
        self.answer = None  # the log record of the request being answered, or None
        self.framing = None  # its chunks' common start, and its usage event (or None)
        self.timer = None

    def connection_made(self, transport):
        self.transport = transport
        self.received = self.loop.time()

    def connection_lost(self, _error):
        if self.timer is not None:
            self.timer.cancel()
        if self.answer is not None:
            self.finish("client_disconnected")

    def data_received(self, data):
        if self.received is None:
            self.received = self.loop.time()
        self.buffer += data
        if self.answer is None:
            self.next_request()

    def next_request(self):
        """Answer the request in the buffer once it is all there."""
        end = self.buffer.find(HEADER_END)
        if end < 0:
            return
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        method, path = head[0].split(" ")[:2]
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4:end + 4 + length])
        del self.buffer[:end + 4 + length]
        body_read = self.loop.time()
        if method == "GET" and path.endswith("/v1/models"):
            self.reply(json_answer(200, {"object": "list", "data": [{"id": self.sink.model, "object": "model"}]}))
        elif method == "GET" and path == "/health":
            self.reply(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        elif method == "POST" and path.endswith("/chat/completions"):
            self.chat(body, body_read)
        else:
            self.reply(json_answer(404, {"detail": "Not Found"}))

    def reply(self, data):
        self.transport.write(data)
        self.request_done()

    def request_done(self):
        self.received = self.loop.time() if self.buffer else None
        if self.buffer:
            self.next_request()

    def chat(self, body, body_read):
        try:
            request, prompt_tokens = read_request(body)
            tokens = int(request["max_tokens"])
            if tokens < 1:
                raise ValueError("max_tokens below 1")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            self.reply(json_answer(400, {"error": {"message": "bad request: %s" % error, "type": "BadRequestError"}}))
            return
        self.sink.count += 1
        ttft, tpot = self.sink.ttft_s, self.sink.tpot_s
        self.answer = {
            "id": self.sink.prefix + str(self.sink.count), "status": "ok", "max_tokens": tokens,
            "prompt_tokens": prompt_tokens, "body_bytes": len(body), "stream": bool(request.get("stream")),
            "received_s": self.received, "body_read_s": body_read,
            "intended_first_token_s": body_read + ttft, "intended_finished_s": body_read + ttft + (tokens - 1) * tpot,
            "first_token_s": None, "finished_s": None}
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}
        if not self.answer["stream"]:
            self.timer = self.loop.call_at(self.answer["intended_finished_s"], self.whole_answer, usage)
            return
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())
        self.framing = (
            ('{"id":"%s","object":"chat.completion.chunk","created":%d,"model":"%s","choices":[{"index":0,'
             '"delta":' % (self.answer["id"], created, self.sink.model)).encode(),
            json.dumps({"id": self.answer["id"], "object": "chat.completion.chunk", "created": created,
                        "model": self.sink.model, "choices": [], "usage": usage}).encode() if include_usage else None)
        self.transport.write(STREAM_HEAD)
        self.timer = self.loop.call_at(self.answer["intended_first_token_s"], self.token, 1)

    def token(self, number):
        """Write token `number` (from 1), and the end of the stream after the last one."""
        answer, (begin, usage) = self.answer, self.framing
        delta = b'{"role":"assistant","content":"tok"}' if number == 1 else b'{"content":" tok"}'
        last = number == answer["max_tokens"]
        event = b"data: " + begin + delta + (b',"logprobs":null,"finish_reason":"length"}]}\n\n' if last else
                                             b',"logprobs":null,"finish_reason":null}]}\n\n')
        if not last:
            self.transport.write(chunk(event))
            if number == 1:
                answer["first_token_s"] = self.loop.time()
            self.timer = self.loop.call_at(answer["intended_first_token_s"] + number * self.sink.tpot_s,
                                           self.token, number + 1)
            return
        if usage is not None:
            event += b"data: " + usage + b"\n\n"
        self.transport.write(chunk(event + DONE) + LAST_CHUNK)
        now = self.loop.time()
        if number == 1:
            answer["first_token_s"] = now
        answer["finished_s"] = now
        self.finish("ok")

    def whole_answer(self, usage):
        now = self.loop.time()
        self.answer.update(first_token_s=now, finished_s=now)
        self.transport.write(json_answer(200, {
            "id": self.answer["id"], "object": "chat.completion", "created": int(time.time()), "model": self.sink.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": " tok" * self.answer["max_tokens"]},
                         "finish_reason": "length"}], "usage": usage}))
        self.finish("ok")

    def finish(self, status):
        answer, self.answer, self.timer = self.answer, None, None
        answer["status"] = status
        if answer["finished_s"] is None:
            answer["finished_s"] = self.loop.time()
        answer["latency_s"] = answer["finished_s"] - answer["received_s"]
        self.sink.write_log(answer)
        if status == "ok":
            self.request_done()


async def serve(args):
    loop = asyncio.get_running_loop()
    with open(args.log, "a") as log:
        sink = Sink(log, args.ttft_ms / 1000.0, args.tpot_ms / 1000.0, args.model)
        server = await loop.create_server(lambda: Connection(sink, loop), args.host, args.port, backlog=1024)
        stop = asyncio.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, stop.set)
        print("listening on http://%s:%d" % (args.host, server.sockets[0].getsockname()[1]), flush=True)
        await stop.wait()
        server.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", required=True, help="the per-request log, JSON Lines (appended to)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (default)")
    parser.add_argument("--ttft-ms", type=float, default=500.0, help="body read to first token (default %(default)s)")
    parser.add_argument("--tpot-ms", type=float, default=40.0, help="one token to the next (default %(default)s)")
    parser.add_argument("--model", default=MODEL, help="the model name /v1/models lists (default %(default)s)")
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
