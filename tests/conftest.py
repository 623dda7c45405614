"""Shared test helpers: where the repository and the real npu-smi samples are."""
import json
import os
import pathlib
import socket
import stat
import sys

import ansible_runner
import pytest
import yaml

from ansible_collections.ascend.fleet.plugins.module_utils.png_images import png_image  # noqa: F401  (shared with the modules)

# The helper modules beside this file: pytest rewrites their asserts as it does the tests' own (same detail).
pytest.register_assert_rewrite("bench_events", "fake_vllm", "module_runs", "report_rows", "serving_plans",
                               "standin_host", "twin_fleet")

REPO = pathlib.Path(__file__).resolve().parent.parent
# HAProxy's backend of every instance, as its one owner, the fleet role, names it.
GATEWAY_BACKEND = yaml.safe_load((REPO / "roles/fleet/vars/main.yml").read_text(encoding="utf-8"))[
    "fleet_gateway_backend"]
# Real npu-smi output and the seed's commands, each file with its '# source:' first line.
FIXTURES = REPO / "tests" / "fixtures" / "npu-smi"
SEED_COMMANDS = REPO / "tests" / "fixtures" / "seed" / "deploy-commands.txt"
# Playbooks run with the tools of the Python running the tests, as `scripts/dev test` runs them.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(sys.executable)),
                                      os.environ.get("PATH", "")])
# Every Ansible run the tests start keeps its module payloads for the next and imports the collection's filters once
# (tests/ansible_plugins/callback/): building the one and importing the other in every worker are half of a converged
# run's CPU on the controller.
os.environ["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(
    filter(None, [str(REPO / "tests" / "ansible_plugins" / "callback"), os.environ.get("ANSIBLE_CALLBACK_PLUGINS")]))


# The test modules that share a deployed fleet (fixture name -> its modules): under pytest-xdist (scripts/dev
# test) each fleet's modules form one scope, run on one worker, so the fleet is deployed once. The pair's scope
# is the suite's longest; the modules that read one host only share a fleet of one, so that the pair's worker
# does not end long after the other. Collection refuses a module that uses a shared fleet and is not named with
# it here (pytest_collection_modifyitems).
SHARED_FLEET_MODULES = {
    fixture: tuple("tests/integration/%s.py" % name for name in names) for fixture, names in (
        ("pair", ("test_cli", "test_deploy", "test_operator_view")),
        ("single", ("test_secrets", "test_recorded_plan", "test_installed_collection", "test_interrupted_runs",
                    "test_awx_job")))}
FLEET_OF_MODULE = {module: fixture for fixture, modules in SHARED_FLEET_MODULES.items() for module in modules}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope with each shared fleet's modules as one scope: each other module is a scope of its own, so its
    module-scoped fixtures (a twin fleet, a server) are made once. (xdist's loadgroup marks do not reach the
    scheduler under pytest 9's node ids.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # Scopes go out in collection order (see pytest_collection_modifyitems), not largest number of tests first.
    config.option.loadscopereorder = False

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            module = nodeid.split("::", 1)[0]
            return FLEET_OF_MODULE.get(module, module)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items):
    for fixture, modules in SHARED_FLEET_MODULES.items():
        strays = sorted({item.nodeid.split("::", 1)[0] for item in items
                         if fixture in getattr(item, "fixturenames", ())} - set(modules))
        if strays:
            raise pytest.UsageError("%s use the %s fixture: add them to its modules in SHARED_FLEET_MODULES "
                                    "(tests/conftest.py), so that they run on its worker"
                                    % (", ".join(strays), fixture))
    items.sort(key=lambda item: run_order(item.nodeid.split("::", 1)[0]))


# Whether the test being set up carries the docker mark. `scripts/dev test` runs the unmarked tests while the twin
# is still being built, so a twin fleet refuses to start for an unmarked test (tests/twin_fleet.py), wherever it
# runs, rather than racing the build there.
_RUNNING = {"docker": False}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _RUNNING["docker"] = item.get_closest_marker("docker") is not None


def running_test_is_marked_docker():
    return _RUNNING["docker"]


# The longest scopes, longest first (as measured by a CI run's durations, three workers: the gateway fleet's module
# about 27 minutes, the pair's modules 21, the single host's 13, the driver fleet's 9). The driver fleet comes after
# the single host's: it has an aarch64 (Kunpeng) host, which needs the twin's aarch64 images, which `scripts/dev
# test` builds while the first scopes run (tests/twin/lifecycle.py, `build`); its fleet waits for the build if need
# be.
LONGEST_SCOPES = ("tests/integration/test_gateway_fleet.py", "pair", "single", "tests/integration/test_driver_fleet.py")


def run_order(module):
    """The longest scopes first, each worker taking the next as it is free, so that no worker is left with a long
    one at the end; then the other modules with a twin fleet of their own, then the tests without one (tests/local,
    tests/unit), small scopes that fill in wherever a worker is free. The sort is stable: tests keep their order
    within a module."""
    scope = FLEET_OF_MODULE.get(module, module)
    if scope in LONGEST_SCOPES:
        return LONGEST_SCOPES.index(scope)
    return len(LONGEST_SCOPES) + (0 if module.startswith("tests/integration/") else 1)


