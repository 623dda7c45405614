"""The options of the modules that gather a host's NPU facts (module_utils/npu_gather.py's NPU_OPTIONS): npu_facts,
fleet_doctor, fleet_verify and support_bundle."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
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
    description:
      - Seconds all the module's npu-smi calls may take together (at least 1); a wedged driver can make npu-smi
        hang. Each call gets only what is left of it; a call the time does not reach is not run, and is named
        with the timeout where the module tells what it could not read.
    type: int
    default: 60
"""
