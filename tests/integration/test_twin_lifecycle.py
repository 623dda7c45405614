"""`twin up` makes hosts reached over SSH at the real paths, is repeatable and sized on demand; `twin down`
removes what the twin made, and only that.

Runs a second, private twin (its own home, registry port, network and inventory) so the shared one stays up.
"""
import copy
import os
import pathlib
import stat
import subprocess

import pytest
import yaml

from conftest import free_port, snapshot
from twin.lifecycle import Twin, port_open

pytestmark = pytest.mark.docker


@pytest.fixture
def private_twin(tmp_path):
    twin = Twin(home=tmp_path / "home", registry_port=free_port(), inventory=tmp_path / "inventory" / "hosts.yml")
    yield twin
    twin.down()


def ssh(inventory, host, command, group="ascend"):
    """Log in as the inventory says, with host-key checking on, and run a command with sudo."""
    connection = inventory["all"]["children"][group]["vars"]
    address = inventory["all"]["children"][group]["hosts"][host]["ansible_host"]
    args = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-i",
            connection["ansible_ssh_private_key_file"]] + connection["ansible_ssh_common_args"].split()
    return subprocess.run(args + ["%s@%s" % (connection["ansible_user"], address), command],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)


def test_up_makes_ssh_hosts_at_the_real_paths_then_down_leaves_nothing(private_twin):
    twin = private_twin
    state = twin.up(count=2)
    assert state["hosts"] == {"twin-01": "seed_duo4", "twin-02": "duo2", "twin-gw": "gateway_monitoring"}
    inventory = yaml.safe_load(twin.inventory.read_text())
    assert (twin.inventory.parent / "group_vars").is_symlink()

    whoami = ssh(inventory, "twin-01", "id -un && sudo -n id -un")
    assert whoami.returncode == 0 and whoami.stdout.split() == ["ops", "root"], whoami.stderr
    smi = ssh(inventory, "twin-01", "npu-smi info -l")
    assert "\tTotal Count                    : 4\n" in smi.stdout, smi.stdout + smi.stderr
    nodes = ssh(inventory, "twin-01",
                "stat -c '%F %n' /dev/davinci[0-9]* /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc")
    assert nodes.stdout.count("character special file") == 11, nodes.stdout
    files = ssh(inventory, "twin-02", "cat /usr/local/Ascend/driver/version.info /etc/ascend_install.info && "
                                      "ls /usr/local/dcmi /data/models/Qwen3-VL-8B-Instruct/config.json")
    assert "Version=25.5.2" in files.stdout and "config.json" in files.stdout, files.stdout + files.stderr
    # Each host has its own engine, and reaches the twin's registry by the inventory's mirror name.
    engine = ssh(inventory, "twin-02", "sudo docker info --format '{{.Driver}}' && "
                                       "python3 -c \"import json, urllib.request; print(json.load(open("
                                       "'/etc/docker/daemon.json'))['storage-driver']); print(urllib.request.urlopen("
                                       "'http://twin-registry:5000/v2/ascend/vllm-ascend/tags/list').read())\"")
    assert engine.returncode == 0 and "v0.18.0rc1-310p" in engine.stdout, engine.stderr
    # overlay2 where the machine's disk takes an overlay mount, else vfs (tests/twin/host/init.sh).
    driver, configured = engine.stdout.split()[:2]
    assert driver == configured and driver in ("overlay2", "vfs"), engine.stdout

    # The gateway: in its own group, no NPU, HAProxy from the distribution's package.
    gateway = ssh(inventory, "twin-gw", "dpkg-query -W -f '${Status}' haproxy; ls /dev/davinci_manager", "gateway")
    assert gateway.stdout.startswith("install ok installed") and "No such file" in gateway.stderr, gateway
    # The packages a site's mirror gives (HAProxy, Prometheus's) are there, but no service of theirs runs until a role
    # enables it.
    services = ssh(inventory, "twin-01", "pgrep -a 'prometheus|haproxy|alertmanager' || echo none")
    assert services.stdout.strip() == "none", services.stdout
    # A key that is not recorded is refused: host-key checking is on.
    stranger = copy.deepcopy(inventory)
    stranger["all"]["children"]["ascend"]["vars"]["ansible_ssh_common_args"] = "-o UserKnownHostsFile=/dev/null"
    assert ssh(stranger, "twin-01", "true").returncode != 0

    demo = twin.demo_fleet()
    before = {name: (host.container_info()["Id"], snapshot(host.root)) for name, host in demo.hosts.items()}
    second = twin.up()
    assert second["hosts"] == state["hosts"], "a second up keeps the fleet's size"
    assert second["registry_pids"] == state["registry_pids"], "a second up reuses the running registries"
    assert {name: (host.container_info()["Id"], snapshot(host.root)) for name, host in demo.hosts.items()} == before

    smaller = twin.up(count=1)
    assert smaller["hosts"] == {"twin-01": "seed_duo4", "twin-gw": "gateway_monitoring"}
    assert sorted(twin.our_containers()) == sorted([demo["twin-01"].container, demo["twin-gw"].container])
    assert list(yaml.safe_load(twin.inventory.read_text())["all"]["children"]["ascend"]["hosts"]) == ["twin-01"]

    registries = smaller["registry_pids"].values()
    twin.down()
    assert not twin.home.exists() and not twin.inventory.exists()
    assert not port_open("127.0.0.1", twin.registry_port)
    assert not any(pathlib.Path("/proc/%d" % pid).exists() for pid in registries), "a registry still runs"
    assert twin.our_containers() == [] and twin.our_images() == [] and twin.gateway() is None
    assert not list(pathlib.Path("/sys/fs/cgroup").glob("*/%s-*" % twin.prefix)), "cgroups of the hosts remain"
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
    twin = Twin(home=tmp_path / "home", registry_port=free_port(), inventory=tmp_path / "hosts.yml")
    with pytest.raises(ValueError, match=r"host lab-x: unknown twin profile 'nope' \(known: chip_alarm, "):
        twin.fleet(tmp_path / "fleet", {"lab-x": "nope"})


def test_host_files_are_made_at_the_real_paths(tmp_path):
    from twin import hosts

    root = tmp_path / "root"
    hosts.build_root(root, hosts.load_profiles()["missing_davinci"])
    nodes = sorted(path.name for path in (root / "dev").iterdir())
    assert nodes == ["davinci0", "davinci_manager", "devmm_svm", "hisi_hdc"]
    assert all(stat.S_ISCHR((root / "dev" / name).lstat().st_mode) for name in nodes)
    assert os.access(root / "usr/local/bin/npu-smi", os.X_OK)
    for path in ("usr/local/Ascend/driver/version.info", "usr/local/Ascend/firmware/version.info",
                 "usr/local/dcmi/npu-smi-twin.json", "etc/ascend_install.info",
                 "data/models/Qwen3-VL-8B-Instruct/model.safetensors.index.json"):
        assert (root / path).is_file(), path
