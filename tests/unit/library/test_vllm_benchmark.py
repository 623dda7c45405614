"""library/vllm_benchmark.py: its run against the local OpenAI-like server of tests/fake_vllm.py (no Docker), the
request bodies it sends, and (with module_utils/openai_client.py's stream reader) what it does with options it cannot
use, which it refuses before sending or writing anything, and with streams no request should end the run for: each
such request counts as failed, by kind, and the run goes on."""
import base64
import io
import json
import math
import threading
import time
import types

import pytest
from fake_vllm import MODEL, Handler, Scripted, scripted, server, serving  # noqa: F401  (the fixtures)
from module_runs import SECRET, assert_refused, run_module
from PIL import Image

from ansible_collections.ascend.fleet.plugins.module_utils import bench_record, load_test, openai_client
from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import (
    hold_results,
    progress_file,
    read_progress,
    read_results,
)
from conftest import free_port, png_image


def params(**overrides):
    values = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    # This server's answers are about streams and counts; the answer check has tests of its own.
    values.update(image_sizes=["32x24"], max_tokens=[3], concurrency=[1, 2], requests_per_group=2,
                  warmup_requests=1, answer_check="none")
    values.update(overrides)
    return values


def chats():
    return [path for path, _key in Handler.seen if path == "/v1/chat/completions"]


def test_a_run_records_each_group_then_resume_sends_nothing_again(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "results" / "vllm-ascend.jsonl")
    first = load_test.run(params(base_url=server, results_file=results))
    assert first["model"] == MODEL and (first["planned_groups"], first["planned_requests"]) == (2, 4)
    assert [(g["concurrency"], g["completed"], g["total_completion_tokens"], g["resumed"])
            for g in first["groups"]] == [(1, 2, 6, False), (2, 2, 6, False)]
    assert len(chats()) == 1 + 4  # the warm-up, then the groups
    records, skipped = read_results(results)
    assert [r["concurrency"] for r in records] == [1, 2] and skipped == 0
    progress = read_progress(open(progress_file(results)).read())
    assert progress["finished"] is True and progress["groups_done"] == 2 and "error" not in progress

    second = load_test.run(params(base_url=server, results_file=results, resume=True))
    assert [g["resumed"] for g in second["groups"]] == [True, True] and len(chats()) == 5
    assert second["groups"][0]["finished_at"] == first["groups"][0]["finished_at"]


class Counting(Handler):
    """Handler, counting the chat requests open at once. A request is open until its [DONE] goes out: the client
    ends it there and sends its next at once, while this thread may still be returning from it."""

    lock = threading.Lock()
    open_now = most = 0

    def do_POST(self):
        with self.lock:
            type(self).open_now += 1
            type(self).most = max(type(self).most, type(self).open_now)
        closed, stream = [], self.wfile

        def close():
            if not closed:
                closed.append(True)
                with self.lock:
                    type(self).open_now -= 1

        class Closing:
            def write(self, data):
                if b"[DONE]" in data:
                    close()
                return stream.write(data)

            def flush(self):
                stream.flush()

        self.wfile = Closing()
        try:
            super().do_POST()
        finally:
            self.wfile = stream
            close()


def test_a_group_keeps_as_many_requests_open_as_its_concurrency():
    """Closed loop: with concurrency 4 each of 4 workers sends its next request when its last ended (each
    answer takes 0.2 s), so 4 are open at once, never more."""
    Counting.seen, Counting.most = [], 0
    with serving(Counting) as url:
        result = load_test.run(params(base_url=url, concurrency=[4], requests_per_group=8, warmup_requests=0))
    assert [(g["concurrency"], g["completed"]) for g in result["groups"]] == [(4, 8)]
    assert Counting.most == 4


def test_an_unreliable_group_runs_again_on_resume(server, tmp_path):  # noqa: F811
    results = tmp_path / "v.jsonl"
    load_test.run(params(base_url=server, results_file=str(results), warmup_requests=0))
    lines = results.read_text().splitlines()
    second = dict(json.loads(lines[1]), unreliable=True)
    results.write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    again = load_test.run(params(base_url=server, results_file=str(results), resume=True, warmup_requests=0))
    assert [g["resumed"] for g in again["groups"]] == [True, False] and len(chats()) == 4 + 2


