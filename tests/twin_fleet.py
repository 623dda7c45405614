"""Private twin fleets for tests: hosts of their own on the twin network, reached over SSH, own inventory."""
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REPO, run_playbook
from twin.lifecycle import Twin

DEFAULT_CONTAINER = "vllm-ascend"
DEFAULT_PORT = 8000


class PlayFleet:
    """Twin hosts made for one test module, and playbook runs against them with per-run host variables."""

    def __init__(self, base, hosts):
        twin = Twin()
        if not twin.registry_answers():
            pytest.fail("the twin is not up: run `scripts/dev twin up` first")
        self.base = base
        self.twin_fleet = twin.fleet(base / "fleet", hosts)
        self.twin_fleet.up()
        self.hosts = sorted(hosts)
        self.inventory = self.twin_fleet.inventory
        self.runs = 0

    def __getitem__(self, name):
        """The TwinHost: exec, docker, inspect, read_text, url, and `root`, its Ascend files on this machine."""
        return self.twin_fleet[name]

    def write(self, **overrides):
        """Write the inventory; overrides maps a host to variables added for this run only."""
        return self.twin_fleet.write_inventory(**overrides)

    def play(self, *args, playbook="site.yml", preflight=False, **overrides):
        """Run a playbook; site.yml runs without its preflight phase (tested on its own) unless asked."""
        self.write(**overrides)
        self.runs += 1
        if playbook == "site.yml" and not preflight:
            args += ("--skip-tags", "preflight")
        return run_playbook(self.base / "runs" / str(self.runs), self.inventory, playbook, *args)

    def api_key(self):
        """The key the fleet role generated for this inventory on the first run (fleet_api_key_file)."""
        return (self.inventory.parent / "credentials" / "api-key").read_text().strip()

    def verify_command(self):
        """The verify suite, run exactly as an operator runs it against an inventory."""
        return [sys.executable, "-m", "pytest", "tests/verify", "--hosts=ansible://ascend",
                "--ansible-inventory=%s" % self.inventory, "-p", "no:cacheprovider", "-q"]

    def verify(self):
        """(exit code, output) of the verify suite."""
        result = subprocess.run(self.verify_command(), cwd=str(REPO), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True, timeout=600, check=False)
        return result.returncode, result.stdout

    def verify_watching_processes(self):
        """(exit code, output, every command line seen on this machine while the verify suite ran)."""
        seen = set()
        with tempfile.TemporaryFile("w+") as output, subprocess.Popen(
                self.verify_command(), cwd=str(REPO), stdout=output, stderr=subprocess.STDOUT,
                universal_newlines=True) as suite:
            while suite.poll() is None:
                seen.update(command_lines())
                time.sleep(0.02)
            output.seek(0)
            return suite.returncode, output.read(), seen

    def down(self):
        self.twin_fleet.down()


def command_lines():
    """The command line of every process on this machine, as `ps` shows them to any user."""
    found = []
    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
        except OSError:
            continue  # the process ended while being read
    return found
