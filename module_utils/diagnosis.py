# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What is wrong with a host, from what the doctor read there: the failure modes this collection knows, as one
table (RULES), and the matching of a host's evidence against it.

Each rule names a cause, the sign it is known by and the fix. A sign is one of:
- ``log``: a regular expression over an instance's ``docker logs`` lines (vLLM's, vLLM-Ascend's, the driver's);
- ``npu``: a regular expression over what npu_facts could not read (``npu-smi`` failures, dcmi codes);
- a check: a function below over the evidence (container state, answers, chips, versions, disks).
A finding is an error, or a warning for the rules in WARNINGS (serving runs, slower): a host with warnings only is
healthy, and says them. A rule may explain others (a large image's crash is why the engine died and Docker
restarted it): those are then not told apart on that instance. An error line of the log that no rule knows is
told as unknown, with its excerpt, unless it comes within ``INCIDENT_LINES`` of a line a rule knows (the stack
trace around a known error).

A host is judged by what is true now: its container's state, what it answers, and the log lines since the
container's last start. A log rule (or unknown error) seen only in lines written before that start is history: a
warning that says so. It explains the other history findings and, once the container serves again, the restart
that followed it; not what is true now. A container restarting now is in a crash loop: all of its log is current.

The README's doctor table is made from RULES (``rules_table``) and checked against it by the tests, so a failure
mode added here gets its row there.

Standard library only and Python 3.8: it runs on the hosts, inside the fleet_doctor module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import re

Rule = collections.namedtuple("Rule", "name scope sign cause fix explains")

# Docker's times: RFC 3339 in UTC to the nanosecond (`docker logs --timestamps` writes nine decimals, `docker inspect`
# drops trailing zeros; its zero time, 0001-01-01, is never). An instance's log lines start with theirs.
DOCKER_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z(?=\s|$)")

# Lines before or after a known line that belong to its incident (a Python traceback, vLLM's error banner).
INCIDENT_LINES = 40
# How an error line looks in vLLM's log (its ERROR level, a traceback, an exception's name), as against INFO lines.
# A line may start with its time (<...>Z).
ERROR_LINE = re.compile(r"\bERROR\b|Traceback \(most recent call last\)|^(\S+Z )?\s*[\w.]*(Error|Exception): ")
EXCERPT_LINES = 5
LINE_CHARS = 240


def log(pattern):
    return ("log", re.compile(pattern))


def npu(pattern):
    return ("npu", re.compile(pattern))


def check(name):
    return ("check", name)


