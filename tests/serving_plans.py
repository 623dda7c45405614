"""Hand-made npu_facts results (host), the serving plans roles/vllm_server's filter makes of them (plan) and the
plan files vllm_plan records of those (recorded), for the tests of that role and of the gateway, which serves what
the plans name; vllm_server is that filter plugin."""
from ansible_collections.ascend.fleet.plugins.filter import vllm_server
from ansible_collections.ascend.fleet.plugins.module_utils import serving_plan

MANAGERS = ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
# What npu-smi reports of each chip of an Atlas 300I Duo card (MB): the 96 GB card's, as the real samples show
# (tests/fixtures/npu-smi), and the 48 GB card's as the twin models it (tests/twin/npu_smi.py).
DUO_96GB, DUO_48GB = (44278, 43693), (21525, 20940)
# Qwen3-VL-8B-Instruct as model_files reads it: the index's total and the text model's attention.
QWEN3_VL_8B = {"weights_bytes": 17534340096, "layers": 36, "kv_heads": 8, "head_dim": 128}


def host(npu_ids=(1, 2, 4, 5), chips_per_card=2, unhealthy=(), missing_managers=(), memory_mb=DUO_96GB):
    """Facts as npu_facts returns them, for cards numbered by npu_ids."""
    chips = []
    for npu_id in npu_ids:
        for chip in range(chips_per_card):
            logic = len(chips)
            chips.append({"npu_id": npu_id, "chip_id": chip, "logic_id": logic, "device": "/dev/davinci%d" % logic,
                          "memory_total_mb": memory_mb[chip % len(memory_mb)] if memory_mb else None})
    return {"chips": chips, "unhealthy_npu_ids": list(unhealthy), "missing_manager_devices": list(missing_managers),
            "manager_devices": [path for path in MANAGERS if path not in missing_managers]}


PLAN_SETTINGS = {"host": "npu-node-01", "layout": "single", "container_name": "vllm-ascend", "port": "8000",
                 "tensor_parallel_size": "2", "image": "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p",
                 "served_name": "Qwen3-VL-8B-Instruct", "cpu_binding": "cpuset", "env": {}, "env_unsupported": {},
                 "model": QWEN3_VL_8B, "max_model_len": "8192", "gpu_memory_utilization": "0.75",
                 "fit_reserve_gib": "3", "fit_margin": "0.1", "fit_check": True}


def plan(ascend, layout="single", name="vllm-ascend", port=8000, tensor_parallel_size=2, cpu_binding="cpuset",
         **fit_settings):
    return vllm_server.vllm_server_plan(ascend, dict(
        PLAN_SETTINGS, layout=layout, container_name=name, port=str(port),
        tensor_parallel_size=str(tensor_parallel_size), cpu_binding=cpu_binding, **fit_settings))


def recorded(ascend, host_name, layout="single", **plan_args):
    """The plan file vllm_plan writes on host_name for these facts."""
    return serving_plan.complete(dict(plan(ascend, layout, **plan_args), host=host_name),
                                                     "/etc/vllm-ascend")
