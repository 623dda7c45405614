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
  env_file:
    description:
      - The instance's env file on the host, C(<fleet_config_dir>/<instance>.env) as the vllm_server role writes it,
        with a line C(VLLM_API_KEY=<key>); the key is read from that line here, on the host. Not the controller's
        file of the bare key (the fleet role's C(fleet_api_key_file)).
      - A run lasts hours and is started with C(async), which keeps the module's arguments in a file on the
        host for that long; with this option the key is never among them.
      - C(api_key_file) is its name until 0.1.0, deprecated - it still works, with a deprecation warning, until
        1.0.0.
    type: path
    aliases: [api_key_file]
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import ResultsBusy, deadline_text
from ansible_collections.ascend.fleet.plugins.module_utils.load_test import ARGUMENT_SPEC, run
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import ClientError, key_from_env_file
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           mutually_exclusive=[("api_key", "env_file")])
    try:
        if module.params["env_file"]:
            # As secret as api_key: masked in everything returned, should a server echo it back.
            module.no_log_values.add(key_from_env_file(module.params["env_file"]))
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
