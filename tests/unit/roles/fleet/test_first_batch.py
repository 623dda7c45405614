"""plugins/filter/fleet.py: the canary batch is the batch Ansible's own `serial` runs first. Against plays Ansible
runs in batches: tests/local/test_serial_batches.py."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.filter.fleet import first_batch

HOSTS = ["h%d" % number for number in range(10)]


@pytest.mark.parametrize("serial, size", [
    ("100%", 10), ("25%", 2), ("5%", 1), ("0%", 1), (1, 1), ("3", 3), (" 2 ", 2), (0, 10), (-1, 10), (20, 10),
    ([2, 5], 2), (["30%", "100%"], 3), ([], 10), (None, 10), ("", 10)])
def test_the_first_batch_is_what_serial_runs_first(serial, size):
    assert first_batch(HOSTS, serial) == HOSTS[:size]


def test_a_serial_that_is_no_number_is_refused_by_name():
    with pytest.raises(AnsibleFilterError, match=r"fleet_serial is 'half'.*Fix"):
        first_batch(HOSTS, "half")

