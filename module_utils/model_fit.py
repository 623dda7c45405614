# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether one vLLM instance fits its 310P chips: an estimate of what each chip must hold, made before any
container changes, against what vLLM may use of the chip.

Per chip (each tensor-parallel rank holds its share):
  weights   the weights' bytes / tensor parallelism (the index's total, model_files' footprint);
  mask      max_model_len x max_model_len float16: 310P attention builds that mask on every rank (vLLM-Ascend's
            own warning; 128 MiB at 8192, 8 GiB at 65536);
  kv_cache  one request of max_model_len tokens: 2 (K and V) x layers x KV heads x head size x 2 bytes (float16)
            per token, the heads split by tensor parallelism; vLLM 0.18 refuses to start without room for it.
            Counted twice: vLLM-Ascend's 310P worker gives the KV cache half of what the weights and the profile
            run leave, keeping the other half for its operators' workspace (vllm_ascend/_310p/worker_310p.py,
            v0.18.0rc1: "Divide the available memory by 2");
  reserve   a stated allowance for what vLLM's profile run measures besides (activations of a full batch, the
            vision encoder on its largest image) and the runtime's own workspace.
Against: the chip's memory as npu-smi reports it (MB, which are MiB) x gpu_memory_utilization, the share of the
chip vLLM allows itself; and that share must be free when the instance starts (vLLM-Ascend's worker refuses to
start otherwise): the chip less what the card itself uses, which is what npu-smi counts as used beyond the
processes it lists on the chip.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

MIB = 1 << 20
GIB = 1 << 30
FLOAT16_BYTES = 2
# The 310P worker's KV cache gets half of what is left (see above): room for one request needs twice its size.
KV_SHARE_310P = 2


def kv_bytes_per_token(model):
    """KV-cache bytes one token takes on one chip without tensor parallelism."""
    return 2 * model["layers"] * model["kv_heads"] * model["head_dim"] * FLOAT16_BYTES


def need(model, max_model_len, tensor_parallel_size, reserve_gib):
    """Bytes each chip of an instance must hold, by term."""
    return {"weights": model["weights_bytes"] / tensor_parallel_size,
            "mask": max_model_len ** 2 * FLOAT16_BYTES,
            "kv_cache": KV_SHARE_310P * kv_bytes_per_token(model) * max_model_len / tensor_parallel_size,
            "reserve": reserve_gib * GIB}


def longest_fitting_length(model, budget, tensor_parallel_size, reserve_gib):
    """The longest max_model_len whose mask and one request's KV cache fit what the weights and the reserve leave
    of budget (a multiple of 1024), or 0: 2 L^2 + k L <= room."""
    room = budget - model["weights_bytes"] / tensor_parallel_size - reserve_gib * GIB
    if room <= 0:
        return 0
    per_token = KV_SHARE_310P * kv_bytes_per_token(model) / tensor_parallel_size
    length = (-per_token + math.sqrt(per_token ** 2 + 4 * FLOAT16_BYTES * room)) / (2 * FLOAT16_BYTES)
    return int(length) // 1024 * 1024


def card_use_mb(chip, processes):
    """MB of the chip the card itself holds: npu-smi's used memory less that of the processes it lists on the chip
    (an instance being replaced frees its share), or None when npu-smi says nothing of it."""
    if chip.get("memory_used_mb") is None:
        return None
    held = sum(process.get("memory_mb") or 0 for process in processes
               if (process.get("npu_id"), process.get("chip_id")) == (chip["npu_id"], chip["chip_id"]))
    return max(chip["memory_used_mb"] - held, 0)


def fit(model, chips, settings, processes=()):
    """The estimate of one instance on its chips (the one with the least memory bounds it): every term in GiB, the
    chip's budget, whether it fits and, when not, what would. None when a chip's memory or the model is unknown.

    settings: max_model_len, gpu_memory_utilization, reserve_gib, tensor_parallel_size. processes: npu-smi's
    process table (the NPU facts' processes).
    """
    memory = [chip.get("memory_total_mb") for chip in chips]
    if not model or not memory or not all(memory):
        return None
    tensor_parallel_size = int(settings["tensor_parallel_size"])
    max_model_len, utilization = int(settings["max_model_len"]), float(settings["gpu_memory_utilization"])
    reserve_gib = float(settings["reserve_gib"])
    smallest = min(chips, key=lambda chip: chip["memory_total_mb"])
    terms = need(model, max_model_len, tensor_parallel_size, reserve_gib)
    total, budget = sum(terms.values()), smallest["memory_total_mb"] * MIB * utilization
    # The share asked for must be free at start, on every chip: the chip with the smallest free share bounds it.
    uses = [(card_use_mb(chip, processes), chip) for chip in chips]
    free = [(chip["memory_total_mb"] - used, chip) for used, chip in uses if used is not None]
    least_free_mb, least_free_chip = min(free, key=lambda pair: pair[0] / pair[1]["memory_total_mb"]) \
        if free else (None, None)
    starts = least_free_mb is None or least_free_mb >= least_free_chip["memory_total_mb"] * utilization
    return {
        "chip": "NPU %s chip %s" % (smallest["npu_id"], smallest["chip_id"]),
        "memory_mb": smallest["memory_total_mb"],
        "gpu_memory_utilization": utilization,
        "tensor_parallel_size": tensor_parallel_size,
        "max_model_len": max_model_len,
        "budget_gib": round(budget / GIB, 2),
        "need_gib": round(total / GIB, 2),
        "terms_gib": {name: round(value / GIB, 3) for name, value in sorted(terms.items())},
        "fits": total <= budget and starts,
        # vLLM-Ascend refuses to start when the chip has less free than the share asked for.
        "free_mb": least_free_mb,
        "utilization_free": round(least_free_mb / least_free_chip["memory_total_mb"], 3) if free else None,
        # What would fit on these chips with the rest unchanged.
        "utilization_needed": round(total / (smallest["memory_total_mb"] * MIB), 3),
        "longest_max_model_len": longest_fitting_length(model, budget, tensor_parallel_size, reserve_gib),
    }


def within_margin(estimate, margin):
    """The estimate fits with margin to spare (a fraction of the budget): the reserve is an estimate too."""
    return estimate is not None and estimate["need_gib"] <= estimate["budget_gib"] * (1 - float(margin))


def describe(estimate):
    """The estimate as a sentence: every number it rests on."""
    terms = estimate["terms_gib"]
    said = ("per chip it needs %.2f GiB: weights %.2f GiB (tensor parallelism %d), the 310P attention mask %.3f GiB "
            "(max_model_len %d), the KV cache of one %d-token request twice, %.2f GiB (the 310P worker gives the KV "
            "cache half of what is left), a reserve of %.2f GiB for activations, the vision encoder and the "
            "runtime; %s has %d MB x gpu_memory_utilization %s = %.2f GiB"
            % (estimate["need_gib"], terms["weights"], estimate["tensor_parallel_size"], terms["mask"],
               estimate["max_model_len"], estimate["max_model_len"], terms["kv_cache"], terms["reserve"],
               estimate["chip"], estimate["memory_mb"], estimate["gpu_memory_utilization"], estimate["budget_gib"]))
    if estimate["utilization_free"] is not None and estimate["utilization_free"] < estimate["gpu_memory_utilization"]:
        said += (", but only %d MB of a chip are free at start (the card's own use), a share of %s: vLLM-Ascend "
                 "refuses to start asking for more" % (estimate["free_mb"], estimate["utilization_free"]))
    return said
