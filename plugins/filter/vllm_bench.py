"""Where an instance's benchmark files are on its host, as module_utils/bench_record.py (the one owner of those
files' format) says; the plan's lines and where the run's statuses are kept, as
plugins/plugin_utils/progress.py says.

The role's tasks and its follow step (plugins/action/vllm_bench_follow.py) use these, so they repeat neither
the file names nor the files' fields.
"""
import pathlib

from ansible_collections.ascend.fleet.plugins.plugin_utils import progress

bench_record = progress.bench_record


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


def vllm_bench_set_aside(results_file, stamp):
    """Where a fresh run sets an earlier run's results file aside: its name and the time, no longer *.jsonl, so
    nothing reads it as a current run's results."""
    return "%s.%s" % (results_file, stamp)


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
                "vllm_bench_expired": vllm_bench_expired,
                "vllm_bench_status_file": vllm_bench_status_file}
