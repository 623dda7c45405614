# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark record: what one group of a benchmark measured, what each number means, and the two files a
run keeps on its host.

A group is one image size, one max_tokens and one concurrency, measured with a number of requests. The
vllm_benchmark module writes the records and the progress; the vllm_bench role and the ascend-vllm-fleet command
follow the progress; the report reads the records. Standard library only and Python 3.8, because it runs on
the hosts as well as on the controller.

The results file (``<instance>.jsonl``) holds one JSON line per finished group, written and flushed when the
group ends, and a line for each answer check asked before and after the matrix (``answer_check``: before or
after, with the verdict of module_utils/answer_check.py). Resumed runs append, so a later line of a group
replaces an earlier one. A line cut by a crash mid-write is skipped (and counted) when read, and the next append
starts on a line of its own.

A run that its new-group deadline stopped (vllm_benchmark's new_group_deadline_s) adds a line ``deadline``: the
deadline (new_group_deadline_s), the seconds from its first group's start to the stop (elapsed_s), the groups of its
matrix (groups_total), those it did not run (not_run, each GROUP_FIELDS) and when it stopped (stopped_at, Unix time).

The progress file (``<results file>.progress.json``) is replaced whole while the run goes, at most every
PROGRESS_EVERY_S seconds while a group's requests run (also while none ends: long streams), and at
once before each warm-up request, when a group starts and when the run
ends, and before each question of an answer check. Its fields: group (the group running, GROUP_FIELDS),
group_number, groups_total, groups_done, requests_done, requests_total (of the running group), answer_check
(before or after: the answer check asking now, when no group runs), finished (true once the run ended,
failed or not), error (why it failed), deadline (the results file's deadline line, when the run's new-group
deadline stopped it) and updated_at (Unix time of the write).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import errno
import fcntl
import json
import math
import os
import threading
import time

# A group's identity: the results file keeps one record per value of these.
GROUP_FIELDS = ("image_size", "max_tokens", "concurrency")

Field = collections.namedtuple("Field", "name unit definition")

# Every field of a record, in the order of the results table. The definitions follow vLLM's
# `vllm bench serve` (vllm/benchmarks/serve.py: BenchmarkMetrics, calculate_metrics).
FIELDS = (
    Field("image_size", "pixels", "WIDTHxHEIGHT of the image in every request"),
    Field("max_tokens", "tokens", "max_tokens of every request (with ignore_eos, the length of every answer)"),
    Field("concurrency", "requests", "requests kept in flight: a closed loop, each of this many workers sends its "
          "next request when its last one ended"),
    Field("requests", "requests", "requests sent (warm-up excluded)"),
    Field("completed", "requests", "requests answered in full, with the server's usage"),
    Field("failed", "requests", "requests that got an HTTP error, a refused or reset connection, a timeout, a cut "
          "stream, no usage, an error event or a stream of no chat completion chunks"),
    Field("error_rate", "share", "failed / requests"),
    Field("errors", "requests", "failed requests by kind (http_500, timeout, connection_reset, stream_error, "
          "malformed_stream, ...)"),
    Field("duration_s", "s", "first request sent to last request finished"),
    Field("rps", "requests/s", "completed / duration"),
    Field("avg_latency_s", "s", "mean latency: request sent to last byte received"),
    Field("p50_latency_s", "s", "median latency"),
    Field("p95_latency_s", "s", "95th percentile of latency"),
    Field("p99_latency_s", "s", "99th percentile of latency"),
    Field("avg_ttft_s", "s", "mean time to first token (TTFT): request sent to first content token received"),
    Field("p50_ttft_s", "s", "median TTFT"),
    Field("p95_ttft_s", "s", "95th percentile of TTFT"),
    Field("p99_ttft_s", "s", "99th percentile of TTFT"),
    Field("avg_tpot_s", "s", "mean time per output token (TPOT): (latency - TTFT) / (completion tokens - 1), over "
          "requests with more than one token"),
    Field("p95_tpot_s", "s", "95th percentile of TPOT"),
    Field("total_tokens_per_s", "tokens/s", "(prompt + completion tokens of completed requests) / duration"),
    Field("output_tokens_per_s", "tokens/s", "completion tokens of completed requests / duration"),
    Field("avg_prompt_tokens", "tokens", "prompt tokens per completed request, the image's tokens included"),
    Field("avg_completion_tokens", "tokens", "completion tokens per completed request"),
    Field("total_prompt_tokens", "tokens", "prompt tokens of the completed requests"),
    Field("total_completion_tokens", "tokens", "completion tokens of the completed requests"),
    Field("max_in_flight", "requests", "most requests open at one time (a closed loop at concurrency N reaches N)"),
    Field("unreliable", "", "error rate above the run's threshold: run again on resume, left out of fleet medians"),
    Field("finished_at", "Unix time", "when the group finished"),
)
FIELD_NAMES = tuple(field.name for field in FIELDS)
# What holds for every field above.
NOTES = (
    "Latency, TTFT and TPOT are measured over completed requests; failed requests are counted by kind, never "
    "timed.",
    "Percentiles interpolate linearly between closest ranks (numpy's default).",
    "Token counts are the server's own (the usage block of a stream with stream_options.include_usage), so "
    "prompt tokens include the image tokens.",
    "The definitions follow those of vLLM's vllm bench serve (BenchmarkMetrics, calculate_metrics).",
)
# The p95 latency a recommended concurrency must stay under, unless the operator says otherwise.
LATENCY_TARGET_S = 10.0

RESULTS_SUFFIX = ".jsonl"
PROGRESS_SUFFIX = ".progress.json"
PROGRESS_EVERY_S = 2.0
# A record is a few kB: a longer line is no record, and is skipped unread.
MAX_LINE_CHARS = 1 << 20
UNIX_TIME_MAX = 32503680000  # 3000-01-01T00:00:00Z
# The progress file changes every PROGRESS_EVERY_S while a group runs, and before each question or warm-up
# request, none of which waits longer than request_timeout_s for a byte; a file left unchanged this much longer
# than that belongs to a run that was killed (or whose host went down).
STALL_MARGIN_S = 60


def group_key(record):
    """The identity of a record's group (or of a group of the matrix): GROUP_FIELDS' values."""
    return tuple(record[name] for name in GROUP_FIELDS)


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default method); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values):
    return sum(values) / len(values) if values else None


