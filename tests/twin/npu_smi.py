#!/usr/bin/env python3
"""npu-smi emulator for the twin: prints what a real Ascend 310P host prints.

The twin installs this file as ``<host root>/usr/local/bin/npu-smi``. Its host profile is the JSON file
``../dcmi/npu-smi-twin.json`` next to it (``/usr/local/dcmi`` is where the real npu-smi finds its dcmi
library, and the seed's ``docker run`` mounts that folder, so the same profile is found inside a container),
or the file named by ``NPU_SMI_TWIN_PROFILE``.

Formats follow the real samples in ``tests/fixtures/npu-smi``: the 106-character ``info`` table with two
rows per chip, ``<TAB><label padded to 30> : <value>`` for the key/value commands, the ``-m`` mapping in
31-character columns, and dcmi failures printed on stdout with a non-zero exit.

Profile keys (all optional but ``cards``): ``driver``, ``firmware``, ``separators`` (``card_end``: dashes
between the chips of a card and ``=`` after the card, as 25.0.rc1.1 prints; ``all_dash``; ``all_equals``),
``process_table`` (print the process section, default true), ``failure`` (``"-8005"`` or ``"-8020"``:
every query fails as dcmi does), ``processes`` (list of ``npu_id``, ``chip_id``, ``pid``, ``name``,
``memory_mb``), ``cards`` (list of ``npu_id``, ``product_type``, ``product_name``, ``serial``, ``bus_id``,
``firmware``, ``chips``: list of ``logic_id``, ``name``, ``health``, ``temp``, ``memory_mb``,
``memory_used_mb``, ``hugepages``, ``aicore``, ``fault``).
Standard library only, Python 3.8 syntax: it also runs inside the stand-in image and on old hosts.
"""
import json
import os
import sys

PROFILE_ENV = "NPU_SMI_TWIN_PROFILE"
PROFILE_NAME = "npu-smi-twin.json"

# What each product looks like on the board/list queries (IDs from the real 310P samples).
PRODUCTS = {
    "Atlas 300I Duo": {"product_name": "IT21PD2G10", "chips": 2, "subsystem": ("0x0200", "0x0110")},
    "Atlas 300I Pro": {"product_name": "IT21PDDA01", "chips": 1, "subsystem": ("0x0200", "0x0100")},
}
DUO_CHIP_MEMORY_MB = (44278, 43693)  # chip 1 reserves a little more for the card's OS
PRO_CHIP_MEMORY_MB = (21525,)

DCMI_FAILURES = {
    # Texts as real hosts print them (fixtures error_dcmi_-8005_*, error_dcmi_-8020_*).
    "-8005": "dcmi module initialize failed. ret is -8005",
    "-8020": "dcmi model initialized failed, because the device is used. ret is -8020",
}
LOG_LEVEL_LINE = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)"

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
        memory = DUO_CHIP_MEMORY_MB if product["chips"] == 2 else PRO_CHIP_MEMORY_MB
        chips = card.get("chips") or [{} for _ in range(product["chips"])]
        expanded = []
        for chip_id, chip in enumerate(chips):
            chip = dict(chip)
            chip.setdefault("logic_id", logic_id)
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
        raise UsageError("usage: npu-smi info [-l | -m | -t board|product|health -i <NPU ID>] | -v")
    if profile["failure"]:
        return LOG_LEVEL_LINE + "\n" + DCMI_FAILURES[profile["failure"]] + "\n", 1
    rest = argv[1:]
    if not rest:
        return render_table(profile), 0
    if rest == ["-l"]:
        return render_list(profile), 0
    if rest == ["-m"]:
        return render_mapping(profile), 0
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
