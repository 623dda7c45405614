"""The collection run as AWX runs a job: ansible-runner with process isolation in the execution environment (EE) built
from the project's own base (scripts/ee.py), the project and the inventory mounted where AWX mounts them, the SSH key
from a credential (env/ssh_key, which ansible-runner hands to an ssh-agent in the container). Nothing of this
checkout's virtualenv or of paths outside the job's folder reaches the container: the project is a copy of the
checkout's tracked files (AWX's project sync), the inventory a script printing what `ansible-inventory --list` reads
(AWX's inventory import), and the fleet's API key a credential file inside the job's folder."""
import json
import os
import shutil
import stat
import subprocess

import ansible_runner
import pytest
from readme_commands import readme_block, run_command

from conftest import REPO, PlaybookRun, venv_tool
from twin_fleet import DEFAULT_CONTAINER as NAME

pytestmark = pytest.mark.docker
HOST = "npu-c"  # the shared single host, deployed from the checkout
# Where AWX's job folder is in the container (ansible-runner mounts it there).
RUNNER = "/runner"
# Controller paths a checkout's inventory names, which an AWX inventory has no use for: the key comes from the
# credential, host keys are AWX's to check (it turns checking off unless told otherwise).
CONTROLLER_ONLY = ("ansible_ssh_private_key_file", "ansible_ssh_common_args")


def build_as_written(commands):
    """The README's build of the EE (its block's one command), as written: (what it printed, the image it names
    last)."""
    (command,) = commands
    built = run_command(command)
    assert built.code == 0, "%s: exit %d\n%s\n%s" % (command, built.code, built.stdout[-4000:], built.stderr[-4000:])
    return built.stdout, built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def ee_image():
    """The EE image, built from the project's own Debian base (or found built from the same inputs)."""
    _printed, image = build_as_written(readme_block(
        "tests/integration/test_awx_job.py::test_the_execution_environment_commands_as_written"))
    return image


def tracked_files(project):
    """The checkout's tracked files copied into project, links kept as links: what AWX's project sync checks out."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=str(REPO), stdout=subprocess.PIPE, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, target = REPO / name, project / name
        if not os.path.lexists(str(source)):
            continue  # removed in the working tree, not yet in git
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(str(source)), str(target))
        else:
            shutil.copy2(str(source), str(target))


def awx_inventory(fleet):
    """The fleet's inventory as AWX holds it after an import: every host's variables, group_vars included, without
    the controller's paths; written as AWX writes a job's inventory, an executable printing its JSON."""
    listed = subprocess.run([venv_tool("ansible-inventory"), "-i", str(fleet.write([HOST])), "--list"],
                            cwd=str(REPO), stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    inventory = json.loads(listed)
    for variables in inventory["_meta"]["hostvars"].values():
        for name in CONTROLLER_ONLY:
            variables.pop(name, None)
    return "#!/usr/bin/env python3\nprint(%r)\n" % json.dumps(inventory)


def write_secret(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)


class AwxJob:
    """A job's private data folder laid out as AWX lays it out, and runs of the project's playbooks in it."""

    def __init__(self, folder, fleet, image):
        self.folder, self.image = folder, image
        tracked_files(folder / "project")
        inventory = folder / "inventory" / "hosts"
        inventory.parent.mkdir(parents=True)
        inventory.write_text(awx_inventory(fleet))
        inventory.chmod(0o700)
        write_secret(folder / "env" / "ssh_key", fleet.twin_fleet.key.read_text())
        # The fleet's API key, as a custom credential injects it: a file in the job's folder, named by an extra var.
        write_secret(folder / "credentials" / "fleet-api-key",
                     (fleet.inventory.parent / "credentials" / "api-key").read_text())
        self.extravars = {"fleet_api_key_file": RUNNER + "/credentials/fleet-api-key"}
        self.runs = 0

    def run(self, playbook, **extravars):
        self.runs += 1
        (self.folder / "env" / "extravars").write_text(json.dumps(dict(self.extravars, **extravars)))
        runner = ansible_runner.run(
            private_data_dir=str(self.folder), playbook=playbook, ident="job-%d" % self.runs, quiet=True,
            process_isolation=True, process_isolation_executable="docker", container_image=self.image,
            # The twin's hosts are on a Docker network this machine reaches; an AWX node reaches its hosts by its own.
            container_options=["--network=host"], envvars={"ANSIBLE_HOST_KEY_CHECKING": "False"})
        return PlaybookRun(runner)

    def command(self):
        """The last run's container command, as ansible-runner recorded it."""
        return json.loads((self.folder / "artifacts" / ("job-%d" % self.runs) / "command").read_text())["command"]

    def mounts(self):
        """The host paths the last run's container had mounted."""
        argv = self.command()
        return [argv[index + 1].split(":", 1)[0] for index, arg in enumerate(argv) if arg in ("-v", "--volume")]


@pytest.fixture(scope="module")
def job(tmp_path_factory, single, ee_image):
    return AwxJob(tmp_path_factory.mktemp("awx-job"), single, ee_image)


def test_site_runs_in_the_execution_environment_and_changes_nothing_on_a_converged_fleet(job, shared_single):
    run = job.run("site.yml")
    assert run.rc == 0, run.stdout[-6000:]
    assert run.stats["ok"].get(HOST) and not run.stats["changed"].get(HOST), (run.stats, run.stdout[-6000:])
    # The run was the EE's container, which saw the job's folder and nothing else of this machine.
    command = job.command()
    assert command[:2] == ["docker", "run"] and job.image in command, command
    assert any("ansible-playbook" in arg for arg in command[command.index(job.image):]), command
    assert job.mounts() and all(os.path.realpath(path).startswith(str(job.folder.resolve()) + os.sep)
                                or os.path.realpath(path) == str(job.folder.resolve()) for path in job.mounts()), \
        command
    assert shared_single[HOST].inspect(NAME)["State"]["Running"]


def test_a_benchmark_reports_into_the_mounted_project_with_its_charts(job, shared_single):
    run = job.run("playbooks/benchmark.yml", vllm_bench_report_dir="reports/awx")
    assert run.rc == 0, run.stdout[-6000:]
    report = job.folder / "project" / "reports" / "awx"
    summary = json.loads((report / "summary.json").read_text())
    assert HOST in json.dumps(summary), summary
    charts = sorted(path.name for path in report.glob("*.png"))
    assert charts and all((report / name).read_bytes().startswith(b"\x89PNG") for name in charts), charts
    assert (report / "report.html").is_file()


def test_the_doctor_diagnoses_the_host_from_the_execution_environment(job, shared_single):
    run = job.run("playbooks/doctor.yml", doctor_report_dir="reports/doctor-awx")
    assert run.rc == 0, run.stdout[-6000:]
    diagnosis = json.loads((job.folder / "project" / "reports" / "doctor-awx" / "doctor.json").read_text())
    assert HOST in json.dumps(diagnosis), diagnosis


def test_the_execution_environment_commands_as_written(ee_image):
    """The README's build, typed again: the image of the same inputs is there, and nothing is built."""
    printed, image = build_as_written(readme_block(
        "tests/integration/test_awx_job.py::test_the_execution_environment_commands_as_written"))
    assert image == ee_image and "is built from these inputs already" in printed, printed[-3000:]
    labels = json.loads(subprocess.run(["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", image],
                                       stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout)
    assert labels.get("ansible-execution-environment") == "true", labels
