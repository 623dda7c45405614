#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module support_bundle: one tar.gz of what vLLM-Ascend maintainers and Huawei support ask for about a
host, with every secret scrubbed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: support_bundle
short_description: Pack what support asks about an Ascend host and its vLLM instances into a scrubbed tar.gz
description:
  - Writes O(dest), a gzipped tar of one folder named after the host, holding
    C(npu-smi/) (C(info), C(info -m), C(-t board), C(-t health), C(-t memory) of every card, C(-t topo)),
    C(driver/) (the driver's and firmware's C(version.info), the installer's record, the loaded kernel modules),
    C(kernel-npu.log) (the kernel log's lines about the NPU driver),
    C(docker/) (C(docker ps -a), C(docker version), C(docker info)),
    C(instances/<name>/) per planned instance (C(inspect.json) without the environment, C(state.json) with the
    restart count, exit code and OOM kill, C(log.txt), the tail of its log, and C(script.sh), its rendered
    C(docker run)), C(plan.json), C(system/) (disk use of the given paths, memory, kernel, OS, load) and
    C(tuning.txt) (the host tuning values vLLM-Ascend's guide asks for), C(doctor.json) (the doctor's diagnosis),
    and C(msnpureport/), the device logs C(msnpureport) exports, when the host has it.
  - C(MANIFEST.json) lists each item and, for one that could not be read, why.
  - Every secret is scrubbed from every file - the values of the instances' env files whose names hold KEY, TOKEN,
    SECRET or PASS, bearer tokens, C(--api-key) values and C(name=value) pairs whose name says it is a secret.
    The env files themselves are not packed.
  - Reads the host only; O(dest) is written whole or not at all (a temporary file renamed), readable by root
    only. The playbook fetches it and removes it.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  dest:
    description: Where to write the tar.gz; its folder must exist.
    type: path
    required: true
  msnpureport:
    description: The driver's device-log export tool; none is run when it is not there.
    type: path
    default: /usr/local/Ascend/driver/tools/msnpureport
  msnpureport_timeout:
    description: Seconds the export may take, the whole run of C(msnpureport) (at least 1).
    type: int
    default: 600
  diagnosis:
    description: The doctor's result for this host (what fleet_doctor returned), packed as C(doctor.json).
    type: dict
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.host_evidence
  - ascend.fleet.npu_paths
attributes:
  check_mode:
    description: In check mode nothing is written; the result lists what would be packed.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
notes:
  - Run it as root, as npu-smi, Docker and msnpureport need.
"""

EXAMPLES = r"""
- name: Pack the support bundle
  ascend.fleet.support_bundle:
    host: "{{ inventory_hostname }}"
    dest: /root/support-{{ inventory_hostname }}.tar.gz
"""

RETURN = r"""
dest:
  description: The tar.gz written.
  returned: success
  type: str
size:
  description: Its size in bytes (0 in check mode).
  returned: success
  type: int
members:
  description: The files in it, relative to its folder.
  returned: success
  type: list
  elements: str
missing:
  description: What could not be read, each with why.
  returned: success
  type: dict
"""

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline
from ansible_collections.ascend.fleet.plugins.module_utils.host_evidence import (
    EVIDENCE_OPTIONS,
    check_evidence_options,
    gather,
)
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import Gatherer, read_text
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    unexpected_failure,
)
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import DockerError

ARGUMENT_SPEC = dict(
    EVIDENCE_OPTIONS,
    dest=dict(type="path", required=True),
    msnpureport=dict(type="path", default="/usr/local/Ascend/driver/tools/msnpureport"),
    msnpureport_timeout=dict(type="int", default=600),
    diagnosis=dict(type="dict"),
)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS", re.IGNORECASE)
SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[^\s\"',]+"),
    re.compile(r"(--api-key[=\s]+)[^\s\"',]+"),
    # A name that ends in one of these words (max_tokens=256 is no secret).
    re.compile(r"(?i)(\b[\w.-]*(?:api[_-]?key|token|secret|passw(?:or)?d)[\"']?\s*[=:]\s*[\"']?)[^\s\"',]+"),
)
SCRUBBED = "[scrubbed]"
# The kernel log's lines about the 310P's driver and its parts (drv_davinci*, devdrv, devmm, tsdrv, svm, dcmi).
NPU_KERNEL_LINE = re.compile(r"davinci|devdrv|devmm|tsdrv|drv_|hisi|ascend|dcmi|npu", re.IGNORECASE)
TUNING_FILES = ("/proc/sys/vm/swappiness", "/proc/sys/kernel/numa_balancing",
                "/proc/sys/kernel/sched_migration_cost_ns",
                "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def env_secrets(path):
    """The values of an env file's secret-named variables (its VLLM_API_KEY among them)."""
    found = []
    for line in (read_text(path) or "").splitlines():
        name, value = (line.split("=", 1) + [""])[:2]
        if value and SECRET_NAME.search(name):
            found.append(value.strip())
    return found


def scrub(data, secrets):
    """data (bytes) with every secret value and secret-looking value replaced."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        data = data.replace(secret.encode("utf-8"), SCRUBBED.encode("utf-8"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(lambda match: match.group(1) + SCRUBBED, text)
    return text.encode("utf-8")


def command(argv, timeout=120, cwd=None):
    """stdout and stderr of a command, or why it could not run."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=timeout, check=False, cwd=cwd)
    except subprocess.TimeoutExpired:
        return None, "no end after %ss" % timeout
    except OSError as error:
        return None, "cannot run: %s" % (error.strerror or error)
    text = done.stdout.decode("utf-8", "replace")
    return (text, None) if done.returncode == 0 else (text, "exit code %s" % done.returncode)


class Bundle:
    """The files of a bundle, in memory until written, and what could not be read."""

    def __init__(self):
        self.files = {}
        self.missing = {}

    def add(self, name, content):
        self.files[name] = content.encode("utf-8") if isinstance(content, str) else content

    def add_command(self, name, argv, timeout=120):
        self.add_output(name, argv, *command(argv, timeout))

    def add_output(self, name, argv, text, problem):
        """What a command printed (text, or None), and why it is not whole (problem, or None)."""
        if text:
            self.add(name, text)
        if problem:
            self.missing[name] = "`%s`: %s" % (" ".join(argv), problem)

    def add_file(self, name, path):
        text = read_text(path)
        if text is None:
            self.missing[name] = "%s cannot be read" % path
        else:
            self.add(name, text)

    def write(self, dest, folder, secrets):
        """The tar.gz at dest, whole or not at all, root-only."""
        handle, temporary = tempfile.mkstemp(prefix=".bundle-", dir=os.path.dirname(dest) or ".")
        try:
            with os.fdopen(handle, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
                manifest = {"files": sorted(self.files), "missing": self.missing}
                for name, data in sorted(dict(self.files, **{"MANIFEST.json": json.dumps(
                        manifest, indent=2).encode("utf-8")}).items()):
                    data = scrub(data, secrets)
                    info = tarfile.TarInfo("%s/%s" % (folder, name))
                    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
                    tar.addfile(info, io.BytesIO(data))
            os.chmod(temporary, 0o600)
            os.rename(temporary, dest)
        except BaseException:
            os.unlink(temporary)
            raise


def npu_smi_output(gatherer, path, *args):
    """(text, problem) of one npu-smi call, within what is left of the gatherer's deadline."""
    code, output = gatherer.npu_smi(path, *args)
    if code is None:
        return None, output
    return output, None if code == 0 else "exit code %s" % code


def add_npu(bundle, params, deadline):
    gatherer = Gatherer(params, deadline)
    npu_smi = gatherer.find_npu_smi()
    if not npu_smi:
        bundle.missing["npu-smi/"] = "npu-smi not found (%s)" % (params["npu_smi"] or "on PATH")
        return
    for name, args in (("info", ["info"]), ("info-m", ["info", "-m"]), ("topo", ["info", "-t", "topo"])):
        bundle.add_output("npu-smi/%s.txt" % name, [npu_smi] + args, *npu_smi_output(gatherer, npu_smi, *args))
    listed, _problem = npu_smi_output(gatherer, npu_smi, "info", "-l")
    for npu_id in sorted(set(re.findall(r"NPU ID\s*:\s*(\d+)", listed or ""))):
        for query in ("board", "health", "memory"):
            args = ["info", "-t", query, "-i", npu_id]
            bundle.add_output("npu-smi/%s-%s.txt" % (query, npu_id), [npu_smi] + args,
                              *npu_smi_output(gatherer, npu_smi, *args))


def add_driver(bundle, params):
    bundle.add_file("driver/driver-version.info", os.path.join(params["driver_home"], "version.info"))
    bundle.add_file("driver/firmware-version.info", os.path.join(params["firmware_home"], "version.info"))
    bundle.add_file("driver/ascend_install.info", params["install_info"])
    modules = [line for line in (read_text("/proc/modules") or "").splitlines() if NPU_KERNEL_LINE.search(line)]
    bundle.add("driver/modules.txt", "\n".join(modules) + "\n")
    text, problem = command(["dmesg", "--ctime"])
    if text is None or problem:
        text, problem = command(["journalctl", "-k", "--no-pager", "-n", "20000"])
    if text is not None and not problem:
        bundle.add("kernel-npu.log", "\n".join(line for line in text.splitlines() if NPU_KERNEL_LINE.search(line)) +
                   "\n")
    else:
        bundle.missing["kernel-npu.log"] = "neither dmesg nor journalctl -k could be read: %s" % problem


def add_docker(bundle, params):
    docker = params["docker"]
    bundle.add_command("docker/ps.txt", [docker, "ps", "--all", "--no-trunc", "--format",
                                         "{{.Names}}\t{{.Image}}\t{{.Status}}\t{{.Ports}}"])
    bundle.add_command("docker/version.txt", [docker, "version"])
    bundle.add_command("docker/info.txt", [docker, "info"])


def add_instances(bundle, instances):
    """Each instance's container and log as the evidence read them, and its rendered script."""
    for instance in instances:
        folder = "instances/%s/" % instance["name"]
        if instance["inspect"] is None:
            bundle.missing[folder] = "no container %s" % instance["name"]
        else:
            # Without the environment: it holds the API key and whatever else the operator passed.
            detail = dict(instance["inspect"], Config=dict(instance["inspect"].get("Config") or {}))
            detail["Config"].pop("Env", None)
            bundle.add(folder + "inspect.json", json.dumps(detail, indent=2))
            bundle.add(folder + "state.json", json.dumps(instance["container"], indent=2))
            bundle.add(folder + "log.txt", "\n".join(instance["log"]) + "\n")
        bundle.add_file(folder + "script.sh", instance["script"])


def add_system(bundle, params, evidence):
    bundle.add("system/disks.json", json.dumps(evidence["disks"], indent=2))
    bundle.add_command("system/df.txt", ["df", "-h"])
    for name, path in (("meminfo.txt", "/proc/meminfo"), ("os-release.txt", "/etc/os-release"),
                       ("loadavg.txt", "/proc/loadavg"), ("kernel.txt", "/proc/version")):
        bundle.add_file("system/" + name, path)
    bundle.add("tuning.txt", "".join("%s = %s\n" % (path, (read_text(path) or "(cannot be read)").strip())
                                     for path in TUNING_FILES))


def add_msnpureport(bundle, params):
    """The device logs msnpureport exports into a folder of its working directory (named by the time)."""
    tool = params["msnpureport"]
    if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
        bundle.missing["msnpureport/"] = "%s is not on this host (it comes with the driver)" % tool
        return
    work = tempfile.mkdtemp(prefix="msnpureport-")
    try:
        text, problem = command([tool], params["msnpureport_timeout"], cwd=work)
        bundle.add("msnpureport/output.txt", text or "")
        if problem:
            bundle.missing["msnpureport/"] = "`%s`: %s" % (tool, problem)
        for root, _folders, files in os.walk(work):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    bundle.add("msnpureport/" + os.path.relpath(path, work), handle.read())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(params, check_mode):
    # One timeout for every npu-smi call: the NPU facts' and the outputs packed. The evidence's answer check is left
    # out: the doctor asked the instances already.
    npu_deadline = Deadline(params["timeout"])
    found = gather(params, npu_deadline=npu_deadline)
    bundle = Bundle()
    if params["diagnosis"]:
        bundle.add("doctor.json", json.dumps(params["diagnosis"], indent=2))
    else:
        bundle.missing["doctor.json"] = "no diagnosis given (the diagnosis option: fleet_doctor's result)"
    if found["plan"]:
        bundle.add("plan.json", json.dumps(found["plan"], indent=2))
    else:
        bundle.missing["plan.json"] = found["plan_problem"]
    add_npu(bundle, params, npu_deadline)
    add_driver(bundle, params)
    add_docker(bundle, params)
    add_instances(bundle, found["evidence"]["instances"])
    add_system(bundle, params, found["evidence"])
    if not check_mode:
        add_msnpureport(bundle, params)
    secrets = [secret for instance in (found["plan"] or {}).get("instances", [])
               for secret in env_secrets(instance.get("env_file"))]
    size = 0
    if not check_mode:
        bundle.write(params["dest"], params["host"], secrets)
        size = os.path.getsize(params["dest"])
    return {"dest": params["dest"], "size": size, "members": sorted(bundle.files) + ["MANIFEST.json"],
            "missing": bundle.missing}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        check_evidence_options(params)
        number_at_least(params, "msnpureport_timeout", 1, "Fix: give seconds, 1 or more")
        if not os.path.isdir(os.path.dirname(params["dest"]) or "."):
            raise OptionError("dest %s: its folder does not exist. Fix: create it, or give a path in a folder that "
                              "exists" % params["dest"])
        result = run(params, module.check_mode)
    except (OptionError, DockerError) as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("packing the support bundle of %s" % params["host"], error))
    module.exit_json(changed=not module.check_mode, **result)


if __name__ == "__main__":
    main()
