#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Documentation of the action vllm_bench_follow (plugins/action/vllm_bench_follow.py), which runs on the controller."""

DOCUMENTATION = r"""
---
module: vllm_bench_follow
short_description: Follow a host's benchmark runs from the controller until each has ended
description:
  - The vllm_bench role's step after it starts one async M(ascend.fleet.vllm_benchmark) job per instance of a host.
  - Every O(poll_interval) seconds it reads each instance's progress file on the host (and its results file when a
    group has finished), prints one line for an instance whenever its phase or group changes, keeps the host's
    statuses in O(status_file), if given, for the C(ascend-vllm-fleet) command's live view, and collects an
    instance's async job once its run has ended.
  - One task for every instance of the host and no retries, so a healthy wait of hours prints no retry lines.
  - Fails when a job failed or a run stalled (its progress file unchanged for O(request_timeout_s) and a margin,
    as when its process was killed or its host went down), naming the instance and why.
version_added: 0.1.0
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  instances:
    description: The serving plan's instances (each with its C(name)).
    type: list
    elements: dict
    required: true
  jobs:
    description: The registered async launch of the benchmark module, one result per instance.
    type: list
    elements: dict
    required: true
  plans:
    description: The registered check-mode run of the benchmark module, one result per instance, with its planned
      groups.
    type: list
    elements: dict
    required: true
  results_dir:
    description: The folder on the host holding each instance's results and progress files.
    type: str
    required: true
  resume:
    description: Whether the runs resume earlier results files (groups found there count as done).
    type: bool
    default: false
  request_timeout_s:
    description: The benchmark's request timeout; a run whose progress file is unchanged for longer
      (and a margin) is called stalled.
    type: float
    required: true
  poll_interval:
    description: Seconds between two reads of the host's files.
    type: float
    required: true
  started_at:
    description: When the runs were launched (Unix time).
    type: float
    required: true
  status_file:
    description: The file on the controller where the host's statuses are kept for the live view; empty keeps none.
    type: str
    default: ""
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  action:
    description: Runs on the controller as an action plugin; reads the host's files over its connection.
    support: full
  async:
    description: Follows async jobs; is not one.
    support: none
  check_mode:
    description: Not run in check mode; the role skips it, as nothing was started.
    support: none
  diff_mode:
    description: Only reads, so there is never a change to show.
    support: none
seealso:
  - module: ascend.fleet.vllm_benchmark
"""

EXAMPLES = r"""
- name: Follow the benchmarks until every instance's run has ended
  ascend.fleet.vllm_bench_follow:
    instances: "{{ vllm_bench_plan.instances }}"
    jobs: "{{ vllm_bench_jobs.results }}"
    plans: "{{ vllm_bench_planned.results }}"
    results_dir: /var/lib/vllm-bench
    request_timeout_s: 600
    poll_interval: 5
    started_at: "{{ vllm_bench_started_at }}"
    status_file: reports/20261130T050744Z/progress/npu-node-01.json
"""

RETURN = r"""
instances:
  description: Each instance's last status, as the live view shows it.
  returned: always
  type: list
  elements: dict
  sample:
    - instance: vllm-ascend
      phase: done
      group: null
      group_number: null
      groups_done: 4
      groups_total: 4
      requests_done: null
      requests_total: null
      errors: 0
      error: null
      elapsed_s: 12.5
      eta_s: 0.0
"""
