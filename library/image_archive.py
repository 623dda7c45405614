#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module image_archive: the fleet's images in one checked archive, saved, read back, and pushed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: image_archive
short_description: Save a fleet's images to one checked archive, and load it into a registry or hand out its images
description:
  - "The archive carries images to hosts that reach no registry holding them: an uncompressed tar of
    C(manifest.json) (each image's name, platform, image ID, member file, SHA256 and size), C(SHA256SUMS) (the
    SHA256 of every other member, as C(sha256sum) writes them) and one C(docker save) archive per image and
    platform under C(images/)."
  - "C(action=save) writes the archive of C(images), each by its image ID (pull them first, with
    M(ascend.fleet.docker_image_pull); a name holds one platform at a time, so an ID tells the platforms of one
    multi-arch name apart). The file is written beside C(path) and renamed over it when complete. An archive at
    C(path) that holds the same images (names, platforms and IDs) is left as it is."
  - C(action=verify) reads the whole archive and checks it. C(action=extract) does so while writing the
    C(docker save) files of C(images) into C(dest). C(action=push) does so while writing them into a folder
    beside the archive, then loads each into the Docker engine, tags it C(push_to) and pushes it; an image the
    registry already has under C(push_to) (the same image ID) is not pushed again. Images of several platforms
    under one C(push_to) are pushed each under C(push_to)-<os>-<arch> and joined under C(push_to) in a
    multi-platform manifest list (C(docker manifest)), as a multi-arch tag of quay.io is.
  - A damaged archive (cut short, a changed byte, a member missing, added or listed twice, a manifest that
    disagrees with C(SHA256SUMS)) is refused with its path and the member at fault, before any image of it is
    loaded, written or pushed.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  action:
    description: What to do with the archive.
    type: str
    required: true
    choices: [save, verify, extract, push]
  path:
    description: The archive, an absolute path on the machine the module runs on.
    type: path
    required: true
  images:
    description:
      - The images to save, extract or push. Each is C(name) (as the hosts run it), C(platform)
        (C(os/architecture)), and, for C(action=save), C(id), the local image ID of that platform; for
        C(action=push), C(push_to), the name to push it as.
      - For C(extract) and C(push), an image the archive does not hold fails the module, naming what it holds.
      - Not used by C(verify).
    type: list
    elements: dict
    default: []
  dest:
    description: For C(action=extract), the folder the C(docker save) files are written to, each under its
      member's base name.
    type: path
  insecure_registry:
    description:
      - For C(action=push), let C(docker manifest) (which reads the registry itself, not through the Docker
        engine) reach the registry over plain HTTP, as a site's internal registry often is. The engine's own
        pushes follow its C(insecure-registries) setting.
    type: bool
    default: false
  work_dir:
    description:
      - Where C(save) and C(push) write the images' C(docker save) files while they work (a folder of the run's own,
        removed when it ends); they need room for every image. Default the archive's folder, which an archive on
        read-only media does not allow.
    type: path
  docker:
    description: The Docker CLI to run.
    type: str
    default: docker
  timeout:
    description: Seconds one C(docker save), C(load) or C(push) of an image may take (0, no limit).
    type: int
    default: 3600
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Can run in check mode and report what it would do.
    support: full
    details: C(save) says whether the archive would be written; C(push) reads the archive whole and says which
      images the registry lacks; C(extract) checks the archive and writes nothing.
  diff_mode:
    description: Would show what the module changed.
    support: none
"""

EXAMPLES = r"""
# The images' IDs come from ascend.fleet.docker_image_pull run for each platform on this machine (image_id).
- name: Save the image, pulled for Kunpeng hosts, to the archive carried to the site
  ascend.fleet.image_archive:
    action: save
    path: /srv/carry/fleet-images.tar
    images:
      - name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
        platform: linux/arm64
        id: "{{ pulled.image_id }}"

- name: Check an archive that was carried
  ascend.fleet.image_archive:
    action: verify
    path: /srv/carry/fleet-images.tar

