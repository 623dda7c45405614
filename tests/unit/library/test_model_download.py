"""library/model_download.py against a hub on this machine that speaks ModelScope's and the Hugging Face Hub's file
APIs (tests/hub_server.py): a download at a revision, verified file by file; a file that arrives corrupted caught
and fetched again; a dropped connection resumed; a folder that has its model left alone without asking the hub;
hostile listings and refusals explained, never written outside the folder."""
import hashlib
import json
import os

import pytest
from hub_server import Hub
from module_runs import SECRET, assert_refused, run_module

from twin import hosts

SHARD = "model-00002-of-00004.safetensors"


@pytest.fixture
def hub(tmp_path):
    source = tmp_path / "hub"
    hosts.build_model(source)
    (source / "nested").mkdir()
    (source / "nested/notes.txt").write_text("a file in a folder of the repository\n")
    served = Hub(source)
    yield served
    served.close()


def download(hub, folder, source="modelscope", **args):
    args = dict(dict(path=str(folder), source=source, endpoint=hub.endpoint, repo=hub.repo,
                     revision="master" if source == "modelscope" else "main", retries=3), **args)
    return run_module("model_download", **args)


def part_name(hub, name):
    """The part a download of name is kept in until verified (named by the content's sha256)."""
    return "sha256-%s.part" % hashlib.sha256(hub.files[name]).hexdigest()


def same_files(hub, folder):
    return all((folder / name).read_bytes() == data for name, data in hub.files.items())


def test_a_modelscope_download_is_complete_and_a_second_run_asks_nothing(hub, tmp_path):
    folder = tmp_path / "model"
    first = download(hub, folder)
    assert first["changed"] and not first.get("failed"), first
    assert sorted(first["downloaded"]) == sorted(hub.files) and first["files"] == len(hub.files)
    assert same_files(hub, folder) and not (folder / ".gitattributes").exists()
    assert not (folder / ".fleet-download").exists(), "no part is left once every file is in place"
    assert run_module("model_files", path=str(folder))["complete"]
    hub.requests.clear()
    again = download(hub, folder)
    assert (again["changed"], again["hub_asked"], again["downloaded"]) == (False, False, [])
    assert hub.requests == []


def test_a_hugging_face_revision_resolves_to_its_commit_over_paged_listings(hub, tmp_path):
    folder = tmp_path / "model"
    result = download(hub, folder, source="hf_mirror")
    assert result["changed"] and result["commit"] == hub.commit, result
    assert len(hub.files) > hub.page_size, "the listing must take more than one page"
    assert same_files(hub, folder)
    pinned = download(hub, tmp_path / "pinned", source="huggingface", revision=hub.commit)
    assert pinned["commit"] == hub.commit and same_files(hub, tmp_path / "pinned")


@pytest.mark.parametrize("source", ["modelscope", "hf_mirror"])
def test_a_file_that_arrives_corrupted_is_caught_and_fetched_again(hub, tmp_path, source):
    hub.corrupt_once.add(SHARD)
    result = download(hub, tmp_path / "model", source=source)
    assert not result.get("failed"), result
    assert [entry.split(" ")[0] for entry in result["refetched"]] == [SHARD]
    assert "is not the listed" in result["refetched"][0]
    assert [name for name, _range in hub.requests].count(SHARD) == 2
    assert same_files(hub, tmp_path / "model")


def test_a_file_that_never_arrives_whole_fails_and_leaves_nothing_in_place(hub, tmp_path):
    hub.files[SHARD] = hub.files[SHARD][:-1] + b"\0"  # the hub now sends other bytes than it lists... every time
    listed = hub.modelscope_files()
    for entry in listed["Data"]["Files"]:
        if entry["Path"] == SHARD:
            entry["Sha256"] = hashlib.sha256(b"what the listing promises").hexdigest()
    hub.listing = listed
    result = download(hub, tmp_path / "model", retries=2)
    assert_refused(result, "could not download %s" % SHARD, "in 2 attempts", "is not the listed")
    assert not (tmp_path / "model" / SHARD).exists()


