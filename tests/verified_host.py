"""A host for the verification's tests without Docker (ServedHost): a twin host's files (its npu-smi and device
nodes, the seed's four cards), the serving plan a deploy would have recorded there for one instance serving on a
given port (a local server that answers as vLLM does, tests/fake_vllm.py), that instance's rendered script, and a
Docker CLI that answers `docker inspect` of its container from a file the test writes (serve)."""
import json

from fake_vllm import MODEL

from twin import hosts

NAME = "vllm-ascend"
IMAGE = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
CONFIG_HASH = "5e1f" * 16
# `docker inspect --type container -- NAME`, as host_evidence asks it: <folder>/<NAME>.json, or Docker's refusal.
DOCKER = """#!/bin/sh
[ "$1 $2 $3 $4" = "inspect --type container --" ] || { echo "unexpected: $*" >&2; exit 2; }
[ -f "%(folder)s/$5.json" ] || { echo "Error: No such container: $5" >&2; exit 1; }
cat "%(folder)s/$5.json"
"""


class ServedHost:
    """The host named host in folder, its instance serving on port; serve() writes its container's record."""

    def __init__(self, folder, port, host="npu-a"):
        self.folder, self.host = folder, host
        self.root = folder / "root"
        hosts.build_root(self.root, hosts.load_profiles()["seed_duo4"])
        self.chips = [str(self.root / "dev" / ("davinci%d" % number)) for number in range(4)]
        self.script = folder / (NAME + ".sh")
        self.script.write_text("#!/bin/sh\nset -e\ndocker run --detach --name %s \\\n  --label ascend-vllm-fleet."
                               "config-hash=%s \\\n  -- %s\n" % (NAME, CONFIG_HASH, IMAGE))
        self.plan_file = folder / "plan.json"
        self.plan_file.write_text(json.dumps({
            "format": 1, "host": host, "layout": "single", "image": IMAGE, "served_name": MODEL,
            "excluded_npu_ids": [], "manager_devices": [], "instances": [
                {"name": NAME, "container": NAME, "port": port, "npu_ids": [1, 2], "devices": self.chips,
                 "logic_ids": [0, 1, 2, 3], "cpus": None, "script": str(self.script),
                 "env_file": str(folder / (NAME + ".env"))}]}))
        self.containers = folder / "containers"
        self.containers.mkdir()
        self.docker = folder / "docker"
        self.docker.write_text(DOCKER % {"folder": self.containers})
        self.docker.chmod(0o755)
        self.serve()

    def serve(self, **changes):
        """The container as the deploy left it, with changes: fields of `docker inspect`'s record."""
        record = {"RestartCount": 0, "State": {"Status": "running", "Running": True,
                                               "StartedAt": "2026-12-04T14:00:00.123456789Z"},
                  "Config": {"Image": IMAGE, "Labels": {"ascend-vllm-fleet.config-hash": CONFIG_HASH}},
                  "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"},
                                 "Devices": [{"PathOnHost": chip, "PathInContainer": chip} for chip in self.chips]}}
        (self.containers / (NAME + ".json")).write_text(json.dumps([dict(record, **changes)]))

    def paths(self):
        """Where its files are, by the fleet role's setting for each."""
        return {"fleet_plan_file": str(self.plan_file), "fleet_docker_bin": str(self.docker),
                "fleet_npu_smi": str(self.root / "usr/local/bin/npu-smi"),
                "fleet_driver_home": str(self.root / "usr/local/Ascend/driver"),
                "fleet_firmware_home": str(self.root / "usr/local/Ascend/firmware"),
                "fleet_dev_dir": str(self.root / "dev"),
                "fleet_install_info": str(self.root / "etc/ascend_install.info")}

    def module_args(self, **args):
        """fleet_verify's arguments for it (the fleet's release, no answer check), with args over them: its options
        are the fleet role's settings without their prefix (fleet_docker_bin is docker)."""
        options = {setting[len("fleet_"):]: value for setting, value in self.paths().items()}
        options["docker"] = options.pop("docker_bin")
        options.update(host=self.host, driver_version="25.5.2", firmware_version="7.8.0.7.220", answer_check="none",
                       request_timeout=30)
        return dict(options, **args)
