"""The stand-in's /metrics: vLLM 0.18's series for the monitoring stack, moving with the traffic it serves.

The stand-in runs in this process over a twin host root (tests/standin_host.py), as in test_standin_faults.py.
prometheus_client is not among the test requirements, so the exposition text is read by the strict parser
below, which refuses what Prometheus's text format does not allow.
"""
import base64
import json
import math
import os
import re
import subprocess
import threading
import time

import pytest
import requests
from conformance import golden
from standin_host import MODEL, root, serve_args  # noqa: F401  (the fixture)

from conftest import png_image
from twin.vllm_standin import cli, server

E2E_BOUNDS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
              480.0, 960.0, 1920.0, 7680.0, math.inf]
LABELS = {"engine": "0", "model_name": MODEL}
# The series the monitoring contract names, by family, with their types.
CONTRACT = {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
            "vllm:kv_cache_usage_perc": "gauge", "vllm:prompt_tokens_total": "counter",
            "vllm:generation_tokens_total": "counter", "vllm:request_success_total": "counter",
            "vllm:time_to_first_token_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
            "process_resident_memory_bytes": "gauge", "process_start_time_seconds": "gauge"}
# The stand-in's KV cache in blocks with serve_args(): 256 sequences (vLLM's default max_num_seqs) of 8192 tokens
# in blocks of 128.
KV_BLOCKS = 256 * 8192 // 128

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})? (\S+)$" % NAME)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
VALUE = re.compile(r"^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class Malformed(Exception):
    pass


def parse(text):
    """{family: {"type": ..., "samples": [(name, labels, value)]}} of an exposition in the text format (0.0.4),
    or Malformed: every sample after the # TYPE line of its family and next to the family's other samples, no
    series twice, labels quoted and escaped as the format says; a histogram's buckets by increasing le for each
    label set, cumulative, +Inf last and equal to _count, with a _sum."""
    if not text.endswith("\n"):
        raise Malformed("the text does not end with a newline")
    families, current = {}, None
    seen = set()
    for line in text[:-1].split("\n"):
        if line.startswith("#"):
            words = line.split(" ", 3)
            if len(words) < 3 or words[0] != "#" or words[1] not in ("TYPE", "HELP"):
                raise Malformed("not a TYPE or HELP line: %r" % line)
            if words[1] == "TYPE":
                name, kind = words[2], (words[3] if len(words) > 3 else "")
                if not re.match("^%s$" % NAME, name) or kind not in TYPES or name in families:
                    raise Malformed("bad or repeated TYPE line: %r" % line)
                families[name] = {"type": kind, "samples": []}
                current = name
            continue
        match = SAMPLE.match(line)
        if not match:
            raise Malformed("not a sample line: %r" % line)
        name, label_text, value = match.groups()
        labels = {}
        rest = label_text or ""
        while rest:
            pair = LABEL.match(rest)
            if not pair or pair.group(1) in labels:
                raise Malformed("bad labels in %r" % line)
            labels[pair.group(1)] = re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), pair.group(2))
            rest = rest[pair.end():]
        if not VALUE.match(value):
            raise Malformed("bad value in %r" % line)
        if current is None or name not in member_names(current, families[current]["type"]):
            raise Malformed("%s is not a sample of the family last declared (%s)" % (name, current))
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise Malformed("series twice: %r" % line)
        seen.add(key)
        families[current]["samples"].append((name, labels, float(value)))
    for family, content in families.items():
        if content["type"] == "histogram":
            check_histogram(family, content["samples"])
    return families


def member_names(family, kind):
    if kind == "histogram":
        return (family + "_bucket", family + "_sum", family + "_count")
    return (family,)


