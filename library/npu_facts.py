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
  - Runs C(npu-smi info), C(npu-smi info -m), C(npu-smi info -l), C(npu-smi info -t topo), for every NPU ID
    found C(npu-smi info -t board -i <id>) and C(npu-smi info -t product -i <id>), and for every
    C(/dev/davinciN) node C(npu-smi info -t phyid-remap -p N); reads the driver's and the firmware's
    C(version.info), C(/etc/ascend_install.info), the C(/dev/davinciN) nodes and the CPU model.
  - The N of a chip's C(/dev/davinciN) is its physical id, which need not be its logic id (the id npu-smi lists
    chips by). C(npu-smi info -t phyid-remap -p N) tells which chip node N is; each chip's C(device) comes from
    it. Where npu-smi cannot answer it (older drivers), C(phy_ids_known) is false and C(device) falls back to
    C(davinci<logic id>); when the nodes present are then not exactly the logic ids, C(problems) says that the
    devices of the chips are unknown.
  - Each chip's C(cpu_affinity) is the C(CPU Affinity) column of C(npu-smi info -t topo), the CPUs near the chip
    that vLLM-Ascend binds its workers to.
  - Returns everything under C(ansible_facts.ascend). Never changes anything on the host.
  - Never fails because of the device state. A missing npu-smi gives C(present=false); a dcmi error (for
    example C(ret is -8005) or C(-8020), which npu-smi prints on stdout) gives C(ready=false) with the known
    causes and fixes in C(problems). When one query fails, the facts of the others still come back and the
    failure is listed in C(problems).
  - NPU IDs are read from npu-smi, never derived (real hosts show IDs such as 1, 2, 4, 5 or 224). A chip whose
    table rows hold no integer NPU ID or chip ID is left out and makes C(ready=false), named in C(problems).
  - Output and files that are not UTF-8 are read with the odd bytes replaced (U+FFFD), and C(problems) says so.
  - Fails only on options it cannot use (an empty path, a C(timeout) below 1).
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
    description: Seconds to wait for each npu-smi call (at least 1); a wedged driver can make npu-smi hang.
    type: int
    default: 60
attributes:
  check_mode:
    description: Can run in check mode and return the same facts as without it.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: It only reads, so there is never a change to show.
  facts:
    description: Returns C(ansible_facts), which update the host's facts.
    support: full
  platform:
    description: Target OS families it runs on.
    support: full
    platforms: posix
