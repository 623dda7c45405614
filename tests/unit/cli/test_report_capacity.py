"""The report states what capacity searches found: per instance, and for the fleet when every instance was searched
with one SLO; a folder with only searches is a report, not 'no results'."""
import json

import pytest

from ansible_collections.ascend.fleet.plugins.plugin_utils import report

SLO = {"p95_latency_s": 4.2, "max_error_rate": 0.01}


def found(users, limited_by="slo", slo=SLO, size="640x480", open_loop=None):
    return {"capacity": {"image_size": size, "max_tokens": 32, "slo": slo, "max_concurrency": users,
                         "limited_by": limited_by, "rps": users * 1.5 or None, "output_tokens_per_s": users * 48.0,
                         "slo_figures": {}, "probes": [], "requests": 100, "seconds": 10.0, "resumed_probes": 0,
                         "open_loop": open_loop}}


def write(folder, host, *lines, name="vllm-ascend"):
    path = folder / "raw" / host / (name + ".jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_each_instance_and_the_fleet_meet_the_slo_up_to_their_users(tmp_path):
    missed = {"rate_rps": 9.0, "burstiness": 1.0, "sent": 38, "passed": False, "failed": ["p95_latency_s"],
              "figures": {}, "duration_s": 4.0, "max_in_flight": 9, "resumed": False}
    write(tmp_path, "a", found(6, open_loop=missed), found(0, "none_met", size="1920x1080"))
    write(tmp_path, "b", found(64, "top"), found(2, size="1920x1080"))
    summary = report.build(tmp_path, 10.0)
    sentences = [entry["sentence"] for entry in summary["searched_capacity"]]
    assert sentences == [
        "640x480, max_tokens 32: vllm-ascend on a meets the SLO (errors <= 1 %, p95 latency <= 4.2s) up to 6 users "
        "at 9 requests/s",
        "1920x1080, max_tokens 32: vllm-ascend on a does not meet the SLO (errors <= 1 %, p95 latency <= 4.2s) even "
        "with one user",
        "640x480, max_tokens 32: vllm-ascend on b meets the SLO (errors <= 1 %, p95 latency <= 4.2s) up to at least "
        "64 users at 96 requests/s",
        "1920x1080, max_tokens 32: vllm-ascend on b meets the SLO (errors <= 1 %, p95 latency <= 4.2s) up to 2 users "
        "at 3 requests/s"]
    fleet = {(entry["image_size"], entry["users"], entry["rps"]) for entry in summary["fleet_searched_capacity"]}
    assert fleet == {("640x480", 70, 105.0), ("1920x1080", 2, 3.0)}
    text = (tmp_path / "report.md").read_text()
    # b's search reached the top of its range: the fleet's 70 is a lower bound.
    assert "the fleet meets the SLO (errors <= 1 %, p95 latency <= 4.2s) up to at least 70 users at 105 requests/s" \
        in text
    assert "the fleet meets the SLO (errors <= 1 %, p95 latency <= 4.2s) up to 2 users at 3 requests/s" in text
    assert "open-loop check at 9 requests/s: missed p95_latency_s" in text
    assert "2 capacities searched" not in report.describe(tmp_path, summary)
    assert "4 capacities searched" in report.describe(tmp_path, summary)


def test_the_instances_searched_are_counted_as_the_reports_instances(tmp_path):
    """A search measures no group of the matrix; its instances are still those the report is of."""
    write(tmp_path, "a", found(6))
    write(tmp_path, "b", found(8))
    write(tmp_path, "lb-1", found(12), name="gateway")
    summary = report.build(tmp_path, 10.0)
    assert (summary["instances"], summary["hosts"], summary["gateways"]) == (2, ["a", "b"], ["lb-1"])
    assert "3 capacities searched, 2 instance(s), 0 slow" in report.describe(tmp_path, summary)
    assert "for 2 instance(s) on a, b and for the gateway measured from lb-1;" in (tmp_path / "report.md").read_text()


def test_no_fleet_capacity_where_an_instance_was_searched_with_another_slo_or_not_at_that_size(tmp_path):
    write(tmp_path, "a", found(6), found(3, size="1280x720"))
    write(tmp_path, "b", found(8, slo={"p95_latency_s": 9.0}))
    summary = report.build(tmp_path, 10.0)
    assert summary["fleet_searched_capacity"] == [] and len(summary["searched_capacity"]) == 3


def test_no_fleet_capacity_while_an_instance_of_the_report_has_no_search(tmp_path):
    """An instance whose search ended before its first finding is not left out of "the fleet" unnoticed."""
    write(tmp_path, "a", found(6))
    write(tmp_path, "b", {"probe": {"kind": "closed"}, "image_size": "640x480", "max_tokens": 32, "concurrency": 1})
    summary = report.build(tmp_path, 10.0)
    assert summary["fleet_searched_capacity"] == [] and len(summary["searched_capacity"]) == 1


@pytest.mark.parametrize("change,problem", [
    ({"max_concurrency": "six"}, "no max_concurrency"), ({"limited_by": "luck"}, "limited_by is none of"),
    ({"slo": {"p95_latency_s": "4.2"}}, "its slo is no mapping"), ({"open_loop": {"passed": 1}}, "no open-loop check"),
    ({"rps": [1]}, "rps is no number")])
def test_a_capacity_line_the_report_cannot_use_is_refused_naming_the_file(tmp_path, change, problem):
    line = found(6)
    line["capacity"].update(change)
    write(tmp_path, "a", line)
    with pytest.raises(SystemExit) as stop:
        report.build(tmp_path, 10.0)
    message = str(stop.value)
    assert message.startswith("raw/a/vllm-ascend.jsonl: the capacity line of 640x480, max_tokens 32: ")
    assert problem in message and "Fix:" in message
    assert not (tmp_path / "summary.json").exists()
