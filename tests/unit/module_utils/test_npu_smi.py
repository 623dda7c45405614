"""module_utils/npu_smi.py: the parsers against every real sample, and which cards count as unhealthy."""
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import npu_smi
from conftest import FIXTURES, REPO, read_fixture

DUO4 = "info_310P3-duo_25.5.1_4cards_gofixture.txt"
DUO_BOARD = "board_310P3-duo_25.5.1_fw7.8.0.6.201_gofixture.txt"
DUO_BOARD_FAULT_ROW = "Chip Fault                     : 0"


# --- npu-smi info ----------------------------------------------------------------------------------------

def test_table_duo_25_0_with_a_process():
    table = npu_smi.parse_table(read_fixture("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt"))
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
    table = npu_smi.parse_table(read_fixture(DUO4))
    assert table["driver_version"] == "25.5.1"
    assert [(c["npu_id"], c["chip_id"], c["logic_id"]) for c in table["chips"]] == [
        (1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (4, 0, 4), (4, 1, 5), (5, 0, 6), (5, 1, 7)]
    assert [c["memory_total_mb"] for c in table["chips"]] == [44278, 43693] * 4
    assert [c["bus_id"] for c in table["chips"][::2]] == ["0000:01:00.0", "0000:02:00.0", "0000:81:00.0",
                                                          "0000:82:00.0"]
    assert table["chips"][4]["temperature_c"] == 47 and table["processes"] == []


def test_table_pro_single_chip_cards():
    table = npu_smi.parse_table(read_fixture("info_310P3-pro_25.5.1_2cards_vnpu-lab.txt"))
    assert [(c["npu_id"], c["chip_id"], c["logic_id"], c["memory_total_mb"]) for c in table["chips"]] == [
        (4, 0, 0, 21525), (5, 0, 1, 21525)]


def test_table_910b_is_recognised_as_another_chip():
    table = npu_smi.parse_table(read_fixture("info_910B2C_25.5.2_gofixture-contrast.txt"))
    assert [(c["npu_id"], c["name"], c["logic_id"]) for c in table["chips"]] == [
        (0, "910B2C", None), (1, "910B2C", None), (15, "910B2C", None)]
    assert table["chips"][0]["power_w"] == 93.9
    assert (table["chips"][0]["hbm_used_mb"], table["chips"][0]["hbm_total_mb"]) == (3410, 65536)
    assert table["processes"] == []


# --- key/value commands -----------------------------------------------------------------------------------

def test_mapping_310p_skips_mcus():
    rows = npu_smi.parse_mapping(read_fixture("mapping_310P-duo_4cards_gpustack-test.txt"))
    assert [(r["npu_id"], r["chip_id"], r["logic_id"]) for r in rows] == [
        (1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (4, 0, 4), (4, 1, 5), (5, 0, 6), (5, 1, 7)]
    assert {r["name"] for r in rows} == {"Ascend xxx"}


def test_mapping_with_real_tabs_and_trailing_spaces():
    rows = npu_smi.parse_mapping(read_fixture("mapping_910B3_25.5.1_verbatim-tabs.txt"))
    assert rows == [{"npu_id": 0, "chip_id": 0, "logic_id": 0, "name": "Ascend 910B3"},
                    {"npu_id": 1, "chip_id": 0, "logic_id": 1, "name": "Ascend 910B3"}]


def test_list_310p_pro_and_910b():
    assert npu_smi.parse_list(read_fixture("list_310P-pro_ascend-deployer-docstring.txt")) == (
        1, [{"npu_id": 8, "product_name": "IT21PDDA01", "serial": "033VNY10MB000071", "chip_count": 1}])
    total, cards = npu_smi.parse_list(read_fixture("list_910B_8cards_telegraf-fixture.txt"))
    assert total == 8 and [c["npu_id"] for c in cards] == list(range(8))
    assert cards[0] == {"npu_id": 0, "product_name": None, "serial": None, "chip_count": 1}


def test_board_310p_duo_without_tabs():
    board = npu_smi.parse_board(read_fixture(DUO_BOARD))
    assert board == {"product_name": "IT21PD2G10", "serial": "2106030737ZERC003572", "software_version": "25.5.1",
                     "firmware_version": "7.8.0.6.201", "compatibility": "OK", "bus_id": "0000:0C:00.0",
                     "pci_device_id": "0xD500", "pci_subsystem": "0x0200/0x0110", "chip_count": 2,
                     "chip_fault_count": 0}


def test_board_910b_indented_and_truncated_gives_the_target_pair():
    board = npu_smi.parse_board(read_fixture("board_910B_25.5.2_fw7.8.0.7.220_gofixture-truncated.txt"))
    assert (board["software_version"], board["firmware_version"]) == ("25.5.2", "7.8.0.7.220")
    assert board["bus_id"] == "0000:66:00.0" and board["chip_fault_count"] is None


def test_product_and_health_keys():
    assert npu_smi.parse_product(read_fixture("product_310P3-duo_25.5.1_gofixture.txt")) == "Atlas 300I Duo"
    blocks = npu_smi.kv_blocks(read_fixture("health_310P3-duo_25.5.1_gofixture.txt"))
    assert [dict(block).get("Health") for block in blocks] == [None, "OK", "OK", "OK"]


@pytest.mark.parametrize("sample,version", [
    ("driver_version_info_24.1.rc2.2_mindie-doc.txt", "24.1.rc2.2"),
    ("driver_version_info_25.3.rc1_pypto-faq.txt", "25.3.rc1"),
    ("firmware_version_info_7.7.0.1.231_wings-doc.txt", "7.7.0.1.231"),
])
def test_version_files(sample, version):
    assert npu_smi.parse_version_file(read_fixture(sample))["Version"] == version


def test_install_info():
    info = npu_smi.parse_version_file(read_fixture("ascend_install_info_driver-firmware-notes.txt"))
    assert info["Driver_Install_Path_Param"] == "/usr/local/Ascend" and info["Firmware_Install_Type"] == "full"


# --- failures ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sample,code,cause", [
    ("error_dcmi_-8005_vllm-ascend-issue2698.txt", "-8005", "held by another container"),
    ("error_dcmi_-8020_device-used_cann-container-image-issue46.txt", "-8020", "in use by another process"),
])
def test_dcmi_failures_are_recognised_and_explained(sample, code, cause):
    line = npu_smi.dcmi_failure(read_fixture(sample))
    assert line.endswith("ret is %s" % code)
    assert cause in npu_smi.dcmi_cause(line)


