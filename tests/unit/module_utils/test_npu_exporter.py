"""The NPU collector (module_utils/npu_exporter.py): real npu-smi tables read with the project's parser and served
under NPU Exporter's names; its failures, its cut-off of a hung npu-smi, and its HTTP answers; the restart counts
of the host's vLLM containers, read through a Docker CLI stand-in that answers with `docker container inspect`'s
records. promtool (scripts/dev installs it into .venv/bin) lints every exposition as Prometheus would read it."""
import json
import re
import subprocess
import sys
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


# A Docker CLI answering `ps` and `container inspect` as Docker does, from docker-state.json beside it:
# {"containers": [inspect records], "gone": [ids `ps` lists that are removed before `inspect`],
#  "fail": {"ps" or "container inspect": [exit code, stderr]}}.
FAKE_DOCKER = """#!%s
import json, os, sys
state = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "docker-state.json")))
args = sys.argv[1:]
verb = " ".join(args[:2]) if args[0] == "container" else args[0]
if verb in state.get("fail", {}):
    code, said = state["fail"][verb]
    sys.stderr.write(said)
    sys.exit(code)
if verb == "ps":
    wanted = [arg[len("label="):] for arg in args if arg.startswith("label=")]
    for record in state["containers"]:
        if all(label in record["Config"]["Labels"] for label in wanted) and (
                "--all" in args or record["State"]["Running"]):
            print(record["Id"] if "--no-trunc" in args else record["Id"][:12])
elif verb == "container inspect":
    asked = args[args.index("--") + 1:]
    found = [record for record in state["containers"] if record["Id"] in asked and record["Id"] not in state["gone"]]
    print(json.dumps(found, indent=4))
    missing = [name for name in asked if name not in [record["Id"] for record in found]]
    sys.stderr.write("".join("Error: No such container: %%s\\n" %% name for name in missing))
    sys.exit(1 if missing else 0)
else:
    sys.exit("unexpected docker call: %%s" %% args)
""" % sys.executable
KEY = "sk-fleet-key-never-shown"


def fake_docker(tmp_path, containers=(), gone=(), fail=None):
    """The stand-in Docker CLI in tmp_path, and its state file (rewrite it to change what Docker has)."""
    program = tmp_path / "docker"
    program.write_text(FAKE_DOCKER)
    program.chmod(0o755)
    state = tmp_path / "docker-state.json"
    state.write_text(json.dumps({"containers": list(containers), "gone": list(gone), "fail": fail or {}}))
    return program, state


def inspected(name, container_id, restarts, status="running", instance=None, prefix="ascend-vllm-fleet"):
    """A container as `docker container inspect` prints it (Docker 26), run as the vllm_server role runs an instance
    (`docker run --restart unless-stopped --label <prefix>.instance=<name> ... --env-file`), without its network
    and mount details. status: running, restarting (between two of Docker's restarts) or exited."""
    instance = instance or name
    return {
        "Id": container_id, "Created": "2026-12-04T13:02:11.404162307Z", "Path": "/bin/bash",
        "Args": ["/etc/vllm-ascend/%s.entrypoint.sh" % instance],
        "State": {"Status": status, "Running": status != "exited", "Paused": False,
                  "Restarting": status == "restarting", "OOMKilled": False, "Dead": False,
                  "Pid": 48211 if status == "running" else 0, "ExitCode": 0 if status == "running" else 1,
                  "Error": "", "StartedAt": "2026-12-04T13:58:40.118827712Z",
                  "FinishedAt": "2026-12-04T13:58:39.502113008Z"},
        "Image": "sha256:" + "7c3e" * 16, "ResolvConfPath": "/var/lib/docker/containers/%s/resolv.conf" % container_id,
        "LogPath": "/var/lib/docker/containers/%s/%s-json.log" % (container_id, container_id),
        "Name": "/" + name, "RestartCount": restarts, "Driver": "overlay2", "Platform": "linux",
        "HostConfig": {"RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0}, "ShmSize": 10737418240,
                       "Devices": [{"PathOnHost": "/dev/davinci0", "PathInContainer": "/dev/davinci0",
                                    "CgroupPermissions": "rwm"}],
                       "LogConfig": {"Type": "json-file", "Config": {"max-file": "5", "max-size": "100m"}}},
        "Config": {"Hostname": container_id[:12], "Image": "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p",
                   "Env": ["VLLM_API_KEY=" + KEY, "HF_HUB_OFFLINE=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/bin"],
                   "Entrypoint": ["/bin/bash"], "Cmd": ["/etc/vllm-ascend/%s.entrypoint.sh" % instance],
                   "Labels": {prefix + ".instance": instance, prefix + ".host": "npu-node-01",
                              prefix + ".port": "8000", prefix + ".served-name": "Qwen3-VL-8B-Instruct",
                              prefix + ".config-hash": "5f0c" * 16}},
    }


