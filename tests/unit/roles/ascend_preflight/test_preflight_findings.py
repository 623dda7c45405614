"""The preflight verdicts (plugins/filter/ascend_preflight.py) on hand-made facts."""
import copy

import pytest

from ansible_collections.ascend.fleet.plugins.filter import ascend_preflight as preflight

SETTINGS = {
    "architecture": "aarch64", "allowed_architectures": ["aarch64", "x86_64"],
    "driver_version": "25.5.2", "firmware_version": "7.8.0.7.220", "version_policy": "exact", "strict": True,
    "allowed_products": ["Atlas 300I Duo"], "unhealthy_chip_action": "fail", "own_container_ids": [],
    "disk_checks": [], "mounts": [],
}


def duo_facts(npu_ids=(1, 2)):
    """Facts of a healthy host with Duo cards, shaped as npu_facts returns them."""
    chips, cards = [], []
    for index, npu_id in enumerate(npu_ids):
        cards.append({"npu_id": npu_id, "product_type": "Atlas 300I Duo", "chip_count": 2,
                      "firmware_version": "7.8.0.7.220", "chip_fault_count": 0, "health_problems": []})
        for chip_id in (0, 1):
            logic = 2 * index + chip_id
            chips.append({"npu_id": npu_id, "chip_id": chip_id, "logic_id": logic, "name": "310P3", "health": "OK",
                          "phy_id": logic, "device": "/dev/davinci%d" % logic, "cpu_affinity": list(range(24))})
    return {"present": True, "ready": True, "problems": [], "phy_ids_known": True, "driver_version": "25.5.2",
            "driver_version_file": "25.5.2", "firmware_version": "7.8.0.7.220", "cards": cards, "chips": chips,
            "devices": [chip["device"] for chip in chips], "processes": [], "unhealthy_npu_ids": [],
            "manager_devices": ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"],
            "missing_manager_devices": []}


def make_unhealthy(facts, problems):
    """npu_facts' verdict on the cards: NPU id -> its health problems."""
    for card in facts["cards"]:
        card["health_problems"] = problems.get(card["npu_id"], [])
    facts["unhealthy_npu_ids"] = sorted(problems)


def judge(facts, **settings):
    return preflight.ascend_preflight_findings(facts, dict(SETTINGS, **settings))


def only_failure(result):
    assert len(result["failures"]) == 1, result["failures"]
    return result["failures"][0]


def test_good_host_passes_and_is_described():
    facts = dict(duo_facts(), cpu_model="Kunpeng-920", card_count=2, chip_count=4)
    result = judge(facts)
    assert (result["failures"], result["warnings"], result["excluded_npu_ids"]) == ([], [], [])
    assert result["description"] == ("aarch64 Kunpeng-920; 2 card(s) Atlas 300I Duo, 4 chip(s); driver 25.5.2, "
                                     "firmware 7.8.0.7.220")


def test_24x_driver_gets_its_own_explanation():
    facts = dict(duo_facts(), driver_version="24.1.rc2.2", driver_version_file="24.1.rc2.2")
    failure = only_failure(judge(facts))
    assert failure["check"] == "driver version"
    assert "24.1.rc2.2 (a 24.x driver)" in failure["found"]
    assert "crash" in failure["fix"] and "slow" in failure["fix"] and "25.5.2" in failure["fix"]
    assert failure["message"].startswith("driver version: found 24.1.rc2.2")


def test_versions_compare_case_insensitively():
    facts = dict(duo_facts(), driver_version="25.5.RC1", driver_version_file="25.5.rc1")
    assert judge(facts, driver_version="25.5.rc1")["failures"] == []


def test_loaded_and_installed_driver_disagree_means_reboot():
    facts = dict(duo_facts(), driver_version_file="25.5.3")
    failure = only_failure(judge(facts))
    assert failure["check"] == "driver loaded vs installed" and "reboot" in failure["fix"]


def test_firmware_is_checked_per_card():
    facts = duo_facts()
    facts["cards"][1]["firmware_version"] = "7.8.0.6.201"
    failure = only_failure(judge(facts))
    assert failure["found"] == "7.8.0.6.201 on NPU 2" and failure["required"] == "exactly 7.8.0.7.220"


@pytest.mark.parametrize("found,required,ok", [
    ("25.5.2", "25.5.2", True), ("25.5.3", "25.5.2", True), ("25.5.rc1", "25.5.0", False),
    ("25.5.0", "25.5.rc1", True), ("24.1.rc2.2", "25.5.2", False), ("7.8.0.7.220", "7.8.0.7.220", True),
    ("7.10.0.1.1", "7.8.0.7.220", True), ("25.5.2", "25.5.2.1", False),
])
def test_minimum_policy_orders_versions(found, required, ok):
    assert preflight.version_ok(found, required, "minimum") is ok


