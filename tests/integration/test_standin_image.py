"""The stand-in image, run with real Docker like the seed runs the real one: what it refuses and what it serves."""
import base64
import json
import subprocess
import time
import uuid

import pytest
import requests
from standin_process import health_answers

from conftest import free_port, png_image
from twin import hosts
from twin.lifecycle import IMAGE_REPOSITORY, IMAGE_TAGS, Twin

pytestmark = pytest.mark.docker

SEED_SERVE = ["vllm", "serve", "/data/models/Qwen3-VL-8B-Instruct", "--served-model-name", "Qwen3-VL-8B-Instruct",
              "--gpu-memory-utilization", "0.75", "--max-model-len", "8192", "--tensor-parallel-size", "2",
              "--enforce-eager", "--dtype", "float16"]
MODEL = "Qwen3-VL-8B-Instruct"


@pytest.fixture(scope="module")
def image():
    twin = Twin()
    assert twin.registry_answers(), "the twin is not up: run `scripts/dev twin up` first"
    name = "%s/%s:%s" % (twin.registry, IMAGE_REPOSITORY, IMAGE_TAGS[0])
    subprocess.run(["docker", "pull", "-q", name], check=True, stdout=subprocess.DEVNULL)
    return name


@pytest.fixture(scope="module")
def host_root(tmp_path_factory):
    """A twin host's Ascend files on this machine, mounted into the stand-in the way the seed mounts a host's."""
    root = tmp_path_factory.mktemp("standin") / "host"
    hosts.build_root(root, hosts.load_profiles()["duo2"])
    return root


def docker_args(root, chips=(0, 1), skip_mounts=(), skip_devices=(), env=None):
    args = []
    devices = ["davinci%d" % chip for chip in chips] + ["davinci_manager", "devmm_svm", "hisi_hdc"]
    for device in devices:
        if device not in skip_devices:
            args += ["--device", "%s/dev/%s:/dev/%s" % (root, device, device)]
    mounts = ["/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
              "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info", "/root/.cache", "/data/models"]
    for mount in mounts:
        if mount not in skip_mounts:
            args += ["-v", "%s%s:%s" % (root, mount, mount)]
    for key, value in (env or {}).items():
        args += ["-e", "%s=%s" % (key, value)]
    return args


