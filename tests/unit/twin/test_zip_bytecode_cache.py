"""The twin host's cache of bytecode compiled from zip archives: a hit runs the same code as a compile, points its
tracebacks at the archive it came from, and a changed source is compiled afresh."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE_MODULE = Path(__file__).resolve().parents[2] / "twin" / "host" / "zip_bytecode_cache.py"

# Imports `probe` from each archive in a fresh interpreter with the cache installed, as a twin host's start-up does;
# prints what each import ran and where its code says it came from.
IMPORTER = """
import importlib, json, runpy, sys
cache = runpy.run_path(sys.argv[1])  # installs the cache
cache["_cached_compile_source"].__globals__["CACHE_DIR"] = sys.argv[2]
cache["os"].geteuid = lambda: 0
seen = []
for archive in sys.argv[3:]:
    sys.path.insert(0, archive)
    sys.modules.pop("probe", None)
    importlib.invalidate_caches()
    probe = importlib.import_module("probe")
    seen.append({"answer": probe.answer(), "file": probe.answer.__code__.co_filename})
    sys.path.remove(archive)
print(json.dumps(seen))
"""


def make_archive(folder, name, answer):
    archive = folder / name
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("probe.py", "def answer():\n    return %r\n" % answer)
    return archive


def import_from(cache_dir, *archives):
    run = subprocess.run([sys.executable, "-c", IMPORTER, str(CACHE_MODULE), str(cache_dir), *map(str, archives)],
                         capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def test_a_second_import_is_served_from_the_cache_and_points_at_its_own_archive(tmp_path):
    cache_dir = tmp_path / "cache"
    first = make_archive(tmp_path, "first.zip", 42)
    second = make_archive(tmp_path, "second.zip", 42)

    seen = import_from(cache_dir, first, second)

    assert [each["answer"] for each in seen] == [42, 42]
    assert len(list(cache_dir.iterdir())) == 1, "one source, one entry: the second import was a hit"
    assert seen[0]["file"].startswith(str(first))
    assert seen[1]["file"].startswith(str(second)), "a hit keeps the path of the archive it was imported from"


def test_a_changed_source_is_compiled_again(tmp_path):
    cache_dir = tmp_path / "cache"
    old = make_archive(tmp_path, "old.zip", "old")
    new = make_archive(tmp_path, "new.zip", "new")

    assert [each["answer"] for each in import_from(cache_dir, old, new)] == ["old", "new"]
    assert len(list(cache_dir.iterdir())) == 2


def test_a_broken_entry_is_compiled_and_replaced(tmp_path):
    cache_dir = tmp_path / "cache"
    archive = make_archive(tmp_path, "probe.zip", "fine")
    import_from(cache_dir, archive)
    (entry,) = cache_dir.iterdir()
    entry.write_bytes(b"not bytecode")

    assert import_from(cache_dir, archive)[0]["answer"] == "fine"
    assert entry.read_bytes() != b"not bytecode"
