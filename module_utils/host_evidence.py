# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a host shows of its health, read only: the NPU facts, the recorded plan's instances (their containers'
state, their logs, what they answer) and the disks. The doctor diagnoses it (diagnosis.py) and the support
bundle packs it; neither changes anything on the host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import os
import time

from ansible_collections.ascend.fleet.plugins.module_utils.answer_check import asker, check_answers
from ansible_collections.ascend.fleet.plugins.module_utils.diagnosis import docker_time
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import NPU_OPTIONS, Gatherer
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import foreign_holders
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import Client, ClientError, key_from_env_file
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, number_at_least
from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import PlanError, read
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import DockerError

# The options of the modules that read with gather (doc fragment host_evidence).
EVIDENCE_OPTIONS = dict(
    NPU_OPTIONS,
    host=dict(type="str", required=True),
    plan_file=dict(type="path", default="/etc/vllm-ascend/plan.json"),
    docker=dict(type="str", default="docker"),
    label_prefix=dict(type="str", default="ascend-vllm-fleet"),
    disk_paths=dict(type="dict", default={}),
    log_lines=dict(type="int", default=2000),
)
# What an instance is asked within, each request: the doctor must not hang on a wedged server.
REQUEST_TIMEOUT_S = 30


def docker_seconds(text):
    """Seconds since the epoch of a Docker time, or None (Docker's zero time 0001-01-01 is None too)."""
    found = docker_time(text)
    return None if found is None else calendar.timegm(time.strptime(found[0], "%Y-%m-%dT%H:%M:%S"))


def inspect(docker, name, runner=run_docker):
    """`docker inspect` of a container, or None when there is none of that name."""
    code, out, err = runner(docker, "inspect", "--type", "container", "--", name)
    if code != 0:
        if "no such" in err.lower():
            return None
        raise DockerError("`docker inspect %s` failed: %s" % (name, err.strip() or "exit code %s" % code))
    return json.loads(out)[0]


def container_state(detail, now):
    """The state the doctor reads from `docker inspect` of a container."""
    state = detail.get("State") or {}
    started = docker_seconds(state.get("StartedAt"))
    return {"status": state.get("Status"), "running": bool(state.get("Running")),
            "restart_count": detail.get("RestartCount") or 0, "exit_code": state.get("ExitCode"),
            "oom_killed": bool(state.get("OOMKilled")), "error": state.get("Error") or None,
            "started_at": state.get("StartedAt"), "finished_at": state.get("FinishedAt"),
            "started_s_ago": None if started is None else int(now - started)}


def log_tail(docker, name, lines, runner=run_docker):
    """The last lines of a container's log, stdout and stderr in the order written, each as Docker stamps it
    (``<time to the nanosecond>Z <line>``): the doctor tells the lines before the container's last start by it."""
    code, out, err = runner(docker, "logs", "--timestamps", "--tail", str(lines), "--", name)
    if code != 0:
        return ["(docker logs failed: %s)" % (err.strip() or "exit code %s" % code)]
    stamped = []
    for stream in (out, err):
        # Docker stamps what a program writes up to each newline; a carriage return (a progress bar's) is inside
        # a line. A line without a time stays after the one before it.
        stamp = ("", 0)
        for line in stream.split("\n"):
            if line:
                stamp = docker_time(line) or stamp
                stamped.append((stamp, line))
    return [line for stamp, line in sorted(stamped, key=lambda item: item[0])][-lines:]


def disk_usage(paths):
    """The file system of each path given as {purpose: path} (its nearest existing folder), fullest first."""
    found = []
    for purpose, path in sorted(paths.items()):
        existing = path
        while not os.path.exists(existing) and existing not in ("", "/"):
            existing = os.path.dirname(existing.rstrip("/")) or "/"
        try:
            stat = os.statvfs(existing or "/")
        except OSError:
            continue
        total = stat.f_blocks * stat.f_frsize
        free = stat.f_bavail * stat.f_frsize
        used = total - stat.f_bfree * stat.f_frsize
        # As df counts it: the share of what non-root users may use.
        share = used / float(used + free) if used + free else 0.0
        found.append({"path": path, "purpose": purpose, "used_share": round(share, 4), "free_bytes": free})
    return sorted(found, key=lambda disk: -disk["used_share"])


