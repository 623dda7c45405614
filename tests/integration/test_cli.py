"""The ascend-vllm-fleet command on the twin: deploy, verify, bench, and a bad host named with a non-zero exit."""
import io
import re
import subprocess
import sys

import pytest

from ascend_vllm_fleet import cli
from twin.lifecycle import Twin
from twin_fleet import Fleet

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    assert Twin().registry_answers(), "the twin's registry is not up: run `scripts/dev twin up` first"
    fleet = Fleet(tmp_path_factory.mktemp("cli"), extra_hosts={"cli-bad": {"twin_profile": "old_driver_24"}})
    yield fleet
    cli.main(["teardown", "-i", str(fleet.inventory_dir / "hosts.yml")])


def run(*argv):
    out = io.StringIO()
    args = cli.build_parser().parse_args(list(argv))
    extravars = cli.extra_vars(getattr(args, "extra_vars", None))
    if args.command == "bench":
        extravars.setdefault("vllm_bench_preset", args.preset)
    return cli.run_playbook(args, cli.PLAYBOOKS[args.command], extravars, out=out), out.getvalue()


def test_every_subcommand_has_help_with_examples():
    for command in ("deploy", "verify", "bench", "report", "teardown"):
        result = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", command, "--help"],
                                stdout=subprocess.PIPE, universal_newlines=True, check=True)
        assert "examples:" in result.stdout and "ascend-vllm-fleet %s" % command in result.stdout


def test_deploy_names_the_bad_host_and_exits_non_zero(fleet):
    inventory = str(fleet.inventory_dir / "hosts.yml")
    code, output = run("deploy", "-i", inventory)
    assert code == 1
    table = output.split("\n\n")[1]
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert rows["cli-bad"].split()[1] == "FAILED" and "driver version: found 24.1.rc2.2" in rows["cli-bad"]
    assert rows[fleet.a].split()[1] == "ok" and rows[fleet.b].split()[1] == "ok"
    assert "[%s] ascend_preflight: Gather the NPU facts" % fleet.a in output  # the live view
    assert "artifacts: " in output


def test_verify_then_bench_on_the_good_hosts(fleet, tmp_path):
    inventory = str(fleet.inventory_dir / "hosts.yml")
    good = "%s,%s" % (fleet.a, fleet.b)
    verified = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", "verify", "-i", inventory, "-l", good],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert verified.returncode == 0, verified.stdout
    code, output = run("bench", "-i", inventory, "-l", good, "--preset", "quick",
                       "-e", "vllm_bench_reports_dir=%s" % tmp_path)
    assert code == 0, output
    assert "report: %s" % tmp_path in output and "(24 groups, 2 instance(s)" in output
    assert re.search(r"\[%s\] dep-\w+-a: group \d+/12 \(\d+x\d+, max_tokens \d+, concurrency \d+\): \d+/8 requests"
                     % re.escape(fleet.a), output), output


def test_artifacts_hold_no_secret(fleet):
    inventory = str(fleet.inventory_dir / "hosts.yml")
    code, output = run("deploy", "-i", inventory, "-l", fleet.b, "--check", "-e", "vllm_server_api_key=sk-cli-secret")
    artifacts = output.rsplit("artifacts: ", 1)[1].strip()
    found = subprocess.run(["grep", "-rl", "sk-cli-secret", artifacts], stdout=subprocess.PIPE,
                           universal_newlines=True)
    assert found.stdout == "", "secret written to %s" % found.stdout
