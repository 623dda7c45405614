"""`vllm serve` run by vLLM's own command line in this process, with the fake engine core (fake_engine.py).

Runs inside real vLLM's virtualenv: ``python serve.py serve MODEL_FOLDER [vllm serve flags]``, the arguments
exactly as the `vllm` command takes them. Two things differ from the `vllm` command, both before vLLM reads its
arguments:

- vLLM from PyPI is built for CUDA and finds no platform on a machine without a GPU; its CPU platform is chosen
  on every machine instead (with or without a GPU, so the settings vLLM derives from the platform, such as the
  KV-cache block size /metrics reports, are the same everywhere), which is enough for an engine that runs no
  model;
- AsyncLLM gets the fake engine core's client instead of starting an engine core process.
"""
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
import vllm.platforms  # noqa: E402

# vLLM 0.18 asks each built-in platform's detector and takes the one that says yes; only the CPU's does now.
for name in vllm.platforms.builtin_platform_plugins:
    vllm.platforms.builtin_platform_plugins[name] = lambda: None
vllm.platforms.builtin_platform_plugins["cpu"] = lambda: "vllm.platforms.cpu.CpuPlatform"

import fake_engine  # noqa: E402

fake_engine.install()

from vllm.entrypoints.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
