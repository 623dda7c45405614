#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module host_lock: one run at a time changes a host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_lock
short_description: One playbook run at a time changes a host - take, keep and let go of the host's lock
description:
  - Two runs that change one host at once would each stop, start and restore the same containers, each taking the
    other's half-done replacement for its own to recover. The phases that change a host take its lock first, and
    let it go when they end.
  - The lock is a file on the host (C(path)) naming the run that holds it, where it was started from and when it
    took the lock (the host's clock, so no clock skew enters its age). It is kept across reboots, as a driver
    change reboots a host in the middle of its run.
  - Taking the lock a run already holds changes nothing. A lock another run holds fails the task, naming that run
    and how long it has held the lock, unless C(break_lock), C(take_over_from) names that run, or it is older than
    C(stale_after_s); a lock taken over is named in a warning.
  - The lock is read, decided on and written under an exclusive lock on its folder (flock), so of two runs that
    take it at once, or take over the same stale lock, exactly one gets it.
  - With C(state=absent) the lock is let go, only when this run holds it.
  - The C(ascend.fleet.host_lock) action names the run (the controller, its user and the C(ansible-playbook)
    process) and, when the holder is a run of the same controller whose process has ended (a run killed or
    interrupted, or a host that failed and kept its lock), takes the lock over from it.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  path:
    description: The lock file on the host.
    type: path
    default: /var/lib/ascend-fleet/lock
  state:
    description: C(present) takes or keeps the lock; C(absent) lets it go.
    type: str
    choices: [present, absent]
    default: present
  run:
    description: The run taking or letting go of the lock (the action sets it).
    type: dict
    required: true
    suboptions:
      id:
        description: What tells this run from every other (the controller, the process and its start time).
        type: str
        required: true
      controller:
        description: The machine the run was started on.
        type: str
        default: ""
      user:
        description: Who started it.
        type: str
        default: ""
      pid:
        description: Its C(ansible-playbook) process on the controller.
        type: int
        default: 0
      play:
        description: The play that takes the lock.
        type: str
        default: ""
  take_over_from:
    description: The id of a run known to have ended; a lock it holds is taken over.
    type: str
    default: ""
  stale_after_s:
    description: A lock held longer than this is taken over (its run is surely over); 0 never.
    type: int
    default: 86400
  break_lock:
    description: Take the lock whoever holds it (after making sure its run is over).
    type: bool
    default: false
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Reads the lock and reports what would change; a lock another run holds still fails.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: The lock's holder is returned in C(holder).
"""

EXAMPLES = r"""
- name: Take this host's lock for the run
  ascend.fleet.host_lock:
    path: /var/lib/ascend-fleet/lock

- name: Let it go
  ascend.fleet.host_lock:
    state: absent
"""

RETURN = r"""
holder:
  description: The run that holds the lock after the task (none after C(state=absent)); on a refusal, the other
    run's, with C(held_s).
  returned: always
  type: dict
  sample: {"id": "ops-01:41312:88123", "controller": "ops-01", "user": "ops", "pid": 41312,
           "play": "Deploy vLLM-Ascend", "acquired_at": 1764720000.0}
taken_over:
  description: The holder whose lock was taken over, or null.
  returned: always
  type: dict
"""

import contextlib
import fcntl
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import remove, write_atomically

MAX_LOCK_BYTES = 65536
GUARD_ATTEMPTS = 100  # tries of the folder's lock, 0.1 s apart


class Held(OptionError):
    """Another run holds the lock; holder says which."""

    def __init__(self, message, holder):
        super(Held, self).__init__(message)
        self.holder = holder


def read_holder(path):
    """The lock's holder, None when there is no lock; a file that is no lock is named with the fix."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_LOCK_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        holder = json.loads(text.decode("utf-8"))
        if not isinstance(holder, dict) or not isinstance(holder.get("id"), str) or not isinstance(
                holder.get("acquired_at"), (int, float)) or isinstance(holder.get("acquired_at"), bool):
            raise ValueError("no holder")
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise OptionError("the lock file %s holds no run (%d bytes that are not the JSON this module writes): "
                          "whether a run holds this host cannot be told. Fix: make sure no playbook run changes "
                          "this host, then run again with -e fleet_lock_break=true (or remove the file)"
                          % (path, len(text))) from None
    return holder


def describe(holder, now):
    held = max(0, now - holder["acquired_at"])
    who = "%s@%s" % (holder.get("user") or "?", holder.get("controller") or "?")
    return "%s (play %s, ansible-playbook pid %s on %s), holding it for %s since %s" % (
        holder["id"], json.dumps(str(holder.get("play") or "?"))[:200], holder.get("pid") or "?", who,
        duration(held), time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["acquired_at"])))


