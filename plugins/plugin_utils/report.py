"""Fleet benchmark report: two CSV tables, summary.json, report.md and a self-contained report.html, with charts.

The tables are results.csv (one row per host, instance and group) and totals.csv (the totals below).

Input: ``<report dir>/raw/<host>/<instance>.jsonl``, the results files the vllm_benchmark module writes (their
record is module_utils/bench_record.py's). Charts follow the seed's three (p95 latency by image size, p95
latency by max_tokens, throughput), plus TTFT and a per-instance comparison that makes a slow host stand out.
The text comes from templates/report.md.j2 and templates/report.html.j2.

Totals. Every host benchmarks its instances at once, group after group in the same order, and all hosts run
together, so the instances of one group were under load at the same time: their requests/s and tokens/s add
up to what the host (or the fleet) served, and the users it held are the sum of their concurrency. A host
total and a fleet total per group sum rps, output_tokens_per_s and total_tokens_per_s over the instances, count
the users, and keep the worst p95 latency among them. Only reliable rows count; a group that an instance lacks,
or holds only unreliably, makes the total partial (marked, with the instances missing), never silently smaller.
The fleet's capacity per image size and max_tokens is the recommendation's rule applied to the complete fleet
totals, the worst p95 standing for the group's p95.

Answer checks. The load test asks each instance questions with one right answer before and after its matrix
(module_utils/answer_check.py) and keeps the verdicts in the results file. Every row of an instance with a
failed check is marked (``answers``: failed; passed, or not checked, otherwise) and, like an unreliable row,
left out of the medians, the recommendations, the comparison and the totals: throughput of garbage is no
capacity. The totals are in totals.csv, one row per host, fleet and
gateway group.

Gateway results. A load test run against the gateway (an HAProxy in front of the whole fleet, the fleet as users
see it) is written like an instance's, under the instance name ``gateway``: its results file is
``gateway.jsonl`` (what bench_record.results_file gives for that name), fetched to
``raw/<host that ran it>/gateway.jsonl``. Its records are the module's own, their concurrency being the users
the gateway held. They are not an instance: they stay out of the medians, the recommendations, the instance
comparison and the totals, and show as their own series, "through the gateway", beside the fleet totals.

Written by the vllm_bench role's last step (its action vllm_bench_report) and by `ascend-vllm-fleet report`.
"""
import base64
import csv
import json
import math
import pathlib
import statistics
import time

import jinja2

from ansible_collections.ascend.fleet.plugins.module_utils import answer_check, bench_record
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import parse_size
from ansible_collections.ascend.fleet.plugins.module_utils.serving_plan import INSTANCE_NAME

# The collection's templates/ (plugins/plugin_utils/report.py is two folders down from the collection's root).
TEMPLATES = pathlib.Path(__file__).parents[2] / "templates"
COLUMNS = ("host", "instance") + bench_record.FIELD_NAMES + ("answers",)
# An instance whose throughput is below this share of the fleet's median is called out as slow.
SLOW_SHARE = 0.8
# The metrics the report reads from a record (None where a group had no completed request); it cannot do
# without the first two, which rank the concurrencies and compare the instances.
METRICS = ("p95_latency_s", "total_tokens_per_s", "p95_ttft_s", "rps", "error_rate", "output_tokens_per_s")
REQUIRED = bench_record.GROUP_FIELDS + METRICS[:2]
# The instance name under which a results file holds what was measured through the gateway (module docstring).
GATEWAY_INSTANCE = "gateway"
# What a total adds up over the instances of a group, with the digits the record keeps of each.
SUMMED = (("rps", 4), ("output_tokens_per_s", 2), ("total_tokens_per_s", 2))
SUMMED_NAMES = tuple(name for name, _digits in SUMMED)
TOTAL_COLUMNS = (("scope", "host") + bench_record.GROUP_FIELDS + ("users",) + SUMMED_NAMES
                 + ("worst_p95_latency_s", "instances", "instances_expected", "partial", "missing"))


def pixels(size):
    width, height = parse_size(size)
    return width * height


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_problem(record):
    """What keeps the report from using a record, worded to follow "the record of <its group>"; None if nothing.

    A record vllm_benchmark wrote has every field; one that lacks a field or holds another kind of value comes
    from elsewhere (an older collection, a hand edit), and would otherwise fail deep in a chart or a median.
    """
    missing = [name for name in REQUIRED if name not in record]
    if missing:
        return "lacks %s: expected the fields vllm_benchmark writes (module_utils/bench_record.py FIELDS)" % (
            ", ".join(missing))
    try:
        parse_size(record["image_size"])
    except ValueError:
        return "has image_size %r: expected WIDTHxHEIGHT" % (record["image_size"],)
    for name in ("max_tokens", "concurrency"):
        value = record[name]
        if not is_count(value, 1):
            return "has %s %r: expected a whole number of at least 1" % (name, value)
    for name in METRICS:
        if record.get(name) is not None and not is_number(record[name]):
            return "has %s %r: expected a number, or null" % (name, record[name])
    if record.get("errors") is not None and not isinstance(record["errors"], dict):
        return "has errors %r: expected an object of failure kinds and their counts" % (record["errors"],)
    return None