def test_the_deadline_stops_new_groups(server):  # noqa: F811
    result = load_test.run(params(base_url=server, new_group_deadline_s=0.001, warmup_requests=0))
    assert result["stopped_by_deadline"] is True and [g["concurrency"] for g in result["groups"]] == [1]


def test_a_run_the_deadline_stopped_names_the_groups_not_run_wherever_it_is_read(server, tmp_path):  # noqa: F811
    """The result, the results file the report reads and the progress file the follow step reads; groups recorded
    before are no groups left out."""
    results = str(tmp_path / "vllm-ascend.jsonl")
    load_test.run(params(base_url=server, concurrency=[1, 2, 4], results_file=results, warmup_requests=0))
    lines = open(results).read().splitlines()
    with open(results, "w") as kept:  # as if the first run had recorded only the group of 2 users
        kept.write(lines[1] + "\n")
    result = load_test.run(params(base_url=server, concurrency=[1, 2, 4], results_file=results, resume=True,
                                  new_group_deadline_s=0.001, warmup_requests=0))
    assert [(g["concurrency"], g["resumed"]) for g in result["groups"]] == [(1, False), (2, True)]
    deadline = result["deadline"]
    assert deadline["not_run"] == [{"image_size": "32x24", "max_tokens": 3, "concurrency": 4}]
    assert (deadline["new_group_deadline_s"], deadline["groups_total"]) == (0.001, 3) and deadline["elapsed_s"] >= 0
    assert bench_record.read_deadline(results) == deadline
    assert [r["concurrency"] for r in read_results(results)[0]] == [2, 1] and read_results(results)[1] == 0
    assert read_progress(open(progress_file(results)).read())["deadline"] == deadline


def test_a_run_the_deadline_did_not_stop_has_no_deadline(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "vllm-ascend.jsonl")
    result = load_test.run(params(base_url=server, results_file=results, new_group_deadline_s=3600))
    assert (result["stopped_by_deadline"], result["deadline"]) == (False, None)
    assert bench_record.read_deadline(results) is None
    assert "deadline" not in read_progress(open(progress_file(results)).read())


def test_the_module_warns_of_the_groups_its_deadline_left_out(server):  # noqa: F811
    result = run_module("vllm_benchmark", base_url=server, image_sizes=["32x24"], max_tokens=[3], concurrency=[1, 2],
                        requests_per_group=2, warmup_requests=0, answer_check="none", new_group_deadline_s=0.001)
    assert result["stopped_by_deadline"] is True
    (warning,) = result["warnings"]
    warning = json.dumps(warning)  # ansible-core keeps a warning's text in a record of its own
    assert "new_group_deadline_s (0.001 s) stopped the run " in warning
    assert "1 of its 2 groups was not run (32x24, max_tokens 3, concurrency 2)" in warning
    assert "Fix: raise vllm_bench_new_group_deadline_s" in warning and "vllm_bench_resume=true" in warning


def test_a_failed_run_says_so_in_its_progress_file(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "v.jsonl")
    with pytest.raises(load_test.BenchmarkError, match="model 'gpt-4' is not served at .*; it serves: %s" % MODEL):
        load_test.run(params(base_url=server, model="gpt-4", results_file=results))
    progress = read_progress(open(progress_file(results)).read())
    assert progress["finished"] is True and progress["error"].startswith("model 'gpt-4' is not served")


def test_bad_input_fails_before_any_request_and_says_so_in_the_progress_file(server, tmp_path):  # noqa: F811
    results = str(tmp_path / "v.jsonl")
    with pytest.raises(load_test.BenchmarkError, match="concurrency: 0 is not allowed"):
        load_test.run(params(base_url=server, concurrency=[0], results_file=results))
    assert read_progress(open(progress_file(results)).read())["error"].startswith("concurrency: 0")
    assert Handler.seen == []


