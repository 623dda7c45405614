#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module docker_daemon_settings: lay settings over Docker's daemon.json, keeping the rest."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_daemon_settings
short_description: Lay settings over Docker's daemon.json, keeping the operator's own
description:
  - Reads the daemon's settings file (C(path)), lays C(settings) over what it holds (a key given here replaces the
    file's value whole; every other key stays as it is), and writes the file whole when that changes it, in the
    layout Ansible's C(to_nice_json) gives (four spaces, keys sorted), with C(mode).
  - A file that is missing or empty holds no settings. A file that is not a JSON object fails the task, naming it;
    the daemon would not start with it either.
  - Does not restart the daemon, which reads the file only when it starts; notify a handler on change.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  path:
    description: The daemon's settings file on the host.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description: The settings to lay over the file's, as the daemon names them (C(log-driver), C(iptables), ...).
    type: dict
    required: true
  mode:
    description: The file's permissions, as an octal string.
    type: str
    default: "0644"
  backup:
    description: Keep the file as it was, beside it with a timestamp in its name, before changing it.
    type: bool
    default: true
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Can run in check mode and report whether the file would change.
    support: full
  diff_mode:
    description: Shows the settings before and after.
    support: full
"""

EXAMPLES = r"""
- name: Keep every container's log to 3 files of 100 MB, whatever else daemon.json sets
  ascend.fleet.docker_daemon_settings:
    settings:
      log-driver: json-file
      log-opts:
        max-size: 100m
        max-file: "3"
"""

RETURN = r"""
settings:
  description: The settings the file holds after the task (in check mode, would hold).
  returned: success
  type: dict
  sample: {"log-driver": "json-file", "registry-mirrors": ["https://mirror.example.cn"]}
backup_file:
  description: Where the file as it was was kept.
  returned: when the file changed and C(backup) was set
  type: str
  sample: /etc/docker/daemon.json.12345.2026-12-06@10:00:00~
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.daemon_settings import SettingsError, merge
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    octal_mode,
    unexpected_failure,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            settings=dict(type="dict", required=True),
            mode=dict(type="str", default="0644"),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        mode = octal_mode(module.params, "mode")
    except OptionError as error:
        module.fail_json(msg=str(error))
    try:
        changed, before, after, backup_file = merge(path, module.params["settings"], mode, module.check_mode,
                                                    keep=module.backup_local if module.params["backup"] else None)
    except SettingsError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the file, not a traceback
        module.fail_json(msg=unexpected_failure("laying the settings over %s" % path, error))
    result = dict(changed=changed, settings=after, diff=dict(before=before, after=after))
    if backup_file:
        result["backup_file"] = backup_file
    module.exit_json(**result)


if __name__ == "__main__":
    main()
