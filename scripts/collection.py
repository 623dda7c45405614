#!/usr/bin/env python3
"""Build the collection ascend.fleet from this repository: the tarball `ansible-galaxy collection install` takes.

collections/ansible_collections/ascend/fleet is the collection's layout, made of relative links into the checkout
(library/ as plugins/modules, module_utils/, plugins/*, roles/, playbooks/, meta/, templates/, galaxy.yml, the
README and LICENSE): it is what Ansible loads from a checkout. The build copies that tree with the links followed,
leaving out Python's caches, and hands the copy to `ansible-galaxy collection build`; so a checkout and an
installed collection hold the same files under the same names.
Usage: .venv/bin/python scripts/collection.py [OUTPUT_DIR]   (default: build/; prints the tarball's path)
"""
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
LAYOUT = REPO / "collections" / "ansible_collections" / "ascend" / "fleet"
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def lay_out(root):
    """The collection's files under root/ansible_collections/ascend/fleet, links followed; its path."""
    collection = root / "ansible_collections" / "ascend" / "fleet"
    shutil.copytree(str(LAYOUT), str(collection), symlinks=False, ignore=LEFT_OUT)
    return collection


def build(output_dir):
    """The tarball of the collection (ascend-fleet-<version>.tar.gz) in output_dir; its path."""
    output_dir = pathlib.Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    galaxy = pathlib.Path(sys.executable).parent / "ansible-galaxy"
    with tempfile.TemporaryDirectory(prefix="collection-") as scratch:
        collection = lay_out(pathlib.Path(scratch))
        shown = subprocess.run([str(galaxy), "collection", "build", "--force", "--output-path", str(output_dir),
                                str(collection)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
    if shown.returncode != 0:
        raise SystemExit("ansible-galaxy collection build failed (exit %d):\n%s" % (shown.returncode, shown.stdout))
    # "Created collection for ascend.fleet at /path/ascend-fleet-0.1.0.tar.gz"
    return pathlib.Path(shown.stdout.strip().splitlines()[-1].rsplit(" at ", 1)[1])


def main(argv):
    print(build(argv[0] if argv else REPO / "build"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
