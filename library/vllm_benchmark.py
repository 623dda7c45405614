#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_benchmark: a matrix of image-request load groups against one OpenAI-compatible endpoint."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_benchmark
short_description: Load one vLLM multimodal endpoint over a matrix of image sizes, output lengths and concurrency
description:
  - Runs one group of C(requests_per_group) streamed chat requests for every combination of C(image_sizes),
    C(max_tokens) and C(concurrency), in that order, and returns one record per group in C(groups).
  - Each request carries one image and C(prompt). Bodies are built before a group's clock starts; by default
    every request gets a different generated image (PNG, photo-like, standard library only), because the
    same image 64 times hits vLLM's prefix and multimodal caches and flatters the result.
  - B(Closed loop) - C(concurrency) workers each send their next request when their last one finished.
  - The metrics follow the definitions of vLLM's C(vllm bench serve) - latency is request sent to last byte,
    TTFT is sent to first content token, token counts are the server's C(usage); every field of a record,
    with its unit and definition, is listed in C(module_utils/bench_record.py) (C(FIELDS)) and in each report.
  - Failed requests (HTTP errors, refused connections, resets mid-stream, timeouts, answers without usage, the
    error event vLLM streams when its engine fails mid-request - C(stream_error) - and streams that are not
    chat completion chunks - C(malformed_stream), and streams of more events than C(max_tokens) allows, from a
    server that never ends its answer - C(stream_too_long)) count in C(failed) and, by kind, in C(errors); they never
    enter latency statistics and never end the run. A group whose error rate passes C(error_threshold) is
    marked C(unreliable), not hidden.
  - Options it cannot use (an empty list, a value listed twice, a number out of range, a results file that is
    a folder, an image file that is no PNG or JPEG) fail before any request is sent or file written.
  - With C(results_file), each finished group is appended as one JSON line as soon as it finishes, and
    C(<results_file>.progress.json) tells which group runs and how far it is, and when the run ended and why;
    with C(resume), groups already in the file are not run again (unless marked unreliable), so an
    interrupted run loses at most one group.
  - Before the first group and after the last, asks the model questions with one right answer about pictures it
    draws (C(answer_check), the rules of C(module_utils/answer_check.py), as C(vllm_probe) asks them), so a model
    that answers garbage - on 310P the C(!!!!!!!!) of an fp16 overflow - or goes bad during a long run shows
    beside its figures. The verdicts are returned in C(answer_checks) and written to C(results_file); a failed
    one does not stop the run.
  - With C(search) C(concurrency), no matrix runs; for each image size and output length the module finds the
    largest concurrency, up to the largest value of C(concurrency), that meets C(slo) - doubling from 1 until a
    probe fails, then bisecting to C(search_tolerance) (the rules of C(module_utils/capacity_search.py)). A search
    after the first starts at the capacity last found for its output length (else the last found) - that and one
    tolerance beyond it settle a capacity that did not move, where doubling from 1 runs every probe below. Each
    probe sends its concurrency's first wave, not counted, then as many more (at least C(search_probe_requests));
    a percentile target is judged by its upper bound at C(search_confidence), so a probe of few requests must keep
    its slowest ones under it (a 95th percentile needs 45 requests for a bound at 90 % below the slowest; with
    fewer, the slowest is the bound, and vouches with less confidence - 56 % with 16). The answer is RV(capacity).
    The probes go to C(results_file) as they finish; with C(resume), a search takes the reliable probes recorded
    with the same SLO, confidence, probe size and request count as run, and runs only the others. The matrix's
    C(requests_per_group) and C(new_group_deadline_s) do not apply to a search.
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
  api_key_file:
    description:
      - The server's own env file on the host, holding C(VLLM_API_KEY=<key>); the key is read from it here.
      - A run lasts hours and is started with C(async), which keeps the module's arguments in a file on the
        host for that long; with this option the key is never among them.
    type: path
  image_sizes:
    description:
      - Image sizes, each C(WIDTHxHEIGHT), each listed once.
      - Generated images are at most 8192 on a side; with C(image_files) the sizes only label the groups.
    type: list
    elements: str
    default: [1920x1080, 1280x720, 640x480]
  max_tokens:
    description: Output lengths (C(max_tokens)) to measure, each at least 1 and listed once.
    type: list
    elements: int
    default: [256, 64, 32]
  concurrency:
    description: Numbers of requests kept in flight, each at least 1 and listed once.
    type: list
    elements: int
    default: [1, 8, 16, 32, 64]
  requests_per_group:
    description: Requests per group (at least 1).
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
      - Image files (PNG or JPEG) on the host to send instead of generated ones, cycled through.
        C(image_sizes) then only labels the groups; the server sees the files' own sizes.
    type: list
    elements: path
    default: []
  warmup_requests:
    description: Requests sent before the first group, not measured (the first requests after a load are slow); 0
      or more.
    type: int
    default: 2
  request_timeout_s:
    description: Seconds a request may wait for any byte (connecting, the first token, each next chunk); more
      than 0.
    type: float
    default: 600
  new_group_deadline_s:
    description:
      - Seconds after the first group started past which no further group starts (0 - none). The group
        running then still finishes. A run it stopped says so - RV(stopped_by_deadline), RV(deadline) with the
        groups not run, a line C(deadline) in C(results_file) and in its progress file, and a warning.
    type: float
    default: 0
  error_threshold:
    description: Error rate (0 to 1) above which a group is marked unreliable.
    type: float
    default: 0.05
  results_file:
    description: JSON Lines file on the host, one line per finished group; its progress file goes beside it. Not
      a folder.
    type: path
  resume:
    description: Skip the groups already in C(results_file), except those marked unreliable.
    type: bool
    default: false
  estimate_seconds_per_token:
    description:
      - Decode time per token used by check mode's estimate. The default is the seed's, measured on real hardware
        (a 310P3 pair with TP 2); other hardware, or a stand-in, runs at its own pace, which RV(estimate_basis) says.
    type: float
    default: 0.09
  answer_check:
    description:
      - C(known) - the known questions must be answered right and not degenerate; C(sane) - one answer must not be
        degenerate; C(none) - no question is asked. As C(vllm_probe)'s option of the same name.
    type: str
    choices: [known, sane, none]
    default: known
  search:
    description:
      - C(none) - measure the matrix; C(concurrency) - search each image size and output length for the largest
        concurrency that meets C(slo), the largest value of C(concurrency) the top of the range.
    type: str
    choices: [none, concurrency]
    default: none
  slo:
    description:
      - The service level objective a capacity search holds each probe to (with C(search) C(concurrency) only)
        - any of C(p95_latency_s), C(p95_ttft_s), C(p95_tpot_s) (seconds, as in RV(groups); at least one of these)
        and C(max_error_rate) (a share from 0 to 1 of failed requests).
    type: dict
  search_tolerance:
    description: How close, in users, the bisection brings the concurrency that met C(slo) and the one that did
      not; at least 1.
    type: int
    default: 1
  search_confidence:
    description: Confidence (more than 0.5, less than 1) with which a probe's percentiles must be under their targets.
    type: float
    default: 0.9
  search_probe_requests:
    description: Requests each probe counts at least, after its first wave; at least 1.
    type: int
    default: 16
  open_loop_requests:
    description:
      - Requests of the open-loop check of each capacity found (0 - none) - sent at the throughput measured there
        whether or not earlier ones were answered, as users behind a gateway send them, and judged against
        C(slo) after the first C(max_concurrency) of them.
    type: int
    default: 32
  open_loop_burstiness:
    description:
      - Shape of the gamma distribution the open-loop check's gaps between arrivals are drawn from (more than 0) -
        1 is a Poisson process, less is burstier, as C(vllm bench serve --burstiness).
    type: float
    default: 1.0
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.facts
attributes:
  check_mode:
    description: Can run in check mode and return what a run would do.
    support: full
    details: In check mode it only plans - groups, requests and an estimate of the time - and sends nothing.
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: What it adds to C(results_file) is returned in C(groups).
notes:
  - Long matrices take hours on 310P; run the module with C(async) and follow the progress file, so no SSH
    session has to stay open.
