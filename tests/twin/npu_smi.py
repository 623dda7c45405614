#!/usr/bin/python3 -IS
"""npu-smi emulator for the twin: prints what a real Ascend 310P host prints.

The twin installs this file as ``<host root>/usr/local/bin/npu-smi``. Its host profile is the JSON file
``../dcmi/npu-smi-twin.json`` next to it (``/usr/local/dcmi`` is where the real npu-smi finds its dcmi
library, and the seed's ``docker run`` mounts that folder, so the same profile is found inside a container),
or the file named by ``NPU_SMI_TWIN_PROFILE``.

Formats follow the real samples in ``tests/fixtures/npu-smi``: the 106-character ``info`` table with two
rows per chip, ``<TAB><label padded to 30> : <value>`` for the key/value commands, the ``-m`` mapping in
31-character columns, and dcmi failures printed on stdout with a non-zero exit. ``-t phyid-remap -p <phy id>``
and ``-t topo`` follow npu-smi's own source (``<TAB><label padded to 30>:<value>``; the topo matrix in 11-character
columns, as the 910B3 topo sample shows).

Profile keys (all optional but ``cards``): ``driver``, ``firmware``, ``separators`` (``card_end``: dashes
between the chips of a card and ``=`` after the card, as 25.0.rc1.1 prints; ``all_dash``; ``all_equals``),
``process_table`` (print the process section, default true), ``failure`` (``"-8005"`` or ``"-8020"``:
every query fails as dcmi does), ``processes`` (list of ``npu_id``, ``chip_id``, ``pid``, ``name``,
``memory_mb``), ``cards`` (list of ``npu_id``, ``product_type``, ``product_name``, ``serial``, ``bus_id``,
``firmware``, ``numa_node``, ``memory_gb`` (the card's memory, which sets its chips' totals: 96 or 48 for a Duo,
default 96; 24 for a Pro), ``chips``: list of ``logic_id``, ``phy_id``, ``name``, ``health``, ``temp``,
``memory_mb``, ``memory_used_mb``, ``hugepages``, ``aicore``, ``fault``), ``numa_nodes`` (list of ``cpus``, in
``lscpu`` list form), ``phyid_remap`` and ``topo`` (false: this npu-smi lacks that query, as older drivers do).

A chip's ``phy_id`` (the N of its ``/dev/davinciN``) defaults to its logic id. Without ``numa_nodes`` the host is a
two-socket Kunpeng 920 with 4 NUMA nodes of 24 CPUs; a card's ``numa_node`` defaults to the node its bus number
falls in when the 256 buses are split evenly over the nodes, as a 910B3 host's topo sample shows (buses 0x01,
0x41, 0x81, 0xC1 on nodes 0, 2, 4, 6 of 8). So cards on buses 0x01 and 0x02 share node 0. A chip's CPU affinity
is its card's node's CPUs.
Standard library only, Python 3.8 syntax: it also runs inside the stand-in image and on old hosts. It starts with
-IS (no site, no user paths): a fact gathering calls it about twenty times, and it needs nothing site would add.
"""
import json
import os
import sys

PROFILE_ENV = "NPU_SMI_TWIN_PROFILE"
PROFILE_NAME = "npu-smi-twin.json"

# What each product looks like on the board/list queries (IDs from the real 310P samples).
PRODUCTS = {
    "Atlas 300I Duo": {"product_name": "IT21PD2G10", "chips": 2, "subsystem": ("0x0200", "0x0110"), "memory_gb": 96},
    "Atlas 300I Pro": {"product_name": "IT21PDDA01", "chips": 1, "subsystem": ("0x0200", "0x0100"), "memory_gb": 24},
}
DUO_CHIP_MEMORY_MB = (44278, 43693)  # chip 1 reserves a little more for the card's OS
PRO_CHIP_MEMORY_MB = (21525,)
# The 48 GB Duo (two 24 GB chips): no npu-smi sample of it is held. Each chip is taken to report what the 24 GB
# Pro chip reports (21525 MB, info_310P3-pro_25.5.1_2cards_vnpu-lab.txt), chip 1 less the 585 MB more it reserves
# on the 96 GB card (44278 - 43693).
DUO_48G_CHIP_MEMORY_MB = (21525, 21525 - (44278 - 43693))
# Each chip's total MB by product and the card's memory_gb.
CHIP_MEMORY_MB = {
    ("Atlas 300I Duo", 96): DUO_CHIP_MEMORY_MB,
    ("Atlas 300I Duo", 48): DUO_48G_CHIP_MEMORY_MB,
    ("Atlas 300I Pro", 24): PRO_CHIP_MEMORY_MB,
}

