#!/usr/bin/env python3
"""Stand-ins for Huawei's HDK packages of the Atlas 300I Duo, and what a twin host's reboot does to its NPUs.

``build_package`` makes ``Ascend-hdk-310p-npu-driver_<version>_linux-<arch>.run`` and
``Ascend-hdk-310p-npu-firmware_<version>.run``: a bash header in makeself's way that checks the payload's
SHA256, unpacks it to a temporary folder and runs ``python3 hdk.py run <package> <options...>``. The payload
holds package.json (kind, version, arch, chip), this file and the npu-smi emulator. The installer (``run``)
takes the real packages' options and answers with their messages and exit codes (0: installed and in effect,
1: failed, 2: installed, reboot needed); ``boot`` is what a reboot does. Messages follow Huawei's driver installer
(hicann/driver, scripts/package/driver/common/scripts/install.sh and device_hot_reset.sh) and real 310P install
logs; where neither says, a comment says the behaviour is a guess.

Every path is under ``TWIN_ROOT`` (default ``/``). The NPUs themselves are ``var/lib/ascend-twin/hardware.json``:
``profile`` (a host profile of profiles.yml), ``driver_loaded`` (the running driver, null without one),
``firmware_running`` (what the chips run), ``firmware_flash`` (what they run after the next reboot) and
optionally ``fail`` (``driver`` or ``firmware``: that package's install fails). Without that file the machine
has no Atlas card.

The twin bind-mounts some of the files the driver writes one by one into a host's container, so an existing
file is rewritten in place, never replaced by a rename (a rename would leave the container on the old inode).

Standard library only, Python 3.8 syntax: it runs on the twin's hosts.
"""
import gzip
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zlib

try:
    from . import npu_smi
except ImportError:  # run as a script, from a package's payload or a host's copy, beside npu_smi.py
    import npu_smi

HERE = pathlib.Path(__file__).resolve().parent
ROOT_ENV = "TWIN_ROOT"

# Character device numbers in Linux's "local/experimental use" range (240-254): no real driver owns them.
DAVINCI_MAJOR = 240
MANAGER_DEVICES = {"davinci_manager": (241, 0), "devmm_svm": (242, 0), "hisi_hdc": (243, 0)}

CHIP = "310p"
ARCHES = ("aarch64", "x86_64")
# What the open-source 25.x driver declares (hicann/driver itf_ver.conf); a 24.x driver declares [7.0.0,7.7.99].
COMPATIBLE_VERSION_FW = "[7.0.0,8.9.9]"
# The firmware a 24.1.rc2 host came with (its release pair), for a profile that names none.
FACTORY_FIRMWARE = "7.3.0.1.231"
DEFAULT_INSTALL_PATH = "/usr/local/Ascend"
RUN_USER = "HwHiAiUser"
STATE_DIR = "var/lib/ascend-twin"
HARDWARE_FILE = "hardware.json"
STATE_FILE = STATE_DIR + "/" + HARDWARE_FILE
INSTALL_INFO = "etc/ascend_install.info"
SECLOG = "/var/log/ascend_seclog"
INSTALL_LOG = SECLOG + "/ascend_install.log"
OPERATION_LOG = SECLOG + "/operation.log"
NPU_SMI = "usr/local/bin/npu-smi"
DCMI = "usr/local/dcmi"
DRIVER_LIBRARIES = ("libascend_hal.so", "libdrvdsmi_host.so", "libc_sec.so")

MARKER = b"__PAYLOAD__"
# A fixed date, so a rebuild makes the same bytes (and tar does not call 1970 implausible).
PAYLOAD_MTIME = 1735689600
HEADER = """#!/bin/bash
# Twin stand-in for Huawei's {name} (tests/twin/hdk.py), not Huawei's software.
# Checked before unpacking, as makeself does: a damaged package must not run at all.
PACKAGE_NAME="{name}"
PAYLOAD_SHA256={sha256}
payload_line=$(awk '/^{marker}$/ {{ print NR + 1; exit }}' "$0")
actual=$(tail -n +"$payload_line" "$0" | sha256sum | cut -d ' ' -f 1)
if [ "$actual" != "$PAYLOAD_SHA256" ]; then
    echo "Error in SHA256 checksums: $actual is different from $PAYLOAD_SHA256"
    exit 1
fi
workdir=$(mktemp -d) || exit 1
trap 'rm -rf "$workdir"' EXIT
tail -n +"$payload_line" "$0" | tar -xzf - -C "$workdir" || exit 1
python3 "$workdir/hdk.py" run "$0" "$@"
exit $?
{marker}
"""
CHECK_OK = "Verifying archive integrity...  100%   SHA256 checksums are OK. All good."

