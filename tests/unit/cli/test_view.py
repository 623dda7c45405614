"""The command's view (ascend_vllm_fleet/view.py), fed ansible-runner events as a bench (tests/bench_events.py)
and a deploy of a per_card host and a single-instance host emit them, and the follow step's status files as it
writes them: the table redrawn on a terminal, one line per change elsewhere, the plan, and the report's summary."""
import io
import json
import re

import pytest
import yaml
from bench_events import BENCH_EVENTS, INSTANCES, A, B, task_start
from rich.console import Console

from ansible_collections.ascend.fleet.plugins.module_utils import load_test
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import append_result
from ansible_collections.ascend.fleet.plugins.plugin_utils import progress, report
from ascend_vllm_fleet import view
from conftest import REPO

MATRIX = {"image_sizes": ["640x480"], "max_tokens": [32, 8], "concurrency": [1, 4], "requests_per_group": 4}
PLANNED = load_test.planned_groups(dict(MATRIX, estimate_seconds_per_token=0.09))


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def status(name, current, elapsed_s, measured=()):
    return progress.instance_status(name, current, list(measured), set(), progress.group_shares(PLANNED), 38.9,
                                    elapsed_s)


def measuring(number, max_tokens, concurrency, done):
    return {"group": {"image_size": "640x480", "max_tokens": max_tokens, "concurrency": concurrency},
            "group_number": number, "groups_total": 4, "groups_done": number - 1, "requests_done": done,
            "requests_total": 4, "updated_at": 1.0}


def write_statuses(folder, host, updated_at, statuses):
    """A status file as the follow step writes it at each poll."""
    folder.mkdir(parents=True, exist_ok=True)
    document = {"format": progress.STATUS_FORMAT, "host": host, "started_at": 990.0, "updated_at": updated_at,
                "instances": statuses}
    (folder / (host + ".json")).write_text(json.dumps(document))


def polls():
    """Per poll: (clock, {host: statuses}). Polls 2 and 4 repeat the state before them (only time passed)."""
    first = {A: [status(name, measuring(1, 32, 1, 0), 10) for name in INSTANCES[A]],
             B: [status(INSTANCES[B][0], None, 10)]}
    second = {A: [status(name, measuring(1, 32, 1, 0), 12) for name in INSTANCES[A]],
              B: [status(INSTANCES[B][0], None, 12)]}
    third = {A: [status(INSTANCES[A][0], measuring(1, 32, 1, 2), 14)]
             + [status(name, measuring(1, 32, 1, 0), 14) for name in INSTANCES[A][1:]],
             B: [status(INSTANCES[B][0], measuring(1, 32, 1, 0), 14)]}
    fourth = {A: [status(INSTANCES[A][0], measuring(1, 32, 1, 2), 16)]
              + [status(name, measuring(1, 32, 1, 0), 16) for name in INSTANCES[A][1:]],
              B: [status(INSTANCES[B][0], measuring(1, 32, 1, 0), 16)]}
    return [(1000.0, first), (1002.0, second), (1004.0, third), (1006.0, fourth)]


def run_view(tmp_path, live):
    clock = Clock()
    fleet_view = view.FleetView(status_dir=tmp_path / "progress", clock=clock)
    out = io.StringIO()
    screen = view.Screen(fleet_view, out, live=live)
    for event in BENCH_EVENTS:
        screen.handle(event)
    for moment, statuses in polls():
        clock.now = moment
        for host, found in statuses.items():
            write_statuses(tmp_path / "progress", host, moment, found)
        screen.update()
        screen.update()  # the ticker's second look at the same files
    return fleet_view, screen, out.getvalue()


def test_off_a_terminal_each_change_is_one_line_and_no_line_repeats(tmp_path):
    _view, _screen, output = run_view(tmp_path, live=False)
    lines = output.splitlines()
    rows = [line for line in lines if line.startswith("[")]
    assert len(rows) == len(set(rows)), output
    # The follow task's line per host, then one line per instance at the first poll and at each change.
    for name in INSTANCES[A]:
        assert sum(line.startswith("[%s] %s: " % (A, name)) for line in rows) == (2 if name.endswith("npu1") else 1)
    assert [line for line in rows if line.startswith("[%s] vllm-ascend: " % B)] == [
        "[npu-b] vllm-ascend: starting, 0 errors, 10s elapsed, ETA 39s",
        "[npu-b] vllm-ascend: group 1/4 (640x480, max_tokens 32, concurrency 1): 0/4 requests, 0 errors, "
        "14s elapsed, ETA 39s"]
    assert "[npu-a] vllm-ascend-npu1: group 1/4 (640x480, max_tokens 32, concurrency 1): 2/4 requests" in output


