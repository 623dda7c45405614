"""library/vllm_benchmark.py's capacity search against the stand-in run as a local process (no Docker needed), with
a known capacity: a server of --max-num-seqs N serves N requests at once and queues the rest, so above N some
request waits a whole answer and its latency doubles."""
import json

import pytest
from standin_process import LocalStandin

from ansible_collections.ascend.fleet.plugins.module_utils import bench_record
from ansible_collections.ascend.fleet.plugins.module_utils import load_test as bench

CAPACITY = 6
# The seed's concurrency axis: the search's range, and the matrix it is weighed against.
SEED_CONCURRENCY = [1, 8, 16, 32, 64]
# The stand-in a sixteenth of the twin's speed: an answer of 32 tokens takes about 1.2 s, long next to this
# machine's scheduling noise. At a quarter (0.3 s) a CI run whose other jobs (the twin's builds, lint) loaded both
# cores delayed one request of the concurrency-2 probe by more than half an answer, and the search stopped at 1; at
# an eighth (0.6 s), with the twin's tests on three workers and the execution environment's build beside them, one
# of the concurrency-3 probe, and it stopped at 2. The stand-in waits rather than computes: the time is not CPU.
SPEED = 2.5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    standin = LocalStandin(tmp_path_factory.mktemp("capacity"), speed=SPEED, max_num_seqs=CAPACITY)
    yield standin
    standin.stop()


def params(server, **overrides):
    values = {name: spec.get("default") for name, spec in bench.ARGUMENT_SPEC.items()}
    values.update(base_url=server.url, image_sizes=["640x480"], max_tokens=[32], warmup_requests=0,
                  answer_check="none")
    values.update(overrides)
    bench.validate(values)
    return values


@pytest.fixture(scope="module")
def slo(server):
    """A p95 latency target one and a half times one user's: met while requests do not queue, missed once they
    wait a whole answer."""
    alone = bench.run(params(server, concurrency=[1], requests_per_group=4))["groups"][0]
    return {"p95_latency_s": round(1.5 * alone["p95_latency_s"], 4), "max_error_rate": 0.0}


def search(server, slo, **overrides):
    return bench.run(params(server, search="concurrency", slo=slo, concurrency=SEED_CONCURRENCY, **overrides))


def test_the_search_finds_the_servers_capacity_with_two_thirds_of_the_seed_matrixs_requests(server, slo):
    result = search(server, slo)
    (found,) = result["capacity"]
    assert found["max_concurrency"] == CAPACITY and found["limited_by"] == "slo", found
    assert [probe["concurrency"] for probe in found["probes"]] == [1, 2, 4, 8, 6, 7]
    assert found["slo_figures"]["p95_latency_s"]["measured"] <= slo["p95_latency_s"] and found["rps"] > 0
    matrix = bench.plan(params(server, concurrency=SEED_CONCURRENCY))
    assert found["requests"] <= 2 / 3.0 * sum(group["requests"] for group in matrix)
    # The open-loop check at the capacity's throughput ran, and says whether the SLO held there.
    check = found["open_loop"]
    assert check["sent"] == CAPACITY + 32 and check["rate_rps"] == found["rps"] and check["burstiness"] == 1.0
    assert isinstance(check["passed"], bool) and set(check["figures"]) == set(slo)
    assert result["ansible_facts"]["vllm_benchmark"]["capacity"] == result["capacity"] and result["groups"] == []


def test_the_next_image_size_starts_at_the_capacity_found_and_settles_it_in_two_probes(server, slo, tmp_path):
    results = tmp_path / "two.jsonl"
    two_sizes = dict(image_sizes=["640x480", "1280x720"], open_loop_requests=0, search_probe_requests=8,
                     results_file=str(results))
    first, second = search(server, slo, **two_sizes)["capacity"]
    assert first["started_at"] == 1 and first["max_concurrency"] == CAPACITY
    assert second["started_at"] == CAPACITY and second["max_concurrency"] == CAPACITY
    assert [probe["concurrency"] for probe in second["probes"]] == [CAPACITY, CAPACITY + 1]
    matrix = bench.plan(params(server, concurrency=SEED_CONCURRENCY, image_sizes=two_sizes["image_sizes"]))
    assert first["requests"] + second["requests"] <= 2 / 3.0 * sum(group["requests"] for group in matrix)
    # Resumed with every probe recorded, the second search starts where it did and asks the server nothing.
    logged = server.quiet_count()
    again = search(server, slo, resume=True, **two_sizes)["capacity"]
    assert [(found["started_at"], found["probes"]) for found in again] == [
        (found["started_at"], found["probes"]) for found in (first, second)]
    assert all(found["resumed_probes"] == len(found["probes"]) for found in again)
    assert server.quiet_count() == logged


