"""module_utils/npu_holders.py: the one rule for a chip's node, the one reading of a process's container, and the
one answer to who holds a chip and whether that holder is this collection's (chip_holders)."""
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


def foreign(held):
    """(name, held) of the containers chip_holders finds not ours."""
    return [(c["name"], c["held"]) for c in held["containers"] if not c["ours"]]


def test_chip_holders_are_the_containers_of_other_owners_on_the_chips():
    listed, _available = npu_holders.containers("docker", "/dev", docker_answering(
        inspected("vllm-ascend", ["/dev/davinci0"], labels=OURS),
        inspected("other-fleet", ["/dev/davinci1", "/dev/davinci0"], labels={"old.instance": "vllm-ascend"}),
        inspected("exporter", ["/dev/davinci_manager", "/dev/davinci3"]),
        inspected("agent", [], privileged=True)))
    held = npu_holders.chip_holders({"containers": listed}, "ascend-vllm-fleet", ["/dev/davinci0", "/dev/davinci1"])
    assert foreign(held) == [("other-fleet", ["/dev/davinci0", "/dev/davinci1"])]
    held = npu_holders.chip_holders({"containers": listed}, "old", ["/dev/davinci0"])
    assert [name for name, _held in foreign(held)] == ["vllm-ascend"]


def one_container(labels, devices=("/dev/davinci0",)):
    """chip_holders' answer on one container with these labels mapping devices, with a process inside it."""
    return npu_holders.chip_holders({"containers": [{"id": "c" * 64, "name": "one", "devices": list(devices),
                                                     "labels": labels}],
                                     "processes": [{"pid": 7, "name": "vllm", "container_id": "c" * 64}]},
                                    "ascend-vllm-fleet")


# Moved from a test of is_ours, which chip_holders took in: the same label sets, the same verdicts.
@pytest.mark.parametrize("labels,ours", [
    (OURS, True), ({"ascend-vllm-fleet.instance": ""}, False), ({"ascend-vllm-fleet.host": "npu-a"}, False),
    ({"old.instance": "vllm-ascend"}, False), (None, False),
])
def test_ours_is_the_instance_label_of_the_prefix(labels, ours):
    held = one_container(labels)
    assert held["containers"][0]["ours"] is ours
    assert held["processes"][0]["ours"] is ours, "a process is ours exactly when its container is"


def test_our_container_is_ours_with_the_instance_it_serves():
    held = one_container(OURS, ["/dev/davinci0", "/dev/davinci_manager"])
    (container,) = held["containers"]
    assert (container["ours"], container["instance"], container["held"]) == (
        True, "vllm-ascend", ["/dev/davinci0", "/dev/davinci_manager"])
    (process,) = held["processes"]
    assert (process["ours"], process["instance"]) == (True, "vllm-ascend")


def test_another_owners_container_on_the_chip_is_not_ours():
    held = npu_holders.chip_holders({"containers": [
        {"id": "a" * 64, "name": "vllm-ascend", "devices": ["/dev/davinci1"], "labels": OURS},
        {"id": "b" * 64, "name": "llm-test", "devices": ["/dev/davinci0"], "labels": {"owner": "research"}}]},
        "ascend-vllm-fleet", ["/dev/davinci0"])
    assert [(c["name"], c["held"], c["instance"], c["ours"]) for c in held["containers"]] == [
        ("llm-test", ["/dev/davinci0"], None, False)]


def test_a_process_outside_our_containers_is_not_ours():
    # On the host itself, or in a container of another owner: neither stops with ours.
    held = npu_holders.chip_holders({
        "containers": [{"id": "a" * 64, "name": "vllm-ascend", "devices": ["/dev/davinci0"], "labels": OURS},
                       {"id": "b" * 64, "name": "llm-test", "devices": ["/dev/davinci1"], "labels": {}}],
        "processes": [{"pid": 41877, "name": "python3.9", "devices": ["/dev/davinci1"], "container_id": None},
                      {"pid": 52, "name": "train", "devices": ["/dev/davinci1"], "container_id": "b" * 64},
                      {"pid": 9, "name": "vllm", "devices": ["/dev/davinci0"], "container_id": "a" * 64}]},
        "ascend-vllm-fleet")
    assert [(p["pid"], p["instance"], p["ours"]) for p in held["processes"]] == [
        (41877, None, False), (52, None, False), (9, "vllm-ascend", True)]


def test_no_holder_is_no_answer():
    assert npu_holders.chip_holders({}, "ascend-vllm-fleet") == {"containers": [], "processes": []}
    assert npu_holders.chip_holders({"containers": [], "processes": []}, "ascend-vllm-fleet", ["/dev/davinci0"]) == {
        "containers": [], "processes": []}
    # Containers that map none of the devices asked about hold none of them: a privileged one sees all, maps none.
    listed = [{"id": "e" * 64, "name": "exporter", "devices": ["/dev/davinci_manager"], "labels": {}},
              {"id": "f" * 64, "name": "agent", "devices": ["all"], "labels": {}}]
    assert npu_holders.chip_holders({"containers": listed}, "ascend-vllm-fleet", ["/dev/davinci0"])["containers"] == []
    # Asked about every node, each holds what it maps.
    assert [c["held"] for c in npu_holders.chip_holders({"containers": listed}, "ascend-vllm-fleet")["containers"]] == [
        ["/dev/davinci_manager"], ["all"]]


def test_a_prefix_the_operator_changed_decides_what_is_ours():
    site_b = {"site-b.instance": "vllm-ascend", "site-b.host": "npu-a"}
    found = {"containers": [{"id": "a" * 64, "name": "vllm-ascend", "devices": ["/dev/davinci0"], "labels": site_b},
                            {"id": "b" * 64, "name": "old", "devices": ["/dev/davinci1"], "labels": OURS}],
             "processes": [{"pid": 9, "name": "vllm", "container_id": "a" * 64},
                           {"pid": 10, "name": "vllm", "container_id": "b" * 64}]}
    held = npu_holders.chip_holders(found, "site-b")
    assert [(c["name"], c["ours"]) for c in held["containers"]] == [("vllm-ascend", True), ("old", False)]
    assert [(p["pid"], p["ours"]) for p in held["processes"]] == [(9, True), (10, False)]
    # Under the default prefix the same host reads the other way round.
    held = npu_holders.chip_holders(found, "ascend-vllm-fleet")
    assert [(c["name"], c["ours"]) for c in held["containers"]] == [("vllm-ascend", False), ("old", True)]


def test_foreign_holders_name_each_container_and_the_planned_chips_it_maps():
    runner = docker_answering(inspected("vllm-ascend", ["/dev/davinci0"], labels=OURS),
                              inspected("llm-test", ["/dev/davinci1", "/dev/davinci2"]))
    assert npu_holders.foreign_holders("docker", ["/dev/davinci0", "/dev/davinci1"], "ascend-vllm-fleet", runner) == [
        "container llm-test maps /dev/davinci1"]
