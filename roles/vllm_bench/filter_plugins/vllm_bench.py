"""Where an instance's benchmark files are on its host, and whether its run is over, as module_utils/bench_record.py
(the one owner of those files' format) says.

The role's tasks template file paths and poll the progress file; these filters keep them from repeating the
file names or the progress file's fields.
"""
import base64
import pathlib
import sys

# On a controller that installed only requirements.txt, the package is importable from this repository.
REPO = str(pathlib.Path(__file__).resolve().parents[3])
if REPO not in sys.path:
    sys.path.append(REPO)

from ascend_vllm_fleet.host_code import load_module_util  # noqa: E402

bench_record = load_module_util("bench_record")


def vllm_bench_results_file(instance, results_dir):
    """The results file of an instance (a plan entry or its name) in the results folder."""
    return bench_record.results_file(results_dir, instance["name"] if isinstance(instance, dict) else instance)


def vllm_bench_progress_file(results_file):
    return bench_record.progress_file(results_file)


def vllm_bench_run_ended(poll, request_timeout_s, poll_interval_s):
    """Whether to stop polling: poll is a registered slurp of the progress file, retried every poll_interval_s."""
    progress = None
    if "content" in poll:
        progress = bench_record.read_progress(base64.b64decode(poll["content"]))
    waited = poll.get("attempts", 1) * float(poll_interval_s)
    return bench_record.run_ended(progress, request_timeout_s, waited_s=waited)


class FilterModule:
    def filters(self):
        return {"vllm_bench_results_file": vllm_bench_results_file,
                "vllm_bench_progress_file": vllm_bench_progress_file,
                "vllm_bench_run_ended": vllm_bench_run_ended}
