"""Twin fleets for tests: hosts of their own on the twin network, reached over SSH, own inventory.

A fleet is made for one test module (PlayFleet); a DeployedFleet is deployed once and then left by each test
as that deploy left it (a guard checks), so that several tests, or several modules, share it: the `pair` of
tests/conftest.py serves a whole session.
"""
import contextlib
import json
import os
import pathlib
import shlex
import subprocess
import tempfile
import time

import pytest
import requests

from conftest import REPO, running_test_is_marked_docker, start_playbook, venv_tool
from twin.lifecycle import Twin

DEFAULT_CONTAINER = "vllm-ascend"
DEFAULT_PORT = 8000
# The shared fleet (tests/conftest.py's `pair`): a host of the seed's four cards, one of two, and one that
# preflight refuses, made with them but left out of their runs.
PAIR = {"npu-a": "seed_duo4", "npu-b": "duo2"}
PAIR_EXTRA = {"cli-bad": "old_driver_24"}
# The other shared fleet (tests/conftest.py's `single`): one host of two cards, for the modules that read one host.
SINGLE = {"npu-c": "duo2"}
# A benchmark matrix smaller than the quick preset, for the tests of what a run keeps or marks rather than of the
# matrix or of its progress lines (its groups end within a poll): 2 image sizes x 1 output length x 2 concurrency
# levels, 4 requests each; as the command's arguments, and as PlayFleet.play's (one command line, quoted).
SMALL_BENCH = {"small": {"image_sizes": ["640x480", "1280x720"], "max_tokens": [32], "concurrency": [1, 4],
                         "requests_per_group": 4}}
SMALL_BENCH_CLI = ("--preset", "small", "-e", "vllm_bench_presets=%s" % json.dumps(SMALL_BENCH))
SMALL_BENCH_PLAY = ("-e", shlex.quote(json.dumps({"vllm_bench_preset": "small", "vllm_bench_presets": SMALL_BENCH})))
CONFIG_DIR = "/etc/vllm-ascend"  # fleet_config_dir's default, as on a real host
LOCK = "/var/lib/ascend-fleet/lock"  # fleet_lock_file's default
SALT = CONFIG_DIR + "/.config-hash-salt"  # fleet_hash_salt_file's default
LABEL = "ascend-vllm-fleet"  # fleet_label_prefix's default
# A container's fields a shared fleet's test must leave as it found them (the Id changes on any replacement).
CONTAINER_STATE = ("{{.Name}} {{.State.Status}} {{.Config.Image}} {{.HostConfig.RestartPolicy.Name}} "
                   "{{index .Config.Labels \"%s.config-hash\"}} "
                   "{{range .HostConfig.Devices}}{{.PathOnHost}},{{end}}" % LABEL)


def repository_config():
    """The environment of an Ansible tool run as an operator runs it in the checkout: with its ansible.cfg."""
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))


