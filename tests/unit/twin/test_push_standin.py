"""The registry's tags of the stand-in are pushed again when what they are made of changes: the builds, or the line
a derived tag adds to them (a variant's slowdown, a release, another chip's SOC_VERSION). A twin that kept serving a
variant's old line would test the canary gate against an image other than the one the suite names. Nothing here
runs Docker or a registry: the pushes asked for are recorded."""
import pytest

from twin import lifecycle


class RecordingTwin(lifecycle.Twin):
    """A Twin whose registry pushes are recorded, and whose registry serves every tag already pushed."""

    pushed = []

    def push_multiarch(self, repository, image_tag, builds):
        self.pushed.append((repository, image_tag))

    def _registry_has_tags(self, builds):
        return True


@pytest.fixture
def twin(monkeypatch, tmp_path):
    monkeypatch.setenv("TWIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TWIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lifecycle, "docker", lambda *args, **kwargs: None)
    RecordingTwin.pushed = []
    return RecordingTwin()


def push(twin):
    """The tags one push_standin pushed, from the state on disk."""
    before = len(twin.pushed)
    state = dict(twin.load_state(), build_tags={lifecycle.NATIVE: "twin-standin:build-1"})
    twin.push_standin(state)
    return twin.pushed[before:]


def test_the_same_builds_and_lines_are_not_pushed_twice(twin):
    first = push(twin)
    assert ("ascend/vllm-ascend", "v0.18.0rc1-310p-much-slower") in first
    assert push(twin) == []


def test_a_variant_whose_line_changed_is_pushed_again(twin, monkeypatch):
    push(twin)
    changed = dict(lifecycle.VARIANT_TAGS, **{"v0.18.0rc1-310p-much-slower": "ENV VLLM_TWIN_SLOWDOWN=4"})
    monkeypatch.setattr(lifecycle, "VARIANT_TAGS", changed)
    assert ("ascend/vllm-ascend", "v0.18.0rc1-310p-much-slower") in push(twin)
