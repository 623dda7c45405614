"""The collection's filter plugins imported once in ansible-playbook's main process, before its first task.

Each task runs on each host in a worker that the main process forks: what the main process imported, every worker
has. A filter it has not imported is imported again by every worker whose task uses it, and ascend.fleet's filters
import their plugin_utils and module_utils through Ansible's collection loader, which compiles their source anew at
each import (it keeps no bytecode): a fifth of a converged site.yml run's CPU on the controller. The tests put this
callback on ANSIBLE_CALLBACK_PLUGINS for every Ansible run they start (tests/conftest.py); a run's filters and what
they return are the same, only the imports are done once. Users' runs have no such callback.
"""
import importlib
import pathlib

from ansible.plugins.callback import CallbackBase

# The name ansible-core's plugin loader imports a collection's filter file by (PluginLoader._load_module_source); it
# imports none that sys.modules holds.
FILTERS = "ansible_collections.ascend.fleet.plugins.filter"


def filter_files():
    """The Python files of the collection's filter plugins, as this run resolves the collection; none where it does
    not."""
    try:
        return sorted(pathlib.Path(importlib.import_module(FILTERS).__file__).parent.glob("*.py"))
    except (ImportError, TypeError):
        return []


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "preloaded_filters"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for path in filter_files():
            importlib.import_module("%s.%s" % (FILTERS, path.stem))
