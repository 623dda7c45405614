#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_benchmark: the seed's benchmark matrix against an OpenAI-compatible vLLM endpoint."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_benchmark
short_description: Measure a vLLM multimodal endpoint over a matrix of image sizes, output lengths and concurrency
description:
  - Runs one group of C(requests_per_group) chat requests for every combination of C(image_sizes),
    C(max_tokens) and C(concurrency), in that order (the seed's method), and returns one result per group
    under C(ansible_facts.vllm_benchmark.groups).
  - Each request carries one image and C(prompt). Bodies are built before a group's clock starts; by default
    every request gets a different generated image (PNG, photo-like, standard library only), because the
    same image 64 times hits vLLM's prefix and multimodal caches and flatters the result.
  - B(Closed loop) - C(concurrency) workers each send their next request when their last one finished.
  - B(Latency) - request sent to last byte received. B(TTFT) - sent to first content chunk.
    B(TPOT) - (latency - TTFT) / (completion tokens - 1), per request with more than one token.
    B(Duration) - first request sent to last request finished. B(RPS) - completed / duration.
    B(Total tokens/s) - (prompt + completion tokens of completed requests) / duration. B(Output tokens/s) -
    completion tokens / duration. B(Percentiles) - linear interpolation between closest ranks (numpy's
    default). Token counts come from the server's C(usage) (streamed with C(stream_options.include_usage)), so
    prompt tokens include the image tokens. These follow C(vllm bench serve)'s definitions.
  - Failed requests (HTTP errors, refused connections, resets mid-stream, timeouts, answers without usage)
    count in C(failed) and, by kind, in C(errors); they never enter latency statistics. A group whose error
    rate passes C(error_threshold) is marked C(unreliable), not hidden.
  - With C(results_file), each finished group is appended as one JSON line as soon as it finishes, and
    C(<results_file>.progress.json) tells which group runs and how far it is; with C(resume), groups already
    in the file are not run again (unless marked unreliable), so an interrupted run loses at most one group.
  - In check mode it only plans - groups, requests and an estimate of the time - and sends nothing.
  - Standard library only, Python 3.8 or later on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  base_url:
    description: Server address as seen from where the module runs.
    type: str
    default: http://127.0.0.1:8000
  model:
    description: Model name to request; by default the first one C(/v1/models) lists.
    type: str
  api_key:
    description: Bearer token for a server started with C(--api-key).
    type: str
  image_sizes:
    description: Image sizes, each C(WIDTHxHEIGHT).
    type: list
    elements: str
    default: [1920x1080, 1280x720, 640x480]
  max_tokens:
    description: Output lengths (C(max_tokens)) to measure.
    type: list
    elements: int
    default: [256, 64, 32]
  concurrency:
    description: Numbers of requests kept in flight.
    type: list
    elements: int
    default: [1, 8, 16, 32, 64]
  requests_per_group:
    description: Requests per group.
    type: int
    default: 64
  prompt:
    description: Text sent with each image.
    type: str
    default: 描述一下图片
  ignore_eos:
    description: Ask the server to generate exactly C(max_tokens) tokens, so completion lengths are comparable.
    type: bool
    default: true
  unique_images:
    description: A different image for every request; false sends the same image in every request of a size.
    type: bool
    default: true
  image_files:
    description:
      - Image files on the host to send instead of generated ones (cycled through). C(image_sizes) then only
        labels the groups; the server sees the files' own sizes.
    type: list
    elements: path
    default: []
  warmup_requests:
    description: Requests sent before the first group, not measured (the first requests after a load are slow).
    type: int
    default: 2
  request_timeout:
    description: Seconds a request may wait for any byte (connecting, the first token, each next chunk).
    type: float
    default: 600
  time_budget:
    description: Seconds after which no new group is started (0 - no limit).
    type: float
    default: 0
  error_threshold:
    description: Error rate (0 to 1) above which a group is marked unreliable.
    type: float
    default: 0.05
  results_file:
    description: JSON Lines file on the host, one line per finished group.
    type: path
  resume:
    description: Skip the groups already in C(results_file), except those marked unreliable.
    type: bool
    default: false
  estimate_seconds_per_token:
    description: Decode time per token used by check mode's estimate (about 0.09 s on a 310P3 pair with TP 2).
    type: float
    default: 0.09
notes:
  - Supports check mode (plans only).
  - Long matrices take hours on 310P; run the module with C(async) so no SSH session has to stay open.
seealso:
  - name: vLLM benchmark metrics
    description: The C(vllm bench serve) definitions these metrics follow.
    link: https://docs.vllm.ai/en/latest/contributing/benchmarks.html
"""

EXAMPLES = r"""
- name: The seed's full matrix, resumable
  vllm_benchmark:
    base_url: http://127.0.0.1:8000
    results_file: /var/lib/vllm-bench/results.jsonl
    resume: true
  async: 36000
  poll: 60

- name: A quick check of one size
  vllm_benchmark:
    image_sizes: [640x480]
    max_tokens: [32]
    concurrency: [1, 8]
    requests_per_group: 16

- name: How long would the seed's matrix take?
  vllm_benchmark:
  check_mode: true
"""

RETURN = r"""
ansible_facts:
  description: The benchmark's results.
  returned: always
  type: complex
  contains:
    vllm_benchmark:
      description: Results of this run (and of the groups resumed from C(results_file)).
      returned: always
      type: complex
      contains:
        base_url:
          description: Endpoint measured.
          type: str
          sample: http://127.0.0.1:8000
        model:
          description: Model requested.
          type: str
          sample: Qwen3-VL-8B-Instruct
        planned_groups:
          description: Groups in the matrix.
          type: int
          sample: 45
        planned_requests:
          description: Requests in the matrix, warm-up excluded.
          type: int
          sample: 2880
        estimated_seconds:
          description: Check mode's estimate of the run time.
          type: float
          sample: 9203.7
        stopped_by_budget:
          description: The time budget ended the run before every group ran.
          type: bool
          sample: false
        groups:
          description: One dict per finished group, in matrix order.
          type: list
          elements: dict
          sample:
            - image_size: 640x480
              max_tokens: 32
              concurrency: 32
              requests: 64
              completed: 64
              failed: 0
              error_rate: 0.0
              unreliable: false
              errors: {}
              duration_s: 8.43
              rps: 7.59
              avg_latency_s: 3.98
              p50_latency_s: 3.9
              p95_latency_s: 4.21
              p99_latency_s: 4.25
              avg_ttft_s: 1.1
              p50_ttft_s: 1.05
              p95_ttft_s: 1.6
              p99_ttft_s: 1.7
              avg_tpot_s: 0.093
              p95_tpot_s: 0.1
              total_tokens_per_s: 2657.3
              output_tokens_per_s: 242.9
              avg_prompt_tokens: 318.0
              avg_completion_tokens: 32.0
              total_prompt_tokens: 20352
              total_completion_tokens: 2048
              max_in_flight: 32
              resumed: false
"""

import base64
import functools
import http.client
import json
import math
import os
import re
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

from ansible.module_utils.ascend_images import ImageSeries, data_url
from ansible.module_utils.basic import AnsibleModule

SIZE = re.compile(r"^([1-9]\d*)x([1-9]\d*)$")
PROGRESS_EVERY_S = 2.0


class BenchmarkError(Exception):
    """Bad input or an endpoint that can't be benchmarked; the message says which and how to fix it."""


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values):
    return sum(values) / len(values) if values else None


