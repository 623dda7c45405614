"""The results and progress files of module_utils/bench_record.py, and the vllm_bench role's filters over them."""
import sys

import pytest

from bench_record import (
    ProgressWriter,
    append_result,
    instance_name,
    progress_file,
    read_progress,
    read_results,
    results_file,
    run_ended,
)
from conftest import REPO

sys.path.insert(0, str(REPO / "roles/vllm_bench/filter_plugins"))
import vllm_bench  # noqa: E402


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


def test_file_names_and_the_instance_they_belong_to():
    path = results_file("/var/lib/vllm-bench", "vllm-ascend-1")
    assert path == "/var/lib/vllm-bench/vllm-ascend-1.jsonl"
    assert progress_file(path) == "/var/lib/vllm-bench/vllm-ascend-1.jsonl.progress.json"
    assert instance_name(path) == instance_name(progress_file(path)) == "vllm-ascend-1"


def test_progress_is_written_whole_throttled_and_finished(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("bench_record.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("bench_record.time.time", lambda: 1700000000.0 + clock[0])
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


def test_the_roles_filters_name_the_files_bench_record_reads(tmp_path):
    instance = {"name": "vllm-ascend-2", "port": 8001, "npu_ids": [4], "devices": ["/dev/davinci2"]}
    results = vllm_bench.vllm_bench_results_file(instance, str(tmp_path))
    assert results == str(tmp_path / "vllm-ascend-2.jsonl")
    assert vllm_bench.vllm_bench_progress_file(results) == results + ".progress.json"
    ProgressWriter(results).update({"groups_done": 0, "groups_total": 12}, force=True)
    assert run_ended(read_progress(open(results + ".progress.json").read()), 600) is False
    ProgressWriter(results).finish(12, 12)
    assert run_ended(read_progress(open(results + ".progress.json").read()), 600) is True
    assert run_ended(None, 600, waited_s=22 * 30) is False  # 22 polls of 30 s: 660 s waited
    assert run_ended(None, 600, waited_s=23 * 30) is True



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
