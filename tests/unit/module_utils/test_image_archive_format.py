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


def test_a_write_that_fails_leaves_the_previous_archive_and_no_partial_file(written, tmp_path):
    path, entries, images = written
    before = path.read_bytes()
    os.unlink(images[1]["saved"])
    with pytest.raises(OSError):
        archive.write(str(path), images)
    assert path.read_bytes() == before
    assert not [name for name in os.listdir(str(tmp_path)) if name.endswith(".partial")]


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


def test_a_consistent_manifest_naming_a_path_outside_is_extracted_inside_dest(tmp_path):
    """Member names are the archive's, not the filesystem's: a member listed as ../../x is written as dest/x."""
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
    _, files = archive.read(str(hostile), [ARM], str(dest))
    assert files == {ARM: str(dest / "x")} and not (tmp_path / "x").exists()
