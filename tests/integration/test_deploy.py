"""site.yml deploys twin hosts with real Docker and the twin's registry: idempotence, rollback, layouts, errors.

Uses private twin hosts (own roots, container names and ports) so the shared twin's demo is left alone; the
image comes from the shared twin's registry, which `scripts/dev test` brings up.
"""
import json
import os
import re
import stat
import subprocess
import sys
import uuid

import pytest
import requests

from conftest import REPO
from twin import hosts
from twin.lifecycle import Twin
from twin_fleet import Fleet

pytestmark = pytest.mark.docker
MODEL = "Qwen3-VL-8B-Instruct"


def inspect(name):
    result = subprocess.run(["docker", "container", "inspect", name], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, universal_newlines=True)
    return json.loads(result.stdout)[0] if result.returncode == 0 else None


def serves(port, api_key=None):
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    reply = requests.get("http://127.0.0.1:%d/v1/models" % port, headers=headers, timeout=5)
    return reply.status_code == 200 and [m["id"] for m in reply.json()["data"]] == [MODEL]


def failure_text(run, host):
    failed = [result for event_task, result in run_failures(run) if result.get("_host") == host]
    return "\n".join(json.dumps(result, ensure_ascii=False) for result in failed)


def run_failures(run):
    for event in run.events:
        if event.get("event") == "runner_on_failed" and not event["event_data"].get("ignore_errors"):
            data = event["event_data"]
            yield data.get("task"), dict(data.get("res") or {}, _host=data.get("host"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    assert Twin().registry_answers(), "the twin's registry is not up: run `scripts/dev twin up` first"
    fleet = Fleet(tmp_path_factory.mktemp("deploy"))
    yield fleet
    fleet.play(playbook="playbooks/teardown.yml")


@pytest.fixture(scope="module")
def deployed(fleet):
    run = fleet.play(preflight=True)
    assert run.rc == 0, run.stdout
    return run


def test_fresh_deploy_serves_then_repeats_change_nothing(fleet, deployed):
    ids = {host: inspect(fleet.name(host))["Id"] for host in fleet.hosts}
    for host in fleet.hosts:
        assert serves(fleet.port(host)), host
        assert inspect(fleet.name(host))["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    again = fleet.play()
    assert again.rc == 0 and again.changed() == 0, again.stdout
    check = fleet.play("--check", "--diff")
    assert check.rc == 0 and check.changed() == 0, check.stdout
    assert {host: inspect(fleet.name(host))["Id"] for host in fleet.hosts} == ids


def test_changed_variable_replaces_only_the_affected_container(fleet, deployed):
    before = {host: inspect(fleet.name(host))["Id"] for host in fleet.hosts}
    check = fleet.play("--check", "--diff", **{fleet.a: {"vllm_server_max_model_len": 4096}})
    assert check.rc == 0 and "--max-model-len 4096" in check.stdout
    assert {host: inspect(fleet.name(host))["Id"] for host in fleet.hosts} == before, "--check changed a container"
    run = fleet.play(**{fleet.a: {"vllm_server_max_model_len": 4096}})
    assert run.rc == 0, run.stdout
    after = {host: inspect(fleet.name(host))["Id"] for host in fleet.hosts}
    assert after[fleet.a] != before[fleet.a] and after[fleet.b] == before[fleet.b]
    assert "4096" in inspect(fleet.name(fleet.a))["Args"]
    assert serves(fleet.port(fleet.a))
    assert fleet.play().rc == 0  # back to the inventory's settings


def test_bad_change_fails_with_the_servers_error_and_the_previous_container_serves(fleet, deployed):
    before = inspect(fleet.name(fleet.b))["Id"]
    run = fleet.play(**{fleet.b: {"vllm_server_dtype": "bfloat16"}})
    assert run.rc != 0 and run.failed_hosts() == [fleet.b]
    text = failure_text(run, fleet.b)
    assert "does not support dtype bfloat16" in text, text
    assert "The previous container is serving again" in text
    restored = inspect(fleet.name(fleet.b))
    assert restored["Id"] == before and restored["State"]["Running"]
    assert serves(fleet.port(fleet.b))
    assert inspect(fleet.name(fleet.b) + "-previous") is None
    assert serves(fleet.port(fleet.a)), "the other host must be untouched"


def test_per_card_layout_runs_one_instance_per_card(fleet, deployed):
    run = fleet.play(**{fleet.a: {"vllm_server_layout": "per_card"}})
    assert run.rc == 0, run.stdout
    assert inspect(fleet.name(fleet.a)) is None, "the single-layout container must be gone"
    for index, npu_id in enumerate([1, 2, 4, 5]):
        container = inspect("%s-npu%d" % (fleet.name(fleet.a), npu_id))
        davinci = sorted(device["PathInContainer"] for device in container["HostConfig"]["Devices"]
                         if device["PathInContainer"][len("/dev/davinci"):].isdigit())
        assert davinci == ["/dev/davinci%d" % (2 * index), "/dev/davinci%d" % (2 * index + 1)]
        assert serves(fleet.port(fleet.a) + index)
    back = fleet.play()
    assert back.rc == 0 and serves(fleet.port(fleet.a))
    assert inspect("%s-npu1" % fleet.name(fleet.a)) is None


def verify(fleet):
    """The verify suite, run exactly as an operator runs it against an inventory."""
    result = subprocess.run([sys.executable, "-m", "pytest", "tests/verify", "--hosts=ansible://ascend",
                             "--ansible-inventory=%s" % (fleet.inventory_dir / "hosts.yml"), "-p", "no:cacheprovider",
                             "-q"], cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=600)
    return result.returncode, result.stdout


def test_api_key_stays_in_a_root_only_file(fleet, deployed):
    key = "sk-" + uuid.uuid4().hex
    run = fleet.play(**{fleet.b: {"vllm_server_api_key": key}})
    assert run.rc == 0, run.stdout
    config = os.path.join(fleet.root(fleet.b), "etc/vllm-ascend")
    env_file = os.path.join(config, fleet.name(fleet.b) + ".env")
    assert stat.S_IMODE(os.stat(env_file).st_mode) == 0o600
    assert key not in open(os.path.join(config, fleet.name(fleet.b) + ".sh")).read()
    assert key not in run.stdout and all(key not in json.dumps(event) for event in run.events)
    assert not serves(fleet.port(fleet.b)) and serves(fleet.port(fleet.b), api_key=key)
    code, output = verify(fleet)  # the inventory now holds the key: the verify suite's probe uses it
    assert code == 0, output
    assert key not in output
    assert fleet.play().rc == 0 and not os.path.exists(env_file)


def test_missing_shard_is_named(fleet, deployed):
    shard = os.path.join(fleet.root(fleet.b), "data/models", MODEL, "model-00003-of-00004.safetensors")
    os.rename(shard, shard + ".away")
    try:
        run = fleet.play("--limit", fleet.b, "--tags", "model")
    finally:
        os.rename(shard + ".away", shard)
    assert run.rc != 0
    text = failure_text(run, fleet.b)
    assert "is incomplete" in text and "missing: model-00003-of-00004.safetensors" in text, text


def test_incomplete_model_is_staged_from_the_controller(fleet, deployed, tmp_path):
    source = tmp_path / MODEL
    hosts.build_model(source)
    shard = os.path.join(fleet.root(fleet.b), "data/models", MODEL, "model-00002-of-00004.safetensors")
    open(shard, "w").close()  # an interrupted copy leaves an empty shard
    run = fleet.play("--limit", fleet.b, "--tags", "model", "-e", "model_weights_source=controller",
                     "-e", "model_weights_controller_dir=%s" % source)
    assert run.rc == 0, run.stdout
    assert os.path.getsize(shard) > 0 and run.changed() > 0
    again = fleet.play("--limit", fleet.b, "--tags", "model", "-e", "model_weights_source=controller",
                       "-e", "model_weights_controller_dir=%s" % source)
    assert again.rc == 0 and again.changed() == 0


def test_unreachable_registry_is_explained(fleet, deployed):
    run = fleet.play("--limit", fleet.b, "--tags", "image", "-e", "vllm_image_registry_mirror=127.0.0.1:9",
                     "-e", "vllm_image_pull_retries=2", "-e", "vllm_image_pull_delay=0.1")
    assert run.rc != 0
    text = failure_text(run, fleet.b)
    assert "could not pull 127.0.0.1:9/ascend/vllm-ascend:v0.18.0rc1-310p after 2 attempts" in text, text
    assert "vllm_image_registry_mirror" in text and "vllm_image_offline_tarball" in text


def test_digest_pin_catches_another_image(fleet, deployed):
    wrong = "sha256:" + "0" * 64
    run = fleet.play("--limit", fleet.b, "--tags", "image", "-e", "vllm_image_digest=%s" % wrong)
    assert run.rc != 0
    text = failure_text(run, fleet.b)
    assert "its digests are" in text and wrong in text and "the tag now points at another image" in text, text


def test_absent_image_and_absent_offline_archive_is_explained(fleet, deployed, tmp_path):
    archive = tmp_path / "vllm-ascend-v9.tar"
    run = fleet.play("--limit", fleet.b, "--tags", "image", "-e", "vllm_image_version=v9.9.9",
                     "-e", "vllm_image_offline_tarball=%s" % archive)
    assert run.rc != 0
    text = failure_text(run, fleet.b)
    assert "offline archive %s does not exist on the controller" % archive in text, text


def test_benchmark_playbook_reports_both_hosts(fleet, deployed, tmp_path):
    run = fleet.play("-e", "vllm_bench_reports_dir=%s" % tmp_path, playbook="playbooks/benchmark.yml")
    assert run.rc == 0, run.stdout
    (report_dir,) = list(tmp_path.iterdir())
    assert sorted(p.name for p in (report_dir / "raw").iterdir()) == [fleet.a, fleet.b]
    summary = json.loads((report_dir / "summary.json").read_text())
    # The quick preset: 3 image sizes x 2 output lengths x 2 concurrency levels, on each instance.
    assert summary["instances"] == 2 and summary["groups"] == 24 and summary["unreliable_groups"] == []
    assert {(r["image_size"], r["max_tokens"]) for r in summary["recommended"]} == {
        (size, tokens) for size in ("640x480", "1280x720", "1920x1080") for tokens in (32, 256)}
    markdown = (report_dir / "report.md").read_text()
    for chart in ("p95_by_image_size.png", "p95_by_max_tokens.png", "throughput.png", "ttft.png", "instances.png"):
        assert (report_dir / chart).stat().st_size > 1000 and chart in markdown
    lines = (report_dir / "results.csv").read_text().splitlines()
    assert len(lines) == 1 + 24 and lines[0].startswith("host,instance,image_size,max_tokens,concurrency")


def test_verify_suite_passes_then_names_what_was_changed_by_hand(fleet, deployed):
    fleet.write()
    code, output = verify(fleet)
    assert code == 0, output
    name_b = fleet.name(fleet.b)
    subprocess.run(["docker", "stop", name_b], check=True, stdout=subprocess.DEVNULL)
    code, output = verify(fleet)
    assert code != 0 and "%s, instance %s: container is exited" % (fleet.b, name_b) in output, output
    # Re-create it by hand with one chip fewer, from its own rendered script.
    script = os.path.join(fleet.root(fleet.b), "etc/vllm-ascend", name_b + ".sh")
    lines = [line for line in open(script).read().splitlines(True) if "/dev/davinci3:" not in line]
    subprocess.run(["docker", "rm", "-f", name_b], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["sh", "-c", "".join(lines)], check=True, stdout=subprocess.DEVNULL)
    code, output = verify(fleet)
    assert code != 0, output
    assert re.search(r"%s, instance %s: maps \[[^\]]*\], planned \[[^\]]*/dev/davinci3'" % (
        re.escape(fleet.b), re.escape(name_b)), output), output
    restored = fleet.play()
    assert restored.rc == 0, restored.stdout
    assert verify(fleet)[0] == 0


def test_teardown_leaves_nothing_of_ours(fleet, deployed):
    run = fleet.play(playbook="playbooks/teardown.yml")
    assert run.rc == 0, run.stdout
    for host in fleet.hosts:
        labelled = subprocess.run(["docker", "ps", "-aq", "--filter", "label=ascend-vllm-fleet.host=%s" % host],
                                  stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.split()
        assert labelled == []
        assert not os.path.exists(os.path.join(fleet.root(host), "etc/vllm-ascend"))
        assert os.path.exists(os.path.join(fleet.root(host), "data/models", MODEL, "config.json"))
