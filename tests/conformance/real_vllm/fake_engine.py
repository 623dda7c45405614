"""An engine core for vLLM 0.18 that runs no model: it answers every request with set timings.

`vllm serve` is vLLM's API server (FastAPI, argument parsing, the API-key middleware, request validation, the
chat template, multimodal processing, detokenising, streaming, usage, /metrics) in front of an engine core: the
scheduler and the model, in a process of their own that AsyncLLM reaches through an EngineCoreClient. Only that
client is replaced here (``install``), so everything a client of the server meets is vLLM's own code and only
the tokens and their timing come from this file.

What the fake engine does with each request (EngineCoreRequest) AsyncLLM hands it:
- its first token comes FAKE_TTFT_S seconds after the request reached the engine (default 0.2), then one token
  every FAKE_TPOT_S seconds (default 0.05), on a fixed schedule from the first, whatever the other requests do;
- the tokens are the model folder's answer (fake_engine.json), repeated as long as the answer may run;
- it stops as vLLM's scheduler decides: on the end-of-sequence token (which a natural answer ends with, after
  its last word), on a stop token id, or at max_tokens; with ignore_eos the answer runs to max_tokens;
- FAKE_FAULTS, JSON such as ``{"error": [1, 2]}``, names the requests (by order of arrival at the engine,
  from 1) that fail: "error" finishes the request with FinishReason.ERROR on its third token, as an engine
  does when a request's KV cache cannot be loaded (vLLM answers HTTP 500, or an error event mid-stream);
- FAKE_ENGINE_LOG names a file to which a JSON line is added for every request that ends: its engine request
  id, the wall-clock times it arrived, got its first token and finished, its prompt and completion token
  counts, max_tokens, ignore_eos and how it finished. It is the truth that client-side timings are held to.

After every step it reports the scheduler's counts (running requests, KV-cache use), as an engine core does,
and once more when a request has left, so /metrics shows an idle server as idle.
"""
import asyncio
import json
import os
import pathlib
import time
import types

from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, EngineCoreOutputs, FinishReason
from vllm.v1.engine.core_client import EngineCoreClient
from vllm.v1.metrics.stats import SchedulerStats

FAULT_KINDS = ("error",)
# The token on which a request with the "error" fault fails.
ERROR_ON_TOKEN = 3
# What an engine core reports once it has sized its KV cache: the cache's size in blocks (vLLM would measure it).
KV_CACHE_BLOCKS = 4096
# max_tokens when a request has none (vLLM's frontend sets it for chat requests; this is for other callers).
DEFAULT_MAX_TOKENS = 16


def seconds(environ, name, default):
    value = float(environ.get(name, default))
    if value < 0:
        raise ValueError("%s=%s: expected seconds, 0 or more" % (name, value))
    return value


def faults_by_arrival(text):
    """{arrival number: fault} from FAKE_FAULTS' JSON ({fault: [arrival numbers]})."""
    found = {}
    for kind, numbers in json.loads(text or "{}").items():
        if kind not in FAULT_KINDS:
            raise ValueError("FAKE_FAULTS: unknown fault %r (known: %s)" % (kind, ", ".join(FAULT_KINDS)))
        for number in numbers:
            found[int(number)] = kind
    return found


