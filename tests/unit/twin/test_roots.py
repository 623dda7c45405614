"""`twin roots`: the Debian roots made ahead of the images, for each architecture only those its images are built
from. An emulated (aarch64) root costs minutes of the CPU the tests run on; the execution environment's runs on the
controller and the RPM hosts' on this machine's architecture, so neither is made emulated. Nothing here runs
debootstrap or Docker: the roots asked for are recorded."""
import pytest

from twin import lifecycle


class RecordingTwin(lifecycle.Twin):
    """A Twin whose roots are recorded, not made."""

    made = []

    def base_image(self, kind, architecture=lifecycle.NATIVE):
        self.made.append((kind, architecture))
        return "recorded/%s:%s" % (kind, architecture)


@pytest.fixture
def made(monkeypatch, tmp_path):
    monkeypatch.setenv("TWIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TWIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lifecycle, "Twin", RecordingTwin)
    RecordingTwin.made = []
    return RecordingTwin.made


def test_an_architectures_roots_are_those_of_the_host_image_and_the_stand_in(made):
    emulated = [architecture for architecture in lifecycle.BUILT if architecture != lifecycle.NATIVE]
    assert emulated, "the twin builds for another architecture than this machine's"
    RecordingTwin().base_images(emulated[0])
    built_from = {spec[2] for spec in RecordingTwin().image_specs()}
    assert sorted(made) == sorted((kind, emulated[0]) for kind in built_from)
    assert "ee" not in built_from and "rpmhost" not in built_from


def test_twin_roots_makes_no_emulated_root_that_only_runs_on_this_machine(made):
    assert lifecycle.main(["roots"]) == 0
    emulated = {kind for kind, architecture in made if architecture != lifecycle.NATIVE}
    native = {kind for kind, architecture in made if architecture == lifecycle.NATIVE}
    assert emulated == {"host", "python"}
    assert native == {"rpmhost"}
