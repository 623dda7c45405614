"""Running a module of library/ as Ansible does, and judging a refusal: what the tests of the modules share.

run_module runs a module as Ansible does, in a process of its own with its arguments in a file, so a traceback
is seen as Ansible would see it: on stderr, with no JSON result.
"""
import json
import os
import subprocess
import sys
import tempfile

from conftest import REPO, venv_tool

# The module's own process, as on a host: Ansible's payload puts ansible_collections/ on the path and the module
# is imported by its collection name, with no controller code loaded; `prepare` may then replace a function of the
# module to make it break.
MODULE_ENV = dict(os.environ, PYTHONPATH=str(REPO / "collections"))
MODULES = "ansible_collections.ascend.fleet.plugins.modules"
RUN_MODULE = "import importlib\nmodule = importlib.import_module('" + MODULES + ".%s')\n%s\nmodule.main()\n"
SECRET = "sk-do-not-show-this"
# A `prepare` for run_module: Docker CLI calls end after 1 s instead of docker_cli.DEFAULT_TIMEOUT_S.
SHORT_DOCKER_TIMEOUT = ("from ansible_collections.ascend.fleet.plugins.module_utils import docker_cli\n"
                        "docker_cli.DEFAULT_TIMEOUT_S = 1")


def run_module(module, prepare="", **args):
    """The result library/<module>.py prints for args; fails the test on a traceback or a result that is no JSON."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as args_file:  # not in tmp_path, which tests list
        json.dump({"ANSIBLE_MODULE_ARGS": args}, args_file)
        args_file.flush()
        shown = subprocess.run([sys.executable, "-c", RUN_MODULE % (module, prepare), args_file.name],
                               cwd=str(REPO), env=MODULE_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=120)
    assert "Traceback" not in shown.stderr + shown.stdout, shown.stderr + shown.stdout
    return json.loads(shown.stdout)


def module_doc(module):
    """What ansible-doc shows of the collection's module (its doc fragments merged in), as JSON."""
    shown = subprocess.run([venv_tool("ansible-doc"), "--json", "ascend.fleet." + module], cwd=str(REPO),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["ascend.fleet." + module]


def assert_refused(result, *expected):
    """The module failed, and its message holds every expected piece (the input, the expectation, the fix)."""
    assert result.get("failed") is True, result
    for piece in expected:
        assert piece in result["msg"], "%r not in %r" % (piece, result["msg"])
    assert "Fix:" in result["msg"], result["msg"]
