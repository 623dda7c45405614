#!/usr/bin/env python3
"""Does rolling a change across the fleet fail a single user request? Users' requests go through the gateway.

On a twin fleet of its own (two Ascend hosts in the per_card layout: 4 + 2 instances, and a gateway host) it
deploys site.yml, then sends requests through the gateway at --concurrency (default 16) from this machine, as
the quick benchmark makes them (the vllm_benchmark module's images and prompt, 640x480, 32 tokens, streamed):
for --before seconds, then while site.yml rolls a new image tag (pushed to the twin's registry) across the
fleet one host at a time (fleet_serial 1): each instance is drained on the gateway, replaced, smoke-tested and
put back. Prints, from this one run:
- requests sent and failed (target: 0 failed), before and during the roll;
- p95 latency during the roll over p95 before it, and how long the roll took;
- the gateway's added latency per request: the median of GET /v1/models through the gateway less the median
  straight to an instance (target: under 1 ms).

Needs the twin's registry and images (`scripts/dev twin up`). Usage:
  .venv/bin/python benchmarks/rolling_upgrade.py [--concurrency 16] [--before 20]
"""
import argparse
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import threading
import time

from fleet_scale import REPO, site

sys.path.insert(0, str(REPO / "tests"))
import ascend_vllm_fleet  # noqa: F401, I001  (Ansible's collection loader, for the collection's code below)
from twin.lifecycle import IMAGE_REPOSITORY, IMAGE_TAGS, Twin  # noqa: E402
from twin.shell import docker  # noqa: E402

# isort: split
from ansible_collections.ascend.fleet.plugins.module_utils import bench_record, openai_client, png_images  # noqa: E402

percentile = bench_record.percentile
HOSTS = {"roll-a": "seed_duo4", "roll-b": "duo2", "roll-gw": "gateway"}
NEW_VERSION = "v0.18.0rc1-roll"
GATEWAY_PORT = 8080
PROMPT = "描述一下图片"


class Load:
    """Users streaming chat requests through the gateway, each sending the next when the last has ended."""

    def __init__(self, base_url, api_key, concurrency):
        self.client = openai_client.Client(base_url, api_key, 120)
        chat = openai_client.ImageChat(self.client.models()[0], PROMPT, 32, stream=True, ignore_eos=True)
        series = png_images.ImageSeries(640, 480)
        self.bodies = [chat.body(openai_client.image_data_url(series.png(seed))) for seed in range(64)]
        self.concurrency = concurrency
        self.results = []  # (wall time sent, StreamResult)
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def user(self, number):
        sent = 0
        while not self.stop.is_set():
            result = openai_client.StreamResult()
            started = time.time()
            self.client.stream_chat(self.bodies[(number + sent) % len(self.bodies)], result)
            sent += self.concurrency
            with self.lock:
                self.results.append((started, result))

    def start(self):
        self.threads = [threading.Thread(target=self.user, args=(number,), daemon=True)
                        for number in range(self.concurrency)]
        for thread in self.threads:
            thread.start()

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=180)

    def between(self, start, end):
        return [result for sent, result in self.results if start <= sent < end]


def summary(results):
    failed = [result.error for result in results if result.error]
    latencies = [result.finished - result.sent for result in results if not result.error]
    return len(results), failed, percentile(latencies, 95) if latencies else None


def median_ms(url, api_key, count=300):
    client = openai_client.Client(url, api_key, 10)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        status, _ = client.call("GET", "/v1/models")
        times.append(1000 * (time.perf_counter() - started))
        if status != 200:
            sys.exit("GET %s/v1/models answered %s" % (url, status))
    return statistics.median(times)


def push_new_tag(twin):
    """The stand-in image under a new tag: a new image reference, as a site's upgrade brings."""
    source = "%s/%s:%s" % (twin.registry, IMAGE_REPOSITORY, IMAGE_TAGS[0])
    target = "%s/%s:%s-310p" % (twin.registry, IMAGE_REPOSITORY, NEW_VERSION)
    docker("pull", "-q", source)
    docker("tag", source, target)
    docker("push", "-q", target)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--before", type=float, default=20, help="seconds of load before the roll (default 20)")
    args = parser.parse_args()
    twin = Twin()
    if not twin.registry_answers():
        sys.exit("the twin is not up: run `scripts/dev twin up` first")
    with tempfile.TemporaryDirectory(prefix="rolling-upgrade-", dir=str(twin.home)) as scratch:
        workdir = pathlib.Path(scratch)
        fleet = twin.fleet(workdir / "fleet", HOSTS)
        try:
            fleet.up()
            print("deploying two hosts (per_card) and the gateway ...", flush=True)
            layout = ["-e", "vllm_server_layout=per_card"]
            site(fleet.inventory, workdir / "first.log", *layout)
            api_key = (fleet.inventory.parent / "credentials" / "api-key").read_text().strip()
            gateway = fleet["roll-gw"].url(GATEWAY_PORT)
            push_new_tag(twin)
            load = Load(gateway, api_key, args.concurrency)
            load.start()
            print("load at concurrency %d through %s for %.0f s ..." % (args.concurrency, gateway, args.before),
                  flush=True)
            time.sleep(args.before)
            roll_started = time.time()
            print("rolling %s across the fleet, one host at a time ..." % NEW_VERSION, flush=True)
            roll_s, _, _, _ = site(fleet.inventory, workdir / "roll.log", *layout,
                                   "-e", "fleet_image_version=%s" % NEW_VERSION, "-e", "fleet_serial=1")
            roll_ended = time.time()
            load.finish()
            through = median_ms(gateway, api_key)
            direct = median_ms(fleet["roll-a"].url(8000), api_key)
        finally:
            fleet.down()
    before = summary(load.between(0, roll_started))
    during = summary(load.between(roll_started, roll_ended))
    print("\nrolling a new image tag across 2 twin hosts (6 per_card instances) behind the gateway, %s, %d cores, %s"
          % (platform.machine(), os.cpu_count(), time.strftime("%Y-%m-%d")))
    print("| phase | requests sent | failed | p95 latency (s) |")
    print("|---|---|---|---|")
    for name, (sent, failed, p95) in (("before the roll", before), ("during the roll", during)):
        print("| %s | %d | %d | %s |" % (name, sent, len(failed), "%.3f" % p95 if p95 else "-"))
    failures = before[1] + during[1]
    if failures:
        print("failed requests by kind: %s" % {kind: failures.count(kind) for kind in sorted(set(failures))})
    print("roll: %.1f s (site.yml, fleet_serial 1)" % roll_s)
    if before[2] and during[2]:
        print("p95 during / before: %.2f" % (during[2] / before[2]))
    print("gateway's added latency: median GET /v1/models %.2f ms through it, %.2f ms direct: %+.2f ms "
          "(target under 1 ms)" % (through, direct, through - direct))


if __name__ == "__main__":
    main()
