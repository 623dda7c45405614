"""The release table (roles/fleet/files/vllm_ascend_releases.yml) and its one reader: which vLLM-Ascend release an
image is, what that release needs on 310P, and whether it may serve this fleet's model at all.

The table is data the controller, the twin and the tests read alike; nothing else restates a release's flags or
defects. An image whose tag is not in the table runs with the table's conservative settings, with a warning.
"""
import copy
import os
import re

import yaml

from ansible_collections.ascend.fleet.plugins.plugin_utils.versions import version_key as driver_version_key

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                     "roles", "fleet", "files", "vllm_ascend_releases.yml")
# The path operators read in messages, the same in a checkout and in an installed collection.
TABLE_NAME = "roles/fleet/files/vllm_ascend_releases.yml"

# v0.18.0rc1, v0.18.0, v0.23.0.post1: vLLM-Ascend's versions; the tag adds -310p and, for the openEuler build,
# -openeuler (quay.io/ascend/vllm-ascend).
VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(?:rc(\d+))?(?:\.post(\d+))?$")
TAG = re.compile(r"^(?P<version>v[0-9][0-9a-z.]*)-310p(?:-(?P<variant>openeuler))?$")
MODES = ("eager", "graph")
# What a defect kills: every request that carries an image, or those whose image is larger than its
# `above_pixels`. Either breaks a vision-language model, the one this collection serves.
KILLS = ("image_requests", "large_image_requests")
FIELDS = {"released": str, "vllm": str, "cann": str, "driver_min": str, "python": str, "mode": str,
          "compilation_config": dict, "additional_config": dict,
          "dtype": str, "shm_size": str, "env": dict, "env_unsupported": dict,
          "defects": list, "sources": list}
DEFECT_FIELDS = {"issue": str, "summary": str, "kills": str, "fixed_in": (str, type(None)), "log": list}


class ReleaseTableError(ValueError):
    """The table (or a setting read with it) is not what the reader expects; the message says where and how."""


def release_key(version):
    """Release order: 0.18.0rc1 < 0.18.0 < 0.18.0.post1 < 0.18.1rc1."""
    found = VERSION.match(str(version))
    if not found:
        raise ReleaseTableError("%r is no vLLM-Ascend version: expected v<major>.<minor>.<patch>[rcN][.postN], "
                                "such as v0.18.0rc1" % (version,))
    major, minor, patch, rc, post = found.groups()
    return (int(major), int(minor), int(patch), int(rc) if rc else 10 ** 6, int(post or 0))


def image_tag(image):
    """The tag of an image name (registry:5000/ascend/vllm-ascend:v0.18.0-310p -> v0.18.0-310p); "" without one."""
    name = str(image).split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