def duration(seconds):
    seconds = int(seconds)
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%d min" % (seconds // 60)
    return "%.1f h" % (seconds / 3600.0)


@contextlib.contextmanager
def guarded(folder, check_mode):
    """Read, decide and write under an exclusive lock on the lock's folder, so that two runs taking the lock (or
    taking it over) at once, or one taking it while another lets it go, do so one after the other. It is held for
    milliseconds; a check run, which writes nothing, reads without it."""
    if check_mode:
        yield
        return
    for _attempt in range(GUARD_ATTEMPTS):
        os.makedirs(folder, mode=0o755, exist_ok=True)
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            time.sleep(0.1)
            continue
        try:
            # The run that held it may have removed the folder (let_go): then this is no lock on the folder at the
            # path any more, and it is taken again.
            held, there = os.fstat(descriptor), os.stat(folder)
        except FileNotFoundError:
            os.close(descriptor)
            continue
        if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
            os.close(descriptor)
            continue
        try:
            yield
        finally:
            os.close(descriptor)
        return
    raise OptionError("the folder %s stayed locked for %d s by another process: no run could take or let go of "
                      "this host's lock. Fix: find it (fuser %s), then run again" % (folder, GUARD_ATTEMPTS // 10,
                                                                                     folder))


def take(params, check_mode, now):
    """(changed, holder, taken_over)."""
    path, run = params["path"], dict(params["run"])
    mine = dict(run, acquired_at=now)
    with guarded(os.path.dirname(path) or ".", check_mode):
        try:
            holder = read_holder(path)
        except OptionError:
            if not params["break_lock"]:
                raise
            holder = {"id": "(a file that is no lock)", "acquired_at": now}
        if holder is not None and holder["id"] == run["id"]:
            return False, holder, None
        if holder is not None:
            stale = params["stale_after_s"] and now - holder["acquired_at"] > params["stale_after_s"]
            if not (params["break_lock"] or holder["id"] == params["take_over_from"] or stale):
                raise Held("this host is being changed by another run: %s. Two runs at once would stop, start and "
                           "restore the same containers. Fix: wait for that run to end. If it has ended without "
                           "letting the lock go (its controller lost, the run killed), run again with "
                           "-e fleet_lock_break=true, or remove %s on this host" % (describe(holder, now), path),
                           dict(holder, held_s=now - holder["acquired_at"]))
        if not check_mode:
            write_atomically(path, json.dumps(mine, sort_keys=True) + "\n", 0o644)
    return True, mine, holder


def let_go(params, check_mode):
    path = params["path"]
    if not os.path.exists(path):
        return False, None
    with guarded(os.path.dirname(path) or ".", check_mode):
        try:
            holder = read_holder(path)
        except OptionError:
            return False, None  # not a lock this module wrote: left for the next take to name
        if holder is None or holder["id"] != params["run"]["id"]:
            return False, holder
        if not check_mode:
            remove(path)
            try:
                os.rmdir(os.path.dirname(path))  # made for the lock; a folder holding anything else stays
            except OSError:
                pass
    return True, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/ascend-fleet/lock"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            run=dict(type="dict", required=True, options=dict(
                id=dict(type="str", required=True),
                controller=dict(type="str", default=""),
                user=dict(type="str", default=""),
                pid=dict(type="int", default=0),
                play=dict(type="str", default=""),
            )),
            take_over_from=dict(type="str", default=""),
            stale_after_s=dict(type="int", default=86400),
            break_lock=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    taken_over = None
    try:
        if not params["run"]["id"].strip():
            raise OptionError("run.id: empty; expected what tells this run from others. Fix: call the module "
                              "through its action (ascend.fleet.host_lock), which sets it")
        if params["stale_after_s"] < 0:
            raise OptionError("stale_after_s: %d; expected 0 (never stale) or more seconds. Fix: set "
                              "fleet_lock_stale_after_s" % params["stale_after_s"])
        if params["state"] == "present":
            changed, holder, taken_over = take(params, module.check_mode, time.time())
        else:
            changed, holder = let_go(params, module.check_mode)
    except Held as error:
        module.fail_json(msg=str(error), holder=error.holder, taken_over=None)
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("taking or letting go of the host's lock", error))
    if taken_over:
        whose = ("a run that ended" if params["take_over_from"] == taken_over["id"] else
                 "a run, as fleet_lock_break asked" if params["break_lock"] else "a run held past stale_after_s")
        module.warn("%s the lock of %s: %s" % ("would take over" if module.check_mode else "took over", whose,
                                               describe(taken_over, time.time())))
    module.exit_json(changed=changed, holder=holder, taken_over=taken_over)


if __name__ == "__main__":
    main()
