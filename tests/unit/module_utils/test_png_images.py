"""module_utils/png_images.py: every image of a series is a valid PNG of its size, with pixels of its own."""
import io
import random
import re
import struct
import zlib

import pytest
from PIL import Image

from ansible_collections.ascend.fleet.plugins.module_utils import png_images

SIZES = [(1920, 1080), (640, 480), (33, 9), (5, 3), (1, 1)]


def idat_stream(png):
    """The zlib stream of a PNG: its IDAT chunks' data, joined, each chunk's CRC checked on the way."""
    stream, at = b"", 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        data = png[at + 8:at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length:at + 12 + length])[0] == zlib.crc32(kind + data)
        if kind == b"IDAT":
            stream += data
        at += 12 + length
    return stream


@pytest.mark.parametrize("width,height", SIZES)
def test_two_images_of_a_size_decode_to_it_and_differ_in_pixels(width, height):
    series = png_images.ImageSeries(width, height)
    decoded = []
    for seed in (0, 1, 2):
        image = Image.open(io.BytesIO(series.png(seed)))
        image.load()
        assert image.size == (width, height) and image.mode == "RGB"
        decoded.append(image.tobytes())
    assert len(set(decoded)) == 3


@pytest.mark.parametrize("width,height", SIZES)
def test_the_joined_stream_is_one_valid_zlib_stream(width, height):
    png = png_images.ImageSeries(width, height).png(7)
    raw = zlib.decompress(idat_stream(png))  # checks the combined Adler-32
    assert len(raw) == height * (1 + 3 * width)


def test_adler32_combine_is_zlibs():
    rng = random.Random(3)
    for _case in range(50):
        first = bytes(rng.getrandbits(8) for _byte in range(rng.randint(0, 300)))
        second = bytes(rng.getrandbits(8) for _byte in range(rng.randint(0, 70000)))
        combined = png_images.adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
        assert combined == zlib.adler32(first + second)


def test_a_full_size_image_weighs_what_a_photo_does():
    assert 500000 < len(png_images.png_image(1920, 1080)) < 1000000


@pytest.mark.parametrize("text,size", [("1920x1080", (1920, 1080)), (" 640x480 ", (640, 480)), ("1x1", (1, 1))])
def test_sizes_are_width_x_height(text, size):
    assert png_images.parse_size(text) == size


@pytest.mark.parametrize("text", ["1920*1080", "1920x", "0x480", "640x480x3", "", "-640x480"])
def test_other_sizes_are_named_in_the_error(text):
    with pytest.raises(ValueError, match=r"^%s is not WIDTHxHEIGHT" % re.escape(repr(text))):
        png_images.parse_size(text)
