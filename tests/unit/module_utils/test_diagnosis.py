"""module_utils/diagnosis.py: every rule fires on its sign, on the right host or instance, with its fix; healthy
evidence is healthy; a cause explains its consequences; error lines no rule knows are shown as unknown; the README's
doctor table is the rules' own."""
import copy

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import diagnosis
from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases
from conftest import REPO

SETTINGS = {"disk_full_share": 0.9, "restart_window_s": 3600}
STAMP = "2026-12-04T14:02:11Z "
# A healthy instance's log, as the stand-in and vLLM 0.18 print it.
HEALTHY_LINES = (
    "INFO jemalloc preloaded",
    "INFO 12-04 14:00:01 [api_server.py:1351] vLLM API server version 0.18.0rc1",
    "INFO 12-04 14:00:02 [loader.py:447] Loading weights took 61.2 seconds",
    "INFO:     Started server process [1]",
    "INFO 12-04 14:01:02 [loggers.py:123] Engine 000: Avg prompt throughput: 120.3 tokens/s",
)
HEALTHY_LOG = [STAMP + line for line in HEALTHY_LINES]


def healthy_instance(name="vllm-ascend"):
    return {"name": name, "port": 8000, "env_file": "/etc/vllm-ascend/%s.env" % name,
            "container": {"status": "running", "running": True, "restart_count": 0, "exit_code": 0,
                          "oom_killed": False, "started_s_ago": 7200, "finished_at": "0001-01-01T00:00:00Z"},
            "log": list(HEALTHY_LOG), "health": {"status": 200}, "models": {"status": 200},
            "answers": {"mode": "known", "passed": True, "failure": None}}


def healthy_evidence():
    return {"npu": {"problems": [], "driver_version": "25.5.2", "driver_version_file": "25.5.2",
                    "chips": [{"npu_id": 3, "chip_id": chip, "health": "OK"} for chip in (0, 1)]},
            "foreign_holders": [],
            "disks": [{"path": "/data/models/Qwen3-VL-8B-Instruct", "purpose": "model", "used_share": 0.41,
                       "free_bytes": 300e9}],
            "instances": [healthy_instance(), healthy_instance("vllm-ascend-npu7")]}


def with_log(*lines):
    def change(evidence):
        evidence["instances"][0]["log"] += [STAMP + line for line in lines]
    return change


def with_state(**state):
    def change(evidence):
        evidence["instances"][0]["container"].update(state)
    return change


def set_in(path, value):
    def change(evidence):
        target = evidence
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