class Result:
    """One request's outcome; times are time.monotonic() seconds."""

    __slots__ = ("sent", "first_token", "finished", "prompt_tokens", "completion_tokens", "error", "request_id")

    def __init__(self, sent):
        self.sent = sent
        self.request_id = None  # the server's id of the completion, to match its logs
        self.first_token = self.finished = None
        self.prompt_tokens = self.completion_tokens = None
        self.error = None


def summarise(group, results):
    """Group metrics from its requests' results (definitions in DOCUMENTATION)."""
    done = [r for r in results if r.error is None]
    errors = {}
    for result in results:
        if result.error is not None:
            errors[result.error] = errors.get(result.error, 0) + 1
    start = min(r.sent for r in results) if results else 0.0
    end = max((r.finished for r in results if r.finished is not None), default=start)
    duration = end - start
    latency = [r.finished - r.sent for r in done]
    ttft = [r.first_token - r.sent for r in done if r.first_token is not None]
    tpot = [(r.finished - r.first_token) / (r.completion_tokens - 1) for r in done
            if r.first_token is not None and r.completion_tokens and r.completion_tokens > 1]
    prompt = sum(r.prompt_tokens for r in done)
    completion = sum(r.completion_tokens for r in done)

    def rounded(value, digits=4):
        return None if value is None else round(value, digits)

    metrics = dict(group)
    metrics.update({
        "requests": len(results),
        "completed": len(done),
        "failed": len(results) - len(done),
        "error_rate": rounded((len(results) - len(done)) / float(len(results))) if results else 0.0,
        "errors": errors,
        "duration_s": rounded(duration),
        "rps": rounded(len(done) / duration if duration > 0 else None),
        "avg_latency_s": rounded(mean(latency)),
        "p50_latency_s": rounded(percentile(latency, 50)),
        "p95_latency_s": rounded(percentile(latency, 95)),
        "p99_latency_s": rounded(percentile(latency, 99)),
        "avg_ttft_s": rounded(mean(ttft)),
        "p50_ttft_s": rounded(percentile(ttft, 50)),
        "p95_ttft_s": rounded(percentile(ttft, 95)),
        "p99_ttft_s": rounded(percentile(ttft, 99)),
        "avg_tpot_s": rounded(mean(tpot), 5),
        "p95_tpot_s": rounded(percentile(tpot, 95), 5),
        "total_tokens_per_s": rounded((prompt + completion) / duration if duration > 0 else None, 2),
        "output_tokens_per_s": rounded(completion / duration if duration > 0 else None, 2),
        "avg_prompt_tokens": rounded(prompt / float(len(done)) if done else None, 2),
        "avg_completion_tokens": rounded(completion / float(len(done)) if done else None, 2),
        "total_prompt_tokens": prompt,
        "total_completion_tokens": completion,
        "max_in_flight": max_in_flight(results),
    })
    return metrics


