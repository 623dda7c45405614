"""What the ascend-vllm-fleet command shows while a playbook runs, and the plan and summary around it.

One row per host (its phase and task; for a long wait, how long so far and how long it may take) or, once a
host's benchmarks are followed, one row per instance: phase, group n/N with its parameters, requests done in
the group, errors so far, elapsed time and ETA. The host rows come from ansible-runner's events; the instance
rows from the statuses the vllm_bench role's follow step keeps in <report folder>/progress/<host>.json
(plugins/plugin_utils/progress.py), the same the playbook's own output prints a line of at each group change.

After a verification (playbooks/verify.yml), each host's verdict as its fleet_verify task returned it: its summary
line, then each failure's sentence.

On a terminal the rows are redrawn in place (rich); otherwise a row is printed as a line when it changes, and
never twice the same.
"""
import json
import pathlib
import threading
import time

from ansible_collections.ascend.fleet.plugins.plugin_utils import progress

# The long waits of a deploy, by the module that waits: what the operator reads, and the variable (and its
# role) that bounds the wait, None for a wait with no bound of its own.
LONG_WAITS = {
    "ascend.fleet.vllm_probe": ("loading model", ("vllm_server", "vllm_server_ready_timeout")),
    # vllm_server waits for its loading instances together, as async jobs: the role's only async_status.
    "ansible.builtin.async_status": ("loading model", ("vllm_server", "vllm_server_ready_timeout")),
    "ascend.fleet.docker_image_pull": ("pulling image", None),
}
# The module whose result is a host's verdict in a run of playbooks/verify.yml: what the command prints per host.
VERIFY_ACTION = "ascend.fleet.fleet_verify"
COLUMNS = ("host", "instance", "phase", "group", "parameters", "requests", "errors", "elapsed", "ETA")
REFRESH_S = 1.0


class WaitBounds:
    """The value of the variable bounding a long wait on a host, as Ansible gives it to a play of the role that
    waits: its -e, inventory (host and group vars) and role defaults (the role's dependencies' too), ranked by
    Ansible itself; None when it is not a number (a template) or the inventory or the role can't be read here
    (say, a vaulted file)."""

    def __init__(self, inventory, extravars):
        self.inventory = inventory
        self.extravars = extravars
        self.loaded = None
        self.plays = {}
        self.values = {}

    def variables(self, host, role):
        """Every variable of the host in a play of the role (ascend.fleet.<role>), before the play runs."""
        if (host, role) not in self.values:
            from ansible.errors import AnsibleError
            from ansible.inventory.manager import InventoryManager
            from ansible.parsing.dataloader import DataLoader
            from ansible.playbook.play import Play
            from ansible.vars.manager import VariableManager

            try:
                if self.loaded is None:
                    loader = DataLoader()
                    inventory = InventoryManager(loader=loader, sources=[str(self.inventory)])
                    variables = VariableManager(loader=loader, inventory=inventory)
                    self.loaded = (loader, inventory, variables)
                loader, inventory, variables = self.loaded
                if role not in self.plays:
                    # The run's -e values as the play's vars: above the inventory and the role's defaults, as -e
                    # is (ansible-playbook's VariableManager reads -e from a command line this process has not).
                    self.plays[role] = Play.load({"hosts": "all", "gather_facts": False, "vars": dict(self.extravars),
                                                  "roles": ["ascend.fleet." + role]},
                                                 variable_manager=variables, loader=loader)
                found = inventory.get_host(host)
                self.values[(host, role)] = dict(variables.get_vars(play=self.plays[role], host=found,
                                                                    include_hostvars=False)) if found else {}
            except AnsibleError:
                self.values[(host, role)] = {}
        return self.values[(host, role)]

    def seconds(self, host, role, variable):
        try:
            return float(self.variables(host, role).get(variable))
        except (TypeError, ValueError):
            return None


class Row:
    """A row of the view: its cells, the line printed for it off a terminal, and what counts as a change."""

    def __init__(self, ident, cells, line, key):
        self.ident = ident
        self.cells = cells
        self.line = line
        self.key = key


