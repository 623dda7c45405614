"""What an operator sees during a benchmark on a twin fleet with a per_card host (4 instances) and a
single-instance host: the command's live table in a terminal (tmux) with every instance and its ETA, the
playbook's own output with one line per group change and no retry line, and the command's output in a pipe
with no line twice."""
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid

import pytest

from conftest import REPO, venv_tool
from twin_fleet import SMALL_BENCH_CLI

pytestmark = pytest.mark.docker
A, B = "npu-a", "npu-b"
PLAN_FILE = "/etc/vllm-ascend/plan.json"  # fleet_plan_file's default, as on a real host
# A guard against a hung run, not a measurement.
PATIENCE_S = 600
DURATION = r"\d+s|\d+m(\d\ds)?|\d+h(\d\dm)?"


@pytest.fixture(scope="module")
def per_card(pair):
    """The shared pair with npu-a in the per_card layout for this module's tests, and back in the inventory's
    after them: (the pair's state then, host -> the instances its plan names)."""
    run = pair.play("--tags", "server", "--limit", A, **{A: {"vllm_server_layout": "per_card"}})
    assert run.rc == 0, run.stdout
    found = {name: [entry["name"] for entry in json.loads(pair[name].read_text(PLAN_FILE))["instances"]]
             for name in pair.hosts}
    assert len(found[A]) == 4 and len(found[B]) == 1, found
    yield pair.state(), found
    pair.restore()


@pytest.fixture
def instances(per_card):
    return per_card[1]


@pytest.fixture
def fleet(pair, per_card):
    """The pair as per_card left it: a benchmark changes no container and no plan."""
    pair.write()
    yield pair
    assert pair.state() == per_card[0], "a benchmark changed the fleet"


def cli_command(fleet, reports, *more):
    return [sys.executable, "-m", "ascend_vllm_fleet.cli", "bench", "-i", str(fleet.inventory),
            "-e", "vllm_bench_reports_dir=%s" % reports] + list(more)


class Terminal:
    """A command in a tmux pane of its own (a private tmux server), and what the pane's screen shows."""

    def __init__(self, command, width=220, height=60):
        self.socket = "operator-view-" + uuid.uuid4().hex[:8]
        # The command finds ansible-playbook beside the tests' Python, as in `scripts/dev test`; the pane stays
        # open after it ends, so its last screen can be read.
        # COLUMNS and LINES left in the environment by the test process would override the pane's own size.
        shell = "unset COLUMNS LINES; cd %s && PATH=%s:$PATH %s; echo \"exit code: $?\"; sleep %d" % (
            shlex.quote(str(REPO)), shlex.quote(os.path.dirname(sys.executable)),
            " ".join(shlex.quote(part) for part in command), PATIENCE_S)
        self.tmux("new-session", "-d", "-s", "view", "-x", str(width), "-y", str(height), shell)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.socket] + list(args), stdout=subprocess.PIPE,
                              universal_newlines=True, check=True)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "view").stdout

    def close(self):
        self.tmux("kill-server")


def table_rows(screen):
    """The live table's rows on a screen, as dicts by column, cut at the header's column starts."""
    lines = screen.splitlines()
    headers = [index for index, line in enumerate(lines) if re.match(r"host\s+instance\s+phase\s", line)]
    if not headers:
        return []
    header = lines[headers[-1]]
    names = header.split()
    starts = [header.index(" " + name) + 1 if index else 0 for index, name in enumerate(names)]
    rows = []
    for line in lines[headers[-1] + 1:]:
        if not line.strip() or line.startswith(" "):
            break
        cells = [line[start:end].strip() for start, end in zip(starts, starts[1:] + [len(line)])]
        rows.append(dict(zip(names, cells)))
    return rows


def every_instance_with_an_eta(screen, instances):
    shown = {(row["host"], row["instance"]) for row in table_rows(screen)
             if row["phase"] in ("starting", "warming up", "measuring") and re.fullmatch(DURATION, row["ETA"])}
    return shown == {(host, name) for host, names in instances.items() for name in names}


def test_the_terminal_shows_every_instance_with_its_eta(fleet, instances, tmp_path):
    terminal = Terminal(cli_command(fleet, tmp_path, "--preset", "quick"))
    try:
        deadline, screens = time.monotonic() + PATIENCE_S, []
        while "exit code:" not in (screens[-1] if screens else ""):
            assert time.monotonic() < deadline, "the command did not end:\n" + screens[-1]
            screens.append(terminal.screen())
            time.sleep(0.3)
    finally:
        terminal.close()
    assert any(every_instance_with_an_eta(screen, instances) for screen in screens), (
        "no screen showed every instance running with an ETA; the last one:\n" + screens[-1])
    final = screens[-1]
    assert "exit code: 0" in final, final
    (report_dir,) = list(tmp_path.iterdir())
    assert "markdown: %s" % (report_dir / "report.md") in final and str(report_dir / "report.html") in final
    assert "benchmark plan" in "".join(screens)
    done = {(row["host"], row["instance"]) for row in table_rows(final) if row["phase"] == "done"}
    assert done == {(host, name) for host, names in instances.items() for name in names}, final


def test_the_playbook_prints_no_retry_line_and_one_line_per_group_change(fleet, instances, tmp_path):
    # As the README has it, from the repository (its ansible.cfg), with the tools of the tests' Python.
    result = subprocess.run([venv_tool("ansible-playbook"), "-i", str(fleet.inventory), "playbooks/benchmark.yml",
                             "-e", "vllm_bench_reports_dir=%s" % tmp_path], cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            timeout=PATIENCE_S, check=False)
    assert result.returncode == 0, result.stdout
    assert "RETRYING" not in result.stdout, result.stdout
    lines = result.stdout.splitlines()
    for host, names in instances.items():
        for name in names:
            plan = "%s: 12 groups, 96 requests, estimated" % name  # the quick preset, from the plan task
            planned = [index for index, line in enumerate(lines) if plan in line]
            mine = [line for line in lines if line.startswith("[%s] %s: " % (host, name))]
            assert planned and planned[0] < lines.index(mine[0]), "the plan comes first:\n" + result.stdout
            numbers = [int(found.group(1)) for found in
                       (re.match(r"\[[^]]+\] [^:]+: group (\d+)/12 ", line) for line in mine) if found]
            assert numbers == sorted(set(numbers)) and numbers, (host, name, mine)  # each group once, in order
            assert mine[-1].startswith("[%s] %s: done, 12/12 groups" % (host, name)), mine


def test_a_pipe_gets_no_line_twice(fleet, instances, tmp_path):
    command = cli_command(fleet, tmp_path, *SMALL_BENCH_CLI)
    result = subprocess.run(command, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=PATIENCE_S, check=False)
    assert result.returncode == 0, result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert len(rows) == len(set(rows)), result.stdout
    for host, names in instances.items():
        for name in names:
            assert "[%s] %s: done, 4/4 groups, 0 errors" % (host, name) in result.stdout, result.stdout
    assert "benchmark plan" in result.stdout and "\x1b[" not in result.stdout  # plain text, no redrawing
