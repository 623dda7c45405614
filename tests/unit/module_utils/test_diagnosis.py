"""module_utils/diagnosis.py: every rule fires on its sign, on the right host or instance, with its fix; healthy
evidence is healthy; a cause explains its consequences; error lines no rule knows are shown as unknown; the README's
doctor table is the rules' own."""
import copy

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import diagnosis
from conftest import REPO

SETTINGS = {"disk_full_share": 0.9, "restart_window_s": 3600}
STAMP = "2026-12-04T14:02:11Z "
# A healthy instance's log, as the stand-in and vLLM 0.18 print it.
HEALTHY_LOG = [STAMP + line for line in (
    "INFO jemalloc preloaded",
    "INFO 12-04 14:00:01 [api_server.py:1351] vLLM API server version 0.18.0rc1",
    "INFO 12-04 14:00:02 [loader.py:447] Loading weights took 61.2 seconds",
    "INFO:     Started server process [1]",
    "INFO 12-04 14:01:02 [loggers.py:123] Engine 000: Avg prompt throughput: 120.3 tokens/s",
)]


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


def test_a_foreign_holder_explains_the_busy_chips_of_every_instance():
    evidence = healthy_evidence()
    CASES["foreign_holder"][0](evidence)
    CASES["chip_busy"][0](evidence)
    assert [item["rule"] for item in diagnosis.diagnose(evidence, SETTINGS)["findings"]] == ["foreign_holder"]


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
