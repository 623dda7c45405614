"""The driver and firmware plan and the check after it (plugins/filter/ascend_driver.py), on hand-made facts."""

import pytest
import yaml

from ansible_collections.ascend.fleet.plugins.filter import ascend_driver as driver
from conftest import REPO

DEFAULTS = yaml.safe_load((REPO / "roles/ascend_driver/defaults/main.yml").read_text())
DRIVER = "Ascend-hdk-310p-npu-driver_25.5.2_linux-aarch64.run"
FIRMWARE = "Ascend-hdk-310p-npu-firmware_7.8.0.7.220.run"
OURS = {"id": "a" * 64, "name": "vllm-ascend", "image": "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p",
        "devices": ["/dev/davinci0"], "labels": {"ascend-vllm-fleet.instance": "vllm-ascend"}}


def settings(**changes):
    base = {"driver_version": "25.5.2", "firmware_version": "7.8.0.7.220",
            "packages": {"driver": DRIVER, "firmware": FIRMWARE}, "packages_dir": "/srv/inventory/ascend-hdk",
            "missing_packages": [], "allow_rollback": False, "rollback_floor": DEFAULTS["ascend_driver_rollback_floor"],
            "holders": {"processes": [], "containers": []}, "label_prefix": "ascend-vllm-fleet",
            "disk_paths": ["/var/lib/ascend-vllm-fleet/hdk", "/usr/local/Ascend"],
            "mounts": [{"mount": "/", "size_available": 50 * 1024 ** 3}], "min_free_mb": 2048, "secure_boot": ""}
    base.update(changes)
    return base


def facts(driver="25.5.2", firmware="7.8.0.7.220", loaded=None, running=None, npu_ids=(6, 224)):
    """npu_facts' answer for a host with Duo cards; driver None: no driver installed (and no npu-smi)."""
    if driver is None:
        return {"present": False, "ready": False, "driver_version": None, "driver_version_file": None,
                "firmware_version_file": None, "cards": [], "unhealthy_npu_ids": [], "problems": ["npu-smi not found"]}
    loaded = loaded or driver
    return {"present": True, "ready": True, "driver_version": loaded, "driver_version_file": driver,
            "firmware_version_file": firmware, "unhealthy_npu_ids": [], "problems": [],
            "cards": [{"npu_id": npu_id, "firmware_version": running or firmware, "software_version": loaded}
                      for npu_id in npu_ids]}


def test_a_host_on_the_release_is_left_alone():
    plan = driver.ascend_driver_plan(facts(), settings())
    assert (plan["state"], plan["steps"], plan["reboot"], plan["problems"]) == ("current", [], "no", [])
    assert plan["reboot_needed"] is False
    # Nothing to do: a chip held by anyone does not matter, nor do missing packages.
    busy = settings(holders={"processes": [], "containers": [dict(OURS, id="b" * 64, labels={}, name="x")]},
                    missing_packages=[DRIVER, FIRMWARE])
    assert driver.ascend_driver_plan(facts(), busy)["state"] == "current"


def test_a_host_without_a_driver_gets_the_driver_first_then_the_firmware():
    plan = driver.ascend_driver_plan(facts(driver=None), settings())
    assert plan["state"] == "install"
    assert [(step["component"], step["options"]) for step in plan["steps"]] == [
        ("driver", ["--nox11", "--full", "--install-for-all", "--quiet"]),
        ("firmware", ["--nox11", "--full", "--quiet"])]
    assert plan["reboot"].startswith("needed") and plan["reboot_needed"] is True


def test_an_upgrade_puts_the_firmware_first_and_reboots():
    plan = driver.ascend_driver_plan(facts("24.1.rc2", "7.3.0.1.231"), settings())
    assert plan["state"] == "upgrade"
    assert [(step["component"], step["from"], step["to"], step["package"], step["options"])
            for step in plan["steps"]] == [
        ("firmware", "7.3.0.1.231", "7.8.0.7.220", FIRMWARE, ["--nox11", "--upgrade", "--quiet"]),
        ("driver", "24.1.rc2", "25.5.2", DRIVER, ["--nox11", "--upgrade", "--quiet"])]
    assert plan["reboot"].startswith("needed")
    line = driver.describe("npu-node-02", plan)
    assert "firmware upgrade 7.3.0.1.231 -> 7.8.0.7.220" in line and line.index("firmware") < line.index("driver")


def test_a_driver_alone_reboots_only_if_its_hot_reset_fails():
    plan = driver.ascend_driver_plan(facts("25.5.1", "7.8.0.7.220"), settings())
    assert [step["component"] for step in plan["steps"]] == ["driver"]
    assert plan["reboot"].startswith("only if") and plan["reboot_needed"] is False


def test_firmware_installed_but_not_running_owes_a_reboot():
    plan = driver.ascend_driver_plan(facts(running="7.3.0.1.231"), settings())
    assert (plan["state"], plan["steps"], plan["reboot_owed"], plan["reboot_needed"]) == ("reboot", [], True, True)
    assert "chips run 7.3.0.1.231" in plan["reboot"]
    plan = driver.ascend_driver_plan(facts(loaded="24.1.rc2"), settings())
    assert plan["state"] == "reboot" and "24.1.rc2 is loaded" in plan["reboot"]


