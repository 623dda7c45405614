"""The vllm_image role's image list (filters vllm_image_archive_list, vllm_image_archive_pulled, and the hosts'
entries of vars/main.yml): one entry per image and platform with every host that runs it, hosts that would
save or load one image from two places refused by name, and each pulled platform's ID kept."""
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.filter.vllm_image import (
    vllm_image_archive_list,
    vllm_image_archive_pulled,
)
from conftest import REPO

NAME = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"


def entry(host, platform="linux/arm64", name=NAME, pull_from=NAME, push_to="site:5000/ascend/vllm-ascend:x"):
    return {"host": host, "name": name, "platform": platform, "pull_from": pull_from, "push_to": push_to,
            "release": "v0.18.0rc1, CANN 8.5.1, eager mode"}


def test_hosts_of_one_image_and_platform_are_one_entry_in_the_order_of_their_first_host():
    listed = vllm_image_archive_list([entry("npu-b"), entry("x86-a", "linux/amd64"), entry("npu-a"),
                                      entry("npu-c", name=NAME + "-openeuler")])
    assert [(image["name"], image["platform"], image["hosts"]) for image in listed] == [
        (NAME, "linux/arm64", ["npu-b", "npu-a"]), (NAME, "linux/amd64", ["x86-a"]),
        (NAME + "-openeuler", "linux/arm64", ["npu-c"])]
    assert set(listed[0]) == {"name", "platform", "pull_from", "push_to", "release", "hosts"}


@pytest.mark.parametrize("field, verb", [("pull_from", "is saved from"),
                                         ("push_to", "is loaded into the registry as")])
def test_hosts_that_would_take_one_image_from_two_places_are_refused_by_name(field, verb):
    with pytest.raises(AnsibleFilterError) as refused:
        vllm_image_archive_list([entry("npu-a"), entry("npu-b", **{field: "other/" + NAME})])
    message = str(refused.value)
    assert message.startswith("%s for linux/arm64 %s " % (NAME, verb)), message
    assert "for npu-a and other/%s for npu-b" % NAME in message and "Fix: run the hosts of each registry" in message


def test_each_pulled_platform_keeps_its_id_and_a_check_mode_pull_has_none():
    pulls = {"results": [{"item": {"name": NAME, "platform": "linux/arm64"}, "image_id": "sha256:1"},
                         {"item": {"name": NAME, "platform": "linux/amd64"}, "msg": "would pull"}]}
    assert vllm_image_archive_pulled(pulls) == [{"name": NAME, "platform": "linux/arm64", "id": "sha256:1"},
                                                {"name": NAME, "platform": "linux/amd64", "id": ""}]


def test_the_hosts_entry_has_the_fields_the_list_reads():
    variables = yaml.safe_load((REPO / "roles/vllm_image/vars/main.yml").read_text())
    assert set(variables["vllm_image_archive_entry"]) == set(entry("h"))