class FleetView:
    """The run's state, from ansible-runner's events and the benchmark's status files."""

    def __init__(self, status_dir=None, bounds=None, clock=time.time):
        self.status_dir = pathlib.Path(status_dir) if status_dir else None
        self.bounds = bounds
        self.clock = clock
        self.hosts = []
        self.tasks = {}
        self.statuses = {}
        self.plan = {}
        self.plan_shown = False
        self.notes = []
        self.failures = {}
        self.verdicts = {}

    def see(self, host):
        if host not in self.hosts:
            self.hosts.append(host)

    def handle(self, event):
        data = event.get("event_data") or {}
        host = data.get("host")
        kind = event.get("event", "")
        if kind == "playbook_on_task_start" and self.plan and not self.plan_shown:
            self.notes.append(self.plan_text())
            self.plan_shown = True
        if not host:
            return
        self.see(host)
        result = data.get("res") or {}
        if kind in ("runner_on_ok", "runner_on_failed") and "summary" in result and (
                data.get("resolved_action") or data.get("task_action")) == VERIFY_ACTION:
            # Its failures are told whole below the table; the table's reason is its summary.
            self.verdicts[host] = result
        if kind == "runner_on_start":
            self.tasks[host] = self.task(host, data)
        elif kind == "runner_item_on_ok" and "planned_groups" in result:
            self.plan.setdefault(host, []).append(progress.plan_entry(result))
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.failures.setdefault(host, result["summary"] if host in self.verdicts else failure_reason(data))
        elif kind == "runner_on_unreachable":
            self.failures.setdefault(host, "unreachable: %s" % result.get("msg", ""))

    def task(self, host, data):
        """What a host does now: its task, when it started, and for a long wait its name and bound."""
        label, bound = LONG_WAITS.get(data.get("resolved_action") or data.get("task_action"), (None, None))
        if label and bound and self.bounds:
            bound = self.bounds.seconds(host, *bound)
        else:
            bound = None
        return {"phase": "%s: %s" % (data.get("role") or data.get("play", ""), data.get("task", "")),
                "started": self.clock(), "label": label, "bound": bound}

    def refresh(self):
        """Read the status files the benchmark's follow step keeps up to date."""
        if not self.status_dir or not self.status_dir.is_dir():
            return
        for path in sorted(self.status_dir.glob("*.json")):
            document = json.loads(path.read_text(encoding="utf-8"))
            if document.get("format") == progress.STATUS_FORMAT:
                self.see(document["host"])
                self.statuses[document["host"]] = document

    def rows(self):
        now = self.clock()
        found = []
        for host in self.hosts:
            if host in self.statuses:
                found += [instance_row(host, status, now - self.statuses[host]["updated_at"])
                          for status in self.statuses[host]["instances"]]
            elif host in self.tasks:
                found.append(task_row(host, self.tasks[host], now))
        return found

    def take_notes(self):
        notes, self.notes = self.notes, []
        return notes

    def plan_text(self):
        return plan_table(self.plan)


def task_row(host, task, now):
    elapsed = progress.clock(now - task["started"])
    if task["bound"] is not None:
        elapsed += " of up to " + progress.clock(task["bound"])
    phase = task["label"] or task["phase"]
    line = "[%s] %s" % (host, task["phase"])
    if task["label"]:
        line += " (%s%s)" % (task["label"], ", up to " + progress.clock(task["bound"]) if task["bound"] else "")
    return Row((host, ""), (host, "", phase, "", "", "", "", elapsed, ""), line, (task["phase"],))


def instance_row(host, status, since_update):
    """A benchmarked instance; elapsed time and ETA go on from the status's own as time passes."""
    running = status["phase"] not in progress.ENDED
    elapsed = status["elapsed_s"] + (since_update if running else 0)
    eta = status["eta_s"]
    if eta is not None and running:
        eta = max(eta - since_update, 0.0)
    group = status["group"]
    cells = (host, status["instance"], status["phase"],
             "%s/%s" % (status["group_number"], status["groups_total"]) if group else
             "%s/%s done" % (status["groups_done"], status["groups_total"]),
             "%s, %s tokens, concurrency %s" % (group["image_size"], group["max_tokens"], group["concurrency"])
             if group else "",
             "%s/%s" % (status["requests_done"], status["requests_total"]) if group else "",
             str(status["errors"]), progress.clock(elapsed), progress.clock(eta) if eta is not None else "")
    line = "[%s] %s" % (host, progress.describe(status, requests=True, elapsed_s=elapsed, eta_s=eta))
    key = (status["phase"], status["group_number"], status["requests_done"], status["errors"])
    return Row((host, status["instance"]), cells, line, key)


def failure_reason(data):
    result = data.get("res") or {}
    message = result.get("msg") or result.get("stderr") or "failed"
    if isinstance(message, list):
        message = " ".join(str(part) for part in message)
    return "%s: %s" % (data.get("task", "task"), " ".join(str(message).split())[:300])


def verdicts_text(verdicts):
    """What the verification found, host by host: its summary line, then each failure's sentence."""
    lines = []
    for host in sorted(verdicts):
        lines.append(verdicts[host]["summary"])
        lines += ["  " + failure["message"] for failure in verdicts[host].get("failures") or []]
    return "\n".join(lines)


