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
    on the way to quay.io drop connections under load. Errors another attempt cannot fix (a tag the registry
    does not have, a login it needs, no build for the host's architecture) fail at once, with their own fix.
  - The name is checked against docker's grammar of image references before any call, and every name given
    to docker follows C(--), so no value can become an option of docker.
  - With C(digest), the pulled image's repository digests must contain it, so a re-pushed tag is caught.
  - With C(platform), an image of another platform counts as absent, and the pulled image must be of that
    platform, so that a mirror that copied only one platform of a multi-arch tag is caught before a container
    fails with C(exec format error).
  - Uses the Docker CLI only; needs no Python Docker SDK on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  name:
    description:
      - Image reference with its tag, for example C(quay.io/ascend/vllm-ascend:v0.18.0rc1-310p).
      - It may end in C(@sha256:<digest>); C(digest), when given too, must be the same.
    type: str
    required: true
  pull_from:
    description:
      - Where to pull the image from when C(name) is not on the host, another name for the same image, for example
        a mirror's (C(quay.nju.edu.cn/ascend/vllm-ascend:v0.18.0rc1-310p),
        C(m.daocloud.io/quay.io/ascend/vllm-ascend:v0.18.0rc1-310p)) or another registry's.
      - The pulled image is then tagged C(name), the name containers run it by, so which mirror a host pulled from
        changes no container. The pulled name stays on the host too (its repository digest is what C(digest) is
        checked against). Default C(name) itself.
    type: str
  registry_username:
    description:
      - Account to log in to the registry of C(pull_from) (or of C(name)) with before pulling, for a registry that
        needs a login (Huawei SWR, a site's own). Requires C(registry_password).
      - The login lives in a Docker CLI config folder of this pull alone (C(docker --config)), removed when the
        pull ends; the password is never kept on the host, never on a command line, and the host's own
        C(~/.docker/config.json) is left as it is.
    type: str
  registry_password:
    description: Password or token for C(registry_username), given to C(docker login --password-stdin). Never logged.
    type: str
  refresh:
    description:
      - Pull even when the image is present, to have the tag as the registry serves it now (a host's image stays as
        it is without it, so a roll replaces nothing unasked). Changed only when the pull brought another image.
      - The image archive's save sets it, so that an archive holds what the registry serves, not what this machine
        pulled long ago. In check mode a present image is reported as it is.
    type: bool
    default: false
  digest:
    description: Expected content digest of the image in its registry, C(sha256:) and 64 lowercase hex digits.
    type: str
  platform:
    description:
      - The platform the host runs images of, C(os/architecture[/variant]) as Docker names it, for example
        C(linux/arm64) on a Kunpeng host, C(linux/amd64) on an x86_64 one. The variant is not compared.
      - The pull asks for it with C(--platform) only where the Docker engine's own platform differs (an engine
        older than 20.10 accepts C(--platform) only with its experimental features on); otherwise the engine
        pulls its own platform.
      - C(host) is this host's own, C(linux/) and the machine its kernel names (C(aarch64) is C(arm64),
        C(x86_64) is C(amd64)); no facts need to be gathered for it.
      - Default none, the engine's own platform, unchecked.
    type: str
  retries:
    description: Pull attempts before giving up (at least 1).
    type: int
    default: 5
  delay:
    description: Seconds before the second attempt; doubled after each failure (0 or more).
    type: float
    default: 5
  max_delay:
    description: Longest wait between two attempts, in seconds (0 or more).
    type: float
    default: 120
  timeout:
    description:
      - Seconds one pull attempt may take before it is stopped and retried (0 for no limit). The image is many
        GB, and a pull that hangs on a dead connection would otherwise never end. Layers already downloaded are
        kept for the next attempt.
      - It bounds each attempt, not the whole call, so that an attempt stopped on a dead connection is retried.
        The call may take O(retries) times it, the waits between attempts, and at most 2 minutes for each other
        Docker call (login, inspect, tag). Run the task with C(async) to bound it whole.
    type: int
    default: 3600
  docker:
    description: Docker CLI to run.
    type: str
    default: docker
  expect_env:
    description:
      - Variables the image's environment (C(docker image inspect)'s C(.Config.Env)) must set, each to a value
        starting with the one given here, case aside - for example C(SOC_VERSION) C(Ascend310P), the chip a
        vLLM-Ascend image is built for. An image that does not (found on the host or just pulled) fails the task,
        naming what it sets and O(expect_env_fix).
      - In check mode an image that would be pulled has no environment to read yet; the real run checks it.
    type: dict
    default: {}
  expect_env_fix:
    description: The fix the failure of O(expect_env) names.
    type: str
    default: ""
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Can run in check mode and report whether a pull would happen.
    support: full
    details: Where C(docker) cannot run yet (in a check run the docker_runtime role installs nothing), it
      reports that a pull would happen instead of failing.
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: A pulled image has no before and after worth a diff; C(image_id) and C(repo_digests) tell what
      is there.
