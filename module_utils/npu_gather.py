# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ascend-vllm-fleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gathering a host's NPU facts for the npu_facts module: npu-smi's answers (parsed by npu_smi.py), the driver's
and firmware's files, the device nodes and the processes holding chips. Problems are what could not be read,
each with what to look at; verdicts on what was read are preflight's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import platform
import shutil
import subprocess

from ansible_collections.ascend.fleet.plugins.module_utils.deadline import Deadline, DeadlinePassed
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import container_of, davinci_number
from ansible_collections.ascend.fleet.plugins.module_utils.npu_smi import (
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

SEARCH_PATH = ("/usr/local/bin", "/usr/local/sbin")
# The options of the modules that gather with Gatherer (doc fragment npu_paths).
NPU_OPTIONS = dict(
    npu_smi=dict(type="path"),
    driver_home=dict(type="path", default="/usr/local/Ascend/driver"),
    firmware_home=dict(type="path", default="/usr/local/Ascend/firmware"),
    install_info=dict(type="path", default="/etc/ascend_install.info"),
    dev_dir=dict(type="path", default="/dev"),
    timeout=dict(type="int", default=60),
)


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
    """The facts of one host, gathered with the NPU_OPTIONS of params (a module's, which may hold more).

    Every npu-smi call shares deadline (module_utils/deadline.py), the module's: each gets what is left of it, and a
    call the time does not reach is not run, and named in problems. gather() starts one of the timeout when none was
    given; a call outside gather() without one (the exporter's reading) has the timeout to itself.
    """

    def __init__(self, params, deadline=None):
        self.params = dict((name, params[name]) for name in NPU_OPTIONS)
        self.problems = []
        self.deadline = deadline

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
        whole = "timeout (%ss, all npu-smi calls together)" % self.params["timeout"]
        try:
            timeout = self.params["timeout"] if self.deadline is None else self.deadline.allow(command[0])
        except DeadlinePassed:
            return None, "not run: %s had run out" % whole
        try:
            result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            if self.deadline is None:
                return None, "timed out after %ss" % self.params["timeout"]
            return None, "timed out: %s ran out" % whole
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
        if self.deadline is None:
            self.deadline = Deadline(params["timeout"])
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


def params_dev(params):
    return params["dev_dir"].rstrip("/") or "/"