def max_in_flight(results):
    """Most requests open at one time; one that ends the moment another starts does not overlap it."""
    edges = []
    for result in results:
        edges.append((result.sent, 1))
        edges.append((result.finished if result.finished is not None else result.sent, -1))
    peak = current = 0
    for _moment, step in sorted(edges):
        current += step
        peak = max(peak, current)
    return peak


def _rounded(value, digits=4):
    return None if value is None else round(value, digits)


def timings(results):
    """(the completed requests, {latency, ttft, tpot: their values in seconds}) of requests' results, as FIELDS
    define them.

    results: objects with sent, first_token and finished (time.monotonic() seconds), prompt_tokens,
    completion_tokens and error (None for a completed request), as openai_client.StreamResult.
    """
    done = [r for r in results if r.error is None]
    return done, {
        "latency": [r.finished - r.sent for r in done],
        "ttft": [r.first_token - r.sent for r in done if r.first_token is not None],
        "tpot": [(r.finished - r.first_token) / (r.completion_tokens - 1) for r in done
                 if r.first_token is not None and r.completion_tokens and r.completion_tokens > 1]}


def summarise(group, results, error_threshold):
    """The record of a group (a dict with GROUP_FIELDS) from its requests' results (as timings takes them)."""
    done, measures = timings(results)
    errors = {}
    for result in results:
        if result.error is not None:
            errors[result.error] = errors.get(result.error, 0) + 1
    start = min(r.sent for r in results) if results else 0.0
    end = max((r.finished for r in results if r.finished is not None), default=start)
    duration = end - start
    latency, ttft, tpot = measures["latency"], measures["ttft"], measures["tpot"]
    prompt = sum(r.prompt_tokens for r in done)
    completion = sum(r.completion_tokens for r in done)
    error_rate = _rounded((len(results) - len(done)) / float(len(results))) if results else 0.0

    def per_second(amount):
        return _rounded(amount / duration if duration > 0 else None, 2)

    record = {name: group[name] for name in GROUP_FIELDS}
    record.update({
        "requests": len(results),
        "completed": len(done),
        "failed": len(results) - len(done),
        "error_rate": error_rate,
        "errors": errors,
        "duration_s": _rounded(duration),
        "rps": _rounded(len(done) / duration if duration > 0 else None),
        "avg_latency_s": _rounded(mean(latency)),
        "p50_latency_s": _rounded(percentile(latency, 50)),
        "p95_latency_s": _rounded(percentile(latency, 95)),
        "p99_latency_s": _rounded(percentile(latency, 99)),
        "avg_ttft_s": _rounded(mean(ttft)),
        "p50_ttft_s": _rounded(percentile(ttft, 50)),
        "p95_ttft_s": _rounded(percentile(ttft, 95)),
        "p99_ttft_s": _rounded(percentile(ttft, 99)),
        "avg_tpot_s": _rounded(mean(tpot), 5),
        "p95_tpot_s": _rounded(percentile(tpot, 95), 5),
        "total_tokens_per_s": per_second(prompt + completion),
        "output_tokens_per_s": per_second(completion),
        "avg_prompt_tokens": _rounded(prompt / float(len(done)) if done else None, 2),
        "avg_completion_tokens": _rounded(completion / float(len(done)) if done else None, 2),
        "total_prompt_tokens": prompt,
        "total_completion_tokens": completion,
        "max_in_flight": max_in_flight(results),
        "unreliable": error_rate > error_threshold,
        "finished_at": time.time(),
    })
    return record


