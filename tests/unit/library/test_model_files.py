"""library/model_files.py on folders with missing, empty and unlisted files, and on options and model folders it
cannot use: each refused or reported incomplete with a message that names the input, what was expected and the
fix; never a traceback, never passed as complete."""
import json

import pytest
import yaml
from module_runs import assert_refused, module_doc, run_module

from conftest import REPO
from twin import hosts

INDEX = "model.safetensors.index.json"
SHARD = "model-00001-of-00004.safetensors"
# The operator-facing list the model_weights role passes as `required`.
ROLE_REQUIRED = yaml.safe_load((REPO / "roles/model_weights/defaults/main.yml").read_text())[
    "model_weights_required_files"]


def check(tmp_path, **args):
    # The module imports module_utils/option_checks.py, which Ansible ships with it: run as the loader runs it.
    return run_module("model_files", **args)


def test_complete_folder(tmp_path):
    hosts.build_model(tmp_path / "m")
    result = check(tmp_path, path=str(tmp_path / "m"), required=ROLE_REQUIRED)
    assert result["complete"] and result["missing"] == [] and len(result["shards"]) == 4


def test_missing_and_empty_files_are_listed(tmp_path):
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / "tokenizer.json").unlink()
    (folder / "model-00002-of-00004.safetensors").write_text("")
    result = check(tmp_path, path=str(folder), required=ROLE_REQUIRED, fail_on_incomplete=True)
    assert result["failed"] and not result["complete"]
    assert result["missing"] == ["tokenizer.json"] and result["empty"] == ["model-00002-of-00004.safetensors"]
    assert "missing: tokenizer.json; empty: model-00002-of-00004.safetensors" in result["msg"]


def test_absent_folder_and_broken_index(tmp_path):
    assert "the folder does not exist" in check(tmp_path, path=str(tmp_path / "none"), fail_on_incomplete=True)["msg"]
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / INDEX).write_text("{not json")
    result = check(tmp_path, path=str(folder), fail_on_incomplete=True)
    assert "is not valid JSON" in result["msg"]


def test_the_module_has_no_list_of_its_own(tmp_path):
    # Only the role's list says which files besides the weights a model needs.
    assert module_doc("model_files")["doc"]["options"]["required"]["default"] == []
    folder = tmp_path / "m"
    hosts.build_model(folder)
    for name in ("tokenizer.json", "config.json", "generation_config.json"):
        (folder / name).unlink()
    assert check(tmp_path, path=str(folder))["complete"] is True
    assert check(tmp_path, path=str(folder), required=ROLE_REQUIRED)["missing"] == [
        "config.json", "generation_config.json", "tokenizer.json"]


