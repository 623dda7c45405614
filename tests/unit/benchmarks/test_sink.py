"""benchmarks/sink.py, the ground-truth server of benchmarks/accuracy.py: it answers as vLLM streams, on its
schedule, and logs what it did."""
import base64
import contextlib
import json
import subprocess
import sys

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import (
    Client,
    ImageChat,
    StreamResult,
    image_data_url,
)
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import png_image
from benchmarks import sink
from conftest import REPO

TTFT_S, TPOT_S = 0.15, 0.01
# The log's times are written to the microsecond.
LOGGED_TO_S = 1e-5


@contextlib.contextmanager
def running(log):
    process = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "sink.py"), "--log", str(log),
                                "--ttft-ms", str(1000 * TTFT_S), "--tpot-ms", str(1000 * TPOT_S), "--model", "m"],
                               stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().split()[-1]
    finally:
        process.terminate()
        process.wait()


def log_records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_streamed_answer_keeps_the_schedule_and_is_logged(tmp_path):
    log = tmp_path / "requests.jsonl"
    with running(log) as url:
        client = Client(url)
        assert client.models() == ["m"]
        result = StreamResult()
        client.stream_chat(ImageChat("m", "describe", 5, stream=True).body(image_data_url(png_image(640, 480))),
                           result)
    assert result.error is None and result.completion_tokens == 5
    assert result.prompt_tokens == 20 * 15 + 2 + len("describe") // 2 + 1
    assert result.first_token - result.sent >= TTFT_S
    # The schedule runs from the request, not from the first token (a first token late on a busy machine makes
    # the next ones come sooner): the last comes no sooner than TTFT and four gaps after sending.
    assert result.finished - result.sent >= TTFT_S + 4 * TPOT_S
    (record,) = log_records(log)
    assert (record["id"], record["status"], record["max_tokens"]) == (result.request_id, "ok", 5)
    assert record["received_s"] <= record["body_read_s"] <= record["first_token_s"] <= record["finished_s"]
    assert record["intended_first_token_s"] == pytest.approx(record["body_read_s"] + TTFT_S, abs=LOGGED_TO_S)
    assert record["intended_finished_s"] == pytest.approx(record["body_read_s"] + TTFT_S + 4 * TPOT_S, abs=LOGGED_TO_S)
    assert 0 <= record["first_token_s"] - record["intended_first_token_s"] < 0.1
    assert record["latency_s"] == pytest.approx(record["finished_s"] - record["received_s"], abs=LOGGED_TO_S)


def test_the_events_are_vllms(tmp_path):
    log = tmp_path / "requests.jsonl"
    with running(log) as url:
        connection = Client(url).connection()
        connection.request("POST", "/v1/chat/completions", body=ImageChat("m", "hi", 3, stream=True).body("data:,"))
        response = connection.getresponse()
        assert response.getheader("transfer-encoding") == "chunked"
        events = [line[len(b"data: "):] for line in response.read().split(b"\n") if line]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert [chunk["choices"][0]["delta"] for chunk in chunks[:3]] == [
        {"role": "assistant", "content": "tok"}, {"content": " tok"}, {"content": " tok"}]
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks[:3]] == [None, None, "length"]
    assert chunks[3]["choices"] == [] and chunks[3]["usage"]["completion_tokens"] == 3


def test_no_usage_unless_asked_and_whole_answers_and_bad_requests(tmp_path):
    log = tmp_path / "requests.jsonl"
    with running(log) as url:
        client = Client(url)
        body = json.dumps({"model": "m", "max_tokens": 2, "stream": True, "messages": []}).encode()
        result = StreamResult()
        client.stream_chat(body, result)
        assert result.error == "no_usage"
        status, answer = client.chat(ImageChat("m", "hi", 2).body("data:,"))
        assert status == 200 and answer["usage"]["completion_tokens"] == 2
        status, answer = client.chat(ImageChat("m", "hi", 0).body("data:,"))
        assert status == 400 and "max_tokens" in answer["error"]["message"]
    assert [record["stream"] for record in log_records(log)] == [True, False]


def test_the_image_is_cut_out_before_the_json_is_read():
    url = image_data_url(png_image(1920, 1080))
    request, tokens = sink.read_request(ImageChat("m", "p" * 10, 7, stream=True).body(url))
    assert request["messages"][0]["content"][0]["image_url"]["url"] == ""
    assert (request["max_tokens"], request["stream_options"]) == (7, {"include_usage": True})
    assert tokens == 2040 + 2 + 5 + 1
    assert sink.image_tokens(url.encode()) == 2042
    quoted = ImageChat("m", 'say "data:,"', 7).body(url)
    assert sink.read_request(quoted)[0]["messages"][0]["content"][1]["text"] == 'say "data:,"'
    with pytest.raises(ValueError):
        sink.read_request(b'{"messages": [], "x": "data:,')
    for other in (b"data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff" + bytes(40)), b"data:,",
                  b"data:image/png;base64,iVBOR", b"data:image/png;base64,not base64 at all!!!!!!!!!!!!!!!!"):
        assert sink.image_tokens(other) == 0
