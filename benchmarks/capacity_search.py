#!/usr/bin/env python3
"""The capacity search against the seed's matrix on the same servers: requests and time each spends, and the
capacity each finds.

Runs the stand-in `vllm serve` on this machine (no Docker) with a known capacity: --max-num-seqs N serves N
requests at once and queues the rest, so above N some request waits a whole answer. The SLO is a p95 latency one
and a half times one user's (measured first), met up to N and missed above it. For each N, on one image size and
output length:
- the matrix: the seed's concurrency axis (1, 8, 16, 32, 64) with 64 requests each; its capacity is the largest
  concurrency whose measured p95 meets the SLO;
- the search (library/vllm_benchmark.py, search: concurrency) over the same axis (1 to 64), with the vllm_bench
  role's tolerance and probe size, its open-loop check left out (it is not part of what the matrix measures).
Prints one line per N: each one's requests, seconds and capacity, and the search's requests as a share of the
matrix's. Timings are from one run on a shared machine: the point is the ratios.

Usage:
  .venv/bin/python benchmarks/capacity_search.py [--capacities 4,12,24] [--speed 10]
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

from ansible_collections.ascend.fleet.plugins.modules import vllm_benchmark  # noqa: E402

SEED_CONCURRENCY = [1, 8, 16, 32, 64]
SEED_REQUESTS = 64
WORKLOAD = {"image_sizes": ["640x480"], "max_tokens": [32]}


def params(server, **overrides):
    values = {name: spec.get("default") for name, spec in vllm_benchmark.ARGUMENT_SPEC.items()}
    values.update(WORKLOAD, base_url=server.url, warmup_requests=0, answer_check="none")
    values.update(overrides)
    return values


def timed(values):
    started = time.monotonic()
    return vllm_benchmark.run(values), time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacities", default="4,12,24", help="the servers' --max-num-seqs (default 4,12,24)")
    parser.add_argument("--speed", type=float, default=10,
                        help="how many times faster than a 310P pair the stand-in runs (default 10)")
    args = parser.parse_args()
    role = yaml.safe_load((REPO / "roles/vllm_bench/defaults/main.yml").read_text())
    print("capacity | matrix: requests, s, capacity | search: requests, s, capacity, probes | search/matrix requests")
    with tempfile.TemporaryDirectory() as folder:
        for capacity in (int(value) for value in args.capacities.split(",")):
            server = LocalStandin(pathlib.Path(folder, str(capacity)), speed=args.speed, max_num_seqs=capacity)
            try:
                alone = vllm_benchmark.run(params(server, concurrency=[1], requests_per_group=4))["groups"][0]
                slo = {"p95_latency_s": round(1.5 * alone["p95_latency_s"], 4)}
                matrix, matrix_s = timed(params(server, concurrency=SEED_CONCURRENCY,
                                                requests_per_group=SEED_REQUESTS))
                meeting = [group["concurrency"] for group in matrix["groups"]
                           if group["p95_latency_s"] <= slo["p95_latency_s"]]
                search, search_s = timed(params(
                    server, concurrency=SEED_CONCURRENCY, search="concurrency", slo=slo, open_loop_requests=0,
                    search_tolerance=role["vllm_bench_search_tolerance"],
                    search_confidence=role["vllm_bench_search_confidence"],
                    search_probe_requests=role["vllm_bench_search_probe_requests"]))
                (found,) = search["capacity"]
                spent = sum(group["requests"] for group in matrix["groups"])
                print("%d | %d, %.0f s, %s | %d, %.0f s, %d, %s | %.2f" % (
                    capacity, spent, matrix_s, max(meeting) if meeting else 0, found["requests"], search_s,
                    found["max_concurrency"], ",".join(str(p["concurrency"]) for p in found["probes"]),
                    found["requests"] / float(spent)), flush=True)
            finally:
                server.stop()
    print("workload %s, SLO p95 latency 1.5 x one user's, tolerance %d, probe requests %d, stand-in speed x%g" % (
        WORKLOAD, role["vllm_bench_search_tolerance"], role["vllm_bench_search_probe_requests"], args.speed))


if __name__ == "__main__":
    main()
