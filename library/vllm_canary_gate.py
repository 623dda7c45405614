#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_canary_gate: a canary's benchmark against the baseline of the spec it replaced."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_canary_gate
short_description: Compare a canary instance's benchmark with the baseline of the spec it replaced
description:
  - The canary is an instance a rollout has just replaced, whose previous container is still set aside as
    C(<instance>-previous) (M(ascend.fleet.vllm_instance)). Its spec - the set-aside container's
    C(<label_prefix>.config-hash) label - and O(preset) name the baseline to compare with, one that
    M(ascend.fleet.vllm_bench_facts) recorded in C(<baselines_dir>/<instance>.json).
  - Pairs the groups both runs measured and compares output throughput and p95 latency. The groups' ratios are
    averaged (geometric mean) and a bootstrap over the groups gives an interval of O(confidence) for it, so run-to-run
    noise is told from a change - C(module_utils/bench_baseline.py) says how. A metric fails when its estimate is
    worse than O(max_regression) and its whole interval is worse than no change.
  - The canary also fails when its answers failed the answer check, when it lacks a group the baseline measured
    reliably (its requests failed), or when O(preset) now measures other groups than when the baseline was recorded
    (the message says how to record a new one).
  - With no baseline for the replaced spec, RV(passed) is true and RV(baseline) null - the caller warns, and
    records the canary's run as its own spec's baseline.
  - Reads only; changes nothing.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  instance:
    description: The instance's name, which is its container's.
    type: str
    required: true
  results_file:
    description: The canary's benchmark results (M(ascend.fleet.vllm_benchmark)'s results file).
    type: path
    required: true
  preset:
    description: The preset the canary was measured with; only a baseline of the same preset compares.
    type: str
    required: true
  max_regression:
    description: The share a metric may be worse by (0.1 - throughput 10 % lower, or p95 latency 10 % higher).
    type: float
    default: 0.1
  confidence:
    description: The confidence of the bootstrap interval, between 0.5 and 0.999.
    type: float
    default: 0.9
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.read_only
  - ascend.fleet.bench_baselines
"""

EXAMPLES = r"""
- name: Compare the canary with the baseline of what it replaced
  ascend.fleet.vllm_canary_gate:
    instance: vllm-ascend
    results_file: /var/lib/vllm-bench/vllm-ascend.jsonl
    preset: canary
    max_regression: 0.1
  register: gate

- name: Stop on a slower canary
  ansible.builtin.fail:
    msg: "{{ gate.line }}"
  when: not gate.passed
"""

RETURN = r"""
passed:
  description: The canary may stay - no metric regressed, the answers passed, no group is missing; or no baseline.
  returned: always
  type: bool
line:
  description: The verdict in one line, with its figures.
  returned: always
  type: str
  sample: >-
    vllm-ascend (quay.io/ascend/vllm-ascend:v0.18.0rc1-310p-slower): throughput -16.8 % (90 % interval -19.1 % to
    -14.0 %), p95 latency +19.3 % (90 % interval +15.4 % to +22.9 %) over 6 groups, against the baseline of
    quay.io/ascend/vllm-ascend:v0.18.0rc1-310p (preset canary, 2026-12-03T17:27:09+00:00): throughput and p95
    latency worse than the 10 % allowed (fleet_canary_max_regression)
replaced:
  description: The spec the canary replaced (C(config_hash), C(image), C(image_id)).
  returned: always
  type: dict
canary:
  description: The canary's spec.
  returned: always
  type: dict
baseline:
  description: The baseline compared with (C(preset), C(image), C(config_hash), C(recorded_at)); null when there is
    none.
  returned: always
  type: dict
comparison:
  description:
    - C(groups) - each paired group with both runs' throughput and p95 latency; C(metrics) - each metric's
      C(regression) (a share, 0.3 is 30 % worse), C(low) and C(high) (its interval) and C(regressed); C(missing) -
      groups the baseline measured and the canary did not; C(regressed). Null when there is no baseline.
  returned: always
  type: dict
reasons:
  description: Why the canary failed, one sentence each; empty when it passed.
  returned: always
  type: list
  elements: str
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.bench_baseline import (
    BASELINE_OPTIONS,
    BaselineError,
    baselines_file,
    compare,
    container_specs,
    read_baselines,
    spec_key,
)
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    group_key,
    read_answer_checks,
    read_results,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import ASIDE_CONTAINER

NAMES = {"throughput": "throughput", "p95_latency": "p95 latency"}


def percent(share):
    return "%+.1f %%" % (round(100 * share, 1) + 0.0)  # + 0.0: no "-0.0 %"


def describe(metrics, confidence):
    """Each metric as a reader sees it: throughput as a change (lower is worse), latency as a change."""
    parts = []
    for name, figures in metrics.items():
        sign = -1 if name == "throughput" else 1
        low, high = sorted((sign * figures["low"], sign * figures["high"]))
        shown = (NAMES[name], percent(sign * figures["regression"]), 100 * confidence, percent(low), percent(high))
        parts.append("%s %s (%g %% interval %s to %s)" % shown)
    return ", ".join(parts)


def groups_in_words(keys):
    return ", ".join("%s, max_tokens %s, concurrency %s" % tuple(key) for key in keys)