def max_in_flight(results):
    """Most requests open at one time (a closed loop at concurrency N should reach N)."""
    edges = []
    for result in results:
        edges.append((result.sent, 1))
        edges.append((result.finished if result.finished is not None else result.sent, -1))
    peak = current = 0
    for _moment, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        peak = max(peak, current)
    return peak


class Endpoint:
    """An OpenAI-compatible server, spoken to with http.client (no third-party HTTP library on hosts)."""

    def __init__(self, base_url, api_key, timeout):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BenchmarkError("base_url %r: expected http://host:port" % base_url)
        self.base_url = base_url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def connection(self):
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=self.timeout)

    def models(self):
        connection = self.connection()
        try:
            connection.request("GET", self.prefix + "/v1/models", headers=self.headers)
            response = connection.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as error:
            raise BenchmarkError("cannot reach %s/v1/models: %s. Fix: check that the server runs and that "
                                 "base_url is the address it listens on" % (self.base_url, error)) from error
        finally:
            connection.close()
        if response.status != 200:
            raise BenchmarkError("%s/v1/models answered HTTP %d: %s" % (
                self.base_url, response.status, body[:200].decode("utf-8", "replace")))
        return [entry.get("id") for entry in json.loads(body).get("data", [])]

    def stream(self, body, result):
        """Send one streamed chat request, filling result; any failure becomes result.error."""
        connection = self.connection()
        try:
            result.sent = time.monotonic()
            connection.request("POST", self.prefix + "/v1/chat/completions", body=body, headers=self.headers)
            response = connection.getresponse()
            if response.status != 200:
                response.read()
                result.error = "http_%d" % response.status
                return
            self.read_events(response, result)
        except socket.timeout:
            result.error = "timeout"
        except ConnectionRefusedError:
            result.error = "connection_refused"
        except (ConnectionResetError, BrokenPipeError, http.client.IncompleteRead,
                http.client.RemoteDisconnected):
            result.error = "connection_reset"
        except (OSError, http.client.HTTPException) as error:
            result.error = "connection_error:%s" % type(error).__name__
        finally:
            result.finished = time.monotonic()
            connection.close()

    @staticmethod
    def read_events(response, result):
        usage, done = None, False
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                continue
            event = json.loads(payload)
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


def parse_size(text):
    match = SIZE.match(str(text).strip())
    if not match:
        raise BenchmarkError("image_sizes: %r is not WIDTHxHEIGHT (for example 1920x1080)" % text)
    return int(match.group(1)), int(match.group(2))


def validate(params):
    for option in ("image_sizes", "max_tokens", "concurrency"):
        if not params[option]:
            raise BenchmarkError("%s: the list is empty; give at least one value" % option)
    for size in params["image_sizes"]:
        parse_size(size)
    for option in ("max_tokens", "concurrency"):
        for value in params[option]:
            if value < 1:
                raise BenchmarkError("%s: %d is not allowed; every value must be at least 1" % (option, value))
    if params["requests_per_group"] < 1:
        raise BenchmarkError("requests_per_group: %d is not allowed; it must be at least 1"
                             % params["requests_per_group"])
    if not 0 <= params["error_threshold"] <= 1:
        raise BenchmarkError("error_threshold: %s must be between 0 and 1" % params["error_threshold"])
    if params["request_timeout"] <= 0:
        raise BenchmarkError("request_timeout: %s must be more than 0 seconds" % params["request_timeout"])
    for path in params["image_files"]:
        if not os.path.isfile(path):
            raise BenchmarkError("image_files: %s does not exist on the host" % path)
    if params["resume"] and not params["results_file"]:
        raise BenchmarkError("resume: needs results_file, the file the finished groups are read from")


