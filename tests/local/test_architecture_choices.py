"""Every choice of the roles that depends on the host's architecture, rendered by Ansible for a Kunpeng (aarch64)
host and an x86_64 one from the roles' own variables: the image platform pulled, the jemalloc path preloaded (in
the Ubuntu and the openEuler image), the driver package installed. None may fall back to another architecture's."""
import json

import pytest

from conftest import REPO, run_playbook

VARS_FILES = ["roles/fleet/defaults/main.yml", "roles/vllm_image/defaults/main.yml", "roles/vllm_image/vars/main.yml",
              "roles/vllm_server/defaults/main.yml", "roles/ascend_driver/defaults/main.yml",
              "roles/ascend_driver/vars/main.yml"]
PLAY = """- hosts: localhost
  gather_facts: false
  vars_files: %s
  tasks:
    - name: Show the choices
      ansible.builtin.debug:
        msg: "{{ {'platform': vllm_image_host_platform, 'jemalloc': vllm_server_jemalloc_path,
                  'driver': ascend_driver_packages.driver, 'firmware': ascend_driver_packages.firmware} | to_json }}"
""" % json.dumps([str(REPO / path) for path in VARS_FILES])


def render(tmp_path, architecture, **settings):
    """The run that renders the choices on a host whose facts say architecture (the setup module's and
    npu_facts')."""
    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local\n")
    (tmp_path / "play.yml").write_text(PLAY)
    facts = {"architecture": architecture, "ascend": {"architecture": architecture}}
    (tmp_path / "vars.json").write_text(json.dumps(dict(settings, ansible_facts=facts)))
    return run_playbook(tmp_path / "run", tmp_path / "hosts.ini", str(tmp_path / "play.yml"),
                        "-e", "@%s" % (tmp_path / "vars.json"))


def choices(tmp_path, architecture, **settings):
    run = render(tmp_path, architecture, **settings)
    assert run.rc == 0, run.stdout
    (shown,) = run.results("Show the choices").values()
    return json.loads(shown["msg"])


@pytest.mark.parametrize("architecture, platform", [("aarch64", "linux/arm64"), ("x86_64", "linux/amd64")])
def test_each_choice_follows_the_hosts_architecture(tmp_path, architecture, platform):
    assert choices(tmp_path, architecture) == {
        "platform": platform,
        "jemalloc": "/usr/lib/%s-linux-gnu/libjemalloc.so.2" % architecture,  # Ubuntu's multiarch folder
        "driver": "Ascend-hdk-310p-npu-driver_25.5.2_linux-%s.run" % architecture,
        "firmware": "Ascend-hdk-310p-npu-firmware_7.8.0.7.220.run",  # one package for both
    }


@pytest.mark.parametrize("architecture", ["aarch64", "x86_64"])
def test_the_openeuler_image_keeps_jemalloc_in_lib64_on_either_architecture(tmp_path, architecture):
    assert choices(tmp_path, architecture, fleet_image_variant="openeuler")["jemalloc"] == "/usr/lib64/libjemalloc.so.2"


def test_a_platform_set_by_hand_wins_over_the_hosts(tmp_path):
    assert choices(tmp_path, "aarch64", vllm_image_platform="linux/amd64")["platform"] == "linux/amd64"


def test_an_architecture_vllm_ascend_publishes_no_image_for_is_named(tmp_path):
    run = render(tmp_path, "ppc64le")
    assert run.rc != 0
    assert "architecture 'ppc64le': vLLM-Ascend images exist for aarch64 (Kunpeng) and x86_64 only" in run.stdout
