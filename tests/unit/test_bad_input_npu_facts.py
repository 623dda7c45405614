"""library/npu_facts.py on options it cannot use (refused) and on npu-smi output and driver files it cannot read
(facts still returned, the trouble named in problems, ready only when every chip was read)."""
import json
import sys

import pytest
from test_bad_input_all_modules import assert_refused, run_module

from conftest import read_fixture

TABLE = read_fixture("info_310P3-duo_25.0.rc1.1_vllm-ascend-issue1993.txt")
CHIP0_CARD_ROW = "| 6       310P3                 | OK              |"
CHIP0_CHIP_ROW = "| 0       0                     | 0000:83:00.0    |"
BOARD = read_fixture("board_310P3-duo_25.5.1_fw7.8.0.6.201_gofixture.txt")


def fake_host(tmp_path, info=TABLE, board=BOARD, driver_version="Version=25.0.rc1.1\n"):
    """Module arguments for a host whose npu-smi prints these texts (str; lone surrogates stand for bytes that
    are not UTF-8) and whose driver's version.info holds driver_version."""
    answers = {"info": info, "info -m": "", "info -l": "", "info -t board -i 6": board,
               "info -t product -i 6": "Product Type : Atlas 300I Duo\n"}
    script = tmp_path / "npu-smi"
    script.write_text("#!%s\nimport json, sys\nanswers = json.loads(%r)\n"
                      "sys.stdout.buffer.write(answers[' '.join(sys.argv[1:])].encode('utf-8', 'surrogateescape'))\n"
                      % (sys.executable, json.dumps(answers)))
    script.chmod(0o755)
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "version.info").write_bytes(driver_version.encode("utf-8", "surrogateescape"))
    return {"npu_smi": str(script), "driver_home": str(driver), "firmware_home": str(tmp_path / "none"),
            "install_info": str(tmp_path / "none"), "dev_dir": str(tmp_path)}


def facts_of(tmp_path, **changes):
    result = run_module("npu_facts", **dict(fake_host(tmp_path), **changes))
    assert "failed" not in result, result
    return result["ansible_facts"]["ascend"]


@pytest.mark.parametrize("option,value,expected", [
    ("timeout", 0, ["timeout: 0 is not allowed", "at least 1"]),
    ("timeout", -5, ["timeout: -5 is not allowed", "at least 1"]),
    ("driver_home", "", ["driver_home is empty", "a folder"]),
    ("firmware_home", "", ["firmware_home is empty", "a folder"]),
    ("install_info", "", ["install_info is empty", "a file"]),
    ("dev_dir", "", ["dev_dir is empty", "a folder"]),
])
def test_options_it_cannot_use_are_refused(tmp_path, option, value, expected):
    assert_refused(run_module("npu_facts", **dict(fake_host(tmp_path), **{option: value})), *expected)


@pytest.mark.parametrize("case,host,problem", [
    ("table with a byte that is not UTF-8",
     {"info": TABLE.replace("python3.11", "python\udcff3.11")}, "`npu-smi info` printed bytes that are not UTF-8"),
    ("board answer in GBK", {"board": BOARD.replace("Serial Number", "\udcd0\udcf2\udcc1\udcd0\udcba\udcc5")},
     "`npu-smi info -t board -i 6` printed bytes that are not UTF-8"),
    ("driver version.info not UTF-8", {"driver_version": "Version=25.0.rc1.1\n\udcff\udcfe\n"},
     "version.info holds bytes that are not UTF-8"),
])
def test_text_that_is_not_utf8_is_read_with_replacements_and_named(tmp_path, case, host, problem):
    facts = run_module("npu_facts", **fake_host(tmp_path, **host))["ansible_facts"]["ascend"]
    assert [p for p in facts["problems"] if problem in p and "U+FFFD" in p], facts["problems"]
    assert facts["chip_count"] == 2 and facts["driver_version_file"] == "25.0.rc1.1"


@pytest.mark.parametrize("case,rows,named", [
    ("NPU id not a number", (CHIP0_CARD_ROW, CHIP0_CARD_ROW.replace("| 6      ", "| x6     ")), "'x6'"),
    ("NPU id missing", (CHIP0_CARD_ROW, CHIP0_CARD_ROW.replace("| 6       310P3", "| 310P3        ")), "'310P3'"),
    ("no first cell", (CHIP0_CARD_ROW, CHIP0_CARD_ROW.replace("| 6       310P3      ", "|                    ")),
     "''"),
    ("chip id not a number", (CHIP0_CHIP_ROW, CHIP0_CHIP_ROW.replace("| 0       0", "| a       0")), "'a'"),
])
def test_a_chip_whose_ids_are_not_integers_makes_the_host_not_ready(tmp_path, case, rows, named):
    # Both chips' card rows read the same: only the first chip's is changed.
    facts = run_module("npu_facts", **fake_host(tmp_path, info=TABLE.replace(*rows, 1)))["ansible_facts"]["ascend"]
    assert facts["present"] is True and facts["ready"] is False
    unreadable = [p for p in facts["problems"] if named in p and "not an integer" in p and "Fix:" in p]
    assert unreadable, facts["problems"]
    assert [(chip["npu_id"], chip["chip_id"]) for chip in facts["chips"]] == [(6, 1)]  # the readable one stays
    assert [card["npu_id"] for card in facts["cards"]] == [6]


@pytest.mark.parametrize("case,make", [
    ("a folder", lambda path: path.mkdir()),
    ("a file that is not executable", lambda path: path.write_text("#!/bin/sh\n")),
])
def test_an_npu_smi_option_that_names_no_program_says_what_it_names(tmp_path, case, make):
    path = tmp_path / "npu-smi-given"
    make(path)
    facts = facts_of(tmp_path, npu_smi=str(path))
    assert facts["present"] is False
    assert [p for p in facts["problems"] if str(path) in p and "not an executable file" in p], facts["problems"]


def test_npu_smi_printing_garbage_lists_no_chip(tmp_path):
    facts = run_module("npu_facts", **fake_host(tmp_path, info="\udcff\udcfe| | |\n|\n+--+\n"))[
        "ansible_facts"]["ascend"]
    assert facts["ready"] is False and any("listed no NPU chip" in p for p in facts["problems"])
