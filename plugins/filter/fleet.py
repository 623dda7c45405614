"""Filters of the fleet's rollout settings."""
from ansible.errors import AnsibleFilterError


def first_batch(hosts, serial):
    """The hosts of a play's first batch under `serial` (fleet_serial): what Ansible's own batching takes first -
    the first value of a list, a number of hosts, or a percentage of the play's hosts rounded down (at least one);
    0 or less, or nothing: every host."""
    hosts = list(hosts)
    if isinstance(serial, (list, tuple)):
        serial = serial[0] if serial else None
    if serial is None or serial == "":
        return hosts
    text = str(serial).strip()
    try:
        if text.endswith("%"):
            size = int(float(text[:-1]) / 100.0 * len(hosts)) or 1
        else:
            size = int(text)
    except ValueError:
        raise AnsibleFilterError("fleet_serial is %r: expected a number of hosts (5), a percentage (\"25%%\") or a "
                                 "list of them. Fix: correct it" % (serial,)) from None
    return hosts if size <= 0 else hosts[:size]


class FilterModule:
    def filters(self):
        return {"first_batch": first_batch}
