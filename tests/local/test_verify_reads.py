"""The verify suite's reads (tests/verify/read.yml) on this machine: one playbook run for all the hosts the suite
names, what it found on each, and why a host could not be read."""
import json
import sys
import time

import pytest
from verify.conftest import FleetReads


class CountedReads(FleetReads):
    def __init__(self, *args):
        super().__init__(*args)
        self.runs = []

    def read(self, patterns):
        self.runs.append(patterns)
        return super().read(patterns)


@pytest.fixture
def inventory(tmp_path):
    """localhost, with no NPU and no plan recorded, and a host whose SSH port refuses connections."""
    settings = {"fleet_plan_file": str(tmp_path / "plan.json"), "fleet_npu_smi": str(tmp_path / "no-npu-smi"),
                "fleet_api_key": ""}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {"children": {"ascend": {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                  "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_become": False}},
        "vars": settings}}}}))
    return str(path)


def test_one_run_reads_every_host_the_suite_names(inventory):
    reads = CountedReads(inventory, ["ansible://ascend"])

    here, gone = reads.of("localhost"), reads.of("gone")

    assert reads.runs == [["ascend"]], "one run for the fleet, not one per host"
    found = here["verify_read"]
    assert found["plan"] is None and found["probes"] == {}, "nothing is deployed here"
    assert found["ascend"]["ready"] is False and found["ascend"]["problems"], "no npu-smi here"
    assert gone.get("unreachable") and "verify_read" not in gone, gone


def test_a_host_not_named_by_a_pattern_is_read_alone(inventory):
    reads = CountedReads(inventory, ["ssh://somewhere-else"])

    assert reads.of("localhost")["verify_read"]["plan"] is None
    assert reads.runs == [["localhost"]]


def test_a_host_that_never_answers_ends_the_read_at_its_bound_naming_it(inventory, tmp_path):
    hanging = tmp_path / "python-that-hangs"
    pid_file = tmp_path / "hanging.pid"
    hanging.write_text("#!/bin/sh\necho $$ > %s\nexec sleep 600\n" % pid_file)
    hanging.chmod(0o755)
    hosts = json.loads(open(inventory).read())
    hosts["all"]["children"]["ascend"]["hosts"]["localhost"]["ansible_python_interpreter"] = str(hanging)
    with open(inventory, "w") as out:
        json.dump(hosts, out)
    reads = FleetReads(inventory, ["ansible://localhost"], timeout_s=20)

    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        reads.of("localhost")

    assert time.monotonic() - started < 120
    assert "reading the hosts localhost did not end within 20 s" in str(failed.value), failed.value
    # The run was stopped with what it started: nothing of it is left hanging.
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running(pid), "the hung module outlived the read"


def running(pid):
    """Whether the process is alive (a zombie waiting for its parent to reap it has ended)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