def load(report_dir):
    """Rows (records with their host and instance) of every results file, in the order the groups ran, the files
    with lines that held no record, each file's answer checks, what capacity searches found and the deadline lines
    of runs their new-group deadline stopped (each with its host and instance). SystemExit, with the message an
    operator needs, when there is nothing to report or a record, capacity or deadline line the report cannot use."""
    report_dir = pathlib.Path(report_dir)
    expected = "expected the folder holding raw/<host>/<instance>%s" % bench_record.RESULTS_SUFFIX
    if not report_dir.exists():
        raise SystemExit("report folder %s does not exist: %s. Fix: give the folder the benchmark wrote (the "
                         "ascend-vllm-fleet command names it when the benchmark ends)" % (report_dir, expected))
    if not report_dir.is_dir():
        raise SystemExit("report folder %s is not a folder: %s. Fix: give the folder the benchmark wrote"
                         % (report_dir, expected))
    rows, skipped, checks, capacities, deadlines = [], [], [], [], []
    raw = report_dir / "raw"
    for path in sorted(raw.glob("*/*" + bench_record.RESULTS_SUFFIX)):
        where = path.relative_to(report_dir)
        if path.is_dir():
            raise SystemExit("%s is a folder: expected a results file (JSON Lines) there. Fix: move the folder out "
                             "of %s" % (where, raw))
        host, instance = path.parent.name, bench_record.instance_name(path)
        records, cut = bench_record.read_results(path)
        for record in records:
            problem = record_problem(record)
            if problem:
                raise SystemExit("%s: the record of %s, max_tokens %s, concurrency %s %s. Fix: measure that group "
                                 "again (the benchmark without resume) or delete its line" % (
                                     where, record["image_size"], record["max_tokens"], record["concurrency"],
                                     problem))
        asked = bench_record.read_answer_checks(path)
        answers = bench_record.answers_verdict(asked)
        checks.append({"host": host, "instance": instance, "answers": answers, "checks": asked})
        deadline = usable_deadline(path, where)
        if deadline is not None:
            deadlines.append(dict(deadline, host=host, instance=instance))
        rows += [dict(record, host=host, instance=instance, answers=answers) for record in records]
        if cut:
            skipped.append({"host": host, "instance": instance, "lines": cut})
        capacities += [dict(entry, host=host, instance=instance) for entry in usable_capacities(path, where)]
    if not rows and not capacities:
        unread = "".join("; raw/%s/%s%s: %d line(s) that hold no record" % (
            entry["host"], entry["instance"], bench_record.RESULTS_SUFFIX, entry["lines"]) for entry in skipped)
        raise SystemExit("no benchmark results under %s (expected raw/<host>/<instance>%s)%s. Fix: fetch the results "
                         "first (the benchmark playbook does), or give the report folder that holds them"
                         % (raw, bench_record.RESULTS_SUFFIX, unread))
    return rows, skipped, checks, capacities, deadlines


def usable_deadline(path, where):
    """The deadline line of a results file (where: its name in the report folder), or None; SystemExit, naming the
    file, for one the report cannot use."""
    deadline = bench_record.read_deadline(path)
    if deadline is None:
        return None
    not_run = deadline.get("not_run")
    if not (is_number(deadline.get("new_group_deadline_s")) and is_number(deadline.get("elapsed_s"))
            and is_count(deadline.get("groups_total")) and isinstance(not_run, list)
            and all(isinstance(group, dict) and all(name in group for name in bench_record.GROUP_FIELDS)
                    for group in not_run)):
        raise SystemExit("%s: the deadline line is not one vllm_benchmark writes: expected new_group_deadline_s and "
                         "elapsed_s (seconds), groups_total (a count) and not_run (groups, each %s). Fix: delete the "
                         "line" % (where, ", ".join(bench_record.GROUP_FIELDS)))
    return deadline


def cut_short(rows, deadlines):
    """The runs their new-group deadline stopped (load's deadline lines), each with the groups still not run (a
    resume since may have run some) and its sentence; none once every group one left out is recorded."""
    recorded = {(row["host"], row["instance"], bench_record.group_key(row)) for row in rows}
    found = []
    for deadline in deadlines:
        not_run = [{name: group[name] for name in bench_record.GROUP_FIELDS} for group in deadline["not_run"]
                   if (deadline["host"], deadline["instance"], bench_record.group_key(group)) not in recorded]
        if not_run:
            left = dict(deadline, not_run=not_run)
            found.append(dict(left, sentence=bench_record.deadline_text(left, shown=None)))
    return found


LIMITS = ("slo", "top", "none_met")


