#!/usr/bin/env python3
"""Build the execution environment (EE) that AWX and Automation Platform run the playbooks in, with ansible-builder.

The definition is execution-environment.yml. Its default base, Red Hat's UBI 9, is pulled from
registry.access.redhat.com; a site that cannot pull it (or this project's test machines, which reach only package
mirrors) builds on a base it makes itself: a Debian 12 root from debootstrap with the distribution's python3 (3.11,
what ansible-core 2.19 takes), ensurepip and the SSH client, made as the twin makes its roots (tests/twin/lifecycle.py,
root "ee"). ansible-builder's Containerfile takes the base and its package manager as build arguments
(EE_BASE_IMAGE, PKGMGR, PYCMD, PYPKG), so one definition serves both bases.

An image is tagged with a hash of everything it is built from (the base image's id, the definition, the build
arguments, the collection's file checksums): a second build of the same inputs reuses it and builds nothing. One
build at a time per checkout (a lock in build/): a second one started meanwhile waits, then finds the image built.

Usage (as root, Docker running; scripts/dev ee runs it):
  .venv/bin/python scripts/ee.py                  the Debian base, made here (what the tests run)
  .venv/bin/python scripts/ee.py --base ubi       the definition's own base, UBI 9 (needs registry.access.redhat.com)
  .venv/bin/python scripts/ee.py --base IMAGE [--build-arg NAME=VALUE ...]
                                                  a base of the site's own: by default with dnf and python3.12 as UBI;
                                                  else say its package manager and Python (PKGMGR, PYCMD, PYPKG). Its
                                                  Python must have ensurepip (Debian and Ubuntu disable it for theirs)
The last line printed is the image, ascend-fleet-ee:<version>-<inputs hash>, also tagged ascend-fleet-ee:<version>;
a new build untags the images built before from other inputs.
"""
import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFINITION = REPO / "execution-environment.yml"
BUILD = REPO / "build"
LOCK = BUILD / "ee.lock"
REPOSITORY = "ascend-fleet-ee"
DEBIAN = "debian"  # --base's default: the root made here
UBI = "ubi"  # --base ubi: the definition's own base
# Build arguments for a Debian-like base: apt-get as the package manager, the distribution's python3. The
# Containerfile's first step installs PYPKG ("already installed" here, without the network); `apt-get clean all`
# cleans as `dnf clean all` does.
APT_BASE_ARGS = {"PKGMGR": "/usr/bin/apt-get", "PYCMD": "/usr/bin/python3", "PYPKG": "python3"}
# The build arguments that describe a base (the Containerfile's EE_BASE_IMAGE aside).
BASE_ARG_NAMES = sorted(APT_BASE_ARGS)
# The Debian root's Python: a virtualenv of the system's, since Debian disables ensurepip, which ansible-builder
# installs pip with, for the system python.
DEBIAN_PYCMD = "/opt/ansible/bin/python3"


class BuildError(Exception):
    pass


def run(*argv, **kwargs):
    try:
        done = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              check=False, **kwargs)
    except OSError as error:
        raise BuildError("%s: %s. Fix: install it (scripts/dev ee installs Docker and ansible-builder)" % (
            argv[0], error.strerror)) from None
    if done.returncode != 0:
        raise BuildError("%s failed (exit %d):\n%s" % (" ".join(argv), done.returncode, done.stdout[-4000:]))
    return done.stdout


def debian_base():
    """The Debian root as a local image (made once, then cached by its package list)."""
    sys.path.insert(0, str(REPO / "tests"))
    from twin.lifecycle import Twin  # noqa: PLC0415 (the twin's root builder, only for this base)
    return Twin().base_image("ee")


def collection_tarball():
    """The collection's tarball, built now into build/ (the definition copies it from there)."""
    from collection import build as build_collection  # noqa: PLC0415 (scripts/, beside this file, as sanity.py)
    return build_collection(BUILD)  # a pathlib.Path


def collection_checksums(tarball):
    """The collection's MANIFEST.json and FILES.json (every file's sha256): what it holds, unlike the tarball's
    bytes, which change with each build's timestamps."""
    with tarfile.open(str(tarball)) as archive:
        return b"".join(archive.extractfile(name).read() for name in ("MANIFEST.json", "FILES.json"))


