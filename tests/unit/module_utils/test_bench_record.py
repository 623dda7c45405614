"""module_utils/bench_record.py: its results and progress files, and its statistics on hand-made requests,
checked against values worked out by hand. Where the record is restated outside bench_record.py:
tests/unit/roles/vllm_bench/test_bench_contract.py."""
import random
import time

import numpy
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import bench_record
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    FIELD_NAMES,
    GROUP_FIELDS,
    ProgressWriter,
    append_result,
    instance_name,
    max_in_flight,
    percentile,
    progress_file,
    read_progress,
    read_results,
    results_file,
    run_ended,
    summarise,
)
from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import StreamResult

# --- the results and progress files -------------------------------------------------------------------------------

def record(concurrency, p95, **more):
    return dict({"image_size": "640x480", "max_tokens": 32, "concurrency": concurrency, "p95_latency_s": p95}, **more)


def test_a_line_cut_mid_write_is_skipped_counted_and_does_not_swallow_the_next(tmp_path):
    path = tmp_path / "vllm-ascend.jsonl"
    append_result(str(path), record(1, 2.0))
    with open(path, "a") as handle:
        handle.write('{"image_size": "640x480", "max_tokens": 32, "concur')  # the crash
    append_result(str(path), record(8, 4.0))
    records, skipped = read_results(str(path))
    assert [(r["concurrency"], r["p95_latency_s"]) for r in records] == [(1, 2.0), (8, 4.0)]
    assert skipped == 1
    assert path.read_text().count("\n") == 3


def test_a_later_line_of_a_group_replaces_the_earlier_in_first_seen_order(tmp_path):
    path = tmp_path / "results" / "x.jsonl"  # the folder is made on the first write
    for line in (record(1, 2.0), record(8, 9.0, unreliable=True), record(32, 12.0), record(8, 5.0)):
        append_result(str(path), line)
    path.write_text(path.read_text() + "\n[1, 2]\n")  # a blank line, and JSON that is no record
    records, skipped = read_results(str(path))
    assert [(r["concurrency"], r["p95_latency_s"]) for r in records] == [(1, 2.0), (8, 5.0), (32, 12.0)]
    assert skipped == 1


def test_no_results_file_has_no_records(tmp_path):
    assert read_results(str(tmp_path / "none.jsonl")) == ([], 0)


def deadline(*not_run):
    return {"new_group_deadline_s": 3600.0, "elapsed_s": 3641.2, "groups_total": 45, "stopped_at": 1796000000.0,
            "not_run": [{"image_size": "640x480", "max_tokens": 32, "concurrency": users} for users in not_run]}


def test_a_deadline_line_is_no_record_nor_a_line_cut_and_the_last_one_is_read(tmp_path):
    path = str(tmp_path / "vllm-ascend.jsonl")
    assert bench_record.read_deadline(path) is None
    append_result(path, record(1, 2.0))
    append_result(path, {"deadline": deadline(8, 16)})
    append_result(path, record(8, 4.0))  # a resume
    append_result(path, {"deadline": deadline(16)})
    assert read_results(path) == ([record(1, 2.0), record(8, 4.0)], 0)
    assert bench_record.read_deadline(path) == deadline(16)


def test_a_deadline_reads_as_the_groups_it_left_out_and_the_setting_to_raise():
    assert bench_record.deadline_text(deadline(64)) == (
        "new_group_deadline_s (3600 s) stopped the run 3641 s after its first group started: 1 of its 45 groups was "
        "not run (640x480, max_tokens 32, concurrency 64). Fix: raise vllm_bench_new_group_deadline_s "
        "(new_group_deadline_s; 0 for none), then rerun with -e vllm_bench_resume=true, which runs only the groups "
        "not recorded")
    assert "5 of its 45 groups were not run (640x480, max_tokens 32, concurrency 1; 640x480, max_tokens 32, " \
        "concurrency 2; 640x480, max_tokens 32, concurrency 4; and 2 more). Fix: " in bench_record.deadline_text(
            deadline(1, 2, 4, 8, 16))


