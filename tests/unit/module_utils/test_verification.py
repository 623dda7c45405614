"""module_utils/verification.py: the judgement of a host on hand-made plans and readings (every check the
verification makes, each failure with where, what was found, what was expected and the fix), and what it reads of
an instance's port and answers, from local servers (the module as Ansible runs it: tests/unit/library/
test_fleet_verify.py)."""
import copy
import json
import re

import pytest
from fake_vllm import MODEL, Scripted, scripted, server  # noqa: F401  (the fixtures)

from ansible_collections.ascend.fleet.plugins.module_utils import serving_plan, verification
from conftest import free_port

HOST = "npu-a"
IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
NAME = "vllm-ascend"
CHIPS = ["/dev/davinci0", "/dev/davinci1", "/dev/davinci2", "/dev/davinci3"]
SCRIPT = "/etc/vllm-ascend/vllm-ascend.sh"
PLAN_FILE = "/etc/vllm-ascend/plan.json"
EXPECTED = {"driver_version": "25.5.2", "firmware_version": "7.8.0.7.220", "restart_policy": "unless-stopped"}
HEALTHY = {
    "host": HOST, "plan_file": PLAN_FILE, "plan_problem": None,
    "npu": {"ready": True, "problems": [], "driver_version": "25.5.2", "firmware_version": "7.8.0.7.220",
            "devices": ["/dev/davinci%d" % number for number in range(8)], "unhealthy_npu_ids": []},
    "plan": {"format": 1, "host": HOST, "layout": "single", "image": IMAGE, "served_name": MODEL, "instances": [
        {"name": NAME, "container": NAME, "port": 8000, "npu_ids": [1, 2], "devices": CHIPS, "script": SCRIPT,
         "env_file": "/etc/vllm-ascend/vllm-ascend.env"}]},
    "instances": {NAME: {
        "container": {"status": "running", "running": True, "restart_count": 0,
                      "started_at": "2026-12-04T14:00:00.123456789Z", "image": IMAGE,
                      "restart_policy": "unless-stopped", "config_hash": "5e1f", "chips": CHIPS},
        "script_found": True, "recorded_hash": "5e1f", "listening": True,
        "asked": {"health": {"status": 200}, "models": {"status": 200, "names": [MODEL]},
                  "smoke": {"answer": "一张图片", "usage": {"prompt_tokens": 80, "completion_tokens": 8}},
                  "answers": {"mode": "known", "passed": True, "asked": [], "failure": None}}}},
}


def reading(change=None):
    """The healthy reading, changed by change(reading, instance's reading)."""
    found = copy.deepcopy(HEALTHY)
    if change:
        change(found, found["instances"][NAME])
    return found


def plan_refused(plan):
    """What serving_plan says of a recorded plan it refuses, as read() keeps it."""
    with pytest.raises(serving_plan.PlanError) as refused:
        serving_plan.check(plan, HOST, PLAN_FILE)
    return str(refused.value)


def test_a_host_that_serves_what_was_recorded_passes_every_check():
    verdict = verification.judge(reading(), EXPECTED)
    assert verdict["verified"] and verdict["failures"] == [], verdict["failures"]
    assert verdict["checks"] == 23
    assert verdict["summary"] == "npu-a: verified: 1 instance(s), 23 checks passed"


def edit(path, value):
    """A change setting the reading's value at path (keys from the reading, or `instance.` for the instance's)."""
    def change(found, instance):
        target = instance if path.startswith("instance.") else found
        keys = path.split(".")[1:] if path.startswith("instance.") else path.split(".")
        for key in keys[:-1]:
            target = target[key] if not isinstance(target, list) else target[int(key)]
        target[keys[-1]] = value
    return change