- name: Push it, at the site, into the registry the hosts pull from
  ascend.fleet.image_archive:
    action: push
    path: /srv/carry/fleet-images.tar
    insecure_registry: true
    images:
      - name: quay.io/ascend/vllm-ascend:v0.18.0rc1-310p
        platform: linux/arm64
        push_to: registry.site.internal:5000/ascend/vllm-ascend:v0.18.0rc1-310p
"""

RETURN = r"""
images:
  description: The archive's images (for C(extract) and C(push), those asked for), each with C(name),
    C(platform), C(id), C(file) (its member), C(sha256) and C(size) (bytes of its C(docker save) file); with
    C(extract) also C(extracted), the written file; with C(push) also C(push_to) and C(pushed) (false when the
    registry had it already).
  returned: success
  type: list
  elements: dict
  sample: [{"name": "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p", "platform": "linux/arm64",
            "id": "sha256:0f4a2e6c...", "file": "images/quay.io_ascend_vllm-ascend_v0.18.0rc1-310p_linux-arm64.tar",
            "sha256": "9c3e...", "size": 21474836480}]
msg:
  description: What was done, or would be (check mode), or why the module failed and how to fix it.
  returned: always
  type: str
  sample: "saved 1 image to /srv/carry/fleet-images.tar (20.0 GiB)"
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils import image_archive
from ansible_collections.ascend.fleet.plugins.module_utils.docker_cli import run_docker
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure

FIELDS = {"save": ("name", "platform", "id"), "extract": ("name", "platform"), "push": ("name", "platform", "push_to"),
          "verify": ()}


PUSH_FIX = ("check that this machine reaches the registry of %s and may push there (`docker login` to it for one "
            "that needs an account; a registry over plain HTTP in the Docker engine's insecure-registries, and "
            "insecure_registry set); when it reaches the registry by another address than the hosts do, push there "
            "(ascend-vllm-fleet images load --registry ADDRESS)")


class ArchiveError(Exception):
    """The archive's work could not be done; the message says why and how to fix it."""


def check_options(params, check_mode):
    # In check mode a save's images may have no ID: pulls that would be needed have made none.
    needed = [field for field in FIELDS[params["action"]] if not (check_mode and field == "id")]
    for number, image in enumerate(params["images"], 1):
        missing = [field for field in needed if not isinstance(image.get(field), str) or not image.get(field)]
        if missing:
            raise OptionError("images[%d] (%s): %s missing: expected %s for action=%s. Fix: give each image %s"
                              % (number, json.dumps(image, sort_keys=True)[:200], ", ".join(missing),
                                 ", ".join(needed), params["action"], " and ".join(needed)))
    keys = [image_archive.key(image) for image in params["images"]]
    if len(set(keys)) != len(keys):
        raise OptionError("images: an image is named twice for one platform (%s). Fix: list each name and platform "
                          "once" % ", ".join("%s %s" % pair for pair in keys if keys.count(pair) > 1))
    if params["action"] == "extract" and not params["dest"]:
        raise OptionError("dest: missing: action=extract writes the images' files into it. Fix: give a folder")
    if params["timeout"] < 0:
        raise OptionError("timeout: %d is not allowed: expected seconds, 0 or more. Fix: correct it"
                          % params["timeout"])


def docker(params, *args, **kwargs):
    """stdout of a Docker CLI call that must succeed; ArchiveError with its output and fix otherwise (fix: what
    to do, else to check the Docker engine)."""
    fix = kwargs.pop("fix", "check the Docker engine on this machine (`docker info`) and its free disk")
    code, out, err = run_docker(params["docker"], *args, **kwargs)
    if code != 0:
        ended = "exit code %s" % code if code is not None else "timeout"
        raise ArchiveError("`%s %s` failed (%s): %s. Fix: %s"
                           % (params["docker"], " ".join(args), ended, (err or out).strip()[-600:], fix))
    return out