"""

EXAMPLES = r"""
- name: Pull the vLLM-Ascend image through a mirror
  ascend.fleet.docker_image_pull:
    name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
    pull_from: registry.example.cn/ascend/vllm-ascend:v0.18.0rc1-310p
    retries: 8

- name: Pull it from Huawei SWR, which needs a login
  ascend.fleet.docker_image_pull:
    name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
    pull_from: swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.18.0rc1-310p
    registry_username: "{{ swr_username }}"
    registry_password: "{{ swr_password }}"

- name: Pull the build for the host's architecture (a multi-arch tag has one per platform)
  ascend.fleet.docker_image_pull:
    name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
    platform: linux/arm64

- name: Pull the build for this host's own platform, whatever it is
  ascend.fleet.docker_image_pull:
    name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
    platform: host

- name: Pull it pinned by digest
  ascend.fleet.docker_image_pull:
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
platform:
  description: The image's platform, C(os/architecture), as C(docker image inspect) names it.
  returned: success, except in check mode when a pull would be needed
  type: str
  sample: linux/arm64
env:
  description: The image's environment, C(NAME=value) lines as C(docker image inspect) gives C(.Config.Env).
  returned: success, except in check mode when a pull would be needed
  type: list
  elements: str
  sample: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SOC_VERSION=ascend310p3"]
pulled_from:
  description: The name the image was pulled by (C(pull_from), or C(name)).
  returned: when the image was pulled
  type: str
  sample: m.daocloud.io/quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
attempts:
  description: Pull attempts made (0 when the image was already there, and in check mode).
  returned: always, except when an option is invalid or docker cannot run
  type: int
  sample: 1
errors:
  description: The last line of each failed pull's output, oldest first.
  returned: when every pull attempt failed, or one failed with an error another attempt cannot fix
  type: list
  elements: str
  sample: ["Error response from daemon: Get \"https://quay.io/v2/\": net/http: TLS handshake timeout"]
msg:
  description: What would happen (in check mode), or why the module failed and how to fix it.
  returned: in check mode when a pull would be needed, and on failure
  type: str
  sample: would pull quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.image_pull import (
    PullError,
    check_options,
    make_present,
    own_platform,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            pull_from=dict(type="str"),
            digest=dict(type="str"),
            platform=dict(type="str"),
            retries=dict(type="int", default=5),
            timeout=dict(type="int", default=3600),
            delay=dict(type="float", default=5),
            max_delay=dict(type="float", default=120),
            docker=dict(type="str", default="docker"),
            registry_username=dict(type="str"),
            registry_password=dict(type="str", no_log=True),
            refresh=dict(type="bool", default=False),
            expect_env=dict(type="dict", default={}),
            expect_env_fix=dict(type="str", default=""),
        ),
        required_together=[("registry_username", "registry_password")],
        supports_check_mode=True,
    )
    try:
        params = dict(module.params, platform=own_platform(module.params["platform"]))
        check_options(params)
        result = make_present(params, module.check_mode)
    except PullError as error:
        module.fail_json(msg=str(error), **error.result)
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the image, not a traceback
        module.fail_json(msg=unexpected_failure("making the image %s present" % module.params["name"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