# Each rule: how its failure mode shows, and a word of the evidence the finding must quote. Every rule has a case.
CASES = {
    "dcmi_8005": (set_in(("npu", "problems"), ["`npu-smi info` failed: dcmi module initialize failed. ret is -8005: "
                                               "..."]), "-8005"),
    "dcmi_8020": (set_in(("npu", "problems"), ["`npu-smi info` failed: dcmi model initialized failed, because the "
                                               "device is used. ret is -8020"]), "-8020"),
    "npu_smi_unusable": (set_in(("npu", "problems"), ["npu-smi not found (looked on PATH). Fix: install"]),
                         "not found"),
    "chip_unhealthy": (set_in(("npu", "chips"), [{"npu_id": 3, "chip_id": 1, "health": "Alarm"}]), "health Alarm"),
    "driver_not_loaded": (set_in(("npu", "driver_version_file"), "25.5.3"), "25.5.3"),
    "foreign_holder": (set_in(("foreign_holders",), ["container llm-test maps /dev/davinci0"]), "llm-test"),
    "disk_filling": (set_in(("disks",), [{"path": "/var/lib/docker", "purpose": "docker", "used_share": 0.95,
                                          "free_bytes": 4e9}]), "95% full"),
    "instance_missing": (set_in(("instances", 0, "container"), None), "no container"),
    "instance_stopped": (with_state(status="exited", running=False, exit_code=137), "exit code 137"),
    "large_image_crash": (with_log(
        "ERROR soName=libpt_kernels.so, funcName=RunCpuKernel, kernelName=IndexPut, errorCode=0x2a.",
        "ERROR RuntimeError: ACL stream synchronize failed, error code is 507018",
        "ERROR vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."), "507018"),
    "chip_busy": (with_log("ERROR [drv_api.c:120] drvRet=87, open device 0 failed: resources are busy"),
                  "drvRet=87"),
    "engine_ready_timeout": (with_log("ERROR TimeoutError: Timed out waiting for engine core processes to start. "
                                      "Waited 600 seconds"), "Timed out"),
    "npu_out_of_memory": (with_log("ERROR RuntimeError: NPU out of memory. Tried to allocate 450.00 MiB (NPU 3; "
                                   "21.00 GiB total capacity)"), "NPU out of memory"),
    "kv_cache_does_not_fit": (with_log(
        "ERROR ValueError: To serve at least one request with the models's max seq len (65536), (9.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (2.84 GiB)."), "max seq len (65536)"),
    "soc_mismatch": (with_log("[ERROR] the socversion Ascend910B1 of bin package does not match the current device "
                              "socverison Ascend310P3"), "Ascend910B1"),
    "engine_dead": (with_log("ERROR Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."),
                    "died unexpectedly"),
    "engine_unhealthy": (set_in(("instances", 0, "health"), {"status": 503}), "503"),
    "host_oom_kill": (with_state(oom_killed=True, exit_code=137, started_s_ago=99999), "OOMKilled"),
    "restarts": (with_state(restart_count=4, exit_code=1, started_s_ago=30), "4 time(s)"),
    "key_refused": (set_in(("instances", 0, "models"), {"status": 401}), "401"),
    "degenerate_answers": (set_in(("instances", 0, "answers"), {
        "passed": False, "asked": [{"verdict": "degenerate"}],
        "failure": 'the answer check (known) failed: ... got "!!!!!!!!" (degenerate)'}), "!!!!"),
    "jemalloc_missing": (with_log("WARNING jemalloc is not preloaded (LD_PRELOAD does not name an existing "
                                  "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2)"), "jemalloc"),
    "cpu_binding": (with_log("WARNING Bind cpus failed in rank0: Insufficient CPUs Skip binding cpu."),
                    "Bind cpus failed"),
    "not_serving": (set_in(("instances", 0, "health"), {"error": "[Errno 111] Connection refused"}),
                    "Connection refused"),
}


def test_every_rule_has_a_case_and_a_check_or_pattern():
    assert set(CASES) == set(rule.name for rule in diagnosis.RULES)
    for rule in diagnosis.RULES:
        kind, sign = rule.sign
        assert kind in ("log", "npu", "check"), rule
        if kind == "check":
            assert sign in diagnosis.CHECKS and sign in diagnosis.CHECK_WHERE, rule
        assert set(rule.explains) <= set(case for case in CASES), rule


def test_healthy_evidence_is_healthy():
    found = diagnosis.diagnose(healthy_evidence(), SETTINGS)
    assert found == {"healthy": True, "findings": []}
    assert diagnosis.summary_line("npu-a", found) == "npu-a: healthy"


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_failure_mode_is_named_with_its_evidence_and_fix(rule):
    change, word = CASES[rule]
    evidence = healthy_evidence()
    change(evidence)
    found = diagnosis.diagnose(evidence, SETTINGS)
    # A warning's cause leaves the instance serving: the host is healthy, and says it.
    assert found["healthy"] is (rule in diagnosis.WARNINGS)
    (named,) = [item for item in found["findings"] if item["rule"] == rule]
    assert named["severity"] == ("warning" if rule in diagnosis.WARNINGS else "error")
    scope = next(item.scope for item in diagnosis.RULES if item.name == rule)
    assert named["instance"] == (None if scope == "host" else "vllm-ascend"), named
    assert word in named["evidence"] and named["fix"] and named["cause"], named
    # The other instance stays out of it.
    assert not [item for item in found["findings"] if item["instance"] == "vllm-ascend-npu7"], found
    line = diagnosis.summary_line("npu-a", found)
    assert line.startswith("npu-a: healthy | warning: " if rule in diagnosis.WARNINGS else "npu-a: [") or \
        named["instance"] is None, line
    assert rule in line and "Fix: " + named["fix"] in line, line


