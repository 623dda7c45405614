"""Who holds the NPU chips and whether it is this collection's: module_utils/npu_holders.py's one rule, for the
tasks that act on the npu_holders module's list (the driver role stops this collection's instances)."""
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.module_utils.npu_holders import chip_holders


def npu_chip_holders(found, label_prefix, devices=None):
    """The npu_holders module's {containers, processes}, each with `instance` and `ours`, containers with `held`."""
    if not isinstance(found, Mapping):
        raise AnsibleFilterError("npu_chip_holders: its input is %r: expected what the ascend.fleet.npu_holders module "
                                 "registers ({containers, processes}). Fix: register that module's result and pass "
                                 "it" % (found,))
    return chip_holders(found, str(label_prefix), None if devices is None else list(devices))


class FilterModule:
    def filters(self):
        return {"npu_chip_holders": npu_chip_holders}
