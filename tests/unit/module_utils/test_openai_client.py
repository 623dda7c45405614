"""module_utils/openai_client.py against a small local server that answers as vLLM's OpenAI API does
(tests/fake_vllm.py)."""
import base64
import http.server
import json
import time

import pytest
from fake_vllm import FIRST_TOKEN_DELAY_S, Handler, server, serving  # noqa: F401  (the fixture)

from ansible_collections.ascend.fleet.plugins.module_utils.openai_client import (
    IMAGE_PLACEHOLDER,
    Client,
    ClientError,
    ImageChat,
    StreamResult,
    image_data_url,
    stream_lines,
)
from ansible_collections.ascend.fleet.plugins.module_utils.png_images import png_image
from conftest import free_port


def streamed(url, model, timeout=10):
    result = StreamResult()
    Client(url, "sk-test", timeout).stream_chat(ImageChat(model, "描述一下图片", 3, stream=True).body("data:,"), result)
    return result


def test_models_are_listed_with_the_bearer_key(server):  # noqa: F811
    assert Client(server, "sk-test").models() == ["Qwen3-VL-8B-Instruct"]
    assert Handler.seen == [("/v1/models", "Bearer sk-test")]


def test_a_path_in_base_url_prefixes_every_request_and_no_key_sends_no_header(server):  # noqa: F811
    Client(server + "/prefix/", None).call("GET", "/health")
    assert Handler.seen == [("/prefix/health", None)]


def test_a_streamed_answer_fills_the_result(server):  # noqa: F811
    before = time.monotonic()
    result = streamed(server, "ok")
    assert result.error is None and result.request_id == "chatcmpl-7"
    assert (result.prompt_tokens, result.completion_tokens) == (318, 3)
    assert before <= result.sent and result.sent + FIRST_TOKEN_DELAY_S <= result.first_token <= result.finished
    assert Handler.seen == [("/v1/chat/completions", "Bearer sk-test")]


@pytest.mark.parametrize("model,error", [("http_500", "http_500"), ("cut", "truncated_stream"),
                                         ("no_usage", "no_usage")])
def test_a_failed_stream_says_how(server, model, error):  # noqa: F811
    result = streamed(server, model)
    assert result.error == error and result.completion_tokens is None and result.finished is not None


def test_a_stalled_stream_times_out(server):  # noqa: F811
    result = streamed(server, "stall", timeout=0.5)
    assert result.error == "timeout" and result.finished - result.sent < 2.5


def test_a_closed_port_is_refused_and_unreachable_models_say_how_to_fix():
    closed = "http://127.0.0.1:%d" % free_port()
    assert streamed(closed, "ok").error == "connection_refused"
    status, why = Client(closed).call("GET", "/health")
    assert status is None and "refused" in why.lower()
    with pytest.raises(ClientError, match="cannot reach %s/v1/models: .*Fix: check that the server runs" % closed):
        Client(closed).models()


def test_a_whole_answer_is_parsed_json_and_other_text_stays_text(server):  # noqa: F811
    client = Client(server)
    status, reply = client.chat(ImageChat("ok", "hi", 2).body("data:,"))
    assert status == 200 and reply["choices"][0]["message"]["content"] == "a picture"
    assert client.call("GET", "/health") == (200, "ok")


@pytest.mark.parametrize("base_url", ["127.0.0.1:8000", "ftp://host/", "http://"])
def test_a_base_url_that_is_no_http_address_is_refused(base_url):
    with pytest.raises(ClientError, match="expected http://host:port"):
        Client(base_url)


def test_the_image_goes_where_the_image_belongs_even_when_the_prompt_names_the_placeholder():
    chat = ImageChat(IMAGE_PLACEHOLDER, 'say "%s"' % IMAGE_PLACEHOLDER, 64, stream=True, ignore_eos=False)
    url = image_data_url(png_image(8, 6))
    request = json.loads(chat.body(url).decode("utf-8"))
    image, text = request["messages"][0]["content"]
    assert image == {"type": "image_url", "image_url": {"url": url}}
    assert text == {"type": "text", "text": 'say "%s"' % IMAGE_PLACEHOLDER}
    assert request["model"] == IMAGE_PLACEHOLDER and request["max_tokens"] == 64
    assert request["stream_options"] == {"include_usage": True} and request["ignore_eos"] is False
    assert set(json.loads(ImageChat("m", "p", 8).body(url))) == {"messages", "model", "max_tokens"}


def test_data_urls_name_png_and_jpeg():
    png = png_image(4, 3)
    assert image_data_url(png) == "data:image/png;base64," + base64.b64encode(png).decode()
    assert image_data_url(b"\xff\xd8\xff\xe0jfif").startswith("data:image/jpeg;base64,/9j/")


class Pieces:
    """An answer whose read1 hands over the given pieces of bytes, one a call, as a socket may."""

    def __init__(self, pieces):
        self.pieces = list(pieces)

    def read1(self, _limit):
        return self.pieces.pop(0) if self.pieces else b""


def test_lines_come_whole_however_the_bytes_arrive():
    stream = b'data: {"id": "a"}\n\ndata: [DONE]\n\nno newline at the end'
    expected = stream.split(b"\n")
    for cut in range(1, len(stream)):
        assert list(stream_lines(Pieces([stream[:cut], stream[cut:]]))) == expected
    assert list(stream_lines(Pieces([bytes([byte]) for byte in stream]))) == expected
    assert list(stream_lines(Pieces([]))) == []


class Hostile(http.server.BaseHTTPRequestHandler):
    """Answers no vLLM gives: /trickle sends its body a byte every 0.2 s, /huge sends 9 MB, a chat under /endless
    streams tokens for ever, any other chat streams a line of 2 MB without a newline."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _byte in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        elif self.path == "/huge":
            body = b"[" + b"0," * (9 << 19) + b"0]"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.path.endswith("/endless/v1/chat/completions"):
            # Tokens for ever: one event every 10 ms, until the client leaves.
            while True:
                self.wfile.write(b'data: {"id": "c", "choices": [{"delta": {"content": "a"}}]}\n\n')
                self.wfile.flush()
                time.sleep(0.01)
        self.wfile.write(b"data: " + b"a" * (2 << 20))
        self.wfile.flush()


def test_an_answer_trickled_a_byte_at_a_time_ends_at_the_timeout():
    """Each byte comes well within the timeout; the whole answer never does."""
    with serving(Hostile) as url:
        # Read to its end, the answer would be (200, "xxx...") after 20 s.
        assert Client(url).call("GET", "/trickle", timeout=1) == (None, "no whole answer within 1s")


def test_an_answer_larger_than_any_vllm_gives_is_not_read_whole():
    with serving(Hostile) as url:
        status, why = Client(url).call("GET", "/huge", timeout=30)
    assert status is None and "more than 8 MB" in why


def test_a_stream_line_without_end_is_a_malformed_stream():
    with serving(Hostile) as url:
        result = StreamResult()
        Client(url, timeout=30).stream_chat(b"{}", result)
    assert result.error == "malformed_stream"


def test_a_stream_longer_than_max_tokens_allows_ends_as_stream_too_long():
    """Each event comes within the timeout; a server that never ends its answer is cut off by the count."""
    with serving(Hostile) as url:
        result = StreamResult()
        Client(url + "/endless", timeout=30).stream_chat(b"{}", result, max_tokens=5)
    assert result.error == "stream_too_long" and result.finished - result.sent < 30
