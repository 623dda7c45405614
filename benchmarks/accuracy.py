#!/usr/bin/env python3
"""How accurate and how cheap is the vllm_load_test module? One group against the twin, measured three ways.

Runs one group (default 1920x1080, concurrency 64, 64 requests, 64 output tokens) against a deployed twin
instance and prints, from this one run:
- the module's mean and p95 latency against the stand-in's own per-request log (target: within 1%);
- the client's overhead per request: module latency minus the server's, paired by completion id
  (target: median under 2 ms);
- the client's CPU seconds per request, building the bodies and sending them;
- the same group measured by evalscope's perf (installed from PyPI into benchmarks/.venv-evalscope), side by
  side, as ratios.

Needs the demo deployed (`scripts/dev demo`); measures its first host unless told otherwise. Usage:
  .venv/bin/python benchmarks/accuracy.py [--twin-host twin-01 | --base-url URL --request-log FILE]
                                          [--skip-evalscope]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]
from ascend_vllm_fleet.host_code import load_library_module, load_module_util  # noqa: E402
from twin.lifecycle import Twin  # noqa: E402

load_test = load_library_module("vllm_load_test")
percentile = load_module_util("bench_record").percentile
# Where the stand-in on a twin host writes its per-request log (its /root/.cache is vllm_server_cache_dir).
STANDIN_LOG = "/var/cache/vllm-ascend/vllm-twin/requests-8000.jsonl"
EVALSCOPE_VENV = REPO / "benchmarks" / ".venv-evalscope"


def server_records(log_path, ids=None, since=None):
    records = []
    with open(log_path) as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("status") != "ok":
                continue
            if (ids is not None and record["id"] in ids) or (since is not None and record["received_s"] >= since):
                records.append(record)
    return records


def run_module(args):
    settings = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    settings.update(base_url=args.base_url, requests_per_group=args.requests, warmup_requests=0)
    client = load_test.Client(args.base_url, None, 600)
    model = client.models()[0]
    runner = load_test.LoadTest(settings, client, model)
    group = {"image_size": args.size, "max_tokens": args.max_tokens, "concurrency": args.concurrency}
    cpu = time.process_time()
    bodies = runner.bodies(group)
    build_cpu = time.process_time() - cpu
    cpu = time.process_time()
    results = runner.run_group(group, bodies, lambda: None)
    send_cpu = time.process_time() - cpu
    return model, group, results, build_cpu, send_cpu


def tokenizer_for_evalscope(folder):
    """evalscope's random_vl dataset needs a tokenizer for its filler text; any small one with a chat template
    will do, since token counts come from the server's usage."""
    script = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
vocab = {"[UNK]": 0}
for index in range(500):
    vocab["w%d" % index] = len(vocab)
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer.save(sys.argv[1] + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 8192,
           "chat_template": "{% for m in messages %}{{ m['content'] if m['content'] is string else '' }}"
                            "{% endfor %}"}, open(sys.argv[1] + "/tokenizer_config.json", "w"))
