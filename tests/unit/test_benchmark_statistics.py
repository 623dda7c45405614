"""module_utils/bench_record.py's statistics on hand-made requests, checked against values worked out by hand."""
import random
import time

import numpy
import pytest

from bench_record import FIELD_NAMES, GROUP_FIELDS, max_in_flight, percentile, summarise
from openai_client import StreamResult

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
