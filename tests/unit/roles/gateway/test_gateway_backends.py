"""The gateway role's filters (roles/gateway/filter_plugins): its servers from the serving plans, and the errors for
plans it cannot serve. The config it renders and a real HAProxy run from it: tests/local/test_gateway_haproxy.py."""
import base64
import json
import sys

import pytest
from ansible.errors import AnsibleFilterError
from serving_plans import host, plan

from conftest import REPO

sys.path.insert(0, str(REPO / "roles/gateway/filter_plugins"))
import gateway  # noqa: E402

PLAN_FILE = "/etc/vllm-ascend/plan.json"


def slurped(host_name, recorded):
    """A slurp result of a plan file, as the role's loop registers it."""
    return {"item": host_name, "content": base64.b64encode(json.dumps(recorded).encode()).decode()}


def plan_of(host_name, layout="single", **changes):
    recorded = dict(plan(host(), layout), host=host_name)
    recorded.update(changes)
    return recorded


def test_a_server_is_named_by_its_host_and_instance():
    assert gateway.gateway_server_name("npu-node-01", "vllm-ascend-npu4") == "npu-node-01:vllm-ascend-npu4"
    assert gateway.gateway_server_name("192.0.2.11", "vllm-ascend") == "192.0.2.11:vllm-ascend"


@pytest.mark.parametrize("host_name,instance,expected", [
    ("npu node", "vllm-ascend", "serving host \"npu node\""),
    ("npu/1", "vllm-ascend", "rename the host"),
    ("npu-node-01", "a:b", "instance \"a:b\" of npu-node-01"),
    ("npu-node-01", "", "instance \"\""),
    ("npu-node-01", None, "instance null"),
])
def test_names_haproxy_cannot_hold_are_refused(host_name, instance, expected):
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_server_name(host_name, instance)
    assert expected in str(refused.value)


def test_every_instance_of_every_plan_is_a_server_at_its_hosts_address():
    plans = gateway.gateway_read_plans([slurped("npu-node-01", plan_of("npu-node-01", "per_card")),
                                        slurped("npu-node-02", plan_of("npu-node-02"))], PLAN_FILE)
    servers = gateway.gateway_backends(plans["plans"], {"npu-node-01": "192.0.2.11", "npu-node-02": ""}, PLAN_FILE)
    assert [(s["name"], s["address"], s["port"]) for s in servers] == [
        ("npu-node-01:vllm-ascend-npu1", "192.0.2.11", 8000), ("npu-node-01:vllm-ascend-npu2", "192.0.2.11", 8001),
        ("npu-node-01:vllm-ascend-npu4", "192.0.2.11", 8002), ("npu-node-01:vllm-ascend-npu5", "192.0.2.11", 8003),
        # No ansible_host: the inventory name is the address.
        ("npu-node-02:vllm-ascend", "npu-node-02", 8000)]
    assert servers[0]["host"] == "npu-node-01" and servers[0]["instance"] == "vllm-ascend-npu1"
    assert plans["not_deployed"] == []


def test_a_host_without_a_plan_file_is_not_deployed_yet_and_serves_nothing():
    plans = gateway.gateway_read_plans([
        slurped("npu-node-01", plan_of("npu-node-01")),
        {"item": "npu-node-02", "failed": True, "msg": "File not found: %s" % PLAN_FILE}], PLAN_FILE)
    assert plans["not_deployed"] == ["npu-node-02"]
    assert [entry["host"] for entry in plans["plans"]] == ["npu-node-01"]
    assert gateway.gateway_backends([], {}, PLAN_FILE) == []


@pytest.mark.parametrize("result,expected", [
    ({"item": "npu-node-02", "failed": True, "msg": "file is not readable: %s" % PLAN_FILE},
     ["serving plan of npu-node-02: could not read it (file is not readable: %s)" % PLAN_FILE, "Fix:"]),
    ({"item": "npu-node-02", "content": base64.b64encode(b"{not json").decode()},
     ["serving plan of npu-node-02", "is not JSON", "--limit npu-node-02"]),
    ({"item": "npu-node-02", "content": "***"}, ["serving plan of npu-node-02", "is not JSON"]),
])
def test_a_plan_file_that_cannot_be_read_fails_naming_the_host(result, expected):
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_read_plans([slurped("npu-node-01", plan_of("npu-node-01")), result], PLAN_FILE)
    for piece in expected:
        assert piece in str(refused.value)


@pytest.mark.parametrize("recorded,expected", [
    (plan_of("npu-node-02", format=2), "format 2, expected 1"),
    ([1, 2], "format \"list\", expected 1"),
    (plan_of("npu-node-01"), "it is the plan of \"npu-node-01\", not of npu-node-02"),
    (plan_of("npu-node-02", instances=[]), "no instances"),
    (plan_of("npu-node-02", instances=[{"name": "vllm-ascend", "port": "8000"}]), "has port \"8000\""),
    (plan_of("npu-node-02", instances=[{"name": "vllm-ascend", "port": 70000}]), "has port 70000"),
    (plan_of("npu-node-02", instances=[{"name": "vllm-ascend", "port": True}]), "has port true"),
    (plan_of("npu-node-02", instances=[{"name": "vllm:ascend", "port": 8000}]), "instance \"vllm:ascend\""),
])
def test_a_plan_vllm_server_did_not_write_for_the_host_is_refused(recorded, expected):
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_backends([{"host": "npu-node-02", "plan": recorded}], {}, PLAN_FILE)
    assert expected in str(refused.value)
    assert "npu-node-02" in str(refused.value)


def test_plans_serving_different_models_are_refused():
    plans = [{"host": "npu-node-01", "plan": plan_of("npu-node-01")},
             {"host": "npu-node-02", "plan": plan_of("npu-node-02", served_name="Qwen2.5-VL-7B-Instruct")}]
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_backends(plans, {}, PLAN_FILE)
    assert "\"Qwen2.5-VL-7B-Instruct\" on npu-node-02" in str(refused.value)
    assert "\"Qwen3-VL-8B-Instruct\" on npu-node-01" in str(refused.value)


def test_two_instances_at_one_address_and_port_are_refused():
    plans = [{"host": "npu-node-01", "plan": plan_of("npu-node-01")},
             {"host": "npu-node-02", "plan": plan_of("npu-node-02")}]
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_backends(plans, {"npu-node-01": "192.0.2.11", "npu-node-02": "192.0.2.11"}, PLAN_FILE)
    assert str(refused.value).startswith("npu-node-01:vllm-ascend and npu-node-02:vllm-ascend are both at "
                                         "192.0.2.11:8000")
