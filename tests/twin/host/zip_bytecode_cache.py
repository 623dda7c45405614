"""Keeps the bytecode of modules Python imports from zip archives, keyed by their source.

Every Ansible task sends its module with its module_utils as a zip, and Python compiles whatever it imports from
a zip on every import: about 0.1 CPU-s of each task on a twin host, where the hosts of a fleet share the two cores
of the machine that runs the tests. A real host compiles the same code and has the cores for it; nothing the
playbooks do or see changes here, only how long it takes. Loaded at start-up from zip-bytecode-cache.pth.

Only root writes the cache, in its own home as Ansible keeps its working files there (the playbooks' tasks run as
root), so no other user's code is run as root's.

Every Python program on a twin host loads this (npu-smi's emulator about twenty times per fact gathering), so it
imports only what start-up has already loaded: the import system's own modules, not importlib.util.
"""

import _frozen_importlib_external
import _imp
import marshal
import os
import zipimport

MAGIC_NUMBER = _frozen_importlib_external.MAGIC_NUMBER

CACHE_DIR = "/root/.cache/zip-bytecode"
_compile_source = zipimport._compile_source


def _cached_compile_source(pathname, source):
    import hashlib  # here, not at start-up: most programs never import from a zip

    entry = os.path.join(CACHE_DIR, hashlib.sha256(MAGIC_NUMBER + source).hexdigest())
    try:
        with open(entry, "rb") as cached:
            code = marshal.load(cached)
    except (OSError, EOFError, ValueError, TypeError):
        code = _compile_source(pathname, source)
        if os.geteuid() == 0:
            _store(entry, code)
        return code
    # The archive's path (a new temporary folder per task) is where tracebacks point to.
    _imp._fix_co_filename(code, pathname)
    return code


def _store(entry, code):
    partial = "%s.%d" % (entry, os.getpid())
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        with open(partial, "wb") as out:
            marshal.dump(code, out)
        os.replace(partial, entry)
    except OSError:
        pass


zipimport._compile_source = _cached_compile_source
