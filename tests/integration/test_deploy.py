"""site.yml deploys twin hosts over SSH: idempotence, rollback, layouts, errors, the verification, teardown.

Runs on the shared pair (tests/conftest.py): two twin hosts whose engines pulled the stand-in image from the
twin's registry on the session's first deploy. Each test leaves them as that deploy did: a change is put back
by the server phase on the changed host alone (DeployedFleet.restore).
"""
import json
import os
import re
import shlex
import shutil
import stat
import time
import uuid

import pytest
from hub_server import Hub

from ansible_collections.ascend.fleet.plugins.filter import vllm_bench
from twin import hosts, lifecycle
from twin.lifecycle import Twin
from twin.shell import docker
from twin_fleet import CONFIG_DIR, MODEL, serves
from twin_fleet import DEFAULT_CONTAINER as NAME
from twin_fleet import DEFAULT_PORT as PORT

pytestmark = pytest.mark.docker
TAG = "v0.18.0rc1-310p"
IMAGE = "quay.io/ascend/vllm-ascend:" + TAG  # fleet_image: the name the containers run
MIRRORED = "twin-registry:5000/ascend/vllm-ascend:" + TAG  # what the inventory's mirror pulls it by
A, B = "npu-a", "npu-b"


def container_ids(fleet):
    return {name: fleet[name].inspect(NAME)["Id"] for name in fleet.hosts}


@pytest.fixture
def fleet(shared_pair):
    return shared_pair


@pytest.fixture
def deployed(pair):
    """The session's first deploy of the pair, preflight included."""
    return pair.deployed


