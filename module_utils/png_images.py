# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PNG test images made on the managed host with the standard library: hosts may have no internet and no PIL.

Photo-like content (smooth gradients with noise) rather than flat colour, so that an image's encoded size and
the server's preprocessing cost look like a real photo's, and each seed gives a different image.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import random
import re
import struct
import zlib

BAND_ROWS = 32
# Rows at the top of an image that differ from one image of a series to the next; the rest is shared.
UNIQUE_ROWS = 8
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The zlib header of a deflate stream with a 32 KiB window at the default level (RFC 1950).
ZLIB_HEADER = b"\x78\x9c"
ADLER_BASE = 65521
SIZE = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)$")
# The longest side of an image made on the host: the rows of an 8192x8192 picture take about 200 MB there.
MAX_SIDE = 8192


def parse_size(text):
    """(width, height) of an image size written WIDTHxHEIGHT, as every option and record of the collection
    writes sizes; ValueError names the text otherwise."""
    match = SIZE.match(str(text).strip())
    if not match:
        raise ValueError("%r is not WIDTHxHEIGHT (for example 1920x1080)" % (text,))
    return int(match.group(1)), int(match.group(2))


def generated_size(text):
    """parse_size's (width, height) when the host can make an image that large; ValueError names the text
    otherwise."""
    width, height = parse_size(text)
    if max(width, height) > MAX_SIDE:
        raise ValueError("%r is larger than the %dx%d images made on the host" % (text, MAX_SIDE, MAX_SIDE))
    return width, height


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def adler32_combine(adler1, adler2, length2):
    """The Adler-32 of A + B from those of A and B and the length of B (zlib's adler32_combine)."""
    remainder = length2 % ADLER_BASE
    sum1 = adler1 & 0xFFFF
    sum2 = (remainder * sum1) % ADLER_BASE
    sum1 += (adler2 & 0xFFFF) + ADLER_BASE - 1
    sum2 += ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + ADLER_BASE - remainder
    sum1 %= ADLER_BASE
    sum2 %= ADLER_BASE
    return sum1 | (sum2 << 16)


def _photo_rows(width, height):
    """The filtered scanlines (filter byte 0, then RGB) of a photo-like width x height picture.

    Rows are built with bytes.translate so that a 1920x1080 image takes milliseconds, not seconds: a few noisy
    horizontal patterns (smooth per-channel waves) are lightened or darkened by a vertical curve that steps every
    32 rows. The steps let deflate find repeated rows, so a 1920x1080 image is about 0.7 MB, the size of a
    photo's JPEG: the upload costs what a real request's does.
    """
    rng = random.Random(0)
    phases = [rng.random() * 2 * math.pi for _channel in range(4)]
    base = bytearray()
    for x in range(width):
        for channel in range(3):
            wave = 110 + 80 * math.sin(x / float(width) * math.pi * (channel + 1.5) + phases[channel])
            base.append(_clip(wave + rng.randint(-14, 14)))
    patterns = [bytes(base)] + [bytes(_clip(value + rng.randint(-12, 12)) for value in base)
                                for _variant in range(3)]
    tables = {}
    rows = []
    for y in range(height):
        lift = int(48 + 46 * math.sin((y // BAND_ROWS) * BAND_ROWS / float(height) * math.pi * 1.7 + phases[3]))
        if lift not in tables:
            tables[lift] = bytes(_clip(value * 3 // 4 + lift) for value in range(256))
        rows.append(b"\x00" + patterns[(y * 7) % 4].translate(tables[lift]))
    return rows


class ImageSeries:
    """PNG images of one size, each with pixels of its own, made for the price of a few rows each.

    Every image shares the picture below its first UNIQUE_ROWS rows, deflated once for the series. An image's
    own rows (the shared ones shifted by a table drawn from its seed, the seed itself written into the first
    pixels) are deflated alone and end with a full flush, so the shared stream may follow them: the zlib
    stream is header + own rows + shared rows + the Adler-32 of both, combined without reading the shared rows
    again. The parts go in three IDAT chunks, which PNG joins into one stream, so only the small ones get a
    new CRC. Distinct seeds give images that differ in pixels, as a server's image cache sees them.
    """

    def __init__(self, width, height):
        rows = _photo_rows(width, height)
        self._own_rows = rows[:UNIQUE_ROWS]
        shared = b"".join(rows[UNIQUE_ROWS:])
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        self._shared_chunk = _chunk(b"IDAT", compressor.compress(shared) + compressor.flush())
        self._shared_adler, self._shared_length = zlib.adler32(shared), len(shared)
        self._header = PNG_SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))

    def png(self, seed):
        """The PNG bytes of image number `seed` (0 or more) of the series."""
        rng = random.Random(seed)
        table = bytes(_clip(value + rng.randint(-12, 12)) for value in range(256))
        own = [row[:1] + row[1:].translate(table) for row in self._own_rows]
        stamp = struct.pack("<Q", seed)[:max(0, len(own[0]) - 1)]
        own[0] = own[0][:1] + stamp + own[0][1 + len(stamp):]
        own = b"".join(own)
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        deflated = compressor.compress(own) + compressor.flush(zlib.Z_FULL_FLUSH)
        adler = adler32_combine(zlib.adler32(own), self._shared_adler, self._shared_length)
        return (self._header + _chunk(b"IDAT", ZLIB_HEADER + deflated) + self._shared_chunk
                + _chunk(b"IDAT", struct.pack(">I", adler)) + _chunk(b"IEND", b""))


def png_image(width, height, seed=0):
    """PNG bytes of a width x height RGB picture; a different seed gives different pixels."""
    return ImageSeries(width, height).png(seed)


def shapes_png(width, height, squares, colour, background=(255, 255, 255)):
    """PNG bytes of a plain background with filled squares of one colour, each square (left, top, side) in
    pixels: a picture whose content has one right description, for questions a vision model must answer
    (module_utils/answer_check.py). Parts of a square outside the picture are left out."""
    back = bytes(background) * width
    paint = bytes(colour)
    rows = []
    for y in range(height):
        row = bytearray(back)
        for left, top, side in squares:
            if top <= y < top + side:
                start, end = max(0, left), min(width, left + side)
                if start < end:
                    row[start * 3:end * 3] = paint * (end - start)
        rows.append(b"\x00" + bytes(row))
    return (PNG_SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"".join(rows), 6)) + _chunk(b"IEND", b""))


def _clip(value):
    return 0 if value < 0 else 255 if value > 255 else int(value)
