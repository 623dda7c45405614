#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Documentation of the action vllm_bench_report (plugins/action/vllm_bench_report.py), which runs on the controller."""

DOCUMENTATION = r"""
---
module: vllm_bench_report
short_description: Write the fleet benchmark report from fetched results
description:
  - Reads C(raw/<host>/<instance>.jsonl) under O(report_folder), the results files the vllm_bench role fetched
    from every host, and writes beside them results.csv, totals.csv, summary.json, report.md and a
    self-contained report.html with charts.
  - The same report as C(ascend-vllm-fleet report REPORT_DIR).
  - Fails, with what is wrong and the fix, when the folder holds no results or a record it cannot read.
version_added: 0.1.0
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
requirements:
  - On the controller, Jinja2 (with ansible-core) and matplotlib, for the charts.
options:
  report_folder:
    description: The run's report folder on the controller, holding C(raw/).
    type: path
    required: true
  latency_target_s:
    description: The p95 latency, in seconds, the recommended concurrency must meet.
    type: float
    required: true
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  action:
    description: Runs on the controller as an action plugin.
    support: full
  async:
    description: Runs in the task's own process.
    support: none
  check_mode:
    description: Not run in check mode; the role skips it, as no results were fetched.
    support: none
  diff_mode:
    description: Writes new files into a new folder; there is nothing to diff.
    support: none
seealso:
  - module: ascend.fleet.vllm_benchmark
"""

EXAMPLES = r"""
- name: Write the fleet report
  ascend.fleet.vllm_bench_report:
    report_folder: reports/20261130T050744Z
    latency_target_s: 5
  run_once: true
"""

RETURN = r"""
line:
  description: The line that tells the operator where the report is and what it holds.
  returned: success
  type: str
  sample: "report: reports/20261130T050744Z/report.html (9 groups, 3 instance(s), 1 slow, 0 whose answers failed;
    report.md, results.csv, totals.csv and summary.json beside it)"
summary:
  description: The report's summary, as written to summary.json.
  returned: success
  type: dict
"""
