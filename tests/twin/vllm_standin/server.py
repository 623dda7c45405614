"""The stand-in's OpenAI-compatible API, answering with the timings of ``engine.Scheduler`` in real time.

Twin knobs (environment):
- ``VLLM_TWIN_SPEED``: how many times faster than a real 310P pair to run (default 1: real time);
- ``VLLM_TWIN_SLOWDOWN``: how many times slower this image's kernels run than the seed's (default 1; 1.3 is an
  image 30 % slower, as new vllm-ascend images have been on 310P: vllm-ascend #7670). Set in an image, so a
  deploy's VLLM_TWIN_SPEED does not override it; the load time is not slowed;
- ``VLLM_TWIN_LOAD_S``: model load time in real-hardware seconds before the port opens (default 90). As vLLM 0.18
  does, the server gives up on a load that outlasts ``VLLM_ENGINE_READY_TIMEOUT_S`` (vllm/envs.py, default 600,
  real-hardware seconds here too): it says so and exits 1 (vllm/v1/engine/core_client.py);
- ``SOC_VERSION``: the SoC the image's kernels are built for, as vllm-ascend's images set it (ascend310p1 in the
  310P images, ascend910b1 in the A2 ones): another chip's image loads the weights and then exits 1 with
  vllm-ascend's socversion error, since the twin's chips are 310P3;
- ``VLLM_TWIN_REQUEST_LOG``: JSON Lines file with one line per finished request, the server's own timings
  (default ``/root/.cache/vllm-twin/requests-<port>.jsonl``, which the seed's cache mount puts on the host).
  ``received_s`` is when the request's body was read, ``finished_s`` when the last bytes were handed to the
  socket;
- ``VLLM_TWIN_FAULTS``: faults to inject, as JSON mapping a kind to the sequence numbers (1, 2, ... in arrival
  order) of the chat requests that get it: ``500`` (an internal server error), ``reset`` (the connection is
  reset after a few streamed tokens), ``stall`` (no byte for ``VLLM_TWIN_STALL_S`` seconds, default 3600),
  ``error`` (the engine ends the request with an error after 3 tokens);
- ``VLLM_TWIN_ANSWERS_FILE``: how the model answers (healthy, bang, repeat, wrong: vision.py), read at every
  request;
- ``VLLM_TWIN_RELEASE``: the release the image stands for (set in its tag), whose defects in the release table
  kill its engine: ``image_requests`` at any request that carries an image, ``large_image_requests`` at one whose
  image is larger than its ``above_pixels`` after resizing; the engine's last lines are the defect's ``log``;
- ``VLLM_TWIN_CRASH_PIXELS``: the engine dies on an image with more pixels than this after resizing (default
  3000000; 0 never). On 310P the vision path's IndexPut runs as an aicpu kernel that fails on large images,
  error 507018, and takes the EngineCore down (vllm-ascend issues #10720, #12086, #13050: small images pass,
  a 2560x1440 screenshot crashes; the seed's 1920x1080, 2088960 pixels resized, runs on v0.18). The known
  mitigation is ``--mm-processor-kwargs '{"min_pixels": 65536, "max_pixels": N}'``, which shrinks images
  before the encoder.

Answers, errors and streams have the shape of vLLM 0.18's own (held to its recorded transcripts in
tests/fixtures/vllm-0.18/ by tests/unit/twin/test_standin_conformance.py): the role chunk goes out with the first
token, a request whose prompt and max_tokens together pass max_model_len gets max_tokens lowered, a pixel cap
in ``--mm-processor-kwargs`` counts only with ``min_pixels`` beside it (or as ``size``), as transformers 4.57's
image processor takes it. Fault ``error`` in ``VLLM_TWIN_FAULTS`` ends a request with an engine error after
3 tokens, as a KV-load failure does: a stream gets vLLM's error event and ``[DONE]`` (no usage), a whole
answer HTTP 500.

A dead engine fails as vLLM 0.18's does: every request in flight, and every one arriving after, gets HTTP 500
``{"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
"type": "InternalServerError", ...}}``, or, when streaming (status 200 already sent), that error object as the
last ``data:`` event before ``data: [DONE]``; ``/health`` answers 503; then the API server shuts down and the
process exits 1, so the container's restart policy starts it again (and the model loads again). SIGUSR1 to the
server kills its engine that way too, as the OOM killer's or an operator's kill of vLLM's EngineCore process does.

``/metrics`` has a few of vLLM 0.18's series, named, typed and labelled as vLLM names them (engine="0",
model_name=<first served name>): the scheduler's running and waiting requests and KV-cache use, token and
finished-request counters, the histograms of time to first token and of end-to-end latency (vLLM's buckets,
observed when the engine emits a request's first and last token, from when the engine got the request), and
the process's resident memory and start time, as prometheus_client's process collector reads them from /proc.

``--api-key`` (or ``VLLM_API_KEY``) guards every path that starts with ``/v1`` as vLLM's
AuthenticationMiddleware does: ``Authorization: Bearer <key>``, scheme in any case, else 401
``{"error":"Unauthorized"}``; ``/health``, ``/metrics`` and ``/version`` stay open.
"""
import base64
import binascii
import bisect
import hashlib
import http.server
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
import urllib.request
import uuid

from . import release, release_name
from .cli import Refusal
from .engine import LatencyModel, Scheduler, Sequence
from .images import ImageError, image_size, image_tokens, resized_pixels
from .vision import DEGENERATE_UNITS, known_answer, mode_of

