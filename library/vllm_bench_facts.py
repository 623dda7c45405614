#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_bench_facts: an instance's last benchmark run kept on its host, as a fact and a baseline."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_bench_facts
short_description: Keep an instance's last benchmark run as a local fact of its host, and as a baseline of its spec
description:
  - Reads the run in O(results_file) (the records M(ascend.fleet.vllm_benchmark) wrote) and the spec it measured,
    from the instance's container - its image, image ID and C(<label_prefix>.config-hash) label, which
    M(ascend.fleet.vllm_instance) sets from its docker run lines, image ID and key.
  - Keeps the run as the instance's C(last_run) in O(facts_file), a local fact - C(ansible -m setup -a
    filter=ansible_local) shows it as C(ansible_local.vllm_bench.instances.<instance>.last_run) - with the index of
    the instance's baselines.
  - With O(baseline), also keeps the run as the baseline of its spec (config hash and O(preset)) in
    C(<baselines_dir>/<instance>.json), which M(ascend.fleet.vllm_canary_gate) compares canaries with. The newest
    10 baselines of an instance are kept.
  - Files are written whole or not at all (a temporary file renamed over them), and only when their content
    changes, so a second run with the same results changes nothing.
  - Fails, naming it and the fix, on a results file with no group, a facts or baselines file that is not what this
    module writes, or with O(baseline) a container that does not exist or a run no canary should be held to (its
    answers failed, or it measured no group reliably). Without O(baseline) the run of an instance whose container
    is gone is kept with its spec unknown (C(image), C(image_id) and C(config_hash) null).
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  instance:
    description: The instance's name, which is its container's.
    type: str
    required: true
  results_file:
    description: The instance's results file, as the benchmark wrote it.
    type: path
    required: true
  preset:
    description: The name of the preset the run measured (the vllm_bench role's C(vllm_bench_preset)).
    type: str
    required: true
  baseline:
    description:
      - V(never) keeps no baseline; V(always) keeps the run as its spec's baseline, replacing one recorded before;
        V(missing) only when its spec has none yet (what a canary that passed, or found no baseline, records).
    type: str
    choices: [never, missing, always]
    default: never
  facts_file:
    description: The local fact file (JSON, not executable, so the setup module reads it rather than running it).
    type: path
    default: /etc/ansible/facts.d/vllm_bench.fact
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.bench_baselines
attributes:
  check_mode:
    description: Can run in check mode and return what it would keep.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: RV(last_run) is what the facts file holds for the instance.
"""

EXAMPLES = r"""
- name: Keep the run as the host's facts, and as the baseline of what it measured
  ascend.fleet.vllm_bench_facts:
    instance: vllm-ascend
    results_file: /var/lib/vllm-bench/vllm-ascend.jsonl
    preset: canary
    baseline: always

- name: Read it back
  ansible.builtin.setup:
    filter: ansible_local
"""

RETURN = r"""
last_run:
  description: What the facts file keeps of the run.
  returned: always
  type: dict
  contains:
    finished_at:
      description: When the run's last group finished (Unix time, and C(finished_at_utc) as ISO 8601).
      type: float
    preset:
      description: O(preset).
      type: str
    image:
      description: The image the container runs, as named, and C(image_id), its ID.
      type: str
    config_hash:
      description: The container's config hash, the spec's identity.
      type: str
    results_file:
      description: O(results_file).
      type: str
    groups:
      description: The run's group records (the fields of C(module_utils/bench_record.py)).
      type: list
      elements: dict
    unreliable_groups:
      description: How many of them were unreliable (error rate above the run's threshold).
      type: int
    answers:
      description: The answer checks' verdict - C(passed), C(failed), or C(not checked).
      type: str
    answer_checks:
      description: The answer checks' records, as the results file keeps them (so a report can be rebuilt from the
        facts - C(ascend-vllm-fleet report --from-facts)).
      type: list
      elements: dict
    summary:
      description: Key figures per image size and output length, as M(ascend.fleet.vllm_benchmark)'s facts have them.
      type: list
      elements: dict
baseline_recorded:
  description: The run was kept as its spec's baseline now.
  returned: always
  type: bool
baselines:
  description: The instance's baselines, newest first, each with C(preset), C(config_hash), C(image) and C(recorded_at).
  returned: always
  type: list
  elements: dict
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.bench_baseline import (
    BASELINE_OPTIONS,
    FORMAT,
    BaselineError,
    baselines_file,
    container_specs,
    read_baselines,
    read_ours,
    spec_key,
    with_baseline,
    write_baselines,
    write_json,
)
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    answers_verdict,
    read_answer_checks,
    read_results,
    summary,
)
from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import CONFIG_HASH_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure


