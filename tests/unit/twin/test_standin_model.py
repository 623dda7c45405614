"""The stand-in's arithmetic: Qwen3-VL image tokens and the latency model's calibration to the seed."""
import base64
import struct

import pytest

from ansible_collections.ascend.fleet.plugins.module_utils.bench_record import percentile
from conftest import png_image
from twin.vllm_standin import engine, images, server
from twin.vllm_standin.server import count_prompt

SEED_PROMPT = "描述一下图片"


@pytest.mark.parametrize("size,tokens", [((1920, 1080), 2040), ((1280, 720), 880), ((640, 480), 300)])
def test_image_tokens_for_the_seed_sizes(size, tokens):
    assert images.image_tokens(*size) == tokens + images.IMAGE_WRAPPER_TOKENS


def test_max_pixels_cap_shrinks_1080p_to_1222_tokens():
    assert images.image_tokens(1920, 1080, max_pixels=1280 * 32 * 32) == 1222 + 2


def test_tiny_images_are_scaled_up_to_the_minimum_pixels():
    assert images.smart_resize(32, 32) == (256, 256)


@pytest.mark.parametrize("width,height", [(640, 480), (33, 7)])
def test_image_size_of_png(width, height):
    assert images.image_size(png_image(width, height)) == (width, height)


def test_image_size_of_jpeg_gif_bmp():
    jpeg = (b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
            + b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 1080, 1920) + b"\x00" * 12)
    assert images.image_size(jpeg) == (1920, 1080)
    assert images.image_size(b"GIF89a" + struct.pack("<HH", 1280, 720) + b"\x00" * 8) == (1280, 720)
    bmp = b"BM" + b"\x00" * 16 + struct.pack("<ii", 640, -480) + b"\x00" * 8
    assert images.image_size(bmp) == (640, 480)


def test_unknown_image_bytes_are_refused():
    with pytest.raises(images.ImageError):
        images.image_size(b"not an image at all")


def seed_prompt_tokens(width, height):
    """Prompt tokens the stand-in counts for the seed's request at one image size."""
    url = "data:image/png;base64," + base64.b64encode(png_image(width, height)).decode()
    body = {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": SEED_PROMPT}]}]}
    return count_prompt(body)


def test_prompt_tokens_are_image_plus_text_plus_template():
    tokens = seed_prompt_tokens(640, 480)
    assert tokens == 302 + 4 + 11  # image (with start/end), six characters of text, chat template


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720), (640, 480)])
def test_one_256_token_answer_alone_takes_about_23_s(size):
    (request,) = engine.simulate_closed_loop(seed_prompt_tokens(*size), 256, concurrency=1, requests=1)
    # Seed: "single request takes 23 s+ for all three sizes; image size is not the bottleneck".
    assert 22.5 <= request.latency_s <= 24.0


def test_p95_at_640x480_32_tokens_concurrency_32_is_about_4_2_s():
    results = engine.simulate_closed_loop(seed_prompt_tokens(640, 480), 32, concurrency=32, requests=64)
    p95 = percentile([r.latency_s for r in results], 95)
    assert p95 == pytest.approx(4.2, rel=0.05)


def test_throughput_rises_with_concurrency_at_1080p():
    prompt = seed_prompt_tokens(1920, 1080)
    rps = []
    for concurrency in (1, 8, 16, 32, 64):
        results = engine.simulate_closed_loop(prompt, 256, concurrency=concurrency, requests=64)
        rps.append(64 / max(r.finished_s for r in results))
    assert rps == sorted(rps) and rps[-1] > 10 * rps[0]


def test_closed_loop_keeps_concurrency_requests_in_flight():
    results = engine.simulate_closed_loop(300, 16, concurrency=8, requests=40)
    for request in results:
        in_flight = sum(1 for other in results if other.sent_s <= request.sent_s < other.finished_s)
        assert in_flight <= 8
    assert sum(1 for r in results if r.sent_s == 0) == 8




class LateClock:
    """The server's clock, in virtual time: every sleep overshoots by ``late`` (a loaded machine), or the sleep
    numbered ``stall_at`` by ``stall`` (a machine that stopped a while)."""

    def __init__(self, late=0.0, stall_at=None, stall=0.0):
        self.now, self.sleeps = 1000.0, 0
        self.late, self.stall_at, self.stall = late, stall_at, stall

    def monotonic(self):
        return self.now

    time = monotonic

    def sleep(self, seconds):
        self.sleeps += 1
        self.now += seconds + self.late + (self.stall if self.sleeps == self.stall_at else 0.0)


def answer_time(monkeypatch, clock, tokens=20):
    """Seconds from submitting one request to its last token, on ``clock``."""
    monkeypatch.setattr(server, "time", clock)
    events = server.Engine(engine.SEED_MODEL, speed=1).submit(100, tokens, "length")
    start = clock.now
    while True:
        stamp, _, last = events.get(timeout=10)
        if last:
            return stamp - start


def test_a_late_engine_step_is_made_up_by_the_next_not_added_to_each(monkeypatch):
    on_time = answer_time(monkeypatch, LateClock())
    assert answer_time(monkeypatch, LateClock(late=0.01)) == pytest.approx(on_time + 0.01, abs=1e-6)


def test_a_pause_longer_than_the_make_up_is_lost_once(monkeypatch):
    on_time = answer_time(monkeypatch, LateClock())
    stalled = answer_time(monkeypatch, LateClock(stall_at=3, stall=1.0))
    assert stalled == pytest.approx(on_time + 1.0 - server.MAKE_UP_S, abs=1e-6)
