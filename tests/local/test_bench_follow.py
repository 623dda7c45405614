"""playbooks/benchmark.yml against this machine (no Docker): two instances answered by local stand-ins that
finish a request only when the test lets them, so every group change is seen and every state is polled more
than once. The playbook prints one line per instance and group change and no retry line; the command's
output off a terminal repeats no line."""
import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.ascend.fleet.plugins.plugin_utils import progress
from conftest import REPO, run_playbook, venv_tool

MODEL = "Qwen3-VL-8B-Instruct"
INSTANCES = ["vllm-ascend-npu1", "vllm-ascend-npu2"]
# 1 image size x 2 output lengths x 2 concurrency levels, 2 requests each: 4 groups.
PRESET = {"image_sizes": ["640x480"], "max_tokens": [16, 8], "concurrency": [1, 2], "requests_per_group": 2}
GROUPS = [(16, 1), (16, 2), (8, 1), (8, 2)]
# A guard against a hung playbook, not a measurement: far above what any step takes.
PATIENCE_S = 120


class GatedServer:
    """vLLM's OpenAI API, answering a chat request only for each permit the test releases."""

    def __init__(self):
        self.permits = threading.Semaphore(0)
        gate = self.permits

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not gate.acquire(timeout=PATIENCE_S):
                    self.send_response(503)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                tokens = request["max_tokens"]
                for payload in ({"choices": [{"delta": {"content": "a"}}]},
                                {"choices": [], "usage": {"prompt_tokens": 318, "completion_tokens": tokens,
                                                          "total_tokens": 318 + tokens}}):
                    self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.permits.release(1000)  # no request left waiting
        self.httpd.shutdown()
        self.httpd.server_close()


class Output:
    """A process's output lines as they come, for a test to wait on."""

    def __init__(self, process):
        self.lines = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self.read, args=(process,), daemon=True)
        self.thread.start()

    def read(self, process):
        for line in process.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def wait_for(self, predicate, what):
        deadline = time.monotonic() + PATIENCE_S
        with self.changed:
            while not predicate(self.lines):
                assert time.monotonic() < deadline, "no %s within %d s:\n%s" % (what, PATIENCE_S, "\n".join(self.lines))
                self.changed.wait(1)


