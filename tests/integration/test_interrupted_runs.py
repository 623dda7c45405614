"""Runs cut short or overlapping, on the shared single host: a second run while one changes the host, the SSH
connection cut mid-server-phase, an SSH connection that fails and is tried again, the registry gone mid-pull, a full
disk while the benchmark writes its results, the host rebooted mid-benchmark. Each test says what "nothing lost"
means there and asserts it, then leaves the host as the deploy did."""
import json
import os

import pytest

from twin import lifecycle
from twin.lifecycle import Twin
from twin.shell import docker
from twin_fleet import CONFIG_DIR, LOCK, serves, serves_now, wait_until
from twin_fleet import DEFAULT_CONTAINER as NAME

pytestmark = pytest.mark.docker
HOST = "npu-c"  # the shared single host
TAG = "v0.18.0rc1-310p"


@pytest.fixture
def fleet(shared_single):
    return shared_single


def test_a_second_run_on_a_host_another_run_changes_is_refused_and_touches_nothing(fleet):
    """Two runs at once on one host would each stop, start and restore the same containers. The second is
    refused at the deploy play's first task, naming the first and how long it has held the host; nothing lost
    means the first run's change stands as it made it, and the lock goes when it ends."""
    slow = {"vllm_server_extra_env": {"VLLM_TWIN_LOAD_S": "20", "LOCK_TEST": "1"}}
    first = fleet.start("--tags", "server", "--limit", HOST, **{HOST: slow})
    wait_until(lambda: fleet[HOST].exists(LOCK), "the first run takes the lock")
    second = fleet.play("--tags", "server", "--limit", HOST)
    done = first.wait()
    assert second.rc != 0 and second.failed_hosts() == [HOST]
    text = second.failure_text(HOST)
    assert "being changed by another run" in text and "Deploy vLLM-Ascend" in text and "holding it for" in text, text
    assert second.results("Decide whether to keep, start or replace each instance") == {}, "it touched nothing"
    assert done.rc == 0, done.stdout
    assert "LOCK_TEST=1" in fleet[HOST].inspect(NAME)["Config"]["Env"] and serves(fleet, HOST)
    assert not fleet[HOST].exists(LOCK)
    fleet.restore()


def test_an_ssh_cut_mid_server_phase_is_recovered_by_the_next_run(fleet):
    """The connection to the host is cut while its replacement loads: the run fails for that host, which keeps
    the container set aside, the loading one and the run's lock. The next run, from this controller, takes the
    lock of the run that ended and finishes the replacement; nothing lost means one serving container of the new
    spec, none set aside, the host's files those of the new spec, and no lock left."""
    host = fleet[HOST]
    changed = {"vllm_server_extra_env": {"VLLM_TWIN_LOAD_S": "30", "CUT_TEST": "1"}}
    cut = ["INPUT", "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset"]
    started = fleet.start("--tags", "server", "--limit", HOST, **{HOST: changed})
    try:
        wait_until(lambda: host.inspect(NAME + "-previous") is not None, "the serving container is set aside")
        host.exec("iptables", "-I", *cut)
        host.exec("pkill", "-f", "sshd: ops", check=False)   # the connections open now, Ansible's kept one too
        interrupted = started.wait()
    finally:
        host.exec("iptables", "-D", *cut, check=False)
    assert interrupted.rc != 0 and HOST in interrupted.stats.get("dark", {}), interrupted.stdout
    assert host.exists(LOCK) and host.inspect(NAME + "-previous") is not None

    run = fleet.play("--tags", "server", "--limit", HOST, **{HOST: changed})
    assert run.rc == 0, run.stdout
    assert "took over the lock of a run that ended" in json.dumps(
        run.results("Take the host's lock, so that no other run changes it meanwhile")[HOST])
    assert "CUT_TEST=1" in host.inspect(NAME)["Config"]["Env"] and serves(fleet, HOST)
    assert host.inspect(NAME + "-previous") is None and not host.exists(LOCK)
    assert "CUT_TEST" in host.read_text("%s/%s.sh" % (CONFIG_DIR, NAME))
    fleet.restore()


