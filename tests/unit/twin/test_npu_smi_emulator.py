"""The twin's npu-smi prints the real samples byte for byte, for profiles that describe those machines.

Where a sample's author changed the output (stripped the leading TAB or trailing spaces, anonymised chip
names, cut the process table), the sample's '# source:' line says so; the same change is applied to the
emulator's output before comparing, and nothing else is.
"""
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import npu_smi as npu_smi_parse
from conftest import REPO, read_fixture
from twin import hosts, npu_smi


def strip_leading_tab(text):
    return re.sub(r"(?m)^\t", "", text)


def strip_trailing_spaces(text):
    return re.sub(r"(?m) +$", "", text)


def anonymise_chip_names(text):
    return text.replace("Ascend 310P3", "Ascend xxx")


# Machines the samples came from.
DUO_6_25_0 = {  # vllm-ascend issue 1993: one Duo card, NPU ID 6, a python process on chip 1
    "driver": "25.0.rc1.1",
    "cards": [{"npu_id": 6, "bus_id": "0000:83:00.0", "chips": [
        {"temp": 55, "memory_used_mb": 1175, "memory_mb": 44280},
        {"temp": 52, "memory_used_mb": 8322, "memory_mb": 43693, "hugepages": [3262, 3262]},
    ]}],
    "processes": [{"npu_id": 6, "chip_id": 1, "pid": 293029, "name": "python3.11", "memory_mb": 6612}],
}
DUO4_25_5_1 = {  # four Duo cards, NPU IDs 1, 2, 4, 5
    "driver": "25.5.1",
    "separators": "all_dash",
    "cards": [
        {"npu_id": 1, "bus_id": "0000:01:00.0", "chips": [
            {"temp": 49, "memory_used_mb": 1448}, {"temp": 45, "memory_used_mb": 1511}]},
        {"npu_id": 2, "bus_id": "0000:02:00.0", "chips": [
            {"temp": 46, "memory_used_mb": 1384}, {"temp": 46, "memory_used_mb": 1572}]},
        {"npu_id": 4, "bus_id": "0000:81:00.0", "chips": [
            {"temp": 47, "memory_used_mb": 1863}, {"temp": 48, "memory_used_mb": 1105}]},
        {"npu_id": 5, "bus_id": "0000:82:00.0", "chips": [
            {"temp": 48, "memory_used_mb": 1694}, {"temp": 46, "memory_used_mb": 1269}]},
    ],
}
PRO2_25_5_1 = {  # two single-chip Atlas 300I Pro cards
    "driver": "25.5.1",
    "cards": [
        {"npu_id": 4, "product_type": "Atlas 300I Pro", "bus_id": "0000:81:00.0",
         "chips": [{"temp": 37, "memory_used_mb": 1848}]},
        {"npu_id": 5, "product_type": "Atlas 300I Pro", "bus_id": "0000:85:00.0",
         "chips": [{"temp": 40, "memory_used_mb": 1849}]},
    ],
}
DUO_2944_25_5_1 = {  # the Go fixtures' board/product/health host
    "driver": "25.5.1",
    "firmware": "7.8.0.6.201",
    "cards": [{"npu_id": 2944, "serial": "2106030737ZERC003572", "bus_id": "0000:0C:00.0"}],
}
PRO_8 = {
    "cards": [{"npu_id": 8, "product_type": "Atlas 300I Pro", "serial": "033VNY10MB000071"}],
}

MIRRORS = [
    # (sample, profile, command, changes the sample's author made)
    ("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt", DUO_6_25_0, ["info"], []),
    ("info_310P3-duo_25.5.1_4cards_gofixture.txt", dict(DUO4_25_5_1, process_table=False), ["info"], []),
    ("info_310P3-pro_25.5.1_2cards_vnpu-lab.txt", dict(PRO2_25_5_1, process_table=False), ["info"], []),
    ("board_310P3-duo_25.5.1_fw7.8.0.6.201_gofixture.txt", DUO_2944_25_5_1,
     ["info", "-t", "board", "-i", "2944"], [strip_leading_tab]),
    ("product_310P3-duo_25.5.1_gofixture.txt", DUO_2944_25_5_1,
     ["info", "-t", "product", "-i", "2944"], [strip_leading_tab]),
    ("health_310P3-duo_25.5.1_gofixture.txt", DUO_2944_25_5_1,
     ["info", "-t", "health", "-i", "2944"], [strip_leading_tab]),
    ("list_310P-pro_ascend-deployer-docstring.txt", PRO_8, ["info", "-l"], [strip_leading_tab]),
    ("mapping_310P-duo_4cards_gpustack-test.txt", DUO4_25_5_1, ["info", "-m"],
     [strip_leading_tab, strip_trailing_spaces, anonymise_chip_names]),
    ("error_dcmi_-8005_vllm-ascend-issue2698.txt", dict(PRO_8, failure="-8005"), ["info"], []),
]


