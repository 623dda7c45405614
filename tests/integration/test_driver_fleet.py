"""playbooks/driver.yml on a twin fleet: a 24.1.rc2 host and a Kunpeng (aarch64) host without a driver go to
25.5.2 / 7.8.0.7.220 in one run and are rebooted, each with the driver package of its architecture, a host on the
release is left alone, a host where someone else's container holds a chip is refused by that container's name, a
host whose package fails stops with the installer's words; check mode only shows the plan; site.yml then serves,
verifies and benchmarks the three, the aarch64 host beside the x86_64 ones, each with the image of its platform.

The 24.1.rc2 host serves behind a gateway before the change: its instance is drained on the gateway and stopped
before the packages run, put back on the gateway after, and site.yml starts it again."""
import json
import platform
import time
import urllib.request

import pytest

from conftest import GATEWAY_BACKEND as BACKEND
from twin import hdk
from twin_fleet import DEFAULT_CONTAINER, DEFAULT_PORT, SMALL_BENCH_PLAY, PlayFleet

pytestmark = pytest.mark.docker
GOOD, OLD, FRESH, HELD, BROKEN = "drv-good", "drv-old", "drv-fresh", "drv-held", "drv-broken"
GATEWAY = "drv-gateway"
DRIVER, FIRMWARE = "25.5.2", "7.8.0.7.220"
STATS = ("import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/haproxy/admin.sock'); "
         "s.sendall(b'show servers state %s\\n'); print(s.makefile().read())" % BACKEND)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    fleet = PlayFleet(tmp_path_factory.mktemp("driver"),
                      {GOOD: "duo2", OLD: "driver_24_1_rc2", FRESH: "kunpeng_fresh", HELD: "chip_container",
                       BROKEN: "driver_24_1_rc2", GATEWAY: "gateway"})
    # Its driver package will fail as a DKMS build does (tests/twin/hdk.py reads `fail` from the host's hardware).
    hardware = fleet[BROKEN].root / hdk.STATE_DIR / hdk.HARDWARE_FILE
    hardware.write_text(json.dumps(dict(json.loads(hardware.read_text()), fail="driver")))
    # The 24.1.rc2 host deployed without preflight, as a fleet that ran before preflight refused 24.x.
    run = fleet.play("--limit", ",".join([OLD, GATEWAY]))
    assert run.rc == 0, run.stdout
    assert models(fleet)["data"], "the gateway serves before the change"
    yield fleet
    fleet.down()


@pytest.fixture(scope="module")
def upgrade(fleet):
    """The one driver.yml run that brings the fleet to the release: (each host's boot id before it, the run)."""
    before = {name: boot_id(fleet[name]) for name in fleet.hosts}
    return before, fleet.play(playbook="playbooks/driver.yml")


def admin_state(fleet):
    """The instance's administrative state on the gateway (HAProxy's srv_admin_state: 0 ready, 8 drain)."""
    lines = fleet[GATEWAY].exec("python3", "-c", STATS).stdout.splitlines()
    header = lines[1].lstrip("# ").split()
    (row,) = [dict(zip(header, line.split())) for line in lines[2:] if line.strip()]
    return int(row["srv_admin_state"])