def test_a_dropped_connection_is_resumed_from_where_it_stopped(hub, tmp_path):
    size = len(hub.files[SHARD])
    hub.cut_once[SHARD] = size // 2
    result = download(hub, tmp_path / "model")
    assert not result.get("failed"), result
    assert result["resumed"] == [SHARD]
    assert (SHARD, "bytes=%d-" % (size // 2)) in hub.requests
    assert same_files(hub, tmp_path / "model")


def test_a_part_left_by_a_stopped_run_is_resumed_and_a_hub_without_ranges_starts_over(hub, tmp_path):
    folder = tmp_path / "model"
    parts = folder / ".fleet-download"
    parts.mkdir(parents=True)
    (parts / part_name(hub, SHARD)).write_bytes(hub.files[SHARD][:40])
    result = download(hub, folder)
    assert result["resumed"] == [SHARD] and same_files(hub, folder)
    (folder / SHARD).unlink()
    parts.mkdir()
    (parts / part_name(hub, SHARD)).write_bytes(b"x" * 40)  # not what the hub has: the checksum catches it
    hub.ignore_range = True
    result = download(hub, folder)
    assert not result.get("failed") and result["resumed"] == [], result
    assert same_files(hub, folder)


def test_a_file_changed_on_disk_is_hashed_again_and_only_it_is_fetched(hub, tmp_path):
    folder = tmp_path / "model"
    download(hub, folder)
    shard = folder / SHARD
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: a disk or a hand that changed it
    shard.write_bytes(bytes(data))
    hub.requests.clear()
    result = download(hub, folder)
    assert result["hub_asked"] and result["downloaded"] == [SHARD], result
    assert result["refetched"] == ["%s (on disk: sha256 %s is not the listed %s)" % (
        SHARD, hashlib.sha256(bytes(data)).hexdigest()[:12], hashlib.sha256(hub.files[SHARD]).hexdigest()[:12])]
    assert [name for name, _range in hub.requests] == [SHARD] and same_files(hub, folder)


def test_a_folder_filled_another_way_is_verified_not_downloaded(hub, tmp_path):
    folder = tmp_path / "model"
    hosts.build_model(folder)
    (folder / "nested").mkdir()
    (folder / "nested/notes.txt").write_text("a file in a folder of the repository\n")
    result = download(hub, folder, source="hf_mirror")
    assert (result["changed"], result["downloaded"], hub.requests) == (False, [], [])


def test_check_mode_downloads_nothing(hub, tmp_path):
    result = download(hub, tmp_path / "model", _ansible_check_mode=True)
    assert result["changed"] and sorted(result["downloaded"]) == sorted(hub.files)
    assert not (tmp_path / "model").exists() and hub.requests == []


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/passwd", "a/../../b", ".fleet-download.json", "a\\b"])
def test_a_listing_naming_a_file_outside_the_folder_is_refused(hub, tmp_path, name):
    listed = hub.modelscope_files()
    listed["Data"]["Files"][0]["Path"] = name
    hub.listing = listed
    result = download(hub, tmp_path / "model")
    assert_refused(result, "lists a file %r" % name, "nothing was written")
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "model").exists()


def test_a_listing_nested_too_deep_is_no_listing(hub, tmp_path):
    hub.listing = "nested"
    original = hub.send_json
    hub.send_json = lambda request, status, body, headers=None: original(request, status, body, headers) if (
        body != "nested") else request.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n"
                                                  + b"[" * 100000 + b"]" * 100000)
    assert_refused(download(hub, tmp_path / "model"), "with something that is not JSON")


def test_a_hub_that_sends_more_than_it_lists_is_cut_off(hub, tmp_path):
    listed = hub.hf_tree()
    for entry in listed:
        if entry["path"] == SHARD:
            entry["size"] -= 10
    hub.listing = listed
    result = download(hub, tmp_path / "model", source="hf_mirror", retries=1)
    assert_refused(result, "sent more than the %d bytes it lists for %s" % (len(hub.files[SHARD]) - 10, SHARD))
    part = tmp_path / "model/.fleet-download" / part_name(hub, SHARD)
    assert not (tmp_path / "model" / SHARD).exists() and os.path.getsize(part) == len(hub.files[SHARD]) - 10


def test_refusals_name_the_setting_and_never_show_the_token(hub, tmp_path):
    hub.token = "right-token"
    refused = download(hub, tmp_path / "model", token=SECRET)
    assert_refused(refused, "HTTP 401", "model_weights_hub_token")
    assert SECRET not in json.dumps(refused)
    allowed = download(hub, tmp_path / "model", token="right-token")
    assert allowed["changed"] and "right-token" not in json.dumps(allowed)
    hub.token = None
    assert_refused(download(hub, tmp_path / "other", revision="v9"), "HTTP 404", "model_weights_hub_revision (v9)")
    assert_refused(download(hub, tmp_path / "other", endpoint="http://127.0.0.1:9"),
                   "could not reach http://127.0.0.1:9", "https_proxy")