def read_fixture(name):
    """A real npu-smi sample without its '# source:' line."""
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# source:"), "%s: expected a '# source:' first line" % name
    return text.split("\n", 1)[1]


@pytest.fixture(scope="session")
def fixture_names():
    names = sorted(path.name for path in FIXTURES.glob("*.txt"))
    assert names, "no npu-smi samples found under %s" % FIXTURES
    return names


def snapshot(root):
    """Every path under root with its type, mode, device number and content, to compare two runs."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            content = open(path, "rb").read() if stat.S_ISREG(info.st_mode) else None
            found[os.path.relpath(path, root)] = (info.st_mode, info.st_rdev, info.st_mtime_ns, content)
    return found


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def venv_tool(name):
    """A console script installed beside the running Python (ansible-playbook, ansible-doc, ...)."""
    return str(pathlib.Path(sys.executable).parent / name)


# The events ansible-runner gives a task's outcome on a host (its start and async polls are others).
RESULT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")


class PlaybookRun:
    """What one ansible-playbook run reported: exit code, per-host stats and per-task results."""

    def __init__(self, runner):
        self.rc = runner.rc
        self.stats = runner.stats or {}
        self.events = list(runner.events)
        self.stdout = runner.stdout.read()

    def results(self, task_name):
        """host -> result of the task with this name (ok, failed, skipped or unreachable), its event as `_event`;
        a host the task started on but gave no result is not in it."""
        found = {}
        for event in self.events:
            data = event.get("event_data", {})
            if event.get("event") in RESULT_EVENTS and data.get("task") == task_name:
                found[data["host"]] = dict(data.get("res") or {}, _event=event["event"])
        return found

    def failed_hosts(self):
        return sorted(self.stats.get("failures", {}))

    def failure_text(self, host):
        """Every failed (not ignored) task result of the host, one JSON line each: what its messages say."""
        return "\n".join(json.dumps(event["event_data"].get("res"), ensure_ascii=False) for event in self.events
                         if event.get("event") == "runner_on_failed" and event["event_data"].get("host") == host
                         and not event["event_data"].get("ignore_errors"))

    def changed(self):
        return sum(self.stats.get("changed", {}).values())


def run_playbook(tmp_dir, inventory, playbook="site.yml", *args, config=REPO / "ansible.cfg"):
    """Run a playbook of this repository with ansible-runner, as the CLI does; tmp_dir keeps its artifacts.
    config: the ansible.cfg, whose folder the run starts in (another than the repository's: a user's project)."""
    return start_playbook(tmp_dir, inventory, playbook, *args, config=config).wait()


class StartedRun:
    """A playbook run going on in the background (ansible-runner's own thread)."""

    def __init__(self, thread, runner):
        self.thread, self.runner = thread, runner

    def wait(self, timeout=1800):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the playbook run did not end within %d s" % timeout
        return PlaybookRun(self.runner)


def start_playbook(tmp_dir, inventory, playbook="site.yml", *args, config=REPO / "ansible.cfg"):
    """run_playbook, started: returns at once with the StartedRun."""
    pathlib.Path(tmp_dir).mkdir(parents=True, exist_ok=True)
    thread, runner = ansible_runner.run_async(
        private_data_dir=str(tmp_dir), project_dir=str(pathlib.Path(config).parent), playbook=str(REPO / playbook),
        inventory=str(inventory), cmdline=" ".join(args), quiet=True,
        envvars={"ANSIBLE_CONFIG": str(config)}, settings={"suppress_env_files": True})
    return StartedRun(thread, runner)


@pytest.fixture(scope="session")
def pair(tmp_path_factory):
    """Two deployed twin hosts, npu-a (4 cards, the seed's) and npu-b (2 cards), and cli-bad (a driver too old,
    in the inventory only for the runs that name it), shared by its modules in SHARED_FLEET_MODULES: one fleet and one
    first deploy for all of them. Tests take it through `shared_pair`, which holds them to leaving it as the
    deploy left it."""
    from twin_fleet import PAIR, PAIR_EXTRA, DeployedFleet  # the twin's modules load only where a fleet is used
    with DeployedFleet.made(tmp_path_factory.mktemp("pair"), dict(PAIR, **PAIR_EXTRA), PAIR_EXTRA) as fleet:
        yield fleet


@pytest.fixture
def shared_pair(pair):
    with pair.guarded():
        yield pair


@pytest.fixture(scope="session")
def single(tmp_path_factory):
    """One deployed twin host, npu-c (2 cards), shared by the modules that read one host: one fleet and one first
    deploy for them. Tests take it through `shared_single`, which holds them to leaving it as the deploy left it."""
    from twin_fleet import SINGLE, DeployedFleet
    with DeployedFleet.made(tmp_path_factory.mktemp("single"), SINGLE) as fleet:
        yield fleet


@pytest.fixture
def shared_single(single):
    with single.guarded():
        yield single

