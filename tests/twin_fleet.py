"""Private twin fleets for tests: hosts, container names and ports of their own on the shared Docker engine."""
import socket
import uuid

import yaml

from conftest import REPO, free_port, run_playbook
from twin import hosts


def free_port_block(size):
    """A base port whose next `size` ports are free too."""
    while True:
        base = free_port()
        if base + size < 65535 and all(_free(base + offset) for offset in range(size)):
            return base


def _free(port):
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


class Fleet:
    """Two private twin hosts and an inventory whose host variables a test can change."""

    def __init__(self, base, extra_hosts=None):
        self.base = base
        self.tag = uuid.uuid4().hex[:6]
        # Host names are unique per run: containers are found by their host label on the shared engine.
        self.a, self.b = "deploy-a-" + self.tag, "deploy-b-" + self.tag
        profiles = hosts.load_profiles()
        self.hosts = {
            self.a: {"twin_profile": "seed_duo4", "vllm_server_container_name": "dep-%s-a" % self.tag,
                     "vllm_server_port": free_port_block(4)},
            self.b: {"twin_profile": "duo2", "vllm_server_container_name": "dep-%s-b" % self.tag,
                     "vllm_server_port": free_port_block(1)},
        }
        self.hosts.update(extra_hosts or {})
        for name, variables in self.hosts.items():
            variables["twin_root"] = str(base / "hosts" / name)
            hosts.build_root(variables["twin_root"], profiles[variables["twin_profile"]])
        self.inventory_dir = base / "inventory"
        self.inventory_dir.mkdir()
        (self.inventory_dir / "group_vars").symlink_to(REPO / "inventory/twin/group_vars")
        self.runs = 0
        self.write()

    def write(self, **overrides):
        """Write the inventory; overrides maps a host to variables added for this run only."""
        inventory_hosts = {name: dict(variables, **overrides.get(name, {})) for name, variables in self.hosts.items()}
        (self.inventory_dir / "hosts.yml").write_text(yaml.safe_dump(
            {"all": {"children": {"ascend": {"hosts": inventory_hosts}}}}))

    def play(self, *args, playbook="site.yml", preflight=False, **overrides):
        """Run a playbook; site.yml runs without its preflight phase (tested on its own) unless asked."""
        self.write(**overrides)
        self.runs += 1
        if playbook == "site.yml" and not preflight:
            args += ("--skip-tags", "preflight")
        return run_playbook(self.base / "runs" / str(self.runs), self.inventory_dir / "hosts.yml", playbook, *args)

    def root(self, host):
        return self.hosts[host]["twin_root"]

    def name(self, host):
        return self.hosts[host]["vllm_server_container_name"]

    def port(self, host):
        return self.hosts[host]["vllm_server_port"]
