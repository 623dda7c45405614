#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module model_files: is a Hugging Face model folder complete on this host?"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_files
short_description: Check that a Hugging Face model folder has every file vLLM needs
description:
  - Checks that C(path) holds C(model.safetensors.index.json), every weight shard the index names and the
    C(required) files, and that none of them is empty (an interrupted copy or download leaves empty or
    missing shards).
  - Reports what is missing instead of failing, unless C(fail_on_incomplete) is set; then the failure
    message lists every missing or empty file.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  path:
    description: The model folder on the host.
    type: path
    required: true
  required:
    description:
      - Files that must exist besides C(model.safetensors.index.json) and every shard it names.
      - Which files a model needs depends on the model, so the caller names them (the model_weights role
        passes C(model_weights_required_files)).
    type: list
    elements: str
    default: []
  fail_on_incomplete:
    description: Fail, listing what is missing, when the folder is incomplete.
    type: bool
    default: false
attributes:
  check_mode:
    description: Can run in check mode and report the same as without it.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: It only reads, so there is never a change to show.
  platform:
    description: Target OS families it runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Check the Qwen3-VL-8B-Instruct folder
  model_files:
    path: /data/models/Qwen3-VL-8B-Instruct
    required: [config.json, tokenizer.json, tokenizer_config.json, preprocessor_config.json]
    fail_on_incomplete: true
"""

RETURN = r"""
complete:
  description: Every required file and shard is present and non-empty.
  returned: always
  type: bool
  sample: true
missing:
  description: The index, required files and shards that do not exist.
  returned: always
  type: list
  elements: str
  sample: ["model-00003-of-00004.safetensors"]
empty:
  description: Files that exist but have no bytes.
  returned: always
  type: list
  elements: str
  sample: []
shards:
  description: Weight shards named by the index (or found, when there is no index).
  returned: always
  type: list
  elements: str
  sample: ["model-00001-of-00004.safetensors"]
total_bytes:
  description: Bytes of the index, required files and shards that exist.
  returned: always
  type: int
  sample: 17534340096
msg:
  description: Every missing or empty file and why the folder is incomplete, with the fix.
  returned: when the folder is incomplete and C(fail_on_incomplete) is set
  type: str
  sample: "model folder /data/models/Qwen3-VL-8B-Instruct is incomplete: missing: tokenizer.json. Fix: ..."
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule

INDEX = "model.safetensors.index.json"


def shards_of(path, problems):
    """Shards the index names; without an index, the *.safetensors found, so the report still shows them."""
    index = os.path.join(path, INDEX)
    if not os.path.isfile(index):
        return sorted(os.path.basename(found) for found in glob.glob(os.path.join(path, "*.safetensors")))
    try:
        with open(index) as handle:
            weight_map = json.load(handle).get("weight_map", {})
    except ValueError as error:
        problems.append("%s is not valid JSON (%s): re-copy it" % (INDEX, error))
        return []
    if not weight_map:
        problems.append("%s names no weight shard (no weight_map): re-copy it" % INDEX)
    return sorted(set(weight_map.values()))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            required=dict(type="list", elements="str", default=[]),
            fail_on_incomplete=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    problems, missing, empty, total = [], [], [], 0
    shards = shards_of(path, problems) if os.path.isdir(path) else []
    required = [INDEX] + [name for name in module.params["required"] if name != INDEX]
    for name in required + shards:
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            missing.append(name)
        elif os.path.getsize(full) == 0:
            empty.append(name)
        else:
            total += os.path.getsize(full)
    complete = os.path.isdir(path) and not (missing or empty or problems)
    result = dict(changed=False, complete=complete, missing=missing, empty=empty, shards=shards, total_bytes=total)
    if not complete and module.params["fail_on_incomplete"]:
        if not os.path.isdir(path):
            why = "the folder does not exist"
        else:
            why = "; ".join(problems + (["missing: " + ", ".join(missing)] if missing else [])
                            + (["empty: " + ", ".join(empty)] if empty else []))
        module.fail_json(msg="model folder %s is incomplete: %s. Fix: copy the whole model folder again (or set "
                             "model_weights_source to stage it), then re-run" % (path, why), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
