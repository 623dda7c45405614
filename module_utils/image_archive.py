# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's image archive: the images a fleet needs, carried to a site whose hosts reach no registry that has
them, in one file that says what it holds and proves it arrived whole.

An archive is an uncompressed tar of, in this order:

- ``manifest.json``: ``{"format": FORMAT, "version": 1, "images": [{"name", "platform", "file", "sha256", "size",
  "id"}]}``: each image by the name the hosts run it by, for one platform (os/architecture), the member holding its
  ``docker save`` archive, that member's SHA256 and size, and the image's ID;
- ``SHA256SUMS``: the SHA256 of every other member, as ``sha256sum`` writes them (``sha256sum -c SHA256SUMS`` after
  ``tar -xf`` checks them by hand);
- ``images/<name>_<os>-<arch>.tar``: one ``docker save`` archive per image and platform (``docker save`` keeps one
  platform of a name).

Reading an archive checks it whole before any of it is used: every member listed and no other, each member's
checksum, the manifest's own sums agreeing with SHA256SUMS. A damaged archive (cut short, a flipped byte, a member
missing or added) is refused with its path and the member at fault.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile

FORMAT = "ascend-vllm-fleet image archive"
VERSION = 1
MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
IMAGES = "images/"
CHUNK = 1 << 20
# manifest.json and SHA256SUMS are read whole: a few KB for any fleet, so anything near this is no archive of ours.
LISTING_MAX = 1 << 20
_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](\S.*)$")


class ArchiveNotFound(Exception):
    """The archive's path names no file."""


class ArchiveUnusable(Exception):
    """The archive cannot be read, or its images cannot be written, for a reason that is not its damage (a folder,
    no permission, a full disk); the message names the path and the fix."""


class ArchiveDamaged(Exception):
    """The archive cannot be trusted; the message names it, the member at fault and how to get a sound one."""

    def __init__(self, path, why):
        super(ArchiveDamaged, self).__init__(
            "image archive %s is damaged: %s. Nothing of it was used. Fix: copy the archive again from where it was "
            "saved (compare `sha256sum` of both copies), or save it again (ascend-vllm-fleet images save)"
            % (path, why))


def member_file(name, platform):
    """The member holding `name` for `platform`: images/<name with / and : made _>_<os>-<arch>.tar."""
    return "%s%s_%s.tar" % (IMAGES, re.sub(r"[^A-Za-z0-9._-]", "_", name), platform.replace("/", "-"))


def key(entry):
    """What identifies an image of an archive: its name and platform."""
    return entry["name"], entry["platform"]


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _add_bytes(archive, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    archive.addfile(info, io.BytesIO(data))


def write(path, images):
    """Write the archive of images ([{name, platform, id, saved: the `docker save` file}]) to path, whole or not at
    all: a file beside it, renamed over path once complete. Returns the manifest's image entries."""
    entries = []
    for image in images:
        file = member_file(image["name"], image["platform"])
        if any(entry["file"] == file for entry in entries):
            raise ValueError("%s for %s and an earlier image would both be archived as %s: give one of them another "
                             "name" % (image["name"], image["platform"], file))
        entries.append({"name": image["name"], "platform": image["platform"], "id": image["id"], "file": file,
                        "sha256": sha256_file(image["saved"]), "size": os.path.getsize(image["saved"])})
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "images": entries}, indent=1).encode()
    sums = "".join("%s  %s\n" % (digest, member) for member, digest in
                   [(MANIFEST, hashlib.sha256(manifest).hexdigest())]
                   + [(entry["file"], entry["sha256"]) for entry in entries]).encode()
    folder = os.path.dirname(os.path.abspath(path))
    handle, partial = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".partial", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream, tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) \
                as archive:
            _add_bytes(archive, MANIFEST, manifest)
            _add_bytes(archive, SUMS, sums)
            for image, entry in zip(images, entries):
                info = archive.gettarinfo(image["saved"], arcname=entry["file"])
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o644
                with open(image["saved"], "rb") as member:
                    archive.addfile(info, member)
            stream.flush()
            os.fsync(stream.fileno())  # on disk before it takes the archive's name
        os.chmod(partial, 0o644)
        os.rename(partial, path)
    except BaseException:
        os.unlink(partial)
        raise
    return entries


