"""The stand-in against real vLLM 0.18 (its API server, a fake engine core), run by `scripts/dev conformance`.

Real vLLM is this suite's own (real_vllm/): vLLM 0.18.0 from PyPI in a virtualenv under REAL_VLLM_HOME
(default /var/tmp/real-vllm, about 9 GB, installed by the first run), `vllm serve` on 127.0.0.1 with a
weightless Qwen3-VL-shaped model folder and only its engine core replaced by a fake one that streams a set
answer with set timings. It needs no GPU, no weights and nothing beside the repository.

With CONFORMANCE_RECORD=1 (`scripts/dev conformance --record`) real vLLM's transcripts and parser verdicts are
written to tests/fixtures/vllm-0.18/, where the default test suite holds the stand-in to them
(tests/unit/twin/test_standin_conformance.py).
"""
import json
import os
import statistics
import subprocess
import sys
import time

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import load_test

from . import cases, golden, rendered, servers, transcript

RECORD = os.environ.get("CONFORMANCE_RECORD") == "1"


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    servers.install_real()
    with servers.every_server(servers.RealVllm, tmp_path_factory.mktemp("real")) as started:
        yield started


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    with servers.every_server(servers.Standin, tmp_path_factory.mktemp("standin")) as started:
        yield started


@pytest.fixture(scope="session")
def real_transcripts(real):
    found = transcript.record_all({name: server.url for name, server in real.items()})
    if RECORD:
        golden.write_transcripts(found)
    return found


@pytest.fixture(scope="session")
def standin_transcripts(standin):
    return transcript.record_all({name: server.url for name, server in standin.items()})


@pytest.mark.parametrize("name", sorted(transcript.CASES))
def test_the_standin_answers_as_real_vllm(name, real_transcripts, standin_transcripts):
    assert transcript.differences(real_transcripts[name], standin_transcripts[name]) == []


@pytest.mark.parametrize("name", sorted(transcript.CASES))
def test_the_recorded_transcript_is_real_vllms(name, real_transcripts):
    assert transcript.differences(golden.transcript(name), real_transcripts[name]) == [], (
        "tests/fixtures/vllm-0.18/ is out of date: record it again with scripts/dev conformance --record")


def test_the_pixel_cap_the_role_renders_takes_effect_on_real_vllm(real_transcripts):
    """Qwen3-VL's resize with max_pixels 1310720 makes 1920x1080 into 1504x832 pixels: 47 x 26 tokens + 2."""
    assert real_transcripts["bench_1920x1080_capped"]["image_tokens"] == 47 * 26 + 2
    assert real_transcripts["bench_1920x1080_lone_cap"]["image_tokens"] == real_transcripts[
        "bench_1920x1080"]["image_tokens"]


@pytest.fixture(scope="session")
def parser_verdicts(tmp_path_factory):
    """Real vLLM's parser on every argument list the role renders and on lists it must refuse."""
    servers.install_real()
    lists = golden.argument_lists(rendered.every_rendering())
    out = tmp_path_factory.mktemp("parser") / "verdicts.json"
    subprocess.run([str(servers.real_python()), str(servers.REPO / "tests/conformance/real_parser.py"), str(out)],
                   input=json.dumps([entry["argv"] for entry in lists]), universal_newlines=True, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    answer = json.loads(out.read_text())
    found = {"options": answer["options"],
             "lists": [dict(entry, **verdict) for entry, verdict in zip(lists, answer["verdicts"])]}
    if RECORD:
        golden.write_serve_args(found)
    return found


def test_every_argument_list_the_role_renders_is_accepted_by_real_vllm(parser_verdicts):
    refused = [(entry["what"], entry["error"]) for entry in parser_verdicts["lists"]
               if entry["rendered"] and not entry["accepted"]]
    assert refused == []


def test_the_standin_parser_accepts_and_refuses_what_real_vllm_does(parser_verdicts):
    assert golden.parser_disagreements(parser_verdicts["lists"]) == []


def test_the_recorded_parser_verdicts_are_real_vllms(parser_verdicts):
    assert golden.serve_args() == parser_verdicts, (
        "tests/fixtures/vllm-0.18/serve-args.json is out of date: record it again with scripts/dev conformance "
        "--record")


def engine_log(path):
    with open(path) as handle:
        return [json.loads(line) for line in handle]


@pytest.mark.parametrize("concurrency", [1, 8])
def test_the_benchmark_measures_real_vllm_as_its_engine_logs_it(real, concurrency):
    """Token counts exact; mean TTFT and TPOT within 5% of the fake engine's own per-request log.

    A user's TTFT runs from sending the request to its first token, so the truth is the engine's first token
    less the moment the module sent the request: the API server's own work on the request (the image's
    decoding and processing, before the engine sees it) is part of what the module must measure."""
    server = real["plain"]
    settings = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    settings.update(base_url=server.url, warmup_requests=0)
    client = load_test.Client(server.url, None, 120)
    runner = load_test.LoadTest(settings, client, cases.MODEL)
    group = {"image_size": "640x480", "max_tokens": 16, "concurrency": concurrency, "requests": 16}
    bodies = runner.bodies(group)
    wall = time.time() - time.monotonic()
    results = runner.run_group(group, bodies, lambda: None)
    assert [result.error for result in results if result.error] == []
    logged = {entry["request_id"].rsplit("-", 1)[0]: entry for entry in engine_log(server.engine_log)}
    engine = [logged[result.request_id] for result in results]
    assert [(r.prompt_tokens, r.completion_tokens) for r in results] == [
        (entry["prompt_tokens"], entry["completion_tokens"]) for entry in engine]
    record = load_test.summarise(group, results, 0.05)
    engine_ttft = statistics.mean(entry["first_token_s"] - (result.sent + wall)
                                  for entry, result in zip(engine, results))
    api_server = statistics.mean(entry["arrived_s"] - (result.sent + wall) for entry, result in zip(engine, results))
    engine_tpot = statistics.mean((entry["finished_s"] - entry["first_token_s"]) / (entry["completion_tokens"] - 1)
                                  for entry in engine)
    print("c=%d: TTFT module %.4f s, engine's first token %.4f s after sending (%.4f s of it in the API server); "
          "TPOT module %.5f s, engine %.5f s" % (concurrency, record["avg_ttft_s"], engine_ttft, api_server,
                                                  record["avg_tpot_s"], engine_tpot), file=sys.stderr)
    assert record["avg_ttft_s"] == pytest.approx(engine_ttft, rel=0.05)
    assert record["avg_tpot_s"] == pytest.approx(engine_tpot, rel=0.05)


def test_the_probe_passes_against_real_vllm_with_and_without_a_key(real):
    from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline
    from ansible_collections.ascend.fleet.plugins.modules import vllm_probe as probe
    for name, key in (("plain", None), ("guarded", cases.API_KEY)):
        client = probe.Client(real[name].url, key, 60)
        assert client.models() == [cases.MODEL]
        answer = probe.smoke(client, {"model": cases.MODEL, "prompt": cases.module_default("vllm_probe", "prompt"),
                                      "max_tokens": 16, "request_timeout": 60}, (640, 480), Deadline(120))
        assert answer["answer"] and answer["usage"]["completion_tokens"] >= 1
