"""module_utils/deadline.py: each wait gets what is left of one deadline, and a wait it cut names itself; with
run_docker (module_utils/docker_cli.py), a Docker CLI that hangs is stopped at the deadline, not at its own cap."""
import time

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker


def test_a_wait_gets_what_is_left_at_most_its_own_cap():
    deadline = Deadline(30)
    assert deadline.allow("GET /health", 5) == 5
    assert 29 < deadline.allow("a long answer", 300) <= 30
    assert 29 < deadline.allow("anything") <= 30


def test_once_it_passed_no_wait_is_allowed_and_the_refusal_names_the_wait_and_the_time():
    deadline = Deadline(0.05)
    time.sleep(0.06)
    assert deadline.passed() and deadline.left() == 0
    with pytest.raises(DeadlinePassed) as passed:
        deadline.allow("`docker inspect -- vllm-ascend`", 120)
    assert passed.value.waiting_on == "`docker inspect -- vllm-ascend`"
    assert str(passed.value) == ("no end within 0.05s: the time ran out while waiting for `docker inspect -- "
                                 "vllm-ascend`")


def test_an_earlier_deadline_keeps_time_for_what_follows_and_never_lies_in_the_past():
    deadline = Deadline(10)
    earlier = deadline.before(4)
    assert 5.5 < earlier.left() <= 6 and earlier.seconds == 10
    assert deadline.before(60).passed(), "less is left than the share kept: the waits end now"


def test_a_pause_between_polls_ends_at_the_deadline():
    deadline = Deadline(0.2)
    started = time.monotonic()
    deadline.sleep(5)
    assert time.monotonic() - started < 1


def test_a_docker_call_that_hangs_is_stopped_at_the_deadline_and_named(tmp_path):
    hung = tmp_path / "docker"
    hung.write_text("#!/bin/sh\nexec sleep 20\n")
    hung.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(DeadlinePassed) as passed:
        run_docker(str(hung), "inspect", "--", "vllm-ascend", deadline=Deadline(1))
    assert time.monotonic() - started < 5
    assert passed.value.waiting_on == "`%s inspect -- vllm-ascend`" % hung
    code, _out, err = run_docker(str(hung), "inspect", "--", "vllm-ascend", timeout=1, deadline=Deadline(30))
    assert (code, err) == (None, "no end after 1s: stopped (timeout)"), "its own cap came first: no deadline passed"