def test_the_plan_is_printed_once_when_the_next_task_starts(tmp_path):
    _view, _screen, output = run_view(tmp_path, live=False)
    assert output.count("benchmark plan") == 1
    plan = output.split("benchmark plan", 1)[1]
    assert plan.index("longest: ") < plan.index("[npu-a] vllm_bench: Show the plan")
    table = [line.split() for line in plan.splitlines()[1:7]]
    assert table[0] == ["host", "instance", "groups", "requests", "estimated"]
    assert [row[:2] for row in table[1:]] == [[A, name] for name in INSTANCES[A]] + [[B, "vllm-ascend"]]
    assert all(row[2:] == ["4", "16", "39s"] for row in table[1:])


def rendered(screen, width=160):
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(screen.table())
    return console.file.getvalue()


def cells(text):
    """The table's rows, split into cells (columns are set apart by two spaces or more)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def test_on_a_terminal_every_instance_of_the_fleet_has_a_row_with_its_eta(tmp_path):
    _view, screen, output = run_view(tmp_path, live=True)
    assert "[npu-a]" not in output  # no lines: rows are drawn, not printed
    table = cells(rendered(screen))
    assert table[0] == list(view.COLUMNS)
    rows = {(row[0], row[1]): dict(zip(view.COLUMNS, row)) for row in table[1:]}
    assert sorted(rows) == sorted((host, name) for host, names in INSTANCES.items() for name in names)
    npu1 = rows[(A, "vllm-ascend-npu1")]
    assert (npu1["phase"], npu1["group"], npu1["parameters"], npu1["requests"], npu1["errors"]) == (
        "measuring", "1/4", "640x480, 32 tokens, concurrency 1", "2/4", "0")
    assert all(re.fullmatch(r"\d+s|\d+m\d\ds", row["ETA"]) for row in rows.values()), table


def test_elapsed_and_eta_go_on_between_polls_and_stop_when_a_run_ended(tmp_path):
    clock = Clock(2000.0)
    fleet_view = view.FleetView(status_dir=tmp_path, clock=clock)
    finished = {"finished": True, "groups_done": 4, "groups_total": 4, "updated_at": 1.0}
    write_statuses(tmp_path, A, 2000.0, [status("vllm-ascend-npu1", measuring(2, 32, 4, 1), 30.0),
                                         status("vllm-ascend-npu2", finished, 25.0)])
    fleet_view.refresh()
    before = {row.ident[1]: row.cells for row in fleet_view.rows()}
    clock.now += 10
    after = {row.ident[1]: row.cells for row in fleet_view.rows()}
    assert (before["vllm-ascend-npu1"][7], after["vllm-ascend-npu1"][7]) == ("30s", "40s")
    eta = fleet_view.statuses[A]["instances"][0]["eta_s"]
    assert after["vllm-ascend-npu1"][8] == progress.clock(eta - 10)
    assert before["vllm-ascend-npu2"] == after["vllm-ascend-npu2"]
    assert after["vllm-ascend-npu2"][2:4] == ("done", "4/4 done")


def deploy_view(tmp_path, extravars):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"ascend": {"hosts": {
        A: {"ansible_connection": "local"}, B: {"ansible_connection": "local", "vllm_server_ready_timeout": 60}}}}}}))
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("vllm_server_ready_timeout: 300\n")
    clock = Clock()
    fleet_view = view.FleetView(bounds=view.WaitBounds(inventory, extravars), clock=clock)
    for host in (A, B):
        for event in task_start(host, "Wait until the new container serves", "ascend.fleet.vllm_probe",
                                role="vllm_server"):
            fleet_view.handle(event)
    clock.now += 130
    return {row.ident[0]: row for row in fleet_view.rows()}


def test_a_model_load_shows_its_time_so_far_and_its_bound_from_the_inventory(tmp_path):
    rows = deploy_view(tmp_path, {})
    assert rows[A].cells[2:] == ("loading model", "", "", "", "", "2m10s of up to 5m", "")
    assert rows[B].cells[7] == "2m10s of up to 1m"
    assert rows[A].line == "[npu-a] vllm_server: Wait until the new container serves (loading model, up to 5m)"


def test_an_extra_variable_bounds_the_wait_before_the_inventory(tmp_path):
    rows = deploy_view(tmp_path, {"vllm_server_ready_timeout": 900})
    assert rows[A].cells[7] == rows[B].cells[7] == "2m10s of up to 15m"


def test_without_a_setting_the_roles_default_bounds_the_wait_and_a_template_none(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {A: {}, B: {"vllm_server_ready_timeout": "{{ t }}"}}}}))
    bounds = view.WaitBounds(inventory, {})
    default = yaml.safe_load((REPO / "roles/vllm_server/defaults/main.yml").read_text())["vllm_server_ready_timeout"]
    assert bounds.seconds(A, "vllm_server", "vllm_server_ready_timeout") == float(default)
    assert bounds.seconds(B, "vllm_server", "vllm_server_ready_timeout") is None


def test_a_bound_the_role_takes_from_a_dependency_is_read_as_ansible_merges_it(tmp_path):
    """The fleet role's defaults reach every role that depends on it: a wait of vllm_server bound by one of them
    sees it, and -e over it, as the play does."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {A: {}}}}))
    default = yaml.safe_load((REPO / "roles/fleet/defaults/main.yml").read_text())["fleet_npu_smi_timeout"]
    assert view.WaitBounds(inventory, {}).seconds(A, "vllm_server", "fleet_npu_smi_timeout") == float(default)
    given = view.WaitBounds(inventory, {"fleet_npu_smi_timeout": default + 7})
    assert given.seconds(A, "vllm_server", "fleet_npu_smi_timeout") == float(default + 7)