def check_histogram(family, samples):
    by_labels = {}
    for name, labels, value in samples:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        entry = by_labels.setdefault(rest, {"bounds": [], "counts": []})
        if name.endswith("_bucket"):
            if "le" not in labels or not VALUE.match(labels["le"]):
                raise Malformed("%s: a bucket without a valid le" % family)
            entry["bounds"].append(float(labels["le"]))
            entry["counts"].append(value)
        elif "le" in labels:
            raise Malformed("%s: le on %s" % (family, name))
        else:
            entry[name[len(family) + 1:]] = value
    for rest, entry in by_labels.items():
        bounds, counts = entry["bounds"], entry["counts"]
        if not bounds or bounds[-1] != math.inf or any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise Malformed("%s%s: le not increasing to +Inf: %s" % (family, rest, bounds))
        if any(a > b for a, b in zip(counts, counts[1:])):
            raise Malformed("%s%s: buckets not cumulative: %s" % (family, rest, counts))
        if "sum" not in entry or entry.get("count") != counts[-1]:
            raise Malformed("%s%s: _count missing or not the +Inf bucket" % (family, rest))


def sample(families, family, name=None, **labels):
    """The value of the one sample of ``family`` named ``name`` (the family's name by default) with ``labels``."""
    found = [value for sample_name, sample_labels, value in families[family]["samples"]
             if sample_name == (name or family) and sample_labels == labels]
    assert len(found) == 1, (family, name, labels)
    return found[0]


def histogram(families, family):
    """(upper bounds, cumulative counts, sum, count) of a histogram of the stand-in's one label set."""
    samples = families[family]["samples"]
    assert all({k: v for k, v in labels.items() if k != "le"} == LABELS for _, labels, _ in samples)
    buckets = [(float(labels["le"]), value) for name, labels, value in samples if name == family + "_bucket"]
    return ([bound for bound, _ in buckets], [count for _, count in buckets],
            sample(families, family, family + "_sum", **LABELS), sample(families, family, family + "_count", **LABELS))


def scrape(url):
    answer = requests.get(url + "/metrics", timeout=10)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/plain")
    return parse(answer.text)


def finished(families):
    return sum(value for _, _, value in families["vllm:request_success_total"]["samples"])


@pytest.fixture
def standin(root):  # noqa: F811
    args = serve_args()
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    yield "http://127.0.0.1:%d" % args.port
    running.shutdown()
    running.server_close()


def text_chat(text, max_tokens, stream=False, **extra):
    return dict({"model": MODEL, "max_tokens": max_tokens, "stream": stream,
                 "messages": [{"role": "user", "content": text}]}, **extra)


def image_chat(width, height, max_tokens, stream=False, **extra):
    url = "data:image/png;base64," + base64.b64encode(png_image(width, height)).decode()
    return dict({"model": MODEL, "max_tokens": max_tokens, "stream": stream, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "描述一下图片"}]}]}, **extra)


def test_the_parser_refuses_what_the_text_format_does_not_allow():
    good = ('# TYPE h histogram\nh_bucket{le="1.0"} 1.0\nh_bucket{le="+Inf"} 2.0\nh_sum 3.5\nh_count 2.0\n'
            '# TYPE g gauge\ng{a="x\\"y"} 1e+09\n')
    assert parse(good)["g"]["samples"] == [("g", {"a": 'x"y'}, 1e9)]
    for broken in (good.replace('le="+Inf"} 2.0', 'le="+Inf"} 0.0'),  # not cumulative, and +Inf != _count
                   good.replace('h_bucket{le="1.0"} 1.0\nh_bucket{le="+Inf"} 2.0', 'h_bucket{le="+Inf"} 2.0\n'
                                'h_bucket{le="1.0"} 1.0'),  # +Inf not last
                   good.replace("h_count 2.0\n", ""),
                   good.replace("# TYPE g gauge\n", ""),  # g would be a sample of h
                   good.replace('g{a="x\\"y"}', 'g{a="x"y"}'),
                   good.replace("1e+09", "1_000"),
                   good + 'g{a="x\\"y"} 2.0\n',
                   good[:-1]):
        with pytest.raises(Malformed):
            parse(broken)


