"""library/firewalld_ports.py against tests/fake_firewall_cmd.py (firewalld's permanent and runtime configurations,
and the host's default route, in a file): each port opened to each source in both configurations, in the zone of the
default route's interface; a second run, a check run and a run after a reload change nothing; changed options
remove only what the record of the name says it opened (an administrator's own openings stay); state absent removes
it all; a stopped firewalld is left alone; what it cannot use is refused with the fix."""
import json
import os
import stat
import subprocess
import time

import pytest
from module_runs import assert_refused, run_module

from ansible_collections.ascend.fleet.plugins.modules import firewalld_ports
from conftest import REPO

NAME = "ascend-fleet-exporters"
# An administrator's own opening of the exporters' port, which the module never touches.
ADMIN_RULE = 'rule family="ipv4" source address="192.0.2.7" port port="9100" protocol="tcp" accept'
WRITES = ("--add-", "--remove-", "--reload")
# A name the host resolves to two IPv4 addresses (one of them twice, as resolvers answer per socket type).
RESOLVER = ("import socket\nresolve = socket.getaddrinfo\n"
            "def getaddrinfo(host, *args, **kwargs):\n"
            "    if host == 'monitor.example.org':\n"
            "        return [(socket.AF_INET, socket.SOCK_STREAM, 6, '', (address, 0))\n"
            "                for address in ('10.0.9.6', '10.0.9.5', '10.0.9.6')]\n"
            "    return resolve(host, *args, **kwargs)\n"
            "socket.getaddrinfo = getaddrinfo\n")


def rule(address, port):
    return 'rule family="ipv4" source address="%s" port port="%d" protocol="tcp" accept' % (address, port)


def empty_zones():
    return {zone: {"rich_rules": [], "ports": []} for zone in ("public", "internal", "trusted")}


@pytest.fixture
def host(tmp_path):
    """firewalld running with its zones empty, eth1 in zone internal, eth0 in none (so in the default zone, public),
    the default route through eth0; firewall-cmd and ip in bin/."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("firewall-cmd", "ip"):
        (bin_dir / name).symlink_to(REPO / "tests/fake_firewall_cmd.py")
    write_state(tmp_path, dict(running=True, default_zone="public", interfaces={"eth1": "internal"},
                               default_route=["default via 10.0.0.1 dev eth0 proto static metric 100"],
                               permanent=empty_zones(), runtime=empty_zones()))
    return tmp_path


def state(host):
    return json.loads((host / "firewalld.json").read_text())


def write_state(host, value):
    (host / "firewalld.json").write_text(json.dumps(value))


def change_state(host, change):
    value = state(host)
    change(value)
    write_state(host, value)


def zone(host, config="permanent", name="public"):
    return state(host)[config][name]


def both(host, name="public"):
    """The zone's openings, asserted the same in both configurations."""
    permanent, runtime = zone(host, "permanent", name), zone(host, "runtime", name)
    assert permanent == runtime, (permanent, runtime)
    return permanent


def record(host, name=NAME):
    return json.loads((host / "state" / (name + ".json")).read_text())


def calls(host):
    """The calls of the last run, each as [program, argument, ...]."""
    log = host / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def writes(host):
    return [call for call in calls(host) if any(word.startswith(WRITES) for word in call)]


def open_ports(host, check_mode=False, diff=False, prepare="", **args):
    args.setdefault("name", NAME)
    args.setdefault("firewall_cmd", str(host / "bin/firewall-cmd"))
    args.setdefault("state_dir", str(host / "state"))
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    if (host / "calls.log").exists():
        (host / "calls.log").unlink()
    setup = ("import os\nos.environ['FAKE_FIREWALLD_STATE'] = %r\nos.environ['FAKE_FIREWALLD_LOG'] = %r\n"
             "module.IP_COMMAND = %r\n" % (str(host / "firewalld.json"), str(host / "calls.log"),
                                           str(host / "bin/ip")))
    return run_module("firewalld_ports", prepare=setup + prepare, **args)