def _listing(path, archive, info):
    """The bytes of manifest.json or SHA256SUMS, read whole once their size is a listing's."""
    if info.size > LISTING_MAX:
        raise ArchiveDamaged(path, "member %s is %d bytes, more than a listing of images can be"
                             % (info.name, info.size))
    return archive.extractfile(info).read()


def _parse_manifest(path, data):
    try:
        manifest = json.loads(data.decode("utf-8"))
    except ValueError as error:
        raise ArchiveDamaged(path, "%s is not JSON (%s)" % (MANIFEST, error)) from None
    if not (isinstance(manifest, dict) and manifest.get("format") == FORMAT):
        raise ArchiveDamaged(path, "%s does not describe an image archive of this collection (no format %r)"
                             % (MANIFEST, FORMAT))
    if manifest.get("version") != VERSION:
        raise ArchiveDamaged(path, "%s is of version %r; this collection reads version %d"
                             % (MANIFEST, manifest.get("version"), VERSION))
    images = manifest.get("images")
    fields = ("name", "platform", "file", "sha256", "size", "id")
    if not (isinstance(images, list) and all(isinstance(entry, dict) and all(field in entry for field in fields)
                                             for entry in images)):
        raise ArchiveDamaged(path, "%s's images are not a list of %s" % (MANIFEST, ", ".join(fields)))
    for entry in images:
        # Each image's member is named by its name and platform: no other file of the archive is loaded as it.
        if entry["file"] != member_file(entry["name"], entry["platform"]):
            raise ArchiveDamaged(path, "%s gives %s for %s %s, whose member is %s" % (
                MANIFEST, entry["file"], entry["name"], entry["platform"],
                member_file(entry["name"], entry["platform"])))
    return images


def _parse_sums(path, data):
    sums = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        matched = _SUM_LINE.match(line)
        if not matched:
            raise ArchiveDamaged(path, "%s line %d is not `<sha256>  <member>`: %r" % (SUMS, number, line[:120]))
        sums[matched.group(2)] = matched.group(1)
    return sums


def peek(path):
    """The image entries of the archive's manifest, read from its first member alone: what the archive says it
    holds, before `read` checks that it does."""
    archive = _open(path)
    with archive:
        try:
            info = archive.next()
            if info is None or info.name != MANIFEST or not info.isfile():
                raise ArchiveDamaged(path, "it does not begin with %s" % MANIFEST)
            return _parse_manifest(path, _listing(path, archive, info))
        except (tarfile.TarError, EOFError) as error:
            raise ArchiveDamaged(path, "it breaks in its first member (%s)" % error) from None


def read(path, extract=None, dest=None):
    """The image entries of the archive at path, once every member is checked; ArchiveDamaged otherwise.

    extract: keys (name, platform) of images whose `docker save` file is written into the folder dest, each as
    its member's base name; returned as {key: file}. Those files are removed again when the archive turns out
    damaged, so that nothing of a damaged archive is used."""
    extract, written = set(extract or ()), {}
    try:
        return _read(path, extract, dest, written), written
    except BaseException:
        for file in written.values():
            if os.path.isfile(file):
                os.unlink(file)
        raise


def _open(path):
    if not os.path.exists(path):
        raise ArchiveNotFound("image archive %s does not exist. Fix: give the path of the archive `ascend-vllm-"
                              "fleet images save` wrote" % path)
    try:
        return tarfile.open(path, mode="r:")
    except tarfile.TarError as error:
        raise ArchiveDamaged(path, "it is not a tar archive (%s)" % error) from None
    except OSError as error:
        raise ArchiveUnusable("image archive %s cannot be read: %s. Fix: give the path of the archive file, readable "
                              "by the user the run reads it as" % (path, error.strerror or error)) from None