def capacity_problem(entry):
    """What makes a capacity line unusable for the report, or None."""
    slo = entry.get("slo")
    open_loop = entry.get("open_loop")
    checks = (
        (isinstance(entry.get("image_size"), str), "no image_size"),
        (is_count(entry.get("max_tokens")), "no max_tokens"),
        (is_count(entry.get("max_concurrency")), "no max_concurrency (a count of users)"),
        (entry.get("limited_by") in LIMITS, "limited_by is none of %s" % ", ".join(LIMITS)),
        (entry.get("rps") is None or is_number(entry.get("rps")), "rps is no number"),
        (isinstance(slo, dict) and all(key in SLO_TEXT and is_number(value) for key, value in slo.items()),
         "its slo is no mapping of %s to numbers" % ", ".join(SLO_TEXT)),
        (open_loop is None or isinstance(open_loop, dict) and is_number(open_loop.get("rate_rps"))
         and isinstance(open_loop.get("passed"), bool) and isinstance(open_loop.get("failed"), list),
         "its open_loop is no open-loop check"),
    )
    return next((problem for fine, problem in checks if not fine), None)


def is_count(value, minimum=0):
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def usable_capacities(path, where):
    """The capacity lines of a results file (where: its name in the report folder); SystemExit, naming the file,
    for one the report cannot use."""
    found = bench_record.read_capacities(path)
    for entry in found:
        problem = capacity_problem(entry)
        if problem:
            raise SystemExit("%s: the capacity line of %s, max_tokens %s: %s. Fix: search again (the benchmark "
                             "with vllm_bench_search=concurrency, without resume) or delete the line" % (
                                 where, entry.get("image_size"), entry.get("max_tokens"), problem))
    return found


SLO_TEXT = {"p95_latency_s": "p95 latency <= %gs", "p95_ttft_s": "p95 TTFT <= %gs", "p95_tpot_s": "p95 TPOT <= %gs",
            "max_error_rate": "errors <= %g"}


def slo_text(slo):
    return ", ".join(SLO_TEXT[key] % (value * 100 if key == "max_error_rate" else value)
                     + (" %" if key == "max_error_rate" else "") for key, value in sorted((slo or {}).items())
                     if key in SLO_TEXT)


def searched_sentence(size, tokens, who, users, rps, limited_by, slo):
    """"<size>, max_tokens <n>: <who> meets the SLO (...) up to N users at R requests/s", as a search found it."""
    where = "%s, max_tokens %s: " % (size, tokens)
    if limited_by == "none_met":
        return where + "%s does not meet the SLO (%s) even with one user" % (who, slo_text(slo))
    return where + "%s meets the SLO (%s) up to %s%d users at %s requests/s" % (
        who, slo_text(slo), "at least " if limited_by == "top" else "", users, rate_text(rps))


def searched_capacity(found, instances):
    """Each search's finding as a sentence, and the fleet's: per image size and max_tokens, the instances' users and
    requests/s added up (their searches ran at the same time), when every instance of the report (instances)
    searched it with one SLO. The fleet's is a lower bound ("at least") when any instance's search reached the top
    of its range."""
    each, fleet = [], []
    for entry in found:
        who = ("the gateway on %s" % entry["host"] if through_gateway(entry)
               else "%s on %s" % (entry["instance"], entry["host"]))
        each.append(dict(entry, sentence=searched_sentence(
            entry["image_size"], entry["max_tokens"], who, entry["max_concurrency"], entry.get("rps") or 0,
            entry["limited_by"], entry.get("slo"))))
    for size, tokens in workloads(found):
        same = [entry for entry in found if (entry["image_size"], entry["max_tokens"]) == (size, tokens)
                and not through_gateway(entry)]
        if {(entry["host"], entry["instance"]) for entry in same} != set(instances) or len(same) != len(instances) \
                or len({json.dumps(entry["slo"], sort_keys=True) for entry in same}) != 1:
            continue
        users = sum(entry["max_concurrency"] for entry in same)
        rps = sum(entry.get("rps") or 0 for entry in same)
        limited_by = ("none_met" if not users else "top" if any(e["limited_by"] == "top" for e in same) else "slo")
        fleet.append({"image_size": size, "max_tokens": tokens, "users": users, "rps": round(rps, 4),
                      "instances": len(same), "limited_by": limited_by, "open_loop": None,
                      "sentence": searched_sentence(
                          size, tokens, "the fleet", users, rps, limited_by, same[0].get("slo"))})
    return each, fleet


# What the benchmark role records beside each host's results: the host tuning it measured under (host_tuning).
TUNING_FILE = "host-tuning.json"
TUNING_FIELDS = ("name", "wanted", "current", "state")
MAX_TUNING_CHARS = 1 << 20


