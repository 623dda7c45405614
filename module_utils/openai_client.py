# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An OpenAI-compatible server (vLLM's) as the modules speak to it: http.client only, no third-party HTTP
library on the hosts, and no proxy from the environment between a host and its own loopback port.

Requests carry one image and a text prompt, the request an operator sends by hand.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import http.client
import json
import socket
import time
from urllib.parse import urlsplit

CHAT_PATH = "/v1/chat/completions"
# Stands for the image's data URL in a serialised request until a body is made (see ImageChat).
IMAGE_PLACEHOLDER = "ascend-vllm-fleet:image-url"
PNG_SIGNATURE = b"\x89PNG"
# The most a streamed answer's read takes at once: far more than an event, so a burst of them is one read.
STREAM_READ_BYTES = 65536
# The most an answer read whole may hold (a chat completion or a model list is kilobytes), and the longest line
# of a stream (an event is a few hundred bytes): a server that sends more is no vLLM, and is not read on.
MAX_ANSWER_BYTES = 8 << 20
MAX_STREAM_LINE_BYTES = 1 << 20
# Events of a chat stream that carry no new token: the role chunk, a finish_reason chunk, the usage chunk; with
# room to spare.
STREAM_EVENTS_BESIDE_TOKENS = 8
# What is read of a refused stream's body before the connection is closed: its status is all that is kept.
ERROR_BODY_MAX = 64 << 10


class ClientError(Exception):
    """The server can't be used as asked; the message says why and what to do."""


def image_data_url(data):
    """The data URL of a PNG or JPEG image, as a chat request's image_url carries it."""
    kind = "png" if data[:4] == PNG_SIGNATURE else "jpeg"
    return "data:image/%s;base64,%s" % (kind, base64.b64encode(data).decode("ascii"))


class ImageChat:
    """A chat request with one image and a text prompt, serialised once: each body only puts its image in.

    A data URL (base64) needs no JSON escaping, and serialising a megabyte of it for every request would cost
    more than making the image. The messages come first in the JSON, so the placeholder found first is the
    image's even when the prompt or the model name contains its text. The parts around it are kept encoded: a
    non-ASCII prompt would make the joined text two bytes a character, and encoding that megabyte again costs
    more than the image's base64.
    """

    def __init__(self, model, prompt, max_tokens, stream=False, ignore_eos=None, temperature=None):
        request = {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": IMAGE_PLACEHOLDER}},
            {"type": "text", "text": prompt}]}],
            "model": model, "max_tokens": max_tokens}
        if temperature is not None:
            request["temperature"] = temperature
        if stream:
            # The usage block gives the server's token counts, image tokens included.
            request.update(stream=True, stream_options={"include_usage": True})
        if ignore_eos is not None:
            request["ignore_eos"] = ignore_eos
        self._before, self._after = (part.encode("utf-8") for part in
                                     json.dumps(request, ensure_ascii=False).split(IMAGE_PLACEHOLDER, 1))

    def body(self, image_url):
        return b"".join((self._before, image_url.encode("utf-8"), self._after))


class StreamResult:
    """One streamed request's outcome; times are time.monotonic() seconds, error None when it succeeded."""

    __slots__ = ("sent", "first_token", "finished", "prompt_tokens", "completion_tokens", "error", "request_id")

    def __init__(self, sent=None):
        self.sent = sent
        self.request_id = None  # the server's id of the completion, to match its logs
        self.first_token = self.finished = None
        self.prompt_tokens = self.completion_tokens = None
        self.error = None


# The option of the modules that read the key on the host (vllm_probe, vllm_benchmark): the instance's env file,
# as the serving plan names it. It was called api_key_file until 0.1.0, a name that read as the controller's file of
# the bare key (the fleet role's fleet_api_key_file); the old name is kept for playbooks written with it.
ENV_FILE_OPTION = dict(type="path", aliases=["api_key_file"],
                       deprecated_aliases=[dict(name="api_key_file", version="1.0.0", collection_name="ascend.fleet")])


