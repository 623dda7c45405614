"""Placement from the chips' memory: the fit estimate of each instance, the per_chip and auto layouts, and the
refusal, before any container changes, of a setting that cannot fit, with every number and the fixes."""
import re

import pytest
from ansible.errors import AnsibleFilterError
from serving_plans import DUO_48GB, QWEN3_VL_8B, host, plan, vllm_server
from test_server_plan import RUN_SETTINGS

from ansible_collections.ascend.fleet.plugins.module_utils import model_fit

GIB = 1 << 30


def serve_flag(lines, flag):
    (value,) = [line[1] for line in lines if line[0] == flag]
    return value


def test_the_estimates_terms_for_qwen3_vl_8b_are_the_known_sizes():
    """16.33 GiB of weights; the 310P mask 128 MiB at 8192 and 8 GiB at 65536; 144 KiB of KV cache per token, of
    which the 310P worker needs room for twice a request's (it gives the KV cache half of what is left)."""
    assert model_fit.kv_bytes_per_token(QWEN3_VL_8B) == 144 * 1024
    assert model_fit.need(QWEN3_VL_8B, 8192, 1, 3) == {
        "weights": 17534340096, "mask": 128 << 20, "kv_cache": 2 * 1.125 * GIB, "reserve": 3 * GIB}
    halved = model_fit.need(QWEN3_VL_8B, 65536, 2, 0)
    assert (halved["weights"], halved["mask"], halved["kv_cache"]) == (17534340096 / 2, 8 * GIB, 2 * 4.5 * GIB)


@pytest.mark.parametrize("tensor_parallel_size,budget_gib", [(1, 32.0), (1, 20.0), (2, 15.77)])
def test_the_longest_length_said_to_fit_fits_and_the_next_step_does_not(tensor_parallel_size, budget_gib):
    budget = budget_gib * GIB
    longest = model_fit.longest_fitting_length(QWEN3_VL_8B, budget, tensor_parallel_size, 3)
    assert longest > 0 and longest % 1024 == 0
    assert sum(model_fit.need(QWEN3_VL_8B, longest, tensor_parallel_size, 3).values()) <= budget
    assert sum(model_fit.need(QWEN3_VL_8B, longest + 1024, tensor_parallel_size, 3).values()) > budget
    assert model_fit.longest_fitting_length(QWEN3_VL_8B, 10 * GIB, 1, 3) == 0  # the weights alone do not fit


def test_per_chip_runs_one_instance_on_each_chip_with_tensor_parallelism_one():
    recorded = plan(host(), "per_chip")
    instances = recorded["instances"]
    assert [(i["name"], i["port"], i["devices"], i["tensor_parallel_size"]) for i in instances[:3]] == [
        ("vllm-ascend-npu1-chip0", 8000, ["/dev/davinci0"], 1), ("vllm-ascend-npu1-chip1", 8001, ["/dev/davinci1"], 1),
        ("vllm-ascend-npu2-chip0", 8002, ["/dev/davinci2"], 1)]
    assert len(instances) == 8 and instances[-1]["port"] == 8007 and all(i["fit"]["fits"] for i in instances)
    lines = vllm_server.vllm_server_docker_run(instances[0], recorded, RUN_SETTINGS)
    assert serve_flag(lines, "--tensor-parallel-size") == "1"
    devices = [line[1] for line in lines if line[0] == "--device" and "davinci" in line[1] and "_" not in line[1]]
    assert devices == ["/dev/davinci0:/dev/davinci0"]
    per_card = plan(host(), "per_card")
    assert serve_flag(vllm_server.vllm_server_docker_run(per_card["instances"][0], per_card, RUN_SETTINGS),
                      "--tensor-parallel-size") == "2"


def test_auto_plans_one_instance_per_chip_on_96_gb_cards_and_per_card_on_48_gb_ones_and_says_why():
    big = plan(host(), "auto")
    assert big["layout"] == "per_chip" and len(big["instances"]) == 8
    assert big["layout_reason"].startswith("auto: per_chip, as the model fits one chip with 10% to spare: per chip "
                                           "it needs 21.71 GiB")
    small = plan(host(npu_ids=(6, 224), memory_mb=DUO_48GB), "auto")
    assert small["layout"] == "per_card" and [i["name"] for i in small["instances"]] == [
        "vllm-ascend-npu6", "vllm-ascend-npu224"]
    assert "does not fit one chip" in small["layout_reason"] and "NPU 6 chip 1 has 20940 MB" in small["layout_reason"]
    assert all(i["fit"]["fits"] and i["tensor_parallel_size"] == 2 for i in small["instances"])


def test_auto_wants_the_margin_not_only_the_fit():
    """A model that fits one chip with less than the margin to spare is planned per card: the reserve is an estimate."""
    just = plan(host(), "auto", gpu_memory_utilization="0.53")  # 21.71 GiB needed of 22.6
    assert just["layout"] == "per_card"
    assert plan(host(), "per_chip", gpu_memory_utilization="0.53")["instances"][0]["fit"]["fits"]