def plan(params):
    return [{"image_size": size, "max_tokens": tokens, "concurrency": concurrency}
            for size in params["image_sizes"] for tokens in params["max_tokens"]
            for concurrency in params["concurrency"]]


# Stands for the image's data URL in a request body until the body is serialised (see Benchmark.body).
IMAGE_PLACEHOLDER = "ascend-vllm-fleet:image-url"


def group_key(group):
    return "%s/%s/%s" % (group["image_size"], group["max_tokens"], group["concurrency"])


class Benchmark:
    def __init__(self, params, endpoint, model):
        self.params = params
        self.endpoint = endpoint
        self.model = model
        self.files = [open(path, "rb").read() for path in params["image_files"]]
        self.image_seed = 0
        self.series = {}

    def image(self, size):
        if self.files:
            data = self.files[self.image_seed % len(self.files)]
            url = "data:image/%s;base64,%s" % ("png" if data[:4] == b"\x89PNG" else "jpeg",
                                               base64.b64encode(data).decode("ascii"))
        else:
            if size not in self.series:
                self.series[size] = ImageSeries(*parse_size(size))
            url = data_url(self.series[size].png(self.image_seed if self.params["unique_images"] else 0))
        if self.params["unique_images"]:
            self.image_seed += 1
        return url

    def body(self, size, max_tokens):
        request = {
            "model": self.model, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": self.params["ignore_eos"],
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": IMAGE_PLACEHOLDER}},
                {"type": "text", "text": self.params["prompt"]}]}],
        }
        # The image goes in after the JSON is made: a data URL (base64) needs no escaping, and serialising
        # a megabyte of it would cost more than making the image.
        before, after = json.dumps(request, ensure_ascii=False).split(IMAGE_PLACEHOLDER, 1)
        return (before + self.image(size) + after).encode("utf-8")

    def bodies(self, group):
        """Every request body of a group, built before its clock starts."""
        if self.params["unique_images"] or self.files:
            return [self.body(group["image_size"], group["max_tokens"])
                    for _request in range(self.params["requests_per_group"])]
        return [self.body(group["image_size"], group["max_tokens"])] * self.params["requests_per_group"]

    def run_group(self, group, bodies, progress):
        """Closed loop: `concurrency` workers, each sending the next body when its last request ended."""
        results = [None] * len(bodies)
        lock = threading.Lock()
        next_index = [0]

        def worker():
            while True:
                with lock:
                    index = next_index[0]
                    if index >= len(bodies):
                        return
                    next_index[0] += 1
                result = Result(time.monotonic())
                self.endpoint.stream(bodies[index], result)
                results[index] = result
                progress(index)

        workers = [threading.Thread(target=worker, daemon=True)
                   for _worker in range(min(group["concurrency"], len(bodies)))]
        # Hand the GIL between workers every 0.5 ms rather than 5 ms: a worker whose answer arrived must not
        # wait behind others to read it, or its latency would include the client's own queueing.
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        try:
            for thread in workers:
                thread.start()
            for thread in workers:
                thread.join()
        finally:
            sys.setswitchinterval(switch_interval)
        return results


class Recorder:
    """The results file (one JSON line per group, flushed at once) and the progress file beside it."""

    def __init__(self, path):
        self.path = path
        self.progress_path = path + ".progress.json" if path else None
        self.last_progress = 0.0

    def finished_groups(self):
        found = {}
        if self.path and os.path.exists(self.path):
            with open(self.path) as handle:
                for line in handle:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a line cut by a crash mid-write: that group runs again
                    found[group_key(record)] = record
        return found

    def append(self, record):
        if not self.path:
            return
        folder = os.path.dirname(self.path)
        if folder and not os.path.isdir(folder):
            os.makedirs(folder)
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def progress(self, state, force=False):
        if not self.progress_path or (not force and time.monotonic() - self.last_progress < PROGRESS_EVERY_S):
            return
        self.last_progress = time.monotonic()
        tmp = self.progress_path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(dict(state, updated_at=time.time()), handle, sort_keys=True)
        os.replace(tmp, self.progress_path)


