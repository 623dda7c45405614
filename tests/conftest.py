"""Shared test helpers: where the repository and the real npu-smi samples are."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
# The real-machine samples and the seed live in the project's shared folder beside the repository.
SHARED = pathlib.Path(os.environ.get("ASCEND_FLEET_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures" / "npu-smi"


def read_fixture(name):
    """A real npu-smi sample without its '# source:' line."""
    path = FIXTURES / name
    if not path.exists():
        raise FileNotFoundError("npu-smi sample %s not found; the shared folder is expected beside the repository "
                                "(or set ASCEND_FLEET_SHARED)" % path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# source:"), "%s: expected a '# source:' first line" % name
    return text.split("\n", 1)[1]


@pytest.fixture(scope="session")
def fixture_names():
    names = sorted(path.name for path in FIXTURES.glob("*.txt"))
    assert names, "no npu-smi samples found under %s (set ASCEND_FLEET_SHARED)" % FIXTURES
    return names


def png_bytes(width, height):
    """A valid RGB PNG of the given size (a gradient), made with the standard library only."""
    import struct
    import zlib

    row_pattern = bytes((x * 255 // max(1, width - 1)) for x in range(width))
    rows = b"".join(b"\x00" + bytes(v for value in row_pattern for v in (value, y % 256, 128))
                    for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 1))
            + chunk(b"IEND", b""))


def free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