# Text tokens the Qwen3-VL chat template adds around one user turn (role markers, newlines).
TEMPLATE_TOKENS = 11
# A natural answer describing an image runs to a few hundred tokens; with ignore_eos the cap is reached.
NATURAL_ANSWER_TOKENS = (180, 320)
DEFAULT_CRASH_PIXELS = 3000000
# The aicpu fault's lines as vllm-ascend #12086 quotes them.
AICPU_507018 = [
    "soName=libpt_kernels.so, funcName=RunCpuKernel, kernelName=IndexPut, errorCode=0x2a."
    "[FUNC:PrintAicpuErrorInfo][FILE:davinci_kernel_task.cc]",
    "Aicpu kernel execute failed, device_id=0, stream_id=3, task_id=5140, fault op_name=."
    "[FUNC:GetError][FILE:stream.cc]",
    "rtStreamSynchronizeWithTimeout execution failed, reason=aicpu exception"
    "[FUNC:FuncErrorReason][FILE:error_message_manage.cc]",
    "synchronize stream with timeout failed, runtime result = 507018[FUNC:ReportCallError][FILE:log_inner.cpp]",
    "RuntimeError: ACL stream synchronize failed, error code is 507018",
]
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
# What vLLM answers for a request its engine finished with an error (FinishReason.ERROR).
ENGINE_ERROR_MESSAGE = "Internal server error"
# Tokens a request with fault ``error`` gets before its engine error; the last of them is never sent.
ERROR_AFTER_TOKENS = 3
# The most a late engine step is made up by the next ones: a longer pause (the machine stalled) is lost, not
# followed by a burst of steps that take no time.
MAKE_UP_S = 0.25
# Where vLLM 0.18's request validation errors say they were raised (the image's Python, Dockerfile.310p).
VALIDATION_SOURCE = ('  File "/usr/local/python3.11.14/lib/python3.11/site-packages/vllm/entrypoints/utils.py", '
                     'line 34, in create_chat_completion\n    POST /v1/chat/completions ')
# vLLM's watchdog looks for a dead engine every 5 s (vllm/entrypoints/launcher.py), then the HTTP server stops.
WATCHDOG_S = 5.0
# vLLM 0.18's histogram buckets (vllm/v1/metrics/loggers.py) for time to first token and end-to-end latency, in
# seconds; +Inf is added when they are written.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
               960.0, 1920.0, 7680.0)
# The KV-cache block size vLLM-Ascend uses when --block-size is not given, in tokens.
DEFAULT_BLOCK_SIZE = 128
ANSWER_TEXT = ("这张图片展示了一个户外场景，画面中央有一条小路，两侧是绿色的树木和草地，"
               "远处可以看到蓝天和几朵白云，光线明亮，整体色调自然，给人一种宁静的感觉。")


