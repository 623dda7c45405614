"""`twin up` is repeatable and `twin down` removes what the twin made, and only that.

Runs a second, private twin (its own home, registry port and inventory) so the shared one stays up.
"""
import json
import stat
import subprocess

import pytest

from conftest import free_port, snapshot
from twin.lifecycle import Twin, port_open

pytestmark = pytest.mark.docker


@pytest.fixture
def private_twin(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    ascend:\n      hosts:\n"
                         "        lab-a: {twin_profile: duo2}\n        lab-b: {twin_profile: missing_davinci}\n"
                         "        not-a-twin-host: {ansible_host: 192.0.2.10}\n")
    twin = Twin(home=tmp_path / "home", registry_port=free_port(), inventory=inventory)
    yield twin
    twin.down()


def test_up_twice_then_down_leaves_nothing(private_twin):
    twin = private_twin
    state = twin.up()
    assert state["hosts"] == {"lab-a": "duo2", "lab-b": "missing_davinci"}
    lab_a = twin.host_root("lab-a")
    davinci = sorted(p.name for p in (lab_a / "dev").iterdir())
    assert davinci == ["davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager", "devmm_svm", "hisi_hdc"]
    assert all(stat.S_ISCHR((lab_a / "dev" / name).lstat().st_mode) for name in davinci)
    assert not (twin.host_root("lab-b") / "dev/davinci1").exists()
    smi = subprocess.run([str(lab_a / "usr/local/bin/npu-smi"), "info", "-l"], stdout=subprocess.PIPE, check=True)
    assert b"\tTotal Count                    : 2\n" in smi.stdout
    assert twin.registry_answers()

    before = snapshot(twin.home / "hosts")
    second = twin.up()
    assert second["registry_pid"] == state["registry_pid"], "a second up must reuse the running registry"
    assert snapshot(twin.home / "hosts") == before, "a second up must not rewrite host files"

    pulled = "%s/ascend/vllm-ascend:v0.18.0rc1-310p" % twin.registry
    subprocess.run(["docker", "pull", "-q", pulled], check=True, stdout=subprocess.DEVNULL)
    name = "twin-lifecycle-%s" % twin.instance
    subprocess.run(["docker", "create", "--name", name, "--device",
                    "%s/dev/davinci0:/dev/davinci0" % lab_a, pulled, "true"], check=True, stdout=subprocess.DEVNULL)
    assert twin.our_containers() == [name]

    twin.down()
    assert not twin.home.exists()
    assert not port_open(twin.registry_port)
    assert twin.our_containers() == [] and twin.our_images() == []
    names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], stdout=subprocess.PIPE,
                           universal_newlines=True, check=True).stdout.split()
    assert name not in names
    twin.down()  # a second down is harmless


def test_down_refuses_a_home_the_twin_did_not_make(tmp_path):
    home = tmp_path / "someone-elses"
    home.mkdir()
    (home / "precious.txt").write_text("keep me")
    twin = Twin(home=home, registry_port=free_port(), inventory=tmp_path / "none.yml")
    with pytest.raises(Exception, match="holds no state.json"):
        twin.down()
    assert (home / "precious.txt").read_text() == "keep me"


def test_unknown_profile_is_named(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"lab-x": {"twin_profile": "nope"}}}}))
    twin = Twin(home=tmp_path / "home", registry_port=free_port(), inventory=inventory)
    with pytest.raises(Exception, match="host lab-x: unknown twin_profile 'nope'"):
        twin.build_hosts({})
    twin.down()
