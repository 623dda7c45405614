"""site.yml --tags preflight on twin hosts with one fault each, in one run (no Docker needed: the emulator is)."""
import platform

import pytest
import yaml

from conftest import REPO, load_library_module, run_playbook, snapshot
from twin import hosts

BAD_HOSTS = {
    "bad-driver": ("old_driver_24", ["driver version: found 24.1.rc2.2 (a 24.x driver)", "crash", "slow"]),
    "bad-firmware": ("firmware_mismatch", ["firmware version: found 7.8.0.6.201 on NPU 6",
                                           "required exactly 7.8.0.7.220"]),
    "bad-chip": ("chip_alarm", ["chip health: found NPU 224: chip 1 health Alarm"]),
    "bad-dcmi": ("dcmi_8005", ["NPU ready: found `npu-smi info` failed: dcmi module initialize failed. ret is -8005",
                               "held by another container"]),
    "bad-node": ("missing_davinci", ["device nodes: found missing", "/dev/davinci1 (NPU 6 chip 1)"]),
    "bad-process": ("foreign_process", ["chip in use: found pid 41877 (python3.9, 15321 MB) on NPU 6 chip 0"]),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """An inventory of one good and six bad twin hosts, using the twin inventory's group_vars unchanged."""
    base = tmp_path_factory.mktemp("preflight")
    profiles = hosts.load_profiles()
    inventory_hosts = {"good": {"twin_profile": "duo2"}}
    inventory_hosts.update({name: {"twin_profile": profile} for name, (profile, _) in BAD_HOSTS.items()})
    for name, variables in inventory_hosts.items():
        variables["twin_root"] = str(base / "hosts" / name)
        hosts.build_root(variables["twin_root"], profiles[variables["twin_profile"]])
    inventory_dir = base / "inventory"
    inventory_dir.mkdir()
    (inventory_dir / "group_vars").symlink_to(REPO / "inventory/twin/group_vars")
    (inventory_dir / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"ascend": {
        "hosts": inventory_hosts}}}}))
    return base, inventory_dir / "hosts.yml"


def npu_facts_cpu_model():
    return load_library_module("npu_facts").cpu_model()


def play(base, inventory, *extra):
    (base / "runs").mkdir(exist_ok=True)
    run_dir = base / "runs" / ("run%d" % len(list((base / "runs").iterdir())))
    return run_playbook(run_dir, inventory, "site.yml", "--tags", "preflight", *extra)


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_each_bad_host_fails_with_its_own_message(fleet, check_mode):
    base, inventory = fleet
    before = snapshot(base / "hosts")
    run = play(base, inventory, *(["--check"] if check_mode else []))
    assert run.rc == 2, "ansible-playbook should report failed hosts\n" + run.stdout
    assert run.failed_hosts() == sorted(BAD_HOSTS)
    verdicts = run.results("Pass only hosts that can serve")
    assert verdicts["good"]["_event"] == "runner_on_ok"
    for host, (_, expected) in BAD_HOSTS.items():
        message = "\n".join(verdicts[host]["msg"])
        assert message.startswith("Preflight failed on %s:" % host)
        for text in expected:
            assert text in message, "%s: %r not in %s" % (host, text, message)
        for other, (_, other_expected) in BAD_HOSTS.items():
            if other != host:
                assert other_expected[0] not in message, "%s reports %s's fault" % (host, other)
    (lines,) = [result["msg"] for result in run.results("Summarise the fleet").values()]
    assert [line for line in lines if line.startswith("good: ")] == [
        "good: PASSED (%s %s; 2 card(s) Atlas 300I Duo, 4 chip(s); driver 25.5.2, firmware 7.8.0.7.220)"
        % (platform.machine(), npu_facts_cpu_model())]
    assert sorted(line.split(":")[0] for line in lines if ": FAILED: " in line) == sorted(BAD_HOSTS)
    assert run.changed() == 0
    assert snapshot(base / "hosts") == before


def test_unhealthy_card_can_be_left_out(fleet):
    base, inventory = fleet
    run = play(base, inventory, "--limit", "bad-chip", "-e", "ascend_preflight_unhealthy_chip_action=exclude_card")
    assert run.rc == 0, run.stdout
    judged = run.results("Remember the cards left out of the serving plan")["bad-chip"]
    assert judged["ansible_facts"]["ascend_preflight_excluded_npu_ids"] == [224]


@pytest.mark.parametrize("extra,expected", [
    ('{"ascend_preflight_driver_version": 25.5}', "ascend_preflight_driver_version is 25.5 (float)"),
    ('{"fleet_serial": 0}', "fleet_serial is 0: expected a positive number of hosts"),
    ('{"fleet_max_fail_percentage": 150}', "fleet_max_fail_percentage is 150: expected a number from 0 to 100"),
    ('{"ascend_preflight_version_policy": "newest"}', "ascend_preflight_version_policy"),
])
def test_bad_settings_stop_the_run_before_any_host_is_touched(fleet, extra, expected):
    base, inventory = fleet
    run = play(base, inventory, "-e", "'%s'" % extra)
    assert run.rc != 0
    assert expected in run.stdout, run.stdout
    assert run.results("Gather the NPU facts") == {}
