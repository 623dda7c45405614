"""The twin's HDK packages install, refuse and take effect as Huawei's driver and firmware packages do.

Every run is the built .run file under bash with TWIN_ROOT on a temporary root, so the header, the payload and
the installer are what a twin host runs. docker on PATH is a fake: one whose engine does not answer, or one
with a running npu-exporter container that maps /dev/davinci0.
"""
import ast
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO, snapshot
from twin import hdk, hosts
from twin.platforms import NATIVE

DRIVER = "25.5.2"
FIRMWARE = "7.8.0.7.220"
OLD_DRIVER = "24.1.rc2"
OLD_FIRMWARE = "7.3.0.1.231"
# One Duo card, no driver yet: a machine before its first install.
FRESH = {"driver": None, "firmware": OLD_FIRMWARE, "cards": [{"npu_id": 6, "bus_id": "0000:83:00.0"}]}
# Two Duo cards on the release pair before the seed's.
OLD = {"driver": OLD_DRIVER, "firmware": OLD_FIRMWARE,
       "cards": [{"npu_id": 6, "bus_id": "0000:83:00.0"}, {"npu_id": 224, "bus_id": "0000:84:00.0"}]}
PASSWD = "root:x:0:0:root:/root:/bin/bash\nHwHiAiUser:x:1000:1000::/home/HwHiAiUser:/bin/bash\n"
GROUP = "root:x:0:\nHwHiAiUser:x:1000:\n"
INSTALL = ("--nox11", "--full", "--quiet", "--install-for-all")
UPGRADE = ("--nox11", "--upgrade", "--quiet")
FAKE_DOCKER_DOWN = "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\nexit 1\n"
EXPORTER_ID = "3f2a9c1b7d4e"
FAKE_DOCKER_EXPORTER = """#!/bin/sh
case "$1" in
ps) echo %s ;;
inspect) cat <<'EOF'
[{"Id": "%s5a60", "Name": "/npu-exporter", "State": {"Running": true},
  "HostConfig": {"Devices": [{"PathOnHost": "/dev/davinci0", "PathInContainer": "/dev/davinci0",
                              "CgroupPermissions": "rwm"}]},
  "Mounts": []}]
EOF
;;
*) exit 1 ;;
esac
""" % (EXPORTER_ID, EXPORTER_ID)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("packages")
    return {"driver": hdk.build_package(folder, "driver", DRIVER, NATIVE),
            "firmware": hdk.build_package(folder, "firmware", FIRMWARE)}


@pytest.fixture(scope="module")
def docker_bins(tmp_path_factory):
    found = {}
    for name, script in (("down", FAKE_DOCKER_DOWN), ("exporter", FAKE_DOCKER_EXPORTER)):
        folder = tmp_path_factory.mktemp("docker-" + name)
        (folder / "docker").write_text(script)
        os.chmod(folder / "docker", 0o755)
        found[name] = folder
    return found


def make_root(root, profile, passwd=PASSWD, group=GROUP):
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/passwd").write_text(passwd)
    (root / "etc/group").write_text(group)
    hdk.write_hardware(root, hdk.initial_hardware(profile))
    return root


@pytest.fixture
def fresh_root(tmp_path):
    return make_root(tmp_path / "root", FRESH)


@pytest.fixture
def old_root(tmp_path):
    """A host as the twin makes it today (hosts.build_root), on driver 24.1.rc2 and firmware 7.3.0.1.231."""
    root = tmp_path / "root"
    hosts.build_root(root, OLD)
    return make_root(root, OLD)


def log_lines(root, name):
    path = root / "var/log/ascend_seclog" / name
    return path.read_text().splitlines() if path.exists() else []


