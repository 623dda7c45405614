"""The NPU collector (module_utils/npu_exporter.py): real npu-smi tables read with the project's parser and served
under NPU Exporter's names; its failures, its cut-off of a hung npu-smi, and its HTTP answers. promtool (scripts/dev
installs it into .venv/bin) lints every exposition as Prometheus would read it."""
import re
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import npu_exporter
from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import NPU_OPTIONS
from conftest import free_port, read_fixture, venv_tool

DUO4 = "info_310P3-duo_25.5.1_4cards_gofixture.txt"
A2 = "info_910B2C_25.5.2_gofixture-contrast.txt"
SAMPLE = re.compile(r'^(\w+)(\{.*\})? (\S+)$')


def fake_npu_smi(tmp_path, table=None, exit_code=0, sleep_s=0):
    """An npu-smi that prints table (read at each call from a file, so a test can change it) and exits."""
    output = tmp_path / "npu-smi-output.txt"
    output.write_text(table or "", encoding="utf-8")
    program = tmp_path / "npu-smi"
    program.write_text("#!/bin/sh\nsleep %s\ncat %s\nexit %d\n" % (sleep_s, output, exit_code))
    program.chmod(0o755)
    return program, output


def params(tmp_path, program, **overrides):
    found = dict((name, spec.get("default")) for name, spec in NPU_OPTIONS.items())
    (tmp_path / "driver").mkdir(exist_ok=True)
    (tmp_path / "driver" / "version.info").write_text("Version=25.5.2\n")
    (tmp_path / "firmware").mkdir(exist_ok=True)
    (tmp_path / "firmware" / "version.info").write_text("Version=7.8.0.7.220\n")
    found.update(npu_smi=str(program), driver_home=str(tmp_path / "driver"),
                 firmware_home=str(tmp_path / "firmware"), install_info=str(tmp_path / "none"), timeout=10)
    found.update(overrides)
    return found


