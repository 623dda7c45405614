"""The image's names as the fleet role's settings make them (roles/fleet/defaults/main.yml), rendered by Ansible: the
name the containers run, and where a host pulls it from, for each style of mirror."""
import json

import pytest

from conftest import REPO, run_playbook

PLAY = """- hosts: localhost
  gather_facts: false
  vars_files: [%s]
  tasks:
    - name: Show the names
      ansible.builtin.debug:
        msg: "{{ {'run': fleet_image, 'pull': fleet_image_pull_from} | to_json }}"
""" % (REPO / "roles/fleet/defaults/main.yml")
TAG = "v0.18.0rc1-310p"


@pytest.mark.parametrize("settings,pull", [
    ({}, "quay.io/ascend/vllm-ascend:" + TAG),
    ({"fleet_image_registry_mirror": "quay.nju.edu.cn"}, "quay.nju.edu.cn/ascend/vllm-ascend:" + TAG),
    ({"fleet_image_registry_mirror": "m.daocloud.io/quay.io"}, "m.daocloud.io/quay.io/ascend/vllm-ascend:" + TAG),
    ({"fleet_image_registry_mirror": "registry.example.cn:5000", "fleet_image_variant": "openeuler"},
     "registry.example.cn:5000/ascend/vllm-ascend:" + TAG + "-openeuler"),
    # A site's own build is pulled by its own name, whatever the mirror.
    ({"fleet_image_registry_mirror": "quay.nju.edu.cn", "fleet_image": "harbor.example.cn/ai/vllm-310p:1"},
     "harbor.example.cn/ai/vllm-310p:1"),
])
def test_the_containers_run_quay_ios_name_whatever_mirror_the_hosts_pull_from(tmp_path, settings, pull):
    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local\n")
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps(settings))
    run = run_playbook(tmp_path / "run", tmp_path / "hosts.ini", str(tmp_path / "play.yml"),
                       "-e", "@%s" % (tmp_path / "vars.json"))
    assert run.rc == 0, run.stdout
    (shown,) = run.results("Show the names").values()
    names = json.loads(shown["msg"])
    expected_run = settings.get("fleet_image", "quay.io/ascend/vllm-ascend:" + TAG + (
        "-openeuler" if settings.get("fleet_image_variant") == "openeuler" else ""))
    assert names == {"run": expected_run, "pull": pull}