def load_tunings(report_dir):
    """Each host's recorded tuning: [{'host', 'settings': [{name, wanted, current, state}], 'differs': [...],
    'unreadable': why or ''}]. A record it cannot read is shown as such: it is no reason to withhold the results."""
    tunings = []
    for path in sorted((pathlib.Path(report_dir) / "raw").glob("*/" + TUNING_FILE)):
        entry = {"host": path.parent.name, "settings": [], "differs": [], "unreadable": ""}
        tunings.append(entry)
        try:
            settings = json.loads(path.read_text(encoding="utf-8")[:MAX_TUNING_CHARS]).get("settings")
        except (OSError, ValueError, AttributeError, RecursionError) as error:
            entry["unreadable"] = "%s cannot be read (%s)" % (path.relative_to(report_dir), str(error)[:200])
            continue
        if not (isinstance(settings, list) and all(isinstance(setting, dict) and all(
                isinstance(setting.get(field), str) for field in TUNING_FIELDS) for setting in settings)):
            entry["unreadable"] = "%s holds no {\"settings\": [{%s}, ...]}" % (
                path.relative_to(report_dir), ", ".join(TUNING_FIELDS))
            continue
        entry["settings"] = [{field: setting[field][:200] for field in TUNING_FIELDS} for setting in settings]
        entry["differs"] = [setting["name"] for setting in entry["settings"] if setting["state"] != "ok"
                            and setting["state"] != "unavailable"]
    return tunings


def reliable(row):
    """A row to count: its error rate under the threshold, and its instance's answers not failed."""
    return not row.get("unreliable") and row.get("answers") != "failed"


def through_gateway(row):
    return row["instance"] == GATEWAY_INSTANCE


def instance_rows(rows):
    """The rows measured on an instance: what the medians, the recommendations and the totals are made of."""
    return [row for row in rows if not through_gateway(row)]


def group_order(key):
    """Sorts group keys by image size in pixels, then max_tokens, then concurrency."""
    size, tokens, concurrency = key
    return pixels(size), tokens, concurrency


def fleet_median(rows, metric, **where):
    values = [row[metric] for row in rows if row.get(metric) is not None and reliable(row)
              and all(row[key] == value for key, value in where.items())]
    return statistics.median(values) if values else None


def axis_values(rows, key):
    return sorted({row[key] for row in rows}, key=pixels if key == "image_size" else None)


def choose(candidates, latency_target):
    """Of (p95, throughput, item) candidates: the one with the most throughput whose p95 meets the target, and
    True; when none meets it, the one with the lowest p95, and False."""
    meeting = [candidate for candidate in candidates if candidate[0] <= latency_target]
    if meeting:
        return max(meeting, key=lambda candidate: candidate[1]), True
    return min(candidates, key=lambda candidate: candidate[0]), False


def recommendations(rows, latency_target):
    """Per image size and max_tokens: the concurrency with the most throughput whose p95 meets the target (fleet
    medians over the instances; rows measured through the gateway are left out)."""
    rows = instance_rows(rows)
    found = []
    for size in axis_values(rows, "image_size"):
        for tokens in axis_values(rows, "max_tokens"):
            candidates = []
            for concurrency in axis_values(rows, "concurrency"):
                p95 = fleet_median(rows, "p95_latency_s", image_size=size, max_tokens=tokens, concurrency=concurrency)
                throughput = fleet_median(rows, "total_tokens_per_s", image_size=size, max_tokens=tokens,
                                          concurrency=concurrency)
                if p95 is not None and throughput is not None:
                    candidates.append((p95, throughput, concurrency))
            if not candidates:
                continue
            (p95, throughput, concurrency), meets = choose(candidates, latency_target)
            if meets:
                note = "highest throughput with p95 <= %gs" % latency_target
            else:
                note = "no concurrency meets p95 <= %gs; this one has the lowest p95" % latency_target
            found.append({"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
                          "p95_latency_s": round(p95, 3), "total_tokens_per_s": round(throughput, 1),
                          "meets_target": meets, "note": note})
    return found


def counted(row):
    """Whether a row adds to the totals: reliable, and holding every number a total takes (a group with no
    completed request holds none)."""
    return reliable(row) and all(row.get(name) is not None for name in SUMMED_NAMES + ("p95_latency_s",))


def add_up(key, groups_by_instance, instances):
    """The total of the group key over instances, (host, instance) pairs, each with its rows by group key."""
    found = [(instance, groups_by_instance[instance].get(key)) for instance in instances]
    counting = [row for _instance, row in found if row is not None and counted(row)]
    total = dict(zip(bench_record.GROUP_FIELDS, key), users=sum(row["concurrency"] for row in counting))
    for name, digits in SUMMED:
        total[name] = round(sum(row[name] for row in counting), digits) if counting else None
    total["worst_p95_latency_s"] = max((row["p95_latency_s"] for row in counting), default=None)
    missing = ["%s/%s" % instance for instance, row in found if row is None or not counted(row)]
    total.update(instances=len(counting), instances_expected=len(instances), partial=bool(missing),
                 missing=missing)
    return total


