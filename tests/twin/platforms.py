"""The architectures of the twin's hosts: this machine's own, and aarch64 (a Kunpeng 920's) under qemu-user."""
import pathlib
import platform

from .shell import TwinError

# What a host's `uname -m` says -> the Debian and OCI name of the architecture.
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}
NATIVE = platform.machine()
# Every image the twin builds, it builds for these: this machine's, and a Kunpeng's.
BUILT = sorted({NATIVE, "aarch64"})
# How binfmt_misc names qemu-user-static's entry for an architecture.
BINFMT = "/proc/sys/fs/binfmt_misc/qemu-%s"


def oci_platform(architecture, as_dict=False):
    """The platform Docker names an architecture by: linux/arm64/v8 for aarch64, as quay.io's lists say it."""
    fields = {"os": "linux", "architecture": ARCHITECTURES[architecture]}
    if architecture == "aarch64":
        fields["variant"] = "v8"
    return fields if as_dict else "/".join(fields.values())


def require_emulation(architecture):
    """Building or running a root of another architecture needs qemu-user-static registered with binfmt_misc, with
    the fix-binary flag (F): the interpreter is then found inside containers too."""
    entry = pathlib.Path(BINFMT % architecture)
    try:
        lines = entry.read_text().splitlines()
    except OSError:
        lines = None
    flags = [line.split(":", 1)[1].strip() for line in lines or [] if line.startswith("flags:")]
    if lines is None:
        found = "not registered"
    elif "enabled" not in lines:
        found = "registered but disabled"
    elif not flags or "F" not in flags[0]:
        found = "flags %s" % (flags[0] if flags else "none")
    else:
        return
    raise TwinError("%s: %s; an %s twin host needs qemu-user-static registered and enabled with the F flag. Fix: "
                    "apt-get install qemu-user-static binfmt-support (scripts/dev does), with binfmt_misc mounted "
                    "(mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc), then update-binfmts --enable "
                    "qemu-%s" % (entry, found, architecture, architecture))
