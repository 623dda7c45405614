# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's serving plan as its contract: checked against the host before anything changes, completed with where
each instance's files are, recorded, and made true of the host's containers (instances it no longer has are
removed). The vllm_plan module runs it; vllm_instance then owns each instance the plan names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import secrets
import string

from ansible.module_utils.docker_cli import run_docker
from ansible.module_utils.npu_holders import foreign_holders
from ansible.module_utils.vllm_instance import (
    ASIDE_CONTAINER,
    DockerError,
    Instance,
    instance_files,
    read_text,
    write_atomically,
)

SALT_CHARACTERS = string.ascii_letters + string.digits


class HostRefused(Exception):
    """The host cannot take the plan; the message says what is missing or in the way, and the fix."""


def complete(plan, config_dir):
    """The plan with each instance's container, script and env file."""
    instances = [dict(instance, container=instance["name"], **instance_files(config_dir, instance["name"]))
                 for instance in plan["instances"]]
    return dict(plan, instances=instances)


def plan_text(plan):
    """The plan file's text: indented and sorted, as an operator reads it."""
    return json.dumps(plan, indent=4, sort_keys=True) + "\n"


def refusals(plan, required_paths, docker, label_prefix, runner=run_docker):
    """What would make every instance fail at start, as sentences: mount sources that do not exist, and running
    containers of other owners that map planned chips."""
    found = []
    missing = ["%s (set by %s)" % (path, variable) for path, variable in sorted(required_paths.items())
               if not os.path.exists(path)]
    if missing:
        found.append(
            "%s lacks what every vLLM container mounts: %s. Fix: install the Ascend driver (it provides the driver "
            "files, npu-smi and dcmi), stage the model (model_weights), or set the variable named to where the path "
            "is on this host" % (plan["host"], "; ".join(missing)))
    planned = sorted(device for instance in plan["instances"] for device in instance["devices"])
    holders = foreign_holders(docker, planned, label_prefix, runner)
    if holders:
        found.append(
            "Chips planned on %s are held by containers not deployed here by this collection: %s. A chip opens in "
            "one container only: ours would fail at start (drvRet=87, resources are busy). Fix: stop those "
            "containers, or leave their cards out of the plan (ascend_preflight_unhealthy_chip_action does so for "
            "unhealthy cards only; stop the container)" % (plan["host"], "; ".join(holders)))
    return found


def stale_instances(plan, docker, label_prefix, runner=run_docker):
    """This host's containers of instances the plan no longer has. A planned instance's <name>-previous is the
    last container that served it, left by an interrupted replacement: vllm_instance puts it back, so it stays."""
    code, out, err = runner(docker, "ps", "--all", "--format", "{{.Names}}", "--filter",
                            "label=%s.host=%s" % (label_prefix, plan["host"]))
    if code != 0:
        raise DockerError("`docker ps` failed: %s" % (err.strip() or "exit code %s" % code))
    kept = set(name for instance in plan["instances"] for name in (instance["name"],
                                                                   instance["name"] + ASIDE_CONTAINER))
    names = sorted(set(out.split()) - kept)
    return sorted(set(name[:-len(ASIDE_CONTAINER)] if name.endswith(ASIDE_CONTAINER) else name for name in names))


def record(plan, path, config_dir, cache_dir, salt_file, docker, label_prefix, check_mode, runner=run_docker):
    """Makes the host hold the plan: its folders, its salt, no instance it no longer has, the plan file.
    Returns (changed, the names of the instances removed)."""
    changed = False
    for folder, mode in ((config_dir, 0o750), (cache_dir, 0o700)):
        if not os.path.isdir(folder):
            changed = True
            if not check_mode:
                os.makedirs(folder, mode)
                os.chmod(folder, mode)
    if not os.path.exists(salt_file):
        changed = True
        if not check_mode:
            write_atomically(salt_file, "".join(secrets.choice(SALT_CHARACTERS) for _ in range(32)), 0o600)
    stale = stale_instances(plan, docker, label_prefix, runner)
    for name in stale:
        files = instance_files(config_dir, name)
        if not check_mode:
            Instance(docker, name, files["script"], files["env_file"], [], "", "", "", label_prefix, [],
                     runner=runner).remove()
    text = plan_text(plan)
    if read_text(path, None) != text:
        changed = True
        if not check_mode:
            write_atomically(path, text, 0o644)
    return changed or bool(stale), stale
