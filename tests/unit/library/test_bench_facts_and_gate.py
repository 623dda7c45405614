"""library/vllm_bench_facts.py and library/vllm_canary_gate.py, as Ansible runs them, against a Docker CLI that
knows the instance's containers: a run kept as the host's local fact and as its spec's baseline, whole and only on
a change; a canary compared with the baseline of the spec it replaced; and the inputs they cannot use, refused by
name."""
import json
import os
import stat

import pytest
from module_runs import assert_refused, run_module

from ansible_collections.ascend.fleet.plugins.module_utils import bench_record

NAME = "vllm-ascend"
OLD = {"config_hash": "old-hash", "image": "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p", "image_id": "sha256:aa"}
NEW = {"config_hash": "new-hash", "image": "quay.io/ascend/vllm-ascend:v0.18.0rc2-310p", "image_id": "sha256:bb"}
GROUPS = [(size, 32, concurrency) for size in ("1280x720", "640x480") for concurrency in (1, 4, 8)]


def docker_cli(tmp_path, containers):
    """A Docker CLI whose `container inspect` knows these containers ({name: spec}), as the real one prints them
    for the modules' format; an unknown name is an error on stderr, after the known ones, as Docker does."""
    lines = {name: json.dumps({"name": "/" + name, "image": spec["image"], "image_id": spec["image_id"],
                               "labels": {"ascend-vllm-fleet.config-hash": spec["config_hash"]}})
             for name, spec in containers.items()}
    script = tmp_path / ("docker-" + "-".join(sorted(containers)))
    script.write_text("#!/usr/bin/env python3\nimport json, sys\nknown = %s\nmissing = False\n"
                      "for name in sys.argv[sys.argv.index('--') + 1:]:\n"
                      "    if name in known:\n        print(known[name])\n"
                      "    else:\n        missing = True\n"
                      "        print('Error: No such container: ' + name, file=sys.stderr)\n"
                      "sys.exit(1 if missing else 0)\n" % json.dumps(lines))
    script.chmod(0o755)
    return str(script)


def write_run(path, slowdown=1.0, answers=True):
    for size, tokens, concurrency in GROUPS:
        bench_record.append_result(str(path), {
            "image_size": size, "max_tokens": tokens, "concurrency": concurrency, "requests": 8, "completed": 8,
            "output_tokens_per_s": round(100.0 * concurrency / slowdown, 2), "p95_latency_s": 3.0 * slowdown,
            "p95_ttft_s": 0.5, "unreliable": False, "finished_at": 1796000000.0 + concurrency})
    bench_record.append_result(str(path), bench_record.answer_check_record(
        "after", {"mode": "known", "passed": answers, "failure": None if answers else "got \"!!!!!!!!\""}))


@pytest.fixture
def host(tmp_path):
    class Host:
        results = tmp_path / "results" / (NAME + ".jsonl")
        facts = tmp_path / "facts.d" / "vllm_bench.fact"
        baselines = tmp_path / "results" / "baselines"

        def keep(self, docker, **args):
            return run_module("vllm_bench_facts", **dict(
                {"instance": NAME, "results_file": str(self.results), "preset": "canary",
                 "facts_file": str(self.facts), "baselines_dir": str(self.baselines), "docker": docker}, **args))

        def gate(self, docker, **args):
            return run_module("vllm_canary_gate", **dict(
                {"instance": NAME, "results_file": str(self.results), "preset": "canary",
                 "baselines_dir": str(self.baselines), "docker": docker}, **args))

    return Host()


def test_a_run_is_kept_as_the_instances_last_and_a_second_keep_changes_nothing(tmp_path, host):
    write_run(host.results)
    docker = docker_cli(tmp_path, {NAME: OLD})
    kept = host.keep(docker)
    assert kept["changed"] and not kept["baseline_recorded"] and kept["baselines"] == []
    facts = json.loads(host.facts.read_text())
    last = facts["instances"][NAME]["last_run"]
    assert last == kept["last_run"] and last["config_hash"] == "old-hash" and last["image"] == OLD["image"]
    assert last["preset"] == "canary" and len(last["groups"]) == 6 and last["answers"] == "passed"
    assert last["finished_at"] == 1796000008.0 and last["finished_at_utc"].startswith("2026-11-30T")
    assert [(line["image_size"], line["peak_concurrency"]) for line in last["summary"]] == [
        ("1280x720", 8), ("640x480", 8)]
    # Not executable: the setup module runs an executable .fact and reads its output instead.
    assert not os.stat(host.facts).st_mode & stat.S_IXUSR and not host.baselines.exists()
    before = host.facts.stat().st_mtime_ns
    assert host.keep(docker)["changed"] is False and host.facts.stat().st_mtime_ns == before


def test_a_baseline_is_kept_per_spec_and_missing_records_only_what_has_none(tmp_path, host):
    write_run(host.results)
    docker = docker_cli(tmp_path, {NAME: OLD})
    assert host.keep(docker, baseline="missing")["baseline_recorded"]
    assert host.keep(docker, baseline="missing")["changed"] is False
    baselines = json.loads((host.baselines / (NAME + ".json")).read_text())["baselines"]
    assert list(baselines) == ["canary/old-hash"] and len(baselines["canary/old-hash"]["groups"]) == 6
    facts = json.loads(host.facts.read_text())["instances"][NAME]
    assert [b["config_hash"] for b in facts["baselines"]] == ["old-hash"]


