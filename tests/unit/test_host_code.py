"""Code that runs on the managed hosts (library/, module_utils/): Python 3.8 syntax, the project's license."""
import ast

import pytest
import yaml

from conftest import REPO

HOST_CODE = sorted((REPO / "library").glob("*.py")) + sorted((REPO / "module_utils").glob("*.py"))
LICENSE_LINE = "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)"


@pytest.mark.parametrize("path", HOST_CODE, ids=lambda path: path.name)
def test_parses_as_python_3_8(path):
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))


@pytest.mark.parametrize("path", HOST_CODE, ids=lambda path: path.name)
def test_states_the_license_in_its_header(path):
    assert LICENSE_LINE in path.read_text(encoding="utf-8").splitlines()[:5]
    assert (REPO / "LICENSE").read_text().startswith("                    GNU GENERAL PUBLIC LICENSE\n")


def command_tasks(tasks):
    """Every command or shell task of a task list, blocks included."""
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        for part in ("block", "rescue", "always"):
            yield from command_tasks(task.get(part))
        if "ansible.builtin.command" in task or "ansible.builtin.shell" in task:
            yield task


@pytest.mark.parametrize("path", sorted((REPO / "roles").glob("*/tasks/*.yml")),
                         ids=lambda path: "%s/%s" % (path.parts[-3], path.name))
def test_every_command_a_role_runs_on_a_host_has_an_end(path):
    """A wedged daemon or installer answers nothing: each command task ends at its timeout (or async's limit)."""
    unbounded = [task.get("name") for task in command_tasks(yaml.safe_load(path.read_text()))
                 if "timeout" not in task and "async" not in task]
    assert unbounded == [], unbounded
