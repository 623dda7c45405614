#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module fleet_verify: whether a host still serves what its deploy recorded."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fleet_verify
short_description: Check that a host still serves what its deploy recorded, naming each difference and its fix
description:
  - Reads the serving plan the deploy recorded on the host (O(plan_file), as vllm_plan_info reads it), the host's
    NPU facts (as npu_facts gathers them), each planned instance's container (C(docker inspect)) and rendered
    script, and asks each running instance on its port what the deploy's probe asks (vllm_probe) - C(/health),
    C(/v1/models) with O(api_key), one image request, and the answer check O(answer_check).
  - Checks that npu-smi lists the chips and reports O(driver_version) and O(firmware_version); that the plan's
    chips are still on the host, on healthy cards; and per instance that its container exists, runs, was not
    restarted by Docker, runs the plan's image with O(restart_policy), carries the config-hash label its rendered
    script records and maps only its planned chips; that something listens on its port; and that it answers
    C(/health), accepts the key, lists the plan's served name, answers the image request with text and completion
    tokens, and passes the answer check.
  - What is expected comes from the host (the plan, the scripts) and from these options; nothing is worked out
    again from an inventory. The rules are those of C(module_utils/verification.py).
  - Fails when a check fails, with every failure - the host, the instance, what was found, what was expected and
    the fix - one per line in C(msg) and in RV(failures). A plan that is missing, of another format or of another
    host is such a failure; options it cannot use and a Docker it cannot run fail the module as well.
  - Reads only, in check mode too. The key never leaves the module - not in its result, not in a message.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  host:
    description: The inventory name of the host, whose plan the recorded one must be.
    type: str
    required: true
  plan_file:
    description: Where the plan is recorded (C(fleet_plan_file)).
    type: path
    default: /etc/vllm-ascend/plan.json
  docker:
    description: Docker CLI to use (C(fleet_docker_bin)).
    type: str
    default: docker
  label_prefix:
    description: Prefix of the labels that mark this collection's containers (C(fleet_label_prefix)).
    type: str
    default: ascend-vllm-fleet
  driver_version:
    description: The driver npu-smi must report (C(ascend_preflight_driver_version)); compared without case.
    type: str
    required: true
  firmware_version:
    description: The firmware the cards must run (C(ascend_preflight_firmware_version)); compared without case.
    type: str
    required: true
  restart_policy:
    description: The restart policy every instance's container must have (C(vllm_server_restart_policy)).
    type: str
    choices: ["no", always, unless-stopped, on-failure]
    default: unless-stopped
  api_key:
    description:
      - The bearer key the instances are asked with (C(fleet_api_key)), as the fleet's clients ask them; empty for
        instances served without a key.
    type: str
    default: ""
  answer_check:
    description: How to check each instance's answers (C(fleet_answer_check), the rules of vllm_probe's option).
    type: str
    choices: [known, sane, none]
    default: known
  request_timeout:
    description:
      - Seconds the requests to one instance may take together (at least 1) - C(/health), C(/v1/models), the image
        request and the answer check; each gets what is left of it.
    type: int
    default: 120
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.read_only
  - ascend.fleet.npu_paths
notes:
  - Run it as root, as npu-smi, Docker and the rendered scripts need.
  - C(ansible-playbook ascend.fleet.verify) runs it on every host of the C(ascend) group with the fleet's settings.
"""

EXAMPLES = r"""
- name: Check the host against the plan its deploy recorded
  ascend.fleet.fleet_verify:
    host: "{{ inventory_hostname }}"
    driver_version: "25.5.2"
    firmware_version: "7.8.0.7.220"
    api_key: "{{ fleet_api_key }}"
  register: verified
"""

RETURN = r"""
verified:
  description: Whether every check passed.
  returned: always
  type: bool
checks:
  description: How many checks were made (a check whose subject is missing leaves out those that would read it).
  returned: always
  type: int
  sample: 23
failures:
  description: Each failed check, host-wide ones first, then per instance.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: What was checked - C(npu_smi), C(driver), C(firmware), C(plan), C(chips_present),
        C(chips_healthy), C(container), C(running), C(restarts), C(image), C(restart_policy), C(script),
        C(config_hash), C(chips_mapped), C(listening), C(health), C(api_key), C(served_model), C(image_request) or
        C(answer_check).
      type: str
      sample: running
    instance:
      description: The instance it was found on, or null for the host.
      type: str
      sample: vllm-ascend
    found:
      description: What was found.
      type: str
      sample: exited
    expected:
      description: What was expected.
      type: str
      sample: running
    fix:
      description: What to do.
      type: str
    message:
      description: The failure as one sentence - where, what was found against what was expected, and the fix.
      type: str
      sample: "npu-node-07, instance vllm-ascend: container is exited, expected running. Fix: ..."
summary:
  description: One line for the host - verified with its instances and checks, or how many checks failed.
  returned: always
  type: str
  sample: "npu-node-07: verified: 1 instance(s), 23 checks passed"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import NPU_OPTIONS
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import ClientError, token_problem
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.verification import judge, read
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import DockerError

ARGUMENT_SPEC = dict(
    NPU_OPTIONS,
    host=dict(type="str", required=True),
    plan_file=dict(type="path", default="/etc/vllm-ascend/plan.json"),
    docker=dict(type="str", default="docker"),
    label_prefix=dict(type="str", default="ascend-vllm-fleet"),
    driver_version=dict(type="str", required=True),
    firmware_version=dict(type="str", required=True),
    restart_policy=dict(type="str", default="unless-stopped", choices=["no", "always", "unless-stopped", "on-failure"]),
    api_key=dict(type="str", default="", no_log=True),
    answer_check=dict(type="str", default="known", choices=["known", "sane", "none"]),
    request_timeout=dict(type="int", default=120),
)


def check_options(params):
    number_at_least(params, "timeout", 1, "Fix: give seconds, 1 or more (fleet_npu_smi_timeout)")
    number_at_least(params, "request_timeout", 1, "Fix: give seconds, 1 or more")
    problem = token_problem(params["api_key"]) if params["api_key"] else None
    if problem:
        raise OptionError("api_key %s, which an HTTP header cannot carry: expected the bearer token alone. Fix: set "
                          "fleet_api_key to the key the instances were deployed with" % problem)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        check_options(params)
        result = judge(read(params), params)
    except (OptionError, ClientError, DockerError, DockerUnavailable) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("verifying %s" % params["host"], error))
    if not result["verified"]:
        module.fail_json(msg="\n".join([result["summary"]] + [item["message"] for item in result["failures"]]),
                         **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
