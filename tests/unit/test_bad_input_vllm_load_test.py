"""library/vllm_load_test.py (and module_utils/openai_client.py's stream reader) on options it cannot use, which
it refuses before sending or writing anything, and on streams no request should end the run for: each such
request counts as failed, by kind, and the run goes on."""
import json
import math

import pytest
from test_bad_input_all_modules import SECRET, assert_refused, run_module
from test_bad_input_vllm_probe import MODEL, Scripted, scripted  # noqa: F401  (the fixture)

from conftest import free_port, png_image

# The scripted answers here are about streams, not what the model says: the answer check has tests of its own.
SMALL = {"image_sizes": ["32x24"], "max_tokens": [3], "concurrency": [1, 2], "requests_per_group": 2,
         "warmup_requests": 0, "answer_check": "none"}
CONTENT = b'data: {"id": "chatcmpl-1", "choices": [{"delta": {"content": "a"}}]}'
USAGE = b'data: {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}'
DONE = b"data: [DONE]"


def load_test(**args):
    return run_module("vllm_load_test", **dict(SMALL, **args))


def planned(**args):
    """The module in check mode against a closed port: only what it does with its options."""
    return load_test(**dict({"base_url": "http://127.0.0.1:%d" % free_port(), "_ansible_check_mode": True}, **args))


OPTIONS = [
    ("image_sizes empty", {"image_sizes": []}, ["image_sizes: the list is empty"]),
    ("image size without height", {"image_sizes": ["640"]}, ["image_sizes", "'640'", "WIDTHxHEIGHT"]),
    ("image size zero", {"image_sizes": ["0x0"]}, ["image_sizes", "'0x0'", "WIDTHxHEIGHT"]),
    ("image size too large to make", {"image_sizes": ["99999x99999"]}, ["image_sizes", "'99999x99999'", "8192x8192",
                                                                        "image_files"]),
    ("image size twice", {"image_sizes": ["32x24", "32x24"]}, ["image_sizes", "32x24 is listed twice"]),
    ("max_tokens empty", {"max_tokens": []}, ["max_tokens: the list is empty"]),
    ("max_tokens zero", {"max_tokens": [0]}, ["max_tokens: 0", "at least 1"]),
    ("max_tokens negative", {"max_tokens": [3, -1]}, ["max_tokens: -1", "at least 1"]),
    ("max_tokens twice", {"max_tokens": [3, 3]}, ["max_tokens", "3 is listed twice"]),
    ("concurrency empty", {"concurrency": []}, ["concurrency: the list is empty"]),
    ("concurrency zero", {"concurrency": [0]}, ["concurrency: 0", "at least 1"]),
    ("concurrency twice", {"concurrency": [1, 1]}, ["concurrency", "1 is listed twice"]),
    ("requests_per_group zero", {"requests_per_group": 0}, ["requests_per_group: 0", "at least 1"]),
    ("requests_per_group negative", {"requests_per_group": -4}, ["requests_per_group: -4", "at least 1"]),
    ("warmup_requests negative", {"warmup_requests": -1}, ["warmup_requests: -1", "at least 0"]),
    ("request_timeout_s zero", {"request_timeout_s": 0}, ["request_timeout_s: 0", "more than 0"]),
    ("request_timeout_s negative", {"request_timeout_s": -1}, ["request_timeout_s: -1", "more than 0"]),
    ("request_timeout_s not a number", {"request_timeout_s": "nan"}, ["request_timeout_s: nan", "more than 0"]),
    ("request_timeout_s endless", {"request_timeout_s": "inf"}, ["request_timeout_s: inf", "more than 0"]),
    ("new_group_deadline_s negative", {"new_group_deadline_s": -1}, ["new_group_deadline_s: -1", "at least 0"]),
    ("new_group_deadline_s not a number", {"new_group_deadline_s": "nan"}, ["new_group_deadline_s: nan"]),
    ("error_threshold above 1", {"error_threshold": 1.5}, ["error_threshold: 1.5", "between 0 and 1"]),
    ("error_threshold negative", {"error_threshold": -0.1}, ["error_threshold: -0.1", "between 0 and 1"]),
    ("error_threshold not a number", {"error_threshold": "nan"}, ["error_threshold: nan", "between 0 and 1"]),
    ("estimate negative", {"estimate_seconds_per_token": -1}, ["estimate_seconds_per_token: -1", "at least 0"]),
    ("estimate not a number", {"estimate_seconds_per_token": "nan"}, ["estimate_seconds_per_token: nan"]),
    ("image file missing", {"image_files": ["{tmp}/none.png"]}, ["image_files", "{tmp}/none.png", "does not exist"]),
    ("image file a folder", {"image_files": ["{tmp}"]}, ["image_files", "is a folder"]),
    ("image file no image", {"image_files": ["{tmp}/notes.txt"]}, ["image_files", "notes.txt", "not a PNG or JPEG"]),
    ("image file empty", {"image_files": ["{tmp}/empty.png"]}, ["image_files", "empty.png", "not a PNG or JPEG"]),
    ("resume without results_file", {"resume": True}, ["resume: needs results_file"]),
    ("base_url without scheme", {"base_url": "localhost:8000"}, ["base_url 'localhost:8000'", "http://host:port"]),
    ("api_key with a line break", {"api_key": SECRET + "\r\n"}, ["api_key", "line break"]),
]


