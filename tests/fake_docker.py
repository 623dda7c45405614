"""An in-process Docker CLI for the tests of the modules that own containers: the calls vllm_instance,
serving_plan and npu_holders make, answered from a small state as Docker answers them (exit codes, the records
`container inspect --format` prints, `Error: No such container`), with a way to stop the caller at any call.
"""
import hashlib
import json


class Interrupted(BaseException):
    """The module's process was killed here (Ctrl-C, a lost SSH session): nothing after this call ran."""


class FakeDocker:
    """Containers by name: {id, name, running, labels, devices, argv, privileged}; images by reference: their ID.

    interrupt_at: the number of the call (from 0) before which the caller is stopped; fail: {verb: stderr} for
    calls that fail as Docker fails them.
    """

    def __init__(self, images=None):
        self.containers, self.images = {}, dict(images or {})
        self.calls, self.interrupt_at, self.fail, self._created = [], None, {}, 0

    def __call__(self, docker, *args, timeout=None):
        if self.interrupt_at is not None and len(self.calls) >= self.interrupt_at:
            raise Interrupted(args)
        self.calls.append(args)
        if args[:2] == ("container", "inspect"):
            verb, rest = "container inspect", args[2:]
        elif args[:2] == ("image", "inspect"):
            verb, rest = "image inspect", args[2:]
        else:
            verb, rest = args[0], args[1:]
        if verb in self.fail:
            return 1, "", self.fail[verb]
        if verb == "container inspect":
            return self._container_inspect(rest)
        if verb == "image inspect":
            reference = rest[rest.index("--") + 1]
            if reference not in self.images:
                return 1, "", "Error: No such image: %s\n" % reference
            return 0, self.images[reference] + "\n", ""
        return getattr(self, "_" + verb)(*rest)

    def add(self, name, labels=None, devices=(), running=True, privileged=False):
        """A container started by someone else."""
        self._created += 1
        self.containers[name] = {"id": hashlib.sha256(b"%d" % self._created).hexdigest(), "name": name,
                                 "running": running, "labels": labels or {}, "devices": list(devices), "argv": [],
                                 "privileged": privileged}

    # --- the verbs -------------------------------------------------------------------------------------------
    def _missing(self, name):
        return 1, "", "Error response from daemon: No such container: %s\n" % name

    def _container_inspect(self, args):
        names = args[args.index("--") + 1:]
        formatted = "--format" in args
        out, code, err = [], 0, ""
        for name in names:
            found = self.containers.get(name) or next(
                (c for c in self.containers.values() if c["id"] == name), None)
            if found is None:
                code, err = 1, err + "Error: No such container: %s\n" % name
                continue
            devices = [{"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"} for d in found["devices"]]
            if formatted:
                out.append(json.dumps({"name": "/" + found["name"], "running": found["running"],
                                       "labels": found["labels"], "devices": devices}))
            else:
                out.append({"Id": found["id"], "Name": "/" + found["name"],
                            "Config": {"Image": found.get("image"), "Labels": found["labels"]},
                            "HostConfig": {"Devices": devices, "Privileged": found.get("privileged", False)}})
        text = "\n".join(out) + "\n" if formatted and out else json.dumps(out) if out else ""
        return code, text, err

    def _rename(self, old, new):
        if old not in self.containers:
            return self._missing(old)
        if new in self.containers:
            return 1, "", "Error response from daemon: Conflict. The container name \"/%s\" is already in use\n" % new
        self.containers[new] = dict(self.containers.pop(old), name=new)
        return 0, "", ""

    def _stop(self, _dashes, name):
        if name not in self.containers:
            return self._missing(name)
        self.containers[name]["running"] = False
        return 0, name + "\n", ""

    def _start(self, _dashes, name):
        if name not in self.containers:
            return self._missing(name)
        self.containers[name]["running"] = True
        return 0, name + "\n", ""

    def _rm(self, _force, _dashes, name):
        if self.containers.pop(name, None) is None:
            return self._missing(name)
        return 0, name + "\n", ""

    def _run(self, *args):
        name = args[args.index("--name") + 1]
        if name in self.containers:
            return 125, "", "docker: Error response from daemon: Conflict. The container name is already in use.\n"
        labels = dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg == "--label")
        devices = [args[i + 1].split(":")[0] for i, arg in enumerate(args) if arg == "--device"]
        self._created += 1
        self.containers[name] = {"id": hashlib.sha256(b"%d" % self._created).hexdigest(), "name": name,
                                 "running": True, "labels": labels, "devices": devices, "argv": list(args),
                                 "image": args[args.index("--") + 1]}
        return 0, self.containers[name]["id"] + "\n", ""

    def _ps(self, *args):
        if "--quiet" in args:
            return 0, "".join(c["id"] + "\n" for c in self.containers.values() if c["running"]), ""
        wanted = [arg[len("label="):].split("=", 1) for arg in args if arg.startswith("label=")]
        names = [c["name"] for c in self.containers.values() if all(c["labels"].get(k) == v for k, v in wanted)]
        return 0, "".join(name + "\n" for name in names), ""