notes:
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
      description: Everything npu-smi and the driver files said. Every key is always there, empty or null
        when its source did not answer.
      returned: always
      type: complex
      contains:
        present:
          description: npu-smi was found and answered (with a table or with a dcmi error).
          returned: always
          type: bool
          sample: true
        ready:
          description: npu-smi listed the chips without a dcmi error, each with integer NPU and chip IDs.
          returned: always
          type: bool
          sample: true
        problems:
          description: Human-readable findings, each with its likely cause and fix.
          returned: always
          type: list
          elements: str
          sample: ["npu-smi info failed: dcmi module initialize failed. ret is -8005. ..."]
        npu_smi:
          description: Path of the npu-smi that was run, or null.
          returned: always
          type: str
          sample: /usr/local/bin/npu-smi
        npu_smi_version:
          description: Version of npu-smi, from the table header.
          returned: always
          type: str
          sample: 25.5.2
        driver_version:
          description: Driver version as the loaded driver reports it (npu-smi table header).
          returned: always
          type: str
          sample: 25.5.2
        driver_version_file:
          description: C(Version=) of the driver's version.info (what is installed on disk).
          returned: always
          type: str
          sample: 25.5.2
        firmware_version:
          description: Firmware of the first card (C(-t board)), else C(Version=) of the firmware's version.info.
          returned: always
          type: str
          sample: 7.8.0.7.220
        firmware_version_file:
          description: C(Version=) of the firmware's version.info.
          returned: always
          type: str
          sample: 7.8.0.7.220
        install_info:
          description: Key/value pairs of the install record (C(/etc/ascend_install.info)).
          returned: always
          type: dict
          sample: {"Driver_Install_Path_Param": "/usr/local/Ascend"}
        architecture:
          description: Machine architecture (C(aarch64), C(x86_64)).
          returned: always
          type: str
          sample: aarch64
        cpu_model:
          description: CPU model; Kunpeng parts are named from their CPU part number.
          returned: always
          type: str
          sample: Kunpeng-920
        online_cpus:
          description:
            - The host's online CPUs (C(/sys/devices/system/cpu/online)); empty when that cannot be read.
            - A chip's C(cpu_affinity) may name CPUs that are offline; no container can be given those.
          returned: always
          type: list
          elements: int
          sample: [0, 1, 2, 3]
        cards:
          description: One entry per NPU ID, in the order of the npu-smi table.
          returned: always
          type: list
          elements: dict
          contains:
            npu_id:
              description: The card's NPU ID as npu-smi prints it (not 0..N-1 on real hosts).
              returned: always
              type: int
              sample: 1
            product_type:
              description: C(Product Type) of C(-t product), or null when that query failed.
              returned: always
              type: str
              sample: Atlas 300I Duo
            product_name:
              description: C(Product Name) of C(-t board) or C(-l), the board's part name.
              returned: always
              type: str
              sample: IT21PD2G10
            serial:
              description: C(Serial Number) of the board.
              returned: always
              type: str
              sample: 2106030737ZERC003572
            chip_count:
              description: Chips of the card (C(Chip Count) of the board, else the chips in the table).
              returned: always
              type: int
              sample: 2
            firmware_version:
              description: C(Firmware Version) of C(-t board).
              returned: always
              type: str
              sample: 7.8.0.7.220
            software_version:
              description: C(Software Version) of C(-t board), the driver the card runs.
              returned: always
              type: str
              sample: 25.5.2
            bus_id:
              description: C(PCIe Bus Info) of the board.
              returned: always
              type: str
              sample: "0000:01:00.0"
            pci_device_id:
              description: C(PCI Device ID) of the board (C(0xD500) for 310P).
              returned: always
              type: str
              sample: "0xD500"
            pci_subsystem:
              description: C(Subsystem Vendor ID)/C(Subsystem Device ID) of the board.
              returned: always
              type: str
              sample: "0x0200/0x0110"
            chip_fault_count:
              description: C(Chip Fault) (310P) or C(Faulty Chip Count) (910B) of the board; null when not printed.
              returned: always
              type: int
              sample: 0
            compatibility:
              description: C(Compatibility) of the board; C(NOT SUPPORT) when npu-smi did not run as root.
              returned: always
              type: str
              sample: OK
            health_problems:
              description:
                - What is wrong with the card; empty when every chip's health is C(OK) and the board counts no
                  chip fault.
                - One entry per chip whose health is not C(OK), then one for the board's chip faults.
              returned: always
              type: list
              elements: str
              sample: ["chip 1 health Warning", "2 chip fault(s)"]
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
              health_problems: []
        unhealthy_npu_ids:
          description:
            - NPU IDs of the cards with health problems (see C(cards[].health_problems)), sorted.
            - Cards to leave out of serving, whether or not preflight's checks ran.
          returned: always
          type: list
          elements: int
          sample: [224]
        chips:
          description: One entry per NPU chip (MCUs left out), in the order of the npu-smi table.
          returned: always
          type: list
          elements: dict
          contains:
            npu_id:
              description: NPU ID of the card the chip is on.
              returned: always
              type: int
              sample: 1
            chip_id:
              description: Chip number on its card.
              returned: always
              type: int
              sample: 0
            logic_id:
              description: Logic id (the table's Device column, else C(-m)); null when neither gave it.
              returned: always
              type: int
              sample: 0
            name:
              description: Chip name.
              returned: always
              type: str
              sample: 310P3
            health:
              description: Health column of the table (C(OK), C(Warning), C(Alarm), C(Critical)).
              returned: always
              type: str
              sample: OK
            bus_id:
              description: PCI bus id of the chip.
              returned: always
              type: str
              sample: "0000:01:00.0"
            memory_total_mb:
              description: Memory of the chip, in MB.
              returned: always
              type: int
              sample: 44278
            memory_used_mb:
              description: Memory in use, in MB.
              returned: always
              type: int
              sample: 1448
            hbm_total_mb:
              description: HBM of the chip, in MB.
              returned: on chips whose table row has an HBM column (910B, not 310P)
              type: int
              sample: 65536
            hbm_used_mb:
              description: HBM in use, in MB.
              returned: on chips whose table row has an HBM column (910B, not 310P)
              type: int
              sample: 3410
            temperature_c:
              description: Temperature in degrees Celsius.
              returned: always
              type: int
              sample: 49
            power_w:
              description: Power in watts; null on 310P, which prints C(NA).
              returned: always
              type: float
              sample: 93.9
            aicore_percent:
              description: AI core usage in percent.
              returned: always
              type: float
              sample: 0
            hugepages_used:
              description: Huge pages in use.
              returned: always
              type: int
              sample: 0
            hugepages_total:
              description: Huge pages reserved.
              returned: always
              type: int
              sample: 0
            phy_id:
              description:
                - Physical id of the chip, the N of its C(/dev/davinciN), from C(npu-smi info -t phyid-remap).
                - Null when npu-smi cannot tell (C(phy_ids_known) false) or no node under C(dev_dir) is this chip.
              returned: always
              type: int
              sample: 0
            device:
              description:
                - The C(davinciN) node of the chip under C(dev_dir), N being its C(phy_id).
                - When C(phy_ids_known) is false, C(davinci<logic_id>) (null without a logic id), right only where
                  physical and logic ids agree.
                - Null when the physical ids are known but no node is this chip's.
              returned: always
              type: str
              sample: /dev/davinci0
            cpu_affinity:
              description: The CPUs near the chip (C(CPU Affinity) of C(npu-smi info -t topo)), sorted; empty
                when npu-smi did not tell.
              returned: always
              type: list
              elements: int
              sample: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
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
              phy_id: 0
              device: /dev/davinci0
              cpu_affinity: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
        chip_count:
          description: Number of chips.
          returned: always
          type: int
          sample: 8
        card_count:
          description: Number of cards (NPU IDs).
          returned: always
          type: int
          sample: 4
        chip_names:
          description: Distinct chip names.
          returned: always
          type: list
          elements: str
          sample: ["310P3"]
        phy_ids_known:
          description:
            - C(npu-smi info -t phyid-remap -p N) answered for every C(davinciN) node under C(dev_dir), so every
              chip's C(device) is its own node.
            - False when it failed for one of them (an npu-smi without that query) or there is no node.
          returned: always
          type: bool
          sample: true
        device_numbering:
          description:
            - What the N of each chip's C(davinciN) is known to be - C(phy_id) (npu-smi mapped every node),
              C(logic_id) (npu-smi cannot map them, but the nodes' numbers are the chips' logic ids, so
              C(davinci<logic id>) is right), or C(unknown) (neither - each chip's C(device) is a guess, and a
              container would get another chip or none; preflight fails the host).
          returned: always
          type: str
          sample: phy_id
        phyid_remap_error:
          description: Why C(npu-smi info -t phyid-remap) could not map the nodes (the call and its output), or null.
          returned: always
          type: str
        devices:
          description: The C(davinciN) nodes found under C(dev_dir), in numeric order.
          returned: always
          type: list
          elements: str
          sample: ["/dev/davinci0", "/dev/davinci1"]
        manager_devices:
          description:
            - Which of C(davinci_manager), C(devmm_svm), C(hisi_hdc) exist under C(dev_dir), as paths.
            - Every container that uses an NPU needs these nodes mapped besides its C(davinciN).
          returned: always
          type: list
          elements: str
          sample: ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
        missing_manager_devices:
          description: The manager devices that do not exist under C(dev_dir), as paths.
          returned: always
          type: list
          elements: str
          sample: ["/dev/hisi_hdc"]
        processes:
          description: Processes holding NPU memory, from the npu-smi process table.
          returned: always
          type: list
          elements: dict
          contains:
            npu_id:
              description: NPU ID of the card.
              returned: always
              type: int
              sample: 6
            chip_id:
              description: Chip number on that card.
              returned: always
              type: int
              sample: 1
            pid:
              description: Process id on the host.
              returned: always
              type: int
              sample: 293029
            name:
              description: Process name.
              returned: always
              type: str
              sample: python3.11
            memory_mb:
              description: NPU memory the process holds, in MB.
              returned: always
              type: int
              sample: 6612
            container_id:
              description: Id of the container the process runs in (from its cgroup), or null.
              returned: always
              type: str
              sample: null
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
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.npu_holders import container_of, davinci_number
from ansible.module_utils.npu_smi import (
    MANAGER_DEVICES,
    card_health_problems,
    dcmi_cause,
    dcmi_failure,
    expand_cpu_list,
    parse_board,
    parse_cpu_model,
    parse_list,
    parse_mapping,
    parse_phyid_remap,
    parse_product,
    parse_table,
    parse_topo,
    parse_version_file,
)
from ansible.module_utils.option_checks import OptionError, number_at_least, text_given, unexpected_failure

SEARCH_PATH = ("/usr/local/bin", "/usr/local/sbin")


def utf8_text(data, source, problems):
    """data as text; bytes that are not UTF-8 become U+FFFD, and problems (when given) says so, naming source."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        if problems is not None:
            problems.append("%s bytes that are not UTF-8, read as U+FFFD: values holding them may be wrong. Fix: "
                            "for npu-smi, give root a UTF-8 locale (LANG=en_US.UTF-8; a zh_CN one may print GBK); "
                            "for a file, restore it from the driver package" % source)
        return data.decode("utf-8", "replace")


def read_text(path, problems=None):
    """The text of a file, or None when it cannot be read. The kernel's /proc files are ASCII: their readers
    give no problems to tell of other bytes."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (IOError, OSError):
        return None
    return utf8_text(data, "%s holds" % path, problems)


ONLINE_CPUS = "/sys/devices/system/cpu/online"


def cpu_model():
    return parse_cpu_model(read_text("/proc/cpuinfo") or "") or platform.processor() or None



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
                                    timeout=self.params["timeout"], check=False)
        except subprocess.TimeoutExpired:
            return None, "timed out after %ss" % self.params["timeout"]
        except OSError as error:
            return None, str(error)
        return result.returncode, utf8_text(result.stdout, "`npu-smi %s` printed" % " ".join(args), self.problems)

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
            "online_cpus": expand_cpu_list((read_text(ONLINE_CPUS) or "").strip()) or [],
            "cards": [], "chips": [], "chip_count": 0, "card_count": 0, "chip_names": [],
            "unhealthy_npu_ids": [], "phy_ids_known": False, "device_numbering": "unknown",
            "phyid_remap_error": None, "devices": [], "manager_devices": [],
            "missing_manager_devices": [],
            "processes": [],
        }
        self.read_files(facts)
        self.read_devices(facts)
        path = self.find_npu_smi()
        if not path and params["npu_smi"] and os.path.exists(params["npu_smi"]):
            self.problems.append("npu_smi %s is not an executable file. Fix: set the npu_smi option (fleet_npu_smi) "
                                 "to the npu-smi program, or leave it empty to look on PATH" % params["npu_smi"])
            return facts
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
        for row in table["unreadable_rows"]:
            self.problems.append("`npu-smi info` %s: the chip is left out and the host is not ready, as its card, "
                                 "logic id and device cannot be told. Fix: compare `npu-smi info` by hand with the "
                                 "samples in this collection's tests (tests/fixtures/npu-smi); a driver that prints "
                                 "another table needs the parser (module_utils/npu_smi.py) taught" % row)
        self.merge_chips(facts, path, table["chips"])
        self.read_phy_ids(facts, path)
        self.read_cpu_affinity(facts, path)
        self.read_cards(facts, path)
        facts["ready"] = bool(facts["chips"]) and not table["unreadable_rows"]
        if not facts["chips"]:
            self.problems.append("`npu-smi info` listed no NPU chip. Fix: check that the cards are seated and "
                                 "visible (`lspci | grep d500`) and that the driver is loaded")
        if not facts["firmware_version"]:
            facts["firmware_version"] = facts["firmware_version_file"]
        return facts

    def explain_failure(self, failure, code, output):
        if failure:
            self.problems.append("`npu-smi info` failed: %s: %s" % (failure, dcmi_cause(failure)))
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
        facts["chips"] = chips
        facts["chip_count"] = len(chips)
        facts["chip_names"] = sorted(set(chip["name"] for chip in chips if chip["name"]))

    def read_phy_ids(self, facts, path):
        """Each chip's physical id and device node, asking npu-smi which chip each /dev/davinciN node is.

        Not through query(): an npu-smi without `-t phyid-remap` is only a problem where the nodes' numbers are not
        the logic ids, which is told once, below, with its consequence.
        """
        logic_of_node, failure = {}, None
        for node in facts["devices"]:
            number = davinci_number(node)
            code, output = self.npu_smi(path, "info", "-t", "phyid-remap", "-p", str(number))
            remap = parse_phyid_remap(output) if code == 0 and not dcmi_failure(output) else None
            if remap is None or remap["phy_id"] != number:
                failure = "`npu-smi info -t phyid-remap -p %d` (exit %s): %s" % (
                    number, code, dcmi_failure(output) or (output.strip().splitlines() or ["no output"])[-1])
                break
            logic_of_node[number] = remap["logic_id"]
        facts["phy_ids_known"] = bool(facts["devices"]) and failure is None
        phy_of_logic = dict((logic, phy) for phy, logic in logic_of_node.items())
        dev = params_dev(self.params)
        for chip in facts["chips"]:
            if facts["phy_ids_known"]:
                chip["phy_id"] = phy_of_logic.get(chip["logic_id"])
                number = chip["phy_id"]
            else:
                chip["phy_id"] = None
                number = chip["logic_id"]
            chip["device"] = os.path.join(dev, "davinci%d" % number) if number is not None else None
        numbers = sorted(davinci_number(node) for node in facts["devices"])
        logic_ids = sorted(chip["logic_id"] for chip in facts["chips"] if chip["logic_id"] is not None)
        facts["phyid_remap_error"] = failure
        facts["device_numbering"] = ("phy_id" if facts["phy_ids_known"] else
                                     "logic_id" if numbers == logic_ids else "unknown")

    def read_cpu_affinity(self, facts, path):
        """Each chip's CPU affinity from the topo matrix, whose rows are chip logic ids."""
        affinity = parse_topo(self.query(path, "info", "-t", "topo") or "")
        for chip in facts["chips"]:
            chip["cpu_affinity"] = affinity.get(chip["logic_id"], [])
        unknown = [str(chip["logic_id"]) for chip in facts["chips"] if not chip["cpu_affinity"]]
        if affinity and unknown:
            self.problems.append("`npu-smi info -t topo` gives no CPU affinity for the chip(s) with logic id %s: "
                                 "their cpu_affinity is empty. Fix: compare its output with the samples in this "
                                 "collection's tests (tests/fixtures/npu-smi)" % ", ".join(unknown))

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
        problems = card_health_problems(facts["chips"], facts["cards"])
        for card in facts["cards"]:
            card["health_problems"] = problems[card["npu_id"]]
        facts["unhealthy_npu_ids"] = sorted(npu_id for npu_id, found in problems.items() if found)

    def read_files(self, facts):
        params = self.params
        driver = read_text(os.path.join(params["driver_home"], "version.info"), self.problems)
        if driver is None:
            self.problems.append("%s/version.info not readable: the driver is not installed there. Fix: install "
                                 "the driver or set driver_home" % params["driver_home"])
        else:
            facts["driver_version_file"] = parse_version_file(driver).get("Version")
        firmware = read_text(os.path.join(params["firmware_home"], "version.info"), self.problems)
        if firmware is not None:
            facts["firmware_version_file"] = parse_version_file(firmware).get("Version")
        install = read_text(params["install_info"], self.problems)
        if install is not None:
            facts["install_info"] = parse_version_file(install)

    def read_devices(self, facts):
        dev = params_dev(self.params)
        nodes = [path for path in glob.glob(os.path.join(dev, "davinci[0-9]*")) if davinci_number(path) is not None]
        facts["devices"] = sorted(nodes, key=davinci_number)
        for name in MANAGER_DEVICES:
            path = os.path.join(dev, name)
            (facts["manager_devices"] if os.path.exists(path) else facts["missing_manager_devices"]).append(path)


def check_options(params):
    number_at_least(params, "timeout", 1, "set fleet_npu_smi_timeout to the seconds an npu-smi call may take")
    for option, expected, setting in (
            ("driver_home", "a folder such as /usr/local/Ascend/driver", "fleet_driver_home"),
            ("firmware_home", "a folder such as /usr/local/Ascend/firmware", "fleet_firmware_home"),
            ("install_info", "a file such as /etc/ascend_install.info", "fleet_install_info"),
            ("dev_dir", "a folder such as /dev", "fleet_dev_dir")):
        text_given(params, option, expected, "set %s, or leave it out for the default" % setting)


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
    try:
        check_options(module.params)
        facts = Gatherer(module).gather()
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("gathering the NPU facts with %s" % (
            module.params["npu_smi"] or "the npu-smi on PATH"), error))
    module.exit_json(changed=False, ansible_facts={"ascend": facts})


if __name__ == "__main__":
    main()
