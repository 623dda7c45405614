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
  - Each C(.safetensors) shard must be as long as its own header says (8 bytes of header length, the JSON
    header, then the tensors up to the largest end offset it names). A copy cut short leaves a shard with bytes
    that vLLM fails on minutes into the load.
  - Reports what is missing instead of failing, unless C(fail_on_incomplete) is set; then the failure
    message lists every missing or empty file.
  - An index that is not a JSON object of shard files, or that names a shard outside the folder (an absolute
    path, a C(..) path), makes the folder incomplete, so no file elsewhere on the host counts as the model's.
  - Returns the model's footprint as the fact C(ascend_model) (null when the folder is incomplete or its files
    do not say it), which the serving plan's fit estimate reads - the weights' bytes (the index's
    C(metadata.total_size), which C(save_pretrained) writes as the sum of every tensor's bytes; without it, the
    sum of the tensors the shards' headers name) and the attention's shape from C(config.json) (the text model's,
    C(text_config), for a vision-language model).
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  path:
    description: The model folder on the host, as an absolute path.
    type: path
    required: true
  required:
    description:
      - Files that must exist besides C(model.safetensors.index.json) and every shard it names, as names
        relative to C(path) (an absolute or C(..) name is refused).
      - Which files a model needs depends on the model, so the caller names them (the model_weights role
        passes C(model_weights_required_files)).
    type: list
    elements: str
    default: []
  fail_on_incomplete:
    description: Fail, listing what is missing, when the folder is incomplete.
    type: bool
    default: false
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Can run in check mode and report the same as without it.
    support: full
    details: With C(fail_on_incomplete), an incomplete folder is reported in C(msg) and a warning instead of
      failing, because the tasks that would fill it before this one (a copy, a download) do not run in check
      mode.
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: It only reads, so there is never a change to show.
"""

EXAMPLES = r"""
- name: Check the Qwen3-VL-8B-Instruct folder
  ascend.fleet.model_files:
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
truncated:
  description: Shards shorter than their header says, or whose header is no safetensors header, each with why.
  returned: always
  type: list
  elements: str
  sample: ["model-00002-of-00004.safetensors (1073741824 of 3900000000 bytes)"]
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
ansible_facts:
  description: Facts of the model.
  returned: always
  type: dict
  contains:
    ascend_model:
      description: The model's footprint, or null when the folder is incomplete or its files do not say it.
      type: dict
      contains:
        weights_bytes:
          description: Bytes of every tensor of the weights.
          type: int
          sample: 17534340096
        layers:
          description: Decoder layers (C(num_hidden_layers)).
          type: int
          sample: 36
        kv_heads:
          description: Key-value heads of each layer (C(num_key_value_heads)).
          type: int
          sample: 8
        head_dim:
          description: Size of one attention head (C(head_dim), else C(hidden_size) / C(num_attention_heads)).
          type: int
          sample: 128
msg:
  description: Every missing or empty file and why the folder is incomplete, with the fix.
  returned: when the folder is incomplete and C(fail_on_incomplete) is set (in check mode, starting with
    C(check mode:) and the module does not fail)
  type: str
  sample: "model folder /data/models/Qwen3-VL-8B-Instruct is incomplete: missing: tokenizer.json. Fix: ..."
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    JSON_KINDS,
    OptionError,
    unexpected_failure,
)

INDEX = "model.safetensors.index.json"
# The safetensors format: an 8-byte little-endian header length, the JSON header, the tensors. A header is
# kilobytes; one claiming more than this is no header.
SAFETENSORS_HEADER_MAX = 100 << 20


def outside_problem(name):
    """Why name is no file inside the model folder, or None.

    The index and `required` name files relative to the folder; an absolute or `..` path would make a file
    elsewhere on the host count as part of the model.
    """
    if not isinstance(name, str) or not name or "\0" in name:
        return "%r, not a file name" % (name,)
    if os.path.isabs(name) or os.path.normpath(name).split(os.sep)[0] == os.pardir:
        return "%r, outside the model folder" % name
    return None


def shards_of(path, problems):
    """Shards the index names; without an index, the *.safetensors found, so the report still shows them.

    What makes the index unusable goes to problems: the folder is then incomplete, whatever is on disk.
    """
    index = os.path.join(path, INDEX)
    if not os.path.isfile(index):
        return sorted(os.path.basename(found) for found in glob.glob(os.path.join(path, "*.safetensors")))
    try:
        with open(index, encoding="utf-8") as handle:
            content = json.load(handle)
    except (ValueError, RecursionError) as error:  # bytes that are not UTF-8 too; nested too deep for the parser
        problems.append("%s is not valid JSON (%s): re-copy it" % (INDEX, error))
        return []
    if not isinstance(content, dict):
        problems.append("%s holds %s, expected a JSON object with a weight_map: re-copy it"
                        % (INDEX, JSON_KINDS.get(type(content), "no object")))
        return []
    weight_map = content.get("weight_map")
    if not weight_map:
        problems.append("%s names no weight shard (no weight_map): re-copy it" % INDEX)
        return []
    if not isinstance(weight_map, dict):
        problems.append("%s: weight_map is %s, expected an object of tensor names to shard files: re-copy it"
                        % (INDEX, JSON_KINDS.get(type(weight_map), "no object")))
        return []
    shards = set()
    for shard in weight_map.values():
        problem = outside_problem(shard)
        if problem:
            problems.append("%s: weight_map names %s, expected a file name inside the folder: re-copy it"
                            % (INDEX, problem))
        else:
            shards.add(shard)
    return sorted(shards)


