#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module folder_files: a folder's text files, each made to hold its given text, in one run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: folder_files
short_description: Make the text files of one folder hold the given texts, in one run on the host
description:
  - Makes each file named in O(files) in the folder O(dest) hold its text, with O(mode). What a loop of
    M(ansible.builtin.copy) does, in one module run rather than one per file, so a converged host costs one round
    trip whatever the number of files (the NPU collector and the parsers it imports are eight).
  - A file is written whole or not at all (beside its place, then renamed over it), and only when its text differs;
    a file whose text is right and whose mode is not gets its mode. So a second run changes nothing.
  - The folder, and any folder above it, is made with O(directory_mode) when it is not there. Files of the folder
    that O(files) does not name are left as they are.
  - Check mode reports what would be written, writing nothing; with C(--diff), each changed file's text before and
    after.
  - Needs only the Python standard library on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  dest:
    description: The folder, an absolute path.
    type: path
    required: true
  files:
    description: Each file's text by its name in O(dest), a name without C(/) (not C(.) or C(..)).
    type: dict
    required: true
  mode:
    description: Each file's mode, an octal string.
    type: str
    default: "0644"
  directory_mode:
    description: The mode of each folder the module makes, an octal string; a folder that is there keeps its own.
    type: str
    default: "0755"
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Reads the files and reports which would be written, writing nothing.
    support: full
  diff_mode:
    description: Shows each changed file's text before and after.
    support: full
"""

EXAMPLES = r"""
- name: Install the NPU collector and the parsers it reads npu-smi with
  ascend.fleet.folder_files:
    dest: /opt/ascend-fleet/npu-exporter/ansible_collections/ascend/fleet/plugins/module_utils
    files:
      npu_exporter.py: "{{ lookup('ansible.builtin.file', 'module_utils/npu_exporter.py', rstrip=false) }}"
      npu_smi.py: "{{ lookup('ansible.builtin.file', 'module_utils/npu_smi.py', rstrip=false) }}"
  notify: Restart the NPU collector
"""

RETURN = r"""
written:
  description: The names of the files whose text or mode was changed (in check mode, would be), sorted.
  returned: always
  type: list
  elements: str
  sample: ["npu_exporter.py"]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    octal_mode,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import settle_file

# What a file holds that is no UTF-8 text: never equal to a text, so the file is written over.
NOT_TEXT = object()


def check_files(files):
    """The names that are no plain file name, and those whose text is no string: a message, or None."""
    bad_names = sorted(name for name in files if not name or "/" in name or "\0" in name or name in (".", ".."))
    if bad_names:
        return ("files: %s: expected file names in dest, without / (not . or ..). Fix: give each file by its name "
                "alone, and make a task per folder" % ", ".join(repr(name) for name in bad_names))
    bad_texts = sorted(name for name, text in files.items() if not isinstance(text, str))
    if bad_texts:
        return ("files: %s: expected each file's text as a string. Fix: give the text itself (lookup('file', ..., "
                "rstrip=false) reads a file of the controller)" % ", ".join(bad_texts))
    return None


def make_folder(dest, mode):
    """Makes dest and any folder above it that is missing, each with mode (not narrowed by the umask)."""
    missing = []
    folder = dest
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(missing):
        os.mkdir(folder)
        os.chmod(folder, mode)


def found_text(path):
    """What the file holds now: its text as it is (line endings too), None where it is not there, NOT_TEXT where it
    is no UTF-8 text."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        return NOT_TEXT


def settle(dest, files, mode, directory_mode, check_mode):
    """Makes each file hold its text; returns the names written and each one's text before and after."""
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise ValueError("dest %s: expected a folder, found a file there. Fix: remove it, or name another folder"
                         % dest)
    if not check_mode:
        make_folder(dest, directory_mode)
    written, diffs = [], []
    for name in sorted(files):
        path = os.path.join(dest, name)
        if os.path.isdir(path):
            raise ValueError("%s: expected a file, found a folder there. Fix: remove it, then run again" % path)
        found = found_text(path)
        changed, _kept = settle_file(path, found, files[name], mode, check_mode)
        if changed:
            written.append(name)
            before = "" if found in (None, NOT_TEXT) else found
            diffs.append(dict(before_header=path, after_header=path, before=before, after=files[name]))
    return written, diffs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            mode=dict(type="str", default="0644"),
            directory_mode=dict(type="str", default="0755"),
        ),
        supports_check_mode=True,
    )
    dest, files = module.params["dest"], module.params["files"]
    if not os.path.isabs(dest):
        module.fail_json(msg="dest %r: expected an absolute path. Fix: give the folder as /a/path" % dest)
    problem = check_files(files)
    if problem:
        module.fail_json(msg=problem)
    try:
        mode, directory_mode = octal_mode(module.params, "mode"), octal_mode(module.params, "directory_mode")
        written, diffs = settle(dest, files, mode, directory_mode, module.check_mode)
    except (OptionError, ValueError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the folder, not a traceback
        module.fail_json(msg=unexpected_failure("writing the files of %s" % dest, error))
    result = dict(changed=bool(written), written=written)
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
