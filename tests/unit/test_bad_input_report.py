"""ascend_vllm_fleet/report.py on report folders and results it cannot use: a message that names the folder, file
or record, what was expected and the fix, and a non-zero exit, never a traceback; lines that hold no record are
skipped and counted."""
import json
import subprocess
import sys

import pytest
from test_report import group, write

from ascend_vllm_fleet import report
from conftest import REPO

GOOD = group("640x480", 32, 1, 2.0, 100)
NAMED = "raw/node-a/v.jsonl: the record of 640x480, max_tokens 32, concurrency 1"


def refused(report_dir, *options):
    """stderr of the report command, which must have failed without a traceback."""
    shown = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.report", str(report_dir)] + list(options),
                           cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert shown.returncode != 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "Fix:" in shown.stderr, shown.stderr
    return shown.stderr


def with_record(tmp_path, **changes):
    """A report folder whose one results file holds GOOD with changes (a value None removes the field)."""
    record = dict(GOOD, **changes)
    write(tmp_path, "node-a", "v", [{key: value for key, value in record.items() if value is not None}])
    return tmp_path


@pytest.mark.parametrize("case,changes,expected", [
    ("no throughput", {"total_tokens_per_s": None}, [NAMED, "lacks total_tokens_per_s"]),
    ("no latency and no throughput", {"p95_latency_s": None, "total_tokens_per_s": None},
     [NAMED, "lacks p95_latency_s, total_tokens_per_s"]),
    ("TTFT a word", {"p95_ttft_s": "soon"}, [NAMED, "p95_ttft_s 'soon'", "a number"]),
    ("image size no size", {"image_size": "big"}, ["raw/node-a/v.jsonl", "image_size 'big'", "WIDTHxHEIGHT"]),
    ("max_tokens a string", {"max_tokens": "32"}, ["raw/node-a/v.jsonl", "max_tokens '32'", "a whole number"]),
    ("concurrency zero", {"concurrency": 0}, ["raw/node-a/v.jsonl", "concurrency 0", "a whole number"]),
    ("concurrency a boolean", {"concurrency": True}, ["raw/node-a/v.jsonl", "concurrency True", "a whole number"]),
    ("latency a word", {"p95_latency_s": "fast"}, [NAMED, "p95_latency_s 'fast'", "a number"]),
    ("throughput not a number", {"total_tokens_per_s": float("nan")}, [NAMED, "total_tokens_per_s nan", "a number"]),
    ("errors a list", {"unreliable": True, "errors": ["timeout"]}, [NAMED, "errors ['timeout']", "an object"]),
    ("error rate a word", {"error_rate": "high"}, [NAMED, "error_rate 'high'", "a number"]),
    ("output tokens a word", {"output_tokens_per_s": "many"}, [NAMED, "output_tokens_per_s 'many'", "a number"]),
])
def test_a_record_the_report_cannot_use_is_named(tmp_path, case, changes, expected):
    stderr = refused(with_record(tmp_path, **changes))
    for piece in expected:
        assert piece in stderr


def results_folder_missing(tmp_path):
    return tmp_path / "none", ["report folder %s does not exist" % (tmp_path / "none")]


def results_folder_a_file(tmp_path):
    (tmp_path / "report").write_text("")
    return tmp_path / "report", ["report folder %s is not a folder" % (tmp_path / "report")]


def results_folder_empty(tmp_path):
    return tmp_path, ["no benchmark results under %s" % (tmp_path / "raw"), "raw/<host>/<instance>.jsonl"]


def results_file_a_folder(tmp_path):
    (tmp_path / "raw" / "node-a" / "v.jsonl").mkdir(parents=True)
    return tmp_path, ["raw/node-a/v.jsonl is a folder"]


def results_of_no_record(tmp_path):
    folder = tmp_path / "raw" / "node-a"
    folder.mkdir(parents=True)
    (folder / "v.jsonl").write_bytes(b"not json\n[1, 2]\n\xff\xfe\n")
    return tmp_path, ["no benchmark results under", "raw/node-a/v.jsonl: 3 line(s) that hold no record"]


@pytest.mark.parametrize("make", [results_folder_missing, results_folder_a_file, results_folder_empty,
                                  results_file_a_folder, results_of_no_record])
def test_a_folder_without_results_is_named(tmp_path, make):
    report_dir, expected = make(tmp_path)
    stderr = refused(report_dir)
    for piece in expected:
        assert piece in stderr


def test_a_report_file_that_cannot_be_written_is_named(tmp_path):
    (with_record(tmp_path) / "results.csv").mkdir()
    assert "cannot write the report into %s" % tmp_path in refused(tmp_path)


@pytest.mark.parametrize("target", ["0", "-1", "nan", "inf"])
def test_a_latency_target_that_is_no_time_is_refused(tmp_path, target):
    stderr = refused(with_record(tmp_path), "--latency-target", target)
    assert "--latency-target %s" % target in stderr and "more than 0" in stderr


def test_lines_that_hold_no_record_are_skipped_and_counted(tmp_path):
    write(tmp_path, "node-a", "v", [GOOD, group("640x480", 32, 8, 4.0, 600)])
    with open(tmp_path / "raw" / "node-a" / "v.jsonl", "ab") as handle:
        handle.write(b"not json\n[1, 2]\n\"a record\"\n\xff\xfe{\n" + json.dumps(GOOD).encode()[:30])
    summary = report.build(tmp_path, latency_target=10)
    assert summary["groups"] == 2 and summary["skipped_lines"] == [{"host": "node-a", "instance": "v", "lines": 5}]
