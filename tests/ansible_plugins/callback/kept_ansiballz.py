"""AnsiballZ payloads kept from one of the tests' Ansible runs to the next.

ansible-core builds a module's payload (the module with every module_utils file it imports, found by parsing each of
them) once per run, in a folder of the run's own that it deletes at the end: about 0.25 s of CPU a module, 3 to 6 s a
run of site.yml, and a third of a converged run's CPU on the controller. The tests run Ansible hundreds of times with
the same modules, so this callback, on ANSIBLE_CALLBACK_PLUGINS for every run the tests start (tests/conftest.py),
links that folder to one kept under the user's cache and named after everything a payload is made of: the Python and
ansible-core that run, and the path and the module files of the collection ascend.fleet this run resolves. A change to
any of them names another folder. ansible-core fills, locks and reads the folder as it does its own; a run's modules
and what they do are the same, only the payload is not built again. Users' runs have no such callback.
"""
import hashlib
import importlib
import os
import pathlib
import shutil
import sys
import time

import ansible
from ansible import constants
from ansible.plugins.callback import CallbackBase

# ansible-core's name for the folder of a run's payloads, in the run's temporary folder
# (ansible/executor/module_common.py, _find_module_utils).
PAYLOADS = "ansiballz_cache"
# A folder of payloads no run used for this long is removed (each is a few MB).
UNUSED_DAYS = 7


def resolved_collection():
    """The folder of ascend.fleet as this run resolves it, or None."""
    try:
        return pathlib.Path(importlib.import_module("ansible_collections.ascend.fleet").__file__).parent
    except (ImportError, TypeError):
        return None


def payloads_key(collection):
    """Names everything a payload is made of: Python, ansible-core, and the collection's path and module files."""
    digest = hashlib.sha256()
    for part in (sys.version, ansible.__version__, os.path.dirname(ansible.__file__), str(collection)):
        digest.update(part.encode() + b"\0")
    for folder in ("plugins/modules", "plugins/module_utils") if collection else ():
        for root, _, names in sorted(os.walk(str(collection / folder), followlinks=True)):
            for name in sorted(names):
                if not name.endswith(".pyc"):
                    path = pathlib.Path(root, name)
                    digest.update(str(path).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def kept_folder():
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache",
                        "ascend-vllm-fleet-tests", "ansiballz")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kept_ansiballz"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kept = kept_folder()
        folder = kept / payloads_key(resolved_collection())
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(str(folder))
        run_payloads = pathlib.Path(constants.DEFAULT_LOCAL_TMP, PAYLOADS)
        if not run_payloads.exists():
            # The run's temporary folder is removed at its end without following the link.
            run_payloads.symlink_to(folder, target_is_directory=True)
        unused_since = time.time() - UNUSED_DAYS * 86400
        for other in kept.iterdir():
            if other != folder and other.stat().st_mtime < unused_since:
                shutil.rmtree(str(other), ignore_errors=True)
