"""roles/vllm_canary's batch verdict as Ansible runs it, on hosts of this machine (no Docker): a roll of three hosts,
two per batch, whose canary batch includes the role as the server phase does (its include task, from
roles/vllm_server/tasks/05-finish.yml) with the outcomes the server phase would give it, and whose later batch
runs the server phase's check of the verdict (from roles/vllm_server/tasks/00-before.yml) before it would replace
anything. Nothing here is measured: the replacements the canary would benchmark fail an image first (no container
runs them here). The filters case by case: tests/unit/roles/vllm_canary/."""
import sys

import pytest
import yaml

from conftest import REPO, free_port, run_playbook

CANARY_BATCH, LATER = ["npu-01", "npu-02"], "npu-03"
GO_ON = "Go on only once the canary batch passed its gate"
GATE = "Gate the canary batch's replacements on their benchmark"


def server_task(path, name):
    (task,) = [task for task in yaml.safe_load((REPO / "roles/vllm_server/tasks" / path).read_text(encoding="utf-8"))
               if task["name"] == name]
    return task


def instance(name, action, error=None, set_aside=None):
    """An instance as the server phase's outcomes give it (vllm_server_outcomes): a replacement that serves has its
    previous container set aside."""
    return {"name": name, "port": free_port(), "env_file": "/etc/vllm-ascend/%s.env" % name, "action": action,
            "set_aside": action == "replace" if set_aside is None else set_aside, "error": error, "changes": True,
            "rejected": False}


def roll(folder, outcomes, failing_early=()):
    """The play, batch by batch: hosts in failing_early fail before the server phase; the others of the canary batch
    are gated with their outcomes; the later batch checks the verdict. Each host shows the verdict it has."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "fleet_api_key": "",
             "fleet_serial": len(CANARY_BATCH), "fleet_canary": True, "fleet_canary_image_sizes": ["640x480"],
             "fleet_docker_bin": "false", "vllm_server_ready_timeout": 2}
    hosts = {host: {"vllm_server_outcomes": outcomes.get(host, [])} for host in CANARY_BATCH + [LATER]}
    (folder / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": local, "hosts": hosts}}))
    play = {"name": "A canary roll's server phase, as far as the canary goes", "hosts": "all", "gather_facts": False,
            "serial": len(CANARY_BATCH), "roles": ["ascend.fleet.fleet"],
            "vars": {"vllm_server_in_canary_batch": "{{ inventory_hostname in fleet_first_batch }}",
                     "vllm_server_served_name": "Qwen3-VL-8B-Instruct"},
            "tasks": [{"name": "Fail in an earlier phase", "ansible.builtin.fail": {"msg": "an earlier phase"},
                       "when": "inventory_hostname in %s" % list(failing_early)},
                      server_task("00-before.yml", GO_ON),
                      server_task("05-finish.yml", GATE),
                      {"name": "Show the verdict", "ansible.builtin.debug": {
                          "msg": "{{ vllm_canary_verdict | default('none') }}"}}]}
    (folder / "roll.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    return run_playbook(folder / "run", folder / "hosts.yml", str(folder / "roll.yml"))


def verdicts(run):
    return {host: result["msg"] for host, result in run.results("Show the verdict").items()}


def test_a_failure_on_one_host_fails_the_batch_rejects_its_replacements_and_stops_the_later_batch(tmp_path):
    """npu-01's replacement and its new instance (a layout change's, nothing set aside) fail the canary's image (no
    container runs them), npu-02's new instance did not serve: each host of the batch gets the batch's verdict,
    npu-01 with both rejected (kept off the gateways); npu-03 replaces nothing."""
    run = roll(tmp_path, {"npu-01": [instance("vllm-ascend-npu0", "replace"), instance("vllm-ascend-npu1", "start"),
                                     instance("vllm-ascend-npu2", "keep")],
                          "npu-02": [instance("vllm-ascend", "start", error="not ready: connection refused")]})
    assert run.failed_hosts() == [LATER], run.stdout
    shown = verdicts(run)
    assert sorted(shown) == CANARY_BATCH, run.stdout
    failures = shown["npu-01"]["failures"]
    assert len(failures) == 3 and failures[0].startswith("npu-01 vllm-ascend-npu0: the 640x480 image: "), failures
    assert failures[1].startswith("npu-01 vllm-ascend-npu1: the 640x480 image: "), failures
    assert failures[2] == "npu-02 vllm-ascend: did not serve"
    why = "rejected by the canary gate of its batch: " + " ; ".join(failures)
    assert shown["npu-01"] == {"passed": False, "failures": failures,
                               "rejected": {"vllm-ascend-npu0": why, "vllm-ascend-npu1": why}}
    assert shown["npu-02"] == {"passed": False, "failures": failures, "rejected": {}}
    assert "The canary batch (npu-01, npu-02) did not pass its gate, so npu-03" in run.failure_text(LATER)


def test_a_batch_that_passed_lets_the_later_batch_go_on(tmp_path):
    run = roll(tmp_path, {"npu-01": [instance("vllm-ascend", "keep")]})
    assert run.rc == 0 and run.failed_hosts() == [], run.stdout
    assert verdicts(run) == {"npu-01": {"passed": True, "failures": [], "rejected": {}},
                             "npu-02": {"passed": True, "failures": [], "rejected": {}}, LATER: "none"}
    assert run.results(GO_ON)[LATER]["_event"] == "runner_on_ok"


@pytest.mark.parametrize("failed", [["npu-01"], ["npu-02"]], ids=["the first host", "another host"])
def test_a_host_of_the_batch_that_failed_before_its_verdict_fails_the_batch(tmp_path, failed):
    """No canary that was not judged passed. The later batch reads the verdict on the batch's first host: one that
    failed before its verdict has none, which stops the roll as a verdict that failed does."""
    run = roll(tmp_path, {}, failing_early=failed)
    assert run.failed_hosts() == sorted(failed + [LATER]), run.stdout
    (judged,) = set(CANARY_BATCH) - set(failed)
    unjudged = "%s: failed before its canary was judged" % failed[0]
    assert verdicts(run)[judged] == {"passed": False, "failures": [unjudged], "rejected": {}}
    assert "did not pass its gate" in run.failure_text(LATER)
