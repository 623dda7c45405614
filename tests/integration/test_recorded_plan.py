"""The serving plan recorded on the host is what verify, teardown and later runs read: whatever layout the
deploy was given, whatever tags ran, and whichever card went bad since."""
import json

import pytest

from twin.npu_smi import PROFILE_NAME
from twin_fleet import CONFIG_DIR
from twin_fleet import DEFAULT_CONTAINER as NAME

pytestmark = pytest.mark.docker
HOST = "npu-c"  # the shared single host: two cards
PLAN = "%s/plan.json" % CONFIG_DIR  # the fleet role's default, as on a real host


@pytest.fixture
def fleet(shared_single):
    return shared_single


def plan(fleet):
    return json.loads(fleet[HOST].read_text(PLAN))


def mapped_chips(fleet, name):
    devices = fleet[HOST].inspect(name)["HostConfig"]["Devices"]
    return sorted(d["PathOnHost"] for d in devices if d["PathOnHost"][len("/dev/davinci"):].isdigit())


def test_the_deploy_records_what_it_serves(fleet):
    recorded = plan(fleet)
    assert recorded["layout"] == "single" and recorded["excluded_npu_ids"] == []
    assert recorded["layout_reason"] == "asked for: single"
    # The fit of the instance on its chips, from npu-smi's memory and the model's files on the host: the 96 GB
    # card's smaller chip bounds it, with what the card itself uses taken from what is free.
    fit = recorded["instances"][0].pop("fit")
    assert (fit["fits"], fit["chip"], fit["memory_mb"], fit["need_gib"]) == (True, "NPU 6 chip 1", 43693, 12.42), fit
    assert fit["terms_gib"]["weights"] == 8.165 and 0 < fit["free_mb"] < 43693, fit
    assert recorded["instances"] == [{"name": NAME, "port": 8000, "npu_ids": [6, 224],
                                      "devices": ["/dev/davinci0", "/dev/davinci1", "/dev/davinci2",
                                                  "/dev/davinci3"], "logic_ids": [0, 1, 2, 3], "cpus": None,
                                      "tensor_parallel_size": 2, "container": NAME,
                                      "script": "%s/%s.sh" % (CONFIG_DIR, NAME),
                                      "env_file": "%s/%s.env" % (CONFIG_DIR, NAME)}]
    assert recorded["image"] == fleet[HOST].inspect(NAME)["Config"]["Image"]
    assert fleet[HOST].mode(PLAN) == 0o644


def test_verify_follows_a_layout_given_on_the_command_line(fleet):
    run = fleet.play("--limit", HOST, "-e", "vllm_server_layout=per_card")
    assert run.rc == 0, run.stdout
    assert [i["name"] for i in plan(fleet)["instances"]] == [NAME + "-npu6", NAME + "-npu224"]
    code, output = fleet.verify(hosts=[HOST])
    assert code == 0, output
    assert fleet.restore().rc == 0 and [i["name"] for i in plan(fleet)["instances"]] == [NAME]


def test_a_card_gone_bad_is_planned_out_even_when_only_the_server_phase_runs(fleet):
    profile_path = fleet[HOST].root / "usr/local/dcmi" / PROFILE_NAME
    healthy = profile_path.read_text()
    profile = json.loads(healthy)
    card = next(card for card in profile["cards"] if card["npu_id"] == 224)
    card["chips"] = [{}, {"health": "Alarm"}]
    profile_path.write_text(json.dumps(profile))
    try:
        run = fleet.play("--tags", "server", "--limit", HOST, preflight=True)
        code, output = fleet.verify(hosts=[HOST])
    finally:
        profile_path.write_text(healthy)
    assert run.rc == 0, run.stdout
    assert run.results("Judge the host") == {}, "preflight's host checks must not run with --tags server"
    recorded = plan(fleet)
    assert recorded["excluded_npu_ids"] == [224]
    assert recorded["instances"][0]["devices"] == ["/dev/davinci0", "/dev/davinci1"]
    assert mapped_chips(fleet, NAME) == ["/dev/davinci0", "/dev/davinci1"]
    assert code == 0, output
    assert fleet.restore().rc == 0 and plan(fleet)["excluded_npu_ids"] == []


def test_teardown_removes_what_the_plan_names_and_keeps_files_not_ours(fleet):
    host = fleet[HOST]
    salts = fleet.salts()
    host.exec("sh", "-c", "echo keep > %s/notes.txt" % CONFIG_DIR)
    run = fleet.play("--limit", HOST, playbook="playbooks/teardown.yml")
    assert run.rc == 0, run.stdout
    assert host.inspect(NAME) is None and not host.exists(PLAN)
    assert host.exec("ls", CONFIG_DIR).stdout.split() == ["notes.txt"]
    again = fleet.play("--limit", HOST, playbook="playbooks/teardown.yml")
    assert again.rc == 0 and again.changed() == 0, again.stdout
    host.exec("rm", "%s/notes.txt" % CONFIG_DIR)
    fleet.put_salts(salts)
    assert fleet.restore().rc == 0
