"""module_utils/npu_holders.py: the one rule for a chip's node, the one reading of a process's container, and the
one rule for which container holding a chip is this collection's."""
import json

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import npu_holders


def test_container_id_from_cgroup_v1_and_v2():
    container = "3f4e" * 16
    assert npu_holders.parse_container_id("12:pids:/docker/%s\n11:cpuset:/docker/%s\n" % (container, container)) == (
        container)
    assert npu_holders.parse_container_id("0::/system.slice/docker-%s.scope\n" % container) == container
    assert npu_holders.parse_container_id("0::/user.slice/user-0.slice/session-3.scope\n") is None
    # Nested (a container of a Docker that runs in a container, as on the twin): the innermost is the one.
    outer = "ab12" * 16
    assert npu_holders.parse_container_id("0::/docker/%s/docker/%s\n" % (outer, container)) == container


@pytest.mark.parametrize("path,number", [
    ("/dev/davinci0", 0), ("/dev/davinci12", 12), ("/dev/davinci_manager", None), ("/dev/davinci3x", None),
    ("davinci4", 4), ("/dev/notdavinci1", None),
])
def test_davinci_number(path, number):
    assert npu_holders.davinci_number(path) == number


def inspected(name, devices, labels=None, status="running", privileged=False):
    """A container as `docker container inspect` prints it."""
    return {"Id": name * 8, "Name": "/" + name, "State": {"Status": status},
            "Config": {"Image": name + ":latest", "Labels": labels},
            "HostConfig": {"Privileged": privileged, "Devices": [{"PathOnHost": path} for path in devices]}}


def docker_answering(*details):
    """A Docker CLI whose `ps` lists these containers (running and restarting alike, as `docker ps` does)."""
    def runner(docker, *args, **kwargs):
        if args[0] == "ps":
            return 0, "".join(detail["Id"] + "\n" for detail in details), ""
        return 0, json.dumps([detail for detail in details if detail["Id"] in args]), ""
    return runner


OURS = {"ascend-vllm-fleet.instance": "vllm-ascend", "ascend-vllm-fleet.host": "npu-a"}


def test_containers_list_the_mapped_nodes_with_their_state():
    runner = docker_answering(inspected("exporter", ["/dev/davinci0", "/dev/davinci_manager", "/dev/null"]),
                              inspected("crashing", ["/dev/davinci1"], status="restarting"),
                              inspected("agent", [], privileged=True), inspected("web", []))
    listed, available = npu_holders.containers("docker", "/dev", runner)
    assert available is True
    assert [(c["name"], c["image"], c["devices"], c["status"]) for c in listed] == [
        ("exporter", "exporter:latest", ["/dev/davinci0", "/dev/davinci_manager"], "running"),
        ("crashing", "crashing:latest", ["/dev/davinci1"], "restarting"),
        ("agent", "agent:latest", ["all"], "running")]


def test_chip_holders_are_the_containers_of_other_owners_on_the_chips():
    listed, _available = npu_holders.containers("docker", "/dev", docker_answering(
        inspected("vllm-ascend", ["/dev/davinci0"], labels=OURS),
        inspected("other-fleet", ["/dev/davinci1", "/dev/davinci0"], labels={"old.instance": "vllm-ascend"}),
        inspected("exporter", ["/dev/davinci_manager", "/dev/davinci3"]),
        inspected("agent", [], privileged=True)))
    held = npu_holders.chip_holders(listed, ["/dev/davinci0", "/dev/davinci1"], "ascend-vllm-fleet")
    assert [(c["name"], c["held"]) for c in held] == [("other-fleet", ["/dev/davinci0", "/dev/davinci1"])]
    assert [c["name"] for c in npu_holders.chip_holders(listed, ["/dev/davinci0"], "old")] == ["vllm-ascend"]


@pytest.mark.parametrize("labels,ours", [
    (OURS, True), ({"ascend-vllm-fleet.instance": ""}, False), ({"ascend-vllm-fleet.host": "npu-a"}, False),
    ({"old.instance": "vllm-ascend"}, False), (None, False),
])
def test_ours_is_the_instance_label_of_the_prefix(labels, ours):
    assert npu_holders.is_ours({"labels": labels}, "ascend-vllm-fleet") is ours


def test_foreign_holders_name_each_container_and_the_planned_chips_it_maps():
    runner = docker_answering(inspected("vllm-ascend", ["/dev/davinci0"], labels=OURS),
                              inspected("llm-test", ["/dev/davinci1", "/dev/davinci2"]))
    assert npu_holders.foreign_holders("docker", ["/dev/davinci0", "/dev/davinci1"], "ascend-vllm-fleet", runner) == [
        "container llm-test maps /dev/davinci1"]