def test_other_tasks_show_role_and_task_and_a_loop_prints_one_line(tmp_path):
    fleet_view = view.FleetView(clock=Clock())
    out = io.StringIO()
    screen = view.Screen(fleet_view, out, live=False)
    for _item in range(3):  # include_tasks over the instances starts the same task again
        for event in task_start(A, "Render the docker run", "ansible.builtin.template", role="vllm_server"):
            screen.handle(event)
    assert out.getvalue() == "[npu-a] vllm_server: Render the docker run\n"


def write_report(folder):
    """Raw results of two hosts, npu-b's second instance at half the throughput, and the summary of them."""
    for host, instance, factor in ((A, "vllm-ascend-npu1", 1.0), (A, "vllm-ascend-npu2", 1.02),
                                   (B, "vllm-ascend", 0.5)):
        for size in ("640x480", "1920x1080"):
            for concurrency, p95, tokens in ((1, 2.0, 400.0), (8, 6.0, 1600.0), (16, 12.0, 2400.0)):
                append_result(str(folder / "raw" / host / (instance + ".jsonl")), {
                    "image_size": size, "max_tokens": 32, "concurrency": concurrency, "p95_latency_s": p95 / factor,
                    "total_tokens_per_s": tokens * factor, "unreliable": False})
    rows = report.load(folder)[0]
    reference, entries = report.comparison(rows)
    return {"latency_target_s": 10.0, "hosts": [A, B], "instances": 3, "groups": len(rows), "unreliable_groups": [],
            "recommended": report.recommendations(rows, 10.0), "comparison_reference": reference,
            "comparison": entries, "slow_instances": [entry for entry in entries if entry["slow"]],
            "answers_failed": []}


def test_the_report_summary_names_both_files_each_hosts_concurrency_and_the_slow_instance(tmp_path):
    text = view.report_summary(tmp_path, write_report(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("report: %s (" % (tmp_path / "report.html"))
    assert lines[1] == "markdown: %s" % (tmp_path / "report.md")
    table = {line.split("  ")[0]: re.split(r"\s{2,}", line) for line in lines if line.startswith(("host", "fleet",
                                                                                                    "npu-"))}
    assert table["host"] == ["host", "640x480/32", "1920x1080/32"]
    assert table[A][1:] == ["8: 1616", "8: 1616"]
    assert table[B][1:] == ["1: 200", "1: 200"]   # at half the speed, concurrency 8 misses the 10 s p95
    assert "slow instances (below 80% of the fleet median of 2400 tokens/s at 1920x1080, max_tokens 32, " \
           "concurrency 16):\n  npu-b vllm-ascend: 1200 tokens/s, 50% of the median" in text
    assert len(lines) < 25  # one screen


def test_the_report_summary_names_the_instances_whose_answers_failed(tmp_path):
    summary = dict(write_report(tmp_path), answers_failed=[{"host": B, "instance": "vllm-ascend"}])
    assert "answers failed (their rows are left out of every figure): npu-b vllm-ascend" in view.report_summary(
        tmp_path, summary)


@pytest.mark.parametrize("isatty, live", [(False, False), (True, True)])
def test_the_view_is_live_exactly_when_the_output_is_a_terminal(isatty, live):
    class Output(io.StringIO):
        def isatty(self):
            return isatty

    assert view.Screen(view.FleetView(), Output()).live_mode is live


def test_the_commands_plan_says_once_what_its_estimates_are_based_on():
    """`bench --plan` shows the module's estimates; from the seed's 310P timings, they are not the twin's pace."""
    basis = load_test.estimate_basis({"estimate_seconds_per_token": load_test.SEED_SECONDS_PER_TOKEN})
    entries = [progress.plan_entry({"item": {"name": name}, "planned_groups": 2,
                                    "planned_requests": 16, "estimated_seconds": 60, "estimate_basis": basis})
               for name in ("vllm-ascend-npu1", "vllm-ascend-npu4")]
    table = view.plan_table({A: entries, B: entries[:1]})
    assert table.count(basis) == 1 and "310P" in basis and table.rstrip().endswith(basis)
