"""Every variable a role accepts (meta/argument_specs.yml) is documented in that role's README, and every filter the
collection exports is documented where ansible-doc finds it (plugins/filter/<name>.yml)."""
import importlib
import json
import subprocess

import pytest
import yaml

from conftest import REPO, venv_tool

ROLES = sorted(path.parent.parent.name for path in REPO.glob("roles/*/meta/argument_specs.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_documents_every_variable(role):
    options = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())
    readme = (REPO / "roles" / role / "README.md").read_text()
    documented = [name for entry in options["argument_specs"].values() for name in entry.get("options", {})]
    missing = [name for name in documented if "`%s`" % name not in readme]
    assert missing == [], "roles/%s/README.md does not document: %s" % (role, ", ".join(missing))


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_in_the_argument_specs(role):
    """In the entry point of the tasks that read it: main, or another (vllm_image's archive)."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text()) or {}
    specs = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
    missing = sorted(set(defaults) - {option for entry in specs.values() for option in entry.get("options", {})})
    assert missing == [], "roles/%s/meta/argument_specs.yml lacks: %s" % (role, ", ".join(missing))


def exported_filters():
    """Every filter the collection's filter plugins export, by name."""
    names = set()
    for path in (REPO / "plugins" / "filter").glob("*.py"):
        module = importlib.import_module("ansible_collections.ascend.fleet.plugins.filter." + path.stem)
        names |= set(module.FilterModule().filters())
    return sorted(names)


def test_every_filter_is_documented_as_ansible_doc_shows_it():
    names = exported_filters()
    shown = subprocess.run([venv_tool("ansible-doc"), "-t", "filter", "--json"] + ["ascend.fleet." + name
                                                                                   for name in names],
                           cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert shown.returncode == 0, shown.stderr
    docs = json.loads(shown.stdout)
    undocumented = [name for name in names if not (docs.get("ascend.fleet." + name) or {}).get("doc")]
    assert undocumented == [], "no plugins/filter/<name>.yml that ansible-doc reads for: %s\n%s" % (
        ", ".join(undocumented), shown.stderr)
    for name in names:
        shown_doc = docs["ascend.fleet." + name]
        doc = shown_doc["doc"]
        assert doc["name"] == name and doc["short_description"] and doc["description"], name
        assert "_input" in doc["options"] and "_value" in shown_doc["return"], name
        # Users copy the examples ansible-doc shows: each calls its filter by its full name.
        assert "ascend.fleet.%s" % name in shown_doc["examples"], name


def test_each_filter_documentation_file_is_of_an_exported_filter():
    # A file named after no filter documents nothing: ansible-doc finds a filter's documentation by its name.
    files = sorted(path.stem for path in (REPO / "plugins" / "filter").glob("*.yml"))
    assert sorted(set(files) - set(exported_filters())) == []


def test_every_module_is_documented_as_ansible_doc_shows_it():
    """ansible-doc renders each module's documentation (a description line holding ': ' is YAML's mapping, not the
    text it reads as, and ansible-doc then refuses the whole page); every text of it is text."""
    names = sorted(path.stem for path in (REPO / "library").glob("*.py"))
    shown = subprocess.run([venv_tool("ansible-doc"), "--json"] + ["ascend.fleet." + name for name in names],
                           cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert shown.returncode == 0 and not shown.stderr.strip(), shown.stderr
    docs = json.loads(shown.stdout)

    def texts(value):
        return [item for part in value for item in texts(part)] if isinstance(value, list) else [value]

    for name in names:
        doc = docs["ascend.fleet." + name]["doc"]
        assert all(isinstance(line, str) for line in texts(doc["description"])), (name, doc["description"])
        for option, spec in doc.get("options", {}).items():
            assert all(isinstance(line, str) for line in texts(spec["description"])), (name, option)
