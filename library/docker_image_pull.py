#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module docker_image_pull: make an image present with the Docker CLI, retrying with backoff."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_image_pull
short_description: Make a Docker image present, pulling it with retries and exponential backoff
description:
  - Does nothing when the image is already present (and, with C(digest), has that digest).
  - Otherwise runs C(docker pull), retrying with exponential backoff, because registries and mirrors
    on the way to quay.io drop connections under load.
  - With C(digest), the pulled image's repository digests must contain it, so a re-pushed tag is caught.
  - Uses the Docker CLI only; needs no Python Docker SDK on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  name:
    description: Image reference with its tag, for example C(quay.io/ascend/vllm-ascend:v0.18.0rc1-310p).
    type: str
    required: true
  digest:
    description: Expected content digest (C(sha256:...)) of the image in its registry.
    type: str
  retries:
    description: Pull attempts before giving up.
    type: int
    default: 5
  delay:
    description: Seconds before the second attempt; doubled after each failure.
    type: float
    default: 5
  max_delay:
    description: Longest wait between two attempts.
    type: float
    default: 120
  docker:
    description: Docker CLI to run.
    type: str
    default: docker
attributes:
  check_mode:
    description: Can run in check mode and report whether a pull would happen.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: A pulled image has no before and after worth a diff; C(image_id) and C(repo_digests) tell what
      is there.
  platform:
    description: Target OS families it runs on.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Pull the vLLM-Ascend image through a mirror
  docker_image_pull:
    name: registry.example.cn/ascend/vllm-ascend:v0.18.0rc1-310p
    retries: 8

- name: Pull it pinned by digest
  docker_image_pull:
    name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
    digest: sha256:4f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c
"""

RETURN = r"""
image_id:
  description: Local image ID after the task.
  returned: success, except in check mode when a pull would be needed
  type: str
  sample: sha256:0f4a2e6c1d...
repo_digests:
  description: Repository digests of the image.
  returned: success, except in check mode when a pull would be needed
  type: list
  elements: str
  sample: ["quay.io/ascend/vllm-ascend@sha256:4f1c..."]
attempts:
  description: Pull attempts made (0 when the image was already there, and in check mode).
  returned: always, except when an option is invalid
  type: int
  sample: 1
errors:
  description: The last line of each failed pull's output, oldest first.
  returned: when every pull attempt failed
  type: list
  elements: str
  sample: ["Error response from daemon: Get \"https://quay.io/v2/\": net/http: TLS handshake timeout"]
msg:
  description: What would happen (in check mode), or why the module failed and how to fix it.
  returned: in check mode when a pull would be needed, and on failure
  type: str
  sample: would pull quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
"""

import json
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule


def inspect(docker, name):
    result = subprocess.run([docker, "image", "inspect", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)[0]


def registry_of(name):
    first = name.split("/")[0]
    return first if "/" in name and ("." in first or ":" in first or first == "localhost") else "docker.io"


def has_digest(image, digest):
    return any(entry.endswith("@" + digest) for entry in image.get("RepoDigests") or [])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            digest=dict(type="str"),
            retries=dict(type="int", default=5),
            delay=dict(type="float", default=5),
            max_delay=dict(type="float", default=120),
            docker=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    name, digest, docker = params["name"], params["digest"], params["docker"]
    if digest and not digest.startswith("sha256:"):
        module.fail_json(msg="digest %r: expected sha256:<64 hex digits>, as `docker images --digests` shows" % digest)
    if params["retries"] < 1:
        module.fail_json(msg="retries is %d: expected at least 1" % params["retries"])
    image = inspect(docker, name)
    if image and (not digest or has_digest(image, digest)):
        module.exit_json(changed=False, image_id=image["Id"], repo_digests=image.get("RepoDigests") or [],
                         attempts=0)
    if module.check_mode:
        module.exit_json(changed=True, attempts=0, msg="would pull %s" % name)
    delay, errors = params["delay"], []
    for attempt in range(1, params["retries"] + 1):
        result = subprocess.run([docker, "pull", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, check=False)
        if result.returncode == 0:
            break
        errors.append(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "exit %d"
                      % result.returncode)
        if attempt < params["retries"]:
            time.sleep(delay)
            delay = min(delay * 2, params["max_delay"])
    else:
        module.fail_json(
            msg="could not pull %s after %d attempts; last error: %s. Fix: check that the host reaches %s "
                "(proxy, firewall, DNS), or set fleet_image_registry_mirror to a registry it can reach, or use "
                "vllm_image_offline_tarball to load a `docker save` archive" % (
                    name, params["retries"], errors[-1], registry_of(name)),
            attempts=params["retries"], errors=errors)
    image = inspect(docker, name)
    if digest and not has_digest(image, digest):
        module.fail_json(msg="%s was pulled but its digests are %s, not %s: the tag now points at another image. "
                             "Fix: pin the digest you tested, or update vllm_image_digest after checking the new "
                             "image" % (name, image.get("RepoDigests"), digest), attempts=attempt)
    module.exit_json(changed=True, image_id=image["Id"], repo_digests=image.get("RepoDigests") or [],
                     attempts=attempt)


if __name__ == "__main__":
    main()
