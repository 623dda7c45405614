"""The module_utils files a piece of host code needs there, found from its imports: the host_exporters role copies
the NPU collector with them, so that its list can miss none (the collector would die at start with an ImportError).
"""
import ast
import os

from ansible.errors import AnsibleFilterError

# The package of the collection's module_utils, as the code imports it on the controller and on the hosts.
PACKAGE = "ansible_collections.ascend.fleet.plugins.module_utils"


def imported(tree):
    """The names of the module_utils modules a parsed file imports, wherever it does (a function's imports too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = PACKAGE + ("." + node.module if node.module else "") if node.level == 1 else node.module
            if module == PACKAGE:
                yield from (alias.name for alias in node.names)
            elif module and module.startswith(PACKAGE + "."):
                yield module[len(PACKAGE) + 1:].split(".")[0]
        elif isinstance(node, ast.Import):
            yield from (alias.name[len(PACKAGE) + 1:].split(".")[0] for alias in node.names
                        if alias.name.startswith(PACKAGE + "."))


def module_utils_closure(folder, root):
    """The file names of `root`, a file of the module_utils folder, and of every module_utils file its imports
    reach: root first, then the others sorted."""
    found, todo = [], [(root, None)]
    while todo:
        name, importer = todo.pop()
        if name in found:
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), filename=path)
        except (OSError, SyntaxError, ValueError) as error:
            raise AnsibleFilterError("module_utils_closure: %s%s cannot be read as Python (%s): expected a module of "
                                     "the collection's module_utils. Fix: name a file of %s, and import only modules "
                                     "that are there" % (path, " (imported by %s)" % importer if importer else "",
                                                         error, folder)) from None
        found.append(name)
        todo.extend((module + ".py", name) for module in imported(tree))
    return found[:1] + sorted(found[1:])


class FilterModule:
    def filters(self):
        return {"module_utils_closure": module_utils_closure}
