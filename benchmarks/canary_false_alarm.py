#!/usr/bin/env python3
"""How often does the canary gate stop a roll it should not, and how often does it catch one it should?

Runs the stand-in `vllm serve` twice on this machine (no Docker): one as fast as the seed's image, and one 30 %
slower (VLLM_TWIN_SLOWDOWN=1.3, as new vllm-ascend images have been on 310P: vllm-ascend #7670). Each trial
measures a baseline on the first with the canary preset (the load test of library/vllm_benchmark.py, in this
process), then a canary of an equal image (the first again) and a canary of the slower one, and asks the gate
(module_utils/bench_baseline.compare, with fleet_canary_max_regression and fleet_canary_confidence's defaults)
about each. Prints the false alarms (equal canaries stopped) and the catches (slower canaries stopped) out of the
trials, with the median throughput change each showed. Timings are from one run on a shared machine: the point is
the ratios, and that noise is what the machine adds.

``--busy`` keeps every core of this machine busy (one spinning process per core, at the benchmark's priority)
while the baselines, the canaries or both are measured: ``baseline`` and ``canary`` show what a change of the
machine's load between the two runs does to the verdicts, which the gate's interval does not cover.

Usage:
  .venv/bin/python benchmarks/canary_false_alarm.py [--trials 10] [--speed 40] [--busy none|baseline|canary|both]
"""
import argparse
import contextlib
import multiprocessing
import os
import pathlib
import statistics
import sys
import tempfile

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "collections"))
from standin_process import LocalStandin  # noqa: E402

from ansible_collections.ascend.fleet.plugins.module_utils import load_test  # noqa: E402
from ansible_collections.ascend.fleet.plugins.module_utils.bench_baseline import compare  # noqa: E402

SLOWDOWN = 1.3


def settings():
    """The canary preset and the gate's defaults, as the roles have them."""
    bench = yaml.safe_load((REPO / "roles/vllm_bench/defaults/main.yml").read_text())
    fleet = yaml.safe_load((REPO / "roles/fleet/defaults/main.yml").read_text())
    return (bench["vllm_bench_presets"][fleet["fleet_canary_preset"]], fleet["fleet_canary_max_regression"],
            fleet["fleet_canary_confidence"])


def measure(server, preset):
    params = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    params.update(preset, base_url=server.url, answer_check="none")
    return load_test.run(params)["groups"]


def spin():
    while True:
        pass


@contextlib.contextmanager
def load(busy):
    """Every core kept busy while the block runs, when busy."""
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(os.cpu_count() if busy else 0)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--speed", type=float, default=40,
                        help="how many times faster than a 310P pair the stand-ins run (default 40, the twin's)")
    parser.add_argument("--busy", choices=("none", "baseline", "canary", "both"), default="none",
                        help="which measurements run with every core kept busy (default none)")
    args = parser.parse_args()
    preset, max_regression, confidence = settings()
    with tempfile.TemporaryDirectory() as folder:
        equal = LocalStandin(pathlib.Path(folder, "equal"), speed=args.speed)
        slower = LocalStandin(pathlib.Path(folder, "slower"), speed=args.speed, slowdown=SLOWDOWN)
        try:
            verdicts = {"equal": [], "slower": []}
            for trial in range(1, args.trials + 1):
                with load(args.busy in ("baseline", "both")):
                    baseline = measure(equal, preset)
                for name, server in (("equal", equal), ("slower", slower)):
                    with load(args.busy in ("canary", "both")):
                        canary = measure(server, preset)
                    result = compare(baseline, canary, max_regression, confidence)
                    verdicts[name].append(result)
                    throughput = result["metrics"]["throughput"]
                    verdict = "stopped" if result["regressed"] else "passed"
                    print("trial %d, %s canary: %s, throughput %+.1f %% (%+.1f to %+.1f), p95 latency %+.1f %%" % (
                        trial, name, verdict, -100 * throughput["regression"] + 0.0, -100 * throughput["high"],
                        -100 * throughput["low"], 100 * result["metrics"]["p95_latency"]["regression"]), flush=True)
        finally:
            equal.stop()
            slower.stop()
    for name, what in (("equal", "false alarms (equal images stopped)"),
                       ("slower", "caught (%d %% slower images stopped)" % round(100 * (SLOWDOWN - 1)))):
        results = verdicts[name]
        change = statistics.median(-100 * r["metrics"]["throughput"]["regression"] for r in results)
        print("%s: %d of %d; median throughput change %+.1f %%" % (
            what, sum(r["regressed"] for r in results), len(results), change))
    print("preset %s, max regression %g, confidence %g, stand-in speed x%g, cores kept busy during: %s" % (
        preset, max_regression, confidence, args.speed, args.busy))


if __name__ == "__main__":
    main()