# What each check names when it fails: (the change to the healthy reading, the check, the instance or None, and
# the sentence's text between where and the fix).
FAILURES = {
    "no plan": (edit("plan", None), "plan", None,
                "no serving plan at /etc/vllm-ascend/plan.json, expected the one the deploy records"),
    "a plan of another format": (
        lambda found, _: found.update(plan=None, plan_problem=plan_refused(dict(HEALTHY["plan"], format=2))),
        "plan", None, "serving plan of npu-a (/etc/vllm-ascend/plan.json): format 2, expected 1"),
    "another host's plan": (
        lambda found, _: found.update(plan=None, plan_problem=plan_refused(dict(HEALTHY["plan"], host="npu-b"))),
        "plan", None, 'serving plan of npu-a (/etc/vllm-ascend/plan.json): it is the plan of "npu-b", not of npu-a (a '
                      'copied file?), expected the plan vllm_plan recorded for npu-a'),
    "a plan instance without its files": (lambda found, _: found["plan"]["instances"][0].pop("script"), "plan", NAME,
                                          "the plan /etc/vllm-ascend/plan.json records no script for it, expected "
                                          "what vllm_plan records"),
    "a plan without its image": (lambda found, _: found["plan"].pop("image"), "plan", None,
                                 "the plan /etc/vllm-ascend/plan.json records no image, expected what vllm_plan "
                                 "records"),
    "npu-smi not ready": (lambda found, _: found["npu"].update(ready=False, problems=["npu-smi not found"]),
                          "npu_smi", None, "npu-smi is not ready (npu-smi not found), expected it to list the chips"),
    "another driver": (edit("npu.driver_version", "24.1.rc2.2"), "driver", None,
                       "driver is 24.1.rc2.2, expected 25.5.2"),
    "another firmware": (edit("npu.firmware_version", "7.3.0.1.231"), "firmware", None,
                         "firmware is 7.3.0.1.231, expected 7.8.0.7.220"),
    "a chip gone": (edit("npu.devices", ["/dev/davinci0", "/dev/davinci1", "/dev/davinci2"]), "chips_present", NAME,
                    "planned chips /dev/davinci3 are gone from the host, expected every chip of the plan"),
    "a card gone bad": (edit("npu.unhealthy_npu_ids", [2]), "chips_healthy", NAME,
                        "serves on NPU 2, which is no longer healthy, expected healthy cards only"),
    "no container": (edit("instance.container", None), "container", NAME,
                     "no container vllm-ascend, expected the one the plan names"),
    "a stopped container": (
        lambda _, instance: instance["container"].update(status="exited", running=False), "running", NAME,
        "container is exited, expected running"),
    "a crash loop": (edit("instance.container.restart_count", 3), "restarts", NAME,
                     "crashed and was restarted by Docker 3 time(s), last started 2026-12-04T14:00:00.123456789Z, "
                     "expected no restart"),
    "another image": (edit("instance.container.image", IMAGE + "-old"), "image", NAME,
                      "runs image %s-old, expected %s" % (IMAGE, IMAGE)),
    "another restart policy": (edit("instance.container.restart_policy", "no"), "restart_policy", NAME,
                               "restart policy no, expected unless-stopped"),
    "no rendered script": (edit("instance.script_found", False), "script", NAME,
                           "the rendered docker run /etc/vllm-ascend/vllm-ascend.sh is missing, expected the deploy's"),
    "another config hash": (edit("instance.container.config_hash", "0000"), "config_hash", NAME,
                            "config-hash label 0000, expected 5e1f (the rendered script's, "
                            "/etc/vllm-ascend/vllm-ascend.sh): it does not run what the deploy rendered"),
    "a script without its label": (edit("instance.recorded_hash", None), "config_hash", NAME,
                                   "config-hash label 5e1f, expected none: the script holds no label"),
    "other chips": (edit("instance.container.chips", CHIPS[:3]), "chips_mapped", NAME,
                    "maps %s, expected its planned chips %s" % (" ".join(CHIPS[:3]), " ".join(CHIPS))),
    "no chip": (edit("instance.container.chips", []), "chips_mapped", NAME,
                "maps no chip, expected its planned chips %s" % " ".join(CHIPS)),
    "a port that does not answer": (edit("instance.listening", False), "listening", NAME,
                                    "nothing listens on port 8000, expected the instance's server"),
    "an unhealthy engine": (edit("instance.asked", {"health": {"status": 503}}), "health", NAME,
                            "does not serve: GET /health answered 503, expected 200"),
    "no answer to /health": (edit("instance.asked", {"health": {"error": "timed out"}}), "health", NAME,
                             "does not serve: GET /health answered timed out, expected 200"),
    "a key that is refused": (edit("instance.asked", {"health": {"status": 200}, "models": {"status": 401}}),
                              "api_key", NAME,
                              "refuses the key: /v1/models answered 401, expected 200 with the fleet's key"),
    "another served name": (edit("instance.asked.models.names", ["Qwen3-VL-235B"]), "served_model", NAME,
                            "does not serve Qwen3-VL-8B-Instruct: /v1/models lists Qwen3-VL-235B, expected it listed"),
    "time out before the models": (
        edit("instance.asked", {"health": {"status": 200}, "timed_out": "no end within 120s: the time ran out"}),
        "served_model", NAME, "does not serve Qwen3-VL-8B-Instruct: /v1/models answered no end within 120s"),
    "an image request that fails": (
        edit("instance.asked.smoke", {"error": "the image request answered HTTP 500: boom. Fix: read the server's "
                                               "log (docker logs of its container) for what it did with the request"}),
        "image_request", NAME, "does not serve: the image request answered HTTP 500: boom"),
    "an answer of no tokens": (edit("instance.asked.smoke.usage", {"completion_tokens": 0}), "image_request", NAME,
                               "does not serve: the image request's answer counts 0 completion tokens, expected more "
                               "than 0"),
    "a degenerate answer": (
        edit("instance.asked.answers", {"passed": False, "failure": "the image request's answer \"!!!!!!!!\" is "
                                                                    "degenerate (one character). Fix: on 310P, ..."}),
        "answer_check", NAME, "does not serve right: the image request's answer \"!!!!!!!!\" is degenerate"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_check_names_the_host_the_instance_what_was_found_and_expected_and_the_fix(case):
    change, check, instance, said = FAILURES[case]
    verdict = verification.judge(reading(change), EXPECTED)
    assert not verdict["verified"]
    (failure,) = [item for item in verdict["failures"] if item["check"] == check]
    where = HOST if instance is None else "%s, instance %s" % (HOST, instance)
    assert failure["instance"] == instance
    assert failure["message"].startswith("%s: %s" % (where, said)), failure["message"]
    assert ", expected " in failure["message"] and failure["found"] and failure["expected"], failure
    # One fix, its own or the check's: a message that came with its fix does not get a second one.
    assert failure["message"].count("Fix: ") == 1 and failure["message"].endswith(". Fix: %s" % failure["fix"])
    assert verdict["summary"] == "npu-a: %d of %d checks failed" % (len(verdict["failures"]), verdict["checks"])
    json.dumps(verdict)  # what the module returns


@pytest.mark.parametrize("case, left_out", [
    ("no plan", ["chips_present", "container", "listening"]),
    ("npu-smi not ready", ["driver", "firmware"]),
    ("no container", ["running", "image", "restart_policy", "config_hash", "chips_mapped", "listening"]),
    ("a stopped container", ["listening", "health"]),
    ("no rendered script", ["config_hash"]),
    ("a port that does not answer", ["health", "api_key", "image_request"]),
    ("a key that is refused", ["served_model", "image_request", "answer_check"]),
    ("an image request that fails", ["answer_check"]),
])
def test_a_missing_subject_is_one_failure_not_one_per_check_that_reads_it(case, left_out):
    """Nothing to judge them on: no plan, no container, nothing listening... The subject's own failure says it."""
    change, check, _, _ = FAILURES[case]
    verdict = verification.judge(reading(change), EXPECTED)
    assert [item["check"] for item in verdict["failures"]] == [check], verdict["failures"]
    assert verdict["checks"] < verification.judge(reading(), EXPECTED)["checks"]


def test_versions_are_compared_as_npu_smi_may_case_them():
    verdict = verification.judge(reading(edit("npu.driver_version", "25.5.RC1")),
                                 dict(EXPECTED, driver_version="25.5.rc1"))
    assert verdict["verified"], verdict["failures"]


def test_the_restart_policy_expected_is_the_one_given():
    """The setting the plan does not hold: what a deploy with vllm_server_restart_policy=always runs."""
    verdict = verification.judge(reading(), dict(EXPECTED, restart_policy="always"))
    assert [item["message"].split(". Fix")[0] for item in verdict["failures"]] == [
        "npu-a, instance vllm-ascend: restart policy unless-stopped, expected always"]


def test_every_failure_of_a_host_is_told_and_each_names_its_own_instance():
    def change(found, instance):
        second = dict(found["plan"]["instances"][0], name=NAME + "-npu4", container=NAME + "-npu4", port=8001,
                      npu_ids=[4], devices=["/dev/davinci4", "/dev/davinci5"],
                      script="/etc/vllm-ascend/vllm-ascend-npu4.sh")
        found["plan"]["instances"].append(second)
        found["instances"][second["name"]] = dict(copy.deepcopy(instance), listening=False)
        found["instances"][second["name"]]["container"]["chips"] = second["devices"]
        found["npu"]["driver_version"] = "24.1.rc2.2"
        instance["container"]["restart_policy"] = "no"

    verdict = verification.judge(reading(change), EXPECTED)
    assert [(item["instance"], item["check"]) for item in verdict["failures"]] == [
        (None, "driver"), (NAME, "restart_policy"), (NAME + "-npu4", "listening")]
    assert verdict["summary"] == "npu-a: 3 of %d checks failed" % verdict["checks"]


def test_a_fix_is_split_from_the_message_that_names_it():
    assert verification.split_fix("x is 1, expected 2. Fix: set x.") == ("x is 1, expected 2", "set x")
    assert verification.split_fix("x is 1, expected 2") == ("x is 1, expected 2", None)


def test_what_is_read_of_a_container():
    detail = {"RestartCount": 1, "State": {"Status": "running", "Running": True, "StartedAt": "2026-12-04T14:00:00Z"},
              "Config": {"Image": IMAGE, "Env": ["VLLM_API_KEY=sk-secret"],
                         "Labels": {"ascend-vllm-fleet.config-hash": "5e1f", "other.config-hash": "0000"}},
              "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}, "Devices": [
                  {"PathOnHost": "/dev/davinci3"}, {"PathOnHost": "/dev/davinci_manager"},
                  {"PathOnHost": "/dev/davinci1"}, {"PathOnHost": "/dev/devmm_svm"}]}}
    found = verification.container_facts(detail, "ascend-vllm-fleet", 1796392860)
    assert (found["status"], found["running"], found["restart_count"], found["image"]) == ("running", True, 1, IMAGE)
    assert (found["restart_policy"], found["config_hash"]) == ("unless-stopped", "5e1f")
    assert found["chips"] == ["/dev/davinci1", "/dev/davinci3"], "only chips' nodes, sorted"
    assert "sk-secret" not in json.dumps(found)


