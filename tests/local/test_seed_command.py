"""The docker run the server role renders for an 8-chip host carries everything of the seed's command."""
import json
import re
import shlex
import sys

import pytest

from conftest import SEED_COMMANDS, run_playbook


def seed_commands():
    """(docker run arguments, vllm serve arguments, exported environment) as the seed wrote them."""
    text = SEED_COMMANDS.read_text(encoding="utf-8")
    run_block = text[text.index("docker run -it"):]
    run_block = run_block[:run_block.index("\nbash")]
    run_args = shlex.split(re.sub(r"\\\n", " ", run_block), comments=True)
    serve_line = next(line for line in text.splitlines() if line.startswith("vllm serve "))
    serve_args = shlex.split(serve_line.replace("<你的实际路径>", "/models"))
    exports = dict(re.findall(r"^export (\w+)=(\S+)$", text, flags=re.M))
    return run_args, serve_args, exports


def options(args, name):
    """Every value of an option, whether written `--opt value` or `--opt=value`."""
    values = []
    for index, arg in enumerate(args):
        if arg == name:
            values.append(args[index + 1])
        elif arg.startswith(name + "="):
            values.append(arg.split("=", 1)[1])
    return values


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    base = tmp_path_factory.mktemp("render")
    ascend = {"chips": [{"npu_id": npu_id, "chip_id": chip, "logic_id": 2 * index + chip,
                         "device": "/dev/davinci%d" % (2 * index + chip)}
                        for index, npu_id in enumerate([1, 2, 4, 5]) for chip in (0, 1)],
              "unhealthy_npu_ids": [], "missing_manager_devices": [],
              "manager_devices": ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]}
    (base / "vars.json").write_text(json.dumps({
        "ascend": ascend, "fleet_config_dir": str(base / "etc"),
        "fleet_model_dir": "/models/Qwen3-VL-8B-Instruct/"}))
    (base / "hosts.ini").write_text("localhost ansible_connection=local ansible_python_interpreter=%s\n"
                                    % sys.executable)
    (base / "etc").mkdir()
    (base / "bin").mkdir()
    (base / "bin" / "docker").write_text("#!/bin/sh\nexit 0\n")
    (base / "bin" / "docker").chmod(0o755)
    run = run_playbook(base / "run", base / "hosts.ini", "tests/playbooks/render_instance.yml",
                       "-e", "@%s" % (base / "vars.json"), "-e", "render_bin=%s" % (base / "bin"))
    assert run.rc == 0, run.stdout
    script = (base / "etc" / "vllm-ascend.sh").read_text()
    body = re.sub(r"\\\n", " ", "\n".join(line for line in script.splitlines() if not line.startswith("#")))
    args = shlex.split(body.replace("set -e", ""))
    image_index = args.index("quay.io/ascend/vllm-ascend:v0.18.0rc1-310p")
    return script, args[:image_index], args[image_index + 1:]


def test_every_seed_device_is_mapped(rendered):
    _, run_args, _ = rendered
    seed_run, _, _ = seed_commands()
    ours = {device.split(":")[-1] for device in options(run_args, "--device")}
    assert set(options(seed_run, "--device")) == ours
    assert len(options(run_args, "--device")) == 11


def test_every_seed_mount_is_there_and_the_hosts_files_are_read_only(rendered):
    _, run_args, _ = rendered
    seed_run, _, _ = seed_commands()
    ours = {mount.split(":")[1]: mount for mount in options(run_args, "-v")}
    for seed_mount in options(seed_run, "-v"):
        source, target = seed_mount.split(":")[:2]
        assert target in ours, "the seed mounts %s; the rendered run does not" % target
        if target == "/root/.cache":
            # The containers' cache has its own host folder, not root's home.
            assert ours[target] == "/var/cache/vllm-ascend:/root/.cache"
        else:
            assert ours[target] == "%s:%s:ro" % (source, target)
    assert ours["/models/Qwen3-VL-8B-Instruct/"] == "/models/Qwen3-VL-8B-Instruct/:/models/Qwen3-VL-8B-Instruct/:ro"


def test_port_shm_and_image_follow_the_seed_without_privileged(rendered):
    _, run_args, _ = rendered
    seed_run, _, _ = seed_commands()
    assert options(run_args, "-p") == ["0.0.0.0:" + options(seed_run, "-p")[0]]
    # The seed's 1g is raised to the vLLM-Ascend v0.18.0 docs' 10g.
    assert options(seed_run, "--shm-size") == ["1g"] and options(run_args, "--shm-size") == ["10g"]
    assert "--privileged" in seed_run and "--privileged" not in run_args
    assert seed_run[-1] == "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
    assert run_args[-1] == "--", "docker's options must end before the image, so it is never read as one"
    assert options(run_args, "--restart") == ["unless-stopped"]
    # The seed's container kept its whole log; a fleet's runs for weeks.
    assert (options(run_args, "--log-driver"), options(run_args, "--log-opt")) == (
        ["json-file"], ["max-file=5", "max-size=100m"])
    assert [label.split("=")[0] for label in options(run_args, "--label")] == [
        "ascend-vllm-fleet.instance", "ascend-vllm-fleet.host", "ascend-vllm-fleet.port",
        "ascend-vllm-fleet.served-name", "ascend-vllm-fleet.config-hash"]


def test_environment_and_serve_flags_are_the_seeds(rendered):
    _, run_args, serve_args = rendered
    _, seed_serve, seed_env = seed_commands()
    # The seed ran vllm serve from an interactive shell, whose ~/.bashrc preloads the image's jemalloc; a
    # container's command reads no ~/.bashrc, so the preload is set as its environment.
    jemalloc = "LD_PRELOAD=/usr/lib/aarch64-linux-gnu/libjemalloc.so.2"
    # What a fleet needs beyond one host by hand: vLLM waits for its engine as long as the role waits for it
    # (vllm_server_ready_timeout), never asks the hub for the local model and sends no usage statistics.
    fleet = ["VLLM_ENGINE_READY_TIMEOUT_S=1200", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1",
             "DO_NOT_TRACK=1"]
    assert sorted(["%s=%s" % item for item in seed_env.items()] + [jemalloc] + fleet) == options(run_args, "-e")
    # The seed's flags, then the pixel cap that keeps large images from crashing the engine.
    assert serve_args == seed_serve + ["--mm-processor-kwargs", '{"min_pixels": 65536, "max_pixels": 1310720}']


def test_script_is_runnable_shell_and_holds_no_secret(rendered):
    script, _, _ = rendered
    assert script.startswith("#!/bin/sh\n") and "docker rm -f vllm-ascend" in script
    assert "API_KEY" not in script