# Messages of Huawei's driver installer (hicann/driver scripts/package/driver/common/scripts/install.sh).
ERR_UNRECOGNIZED = "ERR_NO:0x0004;ERR_DES: Unrecognized parameters%s. Try './xxx.run --help' for more information."
ERR_ONE_TYPE = "ERR_NO:0x0004;ERR_DES:only support one type: full/run/docker/devel/boot-server, operation failed!"
ERR_ALONE = "ERR_NO:0x0004;ERR_DES:version/uninstall/check/boot-server can't use with other parameters."
ERR_NEED_TYPE = "ERR_NO:0x0004;ERR_DES:param need used with full/run/docker/upgrade/devel."
ERR_PATH_UPGRADE = "ERR_NO:0x0004;ERR_DES:install-path param need used with full/run/docker/devel."
ERR_USER_UPGRADE = ("ERR_NO:0x0004;ERR_DES:install-username and install-usergroup params need used with "
                    "full/run/docker/devel.")
ERR_USER_PAIR = "ERR_NO:0x0004;ERR_DES:Username and usergroup are not specified at the same time."
ERR_ROOT = "ERR_NO:0x0093;ERR_DES:do not have root permission, operation failed, please use root permission!"
NO_DEVICE = "This package supports Atlas 300I Duo (310P) only: no such device found"
NO_DRIVER = "driver not installed, please install driver first"
REFER_TO_LOG = "Please refer to the log file %s for details" % INSTALL_LOG
# The audit levels install.sh gives each operation.
OPERATION_LEVELS = {"Install": "SUGGESTION", "Upgrade": "MINOR", "Uninstall": "MAJOR"}


class Failure(Exception):
    """The installer stops: the message is printed and logged, the exit code is 1."""

    def __init__(self, message, *more):
        super().__init__(message)
        self.lines = (message,) + more


def _path(root, path):
    return pathlib.Path(root) / path.lstrip("/")


def root_from_env():
    return os.environ.get(ROOT_ENV) or "/"


def _put(path, text, mode=0o644):
    """Write text to path, in place when the file exists (it may be bind-mounted on its own), and only when it
    differs, so a repeated install or boot touches nothing."""
    path = pathlib.Path(path)
    if path.exists():
        with open(path) as handle:
            same = handle.read() == text
        if not same:
            with open(path, "w") as handle:
                handle.write(text)
        if stat.S_IMODE(path.stat().st_mode) != mode:
            os.chmod(path, mode)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".%s.tmp" % path.name)
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# --- the packages -------------------------------------------------------------------------------------------------

def package_name(kind, version, arch=None):
    if kind == "driver":
        if arch not in ARCHES:
            raise ValueError("a driver package needs an arch of %s, not %r" % (", ".join(ARCHES), arch))
        return "Ascend-hdk-%s-npu-driver_%s_linux-%s.run" % (CHIP, version, arch)
    if kind == "firmware":
        return "Ascend-hdk-%s-npu-firmware_%s.run" % (CHIP, version)
    raise ValueError("kind must be driver or firmware, not %r" % (kind,))


def _payload(kind, version, arch):
    meta = {"kind": kind, "version": version, "arch": arch if kind == "driver" else None, "chip": CHIP}
    if kind == "driver":
        meta["compatible_version_fw"] = COMPATIBLE_VERSION_FW
    members = [
        ("package.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), 0o644),
        ("hdk.py", (HERE / "hdk.py").read_bytes(), 0o755),
        ("npu_smi.py", (HERE / "npu_smi.py").read_bytes(), 0o755),
    ]
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, PAYLOAD_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0, compresslevel=9) as stream:
        stream.write(archive.getvalue())
    return packed.getvalue()


def build_package(folder, kind, version, arch=None):
    """Write the package into folder (only when its bytes change) and return its path."""
    name = package_name(kind, version, arch)
    payload = _payload(kind, version, arch)
    header = HEADER.format(name=name, sha256=hashlib.sha256(payload).hexdigest(), marker=MARKER.decode())
    content = header.encode() + payload
    path = pathlib.Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_bytes() != content:
        tmp = path.with_name(".%s.tmp" % name)
        tmp.write_bytes(content)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    elif stat.S_IMODE(path.stat().st_mode) != 0o755:
        os.chmod(path, 0o755)
    return path


