# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a host still serves what its deploy recorded: what the fleet_verify module reads of the host (read),
and the judgement of it (judge), one check after another, each failure naming the host, the instance, what was
found, what was expected and the fix.

What is expected comes from the host itself - the serving plan the deploy recorded (its instances, their chips,
ports and files, the image and the served name) and each instance's rendered script (the config-hash label of
the spec it runs) - and from the few settings the plan does not hold, given as options: the driver and firmware
the host must run, the restart policy, the key the instances are asked with and the answer check. Nothing is
worked out again from the inventory.

judge is pure: it reads what read found (or a test made by hand) and nothing else.

Standard library only and Python 3.8: it runs on the hosts, inside the fleet_verify module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import time

from ansible_collections.ascend.fleet.plugins.module_utils.answer_check import SMOKE_PROMPT, check_answers_of, smoke
from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import CONFIG_HASH_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.host_evidence import container_state, inspect
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import Gatherer
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import is_chip_node
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import Client, served_models
from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import PlanError
from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import read as read_plan
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import read_text, recorded_hash

# What a plan and each of its instances must record for the checks (vllm_plan's RETURN): a plan without them was
# not written by vllm_plan.
PLAN_FIELDS = ("image", "served_name")
INSTANCE_FIELDS = ("container", "script", "devices", "npu_ids")
# The image request of the verification: small and short, as it runs on every instance of every host.
SMOKE_SIZE = (320, 240)
SMOKE_MAX_TOKENS = 8
# How long a connection to an instance's port may take to be accepted: the host's own loopback answers at once.
CONNECT_TIMEOUT_S = 5


def deploy_fix(host):
    return "deploy the host again (ansible-playbook site.yml --tags server --limit %s)" % host