def answers(client, model, mode):
    """The answer check's verdict on a serving instance (None when mode is none)."""
    if mode == "none":
        return None
    return check_answers(asker(client, model, REQUEST_TIMEOUT_S * 4), mode)


def instance_evidence(instance, served_name, params, now, runner=run_docker):
    """What one planned instance shows: its container (`docker inspect` whole, and the state read from it), log,
    /health, /v1/models with its own key, its answers."""
    found = {"name": instance["name"], "port": instance["port"], "env_file": instance.get("env_file"),
             "script": instance.get("script"), "inspect": None, "container": None, "log": [], "health": {},
             "models": {}, "answers": None}
    detail = inspect(params["docker"], instance["container"], runner)
    if detail is None:
        return found
    found["inspect"] = detail
    found["container"] = container_state(detail, now)
    found["log"] = log_tail(params["docker"], instance["container"], params["log_lines"], runner)
    base_url = "http://127.0.0.1:%d" % instance["port"]
    status, answer = Client(base_url, timeout=REQUEST_TIMEOUT_S).call("GET", "/health")
    found["health"] = {"status": status} if status is not None else {"error": answer}
    if status != 200:
        return found
    try:
        key = key_from_env_file(instance.get("env_file")) if instance.get("env_file") and \
            os.path.exists(instance["env_file"]) else None
    except ClientError as error:  # an env file without its key: the models check then says 401, and this why
        found["models"] = {"error": str(error)}
        key = None
    client = Client(base_url, key, timeout=REQUEST_TIMEOUT_S)
    status, answer = client.call("GET", "/v1/models")
    found["models"] = dict(found["models"], status=status)
    if status == 200:
        found["answers"] = answers(client, served_name, params.get("answer_check", "none"))
    return found


def check_evidence_options(params):
    number_at_least(params, "timeout", 1, "Fix: give seconds, 1 or more")
    number_at_least(params, "log_lines", 1, "Fix: give a number of lines, 1 or more")
    for purpose, path in params["disk_paths"].items():
        if not isinstance(path, str) or not path.startswith("/"):
            raise OptionError("disk_paths: %s is %r: expected an absolute path. Fix: give each purpose its path, "
                              "for example {model: /data/models/Qwen3-VL-8B-Instruct}" % (purpose, path))


def gather(params, runner=run_docker, now=None, npu_deadline=None):
    """The evidence of this host for diagnosis.diagnose, and the plan it was read against ({plan, plan_problem,
    evidence}): a host without a plan has no instances to read; one whose plan cannot be read says why.
    npu_deadline: the deadline the module's other npu-smi calls share with the NPU facts' (npu_gather.Gatherer)."""
    now = time.time() if now is None else now
    npu = Gatherer(params, npu_deadline).gather()
    plan, plan_problem = None, None
    try:
        plan = read(params["plan_file"], params["host"])
    except PlanError as error:
        plan_problem = str(error)
    if plan is None and plan_problem is None:
        plan_problem = "no serving plan at %s: the host is not deployed" % params["plan_file"]
    instances = plan["instances"] if plan else []
    planned_devices = sorted(set(device for instance in instances for device in instance["devices"]))
    evidence = {
        "npu": npu,
        "foreign_holders": foreign_holders(params["docker"], planned_devices, params["label_prefix"], runner)
        if planned_devices else [],
        "disks": disk_usage(params["disk_paths"]),
        "instances": [instance_evidence(instance, plan["served_name"], params, now, runner) for instance in instances],
    }
    return {"plan": plan, "plan_problem": plan_problem, "evidence": evidence}