def test_a_large_image_crash_explains_the_dead_engine_and_the_restarts():
    evidence = healthy_evidence()
    CASES["large_image_crash"][0](evidence)
    with_state(restart_count=1, started_s_ago=40)(evidence)
    found = diagnosis.diagnose(evidence, SETTINGS)
    assert [item["rule"] for item in found["findings"]] == ["large_image_crash"], found
    crash = found["findings"][0]
    assert crash["count"] == 2 and crash["evidence"].startswith(STAMP + "ERROR RuntimeError"), crash


def test_the_crash_is_named_in_the_words_of_each_release_the_table_records_it_for():
    """The release table's defects quote the engine's last lines as their issues do (vllm-ascend #4419's wording
    differs from #10720's): the doctor names each as the IndexPut crash."""
    for entry in vllm_releases.load()["releases"].values():
        for defect in entry["defects"]:
            evidence = healthy_evidence()
            with_log(*("ERROR " + line for line in defect["log"]))(evidence)
            found = diagnosis.diagnose(evidence, SETTINGS)
            assert [item["rule"] for item in found["findings"]] == ["large_image_crash"], (defect["issue"], found)


def test_a_foreign_holder_explains_the_busy_chips_of_every_instance():
    evidence = healthy_evidence()
    CASES["foreign_holder"][0](evidence)
    CASES["chip_busy"][0](evidence)
    assert [item["rule"] for item in diagnosis.diagnose(evidence, SETTINGS)["findings"]] == ["foreign_holder"]


def test_a_foreign_holder_explains_an_instance_that_restarted_just_now_and_does_not_serve_yet():
    """The instance's crash loop caught between two starts: its busy-chip lines are from before the last start, and
    it restarted and does not serve; the holder is the one cause."""
    evidence = healthy_evidence()
    CASES["foreign_holder"][0](evidence)
    with_state(restart_count=4, exit_code=0, started_s_ago=0)(evidence)
    set_in(("instances", 0, "health"), {"status": None, "error": "Remote end closed connection"})(evidence)
    assert [item["rule"] for item in diagnosis.diagnose(evidence, SETTINGS)["findings"]
            if item["severity"] == "error"] == ["foreign_holder"]


def test_an_old_restart_is_not_restarting():
    evidence = healthy_evidence()
    with_state(restart_count=2, started_s_ago=3 * 86400)(evidence)
    assert diagnosis.diagnose(evidence, SETTINGS)["healthy"]
    with_state(status="restarting", running=False)(evidence)
    assert [item["rule"] for item in diagnosis.diagnose(evidence, SETTINGS)["findings"]] == ["restarts"]


def test_chat_requests_that_get_no_answer_are_not_called_garbage():
    evidence = healthy_evidence()
    set_in(("instances", 0, "answers"), {"passed": False, "failure": "the answer check (known) failed: ...",
                                         "asked": [{"verdict": "no answer", "why": "the server answered HTTP 500"}]})(
        evidence)
    (found,) = diagnosis.diagnose(evidence, SETTINGS)["findings"]
    assert found["rule"] == "not_serving" and "HTTP 500" in found["evidence"], found


def test_the_disk_threshold_is_the_settings():
    evidence = healthy_evidence()
    assert diagnosis.diagnose(evidence, dict(SETTINGS, disk_full_share=0.4))["findings"][0]["rule"] == "disk_filling"
    assert diagnosis.diagnose(evidence, dict(SETTINGS, disk_full_share=0.42))["healthy"]


def test_errors_no_rule_knows_are_shown_as_unknown_with_their_excerpt():
    evidence = healthy_evidence()
    with_log("ERROR 12-04 14:05:00 [core.py:88] ValueError: the flux capacitor is empty",
             "Traceback (most recent call last):", "ZeroDivisionError: division by zero")(evidence)
    found = diagnosis.diagnose(evidence, SETTINGS)
    (unknown,) = found["findings"]
    assert unknown["rule"] == "unknown_error" and unknown["instance"] == "vllm-ascend" and unknown["count"] == 3
    assert unknown["excerpt"][0].endswith("the flux capacitor is empty"), unknown
    assert "unknown_error" in diagnosis.summary_line("npu-a", found)


def test_a_traceback_around_a_known_error_is_part_of_it():
    evidence = healthy_evidence()
    with_log("Traceback (most recent call last):", '  File "worker.py", line 12, in execute',
             "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB")(evidence)
    assert [item["rule"] for item in diagnosis.diagnose(evidence, SETTINGS)["findings"]] == ["npu_out_of_memory"]