def run_to_exit(image, args, command):
    result = subprocess.run(["docker", "run", "--rm"] + args + [image] + command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    return result.returncode, result.stdout


def replace_flag(flag, value):
    command = list(SEED_SERVE)
    index = command.index(flag)
    if value is None:
        del command[index:index + 2]
    else:
        command[index + 1] = value
    return command


@pytest.mark.parametrize("case,command,setup,expected", [
    ("bf16", replace_flag("--dtype", "bfloat16"), {}, "does not support dtype bfloat16"),
    ("dtype auto reads bf16 from config", replace_flag("--dtype", "auto"), {}, "does not support dtype bfloat16"),
    ("no max-model-len", replace_flag("--max-model-len", None), {}, "--max-model-len must be set"),
    ("tp over mapped chips", replace_flag("--tensor-parallel-size", "4"), {},
     "needs 4 NPUs but only 2 are visible"),
    ("tp over visible devices", SEED_SERVE, {"env": {"ASCEND_RT_VISIBLE_DEVICES": "0"}},
     "needs 2 NPUs but only 1 are visible"),
    ("no driver lib64", SEED_SERVE, {"skip_mounts": ["/usr/local/Ascend/driver/lib64"]}, "libascend_hal.so"),
    ("no version.info", SEED_SERVE, {"skip_mounts": ["/usr/local/Ascend/driver/version.info"]},
     "/usr/local/Ascend/driver/version.info not found"),
    ("no davinci_manager", SEED_SERVE, {"skip_devices": ["davinci_manager"]}, "/dev/davinci_manager not found"),
    ("model without config.json", replace_flag("--served-model-name", MODEL)[:2] + ["/data/models"]
     + SEED_SERVE[3:], {}, "No supported config format found in /data/models"),
    ("unknown flag", SEED_SERVE + ["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
])
def test_standin_refuses_what_310p_refuses(image, host_root, case, command, setup, expected):
    code, output = run_to_exit(image, docker_args(host_root, **setup), command)
    assert code != 0, "%s: exited 0\n%s" % (case, output)
    assert expected in output, output


def test_default_command_is_a_shell_like_the_real_image(image):
    inspect = subprocess.run(["docker", "image", "inspect", image], stdout=subprocess.PIPE, check=True)
    assert json.loads(inspect.stdout)[0]["Config"]["Cmd"] == ["bash"]


@pytest.fixture(scope="module")
def seed_server(image, host_root):
    """The stand-in started with the seed's exact serve command and an API key."""
    name = "twin-test-%s" % uuid.uuid4().hex[:8]
    port = free_port()
    env = {"VLLM_TWIN_SPEED": "50", "VLLM_TWIN_LOAD_S": "50"}
    subprocess.run(["docker", "run", "-d", "--name", name, "-p", "127.0.0.1:%d:8000" % port]
                   + docker_args(host_root, env=env) + [image] + SEED_SERVE + ["--api-key", "sk-twin-test"],
                   check=True, stdout=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d" % port
    try:
        if not health_answers(base, 30):
            logs = subprocess.run(["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            pytest.fail("stand-in did not become healthy:\n%s" % logs.stdout.decode())
        yield base, name
    finally:
        subprocess.run(["docker", "rm", "-f", name], stdout=subprocess.DEVNULL)


AUTH = {"Authorization": "Bearer sk-twin-test"}


def chat_body(width, height, max_tokens, **extra):
    url = "data:image/png;base64," + base64.b64encode(png_image(width, height)).decode()
    body = {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "请描述一下图片"}]}]}
    body.update(extra)
    return body


def test_starts_with_the_seed_command_and_says_it_is_a_simulator(seed_server):
    base, name = seed_server
    logs = subprocess.run(["docker", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
    assert b"This is a simulator, not vLLM" in logs
    version = requests.get(base + "/version", timeout=5)
    assert version.json() == {"version": "0.18.0"}  # vLLM's, as the image's vLLM answers
    assert version.headers["X-Twin-Simulator"] == "ascend-vllm-fleet stand-in v0.18.0rc1"


def test_api_key_guards_v1_only(seed_server):
    base, _ = seed_server
    assert requests.get(base + "/v1/models", timeout=5).status_code == 401
    assert requests.get(base + "/health", timeout=5).status_code == 200
    models = requests.get(base + "/v1/models", headers=AUTH, timeout=5).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    metrics = requests.get(base + "/metrics", timeout=5).text
    assert 'vllm:num_requests_running{engine="0",model_name="Qwen3-VL-8B-Instruct"}' in metrics


def test_plain_completion_counts_image_tokens(seed_server):
    base, _ = seed_server
    reply = requests.post(base + "/v1/chat/completions", json=chat_body(1920, 1080, 16), headers=AUTH, timeout=30)
    assert reply.status_code == 200, reply.text
    usage = reply.json()["usage"]
    assert usage["prompt_tokens"] == 2042 + 5 + 11  # image, seven characters of text, template
    assert usage["completion_tokens"] == 16 and reply.json()["choices"][0]["message"]["content"]


def test_streamed_completion_with_usage_and_ignore_eos(seed_server):
    base, _ = seed_server
    body = chat_body(640, 480, 40, stream=True, stream_options={"include_usage": True}, ignore_eos=True)
    reply = requests.post(base + "/v1/chat/completions", json=body, headers=AUTH, stream=True, timeout=30)
    events = [line[len(b"data: "):] for line in reply.iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    content = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert len([piece for piece in content if piece]) == 40
    assert chunks[-1]["usage"] == {"prompt_tokens": 318, "completion_tokens": 40, "total_tokens": 358}


def test_errors_look_like_vllm(seed_server):
    base, _ = seed_server
    wrong_model = requests.post(base + "/v1/chat/completions", json=dict(chat_body(64, 64, 4), model="gpt-4"),
                                headers=AUTH, timeout=10)
    assert wrong_model.status_code == 404 and "does not exist" in wrong_model.json()["error"]["message"]
    too_long = requests.post(base + "/v1/chat/completions", json=chat_body(64, 64, 9000), headers=AUTH, timeout=10)
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "max_tokens"
    assert "cannot be greater than max_model_len=max_total_tokens=8192" in too_long.json()["error"]["message"]


def test_request_log_lands_in_the_hosts_cache_mount(seed_server, host_root):
    base, _ = seed_server
    reply = requests.post(base + "/v1/chat/completions", json=chat_body(640, 480, 8), headers=AUTH, timeout=30)
    log = host_root / "root/.cache/vllm-twin/requests-8000.jsonl"
    deadline = time.time() + 10  # the server logs a request after its last byte
    while time.time() < deadline:
        ours = [json.loads(line) for line in (log.read_text().splitlines() if log.exists() else [])
                if json.loads(line)["id"] == reply.json()["id"]]
        if ours:
            break
        time.sleep(0.05)
    assert ours, "request %s not in %s" % (reply.json()["id"], log)
    assert ours[0]["completion_tokens"] == 8 and ours[0]["finished_s"] > ours[0]["first_token_s"]
    assert ours[0]["first_token_s"] >= ours[0]["received_s"]
