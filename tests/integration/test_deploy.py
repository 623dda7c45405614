"""site.yml deploys twin hosts over SSH: idempotence, rollback, layouts, errors, the verify suite, teardown.

Uses two private twin hosts (own containers, engines and inventory) so the demo fleet is left alone; each
host's engine pulls the stand-in image from the twin's registry, which `scripts/dev test` brings up.
"""
import json
import os
import re
import uuid

import pytest
import requests

from twin import hosts
from twin_fleet import DEFAULT_CONTAINER as NAME
from twin_fleet import DEFAULT_PORT as PORT
from twin_fleet import PlayFleet

pytestmark = pytest.mark.docker
MODEL = "Qwen3-VL-8B-Instruct"
A, B = "npu-a", "npu-b"
CONFIG_DIR = "/etc/vllm-ascend"  # the role's default, as on a real host


def serves(host, port=PORT, api_key=None):
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    reply = requests.get(host.url(port) + "/v1/models", headers=headers, timeout=5)
    return reply.status_code == 200 and [m["id"] for m in reply.json()["data"]] == [MODEL]


def container_ids(fleet):
    return {name: fleet[name].inspect(NAME)["Id"] for name in fleet.hosts}


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
    fleet = PlayFleet(tmp_path_factory.mktemp("deploy"), {A: "seed_duo4", B: "duo2"})
    yield fleet
    fleet.down()


@pytest.fixture(scope="module")
def deployed(fleet):
    run = fleet.play(preflight=True)
    assert run.rc == 0, run.stdout
    return run


