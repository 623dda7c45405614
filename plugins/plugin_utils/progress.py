"""A benchmark run as an operator follows it: each instance's phase, group, requests, errors so far, elapsed
time and ETA.

The vllm_bench role's follow step (plugins/action/vllm_bench_follow.py) reads the files the
load-test module keeps on each host (module_utils/bench_record.py owns their format), works out each
instance's status here and keeps the host's statuses in <report folder>/progress/<host>.json, which the
ascend-vllm-fleet command's live view reads. The ETA starts from the module's own estimate (its check mode's
estimated_seconds) and, once requests have finished, follows the pace measured so far.
"""
from ansible_collections.ascend.fleet.plugins.module_utils import bench_record

# The <report folder>/progress/<host>.json a follow step writes: format, host, started_at (Unix time the run
# was launched), updated_at (Unix time of the write) and instances (one status per instance, as
# instance_status returns).
STATUS_FOLDER = "progress"
STATUS_FORMAT = 1
# Phases of an instance's run, in the order they come (the answer check before the warm-up and after the last
# group).
STARTING, CHECKING_ANSWERS, WARMING_UP, MEASURING, DONE, FAILED, STALLED = (
    "starting", "checking answers", "warming up", "measuring", "done", "failed", "stalled")
ENDED = (DONE, FAILED, STALLED)
# What Ansible's async wrapper says of a job it killed at its time limit (the role's vllm_bench_run_timeout_s).
ASYNC_TIME_LIMIT = "Timeout exceeded"


