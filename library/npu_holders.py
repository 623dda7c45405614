#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module npu_holders: what holds the host's NPU device nodes, the processes and the containers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: npu_holders
short_description: List the processes and running containers that hold a host's Ascend NPU device nodes
description:
  - Lists every process with one of the C(davinci*) device nodes open (C(/dev/davinciN), C(/dev/davinci_manager)),
    read from C(/proc/<pid>/fd), with the ID of the container it runs in when its cgroup names one.
  - Lists every running Docker container that maps one of those nodes (C(HostConfig.Devices)) or is privileged
    (a privileged container sees every device), with its name, image, labels and state.
  - Running containers are those C(docker ps) lists, a restarting one among them (its restart policy starts it
    again on the same chips).
  - The driver installer's PCIe hot reset fails while any of them is there (it checks open device nodes and the
    containers' device maps), and the new driver then waits for a reboot; the ascend_driver role uses this list
    to stop its own containers first and to refuse while anything else holds a chip.
  - The ascend_preflight role fails a host where a container that is not this collection's maps a chip (a chip
    opens in one container only, and the vLLM container would fail at start).
  - Reads only; changes nothing.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  dev_dir:
    description: Folder of the device nodes.
    type: path
    default: /dev
  docker:
    description:
      - Docker CLI to run. When it is not installed, or its engine does not answer, no container is listed and
        C(docker_available) is false.
    type: str
    default: docker
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.read_only
"""

EXAMPLES = r"""
- name: List what holds the chips
  ascend.fleet.npu_holders:
  register: holders

- name: Refuse while a container not of this collection maps a chip
  ansible.builtin.assert:
    that: (holders | ascend.fleet.npu_chip_holders('ascend-vllm-fleet')).containers | rejectattr('ours') | length == 0
"""

RETURN = r"""
processes:
  description: Processes with a C(davinci*) node open, by PID.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process ID.
      type: int
      sample: 41877
    name:
      description: The process's command name (C(/proc/<pid>/comm)).
      type: str
      sample: python3.9
    devices:
      description: The nodes it holds open.
      type: list
      elements: str
      sample: ["/dev/davinci0", "/dev/davinci_manager"]
    container_id:
      description: Full ID of the container it runs in, or null for a process of the host itself.
      type: str
      sample: 3f1c...
containers:
  description: Running containers that map a C(davinci*) node or are privileged.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Full container ID.
      type: str
    name:
      description: Container name, without Docker's leading slash.
      type: str
      sample: npu-exporter
    image:
      description: The image it was started from.
      type: str
      sample: swr.cn-south-1.myhuaweicloud.com/ascendhub/npu-exporter:v6.0.0
    devices:
      description: The nodes it maps (C(all) for a privileged container).
      type: list
      elements: str
      sample: ["/dev/davinci0"]
    labels:
      description: The container's labels.
      type: dict
    status:
      description: Docker's state of the container (C(State.Status)).
      type: str
      sample: restarting
docker_available:
  description: The Docker CLI ran and its engine answered.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import containers, processes
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import unexpected_failure


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dev_dir=dict(type="path", default="/dev"),
            docker=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    try:
        listed, available = containers(module.params["docker"], module.params["dev_dir"])
        result = dict(changed=False, processes=processes(module.params["dev_dir"]), containers=listed,
                      docker_available=available)
    except Exception as error:  # anything unforeseen still says what was being read, not a traceback
        module.fail_json(msg=unexpected_failure("listing what holds the NPU device nodes in %s"
                                                % module.params["dev_dir"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