def test_an_interrupted_search_resumes_without_running_a_finished_probe_again(server, slo, tmp_path):
    whole = tmp_path / "whole.jsonl"
    short = dict(search_probe_requests=8, open_loop_requests=8)
    first = search(server, slo, results_file=str(whole), **short)["capacity"][0]
    lines = whole.read_text().splitlines()
    assert [json.loads(line)["probe"]["kind"] for line in lines[:-1]] == ["closed"] * 6 + ["open_loop"]
    assert bench_record.read_capacities(str(whole)) == [first] and bench_record.read_results(str(whole)) == ([], 0)
    # Killed during the fourth probe: three probes kept, and a line cut mid-write; and lines that look like probes
    # but are not whole ones, which a resumed search runs again rather than trusts or trips on.
    fourth = json.loads(lines[3])
    crafted = [{"probe": {}}, dict(fourth, probe=dict(fourth["probe"], passed="yes")),
               dict(fourth, probe=dict(fourth["probe"], sent=True)),
               {name: value for name, value in fourth.items() if name != "concurrency"}]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:3] + [json.dumps(line) for line in crafted]) + "\n" + lines[3][:40])
    logged = server.quiet_count()
    resumed = search(server, slo, results_file=str(cut), resume=True, **short)["capacity"][0]
    assert resumed["max_concurrency"] == first["max_concurrency"] and resumed["probes"] == first["probes"]
    assert resumed["resumed_probes"] == 3 and resumed["requests"] == first["requests"]
    # The server answered the probes after the third and the open-loop check, and nothing else.
    sent = sum(json.loads(line)["probe"]["sent"] for line in lines[3:-1])
    assert len(server.records(expected=logged + sent)) == logged + sent
    # A search with another SLO runs every probe: the recorded verdicts were against another target.
    other = search(server, dict(slo, p95_latency_s=slo["p95_latency_s"] * 1.01), results_file=str(cut), resume=True,
                   **short)
    assert other["capacity"][0]["resumed_probes"] == 0


def test_a_first_user_that_misses_the_slo_is_a_capacity_of_none(server):
    (found,) = search(server, {"p95_latency_s": 0.001}, search_probe_requests=2)["capacity"]
    assert found["max_concurrency"] == 0 and found["limited_by"] == "none_met" and found["open_loop"] is None
    assert [probe["concurrency"] for probe in found["probes"]] == [1] and found["rps"] is None


def test_check_mode_plans_the_doubling_and_sends_nothing(server):
    logged = server.quiet_count()
    result = bench.run(params(server, search="concurrency", slo={"p95_ttft_s": 1}, concurrency=[1, 40]),
                       check_mode=True)
    assert [group["concurrency"] for group in result["planned"]] == [1, 2, 4, 8, 16, 32, 40]
    assert result["planned_requests"] == sum(c + max(16, c) for c in (1, 2, 4, 8, 16, 32, 40))
    assert server.quiet_count() == logged and result["capacity"] == []


@pytest.mark.parametrize("overrides,message", [
    ({"slo": {"p95_latency_s": 5}}, "slo: given, but search is none"),
    ({"search": "concurrency"}, "slo: None is not an SLO"),
    ({"search": "concurrency", "slo": {"p95_latency_s": 5}, "search_tolerance": 0}, "search_tolerance: 0 is not"),
    ({"search": "concurrency", "slo": {"p95_latency_s": 5}, "search_confidence": 1.0}, "search_confidence: 1.0"),
    ({"search": "concurrency", "slo": {"p95_latency_s": 5}, "open_loop_burstiness": 0}, "open_loop_burstiness: 0"),
])
def test_search_options_it_cannot_use_are_refused_naming_the_option(overrides, message):
    values = {name: spec.get("default") for name, spec in bench.ARGUMENT_SPEC.items()}
    values.update(overrides)
    with pytest.raises(bench.BenchmarkError) as error:
        bench.validate(values)
    assert message in str(error.value) and "Fix:" in str(error.value)