def totals(rows):
    """(host totals, fleet totals): per group any instance ran, what each host and the whole fleet served at
    once (module docstring). A host total names its host. Rows measured through the gateway are left out."""
    groups_by_instance = {}
    for row in instance_rows(rows):
        groups_by_instance.setdefault((row["host"], row["instance"]), {})[bench_record.group_key(row)] = row
    instances = sorted(groups_by_instance)
    keys = sorted({key for groups in groups_by_instance.values() for key in groups}, key=group_order)
    host_totals = [dict(add_up(key, groups_by_instance, [i for i in instances if i[0] == host]), host=host)
                   for host in sorted({host for host, _name in instances}) for key in keys]
    return host_totals, [add_up(key, groups_by_instance, instances) for key in keys]


def gateway_series(rows):
    """The reliable groups measured through a gateway, shaped as totals: the users are the concurrency the gateway
    held, the worst p95 its p95. Each names the host that ran it."""
    series = []
    for row in sorted((row for row in rows if through_gateway(row) and counted(row)),
                      key=lambda row: (row["host"], group_order(bench_record.group_key(row)))):
        point = {name: row[name] for name in ("host",) + bench_record.GROUP_FIELDS}
        point.update({name: row[name] for name in SUMMED_NAMES})
        point.update(users=row["concurrency"], worst_p95_latency_s=row["p95_latency_s"], instances=None,
                     instances_expected=None, partial=False, missing=[])
        series.append(point)
    return series


def workloads(points):
    """The (image size, max_tokens) pairs of totals, in the report's order."""
    return sorted({(point["image_size"], point["max_tokens"]) for point in points},
                  key=lambda workload: (pixels(workload[0]), workload[1]))


def rate_text(value):
    """A rate to three significant digits, never in exponent form."""
    return "%.0f" % value if abs(value) >= 100 else "%.3g" % value


def capacity(points, latency_target, who):
    """Per image size and max_tokens, what who (the fleet, a gateway) takes at the latency target: the
    recommendation's rule over its complete totals, their worst p95 standing for the group's p95."""
    found = []
    for size, tokens in workloads(points):
        complete = [point for point in points if (point["image_size"], point["max_tokens"]) == (size, tokens)
                    and not point["partial"] and point["worst_p95_latency_s"] is not None]
        entry = {"image_size": size, "max_tokens": tokens}
        if not complete:
            entry.update(meets_target=False, sentence="%s, max_tokens %s: no group was measured reliably on every "
                         "instance, so %s has no complete total" % (size, tokens, who))
            found.append(entry)
            continue
        (_p95, _throughput, point), meets = choose(
            [(point["worst_p95_latency_s"], point["total_tokens_per_s"], point) for point in complete], latency_target)
        entry.update({name: point[name] for name in ("concurrency", "users", "rps", "output_tokens_per_s",
                                                     "total_tokens_per_s", "worst_p95_latency_s")})
        entry["meets_target"] = meets
        if meets:
            entry["sentence"] = "%s, max_tokens %s: at p95 <= %gs %s takes %d users at %s requests/s" % (
                size, tokens, latency_target, who, point["users"], rate_text(point["rps"]))
        else:
            entry["sentence"] = ("%s, max_tokens %s: no group meets p95 <= %gs; %s's lowest p95 is %gs, with %d "
                                 "users at %s requests/s" % (size, tokens, latency_target, who,
                                                             point["worst_p95_latency_s"], point["users"],
                                                             rate_text(point["rps"])))
        found.append(entry)
    return found


def comparison(rows):
    """Each instance's throughput at the heaviest group every instance ran, against the fleet's median (rows
    measured through the gateway, and instances whose answers failed, are left out)."""
    rows = [row for row in instance_rows(rows) if row.get("answers") != "failed"]
    instances = sorted({(row["host"], row["instance"]) for row in rows})
    shared = None
    for host, instance in instances:
        keys = {bench_record.group_key(r) for r in rows if (r["host"], r["instance"]) == (host, instance)
                and reliable(r)}
        shared = keys if shared is None else shared & keys
    if not shared:
        return None, []
    reference = max(shared, key=group_order)
    where = dict(zip(bench_record.GROUP_FIELDS, reference))
    median = fleet_median(rows, "total_tokens_per_s", **where)
    entries = []
    for host, instance in instances:
        row = next(r for r in rows if (r["host"], r["instance"]) == (host, instance)
                   and bench_record.group_key(r) == reference and reliable(r))
        share = row["total_tokens_per_s"] / median if median else None
        entries.append({"host": host, "instance": instance, "total_tokens_per_s": row["total_tokens_per_s"],
                        "p95_latency_s": row["p95_latency_s"], "share_of_median": round(share, 3) if share else None,
                        "slow": bool(share is not None and share < SLOW_SHARE)})
    return dict(where, fleet_median_total_tokens_per_s=median), entries


def write_csv(rows, path):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(dict(row, errors=json.dumps(row.get("errors") or {}, sort_keys=True)))