def test_check_mode_plans_the_full_matrix_and_touches_nothing(tmp_path):
    results = tmp_path / "v.jsonl"
    planned = load_test.run(params(image_sizes=["1920x1080", "1280x720", "640x480"], max_tokens=[256, 64, 32],
                                   concurrency=[1, 8, 16, 32, 64], requests_per_group=64,
                                   base_url="http://127.0.0.1:9", results_file=str(results)), check_mode=True)
    assert (planned["planned_groups"], planned["planned_requests"]) == (45, 2880) and planned["groups"] == []
    # Per size: waves (64, 8, 4, 2, 1 -> 79) x tokens (256 + 64 + 32 = 352) x 0.09 s; three sizes.
    assert planned["estimated_seconds"] == pytest.approx(round(3 * 79 * 352 * 0.09, 1))
    assert list(tmp_path.iterdir()) == []
    # What the controller follows the run by: every group in the order it runs, with its part of the estimate.
    assert len(planned["planned"]) == 45 and planned["planned"][:2] == [
        {"image_size": "1920x1080", "max_tokens": 256, "concurrency": 1, "requests": 64,
         "estimated_seconds": pytest.approx(round(64 * 256 * 0.09, 1))},
        {"image_size": "1920x1080", "max_tokens": 256, "concurrency": 8, "requests": 64,
         "estimated_seconds": pytest.approx(round(8 * 256 * 0.09, 1))}]
    assert sum(group["estimated_seconds"] for group in planned["planned"]) == pytest.approx(
        planned["estimated_seconds"], abs=0.5)
    # The default pace is the seed's hardware: whoever reads the estimate on a twin learns it is not the twin's.
    assert planned["estimate_basis"] == (
        "estimated from the seed's 310P timings (real hardware: 0.09 s per output token on a 310P3 pair with TP 2); "
        "other hardware, or a stand-in, runs at its own pace")


def test_an_estimate_at_a_pace_given_says_so():
    planned = load_test.run(params(base_url="http://127.0.0.1:9", estimate_seconds_per_token=0.002), check_mode=True)
    assert planned["estimate_basis"] == "estimated at 0.002 s per output token (estimate_seconds_per_token, as given)"


def test_the_key_is_read_from_the_servers_env_file(server, tmp_path):  # noqa: F811
    env_file = tmp_path / "vllm-ascend.env"
    env_file.write_text("VLLM_API_KEY=sk-from-env-file\n")
    client = load_test.validate(params(base_url=server, env_file=str(env_file)))
    assert client.headers["Authorization"] == "Bearer sk-from-env-file"
    env_file.write_text("OTHER=1\n")
    with pytest.raises(openai_client.ClientError, match="env_file .* holds no VLLM_API_KEY=<key> line.*Fix: "):
        load_test.validate(params(base_url=server, env_file=str(env_file)))
    with pytest.raises(openai_client.ClientError, match="env_file .* cannot be read .*FileNotFoundError"):
        load_test.validate(params(base_url=server, env_file=str(tmp_path / "missing.env")))


def test_a_progress_file_that_cannot_be_written_does_not_stop_the_run(server, tmp_path):  # noqa: F811
    """A full disk, or anything else in the way of the progress file: every group is still measured and recorded."""
    results = tmp_path / "vllm-ascend.jsonl"
    (tmp_path / "vllm-ascend.jsonl.progress.json").mkdir()  # where the progress file goes: os.replace fails
    result = load_test.run(params(base_url=server, results_file=str(results)))
    assert [(g["concurrency"], g["completed"]) for g in result["groups"]] == [(1, 2), (2, 2)]
    assert len(read_results(str(results))[0]) == 2
    assert "vllm-ascend.jsonl.progress.json" in result["progress_error"]


# --- the request bodies, each with its own image ------------------------------------------------------------------

def test_load_test_bodies_are_json_with_their_own_image():
    from ansible_collections.ascend.fleet.plugins.module_utils import load_test
    params = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    params.update(prompt='say "ascend-vllm-fleet:image-url"')
    bodies = load_test.LoadTest(params, None, "Qwen3-VL-8B-Instruct").bodies(
        {"image_size": "64x48", "max_tokens": 8, "concurrency": 1, "requests": 3})
    urls = []
    for body in bodies:
        request = json.loads(body)
        image_part, text_part = request["messages"][0]["content"]
        assert text_part["text"] == params["prompt"]
        assert (request["max_tokens"], request["stream"], request["ignore_eos"]) == (8, True, True)
        urls.append(image_part["image_url"]["url"])
        png = base64.b64decode(urls[-1].split(",", 1)[1])
        assert Image.open(io.BytesIO(png)).size == (64, 48)
    assert len(set(urls)) == 3


