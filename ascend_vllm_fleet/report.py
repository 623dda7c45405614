"""Fleet benchmark report: results.csv, summary.json and report.md with charts, from the fetched results files.

Input: ``<report dir>/raw/<host>/<instance>.jsonl``, one JSON line per benchmark group as the vllm_benchmark
module writes them (a later line for the same group replaces an earlier one: that is how resumed runs look).
Charts follow the seed's three (p95 latency by image size, p95 latency by max_tokens, throughput), plus TTFT
and a per-instance comparison that makes a slow host stand out.

Usage: python -m ascend_vllm_fleet.report REPORT_DIR [--latency-target SECONDS]
"""
import argparse
import csv
import json
import pathlib
import statistics
import sys
import time

COLUMNS = [
    "host", "instance", "image_size", "max_tokens", "concurrency", "requests", "completed", "failed", "error_rate",
    "unreliable", "duration_s", "rps", "avg_latency_s", "p50_latency_s", "p95_latency_s", "p99_latency_s",
    "avg_ttft_s", "p50_ttft_s", "p95_ttft_s", "p99_ttft_s", "avg_tpot_s", "p95_tpot_s", "total_tokens_per_s",
    "output_tokens_per_s", "avg_prompt_tokens", "avg_completion_tokens", "total_prompt_tokens",
    "total_completion_tokens", "max_in_flight", "errors",
]
# An instance whose throughput is below this share of the fleet's median is called out as slow.
SLOW_SHARE = 0.8


def pixels(size):
    width, height = size.split("x")
    return int(width) * int(height)


def load(report_dir):
    """Rows (dicts) of every host x instance x group, in the order the groups ran."""
    rows = []
    raw = pathlib.Path(report_dir) / "raw"
    for path in sorted(raw.glob("*/*.jsonl")):
        groups = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                groups[(record["image_size"], record["max_tokens"], record["concurrency"])] = record
        for record in groups.values():
            rows.append(dict(record, host=path.parent.name, instance=path.stem))
    if not rows:
        raise SystemExit("no benchmark results under %s (expected raw/<host>/<instance>.jsonl)" % raw)
    return rows


def fleet_median(rows, metric, **where):
    values = [row[metric] for row in rows if row.get(metric) is not None and not row["unreliable"]
              and all(row[key] == value for key, value in where.items())]
    return statistics.median(values) if values else None


def axis_values(rows, key):
    return sorted({row[key] for row in rows}, key=pixels if key == "image_size" else None)


def recommendations(rows, latency_target):
    """Per image size and max_tokens: the concurrency with the most throughput whose p95 meets the target."""
    found = []
    for size in axis_values(rows, "image_size"):
        for tokens in axis_values(rows, "max_tokens"):
            candidates = []
            for concurrency in axis_values(rows, "concurrency"):
                p95 = fleet_median(rows, "p95_latency_s", image_size=size, max_tokens=tokens, concurrency=concurrency)
                throughput = fleet_median(rows, "total_tokens_per_s", image_size=size, max_tokens=tokens,
                                          concurrency=concurrency)
                if p95 is not None and throughput is not None:
                    candidates.append((concurrency, p95, throughput))
            if not candidates:
                continue
            meeting = [c for c in candidates if c[1] <= latency_target]
            if meeting:
                concurrency, p95, throughput = max(meeting, key=lambda c: c[2])
                note = "highest throughput with p95 <= %gs" % latency_target
            else:
                concurrency, p95, throughput = min(candidates, key=lambda c: c[1])
                note = "no concurrency meets p95 <= %gs; this one has the lowest p95" % latency_target
            found.append({"image_size": size, "max_tokens": tokens, "concurrency": concurrency,
                          "p95_latency_s": round(p95, 3), "total_tokens_per_s": round(throughput, 1),
                          "meets_target": bool(meeting), "note": note})
    return found


