"""A twin host root for a stand-in run in this process (the `root` fixture: a 2-card Duo host, as
``VLLM_TWIN_ROOT``) and the `vllm serve` arguments it is started with (serve_args), for the stand-in's tests."""
import pytest

from conftest import free_port
from twin import hosts
from twin.vllm_standin import cli, npu

MODEL = "Qwen3-VL-8B-Instruct"


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A 2-card Duo host root (chips davinci0-3 as real device nodes), this process's view of it."""
    folder = tmp_path / "host"
    hosts.build_root(folder, hosts.load_profiles()["duo2"])
    monkeypatch.setenv("VLLM_TWIN_ROOT", str(folder))
    monkeypatch.setenv("VLLM_TWIN_LOAD_S", "0")
    monkeypatch.setenv("VLLM_TWIN_SPEED", "40")
    monkeypatch.setenv("VLLM_TWIN_REQUEST_LOG", str(tmp_path / "requests.jsonl"))
    for name in ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "LD_PRELOAD", "VLLM_TWIN_CRASH_PIXELS",
                 "SOC_VERSION", "VLLM_ENGINE_READY_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    yield folder
    npu.release_chips()


def serve_args(*extra, port=None):
    return cli.build_parser().parse_args(
        ["serve", str(cli.host_path("/data/models/" + MODEL)), "--served-model-name", MODEL, "--max-model-len",
         "8192", "-tp", "2", "--dtype", "float16", "--host", "127.0.0.1", "--port", str(port or free_port())]
        + list(extra))
