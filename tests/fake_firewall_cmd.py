#!/usr/bin/env python3
"""firewall-cmd for the tests of library/firewalld_ports.py, and `ip -4 route show default` when called by the name
ip (a link of that name to it).

Its state is the JSON file $FAKE_FIREWALLD_STATE:
  running        false: firewalld stopped (--state prints "not running", every other call fails), as exit 252
  default_zone   what --get-default-zone prints
  interfaces     {interface: zone}, what --get-zone-of-interface=IF prints ("no zone", exit 2, for another)
  default_route  the lines `ip -4 route show default` prints
  permanent, runtime  {zone: {"rich_rules": [...], "ports": ["9100/tcp", ...]}}; a zone missing from permanent
                 does not exist (INVALID_ZONE, exit 112); --reload makes runtime a copy of permanent
Every call's arguments are appended, one JSON list a line, to $FAKE_FIREWALLD_LOG when it is set, and each call
sleeps $FAKE_FIREWALLD_DELAY seconds first when it is set (a firewalld slow to answer).

As the real one: options in either form (--zone=Z or --zone Z); one kind of action a call, given any number of
times (--add-rich-rule=A --add-rich-rule=B); an opening already there is "Warning: ALREADY_ENABLED" and one not
there "Warning: NOT_ENABLED", both exit 0; changes print "success". Unlike the real one, which silently carries out
only the first kind, two kinds of action in one call are refused, so a module relying on it is caught."""
import copy
import json
import os
import sys
import time

STATE = os.environ["FAKE_FIREWALLD_STATE"]
NOT_RUNNING, INVALID_ZONE, INVALID_PORT, INVALID_RULE, USAGE = 252, 112, 102, 122, 2
ACTIONS = ("--add-rich-rule", "--remove-rich-rule", "--add-port", "--remove-port")
WITH_VALUE = ("--zone", "--get-zone-of-interface") + ACTIONS
FLAGS = ("--permanent", "--state", "--reload", "--get-default-zone", "--list-rich-rules", "--list-ports",
         "--list-all")


def load():
    with open(STATE) as handle:
        return json.load(handle)


def save(state):
    with open(STATE, "w") as handle:
        json.dump(state, handle, indent=1)


def fail(message, code):
    print(message, file=sys.stderr)
    return code


def parse(argv):
    """[(option, value or None)] in the order given, or None for an option the real one would refuse."""
    given, rest = [], list(argv)
    while rest:
        word = rest.pop(0)
        option, equals, value = word.partition("=")
        if option in WITH_VALUE:
            if not equals:
                if not rest:
                    return None
                value = rest.pop(0)
            given.append((option, value))
        elif option in FLAGS and not equals:
            given.append((option, None))
        else:
            return None
    return given


def check_opening(kind, value):
    if kind == "port":
        number, slash, protocol = value.partition("/")
        low, _dash, high = number.partition("-")
        if not (slash and protocol in ("tcp", "udp", "sctp", "dccp") and low.isdigit() and (high or low).isdigit()
                and 1 <= int(low) <= int(high or low) <= 65535):
            return fail("Error: INVALID_PORT: %s" % value, INVALID_PORT)
    elif not value.startswith("rule ") or value.count('"') % 2:
        return fail("Error: INVALID_RULE: %s" % value, INVALID_RULE)
    return 0


def sorted_ports(ports):
    """Ordered as the real one orders them: by protocol, then by (first) port number."""
    return sorted(ports, key=lambda port: (port.split("/")[1], int(port.split("/")[0].split("-")[0])))


