"""What each host should run: the serving plan the deploy recorded on it, and the inventory's settings.

Run it the way testinfra runs against any inventory, from the repository root:
  pytest tests/verify --hosts='ansible://ascend' --ansible-inventory=inventory/<site>/hosts.yml
"""
import contextlib
import json
import pathlib
import sys
import tempfile

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

REPO = pathlib.Path(__file__).resolve().parents[2]

# Roles whose defaults decide what a host runs, in the order the playbooks apply them.
ROLES = ("fleet", "ascend_preflight", "docker_runtime", "vllm_image", "model_weights", "vllm_server")


def expected_settings(inventory_variables, inventory_file):
    """Role defaults overlaid with the host's inventory variables, templated as Ansible would."""
    variables = {}
    for role in ROLES:
        variables.update(yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text()) or {})
    variables.update(inventory_variables)
    variables.setdefault("ansible_playbook_python", sys.executable)
    # What a playbook run knows of the inventory: where the fleet's generated key is kept (fleet_api_key_file).
    variables.setdefault("inventory_dir", str(pathlib.Path(inventory_file).resolve().parent))
    # Defaults and inventory are the operator's own files: their templates are trusted, as in a playbook run.
    variables = {key: trusted(value) for key, value in variables.items()}
    init_plugin_loader()  # the defaults use lookups (the fleet's generated key), as a playbook run does
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
        self.setting = expected_settings(host.ansible.get_variables(), host.backend.ansible_runner.inventory_file)
        facts = host.ansible("npu_facts", self.fleet_arguments(NPU_FACTS_OPTIONS))
        self.ascend = facts["ansible_facts"]["ascend"]
        self.plan = self.read_plan()

    def fleet_arguments(self, options):
        """key=value arguments of a module whose options the fleet settings name fleet_<option>."""
        return " ".join("%s=%s" % (option, json.dumps(str(self.setting("fleet_" + option)))) for option in options)

    def read_plan(self):
        """The plan as the deploy recorded it, read and checked on the host by the roles' own reader."""
        path = self.setting("fleet_plan_file")
        read = self.host.ansible("vllm_plan_info", "path=%s host=%s" % (json.dumps(path), json.dumps(self.name)))
        assert read["plan"] is not None, "%s: no serving plan at %s: deploy first (ansible-playbook site.yml)" % (
            self.name, path)
        return read["plan"]

    def instances(self):
        return self.plan["instances"]

    @contextlib.contextmanager
    def api_key_file(self):
        """A file holding the fleet's API key, readable by this user only, removed after use; None: no key."""
        key = self.setting("fleet_api_key")
        if not key:
            yield None
            return
        with tempfile.NamedTemporaryFile("w", prefix="verify-key-") as handle:  # created with mode 0600
            handle.write(key)
            handle.flush()
            yield handle.name

    def container(self, name):
        result = self.host.run("%s container inspect %s" % (self.setting("fleet_docker_bin"), name))
        return json.loads(result.stdout)[0] if result.rc == 0 else None


# npu_facts options the fleet settings give (fleet_npu_smi, ...); the rest keep the module's defaults.
NPU_FACTS_OPTIONS = ("npu_smi", "driver_home", "firmware_home", "install_info", "dev_dir")


@pytest.fixture(scope="module")
def deployment(host):
    return Deployment(host)