def test_each_port_is_opened_to_each_source_in_both_configurations_and_a_second_run_changes_nothing(host):
    result = open_ports(host, ports=[9100, 8082, 9100], sources=["10.0.9.5", "10.1.0.0/16", "10.0.9.5/32",
                                                                  "10.1.2.3/16"])
    expected = [rule("10.0.9.5", 8082), rule("10.1.0.0/16", 8082), rule("10.0.9.5", 9100), rule("10.1.0.0/16", 9100)]
    assert result["changed"] is True and result["firewalld_running"] is True, result
    assert result["zone"] == "public" and result["rich_rules"] == expected and result["ports"] == []
    assert result["added"] == expected and result["removed"] == []
    assert both(host) == {"rich_rules": expected, "ports": []}
    assert both(host, "internal") == {"rich_rules": [], "ports": []}
    # One call a configuration, the permanent one first; no reload, which would flush other programs' rules.
    assert [call[:3] for call in writes(host)] == [["firewall-cmd", "--permanent", "--zone=public"],
                                                   ["firewall-cmd", "--zone=public", "--add-rich-rule=" + expected[0]]]
    assert record(host) == {"zone": "public", "rich_rules": sorted(expected), "ports": []}
    assert stat.S_IMODE(os.stat(str(host / "state" / (NAME + ".json"))).st_mode) == 0o644

    again = open_ports(host, ports=[8082, 9100], sources=["10.1.0.0/16", "10.0.9.5"])
    assert again["changed"] is False and again["added"] == again["removed"] == [], again
    # A converged run reads each configuration once: every firewall-cmd call costs a Python start and a D-Bus call.
    assert [call[1:] for call in calls(host) if call[0] == "firewall-cmd"] == [
        ["--state"], ["--get-zone-of-interface=eth0"], ["--get-default-zone"],  # eth0 is in no zone
        ["--permanent", "--zone=public", "--list-all"], ["--zone=public", "--list-all"]]
    assert both(host)["rich_rules"] == expected


def test_changed_sources_remove_only_the_names_old_rules(host):
    def admins_own(value):
        for config in ("permanent", "runtime"):
            value[config]["public"] = {"rich_rules": [ADMIN_RULE], "ports": ["22/tcp"]}
    change_state(host, admins_own)
    open_ports(host, ports=[9100], sources=["10.0.9.5"])
    assert both(host) == {"rich_rules": [ADMIN_RULE, rule("10.0.9.5", 9100)], "ports": ["22/tcp"]}

    result = open_ports(host, ports=[9100], sources=["10.0.9.6"])
    assert result["changed"] is True
    assert result["removed"] == [rule("10.0.9.5", 9100)] and result["added"] == [rule("10.0.9.6", 9100)]
    assert both(host) == {"rich_rules": [ADMIN_RULE, rule("10.0.9.6", 9100)], "ports": ["22/tcp"]}
    assert record(host)["rich_rules"] == [rule("10.0.9.6", 9100)]


def test_no_sources_open_the_port_itself_and_sources_later_replace_it(host):
    result = open_ports(host, ports=[9100])
    assert result["ports"] == ["9100/tcp"] and result["rich_rules"] == [] and result["added"] == ["9100/tcp"]
    assert both(host) == {"rich_rules": [], "ports": ["9100/tcp"]}
    assert record(host) == {"zone": "public", "rich_rules": [], "ports": ["9100/tcp"]}

    narrowed = open_ports(host, ports=[9100], sources=["10.0.9.5"])
    assert narrowed["removed"] == ["9100/tcp"] and narrowed["added"] == [rule("10.0.9.5", 9100)]
    assert both(host) == {"rich_rules": [rule("10.0.9.5", 9100)], "ports": []}
    assert narrowed.get("warnings") in (None, []), "the port it opened itself before is no one else's"

    widened = open_ports(host, ports=[9100, 8082])
    assert widened["removed"] == [rule("10.0.9.5", 9100)] and widened["added"] == ["8082/tcp", "9100/tcp"]
    assert both(host) == {"rich_rules": [], "ports": ["8082/tcp", "9100/tcp"]}


def test_an_opening_that_was_there_before_stays_its_owners(host):
    def admins_own(value):
        for config in ("permanent", "runtime"):
            value[config]["public"] = {"rich_rules": [rule("10.0.9.5", 9100)], "ports": ["9000-9200/tcp"]}
    change_state(host, admins_own)
    result = open_ports(host, ports=[9100], sources=["10.0.9.5", "10.0.9.6"])
    assert result["added"] == [rule("10.0.9.6", 9100)]
    assert record(host)["rich_rules"] == [rule("10.0.9.6", 9100)], "the administrator's rule is not recorded"
    # The range the administrator opened lets every source through: said, not touched.
    warnings = json.dumps(result["warnings"])
    assert "9000-9200/tcp is open to every source in firewalld's zone public" in warnings, warnings
    assert "--remove-port=9000-9200/tcp" in warnings

    assert open_ports(host, state="absent")["removed"] == [rule("10.0.9.6", 9100)]
    assert both(host) == {"rich_rules": [rule("10.0.9.5", 9100)], "ports": ["9000-9200/tcp"]}