def work_folder(params, prefix):
    """A folder of this run's own for the images' files (removed by the caller), in work_dir or beside the
    archive."""
    parent = params["work_dir"] or os.path.dirname(params["path"])
    try:
        return tempfile.mkdtemp(prefix=prefix, dir=parent)
    except OSError as error:
        raise ArchiveError("no working folder could be made in %s: %s. Fix: set work_dir (vllm_image_archive_work_dir) "
                           "to a folder this run may write in, with room for the images" % (
                               parent, error.strerror or error)) from None


def size_text(size):
    return "%.1f GiB" % (size / 1024.0 ** 3) if size >= 1024 ** 3 else "%.0f MiB" % (size / 1024.0 ** 2)


def archive_call(function, *args):
    """function(*args) of module_utils/image_archive, its missing archive an ArchiveError."""
    try:
        return function(*args)
    except image_archive.ArchiveNotFound as error:
        raise ArchiveError(str(error)) from None


def held(path, images, wanted):
    """The archive's entries of the images wanted, in their order; ArchiveError naming what it holds otherwise."""
    entries = {image_archive.key(entry): entry for entry in images}
    missing = [image_archive.key(image) for image in wanted if image_archive.key(image) not in entries]
    if missing:
        raise ArchiveError("image archive %s does not hold %s; it holds %s. Fix: save an archive of this fleet's "
                           "images (ascend-vllm-fleet images save, with the same inventory and settings)" % (
                               path, ", ".join("%s for %s" % pair for pair in missing),
                               ", ".join("%s for %s" % image_archive.key(entry) for entry in images) or "no image"))
    return [dict(entries[image_archive.key(image)], **image) for image in wanted]


def save(module):
    params, path = module.params, module.params["path"]
    wanted = [(image["name"], image["platform"], image.get("id") or "") for image in params["images"]]
    if os.path.exists(path):
        try:
            images = image_archive.read(path)[0]
        except image_archive.ArchiveDamaged:
            images = None
        if images is not None and sorted((entry["name"], entry["platform"], entry["id"]) for entry in images) \
                == sorted(wanted):
            return dict(changed=False, images=images, msg="%s holds these images already" % path)
    if not os.path.isdir(os.path.dirname(path)):
        raise ArchiveError("%s: its folder does not exist. Fix: create it, or save the archive elsewhere" % path)
    if module.check_mode:
        return dict(changed=True, images=[], msg="would save %d image(s) to %s" % (len(wanted), path))
    staging = work_folder(params, ".save-")
    try:
        saved = []
        for number, (name, platform, image_id) in enumerate(wanted):
            # The ID, not the name: the name holds the platform pulled last. Tagged first, so that the saved
            # archive names the image (a `docker save` of an ID loads untagged).
            docker(params, "tag", image_id, name)
            file = os.path.join(staging, "%d.tar" % number)
            docker(params, "save", "--output", file, "--", name, timeout=params["timeout"])
            saved.append({"name": name, "platform": platform, "id": image_id, "saved": file})
        images = image_archive.write(path, saved)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    total = sum(entry["size"] for entry in images)
    return dict(changed=True, images=images,
                msg="saved %d image(s) to %s (%s)" % (len(images), path, size_text(total)))


def extract(module):
    params, path = module.params, module.params["path"]
    entries = held(path, archive_call(image_archive.peek, path), params["images"])
    keys = [] if module.check_mode else [image_archive.key(entry) for entry in entries]
    # Every member is checked; the files of a damaged archive are removed again, so nothing of it is loaded.
    written = archive_call(image_archive.read, path, keys, params["dest"])[1]
    if module.check_mode:
        return dict(changed=False, images=entries, msg="%s is sound; would write %d image file(s) to %s"
                    % (path, len(entries), params["dest"]))
    for entry in entries:
        entry["extracted"] = written[image_archive.key(entry)]
    return dict(changed=True, images=entries, msg="wrote %d image file(s) of %s to %s"
                % (len(entries), path, params["dest"]))