DCMI_FAILURES = {
    # Texts as real hosts print them (fixtures error_dcmi_-8005_*, error_dcmi_-8020_*).
    "-8005": "dcmi module initialize failed. ret is -8005",
    "-8020": "dcmi model initialized failed, because the device is used. ret is -8020",
}
LOG_LEVEL_LINE = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)"
# What npu-smi prints on a device without topo (Huawei's npu-smi reference, Atlas 200I A2).
TOPO_NOT_SUPPORTED = "This device does not support querying topo."
KUNPENG_920_NUMA_NODES = [{"cpus": "0-23"}, {"cpus": "24-47"}, {"cpus": "48-71"}, {"cpus": "72-95"}]
# The legend npu-smi's source prints for 310P: PIX and PXB are 910B (and later) only.
TOPO_LEGEND = (
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.",
    "  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.",
    "  HCCS = Connection traversing HCCS.",
    "  NA   = Unknown relationship.",
)

WIDTH = 106
DASH = "+" + "-" * 31 + "+" + "-" * 17 + "+" + "-" * 54 + "+"
EQUALS = DASH.replace("-", "=")
HEADER_ROWS = (
    "| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |",
    "| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |",
)
PROCESS_HEADER = (
    "| NPU     Chip                  | Process id      | Process name             | Process memory(MB)        |"
)


class UsageError(Exception):
    pass


