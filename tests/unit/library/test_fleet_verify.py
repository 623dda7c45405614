"""library/fleet_verify.py as Ansible runs it, on a host without Docker (tests/verified_host.py: a twin host's files,
a Docker CLI that answers `docker inspect` from a file, a local server that answers as vLLM does): a host that serves
its recorded plan passes, in check mode too; one that differs fails with each difference on a line; options it
cannot use and a Docker it cannot run are refused by name; the key is in nothing it returns (the judgement:
tests/unit/module_utils/test_verification.py; the playbook: tests/local/test_verify_play.py)."""
import json

import pytest
from fake_vllm import server  # noqa: F401  (the fixture)
from module_runs import SECRET, assert_refused, run_module
from verified_host import CONFIG_HASH, IMAGE, ServedHost


@pytest.fixture
def host(tmp_path, server):  # noqa: F811
    return ServedHost(tmp_path, int(server.rsplit(":", 1)[1]))


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_host_that_serves_its_recorded_plan_is_verified_in_check_mode_too(host, check_mode):
    result = run_module("fleet_verify", _ansible_check_mode=check_mode, **host.module_args(api_key=SECRET))
    assert not result.get("failed") and result["verified"] and not result["changed"], result
    assert result["failures"] == [] and result["checks"] == 23
    assert result["summary"] == "npu-a: verified: 1 instance(s), 23 checks passed"
    assert SECRET not in json.dumps(result)


def test_a_host_that_differs_fails_with_each_difference_on_a_line(host):
    host.serve(HostConfig={"RestartPolicy": {"Name": "no"}, "Devices": []},
               Config={"Image": IMAGE, "Labels": {"ascend-vllm-fleet.config-hash": "0000"}})
    result = run_module("fleet_verify", **host.module_args(api_key=SECRET, driver_version="25.5.1"))
    assert result["failed"] and not result["verified"]
    lines = result["msg"].splitlines()
    assert lines[0] == "npu-a: 4 of %d checks failed" % result["checks"]
    assert [line.split(". Fix: ")[0] for line in lines[1:]] == [
        "npu-a: driver is 25.5.2, expected 25.5.1",
        "npu-a, instance vllm-ascend: restart policy no, expected unless-stopped",
        "npu-a, instance vllm-ascend: config-hash label 0000, expected %s (the rendered script's, %s): it does not "
        "run what the deploy rendered" % (CONFIG_HASH, host.script),
        "npu-a, instance vllm-ascend: maps no chip, expected its planned chips %s" % " ".join(host.chips)]
    assert [item["message"] for item in result["failures"]] == lines[1:]
    assert SECRET not in json.dumps(result)


def test_a_stopped_instance_is_not_asked(host):
    host.serve(State={"Status": "exited", "Running": False, "StartedAt": "2026-12-04T14:00:00Z"})
    result = run_module("fleet_verify", **host.module_args())
    assert [item["check"] for item in result["failures"]] == ["running"], result["failures"]


def test_a_host_with_neither_driver_nor_plan_is_named_so(tmp_path):
    result = run_module("fleet_verify", host="npu-x", plan_file=str(tmp_path / "plan.json"),
                        npu_smi=str(tmp_path / "npu-smi"), driver_home=str(tmp_path), firmware_home=str(tmp_path),
                        install_info=str(tmp_path / "install.info"), driver_version="25.5.2",
                        firmware_version="7.8.0.7.220")
    assert result["failed"] and [item["check"] for item in result["failures"]] == ["npu_smi", "plan"], result
    assert "npu-x: no serving plan at %s, expected the one the deploy records" % (tmp_path / "plan.json") \
        in result["msg"]


def test_a_plan_of_another_format_is_a_failure_that_names_it(host):
    host.plan_file.write_text(json.dumps({"format": 2, "host": "npu-a", "instances": []}))
    result = run_module("fleet_verify", **host.module_args())
    (failure,) = result["failures"]
    assert failure["check"] == "plan" and "format 2, expected 1" in failure["message"], failure
    assert "Fix: deploy the host again" in failure["message"]


@pytest.mark.parametrize("option,value,named", [
    ("request_timeout", 0, "request_timeout: 0 is not allowed"),
    ("timeout", 0, "timeout: 0 is not allowed"),
    ("api_key", SECRET + "\nX-Injected: 1", "api_key holds a line break"),
    ("docker", "/nonexistent/docker", "/nonexistent/docker"),
])
def test_options_it_cannot_use_are_refused_by_name(host, option, value, named):
    result = run_module("fleet_verify", **host.module_args(**dict({"api_key": SECRET}, **{option: value})))
    assert_refused(result, named)
    assert SECRET not in json.dumps(result)