def test_index_and_its_shards_are_checked_without_required(tmp_path):
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / "model-00003-of-00004.safetensors").unlink()
    result = check(tmp_path, path=str(folder))
    assert (result["complete"], result["missing"]) == (False, ["model-00003-of-00004.safetensors"])
    (folder / INDEX).unlink()
    result = check(tmp_path, path=str(folder), required=ROLE_REQUIRED)
    assert (result["complete"], result["missing"]) == (False, [INDEX])  # listed once, though the role names it
    assert result["shards"] == ["model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                                "model-00004-of-00004.safetensors"]


def test_an_index_naming_no_shard_is_incomplete(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / INDEX).write_text('{"metadata": {}}')
    result = check(tmp_path, path=str(folder), fail_on_incomplete=True)
    assert result["failed"] and result["shards"] == [] and "names no weight shard" in result["msg"]


def test_sizes_add_up_and_every_key_is_documented(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    index = '{"weight_map": {"a": "one.safetensors", "b": "two.safetensors", "c": "one.safetensors"}}'
    (folder / INDEX).write_text(index)
    one, two = hosts.safetensors({"a": [1.0], "c": [2.0]}), hosts.safetensors({"b": [3.0, 4.0]})
    (folder / "one.safetensors").write_bytes(one)
    (folder / "two.safetensors").write_bytes(two)
    (folder / "config.json").write_text("{}")
    result = check(tmp_path, path=str(folder), required=["config.json"])
    assert result["complete"] and result["shards"] == ["one.safetensors", "two.safetensors"]
    assert result["total_bytes"] == len(index) + len(one) + len(two) + 2
    documented = set(module_doc("model_files")["return"])
    assert set(result) - {"changed", "invocation"} == documented - {"msg"}
    (folder / "two.safetensors").unlink()
    failed = check(tmp_path, path=str(folder), fail_on_incomplete=True)
    assert set(failed) - {"changed", "invocation", "failed"} == documented


def test_a_shard_cut_short_or_of_no_safetensors_is_named(tmp_path):
    """An interrupted copy can leave a shard with bytes, only fewer than its header says."""
    folder = tmp_path / "m"
    hosts.build_model(folder)
    cut = folder / "model-00002-of-00004.safetensors"
    whole = cut.read_bytes()
    cut.write_bytes(whole[:-3])
    (folder / "model-00004-of-00004.safetensors").write_text("twin placeholder weights\n")
    result = check(tmp_path, path=str(folder), required=ROLE_REQUIRED, fail_on_incomplete=True)
    assert result["failed"] and not result["complete"] and result["empty"] == []
    assert result["truncated"] == ["model-00002-of-00004.safetensors (%d of %d bytes)" % (len(whole) - 3, len(whole)),
                                   "model-00004-of-00004.safetensors (25 bytes, no safetensors header)"]
    assert "cut short: model-00002-of-00004.safetensors (%d of %d bytes)" % (len(whole) - 3, len(whole)) in (
        result["msg"])
    cut.write_bytes(whole)
    hosts.build_model(folder)
    assert check(tmp_path, path=str(folder), required=ROLE_REQUIRED)["complete"]


# --- options and model folders it cannot use ----------------------------------------------------------------------

def weight_map(*shards):
    return json.dumps({"metadata": {}, "weight_map": {"layer.%d" % n: shard for n, shard in enumerate(shards)}})


# (case, index text (bytes: as they are), pieces the message must hold)
FOLDERS = [
    ("index not JSON", "{not json", [INDEX, "is not valid JSON"]),
    ("index not UTF-8", b'{"weight_map": {"a": "\xff.safetensors"}}', [INDEX, "is not valid JSON"]),
    ("index a JSON list", "[1, 2]", [INDEX, "a JSON object"]),
    ("index a JSON string", '"weights"', [INDEX, "a JSON object"]),
    ("weight_map a list", '{"weight_map": ["%s"]}' % SHARD, ["weight_map", "an object"]),
    ("weight_map a string", '{"weight_map": "%s"}' % SHARD, ["weight_map", "an object"]),
    ("shard name a number", weight_map(SHARD, 5), ["weight_map", "5", "a file name"]),
    ("shard name null", weight_map(SHARD, None), ["weight_map", "None", "a file name"]),
    ("shard name a list", weight_map(SHARD, ["a"]), ["weight_map", "a file name"]),
    ("shard name empty", weight_map(SHARD, ""), ["weight_map", "''", "a file name"]),
    ("shard above the folder", weight_map(SHARD, "../outside.safetensors"),
     ["'../outside.safetensors'", "outside the model folder"]),
    ("shard at an absolute path", weight_map(SHARD, "{outside}"), ["outside the model folder"]),
    ("shard back out of a subfolder", weight_map(SHARD, "sub/../../outside.safetensors"),
     ["'sub/../../outside.safetensors'", "outside the model folder"]),
]


@pytest.mark.parametrize("case,index,expected", FOLDERS, ids=[row[0] for row in FOLDERS])
def test_what_no_model_folder_holds_is_never_complete(tmp_path, case, index, expected):
    outside = tmp_path / "outside.safetensors"
    outside.write_text("weights that are not the model's")  # present, so only its path can keep it out

    def placed(value):
        return json.loads(json.dumps(value).replace("{outside}", str(outside)))

    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / INDEX).write_bytes(index if isinstance(index, bytes) else placed(index).encode("utf-8"))
    result = run_module("model_files", path=str(folder), fail_on_incomplete=True)
    assert_refused(result, str(folder), *placed(expected))
    assert result["complete"] is False
    # Without fail_on_incomplete the same folder is reported, not passed.
    assert run_module("model_files", path=str(folder))["complete"] is False


@pytest.mark.parametrize("case,args,expected", [
    ("path empty", {"path": ""}, ["path is empty", "the model folder"]),
    ("path relative", {"path": "models/Qwen3-VL-8B-Instruct"}, ["path 'models/Qwen3-VL-8B-Instruct'",
                                                                "an absolute path"]),
    ("path with a NUL byte", {"path": "/data/models/\u0000x"}, ["path", "NUL"]),
    ("required above the folder", {"required": ["../outside.safetensors"]},
     ["required names '../outside.safetensors'", "outside the model folder", "inside path"]),
    ("required at an absolute path", {"required": ["/etc/hostname"]},
     ["required names '/etc/hostname'", "outside the model folder"]),
    ("required entry empty", {"required": ["config.json", ""]}, ["required names ''", "a file name"]),
])
def test_options_that_name_no_file_of_the_model_folder_are_refused(tmp_path, case, args, expected):
    hosts.build_model(tmp_path / "m")
    result = run_module("model_files", **dict({"path": str(tmp_path / "m")}, **args))
    assert_refused(result, *expected)


def test_a_file_where_the_folder_should_be_is_named_as_such(tmp_path):
    path = tmp_path / "Qwen3-VL-8B-Instruct"
    path.write_text("a tarball, say")
    result = run_module("model_files", path=str(path), fail_on_incomplete=True)
    assert_refused(result, str(path), "is a file, not a folder")
    assert "does not exist" not in result["msg"]


def test_check_mode_reports_what_a_real_run_would_fail_on_instead_of_failing(tmp_path):
    # The model_weights role fills the folder (download or copy) before it requires it complete; in check mode
    # that filling does not happen, so the requirement must not fail the check run.
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / SHARD).unlink()
    result = run_module("model_files", path=str(folder), fail_on_incomplete=True,
                        _ansible_check_mode=True)
    assert "failed" not in result and result["complete"] is False and result["missing"] == [SHARD]
    assert result["msg"].startswith("check mode: a real run fails here unless a task before this one fills the "
                                    "folder: model folder %s is incomplete" % folder), result["msg"]
    assert SHARD in json.dumps(result["warnings"])  # shown as a warning in the check run's output
    # Bad input is bad in check mode too.
    assert_refused(run_module("model_files", path="relative", _ansible_check_mode=True), "absolute")