def run(package, root, *args, docker="down", docker_bins=None, stdin=""):
    """Run a package as `bash X.run ...`; every run must log what it did and leave one audit line."""
    before = (len(log_lines(root, "ascend_install.log")), len(log_lines(root, "operation.log")))
    env = dict(os.environ, TWIN_ROOT=str(root), PATH="%s:%s" % (docker_bins[docker], os.environ["PATH"]))
    result = subprocess.run(["bash", str(package)] + list(args), env=env, input=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert len(log_lines(root, "ascend_install.log")) > before[0], result.stdout
    assert len(log_lines(root, "operation.log")) == before[1] + 1, result.stdout
    return result


def hardware(root):
    return json.loads((root / hdk.STATE_FILE).read_text())


def board(root, npu_id):
    """(Software Version, Firmware Version) as the installed npu-smi reports them."""
    result = subprocess.run(
        [str(root / "usr/local/bin/npu-smi"), "info", "-t", "board", "-i", str(npu_id)],
        env=dict(os.environ, NPU_SMI_TWIN_PROFILE=str(root / "usr/local/dcmi/npu-smi-twin.json")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    values = dict(re.findall(r"^\t(.+?)\s+: (.*)$", result.stdout, re.M))
    return values["Software Version"], values["Firmware Version"]


def node(root, name):
    info = os.lstat(root / "dev" / name)
    assert stat.S_ISCHR(info.st_mode), name
    return os.major(info.st_rdev), os.minor(info.st_rdev)


# The packages ------------------------------------------------------------------------------------------------------

def test_packages_are_named_as_huaweis_and_rebuild_to_the_same_bytes(packages, tmp_path):
    driver, firmware = packages["driver"], packages["firmware"]
    assert driver.name == "Ascend-hdk-310p-npu-driver_25.5.2_linux-%s.run" % NATIVE
    assert hdk.package_name("driver", "25.5.2", "aarch64") == "Ascend-hdk-310p-npu-driver_25.5.2_linux-aarch64.run"
    assert firmware.name == "Ascend-hdk-310p-npu-firmware_7.8.0.7.220.run"
    assert hdk.package_name("driver", "25.5.2", "x86_64") == "Ascend-hdk-310p-npu-driver_25.5.2_linux-x86_64.run"
    assert stat.S_IMODE(driver.stat().st_mode) == 0o755
    assert driver.read_bytes().startswith(b"#!/bin/bash\n")
    before = driver.stat()
    assert hdk.build_package(driver.parent, "driver", DRIVER, NATIVE) == driver
    after = driver.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    elsewhere = hdk.build_package(tmp_path, "firmware", FIRMWARE)
    assert elsewhere.read_bytes() == firmware.read_bytes()
    for kind, arch in (("driver", None), ("driver", "armv7l"), ("toolkit", "aarch64")):
        with pytest.raises(ValueError):
            hdk.package_name(kind, "1.0", arch)


def test_the_payload_holds_the_installer_the_emulator_and_what_the_package_is(packages):
    header, payload = hdk._split_package(packages["driver"])
    assert re.search(rb"^PAYLOAD_SHA256=[0-9a-f]{64}$", header, re.M)
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
        assert tar.getnames() == ["package.json", "hdk.py", "npu_smi.py"]
        meta = json.loads(tar.extractfile("package.json").read())
        assert tar.extractfile("npu_smi.py").read() == (REPO / "tests/twin/npu_smi.py").read_bytes()
    assert meta == {"kind": "driver", "version": DRIVER, "arch": NATIVE, "chip": "310p",
                    "compatible_version_fw": "[7.0.0,8.9.9]"}
    firmware_meta, _ = hdk.read_package(packages["firmware"])
    assert firmware_meta == {"kind": "firmware", "version": FIRMWARE, "arch": None, "chip": "310p"}


def test_check_verifies_the_payload_and_a_flipped_byte_fails_it(packages, fresh_root, docker_bins, tmp_path,
                                                                monkeypatch, capsys):
    result = run(packages["driver"], fresh_root, "--check", docker_bins=docker_bins)
    assert (result.returncode, result.stdout) == (0, hdk.CHECK_OK + "\n")

    damaged = tmp_path / packages["firmware"].name
    data = bytearray(packages["firmware"].read_bytes())
    data[len(data) - 40] ^= 0x01  # inside the payload, which ends the file
    damaged.write_bytes(bytes(data))
    assert hdk.verify_package(damaged)[0] is False
    for args in (["--check"], list(INSTALL)):
        result = subprocess.run(["bash", str(damaged)] + args, env=dict(os.environ, TWIN_ROOT=str(fresh_root)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
        assert result.returncode == 1
        assert result.stdout.startswith("Error in SHA256 checksums: ")
    # The installer's own check, for a package run without its header's.
    monkeypatch.setenv("TWIN_ROOT", str(fresh_root))
    assert hdk.main(["run", str(damaged), "--check"]) == 1
    assert "Error in SHA256 checksums: " in capsys.readouterr().out
    assert not (fresh_root / "usr/local/Ascend").exists()


def test_a_driver_package_of_another_architecture_installs_nothing(fresh_root, docker_bins, tmp_path):
    other = "x86_64" if NATIVE == "aarch64" else "aarch64"
    package = hdk.build_package(tmp_path, "driver", DRIVER, other)
    result = run(package, fresh_root, *INSTALL, docker_bins=docker_bins)
    assert result.returncode == 1
    assert "the package is built for %s and this machine is %s: install %s" % (
        other, NATIVE, hdk.package_name("driver", DRIVER, NATIVE)) in result.stdout
    assert not (fresh_root / "usr/local/Ascend/driver").exists()


def test_version_prints_the_package_version(packages, fresh_root, docker_bins):
    result = run(packages["driver"], fresh_root, "--version", docker_bins=docker_bins)
    assert result.returncode == 0
    assert re.search(r"^\[Driver\] \[[-0-9 :]+\] \[INFO\]driver version :25\.5\.2$", result.stdout, re.M)
    result = run(packages["firmware"], fresh_root, "--version", docker_bins=docker_bins)
    assert result.returncode == 0 and "firmware version :7.8.0.7.220" in result.stdout


def test_without_quiet_the_eula_must_be_accepted(packages, fresh_root, docker_bins):
    prompt = "Do you accept the EULA to install %s? [y/n]" % packages["driver"].name
    result = run(packages["driver"], fresh_root, "--nox11", "--full", docker_bins=docker_bins, stdin="n\n")
    assert result.returncode == 1 and prompt in result.stdout
    assert hdk.REFER_TO_LOG in result.stdout
    assert not (fresh_root / "usr/local/Ascend/driver/version.info").exists()
    result = run(packages["driver"], fresh_root, "--nox11", "--full", docker_bins=docker_bins, stdin="")
    assert result.returncode == 1
    result = run(packages["driver"], fresh_root, "--nox11", "--full", docker_bins=docker_bins, stdin="y\n")
    assert result.returncode == 0 and prompt in result.stdout


def test_only_root_may_install(packages, fresh_root, monkeypatch, capsys):
    monkeypatch.setenv("TWIN_ROOT", str(fresh_root))
    monkeypatch.setattr(hdk.os, "geteuid", lambda: 1000)
    assert hdk.main(["run", str(packages["driver"])] + list(INSTALL)) == 1
    assert "ERR_NO:0x0093" in capsys.readouterr().out
    assert not (fresh_root / "etc/ascend_install.info").exists()


# First install: driver, then firmware -------------------------------------------------------------------------------

def test_first_install_driver_then_firmware(packages, fresh_root, docker_bins):
    root = fresh_root
    result = run(packages["firmware"], root, "--nox11", "--full", "--quiet", docker_bins=docker_bins)
    assert result.returncode == 1
    assert "driver not installed, please install driver first" in result.stdout

    result = run(packages["driver"], root, *INSTALL, docker_bins=docker_bins)
    assert result.returncode == 0, result.stdout
    assert "Driver package installed successfully! The new version takes effect immediately." in result.stdout
    assert [node(root, "davinci%d" % n) for n in (0, 1)] == [(240, 0), (240, 1)]
    assert [node(root, name) for name in ("davinci_manager", "devmm_svm", "hisi_hdc")] == [
        (241, 0), (242, 0), (243, 0)]
    version_info = (root / "usr/local/Ascend/driver/version.info").read_text()
    assert version_info.startswith("Version=25.5.2\n")
    assert "package_version=25.5.2\n" in version_info and "compatible_version_fw=[7.0.0,8.9.9]\n" in version_info
    for library in ("libascend_hal.so", "libdrvdsmi_host.so", "libc_sec.so"):
        assert (root / "usr/local/Ascend/driver/lib64" / library).is_file()
    assert (root / "usr/local/dcmi/dcmi_interface_api.h").is_file()
    assert (root / "etc/ascend_install.info").read_text() == (
        "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\nDriver_Install_Type=full\n"
        "Driver_Install_Path_Param=/usr/local/Ascend\nDriver_Install_For_All=yes\nDriver_Install_Mode=normal\n")
    assert hardware(root)["driver_loaded"] == DRIVER
    assert board(root, 6) == (DRIVER, OLD_FIRMWARE)
    assert log_lines(root, "operation.log")[-1].startswith("Install SUGGESTION root ")

    result = run(packages["firmware"], root, "--nox11", "--full", "--quiet", docker_bins=docker_bins)
    assert result.returncode == 0, result.stdout
    assert "The firmware of [2] chips are successfully upgraded." in result.stdout
    assert ("Firmware package installed successfully! Reboot now or after driver installation for the "
            "installation/upgrade to take effect.") in result.stdout
    assert (root / "usr/local/Ascend/firmware/version.info").read_text() == (
        "Version=7.8.0.7.220\nfirmware_version=1.0\npackage_version=25.5.2\n")
    assert (root / "etc/ascend_install.info").read_text().endswith(
        "Firmware_Install_Type=full\nFirmware_Install_Path_Param=/usr/local/Ascend\n")
    state = hardware(root)
    assert (state["firmware_flash"], state["firmware_running"]) == (FIRMWARE, OLD_FIRMWARE)
    assert board(root, 6) == (DRIVER, OLD_FIRMWARE)
    hdk.boot(root)
    assert board(root, 6) == (DRIVER, FIRMWARE)


def test_upgrade_with_nothing_installed_is_a_fresh_install(packages, fresh_root, docker_bins):
    result = run(packages["driver"], fresh_root, *UPGRADE, docker_bins=docker_bins)
    assert result.returncode == 0
    assert "Driver package installed successfully!" in result.stdout
    assert "Driver_Install_Type=full\n" in (fresh_root / "etc/ascend_install.info").read_text()
    assert "Driver_Install_For_All=no\n" in (fresh_root / "etc/ascend_install.info").read_text()
    assert log_lines(fresh_root, "operation.log")[-1].startswith("Install ")


def test_run_user_and_install_type_are_recorded_and_kept(packages, tmp_path, docker_bins):
    root = make_root(tmp_path / "root", FRESH, passwd=PASSWD + "ascend:x:1001:1001::/home/ascend:/bin/bash\n",
                     group=GROUP + "ascend:x:1001:\n")
    result = run(packages["driver"], root, "--nox11", "--run", "--quiet", "--install-username=ascend",
                 "--install-usergroup=ascend", docker_bins=docker_bins)
    assert result.returncode == 0, result.stdout
    info = (root / "etc/ascend_install.info").read_text()
    assert "UserName=ascend\nUserGroup=ascend\nDriver_Install_Type=run\n" in info
    result = run(packages["driver"], root, *UPGRADE, docker_bins=docker_bins)
    assert result.returncode == 0 and "Driver package upgraded successfully!" in result.stdout
    assert (root / "etc/ascend_install.info").read_text() == info
    result = run(packages["driver"], root, "--nox11", "--full", "--quiet", "--install-username=HwHiAiUser",
                 "--install-usergroup=HwHiAiUser", docker_bins=docker_bins)
    assert result.returncode == 1 and "ERR_NO:0x0095" in result.stdout


# Upgrade: firmware, then driver, then a reboot -----------------------------------------------------------------------

def test_upgrade_firmware_then_driver_and_the_firmware_runs_after_boot(packages, old_root, docker_bins):
    root = old_root
    assert board(root, 224) == (OLD_DRIVER, OLD_FIRMWARE)
    result = run(packages["firmware"], root, *UPGRADE, docker_bins=docker_bins)
    assert result.returncode == 0, result.stdout
    assert "The firmware of [4] chips are successfully upgraded." in result.stdout
    assert "Firmware package upgraded successfully!" in result.stdout
    assert board(root, 224) == (OLD_DRIVER, OLD_FIRMWARE)

    result = run(packages["driver"], root, *UPGRADE, docker_bins=docker_bins)
    assert result.returncode == 0, result.stdout
    assert "Driver package upgraded successfully! The new version takes effect immediately." in result.stdout
    assert log_lines(root, "operation.log")[-1].startswith("Upgrade MINOR root ")
    assert board(root, 224) == (DRIVER, OLD_FIRMWARE)
    state = hardware(root)
    assert (state["driver_loaded"], state["firmware_running"], state["firmware_flash"]) == (
        DRIVER, OLD_FIRMWARE, FIRMWARE)

    state = hdk.boot(root)
    assert (state["driver_loaded"], state["firmware_running"]) == (DRIVER, FIRMWARE)
    assert board(root, 6) == board(root, 224) == (DRIVER, FIRMWARE)
    assert hardware(root) == state
    before = snapshot(root)
    hdk.boot(root)
    assert snapshot(root) == before


def test_a_process_holding_a_chip_blocks_the_hot_reset_until_boot(packages, old_root, docker_bins):
    root = old_root
    # A node no driver owns cannot be opened for I/O; O_PATH holds it as fuser would see it.
    fd = os.open(str(root / "dev/davinci0"), os.O_PATH)
    try:
        result = run(packages["driver"], root, *UPGRADE, docker_bins=docker_bins)
    finally:
        os.close(fd)
    assert result.returncode == 2, result.stdout
    assert "Driver package upgraded successfully! Reboot needed for installation/upgrade to take effect!" in (
        result.stdout)
    assert "davinci0 has user process: %d" % os.getpid() in "\n".join(log_lines(root, "ascend_install.log"))
    assert (root / "usr/local/Ascend/driver/version.info").read_text().startswith("Version=25.5.2\n")
    assert hardware(root)["driver_loaded"] == OLD_DRIVER
    assert board(root, 6) == (OLD_DRIVER, OLD_FIRMWARE)
    hdk.boot(root)
    assert hardware(root)["driver_loaded"] == DRIVER
    assert board(root, 6) == (DRIVER, OLD_FIRMWARE)


def test_a_container_mapping_a_chip_blocks_the_hot_reset_and_the_firmware(packages, old_root, docker_bins):
    root = old_root
    result = run(packages["driver"], root, *UPGRADE, docker="exporter", docker_bins=docker_bins)
    assert result.returncode == 2, result.stdout
    assert "Reboot needed for installation/upgrade to take effect!" in result.stdout
    assert re.search(r"davinci0 has used by docker \(container npu-exporter\)",
                     "\n".join(log_lines(root, "ascend_install.log")))
    assert hardware(root)["driver_loaded"] == OLD_DRIVER

    result = run(packages["firmware"], root, *UPGRADE, docker="exporter", docker_bins=docker_bins)
    assert result.returncode == 1
    assert "in use by container npu-exporter; stop it first" in result.stdout
    assert hardware(root)["firmware_flash"] == OLD_FIRMWARE
    assert (root / "usr/local/Ascend/firmware/version.info").read_text().startswith("Version=7.3.0.1.231\n")


def test_a_container_does_not_block_a_first_install_without_device_nodes(packages, fresh_root, docker_bins):
    result = run(packages["driver"], fresh_root, *INSTALL, docker="exporter", docker_bins=docker_bins)
    assert result.returncode == 0, result.stdout


def test_a_hot_reset_failure_on_a_first_install_leaves_npu_smi_failing_as_dcmi_does(packages, fresh_root,
                                                                                     docker_bins):
    root = fresh_root
    (root / "dev").mkdir()
    hdk._char_device(root / "dev/davinci0", hdk.DAVINCI_MAJOR, 0)
    fd = os.open(str(root / "dev/davinci0"), os.O_PATH)
    try:
        result = run(packages["driver"], root, *INSTALL, docker_bins=docker_bins)
    finally:
        os.close(fd)
    assert result.returncode == 2
    npu_smi = subprocess.run([str(root / "usr/local/bin/npu-smi"), "info"], stdout=subprocess.PIPE,
                             universal_newlines=True, timeout=30)
    assert npu_smi.returncode != 0 and "ret is -8005" in npu_smi.stdout
    hdk.boot(root)
    assert board(root, 6) == (DRIVER, OLD_FIRMWARE)


# Refusals ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("passwd, group, expected", [
    ("root:x:0:0::/root:/bin/bash\n", GROUP, "ERR_NO:0x0091;ERR_DES:HwHiAiUser not exists! Please add HwHiAiUser"),
    (PASSWD, "root:x:0:\n", "ERR_NO:0x0091;ERR_DES:HwHiAiUser group not exists!"),
    (PASSWD.replace(":1000:1000:", ":1000:100:"), GROUP, "ERR_NO:0x0096"),
])
def test_the_run_user_must_exist(packages, tmp_path, docker_bins, passwd, group, expected):
    root = make_root(tmp_path / "root", FRESH, passwd=passwd, group=group)
    result = run(packages["driver"], root, *INSTALL, docker_bins=docker_bins)
    assert result.returncode == 1 and expected in result.stdout
    assert hdk.REFER_TO_LOG in result.stdout
    assert not (root / "usr/local/Ascend").exists() and not (root / "etc/ascend_install.info").exists()


@pytest.mark.parametrize("kind, args, expected", [
    ("driver", ["--nox11", "--upgrade", "--quiet", "--install-path=/opt/Ascend"],
     "ERR_NO:0x0004;ERR_DES:install-path param need used with full/run/docker/devel."),
    ("firmware", ["--upgrade", "--quiet", "--install-path=/opt/Ascend"], "ERR_NO:0x0004;ERR_DES:install-path"),
    ("driver", ["--full", "--upgrade", "--quiet"], "ERR_NO:0x0004;ERR_DES:param need used with"),
    ("driver", ["--full", "--run", "--quiet"], "ERR_NO:0x0004;ERR_DES:only support one type"),
    ("driver", ["--quiet", "--install-for-all"], "ERR_NO:0x0004;ERR_DES:param need used with"),
    ("driver", ["--full", "--quiet", "--force"], "ERR_NO:0x0004;ERR_DES: Unrecognized parameters: --force."),
    ("driver", ["--full", "--quiet", "--install-username=HwHiAiUser"], "are not specified at the same time"),
    ("driver", ["--upgrade", "--quiet", "--install-username=HwHiAiUser", "--install-usergroup=HwHiAiUser"],
     "install-username and install-usergroup params need used with full/run/docker/devel."),
    ("driver", ["--version", "--quiet"], "can't use with other parameters"),
    ("driver", ["--uninstall"], "ERR_NO:0x0004"),
    ("firmware", ["--full", "--quiet", "--install-username=HwHiAiUser", "--install-usergroup=HwHiAiUser"],
     "not supported by the firmware package"),
])
def test_options_the_packages_refuse(packages, old_root, docker_bins, kind, args, expected):
    before = snapshot(old_root / "usr")
    result = run(packages[kind], old_root, *args, docker_bins=docker_bins)
    assert result.returncode == 1 and expected in result.stdout, result.stdout
    assert snapshot(old_root / "usr") == before


@pytest.mark.parametrize("state", [None, "{not json", json.dumps({"profile": {"group": "gateway"}})])
def test_a_machine_without_the_card_refuses_both_packages(packages, tmp_path, docker_bins, state):
    root = make_root(tmp_path / "root", FRESH)
    if state is None:
        (root / hdk.STATE_FILE).unlink()
    else:
        (root / hdk.STATE_FILE).write_text(state)
    for kind in ("driver", "firmware"):
        result = run(packages[kind], root, *INSTALL, docker_bins=docker_bins)
        assert result.returncode == 1
        assert "This package supports Atlas 300I Duo (310P) only: no such device found" in result.stdout
    assert not (root / "usr").exists()


@pytest.mark.parametrize("kind, reason", [("driver", "Dkms install failed"),
                                          ("firmware", "upgrade-tool: flash chip 0 failed")])
def test_an_injected_failure_fails_the_install_and_logs_why(packages, old_root, docker_bins, kind, reason):
    state = hardware(old_root)
    state["fail"] = kind
    hdk.write_hardware(old_root, state)
    before = snapshot(old_root / "usr")
    result = run(packages[kind], old_root, *UPGRADE, docker_bins=docker_bins)
    assert result.returncode == 1 and reason in result.stdout
    assert any(reason in line for line in log_lines(old_root, "ascend_install.log")[-4:])
    assert " failed cmdlist=" in log_lines(old_root, "operation.log")[-1]
    assert snapshot(old_root / "usr") == before
    assert hardware(old_root) == state


# Files the twin bind-mounts one by one -------------------------------------------------------------------------------

def test_existing_files_are_rewritten_in_place(packages, old_root, docker_bins):
    root = old_root
    info = root / "etc/ascend_install.info"
    with open(info, "w") as handle:
        handle.write(info.read_text().replace("Driver_Install_For_All=yes", "Driver_Install_For_All=no"))
    paths = [info, root / "usr/local/dcmi/npu-smi-twin.json", root / "usr/local/Ascend/driver/version.info",
             root / "usr/local/Ascend/firmware/version.info", root / "usr/local/bin/npu-smi"]
    inodes = [path.stat().st_ino for path in paths]
    texts = [path.read_text() for path in paths]
    assert run(packages["firmware"], root, *UPGRADE, docker_bins=docker_bins).returncode == 0
    assert run(packages["driver"], root, *INSTALL, docker_bins=docker_bins).returncode == 0
    hdk.boot(root)
    assert [path.stat().st_ino for path in paths] == inodes
    changed = [path.name for path, text in zip(paths, texts) if path.read_text() != text]
    assert changed == ["ascend_install.info", "npu-smi-twin.json", "version.info", "version.info"]
    assert "Driver_Install_For_All=yes\n" in info.read_text()


# Boot and the functions the twin imports ------------------------------------------------------------------------------

def test_initial_hardware_follows_the_profile():
    assert hdk.initial_hardware(OLD) == {"profile": OLD, "driver_loaded": OLD_DRIVER,
                                         "firmware_running": OLD_FIRMWARE, "firmware_flash": OLD_FIRMWARE}
    bare = hdk.initial_hardware({"cards": [{"npu_id": 1}]})
    assert (bare["driver_loaded"], bare["firmware_running"], bare["firmware_flash"]) == (
        None, hdk.FACTORY_FIRMWARE, hdk.FACTORY_FIRMWARE)
    assert hdk.initial_hardware(hosts.load_profiles()["seed_duo4"])["driver_loaded"] == "25.5.2"
    assert (hdk.DAVINCI_MAJOR, hdk.MANAGER_DEVICES) == (
        240, {"davinci_manager": (241, 0), "devmm_svm": (242, 0), "hisi_hdc": (243, 0)})


def test_device_nodes_follow_physical_ids_and_missing_devices(tmp_path):
    profiles = hosts.load_profiles()
    hdk.make_device_nodes(tmp_path / "remapped", profiles["remapped_duo2"])
    assert sorted(os.listdir(tmp_path / "remapped/dev")) == [
        "davinci0", "davinci1", "davinci4", "davinci5", "davinci_manager", "devmm_svm", "hisi_hdc"]
    assert node(tmp_path / "remapped", "davinci5") == (240, 5)
    root = tmp_path / "missing"
    (root / "dev").mkdir(parents=True)
    (root / "dev/davinci0").write_text("not a device")
    hdk.make_device_nodes(root, profiles["missing_davinci"])
    assert sorted(name for name in os.listdir(root / "dev") if name[-1].isdigit()) == ["davinci0"]
    assert node(root, "davinci0") == (240, 0)
    assert stat.S_IMODE(os.lstat(root / "dev/davinci0").st_mode) == 0o660
    inode = os.lstat(root / "dev/davinci0").st_ino
    hdk.make_device_nodes(root, profiles["missing_davinci"])
    assert os.lstat(root / "dev/davinci0").st_ino == inode


def test_boot_without_a_driver_loads_none(fresh_root):
    state = hdk.boot(fresh_root)
    assert state["driver_loaded"] is None
    assert not (fresh_root / "dev").exists() and not (fresh_root / "usr").exists()
    assert hdk.boot(fresh_root / "nowhere") is None


def test_the_npu_smi_view_drops_a_cards_own_firmware(tmp_path):
    profile = {"driver": "23.0.rc3", "cards": [{"npu_id": 6, "firmware": "6.3.0.1.241"}]}
    hdk.write_npu_smi_view(tmp_path, {"profile": profile, "driver_loaded": DRIVER, "firmware_running": FIRMWARE})
    text = (tmp_path / "usr/local/dcmi/npu-smi-twin.json").read_text()
    assert json.loads(text) == {"driver": DRIVER, "firmware": FIRMWARE, "cards": [{"npu_id": 6}]}
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_boot_runs_as_a_script_on_a_host(old_root, tmp_path):
    # A host has hdk.py beside npu_smi.py, outside any package.
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("hdk.py", "npu_smi.py"):
        shutil.copy(REPO / "tests/twin" / name, folder / name)
    state = hardware(old_root)
    state["firmware_flash"] = FIRMWARE
    hdk.write_hardware(old_root, state)
    result = subprocess.run([sys.executable, str(folder / "hdk.py"), "boot"],
                            env=dict(os.environ, TWIN_ROOT=str(old_root)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert board(old_root, 6) == (OLD_DRIVER, FIRMWARE)


def test_the_installer_is_python_3_8_and_standard_library_only():
    source = (REPO / "tests/twin/hdk.py").read_text()
    ast.parse(source, feature_version=(3, 8))
    imported = set(re.findall(r"^(?:import|from) (\w+)", source, re.M))
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
