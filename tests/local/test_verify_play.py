"""playbooks/verify.yml on this machine, without Docker (tests/verified_host.py): one run for every host, what it
found on each and why a host could not be read; the settings the plan does not hold taken from -e as a deploy takes
them; the collection's name for it; a host that never answers ended at its bound; and the command that runs it,
`ascend-vllm-fleet verify`, with its verdict per host and its exit code (the playbook against twin fleets:
tests/integration/test_deploy.py)."""
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest
from fake_vllm import server  # noqa: F401  (the fixture)
from verified_host import NAME, ServedHost

from conftest import REPO, run_playbook, venv_tool

PLAY = "Verify that every host serves what its deploy recorded"


def inventory(folder, **settings):
    """localhost, with settings, and a host whose SSH port refuses connections."""
    path = folder / "hosts.yml"
    path.write_text(json.dumps({"all": {"children": {"ascend": {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                  "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_become": False}},
        "vars": dict({"fleet_api_key": "", "fleet_answer_check": "none"}, **settings)}}}}))
    return path


@pytest.fixture
def served(tmp_path, server):  # noqa: F811
    """localhost serving its recorded plan (alone in the inventory's ascend group with `gone`)."""
    host = ServedHost(tmp_path / "host", int(server.rsplit(":", 1)[1]), host="localhost")
    return host, inventory(tmp_path, **host.paths())


def verify(folder, hosts, *args):
    return run_playbook(folder / ("run-%d" % time.monotonic_ns()), hosts, "playbooks/verify.yml", *args)


def test_one_run_reads_every_host_and_names_why_each_failed(tmp_path):
    hosts = inventory(tmp_path, fleet_plan_file=str(tmp_path / "plan.json"), fleet_npu_smi=str(tmp_path / "none"))
    run = verify(tmp_path, hosts)
    assert run.rc != 0 and run.failed_hosts() == ["localhost"] and list(run.stats["dark"]) == ["gone"], run.stats
    text = run.failure_text("localhost")
    assert "localhost: no serving plan at %s, expected the one the deploy records" % (tmp_path / "plan.json") in text
    assert "localhost: npu-smi is not ready" in text, text


def test_a_host_that_serves_its_plan_passes_and_extra_vars_set_what_is_expected(served, tmp_path):
    host, hosts = served
    run = verify(tmp_path, hosts, "--limit", "localhost")
    assert run.rc == 0 and run.changed() == 0, run.stdout
    (result,) = run.results("Check the host and each instance against the plan its deploy recorded").values()
    assert result["verified"] and result["checks"] == 23, result
    # What a deploy with this -e runs, over the inventory and the role's default, as Ansible ranks them.
    run = verify(tmp_path, hosts, "--limit", "localhost", "-e", "vllm_server_restart_policy=always")
    assert run.rc != 0
    assert "localhost, instance %s: restart policy unless-stopped, expected always" % NAME in run.failure_text(
        "localhost"), run.stdout
    # It only reads: check mode runs it for real.
    host.serve(State={"Status": "exited", "Running": False, "StartedAt": "2026-12-04T14:00:00Z"})
    run = verify(tmp_path, hosts, "--limit", "localhost", "--check")
    assert run.rc != 0 and "localhost, instance %s: container is exited, expected running" % NAME in run.failure_text(
        "localhost"), run.stdout


def test_the_collection_runs_it_by_its_name(served, tmp_path):
    _host, hosts = served
    shown = subprocess.run([venv_tool("ansible-playbook"), "-i", str(hosts), "ascend.fleet.verify", "-l", "localhost"],
                           cwd=str(tmp_path), env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    assert shown.returncode == 0 and "PLAY [%s]" % PLAY in shown.stdout, shown.stdout


def test_a_host_that_never_answers_ends_at_its_bound_naming_it(tmp_path):
    hanging, pid_file = tmp_path / "python-that-hangs", tmp_path / "hanging.pid"
    hanging.write_text("#!/bin/sh\necho $$ > %s\nexec sleep 600\n" % pid_file)
    hanging.chmod(0o755)
    hosts = inventory(tmp_path, fleet_plan_file=str(tmp_path / "plan.json"))
    started = time.monotonic()
    try:
        run = verify(tmp_path, hosts, "--limit", "localhost", "-e", "ansible_python_interpreter=%s" % hanging,
                     "-e", "vllm_server_verify_timeout=10")
    finally:
        # The hanging "Python" outlives the run unless the run's own timeout ended it, as it may.
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), 9)
    assert time.monotonic() - started < 120
    assert run.rc != 0 and "Timed out after 10 second(s)" in run.failure_text("localhost"), run.stdout


def command(hosts, *args):
    return subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", "verify", "-i", str(hosts)] + list(args),
                          cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=300)


def test_the_command_prints_each_hosts_verdict_and_exits_non_zero_when_one_fails(served):
    host, hosts = served
    passed = command(hosts, "-l", "localhost")
    assert passed.returncode == 0, passed.stdout
    assert "\nlocalhost: verified: 1 instance(s), 23 checks passed\n" in passed.stdout, passed.stdout
    host.serve(HostConfig={"RestartPolicy": {"Name": "no"}, "Devices": []})
    failed = command(hosts, "-e", "fleet_driver_version=25.5.1")
    assert failed.returncode != 0
    # The table, the verdicts, then where the artifacts are.
    table, verdicts = failed.stdout.strip("\n").split("\n\n")[-3:-1]
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]}
    assert rows == {"localhost": "FAILED", "gone": "UNREACHABLE"}, failed.stdout
    verdict = verdicts.splitlines()
    assert verdict[0] == "localhost: 3 of 23 checks failed", failed.stdout
    assert [line.split(". Fix: ")[0] for line in verdict[1:]] == [
        "  localhost: driver is 25.5.2, expected 25.5.1",
        "  localhost, instance %s: restart policy no, expected unless-stopped" % NAME,
        "  localhost, instance %s: maps no chip, expected its planned chips %s" % (NAME, " ".join(host.chips))]
