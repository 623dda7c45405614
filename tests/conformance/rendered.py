"""The `vllm serve` argument lists the vllm_server role renders, from its own filter and its own defaults.

Every choice that changes the flags is covered: the seed's single layout and per_card (TP 2 either way), the
pixel cap on and off, vLLM-Ascend's CPU binding turned off, another container port, graph mode, and extra
arguments an operator may add through vllm_server_extra_args.
"""
import json
import pathlib
import re

import yaml

from ansible_collections.ascend.fleet.plugins.filter import vllm_server
from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases

REPO = pathlib.Path(__file__).resolve().parents[2]

DEFAULTS = REPO / "roles" / "vllm_server" / "defaults" / "main.yml"
EXAMPLE_MODEL_DIR = "/data/models/Qwen3-VL-8B-Instruct"
# The fleet role's default image (fleet_image_version v0.18.0rc1).
DEFAULT_IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
# Flags an operator tunes a 310P server with (batch size, token budget, one image per prompt, request logs).
EXTRA_ARGS = [["--max-num-seqs", "64"], ["--max-num-batched-tokens", "4096"],
              ["--limit-mm-per-prompt", json.dumps({"image": 1})], ["--enable-log-requests"], ["--seed", "0"]]


# A default the image's release decides: "{{ fleet_release.server.<name> }}".
RELEASE_DEFAULT = re.compile(r"^\{\{ fleet_release\.server\.(\w+) \}\}$")


def role_defaults(release=None):
    """The role's defaults by name without the prefix; those of the image's release taken from `release` (the
    release table's entry as vllm_releases.release_for gives it; default: the fleet's default image's)."""
    release = release or vllm_releases.release_for(DEFAULT_IMAGE, vllm_releases.load())
    values = yaml.safe_load(DEFAULTS.read_text(encoding="utf-8"))
    found = {}
    for name, value in values.items():
        if name.startswith("vllm_server_"):
            from_release = RELEASE_DEFAULT.match(value) if isinstance(value, str) else None
            found[name[len("vllm_server_"):]] = release["server"][from_release.group(1)] if from_release else value
    return found


def serve_args(layout="single", cpu_binding_off=False, release=None, **overrides):
    """One rendered `vllm serve` command as argv after `vllm` (["serve", model, flags...])."""
    defaults = role_defaults(release)
    settings = {name: defaults[name] for name in ("gpu_memory_utilization", "max_model_len", "tensor_parallel_size",
                                                  "enforce_eager", "compilation_config", "additional_config",
                                                  "dtype", "container_port", "max_pixels", "min_pixels",
                                                  "extra_args")}
    settings["model_container_dir"] = EXAMPLE_MODEL_DIR
    settings.update(overrides)
    plan = {"served_name": defaults["served_name"], "layout": layout}
    instance = {"tensor_parallel_size": settings.pop("tensor_parallel_size")}
    lines = vllm_server.vllm_serve_lines(plan, instance, settings, cpu_binding_off)
    argv = [arg for line in lines for arg in line]
    assert argv[0] == "vllm", argv
    return argv[1:]


def every_rendering(release=None):
    """{what it is: argv} for each choice the role offers that changes the flags, for the image of a release (the
    release table's entry; default: the fleet's default image's)."""
    found = {"seed single layout (defaults)": serve_args(release=release),
             "per_card": serve_args(layout="per_card", release=release),
             "per_card, chips' CPU affinity unknown": serve_args(layout="per_card", cpu_binding_off=True,
                                                                release=release),
             "per_chip (tensor parallelism 1)": serve_args(layout="per_chip", tensor_parallel_size=1, release=release),
             "no pixel cap": serve_args(max_pixels=0, release=release),
             "container port 8001": serve_args(container_port=8001, release=release),
             "graph mode (enforce_eager false)": serve_args(enforce_eager=False, release=release)}
    for extra in EXTRA_ARGS:
        found["extra args %s" % " ".join(extra)] = serve_args(extra_args=extra, release=release)
    return found


def pixel_cap_flags(max_pixels):
    """The flags the role renders for a pixel cap (what the guarded servers are started with)."""
    argv = serve_args(max_pixels=max_pixels)
    index = argv.index("--mm-processor-kwargs")
    return argv[index:index + 2]