def clock(seconds):
    """A duration as an operator reads it: 45s, 2m10s, 20m, 3h05m, 24h."""
    seconds = int(round(max(seconds, 0)))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % divmod(seconds, 60) if seconds % 60 else "%dm" % (seconds // 60)
    minutes = seconds % 3600 // 60
    return "%dh%02dm" % (seconds // 3600, minutes) if minutes else "%dh" % (seconds // 3600)


def group_shares(planned):
    """Each group the load-test module planned (its check-mode result's `planned`), in the order it runs them, as
    (group key, share of the run's estimated time)."""
    total = sum(group["estimated_seconds"] for group in planned)
    return [(bench_record.group_key(group), group["estimated_seconds"] / total if total else 1.0 / len(planned))
            for group in planned]


def split_records(records, resume, started_at):
    """(the records this run measured, the keys of the groups it skips): a resumed run keeps the reliable
    groups finished before it started and measures the rest; a fresh run started from empty files."""
    if not resume:
        return list(records), set()
    measured = [record for record in records if record.get("finished_at", 0) >= started_at]
    skipped = {bench_record.group_key(record) for record in records
               if record.get("finished_at", 0) < started_at and not record.get("unreliable")}
    return measured, skipped


def instance_status(instance, progress, measured, skipped, shares, estimate_s, elapsed_s, stalled=False):
    """How far an instance's run is.

    progress: its progress file's content (None before the module wrote one); measured: the records this run
    wrote; skipped: keys of the groups a resumed run does not run again; shares: group_shares of its plan;
    estimate_s: the module's estimate of the whole run; elapsed_s: seconds since the run was launched; stalled:
    the progress file stopped changing for longer than a request may take.
    """
    progress = progress or {}
    group = progress.get("group") if not progress.get("finished") else None
    if stalled and not progress.get("finished"):
        phase = STALLED
    elif progress.get("finished"):
        phase = FAILED if progress.get("error") else DONE
    elif group:
        phase = MEASURING
    elif progress.get("answer_check"):
        phase = CHECKING_ANSWERS
    else:
        phase = WARMING_UP if progress else STARTING
    done = {bench_record.group_key(record) for record in measured}
    share = dict(shares)
    running = 0.0
    if group and progress.get("requests_total"):
        running = share.get(bench_record.group_key(group), 0.0) * progress["requests_done"] / progress["requests_total"]
    measured_work = sum(share.get(key, 0.0) for key in done) + running
    remaining = sum(value for key, value in shares if key not in done and key not in skipped) - running
    if phase in ENDED:
        eta = None
    elif measured_work > 0 and elapsed_s > 0:
        eta = elapsed_s * remaining / measured_work
    else:
        eta = remaining * estimate_s if estimate_s is not None else None
    return {
        "instance": instance,
        "phase": phase,
        "group": group,
        "group_number": progress.get("group_number") if group else None,
        # A capacity search's probe (closed or open_loop): group_number then counts the searches.
        "probe": progress.get("probe") if group else None,
        "groups_done": progress.get("groups_done", 0),
        "groups_total": progress.get("groups_total", len(shares)),
        "requests_done": progress.get("requests_done") if group else None,
        "requests_total": progress.get("requests_total") if group else None,
        "errors": sum(record.get("failed", 0) for record in measured),
        "error": progress.get("error"),
        # The run ended because its new-group deadline passed: the groups it did not run.
        "deadline": progress.get("deadline") if progress.get("finished") else None,
        "elapsed_s": round(elapsed_s, 1),
        "eta_s": None if eta is None else round(max(eta, 0.0), 1),
    }


def group_text(status):
    """The group an instance measures, e.g. 'group 3/12 (1280x720, max_tokens 32, concurrency 8)', or the probe a
    capacity search runs, e.g. 'search 1/2 (640x480, max_tokens 32): closed-loop probe of 8 users'."""
    group = status["group"]
    if status.get("probe"):
        return "search %s/%s (%s, max_tokens %s): %s probe of %s users" % (
            status["group_number"], status["groups_total"], group["image_size"], group["max_tokens"],
            "open-loop" if status["probe"] == "open_loop" else "closed-loop", group["concurrency"])
    return "group %s/%s (%s, max_tokens %s, concurrency %s)" % (
        status["group_number"], status["groups_total"], group["image_size"], group["max_tokens"],
        group["concurrency"])


def run_timeout_text(status):
    """A run killed at its async time limit, said with the group it did not finish and the setting to raise."""
    if status["group"]:
        where = " in %s: that group and the ones after it were not run to the end" % group_text(status)
    else:
        where = ", %s of its %s groups done" % (status["groups_done"], status["groups_total"])
    return ("the run reached vllm_bench_run_timeout_s and Ansible killed it%s. Fix: raise vllm_bench_run_timeout_s, "
            "then rerun with -e vllm_bench_resume=true, which runs only the groups not recorded" % where)


def describe(status, requests=True, elapsed_s=None, eta_s=None):
    """One line on an instance's run, without its host: the phase or group, requests done in the group (unless
    requests is false), errors so far, elapsed time and ETA (the status's own unless given); for a run that ended
    short, why (its error, the time limit that killed it, or the groups its new-group deadline left out)."""
    elapsed_s = status["elapsed_s"] if elapsed_s is None else elapsed_s
    eta_s = status["eta_s"] if eta_s is None else eta_s
    phase = status["phase"]
    errors = "%d error%s" % (status["errors"], "" if status["errors"] == 1 else "s")
    if phase == MEASURING:
        text = group_text(status)
        if requests:
            text += ": %s/%s requests" % (status["requests_done"], status["requests_total"])
    elif phase in ENDED:
        text = "%s, %s/%s groups" % (phase, status["groups_done"], status["groups_total"])
    else:
        text = phase
    parts = [text, errors, clock(elapsed_s) + " elapsed"]
    if eta_s is not None:
        parts.append("ETA " + clock(eta_s))
    line = "%s: %s" % (status["instance"], ", ".join(parts))
    if phase == FAILED and status["error"] == ASYNC_TIME_LIMIT:
        line += ": " + run_timeout_text(status)
    elif phase == FAILED:
        line += ": " + " ".join(str(status["error"]).split())[:300]
    elif phase == DONE and status.get("deadline"):
        line += ": " + bench_record.deadline_text(status["deadline"])
    elif phase == STALLED:
        line += ": its progress file stopped changing"
    return line


def plan_entry(planned):
    """A host's plan of one instance from the load-test module's check-mode result (a registered loop item)."""
    return {"instance": planned["item"]["name"], "groups": planned["planned_groups"],
            "requests": planned["planned_requests"], "estimated_s": planned["estimated_seconds"],
            "basis": planned.get("estimate_basis")}


def estimate_bases(entries):
    """What the plan entries' estimates are based on (the load-test module's estimate_basis), each once: a plan
    shows them under its lines, so that an estimate from the seed's hardware is not read as the twin's."""
    bases = []
    for entry in entries:
        if entry.get("basis") and entry["basis"] not in bases:
            bases.append(entry["basis"])
    return bases


def plan_line(entry):
    return "%s: %d groups, %d requests, estimated %s" % (
        entry["instance"], entry["groups"], entry["requests"], clock(entry["estimated_s"]))