def test_check_mode_says_what_it_would_keep_and_writes_nothing(tmp_path, host):
    write_run(host.results)
    result = host.keep(docker_cli(tmp_path, {NAME: OLD}), baseline="always", _ansible_check_mode=True)
    assert result["changed"] and result["baseline_recorded"]
    assert not host.facts.exists() and not host.baselines.exists()


def test_what_it_cannot_keep_is_refused_by_name(tmp_path, host):
    docker = docker_cli(tmp_path, {NAME: OLD})
    assert_refused(host.keep(docker), str(host.results), "holds no group", "run the benchmark first")
    write_run(host.results)
    assert_refused(host.keep(docker_cli(tmp_path, {}), baseline="always"), "container vllm-ascend cannot be "
                   "inspected", "No such container", "deploy first")
    gone = host.keep(docker_cli(tmp_path, {}))
    assert gone["last_run"]["config_hash"] is None and len(gone["last_run"]["groups"]) == 6
    host.facts.write_text("[]")
    assert_refused(host.keep(docker), str(host.facts), "is not of format 1")
    assert host.facts.read_text() == "[]"


def test_a_canary_30_percent_slower_than_the_baseline_of_what_it_replaced_fails(tmp_path, host):
    write_run(host.results)
    host.keep(docker_cli(tmp_path, {NAME: OLD}), baseline="always")
    host.results.unlink()
    write_run(host.results, slowdown=1.3)
    gate = host.gate(docker_cli(tmp_path, {NAME: NEW, NAME + "-previous": OLD}), max_regression=0.1)
    assert gate["changed"] is False and gate["passed"] is False
    assert gate["replaced"] == OLD and gate["canary"] == NEW and gate["baseline"]["config_hash"] == "old-hash"
    assert gate["comparison"]["metrics"]["throughput"]["regressed"]
    assert "throughput -23.1 %" in gate["line"] and "p95 latency +30.0 %" in gate["line"], gate["line"]
    assert "worse than the 10 % allowed" in gate["line"] and "over 6 groups" in gate["line"]


def test_a_canary_as_fast_passes_and_one_with_failed_answers_does_not(tmp_path, host):
    write_run(host.results)
    host.keep(docker_cli(tmp_path, {NAME: OLD}), baseline="always")
    docker = docker_cli(tmp_path, {NAME: NEW, NAME + "-previous": OLD})
    gate = host.gate(docker)
    assert gate["passed"] and gate["reasons"] == [] and "throughput +0.0 %" in gate["line"]
    host.results.unlink()
    write_run(host.results, answers=False)
    gate = host.gate(docker)
    assert not gate["passed"] and "answers failed the answer check" in gate["line"] and "!!!!!!!!" in gate["line"]


def test_with_no_baseline_the_canary_passes_and_says_so(tmp_path, host):
    write_run(host.results)
    gate = host.gate(docker_cli(tmp_path, {NAME: NEW, NAME + "-previous": OLD}), preset="quick")
    assert gate["passed"] and gate["baseline"] is None and gate["comparison"] is None
    assert "no baseline of %s with preset quick" % OLD["image"] in gate["line"]


@pytest.mark.parametrize("args, expected", [
    ({"max_regression": 1.5}, ["max_regression: 1.5", "between 0 and 1"]),
    ({"max_regression": "nan"}, ["max_regression: nan"]),
    ({"confidence": 0.2}, ["confidence: 0.2", "between 0.5 and 0.999"])])
def test_a_gate_it_cannot_judge_with_is_refused_by_name(tmp_path, host, args, expected):
    write_run(host.results)
    assert_refused(host.gate(docker_cli(tmp_path, {NAME: NEW, NAME + "-previous": OLD}), **args), *expected)


def test_an_instance_with_nothing_set_aside_is_no_canary(tmp_path, host):
    write_run(host.results)
    assert_refused(host.gate(docker_cli(tmp_path, {NAME: NEW})), "vllm-ascend has no container set aside",
                   "vllm-ascend-previous")


def test_a_run_with_failed_answers_or_no_reliable_group_is_no_baseline(tmp_path, host):
    docker = docker_cli(tmp_path, {NAME: OLD})
    write_run(host.results, answers=False)
    assert_refused(host.keep(docker, baseline="always"), "the run of vllm-ascend", "cannot be a baseline",
                   "its answers failed")
    assert not host.baselines.exists()
    host.results.unlink()
    write_run(host.results)
    lines = [json.loads(line) for line in host.results.read_text().splitlines()]
    host.results.write_text("".join(json.dumps(dict(line, unreliable=True) if "concurrency" in line else line) + "\n"
                                    for line in lines))
    assert_refused(host.keep(docker, baseline="missing"), "measured no group reliably")


def test_a_preset_changed_since_its_baseline_fails_the_canary_saying_to_record_a_new_one(tmp_path, host):
    write_run(host.results)
    host.keep(docker_cli(tmp_path, {NAME: OLD}), baseline="always")
    host.results.unlink()
    write_run(host.results)
    bench_record.append_result(str(host.results), {
        "image_size": "1920x1080", "max_tokens": 32, "concurrency": 1, "requests": 8, "completed": 8,
        "output_tokens_per_s": 50.0, "p95_latency_s": 4.0, "unreliable": False, "finished_at": 1796000100.0})
    gate = host.gate(docker_cli(tmp_path, {NAME: NEW, NAME + "-previous": OLD}))
    assert not gate["passed"] and gate["comparison"]["missing"] == []
    assert "measures other groups than when its baseline was recorded (only in the canary: 1920x1080, " \
           "max_tokens 32, concurrency 1)" in gate["line"]
    assert "-e vllm_bench_preset=canary -e vllm_bench_baseline=true" in gate["line"]
