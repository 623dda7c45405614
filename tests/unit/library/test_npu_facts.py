"""library/npu_facts.py, the whole module against fake hosts (the parsers: tests/unit/module_utils/test_npu_smi.py),
on options it cannot use (refused) and on npu-smi output and driver files it cannot read (facts still returned, the
trouble named in problems, ready only when every chip was read)."""
import json
import subprocess
import sys
import time

import pytest
from module_runs import MODULE_ENV, RUN_MODULE, assert_refused, module_doc, run_module

from conftest import read_fixture
from twin import hosts


def run_npu_facts(tmp_path, **args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    result = subprocess.run([sys.executable, "-c", RUN_MODULE % ("npu_facts", ""), str(args_file)], env=MODULE_ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
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
    facts = run_npu_facts(tmp_path, **paths)
    assert facts["present"] and facts["ready"] and facts["problems"] == []
    assert (facts["driver_version"], facts["driver_version_file"]) == ("25.5.2", "25.5.2")
    assert (facts["firmware_version"], facts["firmware_version_file"]) == ("7.8.0.7.220", "7.8.0.7.220")
    assert (facts["card_count"], facts["chip_count"]) == (4, 8)
    assert [c["npu_id"] for c in facts["cards"]] == [1, 2, 4, 5]
    assert {c["product_type"] for c in facts["cards"]} == {"Atlas 300I Duo"}
    assert facts["devices"] == [str(root / "dev" / ("davinci%d" % n)) for n in range(8)]
    assert [c["device"] for c in facts["chips"]] == facts["devices"]
    assert facts["phy_ids_known"] and [c["phy_id"] for c in facts["chips"]] == list(range(8))
    # Cards 1 and 2 share NUMA node 0, cards 4 and 5 node 2.
    assert [c["cpu_affinity"] for c in facts["chips"]] == [list(range(0, 24))] * 4 + [list(range(48, 72))] * 4
    assert facts["missing_manager_devices"] == []
    assert facts["manager_devices"] == [str(root / "dev" / name) for name in ("davinci_manager", "devmm_svm",
                                                                               "hisi_hdc")]
    assert facts["install_info"]["Driver_Install_Mode"] == "normal"
    assert facts["chip_names"] == ["310P3"]
    assert [c["health_problems"] for c in facts["cards"]] == [[], [], [], []]
    assert facts["unhealthy_npu_ids"] == []


def test_remapped_host_gives_each_chip_its_own_node(tmp_path):
    # Profile remapped_duo2: logic ids 0, 1, 2, 3 are /dev/davinci4, 5, 0, 1.
    root, paths = twin_host(tmp_path, hosts.load_profiles()["remapped_duo2"])
    facts = run_npu_facts(tmp_path, **paths)
    assert facts["ready"] and facts["problems"] == [] and facts["phy_ids_known"] is True
    assert facts["device_numbering"] == "phy_id" and facts["phyid_remap_error"] is None
    assert [(c["npu_id"], c["chip_id"], c["logic_id"], c["phy_id"], c["device"]) for c in facts["chips"]] == [
        (6, 0, 0, 4, str(root / "dev/davinci4")), (6, 1, 1, 5, str(root / "dev/davinci5")),
        (224, 0, 2, 0, str(root / "dev/davinci0")), (224, 1, 3, 1, str(root / "dev/davinci1"))]
    assert [c["cpu_affinity"] for c in facts["chips"]] == [list(range(48, 96))] * 2 + [list(range(0, 48))] * 2


def test_unknown_remap_with_nodes_not_the_logic_ids_is_a_problem(tmp_path):
    # The same host with an npu-smi that has neither `-t phyid-remap` nor `-t topo`.
    root, paths = twin_host(tmp_path, hosts.load_profiles()["remapped_old_npu_smi"])
    facts = run_npu_facts(tmp_path, **paths)
    assert facts["ready"] is True and facts["phy_ids_known"] is False
    assert [(c["phy_id"], c["device"], c["cpu_affinity"]) for c in facts["chips"]] == [
        (None, str(root / "dev" / ("davinci%d" % logic)), []) for logic in range(4)]
    # A fact, worded by preflight (tests/unit/roles/ascend_preflight): nodes 0 1 4 5, logic ids 0 1 2 3.
    assert facts["device_numbering"] == "unknown" and facts["problems"] == []
    assert facts["devices"] == [str(root / "dev" / ("davinci%d" % n)) for n in (0, 1, 4, 5)]
    assert facts["phyid_remap_error"].startswith("`npu-smi info -t phyid-remap -p 0` (exit 1)")


def test_unknown_remap_is_no_problem_where_nodes_are_the_logic_ids(tmp_path):
    _, paths = twin_host(tmp_path, dict(hosts.load_profiles()["duo2"], phyid_remap=False))
    facts = run_npu_facts(tmp_path, **paths)
    assert facts["problems"] == [] and facts["phy_ids_known"] is False and facts["device_numbering"] == "logic_id"
    assert [c["device"] for c in facts["chips"]] == facts["devices"]


def test_a_chip_without_its_node_has_no_device(tmp_path):
    # Profile missing_davinci: the node of logic id 1 is gone; npu-smi maps the remaining one.
    root, paths = twin_host(tmp_path, hosts.load_profiles()["missing_davinci"])
    facts = run_npu_facts(tmp_path, **paths)
    assert facts["phy_ids_known"] is True and facts["problems"] == []
    assert [(c["phy_id"], c["device"]) for c in facts["chips"]] == [(0, str(root / "dev/davinci0")), (None, None)]


def test_a_chip_in_alarm_makes_its_card_unhealthy(tmp_path):
    # Profile chip_alarm: NPU 6 healthy, NPU 224's chip 1 in Alarm, which its board counts as one chip fault.
    _, paths = twin_host(tmp_path, hosts.load_profiles()["chip_alarm"])
    facts = run_npu_facts(tmp_path, **paths)
    assert [(c["npu_id"], c["chip_fault_count"], c["health_problems"]) for c in facts["cards"]] == [
        (6, 0, []), (224, 1, ["chip 1 health Alarm", "1 chip fault(s)"])]
    assert facts["unhealthy_npu_ids"] == [224]
    assert facts["ready"] and facts["chip_count"] == 4


def test_missing_manager_device_is_named(tmp_path):
    root, paths = twin_host(tmp_path, hosts.load_profiles()["duo2"])
    (root / "dev/devmm_svm").unlink()
    facts = run_npu_facts(tmp_path, **paths)
    assert facts["missing_manager_devices"] == [str(root / "dev/devmm_svm")]
    assert facts["manager_devices"] == [str(root / "dev/davinci_manager"), str(root / "dev/hisi_hdc")]


def test_device_nodes_in_numeric_order(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("davinci10", "davinci2", "davinci_manager", "davinci1x", "hisi_hdc"):
        (dev / name).write_text("")
    facts = run_npu_facts(tmp_path, npu_smi=str(tmp_path / "nowhere/npu-smi"), driver_home=str(tmp_path),
                       firmware_home=str(tmp_path), dev_dir=str(dev))
    assert facts["devices"] == [str(dev / "davinci2"), str(dev / "davinci10")]
    assert facts["manager_devices"] == [str(dev / "davinci_manager"), str(dev / "hisi_hdc")]
    assert facts["missing_manager_devices"] == [str(dev / "devmm_svm")]
    assert (facts["cards"], facts["unhealthy_npu_ids"]) == ([], [])


def test_missing_npu_smi_is_not_present(tmp_path):
    facts = run_npu_facts(tmp_path, npu_smi=str(tmp_path / "nowhere/npu-smi"), driver_home=str(tmp_path),
                       firmware_home=str(tmp_path), dev_dir=str(tmp_path))
    assert facts["present"] is False and facts["ready"] is False
    assert any("npu-smi not found" in p for p in facts["problems"])


def test_dcmi_8005_is_present_but_not_ready_with_cause(tmp_path):
    _, paths = twin_host(tmp_path, hosts.load_profiles()["dcmi_8005"])
    facts = run_npu_facts(tmp_path, **paths)
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
    facts = run_npu_facts(tmp_path, npu_smi=npu_smi, driver_home=str(tmp_path / "none"),
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
    facts = run_npu_facts(tmp_path, **args)
    assert facts["ready"] and facts["chip_count"] == 4


def test_ansible_doc_renders():
    doc = module_doc("npu_facts")
    assert set(doc["doc"]["options"]) == {"npu_smi", "driver_home", "firmware_home", "install_info", "dev_dir",
                                          "timeout", "docker"}
    assert "npu_facts:" in doc["examples"]
    attributes = doc["doc"]["attributes"]
    assert (attributes["check_mode"]["support"], attributes["diff_mode"]["support"]) == ("full", "none")


def test_every_returned_fact_is_documented(tmp_path):
    # foreign_process: a host with a process on a chip, so that the process entries are checked too.
    _, paths = twin_host(tmp_path, hosts.load_profiles()["foreign_process"])
    facts = run_npu_facts(tmp_path, **paths)
    documented = module_doc("npu_facts")["return"]["ansible_facts"]["contains"]["ascend"]["contains"]
    assert set(facts) == set(documented)
    for name in ("cards", "chips", "processes"):
        assert facts[name], "%s: nothing to compare with the documentation" % name
        # hbm_* are documented as returned only on 910B chips; the twin is a 310P host.
        keys = set(documented[name]["contains"]) - {"hbm_total_mb", "hbm_used_mb"}
        assert [set(entry) for entry in facts[name]] == [keys] * len(facts[name]), name
    assert documented["cards"]["contains"]["health_problems"]["elements"] == "str"
    assert documented["unhealthy_npu_ids"]["elements"] == "int"


# --- options it cannot use, npu-smi output and driver files it cannot read ----------------------------------------

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


def slow_npu_smi(tmp_path, real):
    """npu-smi as real answers it, each call but `npu-smi info` a second late: well within a per-call timeout,
    twenty calls of a four-card host past a whole one."""
    slow = tmp_path / "slow-npu-smi"
    slow.write_text("#!/bin/sh\n[ \"$*\" = info ] || sleep 1\nexec %s \"$@\"\n" % real)
    slow.chmod(0o755)
    return str(slow)


def test_the_timeout_bounds_every_npu_smi_call_together(tmp_path):
    """What the time did not reach is named in problems, with the timeout; the facts read before it stay."""
    _root, paths = twin_host(tmp_path, hosts.load_profiles()["seed_duo4"])
    started = time.monotonic()
    facts = run_npu_facts(tmp_path, **dict(paths, npu_smi=slow_npu_smi(tmp_path, paths["npu_smi"]), timeout=3))
    elapsed = time.monotonic() - started
    assert elapsed < 9, "npu_facts took %.1f s with timeout 3" % elapsed
    assert facts["present"] and facts["chip_count"] == 8, "`npu-smi info` answered at once"
    unread = [problem for problem in facts["problems"] if "timeout (3s, all npu-smi calls together)" in problem]
    assert any(problem.startswith("`npu-smi info -t board") and "not run" in problem for problem in unread), (
        facts["problems"])


# A foreign container mapping chip node 0, and one mapping none, as `docker ps` and `docker container inspect` list
# them (the inspect's fields the listing reads).
FOREIGN_DOCKER = """#!/bin/sh
case "$1" in
ps) echo 3f2a9c1b7d4e; echo 9b8c7d6e5f40 ;;
container) cat <<'EOF'
[{"Id": "3f2a9c1b7d4e", "Name": "/llm-test", "Config": {"Image": "llm-test:twin", "Labels": {"team": "nlp"}},
  "State": {"Status": "running"}, "HostConfig": {"Devices": [{"PathOnHost": "%s/davinci0"}]}},
 {"Id": "9b8c7d6e5f40", "Name": "/web", "Config": {"Image": "nginx", "Labels": {}}, "State": {"Status": "running"},
  "HostConfig": {"Devices": []}}]
EOF
;;
*) exit 1 ;;
esac
"""


def test_with_docker_the_facts_name_the_containers_that_map_the_chips(tmp_path):
    """Preflight judges who holds the chips from one call: npu-smi's processes and Docker's containers."""
    _, paths = twin_host(tmp_path, hosts.load_profiles()["duo2"])
    docker = tmp_path / "docker"
    docker.write_text(FOREIGN_DOCKER % paths["dev_dir"])
    docker.chmod(0o755)
    facts = run_npu_facts(tmp_path, docker=str(docker), **paths)
    assert facts["docker_available"] is True
    assert [(found["name"], found["image"], found["devices"], found["labels"]) for found in facts["containers"]] == [
        ("llm-test", "llm-test:twin", [paths["dev_dir"] + "/davinci0"], {"team": "nlp"})]


def test_without_docker_or_its_engine_no_container_is_listed(tmp_path):
    _, paths = twin_host(tmp_path, hosts.load_profiles()["duo2"])
    facts = run_npu_facts(tmp_path, **paths)
    assert (facts["containers"], facts["docker_available"]) == ([], None)
    facts = run_npu_facts(tmp_path, docker=str(tmp_path / "no-docker-here"), **paths)
    assert (facts["containers"], facts["docker_available"]) == ([], False)
