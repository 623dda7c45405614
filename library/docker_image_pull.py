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

import contextlib
import json
import os
import re
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable, run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    text_given,
    unexpected_failure,
)

# Docker's grammar of image references (github.com/distribution/reference, regexp.go), checked before any call:
# docker would refuse a name that does not match it, and retrying that, blamed on the network, helps nobody.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = r"(?:%s(?:\.%s)*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?" % (_DOMAIN_COMPONENT, _DOMAIN_COMPONENT)
REFERENCE = re.compile(r"(?P<name>(?:%s/)?%s(?:/%s)*)(?::[\w][\w.-]{0,127})?"
                       r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
                       % (_DOMAIN, _PATH_COMPONENT, _PATH_COMPONENT), re.ASCII)
NAME_MAX = 255
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# os/architecture[/variant], as docker's --platform takes it (linux/arm64, linux/arm64/v8, linux/amd64).
PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?")
MACHINE_NAMES = {"aarch64": "arm64", "x86_64": "amd64"}
REFERENCE_FORM = ("an image reference, [registry[:port]/]repository[:tag][@sha256:<digest>], for example "
                  "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p")
# Pull errors another attempt cannot fix, as docker words them (lower case), with their fix; the first that the
# error holds decides, so the narrower wordings come first.
PERMANENT = (
    ("invalid reference format", "correct the image name (fleet_image, or the fleet_image_* settings it is made of)"),
    ("permission denied while trying to connect to the docker daemon",
     "run the task as root (become: true) or as a member of the docker group"),
    ("no matching manifest", "the image has no build for this host's architecture: pick a tag built for it"),
    ("only supported on a docker daemon with experimental", "this Docker engine (older than 20.10) pulls another "
                                                            "platform only with its experimental features on: "
                                                            "enable them (\"experimental\": true in daemon.json), "
                                                            "or set vllm_image_platform to the engine's own"),
    ("manifest unknown", "the tag is not in the registry: check fleet_image_version against the registry's tags, "
                         "or that the mirror (fleet_image_registry_mirror) holds it"),
    ("repository does not exist", "check fleet_image_repository, or, for a registry that needs a login, set "
                                  "vllm_image_registry_username and vllm_image_registry_password"),
    ("name unknown", "the repository is not in the registry: check fleet_image_repository"),
    ("unauthorized", "set vllm_image_registry_username and vllm_image_registry_password (from a vault) to an "
                     "account of that registry, or use a mirror that needs no login"),
    ("requested access to the resource is denied", "set vllm_image_registry_username and "
                                                   "vllm_image_registry_password to an account that may pull the "
                                                   "image"),
)
DAEMON_DOWN = "cannot connect to the docker daemon"
# How registries answer a login with the wrong account (docker prints them lower or upper case).
REFUSED_LOGIN = ("unauthorized", "incorrect username or password", "denied", "authentication required")


class PullError(Exception):
    """The image could not be made present; the message says why and how to fix it, result what else to return."""

    def __init__(self, message, **result):
        super(PullError, self).__init__(message)
        self.result = result


def inspect(docker, name):
    """What `docker image inspect` says of the image, or None when it has no such image."""
    code, out, err = run_docker(docker, "image", "inspect", "--", name)
    if code is None:
        raise PullError("`%s image inspect -- %s` %s: the Docker daemon does not answer. Fix: check it "
                        "(systemctl status docker, journalctl -u docker) and restart it" % (docker, name, err))
    if code != 0:
        return None
    try:
        described = json.loads(out)
    except ValueError:
        described = None
    if not (isinstance(described, list) and described and isinstance(described[0], dict)):
        raise PullError("`%s image inspect -- %s` answered exit 0 but not the JSON list of image descriptions the "
                        "Docker CLI prints: %r. Fix: check that docker (%s) is the Docker CLI and not a wrapper "
                        "that prints something else" % (docker, name, out[:200], docker))
    return described[0]


def platform_of(image):
    """os/architecture of an image as docker inspects it."""
    return "%s/%s" % (image.get("Os") or "?", image.get("Architecture") or "?")