seealso:
  - name: vLLM benchmark metrics
    description: The C(vllm bench serve) definitions these metrics follow.
    link: https://docs.vllm.ai/en/latest/contributing/benchmarks.html
"""

EXAMPLES = r"""
- name: The full 3x3x5 matrix, resumable
  ascend.fleet.vllm_benchmark:
    base_url: http://127.0.0.1:8000
    results_file: /var/lib/vllm-bench/vllm-ascend.jsonl
    resume: true
  async: 36000
  poll: 60

- name: A quick check of one size
  ascend.fleet.vllm_benchmark:
    image_sizes: [640x480]
    max_tokens: [32]
    concurrency: [1, 8]
    requests_per_group: 16

- name: How many users does it take at p95 latency under 10 s, to within 2?
  ascend.fleet.vllm_benchmark:
    search: concurrency
    slo: {p95_latency_s: 10, max_error_rate: 0.01}
    search_tolerance: 2
    image_sizes: [1920x1080, 640x480]
    max_tokens: [64]
    concurrency: [64]
    results_file: /var/lib/vllm-bench/vllm-ascend-capacity.jsonl
    resume: true
  async: 36000
  poll: 60

- name: How long would the full matrix take?
  ascend.fleet.vllm_benchmark:
  check_mode: true
"""

RETURN = r"""
base_url:
  description: Endpoint measured.
  returned: always
  type: str
  sample: http://127.0.0.1:8000
model:
  description: Model requested (in check mode, C(model) as given).
  returned: always
  type: str
  sample: Qwen3-VL-8B-Instruct
results_file:
  description: The results file, as given.
  returned: always
  type: str
  sample: /var/lib/vllm-bench/vllm-ascend.jsonl
planned_groups:
  description: Groups in the matrix; with C(search) C(concurrency), the probes each search runs before its first
    failure, at most (the bisection after it depends on what they measure).
  returned: always
  type: int
  sample: 45
planned_requests:
  description: Requests of RV(planned_groups), warm-up excluded.
  returned: always
  type: int
  sample: 2880
estimated_seconds:
  description: Estimate of the run time from C(estimate_seconds_per_token).
  returned: always
  type: float
  sample: 9203.7
estimate_basis:
  description: What RV(estimated_seconds) is based on, to show beside it.
  returned: always
  type: str
  sample: "estimated from the seed's 310P timings (real hardware: 0.09 s per output token on a 310P3 pair with TP 2);
    other hardware, or a stand-in, runs at its own pace"
