"""site.yml --tags preflight over SSH on twin hosts with one fault each, in one run."""
import platform

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import npu_gather
from conftest import snapshot
from twin_fleet import LABEL, PlayFleet

pytestmark = pytest.mark.docker

BAD_HOSTS = {
    "bad-driver": ("old_driver_24", ["driver version: found 24.1.rc2.2 (a 24.x driver)", "crash", "slow"]),
    "bad-firmware": ("firmware_mismatch", ["firmware version: found 7.8.0.6.201 on NPU 6",
                                           "required exactly 7.8.0.7.220"]),
    "bad-chip": ("chip_alarm", ["chip health: found NPU 224: chip 1 health Alarm"]),
    "bad-dcmi": ("dcmi_8005", ["NPU ready: found `npu-smi info` failed: dcmi module initialize failed. ret is -8005",
                               "held by another container"]),
    "bad-node": ("missing_davinci", ["device nodes: found missing", "missing a node for logic id 1 (NPU 6 chip 1)"]),
    "bad-process": ("foreign_process", ["chip in use: found pid 41877 (python3.9, 15321 MB) on NPU 6 chip 0"]),
}
# What a run may leave in a host's own files: Ansible's working folders and the login records.
RUN_TRACES = ("/home/ops", "/root", "/tmp", "/var/log", "/run", "/var/run")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """One good and six bad twin hosts, with the twin's group_vars unchanged."""
    hosts = {"good": "duo2"}
    hosts.update({name: profile for name, (profile, _) in BAD_HOSTS.items()})
    fleet = PlayFleet(tmp_path_factory.mktemp("preflight"), hosts)
    yield fleet
    fleet.down()


def host_state(fleet):
    """Each host's Ascend files and every change in its own filesystem, except a run's traces."""
    state = {}
    for name in fleet.hosts:
        changes = [path for path in fleet[name].changed_paths() if not path.startswith(RUN_TRACES)]
        state[name] = (snapshot(fleet[name].root), changes)
    return state


def npu_facts_cpu_model():
    return npu_gather.cpu_model()


def play(fleet, *extra):
    return fleet.play("--tags", "preflight", *extra, preflight=True)


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_each_bad_host_fails_with_its_own_message(fleet, check_mode):
    before = host_state(fleet)
    run = play(fleet, *(["--check"] if check_mode else []))
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
    # The good host passes, warned only of its tuning (a twin host boots untuned, as a host on schedutil does).
    (good,) = [line for line in lines if line.startswith("good: ")]
    assert good.startswith("good: PASSED with warnings (%s %s; 2 card(s) Atlas 300I Duo, 4 chip(s); driver 25.5.2, "
                           "firmware 7.8.0.7.220): " % (platform.machine(), npu_facts_cpu_model())), good
    assert {warning.split(" is ")[0] for warning in good.split(": ", 2)[2].split(" | ")} == {
        "host tuning: found %s" % name for name in ("cpu_governor", "vm.swappiness", "kernel.numa_balancing",
                                                    "kernel.sched_migration_cost_ns")}, good
    assert sorted(line.split(":")[0] for line in lines if ": FAILED: " in line) == sorted(BAD_HOSTS)
    assert run.changed() == 0
    assert host_state(fleet) == before


def test_unhealthy_card_can_be_left_out(fleet):
    run = play(fleet, "--limit", "bad-chip", "-e", "ascend_preflight_unhealthy_chip_action=exclude_card")
    assert run.rc == 0, run.stdout
    judged = run.results("Judge the host")["bad-chip"]
    assert judged["ansible_facts"]["ascend_preflight_result"]["excluded_npu_ids"] == [224]


@pytest.mark.parametrize("extra,expected", [
    ('{"ascend_preflight_driver_version": 25.5}', "ascend_preflight_driver_version is 25.5 (float)"),
    ('{"fleet_serial": 0}', "fleet_serial is 0: expected a positive number of hosts"),
    # A trailing newline is no number: the check matches the whole value.
    ('{"fleet_serial": "5\\n"}', "expected a positive number of hosts per batch"),
    ('{"fleet_max_fail_percentage": 150}', "fleet_max_fail_percentage is 150: expected a number from 0 to 100"),
    ('{"fleet_canary_max_regression": 10}', "fleet_canary_max_regression is 10: expected a share from 0 to 1"),
    ('{"fleet_canary_confidence": 1.5}', "fleet_canary_confidence is 1.5: expected a number from 0.5 to 0.999"),
    ('{"ascend_preflight_version_policy": "newest"}', "ascend_preflight_version_policy"),
])
def test_bad_settings_stop_the_run_before_any_host_is_touched(fleet, extra, expected):
    run = play(fleet, "-e", "'%s'" % extra)
    assert run.rc != 0
    assert expected in run.stdout, run.stdout
    assert run.results("Gather the NPU facts") == {}


def test_a_host_that_fails_preflight_gets_no_container(fleet):
    run = fleet.play("--limit", "bad-driver", preflight=True)
    assert run.rc != 0 and run.failed_hosts() == ["bad-driver"]
    assert run.results("Gather the NPU facts"), "preflight did not run"
    assert fleet["bad-driver"].docker("ps", "-aq").stdout.split() == []
    assert not fleet["bad-driver"].exists("/etc/vllm-ascend")


def test_a_container_of_another_owner_on_a_chip_fails_the_host_and_ours_does_not(fleet):
    """Last: it starts containers on the good host, and takes them away after."""
    good = fleet["good"]
    try:
        # Someone else's job on chip 0 (the image: the stand-in's, loaded into the host's engine as llm-test:twin),
        # one crash-looping on chip 1 (restarting between attempts), and one of ours on chip 2.
        good.run_foreign_container(good.profile, {"name": "llm-test", "chips": [0]})
        good.docker("run", "-d", "--name", "crash-loop", "--restart", "always", "--device", "/dev/davinci1",
                    "llm-test:twin", "false")
        good.docker("run", "-d", "--name", "vllm-ascend-old", "--label", "%s.instance=vllm-ascend" % LABEL,
                    "--device", "/dev/davinci2", "llm-test:twin", "sleep", "infinity")
        run = play(fleet, "--limit", "good")
        assert run.rc == 2 and run.failed_hosts() == ["good"], run.stdout
        message = "\n".join(run.results("Pass only hosts that can serve")["good"]["msg"])
        assert ("chip held by a container: found container llm-test (image llm-test:twin, running) maps /dev/davinci0"
                in message), message
        assert "`docker rm -f llm-test`" in message
        assert "found container crash-loop (image llm-test:twin, " in message and "maps /dev/davinci1" in message
        assert "vllm-ascend-old" not in message
        assert run.changed() == 0
    finally:
        for name in ("llm-test", "crash-loop", "vllm-ascend-old"):
            good.docker("rm", "-f", name, check=False)
