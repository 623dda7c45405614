"""The vllm_bench_follow action (plugins/action/vllm_bench_follow.py) on a progress file that is not the benchmark's:
the task fails naming the file, what it should hold and what to do. The host's files are read from this machine,
as slurp would read them on the host; the whole run, with the action's benchmark runs, is tests/local/
test_bench_follow.py."""
import base64
import json
import types

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.ascend.fleet.plugins.action import vllm_bench_follow
from ansible_collections.ascend.fleet.plugins.filter import vllm_bench

INSTANCE = {"name": "vllm-ascend", "port": 8000}


class LocalFollow(vllm_bench_follow.ActionModule):
    """The action with its host's files on this machine: slurp reads them here."""

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        assert module_name == "ansible.legacy.slurp", "only the progress file is read before the action gives up"
        try:
            with open(module_args["src"], "rb") as handle:
                return {"content": base64.b64encode(handle.read()).decode("ascii"), "encoding": "base64"}
        except FileNotFoundError:
            return {"failed": True, "msg": "file not found: %s" % module_args["src"]}


def follow(tmp_path, status_file=True):
    """The action's run; status_file false: none given, as a benchmark without its fleet report runs it."""
    task = Task()
    task.args = {"instances": [INSTANCE], "jobs": [{"item": INSTANCE, "ansible_job_id": "j123.456"}],
                 "plans": [{"item": INSTANCE, "planned": []}], "results_dir": str(tmp_path), "request_timeout_s": 600,
                 "poll_interval": 0.1, "started_at": 0}
    if status_file:
        task.args["status_file"] = str(tmp_path / "status" / "npu-a.json")
    loader = DataLoader()
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir=str(tmp_path)))
    action = LocalFollow(task, connection, PlayContext(), loader, Templar(loader), None)
    return action.run(task_vars={"inventory_hostname": "npu-a"})


@pytest.mark.parametrize("content", [b"<html>502 Bad Gateway</html>", b"", b"[1, 2]", b'{"finished": true}',
                                     b"\xff\xfe\x00"],
                         ids=["not JSON", "empty", "a list", "no updated_at", "not UTF-8"])
def test_a_progress_file_that_is_not_the_benchmarks_is_named_with_what_to_do(tmp_path, content):
    progress_file = vllm_bench.vllm_bench_progress_file(vllm_bench.vllm_bench_results_file(INSTANCE, str(tmp_path)))
    with open(progress_file, "wb") as handle:
        handle.write(content)
    result = follow(tmp_path)
    assert result["failed"] is True
    for piece in ("benchmark on npu-a: vllm-ascend: its progress file %s is not the benchmark's" % progress_file,
                  "expected the JSON object vllm_benchmark writes there", "Fix: ", "vllm_bench_resume=true",
                  "j123.456"):
        assert piece in result["msg"], result["msg"]
    status = json.loads((tmp_path / "status" / "npu-a.json").read_text())["instances"][0]
    assert status["phase"] == "failed" and status["error"] in result["msg"]


def test_without_a_status_file_the_action_keeps_no_statuses_and_fails_as_it_does_with_one(tmp_path):
    progress_file = vllm_bench.vllm_bench_progress_file(vllm_bench.vllm_bench_results_file(INSTANCE, str(tmp_path)))
    with open(progress_file, "wb") as handle:
        handle.write(b"[1, 2]")
    result = follow(tmp_path, status_file=False)
    assert result["failed"] is True and "its progress file %s is not the benchmark's" % progress_file in result["msg"]
    assert result["instances"][0]["phase"] == "failed"
    assert sorted(path.name for path in tmp_path.iterdir()) == [progress_file.rsplit("/", 1)[1]]


def test_a_run_its_time_limit_killed_fails_the_task_with_the_group_and_the_setting():
    killed = types.SimpleNamespace(result={"failed": True, "msg": "Timeout exceeded"}, status={
        "group": {"image_size": "1280x720", "max_tokens": 32, "concurrency": 8}, "group_number": 3,
        "groups_total": 12, "groups_done": 2})
    said = vllm_bench_follow.failure_text(killed)
    assert "vllm_bench_run_timeout_s" in said and "group 3/12 (1280x720" in said and "Timeout exceeded" not in said
    other = types.SimpleNamespace(result={"failed": True, "msg": "no async job was started for it"}, status={})
    assert vllm_bench_follow.failure_text(other) == "no async job was started for it"
