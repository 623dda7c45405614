"""scripts/ee.py names an execution environment image by a hash of what it is built from, so that the same inputs
build nothing the second time and any changed input builds anew: the base, the build arguments, the definition, and
the collection's files as its MANIFEST.json and FILES.json list them (not the tarball's bytes, which carry each
build's timestamps). No Docker here: a base that is no local image is hashed by its name."""
import fcntl
import importlib.util
import io
import json
import tarfile
import threading
import time

import pytest

from conftest import REPO

BASE = "no-such-image.example/base:1"
ARGS = {"PKGMGR": "/usr/bin/apt-get"}


@pytest.fixture(scope="module")
def ee():
    spec = importlib.util.spec_from_file_location("ee_build", str(REPO / "scripts" / "ee.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def collection(path, files, mtime):
    """A collection tarball holding MANIFEST.json, FILES.json (files: name -> sha256) and a README, at mtime."""
    members = {"MANIFEST.json": json.dumps({"collection_info": {"version": "0.1.0"}}),
               "FILES.json": json.dumps({"files": [{"name": name, "chksum_sha256": digest}
                                                   for name, digest in sorted(files.items())]}),
               "README.md": "written at %d\n" % mtime}
    with tarfile.open(str(path), "w:gz") as archive:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_same_inputs_give_the_same_name_whatever_the_tarballs_timestamps(ee, tmp_path):
    first = collection(tmp_path / "a.tar.gz", {"roles/x/tasks/main.yml": "11"}, 1000)
    second = collection(tmp_path / "b.tar.gz", {"roles/x/tasks/main.yml": "11"}, int(time.time()))
    assert first.read_bytes() != second.read_bytes()
    assert ee.inputs_hash(BASE, ARGS, first) == ee.inputs_hash(BASE, ARGS, second)
    assert ee.version(first) == "0.1.0"


def test_a_changed_file_base_argument_or_definition_changes_the_name(ee, tmp_path, monkeypatch):
    tarball = collection(tmp_path / "a.tar.gz", {"roles/x/tasks/main.yml": "11"}, 1000)
    name = ee.inputs_hash(BASE, ARGS, tarball)
    changed = collection(tmp_path / "b.tar.gz", {"roles/x/tasks/main.yml": "12"}, 1000)
    assert ee.inputs_hash(BASE, ARGS, changed) != name
    assert ee.inputs_hash(BASE + "-other", ARGS, tarball) != name
    assert ee.inputs_hash(BASE, dict(ARGS, PYCMD="/usr/bin/python3.12"), tarball) != name
    definition = tmp_path / "execution-environment.yml"
    definition.write_text(ee.DEFINITION.read_text() + "# changed\n")
    monkeypatch.setattr(ee, "DEFINITION", definition)
    assert ee.inputs_hash(BASE, ARGS, tarball) != name


def test_a_build_started_during_another_waits_for_it_then_builds_nothing_more(ee, tmp_path, monkeypatch, capsys):
    """scripts/dev test builds the EE in the background while the tests build it as the README says: the second
    waits for the first to let go of the lock, then asks for the image (which the first built)."""
    monkeypatch.setattr(ee, "BUILD", tmp_path)
    monkeypatch.setattr(ee, "LOCK", tmp_path / "ee.lock")
    builds = []
    monkeypatch.setattr(ee, "build", lambda base, own_args: builds.append(base) or "ascend-fleet-ee:0.1.0-built")
    second = threading.Thread(target=ee.main, args=([],))
    with open(str(ee.LOCK), "a") as first:
        fcntl.flock(first, fcntl.LOCK_EX)
        second.start()
        time.sleep(0.5)
        assert builds == [], "a build went on while another held the lock"
    second.join(timeout=10)
    assert not second.is_alive() and builds == [ee.DEBIAN]
    assert capsys.readouterr().out.splitlines()[-1] == "ascend-fleet-ee:0.1.0-built"