planned:
  description:
    - The groups of the matrix in the order they run, each with C(image_size), C(max_tokens), C(concurrency),
      C(requests) and C(estimated_seconds) (its part of RV(estimated_seconds)); the follow step and the live
      view measure progress by them.
  returned: always
  type: list
  elements: dict
  sample:
    - {image_size: 640x480, max_tokens: 32, concurrency: 1, requests: 64, estimated_seconds: 184.3}
stopped_by_deadline:
  description: C(new_group_deadline_s) passed before every group ran.
  returned: always
  type: bool
  sample: false
deadline:
  description:
    - When C(new_group_deadline_s) stopped the run, what it left out (also the line C(deadline) of C(results_file))
      - C(new_group_deadline_s); C(elapsed_s), seconds from the first group's start to the stop; C(groups_total),
      the groups of the matrix; C(not_run), the groups not run, each C(image_size), C(max_tokens) and C(concurrency);
      C(stopped_at), Unix time. Null otherwise.
  returned: always
  type: dict
  sample:
    new_group_deadline_s: 3600.0
    elapsed_s: 3641.2
    groups_total: 45
    not_run: [{image_size: 640x480, max_tokens: 32, concurrency: 64}]
    stopped_at: 1796000000.0
groups:
  description:
    - One record per group measured or resumed, in matrix order; empty in check mode.
    - The fields are C(FIELDS) of C(module_utils/bench_record.py), each with its unit and definition, plus
      C(resumed) - the record was read from C(results_file), not measured by this run.
  returned: always
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
      unreliable: false
      finished_at: 1796000000.0
      resumed: false
capacity:
  description:
    - With C(search) C(concurrency), one record per image size and output length, in the order searched (each also
      a line of C(results_file), under the key C(capacity)).
    - C(slo); C(max_concurrency) (0 - not even one user meets C(slo)); C(limited_by) - C(slo), C(top) (the top of
      the range met it) or C(none_met); C(rps), C(output_tokens_per_s) and C(slo_figures) measured there.
    - C(started_at) - the concurrency probed first; C(probes) - the concurrency and verdict of each probe in the
      order run; C(requests) and C(seconds) the search spent; C(resumed_probes) - those read from C(results_file).
    - C(open_loop) - the open-loop check there (C(rate_rps), C(burstiness), C(sent), C(passed), C(figures),
      C(failed), C(duration_s), C(max_in_flight), C(resumed)), or null when none ran.
    - Empty without a search and in check mode.
  returned: always
  type: list
  elements: dict
  sample:
    - image_size: 640x480
      max_tokens: 32
      slo: {p95_latency_s: 4.2}
      max_concurrency: 24
      limited_by: slo
      rps: 7.1
      output_tokens_per_s: 227.2
      slo_figures: {p95_latency_s: {measured: 3.9, target: 4.2}}
      started_at: 1
      probes: [{concurrency: 1, passed: true}, {concurrency: 2, passed: true}]
      requests: 420
      seconds: 96.3
      resumed_probes: 0
      open_loop: {rate_rps: 7.1, burstiness: 1.0, sent: 56, passed: true, failed: [], duration_s: 9.8,
                  figures: {p95_latency_s: {measured: 4.1, target: 4.2}}, max_in_flight: 27, resumed: false}
progress_error:
  description: Why the last write of the progress file failed (a full disk), or null; the run goes on without it.
  returned: always
  type: str
  sample: null
answer_checks:
  description:
    - The answer checks of this run, C(before) and C(after) the matrix (none with C(answer_check) none or in
      check mode); each as C(vllm_probe) returns its C(answer_check), with C(answer_check) (before or after) and
      C(checked_at) (Unix time). In C(results_file) each is a line of its own.
  returned: always
  type: list
  elements: dict
  sample:
    - answer_check: before
      mode: known
      passed: false
      failure: "the answer check (known) failed: asked ... got \"!!!!!!!!\" (degenerate: ...)"
      asked: []
      checked_at: 1796000000.0
ansible_facts:
  description:
    - The run as facts of the host, so later tasks and plays read it as C(ansible_facts.vllm_benchmark); none in
      check mode. The vllm_bench role also keeps each instance's last run on the host as a local fact
      (M(ascend.fleet.vllm_bench_facts)).
  returned: success, not in check mode
  type: dict
  contains:
    vllm_benchmark:
      description: The endpoint, model and results file measured, C(finished_at) (Unix time), the records of
        RV(groups), RV(answer_checks), RV(capacity) and C(summary).
      type: dict
      contains:
        capacity:
          description: RV(capacity).
          type: list
          elements: dict
        summary:
          description:
            - The key figures for each image size and output length (C(summary) of
              C(module_utils/bench_record.py)) - C(peak_output_tokens_per_s), the C(peak_concurrency) it was reached
              at and its C(peak_p95_latency_s); C(lowest_concurrency_p95_latency_s) and
              C(lowest_concurrency_p95_ttft_s), one user's. Unreliable groups are left out.
          type: list
          elements: dict
          sample:
            - {image_size: 640x480, max_tokens: 32, groups: 2, peak_output_tokens_per_s: 242.9, peak_concurrency: 8,
               peak_p95_latency_s: 4.21, lowest_concurrency: 1, lowest_concurrency_p95_latency_s: 3.1,
               lowest_concurrency_p95_ttft_s: 0.3}
