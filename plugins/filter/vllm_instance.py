"""Where an instance's files are on its host: module_utils/vllm_instance.py's one rule, for the tasks that name
an instance's files without a recorded plan (the benchmark's stand-in instance for the gateway)."""
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import instance_files


def vllm_instance_files(name, config_dir):
    """{"script": ..., "env_file": ...} of the instance `name` whose files are in config_dir."""
    return instance_files(str(config_dir), str(name))


class FilterModule:
    def filters(self):
        return {"vllm_instance_files": vllm_instance_files}
