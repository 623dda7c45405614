"""Where the benchmark record is restated outside module_utils/bench_record.py, it says what bench_record says:
the load test's documented group, the vllm_bench role's latency target, and the files its filters name."""
import datetime
import fnmatch

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.filter import vllm_bench
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    FIELD_NAMES,
    LATENCY_TARGET_S,
    ProgressWriter,
    read_progress,
    run_ended,
)
from ansible_collections.ascend.fleet.plugins.modules import vllm_benchmark
from conftest import REPO


def test_the_modules_documented_group_is_a_record():
    documented = yaml.safe_load(vllm_benchmark.RETURN)["groups"]["sample"][0]
    assert list(documented) == list(FIELD_NAMES) + ["resumed"]


def test_the_roles_latency_target_is_the_reports():
    defaults = yaml.safe_load((REPO / "roles/vllm_bench/defaults/main.yml").read_text(encoding="utf-8"))
    specs = yaml.safe_load((REPO / "roles/vllm_bench/meta/argument_specs.yml").read_text(encoding="utf-8"))
    assert defaults["vllm_bench_latency_target_s"] == LATENCY_TARGET_S
    assert specs["argument_specs"]["main"]["options"]["vllm_bench_latency_target_s"]["default"] == LATENCY_TARGET_S


def test_the_roles_filters_name_the_files_bench_record_reads(tmp_path):
    instance = {"name": "vllm-ascend-2", "port": 8001, "npu_ids": [4], "devices": ["/dev/davinci2"]}
    results = vllm_bench.vllm_bench_results_file(instance, str(tmp_path))
    assert results == str(tmp_path / "vllm-ascend-2.jsonl")
    assert vllm_bench.vllm_bench_progress_file(results) == results + ".progress.json"
    ProgressWriter(results).update({"groups_done": 0, "groups_total": 12}, force=True)
    assert run_ended(read_progress(open(results + ".progress.json").read()), 600) is False
    ProgressWriter(results).finish(12, 12)
    assert run_ended(read_progress(open(results + ".progress.json").read()), 600) is True
    assert run_ended(None, 600, waited_s=22 * 30) is False  # 22 polls of 30 s: 660 s waited
    assert run_ended(None, 600, waited_s=23 * 30) is True


def test_a_fresh_run_keeps_the_newest_set_aside_results_of_each_instance():
    aside = vllm_bench.vllm_bench_set_aside("/var/lib/vllm-bench/vllm-ascend.jsonl",
                                            datetime.datetime(2026, 12, 3, 12, 7, 0))
    assert aside == "/var/lib/vllm-bench/vllm-ascend.jsonl.20261203T120700Z"
    found = [{"path": "/r/a.jsonl.2026120%dT000000Z" % day, "mtime": day} for day in range(1, 8)]
    found += [{"path": "/r/b.jsonl.20261201T000000Z", "mtime": 1}]
    assert vllm_bench.vllm_bench_expired(found, 5) == ["/r/a.jsonl.20261201T000000Z", "/r/a.jsonl.20261202T000000Z"]
    assert vllm_bench.vllm_bench_expired(found, 0) == sorted(entry["path"] for entry in found)


def test_the_set_aside_pattern_finds_every_set_aside_results_file_and_nothing_else(tmp_path):
    results = vllm_bench.vllm_bench_results_file("vllm-ascend-2", str(tmp_path))
    names = [vllm_bench.vllm_bench_set_aside(results, datetime.datetime(year, month, day, hour, minute, second))
             for year, month, day, hour, minute, second in ((2026, 1, 5, 0, 0, 0), (2026, 12, 31, 23, 59, 59))]
    others = [results, vllm_bench.vllm_bench_progress_file(results), str(tmp_path / "vllm-ascend-2.jsonl.partial")]
    for instance in ("*", "vllm-ascend-2"):
        pattern = vllm_bench.vllm_bench_set_aside_pattern(instance)
        assert [fnmatch.fnmatch(name.rsplit("/", 1)[1], pattern) for name in names + others] == [True, True] + [
            False] * len(others), pattern
    assert not fnmatch.fnmatch(names[0].rsplit("/", 1)[1], vllm_bench.vllm_bench_set_aside_pattern("vllm-ascend-1"))


def test_the_role_sets_results_aside_and_finds_them_by_the_filters_alone():
    """The name's time format and the find pattern are the filters' (plugins/filter/vllm_bench.py): the role's tasks
    restate neither."""
    tasks = yaml.safe_load((REPO / "roles/vllm_bench/tasks/main.yml").read_text(encoding="utf-8"))
    steps = {task["name"]: task for block in tasks if "block" in block for task in block["block"]}
    assert "ascend.fleet.vllm_bench_set_aside(now(utc=true))" in steps["Set earlier results aside"][
        "ansible.builtin.command"]["argv"][-1]
    assert steps["Find the results set aside"]["ansible.builtin.find"]["patterns"] == [
        "{{ '*' | ascend.fleet.vllm_bench_set_aside_pattern }}"]


def test_a_set_aside_time_that_is_no_date_is_refused_by_name():
    with pytest.raises(AnsibleFilterError, match=r"the time is '20261203T120700Z': expected a date and time\. Fix"):
        vllm_bench.vllm_bench_set_aside("/r/a.jsonl", "20261203T120700Z")


def test_the_roles_plan_says_what_its_estimates_are_based_on():
    """The plan of a twin's run shows the seed's real-hardware pace as such, once under the instances' lines."""
    defaults = {name: spec.get("default") for name, spec in vllm_benchmark.ARGUMENT_SPEC.items()}
    planned = [dict(vllm_benchmark.run(dict(defaults, max_tokens=[32], image_sizes=["640x480"]), check_mode=True),
                    item={"name": instance}) for instance in ("vllm-ascend-npu1", "vllm-ascend-npu2")]
    lines = vllm_bench.vllm_bench_plan_lines(planned)
    # 64 + 8 + 4 + 2 + 1 waves of 32 tokens at the seed's 0.09 s: 228 s.
    assert lines[:2] == ["vllm-ascend-npu1: 5 groups, 320 requests, estimated 3m48s",
                         "vllm-ascend-npu2: 5 groups, 320 requests, estimated 3m48s"]
    assert lines[2:] == ["estimated from the seed's 310P timings (real hardware: 0.09 s per output token on a 310P3 "
                         "pair with TP 2); other hardware, or a stand-in, runs at its own pace"]
