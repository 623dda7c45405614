"""Bring the twin up and down: its network, its registry, the stand-in image in it, and a fleet of hosts.

The twin is a set of simulated Ascend hosts reached as real ones are. Each host is a system container on the
twin's own Docker network with sshd, sudo, python3 and a Docker engine of its own (tests/twin/host/); its
Ascend files sit at the real paths (tests/twin/hosts.py). A Debian ``docker-registry`` stands in for quay.io:
the controller pushes the stand-in image to it on loopback, and every host's engine pulls it from a read-only
instance on the twin network's gateway, as from a site's mirror.

Everything the twin makes lives under its home (``TWIN_HOME``, default /var/lib/ascend-vllm-fleet-twin) or in
Docker under names carrying a hash of that home, and is listed in ``<home>/state.json``; ``down`` removes
exactly that. Two caches are kept across ``down`` because they take minutes to make: the Debian root filesystems
(``TWIN_CACHE``, default /var/cache/ascend-vllm-fleet-twin) and the base images made from them; ``down --purge``
removes them too.

Real hosts are Kunpeng 920s, aarch64: every image is built for this machine's architecture and for aarch64, which
runs under qemu-user (binfmt_misc with qemu-user-static's fix-binary flag). The stand-in is pushed as one multi-arch
tag, as quay.io's are, so each host pulls its own platform.
"""
import argparse
import base64
import contextlib
import fcntl
import functools
import hashlib
import ipaddress
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import bcrypt
import yaml

import ascend_vllm_fleet  # noqa: F401  (Ansible's collection loader: the release table's reader is the collection's)
from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases

from . import fleet
from .hosts import (
    DEFAULT_DISTRIBUTION,
    DISTRIBUTIONS_FILE,
    PROFILES_FILE,
    load_distributions,
    load_profiles,
    split_host_spec,
)
from .platforms import ARCHITECTURES, BUILT, NATIVE, oci_platform, require_emulation
from .shell import TwinError, docker, log, run
from .vllm_standin import SEED_RELEASE

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_HOME = "/var/lib/ascend-vllm-fleet-twin"
DEFAULT_CACHE = "/var/cache/ascend-vllm-fleet-twin"
# The demo fleet's inventory, written by `up` beside the twin's committed group_vars.
DEFAULT_INVENTORY = REPO / "inventory" / "twin" / "hosts.yml"
# The real image's name and tags (quay.io/ascend/vllm-ascend), served by the local registry instead.
IMAGE_REPOSITORY = "ascend/vllm-ascend"
IMAGE_TAGS = ("v0.18.0rc1-310p", "v0.18.0rc1-310p-openeuler")
# `vllm serve`'s options as each vLLM version's real parser has them, which the stand-in takes (its cli.py).
SERVE_OPTIONS = REPO / "tests" / "fixtures" / "vllm-serve-options"
# quay.io's tag of the same release for another chip (Atlas A2, 910B): the stand-in with the SOC_VERSION that
# image sets, which fails on a 310P after its load, as the real one does.
OTHER_CHIP_TAGS = {"v0.18.0rc1": "ascend910b1"}
# Other builds of the 310P release, for the canary gate: kernels 30 % slower, as new vllm-ascend images have been on
# 310P (vllm-ascend #7670, #17160), and three times slower, which no load of this machine between a baseline and its
# canary hides.
VARIANT_TAGS = {"v0.18.0rc1-310p-slower": "ENV VLLM_TWIN_SLOWDOWN=1.3",
                "v0.18.0rc1-310p-much-slower": "ENV VLLM_TWIN_SLOWDOWN=3"}
