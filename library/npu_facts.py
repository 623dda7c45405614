#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module npu_facts: what an Ascend host's npu-smi, driver and device nodes say, as facts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: npu_facts
short_description: Gather Huawei Ascend NPU facts (cards, chips, driver, firmware, devices, processes)
description:
  - Runs C(npu-smi info), C(npu-smi info -m), C(npu-smi info -l) and, for every NPU ID found,
    C(npu-smi info -t board -i <id>) and C(npu-smi info -t product -i <id>); reads the driver's and the
    firmware's C(version.info), C(/etc/ascend_install.info), the C(/dev/davinciN) nodes and the CPU model.
  - Returns everything under C(ansible_facts.ascend). Never changes anything on the host.
  - Never fails because of the device state. A missing npu-smi gives C(present=false); a dcmi error (for
    example C(ret is -8005) or C(-8020), which npu-smi prints on stdout) gives C(ready=false) with the known
    causes and fixes in C(problems). When one query fails, the facts of the others still come back and the
    failure is listed in C(problems).
  - NPU IDs are read from npu-smi, never derived (real hosts show IDs such as 1, 2, 4, 5 or 224).
  - Needs only the Python standard library (Python 3.8 or later) on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  npu_smi:
    description:
      - Path of npu-smi. By default it is looked up on C(PATH), then in C(/usr/local/bin) and C(/usr/local/sbin).
    type: path
  driver_home:
    description: Folder of the installed Ascend driver (holds C(version.info) and C(lib64/)).
    type: path
    default: /usr/local/Ascend/driver
  firmware_home:
    description: Folder of the installed Ascend firmware (holds C(version.info)).
    type: path
    default: /usr/local/Ascend/firmware
  install_info:
    description: The driver installer's record of what it installed.
    type: path
    default: /etc/ascend_install.info
  dev_dir:
    description: Folder holding the C(davinciN) and manager device nodes.
    type: path
    default: /dev
  timeout:
    description: Seconds to wait for each npu-smi call; a wedged driver can make npu-smi hang.
    type: int
    default: 60
notes:
  - Supports check mode; it only reads.
  - Run it as root. Without root npu-smi prints C(NOT SUPPORT) for some fields and may fail with C(-8005).
seealso:
  - name: npu-smi output formats
    description: The real samples the parser is tested against, in the project's shared fixtures.
    link: https://www.hiascend.com/document
"""

EXAMPLES = r"""
- name: Gather Ascend facts
  npu_facts:

- name: Gather facts where the driver lives elsewhere
  npu_facts:
    npu_smi: /opt/ascend/bin/npu-smi
    driver_home: /opt/ascend/driver
    firmware_home: /opt/ascend/firmware

- name: Show what was found
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts.ascend.card_count }} cards, {{ ansible_facts.ascend.chip_count }} chips,
      driver {{ ansible_facts.ascend.driver_version }}, ready={{ ansible_facts.ascend.ready }}
