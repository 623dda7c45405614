"""library/npu_facts.py: parsers against every real sample, and the whole module against fake hosts."""
import json
import subprocess
import sys

import pytest

from conftest import REPO, read_fixture, venv_tool
from twin import hosts

sys.path.insert(0, str(REPO / "library"))
import npu_facts  # noqa: E402  (a module file, not a package)

MODULE = REPO / "library" / "npu_facts.py"


# --- npu-smi info ----------------------------------------------------------------------------------------

def test_table_duo_25_0_with_a_process():
    table = npu_facts.parse_table(read_fixture("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt"))
    assert (table["npu_smi_version"], table["driver_version"]) == ("25.0.rc1.1", "25.0.rc1.1")
    assert table["chips"] == [
        {"npu_id": 6, "name": "310P3", "health": "OK", "power_w": None, "temperature_c": 55,
         "hugepages_used": 0, "hugepages_total": 0, "chip_id": 0, "logic_id": 0, "bus_id": "0000:83:00.0",
         "aicore_percent": 0, "memory_used_mb": 1175, "memory_total_mb": 44280},
        {"npu_id": 6, "name": "310P3", "health": "OK", "power_w": None, "temperature_c": 52,
         "hugepages_used": 3262, "hugepages_total": 3262, "chip_id": 1, "logic_id": 1, "bus_id": "0000:83:00.0",
         "aicore_percent": 0, "memory_used_mb": 8322, "memory_total_mb": 43693},
    ]
    assert table["processes"] == [{"npu_id": 6, "chip_id": 1, "pid": 293029, "name": "python3.11",
                                   "memory_mb": 6612}]


