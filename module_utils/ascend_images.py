# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test images made on the managed host with the standard library: hosts may have no internet and no PIL.

Photo-like content (smooth gradients with noise) rather than flat colour, so that an image's encoded size and
the server's preprocessing cost look like a real photo's, and each seed gives a different image.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import math
import random
import struct
import zlib

BAND_ROWS = 32


def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_image(width, height, seed=0):
    """PNG bytes of a width x height RGB picture; a different seed gives different pixels.

    Rows are built with bytes.translate so that a 1920x1080 image takes milliseconds, not seconds: a few noisy
    horizontal patterns (smooth per-channel waves) are lightened or darkened by a vertical curve that steps every
    32 rows. The steps let deflate find repeated rows, so a 1920x1080 image is about 0.7 MB, the size of a
    photo's JPEG: the upload costs what a real request's does.
    """
    rng = random.Random(seed)
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
        rows.append(b"\x00" + patterns[(y * 7 + seed) % 4].translate(tables[lift]))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(b"".join(rows), 6))
            + _chunk(b"IEND", b""))


def _clip(value):
    return 0 if value < 0 else 255 if value > 255 else int(value)


def data_url(png):
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