"""

RETURN = r"""
ansible_facts:
  description: Facts about the host's Ascend NPUs.
  returned: always
  type: complex
  contains:
    ascend:
      description: Everything npu-smi and the driver files said.
      returned: always
      type: complex
      contains:
        present:
          description: npu-smi was found and answered (with a table or with a dcmi error).
          type: bool
          sample: true
        ready:
          description: npu-smi listed the chips without a dcmi error.
          type: bool
          sample: true
        problems:
          description: Human-readable findings, each with its likely cause and fix.
          type: list
          elements: str
          sample: ["npu-smi info failed: dcmi module initialize failed. ret is -8005. ..."]
        npu_smi:
          description: Path of the npu-smi that was run, or null.
          type: str
          sample: /usr/local/bin/npu-smi
        npu_smi_version:
          description: Version of npu-smi, from the table header.
          type: str
          sample: 25.5.2
        driver_version:
          description: Driver version as the loaded driver reports it (npu-smi table header).
          type: str
          sample: 25.5.2
        driver_version_file:
          description: C(Version=) of the driver's version.info (what is installed on disk).
          type: str
          sample: 25.5.2
        firmware_version:
          description: Firmware of the first card (C(-t board)), else C(Version=) of the firmware's version.info.
          type: str
          sample: 7.8.0.7.220
        firmware_version_file:
          description: C(Version=) of the firmware's version.info.
          type: str
          sample: 7.8.0.7.220
        install_info:
          description: Key/value pairs of the install record (C(/etc/ascend_install.info)).
          type: dict
          sample: {"Driver_Install_Path_Param": "/usr/local/Ascend"}
        architecture:
          description: Machine architecture (C(aarch64), C(x86_64)).
          type: str
          sample: aarch64
        cpu_model:
          description: CPU model; Kunpeng parts are named from their CPU part number.
          type: str
          sample: Kunpeng-920
        cards:
          description: One entry per NPU ID.
          type: list
          elements: dict
          sample:
            - npu_id: 1
              product_type: Atlas 300I Duo
              product_name: IT21PD2G10
              chip_count: 2
              firmware_version: 7.8.0.7.220
              software_version: 25.5.2
              serial: 2106030737ZERC003572
              bus_id: "0000:01:00.0"
              pci_device_id: "0xD500"
              pci_subsystem: "0x0200/0x0110"
              chip_fault_count: 0
              compatibility: OK
        chips:
          description: One entry per NPU chip (MCUs left out).
          type: list
          elements: dict
          sample:
            - npu_id: 1
              chip_id: 0
              logic_id: 0
              name: 310P3
              health: OK
              bus_id: "0000:01:00.0"
              memory_total_mb: 44278
              memory_used_mb: 1448
              temperature_c: 49
              power_w: null
              aicore_percent: 0
              hugepages_used: 0
              hugepages_total: 0
              device: /dev/davinci0
        chip_count:
          description: Number of chips.
          type: int
          sample: 8
        card_count:
          description: Number of cards (NPU IDs).
          type: int
          sample: 4
        chip_names:
          description: Distinct chip names.
          type: list
          elements: str
          sample: ["310P3"]
        devices:
          description: The C(davinciN) nodes found under C(dev_dir), in numeric order.
          type: list
          elements: str
          sample: ["/dev/davinci0", "/dev/davinci1"]
        manager_devices:
          description: Which of C(davinci_manager), C(devmm_svm), C(hisi_hdc) exist under C(dev_dir).
          type: list
          elements: str
          sample: ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
        missing_manager_devices:
          description: The manager devices that do not exist.
          type: list
          elements: str
          sample: []
        processes:
          description: Processes holding NPU memory, from the npu-smi process table.
          type: list
          elements: dict
          sample:
            - npu_id: 6
              chip_id: 1
              pid: 293029
              name: python3.11
              memory_mb: 6612
              container_id: null
