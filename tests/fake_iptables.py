#!/usr/bin/env python3
"""iptables and iptables-restore (called by that name) for the tests of library/instance_firewall.py: the filter
table's chains kept in the JSON file $FAKE_IPTABLES_STATE ({chain: [rule, ...]}, rules as iptables -S prints them
without "-A <chain> "), with iptables' exit codes: 1 for a rule or chain that is not there. The built-in chains
always exist, as in the kernel's filter table; the file lists one only while it holds rules."""
import json
import os
import sys

STATE = os.environ["FAKE_IPTABLES_STATE"]
BUILT_IN = ("INPUT", "FORWARD", "OUTPUT")


def load():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}


def save(chains):
    with open(STATE, "w") as handle:
        json.dump({chain: rules for chain, rules in chains.items() if rules or chain not in BUILT_IN}, handle)


def restore(chains, args):
    assert "--noflush" in args, "the module never flushes the whole table"
    for line in sys.stdin.read().splitlines():
        if line.startswith(":"):
            chains[line[1:].split()[0]] = []   # a declared chain is made, or emptied
        elif line.startswith("-A "):
            chain, rule = line[3:].split(" ", 1)
            chains[chain].append(rule)
    return 0


def iptables(chains, args):
    command, chain, rest = args[0], args[1], args[2:]
    if chain in BUILT_IN:
        chains.setdefault(chain, [])
    if command == "-N":
        if chain in chains:
            return 1
        chains[chain] = []
    elif command == "-X" and chain in BUILT_IN:
        print("iptables: Can't delete built-in chain.", file=sys.stderr)
        return 1
    elif chain not in chains:
        print("iptables: No chain/target/match by that name.", file=sys.stderr)
        return 1
    elif command == "-S":
        print(("-P %s ACCEPT" if chain in BUILT_IN else "-N %s") % chain)
        for rule in chains[chain]:
            print("-A %s %s" % (chain, rule))
    elif command == "-C":
        return 0 if " ".join(rest) in chains[chain] else 1
    elif command == "-I":
        chains[chain].insert(int(rest[0]) - 1, " ".join(rest[1:]))
    elif command == "-D":
        if " ".join(rest) not in chains[chain]:
            return 1
        chains[chain].remove(" ".join(rest))
    elif command == "-F":
        chains[chain] = []
    elif command == "-X":
        del chains[chain]
    return 0


def main():
    args = sys.argv[1:]
    if args[:1] == ["-w"]:
        args = args[2:]
    chains = load()
    code = (restore if os.path.basename(sys.argv[0]).endswith("-restore") else iptables)(chains, args)
    save(chains)
    return code


if __name__ == "__main__":
    sys.exit(main())
