"""plugins/plugin_utils/progress.py: an instance's phase, group, errors, elapsed time and ETA, from its files and the
load-test module's estimate, and the lines they read as."""
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import load_test
from ansible_collections.ascend.fleet.plugins.plugin_utils import progress

# The quick preset's shape, smaller: 1 image size x 2 output lengths x 2 concurrency levels, as the load-test
# module's check mode plans it (its result's `planned`).
MATRIX = {"image_sizes": ["640x480"], "max_tokens": [32, 8], "concurrency": [1, 4], "requests_per_group": 4}
PLANNED = load_test.planned_groups(dict(MATRIX, estimate_seconds_per_token=0.09))
ESTIMATE_S = 100.0


def group(max_tokens, concurrency):
    return {"image_size": "640x480", "max_tokens": max_tokens, "concurrency": concurrency}


def record(max_tokens, concurrency, failed=0, finished_at=1000.0, unreliable=False):
    return dict(group(max_tokens, concurrency), failed=failed, finished_at=finished_at, unreliable=unreliable)


def running(number, max_tokens, concurrency, done, total=4):
    return {"group": group(max_tokens, concurrency), "group_number": number, "groups_total": 4,
            "groups_done": number - 1, "requests_done": done, "requests_total": total, "updated_at": 1.0}


def test_shares_follow_the_modules_own_estimate_of_each_group():
    from ansible_collections.ascend.fleet.plugins.module_utils import load_test
    params = dict(MATRIX, estimate_seconds_per_token=0.09)
    expected = [load_test.estimate_seconds([g], params) for g in load_test.plan(params)]
    shares = progress.group_shares(PLANNED)
    assert [key for key, _share in shares] == [("640x480", 32, 1), ("640x480", 32, 4), ("640x480", 8, 1),
                                               ("640x480", 8, 4)]
    assert [share for _key, share in shares] == pytest.approx([value / sum(expected) for value in expected])


def test_before_any_request_finished_the_eta_is_the_modules_estimate():
    shares = progress.group_shares(PLANNED)
    starting = progress.instance_status("vllm-ascend", None, [], set(), shares, ESTIMATE_S, 3.0)
    assert starting["phase"] == progress.STARTING and starting["eta_s"] == ESTIMATE_S
    first = progress.instance_status("vllm-ascend", running(1, 32, 1, 0), [], set(), shares, ESTIMATE_S, 5.0)
    assert first["phase"] == progress.MEASURING and first["eta_s"] == ESTIMATE_S


def test_the_eta_follows_the_measured_pace():
    shares = progress.group_shares(PLANNED)
    first_share = shares[0][1]
    # Half of the first group took 10 s: the run goes at 10 s per half of that group's share.
    half = progress.instance_status("vllm-ascend", running(1, 32, 1, 2), [], set(), shares, ESTIMATE_S, 10.0)
    assert half["eta_s"] == pytest.approx(10.0 * (1 - first_share / 2) / (first_share / 2), abs=0.1)
    # Twice as fast as the estimate, once the first group is done: half of the estimate of what is left.
    elapsed = ESTIMATE_S * first_share / 2
    faster = progress.instance_status("vllm-ascend", running(2, 32, 4, 0), [record(32, 1)], set(), shares,
                                      ESTIMATE_S, elapsed)
    assert faster["eta_s"] == pytest.approx(ESTIMATE_S * (1 - first_share) / 2, abs=0.1)


def test_errors_so_far_are_those_of_the_groups_this_run_finished():
    shares = progress.group_shares(PLANNED)
    status = progress.instance_status("vllm-ascend", running(3, 8, 1, 1), [record(32, 1, failed=2),
                                                                           record(32, 4, failed=1)],
                                      set(), shares, ESTIMATE_S, 60.0)
    assert status["errors"] == 3 and status["group_number"] == 3 and status["requests_done"] == 1