def test_a_length_that_cannot_fit_a_48_gb_chip_is_refused_with_every_number_and_the_fixes():
    with pytest.raises(AnsibleFilterError) as refused:
        plan(host(npu_ids=(6, 224), memory_mb=DUO_48GB), "per_chip", max_model_len="65536")
    message = str(refused.value)
    assert message.startswith("instance vllm-ascend-npu6-chip0 on npu-node-01 does not fit its chips (layout "
                              "per_chip): per chip it needs 45.33 GiB: weights 16.33 GiB (tensor parallelism 1), the "
                              "310P attention mask 8.000 GiB (max_model_len 65536), the KV cache of one 65536-token "
                              "request twice, 18.00 GiB (the 310P worker gives the KV cache half of what is left), a "
                              "reserve of 3.00 GiB")
    assert "NPU 6 chip 0 has 21525 MB x gpu_memory_utilization 0.75 = 15.77 GiB" in message
    for fix in ("vllm_server_tensor_parallel_size", "vllm_server_layout per_card or single",
                "vllm_server_fit_check false"):
        assert fix in message, fix
    # Neither a shorter length nor a larger share of the chip would do (2.156 of it needed): not offered.
    assert "lower vllm_server_max_model_len" not in message and "raise vllm_server_gpu" not in message
    # Per card it does not fit either at that length; at the default length it does, with the longest length said.
    with pytest.raises(AnsibleFilterError, match=r"vllm-ascend-npu6 on npu-node-01 does not fit .*per chip it needs "
                                                 r"28\.17 GiB.*vllm_server_max_model_len \(\d+ fits\)"):
        plan(host(npu_ids=(6, 224), memory_mb=DUO_48GB), "per_card", max_model_len="65536")
    assert plan(host(npu_ids=(6, 224), memory_mb=DUO_48GB), "per_card")["instances"][0]["fit"]["fits"]


def test_the_refusals_suggestions_fit_when_taken():
    facts = host(npu_ids=(6,), memory_mb=DUO_48GB)
    with pytest.raises(AnsibleFilterError) as refused:
        plan(facts, "per_card", max_model_len="32768")
    longest = int(re.search(r"vllm_server_max_model_len \((\d+) fits\)", str(refused.value)).group(1))
    utilization = re.search(r"vllm_server_gpu_memory_utilization \(([\d.]+) would fit", str(refused.value)).group(1)
    assert plan(facts, "per_card", max_model_len=str(longest))["instances"][0]["fit"]["fits"]
    assert plan(facts, "per_card", max_model_len="32768", gpu_memory_utilization=str(float(utilization) + 0.001))[
        "instances"][0]["fit"]["fits"]


def test_without_the_check_the_estimate_is_recorded_and_nothing_refused():
    recorded = plan(host(npu_ids=(6,), memory_mb=DUO_48GB), "per_chip", fit_check=False)
    assert [i["fit"]["fits"] for i in recorded["instances"]] == [False, False]


def test_an_unknown_model_or_chip_memory_makes_no_estimate_and_auto_keeps_to_per_card():
    """In check mode before a first deploy the model is not on the host; an npu-smi without memory says nothing."""
    for facts, settings, why in ((host(), {"model": None}, "the model's footprint is not known"),
                                 (host(memory_mb=None), {}, "npu-smi reports no memory for a chip")):
        auto = plan(facts, "auto", **settings)
        assert auto["layout"] == "per_card" and why in auto["layout_reason"], auto["layout_reason"]
        assert [i["fit"] for i in plan(facts, "per_chip", **settings)["instances"]] == [None] * 8


def test_a_share_of_the_chip_that_is_not_free_at_start_is_refused_and_what_is_free_said():
    """vLLM-Ascend refuses to start asking for more than the chip has free; what the card itself holds is npu-smi's
    used memory less the processes it lists there (an instance being replaced frees its own)."""
    facts = host(npu_ids=(6,), memory_mb=DUO_48GB)
    for chip in facts["chips"]:
        chip["memory_used_mb"] = 1400
    with pytest.raises(AnsibleFilterError) as refused:
        plan(facts, "per_card", gpu_memory_utilization="0.95")
    message = str(refused.value)
    assert "but only 19540 MB of a chip are free at start (the card's own use), a share of 0.933" in message
    assert "lower vllm_server_gpu_memory_utilization to at most 0.933" in message
    facts["chips"][1]["memory_used_mb"] = 1400 + 15000
    facts["processes"] = [{"npu_id": 6, "chip_id": 1, "pid": 4242, "name": "python3", "memory_mb": 15000}]
    assert plan(facts, "per_card", gpu_memory_utilization="0.9")["instances"][0]["fit"]["fits"]