def write_totals_csv(host_totals, fleet_totals, gateway, path):
    """totals.csv: one row per host, fleet and gateway group; missing instances joined by spaces."""
    scoped = ([dict(total, scope="host") for total in host_totals] + [dict(total, scope="fleet", host="")
                                                                      for total in fleet_totals]
              + [dict(point, scope="gateway") for point in gateway])
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=TOTAL_COLUMNS)
        writer.writeheader()
        for total in scoped:
            writer.writerow(dict(total, missing=" ".join(total["missing"])))


class Charts:
    """The report's PNG charts (matplotlib, no display needed)."""

    def __init__(self, rows, folder):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt = plt
        self.rows = rows
        self.folder = pathlib.Path(folder)
        self.concurrency = axis_values(rows, "concurrency")

    def plot_against_concurrency(self, axes, ylabel, metric, series_key, series, where):
        """One line per value of series_key: the fleet median of metric at each concurrency."""
        for value in series:
            points = [(c, fleet_median(self.rows, metric, concurrency=c, **dict(where, **{series_key: value})))
                      for c in self.concurrency]
            points = [(c, v) for c, v in points if v is not None]
            if points:
                axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=str(value))
        axes.set_xscale("log", base=2)
        axes.set_xticks(self.concurrency, [str(c) for c in self.concurrency])
        axes.set_xlabel("concurrency (requests in flight)")
        axes.set_ylabel(ylabel)
        axes.grid(True, alpha=0.3)
        if axes.get_lines():  # no line when no instance measured well: an empty chart, without a legend
            axes.legend(title=series_key.replace("_", " "))

    def save(self, figure, title, filename):
        figure.tight_layout()
        figure.savefig(self.folder / filename)
        self.plt.close(figure)
        return {"title": title, "file": filename}

    def lines(self, title, filename, heading, ylabel, metric, series_key, series, **where):
        figure, axes = self.plt.subplots(figsize=(7, 4.2), dpi=110)
        self.plot_against_concurrency(axes, ylabel, metric, series_key, series, where)
        axes.set_title(heading)
        return self.save(figure, title, filename)

    def throughput(self, title, filename, heading, **where):
        figure, (left, right) = self.plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
        tokens = axis_values(self.rows, "max_tokens")
        self.plot_against_concurrency(left, "requests per second", "rps", "max_tokens", tokens, where)
        self.plot_against_concurrency(right, "total tokens per second", "total_tokens_per_s", "max_tokens", tokens,
                                      where)
        figure.suptitle(heading)
        return self.save(figure, title, filename)

    def totals(self, title, filename, fleet_totals, gateway):
        """Fleet requests/s and output tokens/s against users, a line per image size and max_tokens; hollow
        markers for partial totals; the gateway's series dashed, in its workload's colour."""
        figure, panels = self.plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
        colours = self.plt.rcParams["axes.prop_cycle"].by_key()["color"]
        users = sorted({point["users"] for point in fleet_totals + gateway})
        for axes, metric, ylabel in zip(panels, ("rps", "output_tokens_per_s"),
                                        ("requests per second", "output tokens per second")):
            partial_shown = False
            for index, (size, tokens) in enumerate(workloads(fleet_totals + gateway)):
                colour = colours[index % len(colours)]
                points = [t for t in fleet_totals if (t["image_size"], t["max_tokens"]) == (size, tokens)]
                if points:
                    axes.plot([t["users"] for t in points], [t[metric] for t in points], color=colour, marker="o",
                              label="fleet, %s, max_tokens %s" % (size, tokens))
                partial = [t for t in points if t["partial"]]
                if partial:
                    # One legend entry explains every hollow marker.
                    axes.plot([t["users"] for t in partial], [t[metric] for t in partial], linestyle="none",
                              marker="o", markersize=9, markerfacecolor="white", markeredgecolor=colour,
                              label=None if partial_shown else "partial total: an instance missing")
                    partial_shown = True
                for host in sorted({point["host"] for point in gateway}):
                    through = [point for point in gateway if (point["host"], point["image_size"],
                                                              point["max_tokens"]) == (host, size, tokens)]
                    if through:
                        axes.plot([point["users"] for point in through], [point[metric] for point in through],
                                  color=colour, linestyle="--", marker="s",
                                  label="through the gateway (%s), %s, max_tokens %s" % (host, size, tokens))
            axes.set_xscale("log", base=2)
            axes.set_xticks(users, [str(count) for count in users])
            axes.set_xlabel("users (total concurrency)")
            axes.set_ylabel(ylabel)
            axes.grid(True, alpha=0.3)
        panels[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        figure.suptitle("Fleet totals (sums over the instances) and the gateway")
        return self.save(figure, title, filename)

    def instances(self, title, filename, reference, entries):
        figure, axes = self.plt.subplots(figsize=(max(6, 1.1 * len(entries) + 2), 4.2), dpi=110)
        labels = ["%s\n%s" % (e["host"], e["instance"]) for e in entries]
        colours = ["#d62728" if e["slow"] else "#1f77b4" for e in entries]
        axes.bar(range(len(entries)), [e["total_tokens_per_s"] for e in entries], color=colours)
        axes.axhline(reference["fleet_median_total_tokens_per_s"], color="grey", linestyle="--", label="fleet median")
        axes.axhline(SLOW_SHARE * reference["fleet_median_total_tokens_per_s"], color="#d62728", linestyle=":",
                     label="%d%% of median" % (SLOW_SHARE * 100))
        axes.set_xticks(range(len(entries)), labels, fontsize=8)
        axes.set_ylabel("total tokens per second")
        axes.set_title("Per instance at %s, max_tokens %s, concurrency %s" % bench_record.group_key(reference))
        axes.legend()
        return self.save(figure, title, filename)


def draw(rows, folder, reference, entries, fleet_totals, gateway):
    """The charts as files in folder: the fleet totals' {title, file} (None when no total counted an instance and
    nothing went through a gateway), and [{title, file}] of the others in the report's order (none without
    instances: a report of the gateway alone). rows: the instances' rows; fleet_totals: those with users only,
    the others having nothing to draw."""
    charts = Charts(rows, folder)
    totals_figure = None
    if fleet_totals or gateway:
        totals_figure = charts.totals("Fleet totals", "fleet_totals.png", fleet_totals, gateway)
    if not rows:
        return totals_figure, []
    sizes, tokens = axis_values(rows, "image_size"), axis_values(rows, "max_tokens")
    largest_size, longest = sizes[-1], tokens[-1]
    figures = [
        charts.lines("p95 latency by image size", "p95_by_image_size.png", "p95 latency, max_tokens %s" % longest,
                     "p95 latency (s)", "p95_latency_s", "image_size", sizes, max_tokens=longest),
        charts.lines("p95 latency by output length", "p95_by_max_tokens.png", "p95 latency, %s" % largest_size,
                     "p95 latency (s)", "p95_latency_s", "max_tokens", tokens, image_size=largest_size),
        charts.throughput("Throughput", "throughput.png", "Throughput, %s" % largest_size, image_size=largest_size),
        charts.lines("Time to first token", "ttft.png", "p95 time to first token, max_tokens %s" % longest,
                     "p95 TTFT (s)", "p95_ttft_s", "image_size", sizes, max_tokens=longest),
    ]
    if reference:
        figures.append(charts.instances("Instances compared", "instances.png", reference, entries))
    return totals_figure, figures


def data_uri(path):
    return "data:image/png;base64," + base64.b64encode(pathlib.Path(path).read_bytes()).decode("ascii")


def render(name, **context):
    # report.html.j2 is escaped as HTML: host names and error texts come from inventories and servers.
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                                     autoescape=jinja2.select_autoescape(["html", "html.j2"]),
                                     undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                                     keep_trailing_newline=True)
    return environment.get_template(name).render(**context)


