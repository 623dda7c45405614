"""Code that runs on the managed hosts (library/, module_utils/): Python 3.8 syntax, the project's license."""
import ast

import pytest

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