RULES = (
    Rule("dcmi_8005", "host", npu(r"ret is -8005"),
         "npu-smi fails with dcmi -8005: the driver cannot be opened (a container holds /dev/davinci*, no reboot "
         "after a driver or firmware upgrade, or not root)",
         "stop the container holding the chips (docker ps), reboot after an upgrade, run npu-smi as root", ()),
    Rule("dcmi_8020", "host", npu(r"ret is -8020"),
         "npu-smi fails with dcmi -8020: the device is in use",
         "find the process (npu-smi info) or container using the device and stop it", ()),
    Rule("npu_smi_unusable", "host", npu(r"npu-smi not found|did not answer|is not an executable"),
         "npu-smi cannot be run or does not answer: the driver is not installed, or hung",
         "install the Ascend driver (playbooks/driver.yml) or set fleet_npu_smi; a hung driver needs a reboot", ()),
    Rule("chip_unhealthy", "host", check("chip_unhealthy"),
         "a chip is not healthy",
         "npu-smi info -t health -i <id> and dmesg; reset or replace the card, or "
         "ascend_preflight_unhealthy_chip_action: exclude_card and deploy again", ()),
    Rule("driver_not_loaded", "host", check("driver_not_loaded"),
         "the driver running is not the one installed: an upgrade waits for a reboot",
         "reboot the host (playbooks/driver.yml does, and only that)", ()),
    Rule("foreign_holder", "host", check("foreign_holder"),
         "a container this collection did not deploy maps the chips: a chip opens in one container only",
         "stop that container (docker stop <name>), then deploy again",
         # What follows from it whatever the log shows now: an instance that restarted just now has not yet
         # logged the busy chips again, and does not serve.
         ("chip_busy", "restarts", "not_serving", "instance_stopped")),
    Rule("disk_filling", "host", check("disk_filling"),
         "a disk of the model, cache, Docker or log paths is nearly full",
         "free space there (old images: docker image prune; logs), or move the path; doctor_disk_full_share sets "
         "the share that counts as full", ()),
    Rule("instance_missing", "instance", check("instance_missing"),
         "an instance of the recorded plan has no container",
         "deploy again (ansible-playbook site.yml --tags server --limit <host>)", ()),
    Rule("instance_stopped", "instance", check("instance_stopped"),
         "the instance's container is not running",
         "read the log excerpt for why it stopped; docker start <name>, or deploy again", ()),
    # The aicpu IndexPut fault of large images on 310P (vllm-ascend #10720, #12086, #13050), which kills every
    # image request on the releases the release table marks for it. Its wording differs by release: "error code is
    # 507018" (#10720), "error code:507018" (#4419).
    Rule("large_image_crash", "instance",
         log(r"error code(?: is |:) ?507018|result = 507018|kernelName=IndexPut|reason=aicpu exception"),
         "a large image crashed the 310P engine (aicpu IndexPut, error 507018); Docker restarts it and it reloads",
         "keep vllm_server_max_pixels (default 1310720) or lower it, and deploy again; a hand-made "
         "--mm-processor-kwargs needs min_pixels beside max_pixels",
         ("engine_dead", "engine_unhealthy", "restarts", "not_serving")),
    Rule("chip_busy", "instance", log(r"drvRet=87|resources are busy"),
         "the chips were held by another container when the instance started (drvRet 87)",
         "find the holder (docker ps; a privileged container sees every chip) and stop it, then docker restart "
         "the instance", ("restarts", "instance_stopped", "not_serving")),
    Rule("engine_ready_timeout", "instance", log(r"Timed out waiting for engine core processes to start"),
         "vLLM gave up on its engine before the model loaded (VLLM_ENGINE_READY_TIMEOUT_S)",
         "raise vllm_server_ready_timeout (the role passes it to vLLM) and deploy again; check the model disk's "
         "speed", ("restarts", "instance_stopped", "not_serving")),
    # torch_npu's message (vllm-ascend #2378, #6611) and the 310P runtime's (EL0004, 207001: vllm-ascend #1993).
    Rule("npu_out_of_memory", "instance", log(r"NPU out of memory|OutOfMemoryError|EL0004|runtime result = 207001"),
         "the NPU ran out of memory",
         "lower vllm_server_gpu_memory_utilization or vllm_server_max_model_len, or serve on more chips "
         "(vllm_server_layout), and deploy again", ("engine_dead", "engine_unhealthy", "restarts", "not_serving")),
    # vLLM's own refusals at load when the KV cache has no room (vllm/v1/core/kv_cache_utils.py, 0.18) and
    # vLLM-Ascend's when the share asked for is not free (vllm_ascend/worker/worker.py): what the fit estimate
    # checks before a deploy, met by an instance started by hand or with vllm_server_fit_check false.
    Rule("kv_cache_does_not_fit", "instance",
         log(r"No available memory for the cache blocks|To serve at least one request with the models's max seq len"
             r"|Free memory on device .* on startup is less than desired GPU memory utilization"),
         "the model does not fit its chips: no room for the KV cache of one max_model_len request, or the share of "
         "the chip asked for is not free",
         "lower vllm_server_max_model_len, serve on more chips (vllm_server_layout per_card, tensor parallelism 2) "
         "or set vllm_server_gpu_memory_utilization to what is free; keep vllm_server_fit_check on, which refuses "
         "such a setting before any container changes",
         ("engine_dead", "engine_unhealthy", "restarts", "not_serving")),
    Rule("soc_mismatch", "instance", log(r"socversion \S+ of bin package does not match"),
         "the image is built for another Ascend chip than the 310P3",
         "use the release's -310p tag: leave fleet_image_tag to fleet_image_version and fleet_image_variant",
         ("restarts", "instance_stopped", "not_serving")),
    # vLLM's own words for a dead engine (vllm/v1/engine/exceptions.py, core_client.py, the API server's launcher).
    Rule("engine_dead", "instance", log(r"EngineDeadError|EngineCore encountered|Engine core proc \S+ died "
                                        r"unexpectedly|VLLM Engine failed, terminating server"),
         "the engine died mid-request: every request fails until the server restarts",
         "the lines before it in the log name the cause; Docker restarts the server, which loads again",
         ("engine_unhealthy", "restarts", "not_serving")),
    Rule("engine_unhealthy", "instance", check("engine_unhealthy"),
         "the server answers /health 503: its engine is dead and the server is shutting down",
         "docker logs <name> names the cause; Docker restarts it (the model loads again)", ("not_serving",)),
    Rule("host_oom_kill", "instance", check("host_oom_kill"),
         "the kernel killed the container for host memory (OOMKilled)",
         "give the host more memory or run fewer instances on it; check other processes' memory", ("restarts",)),
    Rule("restarts", "instance", check("restarts"),
         "Docker restarted the server recently: it crashed or exited",
         "the log excerpt names why; each restart loads the model again", ()),
    Rule("key_refused", "instance", check("key_refused"),
         "the server refuses the key of its own env file",
         "leave the key to fleet_api_key (no --api-key in vllm_server_extra_args) and deploy again", ()),
    Rule("degenerate_answers", "instance", check("degenerate_answers"),
         "the model answers garbage or the wrong thing with HTTP 200 (on 310P most often float16 overflow)",
         "start from the image's own precision settings and --dtype float16; check the model folder's "
         "config.json and chat_template", ()),
    Rule("jemalloc_missing", "instance", log(r"jemalloc is not preloaded"),
         "the server runs without jemalloc (started by hand, not from its rendered script)",
         "re-create it from /etc/vllm-ascend/<name>.sh, which sets LD_PRELOAD, or deploy again", ()),
    Rule("cpu_binding", "instance", log(r"Bind cpus failed|Insufficient CPUs|NPU topo affinity not found"),
         "vLLM-Ascend could not pin its workers to the chips' NUMA CPUs: instances share cores or have too few",
         "keep vllm_server_cpu_binding: cpuset (disjoint slices of the node); on small hosts, disabled", ()),
    Rule("not_serving", "instance", check("not_serving"),
         "the server runs but does not answer /health, or a chat request",
         "a model load takes minutes (up to vllm_server_ready_timeout); later, the log excerpt says why", ()),
)


