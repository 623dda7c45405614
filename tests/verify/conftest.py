"""What each host should run: the serving plan the deploy recorded on it, and the inventory's settings.

Run it the way testinfra runs against any inventory, from the repository root:
  pytest tests/verify --hosts='ansible://ascend' --ansible-inventory=inventory/<site>/hosts.yml
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import urllib.parse

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

REPO = pathlib.Path(__file__).resolve().parents[2]
READ_PLAYBOOK = pathlib.Path(__file__).resolve().parent / "read.yml"
# One read of the whole fleet: each host's facts and each instance's probe have their own bounds (the probe's
# timeout), so this only ends a run that hangs, e.g. on an SSH connection that never answers.
READ_TIMEOUT_S = 900

# Roles whose defaults decide what a host runs, in the order the playbooks apply them.
ROLES = ("fleet", "ascend_preflight", "docker_runtime", "vllm_image", "model_weights", "vllm_server")


def expected_settings(inventory_variables, inventory_file):
    """Role defaults overlaid with the host's inventory variables, templated as Ansible would."""
    variables = {}
    for role in ROLES:
        variables.update(yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text()) or {})
    variables.update(inventory_variables)
    variables.setdefault("ansible_playbook_python", sys.executable)
    # What a playbook run knows of the inventory: where the fleet's generated key is kept, bare (fleet_api_key_file).
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


class FleetReads:
    """What read.yml found on each host, read once for all the hosts the suite checks (one playbook run for the
    fleet), or for a host alone when the suite's host list does not name it as a pattern."""

    def __init__(self, inventory_file, host_specs, timeout_s=READ_TIMEOUT_S):
        self.inventory_file = inventory_file
        self.timeout_s = timeout_s
        specs = [urllib.parse.urlsplit(spec) for spec in host_specs]
        self.patterns = [spec.netloc for spec in specs if spec.scheme == "ansible"]
        self.found = {}

    def of(self, name):
        if not self.found and self.patterns:
            self.found.update(self.read(self.patterns))
        if name not in self.found:
            self.found.update(self.read([name]))
        return self.found[name]

    def read(self, patterns):
        """host -> the last result read.yml left for it: what it read, or why it could not."""
        with tempfile.TemporaryDirectory(prefix="verify-read-") as tree:
            run = subprocess.Popen(
                [sys.executable, "-m", "ansible", "playbook", "-i", self.inventory_file, str(READ_PLAYBOOK),
                 "--limit", ",".join(patterns)], cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                universal_newlines=True,
                env=dict(os.environ, ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.tree", ANSIBLE_CALLBACK_TREE_DIR=tree))
            try:
                output = run.communicate(timeout=self.timeout_s)[0]
            except subprocess.TimeoutExpired:
                printed = stop(run)
                pytest.fail("reading the hosts %s did not end within %d s (tests/verify/read.yml was stopped); a "
                            "host that accepts the connection but never answers holds it. What it printed:\n%s"
                            % (",".join(patterns), self.timeout_s, printed[-2000:]))
            found = {path.name: json.loads(path.read_text()) for path in pathlib.Path(tree).iterdir()}
        if not found:
            pytest.fail("could not read the hosts %s: %s" % (",".join(patterns), output[-2000:]))
        return found


def stop(run, grace_s=15):
    """Stop an ansible-playbook run as Ctrl-C does, so that it ends its own workers (each in a session of its
    own, out of reach of a signal to the run's group); if it has not ended after grace_s (a loaded machine), kill
    it and every process it started. Returns what it printed."""
    run.send_signal(signal.SIGINT)
    try:
        return run.communicate(timeout=grace_s)[0]
    except subprocess.TimeoutExpired:
        for pid in [run.pid] + descendants(run.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass  # ended meanwhile
        return run.communicate()[0]


def descendants(pid):
    """The processes pid started, and theirs, as /proc shows them now."""
    children = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, waiting = [], [pid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            found.append(child)
            waiting.append(child)
    return found


class Deployment:
    """One host's expected state, and helpers to read its actual state."""

    def __init__(self, host, fleet_reads):
        self.host = host
        self.name = host.backend.get_hostname()
        self.setting = expected_settings(host.ansible.get_variables(), host.backend.ansible_runner.inventory_file)
        result = fleet_reads.of(self.name)
        read = result.get("verify_read")
        assert read is not None, "%s: could not be read (%s): %s" % (
            self.name, "unreachable" if result.get("unreachable") else "a read failed", result.get("msg"))
        self.ascend = read["ascend"]
        self.plan = read["plan"]
        assert self.plan is not None, "%s: no serving plan at %s: deploy first (ansible-playbook site.yml)" % (
            self.name, read["plan_file"])
        self.probes = read["probes"]

    def instances(self):
        return self.plan["instances"]

    def container(self, name):
        result = self.host.run("%s container inspect %s" % (self.setting("fleet_docker_bin"), name))
        return json.loads(result.stdout)[0] if result.rc == 0 else None


@pytest.fixture(scope="session")
def fleet_reads(request):
    option = request.config.option
    return FleetReads(option.ansible_inventory, (option.hosts or "").split(","))


@pytest.fixture(scope="module")
def deployment(host, fleet_reads):
    return Deployment(host, fleet_reads)
