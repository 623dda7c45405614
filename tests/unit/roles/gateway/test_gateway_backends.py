"""The gateway role's filters (plugins/filter/gateway.py): its servers from the serving plans, and the errors for
plans it cannot serve together. Each plan is read and checked on its host by vllm_plan_info
(tests/unit/module_utils/test_serving_plan.py). The config it renders and a real HAProxy run from it:
tests/local/test_gateway_haproxy.py."""

import pytest
from ansible.errors import AnsibleFilterError
from serving_plans import host, plan

from ansible_collections.ascend.fleet.plugins.filter import gateway


def read(host_name, recorded):
    """A vllm_plan_info result, as the role's loop registers it (plan None: no plan file)."""
    return {"item": host_name, "plan": recorded, "changed": False}


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
    # re.match's `$` lets a name end in a line break, which would add a line to haproxy.cfg.
    ("npu-node-01", "vllm-ascend\n", "instance \"vllm-ascend\\n\" of npu-node-01: expected a container name"),
    ("npu-node-01\n", "vllm-ascend", "serving host \"npu-node-01\\n\""),
])
def test_names_haproxy_cannot_hold_are_refused(host_name, instance, expected):
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_server_name(host_name, instance)
    assert expected in str(refused.value) and "Fix:" in str(refused.value)


def test_a_plan_whose_instance_name_ends_in_a_line_break_adds_no_line_to_the_config():
    tampered = plan_of("npu-node-01")
    tampered["instances"] = [dict(tampered["instances"][0], name="vllm-ascend\n")]
    with pytest.raises(AnsibleFilterError, match="instance .* of npu-node-01: expected a container name"):
        gateway.gateway_backends([{"host": "npu-node-01", "plan": tampered}], {})


def test_every_instance_of_every_plan_is_a_server_at_its_hosts_address():
    plans = gateway.gateway_read_plans([read("npu-node-01", plan_of("npu-node-01", "per_card")),
                                        read("npu-node-02", plan_of("npu-node-02"))])
    servers = gateway.gateway_backends(plans["plans"], {"npu-node-01": "192.0.2.11", "npu-node-02": ""})
    assert [(s["name"], s["address"], s["port"]) for s in servers] == [
        ("npu-node-01:vllm-ascend-npu1", "192.0.2.11", 8000), ("npu-node-01:vllm-ascend-npu2", "192.0.2.11", 8001),
        ("npu-node-01:vllm-ascend-npu4", "192.0.2.11", 8002), ("npu-node-01:vllm-ascend-npu5", "192.0.2.11", 8003),
        # No ansible_host: the inventory name is the address.
        ("npu-node-02:vllm-ascend", "npu-node-02", 8000)]
    assert servers[0]["host"] == "npu-node-01" and servers[0]["instance"] == "vllm-ascend-npu1"
    assert plans["not_deployed"] == []


def test_a_host_without_a_plan_file_is_not_deployed_yet_and_serves_nothing():
    plans = gateway.gateway_read_plans([read("npu-node-01", plan_of("npu-node-01")), read("npu-node-02", None)])
    assert plans["not_deployed"] == ["npu-node-02"]
    assert [entry["host"] for entry in plans["plans"]] == ["npu-node-01"]
    assert gateway.gateway_backends([], {}) == []


def test_a_host_refused_for_its_python_is_skipped_named_and_serves_nothing():
    skipped = {"item": "npu-node-03", "skipped": True, "skip_reason": "Conditional result was False", "changed": False}
    plans = gateway.gateway_read_plans([read("npu-node-01", plan_of("npu-node-01")), skipped])
    assert plans["refused"] == ["npu-node-03"] and plans["not_deployed"] == []
    assert [entry["host"] for entry in plans["plans"]] == ["npu-node-01"]


def test_an_instance_name_haproxy_cannot_hold_is_refused():
    plans = [{"host": "npu-node-02", "plan": plan_of("npu-node-02", instances=[{"name": "vllm:ascend", "port": 8000}])}]
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_backends(plans, {})
    assert "instance \"vllm:ascend\"" in str(refused.value) and "npu-node-02" in str(refused.value)


def test_plans_serving_different_models_are_refused():
    plans = [{"host": "npu-node-01", "plan": plan_of("npu-node-01")},
             {"host": "npu-node-02", "plan": plan_of("npu-node-02", served_name="Qwen2.5-VL-7B-Instruct")}]
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_backends(plans, {})
    assert "\"Qwen2.5-VL-7B-Instruct\" on npu-node-02" in str(refused.value)
    assert "\"Qwen3-VL-8B-Instruct\" on npu-node-01" in str(refused.value)


def test_two_instances_at_one_address_and_port_are_refused():
    plans = [{"host": "npu-node-01", "plan": plan_of("npu-node-01")},
             {"host": "npu-node-02", "plan": plan_of("npu-node-02")}]
    with pytest.raises(AnsibleFilterError) as refused:
        gateway.gateway_backends(plans, {"npu-node-01": "192.0.2.11", "npu-node-02": "192.0.2.11"})
    assert str(refused.value).startswith("npu-node-01:vllm-ascend and npu-node-02:vllm-ascend are both at "
                                         "192.0.2.11:8000")


def test_a_host_is_reached_at_its_ansible_host_else_at_its_inventory_name():
    hostvars = {"gw-1": {"ansible_host": "10.0.8.20"}, "gw-2": {}, "gw-3": {"ansible_host": ""}}
    assert gateway.inventory_addresses(["gw-1", "gw-2", "gw-3"], hostvars) == {
        "gw-1": "10.0.8.20", "gw-2": "gw-2", "gw-3": "gw-3"}