def test_an_idle_stand_in_has_every_series_of_the_contract_as_vllm_types_and_labels_them(standin):
    families = scrape(standin)
    assert {name: families[name]["type"] for name in CONTRACT} == CONTRACT
    for name in CONTRACT:
        for _, labels, _ in families[name]["samples"]:
            if name.startswith("vllm:"):
                assert {k: v for k, v in labels.items() if k not in ("le", "finished_reason")} == LABELS
            else:
                assert labels == {}
    # vLLM 0.18's bucket bounds: TTFT's as the recorded answer of real vLLM lists them, e2e's as its source has them.
    recorded = [re.search(r'le="([^"]+)"', series).group(1) for series in golden.transcript("metrics_idle")[
        "metrics"]["series"] if series.startswith("vllm:time_to_first_token_seconds_bucket")]
    ttft_bounds, ttft_counts, ttft_sum, ttft_count = histogram(families, "vllm:time_to_first_token_seconds")
    assert ttft_bounds == sorted(float(bound) for bound in recorded) and len(ttft_bounds) == 23
    e2e_bounds, e2e_counts, e2e_sum, e2e_count = histogram(families, "vllm:e2e_request_latency_seconds")
    assert e2e_bounds == E2E_BOUNDS
    assert set(ttft_counts + e2e_counts) == {0.0} and (ttft_sum, ttft_count, e2e_sum, e2e_count) == (0, 0, 0, 0)
    assert sample(families, "vllm:kv_cache_usage_perc", **LABELS) == 0.0
    assert sorted(labels["finished_reason"] for _, labels, _ in families["vllm:request_success_total"]["samples"]) \
        == ["abort", "error", "length", "repetition", "stop"]


