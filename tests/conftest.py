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
    text = (FIXTURES / name).read_text(encoding="utf-8")
    assert text.startswith("# source:"), "%s: expected a '# source:' first line" % name
    return text.split("\n", 1)[1]


@pytest.fixture(scope="session")
def fixture_names():
    names = sorted(path.name for path in FIXTURES.glob("*.txt"))
    assert names, "no npu-smi samples found under %s (set ASCEND_FLEET_SHARED)" % FIXTURES
    return names
