"""module_utils/host_evidence.py: what the doctor reads of Docker's answers and the disks."""
import json

from fake_vllm import server  # noqa: F401  (the fixture)

from ansible_collections.ascend.fleet.plugins.module_utils import diagnosis, host_evidence

INSPECT = {"RestartCount": 3, "State": {"Status": "running", "Running": True, "ExitCode": 1, "OOMKilled": False,
                                        "Error": "", "StartedAt": "2026-12-04T14:00:00.123456789Z",
                                        "FinishedAt": "2026-12-04T13:59:58.5Z"}}
NOW = 1796392860  # 2026-12-04T14:01:00Z


def test_docker_times():
    assert host_evidence.docker_seconds("2026-12-04T14:01:00Z") == NOW
    assert host_evidence.docker_seconds("2026-12-04T14:01:00.999999999Z") == NOW
    assert host_evidence.docker_seconds("0001-01-01T00:00:00Z") is None
    assert host_evidence.docker_seconds("") is None and host_evidence.docker_seconds(None) is None


def test_container_state_from_inspect():
    state = host_evidence.container_state(INSPECT, NOW)
    assert state["status"] == "running" and state["running"] and state["restart_count"] == 3
    assert state["exit_code"] == 1 and not state["oom_killed"] and state["error"] is None
    assert state["started_s_ago"] == 60


def test_the_log_tail_merges_stdout_and_stderr_in_the_order_written():
    def runner(docker, *args, **kwargs):
        assert args[:2] == ("logs", "--timestamps") and args[-2:] == ("--", "vllm-ascend")
        return 0, ("2026-12-04T14:00:01.000000001Z INFO loading\n"
                   "2026-12-04T14:00:03.000000000Z INFO serving\n"), \
            "2026-12-04T14:00:02.500000000Z ERROR drvRet=87\n"

    lines = host_evidence.log_tail("docker", "vllm-ascend", 10, runner)
    # Docker's own times, to the nanosecond: the doctor tells a line from before the container's last start by it.
    assert lines == ["2026-12-04T14:00:01.000000001Z INFO loading", "2026-12-04T14:00:02.500000000Z ERROR drvRet=87",
                     "2026-12-04T14:00:03.000000000Z INFO serving"]
    assert host_evidence.log_tail("docker", "vllm-ascend", 2, runner)[0].endswith("drvRet=87")


def test_a_line_is_what_docker_stamped_and_one_without_a_time_stays_in_its_place():
    """A progress bar's carriage returns are inside the line Docker stamped; within one second the nanoseconds
    order stdout's and stderr's lines."""
    out = ("2026-12-04T14:00:01.000000300Z Loading safetensors checkpoint shards:  50%\rLoading safetensors "
           "checkpoint shards: 100%\n"
           "not stamped, after the line before it\n"
           "2026-12-04T14:00:01.000000900Z INFO serving\n")
    err = "2026-12-04T14:00:01.000000500Z ERROR RuntimeError: NPU out of memory.\n"
    lines = host_evidence.log_tail("docker", "vllm-ascend", 10, lambda *args, **kwargs: (0, out, err))
    assert lines == ["2026-12-04T14:00:01.000000300Z Loading safetensors checkpoint shards:  50%\rLoading "
                     "safetensors checkpoint shards: 100%", "not stamped, after the line before it",
                     "2026-12-04T14:00:01.000000500Z ERROR RuntimeError: NPU out of memory.",
                     "2026-12-04T14:00:01.000000900Z INFO serving"]


def test_a_log_that_cannot_be_read_says_why():
    lines = host_evidence.log_tail("docker", "x", 10, lambda *args, **kwargs: (1, "", "Error: No such container: x"))
    assert lines == ["(docker logs failed: Error: No such container: x)"]


def test_inspect_of_no_container_is_none_and_a_broken_docker_is_an_error():
    assert host_evidence.inspect("docker", "x", lambda *a, **k: (1, "", "Error: No such container: x")) is None
    assert host_evidence.inspect("docker", "x", lambda *a, **k: (0, json.dumps([INSPECT]), "")) == INSPECT
    try:
        host_evidence.inspect("docker", "x", lambda *a, **k: (1, "", "Cannot connect to the Docker daemon"))
    except host_evidence.DockerError as error:
        assert "Cannot connect" in str(error)
    else:
        raise AssertionError("a daemon that does not answer passed for no container")


def test_a_path_not_made_yet_is_judged_by_the_folder_above(tmp_path):
    disks = host_evidence.disk_usage({"model": str(tmp_path / "not" / "yet"), "cache": str(tmp_path)})
    assert [disk["purpose"] for disk in disks] and {disk["path"] for disk in disks} == {
        str(tmp_path / "not" / "yet"), str(tmp_path)}
    assert all(0 <= disk["used_share"] <= 1 and disk["free_bytes"] >= 0 for disk in disks)
    assert disks[0]["used_share"] == disks[1]["used_share"]  # one file system


def test_a_serving_instance_restarted_after_its_engine_died_is_healthy_from_what_docker_says(server):  # noqa: F811
    """What the doctor reads of a container Docker restarted after its engine was killed, 19 minutes ago, that
    serves since: the death is history, a warning, the host healthy; the same lines after the start are not."""
    started = "2026-12-04T13:16:31.25Z"
    detail = {"RestartCount": 1, "State": {"Status": "running", "Running": True, "ExitCode": 0, "OOMKilled": False,
                                           "StartedAt": started, "FinishedAt": "2026-12-04T13:16:31.1Z"}}
    death = ("2026-12-04T13:16:19.801234567Z ERROR Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
             "client.\n2026-12-04T13:16:20.512345678Z ERROR VLLM Engine failed, terminating server\n")
    since = "2026-12-04T13:16:33.000000000Z INFO:     Started server process [1]\n"

    def runner(docker, *args, **kwargs):
        return (0, json.dumps([detail]), "") if args[0] == "inspect" else (0, since, death)

    instance = {"name": "vllm-ascend", "container": "vllm-ascend", "port": int(server.rsplit(":", 1)[1])}
    params = {"docker": "docker", "log_lines": 100, "answer_check": "none"}
    now = host_evidence.docker_seconds(started) + 1140
    found = host_evidence.instance_evidence(instance, "Qwen3-VL-8B-Instruct", params, now, runner)
    assert found["health"] == {"status": 200} and found["container"]["started_s_ago"] == 1140, found
    verdict = diagnosis.diagnose({"npu": {}, "instances": [found]}, {"disk_full_share": 0.9, "restart_window_s": 3600})
    assert verdict["healthy"], verdict
    (dead,) = verdict["findings"]
    assert dead["rule"] == "engine_dead" and dead["severity"] == "warning" and dead["count"] == 2, dead
    assert "2026-12-04T13:16:31Z" in dead["history"] and "served since" in dead["history"], dead

    detail["State"]["StartedAt"] = "2026-12-04T13:16:19.801234567Z"  # the first of them, at the start
    found = host_evidence.instance_evidence(instance, "Qwen3-VL-8B-Instruct", params, now, runner)
    verdict = diagnosis.diagnose({"npu": {}, "instances": [found]}, {"disk_full_share": 0.9, "restart_window_s": 3600})
    assert not verdict["healthy"] and [item["rule"] for item in verdict["findings"]] == ["engine_dead"], verdict
