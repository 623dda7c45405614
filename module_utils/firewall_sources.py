# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sources a firewall rule lets through, as the modules that write such rules (instance_firewall,
firewalld_ports) take them: IPv4 addresses, networks or names, each as the IPv4 networks its packets come from.

One copy, so that a name, an address or a network means the same machines to every firewall the fleet keeps.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import socket

from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import OptionError


def resolve(sources, words):
    """Every source as IPv4 networks (a.b.c.d/n, in the order given, without repeats), names resolved by this host
    to every IPv4 address they have (as its packets will come).

    words fills in the messages, in the caller's terms: guarded (what the rules guard), open (how to leave the
    ports open to every address instead), ipv4 (why IPv4 only), peer (one machine that may reach them) and
    listed_as (where the caller's users list them, with a leading space, or empty)."""
    networks = []
    for source in sources:
        text = str(source).strip()
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            network = None
        if network is not None:
            if network.prefixlen == 0:
                raise OptionError("sources: %(source)r is every address; expected the machines that may reach "
                                  "%(guarded)s. Fix: %(open)s to leave the ports open to every address"
                                  % dict(words, source=text))
            if network.version != 4:
                raise OptionError("sources: %(source)r is IPv6; expected IPv4 addresses or networks, as %(ipv4)s. "
                                  "Fix: list %(peer)s's IPv4 address" % dict(words, source=text))
            found = [network]
        else:
            try:
                found = sorted({ipaddress.ip_network(info[4][0]) for info in
                                socket.getaddrinfo(text, None, socket.AF_INET, socket.SOCK_STREAM)})
            except (socket.gaierror, UnicodeError, ValueError) as error:
                raise OptionError("sources: %(source)r is no IPv4 address or network, and this host cannot resolve it "
                                  "(%(error)s). Fix: list %(peer)s's address%(listed_as)s, or add its name to the "
                                  "host's DNS or /etc/hosts" % dict(words, source=text[:200], error=error)) from None
        networks += [str(item) for item in found if str(item) not in networks]
    return networks
