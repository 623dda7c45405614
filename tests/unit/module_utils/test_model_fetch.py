"""module_utils/model_fetch.py's rules read directly (the module's runs against a local hub are
tests/unit/library/test_model_download.py): which names from a hub are plain paths inside the model folder, and a
file's checksum by the hub's algorithm."""
import hashlib

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import model_fetch


@pytest.mark.parametrize("name, problem", [
    ("model-00001-of-00004.safetensors", None),
    ("tokenizer/vocab.json", None),
    ("", "is not a file name"),
    ("a\\b", "is not a file name"),
    ("a\0b", "is not a file name"),
    ("/etc/passwd", "is not a plain path inside the repository"),
    ("../outside", "is not a plain path inside the repository"),
    ("a//b", "is not a plain path inside the repository"),
    ("./a", "is not a plain path inside the repository"),
    (model_fetch.RECORD, "is a name this module keeps for itself"),
    (model_fetch.PARTS + "/x.part", "is a name this module keeps for itself"),
    (None, "is not a file name"),
])
def test_a_hubs_file_name_is_a_plain_path_inside_the_folder_or_refused(name, problem):
    found = model_fetch.path_problem(name)
    assert (found is None) if problem is None else (problem in found), found


def test_a_files_checksum_is_the_hubs_algorithm_of_its_bytes(tmp_path):
    data = b"weights" * 1000
    (tmp_path / "f").write_bytes(data)
    assert model_fetch.digest_of("sha256", str(tmp_path / "f"), len(data)) == hashlib.sha256(data).hexdigest()
    # git's blob id, which Hugging Face lists for the files it keeps out of LFS.
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert model_fetch.digest_of("git-sha1", str(tmp_path / "f"), len(data)) == blob
