#!/usr/bin/env python3
"""How accurate and how cheap is the vllm_benchmark module, next to evalscope perf? Both against one server.

For each group (default: 640x480 with 32 tokens at concurrency 8, and 1920x1080 with 64 tokens at concurrency
64; 64 requests each), runs the module and then `evalscope perf` (from PyPI, installed once into
benchmarks/.venv-evalscope from benchmarks/requirements-evalscope.txt), --runs times, alternating which goes
first. Both send the same requests: the module's own generated images, the same prompt and max_tokens. Each
client runs as a process of its own, the module as a host runs it (the module file, its arguments in a file),
so its start-up, imports and warm-up count. Prints, from this one run:
- each client's latency against the server's own per-request log (client mean / log mean, client p95 / log p95)
  and its TTFT excess (client's mean TTFT minus the log's);
- CPU per request: total (the process's whole life, getrusage of the child) and in-window (from the first
  request the server received to the last it finished, from /proc/<pid>/stat sampled through the run);
- peak RSS (ru_maxrss), and the module's total and in-window CPU over evalscope's;
- the server's own lateness against the schedule it was set (only the sink knows its schedule).

By default the server is benchmarks/sink.py started here on 127.0.0.1: a server whose answers keep a set TTFT
and TPOT and whose own lateness is in its log, cheap enough at concurrency 64 with 1920x1080 bodies that what a
client measures beyond its log is the client's. --base-url and --request-log measure another endpoint, whose
log has a JSON line per request with id, status ("ok"), max_tokens, received_s, first_token_s and finished_s
(Unix seconds), as the twin's stand-in writes.

Usage: .venv/bin/python benchmarks/accuracy.py [--runs 3] [--requests 64] [--ttft-ms 500] [--tpot-ms 40]
           [--group 640x480,32,8 ...] [--base-url URL --request-log FILE] [--skip-evalscope]
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import ascend_vllm_fleet  # noqa: F401  (Ansible's collection loader, for the collection's code below)

# isort: split
from ansible_collections.ascend.fleet.plugins.module_utils import bench_record, load_test, openai_client, png_images

REPO = pathlib.Path(__file__).resolve().parent.parent
percentile = bench_record.percentile
EVALSCOPE_VENV = REPO / "benchmarks" / ".venv-evalscope"
GROUPS = ("640x480,32,8", "1920x1080,64,64")
# The module as a host runs it: a Python process that imports the module file and its module_utils by their
# collection names from ansible_collections/ on its path (no controller code, no collection loader to start), reads
# its arguments from the file named on its command line and prints its result as JSON.
MODULE_PROCESS = "from ansible_collections.ascend.fleet.plugins.modules import vllm_benchmark; vllm_benchmark.main()"
MODULE_ENV = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
# /proc/<pid>/stat is read this often while a client runs; a window's CPU is interpolated between two reads.
SAMPLE_EVERY_S = 0.005
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of a running process (all its threads), or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_S


class CpuSampler(threading.Thread):
    """(wall time, CPU seconds) of some processes, every SAMPLE_EVERY_S, until stopped."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.samples = {pid: [] for pid in pids}
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            for pid, samples in self.samples.items():
                cpu = cpu_seconds(pid)
                if cpu is not None:
                    samples.append((time.time(), cpu))
            self.stopped.wait(SAMPLE_EVERY_S)

    def stop(self):
        self.stopped.set()
        self.join()

    def cpu_at(self, pid, moment):
        """The process's CPU seconds at a wall time, interpolated between the samples around it."""
        samples = self.samples[pid]
        before = [sample for sample in samples if sample[0] <= moment] or samples[:1]
        after = [sample for sample in samples if sample[0] >= moment] or samples[-1:]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (moment - t0) / (t1 - t0)


def run_process(command, watch, output, env=None):
    """Run a client to its end: (exit status, its rusage, the sampler), its output in the file `output`; `watch`:
    other processes whose CPU is sampled alongside (the server); env: the client's environment (default ours)."""
    with open(output, "wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=str(REPO / "benchmarks"),
                                   env=env)
    sampler = CpuSampler([process.pid] + watch)
    sampler.start()
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop()
    return process.returncode, usage, sampler