def port_answers(port, timeout=CONNECT_TIMEOUT_S):
    """Whether something on the host's loopback accepts a TCP connection on port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout).close()
    except OSError:
        return False
    return True


def container_facts(detail, label_prefix, now):
    """What the checks read of `docker inspect` of an instance's container: its state (as the doctor reads it), the
    image it runs by name, its restart policy, its config-hash label and the chips it maps."""
    config, host_config = detail.get("Config") or {}, detail.get("HostConfig") or {}
    return dict(container_state(detail, now), image=config.get("Image"),
                restart_policy=(host_config.get("RestartPolicy") or {}).get("Name"),
                config_hash=(config.get("Labels") or {}).get(label_name(label_prefix, CONFIG_HASH_LABEL)),
                chips=sorted(device.get("PathOnHost", "") for device in host_config.get("Devices") or []
                             if is_chip_node(device.get("PathOnHost", ""))))


def ask(port, served_name, api_key, answer_check, timeout):
    """What an instance answers, asked as the deploy's probe asks (vllm_probe), each step only once the one before
    passed, all within timeout seconds: {health: {status} or {error}, models: {status, names} or {error}, smoke:
    the image request's answer or {error}, answers: the answer check's verdict or {passed: False, failure}}; a step
    not reached is missing."""
    client = Client("http://127.0.0.1:%d" % port, api_key or None, timeout)
    deadline = Deadline(timeout)
    asked = {}
    try:
        for step, path in (("health", "/health"), ("models", "/v1/models")):
            status, answer = client.call("GET", path, timeout=deadline.allow("GET " + path))
            if status is None:
                asked[step] = {"error": answer}
                return asked
            asked[step] = {"status": status}
            if status != 200:
                return asked
        asked["models"]["names"] = served_models(answer)
        if served_name not in asked["models"]["names"]:
            return asked
        params = {"model": served_name, "prompt": SMOKE_PROMPT, "max_tokens": SMOKE_MAX_TOKENS,
                  "request_timeout": timeout, "answer_check": answer_check}
        try:
            asked["smoke"] = smoke(client, params, SMOKE_SIZE, deadline)
        except RuntimeError as error:
            asked["smoke"] = {"error": str(error)}
            return asked
        try:
            asked["answers"] = check_answers_of(client, params, asked["smoke"]["answer"], deadline)
        except RuntimeError as error:
            asked["answers"] = {"passed": False, "failure": str(error)}
    except DeadlinePassed as passed:
        asked["timed_out"] = str(passed)
    return asked


def read_instance(instance, served_name, params, runner, now):
    """What the checks of one planned instance read: its container, the config-hash label its script records, and,
    while the container runs, whether its port answers and what it answers there."""
    found = {"container": None, "script_found": False, "recorded_hash": None, "listening": None, "asked": None}
    detail = inspect(params["docker"], instance["container"], runner)
    if detail is not None:
        found["container"] = container_facts(detail, params["label_prefix"], now)
    script = read_text(instance["script"], None)
    if script is not None:
        found.update(script_found=True, recorded_hash=recorded_hash(script, params["label_prefix"]))
    if found["container"] and found["container"]["running"]:
        found["listening"] = port_answers(instance["port"])
        if found["listening"]:
            found["asked"] = ask(instance["port"], served_name, params["api_key"], params["answer_check"],
                                 params["request_timeout"])
    return found


def read(params, runner=run_docker, now=None):
    """What judge reads of this host: {host, npu: npu_facts' facts, plan (None: none recorded), plan_file,
    plan_problem (why the recorded plan cannot be used, or None), instances: {name: read_instance's}}."""
    now = time.time() if now is None else now
    found = {"host": params["host"], "npu": Gatherer(params).gather(), "plan": None, "plan_file": params["plan_file"],
             "plan_problem": None, "instances": {}}
    try:
        found["plan"] = read_plan(params["plan_file"], params["host"])
    except PlanError as error:
        found["plan_problem"] = str(error)
    for instance in (found["plan"] or {}).get("instances", []):
        if not [field for field in INSTANCE_FIELDS if field not in instance]:
            found["instances"][instance["name"]] = read_instance(instance, found["plan"].get("served_name"), params,
                                                                 runner, now)
    return found


def split_fix(text):
    """(what a message says, its fix) of a message that names its own fix after "Fix: ", else (text, None)."""
    said, marker, fix = text.partition(" Fix: ")
    return (said.rstrip(" ."), fix.rstrip(".")) if marker else (text.rstrip(" ."), None)


class Verdict:
    """The checks made of one host, and the failures among them."""

    def __init__(self, host):
        self.host = host
        self.checks = 0
        self.failures = []

    def check(self, passed, name, instance, found, expected, said, fix):
        """One check; a failed one is kept with its sentence: where, what was found against what was expected
        (said), and the fix. Returns passed."""
        self.checks += 1
        if not passed:
            where = self.host if instance is None else "%s, instance %s" % (self.host, instance)
            self.failures.append({"check": name, "instance": instance, "found": str(found),
                                  "expected": str(expected), "fix": fix,
                                  "message": "%s: %s. Fix: %s" % (where, said, fix)})
        return passed

    def summary(self, instances):
        if not self.failures:
            return "%s: verified: %d instance(s), %d checks passed" % (self.host, instances, self.checks)
        return "%s: %d of %d checks failed" % (self.host, len(self.failures), self.checks)


def judge_npu(verdict, npu, expected):
    """npu-smi reads the chips, and the driver and firmware are the required ones."""
    problems = "; ".join(npu.get("problems") or []) or "no problem named"
    if not verdict.check(npu.get("ready"), "npu_smi", None, "not ready (%s)" % problems, "ready",
                         "npu-smi is not ready (%s), expected it to list the chips" % problems,
                         "each problem names its own; `ascend-vllm-fleet doctor -l %s` diagnoses the host"
                         % verdict.host):
        return
    for what, option, setting in (("driver", "driver_version", "ascend_preflight_driver_version"),
                                  ("firmware", "firmware_version", "ascend_preflight_firmware_version")):
        found, required = npu.get(option), expected[option]
        verdict.check(str(found).lower() == str(required).lower(), what, None, found, required,
                      "%s is %s, expected %s" % (what, found, required),
                      "install the release the fleet runs (playbooks/driver.yml with ascend_driver_manage: true), "
                      "or set %s to the %s the host is meant to run" % (setting, what))


def judge_chips(verdict, name, instance, npu):
    """The planned chips are still on the host, on cards still healthy."""
    gone = sorted(set(instance["devices"]) - set(npu.get("devices") or []))
    verdict.check(not gone, "chips_present", name, ", ".join(gone), ", ".join(instance["devices"]),
                  "planned chips %s are gone from the host, expected every chip of the plan (%s)" % (
                      ", ".join(gone), ", ".join(instance["devices"])),
                  "check the cards (npu-smi info, dmesg), then %s to plan without them" % deploy_fix(verdict.host))
    sick = sorted(set(npu.get("unhealthy_npu_ids") or []) & set(instance["npu_ids"]))
    verdict.check(not sick, "chips_healthy", name, ", ".join(map(str, sick)), "healthy cards",
                  "serves on NPU %s, which is no longer healthy, expected healthy cards only" % ", ".join(
                      map(str, sick)),
                  "%s: the plan leaves unhealthy cards out" % deploy_fix(verdict.host))


def judge_container(verdict, name, instance, found, plan, expected):
    """The container runs the recorded spec: running, not restarted, the plan's image, the restart policy, the
    config hash of its rendered script, and only its planned chips. False when there is no container to judge."""
    container, host = found["container"], verdict.host
    if not verdict.check(container is not None, "container", name, "none", instance["container"],
                         "no container %s, expected the one the plan names" % instance["container"],
                         "%s, which starts it" % deploy_fix(host)):
        return False
    verdict.check(container["running"], "running", name, container["status"], "running",
                  "container is %s, expected running" % container["status"],
                  "`docker logs %s` says why it stopped; `docker start %s`, or %s" % (
                      instance["container"], instance["container"], deploy_fix(host)))
    # Docker restarts a crashed server at once: running now says nothing of the crash loop it may be in.
    verdict.check(not container["restart_count"], "restarts", name, container["restart_count"], 0,
                  "crashed and was restarted by Docker %d time(s), last started %s, expected no restart: a server "
                  "in a restart loop reloads the model again and again and drops every request in flight" % (
                      container["restart_count"], container["started_at"]),
                  "`docker logs %s` shows why (a large image on 310P: set vllm_server_max_pixels), then %s" % (
                      instance["container"], deploy_fix(host)))
    verdict.check(container["image"] == plan["image"], "image", name, container["image"], plan["image"],
                  "runs image %s, expected %s" % (container["image"], plan["image"]),
                  "%s, which replaces it with the plan's image" % deploy_fix(host))
    policy = expected["restart_policy"]
    verdict.check(container["restart_policy"] == policy, "restart_policy", name, container["restart_policy"],
                  policy, "restart policy %s, expected %s" % (container["restart_policy"], policy),
                  "`docker update --restart %s %s`; or, when the deploy set another policy, deploy with "
                  "vllm_server_restart_policy: %s" % (policy, instance["container"], policy))
    if verdict.check(found["script_found"], "script", name, "missing", instance["script"],
                     "the rendered docker run %s is missing, expected the deploy's" % instance["script"],
                     "%s, which writes it" % deploy_fix(host)):
        recorded = found["recorded_hash"]
        verdict.check(recorded is not None and container["config_hash"] == recorded, "config_hash", name,
                      container["config_hash"], recorded,
                      "config-hash label %s, expected %s (the rendered script's, %s): it does not run what the "
                      "deploy rendered" % (container["config_hash"], recorded or "none: the script holds no label",
                                           instance["script"]),
                      "%s, which replaces it with the rendered spec" % deploy_fix(host))
    planned = sorted(instance["devices"])
    mapped = " ".join(container["chips"]) or "no chip"
    verdict.check(container["chips"] == planned, "chips_mapped", name, mapped, " ".join(planned),
                  "maps %s, expected its planned chips %s" % (mapped, " ".join(planned)),
                  "%s, which replaces a container re-created by hand" % deploy_fix(host))
    return True


def judge_answers(verdict, name, instance, found, served_name, host):
    """The instance listens on its port, and answers as the deploy's probe requires: /health, the served model
    with the key, the image request, the answer check."""
    port, container = instance["port"], instance["container"]
    logs = ("`docker logs %s` says why (a model still loading takes minutes, up to vllm_server_ready_timeout)"
            % container)
    if not verdict.check(found["listening"], "listening", name, "nothing", "the instance's server",
                         "nothing listens on port %d, expected the instance's server" % port,
                         "%s; else %s" % (logs, deploy_fix(host))):
        return
    asked = found["asked"]
    health = asked.get("health") or {}
    if not verdict.check(health.get("status") == 200, "health", name, health.get("status") or health.get("error"),
                         200, "does not serve: GET /health answered %s, expected 200" % (
                             health.get("status") or health.get("error") or asked.get("timed_out")),
                         "%s; `ascend-vllm-fleet doctor -l %s` names the cause" % (logs, host)):
        return
    models = asked.get("models") or {}
    status = models.get("status")
    if not verdict.check(status not in (401, 403), "api_key", name, status, 200,
                         "refuses the key: /v1/models answered %s, expected 200 with the fleet's key" % status,
                         "%s, which starts it with fleet_api_key; or set fleet_api_key to the key it was deployed "
                         "with" % deploy_fix(host)):
        return
    names = models.get("names")
    if not verdict.check(served_name in (names or []), "served_model", name,
                         names if names is not None else status or models.get("error"), served_name,
                         "does not serve %s: /v1/models %s, expected it listed" % (
                             served_name, "lists %s" % ", ".join(names) if names is not None else "answered %s" % (
                                 status or models.get("error") or asked.get("timed_out"))),
                         "%s; the plan's served name is the last deploy's vllm_server_served_name" % deploy_fix(host)):
        return
    answer = asked.get("smoke") or {"error": asked.get("timed_out")}
    said, fix = split_fix(answer.get("error") or "")
    if not verdict.check("error" not in answer, "image_request", name, said, "an answer with text and usage",
                         "does not serve: %s, expected an answer with text and usage" % said, fix or logs):
        return
    tokens = (answer.get("usage") or {}).get("completion_tokens")
    if not verdict.check(isinstance(tokens, int) and tokens > 0, "image_request", name, tokens, "more than 0",
                         "does not serve: the image request's answer counts %s completion tokens, expected more "
                         "than 0" % tokens, "%s; check that the port is vLLM's OpenAI-compatible server" % logs):
        return
    answers = asked.get("answers") or {"passed": False, "failure": asked.get("timed_out")}
    said, fix = split_fix(answers.get("failure") or "")
    verdict.check(answers.get("passed"), "answer_check", name, said, "right answers (fleet_answer_check)",
                  "does not serve right: %s, expected right answers (fleet_answer_check)" % said, fix or logs)


def judge_plan(verdict, found):
    """The recorded plan is there, this host's, and holds what the checks read; the instances it holds whole (none
    when it cannot be used)."""
    plan, problem, host = found["plan"], found["plan_problem"], verdict.host
    said, fix = split_fix(problem or "no serving plan at %s, expected the one the deploy records" % found["plan_file"])
    if ", expected " not in said:  # a plan that is another host's, or no JSON: its sentence names no expectation
        said += ", expected the plan vllm_plan recorded for %s" % host
    if not verdict.check(plan is not None, "plan", None, "none" if problem is None else said, found["plan_file"], said,
                         fix or "deploy first (ansible-playbook site.yml, or ascend-vllm-fleet deploy), which records "
                                "it; or set fleet_plan_file to where the deploy recorded it"):
        return []

    def holds(name, record, required):
        missing = [field for field in required if field not in record]
        return verdict.check(not missing, "plan", name, ", ".join(missing), ", ".join(required),
                             "the plan %s records no %s%s, expected what vllm_plan records" % (
                                 found["plan_file"], ", ".join(missing), "" if name is None else " for it"),
                             "%s, which rewrites the plan" % deploy_fix(host))

    if not holds(None, plan, PLAN_FIELDS):
        return []
    return [instance for instance in plan["instances"] if holds(instance["name"], instance, INSTANCE_FIELDS)]


def judge(found, expected):
    """The verdict on what read found of a host ({host, npu, plan, plan_file, plan_problem, instances}), against
    expected ({driver_version, firmware_version, restart_policy}): {verified, checks, failures: [{check, instance
    (None for the host), found, expected, fix, message}], summary}. A check whose subject is missing (no plan, no
    container, nothing listening) is one failure, and the checks that would read that subject are not made."""
    verdict = Verdict(found["host"])
    judge_npu(verdict, found["npu"], expected)
    plan = found["plan"]
    for instance in judge_plan(verdict, found):
        name = instance["name"]
        judge_chips(verdict, name, instance, found["npu"])
        read_of = found["instances"][name]
        if judge_container(verdict, name, instance, read_of, plan, expected) and read_of["container"]["running"]:
            judge_answers(verdict, name, instance, read_of, plan["served_name"], verdict.host)
    return {"verified": not verdict.failures, "checks": verdict.checks, "failures": verdict.failures,
            "summary": verdict.summary(len(plan["instances"]) if plan else 0)}
