"""An operator's API key, passed to the command's deploy, verify and bench, lands in no artifact, log, report,
label, file other than the hosts' root-only env files, or process list on the controller or the hosts."""
import json
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from conftest import REPO
from twin_fleet import DEFAULT_CONTAINER as NAME
from twin_fleet import SMALL_BENCH_CLI, command_lines

pytestmark = pytest.mark.docker
HOST = "npu-c"  # the shared single host
KEY = "sk-" + uuid.uuid4().hex


@pytest.fixture
def fleet(shared_single):
    return shared_single


def cli_watching_processes(*argv):
    """(exit code, output, every command line seen on this machine, twin hosts included, while it ran)."""
    seen = set()
    command = [sys.executable, "-m", "ascend_vllm_fleet.cli"] + list(argv)
    with tempfile.TemporaryFile("w+") as output, subprocess.Popen(
            command, cwd=str(REPO), stdout=output, stderr=subprocess.STDOUT, universal_newlines=True) as run:
        while run.poll() is None:
            seen.update(command_lines())
            time.sleep(0.02)
        output.seek(0)
        return run.returncode, output.read(), seen


def files_holding(folder, text):
    found = subprocess.run(["grep", "-rl", "--", text, str(folder)], stdout=subprocess.PIPE,
                           universal_newlines=True, check=False)
    assert found.returncode in (0, 1), "grep failed on %s" % folder  # 2: the folder is missing
    return found.stdout.split()


def test_deploy_verify_and_bench_keep_the_key_to_the_env_files(fleet, tmp_path):
    inventory = str(fleet.inventory)
    fleet.write(**{HOST: {"fleet_api_key": KEY}})  # in the inventory, as an operator's vault gives it

    code, deploy_output, deploy_commands = cli_watching_processes("deploy", "-i", inventory, "-l", HOST)
    assert code == 0, deploy_output
    code, verify_output, verify_commands = cli_watching_processes("verify", "-i", inventory, "-l", HOST)
    assert code == 0, verify_output
    reports = tmp_path / "reports"
    code, bench_output, bench_commands = cli_watching_processes(
        "bench", "-i", inventory, "-l", HOST, *SMALL_BENCH_CLI, "-e",
        "vllm_bench_reports_dir=%s" % reports)
    assert code == 0, bench_output

    for output in (deploy_output, verify_output, bench_output):
        assert KEY not in output
    commands = deploy_commands | verify_commands | bench_commands
    assert any("ansible" in command for command in commands), "the process watch saw no run"
    assert [command for command in commands if KEY in command] == []
    artifacts = [line.split("artifacts: ", 1)[1].strip() for line in
                 (deploy_output + verify_output + bench_output).splitlines() if line.startswith("artifacts: ")]
    assert len(artifacts) == 3
    for folder in artifacts + [str(reports)]:
        assert files_holding(folder, KEY) == [], "the key is written under %s" % folder

    host = fleet[HOST]
    container = host.inspect(NAME)
    assert KEY not in json.dumps(container["Config"]["Labels"])
    holding = host.exec("sh", "-c", "grep -rl -- %s /etc /var/lib/vllm-bench /var/cache/vllm-ascend "
                                    "/home/ops /root /tmp /var/tmp 2>/dev/null || true" % KEY).stdout.split()
    assert holding == ["/etc/vllm-ascend/%s.env" % NAME]
    assert host.mode("/etc/vllm-ascend/%s.env" % NAME) == 0o600
    assert fleet.restore().rc == 0  # the fleet's own key back