def test_table_duo_4_cards_reads_npu_ids_and_devices():
    table = npu_facts.parse_table(read_fixture("info_310P3-duo_25.5.1_4cards_gofixture.txt"))
    assert table["driver_version"] == "25.5.1"
    assert [(c["npu_id"], c["chip_id"], c["logic_id"]) for c in table["chips"]] == [
        (1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (4, 0, 4), (4, 1, 5), (5, 0, 6), (5, 1, 7)]
    assert [c["memory_total_mb"] for c in table["chips"]] == [44278, 43693] * 4
    assert [c["bus_id"] for c in table["chips"][::2]] == ["0000:01:00.0", "0000:02:00.0", "0000:81:00.0",
                                                          "0000:82:00.0"]
    assert table["chips"][4]["temperature_c"] == 47 and table["processes"] == []


def test_table_pro_single_chip_cards():
    table = npu_facts.parse_table(read_fixture("info_310P3-pro_25.5.1_2cards_vnpu-lab.txt"))
    assert [(c["npu_id"], c["chip_id"], c["logic_id"], c["memory_total_mb"]) for c in table["chips"]] == [
        (4, 0, 0, 21525), (5, 0, 1, 21525)]


def test_table_910b_is_recognised_as_another_chip():
    table = npu_facts.parse_table(read_fixture("info_910B2C_25.5.2_gofixture-contrast.txt"))
    assert [(c["npu_id"], c["name"], c["logic_id"]) for c in table["chips"]] == [
        (0, "910B2C", None), (1, "910B2C", None), (15, "910B2C", None)]
    assert table["chips"][0]["power_w"] == 93.9
    assert (table["chips"][0]["hbm_used_mb"], table["chips"][0]["hbm_total_mb"]) == (3410, 65536)
    assert table["processes"] == []


# --- key/value commands -----------------------------------------------------------------------------------

def test_mapping_310p_skips_mcus():
    rows = npu_facts.parse_mapping(read_fixture("mapping_310P-duo_4cards_gpustack-test.txt"))
    assert [(r["npu_id"], r["chip_id"], r["logic_id"]) for r in rows] == [
        (1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (4, 0, 4), (4, 1, 5), (5, 0, 6), (5, 1, 7)]
    assert {r["name"] for r in rows} == {"Ascend xxx"}


def test_mapping_with_real_tabs_and_trailing_spaces():
    rows = npu_facts.parse_mapping(read_fixture("mapping_910B3_25.5.1_verbatim-tabs.txt"))
    assert rows == [{"npu_id": 0, "chip_id": 0, "logic_id": 0, "name": "Ascend 910B3"},
                    {"npu_id": 1, "chip_id": 0, "logic_id": 1, "name": "Ascend 910B3"}]


def test_list_310p_pro_and_910b():
    assert npu_facts.parse_list(read_fixture("list_310P-pro_ascend-deployer-docstring.txt")) == (
        1, [{"npu_id": 8, "product_name": "IT21PDDA01", "serial": "033VNY10MB000071", "chip_count": 1}])
    total, cards = npu_facts.parse_list(read_fixture("list_910B_8cards_telegraf-fixture.txt"))
    assert total == 8 and [c["npu_id"] for c in cards] == list(range(8))
    assert cards[0] == {"npu_id": 0, "product_name": None, "serial": None, "chip_count": 1}


def test_board_310p_duo_without_tabs():
    board = npu_facts.parse_board(read_fixture("board_310P3-duo_25.5.1_fw7.8.0.6.201_gofixture.txt"))
    assert board == {"product_name": "IT21PD2G10", "serial": "2106030737ZERC003572", "software_version": "25.5.1",
                     "firmware_version": "7.8.0.6.201", "compatibility": "OK", "bus_id": "0000:0C:00.0",
                     "pci_device_id": "0xD500", "pci_subsystem": "0x0200/0x0110", "chip_count": 2,
                     "chip_fault_count": 0}


def test_board_910b_indented_and_truncated_gives_the_target_pair():
    board = npu_facts.parse_board(read_fixture("board_910B_25.5.2_fw7.8.0.7.220_gofixture-truncated.txt"))
    assert (board["software_version"], board["firmware_version"]) == ("25.5.2", "7.8.0.7.220")
    assert board["bus_id"] == "0000:66:00.0" and board["chip_fault_count"] is None


def test_product_and_health_keys():
    assert npu_facts.parse_product(read_fixture("product_310P3-duo_25.5.1_gofixture.txt")) == "Atlas 300I Duo"
    blocks = npu_facts.kv_blocks(read_fixture("health_310P3-duo_25.5.1_gofixture.txt"))
    assert [dict(block).get("Health") for block in blocks] == [None, "OK", "OK", "OK"]


@pytest.mark.parametrize("sample,version", [
    ("driver_version_info_24.1.rc2.2_mindie-doc.txt", "24.1.rc2.2"),
    ("driver_version_info_25.3.rc1_pypto-faq.txt", "25.3.rc1"),
    ("firmware_version_info_7.7.0.1.231_wings-doc.txt", "7.7.0.1.231"),
])
def test_version_files(sample, version):
    assert npu_facts.parse_version_file(read_fixture(sample))["Version"] == version


def test_install_info():
    info = npu_facts.parse_version_file(read_fixture("ascend_install_info_driver-firmware-notes.txt"))
    assert info["Driver_Install_Path_Param"] == "/usr/local/Ascend" and info["Firmware_Install_Type"] == "full"


@pytest.mark.parametrize("sample,code", [
    ("error_dcmi_-8005_vllm-ascend-issue2698.txt", "-8005"),
    ("error_dcmi_-8020_device-used_cann-container-image-issue46.txt", "-8020"),
])
def test_dcmi_failures_are_recognised(sample, code):
    line = npu_facts.dcmi_failure(read_fixture(sample))
    assert line.endswith("ret is %s" % code)


def test_every_sample_is_covered_by_a_test():
    # A new sample in the shared folder must get a parser test here, not be silently ignored.
    source = (REPO / "tests/unit/test_npu_facts.py").read_text() + (
        REPO / "tests/unit/test_npu_smi_emulator.py").read_text()
    from conftest import FIXTURES
    unused = [p.name for p in FIXTURES.glob("*.txt") if p.name not in source and not p.name.startswith(
        ("lspci_", "common_", "usages_", "version_flag_"))]
    assert unused == []


# --- the whole module ------------------------------------------------------------------------------------

def run_module(tmp_path, **args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    result = subprocess.run([sys.executable, str(MODULE), str(args_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    assert result.returncode == 0, result.stdout + result.stderr
    output = json.loads(result.stdout)
    assert output["changed"] is False
    return output["ansible_facts"]["ascend"]


def twin_host(tmp_path, profile):
    root = tmp_path / "host"
    hosts.build_root(root, profile)
    paths = dict(npu_smi=str(root / "usr/local/bin/npu-smi"), driver_home=str(root / "usr/local/Ascend/driver"),
                 firmware_home=str(root / "usr/local/Ascend/firmware"), dev_dir=str(root / "dev"),
                 install_info=str(root / "etc/ascend_install.info"))
    return root, paths


def test_seed_host_gives_every_fact(tmp_path):
    profile = hosts.load_profiles()["seed_duo4"]
    root, paths = twin_host(tmp_path, profile)
    facts = run_module(tmp_path, **paths)
    assert facts["present"] and facts["ready"] and facts["problems"] == []
    assert (facts["driver_version"], facts["driver_version_file"]) == ("25.5.2", "25.5.2")
    assert (facts["firmware_version"], facts["firmware_version_file"]) == ("7.8.0.7.220", "7.8.0.7.220")
    assert (facts["card_count"], facts["chip_count"]) == (4, 8)
    assert [c["npu_id"] for c in facts["cards"]] == [1, 2, 4, 5]
    assert {c["product_type"] for c in facts["cards"]} == {"Atlas 300I Duo"}
    assert facts["devices"] == [str(root / "dev" / ("davinci%d" % n)) for n in range(8)]
    assert [c["device"] for c in facts["chips"]] == facts["devices"]
    assert facts["missing_manager_devices"] == [] and len(facts["manager_devices"]) == 3
    assert facts["install_info"]["Driver_Install_Mode"] == "normal"
    assert facts["chip_names"] == ["310P3"]


def test_missing_npu_smi_is_not_present(tmp_path):
    facts = run_module(tmp_path, npu_smi=str(tmp_path / "nowhere/npu-smi"), driver_home=str(tmp_path),
                       firmware_home=str(tmp_path), dev_dir=str(tmp_path))
    assert facts["present"] is False and facts["ready"] is False
    assert any("npu-smi not found" in p for p in facts["problems"])


def test_dcmi_8005_is_present_but_not_ready_with_cause(tmp_path):
    _, paths = twin_host(tmp_path, hosts.load_profiles()["dcmi_8005"])
    facts = run_module(tmp_path, **paths)
    assert facts["present"] is True and facts["ready"] is False
    (problem,) = facts["problems"]
    assert "ret is -8005" in problem and "held by another container" in problem and "reboot" in problem
    assert facts["driver_version_file"] == "25.5.2"  # the files still tell what is installed


def fake_npu_smi(tmp_path, answers):
    """An npu-smi that prints canned outputs per command line, exit 1 for the ones given as failures."""
    script = tmp_path / "npu-smi"
    script.write_text("#!%s\nimport json, sys\nanswers = json.loads(%r)\n"
                      "text, code = answers.get(' '.join(sys.argv[1:]), ['unknown command', 2])\n"
                      "sys.stdout.write(text)\nsys.exit(code)\n" % (sys.executable, json.dumps(answers)))
    script.chmod(0o755)
    return str(script)


def test_failing_sub_queries_still_give_the_chips(tmp_path):
    table = read_fixture("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt")
    npu_smi = fake_npu_smi(tmp_path, {
        "info": [table, 0],
        "info -m": ["DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
                    "dcmi module initialize failed. ret is -8005\n", 1],
        "info -l": ["", 1],
        "info -t board -i 6": ["Error: get board info failed\n", 255],
        "info -t product -i 6": [read_fixture("product_310P3-duo_25.5.1_gofixture.txt"), 0],
    })
    (tmp_path / "fw").mkdir()
    (tmp_path / "fw/version.info").write_text("Version=7.8.0.7.220\n")
    facts = run_module(tmp_path, npu_smi=npu_smi, driver_home=str(tmp_path / "none"),
                       firmware_home=str(tmp_path / "fw"), dev_dir=str(tmp_path))
    assert facts["ready"] is True and facts["chip_count"] == 2
    assert [c["logic_id"] for c in facts["chips"]] == [0, 1]
    assert facts["cards"][0]["product_type"] == "Atlas 300I Duo"
    assert facts["firmware_version"] == "7.8.0.7.220"  # board failed: from the firmware's version.info
    joined = "\n".join(facts["problems"])
    assert "`npu-smi info -m` failed" in joined and "ret is -8005" in joined
    assert "`npu-smi info -t board -i 6` failed" in joined and "get board info failed" in joined
    assert "version.info not readable" in joined
    assert facts["processes"][0]["pid"] == 293029


def test_check_mode_reads_the_same(tmp_path):
    _, paths = twin_host(tmp_path, hosts.load_profiles()["duo2"])
    args = dict(paths, _ansible_check_mode=True)
    facts = run_module(tmp_path, **args)
    assert facts["ready"] and facts["chip_count"] == 4


def test_ansible_doc_renders(tmp_path):
    result = subprocess.run([venv_tool("ansible-doc"), "-M", str(REPO / "library"), "--json", "npu_facts"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)["npu_facts"]
    assert set(doc["doc"]["options"]) == {"npu_smi", "driver_home", "firmware_home", "install_info", "dev_dir",
                                          "timeout"}
    assert "npu_facts:" in doc["examples"]
    assert "ready" in doc["return"]["ansible_facts"]["contains"]["ascend"]["contains"]