def docker_time(text):
    """A Docker time, or the one a log line starts with, as (its second, nanoseconds), which order as the times
    do; None for none, or the zero time."""
    match = DOCKER_TIME.match(text or "")
    if not match or match.group(1).startswith("0001"):
        return None
    return match.group(1), int((match.group(2) or "")[:9].ljust(9, "0"))


def clip(line):
    """A line as a finding shows it: its time to the second, and no longer than LINE_CHARS."""
    line = DOCKER_TIME.sub(lambda match: match.group(1) + "Z", line.rstrip(), count=1)
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 3] + "..."


def chip_unhealthy(evidence, instance, settings):
    return ["NPU %s chip %s health %s" % (chip.get("npu_id"), chip.get("chip_id"), chip.get("health"))
            for chip in evidence["npu"].get("chips", []) if chip.get("health") not in (None, "OK")]


def driver_not_loaded(evidence, instance, settings):
    loaded, installed = evidence["npu"].get("driver_version"), evidence["npu"].get("driver_version_file")
    if loaded and installed and loaded.lower() != installed.lower():
        return ["npu-smi reports driver %s, version.info says %s" % (loaded, installed)]
    return []


def foreign_holder(evidence, instance, settings):
    return list(evidence.get("foreign_holders", []))


def disk_filling(evidence, instance, settings):
    return ["%s (%s) is %d%% full, %.1f GB free" % (
        disk["path"], disk["purpose"], round(disk["used_share"] * 100), disk["free_bytes"] / 1e9)
        for disk in evidence.get("disks", []) if disk["used_share"] >= settings["disk_full_share"]]


def instance_missing(evidence, instance, settings):
    return ["no container %s" % instance["name"]] if instance.get("container") is None else []


def instance_stopped(evidence, instance, settings):
    state = instance.get("container")
    if not state or state["running"] or state["status"] == "restarting":
        return []
    return ["%s since %s, exit code %s" % (state["status"], state.get("finished_at"), state.get("exit_code"))]


def restarts(evidence, instance, settings):
    state = instance.get("container")
    if not state or not state.get("restart_count"):
        return []
    since = state.get("started_s_ago")
    if state["status"] != "restarting" and since is not None and since > settings["restart_window_s"]:
        return []
    return ["restarted %d time(s), last exit code %s, %s" % (
        state["restart_count"], state.get("exit_code"),
        "restarting now" if state["status"] == "restarting" else "last started %ds ago" % since)]


def host_oom_kill(evidence, instance, settings):
    state = instance.get("container")
    return ["OOMKilled, exit code %s" % state.get("exit_code")] if state and state.get("oom_killed") else []


def engine_unhealthy(evidence, instance, settings):
    health = instance.get("health") or {}
    return ["GET /health answered 503"] if health.get("status") == 503 else []


def unanswered(instance):
    """The answer check's questions a serving instance gave no answer to (an HTTP error, a timeout)."""
    answers = instance.get("answers") or {}
    return [entry for entry in answers.get("asked", []) if entry.get("verdict") == "no answer"]


