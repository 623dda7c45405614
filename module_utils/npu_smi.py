# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What npu-smi, the Ascend driver's files and the kernel print, read into plain values.

Text in, values out, nothing run and nothing read here: so that every function can be tested against the real
samples in tests/fixtures/npu-smi, and so that one place knows the formats and what counts as an unhealthy card.
The formats are described in tests/fixtures/npu-smi/README.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# The device nodes every container using an NPU needs besides its /dev/davinciN; the driver creates them.
MANAGER_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")

BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
DCMI_ERROR = re.compile(r"ret is (-?\d+)")
CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
# Linux's largest CPU number (NR_CPUS is at most 8192): a list naming more is no CPU list, and expanding a range
# such as 0-99999999999 would exhaust the host's memory.
MAX_CPU = 8191
TOPO_ROW = re.compile(r"^NPU(\d+)$")
# CPU implementer 0x48 is HiSilicon; part numbers as the kernel's cputype table names them.
HISILICON_PARTS = {"0xd01": "Kunpeng-920", "0xd02": "Kunpeng-920 (TaiShan v200M)"}

DCMI_CAUSES = {
    "-8005": ("the driver could not be opened: the NPU is held by another container or process, the host was "
              "not rebooted after a driver or firmware upgrade, or npu-smi was not run as root. Fix: stop the "
              "container that maps /dev/davinci* (docker ps), reboot after an upgrade, run as root"),
    "-8020": ("the device is in use by another process or container. Fix: find it with `npu-smi info` on the "
              "host or `docker ps`, stop it, then retry"),
}
DCMI_GENERIC = ("the Ascend driver did not initialise. Fix: check `dmesg` for davinci errors, reinstall the "
                "driver matching the firmware, and reboot")


def split_kv(line):
    """`<TAB><label padded> : <value>` -> (label, value); split on the first colon (bus ids hold colons)."""
    if ":" not in line:
        return None
    label, value = line.split(":", 1)
    return label.strip(), value.strip()


def kv_blocks(text):
    """Key/value output as blocks separated by blank lines, each a list of (label, value).

    Blocks rather than one dict because `-t health` and `-l` repeat the same labels once per chip or card.
    """
    blocks, current = [], []
    for line in text.splitlines():
        pair = split_kv(line) if line.strip() else None
        if pair:
            current.append(pair)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def to_int(value):
    """An integer, or None where npu-smi prints `NA` or `NOT SUPPORT` instead, so one odd field fails nothing."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def to_number(value):
    """An int or a float (910B prints power as 93.9), or None for `NA`; whole numbers stay ints for JSON."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else number


def dcmi_failure(text):
    """The dcmi error line of a failed npu-smi call, or None.

    npu-smi prints dcmi errors on stdout, sometimes with exit code 0, so the text decides, not the exit code.
    """
    for line in text.splitlines():
        if "dcmi" in line.lower() and DCMI_ERROR.search(line):
            return line.strip()
    return None


def dcmi_cause(failure):
    """The likely cause and fix of a dcmi error line, so the operator reads what to do, not only a code."""
    match = DCMI_ERROR.search(failure)
    return DCMI_CAUSES.get(match.group(1) if match else "", DCMI_GENERIC)


def parse_table(text):
    """`npu-smi info`: versions, one dict per chip, the process table, and the chips whose rows hold no integer
    NPU id or chip id (unreadable_rows, one line each saying which), which are left out of chips.

    Rows are told apart by their cells, not by the separator lines, which differ from one driver to the next.
    A chip without its ids cannot be matched to its card, its logic id or its device node, so it is not guessed.
    """
    result = {"npu_smi_version": None, "driver_version": None, "chips": [], "processes": [], "unreadable_rows": []}
    in_processes = False
    pending = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("|"):
            continue
        header = re.match(r"\|\s*npu-smi\s+(\S+)\s+Version:\s*(\S+)", stripped)
        if header:
            result["npu_smi_version"], result["driver_version"] = header.groups()
            continue
        cells = [cell.strip() for cell in stripped.strip("|").split("|")]
        if cells[0].startswith("NPU") or cells[0].startswith("Chip"):
            in_processes = len(cells) >= 4 and "Process" in stripped
            continue
        if in_processes:
            process = parse_process_row(cells)
            if process:
                result["processes"].append(process)
            continue
        if len(cells) < 3:
            continue
        if BUS_ID.match(cells[1]) and pending is not None:
            chip = parse_chip_rows(pending, cells)
            # Each id is the first word of its row's first cell: the card row's NPU id, the chip row's chip id.
            bad_ids = ["%s %r is not an integer" % (label, (row[0].split() or [""])[0])
                       for label, row, key in (("NPU id", pending, "npu_id"), ("chip id", cells, "chip_id"))
                       if chip[key] is None]
            if bad_ids:
                result["unreadable_rows"].append("chip rows %r and %r: %s" % (
                    " | ".join(pending), " | ".join(cells), "; ".join(bad_ids)))
            else:
                result["chips"].append(chip)
            pending = None
        else:
            pending = cells
    return result


