#!/usr/bin/env python3
"""The capacity search against the seed's matrix on the same servers and the same axes: requests and time each
spends, and the capacity each finds.

Runs the stand-in `vllm serve` on this machine (no Docker) with a known capacity: --max-num-seqs N serves N
requests at once and queues the rest, so above N some request waits a whole answer. For each N the matrix runs once
over the seed preset's axes (3 image sizes x 3 output lengths x concurrency 1, 8, 16, 32, 64, 64 requests each),
and the search (library/vllm_benchmark.py, search: concurrency, the vllm_bench role's tolerance and probe size, its
open-loop check left out: the matrix has none) over the same axes, two ways:
- per output length: each length searched over the 3 image sizes with an SLO of its own, a p95 latency one and a
  half times one user's at that length and the largest image; every cell's capacity is then N, the known one;
- one SLO: the whole axes searched at once with the 256-token SLO, as an operator gives one target; a queued short
  answer waits less, so shorter lengths meet it above N, and their capacities are larger.
The matrix's capacity for a cell is the largest concurrency whose measured p95 meets the cell's SLO. Prints per N
and way: the matrix's and the search's requests and seconds, the search's requests as a share of the matrix's, and
in how many of the 9 cells the two agree (the search's capacity at or above the matrix's, and below the next
concurrency the matrix measured), with each cell's capacity found and first probe. Timings are from one run on a
shared machine: the point is the ratios.

Usage:
  .venv/bin/python benchmarks/capacity_search.py [--capacities 6,24] [--speed 40]
"""
import argparse
import pathlib
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "collections"))
from standin_process import LocalStandin  # noqa: E402

from ansible_collections.ascend.fleet.plugins.module_utils import load_test  # noqa: E402

ROLE = yaml.safe_load((REPO / "roles/vllm_bench/defaults/main.yml").read_text())
SEED = ROLE["vllm_bench_presets"]["seed"]


def params(server, **overrides):
    values = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    values.update(base_url=server.url, warmup_requests=0, answer_check="none", image_sizes=SEED["image_sizes"],
                  max_tokens=SEED["max_tokens"], concurrency=SEED["concurrency"])
    values.update(overrides)
    return values


def timed(values):
    started = time.monotonic()
    return load_test.run(values), time.monotonic() - started


def agrees(found, measured, target):
    """Whether a search's capacity is one the matrix's groups of its cell allow: at or above the largest concurrency
    they show meeting the target, below the smallest above it they show missing it."""
    meeting = [group["concurrency"] for group in measured if group["p95_latency_s"] <= target]
    missing = [group["concurrency"] for group in measured
               if group["p95_latency_s"] > target and group["concurrency"] > max(meeting or [0])]
    return max(meeting or [0]) <= found["max_concurrency"] < min(missing or [found["max_concurrency"] + 1])


def search(server, slo, **axes):
    return timed(params(server, search="concurrency", slo=slo, open_loop_requests=0,
                        search_tolerance=ROLE["vllm_bench_search_tolerance"],
                        search_confidence=ROLE["vllm_bench_search_confidence"],
                        search_probe_requests=ROLE["vllm_bench_search_probe_requests"], **axes))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacities", default="6,24", help="the servers' --max-num-seqs (default 6,24)")
    parser.add_argument("--speed", type=float, default=40,
                        help="how many times faster than a 310P pair the stand-in runs (default 40, the twin's)")
    args = parser.parse_args()
    print("capacity, SLO | matrix: requests, s | search: requests, s | search/matrix requests | cells agreeing | "
          "capacity found (first probe) per image size/max_tokens")
    with tempfile.TemporaryDirectory() as folder:
        for capacity in (int(value) for value in args.capacities.split(",")):
            server = LocalStandin(pathlib.Path(folder, str(capacity)), speed=args.speed, max_num_seqs=capacity)
            try:
                slos = {tokens: {"p95_latency_s": round(1.5 * load_test.run(params(
                    server, image_sizes=SEED["image_sizes"][:1], max_tokens=[tokens], concurrency=[1],
                    requests_per_group=4))["groups"][0]["p95_latency_s"], 4)} for tokens in SEED["max_tokens"]}
                matrix, matrix_s = timed(params(server, requests_per_group=SEED["requests_per_group"]))
                per_length = [search(server, slos[tokens], max_tokens=[tokens]) for tokens in SEED["max_tokens"]]
                longest = slos[max(SEED["max_tokens"])]
                spent = sum(group["requests"] for group in matrix["groups"])
                for way, runs in (("per length", per_length), ("one SLO", [search(server, longest)])):
                    found = [record for result, _seconds in runs for record in result["capacity"]]
                    searched = sum(record["requests"] for record in found)
                    agreeing = sum(1 for record in found if agrees(record, [
                        group for group in matrix["groups"] if (group["image_size"], group["max_tokens"]) == (
                            record["image_size"], record["max_tokens"])], record["slo"]["p95_latency_s"]))
                    print("%d, %s | %d, %.0f s | %d, %.0f s | %.2f | %d of %d | %s" % (
                        capacity, way, spent, matrix_s, searched, sum(seconds for _result, seconds in runs),
                        searched / float(spent), agreeing, len(found), " ".join("%s/%d:%d(%d)" % (
                            record["image_size"], record["max_tokens"], record["max_concurrency"],
                            record["started_at"]) for record in found)), flush=True)
            finally:
                server.stop()
    print("SLO p95 latency 1.5 x one user's at %s; tolerance %d, probe requests %d, stand-in speed x%g" % (
        SEED["image_sizes"][0], ROLE["vllm_bench_search_tolerance"], ROLE["vllm_bench_search_probe_requests"],
        args.speed))


if __name__ == "__main__":
    main()