def not_serving(evidence, instance, settings):
    state, health = instance.get("container"), instance.get("health") or {}
    if not state or not state["running"]:
        return []
    if health.get("status") == 200:
        return ["a chat request got no answer: %s" % entry["why"] for entry in unanswered(instance)]
    return ["GET /health: %s, %ds after the start" % (
        "HTTP %s" % health["status"] if health.get("status") else health.get("error", "no answer"),
        state.get("started_s_ago") or 0)]


def key_refused(evidence, instance, settings):
    models = instance.get("models") or {}
    return ["/v1/models answered %s to the key in %s" % (models["status"], instance.get("env_file"))] \
        if models.get("status") in (401, 403) else []


def degenerate_answers(evidence, instance, settings):
    answers = instance.get("answers")
    if not answers or answers.get("passed") or len(unanswered(instance)) == len(answers.get("asked", [])):
        return []
    return [answers["failure"]]


# Rules whose cause leaves the instance serving right, only slower.
WARNINGS = frozenset(("jemalloc_missing", "cpu_binding"))
# What a cause seen only before the container's last start explains, beside the other history: the restart that
# followed it, once the container serves again. What is true now (its state, its answers) it does not explain.
HISTORY_EXPLAINS = frozenset(("restarts",))
# Error lines no rule knows, told as a rule's finding is.
UNKNOWN = Rule("unknown_error", "instance", None, "errors no rule of the doctor knows",
               "read the excerpt and the full log (docker logs); the support bundle holds it", ())

CHECKS = {"chip_unhealthy": chip_unhealthy, "driver_not_loaded": driver_not_loaded, "foreign_holder": foreign_holder,
          "disk_filling": disk_filling, "instance_missing": instance_missing, "instance_stopped": instance_stopped,
          "restarts": restarts, "host_oom_kill": host_oom_kill, "engine_unhealthy": engine_unhealthy,
          "not_serving": not_serving, "key_refused": key_refused, "degenerate_answers": degenerate_answers}


def matching(pattern, lines):
    """(index, line) of each line pattern finds."""
    return [(index, line) for index, line in enumerate(lines) if pattern.search(line)]


def finding(rule, instance, signs, history=None):
    """history: what to say of signs that were all written before the container's last start; the finding is then
    a warning."""
    found = {"rule": rule.name, "instance": instance, "cause": rule.cause, "fix": rule.fix,
             "severity": "warning" if history or rule.name in WARNINGS else "error", "evidence": clip(signs[-1]),
             "count": len(signs)}
    if history:
        found["history"] = history
    return found


def last_start(instance):
    """The container's last start (docker_time), from which its log tells what is true now; None when all of it
    does: a container restarting now is in a crash loop, where every run's end is as current as the last, and one
    never started has no start."""
    state = instance.get("container") or {}
    return None if state.get("status") == "restarting" else docker_time(state.get("started_at"))


def written_before(line, start):
    """Whether a log line was written before start. A line at the start is not, nor one without a time: what
    cannot be placed is not put aside as history."""
    stamp = docker_time(line)
    return start is not None and stamp is not None and stamp < start


def serving(instance):
    state = instance.get("container")
    return bool(state and state["running"] and (instance.get("health") or {}).get("status") == 200)


def history_note(instance):
    return "seen before the container's last start (%s)%s" % (
        clip(instance["container"]["started_at"]), "; it has served since" if serving(instance) else "")


def to_tell(hits, past):
    """(the lines of hits to tell, whether they are history): those since the last start, else all of them."""
    now = [line for index, line in hits if not past[index]]
    return (now, False) if now else ([line for index, line in hits], True)


def instance_findings(evidence, instance, settings, host_explained):
    """The findings of one instance, but those that its host's findings (host_explained: rule names) explain."""
    lines = instance.get("log") or []
    start = last_start(instance)
    past = [written_before(line, start) for line in lines]
    note = history_note(instance) if any(past) else None
    found, known_indexes = [], []
    for rule in (rule for rule in RULES if rule.scope == "instance"):
        kind, sign = rule.sign
        if kind == "log":
            hits = matching(sign, lines)
            known_indexes.extend(index for index, line in hits)
            signs, history = to_tell(hits, past)
        else:
            signs, history = CHECKS[sign](evidence, instance, settings), False
        if signs:
            found.append((rule, finding(rule, instance["name"], signs, note if history else None)))
    explained = set(host_explained).union(*[rule.explains for rule, item in found if "history" not in item])
    by_history = set().union(*[rule.explains for rule, item in found if "history" in item])
    by_history_now = by_history & HISTORY_EXPLAINS if serving(instance) else set()
    kept = [item for rule, item in found if item["rule"] not in explained and item["rule"] not in by_history_now
            and not ("history" in item and item["rule"] in by_history)]
    # An incident's lines (a traceback around a known error) do not reach across a start.
    unknown = [(index, line) for index, line in enumerate(lines) if ERROR_LINE.search(line) and not any(
        abs(index - known) <= INCIDENT_LINES and past[known] == past[index] for known in known_indexes)]
    if unknown:
        signs, history = to_tell(unknown, past)
        kept.append(dict(finding(UNKNOWN, instance["name"], signs, note if history else None),
                         excerpt=[clip(line) for line in signs[-EXCERPT_LINES:]]))
    return kept


