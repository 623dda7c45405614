"""module_utils/capacity_search.py: the search finds the boundary of any monotone verdict within its tolerance, asks
for nothing twice, and a probe of few requests passes only when its slowest ones meet the target."""
import random
import types

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils.capacity_search import (
    ConcurrencySearch,
    check_slo,
    judge,
    probe_requests,
    upper_bound,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError


def search_with(capacity, top, tolerance, start=1):
    """(the search when over, the concurrencies it probed) against a server that meets the SLO up to capacity."""
    search, probed = ConcurrencySearch(top, tolerance, start), []
    while search.next() is not None:
        probed.append(search.next())
        search.record(probed[-1], probed[-1] <= capacity)
    return search, probed


@pytest.mark.parametrize("tolerance", [1, 2, 5])
@pytest.mark.parametrize("top", [1, 7, 64, 100])
def test_the_search_finds_every_capacity_within_its_tolerance_and_probes_nothing_twice(top, tolerance):
    # From every start, a start outside the range included: where it starts changes the probes, never the answer.
    for start in range(0, top + 2):
        for capacity in range(0, top + 3):
            search, probed = search_with(capacity, top, tolerance, start)
            expected = min(capacity, top)
            assert expected - tolerance < search.capacity <= expected, (start, capacity, probed)
            assert len(probed) == len(set(probed)) and all(1 <= c <= top for c in probed)
            assert search.limited_by == ("none_met" if search.capacity == 0 else "top" if capacity >= top else "slo")


def test_the_search_doubles_from_one_then_bisects():
    assert search_with(20, 64, 1)[1] == [1, 2, 4, 8, 16, 32, 24, 20, 22, 21]


def test_a_search_started_at_its_capacity_settles_it_in_two_probes_and_one_far_off_doubles_or_halves():
    assert search_with(24, 64, 2, start=24)[1] == [24, 26]
    assert search_with(64, 64, 2, start=24)[1] == [24, 26, 52, 64]
    assert search_with(3, 64, 2, start=24)[1] == [24, 22, 11, 5, 2, 3]
    assert search_with(64, 64, 2, start=64)[1] == [64]
    assert search_with(0, 64, 2, start=5)[1] == [5, 3, 1]


def test_a_search_given_its_recorded_verdicts_asks_only_for_the_probes_after_them():
    _search, probed = search_with(37, 64, 1)
    replayed = ConcurrencySearch(64, 1)
    for concurrency in probed[:5]:
        assert replayed.next() == concurrency
        replayed.record(concurrency, concurrency <= 37)
    rest = []
    while replayed.next() is not None:
        rest.append(replayed.next())
        replayed.record(rest[-1], rest[-1] <= 37)
    assert rest == probed[5:] and replayed.capacity == 37


def test_a_probe_sends_its_first_wave_and_counts_at_least_the_minimum_or_a_wave_after_it():
    assert probe_requests(1, 16) == 17 and probe_requests(8, 16) == 24 and probe_requests(32, 16) == 64


@pytest.mark.parametrize("slo,named", [
    (None, "expected a mapping"), ({}, "expected a mapping"), ({"p99_latency_s": 3}, "p99_latency_s is no key"),
    ({"p95_latency_s": 0}, "seconds, more than 0"), ({"p95_latency_s": "fast"}, "seconds, more than 0"),
    ({"p95_ttft_s": float("nan")}, "seconds, more than 0"), ({"p95_latency_s": True}, "seconds, more than 0"),
    ({"p95_tpot_s": 1, "max_error_rate": 2}, "from 0 to 1"),
    ({"max_error_rate": 0.01}, "has no percentile target")])
def test_an_slo_it_cannot_use_is_refused_naming_the_key(slo, named):
    with pytest.raises(OptionError) as error:
        check_slo(slo)
    assert str(error.value).startswith("slo: ") and named in str(error.value) and "Fix:" in str(error.value)


def test_a_usable_slo_is_taken_as_numbers():
    assert check_slo({"p95_latency_s": "10", "max_error_rate": 0}) == {"p95_latency_s": 10.0, "max_error_rate": 0.0}


def test_with_few_values_the_bound_is_the_largest_and_with_many_it_nears_the_percentile():
    assert upper_bound([1, 2, 3, 4, 100], 95, 0.9) == 100
    rng = random.Random(7)
    values = [rng.random() for _ in range(20000)]
    assert 0.95 < upper_bound(values, 95, 0.9) < 0.955
    assert upper_bound([], 95, 0.9) is None


def test_the_bound_is_above_the_true_percentile_about_as_often_as_the_confidence_says():
    rng = random.Random(3)
    # The true 95th percentile of the uniform distribution on [0, 1) is 0.95.
    above = sum(upper_bound([rng.random() for _ in range(60)], 95, 0.9) >= 0.95 for _trial in range(2000))
    assert 0.85 <= above / 2000.0 <= 0.97


def result(latency, ttft=0.5, tokens=32, error=None):
    return types.SimpleNamespace(sent=100.0, first_token=100.0 + ttft, finished=100.0 + latency, prompt_tokens=300,
                                 completion_tokens=tokens, error=error)


def test_a_lucky_probe_of_few_requests_does_not_pass_where_its_percentile_measured_would():
    # 19 requests at 3 s and one at 12 s: the 95th percentile measured is 3.45 s, under a 10 s target; the
    # slowest of 20 is all that vouches for the 95th percentile at 90 %.
    results = [result(3.0)] * 19 + [result(12.0)]
    verdict = judge(results, {"p95_latency_s": 10.0}, 0.9)
    assert not verdict["passed"] and verdict["failed"] == ["p95_latency_s"]
    assert verdict["figures"]["p95_latency_s"] == {"measured": 12.0, "target": 10.0}
    assert judge([result(3.0)] * 200 + [result(12.0)], {"p95_latency_s": 10.0}, 0.9)["passed"]


def test_failed_requests_count_against_the_error_rate_and_no_completed_request_fails_every_target():
    results = [result(3.0)] * 19 + [result(0, error="http_500")]
    assert judge(results, {"p95_latency_s": 10.0, "max_error_rate": 0.05}, 0.9)["passed"]
    verdict = judge(results, {"p95_latency_s": 10.0, "max_error_rate": 0.0}, 0.9)
    assert verdict["failed"] == ["max_error_rate"] and verdict["figures"]["max_error_rate"]["measured"] == 0.05
    verdict = judge([result(0, error="timeout")] * 3, {"p95_ttft_s": 1.0, "p95_tpot_s": 0.2}, 0.9)
    assert verdict["failed"] == ["p95_ttft_s", "p95_tpot_s"]
