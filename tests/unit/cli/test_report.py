"""plugins/plugin_utils/report.py: the fleet report from hand-made results (recommended concurrency, slow instance,
CSV, charts, and the HTML report opened in a real headless browser), and report folders and results it cannot
use: a message that names the folder, file or record, what was expected and the fix, and a non-zero exit, never
a traceback; lines that hold no record are skipped and counted. Host and fleet totals: test_report_totals.py."""
import base64
import csv
import html
import json
import re
import shutil
import subprocess
import sys

import pytest
from report_rows import group, write

from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import FIELD_NAMES, FIELDS, NOTES
from ansible_collections.ascend.fleet.plugins.plugin_utils import report
from conftest import REPO

# In the order report.html shows them: the fleet totals' chart heads the report.
CHARTS = ("fleet_totals.png", "p95_by_image_size.png", "p95_by_max_tokens.png", "throughput.png", "ttft.png",
          "instances.png")
# Appended to a copy of report.html: once the page has loaded, every <img> must have decoded to its last row
# (a truncated PNG still has a size, but its missing rows are transparent) and every <svg> must have a size.
CHART_CHECK = """<script>
window.addEventListener("load", function () {
  function drawn(img) {
    if (!img.complete || img.naturalWidth === 0 || img.naturalHeight === 0) return false;
    var canvas = document.createElement("canvas");
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    var context = canvas.getContext("2d");
    context.drawImage(img, 0, 0);
    var row = context.getImageData(0, img.naturalHeight - 1, img.naturalWidth, 1).data;
    for (var alpha = 3; alpha < row.length; alpha += 4) { if (row[alpha] === 0) return false; }
    return true;
  }
  var charts = Array.prototype.slice.call(document.querySelectorAll("img, svg"));
  var broken = charts.filter(function (chart) {
    if (chart.tagName.toLowerCase() === "img") return !drawn(chart);
    var box = chart.getBoundingClientRect();
    return box.width === 0 || box.height === 0;
  });
  var verdict = document.createElement("pre");
  verdict.id = "chart-verdict";
  verdict.textContent = "charts " + charts.length + " broken " + broken.map(function (chart) {
    return chart.getAttribute("alt") || chart.tagName; }).join("|");
  document.body.appendChild(verdict);
});
</script>
"""