def test_a_resumed_run_counts_neither_the_time_nor_the_errors_of_the_groups_it_keeps():
    records = [record(32, 1, failed=1, finished_at=500.0), record(32, 4, failed=3, finished_at=500.0,
                                                                 unreliable=True),
               record(32, 4, failed=0, finished_at=2000.0)]
    measured, skipped = progress.split_records(records, resume=True, started_at=1000.0)
    assert [r["finished_at"] for r in measured] == [2000.0] and skipped == {("640x480", 32, 1)}
    assert progress.split_records(records, resume=False, started_at=1000.0) == (records, set())
    shares = progress.group_shares(PLANNED)
    status = progress.instance_status("vllm-ascend", running(3, 8, 1, 0), measured, skipped, shares, ESTIMATE_S,
                                      30.0)
    second, third, fourth = (share for _key, share in shares[1:])
    assert status["errors"] == 0
    assert status["eta_s"] == pytest.approx(30.0 * (third + fourth) / second, abs=0.1)


@pytest.mark.parametrize("current, stalled, phase", [
    (None, False, progress.STARTING),
    ({"groups_done": 0, "groups_total": 4, "updated_at": 1.0}, False, progress.WARMING_UP),
    ({"answer_check": "before", "groups_done": 0, "groups_total": 4, "updated_at": 1.0}, False,
     progress.CHECKING_ANSWERS),
    ({"answer_check": "after", "groups_done": 4, "groups_total": 4, "updated_at": 1.0}, False,
     progress.CHECKING_ANSWERS),
    ({"finished": True, "groups_done": 4, "groups_total": 4, "updated_at": 1.0}, False, progress.DONE),
    ({"finished": True, "groups_done": 1, "groups_total": 4, "error": "model 'x' is not served",
      "updated_at": 1.0}, False, progress.FAILED),
    (running(2, 32, 4, 1), True, progress.STALLED),
])
def test_phases(current, stalled, phase):
    status = progress.instance_status("vllm-ascend", current, [], set(), progress.group_shares(PLANNED),
                                      ESTIMATE_S, 50.0, stalled=stalled)
    assert status["phase"] == phase
    assert (status["eta_s"] is None) == (phase in progress.ENDED)


def test_lines():
    shares = progress.group_shares(PLANNED)
    status = progress.instance_status("vllm-ascend-npu4", running(3, 8, 1, 2), [record(32, 1, failed=1)], set(),
                                      shares, ESTIMATE_S, 130.0)
    assert progress.describe(status, eta_s=75) == (
        "vllm-ascend-npu4: group 3/4 (640x480, max_tokens 8, concurrency 1): 2/4 requests, 1 error, 2m10s elapsed, "
        "ETA 1m15s")
    assert progress.describe(status, requests=False, eta_s=75) == (
        "vllm-ascend-npu4: group 3/4 (640x480, max_tokens 8, concurrency 1), 1 error, 2m10s elapsed, ETA 1m15s")
    failed = progress.instance_status("vllm-ascend", {"finished": True, "groups_done": 1, "groups_total": 4,
                                                      "error": "connection refused", "updated_at": 1.0},
                                      [], set(), shares, ESTIMATE_S, 7200.0)
    assert progress.describe(failed) == "vllm-ascend: failed, 1/4 groups, 0 errors, 2h elapsed: connection refused"


def test_a_run_its_deadline_stopped_says_so_and_which_setting_to_raise():
    not_run = [group(8, 4)]
    finished = {"finished": True, "groups_done": 3, "groups_total": 4, "updated_at": 1.0,
                "deadline": {"new_group_deadline_s": 60, "elapsed_s": 61.5, "groups_total": 4, "not_run": not_run,
                             "stopped_at": 1.0}}
    status = progress.instance_status("vllm-ascend", finished, [], set(), progress.group_shares(PLANNED), ESTIMATE_S,
                                      70.0)
    assert status["phase"] == progress.DONE and status["deadline"]["not_run"] == not_run
    assert progress.describe(status) == (
        "vllm-ascend: done, 3/4 groups, 0 errors, 1m10s elapsed: new_group_deadline_s (60 s) stopped the run 62 s "
        "after its first group started: 1 of its 4 groups was not run (640x480, max_tokens 8, concurrency 4). Fix: "
        "raise vllm_bench_new_group_deadline_s (new_group_deadline_s; 0 for none), then rerun with "
        "-e vllm_bench_resume=true, which runs only the groups not recorded")
    finished.pop("deadline")
    status = progress.instance_status("vllm-ascend", finished, [], set(), progress.group_shares(PLANNED), ESTIMATE_S,
                                      70.0)
    assert progress.describe(status) == "vllm-ascend: done, 3/4 groups, 0 errors, 1m10s elapsed"