def test_absent_removes_what_the_record_names_and_the_record_then_changes_nothing(host):
    def admins_own(value):
        for config in ("permanent", "runtime"):
            value[config]["public"]["rich_rules"] = [ADMIN_RULE]
    change_state(host, admins_own)
    open_ports(host, ports=[9100, 8082], sources=["10.0.9.5"])
    other = open_ports(host, name="ascend-fleet-instances", ports=[8000], sources=["10.0.8.20"])
    assert other["changed"] is True

    result = open_ports(host, state="absent")
    assert result["changed"] is True and result["zone"] == "public"
    assert result["removed"] == [rule("10.0.9.5", 8082), rule("10.0.9.5", 9100)] and result["added"] == []
    assert both(host) == {"rich_rules": [ADMIN_RULE, rule("10.0.8.20", 8000)], "ports": []}
    assert not (host / "state" / (NAME + ".json")).exists()
    assert record(host, "ascend-fleet-instances")["rich_rules"] == [rule("10.0.8.20", 8000)]

    again = open_ports(host, state="absent")
    assert again["changed"] is False and writes(host) == []


def test_a_stopped_or_missing_firewalld_is_left_alone(host):
    change_state(host, lambda value: value.update(running=False))
    before = state(host)
    for firewall_cmd, called in ((str(host / "bin/firewall-cmd"), [["--state"]]),
                                 (str(host / "bin/no-firewall-cmd"), [])):
        result = open_ports(host, ports=[9100], sources=["10.0.9.5"], firewall_cmd=firewall_cmd)
        assert result["changed"] is False and result["firewalld_running"] is False, result
        assert result["rich_rules"] == [rule("10.0.9.5", 9100)] and result["added"] == []
        assert state(host) == before and not (host / "state").exists()
        assert [call[1:] for call in calls(host)] == called

    # A record of a firewalld that ran then: absent removes the record, and cannot reach firewalld.
    change_state(host, lambda value: value.update(running=True))
    open_ports(host, ports=[9100], sources=["10.0.9.5"])
    change_state(host, lambda value: value.update(running=False))
    stopped = state(host)
    result = open_ports(host, state="absent")
    assert result["changed"] is True and result["firewalld_running"] is False
    assert not (host / "state" / (NAME + ".json")).exists() and state(host) == stopped
    assert [call[1:] for call in calls(host)] == [["--state"]]


def test_the_openings_hold_through_a_reload_which_drops_runtime_only_ones(host):
    open_ports(host, ports=[9100], sources=["10.0.9.5"])
    change_state(host, lambda value: value["runtime"]["public"]["rich_rules"].append(ADMIN_RULE))
    reload = subprocess.run([str(host / "bin/firewall-cmd"), "--reload"], stdout=subprocess.PIPE,
                            env=dict(os.environ, FAKE_FIREWALLD_STATE=str(host / "firewalld.json")),
                            universal_newlines=True, check=True)
    assert reload.stdout.strip() == "success"
    assert both(host) == {"rich_rules": [rule("10.0.9.5", 9100)], "ports": []}
    again = open_ports(host, ports=[9100], sources=["10.0.9.5"])
    assert again["changed"] is False and writes(host) == []


def test_a_check_run_reports_the_change_and_runs_only_read_commands(host):
    before = state(host)
    result = open_ports(host, check_mode=True, ports=[9100], sources=["10.0.9.5"])
    assert result["changed"] is True and result["added"] == [rule("10.0.9.5", 9100)]
    assert state(host) == before and not (host / "state").exists() and writes(host) == []
    assert calls(host), "it read firewalld's configurations"

    open_ports(host, ports=[9100], sources=["10.0.9.5"])
    opened = state(host)
    assert open_ports(host, check_mode=True, ports=[9100], sources=["10.0.9.5"])["changed"] is False
    moved = open_ports(host, check_mode=True, ports=[9100], sources=["10.0.9.6"])
    assert moved["changed"] is True and moved["removed"] == [rule("10.0.9.5", 9100)]
    absent = open_ports(host, check_mode=True, state="absent")
    assert absent["changed"] is True and absent["removed"] == [rule("10.0.9.5", 9100)]
    assert state(host) == opened and writes(host) == []
    assert record(host)["rich_rules"] == [rule("10.0.9.5", 9100)]


