"""The ascend-vllm-fleet command on the twin: deploy, verify, bench, and a bad host named with a non-zero exit."""
import io
import re
import subprocess
import sys

import pytest

from ascend_vllm_fleet import cli
from twin_fleet import DEFAULT_CONTAINER

pytestmark = pytest.mark.docker
A, B, BAD = "npu-a", "npu-b", "cli-bad"  # the shared pair, and its host with a driver too old


@pytest.fixture
def fleet(shared_pair):
    """The shared pair with its bad host in the inventory."""
    shared_pair.write(hosts=[A, B, BAD])
    return shared_pair


def run(*argv):
    out = io.StringIO()
    args = cli.build_parser().parse_args(list(argv))
    extravars, report_dir = cli.playbook_vars(args)
    return cli.run_playbook(args, cli.PLAYBOOKS[args.command], extravars, out=out, report_dir=report_dir), \
        out.getvalue()


def test_every_subcommand_has_help_with_examples():
    for command in ("deploy", "verify", "bench", "report", "teardown"):
        result = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", command, "--help"],
                                stdout=subprocess.PIPE, universal_newlines=True, check=True)
        assert "examples:" in result.stdout and "ascend-vllm-fleet %s" % command in result.stdout


def test_missing_inventory_is_named_before_anything_runs(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "hosts.yml"
    assert cli.main(["deploy", "-i", str(missing)]) == 2
    assert "inventory %s not found" % missing in capsys.readouterr().err


def test_deploy_names_the_bad_host_and_exits_non_zero(fleet):
    inventory = str(fleet.inventory)
    code, output = run("deploy", "-i", inventory)
    assert code == 1
    table = output.split("\n\n")[1]
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert rows[BAD].split()[1] == "FAILED" and "driver version: found 24.1.rc2.2" in rows[BAD]
    assert rows[A].split()[1] == "ok" and rows[B].split()[1] == "ok"
    assert "[%s] ascend_preflight: Gather the NPU facts" % A in output  # the live view
    assert "artifacts: " in output


def test_verify_then_bench_on_the_good_hosts(fleet, tmp_path):
    inventory = str(fleet.inventory)
    good = "%s,%s" % (A, B)
    verified = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", "verify", "-i", inventory, "-l", good],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert verified.returncode == 0, verified.stdout
    code, output = run("bench", "-i", inventory, "-l", good, "--preset", "quick",
                       "-e", "vllm_bench_reports_dir=%s" % tmp_path)
    assert code == 0, output
    (report_dir,) = list(tmp_path.iterdir())  # the folder the command named, inside vllm_bench_reports_dir
    assert "report: %s (24 groups, 2 instance(s)" % (report_dir / "report.html") in output
    assert re.search(r"\[%s\] %s: group \d+/12 \(\d+x\d+, max_tokens \d+, concurrency \d+\): \d+/8 requests"
                     % (re.escape(A), DEFAULT_CONTAINER), output), output


def test_artifacts_hold_no_secret(fleet):
    inventory = str(fleet.inventory)
    code, output = run("deploy", "-i", inventory, "-l", B, "--check", "-e", "fleet_api_key=sk-cli-secret")
    artifacts = output.rsplit("artifacts: ", 1)[1].strip()
    found = subprocess.run(["grep", "-rl", "sk-cli-secret", artifacts], stdout=subprocess.PIPE,
                           universal_newlines=True)
    assert found.returncode == 1, "secret written to %s (grep exit %d)" % (found.stdout, found.returncode)


def test_teardown_of_a_host_that_runs_nothing_of_ours_succeeds(fleet):
    assert cli.main(["teardown", "-i", str(fleet.inventory), "-l", BAD]) == 0
    assert fleet[BAD].docker("ps", "-aq").stdout.split() == []