def test_each_finished_request_is_observed_once_its_first_token_before_its_end(standin, root):  # noqa: F811
    bodies = [text_chat("what is in the picture?", 24), text_chat("and now?", 40, stream=True,
                                                                    stream_options={"include_usage": True}),
              image_chat(640, 480, 16), text_chat("describe it in detail", 60, ignore_eos=True)]
    usages = []
    for body in bodies:
        answer = requests.post(standin + "/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        if body["stream"]:
            events = [line[len("data: "):] for line in answer.text.split("\n\n") if line.startswith("data: ")]
            usages.append(json.loads(events[-2])["usage"])
        else:
            usages.append(answer.json()["usage"])
    families = scrape(standin)
    _, ttft_counts, ttft_sum, ttft_count = histogram(families, "vllm:time_to_first_token_seconds")
    _, e2e_counts, e2e_sum, e2e_count = histogram(families, "vllm:e2e_request_latency_seconds")
    assert ttft_count == e2e_count == finished(families) == len(bodies)
    assert ttft_counts[-1] == e2e_counts[-1] == len(bodies)
    assert 0 < ttft_sum < e2e_sum
    # The engine gets a request after the server accepted it and ends it before the last bytes go out: its
    # latencies lie within those the server logs for the client.
    logged = [json.loads(line) for line in open(os.environ["VLLM_TWIN_REQUEST_LOG"])]
    assert [record["status"] for record in logged] == ["ok"] * len(bodies)
    assert e2e_sum <= sum(record["latency_s"] for record in logged)
    assert ttft_sum <= sum(record["first_token_s"] - record["received_s"] for record in logged)
    assert sample(families, "vllm:prompt_tokens_total", **LABELS) == sum(usage["prompt_tokens"] for usage in usages)
    assert sample(families, "vllm:generation_tokens_total", **LABELS) == sum(
        usage["completion_tokens"] for usage in usages)
    assert sum(sample(families, "vllm:request_success_total", **dict(LABELS, finished_reason=reason))
               for reason in ("stop", "length")) == len(bodies)
    assert sample(families, "vllm:num_requests_running", **LABELS) == 0.0
    assert sample(families, "vllm:kv_cache_usage_perc", **LABELS) == 0.0


def test_kv_cache_use_is_the_blocks_a_running_request_holds_and_goes_back_to_zero(standin):
    body = text_chat("tell a long story", 1200, stream=True, ignore_eos=True)
    prompt = server.count_prompt(body)
    with requests.post(standin + "/v1/chat/completions", json=body, stream=True, timeout=60) as answer:
        events = (line for line in answer.iter_lines() if line.startswith(b"data: "))
        # The role chunk, then a token an event: 299 tokens are out, 1200 - 299 to go.
        read = [next(events) for _ in range(300)]
        during = scrape(standin)
        rest = list(events)
    assert len(read) + len(rest) == 1 + 1200 + 1 and rest[-1] == b"data: [DONE]"
    held = sample(during, "vllm:kv_cache_usage_perc", **LABELS) * KV_BLOCKS
    assert abs(held - round(held)) < 1e-6
    # The prompt and every token generated so far, in whole blocks of 128 tokens.
    assert -(-(prompt + 299) // 128) <= round(held) <= -(-(prompt + 1200) // 128)
    assert sample(during, "vllm:num_requests_running", **LABELS) == 1.0
    after = scrape(standin)
    assert sample(after, "vllm:kv_cache_usage_perc", **LABELS) == 0.0
    assert histogram(after, "vllm:e2e_request_latency_seconds")[3] == 1


def test_requests_that_fail_are_not_observed_as_successes(root, monkeypatch):  # noqa: F811
    """An injected HTTP 500 never reaches the engine: nothing counts it. An engine error finishes its request
    as vLLM's does, under finished_reason="error", never "stop" or "length" (vLLM times that finish too)."""
    monkeypatch.setenv("VLLM_TWIN_FAULTS", json.dumps({"500": [2], "error": [3]}))
    args = serve_args()
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    url = "http://127.0.0.1:%d" % args.port
    try:
        statuses = [requests.post(url + "/v1/chat/completions", json=text_chat("hello", 8), timeout=60).status_code
                    for _ in range(3)]
        families = scrape(url)
    finally:
        running.shutdown()
        running.server_close()
    assert statuses == [200, 500, 500]
    reasons = {labels["finished_reason"]: value for _, labels, value in
               families["vllm:request_success_total"]["samples"]}
    assert reasons == {"stop": 0.0, "length": 1.0, "abort": 0.0, "error": 1.0, "repetition": 0.0}
    assert histogram(families, "vllm:e2e_request_latency_seconds")[3] == finished(families) == 2


def test_requests_in_flight_when_the_engine_dies_are_never_finished(root):  # noqa: F811
    args = serve_args()
    running = server.start_server(args, cli.host_path("/data/models/" + MODEL), {})
    url = "http://127.0.0.1:%d" % args.port
    crashing = image_chat(2560, 1440, 16)  # above VLLM_TWIN_CRASH_PIXELS: its prefill kills the engine
    try:
        assert requests.post(url + "/v1/chat/completions", json=text_chat("hello", 8), timeout=60).status_code == 200
        streamed = {}

        def stream():
            with requests.post(url + "/v1/chat/completions", json=text_chat("go on", 4000, True, ignore_eos=True),
                               stream=True, timeout=180) as answer:
                lines = answer.iter_lines()
                streamed["first"] = next(line for line in lines if line.startswith(b"data: "))
                started.set()
                streamed["rest"] = [line for line in lines if line]

        started = threading.Event()
        streaming = threading.Thread(target=stream)
        streaming.start()
        assert started.wait(60)
        # Bounds against a hang, not timings: reading a 2560x1440 picture takes seconds on a loaded machine.
        assert requests.post(url + "/v1/chat/completions", json=crashing, timeout=180).status_code == 500
        streaming.join(timeout=180)
        families = scrape(url)
    finally:
        running.shutdown()
        running.server_close()
    assert b"EngineCore encountered an issue" in streamed["rest"][-2]
    # The streamed request had its first token, which vLLM times when it comes; it never finished.
    assert histogram(families, "vllm:time_to_first_token_seconds")[3] == 2
    assert histogram(families, "vllm:e2e_request_latency_seconds")[3] == finished(families) == 1


def test_the_process_series_are_this_processs_memory_and_start(standin):
    families = scrape(standin)
    started = sample(families, "process_start_time_seconds")
    elapsed = int(subprocess.run(["ps", "-o", "etimes=", "-p", str(os.getpid())], stdout=subprocess.PIPE,
                                 universal_newlines=True, check=True).stdout)
    assert abs(started - (time.time() - elapsed)) < 3
    with open("/proc/self/status") as handle:
        rss_kb = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
    resident = sample(families, "process_resident_memory_bytes")
    assert resident > 10 * 2 ** 20 and abs(resident - rss_kb * 1024) < 64 * 2 ** 20
