#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module fleet_doctor: what is wrong with an Ascend host and its vLLM instances, each cause with its
evidence and fix."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fleet_doctor
short_description: Diagnose an Ascend host and its vLLM instances against the failure modes this collection knows
description:
  - Reads the host's NPU facts (as npu_facts does), the serving plan a deploy recorded, each planned instance's
    container state (C(docker inspect)), the tail of its log (C(docker logs)), what it answers (C(/health),
    C(/v1/models) with the key of its own env file, and the answer check), containers of other owners that map
    the planned chips, and how full the disks of the given paths are.
  - Matches what it read against the rules of C(module_utils/diagnosis.py) (the README's doctor table is made
    from them) and returns each finding with its evidence (the log line or state, and how often it was seen) and
    its fix; error lines of a log that no rule knows are returned as C(unknown_error) with their excerpt.
  - Judges each instance by what is true now - its container's state, what it answers, and its log since the
    container's last start (C(State.StartedAt)). A cause seen only in log lines written before that start is
    history, returned as a warning that says so; unless the container is restarting now, a crash loop, where
    all of its log is current.
  - Reads only, in check mode too; fails only on options it cannot use or a Docker it cannot run. The API keys it
    reads from the env files never leave the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  disk_full_share:
    description: The used share of a file system (0 to 1) from which it counts as filling.
    type: float
    default: 0.9
  restart_window_s:
    description: Seconds after its last start within which a container Docker restarted counts as restarting.
    type: int
    default: 3600
  answer_check:
    description:
      - How to check a serving instance's answers (C(fleet_answer_check)); C(none) sends no chat request.
    type: str
    choices: [known, sane, none]
    default: known
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.read_only
  - ascend.fleet.host_evidence
  - ascend.fleet.npu_paths
notes:
  - Run it as root, as npu-smi and Docker need.
"""

EXAMPLES = r"""
- name: Diagnose the host
  ascend.fleet.fleet_doctor:
    host: "{{ inventory_hostname }}"
    disk_paths:
      model: /data/models/Qwen3-VL-8B-Instruct
      cache: /var/cache/vllm-ascend
  register: diagnosis
"""

RETURN = r"""
healthy:
  description: Whether nothing but warnings was found.
  returned: success
  type: bool
findings:
  description: What was found, host-wide first, then per instance.
  returned: success
  type: list
  elements: dict
  contains:
    rule:
      description: The rule's name (the README's doctor table), or C(unknown_error).
      type: str
      sample: large_image_crash
    instance:
      description: The instance it was found on, or null for the host.
      type: str
    cause:
      description: What it means.
      type: str
    evidence:
      description: The last sign of it (a log line with its time, a state).
      type: str
      sample: "2026-12-04T14:02:11Z ERROR RuntimeError: ACL stream synchronize failed, error code is 507018"
    count:
      description: How many signs of it were seen.
      type: int
    fix:
      description: What to do.
      type: str
    severity:
      description: C(error), or C(warning) for what leaves the instance serving and for history; a host with
        warnings only is healthy.
      type: str
      choices: [error, warning]
    history:
      description: For a finding whose signs were all written before the container's last start, that start and
        whether the container has served since; absent otherwise.
      type: str
      sample: "seen before the container's last start (2026-12-04T14:02:15Z); it has served since"
    excerpt:
      description: For C(unknown_error), the last error lines no rule knows.
      type: list
      elements: str
summary:
  description: One line for the host, as the doctor prints it.
  returned: success
  type: str
  sample: "npu-node-01: healthy"
plan_problem:
  description: Why no instance was read (no plan recorded, or one that cannot be read), or null.
  returned: success
  type: str
instances:
  description: Each planned instance's name, container status, restart count and /health status.
  returned: success
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.diagnosis import diagnose, summary_line
from ansible_collections.ascend.fleet.plugins.module_utils.host_evidence import (
    EVIDENCE_OPTIONS,
    check_evidence_options,
    gather,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import DockerError

ARGUMENT_SPEC = dict(
    EVIDENCE_OPTIONS,
    disk_full_share=dict(type="float", default=0.9),
    restart_window_s=dict(type="int", default=3600),
    answer_check=dict(type="str", choices=["known", "sane", "none"], default="known"),
)


def check_options(params):
    check_evidence_options(params)
    number_at_least(params, "restart_window_s", 0, "Fix: give seconds, 0 or more")
    if not 0 < params["disk_full_share"] <= 1:
        raise OptionError("disk_full_share is %r: expected a share above 0 and at most 1. Fix: for example 0.9"
                          % params["disk_full_share"])


def run(params):
    found = gather(params)
    diagnosis = diagnose(found["evidence"], params)
    summary = summary_line(params["host"], diagnosis)
    if found["plan_problem"]:
        summary += " (%s)" % found["plan_problem"]
    instances = [{"name": item["name"], "status": (item["container"] or {}).get("status", "missing"),
                  "restart_count": (item["container"] or {}).get("restart_count"),
                  "health": item["health"].get("status") or item["health"].get("error")}
                 for item in found["evidence"]["instances"]]
    return dict(diagnosis, summary=summary, plan_problem=found["plan_problem"], instances=instances)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        check_options(module.params)
        result = run(module.params)
    except (OptionError, DockerError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("diagnosing %s" % module.params["host"], error))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