def test_fresh_deploy_serves_then_repeats_change_nothing(fleet, deployed):
    ids = container_ids(fleet)
    for name in fleet.hosts:
        assert serves(fleet, name), name
        assert fleet[name].inspect(NAME)["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    again = fleet.play(preflight=True)  # the whole of site.yml, as operators run it
    assert again.rc == 0 and again.changed() == 0, again.stdout
    check = fleet.play("--check", "--diff")
    assert check.rc == 0 and check.changed() == 0, check.stdout
    assert container_ids(fleet) == ids


def test_a_fleets_containers_keep_a_bounded_log_and_never_call_out(fleet, deployed):
    """Weeks of request logs or a restart loop would fill the root disk; an offline site's vLLM must not wait on the
    hub or send usage statistics. As the rendered script says, so the container runs."""
    script = fleet[A].read_text("%s/%s.sh" % (CONFIG_DIR, NAME))
    assert "--log-opt max-size=100m" in script and "-e HF_HUB_OFFLINE=1" in script, script
    state = fleet[A].inspect(NAME)
    assert state["HostConfig"]["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "5", "max-size": "100m"}}
    assert {"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1",
            "VLLM_ENGINE_READY_TIMEOUT_S=120"} <= set(state["Config"]["Env"]), state["Config"]["Env"]


def test_each_host_pulled_the_image_itself_from_the_mirror(fleet, deployed):
    for name in fleet.hosts:
        images = fleet[name].docker("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout.splitlines()
        # Pulled by the mirror's name, and named as quay.io names it, which the containers run.
        assert sorted(line.split()[0] for line in images) == [IMAGE, MIRRORED], (name, images)
        assert len({line.split()[1] for line in images}) == 1, (name, images)
        assert fleet[name].inspect(NAME)["Config"]["Image"] == IMAGE
        daemon = json.loads(fleet[name].read_text("/etc/docker/daemon.json"))
        assert daemon["insecure-registries"] == ["twin-registry:5000", "twin-registry:5001", "twin-registry:5002"]
        # The host's own settings (the twin's storage driver and cgroup) are merged, not overwritten.
        assert daemon["storage-driver"] in ("overlay2", "vfs") and daemon["cgroup-parent"]


def test_changed_variable_replaces_only_the_affected_container(fleet, deployed):
    before = container_ids(fleet)
    files_before = rendered_files(fleet, A)
    # The server phase's own check (the whole site.yml in check mode: test_fresh_deploy).
    check = fleet.play("--check", "--diff", "--tags", "server", **{A: {"vllm_server_max_model_len": 4096}})
    assert check.rc == 0 and "--max-model-len 4096" in check.stdout
    assert container_ids(fleet) == before, "--check changed a container"
    assert rendered_files(fleet, A) == files_before, "--check changed the rendered files"
    run = fleet.play(**{A: {"vllm_server_max_model_len": 4096}})
    assert run.rc == 0, run.stdout
    after = container_ids(fleet)
    assert after[A] != before[A] and after[B] == before[B]
    assert "4096" in fleet[A].inspect(NAME)["Args"]
    assert serves(fleet, A)
    assert fleet.restore().rc == 0  # back to the inventory's settings, on npu-a alone


def rendered_files(fleet, name):
    """Every file in the host's config folder, with its mode and content."""
    listing = fleet[name].exec("sh", "-c", "cd %s && for f in * .[!.]*; do [ -f \"$f\" ] && "
                                            "stat -c '%%n %%a' \"$f\" && cat \"$f\"; done; true" % CONFIG_DIR)
    return listing.stdout


def test_bad_change_fails_with_the_servers_error_and_the_previous_container_serves(fleet, deployed):
    before = fleet[B].inspect(NAME)["Id"]
    files_before = rendered_files(fleet, B)
    run = fleet.play("--tags", "server", **{B: {"vllm_server_dtype": "bfloat16"}})
    assert run.rc != 0 and run.failed_hosts() == [B]
    text = run.failure_text(B)
    assert "does not support dtype bfloat16" in text, text
    assert "The previous container is serving again" in text
    restored = fleet[B].inspect(NAME)
    assert restored["Id"] == before and restored["State"]["Running"]
    assert serves(fleet, B)
    assert fleet[B].inspect(NAME + "-previous") is None
    assert rendered_files(fleet, B) == files_before, "the rendered files must be the serving container's again"
    assert serves(fleet, A), "the other host must be untouched"


def test_a_replacement_interrupted_while_waiting_is_put_back_by_the_next_run(fleet, deployed):
    """As Ctrl-C during "Wait until every instance serves" leaves a host: the serving container set aside
    and stopped with its files, and a new one from a bad spec that does not serve."""
    host, script = fleet[B], "%s/%s.sh" % (CONFIG_DIR, NAME)
    files_before = rendered_files(fleet, B)
    good = host.read_text(script)
    host.docker("rename", NAME, NAME + "-previous")
    host.docker("stop", NAME + "-previous")
    host.exec("sh", "-c", "cd %s && mv %s.sh %s.sh.previous && mv %s.env %s.env.previous && cp %s.env.previous %s.env"
              % ((CONFIG_DIR,) + (NAME,) * 6))
    bad = good.replace("--dtype float16", "--dtype bfloat16")
    assert bad != good
    host.exec("sh", "-c", "cat > %s && sh %s" % (script, script), input=bad)

    run = fleet.play("--tags", "server", "--limit", B, **{B: {"vllm_server_dtype": "bfloat16"}})  # the same, again
    assert run.rc != 0 and run.failed_hosts() == [B]
    assert "The previous container is serving again" in run.failure_text(B)
    assert serves(fleet, B) and host.inspect(NAME + "-previous") is None
    assert rendered_files(fleet, B) == files_before
    assert fleet.restore() is None, "the rollback left the host as before the change"
    code, output = fleet.verify(hosts=[B])
    assert code == 0, output


def test_a_previous_container_that_no_longer_serves_is_reported_as_such(fleet, deployed):
    """A rollback can put back a container that cannot serve any more (here a shard lost from the model's disk
    during the change): the failure says so, with the reason, instead of claiming the host serves again."""
    shard = fleet[B].root / "data/models" / MODEL / "model-00004-of-00004.safetensors"
    os.rename(shard, str(shard) + ".away")
    try:
        run = fleet.play("--tags", "server", "--limit", B, **{B: {"vllm_server_max_model_len": 4096}})
    finally:
        os.rename(str(shard) + ".away", shard)
    assert run.rc != 0 and run.failed_hosts() == [B]
    text = run.failure_text(B)
    assert "The previous container was put back but does not serve" in text, text
    assert "The previous container is serving again" not in text
    assert text.count("No such file or directory") >= 2, "both the new and the restored container's reason"
    assert "4096" not in fleet[B].inspect(NAME)["Args"], "the container put back must be the previous one"
    # With its shard back, the server phase finds the container put back serving again.
    assert fleet.play("--tags", "server", "--limit", B).rc == 0 and serves(fleet, B)


def test_per_card_layout_runs_one_instance_per_card(fleet, deployed):
    run = fleet.play("--tags", "server", "--limit", A, **{A: {"vllm_server_layout": "per_card"}})
    assert run.rc == 0, run.stdout
    assert fleet[A].inspect(NAME) is None, "the single-layout container must be gone"
    for index, npu_id in enumerate([1, 2, 4, 5]):
        container = fleet[A].inspect("%s-npu%d" % (NAME, npu_id))
        davinci = sorted(device["PathInContainer"] for device in container["HostConfig"]["Devices"]
                         if device["PathInContainer"][len("/dev/davinci"):].isdigit())
        assert davinci == ["/dev/davinci%d" % (2 * index), "/dev/davinci%d" % (2 * index + 1)]
        assert serves(fleet, A, PORT + index)
    back = fleet.restore()
    assert back.rc == 0 and serves(fleet, A)
    assert fleet[A].inspect("%s-npu1" % NAME) is None


def test_a_fresh_fleet_gets_its_own_key_kept_for_its_operator_only(fleet, deployed):
    key_file = fleet.inventory.parent / "credentials" / "api-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    key = fleet.api_key()
    assert len(key) == 40
    for name in fleet.hosts:
        assert not serves(fleet, name, api_key=""), "%s: /v1 answers without the key" % name
        assert serves(fleet, name, api_key=key)
        assert fleet[name].mode("%s/%s.env" % (CONFIG_DIR, NAME)) == 0o600
        assert fleet[name].mode("%s/.config-hash-salt" % CONFIG_DIR) == 0o600
    salts = {fleet[name].read_text("%s/.config-hash-salt" % CONFIG_DIR) for name in fleet.hosts}
    assert len(salts) == len(fleet.hosts), "each host salts its config-hash labels with a secret of its own"


def test_an_operators_key_stays_out_of_scripts_labels_output_and_process_lists(fleet, deployed):
    key = "sk-" + uuid.uuid4().hex
    run = fleet.play("--limit", B, **{B: {"fleet_api_key": key}})
    assert run.rc == 0, run.stdout
    env_file = "%s/%s.env" % (CONFIG_DIR, NAME)
    assert fleet[B].mode(env_file) == 0o600
    assert key not in fleet[B].read_text("%s/%s.sh" % (CONFIG_DIR, NAME))
    assert key not in json.dumps(fleet[B].inspect(NAME)["Config"]["Labels"])
    assert key not in run.stdout and all(key not in json.dumps(event) for event in run.events)
    assert not serves(fleet, B, api_key="") and serves(fleet, B, api_key=key)
    # The inventory holds the key: the probe uses it.
    code, output, commands = fleet.verify_watching_processes(hosts=[B], **{B: {"fleet_api_key": key}})
    assert code == 0, output
    assert key not in output
    assert commands and not [command for command in commands if key in command], "the key is in a process list"
    assert fleet.restore().rc == 0 and not serves(fleet, B, api_key=key)


def test_an_empty_key_serves_an_open_api_without_an_env_file(fleet, deployed):
    run = fleet.play("--tags", "server", "--limit", B, **{B: {"fleet_api_key": ""}})  # the phase that uses the key
    assert run.rc == 0, run.stdout
    assert serves(fleet, B, api_key="") and not fleet[B].exists("%s/%s.env" % (CONFIG_DIR, NAME))
    assert fleet.restore().rc == 0 and serves(fleet, B) and not serves(fleet, B, api_key="")


def test_missing_shard_is_named(fleet, deployed):
    shard = fleet[B].root / "data/models" / MODEL / "model-00003-of-00004.safetensors"
    os.rename(shard, str(shard) + ".away")
    try:
        run = fleet.play("--limit", B, "--tags", "model")
    finally:
        os.rename(str(shard) + ".away", shard)
    assert run.rc != 0
    text = run.failure_text(B)
    assert "is incomplete" in text and "missing: model-00003-of-00004.safetensors" in text, text


def test_check_mode_reports_what_a_download_or_an_archive_would_do_instead_of_failing(fleet, deployed, tmp_path):
    shard = fleet[B].root / "data/models" / MODEL / "model-00003-of-00004.safetensors"
    os.rename(shard, str(shard) + ".away")
    try:
        download = fleet.play("--check", "--limit", B, "--tags", "model", "-e", "model_weights_source=command",
                              "-e", "model_weights_download_command=true")
        nothing_fills_it = fleet.play("--check", "--limit", B, "--tags", "model")
    finally:
        os.rename(str(shard) + ".away", shard)
    assert download.rc == 0, download.stdout
    assert nothing_fills_it.rc != 0 and "missing: model-00003-of-00004.safetensors" in nothing_fills_it.failure_text(
        B), "check mode must still fail where a real run fails"
    archive = tmp_path / "vllm-ascend-v9.tar"
    archive.write_bytes(b"not loaded in check mode")
    offline = fleet.play("--check", "--limit", B, "--tags", "image", "-e", "fleet_image_version=v9.9.9",
                         "-e", "vllm_image_offline_tarball=%s" % archive)
    assert offline.rc == 0, offline.stdout


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


def test_a_registry_that_needs_a_login_is_pulled_from_with_the_account_and_keeps_no_password(fleet, deployed):
    """The twin's registry behind a login (port 5001) stands in for Huawei SWR: fleet_image_pull_from names it
    whole, vllm_image_registry_* give the account."""
    account = json.loads((Twin().home / lifecycle.LOGIN_FILE).read_text())
    source = "twin-registry:%d/ascend/vllm-ascend:%s" % (lifecycle.REGISTRY_LOGIN_PORT, TAG)
    before = container_ids(fleet)
    fleet[B].docker("rmi", IMAGE)
    settings = {"fleet_image_pull_from": source, "vllm_image_registry_username": account["username"],
                "vllm_image_registry_password": "not-the-password"}
    refused = fleet.play("--tags", "image", "--limit", B, **{B: settings})
    assert refused.rc != 0 and "could not log in to twin-registry:5001 as ops" in refused.failure_text(B)
    assert "not-the-password" not in refused.stdout + json.dumps(refused.events)
    logged = fleet.play("--tags", "image,server", "--limit", B,
                        **{B: dict(settings, vllm_image_registry_password=account["password"])})
    assert logged.rc == 0, logged.stdout
    assert logged.results("Pull the image")[B]["pulled_from"] == source
    assert logged.changed() == 1 and container_ids(fleet) == before
    assert account["password"] not in logged.stdout + json.dumps(logged.events)
    # No password stays on the host: not in the Docker CLI's own config, not in a login folder left behind.
    kept = fleet[B].exec("sh", "-c", "cat /root/.docker/config.json 2>/dev/null; ls -d /tmp/ascend-fleet-docker-* "
                         "2>/dev/null", check=False).stdout
    assert "5001" not in kept and "ascend-fleet-docker-" not in kept
    fleet[B].docker("rmi", source)


def test_a_modelscope_download_with_a_corrupted_file_is_caught_and_fetched_again(fleet, deployed, tmp_path):
    """A hub on this machine speaks ModelScope's file API; the host downloads from it over the twin network into a
    folder of its own (the serving folder stays as the deploy left it)."""
    source = tmp_path / MODEL
    hosts.build_model(source)
    hub = Hub(source, host=Twin().gateway())
    hub.corrupt_once.add("model-00003-of-00004.safetensors")
    folder = fleet[B].root / "data/models/hub-download"
    settings = {B: {"fleet_model_dir": "/data/models/hub-download", "model_weights_source": "modelscope",
                    "model_weights_hub_endpoint": hub.endpoint, "model_weights_hub_revision": "master"}}
    try:
        run = fleet.play("--limit", B, "--tags", "model", **settings)
        again = fleet.play("--limit", B, "--tags", "model", **settings)
    finally:
        hub.close()
        shutil.rmtree(folder, ignore_errors=True)
    assert run.rc == 0, run.stdout
    downloaded = run.results("Download the model from the hub")[B]
    assert sorted(downloaded["downloaded"]) == sorted(hub.files)
    assert [entry.split(" ")[0] for entry in downloaded["refetched"]] == ["model-00003-of-00004.safetensors"]
    assert again.rc == 0 and again.changed() == 0, again.stdout
    assert again.results("Download the model from the hub")[B]["hub_asked"] is False


def test_unreachable_registry_is_explained(fleet, deployed):
    run = fleet.play("--limit", B, "--tags", "image", "-e", "fleet_image_registry_mirror=127.0.0.1:9",
                     "-e", "fleet_image_version=v9.9.9", "-e", "vllm_image_pull_retries=2",
                     "-e", "vllm_image_pull_delay=0.1")
    assert run.rc != 0
    text = run.failure_text(B)
    assert "could not pull 127.0.0.1:9/ascend/vllm-ascend:v9.9.9-310p after 2 attempts" in text, text
    assert "fleet_image_registry_mirror" in text and "vllm_image_offline_tarball" in text


def test_a_switch_from_a_host_style_to_a_prefix_style_mirror_changes_no_container(fleet, deployed):
    """quay.nju.edu.cn stands for quay.io, m.daocloud.io/quay.io is a prefix before its paths: the twin's registry
    serves both ways. Whichever a host pulls from, the containers run quay.io's name."""
    before = container_ids(fleet)
    fleet[B].docker("rmi", IMAGE)  # only the name goes (the mirror's name keeps the image): the host must pull
    prefixed = {B: {"fleet_image_registry_mirror": "twin-registry:5000/quay.io"}}
    run = fleet.play("--tags", "image,server", "--limit", B, **prefixed)
    assert run.rc == 0, run.stdout
    pulled = run.results("Pull the image")[B]
    assert pulled["changed"] and pulled["pulled_from"] == "twin-registry:5000/quay.io/ascend/vllm-ascend:" + TAG
    assert run.changed() == 1, "the pull alone: the server phase changed nothing"
    assert container_ids(fleet) == before
    back = fleet.play("--tags", "image,server", "--limit", B)  # the inventory's host-style mirror
    assert back.rc == 0 and back.changed() == 0, back.stdout
    fleet[B].docker("rmi", "twin-registry:5000/quay.io/ascend/vllm-ascend:" + TAG)


def test_an_image_for_another_chip_is_refused_before_any_container_changes(fleet, deployed):
    """The release's A2 (910B) tag: a 310P would load it, then fail at its first kernel."""
    before = container_ids(fleet)
    run = fleet.play("--tags", "image,server", "--limit", A, **{A: {"fleet_image_tag": "v0.18.0rc1"}})
    assert run.rc != 0
    text = run.failure_text(A)
    assert "is built for SOC_VERSION=ascend910b1" in text and "Fix: use the release's -310p tag" in text
    assert container_ids(fleet) == before
    fleet[A].docker("rmi", "quay.io/ascend/vllm-ascend:v0.18.0rc1", "twin-registry:5000/ascend/vllm-ascend:v0.18.0rc1")


def test_digest_pin_catches_another_image(fleet, deployed):
    wrong = "sha256:" + "0" * 64
    run = fleet.play("--limit", B, "--tags", "image", "-e", "vllm_image_digest=%s" % wrong)
    assert run.rc != 0
    text = run.failure_text(B)
    assert "its digests are" in text and wrong in text and "the tag now points at another image" in text, text


def test_absent_image_and_absent_offline_archive_is_explained(fleet, deployed, tmp_path):
    archive = tmp_path / "vllm-ascend-v9.tar"
    run = fleet.play("--limit", B, "--tags", "image", "-e", "fleet_image_version=v9.9.9",
                     "-e", "vllm_image_offline_tarball=%s" % archive)
    assert run.rc != 0
    text = run.failure_text(B)
    assert "offline archive %s does not exist on the controller" % archive in text, text


def test_benchmark_playbook_reports_both_hosts(fleet, deployed, tmp_path):
    run = fleet.play("-e", "vllm_bench_reports_dir=%s" % tmp_path, playbook="playbooks/benchmark.yml")
    assert run.rc == 0, run.stdout
    (report_dir,) = list(tmp_path.iterdir())
    assert sorted(p.name for p in (report_dir / "raw").iterdir()) == [A, B]
    summary = json.loads((report_dir / "summary.json").read_text())
    # The quick preset: 3 image sizes x 2 output lengths x 2 concurrency levels, on each instance.
    assert summary["instances"] == 2 and summary["groups"] == 24 and summary["unreliable_groups"] == []
    # Each instance answered the known questions right before and after its matrix.
    assert [(entry["answers"], [check["answer_check"] for check in entry["checks"]])
            for entry in summary["answer_checks"]] == [("passed", ["before", "after"])] * 2
    assert {(r["image_size"], r["max_tokens"]) for r in summary["recommended"]} == {
        (size, tokens) for size in ("640x480", "1280x720", "1920x1080") for tokens in (32, 256)}
    markdown = (report_dir / "report.md").read_text()
    # Each host's tuning as measured: the twin's hosts boot untuned, so each setting of the guide differs.
    assert [(entry["host"], entry["differs"]) for entry in summary["host_tuning"]] == [
        (host, ["cpu_governor", "vm.swappiness", "kernel.numa_balancing", "kernel.sched_migration_cost_ns"])
        for host in (A, B)]
    assert "| %s | vm.swappiness | 60 | 0 | **differs** |" % A in markdown
    for chart in ("p95_by_image_size.png", "p95_by_max_tokens.png", "throughput.png", "ttft.png", "instances.png"):
        assert (report_dir / chart).stat().st_size > 1000 and chart in markdown
    lines = (report_dir / "results.csv").read_text().splitlines()
    assert len(lines) == 1 + 24 and lines[0].startswith("host,instance,image_size,max_tokens,concurrency")
    # The results stay on each host at the role's default folder, as an operator finds them.
    assert fleet[A].exec("sh", "-c", "ls /var/lib/vllm-bench/*.jsonl").stdout.strip()


def test_a_resumed_benchmark_runs_no_finished_group_again(fleet, deployed, tmp_path):
    results = "/var/lib/vllm-bench/%s.jsonl" % NAME
    before = fleet[A].read_text(results)
    assert len(before.splitlines()) == 12 + 2  # the groups, and the answer checks before and after them
    run = fleet.play("-e", "vllm_bench_reports_dir=%s" % tmp_path, "-e", "vllm_bench_resume=true",
                     playbook="playbooks/benchmark.yml")
    assert run.rc == 0, run.stdout
    assert fleet[A].read_text(results) == before, "a finished group was measured again"
    (report_dir,) = list(tmp_path.iterdir())
    assert json.loads((report_dir / "summary.json").read_text())["groups"] == 24


def test_a_fresh_benchmark_sets_the_earlier_results_aside(fleet, deployed, tmp_path):
    """The results the resumed run left stay on the host, set aside, when a fresh run starts (a run cut short
    would otherwise lose its groups unread)."""
    results = "/var/lib/vllm-bench/%s.jsonl" % NAME
    before = fleet[A].read_text(results)
    tiny = {"vllm_bench_preset": "tiny", "vllm_bench_presets": {"tiny": {
        "image_sizes": ["640x480"], "max_tokens": [32], "concurrency": [1], "requests_per_group": 2}}}
    settings = tmp_path / "tiny.json"
    settings.write_text(json.dumps(dict(tiny, vllm_bench_reports_dir=str(tmp_path / "reports"))))
    run = fleet.play("--limit", A, "-e", "@%s" % settings, playbook="playbooks/benchmark.yml")
    assert run.rc == 0, run.stdout
    aside = "/var/lib/vllm-bench/" + vllm_bench.vllm_bench_set_aside_pattern(NAME)
    newest = fleet[A].exec("sh", "-c", "ls -t %s" % aside).stdout.split()[0]  # earlier runs' too
    assert fleet[A].read_text(newest) == before
    assert len(fleet[A].read_text(results).splitlines()) == 1 + 2  # the one group, and its answer checks


def test_a_resume_while_an_earlier_run_still_writes_is_refused_and_touches_nothing(fleet, deployed, tmp_path):
    """An earlier benchmark job still appending on the host (here a process holding the results file's lock as a
    run does): a resume would interleave its lines; it is refused at the plan, before any file changes."""
    results = "/var/lib/vllm-bench/%s.jsonl" % NAME
    before = fleet[A].read_text(results)
    hold = ("import fcntl, json, os, time; fd = os.open(%r, os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
            "os.ftruncate(fd, 0); os.write(fd, json.dumps({'pid': os.getpid(), 'started_at': time.time()}).encode()); "
            "time.sleep(120)" % (results + ".lock"))
    fleet[A].exec("sh", "-c", "python3 -c %s >/dev/null 2>&1 & echo $! > /tmp/earlier-run.pid" % shlex.quote(hold))
    try:
        for _ in range(50):
            if fleet[A].exec("cat", results + ".lock", check=False).stdout.startswith("{"):
                break
            time.sleep(0.1)
        run = fleet.play("--limit", A, "-e", "vllm_bench_resume=true", "-e", "vllm_bench_reports_dir=%s" % tmp_path,
                         playbook="playbooks/benchmark.yml")
    finally:
        fleet[A].exec("sh", "-c", "kill $(cat /tmp/earlier-run.pid)", check=False)
    assert run.rc != 0
    text = run.failure_text(A)
    assert "is being written by another run of the benchmark (pid" in text and "kill" in text, text
    assert fleet[A].read_text(results) == before


def test_verification_passes_then_names_what_was_changed_by_hand(fleet, deployed):
    fleet.write()
    code, output = fleet.verify()
    assert code == 0, output
    fleet[B].docker("stop", NAME)
    code, output = fleet.verify(hosts=[B])
    assert code != 0 and "%s, instance %s: container is exited" % (B, NAME) in output, output
    # Re-create it by hand with one chip fewer, from its own rendered script, as an operator would on the host.
    script = fleet[B].read_text("%s/%s.sh" % (CONFIG_DIR, NAME))
    lines = [line for line in script.splitlines(True) if "/dev/davinci3:" not in line]
    fleet[B].docker("rm", "-f", NAME)
    fleet[B].exec("sh", "-c", "".join(lines))
    code, output = fleet.verify(hosts=[B])
    assert code != 0, output
    assert re.search(r"%s, instance %s: maps [^,]*, expected its planned chips [^.]*/dev/davinci3\b" % (
        re.escape(B), re.escape(NAME)), output), output
    restored = fleet.restore()
    assert restored.rc == 0, restored.stdout
    assert fleet.verify(hosts=[B])[0] == 0


PLAN = "%s/plan.json" % CONFIG_DIR


def edit_plan(host, change):
    plan = json.loads(host.read_text(PLAN))
    change(plan)
    host.exec("sh", "-c", "cat > %s" % PLAN, input=json.dumps(plan))


def break_restart_policy(host):
    host.docker("update", "--restart", "no", NAME)


def break_config_hash(host):
    host.exec("sed", "-i", "s/config-hash=[0-9a-f]*/config-hash=0000/", "%s/%s.sh" % (CONFIG_DIR, NAME))


# What the verification must name, planted all at once: it tells every failed check of a host, each in its own
# sentence, so the faults of one host are told apart.
PLANTED = {
    "restart policy": (B, break_restart_policy, "instance %s: restart policy no, expected unless-stopped" % NAME),
    "image": (A, lambda host: edit_plan(host, lambda plan: plan.update(image="quay.io/ascend/vllm-ascend:v9")),
              "instance %s: runs image quay.io/ascend/vllm-ascend:v0.18.0rc1-310p, expected "
              "quay.io/ascend/vllm-ascend:v9" % NAME),
    "port": (A, lambda host: edit_plan(host, lambda plan: plan["instances"][0].update(port=8099)),
             "instance %s: nothing listens on port 8099" % NAME),
    "answer": (B, lambda host: edit_plan(host, lambda plan: plan.update(served_name="Qwen3-VL-235B")),
               "instance %s: does not serve" % NAME),
    "config hash": (B, break_config_hash, "instance %s: config-hash label" % NAME),
}


@pytest.fixture(scope="module")
def planted(pair):
    """"planted" -> the verification's (exit code, output) on the pair with every fault planted, and "after" -> its
    verdict on the pair once they are taken out again."""
    faults = [(pair[host], change) for host, change, _ in PLANTED.values()]
    saved = [(host, {path: host.read_text(path) for path in (PLAN, "%s/%s.sh" % (CONFIG_DIR, NAME))})
             for host in {host for host, _ in faults}]
    for host, change in faults:
        change(host)
    try:
        verdicts = {"planted": pair.verify(hosts=pair.hosts)}
    finally:
        for host, files in saved:
            for path, text in files.items():
                host.exec("sh", "-c", "cat > %s" % path, input=text)
            host.docker("update", "--restart", "unless-stopped", NAME)
    verdicts["after"] = pair.verify(hosts=pair.hosts)
    return verdicts


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_verification_fails_on_each_thing_it_checks(fleet, planted, what):
    host, _, expected = PLANTED[what]
    code, output = planted["planted"]
    assert code != 0 and "%s, %s" % (host, expected) in output, (what, output)
    assert planted["after"][0] == 0, planted["after"][1]


def test_a_failing_batch_stops_the_rollout_before_the_next_host(fleet, deployed):
    before = container_ids(fleet)
    run = fleet.play("--tags", "server", "-e", "'{\"fleet_serial\": 1, \"fleet_max_fail_percentage\": 0}'",
                     **{A: {"vllm_server_dtype": "bfloat16"}, B: {"vllm_server_max_model_len": 4096}})
    assert run.rc != 0 and run.failed_hosts() == [A], run.stdout
    assert container_ids(fleet)[B] == before[B] and "4096" not in fleet[B].inspect(NAME)["Args"], (
        "the rollout went on to the next batch after the first failed")
    assert fleet.restore() is None, "npu-a's rollback left it as before"


def test_an_offline_archive_is_loaded_where_the_image_is_absent(fleet, deployed, tmp_path):
    source = "127.0.0.1:5000/ascend/vllm-ascend:v0.18.0rc1-310p"  # the twin registry, from this machine
    offline = "quay.io/ascend/vllm-ascend:v0.18.0rc1-offline-310p"  # as `docker save` of the image keeps it
    archive = tmp_path / "vllm-ascend-offline.tar"
    docker("pull", "-q", source)
    docker("tag", source, offline)
    try:
        docker("save", "-o", str(archive), offline)
    finally:
        docker("rmi", offline, source)
    offline_run = ("--tags", "image,server", "--limit", B, "-e", "fleet_image_version=v0.18.0rc1-offline",
                   "-e", "vllm_image_offline_tarball=%s" % archive)
    run = fleet.play(*offline_run)
    assert run.rc == 0, run.stdout
    assert fleet[B].inspect(NAME)["Config"]["Image"] == offline and serves(fleet, B)
    again = fleet.play(*offline_run)
    assert again.rc == 0 and again.changed() == 0, again.stdout
    assert fleet.restore().rc == 0
    fleet[B].docker("rmi", offline)


def test_teardown_leaves_nothing_of_ours(fleet, deployed):
    salts = fleet.salts()
    run = fleet.play(playbook="playbooks/teardown.yml")
    assert run.rc == 0, run.stdout
    for name in fleet.hosts:
        labelled = fleet[name].docker("ps", "-aq", "--filter", "label=ascend-vllm-fleet.host=%s" % name).stdout
        assert labelled.split() == []
        assert not fleet[name].exists(CONFIG_DIR)
        assert (fleet[name].root / "data/models" / MODEL / "config.json").exists()
    fleet.put_salts(salts)
    assert fleet.restore().rc == 0


def test_teardown_with_its_documented_flags_removes_the_image_and_the_model_too(fleet, deployed, tmp_path):
    """The playbook's header: -e vllm_teardown_remove_image=true -e vllm_teardown_remove_model=true (strings).
    Nothing lost means only what was asked goes: the instances, their files and rules, the image by every name it
    has, the model folder and no folder above it; the host's lock is let go."""
    host = fleet[B]
    model = host.root / "data/models" / MODEL
    shutil.copytree(str(model), str(tmp_path / "model"), symlinks=True)
    salts = fleet.salts()
    run = fleet.play("--limit", B, "-e", "vllm_teardown_remove_image=true", "-e", "vllm_teardown_remove_model=true",
                     playbook="playbooks/teardown.yml")
    assert run.rc == 0, run.stdout
    assert host.docker("ps", "-aq", "--filter", "label=ascend-vllm-fleet.host=%s" % B).stdout.split() == []
    assert host.docker("image", "inspect", IMAGE, check=False).returncode != 0
    assert host.docker("image", "inspect", MIRRORED, check=False).returncode != 0
    assert not model.exists() and model.parent.exists()
    assert not host.exists(CONFIG_DIR) and not host.exists("/var/lib/ascend-fleet/lock")
    assert "ASCEND-FLEET" not in host.exec("iptables", "-S").stdout
    # Put back: the model from its copy, the image from the mirror, then the instance.
    shutil.copytree(str(tmp_path / "model"), str(model), symlinks=True)
    fleet.put_salts({B: salts[B]})
    again = fleet.play("--tags", "image,server", "--limit", B)
    assert again.rc == 0, again.stdout
    assert serves(fleet, B)
