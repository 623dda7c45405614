# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vLLM instance's container and files through its life: kept, started or replaced when its spec changes, the
serving container set aside until the replacement serves, then committed (what was set aside removed) or
restored (put back, its files too). A run interrupted anywhere in between leaves `<name>-previous`, and the next
run restores it before it decides anything.

Every change is one Docker CLI call or one file operation, in an order where the host is whole after each: the
unit tests stop a replacement at every call and check that the next run puts the host back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shlex
import tempfile

from ansible_collections.ascend.fleet.plugins.module_utils.container_labels import CONFIG_HASH_LABEL, label_name
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import is_chip_node

# What `docker container inspect` reads of an instance's containers: never Config.Env, which may hold the key.
INSPECT_FORMAT = ('{"name": {{json .Name}}, "running": {{json .State.Running}}, "labels": {{json .Config.Labels}}, '
                  '"devices": {{json .HostConfig.Devices}}}')
# The suffix of what a replacement sets aside, containers and files alike, until the new container serves.
ASIDE = ".previous"
ASIDE_CONTAINER = "-previous"


def instance_files(config_dir, name):
    """Where an instance's files are on its host: the one rule, recorded per instance in the plan file."""
    return {"script": os.path.join(config_dir, name + ".sh"), "env_file": os.path.join(config_dir, name + ".env")}


class DockerError(Exception):
    """A Docker CLI call that failed; the message is the call and what Docker said."""


class Untouched(Exception):
    """Setting the serving container aside failed before it was moved: it serves on as before."""


