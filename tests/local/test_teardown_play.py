"""playbooks/teardown.yml on this machine (no Docker: a fake docker CLI that logs its calls), with the flags the
playbook's header documents, and with a model folder that holds no model."""
import json
import sys

import pytest

from conftest import run_playbook

IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
MIRRORED = "m.daocloud.io/quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"  # the name the host pulled it by
FAKE_DOCKER = """#!%s
import json, sys
with open(%r, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "ps":
    print("vllm-ascend-previous")
if sys.argv[1:3] == ["container", "inspect"]:  # both exist, stopped: the records vllm_instance reads
    for name in sys.argv[sys.argv.index("--") + 1:]:
        print(json.dumps({"name": "/" + name, "running": False, "labels": {}, "devices": []}))
if sys.argv[1:3] == ["image", "inspect"]:
    print(json.dumps(%r))
"""


@pytest.fixture
def host(tmp_path):
    """A deployed host's files under tmp_path: plan, rendered script, env file, salt and model folder."""
    config = tmp_path / "etc"
    config.mkdir()
    (config / "plan.json").write_text(json.dumps({"format": 1, "host": "localhost", "image": IMAGE, "instances": [
        {"name": "vllm-ascend", "port": 8000}]}))
    for name in ("vllm-ascend.sh", "vllm-ascend.env", ".config-hash-salt"):
        (config / name).write_text("x\n")
    model = tmp_path / "models" / "Qwen3-VL-8B-Instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model-00001-of-00004.safetensors").write_text("weights")
    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER % (sys.executable, str(tmp_path / "docker-calls.jsonl"), [IMAGE, MIRRORED]))
    docker.chmod(0o755)
    (tmp_path / "hosts.ini").write_text("[ascend]\nlocalhost ansible_connection=local ansible_python_interpreter=%s\n"
                                        % sys.executable)
    settings = {"fleet_config_dir": str(config), "fleet_docker_bin": str(docker), "fleet_model_dir": str(model),
                "fleet_api_key": "", "fleet_lock_file": str(tmp_path / "lock")}
    (tmp_path / "vars.json").write_text(json.dumps(settings))
    return tmp_path


def teardown(host, *flags):
    return run_playbook(host / "run", host / "hosts.ini", "playbooks/teardown.yml", "-e", "@%s" % (host / "vars.json"),
                        *flags)


def docker_calls(host):
    log = host / "docker-calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_documented_flags_remove_containers_image_and_model(host):
    """-e key=value gives strings: "true" must count as true, not end the run on a condition."""
    run = teardown(host, "-e", "vllm_teardown_remove_image=true", "-e", "vllm_teardown_remove_model=true")
    assert run.rc == 0, run.stdout
    calls = docker_calls(host)
    assert ["rm", "--force", "--", "vllm-ascend"] in calls and ["rm", "--force", "--", "vllm-ascend-previous"] in calls
    # The image goes by each of its names: quay.io's, which the containers ran, and the mirror's it was pulled by.
    assert ["rmi", "--", IMAGE, MIRRORED] in calls
    assert not (host / "models" / "Qwen3-VL-8B-Instruct").exists()
    assert not (host / "etc").exists()
    assert (host / "models").exists(), "more than the model folder was removed"


def test_without_flags_the_image_and_the_model_stay(host):
    run = teardown(host)
    assert run.rc == 0, run.stdout
    assert ["rm", "--force", "--", "vllm-ascend"] in docker_calls(host)
    assert not [call for call in docker_calls(host) if call[0] == "rmi"]
    assert (host / "models" / "Qwen3-VL-8B-Instruct" / "config.json").exists()


def test_a_model_folder_that_holds_no_model_is_refused_before_anything_is_removed(host):
    parent = host / "models"
    settings = json.loads((host / "vars.json").read_text())
    (host / "vars.json").write_text(json.dumps(dict(settings, fleet_model_dir=str(parent))))
    run = teardown(host, "-e", "vllm_teardown_remove_model=true")
    assert run.rc != 0
    assert "fleet_model_dir %s holds no config.json, so it is no model folder; nothing was removed" % parent in (
        run.stdout), run.stdout
    assert (parent / "Qwen3-VL-8B-Instruct" / "config.json").exists()
    assert docker_calls(host) == [] and (host / "etc" / "vllm-ascend.sh").exists()