@pytest.mark.parametrize("case,args,expected", OPTIONS, ids=[row[0] for row in OPTIONS])
def test_options_it_cannot_use_are_refused_before_anything_runs(tmp_path, case, args, expected):
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    args, expected = json.loads(json.dumps([args, expected]).replace("{tmp}", str(tmp_path)))
    result = planned(**args)
    assert_refused(result, *expected)
    assert SECRET not in json.dumps(result)


def test_sizes_only_label_the_groups_of_image_files_so_any_size_goes(tmp_path):
    (tmp_path / "photo.png").write_bytes(png_image(4, 3))
    result = planned(image_sizes=["99999x99999"], image_files=[str(tmp_path / "photo.png")])
    assert "failed" not in result and result["planned_groups"] == 2


def results_file_that_is_a_folder(tmp_path):
    path = tmp_path / "vllm-ascend.jsonl"
    path.mkdir()
    return path


def results_file_below_a_file(tmp_path):
    (tmp_path / "bench").write_text("")
    return tmp_path / "bench" / "vllm-ascend.jsonl"


@pytest.mark.parametrize("make", [results_file_that_is_a_folder, results_file_below_a_file])
def test_a_results_file_that_cannot_be_one_is_refused_and_nothing_is_written_beside_it(tmp_path, make):
    results = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    result = load_test(base_url="http://127.0.0.1:%d" % free_port(), results_file=str(results))
    assert_refused(result, "results_file", str(results))
    assert "cannot reach" not in result["msg"]  # refused before any request
    assert sorted(tmp_path.rglob("*")) == before


def test_a_token_that_cannot_be_sent_does_not_land_in_the_progress_file(tmp_path):
    results = tmp_path / "v.jsonl"
    result = load_test(base_url="http://127.0.0.1:%d" % free_port(), results_file=str(results),
                       api_key=SECRET + "\n")
    assert_refused(result, "api_key", "line break")
    progress = (tmp_path / "v.jsonl.progress.json").read_text()
    assert "api_key" in json.loads(progress)["error"] and SECRET not in progress


ERROR_EVENT = b'data: {"error": {"object": "error", "message": "NPU out of memory", "type": "InternalServerError", ' \
              b'"param": null, "code": 500}}'