def comparison(rows):
    """Each instance's throughput at the heaviest group every instance ran, against the fleet's median."""
    instances = sorted({(row["host"], row["instance"]) for row in rows})
    shared = None
    for host, instance in instances:
        keys = {(r["image_size"], r["max_tokens"], r["concurrency"]) for r in rows
                if (r["host"], r["instance"]) == (host, instance) and not r["unreliable"]}
        shared = keys if shared is None else shared & keys
    if not shared:
        return None, []
    reference = max(shared, key=lambda key: (pixels(key[0]), key[1], key[2]))
    where = dict(zip(("image_size", "max_tokens", "concurrency"), reference))
    median = fleet_median(rows, "total_tokens_per_s", **where)
    entries = []
    for host, instance in instances:
        row = next(r for r in rows if (r["host"], r["instance"]) == (host, instance)
                   and all(r[k] == v for k, v in where.items()) and not r["unreliable"])
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
        axes.legend(title=series_key.replace("_", " "))

    def save(self, figure, filename):
        figure.tight_layout()
        figure.savefig(self.folder / filename)
        self.plt.close(figure)
        return filename

    def lines(self, filename, title, ylabel, metric, series_key, series, **where):
        figure, axes = self.plt.subplots(figsize=(7, 4.2), dpi=110)
        self.plot_against_concurrency(axes, ylabel, metric, series_key, series, where)
        axes.set_title(title)
        return self.save(figure, filename)

    def throughput(self, filename, title, **where):
        figure, (left, right) = self.plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
        tokens = axis_values(self.rows, "max_tokens")
        self.plot_against_concurrency(left, "requests per second", "rps", "max_tokens", tokens, where)
        self.plot_against_concurrency(right, "total tokens per second", "total_tokens_per_s", "max_tokens", tokens,
                                      where)
        figure.suptitle(title)
        return self.save(figure, filename)

    def instances(self, filename, reference, entries):
        figure, axes = self.plt.subplots(figsize=(max(6, 1.1 * len(entries) + 2), 4.2), dpi=110)
        labels = ["%s\n%s" % (e["host"], e["instance"]) for e in entries]
        colours = ["#d62728" if e["slow"] else "#1f77b4" for e in entries]
        axes.bar(range(len(entries)), [e["total_tokens_per_s"] for e in entries], color=colours)
        axes.axhline(reference["fleet_median_total_tokens_per_s"], color="grey", linestyle="--", label="fleet median")
        axes.axhline(SLOW_SHARE * reference["fleet_median_total_tokens_per_s"], color="#d62728", linestyle=":",
                     label="%d%% of median" % (SLOW_SHARE * 100))
        axes.set_xticks(range(len(entries)), labels, fontsize=8)
        axes.set_ylabel("total tokens per second")
        axes.set_title("Per instance at %s, max_tokens %s, concurrency %s" % (
            reference["image_size"], reference["max_tokens"], reference["concurrency"]))
        axes.legend()
        return self.save(figure, filename)


