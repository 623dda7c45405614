"""The two servers of a conformance run, started with the same flags: real vLLM 0.18 with a fake engine core
(real_vllm/, installed and started by this suite) and the stand-in's API server, in this process.
"""
import contextlib
import json
import os
import pathlib

from conftest import free_port
from twin.vllm_standin import cli as standin_cli
from twin.vllm_standin import server as standin_server

from . import real_vllm
from .cases import MAX_MODEL_LEN, MODEL, SERVERS

REPO = pathlib.Path(__file__).resolve().parents[2]
# The fake engine's timings: a first token 0.2 s after the request reaches it, then one every 0.05 s.
FAKE_TTFT_S, FAKE_TPOT_S = 0.2, 0.05
# The flags both servers get, as the seed's command gives them (the model folder differs).
SEED_FLAGS = ["--served-model-name", MODEL, "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float16",
              "--enforce-eager"]


def real_python():
    """The Python of real vLLM's virtualenv (vLLM 0.18.0)."""
    return real_vllm.python()


def install_real():
    """vLLM 0.18.0 and its model folder, unless they are there already (the first run: about 4 minutes, 9 GB)."""
    real_vllm.install()


class RealVllm:
    """`vllm serve` of vLLM 0.18.0 with the fake engine core, on 127.0.0.1:port; its output beside the engine's
    log (engine_log, with .log for .jsonl)."""

    def __init__(self, port, args, faults, engine_log):
        self.port, self.args, self.faults, self.engine_log = port, list(args), faults, engine_log
        self.url = "http://127.0.0.1:%d" % port
        self.process = None

    def fake_engine(self):
        settings = {"FAKE_TTFT_S": FAKE_TTFT_S, "FAKE_TPOT_S": FAKE_TPOT_S, "FAKE_ENGINE_LOG": self.engine_log}
        if self.faults:
            settings["FAKE_FAULTS"] = json.dumps(self.faults)
        return settings

    def start(self):
        self.process = real_vllm.start(self.port, SEED_FLAGS + self.args, self.fake_engine(),
                                       pathlib.Path(self.engine_log).with_suffix(".log"))

    def stop(self):
        if self.process is not None:
            real_vllm.stop(self.process)


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