"""

import glob
import os
import platform
import re
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule

MANAGER_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
SEARCH_PATH = ("/usr/local/bin", "/usr/local/sbin")
BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
DCMI_ERROR = re.compile(r"ret is (-?\d+)")
CONTAINER_ID = re.compile(r"([0-9a-f]{64})")
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
    """Key/value output as blocks separated by blank lines, each a list of (label, value)."""
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
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def to_number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else number


def dcmi_failure(text):
    """The dcmi error line of a failed npu-smi call, or None."""
    for line in text.splitlines():
        if "dcmi" in line.lower() and DCMI_ERROR.search(line):
            return line.strip()
    return None


def parse_table(text):
    """`npu-smi info`: versions, one dict per chip and the process table."""
    result = {"npu_smi_version": None, "driver_version": None, "chips": [], "processes": []}
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
            result["chips"].append(parse_chip_rows(pending, cells))
            pending = None
        else:
            pending = cells
    return result


def parse_chip_rows(first, second):
    npu_and_name = first[0].split()
    power_temp = first[2].split()
    hugepages = PAIR.search(first[2])
    ids = second[0].split()
    usage = PAIR.findall(second[2])
    aicore = second[2].split()[0] if second[2].split() else None
    chip = {
        "npu_id": to_int(npu_and_name[0]),
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
    if len(cells) < 4:
        return None
    ids = cells[0].split()
    if len(ids) < 2 or to_int(cells[1]) is None:
        return None
    return {"npu_id": to_int(ids[0]), "chip_id": to_int(ids[1]), "pid": to_int(cells[1]), "name": cells[2],
            "memory_mb": to_int(cells[3])}


def parse_mapping(text):
    """`npu-smi info -m`: (npu_id, chip_id, logic_id, chip name) of every chip, MCUs left out."""
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


def parse_list(text):
    """`npu-smi info -l`: the card count and one dict per NPU ID."""
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


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def cpu_model():
    info = read_text("/proc/cpuinfo") or ""
    fields = {}
    for line in info.splitlines():
        pair = split_kv(line)
        if pair and pair[0] not in fields:
            fields[pair[0]] = pair[1]
    if fields.get("model name"):
        return fields["model name"]
    if fields.get("CPU implementer", "").lower() == "0x48":
        part = fields.get("CPU part", "").lower()
        return HISILICON_PARTS.get(part, "HiSilicon (CPU part %s)" % part)
    return platform.processor() or None


def container_of(pid):
    """The container id a host process runs in, from its cgroup, or None."""
    match = CONTAINER_ID.search(read_text("/proc/%s/cgroup" % pid) or "")
    return match.group(1) if match else None


def device_number(path):
    match = re.search(r"davinci(\d+)$", path)
    return int(match.group(1)) if match else -1


class Gatherer:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.problems = []

    def find_npu_smi(self):
        wanted = self.params["npu_smi"]
        if wanted:
            return wanted if os.path.isfile(wanted) and os.access(wanted, os.X_OK) else None
        found = shutil.which("npu-smi")
        if found:
            return found
        for folder in SEARCH_PATH:
            candidate = os.path.join(folder, "npu-smi")
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        return None

    def npu_smi(self, path, *args):
        """(exit code, stdout+stderr) of one npu-smi call; never raises."""
        command = [path] + list(args)
        try:
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    universal_newlines=True, timeout=self.params["timeout"], check=False)
        except subprocess.TimeoutExpired:
            return None, "timed out after %ss" % self.params["timeout"]
        except OSError as error:
            return None, str(error)
        return result.returncode, result.stdout

    def query(self, path, *args):
        """stdout of a successful npu-smi call, else None with the failure recorded in problems."""
        code, output = self.npu_smi(path, *args)
        if code == 0 and not dcmi_failure(output):
            return output
        detail = dcmi_failure(output) or (output.strip().splitlines() or ["no output"])[-1]
        self.problems.append("`npu-smi %s` failed (exit %s): %s" % (" ".join(args), code, detail))
        return None

    def gather(self):
        params = self.params
        facts = {
            "present": False, "ready": False, "problems": self.problems, "npu_smi": None,
            "npu_smi_version": None, "driver_version": None, "driver_version_file": None,
            "firmware_version": None, "firmware_version_file": None, "install_info": {},
            "architecture": platform.machine(), "cpu_model": cpu_model(),
            "cards": [], "chips": [], "chip_count": 0, "card_count": 0, "chip_names": [],
            "devices": [], "manager_devices": [], "missing_manager_devices": [], "processes": [],
        }
        self.read_files(facts)
        self.read_devices(facts)
        path = self.find_npu_smi()
        if not path:
            self.problems.append(
                "npu-smi not found (%s). Fix: install the Ascend driver package, which provides npu-smi, or set "
                "the npu_smi option to its path" % (params["npu_smi"] or "looked on PATH, " + ", ".join(SEARCH_PATH)))
            return facts
        facts["npu_smi"] = path
        code, output = self.npu_smi(path, "info")
        failure = dcmi_failure(output)
        if code is None:
            self.problems.append("`npu-smi info` did not answer: %s. Fix: check the driver with `dmesg`; "
                                 "a hung driver needs a reboot" % output)
            return facts
        facts["present"] = True
        if failure or code != 0:
            self.explain_failure(failure, code, output)
            return facts
        table = parse_table(output)
        facts.update(npu_smi_version=table["npu_smi_version"], driver_version=table["driver_version"],
                     processes=table["processes"])
        for process in facts["processes"]:
            process["container_id"] = container_of(process["pid"])
        self.merge_chips(facts, path, table["chips"])
        self.read_cards(facts, path)
        facts["ready"] = bool(facts["chips"])
        if not facts["chips"]:
            self.problems.append("`npu-smi info` listed no NPU chip. Fix: check that the cards are seated and "
                                 "visible (`lspci | grep d500`) and that the driver is loaded")
        if not facts["firmware_version"]:
            facts["firmware_version"] = facts["firmware_version_file"]
        return facts

    def explain_failure(self, failure, code, output):
        if failure:
            match = DCMI_ERROR.search(failure)
            cause = DCMI_CAUSES.get(match.group(1) if match else "", DCMI_GENERIC)
            self.problems.append("`npu-smi info` failed: %s: %s" % (failure, cause))
        else:
            last = (output.strip().splitlines() or ["no output"])[-1]
            self.problems.append("`npu-smi info` failed (exit %s): %s. Fix: run it by hand as root and check "
                                 "`dmesg` for driver errors" % (code, last))

    def merge_chips(self, facts, path, chips):
        """Chips from the table; logic ids and full chip names from `-m` when it answers."""
        mapping = self.query(path, "info", "-m")
        by_ids = {(row["npu_id"], row["chip_id"]): row for row in parse_mapping(mapping or "")}
        for chip in chips:
            row = by_ids.get((chip["npu_id"], chip["chip_id"]))
            if row and chip["logic_id"] is None:
                chip["logic_id"] = row["logic_id"]
            chip["device"] = (os.path.join(params_dev(self.params), "davinci%d" % chip["logic_id"])
                              if chip["logic_id"] is not None else None)
        facts["chips"] = chips
        facts["chip_count"] = len(chips)
        facts["chip_names"] = sorted(set(chip["name"] for chip in chips if chip["name"]))

    def read_cards(self, facts, path):
        listed_total, listed = parse_list(self.query(path, "info", "-l") or "")
        by_id = dict((card["npu_id"], card) for card in listed)
        npu_ids = []
        for chip in facts["chips"]:
            if chip["npu_id"] not in npu_ids:
                npu_ids.append(chip["npu_id"])
        for npu_id in npu_ids:
            card = {"npu_id": npu_id, "product_type": None, "product_name": None, "serial": None,
                    "chip_count": sum(1 for chip in facts["chips"] if chip["npu_id"] == npu_id),
                    "firmware_version": None, "software_version": None, "bus_id": None, "pci_device_id": None,
                    "pci_subsystem": None, "chip_fault_count": None, "compatibility": None}
            card.update((key, value) for key, value in by_id.get(npu_id, {}).items() if value is not None)
            board = self.query(path, "info", "-t", "board", "-i", str(npu_id))
            if board:
                card.update((key, value) for key, value in parse_board(board).items() if value is not None)
            product = self.query(path, "info", "-t", "product", "-i", str(npu_id))
            if product:
                card["product_type"] = parse_product(product)
            facts["cards"].append(card)
        facts["card_count"] = len(facts["cards"])
        if listed_total is not None and listed_total != facts["card_count"]:
            self.problems.append("`npu-smi info -l` counts %d cards but the table shows %d; a card may have "
                                 "dropped off the bus. Fix: check `lspci | grep d500` and `dmesg`"
                                 % (listed_total, facts["card_count"]))
        firmware = [card["firmware_version"] for card in facts["cards"] if card["firmware_version"]]
        if firmware:
            facts["firmware_version"] = firmware[0]

    def read_files(self, facts):
        params = self.params
        driver = read_text(os.path.join(params["driver_home"], "version.info"))
        if driver is None:
            self.problems.append("%s/version.info not readable: the driver is not installed there. Fix: install "
                                 "the driver or set driver_home" % params["driver_home"])
        else:
            facts["driver_version_file"] = parse_version_file(driver).get("Version")
        firmware = read_text(os.path.join(params["firmware_home"], "version.info"))
        if firmware is not None:
            facts["firmware_version_file"] = parse_version_file(firmware).get("Version")
        install = read_text(params["install_info"])
        if install is not None:
            facts["install_info"] = parse_version_file(install)

    def read_devices(self, facts):
        dev = params_dev(self.params)
        facts["devices"] = sorted((path for path in glob.glob(os.path.join(dev, "davinci[0-9]*"))
                                   if re.search(r"davinci\d+$", path)), key=device_number)
        for name in MANAGER_DEVICES:
            path = os.path.join(dev, name)
            (facts["manager_devices"] if os.path.exists(path) else facts["missing_manager_devices"]).append(path)


def params_dev(params):
    return params["dev_dir"].rstrip("/") or "/"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            npu_smi=dict(type="path"),
            driver_home=dict(type="path", default="/usr/local/Ascend/driver"),
            firmware_home=dict(type="path", default="/usr/local/Ascend/firmware"),
            install_info=dict(type="path", default="/etc/ascend_install.info"),
            dev_dir=dict(type="path", default="/dev"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    facts = Gatherer(module).gather()
    module.exit_json(changed=False, ansible_facts={"ascend": facts})


if __name__ == "__main__":
    main()
