"""library/host_lock.py and its action (plugins/action/host_lock.py): one run at a time holds a host's lock; a
second run is refused with the holder's name and age, and nothing of the first run's lock changes; the holder
itself takes it again without change and alone lets it go; a lock a run of this controller left when its process
ended is taken over, as is one past stale_after_s or with break_lock; a file that is no lock is named."""
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import pytest
from module_runs import assert_refused, run_module

from ansible_collections.ascend.fleet.plugins.action import host_lock as action


def run(lock, run_id, check_mode=False, **args):
    args.setdefault("path", str(lock))
    args["run"] = {"id": run_id, "controller": "ops-01", "user": "ops", "pid": 4242, "play": "Deploy vLLM-Ascend"}
    if check_mode:
        args["_ansible_check_mode"] = True
    return run_module("host_lock", **args)


@pytest.fixture
def lock(tmp_path):
    return tmp_path / "var/lib/ascend-fleet/lock"


def test_a_second_run_is_refused_naming_the_holder_and_its_age_and_the_holder_goes_on(lock):
    first = run(lock, "ops-01:4242:100")
    assert first["holder"]["id"] == "ops-01:4242:100" and lock.exists()
    held = lock.read_text()
    second = run(lock, "ops-02:777:200")
    assert_refused(second, "being changed by another run: ops-01:4242:100", "Deploy vLLM-Ascend", "ops@ops-01",
                   "pid 4242", "holding it for", "fleet_lock_break=true", str(lock))
    assert second["holder"]["id"] == "ops-01:4242:100" and second["holder"]["held_s"] >= 0
    assert lock.read_text() == held
    again = run(lock, "ops-01:4242:100")
    assert again.get("failed") is not True and again["changed"] is False
    assert run(lock, "ops-02:777:200", state="absent")["changed"] is False, "only the holder lets it go"
    assert lock.read_text() == held
    assert run(lock, "ops-01:4242:100", state="absent")["changed"] is True
    assert not lock.exists() and not lock.parent.exists(), "the folder made for it goes with it"
    assert run(lock, "ops-02:777:200").get("failed") is not True


@pytest.mark.parametrize("args", [{"take_over_from": "ops-01:4242:100"}, {"break_lock": True},
                                  {"stale_after_s": 1}], ids=["ended run", "break", "stale"])
def test_a_lock_is_taken_over_from_a_run_known_to_be_over_with_a_warning(lock, args):
    run(lock, "ops-01:4242:100")
    if args.get("stale_after_s"):
        holder = json.loads(lock.read_text())
        lock.write_text(json.dumps(dict(holder, acquired_at=time.time() - 3600)))
    taken = run(lock, "ops-02:777:200", **args)
    assert taken.get("failed") is not True, taken
    assert taken["taken_over"]["id"] == "ops-01:4242:100" and json.loads(lock.read_text())["id"] == "ops-02:777:200"
    assert "took over the lock" in json.dumps(taken["warnings"])


def test_a_check_run_takes_nothing_and_is_still_refused(lock):
    assert run(lock, "ops-01:4242:100", check_mode=True)["changed"] is True and not lock.exists()
    run(lock, "ops-01:4242:100")
    assert run(lock, "ops-02:777:200", check_mode=True)["failed"] is True


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b'{"id": "x", "acquired_at": "yesterday"}',
                                     b"\xff\xfe", b"[" * 100000],
                         ids=["empty", "not JSON", "a list", "no time", "not UTF-8", "deeply nested"])
def test_a_file_that_is_no_lock_is_named_and_left(lock, content):
    lock.parent.mkdir(parents=True)
    lock.write_bytes(content)
    assert_refused(run(lock, "ops-01:4242:100"), "holds no run", "fleet_lock_break=true")
    assert lock.read_bytes() == content
    assert run(lock, "ops-01:4242:100", break_lock=True).get("failed") is not True


def test_an_action_names_the_run_by_its_process_and_knows_when_it_ended():
    """A run is its ansible-playbook process (here a child's: the action runs in a worker, whose parent it is)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        holder = {"id": "%s:%d:%s" % ("ops-01", child.pid, action.process_start(child.pid)), "controller": "ops-01",
                  "pid": child.pid}
        assert action.process_start(child.pid) != ""
        assert not action.ended_here(holder, "ops-01"), "its process still runs"
        assert not action.ended_here(holder, "ops-02"), "another controller's: nothing known here"
    finally:
        child.kill()
        child.wait()
    assert action.ended_here(holder, "ops-01"), "its process is gone"
    reused = dict(holder, id="ops-01:%d:1" % os.getpid(), pid=os.getpid())
    assert action.ended_here(reused, "ops-01"), "its process id now names another process"
    run_now = action.this_run("Deploy vLLM-Ascend")
    assert run_now["pid"] == os.getppid() and run_now["id"].startswith(run_now["controller"] + ":")


def test_of_runs_taking_over_one_stale_lock_at_once_exactly_one_gets_it(lock):
    run(lock, "ops-01:4242:100")
    holder = json.loads(lock.read_text())
    lock.write_text(json.dumps(dict(holder, acquired_at=time.time() - 3600)))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda number: run(lock, "ops-0%d:%d:1" % (number, number), stale_after_s=60),
                                range(2, 6)))
    winners = [result["holder"]["id"] for result in results if not result.get("failed")]
    assert len(winners) == 1 and json.loads(lock.read_text())["id"] == winners[0], results