def os_architecture(platform):
    """os/architecture of a platform as docker inspects images: no variant, and the machine names Docker also
    takes (linux/aarch64, linux/x86_64) as the architectures images are labelled with."""
    parts = platform.split("/")[:2]
    return "/".join(parts[:1] + [MACHINE_NAMES.get(part, part) for part in parts[1:]])


def same_platform(image, wanted):
    """Whether an image is of the platform wanted (the variant is not compared)."""
    return platform_of(image) == os_architecture(wanted)


def engine_platform(docker):
    """os/architecture the Docker engine pulls by default, or None when it does not say."""
    code, out, _err = run_docker(docker, "version", "--format", "{{.Server.Os}}/{{.Server.Arch}}")
    return os_architecture(out.strip()) if code == 0 and PLATFORM.fullmatch(out.strip()) else None


def registry_of(name):
    first = name.split("/")[0]
    return first if "/" in name and ("." in first or ":" in first or first == "localhost") else "docker.io"


def has_digest(image, digest):
    return any(isinstance(entry, str) and entry.endswith("@" + digest) for entry in image.get("RepoDigests") or [])


def reference_problem(name):
    """What keeps name from being an image reference docker accepts (worded after `name <name>`), or None."""
    if not name:
        return "is empty"
    if name.startswith("-"):
        return "%r starts with '-', which docker would read as an option" % name
    if any(character.isspace() for character in name):
        return "%r holds white space" % name
    found = REFERENCE.fullmatch(name)
    if not found:
        if REFERENCE.fullmatch(name.lower()):
            return "%r has capital letters where docker requires lowercase (the repository path)" % name
        return "%r is not an image reference" % name
    if len(found.group("name")) > NAME_MAX:
        return "%r is longer than docker's %d characters for a repository name" % (name, NAME_MAX)
    if found.group("digest") and found.group("digest").startswith("sha256:") and not DIGEST.fullmatch(
            found.group("digest")):
        return "%r names a sha256 digest that is not 64 lowercase hex digits" % name
    return None


def check_options(params):
    name, digest = params["name"], params["digest"]
    problem = reference_problem(name)
    if problem:
        raise OptionError("name %s: expected %s. Fix: correct fleet_image (or the fleet_image_* settings it is "
                          "made of)" % (problem, REFERENCE_FORM))
    if params["pull_from"] is not None:
        problem = reference_problem(params["pull_from"])
        if problem:
            raise OptionError("pull_from %s: expected %s. Fix: correct fleet_image_pull_from, or the mirror it is "
                              "made of (fleet_image_registry_mirror: a host, or a prefix such as "
                              "m.daocloud.io/quay.io)" % (problem, REFERENCE_FORM))
        if params["pull_from"] != name and REFERENCE.fullmatch(name).group("digest"):
            raise OptionError("name %r pins a digest, which docker cannot give as a name to an image pulled from %s. "
                              "Fix: name the image by its tag in fleet_image and pin the digest in vllm_image_digest"
                              % (name, params["pull_from"]))
    if params["registry_username"] is not None or params["registry_password"] is not None:
        if not params["registry_username"] or not params["registry_password"]:
            raise OptionError("registry_username and registry_password: expected both, or neither (%s is empty). "
                              "Fix: set vllm_image_registry_username and vllm_image_registry_password together, "
                              "the password from a vault" % ("registry_username" if not params["registry_username"]
                                                             else "registry_password"))
    if params["platform"] is not None and not PLATFORM.fullmatch(params["platform"]):
        raise OptionError("platform %r: expected os/architecture[/variant] as docker names it, for example "
                          "linux/arm64 or linux/amd64. Fix: correct vllm_image_platform, or leave it empty for the "
                          "host's own" % params["platform"])
    if digest and not DIGEST.fullmatch(digest):
        raise OptionError("digest %r: expected sha256: and 64 lowercase hex digits, as `docker images --digests` "
                          "shows. Fix: copy the whole digest into vllm_image_digest" % digest)
    named = REFERENCE.fullmatch(name).group("digest")
    if digest and named and named != digest:
        raise OptionError("name %r names the digest %s but digest is %s: expected one digest. Fix: pin the image "
                          "in one place, vllm_image_digest" % (name, named, digest))
    number_at_least(params, "retries", 1, "set vllm_image_pull_retries to 1 or more")
    number_at_least(params, "timeout", 0, "set vllm_image_pull_timeout to the seconds one attempt may take, or 0")
    number_at_least(params, "delay", 0, "set vllm_image_pull_delay to the seconds before the second attempt")
    number_at_least(params, "max_delay", 0, "give the longest wait between attempts, in seconds")
    text_given(params, "docker", "the Docker CLI to run, such as docker or /usr/bin/docker",
               "set fleet_docker_bin")


