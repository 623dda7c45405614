"""The callbacks of every Ansible run the tests start (tests/ansible_plugins/callback/): module payloads kept for the
next run, under a name that changes with anything a payload is made of (kept_ansiballz.py), and the collection's
filters imported once, before the first task forks a worker (preloaded_filters.py)."""
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO

CALLBACKS = REPO / "tests" / "ansible_plugins" / "callback"
# Where the payloads are kept under XDG_CACHE_HOME, which run() sets to tmp_path / "cache".
KEPT = "cache/ascend-vllm-fleet-tests/ansiballz"
PLAYBOOK = """\
- name: Two modules of ansible-core and one of ascend.fleet
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
    - name: Stat
      ansible.builtin.stat:
        path: /
    - name: A module of the collection
      ascend.fleet.folder_files:
        dest: {folder}
        files: {{}}
"""


@pytest.fixture(scope="module")
def kept():
    spec = importlib.util.spec_from_file_location("kept_ansiballz", str(CALLBACKS / "kept_ansiballz.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def collection(base, module_text):
    (base / "plugins" / "modules").mkdir(parents=True)
    (base / "plugins" / "module_utils").mkdir()
    (base / "plugins" / "modules" / "probe.py").write_text(module_text)
    (base / "plugins" / "module_utils" / "shared.py").write_text("VALUE = 1\n")
    return base


def test_the_name_changes_with_a_module_file_a_module_utils_file_and_the_collections_path(kept, tmp_path):
    first = collection(tmp_path / "a", "print(1)\n")
    key = kept.payloads_key(first)
    assert kept.payloads_key(first) == key
    assert kept.payloads_key(collection(tmp_path / "b", "print(1)\n")) != key
    (first / "plugins" / "modules" / "probe.py").write_text("print(2)\n")
    assert kept.payloads_key(first) not in (key, kept.payloads_key(tmp_path / "b"))
    second = kept.payloads_key(first)
    (first / "plugins" / "module_utils" / "shared.py").write_text("VALUE = 2\n")
    assert kept.payloads_key(first) != second
    assert kept.payloads_key(None) != key


def play(tmp_path):
    """The playbook above in tmp_path, with the folder its collection's module writes to."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "play.yml").write_text(PLAYBOOK.format(folder=tmp_path / "folder"))


def run(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    done = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                           "ansible_python_interpreter=" + sys.executable, str(tmp_path / "play.yml")],
                          cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    assert done.returncode == 0, done.stdout
    assert "ok=3" in done.stdout, done.stdout
    return done


def test_a_second_run_uses_the_payloads_the_first_built_and_the_runs_own_folder_goes(kept, tmp_path):
    play(tmp_path)
    run(tmp_path)
    [folder] = (tmp_path / KEPT).iterdir()
    assert folder.name == kept.payloads_key(REPO / "collections" / "ansible_collections" / "ascend" / "fleet")
    payloads = {path.name: path.stat().st_mtime_ns for path in folder.iterdir() if not path.name.endswith(".lock")}
    assert set(payloads) == {"ansible.modules.ping-ZIP_DEFLATED-none", "ansible.modules.stat-ZIP_DEFLATED-none",
                             "ansible_collections.ascend.fleet.plugins.modules.folder_files-ZIP_DEFLATED-none"}
    run(tmp_path)
    assert {path.name: path.stat().st_mtime_ns for path in folder.iterdir()
            if not path.name.endswith(".lock")} == payloads
    # ansible-core removes each run's temporary folder; the link in it goes, the payloads stay.
    assert list((tmp_path / "local").iterdir()) == []


def test_a_folder_no_run_used_for_a_week_is_removed_and_a_recent_one_kept(tmp_path):
    kept_root = tmp_path / KEPT
    old, recent = kept_root / "0ld", kept_root / "recent"
    for folder in (old, recent):
        folder.mkdir(parents=True)
        (folder / "payload").write_text("x")
    week_ago = time.time() - 8 * 86400
    os.utime(str(old), (week_ago, week_ago))
    play(tmp_path)
    run(tmp_path)
    assert not old.exists()
    assert (recent / "payload").exists()


# In a Python of its own, whose imports are its own: the callback made as Ansible makes it, then a filter looked up as
# a template does; prints the collection's filter modules the lookup imported, and the module of the filter's code.
LOOKUP = """
import importlib.util, json, sys
import ascend_vllm_fleet
from ansible.plugins.loader import filter_loader
spec = importlib.util.spec_from_file_location("preloaded_filters", sys.argv[1])
callback = importlib.util.module_from_spec(spec)
spec.loader.exec_module(callback)
callback.CallbackModule()
before = set(sys.modules)
found = filter_loader.get("ascend.fleet.gateway_server_name")
print(json.dumps({"imported": sorted(name for name in set(sys.modules) - before
                                     if name.startswith("ansible_collections.")),
                  "preloaded": sorted(name for name in before if name.startswith(callback.FILTERS + ".")),
                  "module": found.j2_function.__module__}))
"""


def test_a_filter_looked_up_after_the_callback_imports_no_filter_file_again():
    done = subprocess.run([sys.executable, "-c", LOOKUP, str(CALLBACKS / "preloaded_filters.py")], cwd=str(REPO),
                          stdout=subprocess.PIPE, universal_newlines=True, check=True)
    seen = json.loads(done.stdout)
    files = sorted(path.stem for path in (REPO / "plugins" / "filter").glob("*.py"))
    assert seen["preloaded"] == ["ansible_collections.ascend.fleet.plugins.filter." + stem for stem in files]
    assert seen["imported"] == []
    assert seen["module"] == "ansible_collections.ascend.fleet.plugins.filter.gateway"