def measured(record):
    """A record whose figures count: not unreliable, and with a throughput measured."""
    return not record.get("unreliable") and record.get("output_tokens_per_s") is not None


def summary(records):
    """A run's key figures for each image size and output length, in the order the matrix ran them: the peak output
    throughput, the concurrency it was reached at and its p95 latency, and the p95 latency and TTFT of one user
    (the lowest concurrency measured). Unreliable groups are left out; a size and length with none has no line."""
    lines = {}
    for record in records:
        if measured(record):
            lines.setdefault((record["image_size"], record["max_tokens"]), []).append(record)
    figures = []
    for (image_size, max_tokens), rows in lines.items():
        peak = max(rows, key=lambda row: row["output_tokens_per_s"])
        alone = min(rows, key=lambda row: row["concurrency"])
        figures.append({
            "image_size": image_size, "max_tokens": max_tokens, "groups": len(rows),
            "peak_output_tokens_per_s": peak["output_tokens_per_s"], "peak_concurrency": peak["concurrency"],
            "peak_p95_latency_s": peak["p95_latency_s"], "lowest_concurrency": alone["concurrency"],
            "lowest_concurrency_p95_latency_s": alone["p95_latency_s"],
            "lowest_concurrency_p95_ttft_s": alone["p95_ttft_s"]})
    return figures


def results_file(folder, instance):
    """Where an instance's records are kept on its host."""
    return os.path.join(folder, instance + RESULTS_SUFFIX)


def progress_file(results_path):
    return results_path + PROGRESS_SUFFIX


def instance_name(path):
    """The instance a results file or its progress file belongs to."""
    name = os.path.basename(str(path))
    for suffix in (PROGRESS_SUFFIX, RESULTS_SUFFIX):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    return name


def answer_check_record(when, verdict):
    """The line of a results file that keeps an answer check's verdict (module_utils/answer_check.py), asked
    before or after the matrix."""
    return dict(verdict, answer_check=when, checked_at=time.time())


def answers_verdict(checks):
    """failed when any answer check of an instance failed, passed when some were asked and all passed, else
    "not checked"."""
    if any(check.get("passed") is not True for check in checks):
        return "failed"
    return "passed" if checks else "not checked"


def is_answer_check(line):
    return isinstance(line, dict) and line.get("answer_check") in ("before", "after")


