"""Use the collection's Ansible modules from controller-side Python (tests, benchmarks/ scripts).

Ansible ships a module with the module_utils it imports; here the same files are made importable directly.
"""
import importlib
import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def load_library_module(name):
    """Import library/<name>.py with this repository's module_utils in place."""
    import ansible.module_utils

    for path in sorted((REPO / "module_utils").glob("*.py")):
        qualified = "ansible.module_utils." + path.stem
        if qualified not in sys.modules:
            spec = importlib.util.spec_from_file_location(qualified, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[qualified] = module
            setattr(ansible.module_utils, path.stem, module)
    if str(REPO / "library") not in sys.path:
        sys.path.insert(0, str(REPO / "library"))
    return importlib.import_module(name)
