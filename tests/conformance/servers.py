"""The two servers of a conformance run, started with the same flags: real vLLM 0.18 with a fake engine core
(the reference tool, run through its serve.sh) and the stand-in's API server, in this process.
"""
import contextlib
import json
import os
import pathlib
import subprocess

from conftest import free_port
from twin.vllm_standin import cli as standin_cli
from twin.vllm_standin import server as standin_server

from .cases import MAX_MODEL_LEN, MODEL, SERVERS

REPO = pathlib.Path(__file__).resolve().parents[2]
# Where the reference tool is unless REAL_VLLM_TOOL says otherwise: beside the repository, as it is shipped.
DEFAULT_TOOL = REPO.parent / "shared" / "tools" / "real-vllm"
REAL_HOME = pathlib.Path(os.environ.get("REAL_VLLM_HOME", "/var/tmp/real-vllm"))
# The fake engine's timings (its defaults): a first token 0.2 s after arrival, then one every 0.05 s.
FAKE_TTFT_S, FAKE_TPOT_S = 0.2, 0.05
# The flags both servers get, as the seed's command gives them (the model folder differs).
SEED_FLAGS = ["--served-model-name", MODEL, "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float16",
              "--enforce-eager"]


def real_tool():
    """The reference tool's folder; a clear error when it is not there."""
    folder = pathlib.Path(os.environ.get("REAL_VLLM_TOOL", DEFAULT_TOOL))
    if not (folder / "serve.sh").is_file():
        raise SystemExit("real vLLM tool not found at %s (expected serve.sh there). Fix: set REAL_VLLM_TOOL to the "
                         "folder of the real-vllm tool (serve.sh, fake_engine.py)" % folder)
    return folder


def real_python():
    """The Python of the reference tool's virtualenv (vLLM 0.18.0)."""
    return REAL_HOME / "venv-0.18.0" / "bin" / "python"


def install_real():
    tool = real_tool()
    if not real_python().exists():
        subprocess.run([str(tool / "serve.sh"), "install"], check=True)


class RealVllm:
    """`vllm serve` of vLLM 0.18.0 with the fake engine core, on 127.0.0.1:port."""

    def __init__(self, port, args, faults, engine_log):
        self.port, self.args, self.faults, self.engine_log = port, list(args), faults, engine_log
        self.url = "http://127.0.0.1:%d" % port

    def environment(self):
        env = dict(os.environ, PORT=str(self.port), FAKE_TTFT_S=str(FAKE_TTFT_S), FAKE_TPOT_S=str(FAKE_TPOT_S),
                   FAKE_ENGINE_LOG=str(self.engine_log), REAL_VLLM_HOME=str(REAL_HOME))
        if self.faults:
            env["FAKE_FAULTS"] = json.dumps(self.faults)
        return env

    def start(self):
        subprocess.run([str(real_tool() / "serve.sh"), "start"] + self.args, env=self.environment(), check=True,
                       stdout=subprocess.DEVNULL)

    def stop(self):
        subprocess.run([str(real_tool() / "serve.sh"), "stop"], env=self.environment(), check=False,
                       stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def environment(values):
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Standin:
    """The stand-in's API server on 127.0.0.1:port, answering at ``speed`` times the 310P's pace."""

    def __init__(self, port, args, faults, request_log, speed=10):
        self.port, self.args, self.faults, self.request_log, self.speed = port, list(args), faults, request_log, speed
        self.url = "http://127.0.0.1:%d" % port
        self.running = None

    def start(self):
        args = standin_cli.build_parser().parse_args(
            ["serve", "/data/models/" + MODEL] + SEED_FLAGS + ["--host", "127.0.0.1", "--port", str(self.port)]
            + self.args)
        with environment({"VLLM_TWIN_LOAD_S": "0", "VLLM_TWIN_SPEED": str(self.speed),
                          "VLLM_TWIN_REQUEST_LOG": str(self.request_log),
                          "VLLM_TWIN_FAULTS": json.dumps(self.faults)}):
            self.running = standin_server.start_server(args, "/data/models/" + MODEL, {})

    def stop(self):
        if self.running is not None:
            self.running.shutdown()
            self.running.server_close()


@contextlib.contextmanager
def every_server(kind, folder):
    """{name: server} of every server of the cases (cases.SERVERS), started as kind (RealVllm or Standin) on free
    ports, each with its log in folder; stopped on the way out."""
    started = {}
    try:
        for name, server in SERVERS.items():
            started[name] = kind(free_port(), server["args"], server["faults"], folder / ("%s.jsonl" % name))
            started[name].start()
        yield started
    finally:
        for server in started.values():
            server.stop()