def test_unknown_dcmi_code_gets_the_generic_cause_and_a_table_is_no_failure():
    assert npu_smi.dcmi_cause("dcmi module initialize failed. ret is -8888") == npu_smi.DCMI_GENERIC
    assert npu_smi.dcmi_failure(read_fixture(DUO4)) is None


# --- host files -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cpuinfo,model", [
    ("processor\t: 0\nCPU implementer\t: 0x48\nCPU architecture: 8\nCPU part\t: 0xd01\n"
     "processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n", "Kunpeng-920"),
    ("CPU implementer\t: 0x48\nCPU part\t: 0xd03\n", "HiSilicon (CPU part 0xd03)"),
    ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n",
     "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"),
    ("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n", None),
])
def test_cpu_model(cpuinfo, model):
    assert npu_smi.parse_cpu_model(cpuinfo) == model


# --- health -----------------------------------------------------------------------------------------------

def cards_of(chips, chip_fault_count=0):
    """One card per NPU ID of the table, as npu_facts builds them, with the board's fault count."""
    ids = []
    for chip in chips:
        if chip["npu_id"] not in ids:
            ids.append(chip["npu_id"])
    return [{"npu_id": npu_id, "chip_fault_count": chip_fault_count} for npu_id in ids]


@pytest.mark.parametrize("sample,npu_ids", [
    (DUO4, [1, 2, 4, 5]),
    ("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt", [6]),
    ("info_310P3-pro_25.5.1_2cards_vnpu-lab.txt", [4, 5]),
    ("info_910B2C_25.5.2_gofixture-contrast.txt", [0, 1, 15]),
])
def test_every_real_table_is_healthy(sample, npu_ids):
    chips = npu_smi.parse_table(read_fixture(sample))["chips"]
    assert npu_smi.card_health_problems(chips, cards_of(chips)) == {npu_id: [] for npu_id in npu_ids}


def test_a_chip_not_ok_marks_only_its_card():
    text = read_fixture(DUO4)
    npu4_rows = [line for line in text.splitlines() if line.startswith("| 4 ")]
    assert len(npu4_rows) == 2 and "| OK     " in npu4_rows[1]
    # The same row as npu-smi prints it for a chip in warning, column widths kept.
    chips = npu_smi.parse_table(text.replace(npu4_rows[1], npu4_rows[1].replace("| OK     ", "| Warning")))["chips"]
    assert [(c["npu_id"], c["chip_id"]) for c in chips if c["health"] == "Warning"] == [(4, 1)]
    assert npu_smi.card_health_problems(chips, cards_of(chips)) == {
        1: [], 2: [], 4: ["chip 1 health Warning"], 5: []}


def test_chip_faults_of_the_board_and_unhealthy_chips_add_up():
    text = read_fixture(DUO_BOARD)
    assert text.count(DUO_BOARD_FAULT_ROW) == 1
    board = npu_smi.parse_board(text.replace(DUO_BOARD_FAULT_ROW, DUO_BOARD_FAULT_ROW.replace("0", "2")))
    chips = npu_smi.parse_table(read_fixture("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt"))["chips"]
    chips[0]["health"] = "Alarm"
    assert npu_smi.card_health_problems(chips, cards_of(chips, board["chip_fault_count"])) == {
        6: ["chip 0 health Alarm", "2 chip fault(s)"]}