def tensor_offsets(full, size):
    """(header length, [(start, end) of each tensor's bytes]) of a .safetensors file of size bytes, or None when it
    has no safetensors header."""
    with open(full, "rb") as handle:
        start = handle.read(8)
        length = int.from_bytes(start, "little") if len(start) == 8 else None
        if length is None or length > min(size - 8, SAFETENSORS_HEADER_MAX):
            return None
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
            offsets = [tuple(entry["data_offsets"][:2]) for name, entry in header.items() if name != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None
    return length, [(begin, end) for begin, end in offsets if isinstance(begin, int) and isinstance(end, int)]


def truncation(full, size):
    """Why a .safetensors file of size bytes is shorter than its header says, or no safetensors file; None if
    it is whole."""
    read = tensor_offsets(full, size)
    if read is None:
        return "%d bytes, no safetensors header" % size
    length, offsets = read
    expected = 8 + length + max([end for _begin, end in offsets] or [0])
    return "%d of %d bytes" % (size, expected) if size < expected else None


def read_json(full):
    """The JSON object in a file, or None when there is none."""
    try:
        with open(full, encoding="utf-8") as handle:
            content = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    return content if isinstance(content, dict) else None


def whole_number(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def footprint(path, shards):
    """What the model needs of a chip, as the serving plan's fit estimate reads it (RETURN ascend_model), or None
    when its files do not say."""
    index, config = read_json(os.path.join(path, INDEX)) or {}, read_json(os.path.join(path, "config.json")) or {}
    metadata = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
    weights = whole_number(metadata.get("total_size"))
    if weights is None:
        weights = 0
        for shard in shards:
            full = os.path.join(path, shard)
            read = tensor_offsets(full, os.path.getsize(full))
            weights += sum(end - begin for begin, end in (read or (0, []))[1])
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    heads, hidden = whole_number(text.get("num_attention_heads")), whole_number(text.get("hidden_size"))
    model = {"weights_bytes": whole_number(weights), "layers": whole_number(text.get("num_hidden_layers")),
             "kv_heads": whole_number(text.get("num_key_value_heads", heads)),
             "head_dim": whole_number(text.get("head_dim")) or (hidden // heads if hidden and heads else None)}
    return model if all(model.values()) else None


def check_options(params):
    path = params["path"]
    example = "the model folder on the host, for example /data/models/Qwen3-VL-8B-Instruct"
    if not path:
        raise OptionError("path is empty: expected %s. Fix: set fleet_model_dir" % example)
    if "\0" in path:
        raise OptionError("path %r holds a NUL byte: expected %s. Fix: correct fleet_model_dir" % (path, example))
    if not os.path.isabs(path):
        raise OptionError("path %r is relative, which the host would read from the module's temporary folder: "
                          "expected an absolute path, %s. Fix: correct fleet_model_dir" % (path, example))
    for name in params["required"]:
        problem = outside_problem(name)
        if problem:
            raise OptionError("required names %s: expected file names inside path, such as config.json. Fix: "
                              "correct model_weights_required_files" % problem)


def check_folder(module):
    """The module's result for its folder, and the message of an incomplete one (None when complete)."""
    path = module.params["path"]
    problems, missing, empty, truncated, total = [], [], [], [], 0
    shards = shards_of(path, problems) if os.path.isdir(path) else []
    required = [INDEX] + [name for name in module.params["required"] if name != INDEX]
    for name in required + shards:
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            missing.append(name)
        elif os.path.getsize(full) == 0:
            empty.append(name)
        else:
            size = os.path.getsize(full)
            total += size
            why = truncation(full, size) if name.endswith(".safetensors") else None
            if why:
                truncated.append("%s (%s)" % (name, why))
    complete = os.path.isdir(path) and not (missing or empty or truncated or problems)
    result = dict(changed=False, complete=complete, missing=missing, empty=empty, truncated=truncated,
                  shards=shards, total_bytes=total,
                  ansible_facts=dict(ascend_model=footprint(path, shards) if complete else None))
    if complete:
        return result, None
    if os.path.isfile(path):
        why = "%s is a file, not a folder" % path
    elif not os.path.isdir(path):
        why = "the folder does not exist"
    else:
        why = "; ".join(problems + (["missing: " + ", ".join(missing)] if missing else [])
                        + (["empty: " + ", ".join(empty)] if empty else [])
                        + (["cut short: " + ", ".join(truncated)] if truncated else []))
    return result, ("model folder %s is incomplete: %s. Fix: copy the whole model folder again (or set "
                    "model_weights_source to stage it), then re-run" % (path, why))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            required=dict(type="list", elements="str", default=[]),
            fail_on_incomplete=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        check_options(module.params)
        result, incomplete = check_folder(module)
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the folder, not a traceback
        module.fail_json(msg=unexpected_failure("checking the model folder %s" % module.params["path"], error))
    if incomplete and module.params["fail_on_incomplete"]:
        if module.check_mode:
            # The tasks that would fill the folder (a copy, a download command) do not run in check mode.
            message = "check mode: a real run fails here unless a task before this one fills the folder: " + incomplete
            module.warn(message)
            module.exit_json(msg=message, **result)
        module.fail_json(msg=incomplete, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
