"""Filters of the vllm_image role."""
from ansible.errors import AnsibleFilterError

# A host's machine name (ansible_facts.architecture, `uname -m`) -> the platform Docker pulls for it. vLLM-Ascend
# publishes its images for these two (quay.io/ascend/vllm-ascend: linux/arm64 and linux/amd64 in each tag).
PLATFORMS = {"aarch64": "linux/arm64", "arm64": "linux/arm64", "x86_64": "linux/amd64", "amd64": "linux/amd64"}


def docker_platform(architecture):
    """The platform of the images a host of this architecture runs."""
    try:
        return PLATFORMS[str(architecture)]
    except KeyError:
        raise AnsibleFilterError("architecture %r: vLLM-Ascend images exist for aarch64 (Kunpeng) and x86_64 only. "
                                 "Fix: run on such a host, or set vllm_image_platform to the os/architecture of "
                                 "an image this host runs" % (architecture,)) from None


def vllm_image_archive_list(entries, into_registry=False):
    """The images a fleet needs, from each host's entry ({host, name, platform, pull_from, pulls_from, push_to,
    release}): one per name and platform, with the hosts that run it, in the order of their first host.

    Hosts that run one image are to pull it from one place and find it in one site registry; hosts that disagree
    (two mirrors in one run) are refused, naming them, since one archive run cannot serve both. into_registry (a
    load into the site registry): hosts that pull their image by its registry's own name (no
    fleet_image_registry_mirror) are refused, since what is pushed for them is not where they look."""
    images = {}
    for entry in entries:
        if into_registry and entry["pulls_from"] == entry["name"]:
            raise AnsibleFilterError(
                "%s pulls %s from its own registry, not from a site registry: a load into a registry puts it where "
                "the host does not look. Fix: set fleet_image_registry_mirror to the site registry's address (the "
                "hosts then pull from it), or load onto the hosts (ascend-vllm-fleet images load ARCHIVE --hosts)"
                % (entry["host"], entry["name"]))
        image = images.setdefault((entry["name"], entry["platform"]), dict(
            {field: entry[field] for field in ("name", "platform", "pull_from", "push_to", "release")}, hosts=[]))
        for field, verb in (("pull_from", "is saved from"), ("push_to", "is loaded into the registry as")):
            if entry[field] != image[field]:
                raise AnsibleFilterError(
                    "%s for %s %s %s for %s and %s for %s: one run saves or loads each image once. Fix: run the "
                    "hosts of each registry on their own (-l), or give them the same fleet_image_registry_mirror"
                    % (image["name"], image["platform"], verb, image[field], image["hosts"][0], entry[field],
                       entry["host"]))
        image["hosts"].append(entry["host"])
    return list(images.values())


def vllm_image_archive_pulled(pulls):
    """The images of a loop of docker_image_pull over the list (its registered results), each with the ID of the
    platform pulled: the image archive saves by ID, since a name holds the platform pulled last. In check mode a
    pull that would be needed has no ID yet: "" then."""
    return [dict(pull["item"], id=pull.get("image_id", "")) for pull in pulls["results"]]


class FilterModule:
    def filters(self):
        return {"docker_platform": docker_platform, "vllm_image_archive_list": vllm_image_archive_list,
                "vllm_image_archive_pulled": vllm_image_archive_pulled}