def _split_package(path):
    """(header bytes, payload bytes) of a package; the payload is everything after the marker line."""
    data = pathlib.Path(path).read_bytes()
    at = data.find(b"\n" + MARKER + b"\n")
    if at < 0:
        return data, None
    return data[:at + 1], data[at + len(MARKER) + 2:]


def verify_package(path):
    """(ok, expected sha256, actual sha256) of a package's payload."""
    header, payload = _split_package(path)
    found = re.search(rb"^PAYLOAD_SHA256=([0-9a-f]{64})$", header, re.M)
    expected = found.group(1).decode() if found else ""
    actual = hashlib.sha256(payload if payload is not None else b"").hexdigest()
    return bool(found) and payload is not None and expected == actual, expected, actual


def read_package(path):
    """The payload's package.json and npu_smi.py text, read from the package file itself."""
    _, payload = _split_package(path)
    if payload is None:
        raise ValueError("no payload")
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
        meta = json.loads(tar.extractfile("package.json").read().decode())
        emulator = tar.extractfile("npu_smi.py").read().decode()
    return meta, emulator


# --- the simulated hardware ---------------------------------------------------------------------------------------

def initial_hardware(profile):
    """The NPUs of a host as profiles.yml describes it: a profile without a driver has none loaded."""
    firmware = profile.get("firmware") or FACTORY_FIRMWARE
    return {"profile": profile, "driver_loaded": profile.get("driver"),
            "firmware_running": firmware, "firmware_flash": firmware}


def read_hardware(root):
    """The host's NPU state, or None when the machine has no Atlas card (no state, or one that cannot be read)."""
    try:
        with open(_path(root, STATE_FILE)) as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("profile"), dict):
        return None
    state.setdefault("driver_loaded", None)
    state.setdefault("firmware_running", FACTORY_FIRMWARE)
    state.setdefault("firmware_flash", state["firmware_running"])
    return state


def write_hardware(root, state):
    """Save the state atomically (an install may be cut short), and only when it changes."""
    path = _path(root, STATE_FILE)
    text = json.dumps(state, indent=2, sort_keys=True) + "\n"
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".%s.tmp" % path.name)
    tmp.write_text(text)
    os.replace(tmp, path)


def _chips(profile):
    if not profile.get("cards"):
        return []
    return [chip for card in npu_smi.expand_profile(profile)["cards"] for chip in card["chips"]]


def _char_device(path, major, minor):
    device = os.makedev(major, minor)
    if path.exists() or path.is_symlink():
        info = path.lstat()
        if stat.S_ISCHR(info.st_mode) and info.st_rdev == device:
            return
        path.unlink()
    os.mknod(str(path), 0o660 | stat.S_IFCHR, device)
    os.chmod(str(path), 0o660)  # mknod's mode passes through the umask


def make_device_nodes(root, profile):
    """The nodes a loaded driver makes: /dev/davinci<phy id> per chip, and the manager devices."""
    dev = _path(root, "dev")
    dev.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for chip in _chips(profile):
        # The driver names a chip's node by its physical id; missing_devices names chips by logic id.
        if chip["logic_id"] not in profile.get("missing_devices", []):
            wanted["davinci%d" % chip["phy_id"]] = (DAVINCI_MAJOR, chip["phy_id"])
    wanted.update(MANAGER_DEVICES)
    for name, (major, minor) in sorted(wanted.items()):
        _char_device(dev / name, major, minor)


def write_npu_smi_view(root, state):
    """What npu-smi shows: the running driver and firmware. Every chip runs the same firmware (the package
    flashes them all), so a card's own firmware goes. With no driver loaded, dcmi cannot initialise."""
    view = dict(state["profile"])
    view["cards"] = [{key: value for key, value in card.items() if key != "firmware"}
                     for card in view.get("cards") or []]
    view["firmware"] = state["firmware_running"]
    if state.get("driver_loaded"):
        view["driver"] = state["driver_loaded"]
    else:
        view.pop("driver", None)
        view["failure"] = "-8005"
    _put(_path(root, DCMI) / npu_smi.PROFILE_NAME, json.dumps(view, indent=2, sort_keys=True) + "\n")


def read_install_info(root):
    """/etc/ascend_install.info as an ordered list of [key, value]."""
    try:
        text = _path(root, INSTALL_INFO).read_text()
    except OSError:
        return []
    return [line.split("=", 1) for line in text.splitlines() if "=" in line]


