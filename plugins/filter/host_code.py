"""The module_utils files a piece of host code needs there, found from its imports, and their texts: the
host_exporters role writes the NPU collector with them, so that its list can miss none (the collector would die at
start with an ImportError).
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


def module_utils_sources(names, folder):
    """Each named file of the module_utils folder by its name, with its text as it is (the hosts run it): what the
    folder_files module writes on a host in one run."""
    sources = {}
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8", newline="") as handle:
                sources[name] = handle.read()
        except (OSError, ValueError) as error:
            raise AnsibleFilterError("module_utils_sources: %s cannot be read as text (%s): expected a file of the "
                                     "collection's module_utils. Fix: name files of %s (module_utils_closure finds "
                                     "them)" % (path, error, folder)) from None
    return sources


class FilterModule:
    def filters(self):
        return {"module_utils_closure": module_utils_closure, "module_utils_sources": module_utils_sources}
