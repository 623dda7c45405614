"""Action host_lock: the host_lock module, with the run named from the controller.

A run is its ansible-playbook process: the controller's name, the process id and the process's start time (so a
process id used again later is another run). Action plugins run in Ansible's worker processes, children of that
process. When the lock is held by a run of this same controller whose process has ended, the module is asked
again to take it over from that run: a run killed, interrupted, or whose host failed before it let the lock go.
"""
import getpass
import os
import socket

from ansible.plugins.action import ActionBase


def process_start(pid):
    """The start time of a process, in clock ticks since boot (Linux /proc); '' where it cannot be read."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            # The command name, in parentheses, may hold spaces: the fields after its closing parenthesis.
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def this_run(play):
    controller = socket.gethostname()
    pid = os.getppid()  # the ansible-playbook process, whose worker this is
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"id": "%s:%d:%s" % (controller, pid, process_start(pid)), "controller": controller, "user": user,
            "pid": pid, "play": play}


def ended_here(holder, controller):
    """Whether the holder is a run of this controller whose process is gone (or is another process now, when its
    start time can be read: /proc may hide other users' processes, and macOS has none)."""
    if not holder or holder.get("controller") != controller or not isinstance(holder.get("pid"), int):
        return False
    pid = holder["pid"]
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it runs
    started = process_start(pid)
    return bool(started) and holder.get("id") != "%s:%d:%s" % (controller, pid, started)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        run = this_run(str(task_vars.get("ansible_play_name", "")))
        args["run"] = run
        outcome = self._execute_module(module_name="ascend.fleet.host_lock", module_args=args, task_vars=task_vars)
        holder = outcome.get("holder")
        if outcome.get("failed") and args.get("state", "present") == "present" and ended_here(
                holder, run["controller"]):
            args["take_over_from"] = holder["id"]
            outcome = self._execute_module(module_name="ascend.fleet.host_lock", module_args=args,
                                           task_vars=task_vars)
        result.update(outcome)
        return result