def version(tarball):
    with tarfile.open(str(tarball)) as archive:
        return json.loads(archive.extractfile("MANIFEST.json").read())["collection_info"]["version"]


def inputs_hash(base, build_args, tarball):
    digest = hashlib.sha256()
    for part in (image_id(base) or base, json.dumps(build_args, sort_keys=True), DEFINITION.read_text()):
        digest.update(part.encode() + b"\0")
    digest.update(collection_checksums(tarball))
    return digest.hexdigest()[:12]


def image_id(image):
    """The local image's id; None when Docker has no such image (or no Docker is here)."""
    try:
        done = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, universal_newlines=True, check=False)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def build(base_choice, own_args=None):
    """The EE image built (or found built) for a base (own_args: build arguments for a base of your own); its tag."""
    tarball = collection_tarball()
    if base_choice == DEBIAN:
        base, build_args = debian_base(), dict(APT_BASE_ARGS, PYCMD=DEBIAN_PYCMD)
    elif base_choice == UBI:
        base, build_args = None, {}
    else:
        base, build_args = base_choice, dict(own_args or {})
    if base:
        build_args["EE_BASE_IMAGE"] = base
    tag = "%s:%s-%s" % (REPOSITORY, version(tarball), inputs_hash(base or UBI, build_args, tarball))
    latest = "%s:%s" % (REPOSITORY, version(tarball))
    if image_id(tag):
        print("ee: %s is built from these inputs already" % tag, flush=True)
    else:
        print("ee: building %s on %s (ansible-builder, a few minutes)" % (tag, base or "the definition's base"),
              flush=True)
        with tempfile.TemporaryDirectory(dir=str(BUILD)) as context:
            argv = [str(pathlib.Path(sys.executable).parent / "ansible-builder"), "build", "-f", str(DEFINITION),
                    "-c", context, "--container-runtime", "docker", "-t", tag, "-v", "1"]
            for name, value in sorted(build_args.items()):
                argv += ["--build-arg", "%s=%s" % (name, value)]
            # Docker's legacy builder: no buildx plugin, and a local base is used as it is, never pulled.
            run(*argv, cwd=str(REPO), env=dict(os.environ, DOCKER_BUILDKIT="0"))
    run("docker", "tag", tag, latest)
    remove_older(tag)
    return tag


def remove_older(tag):
    """Untag the images this script built before from other inputs (each is some 500 MB): the newest serves."""
    listed = run("docker", "image", "ls", REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}").split()
    older = [name for name in listed if name != tag and "-" in name.rpartition(":")[2]]
    for name in older:
        try:
            run("docker", "image", "rm", name)
        except BuildError as error:  # in use by a job's container: kept, and said
            print("ee: %s is kept: %s" % (name, str(error).splitlines()[-1]), flush=True)


@contextlib.contextmanager
def one_build_at_a_time():
    """Held while a build runs: a second one (scripts/dev test builds in the background while the tests that run jobs
    in the image may build it too) waits for the first, then finds its image, rather than building it again beside
    it."""
    with open(str(LOCK), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # let go as the file closes, however the build ends
        yield


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=DEBIAN, help="debian (made here, the default), ubi (the definition's "
                        "base) or an image of your own")
    parser.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE",
                        help="for a base of your own: PKGMGR, PYCMD or PYPKG (ansible-builder's build arguments)")
    args = parser.parse_args(argv)
    own_args = dict(item.partition("=")[::2] for item in args.build_arg)
    unknown = sorted(set(own_args) - set(BASE_ARG_NAMES))
    if unknown or not all(own_args.values()):
        parser.error("--build-arg %s: expected NAME=VALUE, NAME one of %s" % (
            (unknown or [name for name, value in own_args.items() if not value])[0], ", ".join(BASE_ARG_NAMES)))
    if own_args and args.base in (DEBIAN, UBI):
        parser.error("--build-arg is for a base of your own (--base IMAGE): the %s base has its own" % args.base)
    BUILD.mkdir(exist_ok=True)
    try:
        with one_build_at_a_time():
            print(build(args.base, own_args))
    except BuildError as error:
        sys.exit("scripts/ee.py: %s" % error)


if __name__ == "__main__":
    main()
