"""library/instance_firewall.py against tests/fake_iptables.py (a filter table in a file) and a systemd folder in
tmp_path: the chain it owns holds exactly the wanted rules, jumped to first from DOCKER-USER (the instances' published
ports) or from INPUT (the host's own ports, its exporters); a second run, a check run and a run after someone moved
the jump behave; the rules file and the boot unit are written only where they differ; state absent removes everything
it made for its hook and nothing of the other's; what it cannot use is refused with the fix."""
import ipaddress
import json
import os
import time

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
    prepare = ("import os\nos.environ['FAKE_IPTABLES_STATE'] = %r\n"
               "from ansible_collections.ascend.fleet.plugins.module_utils import firewall_rules\n"
               "firewall_rules.SYSTEMD_RUNNING = %r\n"
               "firewall_rules.Firewall.daemon_reload = staticmethod(lambda: None)" % (str(host / "filter.json"),
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


def test_hook_docker_user_given_or_left_out_writes_what_hosts_already_have(host, tmp_path_factory):
    """The DOCKER-USER use's files, byte for byte as hosts hold them: a change would rewrite them on every host."""
    guard(host, ports=[8000], sources=["10.0.8.20"])
    other = tmp_path_factory.mktemp("other")
    for name in ("bin", "run-systemd", "systemd"):
        (other / name).symlink_to(host / name) if name == "bin" else (other / name).mkdir()
    (other / "filter.json").write_text(json.dumps({"DOCKER-USER": ["-j RETURN"]}))
    guard(other, hook="DOCKER-USER", ports=[8000], sources=["10.0.8.20"])
    assert chains(other) == chains(host)
    match = "-p tcp -m conntrack --ctstate DNAT --ctorigdstport 8000 --ctdir ORIGINAL"
    rules = (host / "etc/ascend-fleet-firewall.rules").read_text()
    assert rules == (other / "etc/ascend-fleet-firewall.rules").read_text() == (
        "# ascend.fleet.instance_firewall: only these sources reach the vLLM instances' ports. Applied with\n"
        "# iptables-restore --noflush, which replaces this chain only.\n"
        "*filter\n:ASCEND-FLEET - [0:0]\n"
        "-A ASCEND-FLEET -s 10.0.8.20/32 %s -j RETURN\n-A ASCEND-FLEET %s -j REJECT --reject-with tcp-reset\n"
        "COMMIT\n" % (match, match))
    ipt, rules_file = host / "bin/iptables", host / "etc/ascend-fleet-firewall.rules"
    assert (host / "systemd/ascend-fleet-firewall.service").read_text() == (
        "# ascend.fleet.instance_firewall: only the listed sources reach the vLLM instances' ports.\n"
        "[Unit]\nDescription=Only the fleet's gateways reach the vLLM instances (ASCEND-FLEET)\n"
        "Before=docker.service\nAfter=firewalld.service\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        "ExecStart=/bin/sh -c '{ipt} -w 30 -N DOCKER-USER 2>/dev/null; {ipt}-restore -w 30 --noflush {rules} && "
        "{{ {ipt} -w 30 -C DOCKER-USER -j ASCEND-FLEET 2>/dev/null || {ipt} -w 30 -I DOCKER-USER 1 -j ASCEND-FLEET; }}'"
        "\n\n[Install]\nWantedBy=docker.service\n".format(ipt=ipt, rules=rules_file))


# The host's own ports (hook INPUT): its exporters, guarded by a chain, rules file and unit of their own.
HOST_CHAIN = "ASCEND-FLEET-HOST"
# Rules an administrator or a host firewall keeps in INPUT, which the module leaves as they are.
SITE_INPUT = ["-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", "-p tcp -m tcp --dport 22 -j ACCEPT"]


@pytest.fixture
def exporters(host):
    """The host of the other tests with INPUT rules of the site's own."""
    state = chains(host)
    state["INPUT"] = list(SITE_INPUT)
    (host / "filter.json").write_text(json.dumps(state))
    return host


def guard_host(host, check_mode=False, **args):
    args.setdefault("rules_file", str(host / "etc/ascend-fleet-host-firewall.rules"))
    args.setdefault("unit_file", str(host / "systemd/ascend-fleet-host-firewall.service"))
    return guard(host, check_mode=check_mode, hook="INPUT", **args)


def fate(host, port, source, interface="eth0"):
    """What the host's chain does with a new TCP connection from source, coming in on interface, to port, walked
    as the kernel walks it from INPUT's first rule: "reset", or "on" (left to the rules after the jump)."""
    state = chains(host)
    assert state["INPUT"][0] == "-j " + HOST_CHAIN
    for rule in state[HOST_CHAIN]:
        words = rule.split()
        given = dict(zip(words[::2], words[1::2]))
        assert len(words) % 2 == 0 and set(given) <= {"-i", "-s", "-p", "-m", "--dport", "-j", "--reject-with"}, rule
        assert given["-p"] == given["-m"] == "tcp", rule
        if given.get("-i", interface) != interface or int(given["--dport"]) != port or \
                ipaddress.ip_address(source) not in ipaddress.ip_network(given.get("-s", "0.0.0.0/0")):
            continue
        if given["-j"] == "REJECT":
            assert given["--reject-with"] == "tcp-reset", rule
            return "reset"
        assert given["-j"] == "RETURN", rule
        return "on"
    return "on"


def test_hook_input_lets_loopback_and_the_sources_reach_the_ports_and_a_second_run_changes_nothing(exporters):
    result = guard_host(exporters, ports=[9100, 8082], sources=["10.0.9.5", "10.1.0.0/16"])
    assert result["changed"] is True and result["persisted"] is True
    expected = []
    for port in (8082, 9100):   # as iptables -S prints them
        expected += ["-A ASCEND-FLEET-HOST -i lo -p tcp -m tcp --dport %d -j RETURN" % port,
                     "-A ASCEND-FLEET-HOST -s 10.0.9.5/32 -p tcp -m tcp --dport %d -j RETURN" % port,
                     "-A ASCEND-FLEET-HOST -s 10.1.0.0/16 -p tcp -m tcp --dport %d -j RETURN" % port,
                     "-A ASCEND-FLEET-HOST -p tcp -m tcp --dport %d -j REJECT --reject-with tcp-reset" % port]
    assert result["rules"] == expected, "the chain's default with hook INPUT is its own"
    assert chains(exporters)[HOST_CHAIN] == [rule.split(" ", 2)[2] for rule in expected]
    assert chains(exporters)["INPUT"] == ["-j " + HOST_CHAIN] + SITE_INPUT, "first, the site's rules kept"
    assert chains(exporters)["DOCKER-USER"] == ["-j RETURN"] and CHAIN not in chains(exporters)

    for port in (9100, 8082):
        assert fate(exporters, port, "127.0.0.1", "lo") == "on", "a Prometheus on the host"
        assert fate(exporters, port, "10.0.8.7", "lo") == "on", "the host connecting to its own address"
        assert fate(exporters, port, "10.0.9.5") == "on" and fate(exporters, port, "10.1.200.3") == "on"
        assert fate(exporters, port, "10.0.9.6") == "reset"
        assert fate(exporters, port, "172.17.0.2", "docker0") == "reset", "a container on the host"
    assert fate(exporters, 22, "192.0.2.1") == "on" and fate(exporters, 9101, "192.0.2.1") == "on", "other ports"

    rules = (exporters / "etc/ascend-fleet-host-firewall.rules").read_text()
    assert ":%s - [0:0]" % HOST_CHAIN in rules and "\n".join(expected) in rules and rules.endswith("COMMIT\n")
    unit = (exporters / "systemd/ascend-fleet-host-firewall.service").read_text()
    for line in ("WantedBy=multi-user.target", "Before=network-pre.target shutdown.target", "Wants=network-pre.target",
                 "DefaultDependencies=no"):
        assert line + "\n" in unit
    assert "firewalld.service" in unit.split("After=")[1].split("\n")[0]
    assert "--noflush %s" % (exporters / "etc/ascend-fleet-host-firewall.rules") in unit
    assert "-C INPUT -j %s 2>/dev/null ||" % HOST_CHAIN in unit and "-I INPUT 1 -j %s;" % HOST_CHAIN in unit
    assert "docker" not in unit.lower() and "DOCKER-USER" not in unit
    link = exporters / "systemd/multi-user.target.wants/ascend-fleet-host-firewall.service"
    assert os.readlink(str(link)) == str(exporters / "systemd/ascend-fleet-host-firewall.service")
    assert not (exporters / "systemd/docker.service.wants").exists()

    again = guard_host(exporters, ports=[8082, 9100], sources=["10.0.9.5", "10.1.0.0/16"])
    assert again["changed"] is False, again


def test_hook_input_puts_a_moved_jump_back_first_once_and_replaces_changed_sources(exporters):
    guard_host(exporters, ports=[9100], sources=["10.0.9.5"])
    state = chains(exporters)
    state["INPUT"] = SITE_INPUT + ["-j " + HOST_CHAIN]   # a host firewall inserted its rules above it
    (exporters / "filter.json").write_text(json.dumps(state))
    assert guard_host(exporters, ports=[9100], sources=["10.0.9.5"])["changed"] is True
    assert chains(exporters)["INPUT"] == ["-j " + HOST_CHAIN] + SITE_INPUT
    assert guard_host(exporters, ports=[9100], sources=["10.0.9.6"])["changed"] is True
    assert fate(exporters, 9100, "10.0.9.6") == "on" and fate(exporters, 9100, "10.0.9.5") == "reset"
    assert "10.0.9.6/32" in (exporters / "etc/ascend-fleet-host-firewall.rules").read_text()


def test_hook_input_check_run_reports_the_change_and_makes_none(exporters):
    before = chains(exporters)
    result = guard_host(exporters, check_mode=True, ports=[9100], sources=["10.0.9.5"])
    assert result["changed"] is True
    assert chains(exporters) == before
    assert not (exporters / "etc").exists() and os.listdir(str(exporters / "systemd")) == []
    guard_host(exporters, ports=[9100], sources=["10.0.9.5"])
    after = chains(exporters)
    assert guard_host(exporters, check_mode=True, state="absent")["changed"] is True
    assert chains(exporters) == after and (exporters / "etc/ascend-fleet-host-firewall.rules").exists()


def test_the_two_hooks_keep_apart_and_absent_removes_only_the_input_hooks_rules(exporters):
    guard(exporters, ports=[8000], sources=["10.0.8.20"])
    guard_host(exporters, ports=[9100], sources=["10.0.9.5"])
    instances = chains(exporters)[CHAIN]
    assert guard_host(exporters, state="absent")["changed"] is True
    assert chains(exporters) == {"DOCKER-USER": ["-j " + CHAIN, "-j RETURN"], CHAIN: instances, "INPUT": SITE_INPUT}
    assert not (exporters / "etc/ascend-fleet-host-firewall.rules").exists()
    assert not (exporters / "systemd/ascend-fleet-host-firewall.service").exists()
    assert os.listdir(str(exporters / "systemd/multi-user.target.wants")) == []
    assert (exporters / "etc/ascend-fleet-firewall.rules").exists()
    assert os.listdir(str(exporters / "systemd/docker.service.wants")) == ["ascend-fleet-firewall.service"]
    assert guard_host(exporters, state="absent")["changed"] is False
    assert guard(exporters, ports=[8000], sources=["10.0.8.20"])["changed"] is False


def test_a_chain_the_other_hook_jumps_to_is_refused_and_kept(exporters):
    guard(exporters, ports=[8000], sources=["10.0.8.20"])
    before = chains(exporters)
    for args in ({"ports": [9100], "sources": ["10.0.9.5"]}, {"state": "absent"}):
        assert_refused(guard_host(exporters, chain=CHAIN, **args), "ASCEND-FLEET is the chain DOCKER-USER jumps to",
                       "leave chain, rules_file and unit_file out")
        assert chains(exporters) == before
    guard_host(exporters, ports=[9100], sources=["10.0.9.5"])
    assert_refused(guard(exporters, chain=HOST_CHAIN, state="absent"), "ASCEND-FLEET-HOST is the chain INPUT jumps to")
    assert HOST_CHAIN in chains(exporters)


@pytest.mark.parametrize("args, expected", [
    ({"ports": [], "sources": ["10.0.9.5"]}, ["ports: empty", "the host's own processes listen on", "9100"]),
    ({"ports": [9100], "sources": []}, ["sources: empty", "the host's exporters (the monitoring hosts')",
                                        "host_exporters_allowed_sources"]),
    ({"ports": [9100], "sources": ["fd00::1"]}, ["is IPv6", "list the monitoring host's IPv4 address"]),
    ({"ports": [9100], "sources": ["0.0.0.0/0"]}, ["is every address", "host_exporters_firewall false"]),
    ({"ports": [9100], "sources": ["monitor.invalid"]}, ["'monitor.invalid' is no IPv4 address",
                                                         "list the monitoring host's address"]),
    ({"ports": [9100], "sources": ["10.0.9.5"], "chain": "INPUT"}, ["no chain name this module can own"]),
], ids=["no ports", "no sources", "IPv6", "every address", "unresolvable", "the hook itself"])
def test_hook_input_refusals_speak_of_the_exporters_and_change_nothing(exporters, args, expected):
    before = chains(exporters)
    result = guard_host(exporters, **args)
    assert_refused(result, *expected)
    assert "gateway" not in result["msg"] and "vllm_server" not in result["msg"]
    assert chains(exporters) == before


def test_the_timeout_bounds_every_iptables_call_together(host):
    """Each call two seconds late, well within what one call may take, the half-dozen calls of a run past a whole
    timeout: the run ends at it, naming the call it was waiting on."""
    real = host / "real"
    real.mkdir()
    for name in ("iptables", "iptables-restore"):
        (real / name).symlink_to(REPO / "tests/fake_iptables.py")
        slow = host / "bin" / name
        slow.unlink()
        slow.write_text("#!/bin/sh\nsleep 2\nexec %s \"$@\"\n" % (real / name))
        slow.chmod(0o755)
    started = time.monotonic()
    result = guard(host, ports=[8000], sources=["10.0.8.20"], timeout=3)
    elapsed = time.monotonic() - started
    assert_refused(result, "the time ran out (timeout: 3 s, the whole call) while waiting for `%s" % (host / "bin"),
                   "xtables lock")
    assert elapsed < 9, "the module took %.1f s with timeout 3" % elapsed
