"""library/vllm_load_test.py's run against the local OpenAI-like server of test_openai_client (no Docker)."""
import json

import pytest
from test_openai_client import Handler, server  # noqa: F401  (the fixture)

from bench_record import progress_file, read_progress, read_results
from conftest import load_library_module

load_test = load_library_module("vllm_load_test")
MODEL = "Qwen3-VL-8B-Instruct"


def params(**overrides):
    values = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    # This server's answers are about streams and counts; the answer check has tests of its own.
    values.update(image_sizes=["32x24"], max_tokens=[3], concurrency=[1, 2], requests_per_group=2,
                  warmup_requests=1, answer_check="none")
    values.update(overrides)
    return values


def chats():
    return [path for path, _key in Handler.seen if path == "/v1/chat/completions"]


def test_a_run_records_each_group_then_resume_sends_nothing_again(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "results" / "vllm-ascend.jsonl")
    first = load_test.run(params(base_url=server, results_file=results))
    assert first["model"] == MODEL and (first["planned_groups"], first["planned_requests"]) == (2, 4)
    assert [(g["concurrency"], g["completed"], g["total_completion_tokens"], g["resumed"])
            for g in first["groups"]] == [(1, 2, 6, False), (2, 2, 6, False)]
    assert len(chats()) == 1 + 4  # the warm-up, then the groups
    records, skipped = read_results(results)
    assert [r["concurrency"] for r in records] == [1, 2] and skipped == 0
    progress = read_progress(open(progress_file(results)).read())
    assert progress["finished"] is True and progress["groups_done"] == 2 and "error" not in progress

    second = load_test.run(params(base_url=server, results_file=results, resume=True))
    assert [g["resumed"] for g in second["groups"]] == [True, True] and len(chats()) == 5
    assert second["groups"][0]["finished_at"] == first["groups"][0]["finished_at"]


def test_an_unreliable_group_runs_again_on_resume(server, tmp_path):  # noqa: F811
    results = tmp_path / "v.jsonl"
    load_test.run(params(base_url=server, results_file=str(results), warmup_requests=0))
    lines = results.read_text().splitlines()
    second = dict(json.loads(lines[1]), unreliable=True)
    results.write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    again = load_test.run(params(base_url=server, results_file=str(results), resume=True, warmup_requests=0))
    assert [g["resumed"] for g in again["groups"]] == [True, False] and len(chats()) == 4 + 2


def test_the_deadline_stops_new_groups(server):  # noqa: F811
    result = load_test.run(params(base_url=server, new_group_deadline_s=0.001, warmup_requests=0))
    assert result["stopped_by_deadline"] is True and [g["concurrency"] for g in result["groups"]] == [1]


def test_a_failed_run_says_so_in_its_progress_file(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "v.jsonl")
    with pytest.raises(load_test.BenchmarkError, match="model 'gpt-4' is not served at .*; it serves: %s" % MODEL):
        load_test.run(params(base_url=server, model="gpt-4", results_file=results))
    progress = read_progress(open(progress_file(results)).read())
    assert progress["finished"] is True and progress["error"].startswith("model 'gpt-4' is not served")


def test_bad_input_fails_before_any_request_and_says_so_in_the_progress_file(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "v.jsonl")
    with pytest.raises(load_test.BenchmarkError, match="concurrency: 0 is not allowed"):
        load_test.run(params(base_url=server, concurrency=[0], results_file=results))
    assert read_progress(open(progress_file(results)).read())["error"].startswith("concurrency: 0")
    assert Handler.seen == []


def test_check_mode_plans_the_full_matrix_and_touches_nothing(tmp_path):
    results = tmp_path / "v.jsonl"
    planned = load_test.run(params(image_sizes=["1920x1080", "1280x720", "640x480"], max_tokens=[256, 64, 32],
                                   concurrency=[1, 8, 16, 32, 64], requests_per_group=64,
                                   base_url="http://127.0.0.1:9", results_file=str(results)), check_mode=True)
    assert (planned["planned_groups"], planned["planned_requests"]) == (45, 2880) and planned["groups"] == []
    # Per size: waves (64, 8, 4, 2, 1 -> 79) x tokens (256 + 64 + 32 = 352) x 0.09 s; three sizes.
    assert planned["estimated_seconds"] == pytest.approx(round(3 * 79 * 352 * 0.09, 1))
    assert list(tmp_path.iterdir()) == []


def test_the_key_is_read_from_the_servers_env_file(server, tmp_path):  # noqa: F811
    env_file = tmp_path / "vllm-ascend.env"
    env_file.write_text("VLLM_API_KEY=sk-from-env-file\n")
    client = load_test.validate(params(base_url=server, api_key_file=str(env_file)))
    assert client.headers["Authorization"] == "Bearer sk-from-env-file"
    env_file.write_text("OTHER=1\n")
    with pytest.raises(load_test.ClientError, match="holds no VLLM_API_KEY=<key> line.*Fix: "):
        load_test.validate(params(base_url=server, api_key_file=str(env_file)))
    with pytest.raises(load_test.ClientError, match="cannot be read .*FileNotFoundError"):
        load_test.validate(params(base_url=server, api_key_file=str(tmp_path / "missing.env")))


def test_a_progress_file_that_cannot_be_written_does_not_stop_the_run(server, tmp_path):  # noqa: F811
    """A full disk, or anything else in the way of the progress file: every group is still measured and recorded."""
    results = tmp_path / "vllm-ascend.jsonl"
    (tmp_path / "vllm-ascend.jsonl.progress.json").mkdir()  # where the progress file goes: os.replace fails
    result = load_test.run(params(base_url=server, results_file=str(results)))
    assert [(g["concurrency"], g["completed"]) for g in result["groups"]] == [(1, 2), (2, 2)]
    assert len(read_results(str(results))[0]) == 2
    assert "vllm-ascend.jsonl.progress.json" in result["progress_error"]