def test_a_run_killed_at_its_time_limit_names_the_group_it_did_not_finish_and_the_setting_to_raise():
    """The follow step marks the run failed with what Ansible's async wrapper says of a job it killed."""
    shares = progress.group_shares(PLANNED)
    killed = progress.instance_status("vllm-ascend", running(3, 8, 1, 2), [], set(), shares, ESTIMATE_S, 86400.0)
    killed.update(phase=progress.FAILED, eta_s=None, error=progress.ASYNC_TIME_LIMIT)
    assert progress.describe(killed, requests=False) == (
        "vllm-ascend: failed, 2/4 groups, 0 errors, 24h elapsed: the run reached vllm_bench_run_timeout_s and "
        "Ansible killed it in group 3/4 (640x480, max_tokens 8, concurrency 1): that group and the ones after it "
        "were not run to the end. Fix: raise vllm_bench_run_timeout_s, then rerun with -e vllm_bench_resume=true, "
        "which runs only the groups not recorded")
    warming = progress.instance_status("vllm-ascend", {"groups_done": 0, "groups_total": 4, "updated_at": 1.0}, [],
                                       set(), shares, ESTIMATE_S, 86400.0)
    warming.update(phase=progress.FAILED, eta_s=None, error=progress.ASYNC_TIME_LIMIT)
    assert ": the run reached vllm_bench_run_timeout_s and Ansible killed it, 0 of its 4 groups done. Fix: " in \
        progress.describe(warming)


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (59.4, "59s"), (130, "2m10s"), (1200, "20m"),
                                           (3725, "1h02m"), (86400, "24h")])
def test_clock(seconds, text):
    assert progress.clock(seconds) == text


def test_plan_line_from_the_modules_check_mode_result():
    planned = {"item": {"name": "vllm-ascend-npu1", "port": 8000}, "planned_groups": 45, "planned_requests": 2880,
               "estimated_seconds": 9203.7, "changed": False}
    assert progress.plan_line(progress.plan_entry(planned)) == (
        "vllm-ascend-npu1: 45 groups, 2880 requests, estimated 2h33m")


def test_a_plan_says_once_what_its_estimates_are_based_on():
    seed = load_test.estimate_basis({"estimate_seconds_per_token": load_test.SEED_SECONDS_PER_TOKEN})
    given = load_test.estimate_basis({"estimate_seconds_per_token": 0.002})
    entries = [progress.plan_entry({"item": {"name": name}, "planned_groups": 4, "planned_requests": 16,
                                    "estimated_seconds": 38.9, "estimate_basis": basis})
               for name, basis in (("a", seed), ("b", seed), ("c", given))]
    assert [entry["basis"] for entry in entries] == [seed, seed, given]
    assert progress.estimate_bases(entries) == [seed, given]
    # A check-mode result without one (recorded before the module said it) adds no line.
    assert progress.estimate_bases([progress.plan_entry({"item": {"name": "a"}, "planned_groups": 4,
                                                         "planned_requests": 16, "estimated_seconds": 38.9})]) == []


def test_a_capacity_searchs_probe_reads_as_the_search_and_the_users_it_probes():
    search = dict(MATRIX, search="concurrency", search_probe_requests=16, estimate_seconds_per_token=0.09)
    shares = progress.group_shares(load_test.planned_groups(search))
    probing = dict(running(2, 8, 4, 5, total=20), probe="closed", groups_total=2)
    status = progress.instance_status("vllm-ascend", probing, [], set(), shares, ESTIMATE_S, 10.0)
    assert progress.describe(status, eta_s=5) == (
        "vllm-ascend: search 2/2 (640x480, max_tokens 8): closed-loop probe of 4 users: 5/20 requests, 0 errors, "
        "10s elapsed, ETA 5s")
    status = progress.instance_status("vllm-ascend", dict(probing, probe="open_loop"), [], set(), shares, ESTIMATE_S,
                                      10.0)
    assert "open-loop probe of 4 users" in progress.describe(status)
