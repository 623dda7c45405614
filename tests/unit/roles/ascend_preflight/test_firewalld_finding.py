"""plugins/filter/ascend_preflight.py check_firewalld: a host whose firewalld would drop the ports Docker publishes
(the instances, from the gateways) fails preflight, with the fix; one where they pass does not."""
import pytest

from ansible_collections.ascend.fleet.plugins.filter.ascend_preflight import check_firewalld

ZONES = "block dmz drop external home internal public trusted work"


def probe(state="running", version="1.0.2", zones=ZONES, strict=""):
    return "state=%s\nversion=%s\nzones=%s\nstrict=%s\n" % (state, version, zones, strict)


@pytest.mark.parametrize("text", [
    "",  # no firewalld installed: the probe prints nothing
    probe(state="not running", version="0.6.3"),
    # openEuler 22.03's firewalld 1.0 (and any since 0.7) accepts what Docker DNATs before its zones.
    probe(),
    probe(version="0.7.2"),
    probe(version="2.3.1", strict="no"),
    # Docker 20.10 or later made its own zone, which accepts.
    probe(version="0.6.5", zones="block docker drop public trusted"),
    # The finding's own fix: Docker's bridge in the trusted zone.
    probe(version="0.6.5") + "bridge_target=ACCEPT\n",
])
def test_a_firewalld_that_lets_published_ports_through_is_no_finding(text):
    assert check_firewalld(text) == []


@pytest.mark.parametrize("text,found,fix", [
    (probe(version="0.6.5"), "firewalld 0.6.5, which rejects what Docker publishes to a bridge in no zone",
     "--zone=trusted --add-interface=docker0"),
    (probe(version="0.6.5") + "bridge_target=default\n", "firewalld 0.6.5", "--zone=trusted"),
    (probe(version="2.3.1", strict="yes"), "firewalld 2.3.1 with StrictForwardPorts=yes",
     "set StrictForwardPorts=no in /etc/firewalld/firewalld.conf"),
    (probe(version="2.3.1", strict="yes", zones=ZONES + " docker"), "with StrictForwardPorts=yes", "restart firewalld"),
])
def test_a_firewalld_that_drops_published_ports_fails_with_the_fix(text, found, fix):
    (failure,) = check_firewalld(text)
    assert failure["check"] == "firewalld and Docker" and found in failure["found"], failure
    assert failure["required"] == "the instances' published ports reachable from the gateways"
    assert fix in failure["fix"] and "Docker" in failure["fix"]