@pytest.fixture(scope="module")
def fleet_report(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("report")
    fast = [group("640x480", 32, c, p95, tp) for c, p95, tp in ((1, 2.0, 100), (8, 4.0, 600), (32, 12.0, 900))]
    write(tmp_path, "node-a", "vllm-ascend", fast)
    write(tmp_path, "node-b", "vllm-ascend", fast)
    # node-c is slow, and its first try at concurrency 8 was unreliable, then resumed (a later line wins).
    slow = [group("640x480", 32, 1, 2.5, 90), group("640x480", 32, 8, 9.0, 100, unreliable=True),
            group("640x480", 32, 32, 14.0, 400), group("640x480", 32, 8, 5.0, 300)]
    write(tmp_path, "node-c", "vllm-ascend", slow)
    return tmp_path, report.build(tmp_path, latency_target=10)


@pytest.fixture(scope="module")
def browser():
    found = shutil.which("chromium-headless-shell")
    assert found, "chromium-headless-shell is not installed (scripts/dev installs the Debian package)"
    return found


def browser_verdict(browser, page_html, folder):
    """(charts found, alt texts of the broken ones) in report HTML, as headless Chromium rendered it."""
    page = folder / "checked.html"
    page.write_text(page_html.replace("</body>", CHART_CHECK + "</body>"), encoding="utf-8")
    shown = subprocess.run([browser, "--headless", "--no-sandbox", "--dump-dom", "--virtual-time-budget=5000",
                            page.as_uri()], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=60, check=True)
    verdict = re.search(r'<pre id="chart-verdict">charts (\d+) broken ([^<]*)</pre>', shown.stdout)
    assert verdict, "the check did not run: %s" % shown.stdout[-1000:]
    return int(verdict.group(1)), [html.unescape(name) for name in verdict.group(2).split("|") if name]


def test_recommended_concurrency_meets_the_latency_target(fleet_report):
    _, summary = fleet_report
    (item,) = summary["recommended"]
    # Medians over the three instances: c=8 has p95 4.0 s and 600 tokens/s; c=32 is faster but p95 12 s.
    assert (item["concurrency"], item["p95_latency_s"], item["total_tokens_per_s"]) == (8, 4.0, 600)
    assert item["meets_target"] is True


def test_target_nobody_meets_says_so(tmp_path):
    write(tmp_path, "node-a", "v", [group("640x480", 32, 1, 20.0, 100), group("640x480", 32, 8, 30.0, 200)])
    (item,) = report.build(tmp_path, latency_target=5)["recommended"]
    assert item["concurrency"] == 1 and item["meets_target"] is False and "no concurrency meets" in item["note"]


def test_slow_instance_stands_out(fleet_report):
    _, summary = fleet_report
    assert summary["comparison_reference"]["concurrency"] == 32
    assert [(e["host"], e["slow"]) for e in summary["comparison"]] == [
        ("node-a", False), ("node-b", False), ("node-c", True)]
    assert summary["comparison"][2]["share_of_median"] == pytest.approx(400 / 900.0, abs=1e-3)


def test_files_of_the_report(fleet_report):
    report_dir, summary = fleet_report
    rows = list(csv.DictReader(open(report_dir / "results.csv")))
    assert len(rows) == 9 and rows[0]["host"] == "node-a" and rows[0]["errors"] == "{}"
    assert [r["p95_latency_s"] for r in rows if r["host"] == "node-c" and r["concurrency"] == "8"] == ["5.0"]
    assert list(rows[0]) == ["host", "instance"] + list(FIELD_NAMES) + ["answers"]
    for chart in CHARTS:
        assert (report_dir / chart).read_bytes()[:4] == b"\x89PNG"
        assert "](%s)" % chart in (report_dir / "report.md").read_text()
    assert json.loads((report_dir / "summary.json").read_text())["slow_instances"][0]["host"] == "node-c"


def test_both_reports_define_every_field_of_the_record(fleet_report):
    report_dir, _ = fleet_report
    markdown = (report_dir / "report.md").read_text()
    page = html.unescape((report_dir / "report.html").read_text())
    for field in FIELDS:
        assert "| `%s` | %s | %s |" % field in markdown
        assert "<td><code>%s</code></td><td>%s</td><td>%s</td>" % field in page
    for note in NOTES:
        assert "- %s" % note in markdown and "<li>%s</li>" % note in page


def test_the_html_report_needs_nothing_but_itself(fleet_report):
    report_dir, _ = fleet_report
    page = (report_dir / "report.html").read_text()
    assert re.findall(r"""(?:src|href)\s*=\s*["'](?!data:)|url\(|@import""", page) == []
    embedded = re.findall(r'<img class="chart" src="data:image/png;base64,([^"]+)"', page)
    assert [base64.b64decode(data) for data in embedded] == [(report_dir / c).read_bytes() for c in CHARTS]


def test_unreliable_groups_and_cut_lines_are_reported(tmp_path):
    write(tmp_path, "node-a", "v", [group("640x480", 32, 1, 2.0, 100),
                                    dict(group("640x480", 32, 8, 30.0, 50, unreliable=True),
                                         error_rate=0.5, errors={"timeout": 3, "http_500": 1})])
    with open(tmp_path / "raw" / "node-a" / "v.jsonl", "a") as handle:
        handle.write('{"image_size": "640x480", "max_tok')  # cut by a crash
    summary = report.build(tmp_path, latency_target=10)
    assert summary["skipped_lines"] == [{"host": "node-a", "instance": "v", "lines": 1}]
    assert summary["groups"] == 2 and summary["unreliable_groups"][0]["concurrency"] == 8
    markdown = (tmp_path / "report.md").read_text()
    assert "- node-a v 640x480 max_tokens 32 concurrency 8: error rate 0.5, http_500 1, timeout 3\n" in markdown
    assert "- raw/node-a/v.jsonl: 1 line(s) cut mid-write" in markdown
    assert "1 line(s) cut mid-write" in (tmp_path / "report.html").read_text()


def test_every_chart_of_the_html_report_renders_in_a_browser(fleet_report, browser, tmp_path_factory):
    report_dir, _ = fleet_report
    page = (report_dir / "report.html").read_text()
    assert browser_verdict(browser, page, tmp_path_factory.mktemp("browser")) == (len(CHARTS), [])


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "removed"])
def test_the_browser_check_catches_a_broken_or_missing_chart(fleet_report, browser, tmp_path_factory, damage):
    report_dir, _ = fleet_report
    page = (report_dir / "report.html").read_text()
    uri = re.search(r'src="(data:image/png;base64,[^"]+)" alt="Throughput"', page).group(1)
    if damage == "corrupt":
        page = page.replace(uri, uri.replace("base64,iVBOR", "base64,AAAAA"))
    elif damage == "truncated":
        page = page.replace(uri, uri[:len(uri) // 2])
    else:
        page = re.sub(r'<img class="chart" src="%s"[^>]*>' % re.escape(uri), "", page)
    charts, broken = browser_verdict(browser, page, tmp_path_factory.mktemp("browser"))
    if damage == "removed":
        assert (charts, broken) == (len(CHARTS) - 1, [])
    else:
        assert (charts, broken) == (len(CHARTS), ["Throughput"])


def test_the_command_line_builds_a_report(fleet_report, tmp_path):
    report_dir = tmp_path / "again"
    shutil.copytree(fleet_report[0] / "raw", report_dir / "raw")
    shown = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", "report", str(report_dir),
                            "--latency-target", "5"], stdout=subprocess.PIPE, universal_newlines=True, check=True)
    assert shown.stdout == "report: %s (9 groups, 3 instance(s), 1 slow, 0 whose answers failed; %s)\n" % (
        report_dir / "report.html", "report.md, results.csv, totals.csv and summary.json beside it")
    assert json.loads((report_dir / "summary.json").read_text())["latency_target_s"] == 5


