"""module_utils/image_archive.py: an archive read back is what was written, and one damaged in any way an archive
carried between sites gets damaged (cut short anywhere, a byte changed, a member missing, added or twice, a manifest
that disagrees with its sums) is refused with its path and the member at fault, leaving no file of it behind."""
import hashlib
import io
import json
import os
import subprocess
import tarfile

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import image_archive as archive

NAME = "quay.io/ascend/vllm-ascend:v0.18.0rc1-310p"
ARM, AMD = (NAME, "linux/arm64"), (NAME, "linux/amd64")


def saved_images(folder):
    """Two `docker save` stand-ins, one per platform of one name."""
    images = []
    for number, (name, platform) in enumerate((ARM, AMD)):
        saved = folder / ("saved-%d.tar" % number)
        saved.write_bytes(os.urandom(200000 + number))
        images.append({"name": name, "platform": platform, "id": "sha256:%064d" % number, "saved": str(saved)})
    return images


@pytest.fixture
def written(tmp_path):
    images = saved_images(tmp_path)
    path = tmp_path / "fleet-images.tar"
    return path, archive.write(str(path), images), images


def members(path):
    """[(name, bytes)] of a tar, in order."""
    with tarfile.open(str(path)) as tar:
        return [(info.name, tar.extractfile(info).read()) for info in tar]


def retar(path, parts):
    """A tar of parts [(name, bytes)] at path, as a tool that rebuilt the archive would leave it."""
    with tarfile.open(str(path), "w") as tar:
        for name, data in parts:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def refused(path, *fragments, extract=(), dest=None):
    with pytest.raises(archive.ArchiveDamaged) as caught:
        archive.read(str(path), extract, dest)
    message = str(caught.value)
    assert message.startswith("image archive %s is damaged: " % path), message
    assert "Nothing of it was used" in message and "Fix: " in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_an_archive_reads_back_what_was_written_and_sha256sum_checks_it(written, tmp_path):
    path, entries, images = written
    assert [archive.key(entry) for entry in entries] == [ARM, AMD]
    assert archive.peek(str(path)) == entries
    found, files = archive.read(str(path), [AMD], str(tmp_path))
    assert found == entries and list(files) == [AMD]
    assert open(files[AMD], "rb").read() == open(images[1]["saved"], "rb").read()
    assert os.path.basename(files[AMD]) == "quay.io_ascend_vllm-ascend_v0.18.0rc1-310p_linux-amd64.tar"
    # By hand, as the archive's docstring says: tar -xf, then sha256sum -c SHA256SUMS.
    unpacked = tmp_path / "unpacked"
    with tarfile.open(str(path)) as tar:
        tar.extractall(str(unpacked))
    checked = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=str(unpacked), stdout=subprocess.PIPE,
                             universal_newlines=True)
    assert checked.returncode == 0 and checked.stdout.count(": OK") == 3, checked.stdout
    assert [name for name, _ in members(path)][:2] == ["manifest.json", "SHA256SUMS"]
    assert oct(os.stat(str(path)).st_mode & 0o777) == "0o644"


def test_a_write_that_fails_leaves_the_previous_archive_and_no_partial_file(written, tmp_path, monkeypatch):
    """The second image fails half-way into the tar (a full disk, say): the archive there before is untouched."""
    path, entries, images = written
    before = path.read_bytes()
    added = []

    def add_then_fail(self, info, fileobj=None):
        added.append(info.name)
        if len(added) == 4:
            raise OSError(28, "No space left on device")
        return original(self, info, fileobj)

    original = tarfile.TarFile.addfile
    monkeypatch.setattr(tarfile.TarFile, "addfile", add_then_fail)
    with pytest.raises(OSError, match="No space left"):
        archive.write(str(path), images)
    assert added[:3] == ["manifest.json", "SHA256SUMS", entries[0]["file"]]
    assert path.read_bytes() == before
    assert sorted(os.listdir(str(tmp_path))) == ["fleet-images.tar", "saved-0.tar", "saved-1.tar"]


