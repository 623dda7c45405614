#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module path_mounts: the file system of each of the fleet's paths, told to the node exporter."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: path_mounts
short_description: Tell the node exporter which file system holds each of the fleet's paths
description:
  - Finds the mount point of the file system holding each of O(paths) as C(df --output=target) names it, which is
    the C(mountpoint) label of the node exporter's C(node_filesystem_*) metrics, and writes one
    C(ascend_fleet_path_info{path, use, mountpoint} 1) sample per path into O(dest), a text file of the node
    exporter's textfile collector. The fleet's alerts and dashboards join the two by C(mountpoint) (a model folder
    filling up, say).
  - A path the host does not have (the model folder of a gateway) holds nothing to watch and gets no sample; so
    does one whose C(df) does not answer within O(timeout) seconds (a hung network mount).
  - The file is written whole or not at all (beside its place, then renamed), and only when its text changes, so
    a second run changes nothing. Check mode reads the paths and reports what would change; with C(--diff), the
    text before and after.
  - Needs only the Python standard library and C(df) on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  paths:
    description: The paths to describe, by their use (C(model), C(cache), C(docker), C(logs)); the use becomes the
      C(use) label.
    type: dict
    required: true
  dest:
    description: The text file to write, in the folder the node exporter's C(--collector.textfile.directory) names;
      its name must end in C(.prom). A folder that is not there is made (mode 0755).
    type: path
    required: true
  mode:
    description: The file's mode, an octal string.
    type: str
    default: "0644"
  timeout:
    description: Seconds each path's C(df) may take.
    type: int
    default: 30
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Reads the paths and reports whether the file would change, writing nothing.
    support: full
  diff_mode:
    description: Shows the file's text before and after.
    support: full
"""

EXAMPLES = r"""
- name: Describe the fleet's paths to the node exporter
  ascend.fleet.path_mounts:
    paths:
      model: /data/models/Qwen3-VL-8B-Instruct
      docker: /var/lib/docker
    dest: /var/lib/prometheus/node-exporter/ascend_fleet_paths.prom
"""

RETURN = r"""
mounts:
  description: The mount point of each path by its use; null where the host does not have it or C(df) did not answer.
  returned: always
  type: dict
  sample: {"model": "/data", "docker": "/"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    octal_mode,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.path_mounts import describe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            mode=dict(type="str", default="0644"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    dest, paths = module.params["dest"], module.params["paths"]
    if not dest.endswith(".prom"):
        module.fail_json(msg="dest %r: expected a file name ending in .prom, the only files the node exporter's "
                             "textfile collector reads. Fix: name the file <something>.prom" % dest)
    bad = sorted(use for use, path in paths.items() if not isinstance(path, str) or not path.startswith("/"))
    if bad:
        module.fail_json(msg="paths %s: expected an absolute path for each use. Fix: give each as /a/path" % (
            ", ".join("%s=%r" % (use, paths[use]) for use in bad)))
    try:
        mode = octal_mode(module.params, "mode")
    except OptionError as error:
        module.fail_json(msg=str(error))
    try:
        changed, mounts, before, after = describe(paths, dest, mode, module.params["timeout"], module.check_mode)
    except Exception as error:  # anything unforeseen still names the file, not a traceback
        module.fail_json(msg=unexpected_failure("describing the fleet's paths in %s" % dest, error))
    module.exit_json(changed=changed, mounts=mounts, diff=dict(before=before or "", after=after))


if __name__ == "__main__":
    main()