STREAMS = [
    ("not JSON", [b"data: {not json", USAGE, DONE], "malformed_stream"),
    ("a JSON list", [b"data: [1, 2]", USAGE, DONE], "malformed_stream"),
    ("a JSON string", [b'data: "a picture"', USAGE, DONE], "malformed_stream"),
    ("JSON null", [b"data: null", USAGE, DONE], "malformed_stream"),
    ("no payload", [b"data:", USAGE, DONE], "malformed_stream"),
    ("not UTF-8", [b'data: {"id": "chatcmpl-\xff", "choices": []}', USAGE, DONE], "malformed_stream"),
    ("choices a string", [b'data: {"choices": "a"}', USAGE, DONE], "malformed_stream"),
    ("a choice that is null", [b'data: {"choices": [null]}', USAGE, DONE], "malformed_stream"),
    ("delta a string", [b'data: {"choices": [{"delta": "a"}]}', USAGE, DONE], "malformed_stream"),
    ("usage a string", [CONTENT, b'data: {"choices": [], "usage": "9 tokens"}', DONE], "malformed_stream"),
    ("token count a word", [CONTENT, b'data: {"choices": [], "usage": {"prompt_tokens": "nine", '
                                     b'"completion_tokens": 1}}', DONE], "malformed_stream"),
    ("token count negative", [CONTENT, b'data: {"choices": [], "usage": {"prompt_tokens": 9, '
                                       b'"completion_tokens": -1}}', DONE], "malformed_stream"),
    ("error event first", [ERROR_EVENT, DONE], "stream_error"),
    ("error event mid-answer", [CONTENT, ERROR_EVENT, DONE], "stream_error"),
    # What vLLM 0.18 sends when its engine fails a request mid-answer (tests/fixtures/vllm-0.18/engine_error_stream)
    ("vLLM 0.18's engine error", [CONTENT, b'data: {"error":{"message":"Internal server error","type":'
                                           b'"InternalServerError","param":null,"code":500}}', DONE], "stream_error"),
    ("error event of older servers", [CONTENT, b'data: {"object": "error", "message": "bad", "type": '
                                               b'"BadRequestError", "code": 400}', DONE], "stream_error"),
]


@pytest.mark.parametrize("case,lines,kind", STREAMS, ids=[row[0] for row in STREAMS])
def test_a_stream_no_request_should_end_the_run_on_is_a_failed_request_of_its_kind(scripted, case, lines,  # noqa: F811
                                                                                  kind):
    Scripted.chat = lines
    result = load_test(base_url=scripted)
    assert "failed" not in result, result
    assert [(group["concurrency"], group["failed"], group["errors"]) for group in result["groups"]] == [
        (1, 2, {kind: 2}), (2, 2, {kind: 2})]
    assert all(group["unreliable"] and group["avg_latency_s"] is None for group in result["groups"])


def test_a_good_stream_from_the_same_server_counts_as_completed(scripted):  # noqa: F811
    # The control: what the server of the cases above streams when nothing is wrong.
    Scripted.chat = [CONTENT, USAGE, DONE]
    groups = load_test(base_url=scripted)["groups"]
    assert [(group["completed"], group["errors"], group["total_prompt_tokens"]) for group in groups] == [
        (2, {}, 18), (2, {}, 18)]
    assert not math.isnan(groups[0]["avg_latency_s"])


def test_resume_reads_a_results_file_with_bytes_that_are_not_utf8(tmp_path, scripted):  # noqa: F811
    Scripted.chat = [CONTENT, USAGE, DONE]
    results = tmp_path / "v.jsonl"
    record = {"image_size": "32x24", "max_tokens": 3, "concurrency": 1, "unreliable": False, "completed": 2}
    results.write_bytes(b"\xff\xfe{garbage\n" + json.dumps(record).encode() + b"\n")
    result = load_test(base_url=scripted, results_file=str(results), resume=True)
    assert [(group["concurrency"], group["resumed"]) for group in result["groups"]] == [(1, True), (2, False)]
    assert Scripted.chats == 2


def test_a_key_read_from_its_env_file_is_masked_when_the_server_echoes_it(tmp_path, scripted):  # noqa: F811
    env_file = tmp_path / "vllm-ascend.env"
    env_file.write_text("VLLM_API_KEY=%s\n" % SECRET)
    Scripted.chat = (500, json.dumps({"error": {"message": "bad key %s in request" % SECRET}}).encode())
    result = run_module("vllm_load_test", **dict(SMALL, base_url=scripted, api_key_file=str(env_file),
                                                 answer_check="sane"))
    assert not result.get("failed"), result
    (before, after) = result["answer_checks"]
    assert "HTTP 500" in before["failure"] and "HTTP 500" in after["failure"]
    assert SECRET not in json.dumps(result)