def _info_value(info, key):
    for name, value in info:
        if name == key:
            return value
    return None


def update_install_info(root, changes):
    """Set keys in /etc/ascend_install.info, keeping the others and their order (new keys go last)."""
    info = read_install_info(root)
    for key, value in changes:
        for entry in info:
            if entry[0] == key:
                entry[1] = value
                break
        else:
            info.append([key, value])
    _put(_path(root, INSTALL_INFO), "".join("%s=%s\n" % (key, value) for key, value in info))


def write_driver_files(root, install_path, version, emulator, compatible_version_fw=COMPATIBLE_VERSION_FW):
    """What the driver package leaves: its version.info, libraries, npu-smi and the dcmi folder."""
    driver = _path(root, install_path) / "driver"
    _put(driver / "version.info", "".join([
        "Version=%s\n" % version,
        "ascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\nlog_version=1.0\nprof_version=2.0\n",
        "dvppkernels_version=1.1\ntsfw_version=1.0\n",
        "package_version=%s\n" % version,
        "compatible_version_fw=%s\n" % compatible_version_fw,
    ]))
    for library in DRIVER_LIBRARIES:
        _put(driver / "lib64" / library, "twin placeholder for the Ascend driver's %s\n" % library)
    _put(_path(root, NPU_SMI), emulator, mode=0o755)
    _put(_path(root, DCMI) / "dcmi_interface_api.h", "/* twin placeholder for the dcmi header */\n")


def write_firmware_files(root, install_path, version, package_version):
    _put(_path(root, install_path) / "firmware/version.info",
         "Version=%s\nfirmware_version=1.0\npackage_version=%s\n" % (version, package_version))


def _read_version(path):
    try:
        text = pathlib.Path(path).read_text()
    except OSError:
        return None
    found = re.search(r"^Version=(.+)$", text, re.M)
    return found.group(1).strip() if found else None


def _install_path(info, key):
    return _info_value(info, key) or _info_value(info, "Driver_Install_Path_Param") or DEFAULT_INSTALL_PATH


def installed_driver(root):
    """The Version of the installed driver's version.info, or None."""
    info = read_install_info(root)
    return _read_version(_path(root, _install_path(info, "Driver_Install_Path_Param")) / "driver/version.info")


def boot(root):
    """What a reboot does: the installed driver loads, the flashed firmware runs. Returns the new state, or None
    on a machine without the card."""
    state = read_hardware(root)
    if state is None:
        return None
    state["driver_loaded"] = installed_driver(root)
    state["firmware_running"] = state["firmware_flash"]
    view = _path(root, DCMI) / npu_smi.PROFILE_NAME
    if state["driver_loaded"]:
        make_device_nodes(root, state["profile"])
        write_npu_smi_view(root, state)
    elif view.exists():
        # A view left from before would report a driver that is no longer running.
        write_npu_smi_view(root, state)
    write_hardware(root, state)
    return state


# --- who holds the devices ----------------------------------------------------------------------------------------

def _device_nodes(root):
    """name -> path of the nodes a running program can hold: /dev/davinci<N> and the manager devices."""
    dev = _path(root, "dev")
    try:
        names = sorted(os.listdir(str(dev)))
    except OSError:
        return {}
    return {name: dev / name for name in names
            if re.match(r"^davinci\d+$", name) or name in MANAGER_DEVICES}


def _chip_nodes(nodes):
    return sorted(name for name in nodes if re.match(r"^davinci\d+$", name))


def processes_holding(root, nodes):
    """pid -> node names it holds open, from /proc/<pid>/fd (as install.sh does without fuser)."""
    paths = {os.path.realpath(str(path)): name for name, path in nodes.items()}
    numbers = {}
    if os.path.abspath(str(root)) == "/":
        # A process in a container sees the node at its own path; the device number is the same everywhere.
        for name, path in nodes.items():
            try:
                info = os.lstat(str(path))
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode):
                numbers[info.st_rdev] = name
    found = {}
    for pid in sorted((entry for entry in os.listdir("/proc") if entry.isdigit()), key=int):
        if int(pid) == os.getpid():
            continue
        folder = "/proc/%s/fd" % pid
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            link = os.path.join(folder, fd)
            try:
                target = os.readlink(link)
            except OSError:
                continue
            name = paths.get(target)
            if name is None and numbers:
                try:
                    info = os.stat(link)
                except OSError:
                    continue
                if stat.S_ISCHR(info.st_mode):
                    name = numbers.get(info.st_rdev)
            if name is not None:
                found.setdefault(int(pid), set()).add(name)
    return {pid: sorted(names) for pid, names in found.items()}