def test_shared_images_make_one_body():
    from ansible_collections.ascend.fleet.plugins.module_utils import load_test
    params = {name: spec.get("default") for name, spec in load_test.ARGUMENT_SPEC.items()}
    params.update(unique_images=False)
    bodies = load_test.LoadTest(params, None, "m").bodies({"image_size": "64x48", "max_tokens": 8, "concurrency": 1,
                                                            "requests": 3})
    assert len(bodies) == 3 and len(set(bodies)) == 1


# --- options it cannot use, and streams no request should end the run for -----------------------------------------

# The scripted answers here are about streams, not what the model says: the answer check has tests of its own.
SMALL = {"image_sizes": ["32x24"], "max_tokens": [3], "concurrency": [1, 2], "requests_per_group": 2,
         "warmup_requests": 0, "answer_check": "none"}
CONTENT = b'data: {"id": "chatcmpl-1", "choices": [{"delta": {"content": "a"}}]}'
USAGE = b'data: {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}'
DONE = b"data: [DONE]"


def run_load_test(**args):
    return run_module("vllm_benchmark", **dict(SMALL, **args))


def planned(**args):
    """The module in check mode against a closed port: only what it does with its options."""
    return run_load_test(**dict({"base_url": "http://127.0.0.1:%d" % free_port(), "_ansible_check_mode": True}, **args))


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
    result = run_load_test(base_url="http://127.0.0.1:%d" % free_port(), results_file=str(results))
    assert_refused(result, "results_file", str(results))
    assert "cannot reach" not in result["msg"]  # refused before any request
    assert sorted(tmp_path.rglob("*")) == before


