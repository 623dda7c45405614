"""Host and fleet totals of the report from hand-made results of two hosts with two instances each, and a gateway
on one of them: sums, partial totals, unreliable rows left out, the gateway's own series, the fleet's capacity
at the latency target, totals.csv and the chart."""
import csv
import html

import pytest
from report_rows import write

from ansible_collections.ascend.fleet.plugins.plugin_utils import report

A1, A2 = ("node-a", "vllm-ascend-npu1"), ("node-a", "vllm-ascend-npu2")
B1, B2 = ("node-b", "vllm-ascend-npu1"), ("node-b", "vllm-ascend-npu2")
# Prompt tokens of a request at each size, so total tokens/s differ from output tokens/s.
PROMPT = {"640x480": 500, "1920x1080": 2042}


def measured(size, tokens, concurrency, rps, p95, unreliable=False):
    return {"image_size": size, "max_tokens": tokens, "concurrency": concurrency, "requests": 8, "completed": 8,
            "failed": 0, "error_rate": 0.5 if unreliable else 0.0, "unreliable": unreliable, "errors": {},
            "rps": rps, "output_tokens_per_s": rps * tokens, "total_tokens_per_s": rps * (tokens + PROMPT[size]),
            "p95_latency_s": p95, "p95_ttft_s": p95 / 4}


# Per instance: 640x480 at concurrency 1, 4 and 8 (p95 over 10 s at 8), and 1920x1080 at 1, which A2 never ran.
# B2's try at concurrency 4 was unreliable: its numbers (far above the others) must not reach any total.
RESULTS = {
    A1: [measured("640x480", 32, 1, 0.5, 2.0), measured("640x480", 32, 4, 1.5, 4.0),
         measured("640x480", 32, 8, 2.0, 12.0), measured("1920x1080", 32, 1, 0.2, 5.0)],
    A2: [measured("640x480", 32, 1, 0.6, 2.2), measured("640x480", 32, 4, 1.5, 4.0),
         measured("640x480", 32, 8, 2.0, 12.0)],
    B1: [measured("640x480", 32, 1, 0.4, 2.5), measured("640x480", 32, 4, 1.5, 4.0),
         measured("640x480", 32, 8, 2.0, 12.0), measured("1920x1080", 32, 1, 0.2, 5.0)],
    B2: [measured("640x480", 32, 1, 0.5, 2.1), measured("640x480", 32, 4, 50.0, 1.0, unreliable=True),
         measured("640x480", 32, 8, 2.0, 12.0), measured("1920x1080", 32, 1, 0.2, 5.0)],
}
# The gateway (HAProxy on node-a) measured at its own user counts; its try at 64 users was unreliable.
GATEWAY = [measured("640x480", 32, 4, 1.9, 2.8), measured("640x480", 32, 16, 5.0, 9.0),
           measured("640x480", 32, 32, 6.0, 15.0), measured("640x480", 32, 64, 0.1, 60.0, unreliable=True)]


def fleet_of_two_hosts(report_dir, gateway_host="node-a"):
    """RESULTS in report_dir, and GATEWAY under gateway_host unless it is None."""
    for (host, instance), groups in RESULTS.items():
        write(report_dir, host, instance, groups)
    if gateway_host:
        write(report_dir, gateway_host, "gateway", GATEWAY)
    return report_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    report_dir = fleet_of_two_hosts(tmp_path_factory.mktemp("totals"))
    return report_dir, report.build(report_dir, latency_target=10)


def by_group(totals, host=None):
    return {(t["image_size"], t["max_tokens"], t["concurrency"]): t for t in totals if t.get("host") == host}


def numbers(total):
    return {name: total[name] for name in ("users", "rps", "output_tokens_per_s", "total_tokens_per_s",
                                           "worst_p95_latency_s", "instances", "instances_expected", "partial",
                                           "missing")}


def test_a_fleet_total_sums_every_instance_of_the_group(built):
    _, summary = built
    total = by_group(summary["fleet_totals"])[("640x480", 32, 1)]
    assert numbers(total) == {"users": 4, "rps": pytest.approx(2.0), "output_tokens_per_s": pytest.approx(64.0),
                              "total_tokens_per_s": pytest.approx(2.0 * 532), "worst_p95_latency_s": 2.5,
                              "instances": 4, "instances_expected": 4, "partial": False, "missing": []}