class PlayFleet:
    """Twin hosts made for one test module, and playbook runs against them with per-run host variables."""

    def __init__(self, base, hosts, extra_hosts=()):
        """hosts: name -> `<profile>` or `<profile>@<os>` (tests/twin/profiles.yml, distributions.yml). extra_hosts:
        made with the fleet but in its inventory only for the runs that name them (play(..., hosts=...)): the other
        hosts' runs do not pay for them."""
        if not running_test_is_marked_docker():
            pytest.fail("this test makes a twin fleet without the docker mark: add `pytestmark = pytest.mark.docker` "
                        "to its module, as `scripts/dev test` runs unmarked tests before the twin is up")
        twin = Twin()
        if not twin.registry_answers():
            pytest.fail("the twin is not up: run `scripts/dev twin up` first")
        self.base = base
        self.twin_fleet = twin.fleet(base / "fleet", hosts)
        self.twin_fleet.up()
        self.hosts = sorted(name for name in hosts if name not in extra_hosts)
        self.inventory = self.twin_fleet.inventory
        self.runs = 0

    def __getitem__(self, name):
        """The TwinHost: exec, docker, inspect, read_text, url, and `root`, its Ascend files on this machine."""
        return self.twin_fleet[name]

    def write(self, hosts=None, **overrides):
        """Write the inventory of hosts (by default the fleet's); overrides maps a host to variables added for
        this run only."""
        return self.twin_fleet.write_inventory(only=hosts or self.hosts, **overrides)

    def play(self, *args, playbook="site.yml", preflight=False, hosts=None, **overrides):
        """Run a playbook; site.yml runs without its preflight phase (tested on its own) unless asked."""
        return self.start(*args, playbook=playbook, preflight=preflight, hosts=hosts, **overrides).wait()

    def start(self, *args, playbook="site.yml", preflight=False, hosts=None, **overrides):
        """play, started: returns at once with the StartedRun (its wait() gives the run). The inventory is written
        and read at the start: another run may write its own meanwhile."""
        self.write(hosts, **overrides)
        self.runs += 1
        if playbook == "site.yml" and not preflight:
            args += ("--skip-tags", "preflight")
        return start_playbook(self.base / "runs" / str(self.runs), self.inventory, playbook, *args)

    def doctor(self, *args, **overrides):
        """(the run, the fleet's diagnosis it wrote: doctor.json) of playbooks/doctor.yml, as `ascend-vllm-fleet
        doctor` runs it; args and overrides as for play (-e doctor_bundle=true: `collect`)."""
        folder = self.base / "doctor" / str(self.runs + 1)
        run = self.play("-e", "doctor_report_dir=%s" % folder, *args, playbook="playbooks/doctor.yml", **overrides)
        diagnosis = folder / "doctor.json"
        assert diagnosis.exists(), run.stdout
        return run, json.loads(diagnosis.read_text())

    def ad_hoc(self, host, module, args="", *options):
        """The result of `ansible HOST -m MODULE -a ARGS [OPTIONS]` against the fleet's inventory, as an operator runs
        it."""
        self.write()
        done = subprocess.run([venv_tool("ansible"), host, "-i", str(self.inventory), "-m", module, "-a", args,
                               *options],
                              cwd=str(REPO), env=dict(repository_config(), ANSIBLE_CALLBACK_RESULT_FORMAT="json"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600)
        assert " => " in done.stdout, done.stdout
        return json.loads(done.stdout.split(" => ", 1)[1])

    def api_key(self):
        """The key the fleet role generated for this inventory on the first run: fleet_api_key_file, the bare key."""
        return (self.inventory.parent / "credentials" / "api-key").read_text().strip()

    def verify_command(self, hosts=None, **overrides):
        """The verification, run exactly as an operator runs it against an inventory (ansible-playbook
        playbooks/verify.yml): the inventory the last run wrote, or one with the hosts named (with overrides, as for
        write), so that a test that changed one host checks that host alone."""
        if hosts:
            self.write(hosts, **overrides)
        return [venv_tool("ansible-playbook"), "-i", str(self.inventory), "playbooks/verify.yml"]

    def verify(self, hosts=None, **overrides):
        """(exit code, output) of the verification; hosts and overrides as for verify_command. Each failure is a line
        of its host's `msg`: `<host>, instance <name>: <found>, expected <expected>. Fix: <fix>`."""
        result = subprocess.run(self.verify_command(hosts, **overrides), cwd=str(REPO), env=repository_config(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600,
                                check=False)
        return result.returncode, result.stdout

    def verify_watching_processes(self, hosts=None, **overrides):
        """(exit code, output, every command line seen on this machine while the verification ran); hosts and
        overrides as for verify_command."""
        seen = set()
        with tempfile.TemporaryFile("w+") as output, subprocess.Popen(
                self.verify_command(hosts, **overrides), cwd=str(REPO), env=repository_config(), stdout=output,
                stderr=subprocess.STDOUT, universal_newlines=True) as run:
            while run.poll() is None:
                seen.update(command_lines())
                time.sleep(0.02)
            output.seek(0)
            return run.returncode, output.read(), seen

    def down(self):
        self.twin_fleet.down()


class DeployedFleet(PlayFleet):
    """A fleet deployed once and shared by several tests: each test leaves it as the deploy left it."""

    def __init__(self, base, hosts, extra_hosts=()):
        super().__init__(base, hosts, extra_hosts)
        self.deployed = None
        self.baseline = None

    @classmethod
    @contextlib.contextmanager
    def made(cls, base, hosts, extra_hosts=()):
        """A fleet made and deployed for a fixture's life (`with DeployedFleet.made(...) as fleet: yield fleet`),
        then taken down."""
        fleet = cls(base, hosts, extra_hosts=extra_hosts)
        fleet.deploy()
        yield fleet
        fleet.down()

    def deploy(self):
        """The first deploy, preflight included; what every test then finds (the baseline)."""
        self.deployed = self.play(preflight=True)
        assert self.deployed.rc == 0, self.deployed.stdout
        self.baseline = self.state()
        return self.deployed

    def state(self):
        """host -> this collection's containers (name, status, image, restart policy, config-hash label, chips)
        and a checksum of every file in the config folder (the plan, the rendered runs, the env files)."""
        found = {}
        for name in self.hosts:
            host = self[name]
            ids = host.docker("ps", "-aq", "--filter", "label=%s.host" % LABEL).stdout.split()
            containers = sorted(host.docker("container", "inspect", "-f", CONTAINER_STATE, *ids).stdout.splitlines()
                                if ids else [])
            files = host.exec("sh", "-c", "cd %s 2>/dev/null && sha256sum -- * .[!.]* 2>/dev/null; true"
                              % CONFIG_DIR).stdout.splitlines()
            found[name] = {"containers": containers, "files": sorted(files)}
        return found

    def differing(self):
        """host -> (its state now, its baseline), for the hosts that differ from the baseline."""
        now = self.state()
        return {name: (now[name], self.baseline[name]) for name in self.hosts if now[name] != self.baseline[name]}

    @staticmethod
    def describe(differing):
        """What differing() found, one line per host and kind."""
        return ["%s, %s: %s, was %s" % (name, kind, json.dumps(now[kind]), json.dumps(was[kind]))
                for name, (now, was) in sorted(differing.items()) for kind in ("containers", "files")
                if now[kind] != was[kind]]

    def restore(self, differing=None):
        """The inventory's settings back, on the hosts that differ from the baseline only (differing(), read
        again unless given), by the server phase alone; nothing runs where nothing changed. Returns the run, or
        None."""
        changed = sorted(self.differing() if differing is None else differing)
        if not changed:
            return None
        run = self.play("--tags", "server", "--limit", ",".join(changed))
        assert run.rc == 0, run.stdout
        left = self.describe(self.differing())
        assert not left, "the server phase did not restore the shared fleet:\n" + "\n".join(left)
        return run

    def salts(self):
        """host -> its config-hash salt, which a teardown removes: put back (put_salts) before the next deploy,
        the same labels come back."""
        return {name: self[name].read_text(SALT) for name in self.hosts}

    def put_salts(self, salts):
        for name, salt in salts.items():
            self[name].exec("sh", "-c", "mkdir -p %s && umask 077 && cat > %s" % (CONFIG_DIR, SALT), input=salt)

    @contextlib.contextmanager
    def guarded(self):
        """Fail a test that leaves the fleet changed, naming what it changed, after putting it back for the next."""
        self.write()  # the inventory of the shared hosts, whatever the last test wrote
        yield self
        left = self.differing()
        if left:
            self.restore(left)
            pytest.fail("the test left the shared fleet changed (restore what a test changes):\n"
                        + "\n".join(self.describe(left)))


def command_lines():
    """The command line of every process on this machine, as `ps` shows them to any user."""
    found = []
    # Listed, then read: pathlib's glob stats each match itself, and a process that ends in between raises there
    # (ESRCH, which glob does not take for "gone").
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.append(pathlib.Path("/proc", pid, "cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace"))
        except OSError:
            continue  # the process ended while being read
    return found


MODEL = "Qwen3-VL-8B-Instruct"


def serves(fleet, name, port=DEFAULT_PORT, api_key=None):
    """Whether the host's instance lists the model, asked with api_key (by default the fleet's generated key)."""
    key = fleet.api_key() if api_key is None else api_key
    headers = {"Authorization": "Bearer " + key} if key else {}
    reply = requests.get(fleet[name].url(port) + "/v1/models", headers=headers, timeout=5)
    return reply.status_code == 200 and [m["id"] for m in reply.json()["data"]] == [MODEL]


def serves_now(fleet, name):
    """serves, False while the host or its instance does not answer at all (a reboot, a load)."""
    try:
        return serves(fleet, name)
    except (requests.RequestException, OSError):
        return False


def wait_until(condition, what, timeout=300):
    """Poll condition until it holds and return when (time.monotonic()); after timeout seconds, a test failure naming
    what was awaited. what may be a function: it is called then, to say what was seen instead."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within %d s: %s" % (timeout, what() if callable(what) else what)
        time.sleep(0.5)
    return time.monotonic()