@pytest.fixture(autouse=True)
def as_root(monkeypatch):
    # 'Compatibility' reads OK only for root, as on a real host; the samples were taken as root.
    monkeypatch.setattr(os, "geteuid", lambda: 0)


@pytest.mark.parametrize("sample,profile,argv,changes", MIRRORS, ids=[m[0] for m in MIRRORS])
def test_emulator_prints_the_real_sample(sample, profile, argv, changes):
    text, code = npu_smi.run(profile, argv)
    for change in changes:
        text = change(text)
    assert text == read_fixture(sample)
    assert (code != 0) == ("error_" in sample)


def test_emulator_matches_the_device_in_use_failure_printed_in_a_container():
    # The sample starts with the shell prompt that ran the command.
    sample = read_fixture("error_dcmi_-8020_device-used_cann-container-image-issue46.txt")
    prompt, expected = sample.split("\n", 1)
    assert prompt.endswith("# npu-smi info")
    text, code = npu_smi.run(dict(PRO_8, failure="-8020"), ["info"])
    assert (text, code != 0) == (expected, True)


def test_empty_process_table_says_so_per_npu():
    text, _ = npu_smi.run(PRO2_25_5_1, ["info"])
    rows = [line for line in text.splitlines() if "No running processes" in line]
    assert rows == [
        "| No running processes found in NPU 4".ljust(105) + "|",
        "| No running processes found in NPU 5".ljust(105) + "|",
    ]
    assert all(len(line) == 106 for line in text.splitlines())


def test_compatibility_is_not_supported_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    text, _ = npu_smi.run(PRO_8, ["info", "-t", "board", "-i", "8"])
    assert "\tCompatibility                  : NOT SUPPORT\n" in text


def test_unknown_npu_id_fails():
    text, code = npu_smi.run(PRO_8, ["info", "-t", "board", "-i", "0"])
    assert code != 0 and "0" in text