class ApiError(Exception):
    def __init__(self, status, message, kind="BadRequestError", param=None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param


def validation_error(kind, location, message, given, context=None):
    """FastAPI's 400 for a body that is no chat request, as vLLM 0.18 words it (one pydantic error)."""
    detail = {"type": kind, "loc": location, "msg": message, "input": given}
    if context:
        detail["ctx"] = context
    return ApiError(400, "1 validation error:\n  %r\n\n%s[%r]" % (detail, VALIDATION_SOURCE, detail), "Bad Request")


def parameter_error(name, value, message):
    """vLLM's VLLMValidationError: the message ends with the parameter and its value."""
    return ApiError(400, "%s (parameter=%s, value=%s)" % (message, name, value), param=name)


class EngineError(Exception):
    """Put in a request's token queue when its engine ends it with an error (fault ``error``)."""


class InjectedReset(Exception):
    """Raised after the stand-in reset a client's connection on purpose (VLLM_TWIN_FAULTS)."""


class EngineDead(Exception):
    """Put in a request's token queue when the engine dies: vLLM's EngineDeadError."""


class Histogram:
    """A Prometheus histogram's state: observations per bucket (each counted once, in the first bucket whose upper
    bound it does not pass), their sum and count. It has no lock of its own: the engine observes and /metrics
    copies under the engine's lock."""

    def __init__(self, bounds):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf's own
        self.sum = 0.0
        self.count = 0

    def observe(self, value):
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def copy(self):
        copied = Histogram(self.bounds)
        copied.counts, copied.sum, copied.count = list(self.counts), self.sum, self.count
        return copied

    def lines(self, name, labels):
        """The text format's lines: cumulative buckets by increasing ``le`` (written as prometheus_client writes
        it: 0.5, 1.0, +Inf), +Inf last, then _sum and _count."""
        lines = ["# TYPE %s histogram" % name]
        cumulative = 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            lines.append("%s_bucket{%s} %r" % (name, label_text(dict(labels, le=le)), float(cumulative)))
        return lines + ["%s_sum{%s} %r" % (name, label_text(labels), float(self.sum)),
                        "%s_count{%s} %r" % (name, label_text(labels), float(self.count))]


def label_text(labels):
    """A sample's labels in the text format, by name, with backslash, double quote and newline escaped."""
    return ",".join('%s="%s"' % (name, str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
                    for name, value in sorted(labels.items()))


class Engine:
    """Runs the scheduler in real time on a thread; requests wait on their own token queues."""

    def __init__(self, model, speed, max_model_len=8192, block_size=DEFAULT_BLOCK_SIZE):
        """``max_model_len`` and ``block_size`` size the KV cache /metrics measures (8192: the role's length)."""
        self.scheduler = Scheduler(model)
        self.speed = speed
        self.condition = threading.Condition()
        self.alive = True
        self.died = threading.Event()
        self.fatal = set()  # ids of the sequences whose prefill kills the engine
        self.fatal_lines = []  # what the engine says as it dies of one
        # Finished requests by vLLM's finished_reason label: a request ends by length, by its stop, or by error.
        self.stats = {"running": 0, "waiting": 0, "prompt_tokens": 0, "generation_tokens": 0, "kv_cache_usage": 0.0,
                      "finished": {"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0}}
        # vLLM observes a request's time to first token when the engine emits that token and its end-to-end
        # latency when the engine finishes it, whatever the finish reason (an engine error too, under
        # finished_reason="error"); a request in flight when the engine dies is never observed.
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        # The stand-in's scheduler admits up to max_num_seqs requests and never preempts one for want of KV cache:
        # it runs as if the cache held max_num_seqs sequences of max_model_len tokens. KV-cache use is the blocks
        # the running requests hold (their prefilled and generated tokens, in whole blocks, as vLLM allocates them)
        # over that many blocks. A real 310P pair holds fewer, so real vLLM reads higher under the same load.
        self.block_size = block_size
        self.kv_blocks = model.max_num_seqs * -(-max_model_len // block_size)
        threading.Thread(target=self._loop, name="engine", daemon=True).start()

    def submit(self, prompt_tokens, output_tokens, finish_reason, fatal_lines=None):
        """Queue a request that ends after output_tokens with finish_reason (``error``: the engine fails it
        after ERROR_AFTER_TOKENS); ``fatal_lines`` (the engine's last words) mark one whose image kills the engine."""
        events = queue.Queue()
        with self.condition:
            if not self.alive:
                events.put(EngineDead(ENGINE_DEAD_MESSAGE))
                return events
            if finish_reason == "error":
                output_tokens = ERROR_AFTER_TOKENS
            sequence = Sequence(events, prompt_tokens, output_tokens, finish_reason, arrived_s=time.time())
            if fatal_lines:
                self.fatal.add(id(sequence))
                self.fatal_lines = fatal_lines
            self.scheduler.add(sequence)
            self.condition.notify()
        return events

    def die(self, killed=False):
        """The aicpu fault of vllm-ascend #10720/#12086: the EngineCore exits and every request fails. killed: the
        EngineCore process was killed instead (SIGUSR1 to the server: the OOM killer's or an operator's kill -9 of
        vLLM's engine process), and the API server says so as vLLM's client does (vllm/v1/engine/core_client.py)."""
        lines = [
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
            "vllm.v1.engine.exceptions.EngineDeadError: %s" % ENGINE_DEAD_MESSAGE,
        ] if killed else self.fatal_lines + [
            "AsyncLLM output_handler failed.",
            "vllm.v1.engine.exceptions.EngineDeadError: %s" % ENGINE_DEAD_MESSAGE,
        ]
        for line in lines:
            print("ERROR %s" % line, flush=True)
        with self.condition:
            self.alive = False
            for seq in self.scheduler.running + list(self.scheduler.waiting):
                seq.key.put(EngineDead(ENGINE_DEAD_MESSAGE))
            self.scheduler.running = []
            self.scheduler.waiting.clear()
        self.died.set()

    def _loop(self):
        # Steps end on a clock of their own, each its duration after the previous one's end, so that this machine's
        # load does not add to every step: at the twin's speed a step is a few milliseconds, the Python around it
        # is not sped up, and a late step is made up by the next. The clock restarts when the engine has been idle.
        step_end = time.monotonic()
        while True:
            with self.condition:
                while not self.scheduler.has_work():
                    self.condition.wait()
                    step_end = time.monotonic()
                duration, decoding, chunks = self.scheduler.plan()
                self.stats["running"] = len(self.scheduler.running)
                self.stats["waiting"] = len(self.scheduler.waiting)
                fatal = any(id(seq) in self.fatal for seq, _ in chunks)
            step_end = max(step_end, time.monotonic() - MAKE_UP_S) + duration / self.speed
            time.sleep(max(0.0, step_end - time.monotonic()))
            if fatal:
                self.die()
                return
            with self.condition:
                advanced, finished = self.scheduler.apply(decoding, chunks)
                now = time.time()
                self.stats["generation_tokens"] += len(advanced)
                for seq in advanced:
                    if seq.emitted == 1:
                        self.ttft.observe(now - seq.arrived_s)
                for seq in finished:
                    self.stats["prompt_tokens"] += seq.prompt_tokens
                    self.stats["finished"][seq.finish_reason] += 1
                    self.e2e.observe(now - seq.arrived_s)
                # What the scheduler reports with this step: a finished request no longer runs.
                self.stats["running"] = len(self.scheduler.running)
                self.stats["waiting"] = len(self.scheduler.waiting)
                self.stats["kv_cache_usage"] = self.kv_cache_usage()
                for seq in advanced:
                    if seq.finish_reason == "error" and seq.emitted >= seq.output_tokens:
                        seq.key.put(EngineError(ENGINE_ERROR_MESSAGE))
                    else:
                        seq.key.put((now, seq.emitted, seq.emitted >= seq.output_tokens))

    def kv_cache_usage(self):
        """The share (0..1) of the KV cache the running requests hold; called under the lock."""
        held = sum(-(-(seq.prefilled + seq.emitted) // self.block_size) for seq in self.scheduler.running)
        return min(1.0, held / float(self.kv_blocks))

    def snapshot(self):
        """The counts and histograms as of the last step, copied together so that one scrape is consistent."""
        with self.condition:
            stats = dict(self.stats, finished=dict(self.stats["finished"]))
            return stats, self.ttft.copy(), self.e2e.copy()


def process_metrics():
    """{name: value} of process_resident_memory_bytes and process_start_time_seconds, read from /proc as
    prometheus_client's process collector reads them (the API server of real vLLM exposes them); {} where there
    is no /proc."""
    try:
        with open("/proc/self/statm") as handle:
            resident_pages = int(handle.read().split()[1])
        with open("/proc/self/stat") as handle:
            # The fields after the command name, which is in parentheses and may hold spaces; the 22nd field
            # overall, starttime, is in clock ticks after boot.
            after_name = handle.read().rpartition(")")[2].split()
        with open("/proc/stat") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return {}
    return {"process_resident_memory_bytes": float(resident_pages * os.sysconf("SC_PAGE_SIZE")),
            "process_start_time_seconds": boot + float(after_name[19]) / os.sysconf("SC_CLK_TCK")}


def pixel_cap(processor_kwargs):
    """The max_pixels images are resized within, from ``--mm-processor-kwargs``, or None.

    transformers 4.57's fast Qwen2-VL image processor (vLLM 0.18's) takes a cap only as a pair with
    min_pixels, or as ``size`` with both edges: a ``max_pixels`` alone leaves images at full size.
    """
    kwargs = processor_kwargs or {}
    size = kwargs.get("size") if isinstance(kwargs.get("size"), dict) else {}
    if "longest_edge" in size and "shortest_edge" in size:
        return size["longest_edge"]
    if kwargs.get("min_pixels") is not None and kwargs.get("max_pixels") is not None:
        return kwargs["max_pixels"]
    return None


class State:
    def __init__(self, args, model_path, config):
        self.args = args
        self.model_path = model_path
        self.names = args.served_model_name or [model_path]
        self.max_model_len = args.max_model_len
        self.max_pixels = pixel_cap(args.mm_processor_kwargs)
        self.api_key = args.api_key
        self.created = int(time.time())
        self.permission_id = "modelperm-" + uuid.uuid4().hex[:16]
        self.engine = Engine(LatencyModel(max_num_seqs=args.max_num_seqs,
                                          max_batched_tokens=args.max_num_batched_tokens),
                             float(os.environ.get("VLLM_TWIN_SPEED", "1"))
                             / float(os.environ.get("VLLM_TWIN_SLOWDOWN", "1")),
                             max_model_len=args.max_model_len, block_size=args.block_size or DEFAULT_BLOCK_SIZE)
        self.log_path = os.environ.get(
            "VLLM_TWIN_REQUEST_LOG", "/root/.cache/vllm-twin/requests-%d.jsonl" % args.port)
        self.log_lock = threading.Lock()
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.faults = {int(number): kind for kind, numbers in json.loads(os.environ.get("VLLM_TWIN_FAULTS", "{}"))
                       .items() for number in numbers}
        self.stall_s = float(os.environ.get("VLLM_TWIN_STALL_S", "3600"))
        self.crash_pixels = int(os.environ.get("VLLM_TWIN_CRASH_PIXELS", DEFAULT_CRASH_PIXELS))
        self.defects = release()["defects"]
        self.answers_file = os.environ.get(
            "VLLM_TWIN_ANSWERS_FILE", "/root/.cache/vllm-twin/answers-%d" % args.port)
        self.sequence = 0
        self.in_flight = 0

    def next_fault(self):
        """The fault planned for the chat request arriving now, if any."""
        with self.log_lock:
            self.sequence += 1
            return self.faults.get(self.sequence)

    def log_request(self, record):
        with self.log_lock, open(self.log_path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def count_prompt(body, max_pixels=None):
    """Prompt tokens of a chat request: template, text (about 1.5 characters a token) and images."""
    return prompt_stats(body, max_pixels)[0]


def fatal_lines(largest_image, defects, crash_pixels):
    """What the engine says as it dies of a request whose largest image has these pixels after resizing (0: no
    image), or None when it survives it: the release's defects first, then the large-image fault of 310P's aicpu
    IndexPut kernel, the same 507018 as vllm-ascend #10720/#12086 show."""
    for defect in defects:
        if largest_image and largest_image > defect.get("above_pixels", 0):
            return ["EngineCore encountered a fatal error. (twin: %s, %s)" % (defect["issue"], defect["summary"])] \
                + defect["log"]
    if crash_pixels and largest_image > crash_pixels:
        return ["EngineCore encountered a fatal error. (twin: an image of %d pixels after resizing is above "
                "VLLM_TWIN_CRASH_PIXELS; --mm-processor-kwargs '{\"min_pixels\": 65536, \"max_pixels\": N}' keeps "
                "images below it)" % largest_image] + AICPU_507018
    return None


def prompt_stats(body, max_pixels=None):
    """(prompt tokens, pixels of the largest image after resizing) of a chat request."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    tokens = largest = 0
    for message in messages:
        tokens += TEMPLATE_TOKENS
        content = message.get("content") if isinstance(message, dict) else None
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list):
            raise ApiError(400, "each message needs a content string or a list of parts")
        for part in parts:
            if part.get("type") == "text":
                tokens += max(1, int(len(part.get("text", "")) / 1.5 + 0.5))
            elif part.get("type") == "image_url":
                width, height = image_dimensions(part.get("image_url", {}).get("url", ""))
                tokens += image_tokens(width, height, max_pixels)
                largest = max(largest, resized_pixels(width, height, max_pixels))
            else:
                raise ApiError(400, "unsupported content part type: %r" % part.get("type"))
    return tokens, largest


def image_dimensions(url):
    try:
        if url.startswith("data:"):
            return data_url_dimensions(url.split(",", 1)[1])
        else:
            with urllib.request.urlopen(url, timeout=5) as response:
                data = response.read()
        return image_size(data)
    except (ImageError, binascii.Error, IndexError, struct.error):
        # PIL's words for bytes that are no image it knows, as vLLM passes them on.
        raise ApiError(400, "cannot identify image file <_io.BytesIO object>") from None
    except OSError as error:
        raise ApiError(400, "cannot fetch image %s: %s" % (url[:80], error)) from error


def data_url_dimensions(encoded):
    """Decode only as much of a base64 image as its header needs: a 1080p upload costs no decoding time."""
    for length in (4096, 65536, len(encoded)):
        try:
            return image_size(base64.b64decode(encoded[:length - length % 4], validate=False))
        except (ImageError, struct.error):
            if length >= len(encoded):
                raise
    raise ImageError("empty image data")


def answer_length(body, max_tokens):
    if body.get("ignore_eos"):
        return max_tokens
    digest = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).digest()
    low, high = NATURAL_ANSWER_TOKENS
    return min(max_tokens, low + int.from_bytes(digest[:4], "big") % (high - low))


def answer_of(body, mode, max_tokens):
    """(text, tokens) the model answers, one character a token, the text repeated to fill the tokens: a known
    question's short answer (vision.py) ends by itself, a description or a degenerate answer runs long."""
    if mode in DEGENERATE_UNITS:
        return DEGENERATE_UNITS[mode], answer_length(body, max_tokens)
    text = known_answer(body, wrong=mode == "wrong")
    if text is None:
        return ANSWER_TEXT, answer_length(body, max_tokens)
    return text, max_tokens if body.get("ignore_eos") else min(max_tokens, len(text))


def answer_piece(text, index):
    return text[index % len(text)]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args):  # vLLM logs requests at INFO; keep the container log short
        pass

    @property
    def state(self):
        return self.server.state

    def send_json(self, status, payload):
        # Starlette's JSONResponse: compact separators, UTF-8.
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        # Not vLLM's: says to anyone reading the headers that this is the twin's simulator.
        self.send_header("X-Twin-Simulator", "ascend-vllm-fleet stand-in %s" % release_name())
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, error):
        self.send_json(error.status, error_body(error))

    def authorised(self):
        """vLLM's AuthenticationMiddleware: only paths under /v1, a Bearer scheme in any case, the exact key."""
        if not self.state.api_key or not self.path.split("?", 1)[0].startswith("/v1"):
            return True
        scheme, _, key = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and key == self.state.api_key:
            return True
        self.send_json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self):
        if not self.authorised():
            return
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self.send_response(200 if self.state.engine.alive else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [self.model_card(name) for name in self.state.names]})
        elif path == "/version":
            # vLLM's version, which the vllm-ascend image's vLLM reports (the plugin's own is not in it).
            self.send_json(200, {"version": release()["vllm"]})
        elif path == "/metrics":
            self.send_metrics()
        else:
            self.send_json(404, {"detail": "Not Found"})

    def model_card(self, name):
        state = self.state
        return {"id": name, "object": "model", "created": state.created, "owned_by": "vllm",
                "root": state.model_path, "parent": None, "max_model_len": state.max_model_len,
                "permission": [{"id": state.permission_id, "object": "model_permission", "created": state.created,
                                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                                "organization": "*", "group": None, "is_blocking": False}]}

    def send_metrics(self):
        """A few of vLLM's series, labelled as vLLM 0.18 labels them (engine and model; finished_reason; le)."""
        stats, ttft, e2e = self.state.engine.snapshot()
        labels = {"engine": "0", "model_name": self.state.names[0]}
        lines = []
        for name, kind, value in (("num_requests_running", "gauge", stats["running"]),
                                  ("num_requests_waiting", "gauge", stats["waiting"]),
                                  ("kv_cache_usage_perc", "gauge", stats["kv_cache_usage"]),
                                  ("prompt_tokens_total", "counter", stats["prompt_tokens"]),
                                  ("generation_tokens_total", "counter", stats["generation_tokens"])):
            lines += ["# TYPE vllm:%s %s" % (name, kind), "vllm:%s{%s} %r" % (name, label_text(labels), float(value))]
        lines.append("# TYPE vllm:request_success_total counter")
        for reason, count in stats["finished"].items():
            lines.append("vllm:request_success_total{%s} %r" % (label_text(dict(labels, finished_reason=reason)),
                                                                 float(count)))
        lines += ttft.lines("vllm:time_to_first_token_seconds", labels)
        lines += e2e.lines("vllm:e2e_request_latency_seconds", labels)
        for name, value in process_metrics().items():
            lines += ["# TYPE %s gauge" % name, "%s %r" % (name, value)]
        data = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=1.0.0; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_one_request(self):
        # A request "arrives" when its connection is accepted (first request) or when the handler turns to it
        # (later ones on a kept-alive connection): under load, a new handler thread may start much later.
        self.arrived = getattr(self.request, "accepted_at", None) or time.time()
        self.request.accepted_at = None
        super().handle_one_request()

    def do_POST(self):
        received = self.arrived
        if not self.authorised():
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        if path == "/tokenize":
            self.tokenize(raw)
            return
        # vLLM 0.18 always serves SageMaker's POST /invocations, which hands a chat body to the chat handler; it
        # is no /v1 path, so --api-key does not guard it (vllm/entrypoints/openai/server_utils.py).
        if path not in ("/v1/chat/completions", "/invocations"):
            self.send_json(404, {"detail": "Not Found"})
            return
        try:
            request = self.validate(parse_body(raw))
        except ApiError as error:
            self.send_error_json(error)
            return
        fault = self.state.next_fault()
        if fault == "500":
            self.send_error_json(ApiError(500, "twin: injected internal server error", "InternalServerError"))
            return
        if fault == "stall":
            time.sleep(self.state.stall_s)
        if fault == "error":
            request["finish_reason"] = "error"
        with self.state.log_lock:
            self.state.in_flight += 1
        try:
            self.complete(request, received, reset=fault == "reset")
        finally:
            with self.state.log_lock:
                self.state.in_flight -= 1

    def tokenize(self, raw):
        """vLLM 0.18's /tokenize (a chat body's messages, or a text prompt): the token ids and their count, as its
        TokenizeResponse has them. No /v1 path: --api-key does not guard it either."""
        try:
            prompt = json.loads(raw).get("prompt")
        except (ValueError, AttributeError):
            prompt = None
        try:
            count = (max(1, int(len(prompt) / 1.5 + 0.5)) if isinstance(prompt, str)
                     else prompt_stats(parse_body(raw), self.state.max_pixels)[0])
        except ApiError as error:
            self.send_error_json(error)
            return
        self.send_json(200, {"count": count, "max_model_len": self.state.max_model_len,
                             "tokens": [151643 + index % 7 for index in range(count)], "token_strs": None})

    def validate(self, body):
        """The request as the engine gets it, or the ApiError vLLM 0.18 answers, checked in vLLM's order."""
        state = self.state
        model = body.get("model", state.names[0])
        if model not in state.names:
            raise ApiError(404, "The model `%s` does not exist." % model, "NotFoundError", param="model")
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool)):
            raise validation_error("int_type", ("body", "max_tokens"), "Input should be a valid integer", asked)
        if asked is not None and asked > state.max_model_len:
            raise parameter_error("max_tokens", asked, "max_tokens=%dcannot be greater than max_model_len="
                                  "max_total_tokens=%d. Please request fewer output tokens." % (
                                      asked, state.max_model_len))
        prompt_tokens, largest_image = prompt_stats(body, state.max_pixels)
        if prompt_tokens > state.max_model_len:
            raise ApiError(400, "Input length (%d) exceeds model's maximum context length (%d)." % (
                prompt_tokens, state.max_model_len))
        # What is left of the context is the most an answer may have; vLLM lowers max_tokens to it.
        max_tokens = state.max_model_len - prompt_tokens if asked is None else min(
            asked, state.max_model_len - prompt_tokens)
        if max_tokens < 1:
            raise parameter_error("max_tokens", max_tokens, "max_tokens must be at least 1, got %d." % max_tokens)
        text, output_tokens = answer_of(body, mode_of(state.answers_file), max_tokens)
        return {"model": model, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens, "text": text,
                "stream": bool(body.get("stream")),
                "include_usage": bool((body.get("stream_options") or {}).get("include_usage")),
                "output_tokens": output_tokens, "finish_reason": "length" if output_tokens >= max_tokens else "stop",
                "fatal_lines": fatal_lines(largest_image, state.defects, state.crash_pixels)}

    def complete(self, request, received, reset=False):
        events = self.state.engine.submit(request["prompt_tokens"], request["output_tokens"],
                                          request["finish_reason"], request["fatal_lines"])
        request_id = "chatcmpl-" + uuid.uuid4().hex
        record = {"id": request_id, "received_s": received, "prompt_tokens": request["prompt_tokens"],
                  "max_tokens": request["max_tokens"], "stream": request["stream"], "status": "ok"}
        try:
            if request["stream"]:
                first, finished, emitted = self.stream(request, request_id, events, reset)
            else:
                first, finished, emitted = self.reply(request, request_id, events)
        except (BrokenPipeError, ConnectionResetError):
            record["status"] = "client_disconnected"
            first, finished, emitted = None, time.time(), None
        except InjectedReset:
            record["status"] = "reset"
            first, finished, emitted = None, time.time(), None
        except EngineError:
            record["status"] = "engine_error"
            first, finished, emitted = None, time.time(), None
        except EngineDead:
            record["status"] = "engine_dead"
            first, finished, emitted = None, time.time(), None
        record.update({"first_token_s": first, "finished_s": finished, "completion_tokens": emitted,
                       "latency_s": finished - received})
        self.state.log_request(record)

    def reset_connection(self):
        """Close the client's connection with a TCP reset, as a crashing server process does."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True
        raise InjectedReset()

    def wait_tokens(self, events):
        """Yield (time, tokens so far, last) as the engine emits this request's tokens; EngineError or
        EngineDead when the engine fails it."""
        while True:
            event = events.get()
            if isinstance(event, (EngineDead, EngineError)):
                raise event
            yield event
            if event[2]:
                return

    def usage(self, request, emitted):
        return {"prompt_tokens": request["prompt_tokens"], "total_tokens": request["prompt_tokens"] + emitted,
                "completion_tokens": emitted}

    def reply(self, request, request_id, events):
        first = emitted = None
        try:
            for when, count, _ in self.wait_tokens(events):
                first, emitted = first or when, count
        except EngineDead as dead:
            self.send_error_json(ApiError(500, str(dead), "InternalServerError"))
            raise
        except EngineError as error:
            self.send_error_json(ApiError(500, str(error), "InternalServerError"))
            raise
        text = "".join(answer_piece(request["text"], i) for i in range(emitted))
        finished = time.time()
        self.send_json(200, {
            "id": request_id, "object": "chat.completion", "created": int(time.time()), "model": request["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                                 "annotations": None, "audio": None, "function_call": None,
                                                 "tool_calls": [], "reasoning": None},
                         "logprobs": None, "finish_reason": request["finish_reason"], "stop_reason": None,
                         "token_ids": None}],
            "service_tier": None, "system_fingerprint": None,
            "usage": dict(self.usage(request, emitted), prompt_tokens_details=None),
            "prompt_logprobs": None, "prompt_token_ids": None, "kv_transfer_params": None})
        return first, finished, emitted

    def stream(self, request, request_id, events, reset=False):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": request_id, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": request["model"]}

        def chunk(payload):
            data = ("data: " + (payload if isinstance(payload, str)
                                else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))) + "\n\n"
                    ).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def end():
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        first = emitted = None
        try:
            for _, emitted, done in self.wait_tokens(events):
                if first is None:
                    # vLLM sends the role chunk when the first token is made, not when the request arrives.
                    first = time.time()
                    chunk(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                               "logprobs": None, "finish_reason": None}], prompt_token_ids=None))
                if reset and emitted == 3:
                    self.reset_connection()
                choice = {"index": 0, "delta": {"content": answer_piece(request["text"], emitted - 1)},
                          "logprobs": None, "finish_reason": request["finish_reason"] if done else None}
                if done:
                    choice["stop_reason"] = None
                choice["token_ids"] = None
                chunk(dict(base, choices=[choice]))
        except (EngineDead, EngineError) as failure:
            # The status line is gone already: the error is the stream's last event, with no usage.
            chunk(error_body(ApiError(500, str(failure), "InternalServerError")))
            end()
            raise
        if request["include_usage"]:
            chunk(dict(base, choices=[], usage=self.usage(request, emitted)))
        # Logged before the last bytes go out, so no client can send its next request before this time.
        finished = time.time()
        end()
        return first, finished, emitted


def error_body(error):
    return {"error": {"message": str(error), "type": error.kind, "param": error.param, "code": error.status}}


def parse_body(raw):
    """A chat request's JSON, or the validation error FastAPI answers for it (as vLLM 0.18 words it)."""
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise validation_error("json_invalid", ("body", error.pos), "JSON decode error", {},
                               {"error": error.msg}) from None
    if not isinstance(body, dict):
        raise validation_error("model_attributes_type", ("body",), "Input should be a valid dictionary or object "
                               "to extract fields from", body)
    if "messages" not in body:
        raise validation_error("missing", ("body", "messages"), "Field required", body)
    return body


class StampedSocket:
    """A client socket that remembers when it was accepted."""

    def __init__(self, sock):
        self._sock = sock
        self.accepted_at = time.time()

    def __getattr__(self, name):
        return getattr(self._sock, name)


class ThreadingServer(http.server.HTTPServer):
    """Handles each connection on one of a pool of threads started up front.

    A thread started per connection (socketserver.ThreadingMixIn) makes the accept loop wait for each new
    thread to run; with 64 clients connecting at once on a busy machine that wait reaches hundreds of
    milliseconds before a request is even accepted, which a real server does not add.
    """

    allow_reuse_address = True
    request_queue_size = 512
    pool_size = 256

    def server_activate(self):
        super().server_activate()
        self.connections = queue.Queue()
        for _ in range(self.pool_size):
            threading.Thread(target=self._serve_connections, daemon=True).start()

    def _serve_connections(self):
        while True:
            request, client_address = self.connections.get()
            try:
                self.finish_request(request, client_address)
            except Exception:  # noqa: BLE001  (one broken connection must not kill a pool thread)
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def process_request(self, request, client_address):
        self.connections.put((request, client_address))

    def get_request(self):
        connection, address = super().get_request()
        connection = StampedSocket(connection)
        return connection, address

    def handle_error(self, request, client_address):
        # A client that went away (or a connection reset on purpose) is not a server error worth a traceback.
        if not isinstance(sys.exc_info()[1], (OSError, InjectedReset)):
            super().handle_error(request, client_address)


class WrongChip(Exception):
    """The image's kernels are built for another Ascend SoC (SOC_VERSION) than the host's 310P3."""


class EngineReadyTimeout(Exception):
    """The model's load outlasted vLLM's wait for its engine core."""


# The load's memory arithmetic, as vLLM 0.18 with vLLM-Ascend's 310P worker does it on each chip (rank): the device
# starts with requested = gpu_memory_utilization x the chip's total; the rank's share of the weights is allocated
# (an allocation past the chip's free memory fails); the profile run measures what else the rank needs (activations,
# the runtime, 310P attention's max_model_len x max_model_len float16 mask); the KV cache gets half of what is left of
# requested (vllm_ascend/_310p/worker_310p.py determine_available_memory, v0.18.0rc1 and v0.18.0: "Divide the
# available memory by 2"); the engine then wants room for one request of max_model_len. Pipeline parallelism is not
# modelled: every chip is a tensor-parallel rank.
MIB = 1 << 20
GIB = 1 << 30
FLOAT16_BYTES = 2
# What the profile run measures per rank besides the weights and the mask: the twin's model, not a measurement.
ACTIVATIONS_BYTES = 3 * GIB // 2  # a full batch's activations, the vision encoder's included
RUNTIME_BYTES = GIB // 2  # the CANN runtime's and HCCL's own memory


def weights_bytes(model_path):
    """The weights' bytes: the index's metadata.total_size (what the shards hold), else the .safetensors files'."""
    index = os.path.join(model_path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as handle:
            total = json.load(handle).get("metadata", {}).get("total_size")
        if total:
            return int(total)
    return sum(os.path.getsize(os.path.join(model_path, name)) for name in os.listdir(model_path)
               if name.endswith(".safetensors"))


def rank_model(args, model_path, config):
    """What one rank holds of the model: its share of the weights, the layers, and the KV cache of one token (K and V
    of every layer in float16, the KV heads split over the ranks, at least one each as vLLM's get_num_kv_heads);
    None, after a warning, when config.json lacks the text model's shape."""
    text = config.get("text_config") or config
    try:
        heads, layers = text["num_attention_heads"], text["num_hidden_layers"]
        head_dim = text.get("head_dim") or text["hidden_size"] // heads
        kv_heads = max(1, text.get("num_key_value_heads", heads) // args.tensor_parallel_size)
    except (KeyError, TypeError, ZeroDivisionError):
        print("WARNING config.json does not give the text model's layers, heads and hidden size: the memory checks "
              "at load are skipped.", flush=True)
        return None
    return {"weights": weights_bytes(model_path) // args.tensor_parallel_size, "layers": layers,
            "kv_per_token": 2 * layers * kv_heads * head_dim * FLOAT16_BYTES}


def format_size(size):
    """torch_npu's format_size (NPUCachingAllocator.cpp): bytes, KiB, MiB or GiB with two decimals."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if size > scale:
            return "%.2f %s" % (size / float(scale), unit)
    return "%d bytes" % size


def format_gib(size):
    """vLLM's format_gib (vllm/utils/mem_utils.py): str(round(GiB, 2)), so 9 GiB reads 9.0."""
    return str(round(size / GIB, 2))


def worker_line(args, rank, text):
    """A worker's INFO line: vLLM's multiprocess executor (tensor parallelism) names the worker first
    (vllm/v1/executor/multiproc_executor.py)."""
    prefix = "(Worker_TP%d pid=%d) " % (rank, os.getpid()) if args.tensor_parallel_size > 1 else ""
    print("%sINFO %s" % (prefix, text), flush=True)


def start_devices(args, chips):
    """Each rank's device start: vLLM-Ascend refuses a chip with less free memory than it requests.
    chips: [(logical id, used MB, total MB)] of the ranks as npu-smi reports them (its MB are MiB)."""
    for _, used_mb, total_mb in chips:
        total, free = total_mb * MIB, (total_mb - used_mb) * MIB
        requested = total * args.gpu_memory_utilization
        if free < requested:
            # vllm_ascend/worker/worker.py _init_device (v0.18.0rc1); its GiB() is round(bytes / GiB, 2).
            raise Refusal("ValueError: Free memory on device (%s/%s GiB) on startup is less than desired GPU memory "
                          "utilization (%s, %s GiB). Decrease GPU memory utilization or reduce GPU memory used by "
                          "other processes." % (round(free / GIB, 2), round(total / GIB, 2),
                                                args.gpu_memory_utilization, round(requested / GIB, 2)))


def load_weights(args, model, chips):
    """Each rank allocates its share of the weights; one past the chip's free memory fails."""
    for logical, used_mb, total_mb in chips:
        free = (total_mb - used_mb) * MIB
        if model["weights"] > free:
            # The caching allocator of torch_npu 2.9.0.post1, which vllm-ascend's Dockerfile.310p installs
            # (NPUCachingAllocator.cpp, Ascend/pytorch tag v7.3.1-pytorch2.9.0), raised at the load as in vllm-ascend
            # issue #19. The twin allocates one decoder layer's share of the weights at a time: the first one past
            # the free memory fails.
            piece = model["weights"] // model["layers"]
            held = free // piece * piece
            raise Refusal("RuntimeError: NPU out of memory. Tried to allocate %s (NPU %d; %s total capacity; %s "
                          "already allocated; %s current active; %s free; %s reserved in total by PyTorch) If "
                          "reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
                          "fragmentation." % (format_size(piece), logical, format_size(total_mb * MIB),
                                              format_size(held), format_size(held), format_size(free - held),
                                              format_size(held)))
    for rank in range(len(chips)):
        # vllm_ascend/worker/model_runner_v1.py load_model (v0.18.0rc1), which the 310P runner keeps: "GB" are GiB.
        worker_line(args, rank, "Loading model weights took %.4f GB" % (model["weights"] / float(GIB)))


def size_kv_cache(args, model, chips):
    """The profile run, then the KV cache each rank gets, checked and reported as vLLM's engine core does; return
    the cache's blocks (the fewest any rank holds)."""
    block_size = args.block_size or DEFAULT_BLOCK_SIZE
    block_bytes = block_size * model["kv_per_token"]  # one block of every layer
    length = args.max_model_len
    # The causal mask 310P attention builds once and keeps (vllm_ascend/_310p/attention/attention_mask.py
    # AttentionMaskBuilder310, v0.18.0rc1): max_model_len x max_model_len float16, 128 MiB at 8192, 8 GiB at 65536.
    mask = length * length * FLOAT16_BYTES
    available = []
    for rank, (_, _, total_mb) in enumerate(chips):
        requested = int(total_mb * MIB * args.gpu_memory_utilization)
        available.append((requested - model["weights"] - ACTIVATIONS_BYTES - RUNTIME_BYTES - mask) // 2)
        # vllm_ascend/_310p/worker_310p.py determine_available_memory (v0.18.0rc1).
        worker_line(args, rank, "Available KV cache memory: %.2f GiB" % (available[-1] / float(GIB)))
    needed = -(-length // block_size) * block_bytes
    for memory in available:
        # vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory (vLLM v0.18.0), for each worker in turn.
        if memory <= 0:
            raise Refusal("ValueError: No available memory for the cache blocks. Try increasing "
                          "`gpu_memory_utilization` when initializing the engine. See "
                          "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
        if needed > memory:
            # The estimate is vLLM's binary search for the longest length whose blocks fit, in closed form.
            longest = memory // block_bytes * block_size
            estimate = ("Based on the available memory, the estimated maximum model length is %d. " % longest
                        if longest > 0 else "")
            raise Refusal("ValueError: To serve at least one request with the models's max seq len (%d), (%s GiB KV "
                          "cache is needed, which is larger than the available KV cache memory (%s GiB). %sTry "
                          "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                          "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
                          "details." % (length, format_gib(needed), format_gib(memory), estimate))
    # get_num_blocks and _report_kv_cache_config (vLLM v0.18.0): every rank gets the fewest blocks any rank holds.
    blocks = min(memory // block_bytes for memory in available)
    print("INFO GPU KV cache size: {:,} tokens".format(blocks * block_size), flush=True)
    print("INFO Maximum concurrency for {:,} tokens per request: {:.2f}x".format(
        length, blocks / float(-(-length // block_size))), flush=True)
    return blocks


# vLLM 0.18's default wait for its engine core (vllm/envs.py VLLM_ENGINE_READY_TIMEOUT_S), in seconds.
ENGINE_READY_TIMEOUT_S = 600


def start_server(args, model_path, config, chips=None):
    """Load the model, then answer on the port from a background thread; return the server. EngineReadyTimeout
    when the load outlasts VLLM_ENGINE_READY_TIMEOUT_S, after that long; Refusal when the model does not fit the
    chips: [(logical id, used MB, total MB)] of the ranks (None: their memory is unknown, nothing is checked)."""
    # Hand the GIL over more often than every 5 ms, so the accept loop and the engine are not starved by
    # handler threads parsing large uploads.
    sys.setswitchinterval(0.0005)
    speed = float(os.environ.get("VLLM_TWIN_SPEED", "1"))
    load_s = float(os.environ.get("VLLM_TWIN_LOAD_S", "90"))
    model = chips and rank_model(args, model_path, config)
    if model:
        start_devices(args, chips)
    print("INFO Loading weights from %s (tensor parallel %d, dtype %s, max_model_len %d)"
          % (model_path, args.tensor_parallel_size, args.dtype, args.max_model_len), flush=True)
    ready_timeout_s = float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", ENGINE_READY_TIMEOUT_S))
    if load_s > ready_timeout_s:
        time.sleep(ready_timeout_s / speed)
        raise EngineReadyTimeout(ready_timeout_s)
    time.sleep(load_s / speed)
    if model:
        load_weights(args, model, chips)
    # An image built for another chip loads the weights, then fails at its first kernel (vllm-ascend #2725, #6676):
    # the profile run's.
    soc_version = os.environ.get("SOC_VERSION", "")
    if soc_version and not soc_version.lower().startswith("ascend310p"):
        raise WrongChip(soc_version)
    if model:
        size_kv_cache(args, model, chips)
    server = ThreadingServer((args.host, args.port), Handler)
    server.state = State(args, model_path, config)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    print("INFO Starting vLLM API server on http://%s:%d (twin speed x%g)" % (args.host, args.port, speed),
          flush=True)
    return server


def engine_killer(engine):
    """The handler of SIGUSR1: the engine's process killed (the stand-in's engine is a thread). It dies on a thread
    of its own, as the handler must not wait for the engine's lock, which the interrupted thread may hold."""
    return lambda *_: threading.Thread(target=engine.die, kwargs={"killed": True}, daemon=True).start()


def engine_died_at_start(*_):
    """The handler of SIGUSR1 while the model loads: the engine's process killed before it served, which ends the
    start (vLLM's own words, vllm/v1/engine/core_client.py). Without it the signal would be lost: a container's
    first process ignores a signal it has no handler for."""
    print("ERROR RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
          "{'EngineCore_DP0': -10}", file=sys.stderr, flush=True)
    os._exit(1)


def serve(args, model_path, config, chips=None):
    """Serve until stopped (exit status 0), until the engine dies or when it never came up (1)."""
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        signal.signal(signal.SIGUSR1, engine_died_at_start)
    try:
        server = start_server(args, model_path, config, chips)
    except Refusal as refusal:
        # The model does not fit its chips: the process exits and Docker restarts it, to fail the same way.
        for line in refusal.lines + [str(refusal)]:
            print("ERROR %s" % line, file=sys.stderr, flush=True)
        return 1
    except EngineReadyTimeout as waited:
        # vLLM's own first sentence (vllm/v1/engine/core_client.py); the process exits and Docker restarts it.
        print("ERROR TimeoutError: Timed out waiting for engine core processes to start. Waited %g seconds "
              "(VLLM_ENGINE_READY_TIMEOUT_S); to wait longer, set VLLM_ENGINE_READY_TIMEOUT_S=<seconds>"
              % waited.args[0], file=sys.stderr, flush=True)
        return 1
    except WrongChip as built_for:
        # vllm-ascend's own line, its misspelling included.
        print("[ERROR] the socversion Ascend%s of bin package does not match the current device socverison "
              "Ascend310P3. Please modify default socversion in run.sh or execute run.sh with socversion parameter."
              % built_for.args[0][len("ascend"):].upper(), file=sys.stderr, flush=True)
        return 1
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        signal.signal(signal.SIGUSR1, engine_killer(server.state.engine))
    serving_since = time.monotonic()
    try:
        server.state.engine.died.wait()
    except KeyboardInterrupt:
        return 0
    # vLLM's watchdog finds the dead engine at its next look (one every WATCHDOG_S since the server started):
    # until then /health answers 503. The answers owed to requests in flight go out before the server stops.
    time.sleep(WATCHDOG_S - (time.monotonic() - serving_since) % WATCHDOG_S)
    deadline = time.time() + WATCHDOG_S
    while server.state.in_flight and time.time() < deadline:
        time.sleep(0.05)
    server.shutdown()
    print("INFO Shutting down FastAPI HTTP server.", flush=True)
    return 1