def parse_chip_rows(first, second):
    """One chip from its two table rows: the card row (NPU id, name, health, ...) and the chip row (bus id)."""
    npu_and_name = first[0].split()
    power_temp = first[2].split()
    hugepages = PAIR.search(first[2])
    ids = second[0].split()
    usage = PAIR.findall(second[2])
    aicore = second[2].split()[0] if second[2].split() else None
    chip = {
        "npu_id": to_int(npu_and_name[0]) if npu_and_name else None,
        "name": " ".join(npu_and_name[1:]) or None,
        "health": first[1] or None,
        "power_w": to_number(power_temp[0]) if power_temp else None,
        "temperature_c": to_number(power_temp[1]) if len(power_temp) > 1 else None,
        "hugepages_used": to_int(hugepages.group(1)) if hugepages else None,
        "hugepages_total": to_int(hugepages.group(2)) if hugepages else None,
        "chip_id": to_int(ids[0]) if ids else None,
        # 310P prints the logic id (= N of /dev/davinciN) in the Device column; 910B has no such column.
        "logic_id": to_int(ids[1]) if len(ids) > 1 else None,
        "bus_id": second[1],
        "aicore_percent": to_number(aicore),
        "memory_used_mb": to_int(usage[0][0]) if usage else None,
        "memory_total_mb": to_int(usage[0][1]) if usage else None,
    }
    if len(usage) > 1:
        chip["hbm_used_mb"], chip["hbm_total_mb"] = to_int(usage[1][0]), to_int(usage[1][1])
    return chip


def parse_process_row(cells):
    """One process of the process table, or None for its `No running processes found` lines."""
    if len(cells) < 4:
        return None
    ids = cells[0].split()
    if len(ids) < 2 or to_int(cells[1]) is None:
        return None
    return {"npu_id": to_int(ids[0]), "chip_id": to_int(ids[1]), "pid": to_int(cells[1]), "name": cells[2],
            "memory_mb": to_int(cells[3])}


def parse_mapping(text):
    """`npu-smi info -m`: (npu_id, chip_id, logic_id, chip name) of every chip, MCUs left out.

    The only source of logic ids on chips whose table row has no Device column.
    """
    rows = []
    for line in text.splitlines():
        columns = re.split(r"\s{2,}|\t", line.strip())
        if len(columns) < 4 or to_int(columns[0]) is None:
            continue
        if columns[2] == "-" or columns[3].lower() == "mcu":
            continue
        rows.append({"npu_id": to_int(columns[0]), "chip_id": to_int(columns[1]),
                     "logic_id": to_int(columns[2]), "name": columns[3]})
    return rows


def parse_phyid_remap(text):
    """`npu-smi info -t phyid-remap -p <phy_id>`: {'phy_id', 'logic_id', 'npu_id', 'chip_id'} of that one chip,
    or None when a field is missing (an npu-smi without that type prints its usage or an error instead).

    npu-smi prints four `<TAB><label padded to 30>:<value>` lines, with no space around the colon (its own source,
    show_ascend_chip_phyid_remap_info; Huawei's npu-smi reference shows the same four labels). The phy_id is the N
    of /dev/davinciN.
    """
    labels = {"Chip Physical ID": "phy_id", "Chip Logic ID": "logic_id", "NPU ID": "npu_id", "Chip ID": "chip_id"}
    found = {}
    for block in kv_blocks(text):
        for label, value in block:
            if label in labels:
                found[labels[label]] = to_int(value)
    if len(found) < len(labels) or None in found.values():
        return None
    return found


