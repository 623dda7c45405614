"""Every variable a role accepts (meta/argument_specs.yml) is documented in that role's README."""
import pytest
import yaml

from conftest import REPO

ROLES = sorted(path.parent.parent.name for path in REPO.glob("roles/*/meta/argument_specs.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_documents_every_variable(role):
    options = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())
    readme = (REPO / "roles" / role / "README.md").read_text()
    missing = [name for name in options["argument_specs"]["main"]["options"] if "`%s`" % name not in readme]
    assert missing == [], "roles/%s/README.md does not document: %s" % (role, ", ".join(missing))


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_in_the_argument_specs(role):
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text()) or {}
    options = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())
    missing = sorted(set(defaults) - set(options["argument_specs"]["main"]["options"]))
    assert missing == [], "roles/%s/meta/argument_specs.yml lacks: %s" % (role, ", ".join(missing))
