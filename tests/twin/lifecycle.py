"""Bring the twin up and down: the local registry, the stand-in image in it, and one root per twin host.

Everything the twin makes lives under its home (``TWIN_HOME``, default /var/lib/ascend-vllm-fleet-twin) or
in Docker under names derived from that home, and is listed in ``<home>/state.json``; ``down`` removes exactly
that, plus containers that map devices or folders from the home (what the playbooks ran on twin hosts).
Two caches are kept across ``down`` because they take a minute to make: the debootstrap root filesystem
(``TWIN_CACHE``, default /var/cache/ascend-vllm-fleet-twin) and the Docker image imported from it;
``down --purge`` removes them too.
"""
import hashlib
import json
import os
import pathlib
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

from . import hosts

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_HOME = "/var/lib/ascend-vllm-fleet-twin"
DEFAULT_CACHE = "/var/cache/ascend-vllm-fleet-twin"
DEFAULT_INVENTORY = HERE.parent.parent / "inventory" / "twin" / "hosts.yml"
# The real image's name and tags (quay.io/ascend/vllm-ascend), served by the local registry instead.
IMAGE_REPOSITORY = "ascend/vllm-ascend"
IMAGE_TAGS = ("v0.18.0rc1-310p", "v0.18.0rc1-310p-openeuler")
SUITE = "bookworm"
BASE_IMAGE = "ascend-vllm-fleet-twin/debian-python:" + SUITE
STATE_FILE = "state.json"


class TwinError(RuntimeError):
    pass


def log(message):
    print("twin: %s" % message, flush=True)


def run(*args, check=True, capture=True, env=None):
    result = subprocess.run(list(args), stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.PIPE if capture else None, universal_newlines=True,
                            env=dict(os.environ, **(env or {})))
    if check and result.returncode != 0:
        raise TwinError("%s failed (exit %d): %s" % (" ".join(args), result.returncode,
                                                      (result.stderr or result.stdout or "").strip()[-2000:]))
    return result


def docker(*args, check=True):
    # The legacy builder needs no buildx plugin and no network for FROM an image that is already local.
    return run("docker", *args, check=check, env={"DOCKER_BUILDKIT": "0"})


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