class Instance:
    """An instance's container (`name`) and its files (`script`, `env_file`), on a host reached by `docker`.

    run: the instance's `docker run` as lines of arguments, without its config-hash label (vllm_server's
    vllm_server_docker_run filter); image: the image it runs, whose ID enters the hash; api_key: the key its env
    file holds ('' for none); salt_file: the host's secret that salts the key in the hash; label_prefix: the
    collection's label namespace; devices: the chip nodes it must map; comment: the script's description line.
    """

    def __init__(self, docker, name, script, env_file, run, image, api_key, salt_file, label_prefix, devices,
                 comment="", runner=run_docker):
        self.docker, self.name, self.script, self.env_file = docker, name, script, env_file
        self.run_lines, self.image, self.api_key, self.salt_file = run, image, api_key, salt_file
        self.label_prefix, self.devices, self.comment = label_prefix, sorted(devices), comment
        self.aside_name = name + ASIDE_CONTAINER
        self._runner = runner
        self._spec_hash = None

    # --- reading -------------------------------------------------------------------------------------------
    def call(self, *args):
        """stdout of a Docker CLI call; DockerError when it fails."""
        code, out, err = self._runner(self.docker, *args)
        if code != 0:
            said = (err or out).strip() or "exit code %s" % code
            raise DockerError("`docker %s` failed: %s" % (" ".join(args), said))
        return out

    def inspect(self):
        """{'current': record or None, 'aside': record or None}: what runs as the instance and what a replacement
        set aside. A record has name, running, labels and devices."""
        _code, out, _err = self._runner(self.docker, "container", "inspect", "--format", INSPECT_FORMAT, "--",
                                        self.name, self.aside_name)
        found = {}
        for line in out.splitlines():
            line = line.strip()
            if line:
                record = json.loads(line)
                found[record["name"].lstrip("/")] = record
        return {"current": found.get(self.name), "aside": found.get(self.aside_name)}

    def spec_hash(self):
        """The config-hash label: the run lines, the image's ID (a new image under the same tag replaces the
        container, as Compose does) and the key, which enters only salted with the host's secret. Worked out once
        per instance: the decision and the diff of one run read the same image and salt."""
        if self._spec_hash is not None:
            return self._spec_hash
        code, image_id, _err = self._runner(self.docker, "image", "inspect", "--format", "{{.Id}}", "--", self.image)
        image_id = image_id.strip() if code == 0 else ""
        salted_key = hashlib.sha256((read_text(self.salt_file) + self.api_key).encode("utf-8")).hexdigest()
        spec = json.dumps(self.run_lines) + image_id + salted_key
        self._spec_hash = hashlib.sha256(spec.encode("utf-8")).hexdigest()
        return self._spec_hash

    def decide(self, current, spec_hash):
        """keep (serving from this spec), start (this spec, stopped) or replace (another spec, other chips, or
        none): a container re-created by hand keeps its label but may map other chips, and is replaced."""
        if current is None:
            return "replace"
        label = (current.get("labels") or {}).get(label_name(self.label_prefix, CONFIG_HASH_LABEL))
        mapped = sorted(device.get("PathOnHost", "") for device in current.get("devices") or []
                        if is_chip_node(device.get("PathOnHost", "")))
        if label != spec_hash or mapped != self.devices:
            return "replace"
        return "keep" if current.get("running") else "start"

    # --- the files -----------------------------------------------------------------------------------------
    def labelled_lines(self, spec_hash):
        """The run lines with the config-hash label added before `--` (which ends docker's options)."""
        lines = []
        for line in self.run_lines:
            if line[0] == "--":
                lines.append(["--label", "%s=%s" % (label_name(self.label_prefix, CONFIG_HASH_LABEL), spec_hash)])
            lines.append(line)
        return lines

    def run_argv(self, spec_hash):
        """The docker run's arguments after the Docker CLI (the script's first word), label included."""
        return [arg for line in self.labelled_lines(spec_hash) for arg in line][1:]

    def files(self, spec_hash):
        """{path: (content, mode)} of the files an operator re-creates the container from; None: no such file."""
        lines = self.labelled_lines(spec_hash)
        body = [("" if index == 0 else "  ") + " ".join(shlex.quote(arg) for arg in line)
                + ("" if index == len(lines) - 1 else " \\") for index, line in enumerate(lines)]
        script = "\n".join(["#!/bin/sh",
                            "# Written by ascend-vllm-fleet (vllm_instance): a deploy replaces any edit.",
                            "# " + self.comment if self.comment else "#",
                            "# To re-create it by hand: %s rm -f %s && sh %s" % (lines[0][0], self.name, self.script),
                            "set -e"] + body) + "\n"
        return {self.script: (script, 0o750),
                self.env_file: ("VLLM_API_KEY=%s\n" % self.api_key, 0o600) if self.api_key else None}

    def files_differ(self, spec_hash):
        return any(read_text(path, None) != (want[0] if want else None) or
                   (want and os.stat(path).st_mode & 0o777 != want[1])
                   for path, want in self.files(spec_hash).items())

    def write_files(self, spec_hash):
        """Writes the script and the env file (or removes an env file no key needs); True when anything changed."""
        changed = False
        for path, want in self.files(spec_hash).items():
            if want is None:
                changed = remove(path) or changed
            elif read_text(path, None) != want[0] or os.stat(path).st_mode & 0o777 != want[1]:
                write_atomically(path, want[0], want[1])
                changed = True
        return changed

    def paths(self):
        return [self.script, self.env_file]

    def files_aside(self):
        """The files of the serving container moved to <file>.previous (replacing older ones)."""
        for path in self.paths():
            remove(path + ASIDE)
            if os.path.lexists(path):
                os.rename(path, path + ASIDE)

    def files_back(self):
        """The set-aside files put back in place of the replacement's; nothing when none was set aside."""
        if not os.path.lexists(self.script + ASIDE):
            return False
        for path in self.paths():
            remove(path)
            if os.path.lexists(path + ASIDE):
                os.rename(path + ASIDE, path)
        return True

    # --- changing --------------------------------------------------------------------------------------------
    def restore(self, state, replacement_failed):
        """Puts back what a replacement set aside, as it was (the container started, its files), removing the
        replacement; returns (changed, whether a set-aside container was put back). The one way back: after a
        replacement that does not serve (replacement_failed: it goes even when nothing was set aside), and at the
        start of a run that finds what an interrupted one set aside (then what runs as the instance stays unless a
        set-aside container takes its place)."""
        changed = False
        if state["current"] is not None and (state["aside"] is not None or replacement_failed):
            self.call("rm", "--force", "--", self.name)
            state["current"], changed = None, True
        changed = self.files_back() or changed
        if state["aside"] is None:
            return changed, False
        self.call("rename", self.aside_name, self.name)
        self.call("start", "--", self.name)
        state["current"], state["aside"] = dict(state["aside"], name="/" + self.name, running=True), None
        return True, True

    def commit(self):
        """The replacement serves: what was set aside for it is removed. True when anything was."""
        changed = False
        if self.inspect()["aside"] is not None:
            self.call("rm", "--force", "--", self.aside_name)
            changed = True
        for path in self.paths():
            changed = remove(path + ASIDE) or changed
        return changed

    def remove(self):
        """The instance is no longer planned: its containers and every file of it go. True when anything did."""
        state = self.inspect()
        changed = False
        for record in (state["current"], state["aside"]):
            if record is not None:
                self.call("rm", "--force", "--", record["name"].lstrip("/"))
                changed = True
        for path in self.paths():
            for candidate in (path, path + ASIDE):
                changed = remove(candidate) or changed
        return changed

    def replace(self, state, spec_hash):
        """Sets the serving container aside (stopped, freeing its port and chips) with its files, writes the new
        files and starts the new container. Returns (set_aside, error): error is why the new container could not
        start (its files and the set-aside container stay, for restore), or None.

        Until the serving container is renamed nothing has changed for its users: a failure then puts its files
        back, leaves it serving and raises Untouched."""
        previous = state["current"]
        try:
            self.files_aside()
            self.write_files(spec_hash)
            if previous is not None:
                self.call("rename", self.name, self.aside_name)
        except (DockerError, OSError) as error:
            self.files_back()
            raise Untouched(str(error)) from None
        state["aside"], state["current"] = previous, None
        try:
            if previous is not None and previous.get("running"):
                self.call("stop", "--", self.aside_name)
            self.call(*self.run_argv(spec_hash))
        except DockerError as error:
            return previous is not None, str(error)
        return previous is not None, None


