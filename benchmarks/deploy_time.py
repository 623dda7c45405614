#!/usr/bin/env python3
"""How long does the server phase take on a host of four cards, when each model load takes minutes?

On one twin host of the seed's kind (four Atlas 300I Duo cards), it deploys once, then times the server phase
(`site.yml --tags server`) with the stand-in's load set to a realistic VLLM_TWIN_LOAD_S=300 real seconds,
scaled by --speed: first the single layout (one instance, one load), then per_card (four new instances, four
loads). A host that waits for its instances one after another takes about four loads; one that starts them all
and waits for them together takes about one. Prints both times, the load, and the per_card/single ratio
(target: close to 1, far from 4). Timings are from one run on a shared machine: read them as ratios.

Needs the twin's registry and images (`scripts/dev twin up`). Usage:
  .venv/bin/python benchmarks/deploy_time.py [--speed 10]
"""
import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

from fleet_scale import REPO, site

sys.path.insert(0, str(REPO / "tests"))
from twin.lifecycle import Twin  # noqa: E402

LOAD_S = 300  # a real 310P pair loading Qwen3-VL-8B-Instruct: minutes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speed", type=float, default=10,
                        help="how many times faster than real the stand-in loads (default 10: 30 s per load)")
    args = parser.parse_args()
    twin = Twin()
    if not twin.registry_answers():
        sys.exit("the twin is not up: run `scripts/dev twin up` first")
    slow = {"VLLM_TWIN_SPEED": "%g" % args.speed, "VLLM_TWIN_LOAD_S": str(LOAD_S)}
    load_s = LOAD_S / args.speed
    times = {}
    with tempfile.TemporaryDirectory(prefix="deploy-time-", dir=str(twin.home)) as scratch:
        workdir = pathlib.Path(scratch)
        fleet = twin.fleet(workdir / "fleet", {"twin-cards4": "seed_duo4"})
        try:
            fleet.up()
            print("deploying the host once (image, model) ...", flush=True)
            site(fleet.inventory, workdir / "first.log")
            for layout in ("single", "per_card"):
                print("timing the server phase, layout %s, %.0f s per load ..." % (layout, load_s), flush=True)
                # The ready timeout is also vLLM's own wait for its engine (VLLM_ENGINE_READY_TIMEOUT_S), which the
                # stand-in holds to the load in real-hardware seconds: at least LOAD_S.
                extra = json.dumps({"vllm_server_layout": layout, "vllm_server_extra_env": slow,
                                    "vllm_server_ready_timeout": max(LOAD_S, int(LOAD_S / args.speed * 4 + 120))})
                times[layout], _, _, _ = site(fleet.inventory, workdir / ("%s.log" % layout), "--tags", "server",
                                              "-e", extra)
        finally:
            fleet.down()
    print("\nserver phase on one twin host of four Duo cards, %s, %d cores, %s" % (
        platform.machine(), os.cpu_count(), time.strftime("%Y-%m-%d")))
    print("| layout | instances | model load (s) | server phase (s) | loads' worth |")
    print("|---|---|---|---|---|")
    for layout, instances in (("single", 1), ("per_card", 4)):
        print("| %s | %d | %.0f | %.1f | %.2f |" % (layout, instances, load_s, times[layout], times[layout] / load_s))
    ratio = times["per_card"] / times["single"]
    print("per_card / single: %.2f (one after another would be about 4)" % ratio)


if __name__ == "__main__":
    main()
