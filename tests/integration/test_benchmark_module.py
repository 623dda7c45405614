"""library/vllm_benchmark.py against the stand-in server run as a local process (no Docker needed)."""
import json
import sys
import threading
import time

import pytest
from standin_process import MODEL, LocalStandin

from ansible_collections.ascend.fleet.plugins.module_utils import load_test as bench
from ansible_collections.ascend.fleet.plugins.module_utils import openai_client
from conftest import free_port


@pytest.fixture
def standin(tmp_path):
    servers = []

    def start(**kwargs):
        server = LocalStandin(tmp_path, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def params(**overrides):
    values = {name: spec.get("default") for name, spec in bench.ARGUMENT_SPEC.items()}
    # Every request counted against the server's own log is a measured one: the answer check (tested on its own,
    # tests/unit/twin/test_standin_answers.py) would add its questions to the log.
    values.update(warmup_requests=0, answer_check="none")
    values.update(overrides)
    bench.validate(values)
    return values


def max_overlap(records):
    edges = sorted([(r["received_s"], 1) for r in records] + [(r["finished_s"], -1) for r in records],
                   key=lambda edge: (edge[0], edge[1]))
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def test_numbers_agree_with_the_servers_own_log(standin):
    server = standin(speed=20)
    facts = bench.run(params(base_url=server.url, image_sizes=["640x480"], max_tokens=[16],
                             concurrency=[1, 8], requests_per_group=16))
    log = server.records(expected=32)
    assert [g["concurrency"] for g in facts["groups"]] == [1, 8] and len(log) == 32
    assert facts["model"] == MODEL
    for group, records in zip(facts["groups"], (log[:16], log[16:])):
        assert group["completed"] == 16 and group["failed"] == 0 and group["errors"] == {}
        assert group["total_prompt_tokens"] == sum(r["prompt_tokens"] for r in records)
        assert group["total_completion_tokens"] == sum(r["completion_tokens"] for r in records) == 16 * 16
        assert group["avg_latency_s"] >= sum(r["latency_s"] for r in records) / len(records)
        assert group["avg_ttft_s"] < group["avg_latency_s"] and group["avg_tpot_s"] > 0
    assert max_overlap(log[16:]) == 8, "concurrency 8 must keep 8 requests in flight at the server"
    assert facts["groups"][1]["max_in_flight"] == 8 and max_overlap(log[:16]) == 1


def test_each_client_latency_spans_the_servers_own(standin):
    """Request by request, the time the client measures holds the time the server logged (no timing bounds)."""
    server = standin(speed=20)
    settings = params(base_url=server.url)
    load_test = bench.LoadTest(settings, bench.Client(server.url, None, 30), MODEL)
    group = {"image_size": "640x480", "max_tokens": 12, "concurrency": 4, "requests": 12}
    wall_offset = time.time() - time.monotonic()
    results = load_test.run_group(group, load_test.bodies(group), lambda: None)
    records = {record["id"]: record for record in server.records(expected=12)}
    assert len(records) == len(results) == 12
    clock_slack = 0.002  # converting time.monotonic() to wall-clock time
    for result in results:
        record = records[result.request_id]
        assert result.sent + wall_offset <= record["received_s"] + clock_slack
        assert result.finished + wall_offset >= record["finished_s"] - clock_slack
        assert result.completion_tokens == record["completion_tokens"] == 12
        assert result.prompt_tokens == record["prompt_tokens"]


def test_unique_images_differ_and_shared_images_do_not(standin):
    server = standin()
    shared = bench.LoadTest(params(unique_images=False), None, MODEL)
    assert len(set(shared.bodies({"image_size": "64x48", "max_tokens": 4, "requests": 3}))) == 1
    unique = bench.LoadTest(params(), None, MODEL)
    assert len(set(unique.bodies({"image_size": "64x48", "max_tokens": 4, "requests": 3}))) == 3
    assert server.process.poll() is None


def test_faults_are_counted_by_kind_and_kept_out_of_latency(standin):
    server = standin(speed=40, faults={"500": [3, 4], "reset": [6], "stall": [8]}, stall_s=5)
    facts = bench.run(params(base_url=server.url, image_sizes=["320x240"], max_tokens=[8], concurrency=[2],
                             requests_per_group=12, request_timeout_s=1.5))
    (group,) = facts["groups"]
    assert group["errors"] == {"http_500": 2, "connection_reset": 1, "timeout": 1}
    assert (group["completed"], group["failed"]) == (8, 4)
    assert group["unreliable"] is True and group["error_rate"] == pytest.approx(4 / 12.0, abs=1e-4)
    assert group["total_completion_tokens"] == 8 * 8
    assert group["p99_latency_s"] < 1.5, "the timed-out request must not enter the latency statistics"


def test_server_killed_mid_run_then_resume_runs_only_the_missing_groups(standin, tmp_path):
    server = standin(speed=10)
    results = tmp_path / "results.jsonl"
    matrix = dict(base_url=server.url, image_sizes=["320x240"], max_tokens=[8], concurrency=[1, 2, 4],
                  requests_per_group=8, results_file=str(results), request_timeout_s=5)

    def kill_after_first_group():
        while not results.exists() or not results.read_text().strip():
            time.sleep(0.02)
        server.stop()

    killer = threading.Thread(target=kill_after_first_group)
    killer.start()
    first = bench.run(params(**matrix))
    killer.join()
    kinds = {kind for group in first["groups"][1:] for kind in group["errors"]}
    assert first["groups"][0]["completed"] == 8 and first["groups"][0]["unreliable"] is False
    assert kinds & {"connection_refused", "connection_reset"}, first["groups"]
    assert all(group["unreliable"] for group in first["groups"][2:])
    lines_before = results.read_text().splitlines()

    restarted = standin(speed=40, port=server.port)
    second = bench.run(params(resume=True, **matrix))
    assert [g["resumed"] for g in second["groups"]] == [True, False, False]
    assert all(g["completed"] == 8 for g in second["groups"])
    assert results.read_text().splitlines()[:len(lines_before)] == lines_before, "finished groups are kept"
    assert len(restarted.records(expected=8 * 2)) == 8 * 2
    progress = json.loads((tmp_path / "results.jsonl.progress.json").read_text())
    assert progress["finished"] is True and progress["groups_done"] == 3


def test_check_mode_plans_the_seed_matrix_and_sends_nothing():
    facts = bench.run(params(base_url="http://127.0.0.1:9"), check_mode=True)
    assert (facts["planned_groups"], facts["planned_requests"]) == (45, 2880)
    # Per size: waves (64, 8, 4, 2, 1 -> 79) x tokens (256 + 64 + 32 = 352) x 0.09 s; three sizes.
    assert facts["estimated_seconds"] == pytest.approx(round(3 * 79 * 352 * 0.09, 1))
    assert facts["groups"] == []


@pytest.mark.parametrize("overrides,message", [
    ({"image_sizes": ["1920*1080"]}, "image_sizes: '1920*1080' is not WIDTHxHEIGHT"),
    ({"concurrency": [8, 0]}, "concurrency: 0 is not allowed"),
    ({"max_tokens": []}, "max_tokens: the list is empty"),
    ({"requests_per_group": 0}, "requests_per_group: 0 is not allowed"),
    ({"resume": True}, "resume: needs results_file"),
    ({"image_files": ["/nonexistent/cat.jpg"]}, "image_files: /nonexistent/cat.jpg does not exist"),
])
def test_bad_input_names_the_option(overrides, message):
    with pytest.raises(bench.BenchmarkError, match=message.replace("*", r"\*")):
        params(**overrides)


def test_unreachable_url_and_unknown_model_are_explained(standin):
    closed = "http://127.0.0.1:%d" % free_port()
    with pytest.raises(openai_client.ClientError, match="cannot reach %s/v1/models" % closed):
        bench.run(params(base_url=closed))
    server = standin()
    with pytest.raises(bench.BenchmarkError, match="model 'gpt-4' is not served at .*; it serves: %s" % MODEL):
        bench.run(params(base_url=server.url, model="gpt-4"))


def test_module_fails_cleanly_through_ansible(tmp_path):
    """The same validation reaches the operator as a failed task with the message."""
    from conftest import run_playbook

    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local ansible_python_interpreter=%s\n"
                                        % sys.executable)
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ascend.fleet.vllm_benchmark:\n"
        "        concurrency: [0]\n        api_key: sk-secret-never-logged\n")
    run = run_playbook(tmp_path / "run", tmp_path / "hosts.ini", str(tmp_path / "play.yml"))
    assert run.rc == 2 and "concurrency: 0 is not allowed" in run.stdout
    assert "sk-secret-never-logged" not in run.stdout
