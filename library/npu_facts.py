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
  - With O(docker), also lists the running containers that map the chips' device nodes, as the npu_holders module
    does (C(containers), C(docker_available)), wherever the host has chip nodes or npu-smi lists processes on them,
    so that one call tells who holds the chips.
  - Returns everything under C(ansible_facts.ascend). Never changes anything on the host.
  - Never fails because of the device state. A missing npu-smi gives C(present=false); a dcmi error (for
    example C(ret is -8005) or C(-8020), which npu-smi prints on stdout) gives C(ready=false) with the known
    causes and fixes in C(problems). When one query fails, the facts of the others still come back and the
    failure is listed in C(problems).
  - NPU IDs are read from npu-smi, never derived (real hosts show IDs such as 1, 2, 4, 5 or 224). A chip whose
    table rows hold no integer NPU ID or chip ID is left out and makes C(ready=false), named in C(problems).
  - Output and files that are not UTF-8 are read with the odd bytes replaced (U+FFFD), and C(problems) says so.
  - Fails only on options it cannot use (an empty path, a C(timeout) below 1).
  - O(timeout) bounds the whole call, every npu-smi call sharing it; what it did not reach is named in C(problems).
  - Needs only the Python standard library (Python 3.8 or later) on the host.
version_added: "1.0.0"
author:
  - ascend-vllm-fleet contributors (!UNKNOWN)
options:
  docker:
    description:
      - Docker CLI to list the containers that map the chips with (C(containers)); empty, none are listed. When it is
        not installed, or its engine does not answer, none are listed and C(docker_available) is false.
    type: str
    default: ""
extends_documentation_fragment:
  - ascend.fleet.attributes
  - ascend.fleet.attributes.read_only
  - ascend.fleet.attributes.facts
  - ascend.fleet.npu_paths
notes:
  - Run it as root. Without root npu-smi prints C(NOT SUPPORT) for some fields and may fail with C(-8005).
seealso:
  - name: npu-smi output formats
    description: The real samples the parser is tested against, in the project's shared fixtures.
    link: https://www.hiascend.com/document
"""

EXAMPLES = r"""
- name: Gather Ascend facts
  ascend.fleet.npu_facts:

- name: Gather facts where the driver lives elsewhere
  ascend.fleet.npu_facts:
    npu_smi: /opt/ascend/bin/npu-smi
    driver_home: /opt/ascend/driver
    firmware_home: /opt/ascend/firmware

- name: Gather the facts and the containers that map the chips
  ascend.fleet.npu_facts:
    docker: docker

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
        containers:
          description:
            - With O(docker), the running containers that map a chip's device node or are privileged, as the
              npu_holders module lists them (its C(containers)); else, or where the host has no chip, empty.
          returned: always
          type: list
          elements: dict
        docker_available:
          description: With O(docker), whether its CLI ran and its engine answered; else null.
          returned: always
          type: bool
          sample: true
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.ascend.fleet.plugins.module_utils.npu_gather import NPU_OPTIONS, Gatherer
from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import containers
from ansible_collections.ascend.fleet.plugins.module_utils.option_checks import (
    OptionError,
    number_at_least,
    text_given,
    unexpected_failure,
)


def check_options(params):
    number_at_least(params, "timeout", 1, "set fleet_npu_smi_timeout to the seconds an npu-smi call may take")
    for option, expected, setting in (
            ("driver_home", "a folder such as /usr/local/Ascend/driver", "fleet_driver_home"),
            ("firmware_home", "a folder such as /usr/local/Ascend/firmware", "fleet_firmware_home"),
            ("install_info", "a file such as /etc/ascend_install.info", "fleet_install_info"),
            ("dev_dir", "a folder such as /dev", "fleet_dev_dir")):
        text_given(params, option, expected, "set %s, or leave it out for the default" % setting)


def main():
    module = AnsibleModule(
        argument_spec=dict(NPU_OPTIONS, docker=dict(type="str", default="")),
        supports_check_mode=True,
    )
    try:
        check_options(module.params)
        facts = Gatherer(module.params).gather()
        facts["containers"], facts["docker_available"] = [], None
        if module.params["docker"] and (facts["devices"] or facts["processes"]):
            facts["containers"], facts["docker_available"] = containers(module.params["docker"],
                                                                        module.params["dev_dir"])
    except OptionError as error:
        module.fail_json(msg=str(error))
    except Exception as error:  # anything unforeseen still says what was being done, not a traceback
        module.fail_json(msg=unexpected_failure("gathering the NPU facts with %s" % (
            module.params["npu_smi"] or "the npu-smi on PATH"), error))
    module.exit_json(changed=False, ansible_facts={"ascend": facts})


if __name__ == "__main__":
    main()