def test_fresh_deploy_serves_then_repeats_change_nothing(fleet, deployed):
    ids = container_ids(fleet)
    for name in fleet.hosts:
        assert serves(fleet[name]), name
        assert fleet[name].inspect(NAME)["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    again = fleet.play()
    assert again.rc == 0 and again.changed() == 0, again.stdout
    check = fleet.play("--check", "--diff")
    assert check.rc == 0 and check.changed() == 0, check.stdout
    assert container_ids(fleet) == ids


def test_each_host_pulled_the_image_itself_from_the_mirror(fleet, deployed):
    for name in fleet.hosts:
        images = fleet[name].docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
        assert images == ["twin-registry:5000/ascend/vllm-ascend:v0.18.0rc1-310p"], (name, images)
        assert json.loads(fleet[name].read_text("/etc/docker/daemon.json"))["insecure-registries"] == [
            "twin-registry:5000"]


def test_changed_variable_replaces_only_the_affected_container(fleet, deployed):
    before = container_ids(fleet)
    check = fleet.play("--check", "--diff", **{A: {"vllm_server_max_model_len": 4096}})
    assert check.rc == 0 and "--max-model-len 4096" in check.stdout
    assert container_ids(fleet) == before, "--check changed a container"
    run = fleet.play(**{A: {"vllm_server_max_model_len": 4096}})
    assert run.rc == 0, run.stdout
    after = container_ids(fleet)
    assert after[A] != before[A] and after[B] == before[B]
    assert "4096" in fleet[A].inspect(NAME)["Args"]
    assert serves(fleet[A])
    assert fleet.play().rc == 0  # back to the inventory's settings


def test_bad_change_fails_with_the_servers_error_and_the_previous_container_serves(fleet, deployed):
    before = fleet[B].inspect(NAME)["Id"]
    run = fleet.play(**{B: {"vllm_server_dtype": "bfloat16"}})
    assert run.rc != 0 and run.failed_hosts() == [B]
    text = failure_text(run, B)
    assert "does not support dtype bfloat16" in text, text
    assert "The previous container is serving again" in text
    restored = fleet[B].inspect(NAME)
    assert restored["Id"] == before and restored["State"]["Running"]
    assert serves(fleet[B])
    assert fleet[B].inspect(NAME + "-previous") is None
    assert serves(fleet[A]), "the other host must be untouched"


def test_per_card_layout_runs_one_instance_per_card(fleet, deployed):
    run = fleet.play(**{A: {"vllm_server_layout": "per_card"}})
    assert run.rc == 0, run.stdout
    assert fleet[A].inspect(NAME) is None, "the single-layout container must be gone"
    for index, npu_id in enumerate([1, 2, 4, 5]):
        container = fleet[A].inspect("%s-npu%d" % (NAME, npu_id))
        davinci = sorted(device["PathInContainer"] for device in container["HostConfig"]["Devices"]
                         if device["PathInContainer"][len("/dev/davinci"):].isdigit())
        assert davinci == ["/dev/davinci%d" % (2 * index), "/dev/davinci%d" % (2 * index + 1)]
        assert serves(fleet[A], PORT + index)
    back = fleet.play()
    assert back.rc == 0 and serves(fleet[A])
    assert fleet[A].inspect("%s-npu1" % NAME) is None


def test_api_key_stays_in_a_root_only_file(fleet, deployed):
    key = "sk-" + uuid.uuid4().hex
    run = fleet.play(**{B: {"fleet_api_key": key}})
    assert run.rc == 0, run.stdout
    env_file = "%s/%s.env" % (CONFIG_DIR, NAME)
    assert fleet[B].mode(env_file) == 0o600
    assert key not in fleet[B].read_text("%s/%s.sh" % (CONFIG_DIR, NAME))
    assert key not in run.stdout and all(key not in json.dumps(event) for event in run.events)
    assert not serves(fleet[B]) and serves(fleet[B], api_key=key)
    code, output = fleet.verify()  # the inventory now holds the key: the verify suite's probe uses it
    assert code == 0, output
    assert key not in output
    assert fleet.play().rc == 0 and not fleet[B].exists(env_file)


def test_missing_shard_is_named(fleet, deployed):
    shard = fleet[B].root / "data/models" / MODEL / "model-00003-of-00004.safetensors"
    os.rename(shard, str(shard) + ".away")
    try:
        run = fleet.play("--limit", B, "--tags", "model")
    finally:
        os.rename(str(shard) + ".away", shard)
    assert run.rc != 0
    text = failure_text(run, B)
    assert "is incomplete" in text and "missing: model-00003-of-00004.safetensors" in text, text


def test_incomplete_model_is_staged_from_the_controller(fleet, deployed, tmp_path):
    source = tmp_path / MODEL
    hosts.build_model(source)
    shard = fleet[B].root / "data/models" / MODEL / "model-00002-of-00004.safetensors"
    open(shard, "w").close()  # an interrupted copy leaves an empty shard
    run = fleet.play("--limit", B, "--tags", "model", "-e", "model_weights_source=controller",
                     "-e", "model_weights_controller_dir=%s" % source)
    assert run.rc == 0, run.stdout
    assert os.path.getsize(shard) > 0 and run.changed() > 0
    again = fleet.play("--limit", B, "--tags", "model", "-e", "model_weights_source=controller",
                       "-e", "model_weights_controller_dir=%s" % source)
    assert again.rc == 0 and again.changed() == 0


def test_unreachable_registry_is_explained(fleet, deployed):
    run = fleet.play("--limit", B, "--tags", "image", "-e", "fleet_image_registry_mirror=127.0.0.1:9",
                     "-e", "vllm_image_pull_retries=2", "-e", "vllm_image_pull_delay=0.1")
    assert run.rc != 0
    text = failure_text(run, B)
    assert "could not pull 127.0.0.1:9/ascend/vllm-ascend:v0.18.0rc1-310p after 2 attempts" in text, text
    assert "fleet_image_registry_mirror" in text and "vllm_image_offline_tarball" in text


def test_digest_pin_catches_another_image(fleet, deployed):
    wrong = "sha256:" + "0" * 64
    run = fleet.play("--limit", B, "--tags", "image", "-e", "vllm_image_digest=%s" % wrong)
    assert run.rc != 0
    text = failure_text(run, B)
    assert "its digests are" in text and wrong in text and "the tag now points at another image" in text, text


def test_absent_image_and_absent_offline_archive_is_explained(fleet, deployed, tmp_path):
    archive = tmp_path / "vllm-ascend-v9.tar"
    run = fleet.play("--limit", B, "--tags", "image", "-e", "fleet_image_version=v9.9.9",
                     "-e", "vllm_image_offline_tarball=%s" % archive)
    assert run.rc != 0
    text = failure_text(run, B)
    assert "offline archive %s does not exist on the controller" % archive in text, text


def test_benchmark_playbook_reports_both_hosts(fleet, deployed, tmp_path):
    run = fleet.play("-e", "vllm_bench_reports_dir=%s" % tmp_path, playbook="playbooks/benchmark.yml")
    assert run.rc == 0, run.stdout
    (report_dir,) = list(tmp_path.iterdir())
    assert sorted(p.name for p in (report_dir / "raw").iterdir()) == [A, B]
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
    # The results stay on each host at the role's default folder, as an operator finds them.
    assert fleet[A].exec("sh", "-c", "ls /var/lib/vllm-bench/*.jsonl").stdout.strip()


def test_verify_suite_passes_then_names_what_was_changed_by_hand(fleet, deployed):
    fleet.write()
    code, output = fleet.verify()
    assert code == 0, output
    fleet[B].docker("stop", NAME)
    code, output = fleet.verify()
    assert code != 0 and "%s, instance %s: container is exited" % (B, NAME) in output, output
    # Re-create it by hand with one chip fewer, from its own rendered script, as an operator would on the host.
    script = fleet[B].read_text("%s/%s.sh" % (CONFIG_DIR, NAME))
    lines = [line for line in script.splitlines(True) if "/dev/davinci3:" not in line]
    fleet[B].docker("rm", "-f", NAME)
    fleet[B].exec("sh", "-c", "".join(lines))
    code, output = fleet.verify()
    assert code != 0, output
    assert re.search(r"%s, instance %s: maps \[[^\]]*\], planned \[[^\]]*/dev/davinci3'" % (
        re.escape(B), re.escape(NAME)), output), output
    restored = fleet.play()
    assert restored.rc == 0, restored.stdout
    assert fleet.verify()[0] == 0


def test_teardown_leaves_nothing_of_ours(fleet, deployed):
    run = fleet.play(playbook="playbooks/teardown.yml")
    assert run.rc == 0, run.stdout
    for name in fleet.hosts:
        labelled = fleet[name].docker("ps", "-aq", "--filter", "label=ascend-vllm-fleet.host=%s" % name).stdout
        assert labelled.split() == []
        assert not fleet[name].exists(CONFIG_DIR)
        assert (fleet[name].root / "data/models" / MODEL / "config.json").exists()