def test_a_host_total_sums_the_instances_of_its_host(built):
    _, summary = built
    a = by_group(summary["host_totals"], "node-a")[("640x480", 32, 1)]
    b = by_group(summary["host_totals"], "node-b")[("640x480", 32, 1)]
    assert (a["users"], a["rps"], a["worst_p95_latency_s"], a["partial"]) == (2, pytest.approx(1.1), 2.2, False)
    assert (b["users"], b["rps"], b["worst_p95_latency_s"], b["partial"]) == (2, pytest.approx(0.9), 2.5, False)


def test_an_unreliable_row_is_left_out_and_makes_its_totals_partial(built):
    _, summary = built
    fleet = by_group(summary["fleet_totals"])[("640x480", 32, 4)]
    assert numbers(fleet) == {"users": 12, "rps": pytest.approx(4.5), "output_tokens_per_s": pytest.approx(144.0),
                              "total_tokens_per_s": pytest.approx(4.5 * 532), "worst_p95_latency_s": 4.0,
                              "instances": 3, "instances_expected": 4, "partial": True,
                              "missing": ["node-b/vllm-ascend-npu2"]}
    assert by_group(summary["host_totals"], "node-b")[("640x480", 32, 4)]["partial"] is True
    assert by_group(summary["host_totals"], "node-a")[("640x480", 32, 4)]["partial"] is False


def test_a_group_an_instance_never_ran_makes_its_totals_partial(built):
    _, summary = built
    fleet = by_group(summary["fleet_totals"])[("1920x1080", 32, 1)]
    assert (fleet["users"], fleet["instances"], fleet["partial"], fleet["missing"]) == (
        3, 3, True, ["node-a/vllm-ascend-npu2"])
    a = by_group(summary["host_totals"], "node-a")[("1920x1080", 32, 1)]
    b = by_group(summary["host_totals"], "node-b")[("1920x1080", 32, 1)]
    assert (a["partial"], a["missing"], b["partial"]) == (True, ["node-a/vllm-ascend-npu2"], False)


def test_the_gateway_is_its_own_series_and_no_instance(built):
    _, summary = built
    assert [(p["host"], p["users"], p["rps"], p["worst_p95_latency_s"]) for p in summary["gateway_series"]] == [
        ("node-a", 4, 1.9, 2.8), ("node-a", 16, 5.0, 9.0), ("node-a", 32, 6.0, 15.0)]  # the unreliable 64 left out
    assert (summary["hosts"], summary["gateways"], summary["instances"]) == (["node-a", "node-b"], ["node-a"], 4)
    assert {t["instances_expected"] for t in summary["host_totals"] if t["host"] == "node-a"} == {2}
    assert "gateway" not in {entry["instance"] for entry in summary["comparison"]}
    # Its concurrencies 16 and 32 are no instance's, so no recommendation or fleet total may hold them.
    assert {item["concurrency"] for item in summary["recommended"]} <= {1, 4, 8}
    assert {t["concurrency"] for t in summary["fleet_totals"]} == {1, 4, 8}


def test_a_host_that_only_ran_the_gateway_is_no_host_of_the_fleet(tmp_path):
    summary = report.build(fleet_of_two_hosts(tmp_path, gateway_host="lb-1"), latency_target=10)
    assert (summary["hosts"], summary["gateways"], summary["instances"]) == (["node-a", "node-b"], ["lb-1"], 4)
    assert {t["host"] for t in summary["host_totals"]} == {"node-a", "node-b"}
    assert [p["host"] for p in summary["gateway_series"]] == ["lb-1"] * 3


def test_the_capacity_takes_complete_totals_at_the_latency_target(built):
    report_dir, summary = built
    # At 640x480 the partial total at concurrency 4 (12 users) is not counted, and 8 misses the target.
    fleet = [entry["sentence"] for entry in summary["fleet_capacity"]]
    assert fleet == ["640x480, max_tokens 32: at p95 <= 10s the fleet takes 4 users at 2 requests/s",
                     "1920x1080, max_tokens 32: no group was measured reliably on every instance, so the fleet has "
                     "no complete total"]
    (through,) = summary["gateway_capacity"]
    assert through["sentence"] == ("640x480, max_tokens 32: at p95 <= 10s the gateway on node-a takes 16 users at "
                                   "5 requests/s")
    page = html.unescape((report_dir / "report.html").read_text())
    markdown = (report_dir / "report.md").read_text()
    for sentence in fleet + [through["sentence"]]:
        assert sentence in page and "- %s\n" % sentence in markdown


