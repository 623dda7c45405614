"""The vllm_bench_follow action (plugins/action/vllm_bench_follow.py) on a progress file that is not the benchmark's,
and on a host that stops answering its polls: the task names the file or the host, what happened and what to do.
The host's files are read from this machine, as slurp would read them on the host; the whole run, with the action's
benchmark runs, is tests/local/test_bench_follow.py."""
import base64
import json
import time
import types

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.template import Templar

from ansible_collections.ascend.fleet.plugins.action import vllm_bench_follow
from ansible_collections.ascend.fleet.plugins.filter import vllm_bench
from ansible_collections.ascend.fleet.plugins.plugin_utils import progress

INSTANCE = {"name": "vllm-ascend", "port": 8000}
# What the ssh connection raises when a loaded host's sudo does not answer within the connection's timeout.
SUDO_TIMEOUT = "Timeout (32s) waiting for privilege escalation prompt: "


class LocalFollow(vllm_bench_follow.ActionModule):
    """The action with its host's files on this machine: slurp reads them here. job: what async_status answers
    (None: the action must not ask); failing_runs: how many module runs fail to reach the host before one does."""
    job = None
    failing_runs = 0

    def _remote_expand_user(self, path, sudoable=True):
        return path

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        if self.failing_runs:
            self.failing_runs -= 1
            raise AnsibleConnectionFailure(SUDO_TIMEOUT)
        if module_name == "ansible.legacy.async_status":
            assert self.job is not None, "only the progress file is read before the action gives up"
            return dict(self.job, ansible_job_id=module_args["jid"])
        assert module_name == "ansible.legacy.slurp"
        try:
            with open(module_args["src"], "rb") as handle:
                return {"content": base64.b64encode(handle.read()).decode("ascii"), "encoding": "base64"}
        except FileNotFoundError:
            return {"failed": True, "msg": "file not found: %s" % module_args["src"]}


def follow(tmp_path, status_file=True, request_timeout_s=600, job=None, unanswered=0):
    """The action's run; status_file false: none given, as a benchmark without its fleet report runs it."""
    task = Task()
    task.args = {"instances": [INSTANCE], "jobs": [{"item": INSTANCE, "ansible_job_id": "j123.456"}],
                 "plans": [{"item": INSTANCE, "planned": []}], "results_dir": str(tmp_path),
                 "request_timeout_s": request_timeout_s, "poll_interval": 0.1, "started_at": 0}
    if status_file:
        task.args["status_file"] = str(tmp_path / "status" / "npu-a.json")
    loader = DataLoader()
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir=str(tmp_path)))
    action = LocalFollow(task, connection, PlayContext(), loader, Templar(loader), None)
    action.job, action.failing_runs = job, unanswered
    return action.run(task_vars={"inventory_hostname": "npu-a"})


def write_finished_progress(tmp_path):
    """The progress file of a run that ended, as vllm_benchmark leaves it."""
    path = vllm_bench.vllm_bench_progress_file(vllm_bench.vllm_bench_results_file(INSTANCE, str(tmp_path)))
    with open(path, "w") as handle:
        json.dump({"updated_at": time.time(), "finished": True, "groups_done": 0, "groups_total": 0}, handle)


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


def test_polls_that_do_not_reach_the_host_are_tried_again_and_the_run_ends_as_its_job_did(tmp_path, capsys):
    write_finished_progress(tmp_path)
    result = follow(tmp_path, job={"finished": 1, "changed": True}, unanswered=3)
    assert not result.get("failed") and not result.get("unreachable"), result
    said = capsys.readouterr()
    warned = said.err + said.out
    assert warned.count("[npu-a] the host did not answer a poll") == 1, warned
    assert SUDO_TIMEOUT.strip() in warned and "the next poll tries again" in warned
    assert "[npu-a] the host answers again after" in said.out


def test_a_host_that_answers_no_poll_for_longer_than_a_run_may_be_silent_ends_unreachable(tmp_path, monkeypatch):
    monkeypatch.setattr(progress.bench_record, "STALL_MARGIN_S", 0)
    started = time.time()
    result = follow(tmp_path, request_timeout_s=0.3, unanswered=10 ** 6)
    assert time.time() - started < 30, "the action gave up at its bound, not at the test's"
    assert result["unreachable"] is True
    for piece in ("npu-a answered no poll for", SUDO_TIMEOUT.strip(), "vllm-ascend (job j123.456) was left running",
                  "Fix: ", "async_status", "-e vllm_bench_resume=true"):
        assert piece in result["msg"], result["msg"]
    status = json.loads((tmp_path / "status" / "npu-a.json").read_text())["instances"][0]
    assert status["phase"] == "failed" and status["error"] == result["msg"]