def test_far_from_a_known_error_an_unknown_one_is_still_told():
    evidence = healthy_evidence()
    with_log("ERROR RuntimeError: NPU out of memory.", *(["INFO request done"] * (diagnosis.INCIDENT_LINES + 1)),
             "ERROR KeyError: 'mm_hashes'")(evidence)
    rules = [item["rule"] for item in diagnosis.diagnose(evidence, SETTINGS)["findings"]]
    assert rules == ["npu_out_of_memory", "unknown_error"], rules


def test_long_lines_are_clipped_in_the_evidence():
    evidence = healthy_evidence()
    with_log("ERROR RuntimeError: NPU out of memory. " + "x" * 5000)(evidence)
    (found,) = diagnosis.diagnose(evidence, SETTINGS)["findings"]
    assert len(found["evidence"]) == diagnosis.LINE_CHARS and found["evidence"].endswith("...")


def test_the_evidence_given_is_not_changed():
    evidence = healthy_evidence()
    CASES["large_image_crash"][0](evidence)
    before = copy.deepcopy(evidence)
    diagnosis.diagnose(evidence, SETTINGS)
    assert evidence == before


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_readmes_doctor_table_is_the_rules(readme):
    """The table is made from RULES (scripts/dev docs writes it); a rule added or changed without it fails here."""
    text = (REPO / readme).read_text(encoding="utf-8")
    assert diagnosis.rules_table() in text, "%s: the doctor table differs from RULES: run scripts/dev docs" % readme


# An instance whose engine died, as vLLM 0.18 logs it, and whose container then started again: Docker's times as
# `docker logs --timestamps` writes them (nine decimals) and `docker inspect` gives State.StartedAt (trailing zeros
# dropped).
LAST_START = "2026-12-04T13:16:31.25Z"
ENGINE_DEATH = [
    "2026-12-04T13:10:02.104224071Z INFO 12-04 13:10:02 [api_server.py:1351] vLLM API server version 0.18.0rc1",
    "2026-12-04T13:16:19.801234567Z ERROR 12-04 13:16:19 [core_client.py:564] Engine core proc EngineCore_DP0 died "
    "unexpectedly, shutting down client.",
    "2026-12-04T13:16:19.900000000Z ERROR 12-04 13:16:19 [serving_chat.py:1120] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "2026-12-04T13:16:20.011000000Z ERROR 12-04 13:16:20 [serving_chat.py:1120] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "2026-12-04T13:16:20.512345678Z ERROR 12-04 13:16:20 [launcher.py:101] VLLM Engine failed, terminating server",
]
SINCE = "2026-12-04T13:16:33.000000001Z "


def restarted(evidence, log_after=None, **state):
    """Instance 0 with ENGINE_DEATH before its container's last start (LAST_START, 19 minutes ago, by its restart
    policy) and log_after since; state changes the container's state from a serving one."""
    instance = evidence["instances"][0]
    instance["container"].update(dict(dict(started_at=LAST_START, restart_count=1, exit_code=1, started_s_ago=1140),
                                       **state))
    instance["log"] = ENGINE_DEATH + [SINCE + line for line in (HEALTHY_LINES if log_after is None else log_after)]
    return evidence


def rules_of(found, severity=None):
    return [item["rule"] for item in found["findings"] if severity in (None, item["severity"])]


def test_a_death_before_the_last_start_of_a_container_that_serves_again_is_history():
    """Docker restarted the server after its engine died and it has served since: the host is healthy, and says
    what happened before, with the count, the last line's time and the start."""
    found = diagnosis.diagnose(restarted(healthy_evidence()), SETTINGS)
    assert found["healthy"] and rules_of(found) == ["engine_dead"], found
    (dead,) = found["findings"]
    assert dead["severity"] == "warning" and dead["count"] == 4 and dead["instance"] == "vllm-ascend", dead
    assert dead["evidence"].startswith("2026-12-04T13:16:20Z ERROR") and "terminating server" in dead["evidence"]
    assert dead["history"] == "seen before the container's last start (2026-12-04T13:16:31Z); it has served since"
    assert diagnosis.summary_line("npu-a", found) == (
        "npu-a: healthy | warning: [vllm-ascend] engine_dead: %s (4x, last: %s; %s). Fix: %s" % (
            dead["cause"], dead["evidence"], dead["history"], dead["fix"]))