# The registry also serves the 310P tags under quay.io's own path, as a prefix-style mirror does
# (m.daocloud.io/quay.io/ascend/vllm-ascend): <registry>/quay.io/ascend/vllm-ascend.
PREFIX = "quay.io"
SUITE = "bookworm"
# On an emulated host, the engine, iptables and sudo are this machine's own builds: qemu-user does not translate
# the netlink and iptables socket calls of the first two (an arm64 dockerd fails "Protocol not supported", arm64
# iptables "iptables who?"), and binfmt_misc runs an emulated program with the caller's credentials, not its
# setuid owner's (sudo: "effective uid is not 0"). So an aarch64 twin host runs aarch64 programs and Python, with an
# x86_64 Docker engine; `docker info` there names x86_64, where a real Kunpeng host's says aarch64.
NATIVE_ON_EMULATED = ("docker.io", "iptables", "sudo")
# The registry API's media types of one image's manifest and of a multi-arch list of them.
IMAGE_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
# Two roots: a small one for the stand-in (every host pulls it), a full one for the hosts themselves, made from the
# small one (ROOT_BASES).
ROOT_BASES = {"host": "python", "rpmhost": "host"}
ROOTS = {
    "python": ["python3"],
    # haproxy: the fleet's gateway; a twin host reaches no package mirror, so the root has it as a site's own
    # mirror would give it (the gateway role's package task then finds it installed).
    # make, gcc, dkms, pciutils, net-tools: the NPU driver's build dependencies (the ascend_driver role checks
    # them; tests/twin/host/Dockerfile adds the running kernel's headers as a placeholder package).
    # systemd-standalone-tmpfiles: what systemd runs at boot to apply /etc/tmpfiles.d (init.sh runs it at each boot).
    # prometheus*: what the monitoring and host_exporters roles install, from the site's mirror as haproxy.
    "host": ["python3", "openssh-server", "sudo", "docker.io", "iptables", "iproute2", "ca-certificates", "procps",
             "haproxy", "make", "gcc", "dkms", "pciutils", "net-tools", "systemd-standalone-tmpfiles",
             "prometheus", "prometheus-alertmanager", "prometheus-blackbox-exporter", "prometheus-node-exporter"],
}
# The root of the RPM distributions' hosts (distributions.yml, family rpm): the host root with rpm, dnf and its
# Python bindings, createrepo_c, and firewalld on D-Bus with nftables; then made an RPM host's by
# tests/twin/rpm_packages.py (its packages become RPMs of the twin's repository; apt and dpkg go). This machine's
# architecture only: the distributions' hosts of the twin are not emulated.
ROOTS["rpmhost"] = ROOTS["host"] + ["rpm", "dnf", "python3-dnf", "createrepo-c", "firewalld", "dbus", "nftables"]
# The execution environment's base (scripts/ee.py): Python 3.11 with ensurepip (python3-venv), which ansible-builder's
# steps install pip with; the SSH client and agent, which ansible-runner starts for a job's key; the CA certificates
# pip needs. Debian keeps pip off its system python (ensurepip is disabled there): the EE's Python is a virtualenv
# of it, first on the image's PATH.
ROOTS["ee"] = ["python3", "python3-venv", "openssh-client", "ca-certificates"]
EE_PYTHON_HOME = "/opt/ansible"
# Commands run in a root once its packages are in, and the environment of its image: both part of its tag.
ROOT_COMMANDS = {"ee": (("python3", "-m", "venv", EE_PYTHON_HOME),)}
# pip reads the system's certificates (its own bundle knows no site CA).
ROOT_IMAGE_ENV = {"ee": {"PATH": EE_PYTHON_HOME + "/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                         "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"}}
# The certificates this machine trusts beyond the distribution's (a site's own CA, its proxy's), which the roots
# named here trust too: the EE's build reaches the package index through the same network. Part of their tag.
LOCAL_CA_DIR = pathlib.Path("/usr/local/share/ca-certificates")
ROOTS_WITH_LOCAL_CA = ("ee",)
# What makes a root besides its packages: a changed script makes a new one.
ROOT_SCRIPTS = {"rpmhost": (HERE / "rpm_packages.py", HERE / "host" / "fix-init-scripts")}
# The twin's package repository for the RPM hosts, on the twin network's gateway (fleet.REGISTRY_NAME there).
REPO_PORT = fleet.REPO_PORT
BASE_REPOSITORY = "ascend-vllm-fleet-twin/debian-"
# The registry's port on the twin network, where hosts reach it as fleet.REGISTRY_NAME (the inventory's mirror).
REGISTRY_HOST_PORT = 5000
# The same registry behind a login, as Huawei SWR or a site's own registry is: its account is in LOGIN_FILE.
REGISTRY_LOGIN_PORT = 5001
# An offline site's own registry, empty until an image archive is loaded into it (Twin.site_registry).
SITE_REGISTRY_PORT = 5002
LOGIN_FILE = "registry/login.json"
STATE_FILE = "state.json"
# The demo fleet: the seed's 4-card host first, then a 2-card one, cycled; its aarch64 hosts (`up --aarch64`) are
# the seed's host as it is, a Kunpeng 920.
DEMO_PROFILES = ("seed_duo4", "duo2")
DEMO_AARCH64_PROFILE = "kunpeng_seed_duo4"
DEMO_GATEWAY = "twin-gw"
DEMO_GATEWAY_PROFILE = "gateway_monitoring"
# `up --profile NAME`: the key of the choice for every Ascend host of the demo, beside those of single hosts.
EVERY_HOST = "*"


def apt_mirror():
    """The Debian mirror apt already uses on this machine, so debootstrap goes where the network allows."""
    for source in sorted(pathlib.Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    sources_list = pathlib.Path("/etc/apt/sources.list")
    if sources_list.exists():
        for line in sources_list.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["deb"] and "security" not in line:
                return parts[1] if not parts[1].startswith("[") else parts[2]
    return "http://deb.debian.org/debian"


def apt_install(root, packages, foreign_architecture=None):
    """Install packages into a root with its own apt, from the mirror debootstrap gave it (`name:arch` for another
    architecture's build, which foreign_architecture adds to dpkg's)."""
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    # No service starts inside the chroot (the postinst scripts of docker.io and openssh-server would try).
    (root / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
    os.chmod(root / "usr/sbin/policy-rc.d", 0o755)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    commands = [["dpkg", "--add-architecture", foreign_architecture]] if foreign_architecture else []
    commands += [["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + list(packages)]
    for command in commands:
        run("chroot", str(root), *command, env={"DEBIAN_FRONTEND": "noninteractive"})
    (root / "usr/sbin/policy-rc.d").unlink()
    (root / "etc/resolv.conf").write_text("")


def local_certificates(kind):
    """The certificates of LOCAL_CA_DIR a root of this kind takes (none for the others)."""
    if kind not in ROOTS_WITH_LOCAL_CA or not LOCAL_CA_DIR.is_dir():
        return []
    return sorted(path for path in LOCAL_CA_DIR.rglob("*.crt") if path.is_file())


def port_open(address, port):
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((address, port)) == 0


def demo_hosts(count, aarch64=0, profiles=None):
    """Names and profiles of the demo fleet: count Ascend hosts, twin-01 (the seed's host), twin-02, ..., the last
    `aarch64` of them Kunpeng hosts, and twin-gw, the gateway in front of them. profiles: the profiles chosen
    (`up --profile`), by host name, EVERY_HOST for every Ascend host; a host's own choice wins."""
    hosts = {"twin-%02d" % (index + 1): DEMO_PROFILES[index % len(DEMO_PROFILES)] if index < count - aarch64
             else DEMO_AARCH64_PROFILE for index in range(count)}
    profiles = dict(profiles or {})
    if EVERY_HOST in profiles:
        hosts = dict.fromkeys(hosts, profiles.pop(EVERY_HOST))
    hosts[DEMO_GATEWAY] = DEMO_GATEWAY_PROFILE
    unknown = sorted(set(profiles) - set(hosts))
    if unknown:
        raise TwinError("--profile %s=%s: the demo fleet has no host %s (its hosts: %s). Fix: name one of them, or "
                        "give --hosts to make more" % (unknown[0], profiles[unknown[0]], unknown[0],
                                                       ", ".join(sorted(hosts))))
    hosts.update(profiles)
    return hosts


def os_choice(value):
    """`up --os`'s value as (host, operating system): NAME, for every host of the demo (host EVERY_HOST), or
    HOST=NAME for one; NAME one of distributions.yml."""
    host, _equals, name = value.rpartition("=")
    choices = sorted(load_distributions())
    if name not in choices:
        raise argparse.ArgumentTypeError("%s: %s is no operating system of %s; expected one of: %s" % (
            value, json.dumps(name), DISTRIBUTIONS_FILE, ", ".join(choices)))
    return host or EVERY_HOST, name


def host_profiles(group):
    """The profiles of profiles.yml for hosts of an inventory group (ascend, or gateway), sorted."""
    return sorted(name for name, profile in load_profiles().items() if profile.get("group", "ascend") == group)


def profile_choice(value):
    """`up --profile`'s value as (host, profile): NAME, for every Ascend host of the demo (host EVERY_HOST), or
    HOST=NAME for one; NAME a profile of profiles.yml that fits the host (the gateway's, for twin-gw)."""
    host, _equals, name = value.rpartition("=")
    group = "gateway" if host == DEMO_GATEWAY else "ascend"
    choices = host_profiles(group)
    if name not in choices:
        raise argparse.ArgumentTypeError("%s: %s is no %s profile of %s; expected one of: %s" % (
            value, json.dumps(name), "gateway" if group == "gateway" else "Ascend host", PROFILES_FILE,
            ", ".join(choices)))
    return host or EVERY_HOST, name


@functools.lru_cache(maxsize=None)
def release_table():
    """The release table as its reader reads it, once per process."""
    return vllm_releases.load()


def releases_json():
    """The release table, for the stand-in image (whose Python has no YAML)."""
    return json.dumps(release_table(), indent=1, sort_keys=True)


def release_tags():
    """{tag: its Dockerfile line} of the release table's releases besides the seed's (the stand-in's own): each
    served as its 310P tag, the stand-in as that release, taking its vLLM's `vllm serve` options only and dying of
    its defects."""
    return {"%s-310p" % version: "ENV VLLM_TWIN_RELEASE=%s" % version
            for version in release_table()["releases"] if version != SEED_RELEASE}


class Twin:
    def __init__(self, home=None, cache=None, registry_port=None, inventory=None):
        self.home = pathlib.Path(home or os.environ.get("TWIN_HOME", DEFAULT_HOME))
        self.cache = pathlib.Path(cache or os.environ.get("TWIN_CACHE", DEFAULT_CACHE))
        self.registry_port = int(registry_port or os.environ.get("TWIN_REGISTRY_PORT", "5000"))
        self.inventory = pathlib.Path(inventory or os.environ.get("TWIN_INVENTORY", DEFAULT_INVENTORY))
        # Docker names of this twin carry a hash of its home, so two twins never remove each other's.
        self.instance = hashlib.sha256(str(self.home).encode()).hexdigest()[:8]
        self.prefix = "avf-twin-%s" % self.instance
        self.build_repository = "ascend-vllm-fleet-twin-%s/vllm-standin" % self.instance
        self.host_image = "ascend-vllm-fleet-twin-%s/host" % self.instance
        self.rpm_host_image_repository = "ascend-vllm-fleet-twin-%s/rpm-host" % self.instance
        self.network = self.prefix

    @property
    def registry(self):
        """Where the controller pushes: the registry on loopback."""
        return "127.0.0.1:%d" % self.registry_port

    @property
    def state_path(self):
        return self.home / STATE_FILE

    def load_state(self):
        if self.state_path.exists():
            return json.loads(self.state_path.read_text())
        return {}

    @contextlib.contextmanager
    def edited_state(self):
        """The state as it is on disk now, written back when the block ends: one process at a time (a background
        `build` and a test restarting a registry each change their own keys)."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "state.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self.load_state()
            yield state
            tmp = self.state_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, self.state_path)

    # --- network -----------------------------------------------------------------------------------------
    def gateway(self):
        """The twin network's address on this machine, where hosts reach the registry."""
        result = docker("network", "inspect", self.network, check=False)
        if result.returncode != 0:
            return None
        (config,) = json.loads(result.stdout)[0]["IPAM"]["Config"][:1]
        return config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))

    def start_network(self):
        if self.gateway() is None:
            docker("network", "create", "--label", "ascend-vllm-fleet.twin=%s" % self.instance, self.network)
            log("network %s (gateway %s)" % (self.network, self.gateway()))
        return self.gateway()

    # --- registry ----------------------------------------------------------------------------------------
    def registry_answers(self, address=None):
        try:
            url = "http://%s/v2/" % (address or self.registry)
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except urllib.error.HTTPError as error:
            return error.code == 401  # the registry behind a login answers, asking for it
        except (urllib.error.URLError, OSError):
            return False

    def start_registry(self, state, role, address, readonly, htpasswd=None, storage_folder=None):
        """One registry process over the twin's storage (or storage_folder); `role` names it in the state and its
        files; htpasswd, a file of accounts it requires a login with."""
        pids = state.setdefault("registry_pids", {})
        if pids.get(role) and self._is_our_registry(pids[role]) and self.registry_answers(address):
            return
        host, port = address.rsplit(":", 1)
        if port_open(host, int(port)):
            raise TwinError("%s is taken by another program%s" % (address, ": set TWIN_REGISTRY_PORT to a free port"
                                                                   if role == "push" else ""))
        folder = self.home / "registry"
        data = storage_folder or folder / "data"
        data.mkdir(parents=True, exist_ok=True)
        storage = {"filesystem": {"rootdirectory": str(data)}, "delete": {"enabled": True}}
        if readonly:
            storage["maintenance"] = {"readonly": {"enabled": True}}
        config = folder / ("%s.yml" % role)
        # No auth unless htpasswd is given, like a site's internal mirror; each instance listens on one address only.
        settings = {"version": 0.1, "log": {"level": "warn"}, "storage": storage, "http": {"addr": address}}
        if htpasswd:
            settings["auth"] = {"htpasswd": {"realm": "twin-registry", "path": str(htpasswd)}}
        config.write_text(yaml.safe_dump(settings))
        with open(folder / ("%s.log" % role), "ab") as output:
            process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        pids[role] = process.pid
        with self.edited_state() as current:
            current.setdefault("registry_pids", {})[role] = process.pid
        for _ in range(100):
            if self.registry_answers(address):
                log("registry (%s) on %s (pid %d)" % (role, address, process.pid))
                return
            if process.poll() is not None:
                break
            time.sleep(0.1)
        raise TwinError("the registry did not start on %s; see %s" % (address, folder / ("%s.log" % role)))

    @contextlib.contextmanager
    def site_registry(self):
        """An empty registry standing in for an offline site's own, which a carried image archive is loaded into
        (`ascend-vllm-fleet images load`): yields (the address the controller pushes to, on loopback; the one the
        hosts pull from, fleet.REGISTRY_NAME:SITE_REGISTRY_PORT, in the inventory's insecure-registries). Stopped
        and emptied when the block ends."""
        storage = self.home / "site-registry"
        shutil.rmtree(str(storage), ignore_errors=True)
        state = self.load_state()
        push, hosts = "127.0.0.1:%d" % SITE_REGISTRY_PORT, "%s:%d" % (self.gateway(), SITE_REGISTRY_PORT)
        try:
            self.start_registry(state, "site-push", push, readonly=False, storage_folder=storage)
            self.start_registry(state, "site-hosts", hosts, readonly=True, storage_folder=storage)
            yield push, "%s:%d" % (fleet.REGISTRY_NAME, SITE_REGISTRY_PORT)
        finally:
            with self.edited_state() as current:
                for role in ("site-push", "site-hosts"):
                    pid = (current.get("registry_pids") or {}).pop(role, None)
                    if pid:
                        self.stop_registry(pid)
            shutil.rmtree(str(storage), ignore_errors=True)

    def stop_registry(self, pid):
        """Stop a registry (or the package repository) of this twin, and reap it when this process started it."""
        if not self._is_our_registry(pid):
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not self._is_our_registry(pid):
                break
            time.sleep(0.1)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        log("stopped a registry (pid %d)" % pid)

    def registry_account(self):
        """The htpasswd file of the registry behind a login; its account (a random password, made once) is in
        LOGIN_FILE, readable by root only, for the tests that log in."""
        account_file, htpasswd = self.home / LOGIN_FILE, self.home / "registry/htpasswd"
        if not account_file.exists():
            account_file.parent.mkdir(parents=True, exist_ok=True)
            account = {"username": "ops", "password": base64.urlsafe_b64encode(os.urandom(18)).decode()}
            with open(os.open(account_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as stream:
                json.dump(account, stream)
        account = json.loads(account_file.read_text())
        if not htpasswd.exists():
            hashed = bcrypt.hashpw(account["password"].encode(), bcrypt.gensalt()).decode()
            htpasswd.write_text("%s:%s\n" % (account["username"], hashed))
        return htpasswd

    def _is_our_registry(self, pid):
        """Whether pid is a server of this twin: a registry, or the package repository's HTTP server."""
        try:
            cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes().decode(errors="replace")
        except OSError:
            return False
        return ("docker-registry" in cmdline or "http.server" in cmdline) and str(self.home) in cmdline

    # --- the RPM hosts' package repository -----------------------------------------------------------------
    def start_package_repository(self, state, gateway):
        """The RPM hosts' package repository over HTTP on the twin network, as a site's mirror: each distribution's
        path (distributions.yml) serves the RPM root's packages once they are built (rpm_host_image)."""
        folder = self.home / "rpm-repo"
        folder.mkdir(parents=True, exist_ok=True)
        pids = state.setdefault("registry_pids", {})
        if pids.get("rpm-repo") and self._is_our_registry(pids["rpm-repo"]):
            return
        if port_open(gateway, REPO_PORT):
            raise TwinError("%s:%d, the twin's package repository, is taken by another program" % (gateway, REPO_PORT))
        with open(self.home / "rpm-repo.log", "ab") as output:
            process = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", gateway, str(REPO_PORT),
                                        "--directory", str(folder)], stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        with self.edited_state() as current:
            current.setdefault("registry_pids", {})["rpm-repo"] = process.pid
        for _ in range(100):
            if port_open(gateway, REPO_PORT):
                log("package repository on %s:%d (pid %d)" % (gateway, REPO_PORT, process.pid))
                return
            time.sleep(0.1)
        raise TwinError("the package repository did not start on %s:%d; see %s" % (
            gateway, REPO_PORT, self.home / "rpm-repo.log"))

    def rpm_host_image(self):
        """The RPM hosts' image (this machine's architecture), built unless it is of the sources as they are, and
        its packages in the repository at every RPM distribution's path. What a fleet with such a host asks for."""
        if not self.rpm_repository().exists():
            # Its packages are made with the root: a root kept without them (a cache emptied by hand) is made again.
            with self.build_lock():
                if not self.rpm_repository().exists():
                    stale = self.cache / ("rootfs-rpmhost-%s.tar" % self.root_tag("rpmhost"))
                    if stale.exists():
                        stale.unlink()
                    self.rootfs_tarball("rpmhost")
        self.base_image("rpmhost")
        with self.build_lock():
            state = self.load_state()
            self.build_image(state, self.rpm_host_spec(), NATIVE)
        folder = self.home / "rpm-repo"
        for distribution in load_distributions().values():
            if distribution["family"] == "rpm":
                link = folder / distribution["repository"]
                if not link.is_symlink() or pathlib.Path(os.readlink(link)) != self.rpm_repository():
                    link.parent.mkdir(parents=True, exist_ok=True)
                    tmp = link.with_name(link.name + ".tmp")
                    if tmp.is_symlink():
                        tmp.unlink()
                    tmp.symlink_to(self.rpm_repository())
                    os.replace(tmp, link)
        return self.load_state()["rpm_host_images"][NATIVE]

    # --- images ------------------------------------------------------------------------------------------
    @staticmethod
    def root_tag(kind, architecture=NATIVE):
        """Names a root by its suite, architecture and packages, so a changed package list makes a new one."""
        native = [name for name in ROOTS[kind] if name in NATIVE_ON_EMULATED] if architecture != NATIVE else []
        packages = ROOTS[kind] + (["native:"] + native if native else []) + (
            ["from:" + ROOT_BASES[kind]] if kind in ROOT_BASES else []) + [
            "script:" + hashlib.sha256(script.read_bytes()).hexdigest() for script in ROOT_SCRIPTS.get(kind, ())] + [
            "command:" + " ".join(command) for command in ROOT_COMMANDS.get(kind, ())] + [
            "env:%s=%s" % item for item in sorted(ROOT_IMAGE_ENV.get(kind, {}).items())] + [
            "ca:" + hashlib.sha256(path.read_bytes()).hexdigest() for path in local_certificates(kind)]
        return "%s-%s-%s" % (SUITE, ARCHITECTURES.get(architecture, architecture),
                             hashlib.sha256(",".join(packages).encode()).hexdigest()[:8])

    def rootfs_tarball(self, kind, architecture=NATIVE):
        """The root of a kind for an architecture: debootstrap makes the python root, and the host root is the python
        root with the host's packages added, so that the base system is installed (and, emulated, configured: most of
        the minutes) once per architecture."""
        tarball = self.cache / ("rootfs-%s-%s.tar" % (kind, self.root_tag(kind, architecture)))
        if tarball.exists():
            return tarball
        emulated = architecture != NATIVE
        if emulated:
            require_emulation(architecture)
        base = ROOT_BASES.get(kind)
        base_tarball = self.rootfs_tarball(base, architecture) if base else None
        self.cache.mkdir(parents=True, exist_ok=True)
        # Twins share the cache (a test's private twin, the background build): one builds a root, the others wait.
        with open(tarball.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not tarball.exists():
                self._make_root(tarball, kind, architecture, base, base_tarball)
        return tarball

    def _make_root(self, tarball, kind, architecture, base, base_tarball):
        """Write the root tarball: debootstrap, or the base root with apt (rootfs_tarball says which)."""
        emulated = architecture != NATIVE
        mirror = apt_mirror()
        log("building a Debian %s %s root with %s (%s, %s)" % (
            SUITE, ARCHITECTURES[architecture], " ".join(ROOTS[kind]),
            "the %s root and apt" % base if base else "debootstrap from %s" % mirror,
            "minutes: it runs emulated" if emulated else "a minute or two"))
        with tempfile.TemporaryDirectory(dir=self.cache) as scratch:
            target = pathlib.Path(scratch) / "root"
            if base:
                target.mkdir()
                run("tar", "-C", str(target), "--numeric-owner", "-xf", str(base_tarball))
                native = ARCHITECTURES[NATIVE]
                packages = ["%s:%s" % (name, native) if emulated and name in NATIVE_ON_EMULATED else name
                            for name in ROOTS[kind] if name not in ROOTS[base]]
                apt_install(target, packages, native if emulated else None)
                if kind == "rpmhost":
                    self._make_rpm_root(target, architecture)
            else:
                run("debootstrap", "--arch=" + ARCHITECTURES[architecture], "--variant=minbase",
                    "--include=" + ",".join(ROOTS[kind]), SUITE, str(target), mirror)
            if local_certificates(kind):
                shutil.copytree(str(LOCAL_CA_DIR), str(target / LOCAL_CA_DIR.relative_to("/")), dirs_exist_ok=True)
                run("chroot", str(target), "update-ca-certificates")
            for command in ROOT_COMMANDS.get(kind, ()):
                run("chroot", str(target), *command)
            shutil.rmtree(target / "var/cache/apt/archives", ignore_errors=True)
            partial = tarball.with_suffix(".partial")
            run("tar", "-C", str(target), "--numeric-owner", "-cf", str(partial), ".")
            os.replace(partial, tarball)

    def rpm_repository(self, architecture=NATIVE):
        """The folder of the RPM host root's packages and repodata, made with that root (one per architecture)."""
        return self.cache / ("rpm-repo-%s" % self.root_tag("rpmhost", architecture))

    def _make_rpm_root(self, target, architecture):
        """An RPM host's root from a host root (rpm_packages.py, run inside it), its repository kept beside it."""
        scripts = target / "tmp" / "twin-rpm-scripts"
        scripts.mkdir(parents=True)
        for script in ROOT_SCRIPTS["rpmhost"]:
            shutil.copy(script, scripts / script.name)
        # Folders every root has (the python root's) are no package's own: the RPMs list only their own folders.
        listing = run("tar", "-tf", str(self.rootfs_tarball("python", architecture))).stdout.splitlines()
        (scripts / "base-dirs").write_text("\n".join(sorted("/" + line.strip("./").rstrip("/") for line in listing
                                                             if line.endswith("/"))) + "\n")
        run("chroot", str(target), "sh", "/tmp/twin-rpm-scripts/fix-init-scripts")
        run("chroot", str(target), "python3", "/tmp/twin-rpm-scripts/rpm_packages.py",
            "/tmp/twin-rpm-scripts/base-dirs")
        shutil.rmtree(scripts)
        repository = self.rpm_repository(architecture)
        shutil.rmtree(repository, ignore_errors=True)
        shutil.move(str(target / "srv" / "twin-rpm-repo"), str(repository))

    def base_image(self, kind, architecture=NATIVE):
        """The root as an image of its platform (`docker import` would label any root with this machine's)."""
        image = "%s%s:%s" % (BASE_REPOSITORY, kind, self.root_tag(kind, architecture))
        if docker("image", "inspect", image, check=False).returncode != 0:
            tarball = self.rootfs_tarball(kind, architecture)
            with tempfile.TemporaryDirectory(dir=self.cache) as context:
                os.link(tarball, pathlib.Path(context) / "root.tar")
                env = "".join("ENV %s=%s\n" % item for item in sorted(ROOT_IMAGE_ENV.get(kind, {}).items()))
                dockerfile = 'FROM scratch\nADD root.tar /\n%sCMD ["bash"]\n' % env
                (pathlib.Path(context) / "Dockerfile").write_text(dockerfile)
                docker("build", "-q", "--platform", oci_platform(architecture), "-t", image, context)
        return image

    def source_hash(self, kind, folder, extra=(), architecture=NATIVE):
        """What an image is built from: its base root and its files."""
        digest = hashlib.sha256(self.root_tag(kind, architecture).encode())
        for path in sorted(p for p in folder.iterdir() if p.is_file()) + list(extra):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16]

    def image_specs(self):
        """The twin's two images: (state key, repository, base root, context files, folder and files hashed)."""
        host = HERE / "host"
        return (("host_images", self.host_image, "host", [(path, path.name) for path in sorted(host.iterdir())
                                                          if path.is_file()], host, ()),
                ("build_tags", self.build_repository, "python",
                 [(HERE / "vllm_standin", "vllm_standin"), (HERE / "Dockerfile", "Dockerfile"),
                  (SERVE_OPTIONS, "vllm-serve-options"), (releases_json, "releases.json")],
                 HERE / "vllm_standin", (HERE / "Dockerfile", pathlib.Path(vllm_releases.TABLE))
                 + tuple(sorted(SERVE_OPTIONS.glob("*.json")))))

    def rpm_host_spec(self):
        """The RPM hosts' image, as image_specs gives an image: the host image's files on the RPM host root."""
        host_spec = self.image_specs()[0]
        return ("rpm_host_images", self.rpm_host_image_repository, "rpmhost") + host_spec[3:]

    def image_tag(self, repository, base_kind, folder, extra, architecture):
        """`repository:<hash of what it is built from>-<arch>`."""
        return "%s:%s-%s" % (repository, self.source_hash(base_kind, folder, extra, architecture),
                             ARCHITECTURES[architecture])

    def built_from_sources(self, state, architecture):
        """Whether the state's images of an architecture are those of the sources as they are now."""
        return all(state.get(key, {}).get(architecture) == self.image_tag(repository, kind, folder, extra, architecture)
                   for key, repository, kind, _, folder, extra in self.image_specs())

    def build_architecture(self, state, architecture):
        """The host image and the stand-in of one architecture, each built unless it exists (the older builds for
        that architecture are dropped), into the state."""
        for spec in self.image_specs():
            self.build_image(state, spec, architecture)

    def build_image(self, state, spec, architecture):
        """One image of an architecture (an image_specs entry, or RPM_HOST_SPEC), built unless it exists (the older
        builds of it are dropped), into the state."""
        key, repository, base_kind, context_files, folder, extra = spec
        tag = self.image_tag(repository, base_kind, folder, extra, architecture)
        if docker("image", "inspect", tag, check=False).returncode != 0:
            base = self.base_image(base_kind, architecture)
            with tempfile.TemporaryDirectory() as context:
                for source, name in context_files:
                    if callable(source):
                        (pathlib.Path(context) / name).write_text(source(), encoding="utf-8")
                    elif source.is_dir():
                        shutil.copytree(source, pathlib.Path(context) / name,
                                        ignore=shutil.ignore_patterns("__pycache__"))
                    else:
                        shutil.copy(source, pathlib.Path(context) / name)
                docker("build", "-q", "--platform", oci_platform(architecture), "--build-arg", "BASE=%s" % base,
                       "--label", "ascend-vllm-fleet.twin.source=%s" % tag.rsplit(":", 1)[1], "-t", tag, context)
            log("built %s" % tag)
        for stale in self.our_images():
            if stale.startswith(repository + ":") and stale.endswith("-" + ARCHITECTURES[architecture]) \
                    and stale != tag:
                docker("rmi", stale, check=False)  # still used by a host until it is recreated: `down` removes it
        state.setdefault(key, {})[architecture] = tag
        with self.edited_state() as current:
            current.setdefault(key, {})[architecture] = tag

    def push_standin(self, state):
        """Every tag of the registry, for every architecture built: one multi-arch tag each, as quay.io's."""
        builds = state["build_tags"]
        derived = dict(VARIANT_TAGS, **release_tags(), **{image_tag: "ENV SOC_VERSION=%s" % soc_version
                                                          for image_tag, soc_version in OTHER_CHIP_TAGS.items()})
        # The derived tags' lines count too: a variant whose line changed is pushed again from the same builds.
        source = " ".join(sorted(builds.values()) + ["%s=%s" % item for item in sorted(derived.items())])
        if state.get("pushed_source") == source and self._registry_has_tags(builds):
            return
        pushed = []
        for image_tag in IMAGE_TAGS:
            for repository in (IMAGE_REPOSITORY, "%s/%s" % (PREFIX, IMAGE_REPOSITORY)):
                self.push_multiarch(repository, image_tag, builds)
                pushed.append("%s:%s" % (repository, image_tag))
        for image_tag, line in sorted(derived.items()):
            variants = {}
            for architecture, build_tag in builds.items():
                variants[architecture] = "%s-derived" % build_tag
                docker("build", "-q", "--platform", oci_platform(architecture), "-t", variants[architecture],
                       "-", input="FROM %s\n%s\n" % (build_tag, line))
            self.push_multiarch(IMAGE_REPOSITORY, image_tag, variants)
            for variant in variants.values():
                docker("rmi", variant)
            pushed.append("%s:%s" % (IMAGE_REPOSITORY, image_tag))
        state["pushed_source"] = source
        with self.edited_state() as current:
            current["pushed_source"] = source
        log("registry serves %s, each for %s" % (", ".join(pushed), " and ".join(
            oci_platform(architecture) for architecture in sorted(builds))))

    def push_multiarch(self, repository, image_tag, builds):
        """One tag for every architecture built, as quay.io's: each build is pushed under a tag of its platform
        (`<tag>-linux-arm64`), then the tag becomes a list of them in one step, so a host pulling meanwhile gets
        the tag as it was or as it is, never another platform's image."""
        manifests = []
        for architecture, build_tag in sorted(builds.items()):
            own_tag = "%s-linux-%s" % (image_tag, ARCHITECTURES[architecture])
            target = "%s/%s:%s" % (self.registry, repository, own_tag)
            docker("tag", build_tag, target)
            docker("push", "-q", target)
            # Untag after the push: hosts get the image only by pulling it, as from quay.io.
            docker("rmi", target)
            manifests.append(dict(self._manifest_reference(repository, own_tag),
                                  platform=oci_platform(architecture, as_dict=True)))
        body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_LIST, "manifests": manifests}).encode()
        self._registry_call("PUT", repository, image_tag, data=body, headers={"Content-Type": MANIFEST_LIST})

    def _manifest_reference(self, repository, image_tag):
        """The media type, digest and size of the image manifest a tag names now."""
        body, media_type = self._registry_call("GET", repository, image_tag, headers={"Accept": IMAGE_MANIFEST})
        return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "size": len(body)}

    def _registry_call(self, method, repository, image_tag, data=None, headers=None, timeout=30):
        """(body, media type) of the registry's answer about a tag's manifest; a refusal is a TwinError."""
        url = "http://%s/v2/%s/manifests/%s" % (self.registry, repository, image_tag)
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.read(), response.headers.get("Content-Type", IMAGE_MANIFEST)
        except urllib.error.HTTPError as error:
            raise TwinError("the registry answered %s %s with HTTP %d: %s" % (
                method, url, error.code, error.read().decode(errors="replace")[:500])) from None
        except (urllib.error.URLError, OSError) as error:
            raise TwinError("the registry did not answer %s %s: %s" % (method, url, error)) from None

    def _registry_has_tags(self, builds):
        """Whether the registry serves every tag, each as a list of a build for every architecture built."""
        wanted = {IMAGE_REPOSITORY: set(IMAGE_TAGS) | set(OTHER_CHIP_TAGS) | set(VARIANT_TAGS) | set(release_tags()),
                  "%s/%s" % (PREFIX, IMAGE_REPOSITORY): set(IMAGE_TAGS)}
        platforms = sorted(ARCHITECTURES[architecture] for architecture in builds)
        try:
            for repository, tags in wanted.items():
                for image_tag in tags:
                    body, _ = self._registry_call("GET", repository, image_tag, headers={"Accept": MANIFEST_LIST},
                                                  timeout=5)
                    listed = json.loads(body).get("manifests") or []
                    if sorted(entry["platform"]["architecture"] for entry in listed) != platforms:
                        return False
            return True
        except (TwinError, ValueError, KeyError):
            return False

    # --- lifecycle ---------------------------------------------------------------------------------------
    def infrastructure(self, architectures=(NATIVE,)):
        """Network, registry and images (those of the architectures given): what every fleet of this twin shares.
        Repeatable."""
        if not shutil.which("docker") or docker("info", check=False).returncode != 0:
            raise TwinError("no Docker engine answers: start dockerd (scripts/dev does) and try again")
        with self.edited_state() as state:
            state.update({"home": str(self.home), "registry": self.registry})
        gateway = self.start_network()
        self.start_registry(state, "push", self.registry, readonly=False)
        self.start_registry(state, "hosts", "%s:%d" % (gateway, REGISTRY_HOST_PORT), readonly=True)
        self.start_registry(state, "login", "%s:%d" % (gateway, REGISTRY_LOGIN_PORT), readonly=True,
                            htpasswd=self.registry_account())
        self.start_package_repository(state, gateway)
        with self.build_lock():
            state = self.load_state()
            for architecture in architectures:
                self.build_architecture(state, architecture)
            # Another architecture's images stay only if they are of the sources as they are: a changed stand-in
            # must not be pushed beside an older one.
            with self.edited_state() as current:
                for architecture in set(BUILT) - set(architectures):
                    if not self.built_from_sources(current, architecture):
                        for key, *_ in self.image_specs():
                            current.get(key, {}).pop(architecture, None)
                state = dict(current)
            self.push_standin(state)
        return state

    def add_architecture(self, architecture):
        """The images of an architecture `up` left out or built from older sources (built now, or by another
        process that holds the build lock: waited for). What a fleet with such a host asks for first."""
        if architecture not in BUILT:
            raise TwinError("the twin has no %s hosts: it runs %s" % (architecture, " and ".join(BUILT)))
        self.base_images(architecture)
        with self.build_lock():
            state = self.load_state()
            if not self.built_from_sources(state, architecture):
                self.build_architecture(state, architecture)
                self.push_standin(state)
        return state

    def base_images(self, architecture):
        """The Debian roots the host image and the stand-in of an architecture are built from, and the base images
        made from them: the longest part of a first build (minutes, emulated), which needs neither the registry nor
        the build lock (the cache has its own). The other roots are this machine's architecture's only: the RPM
        hosts' (rpm_host_image) and the execution environment's (scripts/ee.py), which runs on the controller."""
        for kind in sorted({spec[2] for spec in self.image_specs()}):
            self.base_image(kind, architecture)

    @contextlib.contextmanager
    def build_lock(self):
        """One process at a time builds and pushes images (`up` and a background `build`, a test's fleet)."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def fleet(self, home, hosts, inventory=None):
        """A fleet of this twin's hosts with its own folder, key and inventory (tests make private ones)."""
        state = self.load_state()
        return fleet.Fleet(self, home, hosts, state.get("host_images"), inventory=inventory)

    def demo_layout(self, count=None, aarch64=None, profiles=None, systems=None):
        """The demo fleet's hosts and their specs (demo_hosts' profiles, `@<os>` where not Debian), as many hosts and
        Kunpeng hosts as now unless given. systems: the operating systems chosen (`up --os`), by host name,
        EVERY_HOST for every host; a host's own choice wins, and a host not chosen keeps the one it has."""
        state = self.load_state()
        now = {name: split_host_spec(spec) for name, spec in (state.get("hosts") or {}).items()}
        ascend = {name: profile for name, (profile, _) in now.items() if name != DEMO_GATEWAY}
        if count is None:
            count = len(ascend) or 2
        if aarch64 is None:
            aarch64 = min(count, sum(profile == DEMO_AARCH64_PROFILE for profile in ascend.values()))
        if aarch64 > count:
            raise TwinError("--aarch64 %d: more than the %d demo hosts. Fix: give --hosts %d or more"
                            % (aarch64, count, aarch64))
        layout = demo_hosts(count, aarch64, profiles)
        systems = dict(systems or {})
        unknown = sorted(set(systems) - set(layout) - {EVERY_HOST})
        if unknown:
            raise TwinError("--os %s=%s: the demo fleet has no host %s (its hosts: %s)" % (
                unknown[0], systems[unknown[0]], unknown[0], ", ".join(sorted(layout))))
        distributions = load_distributions()
        specs = {}
        for name, profile in layout.items():
            system = systems.get(name, systems.get(EVERY_HOST, now.get(name, (None, DEFAULT_DISTRIBUTION))[1]))
            architecture = load_profiles()[profile].get("architecture", NATIVE)
            if distributions[system]["family"] == "rpm" and architecture != NATIVE:
                raise TwinError("--os %s: %s is a Kunpeng (aarch64) host, and the twin's %s hosts run on this "
                                "machine's architecture only. Fix: leave out --aarch64, or choose the OS of the other "
                                "hosts one by one (--os twin-01=%s)" % (system, name, system, system))
            specs[name] = profile if system == DEFAULT_DISTRIBUTION else "%s@%s" % (profile, system)
        return specs

    def demo_fleet(self, count=None, aarch64=None, profiles=None, systems=None):
        return self.fleet(self.home / "demo", self.demo_layout(count, aarch64, profiles, systems),
                          inventory=self.inventory)

    def up(self, count=None, aarch64=None, profiles=None, systems=None):
        """The twin with its demo fleet: this machine's images, and another architecture's where a demo host is of
        it (the fleet adds them). profiles: as demo_hosts takes them; without, each host its demo profile. systems:
        as demo_layout takes them; without, each host the operating system it has (Debian at first)."""
        hosts = self.demo_layout(count, aarch64, profiles, systems)  # a wrong choice stops here, before anything starts
        state = self.infrastructure()
        demo = self.fleet(self.home / "demo", hosts, inventory=self.inventory)
        # A host given another profile is another machine: made afresh, as a host's files are made only once
        # and what its old profile ran (a foreign container, a driver installed since) would stay.
        was = state.get("hosts") or {}
        stale = set(was) - set(demo.hosts)
        stale |= set(name for name, host in demo.hosts.items() if was.get(name, host.spec) != host.spec)
        if stale:
            demo.remove_hosts(sorted(stale))
        demo.up()
        with self.edited_state() as state:
            state["hosts"] = {name: host.spec for name, host in demo.hosts.items()}
            state["inventory"] = str(self.inventory)
        for name, host in demo.hosts.items():
            log("  %-8s %-8s %-22s %s" % (name, host.architecture if host.group == "ascend" else "", host.profile_name,
                                          host.distribution["label"]))
        log("up: %d host(s) in %s, registry %s" % (len(demo.hosts), self.inventory, self.registry))
        return state

    def our_containers(self):
        """Twin hosts of this twin (every fleet), by their label."""
        listing = docker("ps", "-a", "--filter", "label=ascend-vllm-fleet.twin=%s" % self.instance,
                         "--format", "{{.Names}}").stdout.split()
        return sorted(listing)

    def our_images(self, *prefixes):
        """Local images of this twin (pushed, stand-in and host builds), or of the given name prefixes: by name,
        or by ID once a newer build took their tag (Docker lists them as <repository>:<none>)."""
        listing = docker("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout.splitlines()
        prefixes = prefixes or ("%s/" % self.registry, self.build_repository + ":", self.host_image + ":",
                                self.rpm_host_image_repository + ":")
        found = []
        for line in listing:
            name, image_id = line.rsplit(" ", 1)
            if name.startswith(prefixes):
                found.append(image_id if name.endswith(":<none>") else name)
        return found

    def down(self, purge=False):
        state = self.load_state()
        if self.home.exists() and not self.state_path.exists():
            raise TwinError("%s exists but holds no %s: not removing what the twin did not make"
                            % (self.home, STATE_FILE))
        if shutil.which("docker") and docker("info", check=False).returncode == 0:
            for name in self.our_containers():
                fleet.remove_container(name)
                log("removed host %s" % name)
            if docker("network", "inspect", self.network, check=False).returncode == 0:
                docker("network", "rm", self.network)
            for image in self.our_images():
                docker("rmi", "-f", image)
            if purge:
                for image in self.our_images(BASE_REPOSITORY):
                    docker("rmi", "-f", image, check=False)
        for pid in (state.get("registry_pids") or {}).values():
            self.stop_registry(pid)
        if state.get("inventory") and pathlib.Path(state["inventory"]).exists():
            pathlib.Path(state["inventory"]).unlink()
            shutil.rmtree(pathlib.Path(state["inventory"]).parent / fleet.PACKAGES_DIR, ignore_errors=True)
        if self.home.exists():
            shutil.rmtree(self.home)
        if purge and self.cache.exists():
            shutil.rmtree(self.cache)
        log("down")

    def status(self):
        state = self.load_state()
        return {
            "home": str(self.home),
            "hosts": state.get("hosts", {}),
            "inventory": state.get("inventory"),
            "registry": self.registry,
            "registry_up": self.registry_answers(),
            "containers": self.our_containers() if shutil.which("docker") else [],
        }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m twin", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "roots", "build", "down", "status"],
                        help="build: the images of every architecture and of the RPM distributions' hosts (up builds "
                             "this machine's Debian hosts', and the others' only for a host of them); roots: the "
                             "roots and base images up leaves out, the longest part of their build, which needs no "
                             "registry")
    parser.add_argument("--hosts", type=int, help="with up: how many demo hosts (default: as many as now, or 2)")
    parser.add_argument("--aarch64", type=int, help="with up: how many of them are Kunpeng (aarch64) hosts, which "
                        "run emulated and slower (README: the twin) (default: as many as now, or 0)")
    parser.add_argument("--profile", action="append", type=profile_choice, default=[], metavar="[HOST=]NAME",
                        help="with up: the profile (%s) of every Ascend demo host (NAME), or of one host "
                        "(HOST=NAME, which wins); repeatable. A host given another profile than it has is made "
                        "afresh (default: the demo's profiles)" % PROFILES_FILE)
    parser.add_argument("--os", action="append", type=os_choice, default=[], metavar="[HOST=]NAME", dest="systems",
                        help="with up: the operating system (%s: debian, openeuler, kylin, uos) of every demo host "
                        "(NAME), or of one host (HOST=NAME, which wins); repeatable. A host given another one is made "
                        "afresh (default: the one it has, Debian at first)" % DISTRIBUTIONS_FILE.name)
    parser.add_argument("--purge", action="store_true", help="with down: also remove the caches")
    parser.add_argument("--inventory", help="with up: where to write the demo fleet's inventory (default %s)"
                        % DEFAULT_INVENTORY)
    args = parser.parse_args(argv)
    if args.hosts is not None and args.hosts < 1:
        parser.error("--hosts %d: expected 1 or more" % args.hosts)
    if args.aarch64 is not None and args.aarch64 < 0:
        parser.error("--aarch64 %d: expected 0 or more" % args.aarch64)
    profiles = dict(args.profile)
    if args.aarch64 is not None and EVERY_HOST in profiles:
        parser.error("--aarch64 %d with --profile %s: that profile is every Ascend host's, so it decides their "
                     "architecture. Fix: leave out --aarch64, or give hosts their profiles one by one "
                     "(--profile twin-02=%s)" % (args.aarch64, profiles[EVERY_HOST], DEMO_AARCH64_PROFILE))
    if args.profile and args.command != "up":
        parser.error("--profile is for up, not %s" % args.command)
    if args.systems and args.command != "up":
        parser.error("--os is for up, not %s" % args.command)
    twin = Twin(inventory=args.inventory)
    try:
        if args.command == "up":
            twin.up(args.hosts, args.aarch64, profiles, dict(args.systems))
        elif args.command == "build":
            # The RPM hosts' image first: this machine's, built in a minute, where an emulated one takes several.
            twin.rpm_host_image()
            for architecture in BUILT:
                twin.add_architecture(architecture)
        elif args.command == "roots":
            for architecture in BUILT:
                if architecture != NATIVE:
                    twin.base_images(architecture)
            twin.base_image("rpmhost")
        elif args.command == "down":
            twin.down(purge=args.purge)
        else:
            print(json.dumps(twin.status(), indent=2))
    except TwinError as error:
        print("twin: error: %s" % error, file=sys.stderr)
        return 1
    return 0
