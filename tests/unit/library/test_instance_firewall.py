"""library/instance_firewall.py against tests/fake_iptables.py (a filter table in a file) and a systemd folder in
tmp_path: the chain it owns holds exactly the wanted rules, jumped to first from DOCKER-USER; a second run, a check
run and a run after someone moved the jump behave; the rules file and the boot unit are written only where they
differ; state absent removes everything it made; what it cannot use is refused with the fix."""
import json
import os

import pytest
from module_runs import assert_refused, run_module

from conftest import REPO

CHAIN = "ASCEND-FLEET"


@pytest.fixture
def host(tmp_path):
    """A host whose Docker engine made DOCKER-USER (with its RETURN), systemd running, iptables in bin/."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("iptables", "iptables-restore"):
        program = bin_dir / name
        # The fake tells iptables-restore by its name: a link of that name to it.
        program.symlink_to(REPO / "tests/fake_iptables.py")
    (tmp_path / "filter.json").write_text(json.dumps({"DOCKER-USER": ["-j RETURN"]}))
    (tmp_path / "run-systemd").mkdir()
    (tmp_path / "systemd").mkdir()
    return tmp_path


def chains(host):
    return json.loads((host / "filter.json").read_text())


def guard(host, check_mode=False, **args):
    args.setdefault("iptables", str(host / "bin/iptables"))
    args.setdefault("rules_file", str(host / "etc/ascend-fleet-firewall.rules"))
    args.setdefault("unit_file", str(host / "systemd/ascend-fleet-firewall.service"))
    if check_mode:
        args["_ansible_check_mode"] = True
    prepare = ("import os\nos.environ['FAKE_IPTABLES_STATE'] = %r\nmodule.SYSTEMD_RUNNING = %r\n"
               "module.Firewall.daemon_reload = staticmethod(lambda: None)" % (str(host / "filter.json"),
                                                                              str(host / "run-systemd")))
    return run_module("instance_firewall", prepare=prepare, **args)


def test_only_the_sources_reach_each_port_and_a_second_run_changes_nothing(host):
    result = guard(host, ports=[8001, 8000], sources=["10.0.8.20", "10.1.0.0/16"])
    assert result["changed"] is True and result["persisted"] is True
    assert result["sources"] == ["10.0.8.20/32", "10.1.0.0/16"]
    match = "-p tcp -m conntrack --ctstate DNAT --ctorigdstport %d --ctdir ORIGINAL"
    assert chains(host)[CHAIN] == [
        "-s 10.0.8.20/32 %s -j RETURN" % (match % 8000), "-s 10.1.0.0/16 %s -j RETURN" % (match % 8000),
        "%s -j REJECT --reject-with tcp-reset" % (match % 8000),
        "-s 10.0.8.20/32 %s -j RETURN" % (match % 8001), "-s 10.1.0.0/16 %s -j RETURN" % (match % 8001),
        "%s -j REJECT --reject-with tcp-reset" % (match % 8001)]
    assert chains(host)["DOCKER-USER"] == ["-j " + CHAIN, "-j RETURN"], "first, before Docker's own RETURN"
    rules = (host / "etc/ascend-fleet-firewall.rules").read_text()
    assert ":%s - [0:0]" % CHAIN in rules and rules.endswith("COMMIT\n")
    unit = (host / "systemd/ascend-fleet-firewall.service").read_text()
    assert "Before=docker.service" in unit and "WantedBy=docker.service" in unit and "--noflush" in unit
    link = host / "systemd/docker.service.wants/ascend-fleet-firewall.service"
    assert os.readlink(str(link)) == str(host / "systemd/ascend-fleet-firewall.service")

    again = guard(host, ports=[8000, 8001], sources=["10.0.8.20", "10.1.0.0/16"])
    assert again["changed"] is False, again


def test_a_check_run_reports_the_change_and_makes_none(host):
    result = guard(host, check_mode=True, ports=[8000], sources=["10.0.8.20"])
    assert result["changed"] is True
    assert chains(host) == {"DOCKER-USER": ["-j RETURN"]}
    assert not (host / "etc").exists() and not (host / "systemd/ascend-fleet-firewall.service").exists()


def test_changed_sources_replace_the_chain_and_a_moved_jump_is_put_first_once(host):
    guard(host, ports=[8000], sources=["10.0.8.20"])
    state = chains(host)
    state["DOCKER-USER"] = ["-j RETURN", "-j " + CHAIN]   # someone appended rules above it
    (host / "filter.json").write_text(json.dumps(state))
    result = guard(host, ports=[8000], sources=["10.0.8.21"])
    assert result["changed"] is True
    assert chains(host)["DOCKER-USER"] == ["-j " + CHAIN, "-j RETURN"]
    assert [rule.split()[1] for rule in chains(host)[CHAIN] if rule.startswith("-s")] == ["10.0.8.21/32"]
    assert "10.0.8.21/32" in (host / "etc/ascend-fleet-firewall.rules").read_text()


def test_absent_removes_the_jump_the_chain_the_rules_and_the_unit_then_changes_nothing(host):
    guard(host, ports=[8000], sources=["10.0.8.20"])
    assert guard(host, state="absent")["changed"] is True
    assert chains(host) == {"DOCKER-USER": ["-j RETURN"]}
    assert sorted(os.listdir(str(host / "systemd/docker.service.wants"))) == []
    assert not (host / "systemd/ascend-fleet-firewall.service").exists()
    assert not (host / "etc/ascend-fleet-firewall.rules").exists()
    assert guard(host, state="absent")["changed"] is False


def test_an_engine_that_manages_no_iptables_is_named_with_the_fix(host):
    (host / "filter.json").write_text("{}")
    assert_refused(guard(host, ports=[8000], sources=["10.0.8.20"]), "no DOCKER-USER chain", '"iptables": false',
                   "iptables-legacy")
    # A check run on a host whose engine the check run did not start yet: the rules would be made.
    assert guard(host, check_mode=True, ports=[8000], sources=["10.0.8.20"])["changed"] is True
    assert chains(host) == {}


@pytest.mark.parametrize("args, expected", [
    ({"ports": [], "sources": ["10.0.8.20"]}, "ports: empty"),
    ({"ports": [8000], "sources": []}, "sources: empty"),
    ({"ports": [8000], "sources": ["fd00::1"]}, "is IPv6"),
    ({"ports": [8000], "sources": ["0.0.0.0/0"]}, "is every address"),
    ({"ports": [8000], "sources": ["gateway.invalid"]}, "'gateway.invalid' is no IPv4 address"),
    ({"ports": [8000], "sources": ["10.0.8.20"], "chain": "DOCKER-USER"}, "no chain name this module can own"),
    ({"ports": [8000], "sources": ["10.0.8.20"], "chain": "-j ACCEPT"}, "no chain name this module can own"),
    ({"ports": [8000], "sources": ["10.0.8.20"], "iptables": "/nonexistent/iptables"}, "no such command"),
], ids=["no ports", "no sources", "IPv6", "every address", "unresolvable", "Docker's chain", "option-like chain",
        "no iptables"])
def test_what_it_cannot_use_is_refused_and_nothing_changes(host, args, expected):
    assert_refused(guard(host, **args), expected)
    assert chains(host) == {"DOCKER-USER": ["-j RETURN"]}


def test_a_host_without_iptables_has_no_rules_to_remove(host):
    result = guard(host, state="absent", iptables=str(host / "bin/no-iptables"))
    assert result.get("failed") is not True and result["changed"] is False, result
