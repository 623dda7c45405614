"""fleet_first_batch (the fleet role's vars: plugins/filter/fleet.py's first_batch) against Ansible's own batching:
plays with `serial` over hosts of this machine record, in each batch, what Ansible runs now (ansible_play_batch)
and fleet_first_batch. In every batch, fleet_first_batch is the batch Ansible ran first, whole. The filter's
cases one by one: tests/unit/roles/fleet/test_first_batch.py."""
import sys

import pytest
import yaml

from conftest import run_playbook

HOSTS = ["npu-%02d" % number for number in range(1, 8)]
SERIALS = ["30%", "50%", 4, "100%"]


def play(serial):
    return {"name": "Batches under %s" % serial, "hosts": "all", "gather_facts": False, "serial": serial,
            "vars": {"fleet_serial": serial}, "roles": ["ascend.fleet.fleet"],
            "tasks": [{"name": "Record the batch under %s" % serial, "ansible.builtin.debug": {
                "msg": {"batch": "{{ ansible_play_batch }}", "first": "{{ fleet_first_batch }}"}}}]}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("batches")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "fleet_api_key": ""}
    (folder / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": local, "hosts": {name: {} for name in HOSTS}}}))
    (folder / "batches.yml").write_text(yaml.safe_dump([play(serial) for serial in SERIALS], sort_keys=False))
    done = run_playbook(folder / "run", folder / "hosts.yml", str(folder / "batches.yml"))
    assert done.rc == 0, done.stdout
    return done


@pytest.mark.parametrize("serial", SERIALS)
def test_the_first_batch_is_the_one_ansible_runs_first(run, serial):
    recorded = {host: result["msg"] for host, result in run.results("Record the batch under %s" % serial).items()}
    batches = []
    for host in HOSTS:
        if recorded[host]["batch"] not in batches:
            batches.append(recorded[host]["batch"])
    assert [host for batch in batches for host in batch] == HOSTS and len(batches) > (serial != "100%")
    assert {host: recorded[host]["first"] for host in HOSTS} == {host: batches[0] for host in HOSTS}
