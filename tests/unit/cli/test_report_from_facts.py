"""`ascend-vllm-fleet report --from-facts`: the report rebuilt from the hosts' local facts (the setup module's result
per host, as the command saves them) is the report of the results files those facts were kept from; what is not
such facts is refused by name, nothing is written outside the report folder, and no fetched result is overwritten."""
import json

import pytest
from report_rows import group, write

from ansible_collections.ascend.fleet.plugins.module_utils import bench_record
from ansible_collections.ascend.fleet.plugins.plugin_utils import report

CHECK = {"answer_check": "after", "mode": "known", "passed": False, "failure": "got \"!!!!!!!!\"", "checked_at": 1.0}
RUNS = {"npu-a": {"vllm-ascend": [group("640x480", 32, c, 1.0 + c / 10, 100.0 * c) for c in (1, 8)]},
        "npu-b": {"vllm-ascend-npu0": [group("640x480", 32, c, 2.0 + c / 10, 60.0 * c) for c in (1, 8)],
                  "vllm-ascend-npu1": [group("640x480", 32, c, 2.0 + c / 10, 70.0 * c) for c in (1, 8)]}}


def saved_facts(tree, host, instances):
    """A host's file as the command saves it (the setup module's result), with what vllm_bench_facts keeps."""
    tree.mkdir(exist_ok=True)
    (tree / host).write_text(json.dumps({"ansible_facts": {"ansible_local": {"vllm_bench": {"format": 1, "instances": {
        name: {"last_run": {"groups": groups, "answer_checks": [CHECK] if name.endswith("npu1") else [],
                            "summary": bench_record.summary(groups)}, "baselines": []}
        for name, groups in instances.items()}}}}, "changed": False}))


def test_the_report_from_the_facts_is_the_report_from_the_results_files(tmp_path):
    tree = tmp_path / "facts"
    for host, instances in RUNS.items():
        saved_facts(tree, host, instances)
        for name, groups in instances.items():
            write(tmp_path / "from-files", host, name, groups + ([CHECK] if name.endswith("npu1") else []))
    assert report.raw_from_facts(tree, tmp_path / "from-facts") == {
        "npu-a": ["vllm-ascend"], "npu-b": ["vllm-ascend-npu0", "vllm-ascend-npu1"]}
    report.build(tmp_path / "from-facts", 10)
    from_files = report.build(tmp_path / "from-files", 10)
    from_facts = json.loads((tmp_path / "from-facts" / "summary.json").read_text())
    from_files = json.loads(json.dumps(dict(from_files, generated_at=from_facts["generated_at"])))
    assert from_facts == from_files and from_facts["instances"] == 3 and from_facts["answers_failed"]
    for name in ("results.csv", "totals.csv"):
        assert (tmp_path / "from-facts" / name).read_text() == (tmp_path / "from-files" / name).read_text()


@pytest.mark.parametrize("content, expected", [
    ("not json", "holds no benchmark facts (JSONDecodeError"),
    (json.dumps({"ansible_facts": {"ansible_local": {}}}), "holds no benchmark facts (KeyError: 'vllm_bench')"),
    (json.dumps({"failed": True, "msg": "unreachable"}), "holds no benchmark facts (KeyError: 'ansible_facts')")])
def test_a_host_file_without_benchmark_facts_is_refused_by_name(tmp_path, content, expected):
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "npu-a").write_text(content)
    with pytest.raises(SystemExit) as refused:
        report.raw_from_facts(tmp_path / "facts", tmp_path / "report")
    assert str(tmp_path / "facts" / "npu-a") in str(refused.value) and expected in str(refused.value)
    assert "Fix:" in str(refused.value)


@pytest.mark.parametrize("name,shown", [("../../escaped", r'"\.\./\.\./escaped"'),
                                        ("escaped\n", r'"escaped\\n"')], ids=["climbing out", "a line break"])
def test_an_instance_name_that_is_no_container_name_writes_nothing_outside_the_report(tmp_path, name, shown):
    """re.match's `$` lets a name end in a line break: the whole name must be a container name."""
    saved_facts(tmp_path / "facts", "npu-a", {name: RUNS["npu-a"]["vllm-ascend"]})
    with pytest.raises(SystemExit, match=r"names an instance %s: expected a container name" % shown):
        report.raw_from_facts(tmp_path / "facts", tmp_path / "report")
    assert not (tmp_path / "escaped.jsonl").exists() and not (tmp_path / "report").exists()


def test_no_folder_or_an_empty_one_is_refused(tmp_path):
    for tree in (tmp_path / "absent", tmp_path):
        with pytest.raises(SystemExit, match="Fix:"):
            report.raw_from_facts(tree, tmp_path / "report")


def test_a_report_folder_that_holds_results_is_not_written_over(tmp_path):
    write(tmp_path / "report", "npu-a", "vllm-ascend", RUNS["npu-a"]["vllm-ascend"])
    saved_facts(tmp_path / "facts", "npu-a", RUNS["npu-a"])
    before = (tmp_path / "report" / "raw" / "npu-a" / "vllm-ascend.jsonl").read_text()
    with pytest.raises(SystemExit, match="already holds results: expected a new report folder"):
        report.raw_from_facts(tmp_path / "facts", tmp_path / "report")
    assert (tmp_path / "report" / "raw" / "npu-a" / "vllm-ascend.jsonl").read_text() == before