def samples(text):
    """{(name, labels text): value} of an exposition."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, "not a sample line: %r" % line
        found[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return found


def by_name(text, name):
    return {labels: value for (metric, labels), value in samples(text).items() if metric == name}


def lint(text):
    """promtool's reading of an exposition: fails the test on any problem it names."""
    done = subprocess.run([venv_tool("promtool"), "check", "metrics"], input=text, universal_newlines=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert done.returncode == 0, done.stdout


def collected(tmp_path, table, **overrides):
    program, _ = fake_npu_smi(tmp_path, table, **{k: v for k, v in overrides.items() if k in ("exit_code", "sleep_s")})
    collector = npu_exporter.Collector(params(tmp_path, program, **{k: v for k, v in overrides.items()
                                                                    if k in NPU_OPTIONS}), 15)
    reading = collector.collect_once()
    return collector.text, reading


def test_a_310p3_duo_hosts_chips_under_npu_exporters_names_and_labels(tmp_path):
    text, reading = collected(tmp_path, read_fixture(DUO4))
    lint(text)
    health = by_name(text, "npu_chip_info_health_status")
    assert len(health) == 8 and set(health.values()) == {1.0}
    first = '{id="0",model_name="310P3",vdie_id="",pcie_bus_info="0000:01:00.0",npu_id="1",chip_id="0"}'
    assert by_name(text, "npu_chip_info_temperature")[first] == 49.0
    # The table's DDR figures, as the 310P reports them.
    assert by_name(text, "npu_chip_info_used_memory")[first] == 1448.0
    assert by_name(text, "npu_chip_info_total_memory")[first] == 44278.0
    assert by_name(text, "npu_chip_info_utilization")[first] == 0.0
    last = '{id="7",model_name="310P3",vdie_id="",pcie_bus_info="0000:82:00.0",npu_id="5",chip_id="1"}'
    assert by_name(text, "npu_chip_info_used_memory")[last] == 1269.0
    # The Duo prints its power as NA: no series rather than a made-up zero; no HBM on 310P.
    assert by_name(text, "npu_chip_info_power") == {}
    assert by_name(text, "npu_chip_info_hbm_used_memory") == {}
    assert by_name(text, "machine_npu_nums") == {"": 8.0}
    assert by_name(text, "npu_exporter_npu_smi_up") == {"": 1.0} and reading["problem"] is None
    assert by_name(text, "npu_driver_info") == {'{driver_version="25.5.1",firmware_version="7.8.0.7.220"}': 1.0}


def test_a_chip_npu_smi_does_not_call_ok_is_unhealthy(tmp_path):
    table = read_fixture(DUO4)
    # The third chip's row (card 2, chip 0) says Alarm, as a chip with a fault does.
    rows = table.split("\n")
    index = [i for i, row in enumerate(rows) if row.startswith("| 2 ")][0]
    rows[index] = rows[index].replace("| OK              |", "| Alarm           |")
    text, _ = collected(tmp_path, "\n".join(rows))
    health = by_name(text, "npu_chip_info_health_status")
    unhealthy = [labels for labels, value in health.items() if value == 0.0]
    assert unhealthy == ['{id="2",model_name="310P3",vdie_id="",pcie_bus_info="0000:02:00.0",npu_id="2",chip_id="0"}']
    assert by_name(text, "npu_exporter_npu_smi_up") == {"": 1.0}


def test_a_chip_with_hbm_and_power_reports_them(tmp_path):
    text, _ = collected(tmp_path, read_fixture(A2))
    lint(text)
    power = by_name(text, "npu_chip_info_power")
    assert power['{id="0",model_name="910B2C",vdie_id="",pcie_bus_info="0000:66:00.0",npu_id="0",chip_id="0"}'] == 93.9
    assert by_name(text, "npu_chip_info_hbm_total_memory")[
        '{id="0",model_name="910B2C",vdie_id="",pcie_bus_info="0000:66:00.0",npu_id="0",chip_id="0"}'] == 65536.0


@pytest.mark.parametrize("table, exit_code, expected", [
    (read_fixture("error_dcmi_-8005_vllm-ascend-issue2698.txt"), 1, "-8005"),
    ("", 0, "no chip"),
    ("garbage\n", 2, "exit 2"),
])
def test_an_npu_smi_that_fails_is_down_and_lists_no_chip(tmp_path, table, exit_code, expected):
    text, reading = collected(tmp_path, table, exit_code=exit_code)
    lint(text)
    assert expected in reading["problem"]
    assert by_name(text, "npu_exporter_npu_smi_up") == {"": 0.0}
    assert by_name(text, "npu_chip_info_health_status") == {} and by_name(text, "machine_npu_nums") == {}
    # The versions still come from the driver's files.
    assert by_name(text, "npu_driver_info") == {'{driver_version="25.5.2",firmware_version="7.8.0.7.220"}': 1.0}


def test_a_missing_npu_smi_is_down(tmp_path):
    text, reading = collected(tmp_path, "", npu_smi=str(tmp_path / "nowhere" / "npu-smi"))
    assert by_name(text, "npu_exporter_npu_smi_up") == {"": 0.0} and "not found" in reading["problem"]


def test_a_hung_npu_smi_is_cut_off_at_the_timeout_and_reported_down(tmp_path):
    text, reading = collected(tmp_path, read_fixture(DUO4), sleep_s=30, timeout=1)
    assert "timed out" in reading["problem"]
    assert by_name(text, "npu_exporter_npu_smi_up") == {"": 0.0}
    assert by_name(text, "npu_exporter_collect_duration_seconds")[""] < 10


def test_label_values_are_escaped():
    reading = {"chips": [], "driver_version": 'a"b\\c\nd', "firmware_version": None, "problem": None}
    text = npu_exporter.exposition(reading, 0.5)
    lint(text)
    assert 'npu_driver_info{driver_version="a\\"b\\\\c\\nd",firmware_version=""} 1.0' in text


def test_the_service_answers_scrapes_from_the_latest_reading(tmp_path):
    program, output = fake_npu_smi(tmp_path, read_fixture(DUO4))
    collector = npu_exporter.Collector(params(tmp_path, program), 15)
    port = free_port()
    server = npu_exporter.ThreadingServer(("127.0.0.1", port), npu_exporter.handler_for(collector))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d" % port
        # Before the first reading: up, with no chip, says so.
        assert by_name(urllib.request.urlopen(url + "/metrics", timeout=10).read().decode(),
                       "npu_exporter_npu_smi_up") == {"": 0.0}
        collector.collect_once()
        answer = urllib.request.urlopen(url + "/metrics", timeout=10)
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert len(by_name(answer.read().decode(), "npu_chip_info_temperature")) == 8
        # The table changes (a chip heats up): the next reading shows it.
        output.write_text(read_fixture(DUO4).replace("| NA           49 ", "| NA           91 ", 1))
        collector.collect_once()
        temperatures = by_name(urllib.request.urlopen(url + "/metrics", timeout=10).read().decode(),
                               "npu_chip_info_temperature")
        assert max(temperatures.values()) == 91.0
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "/", timeout=10)
        assert refused.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_the_command_line_prints_one_reading(tmp_path, capsys):
    program, _ = fake_npu_smi(tmp_path, read_fixture(DUO4))
    code = npu_exporter.main(["--once", "--npu-smi", str(program), "--driver-home", str(tmp_path)])
    assert code == 0
    assert len(by_name(capsys.readouterr().out, "npu_chip_info_health_status")) == 8
    assert npu_exporter.main(["--once", "--interval", "0"]) == 2
