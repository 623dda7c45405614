"""A fleet of twin hosts: system containers on the twin network, reached over SSH like real Ascend hosts.

Each host runs sshd and its own Docker engine (tests/twin/host/). Its Ascend files are made on this machine
by hosts.build_root and bind-mounted at the real paths, its device nodes passed with --device, so a test can
change a host's model or driver files from outside while the playbooks see an ordinary host. The operator's
login is `ops` with a key the fleet makes; host keys go to a known_hosts file the inventory names, so
host-key checking stays on. A fleet lives in its own folder; its inventory is written there (or where asked)
beside the twin's group_vars.
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import yaml

from . import hdk
from . import hosts as host_files
from .platforms import NATIVE, oci_platform, require_emulation
from .shell import TwinError, docker

# The twin's package repository (tests/twin/lifecycle.py starts it) on the registry's address.
REPO_PORT = 8090

HERE = pathlib.Path(__file__).resolve().parent
GROUP_VARS = HERE.parent.parent / "inventory" / "twin" / "group_vars"
USER = "ops"
# How every twin host names the registry that stands in for quay.io (the inventory's registry mirror).
REGISTRY_NAME = "twin-registry"
# What a twin host mounts from its folder on this machine, at the same path inside (the real default paths).
# Writable: the driver package stand-ins (tests/twin/hdk.py) install over them. One a host does not have yet (no
# driver installed) is not mounted: the package creates it inside the host.
BIND_MOUNTS = (
    ("usr/local/Ascend", "/usr/local/Ascend", "rw"),
    ("usr/local/dcmi", "/usr/local/dcmi", "rw"),
    ("usr/local/bin/npu-smi", "/usr/local/bin/npu-smi", "rw"),
    ("etc/ascend_install.info", "/etc/ascend_install.info", "rw"),
    ("data/models", "/data/models", "rw"),
    (hdk.STATE_DIR, "/" + hdk.STATE_DIR, "rw"),
)
# Where a fleet puts the driver and firmware packages for its hosts: beside its inventory, where the
# ascend_driver role looks by default (ascend_driver_packages_dir).
PACKAGES_DIR = "ascend-hdk"
# Releases a fleet's package folder holds: the pair the collection serves with (DESIGN, the release pairs).
PACKAGE_RELEASES = (("driver", "25.5.2"), ("firmware", "7.8.0.7.220"))
# A nested engine runs without --privileged (which this sandbox refuses): every capability but one, no
# seccomp or AppArmor profile, any device, and the cgroup tree writable for the engine's containers.
ENGINE_ISOLATION = ("--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
                    "--security-opt", "apparmor=unconfined", "--device-cgroup-rule", "a *:* rwm",
                    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw")
HOST_KEY_TYPES = ("ed25519", "ecdsa", "rsa")


def remove_container(name):
    """Remove a twin host and the empty cgroups its engine left (named after it) in this machine's tree."""
    docker("rm", "-f", name, check=False)
    for cgroup in sorted(pathlib.Path("/sys/fs/cgroup").glob("*/%s" % name)) + \
            sorted(pathlib.Path("/sys/fs/cgroup").glob(name)):
        for folder, _, _ in sorted(os.walk(cgroup), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(folder)
            except OSError:
                pass


class TwinHost:
    """One twin host: its container, its files on this machine, and commands run inside it as root."""

    def __init__(self, fleet, name, spec):
        """spec: `<profile>` or `<profile>@<os>` (profiles.yml, distributions.yml)."""
        self.fleet = fleet
        self.name = name
        self.spec = spec
        self.profile_name, self.os_name = host_files.split_host_spec(spec or "")
        self.root = fleet.home / "hosts" / name
        self.engine_dir = fleet.home / "engines" / name
        self.container = "%s-%s" % (fleet.prefix, name)

    def exec(self, *argv, check=True, input=None):
        args = ["exec"] + (["-i"] if input is not None else []) + [self.container] + list(argv)
        return docker(*args, check=check, input=input)

    def docker(self, *args, check=True):
        """This host's own Docker engine."""
        return self.exec("docker", *args, check=check)

    def inspect(self, container):
        result = self.docker("container", "inspect", container, check=False)
        return json.loads(result.stdout)[0] if result.returncode == 0 else None

    def read_text(self, path):
        return self.exec("cat", path).stdout

    def exists(self, path):
        return self.exec("test", "-e", path, check=False).returncode == 0

    def mode(self, path):
        return int(self.exec("stat", "-c", "%a", path).stdout.strip(), 8)

    def container_info(self):
        """The host's own container, as this machine's engine sees it."""
        return json.loads(docker("container", "inspect", self.container).stdout)[0]

    def changed_paths(self):
        """Every path added, changed or deleted in the host's own filesystem since it was made (docker diff)."""
        return sorted(line.split(" ", 1)[1] for line in docker("diff", self.container).stdout.splitlines())

    @property
    def address(self):
        return self.container_info()["NetworkSettings"]["Networks"][self.fleet.twin.network]["IPAddress"]

    def url(self, port):
        return "http://%s:%d" % (self.address, port)

    def running(self):
        result = docker("container", "inspect", "-f", "{{.State.Running}} {{.Config.Image}}", self.container,
                        check=False)
        return result.returncode == 0 and result.stdout.split() == ["true", self.image]

    @property
    def profile(self):
        return host_files.load_profiles()[self.profile_name]

    @property
    def architecture(self):
        """What the host's `uname -m` says: its profile's `architecture`, by default this machine's."""
        return self.profile.get("architecture", NATIVE)

    @property
    def distribution(self):
        """The host's operating system (distributions.yml): its family, release files, repository, Python."""
        return host_files.load_distributions()[self.os_name]

    @property
    def image(self):
        if self.distribution["family"] == "rpm":
            return self.fleet.rpm_host_image
        return self.fleet.host_images[self.architecture]

    def os_mounts(self):
        """The release files of the host's operating system and, on an RPM host, its dnf repository (the site's
        mirror, in the twin's package repository), written beside its Ascend files and mounted read-only."""
        distribution, folder, mounts = self.distribution, self.fleet.home / "os" / self.name, []
        files = dict(distribution.get("files", {}))
        if distribution["family"] == "rpm":
            # dnf's $releasever, which a distribution's release package gives it: the os-release's VERSION_ID.
            files["/etc/dnf/vars/releasever"] = re.search(r'^VERSION_ID="?([^"\n]*)', files["/etc/os-release"],
                                                          re.M).group(1) + "\n"
            files["/etc/yum.repos.d/twin.repo"] = (
                "# The site's mirror of %s's repository.\n[everything]\nname=%s everything\n"
                "baseurl=http://%s:%d/%s/\nenabled=1\ngpgcheck=0\n" % (
                    distribution["label"], distribution["label"], REGISTRY_NAME, REPO_PORT,
                    distribution["repository"]))
        for path, text in sorted(files.items()):
            source = folder / path.lstrip("/")
            source.parent.mkdir(parents=True, exist_ok=True)
            source.write_text(text)
            mounts += ["-v", "%s:%s:ro" % (source, path)]
        return mounts

    @property
    def group(self):
        """The inventory group the host's profile puts it in: `ascend`, or `gateway` for a machine without NPU
        that runs the fleet's HAProxy."""
        return self.profile.get("group", "ascend")

    def start(self, public_key, gateway):
        profile = self.profile
        ascend = self.group == "ascend"
        if ascend:
            host_files.build_root(self.root, profile)
        if self.running():
            return
        remove_container(self.container)
        self.engine_dir.mkdir(parents=True, exist_ok=True)
        args = ["run", "-d", "--name", self.container, "--hostname", self.name, "--network", self.fleet.twin.network,
                "--add-host", "%s:%s" % (REGISTRY_NAME, gateway),
                "--label", "ascend-vllm-fleet.twin=%s" % self.fleet.twin.instance,
                "--label", "ascend-vllm-fleet.twin-fleet=%s" % self.fleet.id,
                "--label", "ascend-vllm-fleet.twin-host=%s" % self.name,
                "-e", "TWIN_AUTHORIZED_KEY=%s" % public_key, "-e", "TWIN_CGROUP_PARENT=%s" % self.container,
                "-v", "%s:/var/lib/docker" % self.engine_dir]
        args += ENGINE_ISOLATION
        if ascend:
            for source, target, mode in BIND_MOUNTS:
                if (self.root / source).exists():
                    args += ["-v", "%s:%s:%s" % (self.root / source, target, mode)]
            for node in sorted((self.root / "dev").iterdir()):
                args += ["--device", "%s:/dev/%s" % (node, node.name)]
        distribution = self.distribution
        if distribution["family"] == "rpm":
            if self.architecture != NATIVE:
                raise TwinError("host %s: the twin's %s hosts run on this machine's architecture (%s) only, not %s. "
                                "Fix: give it a profile without `architecture`" % (
                                    self.name, self.os_name, NATIVE, self.architecture))
            args += ["-e", "TWIN_FIREWALLD=1"]
        if distribution.get("python"):
            args += ["-e", "TWIN_PYTHON_VERSION=%s" % distribution["python"]]
        args += self.os_mounts()
        if self.architecture != NATIVE:
            require_emulation(self.architecture)
            # What a Kunpeng 920's kernel prints, for the CPUs this machine has (its own /proc/cpuinfo otherwise).
            args += ["-v", "%s:/proc/cpuinfo:ro" % host_files.write_cpuinfo(self.root, self.architecture)]
        docker(*(args + ["--platform", oci_platform(self.architecture), self.image]))

    def wait_ready(self, timeout=60):
        """sshd has its keys and the host's engine answers (where it has one: an RPM host installs it)."""
        deadline = time.time() + timeout
        probe = ("test -s /etc/ssh/ssh_host_ed25519_key.pub && pgrep -x sshd >/dev/null"
                 " && { test ! -x /etc/init.d/docker || docker info >/dev/null; }")
        while time.time() < deadline:
            if self.exec("sh", "-c", probe, check=False).returncode == 0:
                return
            time.sleep(0.5)
        logs = docker("logs", "--tail", "20", self.container, check=False)
        raise TwinError("twin host %s did not come up within %d s: %s%s" % (
            self.name, timeout, logs.stdout, logs.stderr))

    def settle(self):
        """What the host's profile says runs on it besides this collection: the driver's run user where a driver
        is installed, and foreign containers holding chips (an exporter, a colleague's job)."""
        profile = self.profile
        if self.group != "ascend":
            return
        if profile.get("driver", "") is not None and self.exec("id", "HwHiAiUser", check=False).returncode != 0:
            self.exec("useradd", "--create-home", "--shell", "/bin/bash", "HwHiAiUser")
        for container in profile.get("containers", []):
            if self.inspect(container["name"]) is None:
                self.run_foreign_container(profile, container)

    def run_foreign_container(self, profile, container):
        """A container of someone else's on the host's chips, from the stand-in image loaded into its engine."""
        image = "%s:twin" % container["name"]
        build_tag = self.fleet.twin.load_state()["build_tags"][self.architecture]
        if self.docker("image", "inspect", image, check=False).returncode != 0:
            subprocess.run("docker save %s | docker exec -i %s docker load -q" % (build_tag, self.container),
                           shell=True, check=True, stdout=subprocess.DEVNULL)
            self.docker("tag", build_tag, image)
            self.docker("rmi", build_tag)
        expanded = host_files.npu_smi.expand_profile(profile)
        nodes = ["/dev/davinci%d" % chip["phy_id"] for card in expanded["cards"] for chip in card["chips"]
                 if chip["logic_id"] in container["chips"]]
        devices = [arg for node in nodes for arg in ("--device", node)]
        self.docker("run", "-d", "--name", container["name"], "--restart", "unless-stopped", *devices,
                    image, "sleep", "infinity")

    def known_hosts_lines(self):
        address, lines = self.address, []
        for key_type in HOST_KEY_TYPES:
            result = self.exec("cat", "/etc/ssh/ssh_host_%s_key.pub" % key_type, check=False)
            if result.returncode == 0:
                algorithm, key = result.stdout.split()[:2]
                lines.append("%s %s %s\n" % (address, algorithm, key))
        return lines

    def remove(self):
        remove_container(self.container)
        for folder in (self.root, self.engine_dir):
            if folder.exists():
                shutil.rmtree(folder)


class Fleet:
    """Twin hosts with one folder, one login key, one known_hosts file and one inventory."""

    def __init__(self, twin, home, hosts, host_images, inventory=None):
        self.twin = twin
        self.home = pathlib.Path(home)
        self.id = hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:6]
        self.prefix = "%s-%s" % (twin.prefix, self.id)
        self.host_images = host_images or {}
        known, distributions = host_files.load_profiles(), host_files.load_distributions()
        for name, spec in sorted(hosts.items()):
            profile, distribution = host_files.split_host_spec(spec)
            if profile not in known:
                raise ValueError("host %s: unknown twin profile %r (known: %s)"
                                 % (name, profile, ", ".join(sorted(known))))
            if distribution not in distributions:
                raise ValueError("host %s: unknown twin operating system %r (known: %s)"
                                 % (name, distribution, ", ".join(sorted(distributions))))
        self.rpm_host_image = None
        self.hosts = {name: TwinHost(self, name, profile) for name, profile in sorted(hosts.items())}
        self.inventory = pathlib.Path(inventory) if inventory else self.home / "inventory" / "hosts.yml"
        self.key = self.home / "ssh" / "id_ed25519"
        self.known_hosts = self.home / "ssh" / "known_hosts"

    def __getitem__(self, name):
        return self.hosts[name]

    def ensure_key(self):
        if not self.key.exists():
            self.key.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ascend-vllm-fleet twin",
                            "-f", str(self.key)], check=True)
        return self.key.with_suffix(".pub").read_text().strip()

    def up(self):
        if not self.host_images:
            raise TwinError("the twin's host images are not built: run `python -m twin up` first")
        for architecture in sorted({host.architecture for host in self.hosts.values()} - set(self.host_images)):
            self.host_images = self.twin.add_architecture(architecture)["host_images"]
        if any(host.distribution["family"] == "rpm" for host in self.hosts.values()):
            self.rpm_host_image = self.twin.rpm_host_image()
        public_key = self.ensure_key()
        gateway = self.twin.gateway()
        for host in self.hosts.values():
            host.start(public_key, gateway)
        for host in self.hosts.values():
            host.wait_ready()
            host.settle()
        self.write_known_hosts()
        self.write_inventory()
        self.write_packages()

    def write_packages(self):
        """The driver and firmware packages for the fleet's hosts, where the operator keeps them."""
        folder = self.inventory.parent / PACKAGES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        architectures = sorted({host.architecture for host in self.hosts.values() if host.group == "ascend"})
        for kind, version in PACKAGE_RELEASES:
            for architecture in architectures if kind == "driver" else [None]:
                hdk.build_package(folder, kind, version, architecture)
        return folder

    def write_known_hosts(self):
        lines = [line for host in self.hosts.values() for line in host.known_hosts_lines()]
        tmp = self.known_hosts.with_suffix(".tmp")
        tmp.write_text("".join(lines))
        os.replace(tmp, self.known_hosts)

    def write_inventory(self, only=None, **overrides):
        """The fleet's inventory, of the hosts named in only (by default all); overrides maps a host to variables
        added for the next runs only."""
        self.inventory.parent.mkdir(parents=True, exist_ok=True)
        if self.inventory.parent != GROUP_VARS.parent and not (self.inventory.parent / "group_vars").exists():
            (self.inventory.parent / "group_vars").symlink_to(GROUP_VARS)
        addresses = {name: host.address for name, host in self.hosts.items() if only is None or name in only}
        text = ("---\n# Written by the twin (tests/twin/fleet.py): its hosts, how to reach them and their hardware\n"
                "# profile (tests/twin/profiles.yml). Everything else is in group_vars, as for a real site.\n")
        text += yaml.safe_dump(self.inventory_document(addresses, overrides), sort_keys=False)
        tmp = self.inventory.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.inventory)
        return self.inventory

    def inventory_document(self, addresses, overrides=None):
        """Hosts in their group with their address and profile; the login, key and known_hosts for all of them."""
        groups = {}
        for name, host in self.hosts.items():
            if name not in addresses:
                continue
            groups.setdefault(host.group, {})[name] = dict(
                {"ansible_host": addresses[name], "twin_profile": host.profile_name, "twin_os": host.os_name},
                **(overrides or {}).get(name, {}))
            if host.profile.get("monitoring"):
                groups.setdefault("monitoring", {})[name] = {}
        connection = {"ansible_user": USER, "ansible_ssh_private_key_file": str(self.key),
                      "ansible_ssh_common_args": "-o UserKnownHostsFile=%s" % self.known_hosts}
        return {"all": {"children": {group: {"hosts": groups[group], "vars": connection}
                                     for group in ("ascend", "gateway", "monitoring") if group in groups}}}

    def remove_hosts(self, names):
        for name in names:
            TwinHost(self, name, None).remove()

    def down(self):
        listing = docker("ps", "-a", "--filter", "label=ascend-vllm-fleet.twin-fleet=%s" % self.id,
                         "--format", "{{.Names}}").stdout.split()
        for container in listing:
            remove_container(container)
        if self.home.exists():
            shutil.rmtree(self.home)
        if self.inventory.exists():
            self.inventory.unlink()
        if (self.inventory.parent / PACKAGES_DIR).exists():
            shutil.rmtree(self.inventory.parent / PACKAGES_DIR)
