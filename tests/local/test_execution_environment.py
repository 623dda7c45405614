"""The execution environment for AWX and Automation Platform (execution-environment.yml): `ansible-builder create`
writes its build context, offline, around the tarball scripts/collection.py builds, on the definition's own base (UBI,
which this machine cannot pull: tests/integration/test_awx_job.py builds the image on the project's own base and runs
jobs in it). What can fail before a build is checked here, offline: the tarball is in the context and
the Containerfile installs the collection from it, ansible-core and ansible-runner at requirements.txt's pins on a
Python that ansible-core takes, and the introspection the build runs collects the installed collection's matplotlib
(meta/execution-environment.yml) with every other Python package at requirements.txt's pin."""
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, venv_tool

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines):
    """name -> version of every `name==version` line (names as pip compares them)."""
    return {normal(found.group(1)): found.group(2) for found in map(PIN.match, lines) if found}


REQUIREMENTS = pins((REPO / "requirements.txt").read_text().splitlines())


def run(*command, **kwargs):
    shown = subprocess.run([str(part) for part in command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, check=False, **kwargs)
    assert shown.returncode == 0, shown.stdout
    return shown.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(build context, tarball): the repository's definition copied beside a tarball built for it in build/, where
    `scripts/dev collection` leaves it in a checkout, so that nothing is written into the checkout."""
    scratch = tmp_path_factory.mktemp("ee")
    tarball = pathlib.Path(run(sys.executable, REPO / "scripts" / "collection.py", scratch / "build")
                           .strip().splitlines()[-1])
    shutil.copy(str(REPO / "execution-environment.yml"), str(scratch / "execution-environment.yml"))
    run(venv_tool("ansible-builder"), "create", "-f", scratch / "execution-environment.yml",
        "-c", scratch / "context", "--output-filename", "Containerfile", cwd=str(scratch))
    return scratch / "context", tarball


def containerfile(context):
    return (context / "Containerfile").read_text().splitlines()


def test_the_collection_is_installed_from_the_tarball_in_the_context(built):
    context, tarball = built
    copied = context / "_build" / "collections" / tarball.name
    assert copied.is_file(), (
        "%s is not in the build context: execution-environment.yml names another tarball than scripts/collection.py "
        "builds (galaxy.yml's version)" % tarball.name)
    assert copied.read_bytes() == tarball.read_bytes()
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert galaxy == {"collections": [{"name": "collections/" + tarball.name, "type": "file"}]}
    # ansible-galaxy reads that relative name in /build, which holds the context's _build/.
    lines = containerfile(context)
    stage = lines[lines.index("FROM base AS galaxy"):]
    installs = [index for index, line in enumerate(stage) if line.startswith("RUN ")
                and re.search(r"\bansible-galaxy collection install .*-r requirements\.yml\b", line)]
    assert len(installs) == 1, "\n".join(stage)
    assert stage.index("COPY _build /build") < stage.index("WORKDIR /build") < installs[0]


def test_ansible_core_and_runner_are_installed_at_requirements_pins_on_a_python_they_take(built):
    context, _tarball = built
    lines = containerfile(context)
    args = dict(re.findall(r'^ARG (\w+)="(.*)"$', "\n".join(lines), flags=re.M))
    assert sorted(args["ANSIBLE_INSTALL_REFS"].split()) == [
        "ansible-core==%s" % REQUIREMENTS["ansible-core"], "ansible-runner==%s" % REQUIREMENTS["ansible-runner"]]
    assert "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS" in lines
    # ansible-core 2.19, matplotlib 3.11 and numpy 2.4 need Python 3.11 or later: the base image's python3 is older,
    # so the image installs a later one and everything runs on it.
    version = re.fullmatch(r"/usr/bin/python3\.(\d+)", args["PYCMD"])
    assert version and int(version.group(1)) >= 11, args["PYCMD"]
    assert args["PYPKG"] and any(line.startswith("RUN $PKGMGR install $PYPKG") for line in lines)


def test_the_build_collects_the_collections_matplotlib_and_every_package_at_requirements_pins(built, tmp_path):
    context, tarball = built
    # The collection installed as the image's galaxy stage installs it; then the introspection exactly as the
    # Containerfile runs it (in /build, which holds the context's _build/), on that collections path.
    # --force: ansible.cfg's collections path holds the checkout's own tree, which ansible-galaxy takes as installed.
    collections = tmp_path / "collections"
    run(venv_tool("ansible-galaxy"), "collection", "install", "--offline", "--force", "-p", collections, tarball)
    (line,) = [line for line in containerfile(context) if "/output/scripts/introspect.py introspect" in line]
    command = []
    for arg in shlex.split(line)[1:]:
        if arg == "$PYCMD":
            arg = sys.executable
        elif arg == "/output/scripts/introspect.py":
            arg = str(context / "_build" / "scripts" / "introspect.py")
        elif arg.startswith(("--write-pip=", "--write-bindep=")):
            arg = "%s=%s" % (arg.split("=")[0], tmp_path / arg.rsplit("/", 1)[1])
        command.append(arg)
    run(*command, collections, cwd=str(context / "_build"))

    collected = (tmp_path / "requirements.txt").read_text().splitlines()
    assert "matplotlib==%s  # from collection ascend.fleet" % REQUIREMENTS["matplotlib"] in collected, collected
    found = pins(collected)
    assert {name: version for name, version in found.items() if REQUIREMENTS.get(name) != version} == {}
    # Every line pins its package: nothing in the image floats but what pip resolves below the pins.
    assert len(found) == len(collected), collected
    assert "openssh-clients [platform:rpm]  # from collection user" in (tmp_path / "bindep.txt").read_text()
