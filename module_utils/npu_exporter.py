# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NPU collector: a host's chips as Prometheus metrics, without Kubernetes.

Runs on an Ascend host as a service (roles/host_exporters installs it with the module_utils it imports, and starts
it as ``python3 -m ansible_collections.ascend.fleet.plugins.module_utils.npu_exporter``). Every interval it reads one
``npu-smi info`` table with the project's own parser, and the driver's and firmware's version.info files; a scrape
is answered from the last reading, so Prometheus's scrapes cost the host nothing and a hung npu-smi never holds a
scrape. It only reads.

The series carry the names and labels of Huawei's NPU Exporter (MindCluster), so its dashboards and queries work:
``npu_chip_info_*`` labelled ``id`` (the chip's logic id), ``model_name``, ``vdie_id`` and ``pcie_bus_info``, with
npu-smi's ``npu_id`` and ``chip_id`` beside them. A 310P's memory is the DDR the table reports
(``npu_chip_info_used_memory``/``total_memory``, MB); the 310P3 Duo prints its power as NA per chip, so
``npu_chip_info_power`` is only there where npu-smi gives a figure.

It also reads, from Docker, how often Docker's restart policy started each of the host's vLLM containers again
(``ascend_fleet_instance_restarts_total``, a container's RestartCount). A planned replacement is a new container,
whose count starts at 0, and ``docker start``/``docker restart`` reset it: the count holds only the restarts nobody
asked for (a crash, an exit), which the monitoring role's VllmRestarting alert counts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import INSTANCE_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import DockerUnavailable, run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import NPU_OPTIONS, Gatherer
from ansible_collections.ascend.fleet.plugins.module_utils.npu_smi import parse_table

DEFAULT_PORT = 8082  # NPU Exporter's, so scrape configs written for it find this one
DEFAULT_LABEL_PREFIX = "ascend-vllm-fleet"  # fleet_label_prefix's default
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# (name, chip key, help): one gauge per chip, as NPU Exporter names them.
CHIP_GAUGES = (
    ("npu_chip_info_health_status", None, "Whether the chip is healthy (npu-smi Health OK): 1 healthy, 0 not"),
    ("npu_chip_info_temperature", "temperature_c", "The chip's temperature, degrees Celsius"),
    ("npu_chip_info_power", "power_w", "The chip's power, W (absent where npu-smi prints NA, as a 310P3 Duo does)"),
    ("npu_chip_info_utilization", "aicore_percent", "The chip's AI Core utilisation, %"),
    ("npu_chip_info_used_memory", "memory_used_mb", "The chip's memory in use, MB (DDR on 310P)"),
    ("npu_chip_info_total_memory", "memory_total_mb", "The chip's memory, MB (DDR on 310P)"),
    ("npu_chip_info_hbm_used_memory", "hbm_used_mb", "The chip's HBM in use, MB (chips with HBM only)"),
    ("npu_chip_info_hbm_total_memory", "hbm_total_mb", "The chip's HBM, MB (chips with HBM only)"),
)


def label_value(value):
    """A label value as the text format escapes it."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def labels(pairs):
    return "{%s}" % ",".join('%s="%s"' % (name, label_value(value)) for name, value in pairs)


def chip_labels(chip):
    # The logic id, which a 310P's table prints (Device); a chip whose table has no such column (910B: one chip per
    # NPU, numbered as its logic id) is named by its NPU id.
    logic_id = chip.get("logic_id") if chip.get("logic_id") is not None else chip.get("npu_id")
    return labels((("id", logic_id), ("model_name", chip.get("name")), ("vdie_id", ""),
                   ("pcie_bus_info", chip.get("bus_id")), ("npu_id", chip.get("npu_id")),
                   ("chip_id", chip.get("chip_id"))))


def family(lines, name, kind, help_text, samples):
    """A metric family's HELP and TYPE (kind) lines and its samples, (label text, value); nothing when it has
    none."""
    samples = [(label_text, value) for label_text, value in samples if value is not None]
    if not samples:
        return
    lines += ["# HELP %s %s" % (name, help_text), "# TYPE %s %s" % (name, kind)]
    lines += ["%s%s %s" % (name, label_text, repr(float(value))) for label_text, value in samples]


def gauge(lines, name, help_text, samples):
    family(lines, name, "gauge", help_text, samples)


def read_chips(gatherer):
    """One reading: {"chips", "driver_version", "firmware_version", "problem"}; chips empty with a problem when
    npu-smi cannot be found, does not answer, fails or prints a table the parser cannot read."""
    facts = {"driver_version_file": None, "firmware_version_file": None, "install_info": {}}
    gatherer.read_files(facts)
    reading = {"chips": [], "driver_version": facts["driver_version_file"],
               "firmware_version": facts["firmware_version_file"], "problem": None}
    path = gatherer.find_npu_smi()
    if not path:
        reading["problem"] = "npu-smi not found"
        return reading
    output = gatherer.query(path, "info")
    if output is None:
        reading["problem"] = gatherer.problems[-1]
        return reading
    table = parse_table(output)
    reading["chips"] = table["chips"]
    reading["driver_version"] = table["driver_version"] or reading["driver_version"]
    if table["unreadable_rows"] or not table["chips"]:
        reading["problem"] = "`npu-smi info` printed %s" % (
            "rows the parser cannot read" if table["unreadable_rows"] else "no chip")
    return reading


def read_containers(docker, label_prefix, timeout, runner=run_docker):
    """This host's vLLM containers as Docker has them: {"containers": [{"id", "instance", "restarts"}],
    "docker_problem": None, or why Docker could not be read}. Every container the deploy labelled
    <label_prefix>.instance, running or not: the one a replacement set aside keeps its count, so putting it back
    adds no restart."""
    label = label_name(label_prefix, INSTANCE_LABEL)
    reading = {"containers": [], "docker_problem": None}
    call = "ps"
    try:
        code, out, err = runner(docker, call, "--all", "--quiet", "--no-trunc", "--filter", "label=" + label,
                                timeout=timeout)
        ids = out.split() if code == 0 else []
        if ids:
            call = "container inspect"
            code, out, err = runner(docker, "container", "inspect", "--", *ids, timeout=timeout)
    except DockerUnavailable as unavailable:
        reading["docker_problem"] = unavailable.why
        return reading
    try:
        # A container removed between the two calls fails the second, which still prints the others.
        details = json.loads(out) if ids else []
    except ValueError:
        details = []
    if code != 0 and not details:
        reading["docker_problem"] = "`docker %s` failed (exit %s): %s" % (
            call, code, (err.strip().splitlines() or ["no output"])[-1])
        return reading
    for detail in details:
        instance = ((detail.get("Config") or {}).get("Labels") or {}).get(label)
        if instance and detail.get("Id"):
            reading["containers"].append({"id": detail["Id"][:12], "instance": instance,
                                          "restarts": detail.get("RestartCount") or 0})
    return reading


def exposition(reading, duration_s):
    """The Prometheus text of one reading."""
    lines = []
    chips = reading["chips"]
    gauge(lines, "npu_exporter_npu_smi_up", "Whether the last `npu-smi info` reading worked: 1 yes, 0 no",
          [("", 0 if reading["problem"] else 1)])
    gauge(lines, "npu_exporter_collect_duration_seconds", "How long the last reading took",
          [("", round(duration_s, 6))])
    gauge(lines, "machine_npu_nums", "The NPU chips npu-smi lists", [("", len(chips))] if chips else [])
    gauge(lines, "npu_driver_info", "The NPU driver's and firmware's versions, as labels",
          [(labels((("driver_version", reading["driver_version"]),
                    ("firmware_version", reading["firmware_version"]))), 1)])
    for name, key, help_text in CHIP_GAUGES:
        if key is None:  # the health, from npu-smi's word for it
            samples = [(chip_labels(chip), 1 if (chip.get("health") or "").upper() == "OK" else 0) for chip in chips]
        else:
            samples = [(chip_labels(chip), chip.get(key)) for chip in chips]
        gauge(lines, name, help_text, samples)
    gauge(lines, "npu_exporter_docker_up", "Whether the last reading of this host's vLLM containers from Docker "
          "worked: 1 yes, 0 no", [("", 0 if reading["docker_problem"] else 1)])
    family(lines, "ascend_fleet_instance_restarts_total", "counter",
           "Times Docker's restart policy started this vLLM container again after it exited (its RestartCount). A "
           "planned replacement is a new container, starting at 0; docker start and docker restart reset it",
           [(labels((("vllm_instance", container["instance"]), ("container_id", container["id"]))),
             container["restarts"]) for container in reading["containers"]])
    return "\n".join(lines) + "\n"


class Collector:
    """Reads the chips, and the vLLM containers from Docker (the `docker` CLI, containers labelled with
    label_prefix), every interval on a thread of its own; `text` is the latest reading's exposition."""

    def __init__(self, params, interval_s, docker="docker", label_prefix=DEFAULT_LABEL_PREFIX, runner=run_docker):
        self.gatherer = Gatherer(params)
        self.interval_s = interval_s
        self.docker, self.label_prefix, self.runner = docker, label_prefix, runner
        self.text = exposition({"chips": [], "driver_version": None, "firmware_version": None,
                                "problem": "no reading yet", "containers": [], "docker_problem": "no reading yet"},
                               0.0)
        self.stopped = threading.Event()

    def collect_once(self):
        started = time.monotonic()
        del self.gatherer.problems[:]  # the gatherer's problems are per reading, not kept for the service's life
        reading = read_chips(self.gatherer)
        reading.update(read_containers(self.docker, self.label_prefix, self.gatherer.params["timeout"], self.runner))
        self.text = exposition(reading, time.monotonic() - started)
        return reading

    def run(self):
        while not self.stopped.is_set():
            started = time.monotonic()
            self.collect_once()
            self.stopped.wait(max(0.0, self.interval_s - (time.monotonic() - started)))


class ThreadingServer(ThreadingMixIn, HTTPServer):
    daemon_threads = True


def handler_for(collector):
    class MetricsHandler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # a scrape every interval: the journal stays for what goes wrong
            pass

        def do_GET(self):
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = collector.text.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return MetricsHandler


def arguments(argv):
    parser = argparse.ArgumentParser(prog="npu_exporter", description="NPU metrics of this host for Prometheus")
    parser.add_argument("--listen-address", default="0.0.0.0", help="address to serve /metrics on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between two readings")
    parser.add_argument("--docker", default="docker", help="the Docker CLI that lists the vLLM containers")
    parser.add_argument("--label-prefix", default=DEFAULT_LABEL_PREFIX,
                        help="the label namespace of the vLLM containers (<prefix>.instance names the instance)")
    for name, spec in NPU_OPTIONS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=spec.get("default"),
                            type=int if spec["type"] == "int" else str)
    parser.add_argument("--once", action="store_true", help="print one reading's metrics and exit")
    return parser.parse_args(argv)


def main(argv=None):
    args = arguments(sys.argv[1:] if argv is None else argv)
    params = dict((name, getattr(args, name)) for name in NPU_OPTIONS)
    if args.interval <= 0 or not 0 < args.port < 65536:
        sys.stderr.write("npu_exporter: --interval must be above 0 and --port within 1-65535\n")
        return 2
    # No call of a reading outlasts the interval: a hung npu-smi or Docker is cut off and reported as down.
    params["timeout"] = max(1, min(int(params["timeout"]), int(args.interval)))
    collector = Collector(params, args.interval, args.docker, args.label_prefix)
    if args.once:
        collector.collect_once()
        sys.stdout.write(collector.text)
        return 0
    server = ThreadingServer((args.listen_address, args.port), handler_for(collector))
    threading.Thread(target=collector.run, name="collector", daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        collector.stopped.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    raise SystemExit(main())
