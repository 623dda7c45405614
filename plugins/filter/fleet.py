"""Filters of the fleet's rollout settings, of the hosts' operating systems and of the image's release."""
import os
import re

from ansible.errors import AnsibleFilterError
from ansible.utils.helpers import pct_to_int

from ansible_collections.ascend.fleet.plugins.plugin_utils import vllm_releases

# UOS Server's openEuler (E) and Anolis (A) editions: ansible-core reports them as the Debian family, from the "uos"
# of their os-release (fixed only after the pinned release, ansible/ansible#86959). Their os-release's PLATFORM_ID
# tells them apart from UOS Desktop, which is Debian underneath.
RPM_PLATFORM_ID = re.compile(r'^PLATFORM_ID="?platform:(uel|uelc)\d', re.M)
# What installs packages in each family the roles have settings for.
PACKAGE_MANAGERS = {"RedHat": ("dnf", "dnf5", "yum"), "Debian": ("apt",)}
# What asks each family's package database for packages by name, printing "installed" once per package that is:
# dpkg's status of the package, or rpm's installed packages that provide the name (as dnf's `present` takes it).
# A name either does not know (a version, a glob) is answered otherwise, so the package manager is asked.
PACKAGE_QUERIES = {"RedHat": ["rpm", "--query", "--whatprovides", "--queryformat=installed\n"],
                   "Debian": ["dpkg-query", "--show", "--showformat=${db:Status-Status}\n"]}


def first_batch(hosts, serial):
    """The hosts of a play's first batch under `serial` (fleet_serial), as Ansible's own batching takes them
    (PlaybookExecutor._get_serialized_batches): the first value of a list, sized by Ansible's pct_to_int (a number
    of hosts, or a percentage of the play's hosts rounded down, at least one); 0 or less, or nothing: every host.

    Ansible names the batch that runs now (ansible_play_batch), not the first one, so this stays: a later batch
    reads the canary batch's verdict (vllm_server), and the canary's judgement counts the batch's hosts that
    failed, which ansible_play_batch no longer lists (vllm_canary)."""
    hosts = list(hosts)
    if isinstance(serial, (list, tuple)):
        serial = serial[0] if serial else None
    if serial is None or serial == "":
        return hosts
    try:
        size = pct_to_int(serial, len(hosts))
    except ValueError:
        raise AnsibleFilterError("fleet_serial is %r: expected a number of hosts (5), a percentage (\"25%%\") or a "
                                 "list of them. Fix: correct it" % (serial,)) from None
    return hosts if size <= 0 else hosts[:size]


def host_platform(facts, os_release=""):
    """What the roles need to know of a host's operating system, from Ansible's facts (gather_subset min) and its
    /etc/os-release: the family whose packages it installs, the package manager that installs them, and the vars
    files a role reads for it (most specific first: distribution and version, distribution, family). An RPM host
    that ansible-core reports as Debian (UOS Server) is an RPM host here."""
    reported = facts.get("os_family", "")
    family = "RedHat" if RPM_PLATFORM_ID.search(os_release or "") else reported
    managers = PACKAGE_MANAGERS.get(family, ())
    if family == reported and (facts.get("pkg_mgr") in managers or not managers):
        package_manager = facts.get("pkg_mgr", "unknown")
    else:
        package_manager = managers[0]  # what ansible-core reported is the other family's
    distribution, version = facts.get("distribution", ""), facts.get("distribution_version", "")
    names = [vars_file_name("%s-%s" % (distribution, version)), vars_file_name(distribution),
             vars_file_name(family)]
    return {
        "family": family,
        "reported_family": reported,
        "package_manager": package_manager,
        "package_query": list(PACKAGE_QUERIES.get(family, ())),
        "distribution": distribution,
        "version": version,
        "label": " ".join(part for part in (distribution, version) if part),
        "vars_files": [name for index, name in enumerate(names) if name not in names[:index]],
    }


def platform_vars_file(platform, role, vars_dir, host):
    """The first of a role's vars files for the host's operating system (platform: host_platform's answer), or a
    failure naming the host, what it runs and the fix when the role has none for it."""
    for name in platform["vars_files"]:
        if os.path.isfile(os.path.join(vars_dir, name)):
            return os.path.join(vars_dir, name)
    raise AnsibleFilterError(
        "%s on %s: found %s (%s family); required one of the distributions the role knows the packages of (the "
        "Debian family: Debian, Ubuntu; the RedHat family: openEuler, Kylin, UOS). Fix: install the packages "
        "yourself and set the role's package settings (its defaults/main.yml), or use such a host." % (
            role, host, platform["label"] or "an unknown distribution", platform["reported_family"] or "unknown"))


def vars_file_name(name):
    """A vars file's name for a distribution, version or family: lower case, words joined by `_`."""
    return "%s.yml" % re.sub(r"[^a-z0-9.-]+", "_", name.lower()).strip("_")


# The table as last read, by the file's modification time: a play evaluates the release of every host many times.
_TABLE = {}


def vllm_release(image, release_as="", accepted_defects=(), driver_version=""):
    """What the release table says of an image (plugin_utils/vllm_releases.release_for); a table or a setting that
    cannot be read fails, naming it."""
    try:
        stamp = os.stat(vllm_releases.TABLE).st_mtime_ns
        if _TABLE.get("stamp") != stamp:
            _TABLE.update(stamp=stamp, table=vllm_releases.load())
        return vllm_releases.release_for(image, _TABLE["table"], release_as, accepted_defects or (), driver_version)
    except (OSError, vllm_releases.ReleaseTableError) as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"first_batch": first_batch, "host_platform": host_platform,
                "platform_vars_file": platform_vars_file, "vllm_release": vllm_release}
