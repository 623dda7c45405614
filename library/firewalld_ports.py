#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module firewalld_ports: firewalld opens the listed TCP ports to the listed sources, in its own terms, so
that the openings hold through firewall-cmd --reload and reboots."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: firewalld_ports
short_description: Open TCP ports to the listed sources in firewalld, permanently and at once
description:
  - On a host where firewalld runs (openEuler, Kylin and UOS servers start it at boot), its zone drops every port
    it does not open, so an exporter or a vLLM instance on the host is out of reach of the machines that must reach
    it. This module opens exactly the C(ports) (TCP) to exactly the C(sources), in firewalld's own terms (rich rules,
    or the ports themselves), so the openings hold through C(firewall-cmd --reload) and reboots, which remove rules
    put in behind firewalld's back.
  - With C(sources), each port is opened to each source by a rich rule, spelled as C(firewall-cmd --list-rich-rules)
    prints it - C(rule family="ipv4" source address="10.0.9.5" port port="9100" protocol="tcp" accept). Without
    them, the port itself is opened (C(9100/tcp)), to every source.
  - Each opening is made in both of firewalld's configurations, the permanent one (what a reload or a boot loads)
    and the runtime one (what firewalld does now), so none waits for a reload. The module never reloads firewalld,
    as a reload flushes the rules other programs (Docker among them) keep in the same tables.
  - The module records what it opened for C(name) in C(state_dir) (C(<name>.json)). A later run removes, from either
    configuration, the openings that record names and that are no longer wanted (another source, another port,
    another zone). Openings the record does not name are never touched - an administrator's own, another name's,
    and a wanted one that was already in both configurations before the module opened it, which stays its owner's
    and is not recorded.
  - The zone is the one firewalld puts the interface of the host's default route in (the interface the other
    machines' connections come in on, on most servers), else firewalld's default zone; C(zone) names another.
  - Where C(firewall-cmd) is missing, or firewalld does not run, nothing is changed and C(firewalld_running) is
    false - without firewalld no zone drops the ports.
  - With C(state=absent), the openings the record names are removed, and the record.
  - A second run with the same options changes nothing and runs only firewall-cmd's read commands.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  name:
    description:
      - Who owns these openings, such as C(ascend-fleet-exporters) - the name of the record, so that each use of the
        module removes only the openings it made. Letters, digits, C(-) and C(_).
    type: str
    required: true
  ports:
    description:
      - The TCP ports to open, 1-65535. Required with C(state=present).
    type: list
    elements: int
    default: []
  sources:
    description:
      - The machines that may connect to the ports - IPv4 addresses, networks (C(10.0.0.0/24)) or names the host
        resolves (to every IPv4 address they have).
      - Empty, every source may (the ports themselves are opened).
    type: list
    elements: str
    default: []
  zone:
    description:
      - The firewalld zone to open the ports in.
      - Empty, the zone of the interface of the host's default route (C(ip -4 route show default)), as
        C(firewall-cmd --get-zone-of-interface) gives it, or firewalld's default zone where there is no default
        route or its interface is in no zone.
    type: str
    default: ""
  state:
    description: C(present) opens the ports to the sources; C(absent) removes every opening the record of C(name)
      names, and the record.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description:
      - Where the module records what it opened, a file per C(name) (C(<name>.json), mode 0644).
    type: path
    default: /var/lib/ascend-fleet/firewalld
  firewall_cmd:
    description: The C(firewall-cmd) command.
    type: path
    default: firewall-cmd
  timeout:
    description:
      - Seconds the whole call may take (at least 1) - every firewall-cmd call (each waits on firewalld, over
        D-Bus), and C(ip). Each gets only what is left of it; a failure when it runs out names the call it was
        waiting on.
    type: int
    default: 60
notes:
  - IPv4 sources only. A port opened without sources is opened to IPv6 too; with sources, IPv6 connections to it
    stay dropped.
  - The zone's other settings still hold. A port the zone already opens to every source (an administrator's
    C(--add-port), a range holding it) stays open to every source; the module warns of such a port. A service
    the zone allows (C(firewall-cmd --list-services)) is not looked into.
  - Where firewalld does not run, C(state=absent) removes the record but cannot reach firewalld's permanent
    configuration; the openings it named come back when firewalld starts. Run it while firewalld runs, or remove
    them with C(firewall-offline-cmd).
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Runs only firewall-cmd's read commands and reports what would be added and removed.
    support: full
  diff_mode:
    description: The openings of C(name) before and after, one a line, each after its zone (before, with the
      configuration that lacks it when only one holds it).
    support: full