@contextlib.contextmanager
def logged_in(params, name):
    """The Docker CLI options that pull name logged in: none without an account, else a config folder of this
    pull alone, logged in to name's registry and removed after, so the password outlives the pull nowhere."""
    if not params["registry_username"]:
        yield []
        return
    registry, folder = registry_of(name), tempfile.mkdtemp(prefix="ascend-fleet-docker-")
    try:
        # A config that names the registry already: the Docker CLI then keeps the login in this file, and does not
        # go looking for a credential helper (pass, a desktop keyring) that would keep it after the folder is gone.
        with open(os.path.join(folder, "config.json"), "w") as config:
            json.dump({"auths": {registry: {}}}, config)
        log_in(params, folder, registry)
        yield ["--config", folder]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def log_in(params, folder, registry):
    """docker login, the password on stdin; retried like a pull when the registry cannot be reached."""
    delay = params["delay"]
    for attempt in range(1, params["retries"] + 1):
        code, out, err = run_docker(params["docker"], "--config", folder, "login", "--username",
                                    params["registry_username"], "--password-stdin", "--", registry,
                                    stdin=params["registry_password"])
        if code == 0:
            return
        lines = (err.strip() or out.strip()).splitlines()
        error = lines[-1] if lines else "exit %s" % code
        if any(wording in error.lower() for wording in REFUSED_LOGIN):
            raise PullError("could not log in to %s as %s: %s. Fix: check vllm_image_registry_username and "
                            "vllm_image_registry_password (in your vault) against the registry's account"
                            % (registry, params["registry_username"], error), attempts=0)
        if attempt < params["retries"]:
            time.sleep(delay)
            delay = min(delay * 2, params["max_delay"])
    raise PullError("could not log in to %s after %d attempts: %s. Fix: check that the host reaches %s (proxy, "
                    "firewall, DNS; a registry without TLS goes in docker_runtime_daemon_options' "
                    "insecure-registries)" % (registry, params["retries"], error, registry), attempts=0)


def pull(params, name):
    """Pull name until it works, retrying what another attempt may fix; the number of attempts made."""
    # Asked for only where the engine says it would pull another: an engine that does not say is left to pull its
    # own, and the image is checked after the pull.
    wanted, engine = params["platform"], None
    if wanted:
        engine = engine_platform(params["docker"])
    asked = ["--platform", wanted] if engine and engine != os_architecture(wanted) else []
    with logged_in(params, name) as login:
        return pull_attempts(params, name, login + ["pull"] + asked)


