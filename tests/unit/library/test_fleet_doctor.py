"""library/fleet_doctor.py as Ansible runs it: a host with neither driver nor plan is named so, options it cannot
use are refused naming them (the doctor on the twin: tests/integration/test_failure_modes.py)."""
import pytest
from module_runs import run_module


def test_a_host_without_driver_or_plan_is_named_so(tmp_path):
    result = run_module("fleet_doctor", host="npu-x", plan_file=str(tmp_path / "plan.json"),
                        npu_smi=str(tmp_path / "npu-smi"), driver_home=str(tmp_path), firmware_home=str(tmp_path),
                        install_info=str(tmp_path / "install.info"), disk_paths={"model": str(tmp_path / "m")})
    assert not result.get("failed") and not result["changed"], result
    assert [item["rule"] for item in result["findings"]] == ["npu_smi_unusable"], result["findings"]
    assert "no serving plan at %s" % (tmp_path / "plan.json") in result["plan_problem"]
    assert result["summary"].startswith("npu-x: npu_smi_unusable: ") and "no serving plan" in result["summary"]
    assert result["instances"] == []


@pytest.mark.parametrize("option,value,named", [
    ("disk_full_share", 0, "disk_full_share is 0.0"),
    ("log_lines", 0, "log_lines"),
    ("timeout", 0, "timeout"),
    ("restart_window_s", -1, "restart_window_s"),
    ("disk_paths", {"model": "data/models"}, "disk_paths: model is 'data/models'"),
])
def test_options_it_cannot_use_are_refused_by_name(tmp_path, option, value, named):
    result = run_module("fleet_doctor", host="npu-x", plan_file=str(tmp_path / "plan.json"), **{option: value})
    assert result.get("failed") and named in result["msg"] and "Fix:" in result["msg"], result
