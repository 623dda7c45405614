"""The ascend-vllm-fleet command on the twin: deploy, verify, bench, and a bad host named with a non-zero exit."""
import io
import re
import subprocess
import sys

import pytest
from readme_commands import readme_block, run_command

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
    assert "[%s] fleet: Gather the NPU facts" % A in output  # the live view (preflight imports the fleet's gather)
    assert "artifacts: " in output


def test_the_command_line_as_written(shared_pair):
    """The README's commands of ascend-vllm-fleet, typed as written with the good hosts' inventory as the default
    one (ANSIBLE_INVENTORY, as Ansible's own tools take it): deploy changes nothing on the deployed pair, verify
    passes, the quick benchmark reports both instances with its live view, the seed's plan runs nothing, and the
    doctor finds both hosts healthy."""
    inventory = str(shared_pair.write(hosts=[A, B]))
    outputs = {}
    for command in readme_block("tests/integration/test_cli.py::test_the_command_line_as_written"):
        ran = run_command(command, env={"ANSIBLE_INVENTORY": inventory})
        assert ran.code == 0, "%s: exit %d\n%s\n%s" % (command, ran.code, ran.stdout[-4000:], ran.stderr[-2000:])
        outputs[command] = ran.stdout
    table = outputs["ascend-vllm-fleet deploy"].split("\n\n")[1]
    assert {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]} == {A: "ok", B: "ok"}, table
    bench = outputs["ascend-vllm-fleet bench --preset quick"]
    assert re.search(r"report: \S+report.html \(24 groups, 2 instance\(s\)", bench), bench[-4000:]
    assert re.search(r"\[%s\] %s: group \d+/12 \(\d+x\d+, max_tokens \d+, concurrency \d+\): \d+/8 requests"
                     % (re.escape(A), DEFAULT_CONTAINER), bench), bench[-4000:]
    plan = outputs["ascend-vllm-fleet bench --preset seed --plan"]
    assert "2880" in plan and "estimated from the seed's 310P timings" in plan, plan[-4000:]
    for host in (A, B):
        assert re.search(r"^%s: healthy\b" % host, outputs["ascend-vllm-fleet doctor"], re.M)


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


def test_verify_expects_what_its_extra_vars_say(fleet):
    """verify -e: the play reads the variable as the host's setting, so a policy the deploy did not set fails, named
    in the host's verdict below the table."""
    verified = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", "verify", "-i", str(fleet.inventory),
                               "-l", A, "-e", "vllm_server_restart_policy=always"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert verified.returncode != 0, verified.stdout
    assert "%s, instance %s: restart policy unless-stopped, expected always" % (A, DEFAULT_CONTAINER) \
        in verified.stdout, verified.stdout[-4000:]
