"""Action vllm_bench_follow: follow a host's benchmark runs from the controller until each has ended.

Every poll_interval seconds it reads each instance's progress file on the host (and its results file when a
group has finished), prints one line for an instance whenever its phase or group changes, keeps the host's
statuses in status_file (when given) for the ascend-vllm-fleet command's live view, and, once an instance's run has
ended, collects its async job. One task for all instances of the host and no retries, so a healthy wait of hours
prints no retry lines; the task fails when a job failed or a run stalled, naming the instance and why.

The runs go on on the host whether or not the controller reaches it, so a poll that cannot reach the host (a dropped
link, sshd or sudo too slow to answer on a loaded host) is tried again at the next poll: one warning when the host
stops answering, one line when it answers again. A host that answers no poll for as long as a run may stay silent
before it counts as stalled (request_timeout_s plus the stall margin) ends the task unreachable, naming each job
left running and how to carry on.

Arguments: instances (the serving plan's instances), jobs (the registered async launch, one result per
instance), plans (the registered check-mode run, one result per instance, with its planned groups), results_dir,
resume, request_timeout_s, poll_interval, started_at (Unix time the runs were launched) and status_file (empty: no
statuses are kept, as for a canary's benchmark without its report).
"""
import base64
import json
import os
import tempfile
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

# The role's filters: the same functions its tasks use.
from ansible_collections.ascend.fleet.plugins.filter import vllm_bench as filters
from ansible_collections.ascend.fleet.plugins.plugin_utils import progress

display = Display()
# A run whose progress says it ended has its job's result written by Ansible's async wrapper moments later.
JOB_PATIENCE_S = 60
JOB_RECHECK_S = 2


def unreadable_progress(instance, error):
    """The failure of an instance whose progress file holds something else than the benchmark's progress: the
    benchmark replaces the file whole, so what it holds stays until something else writes it again."""
    return ("its progress file %s is not the benchmark's (%s): expected the JSON object vllm_benchmark writes there "
            "(with updated_at), replaced whole every few seconds while it runs. Fix: make vllm_bench_results_dir a "
            "folder nothing else writes to, remove the file, then rerun with -e vllm_bench_resume=true once its job "
            "(%s, left as it is: ansible.builtin.async_status with that jid tells whether it still runs) has ended"
            % (instance.progress_path, str(error)[:200], instance.job_id))


def unreachable_text(host, instances, waited_s, error):
    """Why the following of a host's runs ended while they may still run: the host answered no poll for too long."""
    jobs = ", ".join("%s (job %s)" % (instance.name, instance.job_id) for instance in instances)
    return ("%s answered no poll for %d s (the last: %s); the benchmark of %s was left running there. Fix: once the "
            "host answers, ansible.builtin.async_status with each jid tells whether its run still goes on; when it has "
            "ended, rerun with -e vllm_bench_resume=true to measure only the groups it did not finish"
            % (host, waited_s, str(error)[:300], jobs))


def failure_text(instance):
    """Why an instance's run failed: a run its async time limit killed is said with the group it did not finish and
    the setting to raise, not as Ansible's bare "Timeout exceeded"."""
    message = instance.result.get("msg") or "failed"
    return progress.run_timeout_text(instance.status) if message == progress.ASYNC_TIME_LIMIT else message


class Instance:
    """One instance's run as followed: its files, what was last read of them, and its job's result."""

    def __init__(self, entry, job, plan, results_dir):
        self.name = entry["name"]
        self.results_path = filters.vllm_bench_results_file(entry, results_dir)
        self.progress_path = filters.vllm_bench_progress_file(self.results_path)
        self.job_id = job.get("ansible_job_id")
        self.estimate_s = plan.get("estimated_seconds")
        self.shares = progress.group_shares(plan.get("planned") or [])
        self.records = []
        self.progress_content = None  # the progress file's bytes at the last poll
        self.groups_done = None
        self.status = None
        self.result = None
        self.ended_at = None
        self.announced = None