def collected(tmp_path, table, containers=(), **overrides):
    program, _ = fake_npu_smi(tmp_path, table, **{k: v for k, v in overrides.items() if k in ("exit_code", "sleep_s")})
    docker, _ = fake_docker(tmp_path, containers)
    collector = npu_exporter.Collector(params(tmp_path, program, **{k: v for k, v in overrides.items()
                                                                    if k in NPU_OPTIONS}), 15, str(docker))
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
    reading = {"chips": [], "driver_version": 'a"b\\c\nd', "firmware_version": None, "problem": None,
               "containers": [], "docker_problem": None}
    text = npu_exporter.exposition(reading, 0.5)
    lint(text)
    assert 'npu_driver_info{driver_version="a\\"b\\\\c\\nd",firmware_version=""} 1.0' in text


def test_the_service_answers_scrapes_from_the_latest_reading(tmp_path):
    program, output = fake_npu_smi(tmp_path, read_fixture(DUO4))
    collector = npu_exporter.Collector(params(tmp_path, program), 15, str(fake_docker(tmp_path)[0]))
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
    docker, _ = fake_docker(tmp_path, [inspected("vllm-a", "ab" * 32, 2, prefix="site")])
    code = npu_exporter.main(["--once", "--npu-smi", str(program), "--driver-home", str(tmp_path),
                              "--docker", str(docker), "--label-prefix", "site"])
    assert code == 0
    text = capsys.readouterr().out
    assert len(by_name(text, "npu_chip_info_health_status")) == 8
    assert by_name(text, "ascend_fleet_instance_restarts_total") == {
        '{vllm_instance="vllm-a",container_id="%s"}' % ("ab" * 6): 2.0}
    assert npu_exporter.main(["--once", "--interval", "0"]) == 2


# --- the restart counts of the host's vLLM containers --------------------------------------------------------------
FIRST, SECOND, ASIDE, OTHER = "1f" * 32, "2e" * 32, "3d" * 32, "4c" * 32


def restarts(text):
    return by_name(text, "ascend_fleet_instance_restarts_total")


def series_of(instance, container_id):
    return '{vllm_instance="%s",container_id="%s"}' % (instance, container_id[:12])


def test_each_vllm_container_has_the_restart_count_docker_keeps(tmp_path):
    """Two instances: one serving that never restarted, one in a crash loop (between two of Docker's restarts),
    the container a replacement set aside (stopped, named <name>-previous, still its instance's), and a container
    the deploy did not label, which is none of the fleet's. The API key in the containers' environment never
    reaches the exposition."""
    containers = [inspected("vllm-qwen3-vl-8b-0", FIRST, 0),
                  inspected("vllm-qwen3-vl-8b-1", SECOND, 3, status="restarting"),
                  inspected("vllm-qwen3-vl-8b-1-previous", ASIDE, 1, status="exited", instance="vllm-qwen3-vl-8b-1"),
                  dict(inspected("monitoring-agent", OTHER, 7), Config={"Labels": {}, "Env": []})]
    text, reading = collected(tmp_path, read_fixture(DUO4), containers)
    lint(text)
    assert restarts(text) == {series_of("vllm-qwen3-vl-8b-0", FIRST): 0.0,
                              series_of("vllm-qwen3-vl-8b-1", SECOND): 3.0,
                              series_of("vllm-qwen3-vl-8b-1", ASIDE): 1.0}
    assert "# TYPE ascend_fleet_instance_restarts_total counter" in text
    assert by_name(text, "npu_exporter_docker_up") == {"": 1.0} and reading["docker_problem"] is None
    assert KEY not in text
    # The chips are read as before.
    assert len(by_name(text, "npu_chip_info_health_status")) == 8