def test_a_container_started_by_hand_after_a_death_is_judged_by_its_new_run():
    """docker restart does not count in RestartCount: no restart to explain, the death still history."""
    found = diagnosis.diagnose(restarted(healthy_evidence(), restart_count=0), SETTINGS)
    assert found["healthy"] and rules_of(found, "warning") == ["engine_dead"], found


REFUSED = {"error": "[Errno 111] Connection refused"}


@pytest.mark.parametrize("case,state,health,log_after,errors", [
    # The engine is dead now: /health 503 and the server shutting down, its restart still to come.
    ("died now", dict(started_at="2026-12-04T13:00:00.5Z", restart_count=0), {"status": 503}, None, ["engine_dead"]),
    # Docker started it again and it died again: its new run's own lines.
    ("dying again", {}, {"status": 503}, list(HEALTHY_LINES[:2]) + [
        "ERROR 12-04 13:40:00 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly"],
     ["engine_dead"]),
    # A crash loop: between two runs every run's death is current, the last start's too.
    ("restarting now", dict(status="restarting", restart_count=4, started_s_ago=3), REFUSED, [], ["engine_dead"]),
    # The container stopped: its last run's lines are how it ended.
    ("stopped", dict(status="exited", running=False, restart_count=0), REFUSED, [
        "ERROR 12-04 13:40:00 [launcher.py:101] VLLM Engine failed, terminating server"],
     ["instance_stopped", "engine_dead"]),
])
def test_a_death_since_the_last_start_makes_the_host_unhealthy(case, state, health, log_after, errors):
    evidence = restarted(healthy_evidence(), log_after, **state)
    set_in(("instances", 0, "health"), health)(evidence)
    found = diagnosis.diagnose(evidence, SETTINGS)
    assert not found["healthy"] and rules_of(found, "error") == errors, (case, found["findings"])
    dead = next(item for item in found["findings"] if item["rule"] == "engine_dead")
    assert "history" not in dead, dead
    # What a run since the start logged is counted alone; a crash loop counts every run's.
    assert dead["count"] == {"died now": 4, "dying again": 1, "restarting now": 4, "stopped": 1}[case], dead
    assert diagnosis.summary_line("npu-a", found).startswith("npu-a: [vllm-ascend] "), found


def test_history_does_not_explain_what_is_true_now():
    """Restarted 19 minutes ago and not answering (loading, or looping): the restart and the silence are errors,
    the earlier death a warning, which does not say the container served since."""
    evidence = restarted(healthy_evidence(), HEALTHY_LINES[:2])
    set_in(("instances", 0, "health"), REFUSED)(evidence)
    found = diagnosis.diagnose(evidence, SETTINGS)
    assert not found["healthy"] and rules_of(found, "error") == ["restarts", "not_serving"], found
    (dead,) = [item for item in found["findings"] if item["severity"] == "warning"]
    assert dead["rule"] == "engine_dead" and dead["history"] == \
        "seen before the container's last start (2026-12-04T13:16:31Z)", dead
    set_in(("instances", 0, "health"), {"status": 503})(evidence)
    assert rules_of(diagnosis.diagnose(evidence, SETTINGS), "error") == ["engine_unhealthy", "restarts"]


def test_a_restart_no_earlier_line_explains_is_still_told():
    evidence = restarted(healthy_evidence())
    evidence["instances"][0]["log"] = [line for line in ENGINE_DEATH if "INFO" in line] + HEALTHY_LOG
    assert rules_of(diagnosis.diagnose(evidence, SETTINGS), "error") == ["restarts"]


def test_earlier_history_explains_itself_once():
    """A large image's crash before the start explains the dead engine and the restart, as it does now."""
    evidence = restarted(healthy_evidence())
    evidence["instances"][0]["log"][1:1] = [
        "2026-12-04T13:16:19.700000000Z ERROR RuntimeError: ACL stream synchronize failed, error code is 507018"]
    found = diagnosis.diagnose(evidence, SETTINGS)
    assert found["healthy"] and rules_of(found, "warning") == ["large_image_crash"], found


