"""Stand-in for the vllm-ascend 310P image's ``vllm`` command (twin only, never deployed to real hosts)."""
import functools
import json
import os

SEED_RELEASE = "v0.18.0rc1"


def release_name():
    """The vLLM-Ascend release the image stands for: the seed's, unless the twin's tag of another release sets
    VLLM_TWIN_RELEASE (tests/twin/lifecycle.py)."""
    return os.environ.get("VLLM_TWIN_RELEASE", SEED_RELEASE)


def release():
    """The release table's entry of the image's release: the vLLM it is built on (what /version answers, and whose
    `vllm serve` options it takes) and its defects. The image holds the table as JSON (VLLM_TWIN_RELEASES_FILE,
    written from roles/fleet/files/vllm_ascend_releases.yml by its reader); without it, the seed's release."""
    path = os.environ.get("VLLM_TWIN_RELEASES_FILE", "/opt/twin/releases.json")
    if not os.path.exists(path) and release_name() == SEED_RELEASE:
        return {"vllm": "0.18.0", "defects": []}
    return _table(path)["releases"][release_name()]


@functools.lru_cache(maxsize=None)
def _table(path):
    """The image's table, read once per process (the server asks for its release on every /version)."""
    with open(path) as handle:
        return json.load(handle)