def registry_manifest(params, name):
    """The manifest (or manifest list) the registry holds under name, None when it holds none or cannot be read
    (then the image is pushed)."""
    args = ["manifest", "inspect"] + (["--insecure"] if params["insecure_registry"] else []) + [name]
    code, out = run_docker(params["docker"], *args)[:2]
    try:
        manifest = json.loads(out) if code == 0 else None
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


def push(module):
    params, path = module.params, module.params["path"]
    entries = held(path, archive_call(image_archive.peek, path), params["images"])
    by_target = {}
    for entry in entries:
        by_target.setdefault(entry["push_to"], []).append(entry)
    for target, group in by_target.items():
        for entry in group:
            # One platform goes under the target itself; several each under a tag of their own, joined after.
            entry["pushed_as"] = target if len(group) == 1 else "%s-%s" % (target, entry["platform"].replace("/", "-"))
            # A manifest's config digest is the image's ID.
            entry["pushed"] = ((registry_manifest(params, entry["pushed_as"]) or {}).get("config") or {}).get(
                "digest") != entry["id"]
    lists = [target for target, group in by_target.items() if len(group) > 1 and (
        any(entry["pushed"] for entry in group) or "manifests" not in (registry_manifest(params, target) or {}))]
    needed = [entry for entry in entries if entry["pushed"]]
    staging = work_folder(params, ".push-")
    try:
        # Every member is checked before anything is loaded, whatever is needed.
        keys = [] if module.check_mode else [image_archive.key(entry) for entry in needed]
        written = archive_call(image_archive.read, path, keys, staging)[1]
        if module.check_mode or not (needed or lists):
            return dict(changed=bool(needed or lists), images=entries, msg="%s is sound; %s" % (
                path, "would push %s" % ", ".join(entry["pushed_as"] for entry in needed) if needed else
                "would join %s" % ", ".join(lists) if lists else "the registry holds every image already"))
        for entry in needed:
            docker(params, "load", "--input", written[image_archive.key(entry)], timeout=params["timeout"])
            os.unlink(written[image_archive.key(entry)])
            docker(params, "tag", entry["id"], entry["pushed_as"])
            docker(params, "push", entry["pushed_as"], timeout=params["timeout"], fix=PUSH_FIX % entry["pushed_as"])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    insecure = ["--insecure"] if params["insecure_registry"] else []
    for target in lists:
        docker(params, "manifest", "create", "--amend", *(insecure + [target] + [
            entry["pushed_as"] for entry in by_target[target]]), fix=PUSH_FIX % target)
        docker(params, "manifest", "push", "--purge", *(insecure + [target]), fix=PUSH_FIX % target)
    return dict(changed=True, images=entries, msg="pushed %s%s" % (
        ", ".join(entry["pushed_as"] for entry in needed) or "no image",
        "; joined %s" % ", ".join(lists) if lists else ""))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type="str", required=True, choices=["save", "verify", "extract", "push"]),
            path=dict(type="path", required=True),
            images=dict(type="list", elements="dict", default=[]),
            dest=dict(type="path"),
            insecure_registry=dict(type="bool", default=False),
            docker=dict(type="str", default="docker"),
            timeout=dict(type="int", default=3600),
            work_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        check_options(params, module.check_mode)
        if params["action"] == "verify":
            images = archive_call(image_archive.read, params["path"])[0]
            result = dict(changed=False, images=images, msg="%s is sound: %d image(s)" % (params["path"], len(images)))
        else:
            result = {"save": save, "extract": extract, "push": push}[params["action"]](module)
    except (ArchiveError, image_archive.ArchiveDamaged, image_archive.ArchiveUnusable, OptionError, ValueError) \
            as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still names the archive, not a traceback
        module.fail_json(msg=unexpected_failure("%s of image archive %s" % (params["action"], params["path"]), error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
