# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity search: the largest concurrency at which an endpoint meets a service level objective (SLO).

For one image size and output length the search probes concurrency 1, 2, 4, ... until a probe fails the SLO or
the top of the range passed, then bisects between the last concurrency that met it and the first that did not
until they are at most the tolerance apart. It assumes what holds for a server that batches: a concurrency that
fails, fails above it too.

A search may start where a neighbouring one ended (the capacity found for the same output length at another
image size differs by little): it probes that start, then one tolerance beyond it, up when the start met the SLO
and down when it did not, and only then doubles up or halves down. Two probes settle a capacity that did not
move; a probe of C users costs about 2C requests, so the probes from 1 up are what a start saves.

A probe is a closed loop at its concurrency C of C + max(minimum, C) requests. The first C start together, a
burst no user sends, and are not counted; the rest run while C are in flight and are judged.

A percentile target is judged by an upper confidence bound of the percentile, not by the percentile measured:
the bound is the order statistic that lies above the true percentile with the confidence asked (the normal
approximation of the binomial), so a probe of few requests, which a lucky run could pass, must keep its slowest
requests under the target. The error rate is judged as counted: one failed request in a probe of 20 is 5 %.

Standard library only and Python 3.8: it runs on the hosts, inside the vllm_benchmark module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import statistics

from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import timings
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError

# The SLO's keys: the percentile targets (each the 95th percentile of a measure of bench_record's FIELDS, in
# seconds) and the largest share of failed requests.
PERCENTILE_TARGETS = {"p95_latency_s": ("latency", 95), "p95_ttft_s": ("ttft", 95), "p95_tpot_s": ("tpot", 95)}
SLO_KEYS = tuple(PERCENTILE_TARGETS) + ("max_error_rate",)


def check_slo(slo):
    """The SLO as the search uses it; OptionError naming the key otherwise. An SLO needs one percentile target:
    an error rate alone holds at any concurrency a server queues."""
    fix = "Fix: give slo as a mapping such as {p95_latency_s: 10, max_error_rate: 0.01}"
    if not isinstance(slo, dict) or not slo:
        raise OptionError("slo: %r is not an SLO: expected a mapping of any of %s. %s" % (
            slo, ", ".join(SLO_KEYS), fix))
    for key, value in slo.items():
        if key not in SLO_KEYS:
            raise OptionError("slo: %s is no key of an SLO: expected any of %s. %s" % (key, ", ".join(SLO_KEYS), fix))
        try:
            # A bool is no number of seconds, though Python would take true for 1.
            number = float("nan") if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            number = float("nan")
        limit = 1 if key == "max_error_rate" else float("inf")
        if not (math.isfinite(number) and 0 <= number <= limit and (key == "max_error_rate" or number > 0)):
            raise OptionError("slo: %s is %r: expected %s. %s" % (
                key, value, "a share from 0 to 1" if key == "max_error_rate" else "seconds, more than 0", fix))
    if not any(key in PERCENTILE_TARGETS for key in slo):
        raise OptionError("slo: %s has no percentile target: expected at least one of %s, as every concurrency "
                          "meets an error rate when the server queues. %s" % (
                              slo, ", ".join(PERCENTILE_TARGETS), fix))
    return {key: float(value) for key, value in slo.items()}


def upper_bound(values, percent, confidence):
    """The smallest order statistic of values that is above their true ``percent``th percentile with
    ``confidence``; the largest value when there are too few for that; None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    share = percent / 100.0
    count = len(ordered)
    z = statistics.NormalDist().inv_cdf(confidence)
    rank = int(math.ceil(count * share + z * math.sqrt(count * share * (1 - share))))
    return ordered[min(max(rank, 1), count) - 1]


def judge(results, slo, confidence):
    """Whether the counted requests of a probe meet the SLO: {passed, figures: {key: {measured, target}}, failed:
    [keys]}; a percentile's measured figure is its upper bound (a probe with no completed request fails)."""
    done, measures = timings(results)
    figures, failed = {}, []
    for key, target in slo.items():
        if key == "max_error_rate":
            measured = (len(results) - len(done)) / float(len(results)) if results else 1.0
        else:
            name, percent = PERCENTILE_TARGETS[key]
            measured = upper_bound(measures[name], percent, confidence)
        figures[key] = {"measured": None if measured is None else round(measured, 4), "target": target}
        if measured is None or measured > target:
            failed.append(key)
    return {"passed": not failed, "figures": figures, "failed": failed}


def probe_requests(concurrency, minimum):
    """Requests a probe sends: its first wave (not counted) and at least ``minimum`` more, at least one wave."""
    return concurrency + max(minimum, concurrency)


class ConcurrencySearch:
    """Which concurrency to probe next, from the verdicts so far: from ``start`` (1: doubling from 1) up until a
    probe fails or ``top`` passed, or down until one passes, then bisecting to ``tolerance``. The verdicts alone
    decide, so a search given the verdicts it recorded before asks for the probes it did not run yet, and nothing
    again."""

    def __init__(self, top, tolerance, start=1):
        self.top = top
        self.tolerance = max(1, tolerance)
        self.start = min(top, max(1, start))
        self.passed = 0  # the largest concurrency that met the SLO (0: none)
        self.failed = None  # the smallest that did not

    def next(self):
        """The concurrency to probe next, or None when the search is over."""
        if self.passed == 0 and self.failed is None:
            return self.start
        if self.failed is None:
            if self.passed >= self.top:
                return None
            # Near a start given, by doubling otherwise: from 1 the two agree.
            near = self.passed == self.start > 1
            return min(self.top, self.passed + (self.tolerance if near else self.passed))
        if self.passed == 0:
            if self.failed == 1:
                return None
            return max(1, self.failed - self.tolerance if self.failed == self.start else self.failed // 2)
        if self.failed - self.passed <= self.tolerance:
            return None
        return (self.passed + self.failed) // 2

    def record(self, concurrency, passed):
        if passed:
            self.passed = max(self.passed, concurrency)
        else:
            self.failed = concurrency if self.failed is None else min(self.failed, concurrency)

    @property
    def capacity(self):
        return self.passed

    @property
    def limited_by(self):
        """Why the capacity is what it is: the SLO, the top of the range, or no concurrency meeting the SLO."""
        if self.passed == 0:
            return "none_met"
        return "top" if self.failed is None else "slo"
