"""module_utils/npu_holders.py: the one rule for a chip's node and the one reading of a process's container."""
import pytest

from ansible_collections.ascend.fleet.plugins.module_utils import npu_holders


def test_container_id_from_cgroup_v1_and_v2():
    container = "3f4e" * 16
    assert npu_holders.parse_container_id("12:pids:/docker/%s\n11:cpuset:/docker/%s\n" % (container, container)) == (
        container)
    assert npu_holders.parse_container_id("0::/system.slice/docker-%s.scope\n" % container) == container
    assert npu_holders.parse_container_id("0::/user.slice/user-0.slice/session-3.scope\n") is None
    # Nested (a container of a Docker that runs in a container, as on the twin): the innermost is the one.
    outer = "ab12" * 16
    assert npu_holders.parse_container_id("0::/docker/%s/docker/%s\n" % (outer, container)) == container


@pytest.mark.parametrize("path,number", [
    ("/dev/davinci0", 0), ("/dev/davinci12", 12), ("/dev/davinci_manager", None), ("/dev/davinci3x", None),
    ("davinci4", 4), ("/dev/notdavinci1", None),
])
def test_davinci_number(path, number):
    assert npu_holders.davinci_number(path) == number