def load(path=TABLE):
    """The table as {version: entry}, each entry checked; its `unknown` entry is the conservative settings."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        raise ReleaseTableError("%s: cannot be read (%s)" % (TABLE_NAME, error)) from None
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise ReleaseTableError("%s: expected a mapping with `releases` (version: entry)" % TABLE_NAME)
    releases = {}
    for version, entry in data["releases"].items():
        release_key(version)
        releases[version] = _checked(version, entry)
    if data.get("unknown") not in releases:
        raise ReleaseTableError("%s: `unknown` is %r: expected the version whose settings an image not in the "
                                "table gets, one of %s" % (TABLE_NAME, data.get("unknown"), ", ".join(releases)))
    return {"releases": releases, "unknown": data["unknown"]}


def _checked(version, entry):
    where = "%s: release %s" % (TABLE_NAME, version)
    if not isinstance(entry, dict) or set(entry) != set(FIELDS):
        raise ReleaseTableError("%s: expected exactly the fields %s; missing %s, unknown %s" % (
            where, ", ".join(sorted(FIELDS)), sorted(set(FIELDS) - set(entry or {})),
            sorted(set(entry or {}) - set(FIELDS))))
    for field, kind in FIELDS.items():
        if not isinstance(entry[field], kind):
            raise ReleaseTableError("%s: %s is %r: expected a %s" % (where, field, entry[field], kind.__name__))
    if entry["mode"] not in MODES:
        raise ReleaseTableError("%s: mode is %r: expected one of %s" % (where, entry["mode"], ", ".join(MODES)))
    if (entry["mode"] == "graph") != bool(entry["compilation_config"]):
        raise ReleaseTableError("%s: graph mode needs a compilation_config, eager mode has none" % where)
    for defect in entry["defects"]:
        if not isinstance(defect, dict) or set(defect) - {"above_pixels"} != set(DEFECT_FIELDS):
            raise ReleaseTableError("%s: a defect needs exactly %s (and above_pixels for large_image_requests): %r"
                                    % (where, ", ".join(sorted(DEFECT_FIELDS)), defect))
        if defect["kills"] not in KILLS:
            raise ReleaseTableError("%s: defect %s kills %r: expected one of %s" % (
                where, defect["issue"], defect["kills"], ", ".join(KILLS)))
        if (defect["kills"] == "large_image_requests") != isinstance(defect.get("above_pixels"), int):
            raise ReleaseTableError("%s: defect %s: above_pixels (a number) goes with large_image_requests only"
                                    % (where, defect["issue"]))
    return entry


def release_for(image, table, release_as="", accepted_defects=(), driver_version=""):
    """What the table says of an image: its entry's fields with the tag, version, variant, `known`, the defects
    not accepted (`refused`), and two sentences, `refusal` (why the image may not serve, "" when it may) and
    `warning` (why its settings are a guess, "" when they are the table's)."""
    tag = image_tag(image)
    found = TAG.match(tag)
    version = release_as or (found.group("version") if found else "")
    known = version in table["releases"]
    if release_as and not known:
        raise ReleaseTableError("fleet_image_release is %r: expected a version of %s (%s), or \"\" to read it from "
                                "the image's tag" % (release_as, TABLE_NAME, ", ".join(table["releases"])))
    entry = copy.deepcopy(table["releases"][version if known else table["unknown"]])
    entry.update(tag=tag, version=version if known else "", known=known,
                 variant=(found.group("variant") or "ubuntu") if found else "")
    # What the server renders from it (vllm_server's defaults read these).
    entry["server"] = {"enforce_eager": entry["mode"] == "eager", "compilation_config": entry["compilation_config"],
                       "additional_config": entry["additional_config"], "dtype": entry["dtype"],
                       "shm_size": entry["shm_size"], "env": entry["env"]}
    entry["warning"] = "" if known else (
        "%s is not in the release table (%s): it runs with the settings of %s, the conservative ones (%s mode, "
        "%s). Fix: if it is a build of a release the table knows (a site's own rebuild or mirror), set "
        "fleet_image_release to that version; otherwise check its flags by hand before a roll." % (
            image, TABLE_NAME, table["unknown"], entry["mode"], entry["dtype"]))
    accepted = set(accepted_defects)
    entry["refused"] = [defect for defect in entry["defects"] if known and defect["issue"] not in accepted]
    reasons = ["%s (%s%s)" % (defect["issue"], defect["summary"],
                              "; fixed in %s" % defect["fixed_in"] if defect["fixed_in"] else "; not fixed yet")
               for defect in entry["refused"]]
    if reasons:
        entry["refusal"] = (
            "%s is vLLM-Ascend %s, which the release table (%s) marks as broken for this fleet's vision-language "
            "model: %s. %s Fix: set fleet_image_version to a good release, or, knowing the risk, list the defect "
            "in fleet_image_accept_defects (%s); the canary still sends the requests it kills." % (
                image, version, TABLE_NAME, "; ".join(reasons), nearest_good(version, table),
                ", ".join(defect["issue"] for defect in entry["refused"])))
    elif known and driver_version and driver_version_key(driver_version) < driver_version_key(entry["driver_min"]):
        entry["refusal"] = (
            "%s is vLLM-Ascend %s (CANN %s), which needs NPU driver %s or later; the fleet's release is "
            "fleet_driver_version %s. Fix: raise fleet_driver_version and fleet_firmware_version to a release "
            "of %s or later (playbooks/driver.yml installs it), or set fleet_image_version to a release the "
            "driver runs." % (image, version, entry["cann"], entry["driver_min"], driver_version,
                              entry["driver_min"]))
    else:
        entry["refusal"] = ""
    return entry


def nearest_good(version, table):
    """A sentence naming the releases without defects closest to version, older and newer."""
    good = sorted((name for name, entry in table["releases"].items() if not entry["defects"]), key=release_key)
    older = [name for name in good if release_key(name) < release_key(version)]
    newer = [name for name in good if release_key(name) > release_key(version)]
    named = (["%s (older)" % older[-1]] if older else []) + (["%s (newer)" % newer[0]] if newer else [])
    return ("The nearest good releases: %s." % ", ".join(named)) if named else "The table has no good release."