def pull_attempts(params, name, command):
    docker, retries = params["docker"], params["retries"]
    delay, errors = params["delay"], []
    for attempt in range(1, retries + 1):
        code, out, err = run_docker(docker, *(command + ["--", name]), timeout=params["timeout"])
        if code == 0:
            return attempt
        lines = (err.strip() or out.strip()).splitlines()
        errors.append(lines[-1] if lines else "exit %s" % code)
        permanent = [fix for wording, fix in PERMANENT if wording in errors[-1].lower()]
        if permanent:
            raise PullError("could not pull %s: %s; not retried, as another attempt gets the same answer. Fix: %s"
                            % (name, errors[-1], permanent[0]), attempts=attempt, errors=errors)
        if attempt < retries:
            time.sleep(delay)
            delay = min(delay * 2, params["max_delay"])
    if DAEMON_DOWN in errors[-1].lower():
        fix = "start the Docker daemon (systemctl start docker) and check `journalctl -u docker`"
    else:
        fix = ("check that the host reaches %s (proxy, firewall, DNS), or set fleet_image_registry_mirror to a "
               "registry it can reach, or use vllm_image_offline_tarball to load a `docker save` archive"
               % registry_of(name))
    raise PullError("could not pull %s after %d attempts; last error: %s. Fix: %s" % (name, retries, errors[-1], fix),
                    attempts=retries, errors=errors)


def make_present(module):
    """The module's result once the image is there (in check mode: what would happen)."""
    params = module.params
    name, digest, docker = params["name"], params["digest"], params["docker"]
    source = params["pull_from"] or name
    try:
        image = inspect(docker, name)
    except DockerUnavailable as error:
        if not module.check_mode:
            raise
        # In a check run the docker_runtime role before this one installs nothing.
        return dict(changed=True, attempts=0, msg="would pull %s; %s yet, which a real run needs: the "
                                                  "docker_runtime role installs the Docker CLI" % (source, error.why))
    wanted = params["platform"]
    present = image and (not digest or has_digest(image, digest)) and (not wanted or same_platform(image, wanted))
    if present and (not params["refresh"] or module.check_mode):
        return dict(changed=False, image_id=image.get("Id"), repo_digests=image.get("RepoDigests") or [],
                    platform=platform_of(image), attempts=0)
    if module.check_mode:
        return dict(changed=True, attempts=0, msg="would pull %s" % (
            source if source == name else "%s as %s" % (source, name)))
    before = image.get("Id") if present else None
    attempts = pull(params, source)
    image = inspect(docker, source)
    if image is None:
        raise PullError("`%s pull -- %s` succeeded but `%s image inspect` finds no image %s. Fix: check that the "
                        "daemon keeps images (its storage driver and free disk, `docker info`)"
                        % (docker, source, docker, source), attempts=attempts)
    if wanted and not same_platform(image, wanted):
        raise PullError("%s was pulled but is an image for %s, and this host runs %s: %s serves no %s build under "
                        "that tag (a mirror that copied one platform of the multi-arch tag does that). Fix: pull from "
                        "a registry that has the tag for %s (fleet_image_registry_mirror), or load an archive made "
                        "with `docker pull --platform %s %s && docker save` (vllm_image_offline_tarball)"
                        % (source, platform_of(image), wanted, registry_of(source), wanted, wanted, wanted, name),
                        attempts=attempts)
    if digest and not has_digest(image, digest):
        raise PullError("%s was pulled but its digests are %s, not %s: the tag now points at another image. Fix: pin "
                        "the digest you tested, or update vllm_image_digest after checking the new image"
                        % (source, image.get("RepoDigests"), digest), attempts=attempts)
    if source != name:
        # The containers run the image by name, whichever mirror it came from.
        code, _out, err = run_docker(docker, "tag", "--", source, name)
        if code != 0:
            raise PullError("`%s tag -- %s %s` failed: %s. Fix: check the Docker daemon (`docker info`)"
                            % (docker, source, name, err.strip() or "exit %s" % code), attempts=attempts)
    # A refresh that found the tag where it was changed nothing.
    return dict(changed=not (present and image.get("Id") == before), image_id=image.get("Id"),
                repo_digests=image.get("RepoDigests") or [], platform=platform_of(image), attempts=attempts,
                pulled_from=source)


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
        ),
        required_together=[("registry_username", "registry_password")],
        supports_check_mode=True,
    )
    try:
        check_options(module.params)
        result = make_present(module)
    except PullError as error:
        module.fail_json(msg=str(error), **error.result)
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the image, not a traceback
        module.fail_json(msg=unexpected_failure("making the image %s present" % module.params["name"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
