#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vllm_instance: one vLLM-Ascend instance's container and files, kept, started or replaced."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_instance
short_description: Keep, start or replace one vLLM-Ascend instance's container, setting aside what it replaces
description:
  - Owns one instance of the serving plan, its container C(name) and its files (the C(docker run) script and the
    root-only env file with the API key), the way C(community.docker.docker_container) owns a container.
  - The container carries a C(<label_prefix>.config-hash) label, the hash of its C(docker run) lines, its image's
    ID and its key (salted with the host's secret from O(salt_file)). With O(state=started) an instance whose
    container has the spec's hash and maps its O(devices) is kept (started when stopped); any other is replaced.
  - A replacement sets the serving container aside as C(<name>-previous), stopped, with its files as
    C(<file>.previous), writes the new files and starts the new container. Once the new container serves,
    O(state=committed) removes what was set aside; when it does not, O(state=restored) removes it and puts the
    set-aside container back, its files too, and starts it.
  - A run interrupted between the two leaves C(<name>-previous) or C(<file>.previous) behind; the next
    O(state=started) restores them before it decides anything.
  - What every instance of a host needs (mount sources, chips no other container holds) is checked once for
    the host by the vllm_plan module, before any instance changes.
  - The module does not wait for the instance to serve (a load takes minutes; the vllm_probe module waits).
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  name:
    description: The instance's container name (Docker's rule for names).
    type: str
    required: true
  state:
    description:
      - V(started) the instance runs from its spec, replaced when the spec changed.
      - V(committed) what a replacement set aside is removed (the new container serves).
      - V(restored) a replacement that does not serve is removed and what it replaced is put back and started.
      - V(absent) the instance's containers and files are removed.
    type: str
    choices: [started, committed, restored, absent]
    default: started
  run:
    description:
      - The instance's C(docker run) as lines of arguments, the line starting with C(--) before the image; the
        config-hash label is added before it. Required with O(state=started).
    type: list
    elements: list
  image:
    description: The image the instance runs; its ID enters the hash. Required with O(state=started).
    type: str
  script:
    description: Where the C(docker run) script is written (mode 0750).
    type: path
    required: true
  env_file:
    description: Where the env file with the API key is written (mode 0600); removed when O(api_key) is empty.
    type: path
    required: true
  api_key:
    description: The key the instance requires of clients; empty for an open API. Never shown or returned.
    type: str
    default: ""
  salt_file:
    description: The host's secret that salts the key in the hash; an absent file salts with nothing.
    type: path
  label_prefix:
    description: The namespace of the collection's container labels.
    type: str
    default: ascend-vllm-fleet
  devices:
    description: The chip nodes the container must map (C(/dev/davinciN)); a container that maps others is replaced.
    type: list
    elements: str
    default: []
  comment:
    description: The description line of the script (what it serves, on which chips and port).
    type: str
    default: ""
  remove_replacement:
    description:
      - With O(state=restored), the container running as O(name) is removed even when nothing was set aside for
        it (a replacement that does not serve). V(false) removes it only when a set-aside container takes its
        place (after an error elsewhere, when the new container may serve).
    type: bool
    default: true
  docker:
    description: The Docker CLI to run.
    type: str
    default: docker
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Changes nothing; returns what a real run would do.
    support: full
  diff_mode:
    description: The script's text before and after.
    support: full
"""

EXAMPLES = r"""
- name: Decide what the instance needs, changing nothing
  ascend.fleet.vllm_instance:
    name: vllm-ascend
    run: [[docker, run, --detach, --name, vllm-ascend], [--, "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"],
          [vllm, serve, /models/Qwen3-VL-8B-Instruct]]
    image: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
    script: /etc/vllm-ascend/vllm-ascend.sh
    env_file: /etc/vllm-ascend/vllm-ascend.env
    devices: [/dev/davinci0, /dev/davinci1]
  check_mode: true
  register: decided

- name: Remove what the replacement set aside, now that it serves
  ascend.fleet.vllm_instance:
    name: vllm-ascend
    state: committed
    script: /etc/vllm-ascend/vllm-ascend.sh
    env_file: /etc/vllm-ascend/vllm-ascend.env
"""

RETURN = r"""
action:
  description:
    - With O(state=started), what the instance needed - C(keep), C(start), C(replace), or C(failed) when the
      serving container could not be set aside (it serves on, untouched).
  returned: state is started
  type: str
  sample: replace
set_aside:
  description: A serving container was set aside as C(<name>-previous) for the replacement.
  returned: state is started
  type: bool
recovered:
  description: What an interrupted run had set aside was put back first (in check mode, would be).
  returned: state is started
  type: bool
files_changed:
  description:
    - The instance's script or env file were written because they differed from its spec (in check mode, would
      be); always with C(replace).
  returned: state is started
  type: bool
error:
  description: Why the new or restarted container did not start (Docker's words), or null; the task still succeeds.
  returned: state is started
  type: str
restored:
  description: With O(state=restored), a set-aside container was put back and started.
  returned: state is restored
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import (
    ASIDE,
    DockerError,
    Instance,
    apply,
    read_text,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="started", choices=["started", "committed", "restored", "absent"]),
            run=dict(type="list", elements="list"),
            image=dict(type="str"),
            script=dict(type="path", required=True),
            env_file=dict(type="path", required=True),
            api_key=dict(type="str", default="", no_log=True),
            salt_file=dict(type="path"),
            label_prefix=dict(type="str", default="ascend-vllm-fleet"),
            devices=dict(type="list", elements="str", default=[]),
            comment=dict(type="str", default=""),
            remove_replacement=dict(type="bool", default=True),
            docker=dict(type="str", default="docker"),
        ),
        required_if=[("state", "started", ("run", "image"))],
        supports_check_mode=True,
    )
    params = module.params
    instance = Instance(params["docker"], params["name"], params["script"], params["env_file"],
                        [[str(arg) for arg in line] for line in params["run"] or []], params["image"] or "",
                        params["api_key"], params["salt_file"] or "", params["label_prefix"], params["devices"],
                        params["comment"])
    try:
        result = run(module, instance, params)
    except (DockerError, DockerUnavailable) as error:
        module.fail_json(msg="%s on the host: %s" % (params["name"], error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("vllm_instance %s (state %s)" % (params["name"], params["state"]),
                                                error))
    module.exit_json(**result)


def run(module, instance, params):
    state = params["state"]
    if state == "started":
        before = read_text(instance.script)
        result = apply(instance, module.check_mode)
        if module._diff:
            after = instance.files(instance.spec_hash())[instance.script][0] if module.check_mode else read_text(
                instance.script)
            result["diff"] = dict(before=before, after=after, before_header=instance.script,
                                  after_header=instance.script)
        return result
    if module.check_mode:
        found = instance.inspect()
        aside_files = any(os.path.lexists(path + ASIDE) for path in instance.paths())
        if state == "committed":
            return dict(changed=found["aside"] is not None or aside_files)
        if state == "restored":
            return dict(changed=found["current"] is not None or found["aside"] is not None or aside_files,
                        restored=found["aside"] is not None)
        return dict(changed=found["current"] is not None or found["aside"] is not None or aside_files
                    or any(os.path.lexists(path) for path in instance.paths()))
    if state == "committed":
        return dict(changed=instance.commit())
    if state == "restored":
        changed, restored = instance.restore(instance.inspect(), params["remove_replacement"])
        return dict(changed=changed, restored=restored)
    return dict(changed=instance.remove())


if __name__ == "__main__":
    main()