def refuse_existing_raw(report_dir):
    """A report rebuilt from facts goes to a folder of its own: results fetched earlier are never overwritten."""
    raw = pathlib.Path(report_dir) / "raw"
    if raw.is_dir() and any(raw.iterdir()):
        raise SystemExit("--from-facts: %s already holds results: expected a new report folder. Fix: name one that "
                         "does not exist yet" % raw)


def raw_from_facts(tree, report_dir):
    """Write <report dir>/raw/<host>/<instance>.jsonl from the hosts' local facts, one JSON file per host named after
    it, each the setup module's result (`ascend-vllm-fleet report --from-facts` asks for them): each instance's last
    run (ansible_local.vllm_bench, which the vllm_bench role keeps), its groups and answer checks as the load test
    wrote them. Returns {host: [instances]}; SystemExit naming the file for anything that is not such facts."""
    tree, report_dir = pathlib.Path(tree), pathlib.Path(report_dir)
    refuse_existing_raw(report_dir)
    if not tree.is_dir():
        raise SystemExit("--from-facts %s: expected a folder of the hosts' facts. Fix: run ascend-vllm-fleet report "
                         "--from-facts, which gathers them" % tree)
    found = {}
    for path in sorted(tree.iterdir()):
        try:
            instances = json.loads(path.read_text(encoding="utf-8"))["ansible_facts"]["ansible_local"]["vllm_bench"][
                "instances"]
            runs = {name: entry["last_run"] for name, entry in instances.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise SystemExit("--from-facts: %s holds no benchmark facts (%s: %s): expected a host's ansible_local with "
                             "vllm_bench. Fix: benchmark the host first (playbooks/benchmark.yml), or remove the file"
                             % (path, type(error).__name__, error)) from None
        for name, run in runs.items():
            if not (isinstance(name, str) and INSTANCE_NAME.fullmatch(name)):
                raise SystemExit("--from-facts: %s names an instance %s: expected a container name. Fix: remove the "
                                 "file" % (path, json.dumps(name)))
            lines = list(run.get("groups") or []) + list(run.get("answer_checks") or [])
            target = pathlib.Path(bench_record.results_file(str(report_dir / "raw" / path.name), name))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines),
                              encoding="utf-8")
            found.setdefault(path.name, []).append(name)
    if not found:
        raise SystemExit("--from-facts %s: no host's facts in it. Fix: benchmark the hosts first "
                         "(playbooks/benchmark.yml)" % tree)
    return found