def server_records(log_path, since, max_tokens, count):
    """The server's records of the last `count` requests for max_tokens received since `since`: the measured
    ones, after any warm-up or connection test a client sent first."""
    records = []
    with open(log_path) as handle:
        for line in handle:
            record = json.loads(line)
            if record["received_s"] >= since and record.get("max_tokens") == max_tokens:
                records.append(record)
    records.sort(key=lambda record: record["received_s"])
    measured = records[-count:]
    failed = [record for record in measured if record.get("status") != "ok"]
    if len(measured) < count or failed:
        sys.exit("the server's log %s has %d of the %d requests, %d not ok: fix the server first"
                 % (log_path, len(measured), count, len(failed)))
    return measured


def run_module(group, args, scratch, watch):
    size, tokens, concurrency = group
    # With a results file of its own, as the vllm_bench role gives it: writing results and progress counts too.
    results_file = scratch / ("module-%d.jsonl" % time.monotonic_ns())
    params = {"base_url": args.base_url, "image_sizes": [size], "max_tokens": [tokens], "concurrency": [concurrency],
              "requests_per_group": args.requests, "results_file": str(results_file)}
    (scratch / "module-args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    output = scratch / "module-output.json"
    status, usage, sampler = run_process([sys.executable, "-c", MODULE_PROCESS, str(scratch / "module-args.json")],
                                         watch, output, env=MODULE_ENV)
    answer = json.loads(output.read_text())
    if status or answer.get("failed") or answer["groups"][0]["failed"]:
        sys.exit("the module failed: %s" % output.read_text()[:2000])
    record = answer["groups"][0]
    return usage, sampler, {"mean": record["avg_latency_s"], "p95": record["p95_latency_s"],
                            "ttft": record["avg_ttft_s"]}


def write_messages(group, args, path):
    """The messages of the module's measured requests (its images come after its warm-up's), one list a line."""
    size, _tokens, _concurrency = group
    series = png_images.ImageSeries(*png_images.parse_size(size))
    prompt = load_test.ARGUMENT_SPEC["prompt"]["default"]
    first = load_test.ARGUMENT_SPEC["warmup_requests"]["default"]
    with open(path, "w", encoding="utf-8") as handle:
        for number in range(first, first + args.requests):
            content = [{"type": "image_url", "image_url": {"url": openai_client.image_data_url(series.png(number))}},
                       {"type": "text", "text": prompt}]
            handle.write(json.dumps([{"role": "user", "content": content}], ensure_ascii=False) + "\n")


def install_evalscope():
    if (EVALSCOPE_VENV / "bin/evalscope").exists():
        return
    print("installing evalscope[perf] into %s (about 1.2 GB, once)" % EVALSCOPE_VENV, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(EVALSCOPE_VENV)], check=True)
    subprocess.run([str(EVALSCOPE_VENV / "bin/pip"), "install", "-q", "-r",
                    str(REPO / "benchmarks/requirements-evalscope.txt")], check=True)


def run_evalscope(group, args, scratch, watch, model):
    size, tokens, concurrency = group
    outputs = scratch / "evalscope"
    command = [str(EVALSCOPE_VENV / "bin/python"), str(REPO / "benchmarks/evalscope_images.py"), "perf",
               "--url", args.base_url + "/v1/chat/completions", "--api", "openai", "--model", model,
               "--dataset", "fleet_messages", "--dataset-path", str(scratch / ("messages-%s.jsonl" % size)),
               "--number", str(args.requests), "--parallel", str(concurrency), "--max-tokens", str(tokens),
               "--min-tokens", str(tokens), "--extra-args", json.dumps({"ignore_eos": True}), "--stream",
               "--outputs-dir", str(outputs), "--no-timestamp"]
    status, usage, sampler = run_process(command, watch, scratch / "evalscope-output.txt")
    if status:
        sys.exit("evalscope failed: %s" % (scratch / "evalscope-output.txt").read_text()[-2000:])
    # evalscope keeps each request's timings in SQLite; its folder is moved aside for the next run's.
    (database,) = outputs.glob("*/parallel_*/benchmark_data.db")
    with sqlite3.connect(str(database)) as connection:
        rows = connection.execute("SELECT latency, first_chunk_latency FROM result WHERE success = 1").fetchall()
    database.parent.parent.rename(scratch / ("evalscope-%d" % time.monotonic_ns()))
    if len(rows) != args.requests:
        sys.exit("evalscope completed %d of %d requests" % (len(rows), args.requests))
    latencies = [row[0] for row in rows]
    return usage, sampler, {"mean": statistics.mean(latencies), "p95": percentile(latencies, 95),
                            "ttft": statistics.mean(row[1] for row in rows)}


