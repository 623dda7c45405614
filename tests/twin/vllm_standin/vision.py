"""What the stand-in's model says: it reads a picture of squares as a healthy vision model does, and answers how
many there are or what colour they are, in the question's language; anything else gets the stand-in's image
description.

``VLLM_TWIN_ANSWERS_FILE`` (default ``/root/.cache/vllm-twin/answers-<port>``, on the host under the seed's cache
mount) holds how the model answers, read at every request so a test can make a running model go bad:
- ``healthy`` (or no file): right answers;
- ``bang``: ``!`` repeated to the answer's length, as an fp16 overflow on 310P answers (vllm-ascend #562);
- ``repeat``: ``你好，，，我，我，，`` repeated, the degenerate text of vllm-ascend #5144;
- ``wrong``: fluent answers that are wrong (two squares too many, another colour), as another model's
  weights or a broken image processor give; descriptions stay fluent.

The picture is decoded (PNG, 8-bit RGB or RGBA, every filter type) and sampled every few pixels: the
background is the colour of the top-left corner, the squares are the connected areas of other colours, their
colour the nearest of a small palette to their mean.
"""
import base64
import binascii
import re
import struct
import zlib

MODES = ("healthy", "bang", "repeat", "wrong")
DEGENERATE_UNITS = {"bang": "!", "repeat": "你好，，，我，我，，"}
# Palette: name, RGB, Chinese name.
PALETTE = (("red", (220, 30, 30), "红"), ("green", (30, 160, 60), "绿"), ("blue", (30, 80, 220), "蓝"),
           ("yellow", (235, 200, 20), "黄"))
SAMPLE_PX = 4
# A sampled pixel this far (largest channel difference) from the background belongs to a shape; an area of fewer
# samples than this is noise.
FOREGROUND_DISTANCE = 60
SHAPE_SAMPLES = 4
COUNT_QUESTION = re.compile(r"how many|几个|多少|幾個", re.I)
COLOUR_QUESTION = re.compile(r"colou?r|颜色|顏色", re.I)
CJK = re.compile(r"[\u4e00-\u9fff]")


class Unreadable(ValueError):
    pass


def mode_of(path):
    """How the model answers now, from the answers file (MODES); healthy without one."""
    try:
        with open(path) as handle:
            mode = handle.read().strip()
    except OSError:
        return "healthy"
    return mode if mode in MODES else "healthy"


def decode_png(data):
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA PNG; Unreadable otherwise."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise Unreadable("not a PNG")
    offset, idat, header = 8, [], None
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        offset += 12 + length
    if not header or header[2] != 8 or header[3] not in (2, 6) or header[6]:
        raise Unreadable("not an 8-bit RGB or RGBA PNG without interlacing")
    width, height, channels = header[0], header[1], 3 if header[3] == 2 else 4
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as error:
        raise Unreadable(str(error)) from None
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        if start + stride + 1 > len(raw):
            raise Unreadable("image data ends early")
        row = unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), previous, channels)
        rows.append(bytes(row) if channels == 3 else bytes(b for i, b in enumerate(row) if i % 4 != 3))
        previous = row
    return width, height, rows


def unfilter(kind, row, previous, step):
    """A scanline with its PNG filter (0 none, 1 sub, 2 up, 3 average, 4 Paeth) undone."""
    if kind == 0:
        return row
    for i in range(len(row)):
        left = row[i - step] if i >= step else 0
        up = previous[i]
        corner = previous[i - step] if i >= step else 0
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 2:
            row[i] = (row[i] + up) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            guess = left + up - corner
            near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up), (abs(guess - corner), 2, corner))
            row[i] = (row[i] + near[2]) & 0xFF
        else:
            raise Unreadable("unknown PNG filter %d" % kind)
    return row


def shapes(width, height, rows):
    """The shapes of a picture, each as the mean RGB of its sampled pixels."""
    def pixel(x, y):
        return tuple(rows[y][x * 3:x * 3 + 3])

    background = pixel(0, 0)
    grid = {}
    for y in range(0, height, SAMPLE_PX):
        for x in range(0, width, SAMPLE_PX):
            colour = pixel(x, y)
            if max(abs(a - b) for a, b in zip(colour, background)) > FOREGROUND_DISTANCE:
                grid[(x // SAMPLE_PX, y // SAMPLE_PX)] = colour
    found = []
    while grid:
        cell, colour = grid.popitem()
        area, todo = [colour], [cell]
        while todo:
            cx, cy = todo.pop()
            for near in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                if near in grid:
                    area.append(grid.pop(near))
                    todo.append(near)
        if len(area) >= SHAPE_SAMPLES:
            found.append(tuple(sum(channel) / len(area) for channel in zip(*area)))
    return found


def colour_name(rgb):
    return min(PALETTE, key=lambda entry: sum((a - b) ** 2 for a, b in zip(rgb, entry[1])))


def image_bytes(url):
    if not url.startswith("data:"):
        raise Unreadable("not a data URL")
    try:
        return base64.b64decode(url.split(",", 1)[1])
    except (binascii.Error, IndexError):
        raise Unreadable("bad base64") from None


def question_of(body):
    """(prompt text, image data URL or None) of a request's last user turn."""
    messages = body.get("messages") or []
    content = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    text = " ".join(part.get("text", "") for part in parts if isinstance(part, dict) and part.get("type") == "text")
    urls = [part.get("image_url", {}).get("url", "") for part in parts
            if isinstance(part, dict) and part.get("type") == "image_url"]
    return text, (urls[0] if urls else None)


def known_answer(body, wrong=False):
    """The answer to a question about how many squares a picture has or their colour, or None for any other
    request (which the stand-in answers with its description)."""
    prompt, url = question_of(body)
    kind = "count" if COUNT_QUESTION.search(prompt) else "colour" if COLOUR_QUESTION.search(prompt) else None
    if kind is None or url is None:
        return None
    try:
        found = shapes(*decode_png(image_bytes(url)))
    except Unreadable:
        return None
    chinese = bool(CJK.search(prompt))
    if kind == "count":
        count = len(found) + (2 if wrong else 0)
        return "图中有%d个方块。" % count if chinese else "There are %d squares." % count
    if not found:
        return "图中没有方块。" if chinese else "There is no square."
    name = colour_name(found[0])
    if wrong:
        name = PALETTE[(PALETTE.index(name) + 1) % len(PALETTE)]
    return "方块是%s色的。" % name[2] if chinese else "The square is %s." % name[0]
