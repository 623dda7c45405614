#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module instance_firewall: only the listed sources reach the vLLM instances' published ports, or the
host's own ports (its exporters)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: instance_firewall
short_description: Let only the listed sources reach the vLLM instances' published ports or the host's exporters
description:
  - vLLM 0.18's C(--api-key) guards only paths under C(/v1); an instance also answers C(POST /invocations) (a
    chat completion) and C(/tokenize) without the key. So an instance's port should be reachable only from the
    machines that must reach it, the gateways, and the host itself.
  - The exporters on a host (the node exporter on 9100, the NPU collector on 8082, HAProxy's metrics port on a
    gateway) take no key either; their C(/metrics) should be reachable only from the monitoring hosts and the
    host itself. With C(hook=INPUT) this module guards such ports of the host's own processes.
  - With C(hook=DOCKER-USER) (the default) it guards the ports Docker publishes. Docker publishes a container's
    port with NAT rules that forward the traffic before the host's INPUT chain sees it, so a rule there, or in a
    host firewall that only knows INPUT, does not hold. Docker's own C(DOCKER-USER) chain is the place for it;
    this module keeps a chain of its own (C(chain)), jumped to first from C(DOCKER-USER), that lets the
    C(sources) through to the C(ports) and answers any other source with a TCP reset. Ports are matched as
    published (the connections Docker's publishing forwarded, by their original destination port), whatever
    address the container has; a container's own connections out are left alone.
  - With C(hook=DOCKER-USER), the host's own processes always reach its instances (their connections are not
    forwarded), as do the readiness checks and the benchmark, which run on it; another container on the host
    that connects to a published port is a source like any other.
  - With C(hook=INPUT), the module's chain is jumped to first from the filter table's C(INPUT) chain and matches
    the C(ports) by TCP destination port. Traffic on the loopback interface always passes (the host's own
    processes, a Prometheus on the host among them, whichever of the host's addresses they connect to); the
    C(sources) pass; any other source is answered with a TCP reset. A container on the host that connects to
    the host's address is a source like any other.
  - Passing means going back (C(RETURN)) to the chain that jumped to this one, so Docker's rules, or the host
    firewall's rules in C(INPUT), still decide; this module only narrows what reaches the ports.
  - The rules are kept in C(rules_file) (C(iptables-restore) format). Where systemd runs, the unit in
    C(unit_file) puts them back at every boot. With C(hook=DOCKER-USER) it is wanted by and ordered before
    C(docker.service), so they hold before the engine starts a container. With C(hook=INPUT) it is wanted by
    C(multi-user.target) and ordered before C(network-pre.target), so they hold before the network is up.
  - Each hook's use keeps a chain, rules file and unit of its own (the defaults of C(chain), C(rules_file) and
    C(unit_file) differ per hook), so the two uses never touch each other's rules. Give other values only
    per hook, never the same ones for both; a chain the other hook jumps to is refused.
  - The chain is replaced whole, and only when its rules differ from the wanted ones; a second run changes
    nothing.
  - With C(state=absent), the hook's jump, the chain, the rules file and the unit are removed.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  hook:
    description:
      - The chain of the filter table that jumps to the module's chain.
      - C(DOCKER-USER) guards the ports Docker publishes for the vLLM instances (matched by the original
        destination port of the connections Docker forwarded).
      - C(INPUT) guards ports the host's own processes listen on, such as its exporters (matched by TCP
        destination port; the loopback interface always passes).
    type: str
    choices: [DOCKER-USER, INPUT]
    default: DOCKER-USER
  ports:
    description:
      - The ports to guard. Required with C(state=present).
      - With C(hook=DOCKER-USER), the ports published on the host (each instance's port).
      - With C(hook=INPUT), the ports the host's own processes listen on (9100 for the node exporter, 8082 for
        the NPU collector, HAProxy's metrics port on a gateway).
    type: list
    elements: int
    default: []
  sources:
    description:
      - The machines that may reach the ports, besides the host itself - IPv4 addresses, networks (C(10.0.0.0/24))
        or names the host resolves (to every IPv4 address they have). Required with C(state=present).
      - The gateways for C(hook=DOCKER-USER); the monitoring hosts for C(hook=INPUT).
    type: list
    elements: str
    default: []
  state:
    description: C(present) keeps the rules; C(absent) removes everything this module made for the hook.
    type: str
    choices: [present, absent]
    default: present
  chain:
    description:
      - The module's own chain in the filter table.
      - Without it, C(ASCEND-FLEET) with C(hook=DOCKER-USER) and C(ASCEND-FLEET-HOST) with C(hook=INPUT).
    type: str
  rules_file:
    description:
      - Where the rules are kept for the next boots.
      - Without it, C(/etc/ascend-fleet-firewall.rules) with C(hook=DOCKER-USER) and
        C(/etc/ascend-fleet-host-firewall.rules) with C(hook=INPUT).
    type: path
  unit_file:
    description:
      - The systemd unit that puts the rules back at boot (written only where systemd runs).
      - Without it, C(/etc/systemd/system/ascend-fleet-firewall.service) with C(hook=DOCKER-USER) and
        C(/etc/systemd/system/ascend-fleet-host-firewall.service) with C(hook=INPUT).
    type: path
  iptables:
    description: The C(iptables) command (C(iptables-restore) is taken from the same folder).
    type: str
    default: iptables
  timeout:
    description:
      - Seconds the whole call may take (at least 1) - every C(iptables) call, waiting for the xtables lock
        included, and systemd's reload of its units. Each gets only what is left of it; a failure when it runs out
        names the call it was waiting on.
    type: int
    default: 30
notes:
  - IPv4 only. The instances are published on an IPv4 address (C(vllm_server_bind_address)). With
    C(hook=INPUT), a process that also listens on IPv6 (an exporter listening on C(:9100) does) is not guarded
    there; bind it to an IPv4 address, or guard IPv6 another way.
  - With C(hook=DOCKER-USER), the Docker engine must manage iptables (its default). With C(iptables) false in
    C(daemon.json) it makes no C(DOCKER-USER) chain and publishes ports through its userland proxy; the module
    fails, saying so.
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

- name: Only the monitoring hosts reach the exporters' /metrics (node exporter, NPU collector)
  ascend.fleet.instance_firewall:
    hook: INPUT
    ports: [9100, 8082]
    sources: [10.0.9.5]
    # The INPUT hook's own chain, rules file and unit (its defaults, written out), never the DOCKER-USER ones
    chain: ASCEND-FLEET-HOST
    rules_file: /etc/ascend-fleet-host-firewall.rules
    unit_file: /etc/systemd/system/ascend-fleet-host-firewall.service

- name: Remove the rules guarding the instances
  ascend.fleet.instance_firewall:
    state: absent

- name: Remove the rules guarding the exporters (the INPUT hook's chain, rules file and unit only)
  ascend.fleet.instance_firewall:
    hook: INPUT
    state: absent
"""

RETURN = r"""
rules:
  description:
    - The chain's rules as C(iptables -S) prints them, wanted (with C(state=present)).
    - With C(hook=INPUT), per port C(-A ASCEND-FLEET-HOST -i lo -p tcp -m tcp --dport 9100 -j RETURN), a
      C(-s <network> ... -j RETURN) rule per source, then C(... -j REJECT --reject-with tcp-reset).
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.firewall_rules import (
    DOCKER_CHAIN,
    HOOKS,
    INPUT_CHAIN,
    apply,
)
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError, unexpected_failure


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hook=dict(type="str", choices=[DOCKER_CHAIN, INPUT_CHAIN], default=DOCKER_CHAIN),
            ports=dict(type="list", elements="int", default=[]),
            sources=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            # Defaults per hook (HOOKS), filled in below.
            chain=dict(type="str"),
            rules_file=dict(type="path"),
            unit_file=dict(type="path"),
            iptables=dict(type="str", default="iptables"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = apply(params, module.check_mode)
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure(HOOKS[params["hook"]]["doing"], error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