def test_installed_script_reads_its_profile_from_the_dcmi_folder(tmp_path):
    root = tmp_path / "host"
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/dcmi").mkdir(parents=True)
    script = root / "usr/local/bin/npu-smi"
    script.write_text((REPO / "tests/twin/npu_smi.py").read_text())
    script.chmod(0o755)
    import json
    (root / "usr/local/dcmi/npu-smi-twin.json").write_text(json.dumps(DUO_6_25_0))
    env = {k: v for k, v in os.environ.items() if k != npu_smi.PROFILE_ENV}
    result = subprocess.run([sys.executable, str(script), "info"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    expected_head = read_fixture("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt")
    assert result.stdout == expected_head


def chips_of(profile):
    expanded = npu_smi.expand_profile(profile)
    return [(card, chip) for card in expanded["cards"] for chip in card["chips"]]


@pytest.mark.parametrize("name", ["seed_duo4", "remapped_duo2"])
def test_phyid_remap_parses_back_to_the_profile(name):
    profile = hosts.load_profiles()[name]
    for card, chip in chips_of(profile):
        text, code = npu_smi.run(profile, ["info", "-t", "phyid-remap", "-p", str(chip["phy_id"])])
        assert code == 0
        assert npu_smi_parse.parse_phyid_remap(text) == {
            "phy_id": chip["phy_id"], "logic_id": chip["logic_id"], "npu_id": card["npu_id"],
            "chip_id": chip["chip_id"]}


def test_remapped_profile_numbers_its_nodes_apart_from_its_logic_ids():
    pairs = [(chip["logic_id"], chip["phy_id"]) for _, chip in chips_of(hosts.load_profiles()["remapped_duo2"])]
    assert pairs == [(0, 4), (1, 5), (2, 0), (3, 1)]


def test_phyid_remap_of_no_chip_or_on_an_old_npu_smi_fails():
    profiles = hosts.load_profiles()
    assert npu_smi.run(profiles["remapped_duo2"], ["info", "-t", "phyid-remap", "-p", "2"])[1] != 0
    text, code = npu_smi.run(profiles["remapped_old_npu_smi"], ["info", "-t", "phyid-remap", "-p", "4"])
    assert code != 0 and npu_smi_parse.parse_phyid_remap(text) is None


@pytest.mark.parametrize("name,cpus_of_card", [
    # Two cards per NUMA node on the seed's machine (buses 0x01, 0x02 on node 0; 0x81, 0x82 on node 2).
    ("seed_duo4", {1: range(0, 24), 2: range(0, 24), 4: range(48, 72), 5: range(48, 72)}),
    ("duo2", {6: range(48, 72), 224: range(48, 72)}),
    ("remapped_duo2", {6: range(48, 96), 224: range(0, 48)}),
])
def test_topo_parses_back_to_each_chips_numa_node(name, cpus_of_card):
    profile = hosts.load_profiles()[name]
    text, code = npu_smi.run(profile, ["info", "-t", "topo"])
    assert code == 0
    assert npu_smi_parse.parse_topo(text) == {chip["logic_id"]: list(cpus_of_card[card["npu_id"]])
                                              for card, chip in chips_of(profile)}


def test_topo_lays_out_as_the_real_sample():
    # The 910B3 sample's header is what any eight-chip host prints; its rows differ only in link types and CPUs.
    sample = read_fixture("topo_910B3_24.1.rc1_ms-swift-doc.txt").splitlines()
    text, _ = npu_smi.run(hosts.load_profiles()["seed_duo4"], ["info", "-t", "topo"])
    lines = text.splitlines()
    assert lines[0] == sample[0]
    for ours, theirs in zip(lines[1:9], sample[1:9]):
        # Same first word, and the CPU list starts in the same column (11 characters per cell).
        assert ours.split()[0] == theirs.split()[0]
        assert len(ours) - len(ours.split()[-1]) == len(theirs) - len(theirs.split()[-1]) == 11 * 9
    assert lines[9:12] == sample[9:12] == ["", "Legend:", ""]
    assert set(lines[12:]) <= set(sample[12:])  # 310P's legend lacks the 910B-only PIX and PXB lines


def test_topo_on_an_npu_smi_without_it():
    text, _ = npu_smi.run(hosts.load_profiles()["remapped_old_npu_smi"], ["info", "-t", "topo"])
    assert text == "This device does not support querying topo.\n"


def test_host_root_names_nodes_by_physical_id(tmp_path):
    hosts.build_root(tmp_path, hosts.load_profiles()["remapped_duo2"])
    assert sorted(p.name for p in (tmp_path / "dev").glob("davinci[0-9]*")) == [
        "davinci0", "davinci1", "davinci4", "davinci5"]


def test_missing_devices_name_chips_by_logic_id(tmp_path):
    hosts.build_root(tmp_path, dict(hosts.load_profiles()["remapped_duo2"], missing_devices=[0]))
    assert sorted(p.name for p in (tmp_path / "dev").glob("davinci[0-9]*")) == ["davinci0", "davinci1", "davinci5"]


@pytest.mark.parametrize("name,totals", [
    # Two 24 GB chips per 48 GB card: the 300I Pro chip's 21525 MB, chip 1 585 MB less as on the 96 GB card.
    ("duo2_48g", [21525, 20940, 21525, 20940]),
    ("duo2", [44278, 43693, 44278, 43693]),
])
def test_info_shows_each_chips_total_by_the_cards_memory(name, totals):
    text, code = npu_smi.run(hosts.load_profiles()[name], ["info"])
    chips = npu_smi_parse.parse_table(text)["chips"]
    assert code == 0 and [(chip["npu_id"], chip["chip_id"], chip["memory_total_mb"]) for chip in chips] == [
        (npu_id, chip_id, total) for (npu_id, chip_id), total in zip([(6, 0), (6, 1), (224, 0), (224, 1)], totals)]