def log_causes(lines):
    """The causes the log rules find in a container's log lines, but those another found cause explains, each as
    `<rule>: <cause>`: what a failed readiness check names before its log excerpt (vllm_probe)."""
    found = [rule for rule in RULES if rule.sign[0] == "log" and matching(rule.sign[1], lines)]
    explained = set().union(*[rule.explains for rule in found])
    return ["%s: %s" % (rule.name, rule.cause) for rule in found if rule.name not in explained]


def diagnose(evidence, settings):
    """The findings of one host's evidence: {healthy, findings: [{rule, instance, cause, evidence, count, fix,
    severity, history (only for what was seen before the container's last start)}]}, host-wide ones first.
    evidence: {npu: npu_facts' facts, foreign_holders: [text], disks: [{path, purpose, used_share, free_bytes}],
    instances: [{name, container (None: no such container; else status, running, restart_count, exit_code,
    oom_killed, started_at, started_s_ago, finished_at), log: [lines, each from its Docker time], health: {status,
    error}, models: {status}, answers: answer_check's verdict or None, env_file}]}; settings: {disk_full_share,
    restart_window_s}."""
    findings = []
    host_explained = set()
    problems = evidence["npu"].get("problems", [])
    for rule in (rule for rule in RULES if rule.scope == "host"):
        kind, sign = rule.sign
        signs = [line for index, line in matching(sign, problems)] if kind == "npu" \
            else CHECKS[sign](evidence, None, settings)
        if signs:
            findings.append(finding(rule, None, signs))
            host_explained.update(rule.explains)
    for instance in evidence.get("instances", []):
        findings.extend(instance_findings(evidence, instance, settings, host_explained))
    return {"healthy": not [item for item in findings if item["severity"] == "error"], "findings": findings}


def summary_line(host, diagnosis):
    """One line for a host: healthy, or each cause with its evidence and fix; warnings after the errors."""
    def told(item):
        return "%s%s: %s (%s%s%s). Fix: %s" % (
            "[%s] " % item["instance"] if item.get("instance") else "", item["rule"], item["cause"],
            "%dx, last: " % item["count"] if item["count"] > 1 else "", item["evidence"],
            "; " + item["history"] if item.get("history") else "", item["fix"])

    errors = [told(item) for item in diagnosis["findings"] if item["severity"] == "error"]
    warnings = ["warning: " + told(item) for item in diagnosis["findings"] if item["severity"] == "warning"]
    return "%s: %s" % (host, " | ".join((errors or ["healthy"]) + warnings))


def rules_table():
    """The README's doctor table, in Markdown: a row per rule."""
    rows = ["| rule | where it looks | cause | fix |", "|---|---|---|---|"]
    for rule in RULES:
        kind, sign = rule.sign
        where = CHECK_WHERE[sign] if kind == "check" else "%s: `%s`" % (
            "the instance's log" if kind == "log" else "what npu-smi could not read", sign.pattern)
        cause = ("(warning) " if rule.name in WARNINGS else "") + rule.cause
        rows.append("| `%s` | %s | %s | %s |" % (rule.name, where.replace("|", "\\|"), cause, rule.fix))
    return "\n".join(rows)


# What each check reads, as the README's table says it.
CHECK_WHERE = {
    "chip_unhealthy": "npu-smi's chip health",
    "driver_not_loaded": "npu-smi's driver version against the driver's version.info",
    "foreign_holder": "containers mapping /dev/davinci* without this collection's labels",
    "disk_filling": "the used share of the model, cache, Docker and log paths' file systems",
    "instance_missing": "the recorded plan against `docker inspect`",
    "instance_stopped": "`docker inspect`: State",
    "engine_unhealthy": "GET /health",
    "host_oom_kill": "`docker inspect`: State.OOMKilled",
    "restarts": "`docker inspect`: RestartCount, within doctor_restart_window_s of the last start",
    "key_refused": "GET /v1/models with the key of the instance's env file",
    "degenerate_answers": "the answer check (fleet_answer_check) against the instance",
    "not_serving": "GET /health of a running container, and whether its chat requests got answers",
}
