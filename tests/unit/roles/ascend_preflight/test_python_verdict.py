"""plugins/filter/ascend_preflight.py ascend_preflight_python: the verdict on a host's Python from what the raw probe
(roles/ascend_preflight/tasks/python.yml) printed, before any module runs there."""
import pytest

from ansible_collections.ascend.fleet.plugins.filter.ascend_preflight import ascend_preflight_python

KYLIN = "os=kylin Kylin Linux Advanced Server V10 (Sword)\npython=/usr/bin/python3 Python 3.7.9\n"


def test_a_kylin_host_with_python_3_7_is_refused_naming_what_was_found_required_and_its_fix():
    verdict = ascend_preflight_python(KYLIN, "3.8")
    assert not verdict["ok"] and verdict["version"] == "3.7.9" and verdict["interpreter"] == "/usr/bin/python3"
    assert verdict["os"] == "Kylin Linux Advanced Server V10 (Sword)"
    message = verdict["message"]
    assert message.startswith("Python: found /usr/bin/python3 is Python 3.7.9 on Kylin Linux Advanced Server V10")
    assert "required Python 3.8 or later" in message
    assert "Fix: Kylin V10's python3 is 3.7" in message and "ansible_python_interpreter" in message


@pytest.mark.parametrize("probe,version", [
    ('os=openEuler openEuler 22.03 (LTS-SP4)\npython=/usr/bin/python3.9 Python 3.9.9\n', "3.9.9"),
    ("os=debian Debian GNU/Linux 12 (bookworm)\npython=/usr/bin/python3.11 Python 3.11.2\n", "3.11.2"),
    ("os=uos UnionTech OS Server 20\npython=/usr/bin/python3 Python 3.8\n", "3.8"),
])
def test_a_host_with_python_3_8_or_later_passes(probe, version):
    verdict = ascend_preflight_python(probe, "3.8")
    assert verdict["ok"] and verdict["version"] == version and verdict["message"] is None


@pytest.mark.parametrize("probe,found", [
    ("os=openEuler openEuler 20.03 (LTS)\npython=/usr/bin/python3 Python 3.7.9\n",
     "Fix: openEuler 20.03 LTS's python3 is 3.7: upgrade the host to openEuler 22.03 LTS"),
    ("os=centos CentOS Linux 7\npython=/usr/bin/python Python 2.7.5\n", "found /usr/bin/python is Python 2.7.5"),
    ("os=alpine Alpine Linux\npython=\n", "found no python3 on Alpine Linux"),
    ("python=/opt/py/bin/python3 sh: /opt/py/bin/python3: not found\n", "found /opt/py/bin/python3 answers"),
    ("", "found no python3;"),
])
def test_an_older_missing_or_broken_python_is_refused_by_what_it_said(probe, found):
    verdict = ascend_preflight_python(probe, "3.8")
    assert not verdict["ok"] and found in verdict["message"], verdict["message"]