def text_table(rows):
    """Rows of cells as aligned plain text, the first row the header."""
    widths = [max(len(str(row[index])) for row in rows) for index in range(len(rows[0]))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def plan_table(plan):
    """The benchmark's plan, host by host: each instance's groups, requests and the module's estimate."""
    rows = [("host", "instance", "groups", "requests", "estimated")]
    longest = None
    for host, entries in plan.items():
        for entry in entries:
            rows.append((host, entry["instance"], entry["groups"], entry["requests"],
                         progress.clock(entry["estimated_s"])))
            if longest is None or entry["estimated_s"] > longest[1]:
                longest = (host, entry["estimated_s"])
    lines = ["benchmark plan (the load-test module's estimate; the instances of all hosts run at once):",
             text_table(rows)]
    if longest:
        lines.append("longest: %s, estimated %s" % (longest[0], progress.clock(longest[1])))
    lines += progress.estimate_bases([entry for entries in plan.values() for entry in entries])
    return "\n".join(lines)


class Screen:
    """Where the view goes while the playbook runs: redrawn in place on a terminal, lines otherwise."""

    def __init__(self, view, out, live=None):
        self.view = view
        self.out = out
        self.live_mode = out.isatty() if live is None else live
        # The view's state is shared by ansible-runner's event thread, the ticker and rich's refresh thread;
        # printing has a lock of its own, never held with the state's, since rich's refresh takes its own lock
        # and then the state's.
        self.lock = threading.Lock()
        self.output_lock = threading.Lock()
        self.printed = {}
        self.live = None
        self.stopping = threading.Event()
        self.ticker = threading.Thread(target=self.tick, daemon=True)

    def __enter__(self):
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(get_renderable=self.table, console=Console(file=self.out),
                             refresh_per_second=1 / REFRESH_S, transient=False)
            self.live.start()
        self.ticker.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.ticker.join()
        with self.lock:
            if self.view.plan and not self.view.plan_shown:
                self.view.notes.append(self.view.plan_text())
                self.view.plan_shown = True
        self.update()
        if self.live:
            self.live.stop()
        return False

    def tick(self):
        while not self.stopping.wait(REFRESH_S):
            self.update()

    def handle(self, event):
        """ansible-runner's event handler: keep the event, and show what it changed."""
        with self.lock:
            self.view.handle(event)
        self.update()
        return True

    def update(self):
        with self.lock:
            self.view.refresh()
            notes = self.view.take_notes()
            rows = self.view.rows()
        with self.output_lock:
            for note in notes:
                self.say(note)
            if not self.live_mode:
                for row in rows:
                    if self.printed.get(row.ident) != row.key:
                        self.printed[row.ident] = row.key
                        self.out.write(row.line + "\n")
                self.out.flush()

    def say(self, text):
        if self.live:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            self.out.write(text + "\n")

    def table(self):
        from rich.table import Table

        with self.lock:
            rows = self.view.rows()
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in COLUMNS:
            table.add_column(column, no_wrap=column in ("host", "instance", "elapsed", "ETA"))
        for row in rows:
            table.add_row(*row.cells)
        return table


def report_summary(report_dir, summary):
    """The report's paths and one screen of it: per host, the recommended concurrency for each image size and
    output length with its throughput, then the slow instances."""
    from ansible_collections.ascend.fleet.plugins.plugin_utils import report

    report_dir = pathlib.Path(report_dir)
    rows = report.load(report_dir)[0]
    target = summary["latency_target_s"]
    workloads = [(entry["image_size"], entry["max_tokens"]) for entry in summary["recommended"]]
    table = [["host"] + ["%s/%s" % workload for workload in workloads]]
    scopes = [("fleet", summary["recommended"])]
    scopes += [(host, report.recommendations([row for row in rows if row["host"] == host], target))
               for host in summary["hosts"]]
    for name, found in scopes:
        cells = {(entry["image_size"], entry["max_tokens"]): "%s: %.0f%s" % (
            entry["concurrency"], entry["total_tokens_per_s"], "" if entry["meets_target"] else " *")
            for entry in found}
        table.append([name] + [cells.get(workload, "-") for workload in workloads])
    lines = [report.describe(report_dir, summary), "markdown: %s" % (report_dir / "report.md"), "",
             "recommended concurrency: total tokens/s at it, per image size/max_tokens (the most throughput with "
             "p95 <= %gs; * none meets it, the lowest p95 shown):" % target, text_table(table), ""]
    reference = summary.get("comparison_reference")
    slow = summary["slow_instances"]
    if not reference:
        lines.append("slow instances: no group that every instance ran reliably to compare them on")
    elif not slow:
        lines.append("slow instances: none (every instance within %d%% of the fleet median)"
                     % round(100 * (1 - report.SLOW_SHARE)))
    else:
        lines.append("slow instances (below %d%% of the fleet median of %.0f tokens/s at %s, max_tokens %s, "
                     "concurrency %s):" % (round(100 * report.SLOW_SHARE),
                                           reference["fleet_median_total_tokens_per_s"], reference["image_size"],
                                           reference["max_tokens"], reference["concurrency"]))
        lines += ["  %s %s: %.0f tokens/s, %d%% of the median" % (
            entry["host"], entry["instance"], entry["total_tokens_per_s"], round(100 * entry["share_of_median"]))
            for entry in slow]
    if summary["answers_failed"]:
        lines.append("answers failed (their rows are left out of every figure): %s" % ", ".join(
            "%s %s" % (entry["host"], entry["instance"]) for entry in summary["answers_failed"]))
    if summary["unreliable_groups"]:
        lines.append("unreliable groups (error rate over the threshold): %d; rerun them with "
                     "-e vllm_bench_resume=true" % len(summary["unreliable_groups"]))
    return "\n".join(lines)