def test_an_unknown_fault_count_is_no_problem():
    # The 910B board sample stops before its fault line: a count npu-smi did not print is not a fault.
    board = npu_smi.parse_board(read_fixture("board_910B_25.5.2_fw7.8.0.7.220_gofixture-truncated.txt"))
    chips = npu_smi.parse_table(read_fixture("info_910B2C_25.5.2_gofixture-contrast.txt"))["chips"][:1]
    assert npu_smi.card_health_problems(chips, cards_of(chips, board["chip_fault_count"])) == {0: []}


def test_a_chip_without_a_card_still_counts():
    chips = [{"npu_id": 224, "chip_id": 1, "health": "Critical"}]
    assert npu_smi.card_health_problems(chips, []) == {224: ["chip 1 health Critical"]}


def test_every_sample_is_covered_by_a_test():
    # A new sample in the shared folder must get a parser test, not be silently ignored.
    source = "".join((REPO / "tests/unit" / name).read_text() for name in (
        "module_utils/test_npu_smi.py", "library/test_npu_facts.py", "twin/test_npu_smi_emulator.py"))
    unused = [p.name for p in FIXTURES.glob("*.txt") if p.name not in source and not p.name.startswith(
        ("lspci_", "common_", "usages_", "version_flag_"))]
    assert unused == []


# --- npu-smi info -t phyid-remap -p <N> and -t topo ------------------------------------------------------

TOPO_910B3 = "topo_910B3_24.1.rc1_ms-swift-doc.txt"
REMAP_LINES = ("\tChip Physical ID              :4\n\tChip Logic ID                 :0\n"
               "\tNPU ID                        :6\n\tChip ID                       :0\n")


def test_phyid_remap_as_npu_smi_prints_it():
    assert npu_smi.parse_phyid_remap(REMAP_LINES) == {"phy_id": 4, "logic_id": 0, "npu_id": 6, "chip_id": 0}


def test_phyid_remap_as_the_reference_shows_it():
    # Huawei's reference page indents with one space where npu-smi prints a TAB.
    text = " Chip Physical ID            :0\n Chip Logic ID               :0\n NPU ID                      :0\n" \
           " Chip ID                     :0\n"
    assert npu_smi.parse_phyid_remap(text) == {"phy_id": 0, "logic_id": 0, "npu_id": 0, "chip_id": 0}


@pytest.mark.parametrize("text", [
    REMAP_LINES.replace("\tChip Logic ID                 :0\n", ""),
    REMAP_LINES.replace(":6", ":NA"),
    "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
    "",
])
def test_phyid_remap_with_a_field_missing_is_unknown(text):
    assert npu_smi.parse_phyid_remap(text) is None


def test_topo_910b3_sample_gives_each_logic_id_its_cpus():
    affinity = npu_smi.parse_topo(read_fixture(TOPO_910B3))
    assert sorted(affinity) == list(range(8))
    assert affinity[0] == affinity[1] == list(range(144, 168))
    assert affinity[4] == list(range(0, 24)) and affinity[7] == list(range(48, 72))


def test_topo_with_nic_columns_and_split_affinity():
    # Newer npu-smi adds NIC columns and rows; an affinity may join two ranges.
    text = ("\t   NPU0       NPU1       NIC0        CPU Affinity\n"
            "NPU0       X          SYS        PIX        0-63,128-191\n"
            "NPU1\tSYS\tX\tSYS\t64-127,192-255\n"
            "NIC0       PIX        SYS        X\n\nNIC0: mlx5_0\n\nLegend:\n\n  X    = Self\n")
    affinity = npu_smi.parse_topo(text)
    assert affinity[0] == list(range(0, 64)) + list(range(128, 192))
    assert affinity[1] == list(range(64, 128)) + list(range(192, 256))
    assert sorted(affinity) == [0, 1]


@pytest.mark.parametrize("text", [
    "This device does not support querying topo.\n",
    "\t   NPU0       NPU1       \nNPU0       X          HCCS       \nNPU1       HCCS       X          \n",
])
def test_topo_without_affinity_gives_none(text):
    assert npu_smi.parse_topo(text) == {}


@pytest.mark.parametrize("text,cpus", [("5", [5]), ("0-2,7", [0, 1, 2, 7]), ("3-1", []), ("NA", None),
                                       ("Affinity", None), ("0-", None), ("", None), ("0-8191", list(range(8192))),
                                       # CPUs no Linux has: expanded, the range would exhaust the host's memory
                                       ("0-99999999999", None), ("8192", None), ("0-3,99999999999", None)])
def test_cpu_lists(text, cpus):
    assert npu_smi.expand_cpu_list(text) == cpus