"""

import contextlib
import functools
import math
import os
import random
import sys
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.answer_check import CHECKS, asker, check_answers
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    GROUP_FIELDS,
    PROGRESS_EVERY_S,
    ProgressWriter,
    ResultsBusy,
    answer_check_record,
    append_result,
    deadline_text,
    group_key,
    hold_results,
    max_in_flight,
    read_probes,
    read_results,
    summarise,
    summary,
)
from ansible_collections.ascend.fleet.plugins.module_utils.capacity_search import (
    ConcurrencySearch,
    check_slo,
    judge,
    probe_requests,
)
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import (
    Client,
    ClientError,
    ImageChat,
    StreamResult,
    image_data_url,
    key_from_env_file,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_above,
    number_at_least,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import (
    MAX_SIDE,
    ImageSeries,
    generated_size,
    parse_size,
)

# Decode time per output token on the seed's hardware, a 310P3 pair with TP 2 (about 23 s for a 256-token answer):
# check mode's estimate unless estimate_seconds_per_token says otherwise.
SEED_SECONDS_PER_TOKEN = 0.09

ARGUMENT_SPEC = dict(
    base_url=dict(type="str", default="http://127.0.0.1:8000"),
    model=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    api_key_file=dict(type="path"),
    image_sizes=dict(type="list", elements="str", default=["1920x1080", "1280x720", "640x480"]),
    max_tokens=dict(type="list", elements="int", default=[256, 64, 32], no_log=False),
    concurrency=dict(type="list", elements="int", default=[1, 8, 16, 32, 64]),
    requests_per_group=dict(type="int", default=64),
    prompt=dict(type="str", default="描述一下图片"),
    ignore_eos=dict(type="bool", default=True),
    unique_images=dict(type="bool", default=True),
    image_files=dict(type="list", elements="path", default=[]),
    warmup_requests=dict(type="int", default=2),
    request_timeout_s=dict(type="float", default=600),
    new_group_deadline_s=dict(type="float", default=0),
    error_threshold=dict(type="float", default=0.05),
    results_file=dict(type="path"),
    resume=dict(type="bool", default=False),
    estimate_seconds_per_token=dict(type="float", default=SEED_SECONDS_PER_TOKEN, no_log=False),
    answer_check=dict(type="str", default="known", choices=list(CHECKS)),
    search=dict(type="str", default="none", choices=["none", "concurrency"]),
    slo=dict(type="dict"),
    search_tolerance=dict(type="int", default=1),
    search_confidence=dict(type="float", default=0.9),
    search_probe_requests=dict(type="int", default=16),
    open_loop_requests=dict(type="int", default=32),
    open_loop_burstiness=dict(type="float", default=1.0),
)
# The warm-up's answers are short: it only has to get the server past its first, slow requests.
WARMUP_MAX_TOKENS = 16


# Every error of the load test's own is an option's value it cannot use (a model the server does not serve
# included); an endpoint it cannot reach is a ClientError.
BenchmarkError = OptionError


# How a PNG and a JPEG file begin: a file that begins otherwise would fail every request of the run.
IMAGE_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")


def check_results_file(path):
    """Refuse a results file that cannot be one, before its progress file is written beside it."""
    if not path:
        return
    fix = "Fix: give a file path such as /var/lib/vllm-bench/vllm-ascend.jsonl (the vllm_bench role makes one in " \
          "vllm_bench_results_dir)"
    if os.path.isdir(path):
        raise BenchmarkError("results_file %s is a folder: expected a JSON Lines file. %s" % (path, fix))
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise BenchmarkError("results_file %s is below %s, which is a file: expected a path whose folders are "
                             "folders. %s" % (path, folder, fix))


def check_image_file(path):
    if not os.path.exists(path):
        problem = "does not exist on the host"
    elif os.path.isdir(path):
        problem = "is a folder"
    else:
        with open(path, "rb") as handle:
            start = handle.read(8)
        if start.startswith(IMAGE_SIGNATURES):
            return
        problem = "is not a PNG or JPEG (it starts with %r)" % start
    raise BenchmarkError("image_files: %s %s: expected PNG or JPEG files on the host. Fix: copy the images there "
                         "first, or leave image_files empty to send generated ones" % (path, problem))


def validate(params):
    """The client of base_url, once every option is one the module can use; BenchmarkError or ClientError,
    naming the option, otherwise."""
    for option in ("image_sizes", "max_tokens", "concurrency"):
        values = params[option]
        if not values:
            raise BenchmarkError("%s: the list is empty: expected at least one value. Fix: give one, or leave %s "
                                 "out for the default" % (option, option))
        for value in values:
            if values.count(value) > 1:
                raise BenchmarkError("%s: %s is listed twice: expected each value once, as each group is measured "
                                     "once. Fix: list it once" % (option, value))
    # Sizes only label the groups of image_files; generated images must be small enough to make on the host.
    size_of = parse_size if params["image_files"] else generated_size
    for size in params["image_sizes"]:
        try:
            size_of(size)
        except ValueError as error:
            raise BenchmarkError("image_sizes: %s. Fix: give sizes as WIDTHxHEIGHT, each side at most %d; for larger "
                                 "images send image_files" % (error, MAX_SIDE)) from None
    for option in ("max_tokens", "concurrency"):
        for value in params[option]:
            if value < 1:
                raise BenchmarkError("%s: %d is not allowed: expected every value at least 1. Fix: correct it"
                                     % (option, value))
    number_at_least(params, "requests_per_group", 1, "give how many requests each group sends")
    number_at_least(params, "warmup_requests", 0, "give 0 for no warm-up")
    number_above(params, "request_timeout_s", 0, "give the seconds a request may wait for any byte")
    number_at_least(params, "new_group_deadline_s", 0, "give 0 for no deadline")
    number_at_least(params, "estimate_seconds_per_token", 0, "give the decode time of a token, about 0.09 s on 310P3")
    if not (math.isfinite(params["error_threshold"]) and 0 <= params["error_threshold"] <= 1):
        raise BenchmarkError("error_threshold: %s is not allowed: expected a number between 0 and 1. Fix: give the "
                             "share of failed requests that makes a group unreliable, such as 0.05"
                             % params["error_threshold"])
    for path in params["image_files"]:
        check_image_file(path)
    if params["search"] == "concurrency":
        params["slo"] = check_slo(params["slo"])
        number_at_least(params, "search_tolerance", 1, "give how many users apart the search may stop, such as 2")
        number_at_least(params, "search_probe_requests", 1, "give how many requests a probe counts, such as 16")
        number_at_least(params, "open_loop_requests", 0, "give how many open-loop requests check a capacity, or 0")
        number_above(params, "open_loop_burstiness", 0, "give 1 for a Poisson process, less for burstier arrivals")
        if not 0.5 < params["search_confidence"] < 1:
            raise BenchmarkError("search_confidence: %s is not allowed: expected a number more than 0.5 and less "
                                 "than 1. Fix: give the confidence a probe's percentiles are judged with, such as "
                                 "0.9" % params["search_confidence"])
    elif params["slo"] is not None:
        raise BenchmarkError("slo: given, but search is none, which measures the matrix and holds it to no SLO. "
                             "Fix: add search: concurrency to find the largest concurrency that meets it, or leave "
                             "slo out")
    if params["resume"] and not params["results_file"]:
        raise BenchmarkError("resume: needs results_file, the file the finished groups are read from. Fix: give "
                             "results_file, or set resume to false")
    return Client(params["base_url"], params["api_key"] or key_from_env_file(params["api_key_file"]),
                  params["request_timeout_s"])


def doubling(top):
    """The concurrencies a capacity search probes before its first failure, at most: 1, 2, 4, ... and top."""
    search, steps = ConcurrencySearch(top, 1), []
    while search.next() is not None:
        steps.append(search.next())
        search.record(steps[-1], True)
    return steps


def workloads(params):
    """(image size, max_tokens) of every line of the matrix, or of every search, in the order they run."""
    return [(size, tokens) for size in params["image_sizes"] for tokens in params["max_tokens"]]


def plan(params):
    """The groups in the order they run, each with its requests: the matrix, or for each capacity search the probes
    from 1 up to its first failure, an estimate (where a search starts, and the bisection after it, are decided by
    what the probes measure)."""
    if params.get("search") == "concurrency":
        return [{"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
                 "requests": probe_requests(concurrency, params["search_probe_requests"])}
                for size, tokens in workloads(params) for concurrency in doubling(max(params["concurrency"]))]
    return [{"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
             "requests": params["requests_per_group"]}
            for size, tokens in workloads(params) for concurrency in params["concurrency"]]


def units_done(params, result):
    """(done, total) in the progress file's units: groups of the matrix, or searches (one per image size and
    max_tokens)."""
    if params["search"] == "concurrency":
        return len(result["capacity"]), len(workloads(params))
    return len(result["groups"]), result["planned_groups"]


def planned_groups(params):
    """The groups in the order they run, each with its requests and its share of the estimate: what the
    controller's follow step and live view measure progress by."""
    return [dict(group, estimated_seconds=estimate_seconds([group], params)) for group in plan(params)]


