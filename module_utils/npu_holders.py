# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What holds a host's NPU device nodes: processes with one open, containers that map one, and the one rule for
which device node is a chip.

Used by the npu_holders module (the driver role and preflight), npu_facts (a process's container), vllm_instance (a
chip's node). chip_holders is the one answer to who holds a chip and whether that holder is this collection's: the
preflight and the driver role judge by it, and serving_plan and the doctor's evidence refuse or report a container
of another owner that maps planned chips (a chip opens in one container only: drvRet=87, resources are busy).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import INSTANCE_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable, run_docker

# Every node the driver makes for the NPUs: one per chip (davinci<N>) and the manager (davinci_manager).
NODE = re.compile(r"^davinci(\d+|_manager)$")
# A chip's own node, as a path or a name: davinci<N>, one per chip, what an instance maps.
CHIP_NODE = re.compile(r"(?:^|/)davinci(\d+)$")
# A container's processes name its full ID in their cgroup path (cgroup v1 and v2, with or without systemd).
CONTAINER_ID = re.compile(r"([0-9a-f]{64})")


def davinci_number(path):
    """N of a /dev/davinciN path, or None for any other node (davinci_manager shares the prefix)."""
    match = CHIP_NODE.search(path)
    return int(match.group(1)) if match else None


def is_chip_node(path):
    """/dev/davinci3 is a chip's node; /dev/davinci_manager and other paths are not."""
    return davinci_number(path) is not None


def parse_container_id(cgroup):
    """The container id in a process's /proc/<pid>/cgroup text, or None for a process outside any container. The
    last one named: a container started by a Docker that itself runs in a container is named after its parent."""
    found = CONTAINER_ID.findall(cgroup)
    return found[-1] if found else None


def is_npu_node(path, dev_dir):
    folder, name = os.path.split(path)
    return os.path.normpath(folder) == os.path.normpath(dev_dir) and NODE.match(name) is not None


def container_of(pid):
    """The container id a host process runs in, or None (outside any container, or gone)."""
    try:
        with open("/proc/%d/cgroup" % int(pid)) as handle:
            return parse_container_id(handle.read())
    except OSError:
        return None


def processes(dev_dir):
    """Every process with a node open; processes that end or hide their fds while being read are skipped."""
    found = []
    for entry in sorted(os.listdir("/proc")):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        devices = set()
        for fd in fds:
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if is_npu_node(target, dev_dir):
                devices.add(target)
        if devices:
            try:
                with open("/proc/%d/comm" % pid) as handle:
                    name = handle.read().strip()
            except OSError:
                name = "?"
            found.append(dict(pid=pid, name=name, devices=sorted(devices), container_id=container_of(pid)))
    return found


def containers(docker, dev_dir, runner=run_docker):
    """(running containers mapping a node or privileged, whether the engine answered). Running as `docker ps`
    lists them: a restarting container (a restart policy between two attempts) too, which takes its chips again."""
    try:
        code, out, _err = runner(docker, "ps", "--quiet", "--no-trunc", timeout=60)
    except DockerUnavailable:
        return [], False
    if code != 0:
        return [], False
    ids = out.split()
    if not ids:
        return [], True
    code, out, err = runner(docker, "container", "inspect", "--", *ids, timeout=60)
    if code != 0:
        # A container that stopped between the two calls makes inspect fail for all; read them one by one.
        details = []
        for container_id in ids:
            code, out, err = runner(docker, "container", "inspect", "--", container_id, timeout=60)
            if code == 0:
                details.extend(json.loads(out))
    else:
        details = json.loads(out)
    found = []
    for detail in details:
        host_config = detail.get("HostConfig") or {}
        mapped = sorted(device.get("PathOnHost", "") for device in host_config.get("Devices") or []
                        if is_npu_node(device.get("PathOnHost", ""), dev_dir))
        if host_config.get("Privileged"):
            mapped = ["all"]
        if mapped:
            found.append(dict(id=detail.get("Id"), name=(detail.get("Name") or "").lstrip("/"),
                              image=(detail.get("Config") or {}).get("Image"), devices=mapped,
                              labels=(detail.get("Config") or {}).get("Labels") or {},
                              status=(detail.get("State") or {}).get("Status")))
    return found, True


def chip_holders(found, label_prefix, devices=None):
    """Who holds the chips and whether it is ours: the one answer the preflight, the driver role, the serving plan
    and the doctor act on. found: {"containers": [...], "processes": [...]} as the npu_holders module lists them
    (processes may be npu_facts', which name their container alike); either may be missing.

    The same lists back, each entry with `instance`, the instance of this collection it belongs to (None for
    another owner's), and `ours`. A container is ours when it carries a <label_prefix>.instance label naming an
    instance: the server phase keeps it, replaces it, or removes it as no longer planned. A process is ours when
    it runs in a container of ours, which stops with it; any other process (in another container, or on the host
    itself) is not. A container also gets `held`, the devices it maps; given devices, only those, and containers
    holding none of them are left out: a privileged container sees every chip but maps none of them, and most
    (monitoring agents) open none."""
    label = label_name(label_prefix, INSTANCE_LABEL)
    held = {"containers": [], "processes": []}
    instances = {}
    for container in found.get("containers") or []:
        instance = (container.get("labels") or {}).get(label) or None
        instances[container["id"]] = instance
        mapped = list(container["devices"]) if devices is None else sorted(set(devices) & set(container["devices"]))
        if mapped:
            held["containers"].append(dict(container, held=mapped, instance=instance, ours=instance is not None))
    for process in found.get("processes") or []:
        instance = instances.get(process["container_id"]) if process.get("container_id") else None
        held["processes"].append(dict(process, instance=instance, ours=instance is not None))
    return held


def foreign_holders(docker, devices, label_prefix, runner=run_docker):
    """Running containers not of this collection that map any of devices, each as a sentence."""
    listed, _available = containers(docker, "/dev", runner)
    return ["container %s maps %s" % (container["name"], ", ".join(container["held"]))
            for container in chip_holders({"containers": listed}, label_prefix, devices)["containers"]
            if not container["ours"]]
