"""plugins/filter/ascend_preflight.py check_firewalld: a host whose firewalld would drop the ports Docker publishes
(the instances, from the gateways) fails preflight, with the fix; one where they pass does not."""
import pytest

from ansible_collections.ascend.fleet.plugins.filter.ascend_preflight import check_firewalld


def probe(state="running", zones="block dmz drop external home internal public trusted work", zone="public",
          default_zone="public", forward="yes"):
    return "state=%s\nzones=%s\nzone=%s\ndefault_zone=%s\nforward=%s\n" % (state, zones, zone, default_zone, forward)


@pytest.mark.parametrize("text", [
    "",  # no firewalld installed: the probe prints nothing
    probe(state="not running"),
    # openEuler 22.03's firewalld 1.0 with one zone that forwards within itself: Docker's bridge is in it too.
    probe(),
    # Docker 20.10 or later made its own zone, which accepts.
    probe(zones="block docker drop public trusted", forward="no"),
])
def test_a_firewalld_that_lets_published_ports_through_is_no_finding(text):
    assert check_firewalld(text) == []


@pytest.mark.parametrize("text,found", [
    # firewalld before 1.0 has no --query-forward: no intra-zone forwarding.
    (probe(forward="usage: see firewall-cmd man page"), "not forwarded (the zone's forward is usage:"),
    (probe(forward="no"), "not forwarded (the zone's forward is no)"),
    (probe(zone="internal"), "traffic from zone internal to Docker's bridge (default zone public) between two zones"),
])
def test_a_firewalld_that_drops_published_ports_fails_with_the_fix(text, found):
    (failure,) = check_firewalld(text)
    assert failure["check"] == "firewalld and Docker" and found in failure["found"], failure
    assert failure["required"] == "the instances' published ports reachable from the gateways"
    assert "--zone=trusted --add-interface=docker0" in failure["fix"] and "restart Docker" in failure["fix"]