def build(report_dir, latency_target):
    """Write the report's files into report_dir from its raw/ results; its summary. SystemExit, with the message
    an operator needs, for anything in the way."""
    if not (is_number(latency_target) and latency_target > 0):
        raise SystemExit("--latency-target %g: expected seconds, a number more than 0. Fix: give the p95 latency the "
                         "recommended concurrency must meet, such as %g"
                         % (latency_target, bench_record.LATENCY_TARGET_S))
    report_dir = pathlib.Path(report_dir)
    rows, skipped, checks, capacities, deadlines = load(report_dir)
    tunings = load_tunings(report_dir)
    try:
        return write_report(report_dir, rows, skipped, checks, latency_target, tunings, capacities, deadlines)
    except OSError as error:
        raise SystemExit("cannot write the report into %s: %s. Fix: make the folder writable, free disk space, or "
                         "move away what stands where a report file goes" % (report_dir, error)) from None


def write_report(report_dir, rows, skipped, checks, latency_target, tunings=(), capacities=(), deadlines=()):
    write_csv(rows, report_dir / "results.csv")
    reference, entries = comparison(rows)
    host_totals, fleet_totals = totals(rows)
    measured = instance_rows(rows)
    gateway = gateway_series(rows)
    write_totals_csv(host_totals, fleet_totals, gateway, report_dir / "totals.csv")
    # Every results file has its answer-check entry: the instances and gateways of the report, whether they ran a
    # matrix or capacity searches; the instances a fleet capacity must cover.
    instances = sorted({(entry["host"], entry["instance"]) for entry in checks if not through_gateway(entry)})
    gateway_hosts = sorted({entry["host"] for entry in checks if through_gateway(entry)})
    searched, fleet_searched = searched_capacity(list(capacities), instances)
    summary = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "latency_target_s": latency_target,
        "hosts": sorted({host for host, _name in instances}),
        "gateways": gateway_hosts,
        "instances": len(instances),
        "groups": len(rows),
        "unreliable_groups": [{k: row.get(k) for k in ("host", "instance") + bench_record.GROUP_FIELDS
                               + ("error_rate", "errors")} for row in rows if row.get("unreliable")],
        "answer_checks": checks,
        "answers_failed": [{"host": entry["host"], "instance": entry["instance"]} for entry in checks
                           if entry["answers"] == "failed"],
        "skipped_lines": skipped,
        "cut_short": cut_short(rows, deadlines),
        "host_tuning": list(tunings),
        "recommended": recommendations(rows, latency_target),
        "comparison_reference": reference,
        "comparison": entries,
        "slow_instances": [e for e in entries if e["slow"]],
        "host_totals": host_totals,
        "fleet_totals": fleet_totals,
        "gateway_series": gateway,
        "fleet_capacity": capacity(fleet_totals, latency_target, "the fleet"),
        "gateway_capacity": [dict(entry, host=host) for host in gateway_hosts
                             for entry in capacity([point for point in gateway if point["host"] == host],
                                                   latency_target, "the gateway on %s" % host)],
        "searched_capacity": searched,
        "fleet_searched_capacity": fleet_searched,
    }
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    totals_figure, figures = draw(measured, report_dir, reference, entries,
                                  [total for total in fleet_totals if total["users"]], gateway)

    def embed(figure):
        return dict(figure, data_uri=data_uri(report_dir / figure["file"]))

    context = {"summary": summary, "totals_figure": embed(totals_figure) if totals_figure else None,
               "figures": [embed(figure) for figure in figures], "fields": bench_record.FIELDS,
               "notes": bench_record.NOTES, "degenerate_rules": answer_check.DEGENERATE_RULES}
    for name in ("report.md", "report.html"):
        (report_dir / name).write_text(render(name + ".j2", **context), encoding="utf-8")
    return summary


def describe(report_dir, summary):
    """The line that tells an operator where the report is and what it holds."""
    searched = summary.get("searched_capacity")
    # A summary written by an older collection has none.
    cut = summary.get("cut_short") or []
    stopped = ", %d run(s) stopped by vllm_bench_new_group_deadline_s with %d group(s) not run (raise it, then " \
              "rerun with -e vllm_bench_resume=true)" % (len(cut), sum(len(run["not_run"]) for run in cut))
    return ("report: %s (%d groups, %s%d instance(s), %d slow, %d whose answers failed%s; report.md, results.csv, "
            "totals.csv and summary.json beside it)" % (
                pathlib.Path(report_dir) / "report.html", summary["groups"],
                "%d capacities searched, " % len(searched) if searched else "", summary["instances"],
                len(summary["slow_instances"]), len(summary["answers_failed"]), stopped if cut else ""))
