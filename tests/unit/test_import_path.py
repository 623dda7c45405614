"""One name for each file of the collection's code: ansible_collections.ascend.fleet.<path>, as Ansible gives it on
a host, in a playbook run and from an installed collection. Nothing loads the code by its file path or edits
the import path, and the checkout's collection layout is made of links to the files themselves."""
import os
import re

import pytest

from conftest import REPO

COLLECTION = REPO / "collections" / "ansible_collections" / "ascend" / "fleet"
# Where the collection's and the command's code lives.
CODE = ("library", "module_utils", "plugins", "roles", "ascend_vllm_fleet")
# What a second way in to a file would look like.
SECOND_WAY_IN = re.compile(r"\bsys\.path\b|PYTHONPATH|spec_from_file_location|\bimportlib\.util\b|"
                           r"^\s*(from|import) ansible\.module_utils\.(?!basic\b|common\b|six\b)\w+", re.M)
OWN_NAMES = sorted(path.stem for folder in ("module_utils", "library") for path in (REPO / folder).glob("*.py"))
BARE_IMPORT = re.compile(r"^\s*(?:from (%s)\b[\w.]* import|import (%s)\b)" % (("|".join(OWN_NAMES),) * 2), re.M)


def code_files(*folders):
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*") if path.suffix in (".py", ".yml"))


@pytest.mark.parametrize("path", code_files(*CODE), ids=lambda path: str(path.relative_to(REPO)))
def test_the_code_reaches_the_collection_by_its_name_alone(path):
    found = SECOND_WAY_IN.search(path.read_text(encoding="utf-8"))
    assert found is None, "%s: %r; import ansible_collections.ascend.fleet.<path> instead" % (path, found.group(0))


def test_tests_and_benchmarks_import_the_collection_as_the_code_does():
    bare = {str(path.relative_to(REPO)): match.group(0).strip() for path in code_files("tests", "benchmarks")
            if path.suffix == ".py" and "twin" not in path.relative_to(REPO).parts[:2]
            for match in [BARE_IMPORT.search(path.read_text(encoding="utf-8"))] if match}
    assert bare == {}


def test_the_checkouts_collection_is_links_to_the_files_themselves():
    links = {str(path.relative_to(COLLECTION)): os.readlink(str(path)) for path in COLLECTION.rglob("*")
             if path.is_symlink()}
    assert links and all(not target.startswith("/") for target in links.values()), links
    targets = {str((COLLECTION / name).resolve().relative_to(REPO)) for name in links}
    assert {"library", "module_utils", "roles", "playbooks", "meta", "templates", "galaxy.yml", "plugins/filter",
            "plugins/action", "plugins/plugin_utils", "plugins/doc_fragments"} <= targets
    # Every folder of plugins/ is in the collection, so a plugin added there is never left out of it.
    assert {"plugins/" + path.name for path in (REPO / "plugins").iterdir() if path.is_dir()} <= targets
    # The only real folders are the ones a collection must have and the checkout has no folder for.
    assert {str(path.relative_to(COLLECTION)) for path in COLLECTION.rglob("*")
            if path.is_dir() and not path.is_symlink()} == {"plugins"}


def test_no_module_is_taken_for_a_test():
    """pytest's default patterns, which other tools share: test_*.py and *_test.py."""
    assert [path.name for path in (REPO / "library").glob("*.py")
            if path.name.startswith("test_") or path.name.endswith("_test.py")] == []


ROLES = sorted(path.name for path in (REPO / "roles").iterdir())
BARE_ROLE = re.compile(r"^\s*(?:- )?(?:role|name): (%s)\s*$" % "|".join(ROLES), re.M)


@pytest.mark.parametrize("readme", sorted(str(path.relative_to(REPO)) for path in [REPO / "README.md",
                                                                                  REPO / "README.zh-CN.md"]
                                          + list((REPO / "roles").glob("*/README.md"))))
def test_the_readmes_examples_name_roles_as_the_collection_does(readme):
    """A role's short name resolves only where roles_path finds it; users copy these examples into their own
    playbooks, which find the collection's roles by their full names."""
    examples = "\n".join(block for block in re.findall(r"```ya?ml\n(.*?)```", (REPO / readme).read_text(), re.S))
    assert BARE_ROLE.findall(examples) == []