def estimate_basis(params):
    """What the estimate is based on, for whoever reads it: on other hardware, or a stand-in, the seed's pace is not its
    own."""
    if params["estimate_seconds_per_token"] == SEED_SECONDS_PER_TOKEN:
        return ("estimated from the seed's 310P timings (real hardware: %g s per output token on a 310P3 pair with TP "
                "2); other hardware, or a stand-in, runs at its own pace" % SEED_SECONDS_PER_TOKEN)
    return "estimated at %g s per output token (estimate_seconds_per_token, as given)" % (
        params["estimate_seconds_per_token"])


def estimate_seconds(groups, params):
    total = 0.0
    for group in groups:
        waves = math.ceil(group["requests"] / float(group["concurrency"]))
        total += waves * group["max_tokens"] * params["estimate_seconds_per_token"]
    return round(total, 1)


class Images:
    """The image of each request, as a data URL: generated per size, or the operator's files in turn."""

    def __init__(self, paths, unique):
        self.files = []
        for path in paths:
            with open(path, "rb") as handle:
                self.files.append(handle.read())
        self.unique = unique
        self.sent = 0
        self.series = {}

    def next_url(self, size):
        number = self.sent if self.unique else 0
        self.sent += 1
        if self.files:
            return image_data_url(self.files[number % len(self.files)])
        if size not in self.series:
            self.series[size] = ImageSeries(*parse_size(size))
        return image_data_url(self.series[size].png(number))