def test_two_images_archived_under_one_member_name_are_refused_before_writing(tmp_path):
    first, second = tmp_path / "1.tar", tmp_path / "2.tar"
    first.write_bytes(b"1")
    second.write_bytes(b"2")
    with pytest.raises(ValueError, match="would both be archived as images/r_a_b_t_linux-arm64.tar"):
        archive.write(str(tmp_path / "a.tar"), [
            {"name": "r/a/b:t", "platform": "linux/arm64", "id": "sha256:1", "saved": str(first)},
            {"name": "r/a_b:t", "platform": "linux/arm64", "id": "sha256:2", "saved": str(second)}])
    assert not (tmp_path / "a.tar").exists()


@pytest.mark.parametrize("cut", [100, 700, 1500, 3000, 200000, -100000, -1])
def test_an_archive_cut_short_anywhere_is_refused(written, tmp_path, cut):
    """Cut in a header, in the manifest, in a member's data, or one byte before the last member ends (what follows
    it is the tar's zero padding, which tar itself does without)."""
    path, _, _ = written
    with tarfile.open(str(path)) as tar:
        last = tar.getmembers()[-1]
    end = last.offset_data + last.size
    data = path.read_bytes()
    short = tmp_path / "short.tar"
    short.write_bytes(data[:cut if cut > 0 else end + cut])
    message = refused(short)
    assert "cut short" in message or "ends or breaks" in message or "missing" in message or "does not begin" \
        in message or "not JSON" in message or "not a tar" in message


def test_a_changed_byte_in_an_image_names_the_member_and_both_sums(written, tmp_path):
    path, entries, _ = written
    parts = members(path)
    name, data = parts[2]
    parts[2] = (name, data[:5000] + bytes([data[5000] ^ 1]) + data[5001:])
    damaged = tmp_path / "damaged.tar"
    retar(damaged, parts)
    refused(damaged, "member %s has SHA256 %s, SHA256SUMS says %s" % (
        name, hashlib.sha256(parts[2][1]).hexdigest(), entries[0]["sha256"]))
    assert name.startswith("images/")


def test_the_files_of_a_damaged_archive_are_removed_even_those_that_were_sound(written, tmp_path):
    """The first image is extracted whole before the second turns out damaged: nothing is left to be loaded."""
    path, _, _ = written
    parts = members(path)
    name, data = parts[3]
    parts[3] = (name, data[:-1] + bytes([data[-1] ^ 1]))
    damaged = tmp_path / "damaged.tar"
    retar(damaged, parts)
    dest = tmp_path / "out"
    dest.mkdir()
    refused(damaged, name, extract=[ARM, AMD], dest=str(dest))
    assert os.listdir(str(dest)) == []


def test_a_member_missing_added_or_twice_is_refused_by_name(written, tmp_path):
    path, _, _ = written
    parts = members(path)
    cases = {
        "missing": (parts[:3], "member %s listed in SHA256SUMS is missing" % parts[3][0]),
        "added": (parts + [("images/extra.tar", b"x")], "member images/extra.tar is not in SHA256SUMS"),
        "twice": (parts + [parts[2]], "member %s appears twice" % parts[2][0]),
        "traversal": (parts + [("../../etc/cron.d/x", b"x")], "member ../../etc/cron.d/x is not in SHA256SUMS"),
        "reordered": ([parts[1], parts[0]] + parts[2:], "does not begin with manifest.json and SHA256SUMS"),
    }
    for case, (changed, expected) in cases.items():
        damaged = tmp_path / ("%s.tar" % case)
        retar(damaged, changed)
        refused(damaged, expected)