def test_file_names_and_the_instance_they_belong_to():
    path = results_file("/var/lib/vllm-bench", "vllm-ascend-1")
    assert path == "/var/lib/vllm-bench/vllm-ascend-1.jsonl"
    assert progress_file(path) == "/var/lib/vllm-bench/vllm-ascend-1.jsonl.progress.json"
    assert instance_name(path) == instance_name(progress_file(path)) == "vllm-ascend-1"


def test_progress_is_written_whole_throttled_and_finished(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(bench_record.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(bench_record.time, "time", lambda: 1700000000.0 + clock[0])
    results = str(tmp_path / "a.jsonl")
    writer = ProgressWriter(results)
    state = {"group": {"image_size": "640x480", "max_tokens": 32, "concurrency": 8}, "group_number": 3,
             "groups_total": 12, "groups_done": 2, "requests_done": 0, "requests_total": 8}
    writer.update(state, force=True)
    state["requests_done"] = 5
    clock[0] += 1.0
    writer.update(state)  # 1 s after the last write: not yet
    progress = read_progress(open(progress_file(results)).read())
    assert progress["requests_done"] == 0 and progress["updated_at"] == 1700000100.0
    clock[0] += 1.5
    writer.update(state)
    progress = read_progress(open(progress_file(results)).read())
    assert progress["requests_done"] == 5 and progress["updated_at"] == 1700000102.5
    writer.finish(groups_done=2, groups_total=12, error="cannot reach http://127.0.0.1:8000/v1/models")
    progress = read_progress(open(progress_file(results)).read())
    assert progress["finished"] is True and "group" not in progress
    assert progress["error"] == "cannot reach http://127.0.0.1:8000/v1/models" and progress["groups_done"] == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.jsonl.progress.json"]
    writer.finish(groups_done=3, groups_total=12, deadline=deadline(16))
    progress = read_progress(open(progress_file(results)).read())
    assert progress["deadline"] == deadline(16) and "error" not in progress


def test_no_results_file_writes_no_progress(tmp_path):
    ProgressWriter(None).finish(0, 1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["[]", '{"finished": true}', "{cut"])
def test_what_is_no_progress_file_says_so(text):
    with pytest.raises(ValueError):
        read_progress(text)


def test_a_run_ends_when_it_says_so_or_when_its_progress_stalls():
    running = {"updated_at": 1000.0, "requests_done": 3}
    assert run_ended(dict(running, finished=True), 600, now=1001.0) is True
    assert run_ended(running, 600, now=1000.0 + 660) is False   # a request may take 600 s, plus a 60 s margin
    assert run_ended(running, 600, now=1000.0 + 661) is True    # killed
    assert run_ended(None, 600, waited_s=600) is False          # the module has not written yet
    assert run_ended(None, 600, waited_s=661) is True           # it never started


def test_lines_nested_too_deep_or_too_long_are_skipped_and_counted(tmp_path):
    """A hostile or broken line must not end the report or a resume in a RecursionError or a MemoryError."""
    path = tmp_path / "vllm-ascend.jsonl"
    append_result(str(path), record(1, 2.0))
    with open(path, "a") as handle:
        handle.write("[" * 200000 + "]" * 200000 + "\n")
        handle.write('{"image_size": "' + "x" * (3 << 20) + '"}\n')
    append_result(str(path), record(8, 4.0))
    records, skipped = read_results(str(path))
    assert [r["concurrency"] for r in records] == [1, 8] and skipped == 2


def test_a_progress_file_nested_too_deep_is_no_progress_file():
    with pytest.raises(ValueError, match="not a benchmark progress file"):
        read_progress("[" * 200000 + "]" * 200000)


# --- the statistics -----------------------------------------------------------------------------------------------

GROUP = {"image_size": "640x480", "max_tokens": 11, "concurrency": 2}


def request(sent, first, finished, prompt=100, completion=11, error=None):
    result = StreamResult(sent)
    result.first_token, result.finished = first, finished
    result.prompt_tokens, result.completion_tokens, result.error = prompt, completion, error
    return result


def test_percentile_interpolates_between_closest_ranks():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(4 + 0.8 * 6)  # rank 3.8 between 4 and 10
    assert percentile([5.0], 99) == 5.0 and percentile([], 50) is None


def test_percentile_matches_numpy_default():
    rng = random.Random(7)
    for size in (2, 3, 10, 64, 101):
        values = [rng.uniform(0, 30) for _ in range(size)]
        for q in (50, 90, 95, 99):
            assert percentile(values, q) == pytest.approx(numpy.percentile(values, q))


def test_group_metrics_worked_out_by_hand():
    results = [
        request(0.0, 1.0, 3.0),                  # latency 3, ttft 1, tpot (3-1)/10 = 0.2
        request(0.5, 1.0, 2.5),                  # latency 2, ttft 0.5, tpot 0.15
        request(1.0, 2.0, 5.0),                  # latency 4, ttft 1, tpot 0.3
        request(2.0, None, 2.1, error="http_500"),
        request(3.0, None, 8.0, error="timeout"),
    ]
    before = time.time()
    metrics = summarise(GROUP, results, error_threshold=0.05)
    assert (metrics["requests"], metrics["completed"], metrics["failed"]) == (5, 3, 2)
    assert metrics["errors"] == {"http_500": 1, "timeout": 1} and metrics["error_rate"] == 0.4
    assert metrics["duration_s"] == 8.0                       # first sent 0.0, last finished 8.0 (the timeout)
    assert metrics["rps"] == pytest.approx(3 / 8.0, abs=1e-4)
    assert metrics["avg_latency_s"] == 3.0                    # failures are not timed
    assert metrics["p50_latency_s"] == 3.0
    assert metrics["p95_latency_s"] == pytest.approx(3.9)     # rank 1.9 between 3 and 4
    assert metrics["avg_ttft_s"] == pytest.approx(2.5 / 3, abs=1e-4)
    assert metrics["avg_tpot_s"] == pytest.approx(0.65 / 3, abs=1e-5)
    assert metrics["total_prompt_tokens"] == 300 and metrics["total_completion_tokens"] == 33
    assert metrics["total_tokens_per_s"] == pytest.approx(333 / 8.0, abs=0.01)
    assert metrics["output_tokens_per_s"] == pytest.approx(33 / 8.0, abs=0.01)
    assert metrics["avg_prompt_tokens"] == 100 and metrics["avg_completion_tokens"] == 11
    assert metrics["max_in_flight"] == 4                      # at t=2.0 the first four are open
    assert metrics["unreliable"] is True                      # 0.4 > 0.05
    assert before <= metrics["finished_at"] <= time.time()


def test_error_rate_at_the_threshold_is_still_reliable():
    results = [request(0.0, 0.5, 1.0)] * 3 + [request(0.0, None, 1.0, error="timeout")]
    assert summarise(GROUP, results, error_threshold=0.25)["unreliable"] is False
    assert summarise(GROUP, results, error_threshold=0.2)["unreliable"] is True


def test_a_record_holds_exactly_the_documented_fields_in_order():
    record = summarise(GROUP, [request(0.0, 1.0, 3.0)], error_threshold=0.05)
    assert list(record) == list(FIELD_NAMES)
    assert FIELD_NAMES[:3] == GROUP_FIELDS


def test_all_failed_group_has_no_latency():
    metrics = summarise({"image_size": "64x64", "max_tokens": 4, "concurrency": 1},
                        [request(0.0, None, 0.1, error="connection_refused")], error_threshold=0.05)
    assert metrics["completed"] == 0 and metrics["avg_latency_s"] is None and metrics["p95_latency_s"] is None
    assert metrics["errors"] == {"connection_refused": 1} and metrics["rps"] == 0.0


def test_requests_that_touch_do_not_overlap():
    # Back to back: the second starts the moment the first ends; the third overlaps both of the others' span.
    results = [request(0.0, 0.1, 1.0), request(1.0, 1.1, 2.0), request(0.5, 0.6, 1.5)]
    assert max_in_flight(results) == 2
    assert max_in_flight(results[:2]) == 1