def test_a_port_nothing_listens_on_does_not_answer(server):  # noqa: F811
    assert not verification.port_answers(free_port())
    assert verification.port_answers(int(server.rsplit(":", 1)[1]))


def test_an_instance_is_asked_as_the_deploys_probe_asks_it(server):  # noqa: F811
    port = int(server.rsplit(":", 1)[1])
    asked = verification.ask(port, MODEL, "", "none", 30)
    assert asked["health"] == {"status": 200} and asked["models"] == {"status": 200, "names": [MODEL]}
    assert asked["smoke"]["answer"] == "a picture" and asked["smoke"]["usage"]["completion_tokens"] == 2
    assert asked["answers"]["passed"]
    assert verification.judge(reading(edit("instance.asked", asked)), EXPECTED)["verified"]


def test_a_refused_key_stops_the_asking_there(scripted):  # noqa: F811
    Scripted.models = (401, b'{"error": "Unauthorized"}')
    port = int(scripted.rsplit(":", 1)[1])
    asked = verification.ask(port, MODEL, "sk-the-fleets", "known", 30)
    assert asked == {"health": {"status": 200}, "models": {"status": 401}}
    assert Scripted.chats == 0, "no chat request after the key was refused"


def test_a_degenerate_answer_fails_the_answer_check(scripted):  # noqa: F811
    Scripted.chat = (200, json.dumps({"choices": [{"message": {"content": "!!!!!!!!"}}],
                                      "usage": {"completion_tokens": 8}}).encode())
    asked = verification.ask(int(scripted.rsplit(":", 1)[1]), MODEL, "", "sane", 30)
    assert asked["smoke"]["answer"] == "!!!!!!!!"
    assert not asked["answers"]["passed"] and "is degenerate" in asked["answers"]["failure"]


def test_a_port_that_accepts_and_never_answers_ends_at_the_timeout():
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        asked = verification.ask(silent.getsockname()[1], MODEL, "", "none", 2)
    health = asked["health"]
    assert re.search(r"within|timed out", health.get("error", "") + asked.get("timed_out", "")), asked