def expand_profile(profile):
    """Fill every default, so the printers below read plain values."""
    full = dict(profile)
    full.setdefault("driver", "25.5.2")
    full.setdefault("firmware", "7.8.0.7.220")
    full.setdefault("separators", "card_end")
    full.setdefault("process_table", True)
    full.setdefault("failure", None)
    full.setdefault("processes", [])
    full.setdefault("numa_nodes", KUNPENG_920_NUMA_NODES)
    full.setdefault("phyid_remap", True)
    full.setdefault("topo", True)
    cards = []
    logic_id = 0
    for index, card in enumerate(profile["cards"]):
        card = dict(card)
        card.setdefault("product_type", "Atlas 300I Duo")
        product = PRODUCTS[card["product_type"]]
        card.setdefault("product_name", product["product_name"])
        card.setdefault("serial", "2106030737ZERC%06d" % (card["npu_id"] * 7 + 3000))
        card.setdefault("bus_id", "0000:%02X:00.0" % (index + 1))
        card.setdefault("firmware", full["firmware"])
        card.setdefault("board_id", "0xb1")
        card.setdefault("pcb_id", "E")
        card.setdefault("bom_id", "3")
        card.setdefault("subsystem", list(product["subsystem"]))
        card.setdefault("numa_node", int(card["bus_id"].split(":")[1], 16) * len(full["numa_nodes"]) // 256)
        card.setdefault("memory_gb", product["memory_gb"])
        memory = CHIP_MEMORY_MB[(card["product_type"], card["memory_gb"])]
        chips = card.get("chips") or [{} for _ in range(product["chips"])]
        expanded = []
        for chip_id, chip in enumerate(chips):
            chip = dict(chip)
            chip.setdefault("logic_id", logic_id)
            chip.setdefault("phy_id", chip["logic_id"])
            chip.setdefault("name", "310P3")
            chip.setdefault("health", "OK")
            chip.setdefault("temp", 45 + chip_id)
            chip.setdefault("memory_mb", memory[chip_id % len(memory)])
            chip.setdefault("memory_used_mb", 1400 + 60 * chip_id)
            chip.setdefault("hugepages", [0, 0])
            chip.setdefault("aicore", 0)
            chip.setdefault("fault", chip["health"] != "OK")
            chip["chip_id"] = chip_id
            logic_id = chip["logic_id"] + 1
            expanded.append(chip)
        card["chips"] = expanded
        cards.append(card)
    full["cards"] = cards
    return full


def _row(left, middle, right):
    return "| " + left.ljust(30) + "| " + middle.ljust(16) + "| " + right.ljust(53) + "|"


def _separator(style, card_done):
    if style == "all_dash":
        return DASH
    if style == "all_equals":
        return EQUALS
    return EQUALS if card_done else DASH


def render_table(profile):
    version = profile.get("npu_smi_version", profile["driver"])
    lines = [
        "+" + "-" * (WIDTH - 2) + "+",
        "| npu-smi " + version.ljust(41) + "Version: " + version.ljust(45) + "|",
        DASH,
    ]
    lines.extend(HEADER_ROWS)
    lines.append(EQUALS)
    for card in profile["cards"]:
        for chip in card["chips"]:
            used, total = chip["hugepages"]
            lines.append(_row(
                "%-8s%s" % (card["npu_id"], chip["name"]),
                chip["health"],
                "%-13s%-18s%-6s/ %s" % ("NA", chip["temp"], used, total),
            ))
            lines.append(_row(
                "%-8s%s" % (chip["chip_id"], chip["logic_id"]),
                card["bus_id"],
                "%-13s%s / %s" % (chip["aicore"], chip["memory_used_mb"], chip["memory_mb"]),
            ))
            lines.append(_separator(profile["separators"], chip is card["chips"][-1]))
    if profile["process_table"]:
        lines.extend(render_process_table(profile))
    return "\n".join(lines) + "\n"


def render_process_table(profile):
    lines = [DASH, PROCESS_HEADER, EQUALS]
    for card in profile["cards"]:
        rows = [p for p in profile["processes"] if p["npu_id"] == card["npu_id"]]
        if not rows:
            lines.append(("| No running processes found in NPU %s" % card["npu_id"]).ljust(WIDTH - 1) + "|")
        for proc in rows:
            lines.append(
                "| " + ("%-8s%s" % (proc["npu_id"], proc["chip_id"])).ljust(30)
                + "| " + str(proc["pid"]).ljust(16)
                + "| " + proc["name"].ljust(25)
                + "| " + str(proc["memory_mb"]).ljust(26) + "|"
            )
        lines.append(EQUALS)
    return lines


def _kv(label, value):
    return "\t%-30s : %s" % (label, value)


def render_list(profile):
    lines = [_kv("Total Count", len(profile["cards"]))]
    for card in profile["cards"]:
        lines.extend([
            "",
            _kv("NPU ID", card["npu_id"]),
            _kv("Product Name", card["product_name"]),
            _kv("Serial Number", card["serial"]),
            _kv("Chip Count", len(card["chips"])),
        ])
    return "\n".join(lines) + "\n"


def render_mapping(profile):
    lines = ["\t%-31s%-31s%-31s%-30s" % ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")]
    for card in profile["cards"]:
        for chip in card["chips"]:
            lines.append("\t%-31s%-31s%-31s%s" % (card["npu_id"], chip["chip_id"], chip["logic_id"],
                                                   "Ascend " + chip["name"]))
        lines.append("\t%-31s%-31s%-31s%-30s" % (card["npu_id"], len(card["chips"]), "-", "Mcu"))
    return "\n".join(lines) + "\n"


def render_board(profile, card):
    compatibility = "OK" if os.geteuid() == 0 else "NOT SUPPORT"
    vendor_sub, device_sub = card["subsystem"]
    lines = [
        _kv("NPU ID", card["npu_id"]),
        _kv("Product Name", card["product_name"]),
        _kv("Model", "NA"),
        _kv("Manufacturer", "Huawei"),
        _kv("Serial Number", card["serial"]),
        _kv("Software Version", profile["driver"]),
        _kv("Firmware Version", card["firmware"]),
        _kv("Compatibility", compatibility),
        _kv("Board ID", card["board_id"]),
        _kv("PCB ID", card["pcb_id"]),
        _kv("BOM ID", card["bom_id"]),
        _kv("PCIe Bus Info", card["bus_id"]),
        _kv("Slot ID", "NA"),
        _kv("Class ID", "NA"),
        _kv("PCI Vendor ID", "0x19E5"),
        _kv("PCI Device ID", "0xD500"),
        _kv("Subsystem Vendor ID", vendor_sub),
        _kv("Subsystem Device ID", device_sub),
        _kv("Chip Count", len(card["chips"])),
        _kv("Chip Fault", sum(1 for chip in card["chips"] if chip["fault"])),
    ]
    return "\n".join(lines) + "\n"


def _per_chip(card, label, value_of, mcu_lines):
    lines = [_kv("NPU ID", card["npu_id"]), _kv("Chip Count", len(card["chips"]))]
    for chip in card["chips"]:
        lines.extend(["", _kv(label, value_of(chip)), _kv("Chip ID", chip["chip_id"])])
    if mcu_lines:
        lines.append("")
        lines.extend(mcu_lines)
    return "\n".join(lines) + "\n"


def render_product(card):
    return _per_chip(card, "Product Type", lambda chip: card["product_type"], [])


def render_health(card):
    card_health = "OK" if all(chip["health"] == "OK" for chip in card["chips"]) else "Warning"
    return _per_chip(card, "Health", lambda chip: chip["health"],
                     [_kv("Health", card_health), _kv("Chip Name", "MCU")])


def render_phyid_remap(profile, phy_id):
    for card in profile["cards"]:
        for chip in card["chips"]:
            if str(chip["phy_id"]) == phy_id:
                return "\n".join("\t%-30s:%s" % pair for pair in (
                    ("Chip Physical ID", chip["phy_id"]), ("Chip Logic ID", chip["logic_id"]),
                    ("NPU ID", card["npu_id"]), ("Chip ID", chip["chip_id"]))) + "\n"
    return None


def _link(card, other_card):
    """How two chips are connected: on one Duo card, through HCCS (310P has HCCS, npu-smi's source prints its
    lanes); on two cards, through the host bridge of one NUMA node, or across nodes."""
    if card is other_card:
        return "HCCS"
    return "PHB" if card["numa_node"] == other_card["numa_node"] else "SYS"


def render_topo(profile):
    chips = sorted(((chip, card) for card in profile["cards"] for chip in card["chips"]),
                   key=lambda pair: pair[0]["logic_id"])
    lines = ["\t   " + "".join("NPU%-8d" % chip["logic_id"] for chip, _ in chips) + "CPU Affinity"]
    for chip, card in chips:
        links = "".join("%-11s" % ("X" if other is chip else _link(card, other_card))
                        for other, other_card in chips)
        lines.append("NPU%-8d" % chip["logic_id"] + links + profile["numa_nodes"][card["numa_node"]]["cpus"])
    return "\n".join(lines + [""] + list(TOPO_LEGEND)) + "\n"


def _card_by_id(profile, npu_id):
    for card in profile["cards"]:
        if str(card["npu_id"]) == npu_id:
            return card
    return None


def run(profile, argv):
    """Return (stdout text, exit code) for one npu-smi command line."""
    profile = expand_profile(profile)
    if argv in (["-v"], ["--version"]):
        return "npu-smi version: %s\n" % profile["driver"], 0
    if not argv or argv[0] != "info":
        raise UsageError("usage: npu-smi info [-l | -m | -t topo | -t phyid-remap -p <phy id> "
                         "| -t board|product|health -i <NPU ID>] | -v")
    if profile["failure"]:
        return LOG_LEVEL_LINE + "\n" + DCMI_FAILURES[profile["failure"]] + "\n", 1
    rest = argv[1:]
    if not rest:
        return render_table(profile), 0
    if rest == ["-l"]:
        return render_list(profile), 0
    if rest == ["-m"]:
        return render_mapping(profile), 0
    if rest == ["-t", "topo"]:
        # The reference shows the text, not the exit code; 0 is assumed, and the text alone tells it apart.
        return (render_topo(profile) if profile["topo"] else TOPO_NOT_SUPPORTED + "\n"), 0
    if len(rest) == 4 and rest[:3] == ["-t", "phyid-remap", "-p"]:
        if not profile["phyid_remap"]:
            # Not among the real samples: an npu-smi without the type refuses it; wording chosen for the twin.
            return "Unsupported type: phyid-remap.\n", 1
        text = render_phyid_remap(profile, rest[3])
        # Not among the real samples either: a physical id no chip has.
        return (text, 0) if text else ("The Chip Physical ID %s is not exist.\n" % rest[3], 1)
    if len(rest) == 4 and rest[0] == "-t" and rest[2] == "-i":
        card = _card_by_id(profile, rest[3])
        if card is None:
            # Not among the real samples: wording chosen for the twin, exit code non-zero like the real tool.
            return "The NPU ID %s is not exist.\n" % rest[3], 1
        printers = {"board": lambda: render_board(profile, card),
                    "product": lambda: render_product(card),
                    "health": lambda: render_health(card)}
        if rest[1] in printers:
            return printers[rest[1]](), 0
    raise UsageError("npu-smi twin: unsupported command: info %s" % " ".join(rest))


def load_profile():
    path = os.environ.get(PROFILE_ENV) or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), os.pardir, "dcmi", PROFILE_NAME)
    with open(path) as handle:
        return json.load(handle)


def main(argv):
    try:
        text, code = run(load_profile(), argv)
    except UsageError as error:
        sys.stdout.write("%s\n" % error)
        return 2
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
