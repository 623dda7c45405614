"""The options of the modules that read a host's health (module_utils/host_evidence.py): the doctor and the support
bundle."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  host:
    description: The inventory name of the host, whose plan the recorded one must be.
    type: str
    required: true
  plan_file:
    description: Where the plan is recorded (C(fleet_plan_file)).
    type: path
    default: /etc/vllm-ascend/plan.json
  docker:
    description: Docker CLI to use.
    type: str
    default: docker
  label_prefix:
    description: Prefix of the labels that mark this collection's containers (C(fleet_label_prefix)).
    type: str
    default: ascend-vllm-fleet
  disk_paths:
    description:
      - The paths whose file systems must not fill, by what they hold (for example C(model), C(cache), C(docker),
        C(logs)). A path that does not exist yet is judged by the nearest folder above it.
    type: dict
    default: {}
  log_lines:
    description: Lines of each instance's log to read (1 or more).
    type: int
    default: 2000
"""