def _read(path, extract, dest, written):
    archive = _open(path)
    seen, images, sums, last = set(), None, None, None
    with archive:
        try:
            for info in archive:
                member = last = info.name
                if member in seen:
                    raise ArchiveDamaged(path, "member %s appears twice" % member)
                seen.add(member)
                if not info.isfile():
                    raise ArchiveDamaged(path, "member %s is not a file" % member)
                if member == MANIFEST and not seen - {MANIFEST}:
                    images = _parse_manifest(path, _listing(path, archive, info))
                    continue
                if member == SUMS and images is not None and len(seen) == 2:
                    sums = _parse_sums(path, _listing(path, archive, info))
                    _check_listing(path, images, sums)
                    continue
                if sums is None:
                    raise ArchiveDamaged(path, "it does not begin with %s and %s (found %s first)"
                                         % (MANIFEST, SUMS, member))
                if member not in sums:
                    raise ArchiveDamaged(path, "member %s is not in %s" % (member, SUMS))
                entry = next((image for image in images if image["file"] == member), None)
                target = os.path.join(dest, os.path.basename(member)) \
                    if entry is not None and key(entry) in extract else None
                if target:
                    written[key(entry)] = target  # before the first byte: removed with the others if damaged
                digest = _copy_hashing(path, archive, info, target)
                if digest != sums[member]:
                    raise ArchiveDamaged(path, "member %s has SHA256 %s, %s says %s"
                                         % (member, digest, SUMS, sums[member]))
        except (tarfile.TarError, EOFError, OSError) as error:
            if isinstance(error, OSError) and error.filename and error.filename != path:
                raise
            raise ArchiveDamaged(path, "it ends or breaks %s (%s)" % (
                "in or after member " + last if last else "at its start", error or "cut short")) from None
    if sums is None:
        raise ArchiveDamaged(path, "it does not begin with %s and %s" % (MANIFEST, SUMS))
    missing = sorted(set(sums) - seen)
    if missing:
        raise ArchiveDamaged(path, "member%s %s listed in %s %s missing (the archive was cut short?)" % (
            "s" if len(missing) > 1 else "", ", ".join(missing), SUMS, "are" if len(missing) > 1 else "is"))
    return images


def _check_listing(path, images, sums):
    """The manifest's images and SHA256SUMS must agree: one member per image, the same sums, nothing else."""
    listed = {entry["file"]: entry["sha256"] for entry in images}
    if set(listed) | {MANIFEST} != set(sums):
        raise ArchiveDamaged(path, "%s lists %s, %s lists %s"
                             % (MANIFEST, sorted(listed), SUMS, sorted(set(sums) - {MANIFEST})))
    for member, digest in listed.items():
        if sums[member] != digest:
            raise ArchiveDamaged(path, "%s and %s disagree on the SHA256 of %s" % (MANIFEST, SUMS, member))
    if len({key(entry) for entry in images}) != len(images):
        raise ArchiveDamaged(path, "%s lists an image twice for one platform" % MANIFEST)


def _copy_hashing(path, archive, info, target):
    """The SHA256 of a member, read whole; written to target on the way when target is given."""
    digest, size = hashlib.sha256(), 0
    source = archive.extractfile(info)
    out = _writing(target, info.size, lambda: open(target, "wb")) if target else None
    try:
        for block in iter(lambda: source.read(CHUNK), b""):
            digest.update(block)
            size += len(block)
            if out:
                _writing(target, info.size, functools.partial(out.write, block))
    finally:
        if out:
            _writing(target, info.size, out.close)
    if size != info.size:
        raise ArchiveDamaged(path, "member %s is cut short (%d of %d bytes)" % (info.name, size, info.size))
    return digest.hexdigest()


def _writing(target, size, write):
    """write(), its failure (a full disk, a folder without permission) ArchiveUnusable naming target."""
    try:
        return write()
    except OSError as error:
        raise ArchiveUnusable("the image file %s could not be written: %s. Fix: free space there (this image needs "
                              "%d bytes), or give the images a working folder with room that the run may write in"
                              % (target, error.strerror or error, size)) from None