def test_a_rollback_is_refused_unless_asked_and_never_below_the_floor():
    newer = facts("25.5.2", "7.8.0.7.220")
    plan = driver.ascend_driver_plan(newer, settings(driver_version="25.5.1", firmware_version="7.8.0.6.201"))
    assert plan["state"] == "refused"
    assert any("ascend_driver_allow_rollback: true" in problem for problem in plan["problems"])
    plan = driver.ascend_driver_plan(newer, settings(driver_version="25.5.1", firmware_version="7.8.0.6.201",
                                                     allow_rollback=True))
    assert plan["state"] == "rollback" and [step["component"] for step in plan["steps"]] == ["firmware", "driver"]
    plan = driver.ascend_driver_plan(newer, settings(driver_version="23.0.rc3", firmware_version="7.0.0.5.242",
                                                     allow_rollback=True))
    assert plan["state"] == "refused" and "oldest release" in " ".join(plan["problems"])


def test_rc_versions_order_before_their_release():
    # 25.5.rc1 is older than 25.5.0: going there from 25.5.0 is a rollback, not an upgrade.
    plan = driver.ascend_driver_plan(facts("25.5.0", "7.8.0.7.220"), settings(driver_version="25.5.rc1"))
    assert plan["driver"]["action"] == "rollback"


def test_a_foreign_container_or_process_on_a_chip_refuses_the_host_by_name():
    exporter = {"id": "c" * 64, "name": "npu-exporter", "image": "ascendhub/npu-exporter:v6",
                "devices": ["/dev/davinci0"], "labels": {}}
    job = {"pid": 41877, "name": "python3.9", "devices": ["/dev/davinci1"], "container_id": None}
    inside_ours = {"pid": 5, "name": "vllm", "devices": ["/dev/davinci0"], "container_id": OURS["id"]}
    holders = {"containers": [OURS, exporter], "processes": [job, inside_ours]}
    plan = driver.ascend_driver_plan(facts("24.1.rc2", "7.3.0.1.231"), settings(holders=holders))
    assert plan["state"] == "refused"
    text = " ".join(plan["problems"])
    assert "container npu-exporter" in text and "docker stop npu-exporter" in text
    assert "python3.9 (pid 41877)" in text
    assert "vllm-ascend" not in text and "pid 5" not in text  # this collection's own stop with their container


def test_missing_packages_and_disk_are_named_with_their_fix():
    tight = [{"mount": "/", "size_available": 100 * 1024 ** 2}]
    plan = driver.ascend_driver_plan(facts("24.1.rc2", "7.3.0.1.231"),
                                     settings(missing_packages=[FIRMWARE], mounts=tight))
    text = " ".join(plan["problems"])
    assert "%s is not on the controller" % FIRMWARE in text and "/srv/inventory/ascend-hdk" in text
    assert DRIVER not in text
    assert "100 MB free on /" in text and "need 2048 MB" in text


def test_secure_boot_is_reported_when_there_is_work():
    plan = driver.ascend_driver_plan(facts(driver=None), settings(secure_boot="SecureBoot enabled"))
    assert plan["state"] == "install" and "Secure Boot is enabled" in plan["warnings"][0]


def test_package_names_follow_huaweis():
    assert driver.ascend_driver_package_name("driver", "25.5.2", "310p", "aarch64") == DRIVER
    assert driver.ascend_driver_package_name("firmware", "7.8.0.7.220", "310p", "aarch64") == FIRMWARE


def test_every_default_release_pair_is_its_own_release():
    pairs = DEFAULTS["ascend_driver_release_pairs"]
    assert pairs["25.5.2"] == "7.8.0.7.220" and pairs["24.1.rc2"] == "7.3.0.1.231"
    fleet = yaml.safe_load((REPO / "roles/fleet/defaults/main.yml").read_text())
    assert pairs[fleet["fleet_driver_version"]] == fleet["fleet_firmware_version"]


@pytest.mark.parametrize("changes,expected", [
    ({}, []),
    ({"driver_version": "24.1.rc2"}, ["the loaded driver is 24.1.rc2, not 25.5.2", "NPU 6 runs driver 24.1.rc2"]),
    ({"firmware": "7.3.0.1.231"}, ["NPU 6 runs firmware 7.3.0.1.231, not 7.8.0.7.220"]),
    ({"unhealthy": [224]}, ["NPU 224 not healthy"]),
    ({"ready": False}, ["npu-smi does not list the chips"]),
])
def test_the_check_after_names_what_is_still_wrong(changes, expected):
    found = facts(loaded=changes.get("driver_version"), running=changes.get("firmware"))
    found["unhealthy_npu_ids"] = changes.get("unhealthy", [])
    if changes.get("ready") is False:
        found["ready"] = False
    problems = driver.ascend_driver_verify(found, {"driver_version": "25.5.2", "firmware_version": "7.8.0.7.220",
                                                   "module": "drv_pcie_host", "module_loaded": None})
    for piece in expected:
        assert any(piece in problem for problem in problems), (piece, problems)
    if not expected:
        assert problems == []


def test_the_check_after_requires_the_module_when_it_can_be_read():
    wanted = {"driver_version": "25.5.2", "firmware_version": "7.8.0.7.220", "module": "drv_pcie_host"}
    assert driver.ascend_driver_verify(facts(), dict(wanted, module_loaded=True)) == []
    assert driver.ascend_driver_verify(facts(), dict(wanted, module_loaded=None)) == []
    assert driver.ascend_driver_verify(facts(), dict(wanted, module_loaded=False)) == [
        "the driver's kernel module drv_pcie_host is not loaded (lsmod)"]