@pytest.mark.parametrize("stamp,history", [
    ("2026-12-04T13:16:31.249999999Z", True),   # a nanosecond before the start
    ("2026-12-04T13:16:31.250000000Z", False),  # at the start: the new run's
    ("2026-12-04T13:16:31.250000001Z", False),
    ("2026-12-04T13:16:31Z", True),             # Docker's time with no decimals
    ("2026-12-04T13:16:31.3Z", False),
    ("12-04 13:10:00", False),                  # no Docker time: it cannot be put aside as history
])
def test_a_line_is_history_only_when_its_time_is_before_the_start(stamp, history):
    evidence = restarted(healthy_evidence())
    evidence["instances"][0]["log"] = [stamp + " ERROR RuntimeError: NPU out of memory."] + HEALTHY_LOG
    found = diagnosis.diagnose(evidence, SETTINGS)
    (oom,) = [item for item in found["findings"] if item["rule"] == "npu_out_of_memory"]
    assert found["healthy"] is history and ("history" in oom) is history, found


def test_docker_times_order_to_the_nanosecond():
    assert diagnosis.docker_time("2026-12-04T13:16:31.25Z") == ("2026-12-04T13:16:31", 250000000)
    assert diagnosis.docker_time("2026-12-04T13:16:31.250000000Z INFO x") == ("2026-12-04T13:16:31", 250000000)
    assert diagnosis.docker_time("2026-12-04T13:16:31Z") < diagnosis.docker_time("2026-12-04T13:16:31.000000001Z")
    assert diagnosis.docker_time("2026-12-04T13:16:31.5Z") < diagnosis.docker_time("2026-12-04T13:16:32Z")
    for none in ("0001-01-01T00:00:00Z", "", None, "2026-12-04T13:16:31.5ZINFO", "INFO 12-04 13:16:31"):
        assert diagnosis.docker_time(none) is None, none


def test_unknown_errors_before_the_start_are_history_and_no_incident_reaches_across_it():
    evidence = restarted(healthy_evidence(), HEALTHY_LINES + ("ERROR KeyError: 'mm_hashes'",))
    evidence["instances"][0]["log"][1:1] = ["2026-12-04T13:16:19.5Z ERROR ValueError: the flux capacitor is empty"]
    found = diagnosis.diagnose(evidence, SETTINGS)
    # The KeyError is a few lines after the death's lines, but in another run: not part of that incident.
    (unknown,) = [item for item in found["findings"] if item["rule"] == "unknown_error"]
    assert unknown["severity"] == "error" and unknown["count"] == 1 and "history" not in unknown, unknown
    assert unknown["excerpt"] == [SINCE.replace(".000000001", "") + "ERROR KeyError: 'mm_hashes'"], unknown

    evidence["instances"][0]["log"].pop()
    found = diagnosis.diagnose(evidence, SETTINGS)
    assert found["healthy"] and rules_of(found) == ["engine_dead"], found
    # An earlier error, far from the death's lines.
    evidence["instances"][0]["log"][0:0] = ["2026-12-04T12:00:00.5Z ERROR ValueError: the flux capacitor is empty"] + [
        "2026-12-04T12:00:01.5Z INFO request done"] * diagnosis.INCIDENT_LINES
    found = diagnosis.diagnose(evidence, SETTINGS)
    (unknown,) = [item for item in found["findings"] if item["rule"] == "unknown_error"]
    assert found["healthy"] and unknown["severity"] == "warning" and unknown["history"].startswith("seen before")
    assert unknown["excerpt"] == ["2026-12-04T12:00:00Z ERROR ValueError: the flux capacitor is empty"], unknown


def test_rules_that_read_no_log_line_are_not_history():
    """npu-smi's failures and the checks tell what is true now, however old the container's start."""
    evidence = restarted(healthy_evidence())
    CASES["dcmi_8005"][0](evidence)
    CASES["degenerate_answers"][0](evidence)
    found = diagnosis.diagnose(evidence, SETTINGS)
    assert rules_of(found, "error") == ["dcmi_8005", "degenerate_answers"], found
    assert [item["rule"] for item in found["findings"] if "history" in item] == ["engine_dead"]
