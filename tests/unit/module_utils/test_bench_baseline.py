"""module_utils/bench_baseline.py: the canary gate's comparison tells a slower canary from run-to-run noise, and
baselines files are read and written whole, or refused by name."""
import json
import random

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import bench_baseline
from ansible_collections.ascend.fleet.plugins.module_utils.bench_baseline import BaselineError, compare

GROUPS = [(size, 32, concurrency) for size in ("1280x720", "640x480") for concurrency in (1, 4, 8)]


def run(slowdown=1.0, noise=0.0, seed=1, unreliable=()):
    """Group records of one run: each group's throughput and p95 latency, `slowdown` times worse, with noise (a
    share, uniform either way)."""
    rng = random.Random(seed)
    records = []
    for size, tokens, concurrency in GROUPS:
        jitter = 1 + rng.uniform(-noise, noise)
        records.append({"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
                        "output_tokens_per_s": round(100.0 * concurrency / slowdown * jitter, 2),
                        "p95_latency_s": round(3.0 * slowdown / jitter, 4),
                        "unreliable": (size, tokens, concurrency) in unreliable})
    return records


def test_equal_runs_with_noise_pass():
    for seed in range(20):
        result = compare(run(noise=0.05, seed=seed), run(noise=0.05, seed=seed + 100), 0.1)
        assert not result["regressed"], result["metrics"]
        assert len(result["groups"]) == 6 and result["missing"] == []


def test_a_canary_30_percent_slower_fails_on_both_metrics():
    result = compare(run(noise=0.05), run(slowdown=1.3, noise=0.05, seed=2), 0.1)
    assert result["regressed"]
    throughput, latency = result["metrics"]["throughput"], result["metrics"]["p95_latency"]
    assert 0.15 < throughput["regression"] < 0.3 and throughput["low"] > 0.1 and throughput["regressed"]
    assert 0.2 < latency["regression"] < 0.4 and latency["low"] <= latency["regression"] <= latency["high"]


def test_a_slowdown_within_the_allowance_passes_and_beyond_a_smaller_one_fails():
    baseline, canary = run(), run(slowdown=1.06)
    assert not compare(baseline, canary, 0.1)["regressed"]
    assert compare(baseline, canary, 0.03)["regressed"]


def test_one_group_far_off_is_noise_the_interval_does_not_call_a_regression():
    canary = run()
    canary[0] = dict(canary[0], output_tokens_per_s=canary[0]["output_tokens_per_s"] * 0.3)
    throughput = compare(run(), canary, 0.1)["metrics"]["throughput"]
    assert throughput["regression"] > 0.1 and throughput["low"] <= 0 and not throughput["regressed"]


def test_a_faster_canary_passes():
    assert not compare(run(), run(slowdown=0.7), 0.1)["regressed"]


def test_a_group_the_canary_did_not_measure_reliably_fails_it():
    result = compare(run(), run(unreliable=[GROUPS[2]]), 0.1)
    assert result["regressed"] and result["missing"] == [list(GROUPS[2])]
    assert not result["metrics"]["throughput"]["regressed"]


def test_the_verdict_is_the_same_for_the_same_figures():
    baseline, canary = run(noise=0.1), run(noise=0.1, seed=7)
    assert compare(baseline, canary, 0.1) == compare(baseline, canary, 0.1)


def test_one_group_compares_without_an_interval():
    (metric,) = [compare(run()[:1], run(slowdown=1.5)[:1], 0.1)["metrics"]["p95_latency"]]
    assert metric["low"] == metric["regression"] == metric["high"] == 0.5 and metric["regressed"]


def test_nothing_in_common_compares_nothing_and_fails_on_what_is_missing():
    result = compare(run(), [], 0.1)
    assert result["metrics"] == {} and result["groups"] == [] and result["regressed"]


def test_baselines_files_round_trip_and_keep_the_newest(tmp_path):
    path = str(tmp_path / "baselines" / "vllm-ascend.json")
    assert bench_baseline.read_baselines(path) == {}
    baselines = {}
    for number in range(bench_baseline.MAX_BASELINES + 3):
        baselines = bench_baseline.with_baseline(baselines, {"config_hash": "h%d" % number, "preset": "canary",
                                                             "recorded_at": 1000.0 + number, "groups": run()})
    bench_baseline.write_baselines(path, baselines)
    read = bench_baseline.read_baselines(path)
    assert len(read) == bench_baseline.MAX_BASELINES and "canary/h0" not in read and "canary/h12" in read
    assert [name for name in (tmp_path / "baselines").iterdir()] == [tmp_path / "baselines" / "vllm-ascend.json"]


@pytest.mark.parametrize("content, expected", [
    ("{not json", "cannot be read"), (json.dumps({"format": 9, "baselines": {}}), "is not of format 1"),
    (json.dumps([1, 2]), "is not of format 1")])
def test_a_baselines_file_not_ours_is_refused_by_name(tmp_path, content, expected):
    path = tmp_path / "vllm-ascend.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as error:
        bench_baseline.read_baselines(str(path))
    assert str(path) in str(error.value) and expected in str(error.value) and "Fix:" in str(error.value)
