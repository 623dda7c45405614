"""An inventory folder (`-i inventory/<site>`, as the README's benchmark examples write it) holds more than
inventory: the fleet's key (credentials/) and Huawei's driver packages (ascend-hdk/). Ansible reads a folder file
by file, so without the project's ansible.cfg the key became a host name and each package ran as an inventory
script."""
import json
import shutil
import subprocess

from conftest import REPO, venv_tool

KEY = "k3y-0f-the-fleet"
HOSTS = "all:\n  children:\n    ascend:\n      hosts:\n        npu-1:\n"


def test_the_key_and_the_driver_packages_of_an_inventory_folder_are_not_inventory(tmp_path):
    site = tmp_path / "twin"
    shutil.copytree(str(REPO / "inventory" / "twin" / "group_vars"), str(site / "group_vars"))
    (site / "hosts.yml").write_text(HOSTS)
    (site / "credentials").mkdir()
    (site / "credentials" / "api-key").write_text(KEY + "\n")
    ran = tmp_path / "the package ran"
    package = site / "ascend-hdk" / "Ascend-hdk-310p-npu-driver_25.5.2_linux-x86_64.run"
    package.parent.mkdir()
    # A package that, run as an inventory script, leaves a mark and answers as one would.
    package.write_text("#!/bin/sh\ntouch '%s'\necho '{\"_meta\": {\"hostvars\": {}}, \"all\": {\"hosts\": [\"x\"]}}'\n"
                       % ran)
    package.chmod(0o755)
    listed = subprocess.run([venv_tool("ansible-inventory"), "-i", str(site), "--list"], cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=True,
                            timeout=120)
    assert KEY not in listed.stdout + listed.stderr
    assert not ran.exists(), "ansible-inventory ran %s as an inventory script" % package.name
    assert sorted(json.loads(listed.stdout)["_meta"]["hostvars"]) == ["npu-1"]