def list_all(state, zone, settings, permanent):
    """--list-all as firewalld 1.3.3 prints it (tests/fixtures/firewalld/list-all-1.3.3.txt): the zone, "(active)"
    in the runtime configuration when an interface is in it, then each setting, the rich rules last."""
    interfaces = sorted(name for name, bound in state.get("interfaces", {}).items() if bound == zone)
    lines = [zone + ("" if permanent or not interfaces else " (active)")]
    lines += ["  %s: %s" % pair for pair in (
        ("target", "default"), ("icmp-block-inversion", "no"), ("interfaces", " ".join(interfaces)),
        ("sources", ""), ("services", "dhcpv6-client ssh"), ("ports", " ".join(sorted_ports(settings["ports"]))),
        ("protocols", ""), ("forward", "yes"), ("masquerade", "no"), ("forward-ports", ""), ("source-ports", ""),
        ("icmp-blocks", ""), ("rich rules", ""))]
    lines += ["\t" + rule for rule in settings["rich_rules"]]
    print("\n".join(lines))


def zone_call(state, options, values):
    config = state["permanent" if "--permanent" in options else "runtime"]
    zone = values.get("--zone") or state["default_zone"]
    if zone not in state["permanent"]:
        return fail("Error: INVALID_ZONE: %s" % zone, INVALID_ZONE)
    settings = config.setdefault(zone, {"rich_rules": [], "ports": []})
    if "--list-all" in options:
        list_all(state, zone, settings, "--permanent" in options)
        return 0
    if "--list-rich-rules" in options:
        print("\n".join(settings["rich_rules"]))
        return 0
    if "--list-ports" in options:
        print(" ".join(sorted_ports(settings["ports"])))
        return 0
    kinds = sorted({option for option, _value in values["actions"]})
    if not kinds:
        return fail("usage: firewall-cmd: no action given", USAGE)
    if len(kinds) > 1:
        return fail("usage: firewall-cmd takes one kind of action a call (the real one carries out only the first "
                    "of %s)" % ", ".join(kinds), USAGE)
    for option, value in values["actions"]:
        doing, kind = option[2:].split("-", 1)
        kind = "port" if kind == "port" else "rich_rule"
        code = check_opening(kind, value)
        if code:
            return code
        held = settings["ports" if kind == "port" else "rich_rules"]
        if doing == "add" and value in held:
            print("Warning: ALREADY_ENABLED: %s" % value, file=sys.stderr)
        elif doing == "add":
            held.append(value)
        elif value not in held:
            print("Warning: NOT_ENABLED: %s" % value, file=sys.stderr)
        else:
            held.remove(value)
    print("success")
    return 0


def firewall_cmd(state, argv):
    given = parse(argv)
    if given is None:
        return fail("usage: firewall-cmd: an option this fake does not model: %s" % " ".join(argv), USAGE)
    options = [option for option, _value in given]
    values = dict(given)
    values["actions"] = [(option, value) for option, value in given if option in ACTIONS]
    if "--state" in options:
        if state["running"]:
            print("running")
            return 0
        return fail("not running", NOT_RUNNING)
    if not state["running"]:
        return fail("FirewallD is not running", NOT_RUNNING)
    if "--reload" in options:
        state["runtime"] = copy.deepcopy(state["permanent"])
        print("success")
        return 0
    if "--get-default-zone" in options:
        print(state["default_zone"])
        return 0
    if "--get-zone-of-interface" in options:
        zone = state.get("interfaces", {}).get(values["--get-zone-of-interface"])
        if not zone:
            return fail("no zone", USAGE)
        print(zone)
        return 0
    return zone_call(state, options, values)


def ip(state, argv):
    if argv != ["-4", "route", "show", "default"]:
        return fail("fake ip: only `ip -4 route show default` is modelled, not %s" % " ".join(argv), 1)
    for line in state.get("default_route", []):
        print(line)
    return 0


def main():
    argv = sys.argv[1:]
    if os.environ.get("FAKE_FIREWALLD_LOG"):
        with open(os.environ["FAKE_FIREWALLD_LOG"], "a") as log:
            log.write(json.dumps([os.path.basename(sys.argv[0])] + argv) + "\n")
    time.sleep(float(os.environ.get("FAKE_FIREWALLD_DELAY") or 0))
    state = load()
    code = (ip if os.path.basename(sys.argv[0]) == "ip" else firewall_cmd)(state, argv)
    save(state)
    return code


if __name__ == "__main__":
    sys.exit(main())