ARGUMENT_SPEC = {
    "instances": {"type": "list", "elements": "dict", "required": True},
    "jobs": {"type": "list", "elements": "dict", "required": True},
    "plans": {"type": "list", "elements": "dict", "required": True},
    "results_dir": {"type": "str", "required": True},
    "resume": {"type": "bool", "default": False},
    "request_timeout_s": {"type": "float", "required": True},
    "poll_interval": {"type": "float", "required": True},
    "started_at": {"type": "float", "required": True},
    "status_file": {"type": "str", "default": ""},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # A check run started no benchmark to follow.
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        self.task_vars = task_vars
        host = task_vars["inventory_hostname"]
        by_name = {job["item"]["name"]: job for job in args["jobs"]}
        plans = {plan["item"]["name"]: plan for plan in args["plans"]}
        instances = [Instance(entry, by_name.get(entry["name"], {}), plans.get(entry["name"], {}),
                              args["results_dir"]) for entry in args["instances"]]
        started_at = args["started_at"]
        polls = 0
        silent_since = None  # when the host stopped answering the polls, None while it answers
        while True:
            polls += 1
            try:
                for instance in instances:
                    if instance.ended_at is None:
                        self.poll(instance, polls, started_at, args)
                        self.announce(host, instance)
            except AnsibleConnectionFailure as error:
                silent_since = self.unanswered(host, instances, silent_since, started_at, args, error)
            else:
                if silent_since is not None:
                    display.display("[%s] the host answers again after %d s" % (host, time.time() - silent_since))
                silent_since = None
            if args["status_file"]:
                self.write_status(args["status_file"], host, started_at, instances)
            if all(instance.ended_at is not None for instance in instances):
                break
            time.sleep(args["poll_interval"])
        failed = ["%s: %s" % (instance.name, failure_text(instance)) for instance in instances
                  if instance.result.get("failed")]
        result.update(changed=False, instances=[instance.status for instance in instances])
        unreachable = [instance.result["msg"] for instance in instances if instance.result.get("unreachable")]
        if unreachable:
            result.update(unreachable=True, msg=unreachable[0])
        elif failed:
            result.update(failed=True, msg="benchmark on %s: %s" % (host, "; ".join(failed)))
        return result

    def slurp(self, path):
        """The file's bytes on the host, None when it does not exist (yet)."""
        answer = self._execute_module(module_name="ansible.legacy.slurp", module_args={"src": path},
                                      task_vars=self.task_vars)
        return base64.b64decode(answer["content"]) if "content" in answer else None

    def poll(self, instance, polls, started_at, args):
        """Read the instance's files and work out its status; collect its job once its run has ended."""
        content = self.slurp(instance.progress_path)
        try:
            current = progress.bench_record.read_progress(content) if content is not None else None
        except ValueError as error:
            self.give_up(instance, started_at, unreadable_progress(instance, error))
            return
        ended = progress.bench_record.run_ended(current, args["request_timeout_s"],
                                                waited_s=polls * args["poll_interval"])
        groups_done = (current or {}).get("groups_done")
        if ended or groups_done != instance.groups_done:
            instance.records = self.read_records(instance.results_path)
            instance.groups_done = groups_done
        job = None
        if current is None or ended or content == instance.progress_content:
            # Without a progress file the job may have failed before it could write one; a progress file that did
            # not change since the last poll (a running group rewrites it every few seconds) may belong to a job
            # that ended without writing it (a full disk): the job says so at once.
            job = self.job_status(instance)
        instance.progress_content = content
        if not ended and job is not None and job.get("finished"):
            ended = True
        stalled = ended and not (current or {}).get("finished") and not (job or {}).get("finished")
        measured, skipped = progress.split_records(instance.records, args["resume"], started_at)
        instance.status = progress.instance_status(instance.name, current, measured, skipped, instance.shares,
                                                   instance.estimate_s, time.time() - started_at, stalled=stalled)
        if ended:
            instance.result = job if job.get("finished") else self.wait_for_job(instance, stalled, args)
            instance.ended_at = time.time()
            if instance.result.get("failed") and instance.status["phase"] not in (progress.FAILED, progress.STALLED):
                instance.status.update(phase=progress.FAILED, eta_s=None, error=instance.result.get("msg") or "failed")

    def unanswered(self, host, instances, silent_since, started_at, args, error):
        """A poll that could not reach the host: warn when the host stops answering, give up on its runs once it
        has answered none for longer than a run may stay silent. Returns when the host stopped answering."""
        now = time.time()
        if silent_since is None:
            display.warning("[%s] the host did not answer a poll (%s); its benchmark runs on there and the next poll "
                            "tries again" % (host, str(error)[:300]))
            silent_since = now
        if now - silent_since > float(args["request_timeout_s"]) + progress.bench_record.STALL_MARGIN_S:
            running = [instance for instance in instances if instance.ended_at is None]
            message = unreachable_text(host, running, now - silent_since, error)
            for instance in running:
                self.give_up(instance, started_at, message)
                instance.result["unreachable"] = True
        return silent_since

    @staticmethod
    def give_up(instance, started_at, message):
        """End the following of an instance whose run cannot be followed, failed with message."""
        instance.result = {"failed": True, "msg": message}
        instance.ended_at = time.time()
        instance.status = progress.instance_status(instance.name, None, [], set(), instance.shares,
                                                   instance.estimate_s, instance.ended_at - started_at)
        instance.status.update(phase=progress.FAILED, eta_s=None, error=message)

    def read_records(self, path):
        """The records of a results file on the host, read by bench_record, the format's one owner: the matrix's
        groups, or a capacity search's probes."""
        content = self.slurp(path)
        if content is None:
            return []
        with tempfile.NamedTemporaryFile(suffix=progress.bench_record.RESULTS_SUFFIX) as copy:
            copy.write(content)
            copy.flush()
            return progress.bench_record.read_results(copy.name)[0] + progress.bench_record.read_probes(copy.name)

    def job_status(self, instance):
        """The instance's async job as async_status tells it: finished (with the module's result) or not."""
        if not instance.job_id:
            return {"finished": True, "failed": True, "msg": "no async job was started for it"}
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        job = self._execute_module(module_name="ansible.legacy.async_status", task_vars=self.task_vars,
                                   module_args={"jid": instance.job_id, "_async_dir": async_dir})
        if job.get("failed") and not job.get("finished"):
            job["finished"] = True  # the job file is unreadable or gone: nothing more will come
        return job

    def wait_for_job(self, instance, stalled, args):
        """The job of a run that ended: the async wrapper writes its result moments after the progress file
        says so; a stalled run's job is still running."""
        if not stalled:
            deadline = time.time() + JOB_PATIENCE_S
            while time.time() < deadline:
                time.sleep(JOB_RECHECK_S)
                job = self.job_status(instance)
                if job.get("finished"):
                    return job
            return {"failed": True, "msg": "its progress file says the run ended, but its job %s did not finish "
                    "within %d s" % (instance.job_id, JOB_PATIENCE_S)}
        return {"failed": True, "msg": "its progress file %s stopped changing for more than "
                "vllm_bench_request_timeout_s (%s s) plus %d s and its job is still running: the run hangs or its "
                "server stopped answering. Fix: check the instance (docker logs), then rerun with "
                "-e vllm_bench_resume=true" % (instance.progress_path, args["request_timeout_s"],
                                               progress.bench_record.STALL_MARGIN_S)}

    def announce(self, host, instance):
        """One line whenever an instance's phase or group changes."""
        status = instance.status
        key = (status["phase"], status["group_number"])
        if key != instance.announced:
            instance.announced = key
            display.display("[%s] %s" % (host, progress.describe(status, requests=False)))

    @staticmethod
    def write_status(path, host, started_at, instances):
        """The host's statuses for live views, replaced whole so a reader never sees half of it."""
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        document = {"format": progress.STATUS_FORMAT, "host": host, "started_at": started_at,
                    "updated_at": time.time(), "instances": [instance.status for instance in instances]}
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as handle:
            json.dump(document, handle, sort_keys=True)
        os.replace(handle.name, path)