class LoadTest:
    def __init__(self, params, client, model):
        self.params = params
        self.client = client
        self.model = model
        self.images = Images(params["image_files"], params["unique_images"])

    def chat(self, max_tokens):
        return ImageChat(self.model, self.params["prompt"], max_tokens, stream=True,
                         ignore_eos=self.params["ignore_eos"])

    def bodies(self, group):
        """Every request body of a group, built before its clock starts."""
        chat, count = self.chat(group["max_tokens"]), group["requests"]
        if self.images.unique:
            return [chat.body(self.images.next_url(group["image_size"])) for _request in range(count)]
        return [chat.body(self.images.next_url(group["image_size"]))] * count

    def warm_up(self, group):
        tokens = min(group["max_tokens"], WARMUP_MAX_TOKENS)
        body = self.chat(tokens).body(self.images.next_url(group["image_size"]))
        self.client.stream_chat(body, StreamResult(), tokens)

    def run_group(self, group, bodies, request_done, alive=lambda: None):
        """Closed loop: `concurrency` workers, each sending the next body when its last request ended. While they
        run, alive() is called every PROGRESS_EVERY_S: answers of hundreds of tokens at high concurrency take
        minutes on 310P, and whoever follows the progress file must not take streams still delivering for a
        stalled run (a request that gets no byte for request_timeout_s ends, so a live process is a run that
        moves)."""
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
                result = StreamResult()
                self.client.stream_chat(bodies[index], result, group["max_tokens"])
                results[index] = result
                request_done()

        workers = [threading.Thread(target=worker, daemon=True)
                   for _worker in range(min(group["concurrency"], len(bodies)))]
        with quick_thread_switches():
            for thread in workers:
                thread.start()
            wait_for(workers, alive)
        return results

    def run_open_loop(self, group, bodies, rate, burstiness, request_done, alive=lambda: None):
        """Open loop: requests sent at their arrival times whether or not earlier ones were answered, the gaps
        between arrivals drawn from a gamma distribution of mean 1/rate and shape burstiness (1: a Poisson process;
        less: burstier), as vLLM's `vllm bench serve --request-rate --burstiness`. The arrivals are the same at
        every run (a fixed seed), so two runs differ only by the server."""
        arrivals = random.Random(len(bodies))
        results = [None] * len(bodies)

        def send(index):
            result = StreamResult()
            self.client.stream_chat(bodies[index], result, group["max_tokens"])
            results[index] = result
            request_done()

        senders = []
        with quick_thread_switches():
            due = time.monotonic()
            for index in range(len(bodies)):
                due += arrivals.gammavariate(burstiness, 1.0 / (rate * burstiness))
                left = due - time.monotonic()
                while left > 0:
                    time.sleep(min(left, PROGRESS_EVERY_S))
                    alive()
                    left = due - time.monotonic()
                senders.append(threading.Thread(target=send, args=(index,), daemon=True))
                senders[-1].start()
            wait_for(senders, alive)
        return results


@contextlib.contextmanager
def quick_thread_switches():
    """Hand the GIL between threads every 0.5 ms rather than 5 ms: a request whose answer arrived must not wait
    behind others to read it, or its latency would include the client's own queueing."""
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        yield
    finally:
        sys.setswitchinterval(switch_interval)


def wait_for(threads, alive):
    """Wait until the threads end, calling alive() every PROGRESS_EVERY_S meanwhile."""
    for thread in threads:
        while thread.is_alive():
            thread.join(PROGRESS_EVERY_S)
            alive()


def count_request(progress, state):
    """A request of the running group finished: the progress file says so (at most every few seconds)."""
    state["requests_done"] += 1
    progress.update(state)


def keep(path, record, what, result):
    """Append a record to the results file; a write that fails (a full disk) ends the run, naming what was kept."""
    try:
        append_result(path, record)
    except OSError as error:
        raise BenchmarkError(
            "results_file %s: the record of %s could not be written (%s); the %d groups recorded before it stay. "
            "Fix: free space on the host (df %s), then rerun with -e vllm_bench_resume=true, which measures only "
            "the groups not recorded" % (path, what, error.strerror or error, len(result["groups"]),
                                         os.path.dirname(path) or ".")) from None


def check_answers_now(params, client, model, when, result, progress):
    """Ask the answer check's questions (before or after the matrix), keep the verdict in the results and the
    results file."""
    if params["answer_check"] == "none":
        return
    ask_server = asker(client, model, params["request_timeout_s"])
    state = {"answer_check": when, "groups_done": len(result["groups"]), "groups_total": result["planned_groups"]}

    def ask(question):
        # Each question may take request_timeout_s: whoever follows the progress file sees that the run lives.
        progress.update(state, force=True)
        return ask_server(question)

    record = answer_check_record(when, check_answers(ask, params["answer_check"]))
    if params["results_file"]:
        keep(params["results_file"], record, "the answer check %s the groups" % when, result)
    result["answer_checks"].append(record)


def measure(params, client, groups, result, progress):
    served = client.models()
    model = params["model"] or (served[0] if served else None)
    if model not in served:
        raise BenchmarkError("model %r is not served at %s; it serves: %s" % (
            model, params["base_url"], ", ".join(served) or "nothing"))
    result["model"] = model
    load_test = LoadTest(params, client, model)
    finished = {}
    if params["resume"]:
        # A group recorded as unreliable (say, run while the server was down) runs again.
        finished = {group_key(record): record for record in read_results(params["results_file"])[0]
                    if not record.get("unreliable")}
    # The answers vouch for the groups measured now: a resume with nothing left to measure asks nothing. (A
    # search's probes to come are known only as it goes: it asks.)
    pending = len(finished) < len(groups) or params["search"] == "concurrency"
    if pending:
        check_answers_now(params, client, model, "before", result, progress)
        for _request in range(params["warmup_requests"]):
            progress.update({"groups_done": 0, "groups_total": len(groups)}, force=True)
            load_test.warm_up(groups[0])
    if params["search"] == "concurrency":
        search_capacity(params, load_test, result, progress)
    else:
        measure_matrix(params, load_test, groups, finished, result, progress)
    if pending:
        check_answers_now(params, client, model, "after", result, progress)