def last_run(params, spec):
    records = read_results(params["results_file"])[0]
    if not records:
        raise OptionError("results_file %s holds no group: expected the records of a finished benchmark run. Fix: "
                          "run the benchmark first (playbooks/benchmark.yml)" % params["results_file"])
    finished_at = max(record.get("finished_at") or 0 for record in records)
    checks = read_answer_checks(params["results_file"])
    return {
        "finished_at": finished_at,
        "finished_at_utc": datetime.datetime.fromtimestamp(finished_at, datetime.timezone.utc).isoformat(),
        "preset": params["preset"], "image": spec["image"], "image_id": spec["image_id"],
        "config_hash": spec["config_hash"], "results_file": params["results_file"], "groups": records,
        "unreliable_groups": sum(1 for record in records if record.get("unreliable")),
        "answers": answers_verdict(checks), "answer_checks": checks, "summary": summary(records)}


def check_baseline(instance, run_kept):
    """A run a canary may be held to: its answers did not fail, and it measured a group reliably."""
    problem = None
    if run_kept["answers"] == "failed":
        problem = "its answers failed the answer check"
    elif not run_kept["summary"]:
        problem = "it measured no group reliably (every group's error rate was above the threshold)"
    if problem:
        raise OptionError("the run of %s in %s cannot be a baseline: %s. Fix: mend the instance, benchmark it again, "
                          "and record that run" % (instance, run_kept["results_file"], problem))


def read_facts(path):
    """The facts file's content; a file that is not this module's is refused, not overwritten."""
    return {"format": FORMAT, "instances": read_ours(path, "facts_file", "instances", "move it aside; the next "
                                                     "benchmark writes it again")}


def baseline_index(baselines):
    return [{name: baseline.get(name) for name in ("preset", "config_hash", "image", "recorded_at")}
            for baseline in sorted(baselines.values(), key=lambda b: b.get("recorded_at", 0), reverse=True)]


def measured_spec(params):
    """The spec the run measured; with no baseline to keep, an instance whose container is gone (or that is no
    container of this collection) is kept with its spec unknown (nulls), as what was measured still stands."""
    try:
        spec = container_specs(params["docker"], params["instance"], params["label_prefix"])[params["instance"]]
    except BaselineError:
        if params["baseline"] != "never":
            raise
        return {"config_hash": None, "image": None, "image_id": None}
    if not spec["config_hash"] and params["baseline"] != "never":
        raise OptionError("container %s has no %s label, which names the spec a baseline is kept for: expected an "
                          "instance the server phase started. Fix: deploy it with ansible-playbook site.yml"
                          % (params["instance"], label_name(params["label_prefix"], CONFIG_HASH_LABEL)))
    return spec


def run(params, check_mode):
    """The module's result: the run kept as the instance's last, and as a baseline where asked."""
    spec = measured_spec(params)
    run_kept = last_run(params, spec)
    path = baselines_file(params["baselines_dir"], params["instance"])
    baselines = read_baselines(path)
    key = spec_key(spec["config_hash"], params["preset"])
    record = params["baseline"] == "always" or (params["baseline"] == "missing" and key not in baselines)
    if record:
        check_baseline(params["instance"], run_kept)
    baseline_recorded = False
    if record:
        baseline = dict({name: run_kept[name] for name in ("preset", "image", "image_id", "config_hash", "groups")},
                        recorded_at=run_kept["finished_at"])
        if baselines.get(key) != baseline:
            baselines = with_baseline(baselines, baseline)
            baseline_recorded = True
            if not check_mode:
                write_baselines(path, baselines)
    facts = read_facts(params["facts_file"])
    entry = {"last_run": run_kept, "baselines": baseline_index(baselines)}
    facts_changed = facts["instances"].get(params["instance"]) != entry
    if facts_changed and not check_mode:
        facts["instances"][params["instance"]] = entry
        write_json(params["facts_file"], facts)
    return {"changed": baseline_recorded or facts_changed, "last_run": run_kept,
            "baseline_recorded": baseline_recorded, "baselines": entry["baselines"]}


def main():
    module = AnsibleModule(argument_spec=dict(
        instance=dict(type="str", required=True),
        results_file=dict(type="path", required=True),
        preset=dict(type="str", required=True),
        baseline=dict(type="str", default="never", choices=["never", "missing", "always"]),
        facts_file=dict(type="path", default="/etc/ansible/facts.d/vllm_bench.fact"),
        **BASELINE_OPTIONS), supports_check_mode=True)
    try:
        result = run(module.params, module.check_mode)
    except (OptionError, BaselineError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the instance, not a traceback
        module.fail_json(msg=unexpected_failure("keeping the benchmark of %s" % module.params["instance"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