def test_a_fleet_nobody_serves_within_the_target_says_so(tmp_path):
    summary = report.build(fleet_of_two_hosts(tmp_path, gateway_host=None), latency_target=1)
    assert summary["fleet_capacity"][0]["sentence"] == (
        "640x480, max_tokens 32: no group meets p95 <= 1s; the fleet's lowest p95 is 2.5s, with 4 users at 2 "
        "requests/s")
    assert summary["fleet_capacity"][0]["meets_target"] is False and summary["gateway_capacity"] == []


def test_totals_csv_holds_host_fleet_and_gateway_rows(built):
    report_dir, _ = built
    with open(report_dir / "totals.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["scope", "host", "image_size", "max_tokens", "concurrency", "users", "rps",
                             "output_tokens_per_s", "total_tokens_per_s", "worst_p95_latency_s", "instances",
                             "instances_expected", "partial", "missing"]
    assert [r["scope"] for r in rows] == ["host"] * 8 + ["fleet"] * 4 + ["gateway"] * 3
    fleet = next(r for r in rows if r["scope"] == "fleet" and r["concurrency"] == "4")
    assert (fleet["host"], fleet["users"], fleet["rps"], fleet["partial"], fleet["missing"]) == (
        "", "12", "4.5", "True", "node-b/vllm-ascend-npu2")
    gateway = [r for r in rows if r["scope"] == "gateway"][1]
    assert (gateway["host"], gateway["users"], gateway["worst_p95_latency_s"], gateway["instances"]) == (
        "node-a", "16", "9.0", "")


def test_the_html_report_marks_partial_totals(built):
    report_dir, _ = built
    page = html.unescape((report_dir / "report.html").read_text())
    assert page.count('<tr class="partial">') == 2 + 2  # fleet: 640x480 at 4, 1920x1080; hosts: b at 4, a at 1920
    assert "partial, missing: node-b/vllm-ascend-npu2" in page
    assert "<h3>Through the gateway</h3>" in page


def test_the_chart_draws_the_fleet_against_users_with_the_gateway(tmp_path, monkeypatch):
    drawn = {}
    save = report.Charts.save

    def keep(charts, figure, title, filename):
        drawn[filename] = figure
        return save(charts, figure, title, filename)

    monkeypatch.setattr(report.Charts, "save", keep)
    report.build(fleet_of_two_hosts(tmp_path), latency_target=10)
    assert (tmp_path / "fleet_totals.png").read_bytes()[:4] == b"\x89PNG"
    rps, output = drawn["fleet_totals.png"].axes
    assert [(axes.get_xlabel(), axes.get_ylabel()) for axes in (rps, output)] == [
        ("users (total concurrency)", "requests per second"), ("users (total concurrency)", "output tokens per second")]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in rps.get_lines()}
    assert lines["fleet, 640x480, max_tokens 32"] == ([4, 12, 32], [pytest.approx(2.0), pytest.approx(4.5), 8.0])
    assert lines["fleet, 1920x1080, max_tokens 32"] == ([3], [pytest.approx(0.6)])
    assert lines["through the gateway (node-a), 640x480, max_tokens 32"] == ([4, 16, 32], [1.9, 5.0, 6.0])
    assert lines["partial total: an instance missing"] == ([12], [pytest.approx(4.5)])
    assert [text.get_text() for text in output.get_legend().get_texts()] == [
        "fleet, 640x480, max_tokens 32", "partial total: an instance missing",
        "through the gateway (node-a), 640x480, max_tokens 32", "fleet, 1920x1080, max_tokens 32"]


def test_without_a_gateway_the_chart_has_no_gateway_series(tmp_path):
    summary = report.build(fleet_of_two_hosts(tmp_path, gateway_host=None), latency_target=10)
    assert summary["gateway_series"] == [] and summary["gateways"] == []
    assert (tmp_path / "fleet_totals.png").exists()
    assert "Through the gateway" not in (tmp_path / "report.html").read_text()


def test_a_report_of_the_gateway_alone_shows_its_series(tmp_path):
    write(tmp_path, "lb-1", "gateway", GATEWAY)
    summary = report.build(tmp_path, latency_target=10)
    assert (summary["hosts"], summary["gateways"], summary["instances"]) == ([], ["lb-1"], 0)
    assert summary["recommended"] == [] and summary["fleet_totals"] == [] and summary["comparison"] == []
    assert [entry["sentence"] for entry in summary["gateway_capacity"]] == [
        "640x480, max_tokens 32: at p95 <= 10s the gateway on lb-1 takes 16 users at 5 requests/s"]
    assert sorted(path.name for path in tmp_path.glob("*.png")) == ["fleet_totals.png"]
    markdown = (tmp_path / "report.md").read_text()
    assert "Recommended concurrency" not in markdown and "### Through the gateway" in markdown
