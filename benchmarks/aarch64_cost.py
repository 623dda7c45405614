#!/usr/bin/env python3
"""How much slower is an emulated aarch64 twin host than one of this machine's architecture?

Real hosts are Kunpeng 920s (aarch64); on an x86_64 machine the twin runs an aarch64 host's programs, its Python
and the stand-in under qemu-user. This brings up two twin hosts with the seed's four cards, one of each
architecture, and on each alone times what the suite asks of an aarch64 host: the first deploy (`site.yml`: the
image pulled, the model checked, the instance started and smoke-tested), the verification (`playbooks/verify.yml`)
and the quick benchmark (`playbooks/benchmark.yml`). Prints the seconds of each and the aarch64/native ratio.
Timings are from one run on a shared machine: read them as ratios.

Needs the twin's registry and images (`scripts/dev twin up`). Usage:
  .venv/bin/python benchmarks/aarch64_cost.py
"""
import argparse
import os
import pathlib
import platform
import sys
import tempfile
import time

from fleet_scale import REPO, site

sys.path.insert(0, str(REPO / "tests"))
from twin.lifecycle import Twin  # noqa: E402
from twin.platforms import NATIVE  # noqa: E402

HOSTS = {NATIVE: ("cost-native", "seed_duo4"), "aarch64": ("cost-aarch64", "kunpeng_seed_duo4")}


def main():
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    if NATIVE == "aarch64":
        sys.exit("this machine is aarch64: its twin hosts run natively, there is nothing emulated to measure")
    twin = Twin()
    if not twin.registry_answers():
        sys.exit("the twin is not up: run `scripts/dev twin up` first")
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="aarch64-cost-", dir=str(twin.home)) as scratch:
        workdir = pathlib.Path(scratch)
        fleet = twin.fleet(workdir / "fleet", dict(HOSTS.values()))
        try:
            fleet.up()
            for architecture, (name, _) in HOSTS.items():
                inventory = fleet.write_inventory(only=[name])
                print("%s (%s): deploy, verify, quick benchmark ..." % (name, architecture), flush=True)
                seconds[architecture] = (
                    site(inventory, workdir / ("%s-site.log" % name))[0],
                    site(inventory, workdir / ("%s-verify.log" % name), playbook="playbooks/verify.yml")[0],
                    site(inventory, workdir / ("%s-bench.log" % name), "-e",
                         "vllm_bench_reports_dir=%s" % (workdir / name), playbook="playbooks/benchmark.yml")[0])
        finally:
            fleet.down()
    print("\none twin host of four Duo cards, alone, on %s with %d cores, %s" % (
        platform.machine(), os.cpu_count(), time.strftime("%Y-%m-%d")))
    print("| step | %s (s) | aarch64, emulated (s) | ratio |" % NATIVE)
    print("|---|---|---|---|")
    for index, step in enumerate(("first deploy (site.yml)", "verification", "quick benchmark")):
        native, emulated = seconds[NATIVE][index], seconds["aarch64"][index]
        print("| %s | %.0f | %.0f | %.1f |" % (step, native, emulated, emulated / native))
    total = [sum(seconds[architecture]) for architecture in (NATIVE, "aarch64")]
    print("| all three | %.0f | %.0f | %.1f |" % (total[0], total[1], total[1] / total[0]))


if __name__ == "__main__":
    main()
