"""The preflight verdicts (plugins/filter/ascend_preflight.py) on hand-made facts."""
import copy

import pytest
import serving_plans
import yaml

from ansible_collections.ascend.fleet.plugins.filter import ascend_preflight as preflight
from conftest import REPO

SETTINGS = {
    "architecture": "aarch64", "allowed_architectures": ["aarch64", "x86_64"],
    "driver_version": "25.5.2", "firmware_version": "7.8.0.7.220", "version_policy": "exact", "strict": True,
    "allowed_products": ["Atlas 300I Duo"], "unhealthy_chip_action": "fail", "containers": [],
    "label_prefix": "ascend-vllm-fleet",
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


def holder(name, devices, labels=None, status="running", image="quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"):
    """A container as the npu_holders module lists it."""
    return {"id": name * (64 // len(name) + 1), "name": name, "image": image, "devices": list(devices),
            "labels": labels or {}, "status": status}


OURS = {"ascend-vllm-fleet.instance": "vllm-ascend", "ascend-vllm-fleet.host": "npu-a"}


def test_foreign_process_fails_but_our_containers_do_not():
    facts = duo_facts()
    ours = holder("vllm-ascend", ["/dev/davinci3"], labels=OURS)
    facts["processes"] = [{"npu_id": 1, "chip_id": 0, "pid": 41877, "name": "python3.9", "memory_mb": 15321,
                           "container_id": None},
                          {"npu_id": 2, "chip_id": 1, "pid": 500, "name": "vllm", "memory_mb": 9000,
                           "container_id": ours["id"]}]
    failure = only_failure(judge(facts, containers=[ours]))
    assert failure["found"] == "pid 41877 (python3.9, 15321 MB) on NPU 1 chip 0"
    assert "-8020" in failure["fix"]


def test_a_container_of_another_owner_on_a_chip_fails_naming_it():
    # Running or restarting (a restart policy takes the chip again): either holds it from ours.
    exporter = holder("npu-exporter", ["/dev/davinci0", "/dev/davinci_manager"], image="npu-exporter:v6.0.0")
    job = holder("llm-test", ["/dev/davinci3", "/dev/davinci2"], status="restarting")
    result = judge(duo_facts(), containers=[exporter, job, holder("vllm-ascend", ["/dev/davinci1"], labels=OURS)])
    assert [(f["check"], f["found"]) for f in result["failures"]] == [
        ("chip held by a container", "container npu-exporter (image npu-exporter:v6.0.0, running) maps /dev/davinci0"),
        ("chip held by a container", "container llm-test (image quay.io/ascend/vllm-ascend:v0.18.0rc1-310p, "
                                     "restarting) maps /dev/davinci2, /dev/davinci3")]
    failure = result["failures"][0]
    assert failure["required"] == "no container but this collection's (label ascend-vllm-fleet.instance) mapping a chip"
    assert "`docker update --restart=no npu-exporter && docker stop npu-exporter`" in failure["fix"]
    assert "`docker rm -f npu-exporter`" in failure["fix"] and "drvRet=87" in failure["fix"]
    assert "teardown" not in failure["fix"]


def test_containers_that_map_no_chip_of_the_host_pass():
    # The manager device alone, a privileged agent (it sees every chip and opens none, as the server phase
    # judges it), and a chip node this host does not have.
    containers = [holder("manager-only", ["/dev/davinci_manager"]), holder("agent", ["all"]),
                  holder("elsewhere", ["/dev/davinci9"])]
    assert judge(duo_facts(), containers=containers)["failures"] == []


def test_our_containers_under_the_prefix_in_use_are_ours_and_no_other():
    facts = duo_facts()
    ours = holder("vllm-ascend", ["/dev/davinci0"], labels={"site-b.instance": "vllm-ascend", "site-b.host": "npu-a"})
    assert judge(facts, containers=[ours], label_prefix="site-b")["failures"] == []
    failure = only_failure(judge(facts, containers=[ours]))
    assert failure["found"] == ("container vllm-ascend (image quay.io/ascend/vllm-ascend:v0.18.0rc1-310p, running) "
                                "maps /dev/davinci0")
    assert failure["fix"].startswith(
        "it is an instance of an earlier deploy of this collection under fleet_label_prefix site-b: take that deploy "
        "away with `ansible-playbook playbooks/teardown.yml -e fleet_label_prefix=site-b --limit <host>`")
    assert "`docker rm -f vllm-ascend`" in failure["fix"]


def test_the_containers_the_server_phase_starts_are_the_ones_preflight_trusts():
    # Both roles read fleet_label_prefix, and the server labels its containers as preflight judges them.
    (judge_task,) = [task for task in yaml.safe_load((REPO / "roles/ascend_preflight/tasks/host.yml").read_text())
                     if task["name"] == "Judge the host"]
    assert judge_task["vars"]["ascend_preflight_settings"]["label_prefix"] == "{{ fleet_label_prefix }}"
    server_vars = yaml.safe_load((REPO / "roles/vllm_server/vars/main.yml").read_text())
    assert server_vars["vllm_server_run_options"]["label_prefix"] == "{{ fleet_label_prefix }}"
    facts = duo_facts()
    recorded = serving_plans.recorded(facts, "npu-a")
    (instance,) = recorded["instances"]
    run = serving_plans.vllm_server.vllm_server_docker_run(instance, recorded, {
        "docker_bin": "docker", "label_prefix": "site-b", "restart_policy": "always", "shm_size": "10g",
        "privileged": False, "dcmi_dir": "/usr/local/dcmi", "npu_smi": "/usr/local/bin/npu-smi",
        "driver_home": "/usr/local/Ascend/driver", "install_info": "/etc/ascend_install.info",
        "cache_dir": "/var/cache/vllm-ascend", "model_dir": "/m", "model_container_dir": "/m",
        "bind_address": "0.0.0.0", "container_port": 8000, "env": {}, "env_file": "",
        "gpu_memory_utilization": 0.75, "max_model_len": 8192, "tensor_parallel_size": 2, "enforce_eager": True,
        "compilation_config": {}, "additional_config": {}, "dtype": "float16", "max_pixels": 0, "extra_args": [],
        "jemalloc_path": "",
        "cpu_binding": "cpuset", "hub_offline": True, "usage_stats": False, "ready_timeout": 1200, "log_driver": "",
        "log_options": {}})
    labels = dict(line[1].split("=", 1) for line in run if line[0] == "--label")
    started = holder(instance["name"], instance["devices"], labels=labels)
    assert judge(facts, containers=[started], label_prefix="site-b")["failures"] == []
    assert only_failure(judge(facts, containers=[started]))["check"] == "chip held by a container"


def test_a_container_on_a_chip_is_named_when_npu_smi_fails_for_it():
    facts = dict(duo_facts(), ready=False, problems=["`npu-smi info` failed: dcmi module initialize failed. ret is "
                                                      "-8005"])
    result = judge(facts, containers=[holder("llm-test", ["/dev/davinci0"])])
    assert [f["check"] for f in result["failures"]] == ["NPU ready", "chip held by a container"]


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