def measure_matrix(params, load_test, groups, finished, result, progress):
    started = time.monotonic()
    not_run = []
    for number, group in enumerate(groups, 1):
        if group_key(group) in finished:
            result["groups"].append(dict(finished[group_key(group)], resumed=True))
            continue
        if params["new_group_deadline_s"] and time.monotonic() - started > params["new_group_deadline_s"]:
            not_run.append({name: group[name] for name in GROUP_FIELDS})
            continue
        bodies = load_test.bodies(group)
        state = {"group": group, "group_number": number, "groups_total": len(groups), "requests_done": 0,
                 "requests_total": len(bodies), "groups_done": len(result["groups"])}
        progress.update(state, force=True)
        results = load_test.run_group(group, bodies, functools.partial(count_request, progress, state),
                                      functools.partial(progress.update, state))
        record = summarise(group, results, params["error_threshold"])
        if params["results_file"]:
            keep(params["results_file"], record, "group %d of %d" % (number, len(groups)), result)
        result["groups"].append(dict(record, resumed=False))
    if not_run:
        # Said where each reader looks: the result, the results file the report reads and the progress file.
        deadline = {"new_group_deadline_s": params["new_group_deadline_s"],
                    "elapsed_s": round(time.monotonic() - started, 1), "groups_total": len(groups),
                    "not_run": not_run, "stopped_at": time.time()}
        result.update(stopped_by_deadline=True, deadline=deadline)
        if params["results_file"]:
            keep(params["results_file"], {"deadline": deadline}, "the deadline's stop", result)


def probe_judgment(params):
    """What a probe's verdict depends on besides its group: a probe recorded with the same is not run again."""
    return {"slo": params["slo"], "confidence": params["search_confidence"],
            "minimum": params["search_probe_requests"]}


# What a resumed search reads of a recorded probe, and the types it must have there.
PROBE_FIELDS = {"passed": (bool,), "sent": (int,), "duration_s": (int, float), "figures": (dict,), "failed": (list,)}
RECORD_FIELDS = {"image_size": (str,), "max_tokens": (int,), "concurrency": (int,), "max_in_flight": (int,),
                 "rps": (int, float, type(None)), "output_tokens_per_s": (int, float, type(None))}


def typed(value, types):
    """isinstance, except that a bool is no number (JSON's true is not one request)."""
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def recorded_probes(path):
    """The probes of a results file a resumed search may take as run, by (group, kind): reliable, and complete
    with the types it reads. A line cut or written by anything else is not one: its probe runs again."""
    recorded = {}
    for line in read_probes(path):
        parts = ((line, RECORD_FIELDS), (line["probe"], PROBE_FIELDS))
        if line.get("unreliable") is False and all(typed(record.get(name), types) for record, wanted in parts
                                                   for name, types in wanted.items()):
            recorded[(group_key(line), line["probe"].get("kind"))] = line
    return recorded


def search_capacity(params, load_test, result, progress):
    """Each image size and output length's capacity search and open-loop check, each probe appended to the results
    file as it ends."""
    judgment = probe_judgment(params)
    recorded = recorded_probes(params["results_file"]) if params["resume"] else {}
    cells = workloads(params)

    def probe(number, kind, concurrency, requests, **arrivals):
        """The probe of search `number` (of cells), run now, or as a resumed search recorded it."""
        size, tokens = cells[number - 1]
        group = {"image_size": size, "max_tokens": tokens, "concurrency": concurrency, "requests": requests}
        asked = dict(judgment, kind=kind, **arrivals)
        kept = recorded.get((group_key(group), kind))
        # Judged as this search judges, with as many requests: else its verdict is not this search's.
        if kept is not None and all(kept["probe"].get(name) == value
                                    for name, value in dict(asked, sent=requests).items()):
            return dict(kept, resumed=True)
        return run_probe(params, load_test, group, asked, (number, len(cells)), result, progress)

    for number, (size, tokens) in enumerate(cells, 1):
        start = neighbours_capacity(result["capacity"], tokens)
        search = ConcurrencySearch(max(params["concurrency"]), params["search_tolerance"], start)
        probes = []
        while search.next() is not None:
            concurrency = search.next()
            probes.append(probe(number, "closed", concurrency,
                                probe_requests(concurrency, params["search_probe_requests"])))
            search.record(concurrency, probes[-1]["probe"]["passed"])
        record = capacity_record(size, tokens, search, probes)
        if record["rps"] and params["open_loop_requests"]:
            # At the capacity's throughput, arrivals that do not wait for answers, as a gateway's users send them;
            # the first `capacity` of them fill an idle server and are not counted, as a probe's first wave.
            checked = probe(number, "open_loop", search.capacity, search.capacity + params["open_loop_requests"],
                            rate_rps=record["rps"], burstiness=params["open_loop_burstiness"])
            record["open_loop"] = dict({name: checked["probe"][name] for name in (
                "rate_rps", "burstiness", "sent", "passed", "figures", "failed", "duration_s")},
                max_in_flight=checked["max_in_flight"], resumed=checked["resumed"])
        if params["results_file"]:
            keep(params["results_file"], {"capacity": record}, "the capacity found at %s, max_tokens %d" % (
                size, tokens), result)
        result["capacity"].append(record)


