"""library/model_files.py on folders with missing, empty and unlisted files."""
import json
import subprocess
import sys

from conftest import REPO
from twin import hosts

MODULE = REPO / "library" / "model_files.py"


def check(tmp_path, **args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    result = subprocess.run([sys.executable, str(MODULE), str(args_file)], stdout=subprocess.PIPE,
                            universal_newlines=True)
    return json.loads(result.stdout)


def test_complete_folder(tmp_path):
    hosts.build_model(tmp_path / "m")
    result = check(tmp_path, path=str(tmp_path / "m"))
    assert result["complete"] and result["missing"] == [] and len(result["shards"]) == 4


def test_missing_and_empty_files_are_listed(tmp_path):
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / "tokenizer.json").unlink()
    (folder / "model-00002-of-00004.safetensors").write_text("")
    result = check(tmp_path, path=str(folder), fail_on_incomplete=True)
    assert result["failed"] and not result["complete"]
    assert result["missing"] == ["tokenizer.json"] and result["empty"] == ["model-00002-of-00004.safetensors"]
    assert "missing: tokenizer.json; empty: model-00002-of-00004.safetensors" in result["msg"]


def test_absent_folder_and_broken_index(tmp_path):
    assert "the folder does not exist" in check(tmp_path, path=str(tmp_path / "none"), fail_on_incomplete=True)["msg"]
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / "model.safetensors.index.json").write_text("{not json")
    result = check(tmp_path, path=str(folder), fail_on_incomplete=True)
    assert "is not valid JSON" in result["msg"]
