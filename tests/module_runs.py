"""Running a module of library/ as Ansible does, and judging a refusal: what the tests of the modules share.

run_module runs a module as Ansible does, in a process of its own with its arguments in a file, so a traceback
is seen as Ansible would see it: on stderr, with no JSON result.
"""
import json
import subprocess
import sys
import tempfile

from conftest import REPO, load_library_module

# The module's own process: the tests' loader puts the module_utils in place, `prepare` may then replace a
# function of the module to make it break.
RUN_MODULE = "from %s import load_library_module\nmodule = load_library_module(%%r)\n%%s\nmodule.main()\n" % (
    load_library_module.__module__)
SECRET = "sk-do-not-show-this"
# A `prepare` for run_module: Docker CLI calls end after 1 s instead of docker_cli.DEFAULT_TIMEOUT_S.
SHORT_DOCKER_TIMEOUT = "import ansible.module_utils.docker_cli as docker_cli\ndocker_cli.DEFAULT_TIMEOUT_S = 1"


def run_module(module, prepare="", **args):
    """The result library/<module>.py prints for args; fails the test on a traceback or a result that is no JSON."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as args_file:  # not in tmp_path, which tests list
        json.dump({"ANSIBLE_MODULE_ARGS": args}, args_file)
        args_file.flush()
        shown = subprocess.run([sys.executable, "-c", RUN_MODULE % (module, prepare), args_file.name],
                               cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=120)
    assert "Traceback" not in shown.stderr + shown.stdout, shown.stderr + shown.stdout
    return json.loads(shown.stdout)


def assert_refused(result, *expected):
    """The module failed, and its message holds every expected piece (the input, the expectation, the fix)."""
    assert result.get("failed") is True, result
    for piece in expected:
        assert piece in result["msg"], "%r not in %r" % (piece, result["msg"])
    assert "Fix:" in result["msg"], result["msg"]