def test_a_planned_replacement_is_a_new_series_and_a_restart_raises_the_count(tmp_path):
    """What the alert reads over time: Docker restarts the serving container (its count rises, the series goes on);
    the deploy replaces it (a new container: a new series from 0, the old one no longer listed once committed)."""
    program, _ = fake_npu_smi(tmp_path, read_fixture(DUO4))
    docker, state = fake_docker(tmp_path, [inspected("vllm-a", FIRST, 0)])
    collector = npu_exporter.Collector(params(tmp_path, program), 15, str(docker))
    readings = []
    for containers in ([inspected("vllm-a", FIRST, 0)], [inspected("vllm-a", FIRST, 1)],
                       [inspected("vllm-a-previous", FIRST, 1, status="exited", instance="vllm-a"),
                        inspected("vllm-a", SECOND, 0)],
                       [inspected("vllm-a", SECOND, 0)]):
        state.write_text(json.dumps({"containers": containers, "gone": [], "fail": {}}))
        collector.collect_once()
        readings.append(restarts(collector.text))
    assert readings == [{series_of("vllm-a", FIRST): 0.0}, {series_of("vllm-a", FIRST): 1.0},
                        {series_of("vllm-a", FIRST): 1.0, series_of("vllm-a", SECOND): 0.0},
                        {series_of("vllm-a", SECOND): 0.0}]


def test_a_container_removed_while_it_is_read_leaves_the_others(tmp_path):
    """`docker ps` lists it, `docker container inspect` no longer finds it (exit 1, the others printed)."""
    program, _ = fake_npu_smi(tmp_path, read_fixture(DUO4))
    docker, _ = fake_docker(tmp_path, [inspected("vllm-a", FIRST, 2), inspected("vllm-b", SECOND, 0)], gone=[SECOND])
    collector = npu_exporter.Collector(params(tmp_path, program), 15, str(docker))
    reading = collector.collect_once()
    assert restarts(collector.text) == {series_of("vllm-a", FIRST): 2.0} and reading["docker_problem"] is None


@pytest.mark.parametrize("fail, expected", [
    ({"ps": [1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"]},
     "`docker ps` failed (exit 1): Cannot connect to the Docker daemon"),
    ({"container inspect": [1, "Error response from daemon: i/o timeout\n"]},
     "`docker container inspect` failed (exit 1): Error response from daemon: i/o timeout"),
])
def test_docker_that_fails_is_down_and_lists_no_container(tmp_path, fail, expected):
    """No restart series, rather than counts that would read as a reset; the chips are still read."""
    program, _ = fake_npu_smi(tmp_path, read_fixture(DUO4))
    docker, _ = fake_docker(tmp_path, [inspected("vllm-a", FIRST, 2)], fail=fail)
    collector = npu_exporter.Collector(params(tmp_path, program), 15, str(docker))
    reading = collector.collect_once()
    lint(collector.text)
    assert reading["docker_problem"].startswith(expected), reading["docker_problem"]
    assert by_name(collector.text, "npu_exporter_docker_up") == {"": 0.0} and restarts(collector.text) == {}
    assert by_name(collector.text, "npu_exporter_npu_smi_up") == {"": 1.0}


def test_a_host_without_docker_is_down_and_says_why(tmp_path):
    program, _ = fake_npu_smi(tmp_path, read_fixture(DUO4))
    collector = npu_exporter.Collector(params(tmp_path, program), 15, str(tmp_path / "nowhere" / "docker"))
    reading = collector.collect_once()
    assert "cannot run" in reading["docker_problem"]
    assert by_name(collector.text, "npu_exporter_docker_up") == {"": 0.0} and restarts(collector.text) == {}


def test_a_host_with_no_instance_yet_is_up_with_no_series(tmp_path):
    text, reading = collected(tmp_path, read_fixture(DUO4))
    lint(text)
    assert by_name(text, "npu_exporter_docker_up") == {"": 1.0} and restarts(text) == {}
    assert "ascend_fleet_instance_restarts_total" not in text