class Settings:
    """The fake engine's behaviour, from the environment (see the module's docstring)."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        self.ttft_s = seconds(environ, "FAKE_TTFT_S", 0.2)
        self.tpot_s = seconds(environ, "FAKE_TPOT_S", 0.05)
        self.faults = faults_by_arrival(environ.get("FAKE_FAULTS"))
        self.log_path = environ.get("FAKE_ENGINE_LOG") or None


class Answer:
    """One request on its way through the fake engine: which tokens it gets and when it stops.

    Stopping follows vLLM's scheduler (vllm/v1/core/sched/utils.py, check_stop): the end-of-sequence token stops
    the request unless ignore_eos (then vLLM sets no eos_token_id), a stop token id stops it with that id as the
    stop reason, and max_tokens ends it as "length"."""

    def __init__(self, request, answer_ids, fault):
        params = request.sampling_params
        self.request_id = request.request_id
        self.prompt_tokens = len(request.prompt_token_ids or ())
        self.max_tokens = params.max_tokens if params.max_tokens is not None else DEFAULT_MAX_TOKENS
        self.ignore_eos = bool(params.ignore_eos)
        self.eos_id = params.eos_token_id
        self.stop_ids = set(params.stop_token_ids or ())
        self.answer_ids = answer_ids
        self.fault = fault
        self.tokens = []
        self.arrived_wall = time.time()
        self.first_token_wall = None
        self.finish = None

    def next_token(self):
        """The next token and, when it is the last, why the request finishes (else None)."""
        index = len(self.tokens)
        if self.eos_id is not None and index == len(self.answer_ids):
            token = self.eos_id
        else:
            token = self.answer_ids[index % len(self.answer_ids)]
        self.tokens.append(token)
        if self.fault == "error" and len(self.tokens) >= ERROR_ON_TOKEN:
            self.finish = (FinishReason.ERROR, None)
        elif token == self.eos_id:
            self.finish = (FinishReason.STOP, None)
        elif token in self.stop_ids:
            self.finish = (FinishReason.STOP, token)
        elif len(self.tokens) >= self.max_tokens:
            self.finish = (FinishReason.LENGTH, None)
        return token, self.finish

    def log_line(self, finished):
        return json.dumps({"request_id": self.request_id, "arrived_s": self.arrived_wall,
                           "first_token_s": self.first_token_wall, "finished_s": time.time(),
                           "prompt_tokens": self.prompt_tokens, "completion_tokens": len(self.tokens),
                           "max_tokens": self.max_tokens, "ignore_eos": self.ignore_eos, "finish": finished})


class FakeCoreClient(EngineCoreClient):
    """What AsyncLLM talks to instead of an engine core process: requests in, EngineCoreOutputs out."""

    def __init__(self, vllm_config, settings=None):
        self.settings = settings or Settings()
        self.vllm_config = vllm_config
        # What AsyncLLM reads of a client: whether the engine died, and which engine ranks it serves.
        self.resources = types.SimpleNamespace(engine_dead=False)
        self.engine_ranks_managed = [0]
        folder = pathlib.Path(vllm_config.model_config.model)
        self.answer_ids = json.loads((folder / "fake_engine.json").read_text())["answer_token_ids"]
        cache = vllm_config.cache_config
        if not cache.num_gpu_blocks:
            cache.num_gpu_blocks = KV_CACHE_BLOCKS
        self.kv_tokens = cache.num_gpu_blocks * (cache.block_size or 16)
        self.outputs = asyncio.Queue()
        self.running = {}
        self.arrivals = 0

    # Requests and their outputs.

    async def add_request_async(self, request):
        self.arrivals += 1
        answer = Answer(request, self.answer_ids, self.settings.faults.get(self.arrivals))
        self.running[answer.request_id] = (answer, asyncio.get_running_loop().create_task(self.generate(answer)))

    async def abort_requests_async(self, request_ids):
        for request_id in request_ids:
            entry = self.running.get(request_id)
            if entry is not None:
                entry[1].cancel()

    async def get_output_async(self):
        return await self.outputs.get()

    async def generate(self, answer):
        """Emit the answer's tokens on schedule; log the request however it ends."""
        arrived = time.monotonic()
        events = [EngineCoreEvent.new_event(EngineCoreEventType.QUEUED, arrived),
                  EngineCoreEvent.new_event(EngineCoreEventType.SCHEDULED, arrived)]
        finished = "aborted"
        try:
            while answer.finish is None:
                due = arrived + self.settings.ttft_s + len(answer.tokens) * self.settings.tpot_s
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                token, finish = answer.next_token()
                if answer.first_token_wall is None:
                    answer.first_token_wall = time.time()
                reason, stop_reason = finish or (None, None)
                self.emit([EngineCoreOutput(request_id=answer.request_id, new_token_ids=[token],
                                            finish_reason=reason, stop_reason=stop_reason, events=events)])
                events = None
            finished = str(answer.finish[0])
        finally:
            self.running.pop(answer.request_id, None)
            # The scheduler's counts without this request, as a real engine core reports them on its next step.
            self.emit([])
            if self.settings.log_path:
                with open(self.settings.log_path, "a") as handle:
                    handle.write(answer.log_line(finished) + "\n")

    def emit(self, outputs):
        self.outputs.put_nowait(EngineCoreOutputs(outputs=outputs, timestamp=time.monotonic(),
                                                  scheduler_stats=self.scheduler_stats()))

    def scheduler_stats(self):
        in_cache = sum(answer.prompt_tokens + len(answer.tokens) for answer, _ in self.running.values())
        return SchedulerStats(num_running_reqs=len(self.running), num_waiting_reqs=0,
                              kv_cache_usage=min(1.0, in_cache / float(self.kv_tokens)))

    # The rest of what vLLM's API server asks of an engine core: there is no model, cache or profiler to act on.

    async def get_supported_tasks_async(self):
        return ("generate",)

    def shutdown(self, timeout=None):
        for _, task in list(self.running.values()):
            task.cancel()

    def dp_engines_running(self):
        return False

    async def reset_mm_cache_async(self):
        return None

    async def reset_prefix_cache_async(self, *args, **kwargs):
        return True

    async def reset_encoder_cache_async(self):
        return None

    async def is_sleeping_async(self):
        return False

    async def is_scheduler_paused_async(self):
        return False

    async def pause_scheduler_async(self, *args, **kwargs):
        return None

    async def resume_scheduler_async(self):
        return None

    async def profile_async(self, *args, **kwargs):
        return None


def install():
    """Make AsyncLLM build a FakeCoreClient where it would start an engine core process and connect to it.

    AsyncLLM gets its client from EngineCoreClient.make_async_mp_client; this replaces that factory."""

    def make_async_mp_client(vllm_config, executor_class, log_stats, *args, **kwargs):
        return FakeCoreClient(vllm_config)

    EngineCoreClient.make_async_mp_client = staticmethod(make_async_mp_client)