"""
    subprocess.run([str(EVALSCOPE_VENV / "bin/python"), "-c", script, str(folder)], check=True)


def run_evalscope(args, model):
    if not (EVALSCOPE_VENV / "bin/evalscope").exists():
        print("installing evalscope[perf] into %s (about 1.2 GB, once)" % EVALSCOPE_VENV, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(EVALSCOPE_VENV)], check=True)
        subprocess.run([str(EVALSCOPE_VENV / "bin/pip"), "install", "-q", "-r",
                        str(REPO / "benchmarks/requirements-evalscope.txt")], check=True)
    width, height = args.size.split("x")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        (scratch / "tokenizer").mkdir()
        tokenizer_for_evalscope(scratch / "tokenizer")
        started = time.time()
        subprocess.run([
            str(EVALSCOPE_VENV / "bin/evalscope"), "perf", "--url", args.base_url + "/v1/chat/completions",
            "--api", "openai", "--model", model, "--dataset", "random_vl", "--tokenizer-path",
            str(scratch / "tokenizer"), "--image-width", width, "--image-height", height, "--image-num", "1",
            "--number", str(args.requests), "--parallel", str(args.concurrency), "--max-tokens",
            str(args.max_tokens), "--min-tokens", str(args.max_tokens), "--min-prompt-length", "4",
            "--max-prompt-length", "8", "--stream", "--outputs-dir", str(scratch / "out"), "--no-timestamp"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (folder,) = list((scratch / "out").glob("*/parallel_*"))
        summary = json.loads((folder / "benchmark_summary.json").read_text())
        rows = {row["Percentiles"]: row for row in json.loads((folder / "benchmark_percentile.json").read_text())}
    return started, {"mean": summary["Avg Latency (s)"], "p95": rows["95%"]["Latency (s)"],
                     "rps": summary["Req Throughput (req/s)"], "requests": summary["Success Requests"]}


def latency_stats(latencies):
    return {"mean": statistics.mean(latencies), "p95": percentile(latencies, 95)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--twin-host", default="twin-01", help="the demo host to measure (default %(default)s)")
    parser.add_argument("--base-url", help="another endpoint (default: the twin host's port 8000)")
    parser.add_argument("--request-log", help="the stand-in's per-request log (default: read from the twin host)")
    parser.add_argument("--size", default="1920x1080")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--skip-evalscope", action="store_true")
    args = parser.parse_args()
    host = Twin().demo_fleet()[args.twin_host]
    args.base_url = args.base_url or host.url(8000)
    model, group, results, build_cpu, send_cpu = run_module(args)
    if args.request_log is None:
        if not host.exists(STANDIN_LOG):
            sys.exit("%s: %s not found: deploy the twin first (scripts/dev demo)" % (args.twin_host, STANDIN_LOG))
        copy = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        copy.write(host.read_text(STANDIN_LOG))
        copy.close()
        args.request_log = copy.name
    failed = [r for r in results if r.error]
    if failed:
        sys.exit("%d requests failed (%s): fix the endpoint first" % (len(failed), failed[0].error))
    by_id = {r["id"]: r for r in server_records(args.request_log, ids={r.request_id for r in results})}
    paired = [(r.finished - r.sent, by_id[r.request_id]["latency_s"]) for r in results]
    wall = time.time() - time.monotonic()
    start_gap = [1000 * (by_id[r.request_id]["received_s"] - (r.sent + wall)) for r in results]
    end_gap = [1000 * ((r.finished + wall) - by_id[r.request_id]["finished_s"]) for r in results]
    module = latency_stats([client for client, _ in paired])
    server = latency_stats([served for _, served in paired])
    overhead_ms = sorted(1000 * (client - served) for client, served in paired)

    print("group: %s, max_tokens %d, concurrency %d, %d requests, model %s" % (
        group["image_size"], group["max_tokens"], group["concurrency"], len(results), model))
    print("%-34s %10s %10s %10s" % ("", "mean (s)", "p95 (s)", ""))
    print("%-34s %10.4f %10.4f" % ("stand-in's own log", server["mean"], server["p95"]))
    print("%-34s %10.4f %10.4f   ratio to log: mean %.4f, p95 %.4f (target within 1%%)" % (
        "vllm_load_test module", module["mean"], module["p95"], module["mean"] / server["mean"],
        module["p95"] / server["p95"]))
    print("client overhead per request: median %.2f ms, p95 %.2f ms (target: median under 2 ms)" % (
        statistics.median(overhead_ms), percentile(overhead_ms, 95)))
    print("  of which before the server saw the request: median %.2f ms; after its last byte: median %.2f ms" % (
        statistics.median(start_gap), statistics.median(end_gap)))
    print("client CPU per request: %.2f ms building bodies, %.2f ms sending and reading" % (
        1000 * build_cpu / len(results), 1000 * send_cpu / len(results)))
    if args.skip_evalscope:
        return
    started, evalscope = run_evalscope(args, model)
    theirs = latency_stats([r["latency_s"] for r in server_records(args.request_log, since=started)][
        -evalscope["requests"]:])
    print("%-34s %10.4f %10.4f   ratio to its log: mean %.4f, p95 %.4f" % (
        "evalscope perf (same group)", evalscope["mean"], evalscope["p95"], evalscope["mean"] / theirs["mean"],
        evalscope["p95"] / theirs["p95"]))
    print("module / evalscope: mean %.4f, p95 %.4f" % (module["mean"] / evalscope["mean"],
                                                       module["p95"] / evalscope["p95"]))


if __name__ == "__main__":
    main()