def build(report_dir, latency_target):
    report_dir = pathlib.Path(report_dir)
    rows = load(report_dir)
    sizes, tokens = axis_values(rows, "image_size"), axis_values(rows, "max_tokens")
    largest_size, longest = sizes[-1], tokens[-1]
    write_csv(rows, report_dir / "results.csv")
    recommended = recommendations(rows, latency_target)
    reference, entries = comparison(rows)
    summary = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "latency_target_s": latency_target,
        "hosts": sorted({row["host"] for row in rows}),
        "instances": len({(row["host"], row["instance"]) for row in rows}),
        "groups": len(rows),
        "unreliable_groups": [{k: row[k] for k in ("host", "instance", "image_size", "max_tokens", "concurrency",
                                                   "error_rate", "errors")} for row in rows if row["unreliable"]],
        "recommended": recommended,
        "comparison_reference": reference,
        "comparison": entries,
        "slow_instances": [e for e in entries if e["slow"]],
    }
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    charts = Charts(rows, report_dir)
    figures = [
        ("p95 latency by image size", charts.lines(
            "p95_by_image_size.png", "p95 latency, max_tokens %s" % longest, "p95 latency (s)", "p95_latency_s",
            "image_size", sizes, max_tokens=longest)),
        ("p95 latency by output length", charts.lines(
            "p95_by_max_tokens.png", "p95 latency, %s" % largest_size, "p95 latency (s)", "p95_latency_s",
            "max_tokens", tokens, image_size=largest_size)),
        ("Throughput", charts.throughput("throughput.png", "Throughput, %s" % largest_size,
                                         image_size=largest_size)),
        ("Time to first token", charts.lines(
            "ttft.png", "p95 time to first token, max_tokens %s" % longest, "p95 TTFT (s)", "p95_ttft_s",
            "image_size", sizes, max_tokens=longest)),
    ]
    if reference:
        figures.append(("Instances compared", charts.instances("instances.png", reference, entries)))
    (report_dir / "report.md").write_text(markdown(summary, figures, rows), encoding="utf-8")
    return summary


def markdown(summary, figures, rows):
    lines = [
        "# vLLM-Ascend benchmark report",
        "",
        "Generated %s for %d instance(s) on %s; %d groups. Values are the fleet median across instances."
        % (summary["generated_at"], summary["instances"], ", ".join(summary["hosts"]), summary["groups"]),
        "",
        "Latency is request sent to last byte; TTFT is sent to first content token; duration is first request "
        "sent to last finished; RPS = completed / duration; total tokens/s = (prompt + completion tokens of "
        "completed requests) / duration; percentiles interpolate linearly between closest ranks. Token counts "
        "are the server's, so prompt tokens include image tokens. Failed requests are counted, never timed.",
        "",
        "## Recommended concurrency (p95 target %gs)" % summary["latency_target_s"],
        "",
        "| image size | max_tokens | concurrency | p95 latency (s) | total tokens/s | note |",
        "|---|---|---|---|---|---|",
    ]
    for item in summary["recommended"]:
        lines.append("| %s | %s | **%s** | %s | %s | %s |" % (
            item["image_size"], item["max_tokens"], item["concurrency"], item["p95_latency_s"],
            item["total_tokens_per_s"], item["note"]))
    for title, filename in figures:
        lines += ["", "## %s" % title, "", "![%s](%s)" % (title, filename)]
    if summary["comparison"]:
        lines += ["", "| host | instance | total tokens/s | p95 latency (s) | share of median | |",
                  "|---|---|---|---|---|---|"]
        for entry in summary["comparison"]:
            lines.append("| %s | %s | %s | %s | %s | %s |" % (
                entry["host"], entry["instance"], entry["total_tokens_per_s"], entry["p95_latency_s"],
                entry["share_of_median"], "**slow**" if entry["slow"] else ""))
    if summary["unreliable_groups"]:
        lines += ["", "## Unreliable groups (error rate above the threshold)", ""]
        for group in summary["unreliable_groups"]:
            lines.append("- %(host)s %(instance)s %(image_size)s max_tokens %(max_tokens)s concurrency "
                         "%(concurrency)s: error rate %(error_rate)s, %(errors)s" % group)
    lines += ["", "Raw numbers: `results.csv` (one row per host, instance and group) and `summary.json`.", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ascend_vllm_fleet.report", description=__doc__.split("\n")[0])
    parser.add_argument("report_dir", help="folder holding raw/<host>/<instance>.jsonl")
    parser.add_argument("--latency-target", type=float, default=10.0,
                        help="p95 latency (seconds) the recommended concurrency must meet (default 10)")
    args = parser.parse_args(argv)
    summary = build(args.report_dir, args.latency_target)
    print("report: %s (%d groups, %d instance(s), %d slow)" % (
        pathlib.Path(args.report_dir) / "report.md", summary["groups"], summary["instances"],
        len(summary["slow_instances"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