def read_lines(path):
    """(the JSON value of every line, lines that are no JSON) of a results file; no file: none. Bytes that are
    not UTF-8 read as U+FFFD; a line longer than MAX_LINE_CHARS, or nested too deep for the parser, is no JSON."""
    values, skipped = [], 0
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], 0
    with handle:
        while True:
            line = handle.readline(MAX_LINE_CHARS + 1)
            if not line:
                break
            if len(line) > MAX_LINE_CHARS:
                skipped += 1
                while line and not line.endswith("\n"):  # the rest of the long line
                    line = handle.readline(MAX_LINE_CHARS)
                continue
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except (ValueError, RecursionError):
                skipped += 1
    return values, skipped


def is_probe(line):
    """A record of a capacity search's probe (module_utils/capacity_search.py), not of a group of the matrix."""
    return isinstance(line, dict) and isinstance(line.get("probe"), dict)


def read_results(path):
    """(records, skipped lines) of a results file: one record per group, the last one written, in the order the
    groups first appear; lines that hold no record (cut mid-write, or anything else) are skipped, answer checks
    left to read_answer_checks, a capacity search's probes and findings to read_probes and read_capacities, a
    deadline line to read_deadline. No file: no records."""
    records = {}
    values, skipped = read_lines(path)
    for value in values:
        if is_answer_check(value) or is_probe(value) or is_capacity(value) or is_deadline(value):
            continue
        try:
            records[group_key(value)] = value
        except (KeyError, TypeError):  # TypeError: no object, or a group value such as a list
            skipped += 1
    return list(records.values()), skipped


# What an operator does about it, with the role's names: the module's new_group_deadline_s is the role's
# vllm_bench_new_group_deadline_s.
DEADLINE_FIX = ("Fix: raise vllm_bench_new_group_deadline_s (new_group_deadline_s; 0 for none), then rerun with "
                "-e vllm_bench_resume=true, which runs only the groups not recorded")


def is_deadline(line):
    """The line a run leaves when its new-group deadline stopped it (this module's docstring)."""
    return isinstance(line, dict) and isinstance(line.get("deadline"), dict)


def read_deadline(path):
    """The deadline line of the last run of a results file that its new-group deadline stopped, or None. A later
    run (a resume) may have run the groups it names since."""
    found = [value["deadline"] for value in read_lines(path)[0] if is_deadline(value)]
    return found[-1] if found else None


def group_label(group):
    return "%s, max_tokens %s, concurrency %s" % group_key(group)


def deadline_text(deadline, shown=3):
    """What a run its new-group deadline stopped left out, naming the first `shown` groups (None: all), and the fix:
    a deadline line whose not_run holds the groups still not run."""
    not_run = deadline["not_run"]
    named = not_run if shown is None else not_run[:shown]
    return "new_group_deadline_s (%g s) stopped the run %.0f s after its first group started: %d of its %d groups " \
           "%s not run (%s%s). %s" % (
               deadline["new_group_deadline_s"], deadline["elapsed_s"], len(not_run), deadline["groups_total"],
               "was" if len(not_run) == 1 else "were", "; ".join(group_label(group) for group in named),
               "; and %d more" % (len(not_run) - len(named)) if len(not_run) > len(named) else "", DEADLINE_FIX)


def is_capacity(line):
    """What a capacity search found for one image size and output length (vllm_benchmark's capacity records)."""
    return isinstance(line, dict) and isinstance(line.get("capacity"), dict)


def read_capacities(path):
    """The capacities a results file keeps, one per image size and output length (the last one written), in the
    order first found."""
    found = {}
    for value in read_lines(path)[0]:
        if is_capacity(value):
            capacity = value["capacity"]
            found[(capacity.get("image_size"), capacity.get("max_tokens"))] = capacity
    return list(found.values())


def read_probes(path):
    """The probes of capacity searches a results file keeps, in the order they were written."""
    return [value for value in read_lines(path)[0] if is_probe(value)]


def read_answer_checks(path):
    """The answer checks a results file keeps, in the order they were asked."""
    return [value for value in read_lines(path)[0] if is_answer_check(value)]


def _make_folder_of(path):
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        os.makedirs(folder)


class ResultsBusy(Exception):
    """Another run of the benchmark writes the results file; the message names it."""