def test_not_strict_turns_version_mismatch_into_a_warning():
    facts = dict(duo_facts(), driver_version="25.3.rc1", driver_version_file="25.3.rc1")
    result = judge(facts, strict=False)
    assert result["failures"] == [] and [w["check"] for w in result["warnings"]] == ["driver version"]


def test_pro_card_refused_unless_allowed():
    facts = duo_facts(npu_ids=(8,))
    facts["cards"][0]["product_type"] = "Atlas 300I Pro"
    assert "NPU 8 is Atlas 300I Pro" in only_failure(judge(facts))["found"]
    assert judge(facts, allowed_products=["Atlas 300I Duo", "Atlas 300I Pro"])["failures"] == []


def test_product_inferred_from_chip_count_when_the_query_failed():
    facts = duo_facts()
    for card in facts["cards"]:
        card["product_type"] = None
    assert judge(facts)["failures"] == []


def test_910b_host_is_not_a_310p_host():
    facts = duo_facts(npu_ids=(0,))
    facts["cards"][0]["product_type"] = None
    for chip in facts["chips"]:
        chip["name"] = "910B2C"
    assert "unknown type (chips: 910B2C)" in only_failure(judge(facts))["found"]


def test_unhealthy_card_fails_or_is_excluded():
    facts = duo_facts(npu_ids=(6, 224, 1792))
    make_unhealthy(facts, {224: ["chip 1 health Alarm", "1 chip fault(s)"], 1792: ["chip 0 health Warning"]})
    failure = only_failure(judge(facts))
    assert failure["check"] == "chip health"
    assert failure["found"] == "NPU 224: chip 1 health Alarm, 1 chip fault(s); NPU 1792: chip 0 health Warning"
    assert failure["required"] == "every chip OK with no chip fault"
    assert "exclude_card" in failure["fix"]
    assert failure["message"] == "chip health: found %s; required %s. Fix: %s" % (
        failure["found"], failure["required"], failure["fix"])
    excluded = judge(facts, unhealthy_chip_action="exclude_card")
    assert excluded["failures"] == [] and excluded["excluded_npu_ids"] == [224, 1792]
    (warning,) = excluded["warnings"]
    assert warning["found"] == ("NPU 224: chip 1 health Alarm, 1 chip fault(s); NPU 1792: chip 0 health Warning "
                                "(card left out of the serving plan)")
    assert warning["required"] == "every chip OK"


def test_the_facts_verdict_decides_not_the_raw_health():
    # npu_facts derives the verdict from the chips and boards; preflight only reads it.
    facts = duo_facts()
    facts["chips"][0]["health"] = "Alarm"
    assert judge(facts)["failures"] == []


def test_excluding_every_card_fails():
    facts = duo_facts(npu_ids=(6,))
    make_unhealthy(facts, {6: ["chip 0 health Critical"]})
    failure = only_failure(judge(facts, unhealthy_chip_action="exclude_card"))
    assert failure["required"] == "at least one healthy card to serve on"
    assert failure["found"] == "NPU 6: chip 0 health Critical"


def test_missing_device_nodes():
    # As npu_facts gives them: no node maps to the chip, so it has no physical id and no device.
    facts = duo_facts()
    facts["devices"].remove("/dev/davinci3")
    facts["chips"][3].update(phy_id=None, device=None)
    facts["manager_devices"].remove("/dev/hisi_hdc")
    facts["missing_manager_devices"] = ["/dev/hisi_hdc"]
    result = judge(facts)
    assert [f["check"] for f in result["failures"]] == ["device nodes", "manager devices"]
    assert result["failures"][0]["found"] == "missing a node for logic id 3 (NPU 2 chip 1)"
    assert (result["failures"][1]["found"], result["failures"][1]["required"]) == (
        "missing /dev/hisi_hdc", "davinci_manager, devmm_svm and hisi_hdc")


def remapped_without_phy_ids():
    """A host whose nodes are davinci0, 1, 4, 5 for logic ids 0-3, read by an npu-smi without phyid-remap."""
    facts = duo_facts()
    facts["phy_ids_known"], facts["device_numbering"] = False, "unknown"
    facts["phyid_remap_error"] = "`npu-smi info -t phyid-remap -p 0` (exit 1): Usage: npu-smi info <command>"
    facts["devices"] = ["/dev/davinci%d" % n for n in (0, 1, 4, 5)]
    for chip in facts["chips"]:
        chip["phy_id"] = None
    return facts


def test_unknown_physical_ids_with_other_node_numbers_fail():
    failure = only_failure(judge(remapped_without_phy_ids()))
    assert failure["check"] == "device numbering"
    assert failure["found"] == ("nodes /dev/davinci0 /dev/davinci1 /dev/davinci4 /dev/davinci5 for chips with logic "
                                "ids 0 1 2 3, and npu-smi cannot tell which node is which chip (`npu-smi info -t "
                                "phyid-remap -p 0` (exit 1): Usage: npu-smi info <command>)")
    assert "npu-smi info -t phyid-remap -p <N>" in failure["fix"]


