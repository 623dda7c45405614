#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_plan_info: the serving plan recorded on a host, checked before anyone serves from it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_plan_info
short_description: Read the serving plan a deploy recorded on a host, refusing one it did not write for that host
description:
  - Reads the plan the vllm_plan module recorded (its fields are documented there), for the gateway, the
    benchmark and teardown; fleet_verify reads it alike.
  - Fails, naming the file and the fix, on a plan file that cannot be read, is not JSON, has another format, is
    another host's (a copied file), has no instances or an instance without a usable port.
  - A host with no plan file is not deployed yet - RV(plan) is null.
  - Reads only; changes nothing.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  path:
    description: Where the plan is recorded (C(fleet_plan_file)).
    type: path
    required: true
  host:
    description: The inventory name of the host whose plan it must be.
    type: str
    required: true
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the serving plan
  ascend.fleet.vllm_plan_info:
    path: /etc/vllm-ascend/plan.json
    host: "{{ inventory_hostname }}"
  register: recorded
"""

RETURN = r"""
plan:
  description: The plan as vllm_plan recorded it (see its RETURN), or null when the host has none yet.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import PlanError, read


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True), host=dict(type="str", required=True)),
        supports_check_mode=True,
    )
    try:
        plan = read(module.params["path"], module.params["host"])
    except PlanError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being read, not a traceback
        module.fail_json(msg=unexpected_failure("reading the serving plan %s" % module.params["path"], error))
    module.exit_json(changed=False, plan=plan)


if __name__ == "__main__":
    main()
