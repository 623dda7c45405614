"""The serving plan: which chips each instance maps, on which port, and the errors for impossible plans."""
import sys

import pytest
from ansible.errors import AnsibleFilterError

from conftest import REPO

sys.path.insert(0, str(REPO / "roles/vllm_server/filter_plugins"))
import vllm_server  # noqa: E402


def host(npu_ids=(1, 2, 4, 5), chips_per_card=2):
    chips = []
    for npu_id in npu_ids:
        for chip in range(chips_per_card):
            logic = len(chips)
            chips.append({"npu_id": npu_id, "chip_id": chip, "logic_id": logic, "device": "/dev/davinci%d" % logic})
    return {"chips": chips}


def test_single_maps_every_chip_on_the_base_port():
    (instance,) = vllm_server.vllm_server_plan(host(), "single", "vllm-ascend", 8000, 2)
    assert instance == {"name": "vllm-ascend", "port": 8000, "npu_ids": [1, 2, 4, 5],
                        "devices": ["/dev/davinci%d" % n for n in range(8)]}


def test_per_card_gives_each_card_its_two_chips_and_the_next_port():
    plan = vllm_server.vllm_server_plan(host(), "per_card", "vllm-ascend", 8000, 2)
    assert [(i["name"], i["port"], i["devices"]) for i in plan] == [
        ("vllm-ascend-npu1", 8000, ["/dev/davinci0", "/dev/davinci1"]),
        ("vllm-ascend-npu2", 8001, ["/dev/davinci2", "/dev/davinci3"]),
        ("vllm-ascend-npu4", 8002, ["/dev/davinci4", "/dev/davinci5"]),
        ("vllm-ascend-npu5", 8003, ["/dev/davinci6", "/dev/davinci7"]),
    ]


def test_excluded_cards_are_left_out():
    plan = vllm_server.vllm_server_plan(host(), "per_card", "v", 9000, 2, excluded_npu_ids=[2])
    assert [i["name"] for i in plan] == ["v-npu1", "v-npu4", "v-npu5"] and plan[1]["port"] == 9001
    (single,) = vllm_server.vllm_server_plan(host(), "single", "v", 9000, 2, excluded_npu_ids=[2])
    assert "/dev/davinci2" not in single["devices"] and len(single["devices"]) == 6


def test_tensor_parallel_larger_than_a_card_is_refused_with_the_fix():
    with pytest.raises(AnsibleFilterError, match="tensor_parallel_size is 2 but instance v-npu8 has 1 chip"):
        vllm_server.vllm_server_plan(host(npu_ids=(8,), chips_per_card=1), "per_card", "v", 8000, 2)


def test_no_usable_chip_and_unknown_layout():
    with pytest.raises(AnsibleFilterError, match="no usable NPU chip"):
        vllm_server.vllm_server_plan(host(npu_ids=(1,)), "single", "v", 8000, 2, excluded_npu_ids=[1])
    with pytest.raises(AnsibleFilterError, match="expected single or per_card"):
        vllm_server.vllm_server_plan(host(), "per_chip", "v", 8000, 1)