def test_no_results_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no benchmark results under"):
        report.build(tmp_path, latency_target=10)


def answer_check_line(when, passed, failure=None):
    return {"answer_check": when, "mode": "known", "passed": passed, "failure": failure, "asked": [],
            "checked_at": 1796000000.0}


@pytest.fixture(scope="module")
def garbage_report(tmp_path_factory):
    """Two healthy instances, and a third whose answers went bad during its run: the fastest of the three."""
    tmp_path = tmp_path_factory.mktemp("garbage")
    fast = [group("640x480", 32, c, p95, tp) for c, p95, tp in ((1, 2.0, 100), (8, 4.0, 600), (32, 9.0, 900))]
    healthy = [answer_check_line("before", True)] + fast + [answer_check_line("after", True)]
    write(tmp_path, "node-a", "vllm-ascend", healthy)
    write(tmp_path, "node-b", "vllm-ascend", healthy)
    failure = 'the answer check (known) failed: asked "How many?", got "<script>alert(1)</script> | !!!!"'
    fastest = [group("640x480", 32, c, 1.0, 5000) for c in (1, 8, 32)]
    write(tmp_path, "node-c", "vllm-ascend",
          [answer_check_line("before", True)] + fastest + [answer_check_line("after", False, failure)])
    return tmp_path, report.build(tmp_path, latency_target=10)


def test_an_instance_whose_answers_failed_is_marked_and_never_recommended(garbage_report):
    folder, summary = garbage_report
    assert summary["answers_failed"] == [{"host": "node-c", "instance": "vllm-ascend"}]
    assert {entry["host"]: entry["answers"] for entry in summary["answer_checks"]} == {
        "node-a": "passed", "node-b": "passed", "node-c": "failed"}
    # Its 5000 tokens/s of garbage move neither the recommendation nor the totals.
    (item,) = summary["recommended"]
    assert (item["concurrency"], item["total_tokens_per_s"]) == (32, 900)
    assert all(total["partial"] and total["missing"] == ["node-c/vllm-ascend"] for total in summary["fleet_totals"])
    assert [entry["host"] for entry in summary["comparison"]] == ["node-a", "node-b"]
    with open(folder / "results.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["host"]: row["answers"] for row in rows} == {"node-a": "passed", "node-b": "passed",
                                                             "node-c": "failed"}


