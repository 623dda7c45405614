"""Run Ansible's own sanity suite (`ansible-test sanity`) on the collection ascend.fleet as it is built.

Builds the tarball (scripts/collection.py), installs it into a temporary collections path as a user would, and
runs every sanity test there (or those named), each in a virtualenv ansible-test makes from the package registry.
No finding is ignored: the collection has no ignore file.
Usage: .venv/bin/python scripts/sanity.py [ansible-test sanity options, e.g. --test pylint]
"""
import pathlib
import re
import subprocess
import sys
import tempfile

from collection import build

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
    args = list(argv)
    install_get_pip_standin()
    bin_dir = pathlib.Path(sys.executable).parent
    with tempfile.TemporaryDirectory(prefix="sanity-") as scratch:
        tarball = build(pathlib.Path(scratch) / "dist")
        installed = pathlib.Path(scratch) / "installed"
        # --force: the checkout's own collections/ holds ascend.fleet too, and Ansible's configured paths see it.
        subprocess.run([str(bin_dir / "ansible-galaxy"), "collection", "install", "--offline", "--force",
                        "-p", str(installed), str(tarball)], check=True, stdout=subprocess.DEVNULL)
        collection = installed / "ansible_collections" / "ascend" / "fleet"
        command = [str(bin_dir / "ansible-test"), "sanity", "--venv", "--python", python, "--color", "no"] + args
        print("%s installed in %s; %s" % (tarball.name, collection, " ".join(command[1:])), flush=True)
        return subprocess.run(command, cwd=str(collection)).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
