#!/usr/bin/env python3
"""How does site.yml scale with the fleet? One run on 1, 8 and 16 twin hosts, over SSH, as a site runs it.

For each fleet size and each strategy it brings up a private twin fleet (hosts made fresh, so the first deploy
pulls the image on every host), runs `ansible-playbook site.yml`, then runs it twice on the converged fleet: as
the site's inventory batches it (fleet_serial 5, so 16 hosts deploy in 4 batches) and with every host in one
batch (fleet_serial 100%), which tells the batches' share of the rerun from the per-host cost. It prints first
deploy time, converged rerun times and changed count, the controller's CPU, and the ratio of the largest fleet
to the smallest. Targets: a converged rerun changes nothing; the 8-host rerun takes at most twice the 1-host
rerun. Timings are from one run on a shared machine: read them as ratios.

The twin hosts share this machine's CPUs with the controller, where a real fleet's hosts have their own. So it
also splits the rerun's CPU time between the controller (ansible-playbook and its workers) and everything
else on the machine (the twin hosts: sshd, the modules' Python, their engines): the controller's share per
host is what grows with a real fleet, and what sets how many hosts one controller serves.

--strategies linear mitogen_linear measures Mitogen for Ansible (https://mitogen.networkgenomics.com) beside
Ansible's own strategy, fleet by fleet. Mitogen is not a requirement of the project: it is enabled for its runs
only, by environment variables (ANSIBLE_STRATEGY_PLUGINS, ANSIBLE_STRATEGY), never in ansible.cfg, and this
script says how to install it when it is missing. --forks (default: ansible.cfg's) is passed to every run. It
bounds the plays that run every host at once (preflight, gateway, the one-batch rerun); the batched deploy play
never has more than fleet_serial hosts in flight, whatever forks is.

Needs the twin's registry and images (`scripts/dev twin up`). Usage:
  .venv/bin/python benchmarks/fleet_scale.py [--sizes 1 8 16] [--strategies linear mitogen_linear] [--forks N]
"""
import argparse
import configparser
import importlib.util
import os
import pathlib
import platform
import resource
import subprocess
import sys
import tempfile
import time

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from readme_commands import recap  # noqa: E402

from twin.fleet import GROUP_VARS  # noqa: E402
from twin.lifecycle import DEMO_GATEWAY, Twin, demo_hosts  # noqa: E402

# The Mitogen release measured here (supports ansible-core 2.19 since 0.3.25).
MITOGEN = "mitogen==0.3.54"


