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


class FilterModule:
    def filters(self):
        return {"docker_platform": docker_platform}