def test_a_token_that_cannot_be_sent_does_not_land_in_the_progress_file(tmp_path):
    results = tmp_path / "v.jsonl"
    result = run_load_test(base_url="http://127.0.0.1:%d" % free_port(), results_file=str(results),
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
    result = run_load_test(base_url=scripted)
    assert "failed" not in result, result
    assert [(group["concurrency"], group["failed"], group["errors"]) for group in result["groups"]] == [
        (1, 2, {kind: 2}), (2, 2, {kind: 2})]
    assert all(group["unreliable"] and group["avg_latency_s"] is None for group in result["groups"])


def test_a_good_stream_from_the_same_server_counts_as_completed(scripted):  # noqa: F811
    # The control: what the server of the cases above streams when nothing is wrong.
    Scripted.chat = [CONTENT, USAGE, DONE]
    groups = run_load_test(base_url=scripted)["groups"]
    assert [(group["completed"], group["errors"], group["total_prompt_tokens"]) for group in groups] == [
        (2, {}, 18), (2, {}, 18)]
    assert not math.isnan(groups[0]["avg_latency_s"])


def test_resume_reads_a_results_file_with_bytes_that_are_not_utf8(tmp_path, scripted):  # noqa: F811
    Scripted.chat = [CONTENT, USAGE, DONE]
    results = tmp_path / "v.jsonl"
    record = {"image_size": "32x24", "max_tokens": 3, "concurrency": 1, "unreliable": False, "completed": 2}
    results.write_bytes(b"\xff\xfe{garbage\n" + json.dumps(record).encode() + b"\n")
    result = run_load_test(base_url=scripted, results_file=str(results), resume=True)
    assert [(group["concurrency"], group["resumed"]) for group in result["groups"]] == [(1, True), (2, False)]
    assert Scripted.chats == 2


def test_a_key_read_from_its_env_file_is_masked_when_the_server_echoes_it(tmp_path, scripted):  # noqa: F811
    env_file = tmp_path / "vllm-ascend.env"
    env_file.write_text("VLLM_API_KEY=%s\n" % SECRET)
    Scripted.chat = (500, json.dumps({"error": {"message": "bad key %s in request" % SECRET}}).encode())
    result = run_module("vllm_benchmark", **dict(SMALL, base_url=scripted, env_file=str(env_file),
                                                 answer_check="sane"))
    assert not result.get("failed"), result
    (before, after) = result["answer_checks"]
    assert "HTTP 500" in before["failure"] and "HTTP 500" in after["failure"]
    assert SECRET not in json.dumps(result)


def test_a_run_on_a_results_file_another_run_writes_is_refused_before_it_writes(server, tmp_path):  # noqa: F811
    """A resume started while the earlier job still appends, or a second benchmark at once, would interleave
    their lines: the second is refused, naming the first; the lock goes with the process that held it."""
    import fcntl
    import os

    results = str(tmp_path / "results" / "vllm-ascend.jsonl")
    earlier = hold_results(results)
    try:
        for check_mode in (True, False):
            result = run_module("vllm_benchmark", base_url=server, results_file=results, resume=True,
                                image_sizes=["32x24"], max_tokens=[3], concurrency=[1], requests_per_group=1,
                                warmup_requests=0, answer_check="none", _ansible_check_mode=check_mode)
            assert_refused(result, "results_file %s is being written by another run of the benchmark (pid %d"
                           % (results, os.getpid()), "kill %d" % os.getpid())
        assert not os.path.exists(results) and not os.path.exists(progress_file(results)), "nothing written"
    finally:
        os.close(earlier)
    done = load_test.run(params(base_url=server, results_file=results))
    assert len(done["groups"]) == 2
    with open(results + ".lock") as lock:  # free again once the run ended
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


class Trickling(Handler):
    """Handler whose streamed answer takes 2 s, a word every 0.25 s: a long answer still being delivered."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _word in range(8):
            self.wfile.write(b'data: {"id": "c", "choices": [{"delta": {"content": "a"}}]}\n\n')
            self.wfile.flush()
            time.sleep(0.25)
        self.wfile.write(b'data: {"id": "c", "choices": [], "usage": {"prompt_tokens": 318, "completion_tokens": 8, '
                         b'"total_tokens": 326}}\n\ndata: [DONE]\n\n')


def test_the_progress_file_stays_fresh_while_streams_deliver_and_none_ends(tmp_path, monkeypatch):
    """Answers of hundreds of tokens at high concurrency take minutes on 310P: while a group's streams still
    deliver, with no request ended, the progress file is written again every PROGRESS_EVERY_S, so whoever follows
    it never takes the run for stalled."""
    monkeypatch.setattr(load_test, "PROGRESS_EVERY_S", 0.1)
    monkeypatch.setattr(bench_record, "PROGRESS_EVERY_S", 0.1)
    results = str(tmp_path / "vllm-ascend.jsonl")
    seen, done = set(), threading.Event()

    def watch():
        while not done.is_set():
            try:
                progress = read_progress(open(progress_file(results)).read())
            except (OSError, ValueError):
                continue
            if progress.get("group_number") == 1 and progress.get("requests_done") == 0:
                seen.add(progress["updated_at"])

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with serving(Trickling) as url:
            result = load_test.run(params(base_url=url, results_file=results, concurrency=[1], requests_per_group=1,
                                          warmup_requests=0))
    finally:
        done.set()
        watcher.join()
    assert [g["completed"] for g in result["groups"]] == [1]
    assert len(seen) >= 3, "written %d times while the first answer streamed" % len(seen)


def test_a_record_that_cannot_be_written_ends_the_run_naming_the_file_and_what_stays(server, tmp_path,  # noqa: F811
                                                                                     monkeypatch):
    """A full disk: the second group's record fails to be written. The run ends there with the cause and the fix,
    and the first group's record stays as it was written."""
    results = str(tmp_path / "vllm-ascend.jsonl")
    real_append, appended = load_test.append_result, []

    def append_until_full(path, record):
        if appended:
            raise OSError(28, "No space left on device")
        appended.append(record)
        real_append(path, record)

    monkeypatch.setattr(load_test, "append_result", append_until_full)
    with pytest.raises(load_test.BenchmarkError) as refused:
        load_test.run(params(base_url=server, results_file=results))
    message = str(refused.value)
    assert "the record of group 2 of 2 could not be written (No space left on device)" in message
    assert "the 1 groups recorded before it stay" in message and "vllm_bench_resume=true" in message
    assert [r["concurrency"] for r in read_results(results)[0]] == [1]
    assert read_progress(open(progress_file(results)).read())["error"] == message


def test_a_run_returns_its_records_as_facts_of_the_host_and_a_plan_returns_none(server, tmp_path):  # noqa: F811
    """Run through Ansible's module runner: ansible_facts.vllm_benchmark carries the group records, the answer
    checks and the key figures of each image size and output length."""
    results = str(tmp_path / "vllm-ascend.jsonl")
    result = run_load_test(base_url=server, results_file=results, concurrency=[1, 2, 4], requests_per_group=4)
    facts = result["ansible_facts"]["vllm_benchmark"]
    assert facts["groups"] == result["groups"] and len(facts["groups"]) == 3
    assert facts["base_url"] == server and facts["results_file"] == results and facts["model"] == MODEL
    assert facts["finished_at"] >= max(group["finished_at"] for group in facts["groups"])
    (line,) = facts["summary"]
    peak = max(facts["groups"], key=lambda group: group["output_tokens_per_s"])
    assert (line["image_size"], line["max_tokens"], line["groups"]) == ("32x24", 3, 3)
    assert (line["peak_output_tokens_per_s"], line["peak_concurrency"]) == (peak["output_tokens_per_s"],
                                                                           peak["concurrency"])
    assert line["lowest_concurrency"] == 1 and line["lowest_concurrency_p95_latency_s"] == facts["groups"][0][
        "p95_latency_s"]
    assert "ansible_facts" not in planned()


def test_the_summary_leaves_out_unreliable_groups_and_lines_with_none():
    records = [{"image_size": "640x480", "max_tokens": 32, "concurrency": c, "output_tokens_per_s": t,
                "p95_latency_s": c / 10.0, "p95_ttft_s": 0.1, "unreliable": u}
               for c, t, u in ((1, 10.0, False), (8, 90.0, True), (4, 40.0, False))]
    records.append({"image_size": "1920x1080", "max_tokens": 32, "concurrency": 1, "output_tokens_per_s": None,
                    "p95_latency_s": None, "p95_ttft_s": None, "unreliable": False})
    (line,) = bench_record.summary(records)
    assert (line["peak_concurrency"], line["peak_output_tokens_per_s"], line["groups"]) == (4, 40.0, 2)
    assert bench_record.summary([]) == []


class VirtualClock:
    """time for the module, in virtual seconds: a sleep advances it at once."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += max(0.0, seconds)


class InlineThread:
    def __init__(self, target, args=(), daemon=None):
        self.target, self.args = target, args

    def start(self):
        self.target(*self.args)

    def is_alive(self):
        return False


@pytest.mark.parametrize("burstiness,spread", [(1.0, (0.85, 1.15)), (0.25, (1.7, 2.3))])
def test_open_loop_arrivals_come_at_the_rate_with_the_burstiness_asked(monkeypatch, burstiness, spread):
    """The gaps between sends average 1/rate, with the coefficient of variation of a gamma of that shape
    (1/sqrt(burstiness)): 1 for a Poisson process, 2 for a shape of 0.25."""
    from ansible_collections.ascend.fleet.plugins.module_utils import load_test as bench
    clock = VirtualClock()
    monkeypatch.setattr(bench, "time", clock)
    # Each request runs to its end when it is sent, so that it reads the clock at its arrival.
    monkeypatch.setattr(bench, "threading", types.SimpleNamespace(Thread=InlineThread))
    sent = []

    class Client:
        def stream_chat(self, body, result, max_tokens):
            sent.append(clock.now)

    params = {name: spec.get("default") for name, spec in bench.ARGUMENT_SPEC.items()}
    group = {"image_size": "64x48", "max_tokens": 4, "concurrency": 1, "requests": 2000}
    load_test = bench.LoadTest(params, Client(), "m")
    results = load_test.run_open_loop(group, ["{}"] * 2000, 10.0, burstiness, lambda: None)
    assert len(results) == 2000 and all(results)
    gaps = [later - earlier for earlier, later in zip(sent, sent[1:])]
    average = sum(gaps) / len(gaps)
    deviation = (sum((gap - average) ** 2 for gap in gaps) / len(gaps)) ** 0.5
    assert average == pytest.approx(0.1, rel=0.1)
    assert spread[0] <= deviation / average <= spread[1]