def test_a_connection_that_fails_twice_is_tried_again_and_the_task_runs(fleet, tmp_path):
    """The SSH client fails the first two times Ansible runs it (exit 255, as a dropped link, a reset or a sudo
    prompt late on a loaded host end it): with the repository's ansible.cfg the task runs at a later attempt, and
    the host is not given up as unreachable."""
    attempts, flaky = tmp_path / "attempts", tmp_path / "flaky-ssh"
    flaky.write_text('#!/bin/sh\necho "$*" >> %s\n'
                     'if [ "$(wc -l < %s)" -le 2 ]; then echo "Connection reset by peer" >&2; exit 255; fi\n'
                     'exec ssh "$@"\n' % (attempts, attempts))
    flaky.chmod(0o755)
    result = fleet.ad_hoc(HOST, "ansible.builtin.ping", "", "-e", "ansible_ssh_executable=%s" % flaky)
    assert result.get("ping") == "pong", result
    assert len(attempts.read_text().splitlines()) >= 3


def test_the_registry_gone_mid_pull_fails_the_pull_and_leaves_the_host_as_it_was(fleet):
    """The mirror stops while a host pulls a new image (500 MB of layers it has not got). Nothing lost means the
    run fails naming what it pulled from where, the serving container is untouched, no half-pulled image carries
    the tag, and once the registry is back the same run pulls it."""
    twin, tag = Twin(), TAG + "-padded"
    big = "%s/ascend/vllm-ascend:%s" % (twin.registry, tag)
    docker("build", "-q", "-t", big, "-", input="FROM %s/ascend/vllm-ascend:%s\n"
           "RUN head -c 500000000 /dev/urandom > /var/cache/padding\n" % (twin.registry, TAG))
    docker("push", "-q", big)
    docker("rmi", big)
    before = fleet[HOST].inspect(NAME)["Id"]
    pull_settings = ("-e", "fleet_image_tag=%s" % tag, "-e", "vllm_image_pull_retries=2", "-e",
                     "vllm_image_pull_delay=0.1")
    # Docker retries a layer whose connection broke for about a minute: an attempt ends sooner here.
    cut_short = pull_settings + ("-e", "vllm_image_pull_timeout=20")
    state = twin.load_state()
    started = fleet.start("--tags", "image,server", "--limit", HOST, *cut_short)
    try:
        wait_until(lambda: fleet[HOST].exec("pgrep", "-f", "docker pull", check=False).returncode == 0,
                   "the host's pull starts")
        os.kill(state["registry_pids"]["hosts"], 9)
        run = started.wait()
    finally:
        twin.start_registry(state, "hosts", "%s:%d" % (twin.gateway(), lifecycle.REGISTRY_HOST_PORT), readonly=True)
    assert run.rc != 0 and run.failed_hosts() == [HOST], run.stdout
    text = run.failure_text(HOST)
    assert "could not pull twin-registry:5000/ascend/vllm-ascend:%s after 2 attempts" % tag in text, text
    assert fleet[HOST].inspect(NAME)["Id"] == before and serves(fleet, HOST)
    assert fleet[HOST].docker("image", "inspect", "quay.io/ascend/vllm-ascend:" + tag, check=False).returncode != 0
    again = fleet.play("--tags", "image", "--limit", HOST, *pull_settings)
    assert again.rc == 0, again.stdout
    fleet[HOST].docker("rmi", "quay.io/ascend/vllm-ascend:" + tag, "twin-registry:5000/ascend/vllm-ascend:" + tag)


# Twelve groups on one instance, followed every 2 s: 16 and 32 tokens are a fraction of a second a group on the twin,
# and twelve records are more than a page (a record is under 1 kB). A test that acts after the first group's record
# while the run goes on asks for longer answers: the reboot test, whose host goes down seconds after it is told to
# (docker exec under load, then the twin's reboot), and which with short groups has seen all twelve recorded first.
SHORT_ANSWERS, LONG_ANSWERS = (16, 32), (128, 256)


def twelve_groups(max_tokens):
    return {"vllm_bench_preset": "twelve", "vllm_bench_poll_interval": 2, "vllm_bench_presets": {"twelve": {
        "image_sizes": ["640x480"], "max_tokens": list(max_tokens), "concurrency": [1, 2, 3, 4, 5, 6],
        "requests_per_group": 6}}}


def every_group(max_tokens):
    return sorted((tokens, users) for tokens in max_tokens for users in range(1, 7))


def group_lines(text):
    """The whole group records of a results file's text (answer checks and a line cut mid-write left out)."""
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "concurrency" in record and "answer_check" not in record:
            records.append(record)
    return records