@pytest.mark.parametrize("args, expected", [
    ({"path": "relative/model"}, "path 'relative/model': expected an absolute path"),
    ({"repo": "../etc"}, "repo '../etc': expected <owner>/<name>"),
    ({"repo": "Qwen"}, "repo 'Qwen': expected <owner>/<name>"),
    ({"endpoint": "file:///etc"}, "endpoint 'file:///etc': expected an http:// or https:// address"),
    ({"retries": 0}, "retries"),
    ({"timeout": 0}, "timeout 0.0: expected more than 0 seconds"),
    ({"required": ["../config.json"]}, "required names '../config.json' is not a plain path"),
])
def test_options_it_cannot_use_are_refused(hub, tmp_path, args, expected):
    assert_refused(download(hub, tmp_path / "model", **args), expected)


def test_a_listing_whose_pages_never_end_is_refused(hub, tmp_path):
    hub.listing = [{"type": "directory", "path": "nested", "oid": "0" * 40, "size": 0}]
    hub.page_size = 0  # every page empty of files, every page pointing to the next: the hub's fault, not a hang
    result = download(hub, tmp_path / "model", source="hf_mirror")
    assert_refused(result, "in pages without end")


def test_a_folder_where_the_hub_lists_a_file_is_named(hub, tmp_path):
    folder = tmp_path / "model"
    (folder / SHARD).mkdir(parents=True)
    assert_refused(download(hub, folder), "%s is not a file, where the hub lists the file %s" % (folder / SHARD, SHARD))
    assert_refused(download(hub, folder, _ansible_check_mode=True), "is not a file")


def test_a_link_in_the_folder_that_leads_outside_is_not_written_through(hub, tmp_path):
    folder, elsewhere = tmp_path / "model", tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.mkdir()
    (folder / "nested").symlink_to(elsewhere)
    assert_refused(download(hub, folder), "leads outside the model folder", "remove the link")
    assert list(elsewhere.iterdir()) == []


def test_files_an_earlier_revision_had_are_removed_when_the_revision_drops_them(hub, tmp_path):
    folder = tmp_path / "model"
    assert download(hub, folder)["changed"]
    del hub.files["nested/notes.txt"]
    hub.commit = "f" * 40  # a new revision, without the file
    result = download(hub, folder, revision=hub.commit)
    assert (result["changed"], result["downloaded"], result["removed"]) == (True, [], ["nested/notes.txt"])
    assert not (folder / "nested/notes.txt").exists() and same_files(hub, folder)


def test_git_files_in_subfolders_are_skipped_as_modelscope_skips_them(hub, tmp_path):
    listed = hub.modelscope_files()
    listed["Data"]["Files"].append({"Name": ".gitattributes", "Path": "nested/.gitattributes", "Type": "blob",
                                    "Size": 0, "Sha256": ""})
    hub.listing = listed
    result = download(hub, tmp_path / "model")
    assert not result.get("failed") and "nested/.gitattributes" not in result["downloaded"], result


def test_a_long_nested_name_downloads(hub, tmp_path):
    name = "/".join(["a-folder-with-a-long-name-%02d" % index for index in range(8)]) + "/weights.bin"
    hub.files[name] = b"\1" * 100
    result = download(hub, tmp_path / "model")
    assert not result.get("failed") and (tmp_path / "model" / name).read_bytes() == b"\1" * 100, result


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf")])
def test_a_timeout_that_is_no_duration_is_refused(hub, tmp_path, timeout):
    assert_refused(download(hub, tmp_path / "model", timeout=timeout), "expected more than 0 seconds")


def test_a_repository_without_a_required_file_fails_naming_it(hub, tmp_path):
    """What model_weights asks of every source: the folder holds what the server reads, as its check of a staged
    folder (model_files) asks; a hub download is verified file by file, so only their presence is left to ask."""
    folder = tmp_path / "model"
    whole = download(hub, folder, required=["config.json", "tokenizer.json"])
    assert whole["changed"] and not whole.get("failed"), whole
    assert_refused(download(hub, folder, required=["config.json", "chat_template.jinja"]),
                   "model folder %s holds %s at master whole, but not chat_template.jinja" % (folder, hub.repo),
                   "model_weights_hub_repo", "model_weights_required_files")
    checked = download(hub, tmp_path / "elsewhere", required=["chat_template.jinja"], _ansible_check_mode=True)
    assert checked["changed"] and not checked.get("failed"), checked