def port_open(port):
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Twin:
    def __init__(self, home=None, cache=None, registry_port=None, inventory=None):
        self.home = pathlib.Path(home or os.environ.get("TWIN_HOME", DEFAULT_HOME))
        self.cache = pathlib.Path(cache or os.environ.get("TWIN_CACHE", DEFAULT_CACHE))
        self.registry_port = int(registry_port or os.environ.get("TWIN_REGISTRY_PORT", "5000"))
        self.inventory = pathlib.Path(inventory or os.environ.get("TWIN_INVENTORY", DEFAULT_INVENTORY))
        # Docker names of this twin carry a hash of its home, so two twins never remove each other's.
        self.instance = hashlib.sha256(str(self.home).encode()).hexdigest()[:8]
        self.build_repository = "ascend-vllm-fleet-twin-%s/vllm-standin" % self.instance

    @property
    def registry(self):
        return "127.0.0.1:%d" % self.registry_port

    @property
    def state_path(self):
        return self.home / STATE_FILE

    def load_state(self):
        if self.state_path.exists():
            return json.loads(self.state_path.read_text())
        return {}

    def save_state(self, state):
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.state_path)

    # --- hosts -------------------------------------------------------------------------------------------
    def twin_hosts(self):
        """(name, profile name) of every inventory host that has a ``twin_profile``."""
        with open(self.inventory) as handle:
            inventory = yaml.safe_load(handle) or {}
        found = {}

        def walk(group):
            for name, variables in ((group or {}).get("hosts") or {}).items():
                if variables and variables.get("twin_profile"):
                    found[name] = variables["twin_profile"]
            for child in ((group or {}).get("children") or {}).values():
                walk(child)

        for group in inventory.values():
            walk(group)
        if not found:
            raise TwinError("%s: no host has a twin_profile variable" % self.inventory)
        return sorted(found.items())

    def host_root(self, name):
        return self.home / "hosts" / name

    def build_hosts(self, state):
        profiles = hosts.load_profiles()
        for name, profile_name in self.twin_hosts():
            if profile_name not in profiles:
                raise TwinError("host %s: unknown twin_profile %r (known: %s)"
                                % (name, profile_name, ", ".join(sorted(profiles))))
            hosts.build_root(self.host_root(name), profiles[profile_name])
            state.setdefault("hosts", {})[name] = profile_name
            log("host %s (%s) at %s" % (name, profile_name, self.host_root(name)))

    # --- registry ----------------------------------------------------------------------------------------
    def registry_answers(self):
        try:
            with urllib.request.urlopen("http://%s/v2/" % self.registry, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start_registry(self, state):
        pid = state.get("registry_pid")
        if pid and self._is_our_registry(pid) and self.registry_answers():
            return
        if port_open(self.registry_port):
            raise TwinError("port %d is taken by another program: set TWIN_REGISTRY_PORT to a free port"
                            % self.registry_port)
        folder = self.home / "registry"
        (folder / "data").mkdir(parents=True, exist_ok=True)
        config = folder / "config.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.registry}, # loopback only, no auth: a stand-in for quay.io on this machine
        }))
        with open(folder / "registry.log", "ab") as output:
            process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        state["registry_pid"] = process.pid
        self.save_state(state)
        for _ in range(100):
            if self.registry_answers():
                log("registry on %s (pid %d)" % (self.registry, process.pid))
                return
            if process.poll() is not None:
                break
            time.sleep(0.1)
        raise TwinError("the registry did not start; see %s" % (folder / "registry.log"))

    def _is_our_registry(self, pid):
        try:
            cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes().decode(errors="replace")
        except OSError:
            return False
        return "docker-registry" in cmdline and str(self.home) in cmdline

    # --- image -------------------------------------------------------------------------------------------
    def rootfs_tarball(self):
        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        tarball = self.cache / ("rootfs-%s-%s.tar" % (SUITE, arch))
        if tarball.exists():
            return tarball
        self.cache.mkdir(parents=True, exist_ok=True)
        mirror = apt_mirror()
        log("building a Debian %s root filesystem with Python (debootstrap from %s, about a minute)"
            % (SUITE, mirror))
        with tempfile.TemporaryDirectory(dir=self.cache) as scratch:
            target = pathlib.Path(scratch) / "root"
            run("debootstrap", "--variant=minbase", "--include=python3", SUITE, str(target), mirror)
            shutil.rmtree(target / "var/cache/apt/archives", ignore_errors=True)
            partial = tarball.with_suffix(".partial")
            run("tar", "-C", str(target), "--numeric-owner", "-cf", str(partial), ".")
            os.replace(partial, tarball)
        return tarball

    def base_image(self):
        if docker("image", "inspect", BASE_IMAGE, check=False).returncode != 0:
            docker("import", "--change", 'CMD ["bash"]', str(self.rootfs_tarball()), BASE_IMAGE)
        return BASE_IMAGE

    def standin_hash(self):
        digest = hashlib.sha256()
        for path in sorted((HERE / "vllm_standin").glob("*.py")) + [HERE / "Dockerfile"]:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16]

    def build_image(self, state):
        source_hash = self.standin_hash()
        build_tag = "%s:%s" % (self.build_repository, source_hash)
        if docker("image", "inspect", build_tag, check=False).returncode != 0:
            base = self.base_image()
            with tempfile.TemporaryDirectory() as context:
                shutil.copytree(HERE / "vllm_standin", pathlib.Path(context) / "vllm_standin",
                                ignore=shutil.ignore_patterns("__pycache__"))
                shutil.copy(HERE / "Dockerfile", context)
                docker("build", "-q", "--build-arg", "BASE=%s" % base, "--label",
                       "ascend-vllm-fleet.twin.source=%s" % source_hash, "-t", build_tag, context)
            log("built the stand-in image %s" % build_tag)
        for stale in self.our_images():
            if stale.startswith(self.build_repository + ":") and stale != build_tag:
                docker("rmi", stale)
        state["build_tag"] = build_tag
        pushed = []
        for tag in IMAGE_TAGS:
            target = "%s/%s:%s" % (self.registry, IMAGE_REPOSITORY, tag)
            docker("tag", build_tag, target)
            docker("push", "-q", target)
            # Untag after the push: hosts get the image by pulling it, as from quay.io.
            docker("rmi", target)
            pushed.append(target)
        state["pushed"] = pushed
        self.save_state(state)
        log("registry serves %s" % ", ".join(pushed))

    # --- lifecycle ---------------------------------------------------------------------------------------
    def up(self):
        if not shutil.which("docker") or docker("info", check=False).returncode != 0:
            raise TwinError("no Docker engine answers: start dockerd (scripts/dev does) and try again")
        state = self.load_state()
        state.update({"home": str(self.home), "registry": self.registry, "inventory": str(self.inventory)})
        self.save_state(state)
        self.build_hosts(state)
        self.save_state(state)
        self.start_registry(state)
        self.build_image(state)
        log("up: %d host(s), registry %s" % (len(state["hosts"]), self.registry))
        return state

    def our_containers(self):
        """Containers that map a device or a folder from this twin's home."""
        ids = docker("ps", "-aq").stdout.split()
        if not ids:
            return []
        ours = []
        # A container may go away between the listing and the inspection; inspect reports the others.
        for info in json.loads(docker("inspect", *ids, check=False).stdout or "[]"):
            sources = [mount.get("Source", "") for mount in info.get("Mounts", [])]
            sources += [device.get("PathOnHost", "") for device in info["HostConfig"].get("Devices") or []]
            if any(source.startswith(str(self.home) + "/") for source in sources):
                ours.append(info["Name"].lstrip("/"))
        return ours

    def our_images(self):
        listing = docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
        prefixes = ("%s/" % self.registry, self.build_repository + ":")
        return [image for image in listing if image.startswith(prefixes)]

    def down(self, purge=False):
        state = self.load_state()
        if shutil.which("docker") and docker("info", check=False).returncode == 0:
            for name in self.our_containers():
                docker("rm", "-f", name)
                log("removed container %s" % name)
            for image in self.our_images():
                docker("rmi", "-f", image)
            if purge:
                docker("rmi", "-f", BASE_IMAGE, check=False)
        pid = state.get("registry_pid")
        if pid and self._is_our_registry(pid):
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                if not self._is_our_registry(pid):
                    break
                time.sleep(0.1)
            log("stopped the registry (pid %d)" % pid)
        if self.home.exists():
            if not self.state_path.exists():
                raise TwinError("%s exists but holds no %s: not removing what the twin did not make"
                                % (self.home, STATE_FILE))
            shutil.rmtree(self.home)
        if purge and self.cache.exists():
            shutil.rmtree(self.cache)
        log("down")

    def status(self):
        state = self.load_state()
        return {
            "home": str(self.home),
            "hosts": state.get("hosts", {}),
            "registry": self.registry,
            "registry_up": self.registry_answers(),
            "containers": self.our_containers() if shutil.which("docker") else [],
        }


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m twin", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--purge", action="store_true", help="with down: also remove the caches")
    parser.add_argument("--inventory", help="inventory file whose hosts have twin_profile (default %s)"
                        % DEFAULT_INVENTORY)
    args = parser.parse_args(argv)
    twin = Twin(inventory=args.inventory)
    try:
        if args.command == "up":
            twin.up()
        elif args.command == "down":
            twin.down(purge=args.purge)
        else:
            print(json.dumps(twin.status(), indent=2))
    except TwinError as error:
        print("twin: error: %s" % error, file=sys.stderr)
        return 1
    return 0
