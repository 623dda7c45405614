"""The report names the runs their new-group deadline (vllm_bench_new_group_deadline_s) stopped, the groups they did
not run and the setting to raise; a resume that ran those groups since leaves nothing to say."""
import json

import pytest
from report_rows import group, write

from ansible_collections.ascend.fleet.plugins.plugin_utils import report


def deadline(*users):
    return {"deadline": {"new_group_deadline_s": 60.0, "elapsed_s": 61.5, "groups_total": 5, "stopped_at": 1.0,
                         "not_run": [{"image_size": "640x480", "max_tokens": 32, "concurrency": count}
                                     for count in users]}}


def measured(*users):
    return [group("640x480", 32, count, 2.0, 100) for count in users]


def test_a_run_its_deadline_stopped_is_named_with_every_group_it_did_not_run(tmp_path):
    write(tmp_path, "node-a", "vllm-ascend", measured(1, 8, 16, 32, 64))
    write(tmp_path, "node-b", "vllm-ascend", measured(1) + [deadline(8, 16, 32, 64)])
    summary = report.build(tmp_path, latency_target=10)
    (stopped,) = summary["cut_short"]
    assert (stopped["host"], stopped["instance"]) == ("node-b", "vllm-ascend")
    assert [entry["concurrency"] for entry in stopped["not_run"]] == [8, 16, 32, 64]
    assert stopped["sentence"].startswith(
        "new_group_deadline_s (60 s) stopped the run 62 s after its first group started: 4 of its 5 groups were not "
        "run (640x480, max_tokens 32, concurrency 8; 640x480, max_tokens 32, concurrency 16; 640x480, max_tokens 32, "
        "concurrency 32; 640x480, max_tokens 32, concurrency 64). Fix: raise vllm_bench_new_group_deadline_s")
    assert json.loads((tmp_path / "summary.json").read_text())["cut_short"] == [stopped]
    assert ", 0 whose answers failed, 1 run(s) stopped by vllm_bench_new_group_deadline_s with 4 group(s) not run " \
        "(raise it, then rerun with -e vllm_bench_resume=true); report.md" in report.describe(tmp_path, summary)


def test_groups_a_resume_ran_since_are_no_longer_named(tmp_path):
    write(tmp_path, "node-a", "vllm-ascend", measured(1) + [deadline(8, 32)] + measured(8))
    (stopped,) = report.build(tmp_path, latency_target=10)["cut_short"]
    assert [entry["concurrency"] for entry in stopped["not_run"]] == [32]
    write(tmp_path, "node-a", "vllm-ascend", measured(1) + [deadline(8, 32)] + measured(8, 32))
    summary = report.build(tmp_path, latency_target=10)
    assert summary["cut_short"] == [] and "deadline" not in report.describe(tmp_path, summary)


@pytest.mark.parametrize("change", [{"not_run": "8"}, {"not_run": [{"concurrency": 8}]}, {"elapsed_s": None},
                                    {"groups_total": -1}])
def test_a_deadline_line_the_report_cannot_use_is_refused_naming_the_file(tmp_path, change):
    line = deadline(8)
    line["deadline"].update(change)
    write(tmp_path, "node-a", "vllm-ascend", measured(1) + [line])
    with pytest.raises(SystemExit) as stop:
        report.build(tmp_path, latency_target=10)
    assert str(stop.value).startswith("raw/node-a/vllm-ascend.jsonl: the deadline line is not one vllm_benchmark "
                                      "writes: expected new_group_deadline_s and elapsed_s (seconds), ")
    assert "Fix: delete the line" in str(stop.value)


def test_the_report_shows_the_runs_their_deadline_cut_short(tmp_path):
    write(tmp_path, "node-a", "vllm-ascend", measured(1) + [deadline(8, 32)])
    (stopped,) = report.build(tmp_path, latency_target=10)["cut_short"]
    assert "## Runs their deadline cut short" in (tmp_path / "report.md").read_text()
    assert "- node-a vllm-ascend: %s\n" % stopped["sentence"] in (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Runs their deadline cut short</h2>" in page
    assert '<li class="warning">node-a vllm-ascend: %s</li>' % stopped["sentence"] in page
    write(tmp_path, "node-a", "vllm-ascend", measured(1, 8, 32) + [deadline(8, 32)])
    report.build(tmp_path, latency_target=10)
    assert "deadline" not in (tmp_path / "report.md").read_text() + (tmp_path / "report.html").read_text()