def test_the_answer_checks_show_in_both_reports_as_text(garbage_report):
    folder, _summary = garbage_report
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    line = next(line for line in markdown.splitlines()
                if line.startswith("| node-c | vllm-ascend | **failed** | after"))
    assert "\\| !!!!" in line, line
    for rule in ("one character", "repetition", "replacement characters"):
        assert rule in markdown and rule in page


def test_an_instance_never_checked_is_said_so(fleet_report):
    _, summary = fleet_report
    assert {entry["answers"] for entry in summary["answer_checks"]} == {"not checked"}
    assert summary["answers_failed"] == []


# --- report folders and results it cannot use ---------------------------------------------------------------------

GOOD = group("640x480", 32, 1, 2.0, 100)
NAMED = "raw/node-a/v.jsonl: the record of 640x480, max_tokens 32, concurrency 1"


def refused(report_dir, *options):
    """stderr of the report command, which must have failed without a traceback."""
    shown = subprocess.run([sys.executable, "-m", "ascend_vllm_fleet.cli", "report", str(report_dir)] + list(options),
                           cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert shown.returncode != 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "Fix:" in shown.stderr, shown.stderr
    return shown.stderr


def with_record(tmp_path, **changes):
    """A report folder whose one results file holds GOOD with changes (a value None removes the field)."""
    record = dict(GOOD, **changes)
    write(tmp_path, "node-a", "v", [{key: value for key, value in record.items() if value is not None}])
    return tmp_path


@pytest.mark.parametrize("case,changes,expected", [
    ("no throughput", {"total_tokens_per_s": None}, [NAMED, "lacks total_tokens_per_s"]),
    ("no latency and no throughput", {"p95_latency_s": None, "total_tokens_per_s": None},
     [NAMED, "lacks p95_latency_s, total_tokens_per_s"]),
    ("TTFT a word", {"p95_ttft_s": "soon"}, [NAMED, "p95_ttft_s 'soon'", "a number"]),
    ("image size no size", {"image_size": "big"}, ["raw/node-a/v.jsonl", "image_size 'big'", "WIDTHxHEIGHT"]),
    ("max_tokens a string", {"max_tokens": "32"}, ["raw/node-a/v.jsonl", "max_tokens '32'", "a whole number"]),
    ("concurrency zero", {"concurrency": 0}, ["raw/node-a/v.jsonl", "concurrency 0", "a whole number"]),
    ("concurrency a boolean", {"concurrency": True}, ["raw/node-a/v.jsonl", "concurrency True", "a whole number"]),
    ("latency a word", {"p95_latency_s": "fast"}, [NAMED, "p95_latency_s 'fast'", "a number"]),
    ("throughput not a number", {"total_tokens_per_s": float("nan")}, [NAMED, "total_tokens_per_s nan", "a number"]),
    ("errors a list", {"unreliable": True, "errors": ["timeout"]}, [NAMED, "errors ['timeout']", "an object"]),
    ("error rate a word", {"error_rate": "high"}, [NAMED, "error_rate 'high'", "a number"]),
    ("output tokens a word", {"output_tokens_per_s": "many"}, [NAMED, "output_tokens_per_s 'many'", "a number"]),
])
def test_a_record_the_report_cannot_use_is_named(tmp_path, case, changes, expected):
    stderr = refused(with_record(tmp_path, **changes))
    for piece in expected:
        assert piece in stderr


def results_folder_missing(tmp_path):
    return tmp_path / "none", ["report folder %s does not exist" % (tmp_path / "none")]


def results_folder_a_file(tmp_path):
    (tmp_path / "report").write_text("")
    return tmp_path / "report", ["report folder %s is not a folder" % (tmp_path / "report")]


def results_folder_empty(tmp_path):
    return tmp_path, ["no benchmark results under %s" % (tmp_path / "raw"), "raw/<host>/<instance>.jsonl"]


def results_file_a_folder(tmp_path):
    (tmp_path / "raw" / "node-a" / "v.jsonl").mkdir(parents=True)
    return tmp_path, ["raw/node-a/v.jsonl is a folder"]


def results_of_no_record(tmp_path):
    folder = tmp_path / "raw" / "node-a"
    folder.mkdir(parents=True)
    (folder / "v.jsonl").write_bytes(b"not json\n[1, 2]\n\xff\xfe\n")
    return tmp_path, ["no benchmark results under", "raw/node-a/v.jsonl: 3 line(s) that hold no record"]


@pytest.mark.parametrize("make", [results_folder_missing, results_folder_a_file, results_folder_empty,
                                  results_file_a_folder, results_of_no_record])
def test_a_folder_without_results_is_named(tmp_path, make):
    report_dir, expected = make(tmp_path)
    stderr = refused(report_dir)
    for piece in expected:
        assert piece in stderr


def test_a_report_file_that_cannot_be_written_is_named(tmp_path):
    (with_record(tmp_path) / "results.csv").mkdir()
    assert "cannot write the report into %s" % tmp_path in refused(tmp_path)


@pytest.mark.parametrize("target", ["0", "-1", "nan", "inf"])
def test_a_latency_target_that_is_no_time_is_refused(tmp_path, target):
    stderr = refused(with_record(tmp_path), "--latency-target", target)
    assert "--latency-target %s" % target in stderr and "more than 0" in stderr


def test_lines_that_hold_no_record_are_skipped_and_counted(tmp_path):
    write(tmp_path, "node-a", "v", [GOOD, group("640x480", 32, 8, 4.0, 600)])
    with open(tmp_path / "raw" / "node-a" / "v.jsonl", "ab") as handle:
        handle.write(b"not json\n[1, 2]\n\"a record\"\n\xff\xfe{\n" + json.dumps(GOOD).encode()[:30])
    summary = report.build(tmp_path, latency_target=10)
    assert summary["groups"] == 2 and summary["skipped_lines"] == [{"host": "node-a", "instance": "v", "lines": 5}]


def test_each_hosts_tuning_is_shown_beside_its_results(tmp_path):
    write(tmp_path, "node-a", "vllm-ascend", [group("640x480", 32, 1, 2.0, 100)])
    write(tmp_path, "node-b", "vllm-ascend", [group("640x480", 32, 1, 2.0, 100)])
    settings = [{"name": "cpu_governor", "wanted": "performance", "current": "schedutil", "state": "differs",
                 "where": "/sys/devices/system/cpu/cpufreq", "why": ""},
                {"name": "vm.swappiness", "wanted": "0", "current": "0", "state": "ok"}]
    (tmp_path / "raw/node-a" / report.TUNING_FILE).write_text(json.dumps({"settings": settings}))
    summary = report.build(tmp_path, 10.0)
    assert summary["host_tuning"] == [{"host": "node-a", "differs": ["cpu_governor"], "unreadable": "", "settings": [
        {"name": "cpu_governor", "wanted": "performance", "current": "schedutil", "state": "differs"},
        {"name": "vm.swappiness", "wanted": "0", "current": "0", "state": "ok"}]}]
    text = (tmp_path / "report.md").read_text()
    assert "| node-a | cpu_governor | schedutil | performance | **differs** |" in text
    assert "node-b | cpu_governor" not in text, "a host without a record shows none"
    assert "<td>node-a</td><td>vm.swappiness</td><td>0</td><td>0</td>" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize("content", ["{not json", '{"settings": "all fine"}', '{"settings": [{"name": 1}]}', "[]",
                                     '{"settings": ' + "[" * 100000 + "]" * 100000 + "}"])
def test_a_tuning_record_it_cannot_read_is_named_and_the_results_are_still_reported(tmp_path, content):
    write(tmp_path, "node-a", "vllm-ascend", [group("640x480", 32, 1, 2.0, 100)])
    (tmp_path / "raw/node-a" / report.TUNING_FILE).write_text(content)
    summary = report.build(tmp_path, 10.0)
    (entry,) = summary["host_tuning"]
    assert entry["settings"] == [] and entry["unreadable"].startswith("raw/node-a/host-tuning.json")
    assert summary["groups"] == 1
    assert "| node-a | - | - | - | not recorded: raw/node-a/host-tuning.json" in (tmp_path / "report.md").read_text()
