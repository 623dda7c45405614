#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module model_download: a model repository from ModelScope or a Hugging Face hub, at a pinned revision,
every file checked against the hub's checksum, interrupted downloads resumed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_download
short_description: Download a model at a pinned revision from ModelScope, hf-mirror or Hugging Face, checksummed
description:
  - Lists the files of C(repo) at C(revision) through the hub's own API (ModelScope's
    C(/api/v1/models/<repo>/repo/files), or the Hugging Face Hub's C(/api/models/<repo>/tree/<commit>), which
    hf-mirror.com serves too), then makes C(path) hold every one of them.
  - Each file is checked against the checksum the hub lists for it (sha256 of the content; for a small file on a
    Hugging Face hub, its git blob sha1). A file whose download does not match is fetched again, up to
    C(retries) times, and never put in place.
  - A download cut short (a dropped connection, a stopped run) is kept beside the folder's files in
    C(.fleet-download/) and resumed with an HTTP range request on the next attempt or the next run.
  - What was verified is recorded in C(path)/C(.fleet-download.json). A later run for the same source, repository
    and revision whose files have not changed since (same size and modification time) asks the hub nothing, so
    a fleet that has its model can run without the hub. A file changed on disk is hashed again, and fetched again
    if it no longer matches.
  - File names from the hub are checked before use (a name that is absolute, climbs out with C(..) or is not a
    plain path is refused), and a file is never longer than the hub listed it.
  - Uses Python's standard library only; honours C(https_proxy) and C(no_proxy) from the environment.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  path:
    description: The model folder on the host, as an absolute path. Created when missing.
    type: path
    required: true
  source:
    description:
      - Which hub, and so which API. C(modelscope) (modelscope.cn), C(hf_mirror) (hf-mirror.com, a mirror of the
        Hugging Face Hub reachable from China) or C(huggingface) (huggingface.co).
    type: str
    required: true
    choices: [modelscope, hf_mirror, huggingface]
  endpoint:
    description:
      - The hub's address, for a site's own mirror of it. Default the source's public address
        (C(https://www.modelscope.cn), C(https://hf-mirror.com), C(https://huggingface.co)).
    type: str
  repo:
    description: The model's repository, as the hub names it, for example C(Qwen/Qwen3-VL-8B-Instruct).
    type: str
    required: true
  revision:
    description:
      - What to download. On a Hugging Face hub, a 40-hex commit pins the files; a branch or tag is resolved to
        its commit, which is returned. On ModelScope, a tag (C(v1.0.0)) or a branch (C(master)).
      - A branch moves; the record makes later runs keep what was verified until the revision changes.
    type: str
    required: true
  token:
    description:
      - Access token for a gated or private repository (sent as C(Authorization Bearer), and as ModelScope's
        session cookie). Never logged. It is not sent on to another host a download redirects to.
    type: str
  timeout:
    description:
      - Seconds to wait for the hub to answer or send more bytes before the attempt counts as failed.
      - It bounds each wait, not the whole call, whose length is the model's size (many GB) over the hub's speed.
        Run the task with C(async) to bound that (the model_weights role does).
    type: float
    default: 60
  retries:
    description: Attempts per file (a checksum that does not match, a dropped connection) before giving up.
    type: int
    default: 3
  required:
    description:
      - Files the folder must hold once the repository is in it, named inside it (C(config.json)); one the
        repository does not have, or an empty one, fails the download, naming it. Not checked in check mode.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Lists the files and checks the folder; reports what would be downloaded, downloads nothing.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: The changed files are returned in C(downloaded).
"""

EXAMPLES = r"""
- name: Qwen3-VL-8B-Instruct from ModelScope
  ascend.fleet.model_download:
    path: /data/models/Qwen3-VL-8B-Instruct
    source: modelscope
    repo: Qwen/Qwen3-VL-8B-Instruct
    revision: master

- name: The same model from hf-mirror.com, pinned to a commit
  ascend.fleet.model_download:
    path: /data/models/Qwen3-VL-8B-Instruct
    source: hf_mirror
    repo: Qwen/Qwen3-VL-8B-Instruct
    revision: 0123456789abcdef0123456789abcdef01234567
"""

RETURN = r"""
commit:
  description: What the files were listed at, the commit a Hugging Face revision resolves to (or the ModelScope
    revision as given).
  returned: always
  type: str
  sample: "0123456789abcdef0123456789abcdef01234567"
files:
  description: Files in the repository at that revision.
  returned: always
  type: int
  sample: 17
downloaded:
  description: Files fetched by this run (in check mode, those that would be).
  returned: always
  type: list
  elements: str
  sample: ["model-00002-of-00004.safetensors"]
removed:
  description: Files an earlier revision downloaded into the folder that this revision no longer has, removed.
  returned: always
  type: list
  elements: str
  sample: []
resumed:
  description: Files whose download went on from where an earlier attempt stopped.
  returned: always
  type: list
  elements: str
  sample: []
refetched:
  description: Files fetched again because what was on disk or what arrived did not match the hub's checksum.
  returned: always
  type: list
  elements: str
  sample: ["model-00003-of-00004.safetensors (sha256 4f2a... is not the listed 9c1e...)"]
bytes:
  description: Bytes received from the hub by this run.
  returned: always
  type: int
  sample: 4915962496
hub_asked:
  description: Whether the hub was asked (false when the record showed the folder complete and unchanged).
  returned: always
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.model_fetch import ENDPOINTS, DownloadError, download
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            source=dict(type="str", required=True, choices=sorted(ENDPOINTS)),
            endpoint=dict(type="str"),
            repo=dict(type="str", required=True),
            revision=dict(type="str", required=True),
            token=dict(type="str", no_log=True),
            timeout=dict(type="float", default=60),
            retries=dict(type="int", default=3),
            required=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        result = download(module.params, module.check_mode)
    except (DownloadError, OptionError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the model, not a traceback
        doing = "downloading %s into %s" % (module.params["repo"], module.params["path"])
        module.fail_json(msg=unexpected_failure(doing, error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
