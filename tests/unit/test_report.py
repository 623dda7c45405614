"""The fleet report from hand-made results: recommended concurrency, slow instance, CSV and charts."""
import csv
import json

import pytest

from ascend_vllm_fleet import report


def group(size, tokens, concurrency, p95, throughput, unreliable=False):
    return {"image_size": size, "max_tokens": tokens, "concurrency": concurrency, "requests": 8, "completed": 8,
            "failed": 0, "error_rate": 0.0, "unreliable": unreliable, "errors": {}, "p95_latency_s": p95,
            "p95_ttft_s": p95 / 4, "rps": throughput / 1000.0, "total_tokens_per_s": throughput}


def write(report_dir, host, instance, groups):
    folder = report_dir / "raw" / host
    folder.mkdir(parents=True, exist_ok=True)
    (folder / (instance + ".jsonl")).write_text("".join(json.dumps(g) + "\n" for g in groups))


@pytest.fixture
def fleet_report(tmp_path):
    fast = [group("640x480", 32, c, p95, tp) for c, p95, tp in ((1, 2.0, 100), (8, 4.0, 600), (32, 12.0, 900))]
    write(tmp_path, "node-a", "vllm-ascend", fast)
    write(tmp_path, "node-b", "vllm-ascend", fast)
    # node-c is slow, and its first try at concurrency 8 was unreliable, then resumed (a later line wins).
    slow = [group("640x480", 32, 1, 2.5, 90), group("640x480", 32, 8, 9.0, 100, unreliable=True),
            group("640x480", 32, 32, 14.0, 400), group("640x480", 32, 8, 5.0, 300)]
    write(tmp_path, "node-c", "vllm-ascend", slow)
    return tmp_path, report.build(tmp_path, latency_target=10)


def test_recommended_concurrency_meets_the_latency_target(fleet_report):
    _, summary = fleet_report
    (item,) = summary["recommended"]
    # Medians over the three instances: c=8 has p95 4.0 s and 600 tokens/s; c=32 is faster but p95 12 s.
    assert (item["concurrency"], item["p95_latency_s"], item["total_tokens_per_s"]) == (8, 4.0, 600)
    assert item["meets_target"] is True


def test_target_nobody_meets_says_so(tmp_path):
    write(tmp_path, "node-a", "v", [group("640x480", 32, 1, 20.0, 100), group("640x480", 32, 8, 30.0, 200)])
    (item,) = report.build(tmp_path, latency_target=5)["recommended"]
    assert item["concurrency"] == 1 and item["meets_target"] is False and "no concurrency meets" in item["note"]


def test_slow_instance_stands_out(fleet_report):
    _, summary = fleet_report
    assert summary["comparison_reference"]["concurrency"] == 32
    assert [(e["host"], e["slow"]) for e in summary["comparison"]] == [
        ("node-a", False), ("node-b", False), ("node-c", True)]
    assert summary["comparison"][2]["share_of_median"] == pytest.approx(400 / 900.0, abs=1e-3)


def test_files_of_the_report(fleet_report):
    report_dir, summary = fleet_report
    rows = list(csv.DictReader(open(report_dir / "results.csv")))
    assert len(rows) == 9 and rows[0]["host"] == "node-a" and rows[0]["errors"] == "{}"
    assert [r["p95_latency_s"] for r in rows if r["host"] == "node-c" and r["concurrency"] == "8"] == ["5.0"]
    for chart in ("p95_by_image_size.png", "p95_by_max_tokens.png", "throughput.png", "ttft.png",
                  "instances.png"):
        assert (report_dir / chart).read_bytes()[:4] == b"\x89PNG"
        assert "](%s)" % chart in (report_dir / "report.md").read_text()
    assert json.loads((report_dir / "summary.json").read_text())["slow_instances"][0]["host"] == "node-c"


def test_no_results_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no benchmark results under"):
        report.build(tmp_path, latency_target=10)