def key_from_env_file(path):
    """VLLM_API_KEY from the instance's env file (`docker run --env-file` format), or None without a file.

    Modules started with `async` keep their arguments in a file on the host while they run: reading the key
    here keeps it out of them.
    """
    if not path:
        return None
    fix = "Fix: give the instance's env file, <fleet_config_dir>/<instance>.env, or api_key"
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ClientError("env_file %s cannot be read (%s): expected the instance's env file on the host, with a "
                          "VLLM_API_KEY=<key> line. %s" % (path, type(error).__name__, fix)) from None
    for line in lines:
        if line.startswith("VLLM_API_KEY=") and line[len("VLLM_API_KEY="):]:
            return line[len("VLLM_API_KEY="):]
    raise ClientError("env_file %s holds no VLLM_API_KEY=<key> line: expected the instance's env file on the host, "
                      "not a file of the bare key. %s" % (path, fix))


def served_models(answer):
    """The model names in a /v1/models answer: each entry's text id (anything else lists none)."""
    entries = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(entries, list):
        return []
    return [entry["id"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def answer_text(reply):
    """choices[0].message.content of a chat completion (a parsed answer), when it is text; None otherwise."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def token_problem(api_key):
    """Why api_key cannot go in an Authorization header (without showing it), or None."""
    if "\n" in api_key or "\r" in api_key:
        return "holds a line break"
    if any(ord(character) > 126 for character in api_key):
        return "holds a character that is not ASCII"
    if any(ord(character) < 33 for character in api_key):
        return "holds white space or a control character"
    return None


class Client:
    def __init__(self, base_url, api_key=None, timeout=600):
        expected = "expected http://host:port, for example http://127.0.0.1:8000. Fix: correct base_url"
        try:
            parts = urlsplit(base_url)
            port = parts.port
        except ValueError:  # a port that is no number, or out of range
            raise ClientError("base_url %r: its port is not a number from 1 to 65535: %s" % (base_url, expected)) \
                from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ClientError("base_url %r: %s" % (base_url, expected))
        if port == 0:
            raise ClientError("base_url %r: its port is not a number from 1 to 65535: %s" % (base_url, expected))
        # The token's own value never goes into a message: the modules take it as no_log, a progress file does not.
        problem = token_problem(api_key) if api_key else None
        if problem:
            raise ClientError("api_key %s, which an HTTP header cannot carry: expected the bearer token alone. Fix: "
                              "set fleet_api_key to the token the server was started with (--api-key)" % problem)
        self.base_url = base_url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def connection(self, timeout=None):
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=timeout or self.timeout)

    def call(self, method, path, body=None, timeout=None):
        """(status, the answer parsed as JSON, or else its text) of one request; (None, why) without an answer.

        timeout bounds the whole exchange, not only each read: a server that trickles its answer a byte at a time
        is cut off at it, as is one whose answer passes MAX_ANSWER_BYTES."""
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        connection = self.connection(timeout)
        try:
            connection.request(method, self.prefix + path, body=body, headers=self.headers)
            # The response reads from this socket, even once the connection lets go of it (Connection: close).
            sock = connection.sock
            response = connection.getresponse()
            status, raw = response.status, read_whole(response, sock, deadline)
        except socket.timeout:
            return None, "no whole answer within %gs" % timeout
        except (OSError, http.client.HTTPException) as error:
            return None, str(error) or type(error).__name__
        except AnswerTooLarge as error:
            return None, str(error)
        finally:
            connection.close()
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def models(self):
        """The names /v1/models lists; ClientError when it can't be read."""
        status, answer = self.call("GET", "/v1/models")
        if status is None:
            raise ClientError("cannot reach %s/v1/models: %s. Fix: check that the server runs and that base_url "
                              "is the address it listens on" % (self.base_url, answer))
        if status != 200:
            raise ClientError("%s/v1/models answered HTTP %d: %s" % (self.base_url, status, str(answer)[:200]))
        return served_models(answer)

    def chat(self, body, timeout=None):
        """(status, answer) of a chat request answered whole, as call() gives them."""
        return self.call("POST", CHAT_PATH, body, timeout)

    def stream_chat(self, body, result, max_tokens=None):
        """Send one streamed chat request, filling result (a StreamResult); any failure becomes result.error.
        max_tokens, the body's: a stream of more events than that allows (a server that never ends its answer) is
        ended as stream_too_long, since each event after the first carries at least one new token."""
        connection = self.connection()
        try:
            result.sent = time.monotonic()
            connection.request("POST", self.prefix + CHAT_PATH, body=body, headers=self.headers)
            response = connection.getresponse()
            if response.status != 200:
                response.read(ERROR_BODY_MAX)  # drained in part only: a refusal's body is not worth megabytes
                result.error = "http_%d" % response.status
                return
            read_events(stream_lines(response), result,
                        None if max_tokens is None else max_tokens + STREAM_EVENTS_BESIDE_TOKENS)
        except socket.timeout:
            result.error = "timeout"
        except ConnectionRefusedError:
            result.error = "connection_refused"
        except (ConnectionResetError, BrokenPipeError, http.client.IncompleteRead,
                http.client.RemoteDisconnected):
            result.error = "connection_reset"
        except (OSError, http.client.HTTPException) as error:
            result.error = "connection_error:%s" % type(error).__name__
        except ValueError:  # http.client's own, for a chunk size that is no number; a line without end
            result.error = "malformed_stream"
        except Exception as error:  # one request's unforeseen failure must not end a run of thousands
            result.error = "client_error:%s" % type(error).__name__
        finally:
            result.finished = time.monotonic()
            connection.close()


class AnswerTooLarge(Exception):
    pass


def read_whole(response, sock, deadline):
    """The body of a response read from sock, until the deadline (socket.timeout after it) and at most
    MAX_ANSWER_BYTES (AnswerTooLarge past them)."""
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        sock.settimeout(left)
        data = response.read1(STREAM_READ_BYTES)
        if not data:
            return b"".join(chunks)
        size += len(data)
        if size > MAX_ANSWER_BYTES:
            raise AnswerTooLarge("an answer of more than %d MB, which no vLLM server gives" % (MAX_ANSWER_BYTES >> 20))
        chunks.append(data)


def is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def event_of(payload):
    """(failure kind or None, event) of a data line's payload.

    stream_error: the error event vLLM sends when its engine fails mid-request ({"error": {...}}, or an
    ErrorResponse, {"object": "error", ...}, from older servers); malformed_stream: anything else that is no
    chat completion chunk, which the request's outcome cannot be read from.
    """
    try:
        event = json.loads(payload.decode("utf-8"))
    except ValueError:  # bytes that are not UTF-8 too
        return "malformed_stream", None
    if not isinstance(event, dict):
        return "malformed_stream", None
    if "error" in event or event.get("object") == "error":
        return "stream_error", event
    choices, usage = event.get("choices") or [], event.get("usage") or {}
    chunks = isinstance(choices, list) and all(
        isinstance(choice, dict) and isinstance(choice.get("delta") or {}, dict) for choice in choices)
    counts = isinstance(usage, dict) and all(
        is_count(usage.get(name, 0)) for name in ("prompt_tokens", "completion_tokens"))
    return (None if chunks and counts else "malformed_stream"), event


def stream_lines(response):
    """The lines of a streamed answer as they arrive. read1 hands over what has come (with chunked transfer
    encoding, as vLLM streams, one chunk: one event) in one call, where reading line by line costs several calls
    a line, for every token of every stream."""
    rest = b""
    while True:
        data = response.read1(STREAM_READ_BYTES)
        if not data:
            break
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        if len(rest) > MAX_STREAM_LINE_BYTES:
            # Joining every read to an ever longer line would cost time quadratic in its length.
            raise ValueError("a stream line longer than %d bytes" % MAX_STREAM_LINE_BYTES)
        yield from lines
    if rest:
        yield rest


def read_events(lines, result, max_events=None):
    """Read a chat completion's server-sent events into result: the id, when the first content token came, and
    the usage; a stream without [DONE] was cut, one without usage can't be counted. The first event that is
    an error or no chunk at all ends the reading, its kind in result.error, as does an event past max_events."""
    usage, done, events = None, False, 0
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        events += 1
        if max_events is not None and events > max_events:
            result.error = "stream_too_long"
            return
        result.error, event = event_of(payload)
        if result.error:
            return
        result.request_id = result.request_id or event.get("id")
        for choice in event.get("choices") or []:
            if result.first_token is None and (choice.get("delta") or {}).get("content"):
                result.first_token = time.monotonic()
        if event.get("usage"):
            usage = event["usage"]
    if not done:
        result.error = "truncated_stream"
    elif not usage:
        result.error = "no_usage"
    else:
        result.prompt_tokens = usage.get("prompt_tokens", 0)
        result.completion_tokens = usage.get("completion_tokens", 0)
