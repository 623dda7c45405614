"""A slice of an AWX sliced job (a job of the workflow AWX makes for the slices and names after the job template: the
extra variables awx_workflow_job_name and awx_job_template_name are equal) runs only what each host does alone:
the phases preflight, runtime, image and model, and the playbooks made of such phases. Anything that reads or
changes the fleet as a whole (the server phase's drains, the gateway, monitoring, reports) is refused by the settings
check every playbook starts with, before any host is reached. The hosts here refuse connections: a run the check lets
through fails at its first login instead."""
import subprocess

import pytest

from conftest import REPO, venv_tool

# Port 9 on loopback: nothing listens, so a login fails at once.
INVENTORY = ("[ascend]\nnpu-1 ansible_host=127.0.0.1 ansible_port=9\nnpu-2 ansible_host=127.0.0.1 ansible_port=9\n"
             "[gateway]\ngw-1 ansible_host=127.0.0.1 ansible_port=9\n")
REFUSAL = "as each slice of a sliced job does"
# What AWX gives each slice's job (and any job of a workflow): the workflow's name and the job template's.
SLICE = ("-e", "awx_workflow_job_name=deploy", "-e", "awx_job_template_name=deploy", "-e", "awx_job_id=42")


def run(tmp_path, playbook, *args):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    done = subprocess.run([venv_tool("ansible-playbook"), "-i", str(inventory), playbook,
                           "-e", "fleet_api_key=not-a-secret"] + list(args), cwd=str(REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False, timeout=300)
    return done.returncode, done.stdout


@pytest.mark.parametrize("playbook,args", [
    ("site.yml", ()),
    ("site.yml", ("--tags", "server")),
    ("site.yml", ("--tags", "preflight,gateway")),
    ("playbooks/gateway.yml", ()),
    ("playbooks/benchmark.yml", ()),
    ("playbooks/doctor.yml", ()),
], ids=["site", "server", "preflight-and-gateway", "gateway", "benchmark", "doctor"])
def test_a_slice_of_what_spans_the_fleet_is_refused_before_any_host_is_reached(tmp_path, playbook, args):
    code, output = run(tmp_path, playbook, *SLICE + args)
    assert code != 0
    assert "This AWX job runs in a workflow named as its job template (deploy)" in output, output[-3000:]
    assert "Set Job Slicing to 1 on this job template" in output, output[-3000:]
    assert "UNREACHABLE" not in output, output[-3000:]


@pytest.mark.parametrize("playbook,args", [
    ("site.yml", ("--tags", "preflight")),
    ("site.yml", ("--tags", "runtime,image,model")),
    ("playbooks/preflight.yml", ()),
    ("playbooks/teardown.yml", ()),
    ("playbooks/host_tuning.yml", ()),
], ids=["preflight-tag", "host-phases", "preflight", "teardown", "host-tuning"])
def test_a_slice_of_what_each_host_does_alone_goes_on_to_the_hosts(tmp_path, playbook, args):
    code, output = run(tmp_path, playbook, *SLICE + args)
    assert REFUSAL not in output, output[-3000:]
    assert code != 0 and "UNREACHABLE" in output, output[-3000:]


@pytest.mark.parametrize("args", [
    (),
    ("-e", "awx_job_template_name=deploy", "-e", "awx_job_id=42"),
    ("-e", "awx_workflow_job_name=nightly", "-e", "awx_job_template_name=deploy", "-e", "awx_job_id=42"),
], ids=["no-awx", "awx-job", "in-a-workflow-of-its-own"])
def test_a_job_that_is_no_slice_is_not_refused(tmp_path, args):
    code, output = run(tmp_path, "site.yml", *args)
    assert REFUSAL not in output, output[-3000:]
    assert code != 0 and "UNREACHABLE" in output, output[-3000:]