def measure(client, group, args, scratch, model, server_pid):
    """One client's run of one group, set against the server's log."""
    started = time.time()
    watch = [server_pid] if server_pid else []
    if client == "module":
        usage, sampler, seen = run_module(group, args, scratch, watch)
    else:
        usage, sampler, seen = run_evalscope(group, args, scratch, watch, model)
    records = server_records(args.request_log, started, group[1], args.requests)
    latencies = [record["finished_s"] - record["received_s"] for record in records]
    ttft = statistics.mean(record["first_token_s"] - record["received_s"] for record in records)
    window = (min(record["received_s"] for record in records), max(record["finished_s"] for record in records))
    pid = next(iter(sampler.samples))

    def in_window(process):
        return sampler.cpu_at(process, window[1]) - sampler.cpu_at(process, window[0])

    result = {
        "mean": seen["mean"] / statistics.mean(latencies), "p95": seen["p95"] / percentile(latencies, 95),
        "ttft_ms": 1000 * (seen["ttft"] - ttft),
        "cpu_ms": 1000 * (usage.ru_utime + usage.ru_stime) / args.requests,
        "window_cpu_ms": 1000 * in_window(pid) / args.requests,
        "rss_mb": usage.ru_maxrss / 1024.0,
        "upload_ms": 1000 * statistics.mean(record.get("body_read_s", record["received_s"]) - record["received_s"]
                                            for record in records)}
    if "intended_first_token_s" in records[0]:
        first_late = [1000 * (r["first_token_s"] - r["intended_first_token_s"]) for r in records]
        end_late = [1000 * (r["finished_s"] - r["intended_finished_s"]) for r in records]
        result.update(late_mean_ms=statistics.mean(first_late + end_late),
                      late_p95_ms=percentile(first_late + end_late, 95),
                      server_window_cpu_ms=1000 * in_window(server_pid) / args.requests)
    return result


def start_sink(args, scratch):
    """Start benchmarks/sink.py: (its process, its address)."""
    args.request_log = str(scratch / "sink-requests.jsonl")
    sink = subprocess.Popen([sys.executable, str(REPO / "benchmarks/sink.py"), "--log", args.request_log,
                             "--ttft-ms", str(args.ttft_ms), "--tpot-ms", str(args.tpot_ms)],
                            stdout=subprocess.PIPE, text=True)
    line = sink.stdout.readline()
    if not line.startswith("listening on "):
        sink.kill()
        sys.exit("benchmarks/sink.py did not start: %r" % line)
    return sink, line.split()[-1]


def machine():
    models = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
    memory_kb = int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal")))
    return "%s, %d cores, %.0f GB, %s, Python %s" % (
        models[0] if models else platform.machine(), os.cpu_count(), memory_kb / 1024.0 ** 2,
        platform.system(), platform.python_version())


def mean_of(runs, name):
    return statistics.mean(run[name] for run in runs)