@pytest.fixture
def site(tmp_path):
    """Two stand-ins, a serving plan naming them, an inventory of this machine and the run's variables."""
    servers = [GatedServer() for _name in INSTANCES]
    plan = {"format": 1, "host": "localhost", "layout": "per_card", "served_name": MODEL,
            "instances": [{"name": name, "port": server.port} for name, server in zip(INSTANCES, servers)]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {"ascend": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    variables = {"fleet_plan_file": str(tmp_path / "plan.json"), "fleet_api_key": "",
                 "vllm_bench_results_dir": str(tmp_path / "results"), "vllm_bench_report_dir": str(tmp_path / "report"),
                 "vllm_bench_facts_file": str(tmp_path / "facts.d" / "vllm_bench.fact"),
                 "vllm_bench_presets": {"local": PRESET}, "vllm_bench_preset": "local",
                 "vllm_bench_warmup_requests": 0, "vllm_bench_poll_interval": 1,
                 # These stand-ins answer a chat request only when the test says so: the follow lines are the point.
                 "fleet_answer_check": "none"}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    yield tmp_path, servers
    for server in servers:
        server.close()


def status_updates(folder):
    """How many times the follow step has written the host's status file so far (its updated_at changes)."""
    path = folder / "report" / progress.STATUS_FOLDER / "localhost.json"
    return json.loads(path.read_text())["updated_at"] if path.exists() else None


def wait_for_polls(folder, count):
    """Until the follow step polled `count` more times: it saw the state the test holds still."""
    seen, deadline = [status_updates(folder)], time.monotonic() + PATIENCE_S
    while len(set(seen)) <= count:
        assert time.monotonic() < deadline, "the follow step stopped polling"
        time.sleep(0.2)
        seen.append(status_updates(folder))


def group_line(name, number):
    tokens, concurrency = GROUPS[number - 1]
    return "[localhost] %s: group %d/4 (640x480, max_tokens %d, concurrency %d), 0 errors, " % (
        name, number, tokens, concurrency)


def test_the_playbook_prints_one_line_per_group_change_and_no_retry(site):
    folder, servers = site
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    command = [venv_tool("ansible-playbook"), "-i", str(folder / "hosts.yml"), "playbooks/benchmark.yml",
               "-e", "@" + str(folder / "vars.json")]
    with subprocess.Popen(command, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True) as process:
        output = Output(process)
        for number in range(1, len(GROUPS) + 1):
            for name in INSTANCES:
                expected = group_line(name, number)
                output.wait_for(lambda lines, expected=expected: any(line.startswith(expected) for line in lines),
                                expected)
            wait_for_polls(folder, 2)  # the same group, polled again: no new line
            for server in servers:
                server.permits.release(PRESET["requests_per_group"])
        assert process.wait(timeout=PATIENCE_S) == 0, "\n".join(output.lines)
    output.thread.join()
    text = "\n".join(output.lines)
    assert "RETRYING" not in text and "FAILED" not in text, text
    assert "vllm-ascend-npu1: 4 groups, 8 requests, estimated" in text  # the plan, before the run
    for name in INSTANCES:
        mine = [line for line in output.lines if line.startswith("[localhost] %s: " % name)]
        if mine[0].startswith("[localhost] %s: starting" % name):  # polled before the module wrote its progress
            mine = mine[1:]
        assert [line.split(", 0 errors")[0] for line in mine] == (
            [group_line(name, number).split(", 0 errors")[0] for number in range(1, 5)]
            + ["[localhost] %s: done, 4/4 groups" % name]), text
    summary = json.loads((folder / "report" / "summary.json").read_text())
    assert summary["instances"] == 2 and summary["groups"] == 8
    # Each instance's run is the host's local fact (these stand-ins run in no container: its spec is unknown).
    facts = json.loads((folder / "facts.d" / "vllm_bench.fact").read_text())["instances"]
    assert sorted(facts) == sorted(INSTANCES) and all(
        len(facts[name]["last_run"]["groups"]) == 4 and facts[name]["last_run"]["preset"] == "local"
        for name in INSTANCES)


def test_off_a_terminal_the_command_repeats_no_line(site):
    folder, servers = site
    for server in servers:
        server.permits.release(1000)  # answer at once: a short run
    env = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    variables = json.loads((folder / "vars.json").read_text())
    command = [sys.executable, "-m", "ascend_vllm_fleet.cli", "bench", "-i", str(folder / "hosts.yml")]
    for key, value in variables.items():
        command += ["-e", "%s=%s" % (key, json.dumps(value) if not isinstance(value, str) else value)]
    result = subprocess.run(command, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=PATIENCE_S, check=False)
    assert result.returncode == 0, result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert len(rows) == len(set(rows)), result.stdout
    assert "RETRYING" not in result.stdout
    for name in INSTANCES:
        assert "[localhost] %s: done, 4/4 groups, 0 errors" % name in result.stdout
    assert "benchmark plan" in result.stdout and "markdown: %s" % (folder / "report" / "report.md") in result.stdout


def test_without_the_fleet_report_the_results_stay_on_the_host_and_nothing_is_written_on_the_controller(site):
    """As a canary's benchmark runs (roles/vllm_canary): each instance's results and last run on the host, and no
    report folder - no report, fetched results, host tuning or live statuses."""
    folder, servers = site
    for server in servers:
        server.permits.release(1000)  # answer at once: a short run
    run = run_playbook(folder / "run", folder / "hosts.yml", "playbooks/benchmark.yml", "-e",
                       "@" + str(folder / "vars.json"), "-e", "vllm_bench_fleet_report=false")
    assert run.rc == 0, run.stdout
    assert sorted(path.name for path in (folder / "results").glob("*.jsonl")) == [name + ".jsonl" for name in INSTANCES]
    facts = json.loads((folder / "facts.d" / "vllm_bench.fact").read_text())["instances"]
    assert sorted(facts) == sorted(INSTANCES)
    assert not (folder / "report").exists()
    assert run.results("Write the fleet report")["localhost"]["_event"] == "runner_on_skipped"