def other_matrix(baseline_groups, canary_groups):
    """How the groups the canary measured differ from the baseline's (its preset was changed since), in words, or
    None. A group whose requests failed is still recorded, so it is no difference."""
    recorded, measured = ({group_key(record) for record in groups} for groups in (baseline_groups, canary_groups))
    if recorded == measured:
        return None
    shown = []
    for what, keys in (("only in the baseline", recorded - measured), ("only in the canary", measured - recorded)):
        if keys:
            shown.append("%s: %s" % (what, groups_in_words(sorted(keys, key=str))))
    return "; ".join(shown)


def judge(params):
    name = params["instance"]
    specs = container_specs(params["docker"], name, params["label_prefix"])
    if name + ASIDE_CONTAINER not in specs:
        raise OptionError("instance %s has no container set aside (%s%s): expected a canary, an instance just "
                          "replaced whose previous container waits for the verdict. Fix: gate only the instances the "
                          "server phase replaced with vllm_server_in_canary_batch" % (name, name, ASIDE_CONTAINER))
    replaced = specs[name + ASIDE_CONTAINER]
    result = {"changed": False, "replaced": replaced, "canary": specs[name], "baseline": None, "comparison": None,
              "reasons": [], "passed": True}
    baseline = read_baselines(baselines_file(params["baselines_dir"], name)).get(
        spec_key(replaced["config_hash"], params["preset"]))
    checks = read_answer_checks(params["results_file"])
    if any(check.get("passed") is not True for check in checks):
        result["reasons"].append("its answers failed the answer check: %s" % "; ".join(
            check.get("failure") or "failed" for check in checks if check.get("passed") is not True))
    if baseline is None:
        result["line"] = "%s: no baseline of %s with preset %s to compare with; measured, not compared" % (
            name, replaced["image"], params["preset"])
    else:
        recorded = datetime.datetime.fromtimestamp(baseline["recorded_at"], datetime.timezone.utc).isoformat(
            timespec="seconds")
        result["baseline"] = {key: baseline.get(key) for key in ("preset", "image", "config_hash", "recorded_at")}
        measured = read_results(params["results_file"])[0]
        comparison = compare(baseline["groups"], measured, params["max_regression"], params["confidence"])
        result["comparison"] = comparison
        other_groups = other_matrix(baseline["groups"], measured)
        if other_groups:
            result["reasons"].append(
                "the preset %s measures other groups than when its baseline was recorded (%s), so the baseline "
                "cannot judge it. Fix: record a new baseline of what runs now, with ansible-playbook "
                "playbooks/benchmark.yml -e vllm_bench_preset=%s -e vllm_bench_baseline=true, then roll again"
                % (params["preset"], other_groups, params["preset"]))
            comparison["missing"] = []  # not groups whose requests failed
        worse = [NAMES[metric] for metric, figures in comparison["metrics"].items() if figures["regressed"]]
        if worse:
            result["reasons"].append("%s worse than the %g %% allowed (fleet_canary_max_regression)"
                                     % (" and ".join(worse), 100 * params["max_regression"]))
        if not comparison["groups"]:
            result["reasons"].append("no group was measured reliably by both runs, so nothing compares")
        if comparison["missing"]:
            result["reasons"].append("it did not measure %d groups the baseline did (its requests failed): %s" % (
                len(comparison["missing"]), groups_in_words(comparison["missing"])))
        result["line"] = "%s (%s): %s over %d groups, against the baseline of %s (preset %s, %s)" % (
            name, specs[name]["image"], describe(comparison["metrics"], params["confidence"]) or "nothing to compare",
            len(comparison["groups"]), baseline["image"], params["preset"], recorded)
    result["passed"] = not result["reasons"]
    if result["reasons"]:
        result["line"] += ": %s" % "; ".join(result["reasons"])
    return result


def main():
    module = AnsibleModule(argument_spec=dict(
        instance=dict(type="str", required=True),
        results_file=dict(type="path", required=True),
        preset=dict(type="str", required=True),
        max_regression=dict(type="float", default=0.1),
        confidence=dict(type="float", default=0.9),
        **BASELINE_OPTIONS), supports_check_mode=True)
    params = module.params
    try:
        if not 0 <= params["max_regression"] < 1:
            raise OptionError("max_regression: %s is not allowed: expected a share between 0 and 1, such as 0.1 for "
                              "10 %%. Fix: set fleet_canary_max_regression to one" % params["max_regression"])
        if not 0.5 <= params["confidence"] <= 0.999:
            raise OptionError("confidence: %s is not allowed: expected a number between 0.5 and 0.999, such as 0.9. "
                              "Fix: correct it" % params["confidence"])
        result = judge(params)
        if result["baseline"] is None:
            module.warn("%s. The roll goes on unchecked: record a baseline before the next one with ansible-playbook "
                        "playbooks/benchmark.yml -e vllm_bench_preset=%s -e vllm_bench_baseline=true"
                        % (result["line"], params["preset"]))
    except (OptionError, BaselineError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the instance, not a traceback
        module.fail_json(msg=unexpected_failure("the canary gate of %s" % params["instance"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