def test_an_index_nested_too_deep_is_no_index(tmp_path):
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / INDEX).write_text("[" * 100000 + "]" * 100000)
    assert "is not valid JSON" in check(tmp_path, path=str(folder), fail_on_incomplete=True)["msg"]


def test_a_complete_folder_gives_the_models_footprint_as_a_fact(tmp_path):
    """The weights' bytes from the index's total and the attention's shape from the text model's config: what the
    serving plan's fit estimate reads (Qwen3-VL-8B: 36 layers, 8 KV heads of 128)."""
    hosts.build_model(tmp_path / "m")
    assert check(tmp_path, path=str(tmp_path / "m"))["ansible_facts"]["ascend_model"] == {
        "weights_bytes": 17534340096, "layers": 36, "kv_heads": 8, "head_dim": 128}


def test_without_an_index_total_the_headers_tensors_are_summed_and_a_given_head_size_wins(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / INDEX).write_text('{"weight_map": {"a": "one.safetensors", "b": "two.safetensors"}}')
    (folder / "one.safetensors").write_bytes(hosts.safetensors({"a": [1.0, 2.0, 3.0]}))
    (folder / "two.safetensors").write_bytes(hosts.safetensors({"b": [3.0]}))
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                                                    "hidden_size": 64, "head_dim": 32}))
    assert check(tmp_path, path=str(folder))["ansible_facts"]["ascend_model"] == {
        "weights_bytes": 8, "layers": 2, "kv_heads": 4, "head_dim": 32}  # 4 float16 values; no KV heads: every head


@pytest.mark.parametrize("config", ["{}", "[1]", "{not json", json.dumps({"text_config": {"num_hidden_layers": 0}})])
def test_a_config_that_does_not_say_the_shape_or_an_incomplete_folder_gives_no_footprint(tmp_path, config):
    folder = tmp_path / "m"
    hosts.build_model(folder)
    (folder / "config.json").write_text(config)
    assert check(tmp_path, path=str(folder))["ansible_facts"]["ascend_model"] is None
    (folder / "config.json").unlink()
    (folder / SHARD).unlink()
    assert check(tmp_path, path=str(folder))["ansible_facts"]["ascend_model"] is None