"""

EXAMPLES = r"""
- name: Only the monitoring hosts reach the exporters (node exporter, NPU collector) through firewalld
  ascend.fleet.firewalld_ports:
    name: ascend-fleet-exporters
    ports: [9100, 8082]
    sources: [10.0.9.5, monitor.example.org]

- name: The gateways' network reaches the vLLM instances, in the zone internal
  ascend.fleet.firewalld_ports:
    name: ascend-fleet-instances
    ports: [8000, 8001]
    sources: [10.0.8.0/24]
    zone: internal

- name: Every source reaches the node exporter
  ascend.fleet.firewalld_ports:
    name: ascend-fleet-node-exporter
    ports: [9100]

- name: Remove what ascend-fleet-exporters opened
  ascend.fleet.firewalld_ports:
    name: ascend-fleet-exporters
    state: absent
"""

RETURN = r"""
firewalld_running:
  description: Whether firewalld runs (false where C(firewall-cmd) is missing); without it nothing was changed.
  returned: always
  type: bool
zone:
  description: The zone the openings are in (empty where firewalld does not run and C(zone) was not given).
  returned: always
  type: str
  sample: public
rich_rules:
  description: The rich rules wanted, as C(firewall-cmd --list-rich-rules) prints them (none with C(state=absent)).
  returned: always
  type: list
  elements: str
  sample: ['rule family="ipv4" source address="10.0.9.5" port port="9100" protocol="tcp" accept']
ports:
  description: The ports wanted open to every source (no C(sources)), as C(firewall-cmd --list-ports) prints them.
  returned: always
  type: list
  elements: str
  sample: ["9100/tcp"]
added:
  description: The openings (rich rules and ports) added to either configuration, or that would be in check mode.
  returned: always
  type: list
  elements: str
removed:
  description:
    - The openings removed from either configuration (from the zone of the record when the zone changed), or that
      would be in check mode.
  returned: always
  type: list
  elements: str