def recorded_hash(script, label_prefix):
    """The config-hash label an instance's script (the text Instance.files writes) gives its container: the spec the
    deploy rendered. None when no line of it is that label (a script edited by hand)."""
    label = label_name(label_prefix, CONFIG_HASH_LABEL) + "="
    for line in script.splitlines():
        try:
            words = shlex.split(line[:-1] if line.endswith("\\") else line)
        except ValueError:  # a line no shell reads either (a quote edited away)
            continue
        if len(words) == 2 and words[0] == "--label" and words[1].startswith(label):
            return words[1][len(label):]
    return None


def apply(instance, check_mode):
    """The instance as its spec says: an interrupted run's set-aside container restored first, then kept, started
    or replaced. Returns the module's result: changed, action, set_aside, recovered, files_changed, error."""
    state = instance.inspect()
    recovered = state["aside"] is not None or os.path.lexists(instance.script + ASIDE)
    if recovered and not check_mode:
        instance.restore(state, replacement_failed=False)
    if recovered and check_mode:
        # What a real run decides once the set-aside container is back.
        state = {"current": dict(state["aside"], running=True) if state["aside"] else state["current"], "aside": None}
    spec_hash = instance.spec_hash()
    action = instance.decide(state["current"], spec_hash)
    result = dict(action=action, set_aside=False, recovered=recovered, files_changed=False, error=None)
    if check_mode:
        result["set_aside"] = action == "replace" and state["current"] is not None
        result["files_changed"] = action == "replace" or instance.files_differ(spec_hash)
        result["changed"] = recovered or action != "keep" or result["files_changed"]
        return result
    if action == "replace":
        try:
            result["set_aside"], result["error"] = instance.replace(state, spec_hash)
        except Untouched as error:
            result["action"], result["error"] = "failed", str(error)
        result["files_changed"] = result["action"] == "replace"
        result["changed"] = result["files_changed"] or recovered
        return result
    result["files_changed"] = instance.write_files(spec_hash)
    result["changed"] = result["files_changed"] or recovered
    if action == "start":
        try:
            instance.call("start", "--", instance.name)
        except DockerError as error:
            result["error"] = str(error)
        result["changed"] = True
    return result


def read_text(path, missing=""):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return missing


def remove(path):
    """Removes a file if it is there; True when it was."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def settle_file(path, found, text, mode, check_mode, before_write=None):
    """Makes the file at path hold text with mode, found being what it holds now (None: no file); before_write(path),
    when given, is called before a file that is there is written over (a backup). Returns (changed, what
    before_write returned or None). Check mode changes nothing and says what would change."""
    written = found != text
    kept = None
    if written and not check_mode:
        if before_write and os.path.isfile(path):
            kept = before_write(path)
        write_atomically(path, text, mode)
    wrong_mode = not written and (os.stat(path).st_mode & 0o7777) != mode
    if wrong_mode and not check_mode:
        os.chmod(path, mode)
    return written or wrong_mode, kept


def write_atomically(path, content, mode):
    """The file whole or not at all: written beside its place with its mode, then renamed over it."""
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(content)
        os.rename(temporary, path)
    except BaseException:
        remove(temporary)
        raise