def test_a_manifest_that_disagrees_with_its_sums_or_is_not_ours_is_refused(written, tmp_path):
    path, entries, _ = written
    parts = members(path)
    manifest = json.loads(parts[0][1])
    manifest["images"][0]["sha256"] = "0" * 64
    cases = {
        "disagrees": (json.dumps(manifest).encode(), "manifest.json and SHA256SUMS disagree on the SHA256 of "
                                                     + entries[0]["file"]),
        "not JSON": (b"{", "manifest.json is not JSON"),
        "foreign": (json.dumps({"format": "something else"}).encode(), "does not describe an image archive"),
        "newer": (json.dumps(dict(manifest, version=2)).encode(), "is of version 2; this collection reads version 1"),
    }
    for case, (data, expected) in cases.items():
        damaged = tmp_path / ("%s.tar" % case.replace(" ", "-"))
        retar(damaged, [("manifest.json", data)] + parts[1:])
        refused(damaged, expected)
    sums = tmp_path / "sums.tar"
    retar(sums, [parts[0], ("SHA256SUMS", b"not a sum line\n")] + parts[2:])
    refused(sums, "SHA256SUMS line 1 is not `<sha256>  <member>`")


def test_a_file_that_is_no_tar_or_no_file_is_named(tmp_path):
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"\x00\x01not a tar" * 100)
    refused(garbage, "not a tar archive")
    with pytest.raises(archive.ArchiveNotFound, match="image archive %s does not exist" % (tmp_path / "none.tar")):
        archive.read(str(tmp_path / "none.tar"))


def test_a_consistent_manifest_naming_another_member_for_an_image_is_refused(tmp_path):
    """The manifest and its sums agree, but the image's member is not its own name's (a path outside, or another
    image's file): no file of the archive is loaded as an image it is not."""
    saved = tmp_path / "saved.tar"
    saved.write_bytes(b"image")
    digest = hashlib.sha256(b"image").hexdigest()
    manifest = json.dumps({"format": archive.FORMAT, "version": 1, "images": [
        {"name": NAME, "platform": "linux/arm64", "id": "sha256:1", "file": "../../x", "sha256": digest,
         "size": 5}]}).encode()
    sums = ("%s  manifest.json\n%s  ../../x\n" % (hashlib.sha256(manifest).hexdigest(), digest)).encode()
    hostile = tmp_path / "hostile.tar"
    retar(hostile, [("manifest.json", manifest), ("SHA256SUMS", sums), ("../../x", b"image")])
    dest = tmp_path / "a" / "b"
    dest.mkdir(parents=True)
    refused(hostile, "manifest.json gives ../../x for %s linux/arm64, whose member is images/" % NAME,
            extract=[ARM], dest=str(dest))
    assert os.listdir(str(dest)) == [] and not (tmp_path / "x").exists()


def test_a_listing_too_large_to_be_ours_is_refused_unread(written, tmp_path):
    path, _, _ = written
    parts = members(path)
    huge = tmp_path / "huge.tar"
    retar(huge, [("manifest.json", b" " * (archive.LISTING_MAX + 1))] + parts[1:])
    refused(huge, "member manifest.json is %d bytes, more than a listing of images can be" % (archive.LISTING_MAX + 1))


def test_what_is_not_the_archives_fault_is_not_called_damage(written, tmp_path):
    """A folder given as the archive, or an image file that cannot be written (here: a folder in its place): named
    for what they are, so that nobody copies tens of GB again for nothing."""
    path, _, _ = written
    with pytest.raises(archive.ArchiveUnusable, match="image archive %s cannot be read: " % tmp_path):
        archive.read(str(tmp_path))
    dest = tmp_path / "out"
    (dest / "quay.io_ascend_vllm-ascend_v0.18.0rc1-310p_linux-amd64.tar").mkdir(parents=True)
    with pytest.raises(archive.ArchiveUnusable) as caught:
        archive.read(str(path), [AMD], str(dest))
    assert str(caught.value).startswith("the image file %s could not be written: " % (
        dest / "quay.io_ascend_vllm-ascend_v0.18.0rc1-310p_linux-amd64.tar"))
    assert "Fix: free space there (this image needs 200001 bytes)" in str(caught.value)