def benchmark_settings(tmp_path, results_dir, max_tokens=SHORT_ANSWERS, **more):
    settings = tmp_path / ("bench-%d.json" % len(list(tmp_path.glob("bench-*.json"))))
    settings.write_text(json.dumps(dict(twelve_groups(max_tokens), vllm_bench_results_dir=results_dir,
                                        vllm_bench_reports_dir=str(tmp_path / "reports"), **more)))
    return "@%s" % settings


def test_a_full_disk_during_a_results_write_loses_no_recorded_group_and_a_resume_finishes(fleet, tmp_path):
    """The results folder fills up after the first group is recorded: the run fails at the next record's write,
    at once (not after the stall limit), naming the file, the cause and the fix. Nothing lost means the lines
    recorded before stay as they were, and the resume measures only the groups missing, each once."""
    host, folder = fleet[HOST], "/var/lib/vllm-bench-small"
    results = "%s/%s.jsonl" % (folder, NAME)
    # A full tmpfs still takes what fits in the results file's last page: twelve groups write more than that.
    host.exec("sh", "-c", "mkdir -p %s && mount -t tmpfs -o size=1m bench-disk %s" % (folder, folder))
    try:
        started = fleet.start("--limit", HOST, "-e", benchmark_settings(tmp_path, folder),
                              playbook="playbooks/benchmark.yml")
        wait_until(lambda: host.exists(results) and group_lines(host.read_text(results)), "the first group's record")
        host.exec("sh", "-c", "dd if=/dev/zero of=%s/fill bs=4k 2>/dev/null; true" % folder)
        run = started.wait()
        assert run.rc != 0 and run.failed_hosts() == [HOST], run.stdout
        text = run.failure_text(HOST)
        assert "could not be written (No space left on device)" in text and "vllm_bench_resume=true" in text, text
        recorded = host.read_text(results)
        done_before = group_lines(recorded)
        assert done_before and len(done_before) < 12
        host.exec("rm", "%s/fill" % folder)
        resumed = fleet.play("--limit", HOST, "-e", benchmark_settings(tmp_path, folder, vllm_bench_resume=True),
                             playbook="playbooks/benchmark.yml")
        assert resumed.rc == 0, resumed.stdout
        final = host.read_text(results)
        assert final.startswith(recorded.rsplit("\n", 1)[0]), "a line recorded before the disk filled changed"
        assert sorted((r["max_tokens"], r["concurrency"]) for r in group_lines(final)) == every_group(SHORT_ANSWERS)
    finally:
        host.exec("umount", folder, check=False)


def test_a_host_rebooted_mid_benchmark_then_resumed_loses_no_recorded_group(fleet, tmp_path):
    """The host reboots after the first group is recorded: the run ends for it, with what it measured while its
    server went down recorded as unreliable. Once the instance serves again, the resume measures the groups
    missing and the unreliable ones. Nothing lost means every group measured well before the reboot stays as it
    was (each record is on disk before the next group starts), and every group ends with a reliable record."""
    host, folder = fleet[HOST], "/var/lib/vllm-bench-reboot"
    results = "%s/%s.jsonl" % (folder, NAME)
    started = fleet.start("--limit", HOST, "-e", benchmark_settings(tmp_path, folder, LONG_ANSWERS),
                          playbook="playbooks/benchmark.yml")
    wait_until(lambda: host.exists(results) and group_lines(host.read_text(results)), "the first group's record")
    host.exec("shutdown", "-r", "now")
    try:
        started.wait()  # it fails, or ends with the groups measured against a server going down marked unreliable
    finally:
        wait_until(lambda: serves_now(fleet, HOST), "the instance serves again after the reboot", timeout=600)
    measured_well = [record for record in group_lines(host.read_text(results)) if not record.get("unreliable")]
    assert measured_well and len(measured_well) < 12
    resumed = fleet.play("--limit", HOST, "-e", benchmark_settings(tmp_path, folder, LONG_ANSWERS,
                                                                 vllm_bench_resume=True),
                         playbook="playbooks/benchmark.yml")
    assert resumed.rc == 0, resumed.stdout
    final = group_lines(host.read_text(results))
    assert all(record in final for record in measured_well), "a group measured before the reboot changed"
    latest = {(record["max_tokens"], record["concurrency"]): record for record in final}  # a later line wins
    assert sorted(latest) == every_group(LONG_ANSWERS) and not [key for key, r in latest.items() if r.get("unreliable")]
    keys = [(record["max_tokens"], record["concurrency"]) for record in final]
    assert all(keys.count((r["max_tokens"], r["concurrency"])) == 1 for r in measured_well), "measured again"
    host.exec("rm", "-rf", folder)
