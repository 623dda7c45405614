"""The options of the modules that read benchmark baselines and the instance containers they were measured on."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  baselines_dir:
    description: Where each instance's baselines are kept (C(<instance>.json)).
    type: path
    default: /var/lib/vllm-bench/baselines
  docker:
    description: The Docker CLI.
    type: str
    default: docker
  label_prefix:
    description: The namespace of the collection's container labels.
    type: str
    default: ascend-vllm-fleet
"""
