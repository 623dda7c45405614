# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's serving plan as its contract: checked against the host before anything changes, completed with where
each instance's files are, recorded, and made true of the host's containers (instances it no longer has are
removed); and read back, checked, by everything that serves from it. The vllm_plan module writes it (its RETURN
documents the fields), vllm_plan_info reads it for the gateway, the benchmark and teardown, fleet_verify for the
verification.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import secrets
import string

from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import HOST_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import foreign_holders
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import (
    ASIDE_CONTAINER,
    DockerError,
    Instance,
    instance_files,
    read_text,
    write_atomically,
)

SALT_CHARACTERS = string.ascii_letters + string.digits
# Docker's rule for container names, which instances' names are; for fullmatch (re.match's `$` lets a name end in a
# line break, which would start a new line wherever the name is written).
INSTANCE_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
# The layout of the plan file: a reader refuses another, so that no field is read with another meaning.
PLAN_FORMAT = 1
FIX_DEPLOY = "Fix: deploy the host again (ansible-playbook site.yml --tags server --limit %s), which rewrites it"


class PlanError(Exception):
    """A plan file that is not one vllm_plan wrote for this host; the message names it, what is wrong and the fix."""


def complete(plan, config_dir):
    """The plan as recorded: its format, and each instance's container, script and env file."""
    instances = [dict(instance, container=instance["name"], **instance_files(config_dir, instance["name"]))
                 for instance in plan["instances"]]
    return dict(plan, format=PLAN_FORMAT, instances=instances)


def check(plan, host, path):
    """The plan, once it is one vllm_plan wrote for host, with instances named as containers are and on usable ports;
    PlanError otherwise. A name is a container's, a server's in haproxy.cfg and the stem of the instance's files:
    one that is not a container name could climb out of the config folder or add lines where it is written."""
    where = "serving plan of %s (%s)" % (host, path)
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        found = plan.get("format") if isinstance(plan, dict) else type(plan).__name__
        raise PlanError("%s: format %s, expected %d. %s" % (where, json.dumps(found), PLAN_FORMAT, FIX_DEPLOY % host))
    if plan.get("host") != host:
        raise PlanError("%s: it is the plan of %s, not of %s (a copied file?). %s" % (
            where, json.dumps(plan.get("host")), host, FIX_DEPLOY % host))
    instances = plan.get("instances")
    if not isinstance(instances, list) or not instances:
        raise PlanError("%s: no instances. %s" % (where, FIX_DEPLOY % host))
    for instance in instances:
        name = instance.get("name") if isinstance(instance, dict) else None
        if not isinstance(name, str) or not INSTANCE_NAME.fullmatch(name):
            raise PlanError("%s: instance %s, expected one whose name is a container name (letters, digits, '_', "
                            "'.' and '-', starting with a letter or digit, nothing else). %s"
                            % (where, json.dumps(instance)[:200], FIX_DEPLOY % host))
        port = instance.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise PlanError("%s: instance %s has port %s, expected a number from 1 to 65535. %s" % (
                where, json.dumps(name), json.dumps(port), FIX_DEPLOY % host))
    return plan


def read(path, host):
    """The checked plan recorded at path for host, or None when there is no file (the host is not deployed yet)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise PlanError("serving plan of %s: could not read it (%s). Fix: check that the connection to %s may "
                        "read %s (become)" % (host, error, host, path)) from None
    try:
        plan = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError; RecursionError: nested too deep
        raise PlanError("serving plan of %s: %s is not JSON (%s). %s" % (
            host, path, error, FIX_DEPLOY % host)) from None
    return check(plan, host, path)


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


def labelled_instances(host, docker, label_prefix, runner=run_docker):
    """The instances this host's labelled containers belong to (<name>-previous belongs to <name>)."""
    code, out, err = runner(docker, "ps", "--all", "--format", "{{.Names}}", "--filter",
                            "label=%s=%s" % (label_name(label_prefix, HOST_LABEL), host))
    if code != 0:
        raise DockerError("`docker ps` failed: %s" % (err.strip() or "exit code %s" % code))
    return set(name[:-len(ASIDE_CONTAINER)] if name.endswith(ASIDE_CONTAINER) else name for name in out.split())


def stale_instances(plan, docker, label_prefix, runner=run_docker):
    """This host's instances the plan no longer has. A planned instance's <name>-previous is the last container
    that served it, left by an interrupted replacement: vllm_instance puts it back, so it stays."""
    planned = set(instance["name"] for instance in plan["instances"])
    return sorted(labelled_instances(plan["host"], docker, label_prefix, runner) - planned)


def remove_instance(name, config_dir, docker, label_prefix, runner):
    files = instance_files(config_dir, name)
    return Instance(docker, name, files["script"], files["env_file"], [], "", "", "", label_prefix, [],
                    runner=runner).remove()


def record(plan, path, config_dir, cache_dir, salt_file, docker, label_prefix, check_mode, keep_stale=False,
           runner=run_docker):
    """Makes the host hold the plan: its folders, its salt, the plan file, and no instance it no longer has unless
    keep_stale (they are then for the caller to drain and remove). Returns (changed, the names of the instances
    the plan no longer has, whether they were removed)."""
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
            write_atomically(salt_file, "".join(secrets.choice(SALT_CHARACTERS) for position in range(32)), 0o600)
    stale = stale_instances(plan, docker, label_prefix, runner)
    removing = stale and not keep_stale
    for name in stale if removing and not check_mode else []:
        remove_instance(name, config_dir, docker, label_prefix, runner)
    text = plan_text(plan)
    if read_text(path, None) != text:
        changed = True
        if not check_mode:
            write_atomically(path, text, 0o644)
    return changed or bool(removing), stale, bool(removing)


def remove_all(path, host, config_dir, salt_file, docker, label_prefix, check_mode, runner=run_docker):
    """Takes everything the deploy made on the host away: every instance the plan names or a label finds (a
    container set aside by an interrupted replacement, one of a plan whose file is gone) with its files, the plan,
    the salt, and the config folder if nothing else is in it (it may be shared with other tools). Reads the plan
    first, so a plan that is not this host's stops it before anything is removed.
    Returns (changed, the instances removed, the plan or None)."""
    plan = read(path, host)
    names = sorted(labelled_instances(host, docker, label_prefix, runner)
                   | set(instance["name"] for instance in (plan or {}).get("instances", [])))
    changed = False
    for name in names:
        if check_mode:
            changed = True
        else:
            changed = remove_instance(name, config_dir, docker, label_prefix, runner) or changed
    for leftover in (path, salt_file):
        if os.path.lexists(leftover):
            changed = True
            if not check_mode:
                os.unlink(leftover)
    if not check_mode and os.path.isdir(config_dir) and not os.listdir(config_dir):
        os.rmdir(config_dir)
        changed = True
    return changed, names, plan