def neighbours_capacity(found, tokens):
    """Where the search of an output length starts: the capacity last found for it (at another image size, which
    moves it least), else the capacity last found; 1 for the first search, or after one that met the SLO nowhere."""
    same_length = [record for record in found if record["max_tokens"] == tokens]
    return max(1, (same_length or found or [{"max_concurrency": 1}])[-1]["max_concurrency"])


def run_probe(params, load_test, group, judgment, position, result, progress):
    """One probe - a closed loop at its concurrency, or open-loop arrivals at a rate - whose first `concurrency`
    requests are not counted and the rest judged against the SLO; its record is kept."""
    bodies = load_test.bodies(group)
    number, cells = position
    state = {"group": group, "probe": judgment["kind"], "group_number": number, "groups_total": cells,
             "requests_done": 0, "requests_total": len(bodies), "groups_done": number - 1}
    progress.update(state, force=True)
    started = time.monotonic()
    done, alive = functools.partial(count_request, progress, state), functools.partial(progress.update, state)
    if judgment["kind"] == "open_loop":
        results = load_test.run_open_loop(group, bodies, judgment["rate_rps"], judgment["burstiness"], done, alive)
    else:
        results = load_test.run_group(group, bodies, done, alive)
    # Requests are sent in the order of their bodies: the first `concurrency` results are the first ones sent.
    counted = results[group["concurrency"]:]
    record = summarise(group, counted, params["error_threshold"])
    record["max_in_flight"] = max_in_flight(results)
    record["probe"] = dict(judgment, sent=len(results), duration_s=round(time.monotonic() - started, 4),
                           **judge(counted, params["slo"], params["search_confidence"]))
    if params["results_file"]:
        keep(params["results_file"], record, "the %s probe of %d users at %s, max_tokens %d" % (
            judgment["kind"].replace("_", " "), group["concurrency"], group["image_size"], group["max_tokens"]),
            result)
    return dict(record, resumed=False)


def capacity_record(size, tokens, search, probes):
    """What a finished search found for one image size and output length, and what it spent."""
    at = next((probe for probe in probes if probe["concurrency"] == search.capacity), None)
    return {"image_size": size, "max_tokens": tokens, "slo": probes[0]["probe"]["slo"],
            "max_concurrency": search.capacity, "limited_by": search.limited_by, "rps": at and at["rps"],
            "output_tokens_per_s": at and at["output_tokens_per_s"],
            "slo_figures": at and at["probe"]["figures"], "started_at": search.start,
            "probes": [{"concurrency": probe["concurrency"], "passed": probe["probe"]["passed"]} for probe in probes],
            "requests": sum(probe["probe"]["sent"] for probe in probes),
            "seconds": round(sum(probe["probe"]["duration_s"] for probe in probes), 2),
            "resumed_probes": sum(1 for probe in probes if probe["resumed"]), "open_loop": None}


def run(params, check_mode=False):
    """The module's result: the matrix planned and, unless in check mode, measured. Whoever follows the
    progress file learns at once that the run ended, and why."""
    check_results_file(params["results_file"])
    # Before anything is written: a run that started earlier on this file still appends to it (a resume started
    # too soon, a second benchmark at once); in check mode the lock is only tried, so the plan refuses early.
    held = hold_results(params["results_file"], hold=not check_mode) if params["results_file"] else None
    progress = ProgressWriter(None if check_mode else params["results_file"])
    result = {"base_url": params["base_url"], "model": params["model"], "results_file": params["results_file"],
              "planned_groups": 0, "planned_requests": 0, "estimated_seconds": 0.0, "estimate_basis": None,
              "planned": [], "stopped_by_deadline": False, "deadline": None, "groups": [], "answer_checks": [],
              "capacity": [], "progress_error": None}
    try:
        client = validate(params)
        groups = plan(params)
        result.update(planned_groups=len(groups), planned_requests=sum(group["requests"] for group in groups),
                      estimated_seconds=estimate_seconds(groups, params), estimate_basis=estimate_basis(params),
                      planned=planned_groups(params))
        if not check_mode:
            measure(params, client, groups, result, progress)
    except BaseException as error:
        progress.finish(*units_done(params, result), error=str(error) or type(error).__name__)
        raise
    finally:
        if held is not None:
            os.close(held)
    progress.finish(*units_done(params, result), deadline=result["deadline"])
    result["progress_error"] = progress.error
    if not check_mode:
        result["ansible_facts"] = {"vllm_benchmark": dict(
            {name: result[name] for name in ("base_url", "model", "results_file", "groups", "answer_checks",
                                             "capacity")},
            finished_at=time.time(), summary=summary(result["groups"]))}
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           mutually_exclusive=[("api_key", "api_key_file")])
    try:
        if module.params["api_key_file"]:
            # As secret as api_key: masked in everything returned, should a server echo it back.
            module.no_log_values.add(key_from_env_file(module.params["api_key_file"]))
        result = run(module.params, check_mode=module.check_mode)
        if result["deadline"]:
            module.warn(deadline_text(result["deadline"]))
    except (OptionError, ClientError, ResultsBusy) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the endpoint, not a traceback
        module.fail_json(msg=unexpected_failure("the load test of %s" % module.params["base_url"], error))
    module.exit_json(changed=not module.check_mode, **result)


if __name__ == "__main__":
    main()
