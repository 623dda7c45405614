"""The collection's host code (library/ and module_utils/) imported by controller-side Python: the report, the
command, the vllm_bench role's filters, tests and benchmarks/ scripts.

Ansible ships a module with the module_utils it imports, as ansible.module_utils.<name>; here the same files
are made importable under the same names, so the controller runs exactly the code the hosts run.
"""
import importlib
import importlib.util
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
# The collection's own module_utils imports (Ansible's basic, common and six are already importable).
OWN_IMPORT = re.compile(r"^from ansible\.module_utils\.(?!basic\b|common\b|six\b)(\w+) import", re.M)


def load_module_util(name):
    """module_utils/<name>.py as ansible.module_utils.<name>, after the module_utils it imports."""
    import ansible.module_utils

    qualified = "ansible.module_utils." + name
    if qualified not in sys.modules:
        path = REPO / "module_utils" / (name + ".py")
        for needed in OWN_IMPORT.findall(path.read_text(encoding="utf-8")):
            load_module_util(needed)
        spec = importlib.util.spec_from_file_location(qualified, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[qualified] = module
        setattr(ansible.module_utils, name, module)
    return sys.modules[qualified]


def load_library_module(name):
    """Import library/<name>.py with the module_utils it imports in place."""
    for needed in OWN_IMPORT.findall((REPO / "library" / (name + ".py")).read_text(encoding="utf-8")):
        load_module_util(needed)
    if str(REPO / "library") not in sys.path:
        sys.path.insert(0, str(REPO / "library"))
    return importlib.import_module(name)