def hold_results(path, hold=True):
    """One run at a time writes a results file: an exclusive lock on <results>.lock, which the kernel lets go when
    the process ends, however it ends (no lock outlives its run). With hold, the open lock file is returned (keep
    it open for the run) and names this run; without, the lock is only tried and let go, and nothing is written.
    ResultsBusy when another run holds it."""
    lock_path = path + ".lock"
    if not hold and not os.path.exists(lock_path):
        return None  # a run that held it would have made it: only trying writes nothing (check mode)
    _make_folder_of(lock_path)
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = os.read(descriptor, 4096).decode("utf-8", "replace")
        os.close(descriptor)
        if error.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        try:
            run = json.loads(holder)
            started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(run["started_at"]))
            who = "pid %s, started %s" % (run["pid"], started)
        except (ValueError, KeyError, TypeError, OverflowError):
            who, run = "its process unnamed", {"pid": "<pid>"}
        raise ResultsBusy("results_file %s is being written by another run of the benchmark (%s). Fix: wait for "
                          "that run to end (the ascend-vllm-fleet command's live view shows it), or stop it (kill %s "
                          "on this host), then run again" % (path, who, run.get("pid"))) from None
    if not hold:
        os.close(descriptor)
        return None
    os.ftruncate(descriptor, 0)
    os.write(descriptor, json.dumps({"pid": os.getpid(), "started_at": time.time()}).encode())
    return descriptor


def append_result(path, record):
    """Add a group's record to the results file, on disk before this returns."""
    _make_folder_of(path)
    line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell():
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                line = b"\n" + line  # after a line cut mid-write, which must not swallow this record
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


class ProgressWriter:
    """The progress file of a results file; with no results file, nothing is written."""

    def __init__(self, results_path):
        self.path = progress_file(results_path) if results_path else None
        self.lock = threading.Lock()  # the load test's workers and its heartbeat write it
        self.written = None
        self.error = None  # why the last write failed, None once one succeeds

    def update(self, state, force=False):
        """Write state (the fields in this file's docstring but updated_at), at most every PROGRESS_EVERY_S
        unless forced. A write that fails (a full disk) is tried again at the next update, and never stops the
        run: the progress only tells how far it is, the results file keeps what it measured."""
        with self.lock:
            now = time.monotonic()
            if not self.path or (not force and self.written is not None and now - self.written < PROGRESS_EVERY_S):
                return
            self.written = now
            temporary = self.path + ".tmp"
            try:
                _make_folder_of(self.path)
                with open(temporary, "w") as handle:
                    json.dump(dict(state, updated_at=time.time()), handle, sort_keys=True)
                os.replace(temporary, self.path)
                self.error = None
            except OSError as error:
                self.error = "%s: %s" % (self.path, error.strerror or error)

    def finish(self, groups_done, groups_total, error=None, deadline=None):
        """The run ended: failed (error, why), or stopped by its new-group deadline (deadline, its deadline line)."""
        state = {"finished": True, "groups_done": groups_done, "groups_total": groups_total}
        if error is not None:
            state["error"] = error
        if deadline is not None:
            state["deadline"] = deadline
        self.update(state, force=True)


def read_progress(text):
    """The progress in a progress file's text; ValueError when it is not one."""
    try:
        progress = json.loads(text[:MAX_LINE_CHARS + 1])
    except RecursionError:
        raise ValueError("not a benchmark progress file: JSON nested too deep") from None
    if not isinstance(progress, dict) or not is_time(progress.get("updated_at")):
        raise ValueError("not a benchmark progress file: %s" % str(text)[:200])
    return progress


def is_time(value):
    """A Unix time a run could have written: a finite number of seconds, not before 1970 nor after 3000 (JSON's
    Infinity and NaN, or 1e22, would make a run that stopped look alive for ever)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < UNIX_TIME_MAX


def run_ended(progress, request_timeout_s, waited_s=0, now=None):
    """Whether a run is over: it says so, or its progress stopped changing for longer than a request may take
    (killed). progress None (no file yet): over once waited_s passes that too, a run that never started."""
    limit = float(request_timeout_s) + STALL_MARGIN_S
    if progress is None:
        return waited_s > limit
    if progress.get("finished"):
        return True
    return (time.time() if now is None else now) - progress["updated_at"] > limit
