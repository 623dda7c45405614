"""What each host should run, from the same inventory variables and role defaults the playbooks use.

Run it the way testinfra runs against any inventory, from the repository root:
  pytest tests/verify --hosts='ansible://ascend' --ansible-inventory=inventory/<site>/hosts.yml
"""
import json
import pathlib
import sys

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "roles/vllm_server/filter_plugins"))
import vllm_server  # noqa: E402  (the serving plan the server role uses)

# Roles whose defaults decide what a host runs, in the order the playbooks apply them.
ROLES = ("ascend_preflight", "docker_runtime", "vllm_image", "model_weights", "vllm_server")


def expected_settings(inventory_variables):
    """Role defaults overlaid with the host's inventory variables, templated as Ansible would."""
    variables = {}
    for role in ROLES:
        variables.update(yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text()) or {})
    variables.update(inventory_variables)
    variables.setdefault("ansible_playbook_python", sys.executable)
    # Defaults and inventory are the operator's own files: their templates are trusted, as in a playbook run.
    variables = {key: trusted(value) for key, value in variables.items()}
    templar = Templar(loader=DataLoader(), variables=variables)
    return lambda name: templar.template(variables[name])


def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


class Deployment:
    """One host's expected state, and helpers to read its actual state."""

    def __init__(self, host):
        self.host = host
        self.name = host.backend.get_hostname()
        self.setting = expected_settings(host.ansible.get_variables())
        facts = host.ansible("npu_facts", self.module_args({
            "npu_smi": "ascend_npu_smi", "driver_home": "ascend_driver_home",
            "firmware_home": "ascend_firmware_home", "install_info": "ascend_install_info",
            "dev_dir": "ascend_dev_dir"}))
        self.ascend = facts["ansible_facts"]["ascend"]

    def module_args(self, options):
        """key=value arguments from the settings that are defined (others keep the module's default)."""
        pairs = []
        for option, variable in options.items():
            try:
                pairs.append("%s=%s" % (option, json.dumps(str(self.setting(variable)))))
            except KeyError:
                continue
        return " ".join(pairs)

    def instances(self):
        return vllm_server.vllm_server_plan(
            self.ascend, self.setting("vllm_server_layout"), self.setting("vllm_server_container_name"),
            int(self.setting("vllm_server_port")), int(self.setting("vllm_server_tensor_parallel_size")))

    def container(self, name):
        result = self.host.run("%s container inspect %s" % (self.setting("vllm_server_docker_bin"), name))
        return json.loads(result.stdout)[0] if result.rc == 0 else None


@pytest.fixture(scope="module")
def deployment(host):
    return Deployment(host)