def test_the_diff_lists_the_openings_before_and_after(host):
    first = open_ports(host, diff=True, ports=[9100], sources=["10.0.9.5"])
    assert first["diff"]["before"] == "" and first["diff"]["after"] == "public: %s\n" % rule("10.0.9.5", 9100)
    # Someone removed it from the runtime configuration only.
    change_state(host, lambda value: value["runtime"]["public"].update(rich_rules=[]))
    mended = open_ports(host, diff=True, ports=[9100], sources=["10.0.9.5"])
    assert mended["changed"] is True and mended["added"] == [rule("10.0.9.5", 9100)]
    assert mended["diff"]["before"] == "public: %s (not in the runtime configuration)\n" % rule("10.0.9.5", 9100)
    moved = open_ports(host, diff=True, ports=[9100], sources=["10.0.9.6"])
    assert moved["diff"]["before"] == "public: %s\n" % rule("10.0.9.5", 9100)
    assert moved["diff"]["after"] == "public: %s\n" % rule("10.0.9.6", 9100)
    unchanged = open_ports(host, diff=True, ports=[9100], sources=["10.0.9.6"])
    assert unchanged["changed"] is False and unchanged["diff"]["before"] == unchanged["diff"]["after"]


def test_a_name_opens_the_ports_to_every_ipv4_address_it_resolves_to(host):
    result = open_ports(host, prepare=RESOLVER, ports=[9100], sources=["monitor.example.org", "10.0.9.5"])
    assert result["rich_rules"] == [rule("10.0.9.5", 9100), rule("10.0.9.6", 9100)], result
    assert both(host)["rich_rules"] == [rule("10.0.9.5", 9100), rule("10.0.9.6", 9100)]


@pytest.mark.parametrize("args, expected", [
    ({"ports": [70000], "sources": ["10.0.9.5"]}, ["ports: 70000 out of 1-65535", "TCP port numbers"]),
    ({"ports": [0, 9100]}, ["ports: 0 out of 1-65535"]),
    ({"ports": []}, ["ports: empty", "state absent"]),
    ({"ports": [9100], "sources": ["monitor.invalid"]}, ["sources: 'monitor.invalid' is no IPv4 address or network",
                                                         "add its name to the host's DNS or /etc/hosts"]),
    ({"ports": [9100], "sources": ["fd00::1"]}, ["sources: 'fd00::1' is IPv6", "IPv4 address"]),
    ({"ports": [9100], "sources": ["0.0.0.0/0"]}, ["is every address", "give no sources (sources: [])"]),
    ({"ports": [9100], "name": "../exporters"}, ["name: '../exporters' is no name", "letters, digits, - and _"]),
    ({"ports": [9100], "timeout": 0}, ["timeout: 0; expected at least 1 second"]),
], ids=["port 70000", "port 0", "no ports", "unresolvable", "IPv6", "every address", "a path as name", "no time"])
def test_what_it_cannot_use_is_refused_and_nothing_changes(host, args, expected):
    before = state(host)
    assert_refused(open_ports(host, **args), *expected)
    assert state(host) == before and not (host / "state").exists() and writes(host) == []


def test_a_failing_firewall_cmd_is_named_with_its_output(host):
    result = open_ports(host, ports=[9100], zone="nosuch")
    assert_refused(result, "`%s --permanent --zone=nosuch --list-all` failed (exit code 112)"
                   % (host / "bin/firewall-cmd"), "Error: INVALID_ZONE: nosuch", "firewall-cmd --get-zones")


def test_the_openings_are_read_from_what_a_real_firewall_cmd_lists():
    """firewalld 1.3.3's --list-all (tests/fixtures/firewalld): its ports and rich rules, not its other settings."""
    listed = (REPO / "tests/fixtures/firewalld/list-all-1.3.3.txt").read_text()
    openings = firewalld_ports.listed_openings(listed)
    assert openings == {"8080/tcp", "9090/tcp", "9093/tcp", rule("172.18.0.7", 8405), rule("172.18.0.7", 9100)}
    # Nothing but ports and rules: forwarded and source ports, services and an IPv6 rule's colons are not ports.
    more = listed.replace("  forward-ports: ", "  forward-ports: port=80:proto=tcp:toport=8080:toaddr=")
    more = more.replace("  source-ports: ", "  source-ports: 1000/tcp")
    more += '\trule family="ipv6" source address="fd00::7" port port="9100" protocol="tcp" accept\n'
    assert firewalld_ports.listed_openings(more) == openings | {
        'rule family="ipv6" source address="fd00::7" port port="9100" protocol="tcp" accept'}
    empty = "trusted\n  target: ACCEPT\n  ports: \n  rich rules: \n"
    assert firewalld_ports.listed_openings(empty) == set()


