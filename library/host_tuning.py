#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module host_tuning: the host OS settings vLLM-Ascend's tuning guide asks for, read, and set when asked."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_tuning
short_description: Read, and set when asked, the CPU governor and kernel settings vLLM-Ascend's tuning guide asks for
description:
  - Reads the CPU frequency governor of every cpufreq policy (C(/sys/devices/system/cpu/cpufreq/policy*)) and the
    kernel settings in C(sysctls), and compares each with what is wanted.
  - A scheduler setting that kernels from 5.13 on keep in debugfs rather than in C(/proc/sys) (such as
    C(kernel.sched_migration_cost_ns), now C(/sys/kernel/debug/sched/migration_cost_ns)) is read where the
    running kernel keeps it.
  - A setting the host does not have (no cpufreq driver, a kernel without the setting, debugfs not mounted) is
    reported as unavailable, with why; it is never an error.
  - With C(apply), sets what differs now and keeps it across reboots; sysctls in C(sysctl_file) (read at boot by
    systemd-sysctl), the governor and debugfs settings in C(tmpfiles_file) (written at boot by systemd-tmpfiles).
    Each file is replaced whole and only when its content changes.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  governor:
    description: The CPU frequency governor wanted on every policy (vLLM-Ascend's guide asks C(performance)); empty
      to leave the governor alone.
    type: str
    default: performance
  sysctls:
    description:
      - Kernel settings wanted, by their sysctl names, with their values, for example C(vm.swappiness=0).
    type: dict
    default: {}
  apply:
    description: Set what differs, and keep it across reboots.
    type: bool
    default: false
  sysctl_file:
    description: Where the sysctls are kept for the next boots, with C(apply).
    type: path
    default: /etc/sysctl.d/90-ascend-fleet.conf
  tmpfiles_file:
    description: Where the governor and debugfs settings are kept for the next boots, with C(apply).
    type: path
    default: /etc/tmpfiles.d/ascend-fleet.conf
notes:
  - tuned, when it runs, sets the governor again whenever it starts or changes profile; with tuned, set the governor
    in its profile instead (C(governor=performance) in a custom profile).
  - systemd-tmpfiles may run before debugfs is mounted at boot; a setting that did not take is reported by the next
    read (preflight reports it on every run).
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Reads, and reports what C(apply) would change.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: The settings changed are returned in C(settings) (their C(before) and C(wanted)).
"""

EXAMPLES = r"""
- name: Read the tuning
  ascend.fleet.host_tuning:
    sysctls:
      vm.swappiness: 0
      kernel.numa_balancing: 0
      kernel.sched_migration_cost_ns: 50000
  register: tuning

- name: Apply it, for good
  ascend.fleet.host_tuning:
    sysctls:
      vm.swappiness: 0
    apply: true
"""

RETURN = r"""
settings:
  description: Every setting read, in the order asked (the governor first).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: C(cpu_governor), or the sysctl name.
      type: str
    wanted:
      description: The value wanted, as text.
      type: str
    current:
      description: The value now (after C(apply), the value set); several governors are listed by policy.
      type: str
    before:
      description: The value before this run.
      type: str
    state:
      description: C(ok), C(differs), C(refused) (the kernel refused the value C(apply) wrote; C(why) says how) or
        C(unavailable).
      type: str
    where:
      description: The file read (for the governor, the policies' folder).
      type: str
    why:
      description: Why the setting is unavailable, or empty.
      type: str
  sample: [{"name": "vm.swappiness", "wanted": "0", "current": "60", "before": "60", "state": "differs",
            "where": "/proc/sys/vm/swappiness", "why": ""}]
differs:
  description: Names of the settings that are not as wanted (after C(apply), those it could not set).
  returned: always
  type: list
  elements: str
  sample: ["cpu_governor", "vm.swappiness"]
unavailable:
  description: Names of the settings this host does not have.
  returned: always
  type: list
  elements: str
  sample: []
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure

POLICIES = "/sys/devices/system/cpu/cpufreq"
SYSCTL_ROOT = "/proc/sys"
# Linux 5.13 (commit 8a99b6833c88) moved the SCHED_DEBUG sysctls to debugfs, named without their sched_ prefix.
DEBUG_SCHED = "/sys/kernel/debug/sched"
SYSCTL_NAME = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")
HEADER = "# Written by the collection ascend.fleet (host_tuning); changes here are replaced on its next run.\n"


def read(path):
    with open(path) as stream:
        return stream.read().strip()


def write(path, value):
    with open(path, "w") as stream:
        stream.write("%s\n" % value)


def readable(policy):
    """Whether a policy's governor can be read: the kernel answers EBUSY for a policy whose CPUs are all offline."""
    try:
        read(os.path.join(policy, "scaling_governor"))
    except OSError:
        return False
    return True


def governor_setting(wanted):
    """The governor: one entry for every policy, with the governors now in use listed by policy."""
    setting = dict(name="cpu_governor", wanted=wanted, current="", before="", where=POLICIES, why="")
    policies = sorted((path for path in glob.glob(os.path.join(POLICIES, "policy*"))
                       if path.rsplit("y", 1)[1].isdigit() and readable(path)),
                      key=lambda path: int(path.rsplit("y", 1)[1]))
    if not policies:
        return dict(setting, state="unavailable", why="no cpufreq policy in %s: the kernel has no cpufreq driver for "
                                                      "these CPUs (on Kunpeng, cppc_cpufreq), or the firmware does "
                                                      "not expose it" % POLICIES), []
    try:
        available = set(read(os.path.join(policies[0], "scaling_available_governors")).split())
    except OSError:
        available = set()  # a driver that does not list them takes any governor the kernel has
    if available and wanted not in available:
        return dict(setting, state="unavailable", current=describe_governors(policies),
                    why="the cpufreq driver offers %s, not %s" % (", ".join(sorted(available)), wanted)), []
    files = [os.path.join(policy, "scaling_governor") for policy in policies]
    current = describe_governors(policies)
    return dict(setting, current=current, before=current,
                state="ok" if all(read(path) == wanted for path in files) else "differs"), files


def describe_governors(policies):
    """'performance', or each governor with its policies when they differ: 'performance (policy0), ...'."""
    by_governor = {}
    for policy in policies:
        by_governor.setdefault(read(os.path.join(policy, "scaling_governor")), []).append(os.path.basename(policy))
    if len(by_governor) == 1:
        return next(iter(by_governor))
    return ", ".join("%s (%s)" % (governor, " ".join(names)) for governor, names in sorted(by_governor.items()))


def sysctl_setting(name, wanted):
    """A sysctl where the running kernel keeps it: /proc/sys, or debugfs for a scheduler setting since 5.13."""
    setting = dict(name=name, wanted=wanted, current="", before="", why="")
    path = os.path.join(SYSCTL_ROOT, *name.split("."))
    if not os.path.exists(path) and name.startswith("kernel.sched_"):
        moved = os.path.join(DEBUG_SCHED, name[len("kernel.sched_"):])
        if os.path.exists(moved):
            path = moved
        elif os.path.isdir(os.path.dirname(DEBUG_SCHED)) and not os.listdir(os.path.dirname(DEBUG_SCHED)):
            return dict(setting, where=moved, state="unavailable",
                        why="not in %s, and debugfs, where kernels from 5.13 keep it, is not mounted (mount -t "
                            "debugfs none /sys/kernel/debug)" % SYSCTL_ROOT)
    if not os.path.exists(path):
        return dict(setting, where=path, state="unavailable", why="the running kernel has no %s" % name)
    try:
        current = " ".join(read(path).split())
    except OSError as error:
        return dict(setting, where=path, state="unavailable", why="%s cannot be read: %s" % (
            path, error.strerror or error))
    return dict(setting, where=path, current=current, before=current,
                state="ok" if current == wanted else "differs")


def persist(path, lines, check_mode):
    """Replaces path whole with lines when its content differs; whether it did (or would)."""
    content = HEADER + "".join(line + "\n" for line in lines)
    try:
        if read(path) + "\n" == content:
            return False
    except OSError:
        pass
    if not check_mode:
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, 0o755)
        staged = path + ".new"
        try:
            with open(staged, "w") as stream:
                stream.write(content)
            os.chmod(staged, 0o644)
            os.replace(staged, path)
        finally:
            if os.path.exists(staged):
                os.unlink(staged)
    return True


def apply_settings(settings, governor_files, params, check_mode):
    """Sets what differs and writes the boot files; whether anything changed (or would). A value the kernel
    refuses stays as it was, with why, and is not kept for the next boots either."""
    changed = False
    for setting in settings:
        if setting["state"] != "differs":
            continue
        if check_mode:
            changed = True
            continue
        paths = governor_files if setting["name"] == "cpu_governor" else [setting["where"]]
        try:
            for path in paths:
                write(path, setting["wanted"])
        except OSError as error:
            setting["why"] = "%s refused %s: %s" % (path, setting["wanted"], error.strerror or error)
            setting["state"] = "refused"
            continue
        changed = True
        setting["current"] = (describe_governors([os.path.dirname(path) for path in paths])
                              if setting["name"] == "cpu_governor" else " ".join(read(paths[0]).split()))
        setting["state"] = "ok" if setting["current"] == setting["wanted"] else "differs"
    kept = [s for s in settings if s["state"] in ("ok", "differs")]
    sysctl_lines = ["%s = %s" % (s["name"], s["wanted"]) for s in kept
                    if s["name"] != "cpu_governor" and s["where"].startswith(SYSCTL_ROOT + "/")]
    tmpfiles_lines = ["w %s - - - - %s" % (s["where"] if s["name"] != "cpu_governor" else
                                           POLICIES + "/policy*/scaling_governor", s["wanted"])
                      for s in kept if s["name"] == "cpu_governor" or not s["where"].startswith(SYSCTL_ROOT + "/")]
    for path, lines in ((params["sysctl_file"], sysctl_lines), (params["tmpfiles_file"], tmpfiles_lines)):
        try:
            changed = persist(path, lines, check_mode) or changed
        except OSError as error:
            raise OptionError("could not write %s, which keeps the tuning for the next boots: %s. Fix: check that "
                              "the task runs as root (become) and that %s is writable"
                              % (path, error.strerror or error, os.path.dirname(path))) from None
    return changed


def check_options(params):
    for name, value in params["sysctls"].items():
        if not SYSCTL_NAME.fullmatch(str(name)):
            raise OptionError("sysctls %r: expected a sysctl name such as vm.swappiness (lowercase words joined by "
                              "dots). Fix: correct the name in fleet_host_tuning_sysctls" % (name,))
        if isinstance(value, (dict, list)) or value is None or not str(value).strip() or "\n" in str(value):
            raise OptionError("sysctls %s=%r: expected one value, such as 0. Fix: correct it in "
                              "fleet_host_tuning_sysctls" % (name, value))
    if params["governor"] and not re.fullmatch(r"[a-z0-9_]+", params["governor"]):
        raise OptionError("governor %r: expected a cpufreq governor name such as performance. Fix: correct "
                          "fleet_host_tuning_governor" % params["governor"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            governor=dict(type="str", default="performance"),
            sysctls=dict(type="dict", default={}),
            apply=dict(type="bool", default=False),
            sysctl_file=dict(type="path", default="/etc/sysctl.d/90-ascend-fleet.conf"),
            tmpfiles_file=dict(type="path", default="/etc/tmpfiles.d/ascend-fleet.conf"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        check_options(params)
        settings, governor_files = [], []
        if params["governor"]:
            governor, governor_files = governor_setting(params["governor"])
            settings.append(governor)
        settings += [sysctl_setting(name, " ".join(str(value).split())) for name, value in params["sysctls"].items()]
        changed = apply_settings(settings, governor_files, params, module.check_mode) if params["apply"] else False
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("reading the host's tuning", error))
    module.exit_json(changed=changed, settings=settings,
                     differs=[setting["name"] for setting in settings if setting["state"] in ("differs", "refused")],
                     unavailable=[setting["name"] for setting in settings if setting["state"] == "unavailable"])


if __name__ == "__main__":
    main()
