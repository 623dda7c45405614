# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the instance_firewall module does (library/instance_firewall.py holds its documentation and main()): a
chain of the collection's own hooked into DOCKER-USER or INPUT that lets only the allowed sources reach the
guarded ports, its rules kept in a file a systemd unit restores at boot; every iptables call bounded in time."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.firewall_sources import resolve
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError
from ansible_collections.ascend.fleet.plugins.module_utils.vllm_instance import read_text, remove, write_atomically

DOCKER_CHAIN = "DOCKER-USER"
INPUT_CHAIN = "INPUT"
SYSTEMD_RUNNING = "/run/systemd/system"  # what sd_booted() checks
# A chain name iptables takes: at most 28 characters, and no option-like or empty name.
CHAIN_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
# Chains the module must never own, as it flushes and deletes its chain: the hooks and the other built-in ones.
NOT_OWNED = (DOCKER_CHAIN, INPUT_CHAIN, "FORWARD", "OUTPUT")

# Per hook: the defaults of chain, rules_file and unit_file (apart, so that the two uses never touch each other's
# rules), the unit that wants the boot unit, and the words the messages use for what is guarded and who reaches it.
HOOKS = {
    DOCKER_CHAIN: dict(
        chain="ASCEND-FLEET", rules_file="/etc/ascend-fleet-firewall.rules",
        unit_file="/etc/systemd/system/ascend-fleet-firewall.service", wanted_by="docker.service",
        doing="guarding the instances' ports", guarded="the instances", ipv4="the instances are published on IPv4",
        ports="the ports the instances are published on", ports_fix="give the serving plan's ports",
        peer="the gateway", peers="the gateways", listed=" in vllm_server_allowed_sources",
        listed_as=" (vllm_server_allowed_sources)", open="set vllm_server_firewall false"),
    INPUT_CHAIN: dict(
        chain="ASCEND-FLEET-HOST", rules_file="/etc/ascend-fleet-host-firewall.rules",
        unit_file="/etc/systemd/system/ascend-fleet-host-firewall.service", wanted_by="multi-user.target",
        doing="guarding the host's own ports", guarded="the host's exporters",
        ipv4="these rules guard IPv4 only", ports="the ports the host's own processes listen on (its exporters')",
        ports_fix="give them (9100 for the node exporter, 8082 for the NPU collector)", peer="the monitoring host",
        peers="the monitoring hosts", listed=" in host_exporters_allowed_sources",
        listed_as=" (host_exporters_allowed_sources)", open="set host_exporters_firewall false (state absent)"),
}


def timed_out(deadline, waiting_on, why):
    """The failure of a call whose timeout ran out, naming the call it was waiting on."""
    return OptionError("the time ran out (timeout: %s s, the whole call) while waiting for %s (%s). Fix: find what "
                       "holds it up, then run again, or give a longer timeout" % (deadline.seconds, waiting_on, why))