def containers_mapping(chip_names):
    """name -> chip nodes of every running container that maps one (install.sh greps `docker inspect` of
    `docker ps -q` for davinci<N>). No docker command, or an engine that does not answer: none."""
    if not chip_names or shutil.which("docker") is None:
        return {}

    def docker(*args):
        try:
            result = subprocess.run(("docker",) + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    universal_newlines=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return result.stdout if result.returncode == 0 else None

    ids = (docker("ps", "-q") or "").split()
    if not ids:
        return {}
    try:
        containers = json.loads(docker("inspect", *ids) or "[]")
    except ValueError:
        return {}
    found = {}
    for container in containers:
        host_config = container.get("HostConfig") or {}
        paths = [device.get("PathOnHost") or "" for device in host_config.get("Devices") or []]
        paths += [mount.get("Source") or "" for mount in container.get("Mounts") or []]
        names = sorted({os.path.basename(path) for path in paths} & set(chip_names))
        if names:
            found[(container.get("Name") or container.get("Id") or "?").lstrip("/")] = names
    return found


# --- the installer ------------------------------------------------------------------------------------------------

class Options:
    FLAGS = ("--nox11", "--quiet", "--full", "--run", "--upgrade", "--check", "--version", "--uninstall",
             "--install-for-all")
    VALUES = ("--install-username=", "--install-usergroup=", "--install-path=")

    def __init__(self, args):
        self.args = list(args)
        self.flags = set()
        self.values = {}
        self.modes = []
        for arg in self.args:
            if arg in self.FLAGS:
                self.flags.add(arg)
                if arg in ("--full", "--run"):
                    if any(mode in ("--full", "--run") for mode in self.modes):
                        raise Failure(ERR_ONE_TYPE)
                if arg in ("--full", "--run", "--upgrade"):
                    self.modes.append(arg)
            elif arg.startswith(self.VALUES):
                at = arg.index("=") + 1
                self.values[arg[:at]] = arg[at:]
            else:
                raise Failure(ERR_UNRECOGNIZED % (": " + arg))
        if not self.args:
            raise Failure(ERR_UNRECOGNIZED % "")
        counted = [arg for arg in self.args if arg != "--nox11"]  # makeself's own option
        if self.flags & {"--check", "--version", "--uninstall"}:
            if len(counted) > 1:
                raise Failure(ERR_ALONE)
            if "--uninstall" in self.flags:
                # The twin never removes a driver: a fleet deploy upgrades or installs over it.
                raise Failure("ERR_NO:0x0004;ERR_DES:uninstall is not supported by the twin's package.")
            return
        if len(self.modes) != 1:
            raise Failure(ERR_NEED_TYPE)
        if "--install-path=" in self.values and self.upgrade:
            raise Failure(ERR_PATH_UPGRADE)
        if ("--install-username=" in self.values) != ("--install-usergroup=" in self.values):
            raise Failure(ERR_USER_PAIR, "Please input the right params and try again.")
        if "--install-username=" in self.values and self.upgrade:
            raise Failure(ERR_USER_UPGRADE)
        path = self.values.get("--install-path=")
        if path is not None and not path:
            raise Failure("ERR_NO:0x0003;ERR_DES:install path is null, install failed")
        if path and not re.match(r"^/[A-Za-z0-9_/-]*$", path):
            # install.sh also takes a relative path (from the package's folder); the twin takes absolute ones.
            raise Failure("ERR_NO:0x0003;ERR_DES:The install-path [%s] is invalid according to regular-expression, "
                          "only characters in [a-z,A-Z,0-9,-,_] are supported." % path)

    @property
    def upgrade(self):
        return "--upgrade" in self.flags

    @property
    def quiet(self):
        return "--quiet" in self.flags

    @property
    def for_all(self):
        return "--install-for-all" in self.flags


class Installer:
    def __init__(self, package, args, root):
        self.package = package
        self.args = list(args)
        self.root = root
        self.runfile = os.path.basename(package)
        try:
            self.meta, self.emulator = read_package(package)
        except (OSError, ValueError, KeyError, tarfile.TarError, EOFError, zlib.error):
            # A damaged payload fails in gzip as well as in tar, depending on where its bytes changed.
            self.meta, self.emulator = None, None
        if self.meta:
            self.kind = self.meta["kind"]
        else:
            self.kind = "firmware" if "-npu-firmware_" in self.runfile else "driver"
        self.prefix = "[Driver]" if self.kind == "driver" else "[Firmware]"
        self.start = time.strftime("%Y-%m-%d %H:%M:%S")
        self.operation = "Install"
        self.install_type = "full"

    def _stamp(self, message):
        return "%s [%s] %s" % (self.prefix, time.strftime("%Y-%m-%d %H:%M:%S"), message)

    def _append(self, relative, line):
        # A log that cannot be written must not change the outcome, as `echo >> $logFile` does not.
        path = _path(self.root, relative)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as handle:
                handle.write(line + "\n")
        except OSError:
            pass

    def log(self, message):
        self._append(INSTALL_LOG, self._stamp(message))

    def echo(self, message):
        line = self._stamp(message)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        self._append(INSTALL_LOG, line)

    def audit(self, result):
        level = OPERATION_LEVELS.get(self.operation, "UNKNOWN")
        detail = "" if self.operation == "Upgrade" else "install_type=%s; " % self.install_type
        self._append(OPERATION_LOG, "%s %s root %s 127.0.0.1 %s %s %scmdlist=%s." % (
            self.operation, level, self.start, self.runfile, result, detail, " ".join(self.args)))

    def finish(self, code):
        self.audit("success" if code in (0, 2) else "failed")
        self.echo("[INFO]End time: %s" % time.strftime("%Y-%m-%d %H:%M:%S"))
        return code

    def run(self):
        if [arg for arg in self.args if arg != "--nox11"] == ["--check"]:
            self.operation = "Check"
            return self.check()
        try:
            if os.geteuid() != 0:
                sys.stdout.write(self._stamp("[ERROR]" + ERR_ROOT) + "\n" + REFER_TO_LOG + "\n")
                self.log("[ERROR]" + ERR_ROOT)
                self.audit("failed")
                return 1
            self.echo("[INFO]Start time: %s" % self.start)
            self.echo("[INFO]LogFile: %s" % INSTALL_LOG)
            self.echo("[INFO]OperationLogFile: %s" % OPERATION_LOG)
            self.log("[INFO]UserCommand: %s %s" % (self.runfile, " ".join(self.args)))
            options = Options(self.args)
            if self.meta is None:
                raise Failure("ERR_NO:0x0001;ERR_DES:the package is damaged, download it again")
            # A driver package is built for one architecture (its name says which); on another machine its
            # programs cannot run. (The twin's wording: the real installer's for this case is not recorded.)
            if self.meta.get("arch") and self.meta["arch"] != os.uname().machine:
                raise Failure("the package is built for %s and this machine is %s: install "
                              "Ascend-hdk-%s-npu-driver_%s_linux-%s.run" % (
                                  self.meta["arch"], os.uname().machine, self.meta["chip"], self.meta["version"],
                                  os.uname().machine))
            if "--version" in options.flags:
                self.operation = "Version"
                self.echo("[INFO]%s version :%s" % (self.kind, self.meta["version"]))
                return self.finish(0)
            if options.upgrade:
                self.operation = "Upgrade"
            self.echo("[WARNING]Do not power off or restart the system during the installation/upgrade")
            if not options.quiet:
                self.accept_eula()
            state = read_hardware(self.root)
            if state is None or not _chips(state["profile"]):
                raise Failure(NO_DEVICE)
            if self.kind == "driver":
                return self.finish(self.install_driver(options, state))
            return self.finish(self.install_firmware(options, state))
        except Failure as failure:
            for line in failure.lines:
                self.echo("[ERROR]" + line)
            sys.stdout.write(REFER_TO_LOG + "\n")
            return self.finish(1)
        except OSError as error:
            self.echo("[ERROR]install failed: %s" % error)
            sys.stdout.write(REFER_TO_LOG + "\n")
            return self.finish(1)

    def check(self):
        ok, expected, actual = verify_package(self.package)
        if ok:
            sys.stdout.write(CHECK_OK + "\n")
            self.log("[INFO]" + CHECK_OK)
            self.audit("success")
            return 0
        line = "Error in SHA256 checksums: %s is different from %s" % (actual, expected)
        sys.stdout.write(line + "\n")
        self.log("[ERROR]" + line)
        self.audit("failed")
        return 1

    def accept_eula(self):
        sys.stdout.write("Do you accept the EULA to install %s? [y/n]\n" % self.runfile)
        sys.stdout.flush()
        answer = sys.stdin.readline().strip()
        self.log("[INFO]EULA answer: %r" % answer)
        if answer != "y":
            raise Failure("The EULA is not accepted, installation stopped.")

    # The driver ---------------------------------------------------------------------------------------------

    def _run_user(self, options, info):
        """(user, group, install for all), as install.sh's getUserInfo and checkUserAndGroup decide them."""
        given_user = options.values.get("--install-username=")
        given_group = options.values.get("--install-usergroup=")
        old_user, old_group = _info_value(info, "UserName"), _info_value(info, "UserGroup")
        if given_user is not None:
            if (old_user and old_user != given_user) or (old_group and old_group != given_group):
                raise Failure("ERR_NO:0x0095;ERR_DES:The user and group are not same with last installation,"
                              "do not support overwriting installation")
            user, group = given_user, given_group
        else:
            user, group = old_user or RUN_USER, old_group or RUN_USER
        for_all = "yes" if options.for_all else "no"
        if not options.for_all and options.upgrade and _info_value(info, "Driver_Install_For_All"):
            for_all = _info_value(info, "Driver_Install_For_All")
        if not user or not group:
            raise Failure("ERR_NO:0x0091;ERR_DES:input_install_username is empty")
        if "root" in (user, group) and for_all != "yes":
            raise Failure("ERR_NO:0x0091;ERR_DES:username not permission for root (except install-for-all scene)")
        users = self._table("etc/passwd")
        groups = self._table("etc/group")
        if user not in users:
            raise Failure("ERR_NO:0x0091;ERR_DES:%s not exists! Please add %s" % (user, user))
        if group not in groups:
            raise Failure("ERR_NO:0x0091;ERR_DES:%s group not exists! Please add %s group" % (group, group))
        if users[user][3] != groups[group][2] and user not in groups[group][3].split(","):
            raise Failure("ERR_NO:0x0096;ERR_DES:%s not right! Please check the relatianship of %s and %s"
                          % (group, user, group))
        self.echo("[INFO]set username and usergroup, %s:%s" % (user, group))
        return user, group, for_all

    def _table(self, relative):
        """name -> fields of /etc/passwd or /etc/group under the root (pwd and grp would read this machine's)."""
        try:
            text = _path(self.root, relative).read_text()
        except OSError:
            return {}
        rows = [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]
        return {row[0]: row for row in rows if len(row) >= 4}

    def install_driver(self, options, state):
        info = read_install_info(self.root)
        first = not _info_value(info, "Driver_Install_Path_Param")
        if first:
            # install.sh installs afresh when nothing is recorded, --upgrade included.
            self.operation = "Install"
        if options.upgrade:
            self.install_type = (not first and _info_value(info, "Driver_Install_Type")) or "full"
        else:
            self.install_type = "run" if "--run" in options.flags else "full"
        install_path = options.values.get("--install-path=") or _install_path(info, "Driver_Install_Path_Param")
        user, group, for_all = self._run_user(options, info)
        base = installed_driver(self.root)
        self.log("[INFO]base version is %s." % base if base else "[INFO]base version was destroyed or not exist.")
        if base:
            self.echo("[INFO]base version is %s." % base)
        self._check_firmware_compatibility(state)
        version = self.meta["version"]
        if state.get("fail") == "driver":
            raise Failure("Dkms install failed",
                          "Failed to %s driver package, please retry after uninstall and reboot!"
                          % self.operation.lower())
        write_driver_files(self.root, install_path, version, self.emulator,
                           self.meta.get("compatible_version_fw", COMPATIBLE_VERSION_FW))
        mode = (options.upgrade and not first and _info_value(info, "Driver_Install_Mode")) or "normal"
        update_install_info(self.root, [
            ("UserName", user), ("UserGroup", group), ("Driver_Install_Type", self.install_type),
            ("Driver_Install_Path_Param", install_path), ("Driver_Install_For_All", for_all),
            ("Driver_Install_Mode", mode)])
        self.log("[INFO]driver %s files installed under %s" % (version, install_path))
        done = "Driver package %s successfully!" % ("upgraded" if self.operation == "Upgrade" else "installed")
        if self.hot_reset():
            state["driver_loaded"] = version
            make_device_nodes(self.root, state["profile"])
            write_npu_smi_view(self.root, state)
            write_hardware(self.root, state)
            self.echo("[INFO]%s The new version takes effect immediately." % done)
            return 0
        if not state.get("driver_loaded"):
            # npu-smi is installed but no driver runs: it must fail as dcmi does, not crash on a missing view.
            write_npu_smi_view(self.root, state)
        self.echo("[INFO]%s Reboot needed for installation/upgrade to take effect!" % done)
        return 2

    def _check_firmware_compatibility(self, state):
        """install.sh's ver_check only warns under --quiet; the twin always just warns."""
        low, high = [_version_tuple(part) for part in COMPATIBLE_VERSION_FW.strip("[]").split(",")]
        running = state.get("firmware_running") or ""
        if not low <= _version_tuple(running)[:3] <= high:
            self.echo("[WARNING]firmware version %s is not in the driver's compatible range %s"
                      % (running, COMPATIBLE_VERSION_FW))

    def hot_reset(self):
        """True when the new driver could be loaded at once: nothing holds a device (device_hot_reset.sh)."""
        self.log("[INFO]try hot reset device")
        nodes = _device_nodes(self.root)
        chips = _chip_nodes(nodes)
        blocked = False
        for pid, names in sorted(processes_holding(self.root, nodes).items()):
            self.log("[INFO]%s has user process: %d" % (",".join(names), pid))
            blocked = True
        for name, names in sorted(containers_mapping(chips).items()):
            self.log("[INFO]%s has used by docker (container %s)" % (",".join(names), name))
            blocked = True
        if blocked:
            self.log("[INFO]user process exist, no hot reset")
            return False
        self.echo("[INFO]device hot reset start")
        self.echo("[INFO]device hot reset finish")
        return True

    # The firmware -------------------------------------------------------------------------------------------

    def install_firmware(self, options, state):
        if "--install-username=" in options.values:
            raise Failure("ERR_NO:0x0004;ERR_DES:install-username and install-usergroup are not supported by the "
                          "firmware package, it runs as the driver's user.")
        info = read_install_info(self.root)
        if options.upgrade and not _info_value(info, "Firmware_Install_Path_Param"):
            self.operation = "Install"
        if options.upgrade:
            self.install_type = _info_value(info, "Firmware_Install_Type") or "full"
        else:
            self.install_type = "run" if "--run" in options.flags else "full"
        driver = installed_driver(self.root)
        if not driver or not state.get("driver_loaded"):
            raise Failure(NO_DRIVER)
        # Guess: the real upgrade-tool's refusal is not documented; flashing chips a container uses is unsafe.
        users = containers_mapping(_chip_nodes(_device_nodes(self.root)))
        if users:
            raise Failure("upgrade-tool: the device is in use by container %s; stop it first"
                          % ", ".join(sorted(users)))
        chips = len(_chips(state["profile"]))
        version = self.meta["version"]
        self.log("[INFO]base version is %s." % state.get("firmware_flash"))
        if state.get("fail") == "firmware":
            raise Failure("upgrade-tool: flash chip 0 failed",
                          "Failed to %s firmware package." % self.operation.lower())
        install_path = options.values.get("--install-path=") or _install_path(info, "Firmware_Install_Path_Param")
        write_firmware_files(self.root, install_path, version, driver or version)
        state["firmware_flash"] = version
        write_hardware(self.root, state)
        update_install_info(self.root, [("Firmware_Install_Type", self.install_type),
                                        ("Firmware_Install_Path_Param", install_path)])
        self.echo("[INFO]The firmware of [%d] chips are successfully upgraded." % chips)
        done = "upgraded" if self.operation == "Upgrade" else "installed"
        self.echo("[INFO]Firmware package %s successfully! Reboot now or after driver installation for the "
                  "installation/upgrade to take effect." % done)
        return 0


def _version_tuple(text):
    parts = []
    for part in text.split("."):
        found = re.match(r"\d+", part)
        parts.append(int(found.group(0)) if found else 0)
    return tuple(parts)


def main(argv):
    if len(argv) >= 2 and argv[0] == "run":
        return Installer(argv[1], argv[2:], root_from_env()).run()
    if argv == ["boot"]:
        state = boot(root_from_env())
        if state is None:
            sys.stdout.write("no Atlas card on this machine: nothing to load\n")
            return 0
        sys.stdout.write("driver %s, firmware %s\n" % (state["driver_loaded"] or "none", state["firmware_running"]))
        return 0
    sys.stdout.write("usage: hdk.py run <package> <options...> | hdk.py boot\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
