"""tests/twin_fleet.py: what a test module needs before it may make a twin fleet."""
import pytest

from twin_fleet import PlayFleet


def test_a_test_without_the_docker_mark_is_refused_a_fleet_before_any_host_is_made(tmp_path):
    # No twin is needed: the refusal comes before the registry is asked, so this runs with the twin down.
    refusal = r"without the docker mark: add `pytestmark = pytest\.mark\.docker`"
    with pytest.raises(pytest.fail.Exception, match=refusal):
        PlayFleet(tmp_path, {"npu-x": "duo2"})
    assert not (tmp_path / "fleet").exists()