class Iptables:
    """The iptables commands this module runs, all within the deadline (module_utils/deadline.py), the module's."""

    def __init__(self, command, deadline):
        self.command = shutil.which(command, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if not self.command:
            raise OptionError("iptables %r: no such command. Expected the iptables command (on a Docker host, the one "
                              "its engine uses for its own rules). Fix: install iptables, or set the iptables option "
                              "to its path" % command)
        self.restore = os.path.join(os.path.dirname(self.command), os.path.basename(self.command) + "-restore")
        self.deadline = deadline

    def run(self, *args, stdin=None, command=None):
        called = "`%s`" % " ".join([command or self.command] + list(args))
        lock = "the xtables lock held (fuser /run/xtables.lock), or the kernel busy"
        try:
            timeout = self.deadline.allow(called)
        except DeadlinePassed:
            raise timed_out(self.deadline, called, lock) from None
        # The wait for the lock ends a little sooner, so that iptables says itself who holds it.
        argv = [command or self.command, "-w", str(max(1, int(timeout) - 1))] + list(args)
        try:
            done = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=None if stdin is not None else subprocess.DEVNULL, encoding="utf-8",
                                  errors="replace", check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise timed_out(self.deadline, called, lock) from None
        return done.returncode, done.stdout, done.stderr.strip()

    def must(self, *args, stdin=None, command=None):
        code, out, err = self.run(*args, stdin=stdin, command=command)
        if code != 0:
            called = "%s %s" % (os.path.basename(command or self.command), " ".join(args))
            raise OptionError("%s failed: %s. Fix: run it on the host to see why (a kernel without the conntrack or "
                              "tcp match, another firewall holding the table), then run again"
                              % (called, err[:500] or "exit code %s" % code))
        return out

    def chain_rules(self, chain):
        """The chain's -A lines, or None when it does not exist."""
        code, out, _err = self.run("-S", chain)
        if code != 0:
            return None
        return [line for line in out.splitlines() if line.startswith("-A ")]

    def jumps_first(self, hook, chain):
        """Whether the hook's first rule jumps to chain; None when the hook (DOCKER-USER) does not exist. INPUT
        always exists: an iptables that cannot list it fails here, saying why."""
        if hook == INPUT_CHAIN:
            rules = [line for line in self.must("-S", hook).splitlines() if line.startswith("-A ")]
        else:
            rules = self.chain_rules(hook)
        if rules is None:
            return None
        return bool(rules) and rules[0] == "-A %s -j %s" % (hook, chain)


def wanted_rules(hook, chain, ports, networks):
    """The chain's rules in the form iptables -S prints them: for each port, each source let through (RETURN goes
    on to the rules after the hook's jump), then any other source reset.

    Hook DOCKER-USER: --ctstate DNAT, only connections Docker's publishing forwarded to a container (a container's
    own connection out to another host's port 8000 is not one); --ctdir ORIGINAL, the answers going back are left
    alone. Hook INPUT: the port the host's own process listens on; the loopback interface first, as the host's
    connections to any of its own addresses come in on it (a Prometheus on the host scraping its exporters)."""
    rules = []
    for port in ports:
        if hook == DOCKER_CHAIN:
            match = "-p tcp -m conntrack --ctstate DNAT --ctorigdstport %d --ctdir ORIGINAL" % port
        else:
            match = "-p tcp -m tcp --dport %d" % port
            rules.append("-A %s -i lo %s -j RETURN" % (chain, match))
        rules += ["-A %s -s %s %s -j RETURN" % (chain, network, match) for network in networks]
        rules.append("-A %s %s -j REJECT --reject-with tcp-reset" % (chain, match))
    return rules


def rules_file_text(hook, chain, rules):
    guarded = "the vLLM instances' ports" if hook == DOCKER_CHAIN else "the host's own ports (hook INPUT)"
    return "".join([
        "# ascend.fleet.instance_firewall: only these sources reach %s. Applied with\n" % guarded,
        "# iptables-restore --noflush, which replaces this chain only.\n",
        "*filter\n", ":%s - [0:0]\n" % chain] + [rule + "\n" for rule in rules] + ["COMMIT\n"])


def boot_script(iptables, hook, chain, rules_file):
    """The unit's command: the chain's rules restored, then the one jump to it put first unless it is there."""
    # DOCKER-USER is made if the engine has not made it yet; the engine keeps a chain of that name it finds.
    make_hook = "{ipt} {w} -N {hook} 2>/dev/null; " if hook == DOCKER_CHAIN else ""
    return (make_hook + "{restore} {w} --noflush {rules} && "
            "{{ {ipt} {w} -C {hook} -j {chain} 2>/dev/null || {ipt} {w} -I {hook} 1 -j {chain}; }}").format(
                ipt=iptables.command, restore=iptables.restore, w="-w 30", hook=hook, rules=rules_file, chain=chain)


def unit_text(iptables, hook, chain, rules_file):
    script = boot_script(iptables, hook, chain, rules_file)
    if hook == INPUT_CHAIN:
        return input_unit_text(chain, script)
    # Ordered before the engine, which starts the containers: no instance is published before its rules hold.
    return "".join([
        "# ascend.fleet.instance_firewall: only the listed sources reach the vLLM instances' ports.\n",
        "[Unit]\n",
        "Description=Only the fleet's gateways reach the vLLM instances (%s)\n" % chain,
        "Before=%s\n" % HOOKS[DOCKER_CHAIN]["wanted_by"],
        # firewalld (iptables backend) flushes the tables when it starts: the rules go in after it.
        "After=firewalld.service\n",
        "\n[Service]\n", "Type=oneshot\n", "RemainAfterExit=yes\n",
        "ExecStart=/bin/sh -c '%s'\n" % script,
        "\n[Install]\n", "WantedBy=%s\n" % HOOKS[DOCKER_CHAIN]["wanted_by"]])


def input_unit_text(chain, script):
    return "".join([
        "# ascend.fleet.instance_firewall: only the listed sources reach the host's own ports (its exporters).\n",
        "[Unit]\n",
        "Description=Only the listed sources reach the host's own ports (%s)\n" % chain,
        # Before the network is configured, so no port is reachable unguarded. Without the default dependencies
        # (which would order it after sysinit.target): a host whose sysinit.target waits for the network (cloud-init
        # does) would otherwise have an ordering cycle through network-pre.target.
        "DefaultDependencies=no\n",
        "Wants=network-pre.target\n",
        "Before=network-pre.target shutdown.target\n",
        # firewalld (iptables backend) flushes the tables when it starts: the rules go in after it. The rules file
        # and iptables must be mounted, and the netfilter modules the system loads at boot loaded.
        "After=local-fs.target systemd-modules-load.service firewalld.service\n",
        "Conflicts=shutdown.target\n",
        "\n[Service]\n", "Type=oneshot\n", "RemainAfterExit=yes\n",
        "ExecStart=/bin/sh -c '%s'\n" % script,
        "\n[Install]\n", "WantedBy=%s\n" % HOOKS[INPUT_CHAIN]["wanted_by"]])


class Firewall:
    def __init__(self, params, check_mode):
        self.params, self.check_mode = params, check_mode
        self.hook, self.chain = params["hook"], params["chain"]
        self.deadline = Deadline(params["timeout"])
        try:
            self.iptables = Iptables(params["iptables"], self.deadline)
        except OptionError:
            if params["state"] == "present":
                raise
            self.iptables = None  # a host without iptables holds no rules to remove
        self.systemd = os.path.isdir(SYSTEMD_RUNNING)
        self.link = os.path.join(os.path.dirname(params["unit_file"]), HOOKS[self.hook]["wanted_by"] + ".wants",
                                 os.path.basename(params["unit_file"]))
        self.changed = False

    def change(self, action, *args, **kwargs):
        self.changed = True
        if not self.check_mode:
            action(*args, **kwargs)

    def refuse_the_other_hooks_chain(self):
        """Each hook's use keeps a chain of its own: one jumped to from the other hook holds that use's rules, which
        this run would replace or remove."""
        other = INPUT_CHAIN if self.hook == DOCKER_CHAIN else DOCKER_CHAIN
        if self.iptables and self.iptables.run("-C", other, "-j", self.chain)[0] == 0:
            raise OptionError("chain: %s is the chain %s jumps to, the rules of this module's other use (hook %s); "
                              "expected a chain of hook %s's own. Fix: leave chain, rules_file and unit_file out "
                              "(each hook has defaults of its own), or give ones the other use does not have"
                              % (self.chain, other, other, self.hook))

    def present(self, rules):
        self.refuse_the_other_hooks_chain()
        first = self.iptables.jumps_first(self.hook, self.chain)
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
        text = rules_file_text(self.hook, self.chain, rules)
        if self.iptables.chain_rules(self.chain) != rules:
            self.change(self.iptables.must, "--noflush", stdin=text, command=self.iptables.restore)
        if not first:
            # A jump elsewhere in the chain (someone moved it) is taken out, so there is exactly one, first.
            while self.iptables.run("-C", self.hook, "-j", self.chain)[0] == 0 and not self.check_mode:
                self.iptables.must("-D", self.hook, "-j", self.chain)
            self.change(self.iptables.must, "-I", self.hook, "1", "-j", self.chain)
        if read_text(self.params["rules_file"], None) != text:
            self.change(self.write, self.params["rules_file"], text)
        if self.systemd:
            unit = unit_text(self.iptables, self.hook, self.chain, self.params["rules_file"])
            if read_text(self.params["unit_file"], None) != unit or os.path.realpath(self.link) != os.path.realpath(
                    self.params["unit_file"]) or not os.path.islink(self.link):
                self.change(self.install_unit, unit)

    def absent(self):
        self.refuse_the_other_hooks_chain()
        while self.iptables and self.iptables.run("-C", self.hook, "-j", self.chain)[0] == 0:
            self.change(self.iptables.must, "-D", self.hook, "-j", self.chain)
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

    def daemon_reload(self):
        called = "`systemctl daemon-reload`"
        try:
            subprocess.run(["systemctl", "daemon-reload"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, check=True, timeout=self.deadline.allow(called, 60))
        except (OSError, subprocess.SubprocessError, DeadlinePassed) as error:
            if self.deadline.passed():
                raise timed_out(self.deadline, called, "systemd busy: systemctl status tells") from None
            raise OptionError("systemctl daemon-reload failed (%s): systemd has not read the change to its units "
                              "(ascend-fleet's firewall unit). Fix: run systemctl daemon-reload on the host"
                              % error) from None


def check_options(params):
    chain, words = params["chain"], HOOKS[params["hook"]]
    if not chain or len(chain) > 28 or chain.startswith("-") or not set(chain) <= CHAIN_CHARACTERS or \
            chain in NOT_OWNED:
        raise OptionError("chain: %r is no chain name this module can own; expected letters, digits, - and _, at "
                          "most 28 characters, not %s or a built-in chain (%s). Fix: leave it out (%s with hook %s, "
                          "%s with hook %s)" % (chain, DOCKER_CHAIN, ", ".join(NOT_OWNED[1:]),
                                                HOOKS[DOCKER_CHAIN]["chain"], DOCKER_CHAIN,
                                                HOOKS[INPUT_CHAIN]["chain"], INPUT_CHAIN))
    if params["state"] == "present":
        if not params["ports"]:
            raise OptionError("ports: empty; expected %(ports)s. Fix: %(ports_fix)s, or state absent to remove the "
                              "rules" % words)
        bad = [port for port in params["ports"] if not 1 <= port <= 65535]
        if bad:
            raise OptionError("ports: %s out of 1-65535. Fix: give %s" % (", ".join(map(str, bad)), words["ports"]))
        if not params["sources"]:
            raise OptionError("sources: empty; expected the addresses that may reach %(guarded)s (%(peers)s'). Fix: "
                              "list them%(listed)s, or %(open)s to leave the ports open to every address" % words)
    if params["timeout"] < 1:
        raise OptionError("timeout: %s; expected at least 1 second. Fix: give the seconds the whole call may take, "
                          "iptables calls and all (30 by default)" % params["timeout"])


def apply(params, check_mode):
    """The module's result once its chain holds the rules of params (state present) or is gone (absent); params'
    chain, rules_file and unit_file default to the hook's."""
    words = HOOKS[params["hook"]]
    for option in ("chain", "rules_file", "unit_file"):
        if params[option] is None:
            params[option] = words[option]
    check_options(params)
    firewall = Firewall(params, check_mode)
    rules, networks = [], []
    if params["state"] == "present":
        networks = resolve(params["sources"], words)
        rules = wanted_rules(params["hook"], params["chain"], sorted(set(params["ports"])), networks)
        firewall.present(rules)
    else:
        firewall.absent()
    return dict(changed=firewall.changed, rules=rules, sources=networks,
                persisted=firewall.systemd and params["state"] == "present")