def estimate_seconds(groups, params):
    total = 0.0
    for group in groups:
        waves = math.ceil(params["requests_per_group"] / float(group["concurrency"]))
        total += waves * group["max_tokens"] * params["estimate_seconds_per_token"]
    return round(total, 1)


ARGUMENT_SPEC = dict(
    base_url=dict(type="str", default="http://127.0.0.1:8000"),
    model=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    image_sizes=dict(type="list", elements="str", default=["1920x1080", "1280x720", "640x480"]),
    max_tokens=dict(type="list", elements="int", default=[256, 64, 32], no_log=False),
    concurrency=dict(type="list", elements="int", default=[1, 8, 16, 32, 64]),
    requests_per_group=dict(type="int", default=64),
    prompt=dict(type="str", default="描述一下图片"),
    ignore_eos=dict(type="bool", default=True),
    unique_images=dict(type="bool", default=True),
    image_files=dict(type="list", elements="path", default=[]),
    warmup_requests=dict(type="int", default=2),
    request_timeout=dict(type="float", default=600),
    time_budget=dict(type="float", default=0),
    error_threshold=dict(type="float", default=0.05),
    results_file=dict(type="path"),
    resume=dict(type="bool", default=False),
    estimate_seconds_per_token=dict(type="float", default=0.09, no_log=False),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        validate(params)
        facts = run(params, check_mode=module.check_mode)
    except BenchmarkError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=not module.check_mode, ansible_facts={"vllm_benchmark": facts})


def count_finished_request(recorder, state, request_index):  # pylint: disable=unused-argument
    """run_group's callback: one more request of the group finished; the progress file says so (throttled)."""
    state["requests_done"] += 1
    recorder.progress(state)


def run(params, check_mode=False):
    groups = plan(params)
    facts = {"base_url": params["base_url"], "model": params["model"], "planned_groups": len(groups),
             "planned_requests": len(groups) * params["requests_per_group"], "groups": [],
             "results_file": params["results_file"], "stopped_by_budget": False,
             "estimated_seconds": estimate_seconds(groups, params)}
    if check_mode:
        return facts
    recorder = Recorder(params["results_file"])
    final = {"groups_total": len(groups), "finished": True}
    try:
        run_matrix(params, groups, facts, recorder)
    except BaseException as error:
        # Whoever follows the progress file learns at once that the run ended, and why.
        recorder.progress(dict(final, groups_done=len(facts["groups"]), error=str(error) or type(error).__name__),
                          force=True)
        raise
    recorder.progress(dict(final, groups_done=len(facts["groups"])), force=True)
    return facts


def run_matrix(params, groups, facts, recorder):
    endpoint = Endpoint(params["base_url"], params["api_key"], params["request_timeout"])
    served = endpoint.models()
    model = params["model"] or (served[0] if served else None)
    if model not in served:
        raise BenchmarkError("model %r is not served at %s; it serves: %s" % (
            model, params["base_url"], ", ".join(served) or "nothing"))
    facts["model"] = model
    benchmark = Benchmark(params, endpoint, model)
    # A group recorded as unreliable (say, run while the server was down) is run again on resume.
    finished = {key: record for key, record in recorder.finished_groups().items()
                if not record.get("unreliable")} if params["resume"] else {}
    if params["warmup_requests"] and len(finished) < len(groups):
        for _warmup in range(params["warmup_requests"]):
            endpoint.stream(benchmark.body(groups[0]["image_size"], min(groups[0]["max_tokens"], 16)),
                            Result(time.monotonic()))
    started = time.monotonic()
    for number, group in enumerate(groups, 1):
        if group_key(group) in finished:
            facts["groups"].append(dict(finished[group_key(group)], resumed=True))
            continue
        if params["time_budget"] and time.monotonic() - started > params["time_budget"]:
            facts["stopped_by_budget"] = True
            break
        bodies = benchmark.bodies(group)
        state = {"group": group, "group_number": number, "groups_total": len(groups), "requests_done": 0,
                 "requests_total": len(bodies), "groups_done": len(facts["groups"])}
        recorder.progress(state, force=True)

        results = benchmark.run_group(group, bodies, functools.partial(count_finished_request, recorder, state))
        metrics = summarise(group, results)
        metrics["unreliable"] = metrics["error_rate"] > params["error_threshold"]
        metrics["finished_at"] = time.time()
        recorder.append(metrics)
        facts["groups"].append(dict(metrics, resumed=False))


if __name__ == "__main__":
    main()
