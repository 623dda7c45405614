#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module instance_firewall: only the listed sources reach the vLLM instances' published ports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: instance_firewall
short_description: Let only the listed sources reach the ports Docker publishes for the vLLM instances
description:
  - vLLM 0.18's C(--api-key) guards only paths under C(/v1); an instance also answers C(POST /invocations) (a
    chat completion) and C(/tokenize) without the key. So an instance's port should be reachable only from the
    machines that must reach it, the gateways, and the host itself.
  - Docker publishes a container's port with NAT rules that forward the traffic before the host's INPUT chain
    sees it, so a rule there, or in a host firewall that only knows INPUT, does not hold. Docker's own
    C(DOCKER-USER) chain is the place for it; this module keeps a chain of its own (C(chain)), jumped to first
    from C(DOCKER-USER), that lets the C(sources) through to the C(ports) and answers any other source with a TCP
    reset. Ports are matched as published (the connections Docker's publishing forwarded, by their original
    destination port), whatever address the container has; a container's own connections out are left alone.
  - The host's own processes always reach its instances (their connections are not forwarded), as do the
    readiness checks and the benchmark, which run on it; another container on the host that connects to a
    published port is a source like any other.
  - The rules are kept in C(rules_file) (C(iptables-restore) format). Where systemd runs, the unit in
    C(unit_file), wanted by and ordered before C(docker.service), puts them back at every boot before the
    engine starts a container.
  - The chain is replaced whole, and only when its rules differ from the wanted ones; a second run changes
    nothing.
  - With C(state=absent), the jump, the chain, the rules file and the unit are removed.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  ports:
    description: The ports published on the host (each instance's port). Required with C(state=present).
    type: list
    elements: int
    default: []
  sources:
    description:
      - The machines that may reach the ports, besides the host itself - IPv4 addresses, networks (C(10.0.0.0/24))
        or names the host resolves (to every IPv4 address they have). Required with C(state=present).
    type: list
    elements: str
    default: []
  state:
    description: C(present) keeps the rules; C(absent) removes everything this module made.
    type: str
    choices: [present, absent]
    default: present
  chain:
    description: The module's own chain in the filter table.
    type: str
    default: ASCEND-FLEET
  rules_file:
    description: Where the rules are kept for the next boots.
    type: path
    default: /etc/ascend-fleet-firewall.rules
  unit_file:
    description: The systemd unit that puts the rules back at boot (written only where systemd runs).
    type: path
    default: /etc/systemd/system/ascend-fleet-firewall.service
  iptables:
    description: The C(iptables) command (C(iptables-restore) is taken from the same folder).
    type: str
    default: iptables
  timeout:
    description: Seconds each C(iptables) call may take, waiting for the xtables lock included.
    type: int
    default: 30
notes:
  - IPv4 only, as the instances are published on an IPv4 address (C(vllm_server_bind_address)).
  - The Docker engine must manage iptables (its default). With C(iptables) false in C(daemon.json) it makes no
    C(DOCKER-USER) chain and publishes ports through its userland proxy; the module fails, saying so.
  - firewalld reloads and C(iptables -F) remove the rules until the next run or boot.
extends_documentation_fragment:
  - ascend.fleet.attributes
attributes:
  check_mode:
    description: Reads the rules and reports whether they would change.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: The rules wanted are returned in C(rules).
"""

EXAMPLES = r"""
- name: Only the gateway reaches the instances
  ascend.fleet.instance_firewall:
    ports: [8000, 8001]
    sources: [10.0.8.20, gw2.example.org]

- name: Remove the rules
  ascend.fleet.instance_firewall:
    state: absent
"""

RETURN = r"""
rules:
  description: The chain's rules as C(iptables -S) prints them, wanted (with C(state=present)).
  returned: always
  type: list
  elements: str
  sample:
    - -A ASCEND-FLEET -s 10.0.8.20/32 -p tcp -m conntrack --ctstate DNAT --ctorigdstport 8000 --ctdir ORIGINAL -j RETURN
sources:
  description: The IPv4 networks the sources resolved to.
  returned: always
  type: list
  elements: str
  sample: ["10.0.8.20/32"]
persisted:
  description: Whether a systemd unit puts the rules back at boot (false where systemd does not run).
  returned: always
  type: bool
"""

import ipaddress
import os
import shutil
import socket
import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import read_text, remove, write_atomically

DOCKER_CHAIN = "DOCKER-USER"
SYSTEMD_RUNNING = "/run/systemd/system"  # what sd_booted() checks
UNIT_WANTED_BY = "docker.service"
# A chain name iptables takes: at most 28 characters, and no option-like or empty name.
CHAIN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class Iptables:
    """The iptables commands this module runs, each bounded by the timeout."""

    def __init__(self, command, timeout):
        self.command = shutil.which(command, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if not self.command:
            raise OptionError("iptables %r: no such command. Expected the iptables command, which Docker's engine "
                              "uses for its own rules. Fix: install iptables, or set the iptables option to its "
                              "path" % command)
        self.restore = os.path.join(os.path.dirname(self.command), os.path.basename(self.command) + "-restore")
        self.timeout = timeout

    def run(self, *args, stdin=None, command=None):
        argv = [command or self.command, "-w", str(self.timeout)] + list(args)
        try:
            done = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=None if stdin is not None else subprocess.DEVNULL, encoding="utf-8",
                                  errors="replace", check=False, timeout=self.timeout + 10)
        except subprocess.TimeoutExpired:
            raise OptionError("%s: no end after %ss (the xtables lock held, or the kernel busy). Fix: find what "
                              "holds it (fuser /run/xtables.lock), then run again" % (" ".join(argv), self.timeout)
                              ) from None
        return done.returncode, done.stdout, done.stderr.strip()

    def must(self, *args, stdin=None, command=None):
        code, out, err = self.run(*args, stdin=stdin, command=command)
        if code != 0:
            called = "%s %s" % (os.path.basename(command or self.command), " ".join(args))
            raise OptionError("%s failed: %s. Fix: run it on the host to see why (a kernel without the conntrack "
                              "match, another firewall holding the table), then run again"
                              % (called, err[:500] or "exit code %s" % code))
        return out

    def chain_rules(self, chain):
        """The chain's -A lines, or None when it does not exist."""
        code, out, _err = self.run("-S", chain)
        if code != 0:
            return None
        return [line for line in out.splitlines() if line.startswith("-A ")]

    def jumps_first(self, chain):
        """Whether DOCKER-USER's first rule jumps to chain; None when DOCKER-USER does not exist."""
        rules = self.chain_rules(DOCKER_CHAIN)
        if rules is None:
            return None
        return bool(rules) and rules[0] == "-A %s -j %s" % (DOCKER_CHAIN, chain)


def resolve(sources):
    """Every source as IPv4 networks, names resolved by this host (as its packets will come)."""
    networks = []
    for source in sources:
        text = str(source).strip()
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            network = None
        if network is not None:
            if network.prefixlen == 0:
                raise OptionError("sources: %r is every address; expected the machines that may reach the instances. "
                                  "Fix: set vllm_server_firewall false to leave the ports open to every address"
                                  % text)
            if network.version != 4:
                raise OptionError("sources: %r is IPv6; expected IPv4 addresses or networks, as the instances are "
                                  "published on IPv4. Fix: list the gateway's IPv4 address" % text)
            found = [network]
        else:
            try:
                found = sorted({ipaddress.ip_network(info[4][0]) for info in
                                socket.getaddrinfo(text, None, socket.AF_INET, socket.SOCK_STREAM)})
            except (socket.gaierror, UnicodeError, ValueError) as error:
                raise OptionError("sources: %r is no IPv4 address or network, and this host cannot resolve it (%s). "
                                  "Fix: list the gateway's address (vllm_server_allowed_sources), or add its name "
                                  "to the host's DNS or /etc/hosts" % (text[:200], error)) from None
        networks += [str(item) for item in found if str(item) not in networks]
    return networks


def wanted_rules(chain, ports, networks):
    """The chain's rules in the form iptables -S prints them: for each port, each source let through (RETURN goes
    on to Docker's rules), then any other source reset. --ctstate DNAT: only connections Docker's publishing
    forwarded to a container (a container's own connection out to another host's port 8000 is not one);
    --ctdir ORIGINAL: the answers going back are left alone."""
    rules = []
    for port in ports:
        match = "-p tcp -m conntrack --ctstate DNAT --ctorigdstport %d --ctdir ORIGINAL" % port
        rules += ["-A %s -s %s %s -j RETURN" % (chain, network, match) for network in networks]
        rules.append("-A %s %s -j REJECT --reject-with tcp-reset" % (chain, match))
    return rules


def rules_file_text(chain, rules):
    return "".join([
        "# ascend.fleet.instance_firewall: only these sources reach the vLLM instances' ports. Applied with\n",
        "# iptables-restore --noflush, which replaces this chain only.\n",
        "*filter\n", ":%s - [0:0]\n" % chain] + [rule + "\n" for rule in rules] + ["COMMIT\n"])


def unit_text(iptables, chain, rules_file):
    # Ordered before the engine, which starts the containers: no instance is published before its rules hold.
    # DOCKER-USER is made if the engine has not made it yet; the engine keeps a chain of that name it finds.
    wait = "-w 30"
    script = ("{ipt} {w} -N {docker} 2>/dev/null; {restore} {w} --noflush {rules} && "
              "{{ {ipt} {w} -C {docker} -j {chain} 2>/dev/null || {ipt} {w} -I {docker} 1 -j {chain}; }}").format(
                  ipt=iptables.command, restore=iptables.restore, w=wait, docker=DOCKER_CHAIN, rules=rules_file,
                  chain=chain)
    return "".join([
        "# ascend.fleet.instance_firewall: only the listed sources reach the vLLM instances' ports.\n",
        "[Unit]\n",
        "Description=Only the fleet's gateways reach the vLLM instances (%s)\n" % chain,
        "Before=%s\n" % UNIT_WANTED_BY,
        # firewalld (iptables backend) flushes the tables when it starts: the rules go in after it.
        "After=firewalld.service\n",
        "\n[Service]\n", "Type=oneshot\n", "RemainAfterExit=yes\n",
        "ExecStart=/bin/sh -c '%s'\n" % script,
        "\n[Install]\n", "WantedBy=%s\n" % UNIT_WANTED_BY])


class Firewall:
    def __init__(self, params, check_mode):
        self.params, self.check_mode = params, check_mode
        self.chain = params["chain"]
        try:
            self.iptables = Iptables(params["iptables"], params["timeout"])
        except OptionError:
            if params["state"] == "present":
                raise
            self.iptables = None  # a host without iptables holds no rules to remove
        self.systemd = os.path.isdir(SYSTEMD_RUNNING)
        self.link = os.path.join(os.path.dirname(params["unit_file"]), UNIT_WANTED_BY + ".wants",
                                 os.path.basename(params["unit_file"]))
        self.changed = False

    def change(self, action, *args, **kwargs):
        self.changed = True
        if not self.check_mode:
            action(*args, **kwargs)

    def present(self, rules):
        first = self.iptables.jumps_first(self.chain)
        if first is None and self.check_mode:
            self.changed = True  # a host whose engine a check run did not start yet: the rules would be made
            return
        if first is None:
            raise OptionError("the host has no %s chain: its Docker engine does not manage iptables (iptables false "
                              "in /etc/docker/daemon.json, or the engine not started), or it uses the other iptables "
                              "(iptables-legacy -S DOCKER-USER shows it), so the instances' ports cannot be guarded. "
                              "Fix: let Docker manage iptables (remove \"iptables\": false) and restart it, point "
                              "the iptables option at the engine's iptables, or set vllm_server_firewall false and "
                              "guard the ports another way" % DOCKER_CHAIN)
        text = rules_file_text(self.chain, rules)
        if self.iptables.chain_rules(self.chain) != rules:
            self.change(self.iptables.must, "--noflush", stdin=text, command=self.iptables.restore)
        if not first:
            # A jump elsewhere in the chain (someone moved it) is taken out, so there is exactly one, first.
            while self.iptables.run("-C", DOCKER_CHAIN, "-j", self.chain)[0] == 0 and not self.check_mode:
                self.iptables.must("-D", DOCKER_CHAIN, "-j", self.chain)
            self.change(self.iptables.must, "-I", DOCKER_CHAIN, "1", "-j", self.chain)
        if read_text(self.params["rules_file"], None) != text:
            self.change(self.write, self.params["rules_file"], text)
        if self.systemd:
            unit = unit_text(self.iptables, self.chain, self.params["rules_file"])
            if read_text(self.params["unit_file"], None) != unit or os.path.realpath(self.link) != os.path.realpath(
                    self.params["unit_file"]) or not os.path.islink(self.link):
                self.change(self.install_unit, unit)

    def absent(self):
        while self.iptables and self.iptables.run("-C", DOCKER_CHAIN, "-j", self.chain)[0] == 0:
            self.change(self.iptables.must, "-D", DOCKER_CHAIN, "-j", self.chain)
            if self.check_mode:
                break
        if self.iptables and self.iptables.chain_rules(self.chain) is not None:
            self.change(self.iptables.must, "-F", self.chain)
            self.change(self.iptables.must, "-X", self.chain)
        for path in (self.link, self.params["unit_file"], self.params["rules_file"]):
            if os.path.lexists(path):
                self.change(remove, path)
        if self.changed and self.systemd and not self.check_mode:
            self.daemon_reload()

    @staticmethod
    def write(path, text):
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        write_atomically(path, text, 0o644)

    def install_unit(self, unit):
        self.write(self.params["unit_file"], unit)
        os.makedirs(os.path.dirname(self.link), mode=0o755, exist_ok=True)
        if os.path.lexists(self.link):
            remove(self.link)
        os.symlink(self.params["unit_file"], self.link)  # what `systemctl enable` makes for WantedBy
        self.daemon_reload()

    @staticmethod
    def daemon_reload():
        try:
            subprocess.run(["systemctl", "daemon-reload"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, check=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as error:
            raise OptionError("systemctl daemon-reload failed (%s): systemd has not read the change to its units "
                              "(ascend-fleet's firewall unit). Fix: run systemctl daemon-reload on the host"
                              % error) from None


def check_options(params):
    chain = params["chain"]
    if not chain or len(chain) > 28 or chain.startswith("-") or not set(chain) <= CHAIN_CHARACTERS or \
            chain == DOCKER_CHAIN:
        raise OptionError("chain: %r is no chain name this module can own; expected letters, digits, - and _, at "
                          "most 28 characters, not %s. Fix: keep the default, ASCEND-FLEET" % (chain, DOCKER_CHAIN))
    if params["state"] == "present":
        if not params["ports"]:
            raise OptionError("ports: empty; expected the ports the instances are published on. Fix: give the serving "
                              "plan's ports, or state absent to remove the rules")
        bad = [port for port in params["ports"] if not 1 <= port <= 65535]
        if bad:
            raise OptionError("ports: %s out of 1-65535. Fix: give the ports the instances are published on"
                              % ", ".join(map(str, bad)))
        if not params["sources"]:
            raise OptionError("sources: empty; expected the addresses that may reach the instances (the gateways'). "
                              "Fix: list them in vllm_server_allowed_sources, or set vllm_server_firewall false to "
                              "leave the ports open to every address")
    if params["timeout"] < 1:
        raise OptionError("timeout: %s; expected at least 1 second. Fix: give the seconds each iptables call may "
                          "take (30 by default)" % params["timeout"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="int", default=[]),
            sources=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            chain=dict(type="str", default="ASCEND-FLEET"),
            rules_file=dict(type="path", default="/etc/ascend-fleet-firewall.rules"),
            unit_file=dict(type="path", default="/etc/systemd/system/ascend-fleet-firewall.service"),
            iptables=dict(type="str", default="iptables"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    rules, networks = [], []
    try:
        check_options(params)
        firewall = Firewall(params, module.check_mode)
        if params["state"] == "present":
            networks = resolve(params["sources"])
            rules = wanted_rules(params["chain"], sorted(set(params["ports"])), networks)
            firewall.present(rules)
        else:
            firewall.absent()
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("guarding the instances' ports", error))
    module.exit_json(changed=firewall.changed, rules=rules, sources=networks,
                     persisted=firewall.systemd and params["state"] == "present")


if __name__ == "__main__":
    main()