def expand_cpu_list(text):
    """`0-23,48-71` -> [0, ..., 23, 48, ..., 71], sorted; None for anything that is not such a list (a CPU
    above MAX_CPU included)."""
    if not CPU_LIST.match(text or ""):
        return None
    cpus = set()
    for part in text.split(","):
        first, _dash, last = part.partition("-")
        if int(last or first) > MAX_CPU:
            return None
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def parse_topo(text):
    """`npu-smi info -t topo`: chip logic id -> the CPUs of its `CPU Affinity` column, sorted.

    The matrix has a header line (a TAB, three spaces, `NPU<id>` per chip padded to 11, then `CPU Affinity`), one
    row per chip (`NPU<id>` padded to 11, one link type per chip padded to 11, the affinity last), a blank line and
    a legend (npu-smi's own source, print_npu_topo_info; a 910B3 sample in tests/fixtures/npu-smi). Huawei's
    reference says the id after NPU is the chip's logic id. Newer drivers add NIC columns and rows: rows are told
    by their `NPU<id>` first word and an affinity by its form, not by column counts. Where npu-smi prints no
    affinity (A3 on Arm, or `This device does not support querying topo.`), no chip is returned.
    """
    affinity = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2:
            continue
        row = TOPO_ROW.match(words[0])
        cpus = expand_cpu_list(words[-1])
        if row and cpus is not None:
            affinity[int(row.group(1))] = cpus
    return affinity


def parse_list(text):
    """`npu-smi info -l`: the card count and one dict per NPU ID.

    The count is kept apart from the cards because a count higher than the table's means a card fell off the bus.
    """
    total, cards = None, []
    for block in kv_blocks(text):
        fields = dict(block)
        if "NPU ID" in fields:
            cards.append({"npu_id": to_int(fields["NPU ID"]), "product_name": fields.get("Product Name"),
                          "serial": fields.get("Serial Number"), "chip_count": to_int(fields.get("Chip Count"))})
        for label in ("Total Count", "Card Count"):
            if label in fields:
                total = to_int(fields[label])
    return total, cards


def parse_board(text):
    """`npu-smi info -t board -i <id>`: the card's versions, PCI identity and chip fault count.

    310P prints `Chip Fault` where 910B prints `Faulty Chip Count`; both mean the same count.
    """
    fields = dict(pair for block in kv_blocks(text) for pair in block)
    fault = fields.get("Chip Fault", fields.get("Faulty Chip Count"))
    subsystem = None
    if fields.get("Subsystem Vendor ID") or fields.get("Subsystem Device ID"):
        subsystem = "%s/%s" % (fields.get("Subsystem Vendor ID"), fields.get("Subsystem Device ID"))
    return {
        "product_name": fields.get("Product Name"),
        "serial": fields.get("Serial Number"),
        "software_version": fields.get("Software Version"),
        "firmware_version": fields.get("Firmware Version"),
        "compatibility": fields.get("Compatibility"),
        "bus_id": fields.get("PCIe Bus Info"),
        "pci_device_id": fields.get("PCI Device ID"),
        "pci_subsystem": subsystem,
        "chip_count": to_int(fields.get("Chip Count")),
        "chip_fault_count": to_int(fault),
    }


def parse_product(text):
    """`-t product`: the product type (printed once per chip; the same for all of a card's chips)."""
    for block in kv_blocks(text):
        for label, value in block:
            if label == "Product Type":
                return value
    return None


def parse_version_file(text):
    """KEY=VALUE lines of version.info or ascend_install.info (indentation tolerated)."""
    values = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def parse_cpu_model(cpuinfo):
    """The CPU model named by /proc/cpuinfo, or None.

    Arm kernels print no `model name`, only implementer and part numbers; Kunpeng hosts are named from those.
    """
    fields = {}
    for line in cpuinfo.splitlines():
        pair = split_kv(line)
        if pair and pair[0] not in fields:
            fields[pair[0]] = pair[1]
    if fields.get("model name"):
        return fields["model name"]
    if fields.get("CPU implementer", "").lower() == "0x48":
        part = fields.get("CPU part", "").lower()
        return HISILICON_PARTS.get(part, "HiSilicon (CPU part %s)" % part)
    return None


def card_health_problems(chips, cards):
    """NPU id -> what is wrong with that card (an empty list when nothing is), for every card and chip given.

    A card is unhealthy when one of its chips is not `OK` or its board query counts chip faults. Preflight
    fails or excludes such a card and the serving plan leaves it out, even where preflight did not run: both
    read this one verdict.
    """
    problems = dict((card["npu_id"], []) for card in cards)
    for chip in chips:
        found = problems.setdefault(chip["npu_id"], [])
        if chip.get("health") != "OK":
            found.append("chip %s health %s" % (chip["chip_id"], chip.get("health")))
    for card in cards:
        if card.get("chip_fault_count"):
            problems[card["npu_id"]].append("%s chip fault(s)" % card["chip_fault_count"])
    return problems
