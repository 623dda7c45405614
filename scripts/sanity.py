#!/usr/bin/env python3
"""Run Ansible's own sanity suite (`ansible-test sanity`) on the modules, packaged as a collection.

Lays library/ and module_utils/ out in a temporary folder as the collection `ascend.fleet` exactly as a user
packaging them would (modules under plugins/modules, shared code under plugins/module_utils with its imports
rewritten to the collection path), and runs the sanity tests that apply to modules, each in a virtualenv
ansible-test makes from the package registry. No finding is ignored: the collection has no ignore file.
Usage: .venv/bin/python scripts/sanity.py [ansible-test sanity options, e.g. --test pylint]
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
NAMESPACE, NAME = "ascend", "fleet"
# The tests that judge modules and module_utils; the others (changelogs, shebangs of scripts, ...) are about
# a published collection's own files, which this repository is not.
TESTS = ("validate-modules", "pylint", "pep8", "import", "ansible-doc", "yamllint", "compile")
MODULE_UTILS_IMPORT = re.compile(r"^from ansible\.module_utils\.(?!basic\b|common\b|six\b)(\w+) import", re.M)
GALAXY = """namespace: {namespace}
name: {name}
version: 1.0.0
readme: README.md
authors:
  - ascend-vllm-fleet contributors
description: Modules that take Atlas 300I Duo (310P3) hosts to serving vLLM-Ascend
license:
  - GPL-3.0-or-later
"""


def lay_out(root):
    """The collection tree under root/ansible_collections/<namespace>/<name>; returns its path."""
    collection = root / "ansible_collections" / NAMESPACE / NAME
    modules = collection / "plugins" / "modules"
    module_utils = collection / "plugins" / "module_utils"
    modules.mkdir(parents=True)
    module_utils.mkdir(parents=True)
    prefix = "from ansible_collections.%s.%s.plugins.module_utils.\\1 import" % (NAMESPACE, NAME)
    for source in sorted((REPO / "library").glob("*.py")):
        (modules / source.name).write_text(MODULE_UTILS_IMPORT.sub(prefix, source.read_text()))
    for source in sorted((REPO / "module_utils").glob("*.py")):
        (module_utils / source.name).write_text(MODULE_UTILS_IMPORT.sub(prefix, source.read_text()))
    (collection / "galaxy.yml").write_text(GALAXY.format(namespace=NAMESPACE, name=NAME))
    (collection / "meta").mkdir()
    (collection / "meta" / "runtime.yml").write_text("---\nrequires_ansible: '>=2.15.0'\n")
    shutil.copy(REPO / "README.md", collection / "README.md")
    shutil.copy(REPO / "LICENSE", collection / "LICENSE")
    return collection


# ansible-test bootstraps pip in its virtualenvs with a get-pip script it downloads from its own CI host,
# which an offline site cannot reach. This stand-in does the same from the package registry: the pip that
# ships with Python (ensurepip), then `pip install` of the pinned packages ansible-test asks for.
GET_PIP_STANDIN = """\
\"\"\"get-pip stand-in for ansible-test (written by ascend-vllm-fleet's scripts/sanity.py).\"\"\"
import subprocess
import sys

# In its own process: ensurepip turns pip's configuration off in the environment of the process it runs in.
subprocess.check_call([sys.executable, "-m", "ensurepip"], stdout=subprocess.DEVNULL)
arguments = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "--quiet"] + arguments))
"""


def install_get_pip_standin():
    """Put the stand-in where ansible-test looks for its cached get-pip script, unless a script is there."""
    import ansible_test

    source = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    found = re.search(r"\bpip='([0-9.]+)'", source.read_text())
    if not found:
        sys.exit("scripts/sanity.py: found no pip version in %s; this ansible-test bootstraps pip another way: "
                 "update install_get_pip_standin" % source)
    cache = pathlib.Path.home() / ".ansible" / "test" / "cache" / ("get_pip_%s.py" % found.group(1).replace(".", "_"))
    if not cache.exists() or "get-pip stand-in for ansible-test" in cache.read_text():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(GET_PIP_STANDIN)


def main(argv):
    python = "%d.%d" % sys.version_info[:2]
    args = list(argv) or [arg for test in TESTS for arg in ("--test", test)]
    install_get_pip_standin()
    ansible_test = pathlib.Path(sys.executable).parent / "ansible-test"
    with tempfile.TemporaryDirectory(prefix="sanity-") as scratch:
        collection = lay_out(pathlib.Path(scratch))
        command = [str(ansible_test), "sanity", "--venv", "--python", python, "--color", "no"] + args
        print("ascend.fleet collection in %s; %s" % (collection, " ".join(command[1:])), flush=True)
        return subprocess.run(command, cwd=str(collection)).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
