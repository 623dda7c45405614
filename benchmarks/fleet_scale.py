#!/usr/bin/env python3
"""How does site.yml scale with the fleet? One run on 1 twin host, then on 8, over SSH, as a site runs it.

For each fleet size it brings up a private twin fleet (hosts made fresh, so the first deploy pulls the image
on every host), runs `ansible-playbook site.yml`, then runs it again on the converged fleet, and prints:
first deploy time, converged rerun time and its changed count, and the ratio of the largest fleet to the
smallest for each. Targets: a converged rerun changes nothing; the 8-host rerun takes at most twice the 1-host
rerun. Timings are from one run on a shared machine: read them as ratios.

The twin hosts share this machine's CPUs with the controller, where a real fleet's hosts have their own. So it
also splits the rerun's CPU time between the controller (ansible-playbook and its workers) and everything
else on the machine (the twin hosts: sshd, the modules' Python, their engines): the controller's share per
host is what grows with a real fleet.

Needs the twin's registry and images (`scripts/dev twin up`). Usage:
  .venv/bin/python benchmarks/fleet_scale.py [--sizes 1 8]
"""
import argparse
import os
import pathlib
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from twin.lifecycle import Twin, demo_hosts  # noqa: E402

RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def busy_cpu_s():
    """CPU seconds this machine spent on anything but idling, since boot (/proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def site(inventory, log, *args):
    """Run site.yml (with ansible-playbook's args); its seconds, changed tasks over all hosts, and CPU seconds
    (controller, the rest)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    started, busy, controller = time.monotonic(), busy_cpu_s(), children_cpu_s()
    result = subprocess.run(["ansible-playbook", "-i", str(inventory), "site.yml"] + list(args), cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    elapsed = time.monotonic() - started
    controller = children_cpu_s() - controller
    others = busy_cpu_s() - busy - controller
    log.write_text(result.stdout)
    recap = RECAP.findall(result.stdout)
    if result.returncode != 0 or not recap or any(int(u) or int(f) for _, _, u, f in recap):
        sys.exit("site.yml failed (exit %d); its output is in %s" % (result.returncode, log))
    return elapsed, sum(int(changed) for _, changed, _, _ in recap), controller, others


def measure(twin, size, workdir):
    fleet = twin.fleet(workdir / ("fleet-%d" % size), demo_hosts(size))
    try:
        fleet.up()
        first, _, _, _ = site(fleet.inventory, workdir / ("site-%d-first.log" % size))
        rerun, rerun_changed, controller, others = site(fleet.inventory, workdir / ("site-%d-rerun.log" % size))
    finally:
        fleet.down()
    return {"hosts": size, "first_s": first, "rerun_s": rerun, "rerun_changed": rerun_changed,
            "controller_cpu_s": controller, "hosts_cpu_s": others}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8], help="fleet sizes (default 1 8)")
    args = parser.parse_args()
    twin = Twin()
    if not twin.registry_answers():
        sys.exit("the twin is not up: run `scripts/dev twin up` first")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-scale-", dir=str(twin.home)) as scratch:
        for size in args.sizes:
            print("measuring %d host(s) ..." % size, flush=True)
            rows.append(measure(twin, size, pathlib.Path(scratch)))
    small, large = rows[0], rows[-1]
    print("\nsite.yml over SSH on twin hosts, %s, %d cores, %s" % (
        platform.machine(), os.cpu_count(), time.strftime("%Y-%m-%d")))
    print("| hosts | first deploy (s) | converged rerun (s) | rerun changed | rerun CPU: controller (s) "
          "| rerun CPU: twin hosts (s) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| %d | %.1f | %.1f | %d | %.1f | %.1f |" % (row["hosts"], row["first_s"], row["rerun_s"],
                                                        row["rerun_changed"], row["controller_cpu_s"],
                                                        row["hosts_cpu_s"]))
    print("| %d / %d | %.2f | %.2f | | %.2f | %.2f |" % (
        large["hosts"], small["hosts"], large["first_s"] / small["first_s"], large["rerun_s"] / small["rerun_s"],
        large["controller_cpu_s"] / small["controller_cpu_s"], large["hosts_cpu_s"] / small["hosts_cpu_s"]))
    verdicts = ["converged rerun changed=0: %s" % ("yes" if all(r["rerun_changed"] == 0 for r in rows) else "NO"),
                "%d-host rerun <= 2x the %d-host rerun: %s" % (
                    large["hosts"], small["hosts"], "yes" if large["rerun_s"] <= 2 * small["rerun_s"] else "NO"),
                "controller CPU per host in the rerun: %s" % ", ".join(
                    "%.2f s (%d host%s)" % (r["controller_cpu_s"] / r["hosts"], r["hosts"], "s" * (r["hosts"] > 1))
                    for r in rows),
                "rerun CPU over wall time: %s of %d cores" % (", ".join(
                    "%.1f (%d)" % ((r["controller_cpu_s"] + r["hosts_cpu_s"]) / r["rerun_s"], r["hosts"])
                    for r in rows), os.cpu_count())]
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