def busy_cpu_s():
    """CPU seconds this machine spent on anything but idling, since boot (/proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(value) for value in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def configured_forks():
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    return config.getint("defaults", "forks", fallback=5)


def strategy_env(strategy):
    """The environment that selects a strategy for one run. Mitogen's plugins are found where pip installed
    them; without them, how to install them."""
    if not strategy.startswith("mitogen"):
        return {"ANSIBLE_STRATEGY": strategy}
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None:
        sys.exit("the %s strategy needs Mitogen, which the project does not require; install it into this "
                 "environment for the measurement: %s -m pip install %s" % (strategy, sys.executable, MITOGEN))
    plugins = pathlib.Path(spec.submodule_search_locations[0]) / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": strategy}


def site(inventory, log, *args, env=None, playbook="site.yml"):
    """Run site.yml, or another playbook (with ansible-playbook's args and env's variables added); its seconds,
    changed tasks over all hosts, and CPU seconds (controller, the rest)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]),
               **(env or {}))
    started, busy, controller = time.monotonic(), busy_cpu_s(), children_cpu_s()
    result = subprocess.run(["ansible-playbook", "-i", str(inventory), playbook] + list(args), cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    elapsed = time.monotonic() - started
    controller = children_cpu_s() - controller
    others = busy_cpu_s() - busy - controller
    log.write_text(result.stdout)
    hosts = recap(result.stdout).values()
    if result.returncode != 0 or not hosts or any(unreachable or failed for _, _, unreachable, failed in hosts):
        sys.exit("%s failed (exit %d); its output is in %s, which ends:\n%s" % (
            playbook, result.returncode, log, "\n".join(result.stdout.splitlines()[-40:])))
    return elapsed, sum(changed for _, changed, _, _ in hosts), controller, others


def measure(twin, strategy, size, forks, workdir):
    name = "%s-%d" % (strategy, size)
    fleet = twin.fleet(workdir / ("fleet-" + name), demo_hosts(size))
    env, args = strategy_env(strategy), ["--forks", str(forks)]
    try:
        fleet.up()
        # Ansible's apt module installs a missing python3-apt itself, then runs again under the system Python:
        # Mitogen's in-process modules cannot, and the gateway play fails ("Could not import the python3-apt
        # module"). The gateway has it from the start, for every strategy, as Ubuntu servers do (unattended-upgrades
        # needs it).
        fleet[DEMO_GATEWAY].exec("sh", "-c", "apt-get update -qq && apt-get install -qq -y python3-apt")
        first, _, _, _ = site(fleet.inventory, workdir / ("site-%s-first.log" % name), *args, env=env)
        rerun, rerun_changed, controller, others = site(fleet.inventory, workdir / ("site-%s-rerun.log" % name),
                                                        *args, env=env)
        one_batch, one_batch_changed, _, _ = site(fleet.inventory, workdir / ("site-%s-one-batch.log" % name),
                                                  *args, "-e", "fleet_serial=100%", env=env)
    finally:
        fleet.down()
    return {"strategy": strategy, "hosts": size, "first_s": first, "rerun_s": rerun,
            "one_batch_s": one_batch, "rerun_changed": rerun_changed + one_batch_changed,
            "controller_cpu_s": controller, "hosts_cpu_s": others}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 16], help="fleet sizes (default 1 8 16)")
    parser.add_argument("--strategies", nargs="+", default=["linear"], choices=["linear", "mitogen_linear"],
                        help="strategies to measure, each on fleets of its own (default linear)")
    parser.add_argument("--forks", type=int, default=configured_forks(),
                        help="ansible-playbook --forks (default ansible.cfg's: %(default)s)")
    args = parser.parse_args()
    for strategy in args.strategies:
        strategy_env(strategy)  # a missing Mitogen is said before any fleet is made
    twin = Twin()
    if not twin.registry_answers():
        sys.exit("the twin is not up: run `scripts/dev twin up` first")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-scale-", dir=str(twin.home)) as scratch:
        for size in args.sizes:
            for strategy in args.strategies:
                print("measuring %d host(s), %s ..." % (size, strategy), flush=True)
                rows.append(measure(twin, strategy, size, args.forks, pathlib.Path(scratch)))
    serial = yaml.safe_load((GROUP_VARS / "all.yml").read_text())["fleet_serial"]
    print("\nsite.yml over SSH on twin hosts, %s, %d cores, %s; forks %d, fleet_serial %s" % (
        platform.machine(), os.cpu_count(), time.strftime("%Y-%m-%d"), args.forks, serial))
    print("| strategy | hosts | first deploy (s) | converged rerun (s) | rerun, one batch (s) | rerun changed "
          "| rerun CPU: controller (s) | controller per host (s) | rerun CPU: twin hosts (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| %s | %d | %.1f | %.1f | %.1f | %d | %.1f | %.2f | %.1f |" % (
            row["strategy"], row["hosts"], row["first_s"], row["rerun_s"], row["one_batch_s"], row["rerun_changed"],
            row["controller_cpu_s"], row["controller_cpu_s"] / row["hosts"], row["hosts_cpu_s"]))
    by_strategy = {strategy: [row for row in rows if row["strategy"] == strategy] for strategy in args.strategies}
    for strategy, own in by_strategy.items():
        small, large = own[0], own[-1]
        print("| %s | %d / %d | %.2f | %.2f | %.2f | | %.2f | %.2f | %.2f |" % (
            strategy, large["hosts"], small["hosts"], large["first_s"] / small["first_s"],
            large["rerun_s"] / small["rerun_s"], large["one_batch_s"] / small["one_batch_s"],
            large["controller_cpu_s"] / small["controller_cpu_s"],
            (large["controller_cpu_s"] / large["hosts"]) / (small["controller_cpu_s"] / small["hosts"]),
            large["hosts_cpu_s"] / small["hosts_cpu_s"]))
    if len(by_strategy) > 1:
        base, other = args.strategies[0], args.strategies[1]
        print("\n%s / %s, fleet by fleet:" % (other, base))
        print("| hosts | first deploy | converged rerun | rerun, one batch | rerun CPU: controller "
              "| rerun CPU: twin hosts |")
        print("|---|---|---|---|---|---|")
        for one, two in zip(by_strategy[base], by_strategy[other]):
            print("| %d | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
                one["hosts"], two["first_s"] / one["first_s"], two["rerun_s"] / one["rerun_s"],
                two["one_batch_s"] / one["one_batch_s"], two["controller_cpu_s"] / one["controller_cpu_s"],
                two["hosts_cpu_s"] / one["hosts_cpu_s"]))
    print()
    print("converged reruns changed=0: %s" % ("yes" if all(r["rerun_changed"] == 0 for r in rows) else "NO"))
    for strategy, own in by_strategy.items():
        small, large = own[0], own[-1]
        print("%s: %d-host rerun <= 2x the %d-host rerun: %s; controller CPU per host in the rerun: %s; rerun CPU "
              "over wall time: %s of %d cores" % (
                  strategy, large["hosts"], small["hosts"], "yes" if large["rerun_s"] <= 2 * small["rerun_s"] else "NO",
                  ", ".join("%.2f s (%d)" % (r["controller_cpu_s"] / r["hosts"], r["hosts"]) for r in own),
                  ", ".join("%.1f (%d)" % ((r["controller_cpu_s"] + r["hosts_cpu_s"]) / r["rerun_s"], r["hosts"])
                            for r in own), os.cpu_count()))


if __name__ == "__main__":
    main()
