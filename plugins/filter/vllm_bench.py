"""Where an instance's benchmark files are on its host, as module_utils/bench_record.py (the one owner of those
files' format) says; the plan's lines and where the run's statuses are kept, as
plugins/plugin_utils/progress.py says.

The role's tasks and its follow step (plugins/action/vllm_bench_follow.py) use these, so they repeat neither
the file names nor the files' fields.
"""
import datetime
import pathlib
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.plugin_utils import progress

bench_record = progress.bench_record
# The UTC time a set-aside results file is named with; the find pattern of those files is made from it. No '.' in it:
# vllm_bench_expired takes what comes before the last one for the results file.
SET_ASIDE_STAMP = "%Y%m%dT%H%M%SZ"


def vllm_bench_results_file(instance, results_dir):
    """The results file of an instance (a plan entry or its name) in the results folder."""
    return bench_record.results_file(results_dir, instance["name"] if isinstance(instance, dict) else instance)


def vllm_bench_progress_file(results_file):
    return bench_record.progress_file(results_file)


def vllm_bench_plan_lines(planned):
    """One line per instance (groups, requests, estimated time) from the registered check-mode runs, then what the
    estimates are based on."""
    entries = [progress.plan_entry(result) for result in planned]
    return [progress.plan_line(entry) for entry in entries] + progress.estimate_bases(entries)


def set_aside_name(results_file, stamp):
    return "%s.%s" % (results_file, stamp)


def vllm_bench_set_aside(results_file, when):
    """Where a fresh run sets an earlier run's results file aside: its name and the time `when` (UTC), no longer
    *.jsonl, so nothing reads it as a current run's results."""
    if not isinstance(when, datetime.datetime):
        raise AnsibleFilterError("vllm_bench_set_aside: the time is %r: expected a date and time. Fix: pass "
                                 "now(utc=true)" % (when,))
    return set_aside_name(results_file, when.strftime(SET_ASIDE_STAMP))


def vllm_bench_set_aside_pattern(instance):
    """The find pattern of the results files vllm_bench_set_aside names for an instance ("*": for any), each field
    of the time a wildcard."""
    return set_aside_name(bench_record.results_file("", instance), re.sub(r"(%[A-Za-z])+", "*", SET_ASIDE_STAMP))


def vllm_bench_expired(found, keep):
    """Of the set-aside files find returned, those beyond the newest `keep` of each results file."""
    by_results = {}
    for entry in found:
        by_results.setdefault(entry["path"].rsplit(".", 1)[0], []).append(entry)
    return sorted(entry["path"] for entries in by_results.values()
                  for entry in sorted(entries, key=lambda entry: entry["mtime"], reverse=True)[int(keep):])


def vllm_bench_status_file(host, report_folder):
    """Where the follow step keeps a host's statuses in the run's report folder."""
    return str(pathlib.Path(report_folder) / progress.STATUS_FOLDER / (host + ".json"))


class FilterModule:
    def filters(self):
        return {"vllm_bench_results_file": vllm_bench_results_file,
                "vllm_bench_progress_file": vllm_bench_progress_file,
                "vllm_bench_plan_lines": vllm_bench_plan_lines,
                "vllm_bench_set_aside": vllm_bench_set_aside,
                "vllm_bench_set_aside_pattern": vllm_bench_set_aside_pattern,
                "vllm_bench_expired": vllm_bench_expired,
                "vllm_bench_status_file": vllm_bench_status_file}
