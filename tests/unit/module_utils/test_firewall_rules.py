"""module_utils/firewall_rules.py's rules read directly (the module's runs against a fake iptables are
tests/unit/library/test_instance_firewall.py): per guarded port, each allowed source returns and everyone else is
reset; published ports are matched by their original destination (Docker's DNAT), the host's own by their port,
with loopback allowed; the rules file replaces the chain alone."""
from ansible_collections.ascend.fleet.plugins.module_utils import firewall_rules as firewall


def test_published_ports_let_the_sources_through_and_reset_the_rest_per_port():
    rules = firewall.wanted_rules(firewall.DOCKER_CHAIN, "ASCEND-FLEET", [8000, 8001], ["10.0.8.20/32", "10.0.9.0/24"])
    assert len(rules) == 2 * 3
    for port, block in ((8000, rules[:3]), (8001, rules[3:])):
        match = "-p tcp -m conntrack --ctstate DNAT --ctorigdstport %d --ctdir ORIGINAL" % port
        assert block == ["-A ASCEND-FLEET -s 10.0.8.20/32 %s -j RETURN" % match,
                         "-A ASCEND-FLEET -s 10.0.9.0/24 %s -j RETURN" % match,
                         "-A ASCEND-FLEET %s -j REJECT --reject-with tcp-reset" % match]


def test_the_hosts_own_ports_allow_loopback_and_the_sources():
    assert firewall.wanted_rules(firewall.INPUT_CHAIN, "ASCEND-FLEET-HOST", [9100], ["10.0.0.0/24"]) == [
        "-A ASCEND-FLEET-HOST -i lo -p tcp -m tcp --dport 9100 -j RETURN",
        "-A ASCEND-FLEET-HOST -s 10.0.0.0/24 -p tcp -m tcp --dport 9100 -j RETURN",
        "-A ASCEND-FLEET-HOST -p tcp -m tcp --dport 9100 -j REJECT --reject-with tcp-reset"]


def test_the_rules_file_declares_the_chain_alone_for_a_noflush_restore():
    rules = firewall.wanted_rules(firewall.DOCKER_CHAIN, "ASCEND-FLEET", [8000], ["10.0.8.20/32"])
    lines = firewall.rules_file_text(firewall.DOCKER_CHAIN, "ASCEND-FLEET", rules).splitlines()
    body = [line for line in lines if not line.startswith("#")]
    assert body == ["*filter", ":ASCEND-FLEET - [0:0]"] + rules + ["COMMIT"]
    assert any("iptables-restore --noflush" in line for line in lines if line.startswith("#"))
