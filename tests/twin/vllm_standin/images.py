"""Image sizes from image bytes, and Qwen3-VL's image-token count for them.

Qwen3-VL cuts images into 16 px patches and merges 2x2 patches into one token, so one token covers 32x32
pixels after the image is resized to multiples of 32 (``smart_resize``) within its pixel bounds: by default
65536 to 16777216 pixels (the model's preprocessor_config), or a ``max_pixels`` passed with
``--mm-processor-kwargs``. The prompt also gets one vision-start and one vision-end token per image.
"""
import math
import struct

TOKEN_SIDE_PX = 32
MIN_PIXELS = 65536
MAX_PIXELS = 16777216
IMAGE_WRAPPER_TOKENS = 2


class ImageError(ValueError):
    pass


def smart_resize(width, height, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, factor=TOKEN_SIDE_PX):
    new_h = max(factor, round(height / factor) * factor)
    new_w = max(factor, round(width / factor) * factor)
    if new_h * new_w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        new_h = max(factor, math.floor(height / beta / factor) * factor)
        new_w = max(factor, math.floor(width / beta / factor) * factor)
    elif new_h * new_w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        new_h = math.ceil(height * beta / factor) * factor
        new_w = math.ceil(width * beta / factor) * factor
    return new_w, new_h


def image_tokens(width, height, max_pixels=None):
    """Tokens one image adds to the prompt, start and end markers included."""
    new_w, new_h = smart_resize(width, height, max_pixels=max_pixels or MAX_PIXELS)
    return (new_w // TOKEN_SIDE_PX) * (new_h // TOKEN_SIDE_PX) + IMAGE_WRAPPER_TOKENS


def resized_pixels(width, height, max_pixels=None):
    """Pixels of the image the vision encoder gets, after ``smart_resize``."""
    new_w, new_h = smart_resize(width, height, max_pixels=max_pixels or MAX_PIXELS)
    return new_w * new_h


def image_size(data):
    """(width, height) of a PNG, JPEG, GIF or BMP image."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return struct.unpack("<HH", data[6:10])
    if data[:2] == b"BM" and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return width, abs(height)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    raise ImageError("cannot identify image file (not PNG, JPEG, GIF or BMP)")


def _jpeg_size(data):
    offset = 2
    while offset + 9 < len(data):
        if data[offset] != 0xFF:
            raise ImageError("corrupt JPEG: no marker at byte %d" % offset)
        marker = data[offset + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            offset += 2
            continue
        length = struct.unpack(">H", data[offset + 2:offset + 4])[0]
        # Start-of-frame markers carry the size; C4, C8 and CC are tables with the same numbering.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[offset + 5:offset + 9])
            return width, height
        offset += 2 + length
    raise ImageError("corrupt JPEG: no frame header")
