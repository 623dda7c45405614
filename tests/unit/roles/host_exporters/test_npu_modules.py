"""The NPU collector runs on the hosts from the module_utils files the role copies (host_exporters_npu_modules):
they must be every file its imports reach, or the service dies at start with an ImportError."""
import ast

import yaml

from conftest import REPO

PACKAGE = "ansible_collections.ascend.fleet.plugins.module_utils"


def imported_module_utils(name):
    """The module_utils files a module_utils file imports, directly."""
    tree = ast.parse((REPO / "module_utils" / name).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE + "."):
            found.add(node.module[len(PACKAGE) + 1:].split(".")[0] + ".py")
        elif isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            found.update(alias.name + ".py" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(PACKAGE) + 1:].split(".")[0] + ".py" for alias in node.names
                         if alias.name.startswith(PACKAGE + "."))
    return found


def test_the_collector_is_copied_with_every_module_util_it_imports():
    closure, todo = set(), ["npu_exporter.py"]
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo.extend(imported_module_utils(name))
    copied = yaml.safe_load((REPO / "roles/host_exporters/vars/main.yml").read_text())["host_exporters_npu_modules"]
    assert sorted(copied) == sorted(closure)
