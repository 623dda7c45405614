"""The stand-in `vllm serve` as a process of this machine (no Docker), for the tests and benchmarks of the load test."""
import json
import os
import signal
import subprocess
import sys
import time

import requests

from conftest import REPO, free_port
from twin import hosts

MODEL = "Qwen3-VL-8B-Instruct"


def health_answers(url, seconds, statuses=(200,)):
    """Whether a stand-in's /health at url answered with one of statuses (any, for None) within seconds. A server
    still starting refuses the connection, or on a loaded machine takes it and answers late: asked again."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            status = requests.get(url + "/health", timeout=1).status_code
            if statuses is None or status in statuses:
                return True
        except (requests.ConnectionError, requests.Timeout):
            pass
        time.sleep(0.1)
    return False


class LocalStandin:
    """The stand-in `vllm serve` on loopback, over a twin host root, with its own request log."""

    def __init__(self, base, speed=40, faults=None, stall_s=None, port=None, slowdown=1.0, max_num_seqs=256):
        self.root = base / "host"
        if not self.root.exists():
            hosts.build_root(self.root, hosts.load_profiles()["duo2"])
        self.port = port or free_port()
        self.log = base / ("requests-%d-%d.jsonl" % (self.port, time.monotonic_ns()))
        env = dict(os.environ, PYTHONPATH=str(REPO / "tests"), VLLM_TWIN_ROOT=str(self.root),
                   VLLM_TWIN_SPEED=str(speed), VLLM_TWIN_LOAD_S="0", VLLM_TWIN_REQUEST_LOG=str(self.log),
                   VLLM_TWIN_FAULTS=json.dumps(faults or {}), VLLM_TWIN_SLOWDOWN=str(slowdown))
        if stall_s is not None:
            env["VLLM_TWIN_STALL_S"] = str(stall_s)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "twin.vllm_standin", "serve", str(self.root / "data/models" / MODEL),
             "--served-model-name", MODEL, "--max-model-len", "8192", "--tensor-parallel-size", "2",
             "--enforce-eager", "--dtype", "float16", "--max-num-seqs", str(max_num_seqs), "--host", "127.0.0.1",
             "--port", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not health_answers(self.url, 20):
            self.stop()
            raise RuntimeError("stand-in did not start on port %d" % self.port)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def records(self, expected=0, timeout=10):
        """The server's log lines; it writes each after its last byte, so wait until `expected` are there."""
        deadline = time.time() + timeout
        while True:
            lines = self.log.read_text().splitlines() if self.log.exists() else []
            if len(lines) >= expected or time.time() > deadline:
                return [json.loads(line) for line in lines if line.strip()]
            time.sleep(0.05)

    def quiet_count(self, quiet_s=0.5, timeout=10):
        """How many requests the log holds once no line came for `quiet_s`: the last request a client has its answer
        to may not be logged yet when the client returns."""
        deadline = time.time() + timeout
        count = len(self.records())
        while time.time() < deadline:
            time.sleep(quiet_s)
            now = len(self.records())
            if now == count:
                return count
            count = now
        return count

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