def print_table(results, clients, groups):
    print("| group | client | latency / truth (mean, p95) | TTFT excess | CPU ms per request (total / in-window) "
          "| peak RSS | server late (mean, p95) |")
    print("|---|---|---|---|---|---|---|")
    for group in groups:
        label = "%s, %d tokens, c=%d" % group
        for client in clients:
            runs = results[group, client]
            late = ("%.1f, %.1f ms" % (mean_of(runs, "late_mean_ms"), mean_of(runs, "late_p95_ms"))
                    if "late_p95_ms" in runs[0] else "")
            print("| %s | %s | %.3f, %.3f | %+.0f ms | %.1f / %.1f | %.0f MB | %s |" % (
                label, "vllm_benchmark" if client == "module" else "evalscope", mean_of(runs, "mean"),
                mean_of(runs, "p95"), mean_of(runs, "ttft_ms"), mean_of(runs, "cpu_ms"), mean_of(runs, "window_cpu_ms"),
                mean_of(runs, "rss_mb"), late))
            label = ""
    if len(clients) == 2:
        print()
        for group in groups:
            module, evalscope = results[group, "module"], results[group, "evalscope"]
            print("%s, %d tokens, c=%d: module / evalscope CPU per request: total %.2f, in-window %.2f" % (
                group + (mean_of(module, "cpu_ms") / mean_of(evalscope, "cpu_ms"),
                         mean_of(module, "window_cpu_ms") / mean_of(evalscope, "window_cpu_ms"))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each client and group (default %(default)s)")
    parser.add_argument("--requests", type=int, default=64, help="requests per group (default %(default)s)")
    parser.add_argument("--group", action="append", help="SIZE,MAX_TOKENS,CONCURRENCY, once per group "
                        "(default %s)" % " and ".join(GROUPS))
    parser.add_argument("--ttft-ms", type=float, default=500.0, help="the sink's TTFT (default %(default)s)")
    parser.add_argument("--tpot-ms", type=float, default=40.0, help="the sink's TPOT (default %(default)s)")
    parser.add_argument("--base-url", help="another server instead of the sink, with --request-log")
    parser.add_argument("--request-log", help="that server's per-request log, a file here")
    parser.add_argument("--skip-evalscope", action="store_true")
    args = parser.parse_args()
    if bool(args.base_url) != bool(args.request_log):
        parser.error("--base-url and --request-log go together")
    groups = []
    for text in args.group or GROUPS:
        size, tokens, concurrency = text.split(",")
        groups.append((size, int(tokens), int(concurrency)))
    clients = ["module"] if args.skip_evalscope else ["module", "evalscope"]
    if not args.skip_evalscope:
        install_evalscope()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        sink = None
        if args.base_url:
            server = "%s, its log %s" % (args.base_url, args.request_log)
        else:
            sink, args.base_url = start_sink(args, scratch)
            server = "benchmarks/sink.py at %s (TTFT %g ms, TPOT %g ms), pid %d" % (
                args.base_url, args.ttft_ms, args.tpot_ms, sink.pid)
        try:
            model = openai_client.Client(args.base_url).models()[0]
            for group in groups:
                write_messages(group, args, scratch / ("messages-%s.jsonl" % group[0]))
            results = {(group, client): [] for group in groups for client in clients}
            for run in range(args.runs):
                for group in groups:
                    # Each client goes first in every other run, so a drift of the machine falls on both.
                    for client in (clients if run % 2 == 0 else clients[::-1]):
                        result = measure(client, group, args, scratch, model, sink.pid if sink else None)
                        results[group, client].append(result)
                        print("run %d, %s, %d tokens, c=%d, %s: latency ratio %.3f / %.3f, TTFT %+.0f ms, CPU %.1f / "
                              "%.1f ms per request, RSS %.0f MB, server's upload %.1f ms%s" % (
                                  (run + 1,) + group + (client, result["mean"], result["p95"], result["ttft_ms"],
                                                        result["cpu_ms"], result["window_cpu_ms"], result["rss_mb"],
                                                        result["upload_ms"],
                                                        ", late p95 %.1f ms, its CPU %.1f ms per request" % (
                                                            result["late_p95_ms"], result["server_window_cpu_ms"])
                                                        if "late_p95_ms" in result else "")), flush=True)
        finally:
            if sink:
                sink.terminate()
                sink.wait()
    print()
    print("%s UTC; %s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), machine()))
    print("server: %s; %d requests a group, %d runs (means)" % (server, args.requests, args.runs))
    print()
    print_table(results, clients, groups)


if __name__ == "__main__":
    main()