"""

import ipaddress
import json
import os
import shlex
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.firewall_sources import resolve
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import read_text, remove, write_atomically

IP_COMMAND = "ip"
# Ansible's PATH on a host may lack the sbin folders, where distributions put ip (and some firewall-cmd).
SYSTEM_PATH = "/usr/bin:/usr/sbin:/bin:/sbin"
NAME_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# firewall-cmd's two configurations, permanent first: an interrupted run then leaves what a reload or a boot loads
# right, and the runtime one is mended by the next run.
CONFIGS = (("permanent", ("--permanent",)), ("runtime", ()))
# The warnings firewall-cmd gives, exit 0, for an opening already there or already gone: another hand changed the
# zone between this run's read and its write, and the zone is as wanted. Any other warning of a call that gave
# several items is an item that failed: firewall-cmd exits 0 when at least one of them did not.
HARMLESS = ("ALREADY_ENABLED", "NOT_ENABLED")
# The words of firewall_sources' messages.
WORDS = dict(guarded="the ports", open="give no sources (sources: [])", peer="the machine", listed_as="",
             ipv4="the rules this module makes are IPv4 ones")


def timed_out(deadline, waiting_on):
    return OptionError("the time ran out (timeout: %s s, the whole call) while waiting for %s (firewalld busy or "
                       "not answering on D-Bus: systemctl status firewalld tells). Fix: find what holds it up, then "
                       "run again, or give a longer timeout" % (deadline.seconds, waiting_on))


def is_rule(opening):
    return opening.startswith("rule ")


def wanted_openings(ports, addresses):
    """Per port, a rich rule per source in firewalld's canonical spelling (the one it lists, so that the lists
    compare as text), or the port itself when there are no sources."""
    if not addresses:
        return ["%d/tcp" % port for port in ports]
    return ['rule family="ipv4" source address="%s" port port="%d" protocol="tcp" accept' % (address, port)
            for port in ports for address in addresses]


def addresses_of(networks):
    """The networks as firewalld keeps a source address: a single address without /32 (as an administrator and
    firewall-cmd's own examples write it), without repeats."""
    addresses = []
    for text in networks:
        network = ipaddress.ip_network(text)
        address = str(network.network_address) if network.prefixlen == 32 else str(network)
        if address not in addresses:
            addresses.append(address)
    return addresses


def covers(opening, port):
    """Whether a port opening of a zone (9100/tcp, 9000-9200/tcp) lets TCP connections to port through."""
    number, _slash, protocol = opening.partition("/")
    low, _dash, high = number.partition("-")
    try:
        return protocol == "tcp" and int(low) <= port <= int(high or low)
    except ValueError:
        return False


def listed_openings(text):
    """The ports and the rich rules in what firewall-cmd --list-all prints, as --list-ports and --list-rich-rules
    print them: the words of its `  ports:` line, and the tab-indented lines after `  rich rules:`, one rule a line
    (firewall-cmd's format since firewalld 0.3; tests/fixtures/firewalld has one)."""
    openings, in_rules = set(), False
    for line in text.splitlines():
        if in_rules and line.startswith("\t"):
            if line.strip():
                openings.add(line.strip())
            continue
        key, colon, values = line.strip().partition(":")
        in_rules = bool(colon) and key == "rich rules"
        if colon and key == "ports":
            openings.update(values.split())
    return openings


class FirewallCmd:
    """The firewall-cmd (and ip) calls of the module, all within its deadline (module_utils/deadline.py)."""

    def __init__(self, command, deadline):
        self.command = shutil.which(command, path=os.environ.get("PATH", "") + os.pathsep + SYSTEM_PATH)
        self.deadline = deadline

    def run(self, *args, program=None):
        argv = [program or self.command] + list(args)
        called = "`%s`" % " ".join(shlex.quote(word) for word in argv)
        try:
            timeout = self.deadline.allow(called)
        except DeadlinePassed:
            raise timed_out(self.deadline, called) from None
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  env=dict(os.environ, LC_ALL="C"), encoding="utf-8", errors="replace",
                                  check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise timed_out(self.deadline, called) from None
        return done.returncode, done.stdout, done.stderr.strip()

    def must(self, *args):
        code, out, err = self.run(*args)
        failed = [line for line in err.splitlines() if line.startswith(("Error:", "Warning:"))
                  and not any(line.startswith("Warning: %s" % harmless) for harmless in HARMLESS)]
        if code != 0 or failed:
            raise OptionError("`%s` failed (exit code %s): %s. Fix: run it on the host to see why (a zone that does "
                              "not exist - firewall-cmd --get-zones lists them; firewalld failed - systemctl status "
                              "firewalld), then run again"
                              % (" ".join(shlex.quote(word) for word in [self.command] + list(args)), code,
                                 ("\n".join(failed) or err or out.strip())[:1000] or "no output"))
        return out

    def running(self):
        if not self.command:
            return False
        code, out, _err = self.run("--state")
        return code == 0 and out.strip() == "running"

    def default_route_interface(self):
        """The interface of the host's default route (the one of least metric), or None."""
        ip = shutil.which(IP_COMMAND, path=os.environ.get("PATH", "") + os.pathsep + SYSTEM_PATH)
        if not ip:
            return None
        code, out, _err = self.run("-4", "route", "show", "default", program=ip)
        routes = []
        for line in out.splitlines() if code == 0 else []:
            words = line.split()
            # Each word to the one after it: ip prints "dev IF" and "metric N" among flags that take no value.
            fields = dict(zip(words[1:], words[2:]))
            if "dev" in fields:
                metric = fields.get("metric", "0")
                routes.append((int(metric) if metric.isdigit() else 0, len(routes), fields["dev"]))
        return min(routes)[2] if routes else None

    def zone(self):
        interface = self.default_route_interface()
        if interface:
            # An interface bound to no zone is in the default zone (firewall-cmd says "no zone", exit 2).
            code, out, _err = self.run("--get-zone-of-interface=%s" % interface)
            if code == 0 and out.strip():
                return out.strip()
        return self.must("--get-default-zone").strip()

    def openings(self, config, zone):
        """The rich rules and the ports of a zone in one configuration, from one --list-all (each firewall-cmd call
        costs a Python start on the host and a D-Bus call of firewalld)."""
        flags = dict(CONFIGS)[config] + ("--zone=%s" % zone,)
        return listed_openings(self.must(*(flags + ("--list-all",))))

    def change(self, config, zone, action, openings):
        """Adds or removes openings, a call for the rich rules and one for the ports: firewall-cmd takes any number
        of one kind of action, but carries out only the first kind of a call."""
        flags = dict(CONFIGS)[config] + ("--zone=%s" % zone,)
        for kind, items in (("rich-rule", [item for item in openings if is_rule(item)]),
                            ("port", [item for item in openings if not is_rule(item)])):
            if items:
                self.must(*(flags + tuple("--%s-%s=%s" % (action, kind, item) for item in items)))


class Openings:
    """What the module opened for one name: the record in state_dir, and the zone it read and changed."""

    def __init__(self, params, check_mode):
        self.params, self.check_mode = params, check_mode
        self.path = os.path.join(params["state_dir"], params["name"] + ".json")
        self.firewall = FirewallCmd(params["firewall_cmd"], Deadline(params["timeout"]))
        self.changed = False
        self.zone = params["zone"]
        self.added, self.removed, self.before, self.after = [], [], [], []
        self.warnings = []

    def record(self):
        """The record's zone and openings, or None where this name opened nothing yet."""
        text = read_text(self.path, None)
        if text is None:
            return None
        try:
            record = json.loads(text)
            zone, openings = record["zone"], list(record["rich_rules"]) + list(record["ports"])
            if not isinstance(zone, str) or not all(isinstance(item, str) for item in openings):
                raise ValueError("a zone or an opening that is no text")
        except (ValueError, KeyError, TypeError) as error:
            raise OptionError("state_dir: %s is no record this module wrote (%s); expected JSON with zone, rich_rules "
                              "and ports. Fix: remove it (the openings it named stay - firewall-cmd --list-all "
                              "--zone=<zone> shows them, to remove by hand), then run again"
                              % (self.path, error)) from None
        return zone, openings

    def apply(self, wanted):
        """Makes the zone hold the wanted openings (none with state absent), in both configurations."""
        if not self.firewall.running():
            if self.params["state"] == "absent" and os.path.lexists(self.path):
                # What the record names cannot be reached: a record kept would name openings of a firewalld that
                # may never run again on this host.
                self.changed = True
                if not self.check_mode:
                    remove(self.path)
            return False
        record = self.record()
        if self.params["state"] == "absent" and record is None:
            return True  # nothing recorded, nothing to remove
        old_zone, old = record if record else (None, [])
        if self.params["state"] == "absent":
            self.zone = old_zone
        elif not self.zone:
            self.zone = self.firewall.zone()
        now = {config: self.firewall.openings(config, self.zone) for config, _flags in CONFIGS}
        moved = old_zone not in (None, self.zone)
        before = {config: self.firewall.openings(config, old_zone) for config, _flags in CONFIGS} if moved else now
        mine = set() if moved else set(old)
        # Wanted and already in both configurations without the record naming it: someone else's, left to them.
        ours = [item for item in wanted if item in mine or not all(item in now[config] for config in now)]
        going = {config: [item for item in old if item in before[config] and (moved or item not in ours)]
                 for config, _flags in CONFIGS}
        coming = {config: [item for item in ours if item not in now[config]] for config, _flags in CONFIGS}
        self.describe(old_zone, old, before, now, ours)
        self.warn_of_open_ports(now, set(old) | set(ours))

        # Narrowed first: a run cut short opens nothing it should not. The record, the old one until then, names
        # what a next run must still remove; then the new one names what it must still add.
        for config, _flags in CONFIGS:
            if going[config]:
                self.change(self.firewall.change, config, old_zone, "remove", going[config])
        text = None if self.params["state"] == "absent" else record_text(self.zone, ours)
        if read_text(self.path, None) != text:
            self.change(self.write_record, text)
        for config, _flags in CONFIGS:
            if coming[config]:
                self.change(self.firewall.change, config, self.zone, "add", coming[config])
        self.added = [item for item in ours if any(item in items for items in coming.values())]
        self.removed = [item for item in old if any(item in items for items in going.values())]
        return True

    def describe(self, old_zone, old, before, now, ours):
        """The openings of the name before and after, for the diff: each after its zone, and before, with the
        configuration that lacks it when only one holds it."""
        def lines(zone, items, held):
            shown = []
            for item in items:
                lacking = [config for config, _flags in CONFIGS if item not in held[config]]
                if len(lacking) == 1:
                    shown.append("%s: %s (not in the %s configuration)" % (zone, item, lacking[0]))
                elif not lacking:
                    shown.append("%s: %s" % (zone, item))
            return shown

        self.before = lines(old_zone, old, before) if old_zone is not None else []
        self.before += lines(self.zone, [item for item in ours if old_zone != self.zone or item not in old], now)
        self.after = ["%s: %s" % (self.zone, item) for item in ours]

    def warn_of_open_ports(self, now, mine):
        if self.params["state"] == "absent" or not self.params["sources"]:
            return
        for port in sorted(set(self.params["ports"])):
            found = sorted({item for held in now.values() for item in held
                            if not is_rule(item) and item not in mine and covers(item, port)})
            for item in found:
                self.warnings.append(
                    "%s is open to every source in firewalld's zone %s (not by this module for %s), so the sources do "
                    "not narrow who reaches port %d. Remove it (firewall-cmd --zone=%s --remove-port=%s, with and "
                    "without --permanent) if only the sources should" % (item, self.zone, self.params["name"], port,
                                                                         self.zone, item))

    def change(self, action, *args):
        self.changed = True
        if not self.check_mode:
            action(*args)

    def write_record(self, text):
        if text is None:
            remove(self.path)
            return
        os.makedirs(os.path.dirname(self.path) or ".", mode=0o755, exist_ok=True)
        write_atomically(self.path, text, 0o644)


def record_text(zone, openings):
    """The record, sorted: the same openings given in another order are the same record, not a change."""
    return json.dumps(dict(zone=zone, rich_rules=sorted(item for item in openings if is_rule(item)),
                           ports=sorted(item for item in openings if not is_rule(item))), indent=2,
                      sort_keys=True) + "\n"


def check_options(params):
    name = params["name"]
    if not name or not set(name) <= NAME_CHARACTERS:
        raise OptionError("name: %r is no name this module can record openings under; expected letters, digits, - "
                          "and _ (the record is <state_dir>/<name>.json). Fix: name the openings' owner, such as "
                          "ascend-fleet-exporters" % name)
    if params["state"] == "present":
        if not params["ports"]:
            raise OptionError("ports: empty; expected the TCP ports to open. Fix: list them (9100 for the node "
                              "exporter, 8082 for the NPU collector), or state absent to remove what %s opened"
                              % name)
        bad = [port for port in params["ports"] if not 1 <= port <= 65535]
        if bad:
            raise OptionError("ports: %s out of 1-65535; expected TCP port numbers. Fix: give the ports the host's "
                              "processes listen on" % ", ".join(map(str, bad)))
    if params["timeout"] < 1:
        raise OptionError("timeout: %s; expected at least 1 second. Fix: give the seconds the whole call may take, "
                          "firewall-cmd calls and all (60 by default)" % params["timeout"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            ports=dict(type="list", elements="int", default=[]),
            sources=dict(type="list", elements="str", default=[]),
            zone=dict(type="str", default=""),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            state_dir=dict(type="path", default="/var/lib/ascend-fleet/firewalld"),
            firewall_cmd=dict(type="path", default="firewall-cmd"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    params = module.params
    params["zone"] = (params["zone"] or "").strip()
    present = params["state"] == "present"
    doing = ("opening TCP ports %s in firewalld for %s" % (", ".join(map(str, params["ports"])), params["name"])
             if present else "removing the firewalld openings of %s" % params["name"])
    wanted = []
    try:
        check_options(params)
        if present:
            wanted = wanted_openings(sorted(set(params["ports"])), addresses_of(resolve(params["sources"], WORDS)))
        openings = Openings(params, module.check_mode)
        running = openings.apply(wanted)
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure(doing, error))
    for warning in openings.warnings:
        module.warn(warning)
    result = dict(changed=openings.changed, firewalld_running=running, zone=openings.zone or "",
                  rich_rules=[item for item in wanted if is_rule(item)],
                  ports=[item for item in wanted if not is_rule(item)], added=openings.added, removed=openings.removed)
    if module._diff:
        result["diff"] = dict(before="".join(line + "\n" for line in openings.before),
                              after="".join(line + "\n" for line in openings.after),
                              before_header="firewalld openings of %s" % params["name"],
                              after_header="firewalld openings of %s" % params["name"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