def test_unknown_physical_ids_pass_where_nodes_are_the_logic_ids():
    facts = duo_facts()
    facts["phy_ids_known"], facts["device_numbering"] = False, "logic_id"
    assert judge(facts)["failures"] == []


def test_manager_devices_named_as_the_facts_name_them():
    facts = duo_facts()
    facts["manager_devices"] = ["/srv/dev/hisi_hdc"]
    facts["missing_manager_devices"] = ["/srv/dev/davinci_manager", "/srv/dev/devmm_svm"]
    failure = only_failure(judge(facts))
    assert failure["found"] == "missing /srv/dev/davinci_manager, /srv/dev/devmm_svm"
    assert failure["required"] == "davinci_manager, devmm_svm and hisi_hdc"


def test_foreign_process_fails_but_our_containers_do_not():
    facts = duo_facts()
    facts["processes"] = [{"npu_id": 1, "chip_id": 0, "pid": 41877, "name": "python3.9", "memory_mb": 15321,
                           "container_id": None},
                          {"npu_id": 2, "chip_id": 1, "pid": 500, "name": "vllm", "memory_mb": 9000,
                           "container_id": "a" * 64}]
    failure = only_failure(judge(facts, own_container_ids=["a" * 64]))
    assert failure["found"] == "pid 41877 (python3.9, 15321 MB) on NPU 1 chip 0"
    assert "-8020" in failure["fix"]


def test_dcmi_failure_is_reported_with_its_cause_and_versions_still_checked():
    facts = {"present": True, "ready": False, "driver_version": None, "driver_version_file": "24.1.rc2.2",
             "problems": ["`npu-smi info` failed: dcmi module initialize failed. ret is -8005: held by ..."]}
    result = judge(facts)
    checks = [f["check"] for f in result["failures"]]
    assert checks[0] == "NPU ready" and "ret is -8005" in result["failures"][0]["found"]
    assert "driver version" in checks


def test_absent_npu_smi():
    result = judge({"present": False, "ready": False, "problems": ["npu-smi not found (...)"]})
    assert result["failures"][0]["check"] == "npu-smi"


def test_architecture():
    assert only_failure(judge(duo_facts(), architecture="ppc64le"))["check"] == "CPU architecture"


def test_disk_space_uses_the_longest_matching_mount():
    mounts = [{"mount": "/", "size_available": 100 * 1024 ** 3},
              {"mount": "/data", "size_available": 5 * 1024 ** 3}]
    checks = [{"path": "/data/models", "min_free_gb": 20, "purpose": "the model weights"},
              {"path": "/var/lib/docker", "min_free_gb": 30, "purpose": "the vLLM-Ascend image"}]
    failure = only_failure(judge(duo_facts(), disk_checks=checks, mounts=mounts))
    assert failure["check"] == "free disk for the model weights"
    assert failure["found"] == "5.0 GB free on /data (holding /data/models)"


def test_summary_lists_every_host():
    passed = {"failures": [], "warnings": [], "description": "aarch64 Kunpeng-920"}
    failed = {"failures": [{"message": "driver version: found 24.1"}], "warnings": []}
    hostvars = {"a": {"ascend_preflight_result": passed}, "b": {"ascend_preflight_result": failed}, "c": {}}
    assert preflight.ascend_preflight_summary(hostvars, ["a", "b", "c"]) == [
        "a: PASSED (aarch64 Kunpeng-920)", "b: FAILED: driver version: found 24.1",
        "c: NO RESULT (unreachable, or failed before the checks ran)"]


def test_inputs_are_not_modified():
    facts = duo_facts()
    before = copy.deepcopy(facts)
    judge(facts)
    assert facts == before


def test_host_tuning_that_differs_is_a_warning_and_what_the_host_lacks_is_nothing():
    tuning = [
        {"name": "cpu_governor", "wanted": "performance", "current": "schedutil", "state": "differs"},
        {"name": "vm.swappiness", "wanted": "0", "current": "0", "state": "ok"},
        {"name": "kernel.numa_balancing", "wanted": "0", "current": "1", "state": "differs"},
        {"name": "kernel.sched_migration_cost_ns", "wanted": "50000", "current": "", "state": "unavailable"},
    ]
    result = judge(duo_facts(), tuning=tuning)
    assert result["failures"] == []
    assert [warning["message"] for warning in result["warnings"]] == [
        "host tuning: found cpu_governor is schedutil; required performance (fleet_host_tuning_governor, from "
        "vLLM-Ascend's tuning guide). Fix: ansible-playbook playbooks/host_tuning.yml applies it for good",
        "host tuning: found kernel.numa_balancing is 1; required 0 (fleet_host_tuning_sysctls, from vLLM-Ascend's "
        "tuning guide). Fix: ansible-playbook playbooks/host_tuning.yml applies it for good"]
