"""library/folder_files.py: a folder's files made to hold their texts in one run, each written whole and only when
it differs; what it cannot use is refused naming it, with the fix, and nothing is written."""
import os
import stat

import pytest
from module_runs import assert_refused, run_module

COLLECTOR = {"npu_exporter.py": "import npu_smi\n", "npu_smi.py": "# the parser\r\nTABLE = 1\n"}


def settle(dest, files, check=False, diff=False, **args):
    return run_module("folder_files", dest=str(dest), files=files, _ansible_check_mode=check, _ansible_diff=diff,
                      **args)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_missing_folder_is_made_with_its_files_and_a_second_run_changes_nothing(tmp_path):
    dest = tmp_path / "opt" / "npu-exporter" / "module_utils"
    checked = settle(dest, COLLECTOR, check=True, diff=True)
    assert checked["changed"] and checked["written"] == sorted(COLLECTOR) and not (tmp_path / "opt").exists()
    assert [(d["after_header"], d["before"], d["after"]) for d in checked["diff"]] == [
        (str(dest / name), "", COLLECTOR[name]) for name in sorted(COLLECTOR)]
    old_umask = os.umask(0o077)
    try:
        result = settle(dest, COLLECTOR, mode="0640", directory_mode="0750")
    finally:
        os.umask(old_umask)
    assert result["changed"] and result["written"] == sorted(COLLECTOR), result
    for name, text in COLLECTOR.items():
        assert (dest / name).read_bytes() == text.encode(), "written as given, line endings too"
        assert mode_of(dest / name) == 0o640
    for folder in (tmp_path / "opt", tmp_path / "opt" / "npu-exporter", dest):
        assert mode_of(folder) == 0o750, folder
    again = settle(dest, COLLECTOR, mode="0640", directory_mode="0750", diff=True)
    assert (again["changed"], again["written"], again["diff"]) == (False, [], [])
    assert sorted(os.listdir(dest)) == sorted(COLLECTOR), "no temporary file is left"


def test_only_a_changed_text_or_mode_is_written_and_other_files_stay(tmp_path):
    settle(tmp_path, COLLECTOR)
    (tmp_path / "README").write_text("the operator's\n")
    (tmp_path / "npu_smi.py").chmod(0o600)
    inode = os.stat(tmp_path / "npu_smi.py").st_ino
    newer = dict(COLLECTOR, **{"npu_exporter.py": "import npu_smi, os\n"})
    result = settle(tmp_path, newer, diff=True)
    assert result["changed"] and result["written"] == ["npu_exporter.py", "npu_smi.py"], result
    (changed,) = [d for d in result["diff"] if d["after_header"].endswith("npu_exporter.py")]
    assert (changed["before"], changed["after"]) == (COLLECTOR["npu_exporter.py"], newer["npu_exporter.py"])
    assert mode_of(tmp_path / "npu_smi.py") == 0o644 and os.stat(tmp_path / "npu_smi.py").st_ino == inode
    assert (tmp_path / "npu_exporter.py").read_text() == newer["npu_exporter.py"]
    assert (tmp_path / "README").read_text() == "the operator's\n"


def test_a_file_that_is_no_text_is_written_over(tmp_path):
    (tmp_path / "npu_smi.py").write_bytes(b"\xff\xfe\x00")
    result = settle(tmp_path, COLLECTOR)
    assert "npu_smi.py" in result["written"]
    assert (tmp_path / "npu_smi.py").read_bytes() == COLLECTOR["npu_smi.py"].encode()


@pytest.mark.parametrize("name", ["../escape.py", "sub/x.py", "..", ".", ""])
def test_a_name_that_is_no_plain_file_name_is_refused_and_nothing_is_written(tmp_path, name):
    dest = tmp_path / "dest"
    result = settle(dest, dict(COLLECTOR, **{name: "x"}))
    assert_refused(result, "files: %r" % name, "expected file names in dest, without /")
    assert not dest.exists() and not (tmp_path / "escape.py").exists()


@pytest.mark.parametrize("args, expected", [
    ({"files": {"a.py": 3}}, ["files: a.py", "expected each file's text as a string"]),
    ({"mode": "rw-r--r--"}, ["mode 'rw-r--r--'", "expected an octal string"]),
    ({"directory_mode": "755x"}, ["directory_mode '755x'", "expected an octal string"]),
], ids=["a text that is no string", "a mode that is not octal", "a folder mode that is not octal"])
def test_options_it_cannot_use_are_refused_by_name(tmp_path, args, expected):
    dest = tmp_path / "dest"
    result = run_module("folder_files", **dict({"dest": str(dest), "files": COLLECTOR}, **args))
    assert_refused(result, *expected)
    assert not dest.exists()


def test_a_relative_folder_a_file_in_its_place_or_a_folder_in_a_files_place_is_refused(tmp_path):
    assert_refused(settle("relative/dir", COLLECTOR), "dest 'relative/dir': expected an absolute path")
    (tmp_path / "taken").write_text("a file")
    assert_refused(settle(tmp_path / "taken", COLLECTOR), "dest %s: expected a folder, found a file" % (
        tmp_path / "taken"))
    (tmp_path / "dest" / "npu_smi.py").mkdir(parents=True)
    assert_refused(settle(tmp_path / "dest", COLLECTOR), "%s: expected a file, found a folder" % (
        tmp_path / "dest" / "npu_smi.py"))
