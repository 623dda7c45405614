#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_plan: a host's serving plan, checked against the host, recorded, and made true of it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_plan
short_description: Check that a host can take its serving plan, record the plan, remove the instances it dropped
description:
  - Refuses, before it changes anything, a host whose instances would all fail at start - a mount source in
    O(required_paths) that does not exist (Docker would mount an empty folder), or a running container not of
    this collection that maps a planned chip (a chip opens in one container only - drvRet=87, resources are busy).
  - Completes the plan with where each instance's files are (C(script), C(env_file) in O(config_dir)) and its
    C(container), and writes it to O(path) (JSON, whole or not at all), before any instance starts - the
    benchmark, the gateway, the verification and teardown read what this run meant to serve.
  - Creates O(config_dir) (0750), O(cache_dir) (0700) and the host's secret O(salt_file) (0600), which salts the
    API key in the instances' config-hash labels.
  - Removes the containers (and C(<name>-previous)) and files of this host's instances that the plan no longer
    has (its containers are those labelled C(<label_prefix>.host=<plan's host>)), unless O(keep_stale) - they are
    then returned in RV(stale), for the caller to take off the gateways first and remove with a second call.
  - With O(state=absent), takes away everything the deploy made - every instance the recorded plan names or a
    label finds, with its files, the plan, the salt, and O(config_dir) when nothing else is in it. The recorded
    plan is read and checked first (as vllm_plan_info does), so a plan that is not this host's stops it before
    anything is removed.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  state:
    description: V(present) records the plan; V(absent) removes what the deploy made.
    type: str
    choices: [present, absent]
    default: present
  plan:
    description:
      - The host's serving plan, as the vllm_server_plan filter makes it (host, instances, their devices).
      - Required with O(state=present).
    type: dict
  host:
    description: With O(state=absent), the inventory name of the host (its containers' label, its plan's host).
    type: str
  path:
    description: Where the plan is recorded.
    type: path
    required: true
  config_dir:
    description: The folder of the instances' scripts and env files.
    type: path
    required: true
  cache_dir:
    description: The containers' cache folder. Required with O(state=present).
    type: path
  salt_file:
    description: The host's secret for the config-hash labels; made once, never replaced.
    type: path
    required: true
  required_paths:
    description: Host paths every container mounts, each with the variable that sets it.
    type: dict
    default: {}
  keep_stale:
    description:
      - Leave the instances the plan no longer has running (a layout change still serves through them until
        they are drained); RV(stale) names them.
    type: bool
    default: false
  label_prefix:
    description: The namespace of the collection's container labels.
    type: str
    default: ascend-vllm-fleet
  docker:
    description: The Docker CLI to run.
    type: str
    default: docker
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Checks the host and returns the completed plan; writes and removes nothing.
    support: full
  diff_mode:
    description: The plan's text before and after.
    support: full
"""

EXAMPLES = r"""
- name: Record the plan and remove the instances it no longer has
  ascend.fleet.vllm_plan:
    plan: "{{ vllm_server_plan }}"
    path: /etc/vllm-ascend/plan.json
    config_dir: /etc/vllm-ascend
    cache_dir: /var/cache/vllm-ascend
    salt_file: /etc/vllm-ascend/.config-hash-salt
    required_paths: {/usr/local/dcmi: fleet_dcmi_dir, /data/models/Qwen3-VL-8B-Instruct: fleet_model_dir}
  register: recorded

- name: Remove every instance, its files, the plan and the salt
  ascend.fleet.vllm_plan:
    state: absent
    host: "{{ inventory_hostname }}"
    path: /etc/vllm-ascend/plan.json
    config_dir: /etc/vllm-ascend
    salt_file: /etc/vllm-ascend/.config-hash-salt
"""

RETURN = r"""
plan:
  description: The plan as recorded in O(path), the one description of its fields (vllm_plan_info reads it back).
  returned: success; with O(state=absent), the plan that was recorded, or null
  type: dict
  contains:
    format:
      description: The layout of the record; readers refuse another.
      type: int
      sample: 1
    host:
      description: The inventory name of the host it is the plan of.
      type: str
    layout:
      description: C(single) (one instance with every chip), C(per_card) (one per card) or C(per_chip) (one per chip).
      type: str
    layout_reason:
      description: Why this layout - asked for, or what C(auto) found of the model's fit on one chip.
      type: str
    image:
      description: The image every instance runs.
      type: str
    served_name:
      description: The model name the instances serve.
      type: str
    excluded_npu_ids:
      description: Cards left out as unhealthy.
      type: list
      elements: int
    manager_devices:
      description: The driver's manager device nodes every instance maps.
      type: list
      elements: str
    instances:
      description: What each instance maps and serves.
      type: list
      elements: dict
      contains:
        name:
          description: The instance's name.
          type: str
        container:
          description: Its container's name.
          type: str
        port:
          description: The host port it serves on.
          type: int
        npu_ids:
          description: The cards it holds chips of.
          type: list
          elements: int
        devices:
          description: Its chips' device nodes (C(/dev/davinci<physical id>)).
          type: list
          elements: str
        logic_ids:
          description: Its chips' logic ids (what C(ASCEND_RT_VISIBLE_DEVICES) names).
          type: list
          elements: int
        cpus:
          description: The CPUs it is confined to, or null.
          type: list
          elements: int
        tensor_parallel_size:
          description: Its C(--tensor-parallel-size).
          type: int
        fit:
          description:
            - The fit estimate of its chips (module_utils/model_fit.py) - each term in GiB, the chip's budget,
              whether it fits, the longest C(max_model_len) and the utilization that would; null where the model's
              footprint or a chip's memory is not known.
          type: dict
        script:
          description: Its C(docker run) script.
          type: str
        env_file:
          description: Its root-only env file with the API key (absent without a key).
          type: str
removed:
  description:
    - The instances no longer planned whose containers and files were removed (in check mode, would be); with
      O(state=absent), every instance removed.
  returned: success
  type: list
  elements: str
  sample: [vllm-ascend-npu4]
stale:
  description: This host's instances the plan no longer has, removed or (with O(keep_stale)) left running.
  returned: with O(state=present)
  type: list
  elements: str
  sample: [vllm-ascend]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import (
    PlanError,
    complete,
    plan_text,
    record,
    refusals,
    remove_all,
)
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import DockerError, read_text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="present", choices=["present", "absent"]),
            plan=dict(type="dict"),
            host=dict(type="str"),
            path=dict(type="path", required=True),
            config_dir=dict(type="path", required=True),
            cache_dir=dict(type="path"),
            salt_file=dict(type="path", required=True, no_log=False),
            required_paths=dict(type="dict", default={}),
            keep_stale=dict(type="bool", default=False),
            label_prefix=dict(type="str", default="ascend-vllm-fleet"),
            docker=dict(type="str", default="docker"),
        ),
        required_if=[("state", "present", ("plan", "cache_dir")), ("state", "absent", ("host",))],
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"] if params["state"] == "absent" else params["plan"].get("host")
    try:
        if params["state"] == "absent":
            changed, removed, plan = remove_all(params["path"], host, params["config_dir"], params["salt_file"],
                                                params["docker"], params["label_prefix"], module.check_mode)
            module.exit_json(changed=changed, removed=removed, plan=plan)
        refused = refusals(params["plan"], params["required_paths"], params["docker"], params["label_prefix"])
        if refused:
            module.fail_json(msg=" ==== ".join(refused))
        plan = complete(params["plan"], params["config_dir"])
        before = read_text(params["path"])
        changed, stale, removing = record(plan, params["path"], params["config_dir"], params["cache_dir"],
                                          params["salt_file"], params["docker"], params["label_prefix"],
                                          module.check_mode, keep_stale=params["keep_stale"])
    except PlanError as error:
        module.fail_json(msg="%s; nothing was removed" % error)
    except (DockerError, DockerUnavailable) as error:
        module.fail_json(msg="serving plan of %s: %s" % (host, error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("%s the serving plan in %s" % (
            "removing what was deployed by" if params["state"] == "absent" else "recording", params["path"]), error))
    result = dict(changed=changed, plan=plan, removed=stale if removing else [], stale=stale)
    if module._diff:
        result["diff"] = dict(before=before, after=plan_text(plan),
                              before_header=params["path"], after_header=params["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
