#!/usr/bin/env python3
"""What the NPU collector costs a host: CPU per reading, and its share of one core at the default interval.

The collector (module_utils/npu_exporter.py) shares the host's CPUs with vLLM. Each reading runs `npu-smi info`
once and the Docker CLI twice (`docker ps` and `docker container inspect` of the instances' containers, for their
restart counts), parses them and renders the exposition; scrapes are answered from the last reading and cost next
to nothing.
This runs the collector's own reading loop against the twin's npu-smi emulator (tests/twin/npu_smi.py) with the
seed's host profile (four Duo cards, eight chips), counts the CPU time of the collector's process and of the
npu-smi and docker processes it starts (getrusage; docker is this machine's own CLI and engine, which runs no
instance container, so a reading runs `docker ps` only), and times scrapes of its HTTP server. Prints the CPU per
reading split in collector and its children, and both as a share of one core at a 15 s interval. The emulator is
a Python program (its start is most of its cost); a real npu-smi's own CPU differs, the collector's own part does
not.

Usage: .venv/bin/python benchmarks/npu_exporter_cost.py [--readings 200] [--interval 15]
"""
import argparse
import json
import pathlib
import resource
import sys
import tempfile
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests")]
from ansible_collections.ascend.fleet.plugins.module_utils import npu_exporter  # noqa: E402
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import NPU_OPTIONS  # noqa: E402
from twin.hosts import load_profiles  # noqa: E402


def cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readings", type=int, default=200)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--scrapes", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        profile = scratch / "npu-smi-twin.json"
        profile.write_text(json.dumps(load_profiles()["seed_duo4"]))
        npu_smi = scratch / "npu-smi"
        npu_smi.write_text("#!/bin/sh\nNPU_SMI_TWIN_PROFILE=%s exec %s %s \"$@\"\n" % (
            profile, sys.executable, REPO / "tests" / "twin" / "npu_smi.py"))
        npu_smi.chmod(0o755)
        params = dict((name, spec.get("default")) for name, spec in NPU_OPTIONS.items())
        params.update(npu_smi=str(npu_smi), driver_home=str(scratch), firmware_home=str(scratch))
        collector = npu_exporter.Collector(params, args.interval)
        reading = collector.collect_once()
        assert not reading["problem"] and len(reading["chips"]) == 8, reading
        own, children, started = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.monotonic()
        for _ in range(args.readings):
            collector.collect_once()
        wall = (time.monotonic() - started) / args.readings
        own = (cpu(resource.RUSAGE_SELF) - own) / args.readings
        children = (cpu(resource.RUSAGE_CHILDREN) - children) / args.readings

        server = npu_exporter.ThreadingServer(("127.0.0.1", 0), npu_exporter.handler_for(collector))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = "http://127.0.0.1:%d/metrics" % server.server_address[1]
        before = cpu(resource.RUSAGE_SELF)
        for _ in range(args.scrapes):
            urllib.request.urlopen(url, timeout=10).read()
        scrape = (cpu(resource.RUSAGE_SELF) - before) / args.scrapes  # the client's share included: an upper bound
        server.shutdown()

    print("NPU collector, %d readings of the seed's host (8 chips), %d scrapes" % (args.readings, args.scrapes))
    print("  per reading: %.1f ms wall, CPU %.1f ms collector + %.1f ms npu-smi (the emulator) and docker"
          % (wall * 1e3, own * 1e3, children * 1e3))
    print("  per scrape:  CPU under %.2f ms (served from the last reading)" % (scrape * 1e3))
    print("  share of one core at a %gs interval: collector %.3f %%, with npu-smi and docker %.3f %%"
          % (args.interval, 100 * own / args.interval, 100 * (own + children) / args.interval))


if __name__ == "__main__":
    main()