def test_a_record_it_did_not_write_is_refused(host):
    (host / "state").mkdir()
    (host / "state" / (NAME + ".json")).write_text("[]")
    assert_refused(open_ports(host, ports=[9100]), "state_dir: %s is no record this module wrote"
                   % (host / "state" / (NAME + ".json")))


@pytest.mark.parametrize("routes, expected", [
    (["default via 10.0.1.1 dev eth1 proto static metric 100"], "internal"),
    # The route of least metric, whatever the order ip prints them in.
    (["default via 10.0.0.1 dev eth0 metric 600", "default via 10.0.1.1 dev eth1 metric 100"], "internal"),
    (["default via 10.0.0.1 dev eth0 proto dhcp src 10.0.0.5 metric 100"], "public"),  # in no zone: the default
    ([], "public"),
], ids=["eth1", "least metric", "interface in no zone", "no default route"])
def test_the_zone_is_the_default_routes_interfaces(host, routes, expected):
    change_state(host, lambda value: value.update(default_route=routes))
    result = open_ports(host, ports=[9100], sources=["10.0.9.5"])
    assert result["zone"] == expected and both(host, expected)["rich_rules"] == [rule("10.0.9.5", 9100)]
    assert ["ip", "-4", "route", "show", "default"] in calls(host)


def test_a_given_zone_is_used_as_given(host):
    result = open_ports(host, ports=[9100], zone="trusted")
    assert result["zone"] == "trusted" and both(host, "trusted")["ports"] == ["9100/tcp"]
    assert not [call for call in calls(host) if call[0] == "ip" or "--get-default-zone" in call]


def test_a_new_zone_takes_the_openings_from_the_old_one(host):
    open_ports(host, ports=[9100], sources=["10.0.9.5"])
    change_state(host, lambda value: value.update(default_route=["default via 10.0.1.1 dev eth1"]))
    result = open_ports(host, ports=[9100], sources=["10.0.9.5"])
    assert result["zone"] == "internal" and result["changed"] is True
    assert result["removed"] == result["added"] == [rule("10.0.9.5", 9100)]
    assert both(host, "public")["rich_rules"] == [] and both(host, "internal")["rich_rules"] == [rule("10.0.9.5", 9100)]
    assert record(host)["zone"] == "internal"
    assert open_ports(host, state="absent")["removed"] == [rule("10.0.9.5", 9100)]
    assert both(host, "internal")["rich_rules"] == []


def test_an_interrupted_run_is_finished_by_the_next(host):
    """A run cut short after the permanent configuration and the record: the next adds only the runtime one."""
    open_ports(host, ports=[9100], sources=["10.0.9.5"])
    change_state(host, lambda value: value["runtime"]["public"].update(rich_rules=[]))
    result = open_ports(host, ports=[9100], sources=["10.0.9.5"])
    assert result["changed"] is True and both(host)["rich_rules"] == [rule("10.0.9.5", 9100)]
    assert [call[:2] for call in writes(host)] == [["firewall-cmd", "--zone=public"]]


def test_the_timeout_bounds_every_call_together(host):
    """Each call a second late: the run ends at the whole call's timeout, naming the call it was waiting on."""
    started = time.monotonic()
    result = open_ports(host, prepare="os.environ['FAKE_FIREWALLD_DELAY'] = '1'\n", ports=[9100], timeout=2)
    elapsed = time.monotonic() - started
    assert_refused(result, "the time ran out (timeout: 2 s, the whole call) while waiting for `")
    assert elapsed < 8, "the module took %.1f s with timeout 2" % elapsed


def test_the_unforeseen_ends_in_a_message_that_says_what_was_being_done(host):
    sabotage = "def broken(*args, **kwargs):\n    raise KeyError('unforeseen')\nmodule.Openings.apply = broken\n"
    assert_refused(open_ports(host, prepare=sabotage, ports=[9100, 8082]),
                   "opening TCP ports 9100, 8082 in firewalld for ascend-fleet-exporters failed unexpectedly",
                   "KeyError", "unforeseen")
