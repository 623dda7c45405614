"""The vllm_image role's image list (filters vllm_image_archive_list, vllm_image_archive_pulled, and the hosts'
entries of vars/main.yml): one entry per image and platform with every host that runs it, hosts that would
save or load one image from two places refused by name, a load into a registry the hosts do not pull from
refused, each pulled platform's ID kept, and each host's names as Ansible renders them for the mirrors sites
use."""
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.ascend.fleet.plugins.filter.vllm_image import (
    vllm_image_archive_list,
    vllm_image_archive_pulled,
)
from conftest import REPO

NAME = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"


def entry(host, platform="linux/arm64", name=NAME, pull_from=NAME, push_to="site:5000/ascend/vllm-ascend:x",
          pulls_from="site:5000/ascend/vllm-ascend:x"):
    return {"host": host, "name": name, "platform": platform, "pull_from": pull_from, "pulls_from": pulls_from,
            "push_to": push_to, "release": "v0.18.0rc1, CANN 8.5.1, eager mode"}


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


def test_a_load_into_a_registry_the_hosts_do_not_pull_from_is_refused_by_host():
    """A host without fleet_image_registry_mirror pulls from quay.io itself: pushing to a site registry, even one
    named with --registry, leaves it pulling from where it cannot reach."""
    hosts = [entry("npu-a"), entry("npu-b", pulls_from=NAME)]
    assert len(vllm_image_archive_list(hosts)) == 1  # listing and saving need no site registry
    with pytest.raises(AnsibleFilterError) as refused:
        vllm_image_archive_list(hosts, True)
    assert str(refused.value).startswith("npu-b pulls %s from its own registry, not from a site registry" % NAME)
    assert "Fix: set fleet_image_registry_mirror" in str(refused.value) and "--hosts" in str(refused.value)


FLEET_DEFAULTS = yaml.safe_load((REPO / "roles/fleet/defaults/main.yml").read_text())
LATER = "quay.io/ascend/vllm-ascend:v0.19.1rc1-310p"


def names(**settings):
    """pull_from, pulls_from and push_to of a host's entry as Ansible renders them, fleet_image_pull_from from the
    fleet role's default unless set."""
    values = dict(fleet_image=LATER, fleet_image_registry="quay.io", fleet_image_registry_mirror="",
                  vllm_image_archive_pull_mirror="", vllm_image_archive_registry="")
    values.update(settings)

    def render(text, variables):
        return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text)).strip()

    values.setdefault("fleet_image_pull_from", render(FLEET_DEFAULTS["fleet_image_pull_from"], values))
    fields = yaml.safe_load((REPO / "roles/vllm_image/vars/main.yml").read_text())["vllm_image_archive_entry"]
    return tuple(render(fields[field], values) for field in ("pull_from", "pulls_from", "push_to"))


@pytest.mark.parametrize("settings, expected", [
    ({}, (LATER, LATER, LATER)),
    # A site registry standing for quay.io; the controller pushes to it by another address (--registry).
    ({"fleet_image_registry_mirror": "registry.site:5000", "vllm_image_archive_registry": "10.0.0.5:5000"},
     (LATER, "registry.site:5000/ascend/vllm-ascend:v0.19.1rc1-310p",
      "10.0.0.5:5000/ascend/vllm-ascend:v0.19.1rc1-310p")),
    # A prefix-style mirror keeps quay.io's path after its own; the save pulls from a mirror too (--pull-mirror).
    ({"fleet_image_registry_mirror": "m.daocloud.io/quay.io", "vllm_image_archive_pull_mirror": "quay.nju.edu.cn",
      "vllm_image_archive_registry": "10.0.0.5:5000"},
     ("quay.nju.edu.cn/ascend/vllm-ascend:v0.19.1rc1-310p", "m.daocloud.io/quay.io/ascend/vllm-ascend:v0.19.1rc1-310p",
      "10.0.0.5:5000/quay.io/ascend/vllm-ascend:v0.19.1rc1-310p")),
    # A registry that keeps the image under a path of its own (Huawei SWR), named whole.
    ({"fleet_image_pull_from": "swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.19.1rc1-310p"},
     (LATER, "swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.19.1rc1-310p",
      "swr.cn-south-1.myhuaweicloud.com/ascendhub/vllm-ascend:v0.19.1rc1-310p")),
])
def test_each_hosts_names_as_ansible_renders_them_for_the_mirrors_sites_use(settings, expected):
    assert names(**settings) == expected