def models(fleet):
    """The gateway's /v1/models answer, asked with the fleet's key."""
    request = urllib.request.Request(fleet[GATEWAY].url(8080) + "/v1/models",
                                     headers={"Authorization": "Bearer %s" % fleet.api_key()})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def boot_id(host):
    return host.exec("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()


def board(host, npu_id):
    """(Software Version, Firmware Version) npu-smi reports for a card."""
    text = host.exec("/usr/local/bin/npu-smi", "info", "-t", "board", "-i", str(npu_id)).stdout
    values = {key.strip(): value.strip() for key, value in
              (line.split(" : ", 1) for line in text.splitlines() if " : " in line)}
    return values["Software Version"], values["Firmware Version"]


def installed(host):
    """What the driver's and firmware's version.info say, or None for a missing one."""
    found = []
    for component in ("driver", "firmware"):
        path = "/usr/local/Ascend/%s/version.info" % component
        found.append(host.read_text(path).splitlines()[0] if host.exists(path) else None)
    return found


def plan_lines(run):
    """The fleet's plan as the run printed it, one line per host."""
    (shown,) = run.results("Show the fleet's plan").values()
    return shown["msg"]


def test_preflight_refuses_the_hosts_off_the_release(fleet):
    run = fleet.play(playbook="playbooks/preflight.yml")
    assert run.failed_hosts() == sorted([OLD, FRESH, HELD, BROKEN]), run.stdout
    assert "driver version: found 24.1.rc2 (a 24.x driver)" in run.stdout
    assert "npu-smi not found" in run.stdout
    # A twin host boots untuned, as a Kunpeng host on schedutil does: each setting of the guide is a warning.
    warnings = tuning_warnings(run, GOOD)
    assert [warning.split(" is ")[0] for warning in warnings] == [
        "cpu_governor", "vm.swappiness", "kernel.numa_balancing", "kernel.sched_migration_cost_ns"], warnings
    assert run.stats["failures"].get(GOOD, 0) == 0


def tuning_warnings(run, host):
    result = run.results("Judge the host")[host]["ansible_facts"]["ascend_preflight_result"]
    return [warning["found"] for warning in result["warnings"] if warning["check"] == "host tuning"]


def tuning(host):
    """The settings as the host's kernel has them (the twin's files over the real paths)."""
    return host.exec("sh", "-c", "for f in /sys/devices/system/cpu/cpufreq/policy*/scaling_governor "
                     "/proc/sys/vm/swappiness /proc/sys/kernel/numa_balancing "
                     "/sys/kernel/debug/sched/migration_cost_ns; do echo $(cat $f); done").stdout.split()


def test_tuning_is_applied_where_asked_and_a_second_run_changes_nothing(fleet):
    untuned = tuning(fleet[GOOD])
    with open("/proc/sys/vm/swappiness") as ours:
        machine = ours.read()
    # OLD: a host the upgrade reboots (below), on x86_64, where a module costs a fraction of the emulated host's.
    run = fleet.play("--limit", OLD, playbook="playbooks/host_tuning.yml")
    assert run.rc == 0 and run.changed() == 1, run.stdout
    cpus = len(untuned) - 3
    assert tuning(fleet[OLD]) == ["performance"] * cpus + ["0", "0", "50000"]
    assert tuning(fleet[GOOD]) == untuned == ["schedutil"] * cpus + ["60", "1", "500000"]
    with open("/proc/sys/vm/swappiness") as ours:
        assert ours.read() == machine, "a twin host tunes its own files, never this machine's kernel"
    again = fleet.play("--limit", OLD, playbook="playbooks/host_tuning.yml")
    assert again.rc == 0 and again.changed() == 0, again.stdout


def test_check_mode_shows_the_plan_and_changes_nothing(fleet):
    before = {name: (boot_id(fleet[name]), installed(fleet[name])) for name in fleet.hosts}
    run = fleet.play("--check", playbook="playbooks/driver.yml")
    assert run.changed() == 0, run.stdout
    text = "\n".join(plan_lines(run))
    assert "%s: current (driver %s, firmware %s): nothing to do" % (GOOD, DRIVER, FIRMWARE) in text
    assert ("%s: upgrade: firmware upgrade 7.3.0.1.231 -> %s (Ascend-hdk-310p-npu-firmware_%s.run), then driver "
            "upgrade 24.1.rc2 -> %s" % (OLD, FIRMWARE, FIRMWARE, DRIVER)) in text, text
    assert "%s: install: driver install none -> %s" % (FRESH, DRIVER) in text
    assert "container npu-exporter" in text
    after = {name: (boot_id(fleet[name]), installed(fleet[name])) for name in fleet.hosts}
    assert after == before
    assert not fleet[FRESH].exists("/var/lib/ascend-vllm-fleet/hdk")
    assert fleet[FRESH].exec("id", "HwHiAiUser", check=False).returncode != 0


def test_a_driver_and_firmware_of_two_releases_are_refused_before_any_host_is_touched(fleet):
    run = fleet.play("-e", "fleet_firmware_version=7.8.0.6.201", playbook="playbooks/driver.yml")
    assert run.rc != 0 and run.changed() == 0
    assert ("fleet_driver_version \"25.5.2\" with fleet_firmware_version \"7.8.0.6.201\" is not a release pair"
            in run.stdout), run.stdout
    assert "driver 25.5.2 ships with firmware 7.8.0.7.220" in run.stdout
    assert run.results("Gather the host's OS, kernel and mounts") == {}


def test_one_run_brings_both_hosts_to_the_release_and_reboots_only_them(fleet, upgrade):
    before, run = upgrade
    assert run.failed_hosts() == [BROKEN, HELD], run.stdout
    assert "Refused on %s, nothing changed" % HELD in run.stdout
    assert "container npu-exporter (image npu-exporter:twin) maps /dev/davinci0" in run.stdout
    assert run.stats["changed"].get(GOOD, 0) == 0, run.stdout
    after = {name: boot_id(fleet[name]) for name in fleet.hosts}
    assert [name for name in fleet.hosts if after[name] != before[name]] == sorted([OLD, FRESH])
    for name, npu_ids in ((OLD, (6, 224)), (FRESH, (1, 2, 4, 5))):
        assert installed(fleet[name]) == ["Version=%s" % DRIVER, "Version=%s" % FIRMWARE]
        for npu_id in npu_ids:
            assert board(fleet[name], npu_id) == (DRIVER, FIRMWARE)
    # The packages ran in Huawei's order, with the options of a first install or an upgrade.
    log = fleet[OLD].read_text("/var/log/ascend_seclog/operation.log")
    assert log.index("firmware") < log.index("driver"), log
    log = fleet[FRESH].read_text("/var/log/ascend_seclog/operation.log")
    assert log.index("driver") < log.index("firmware"), log
    # Each host ran the driver package of its architecture (the installer refuses another's).
    for name, architecture in ((OLD, platform.machine()), (FRESH, "aarch64")):
        assert ("Ascend-hdk-310p-npu-driver_25.5.2_linux-%s.run" % architecture
                in fleet[name].read_text("/var/log/ascend_seclog/ascend_install.log")), name
    # The broken host stopped at its driver, after its firmware, with the installer's output and log.
    failure = run.results("Stop with the installer's own words")[BROKEN]["msg"]
    assert ("The driver package Ascend-hdk-310p-npu-driver_25.5.2_linux-%s.run failed on %s (exit code 1"
            % (platform.machine(), BROKEN)) in failure[0]
    assert any("Dkms install failed" in line for line in failure), failure
    assert "Its log /var/log/ascend_seclog/ascend_install.log ends:" in failure
    assert installed(fleet[BROKEN]) == ["Version=24.1.rc2", "Version=%s" % FIRMWARE]
    # The held host kept its driver and its exporter.
    assert installed(fleet[HELD])[0] == "Version=24.1.rc2"
    assert fleet[HELD].inspect("npu-exporter")["State"]["Running"]


def test_the_serving_host_is_drained_and_stopped_before_its_packages_then_put_back_on_the_gateway(fleet, upgrade):
    _, run = upgrade
    drained = run.results("Stop sending new requests to the instances")
    assert drained[OLD]["_event"] == "runner_on_ok" and drained[OLD]["changed"], drained
    assert run.results("Stop the instances")[OLD]["changed"]
    container = fleet[OLD].inspect(DEFAULT_CONTAINER)
    assert container is not None and not container["State"]["Running"]
    # Put back: ready again on the gateway, out of rotation only by its failing health checks.
    assert admin_state(fleet) == 0


def test_the_tuning_is_still_there_after_the_reboot(fleet, upgrade):
    """The upgrade rebooted OLD: the boot gave the kernel's defaults back, then applied sysctl.d and tmpfiles.d."""
    assert tuning(fleet[OLD])[-3:] == ["0", "0", "50000"] and set(tuning(fleet[OLD])[:-3]) == {"performance"}
    run = fleet.play("--limit", ",".join([GOOD, OLD]), playbook="playbooks/preflight.yml")
    assert run.rc == 0, run.stdout
    assert tuning_warnings(run, OLD) == [] and len(tuning_warnings(run, GOOD)) == 4


def test_a_second_run_changes_nothing(fleet):
    """The x86_64 host the upgrade brought to the release, and one that was on it. The emulated aarch64 host is left
    out: its every module takes seconds of this machine's CPU, and its second run takes the x86_64 hosts' path (the
    packages read back as the release's, nothing planned); site.yml below runs on it after the upgrade."""
    before = {name: boot_id(fleet[name]) for name in fleet.hosts}
    run = fleet.play("--limit", ",".join([GOOD, OLD]), playbook="playbooks/driver.yml")
    assert run.rc == 0 and run.changed() == 0, run.stdout
    assert {name: boot_id(fleet[name]) for name in fleet.hosts} == before


def test_site_then_serves_verifies_and_benchmarks_every_fixed_host_each_on_its_platform(fleet, tmp_path):
    """One site.yml run with its benchmark on an aarch64 host and two x86_64 ones."""
    run = fleet.play("--limit", ",".join([GOOD, OLD, FRESH]), "--tags", "all,benchmark",
                     "-e", "vllm_bench_reports_dir=%s" % tmp_path, *SMALL_BENCH_PLAY, preflight=True)
    assert run.rc == 0, run.stdout
    # Preflight read the Kunpeng host as what it is.
    judged = run.results("Judge the host")[FRESH]["ansible_facts"]["ascend_preflight_result"]
    assert judged["description"].startswith("aarch64 Kunpeng-920; 4 card(s) Atlas 300I Duo, 8 chip(s)"), judged
    for name in (GOOD, OLD, FRESH):
        # Asked on the host: behind a gateway, only the gateway and the host itself reach the instance's port.
        health = fleet[name].exec("python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                                  "'http://127.0.0.1:%d/health', timeout=10).status)" % DEFAULT_PORT)
        assert health.stdout.strip() == "200"
        plan = json.loads(fleet[name].read_text("/etc/vllm-ascend/plan.json"))
        assert plan["instances"], plan
    # Each host pulled the multi-arch tag's build for its platform, and preloads jemalloc from that build's path.
    for name, platform_name in ((GOOD, {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]),
                                (FRESH, "arm64")):
        container = fleet[name].inspect(DEFAULT_CONTAINER)
        image = json.loads(fleet[name].docker("image", "inspect", container["Image"]).stdout)[0]
        assert image["Architecture"] == platform_name, name
        machine = {"amd64": "x86_64", "arm64": "aarch64"}[platform_name]
        jemalloc = "/usr/lib/%s-linux-gnu/libjemalloc.so.2" % machine
        assert "LD_PRELOAD=" + jemalloc in container["Config"]["Env"], name
        assert fleet[name].docker("exec", DEFAULT_CONTAINER, "test", "-f", jemalloc, check=False).returncode == 0
        assert fleet[name].docker("exec", DEFAULT_CONTAINER, "uname", "-m").stdout.strip() == machine
    # The benchmark (a small matrix: the emulated host's client is slow) measured every instance, its answers
    # checked before and after.
    (report_dir,) = list(tmp_path.iterdir())
    summary = json.loads((report_dir / "summary.json").read_text())
    assert summary["instances"] == 3 and summary["unreliable_groups"] == [], summary
    assert [entry["answers"] for entry in summary["answer_checks"]] == ["passed"] * 3
    # The verification passes on the aarch64 host (on x86_64 ones, every other module's fleet shows it).
    code, output = fleet.verify([FRESH])
    assert code == 0, output
    # The instance stopped for the driver change serves through the gateway again, once its health checks pass.
    deadline = time.time() + 30
    while True:
        try:
            assert models(fleet)["data"]
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(1)
