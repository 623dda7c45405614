# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the docker_image_pull module does (library/docker_image_pull.py holds its documentation and main()): the
image made present on a host, pulled with retries from a mirror and named as the containers run it, its
platform and digest checked, a registry login kept to the pull; every option checked before any Docker call."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import re
import shutil
import tempfile
import time

from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable, run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    text_given,
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


def own_platform(platform):
    """The platform option as docker takes it: C(host) is this host's own, linux/ and the machine its kernel names,
    in Docker's words (aarch64 is arm64, x86_64 amd64)."""
    return os_architecture("linux/" + os.uname().machine) if platform == "host" else platform


def found(image):
    """What the module tells of an image it found: its ID, digests, platform and environment (NAME=value lines)."""
    return dict(image_id=image.get("Id"), repo_digests=image.get("RepoDigests") or [], platform=platform_of(image),
                env=(image.get("Config") or {}).get("Env") or [])


def env_refusal(name, env, expected, fix):
    """Why an image whose environment is env (NAME=value lines) is not the one asked for, or None: each NAME of
    expected must be set to a value starting with its prefix (case aside). The message names the image, what it
    sets, what was required and fix."""
    values = dict(line.split("=", 1) for line in env if "=" in line)
    for variable, prefix in sorted(expected.items()):
        value = values.get(variable)
        if value is None or not value.lower().startswith(prefix.lower()):
            return "%s is built for %s; required %s starting with %s. Fix: %s" % (
                name, "%s=%s" % (variable, value) if value is not None else "no %s" % variable, variable, prefix,
                fix or "use an image built for it")
    return None


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
    for variable, prefix in params["expect_env"].items():
        if not isinstance(prefix, str) or not prefix or not variable:
            raise OptionError("expect_env %s: %r: expected a variable's name and the text its value starts with, such "
                              "as SOC_VERSION: Ascend310P. Fix: correct expect_env" % (variable, prefix))
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


def make_present(params, check_mode):
    """The module's result once the image is there (in check mode: what would happen)."""
    name, digest, docker = params["name"], params["digest"], params["docker"]
    source = params["pull_from"] or name
    try:
        image = inspect(docker, name)
    except DockerUnavailable as error:
        if not check_mode:
            raise
        # In a check run the docker_runtime role before this one installs nothing.
        return dict(changed=True, attempts=0, msg="would pull %s; %s yet, which a real run needs: the "
                                                  "docker_runtime role installs the Docker CLI" % (source, error.why))
    wanted = params["platform"]
    present = image and (not digest or has_digest(image, digest)) and (not wanted or same_platform(image, wanted))
    if present and (not params["refresh"] or check_mode):
        return expected_image(params, dict(found(image), changed=False, attempts=0))
    if check_mode:
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
    return expected_image(params, dict(found(image), changed=not (present and image.get("Id") == before),
                                       attempts=attempts, pulled_from=source))


def expected_image(params, result):
    """result, once the image's environment is what expect_env asks; else a PullError saying what it is."""
    refusal = env_refusal(params["name"], result["env"], params["expect_env"], params["expect_env_fix"])
    if refusal:
        raise PullError(refusal, **result)
    return result
