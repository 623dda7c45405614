"""The NPU collector runs on the hosts from the module_utils files the role writes (host_exporters_npu_modules, found
by the module_utils_closure filter from the collector's imports, their texts read by module_utils_sources): they
must be every file its imports reach, as they are, or the service dies at start with an ImportError."""
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.ascend.fleet.plugins.filter.host_code import (
    PACKAGE,
    module_utils_closure,
    module_utils_sources,
)
from conftest import REPO

ROLE = REPO / "roles" / "host_exporters"


def collector():
    """The module the unit and the init script run (python -m <package>.<module>), as a file name."""
    names = {re.search(r" -m %s\.(\w+) " % re.escape(PACKAGE), (ROLE / "templates" / name).read_text()).group(1)
             for name in ("npu-exporter.service.j2", "npu-exporter.init.j2")}
    (name,) = names
    return name + ".py"


def imports_alone(folder, files, module):
    """Whether `module` imports with nothing but `files` of module_utils in the layout the role copies them in, and
    the standard library (no site-packages: the hosts need none)."""
    package = folder / PACKAGE.replace(".", "/")
    package.mkdir(parents=True)
    for name in files:
        shutil.copy(REPO / "module_utils" / name, package / name)
    code = "import sys; sys.path.insert(0, %r); import %s.%s" % (str(folder), PACKAGE, module[:-len(".py")])
    return subprocess.run([sys.executable, "-I", "-S", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=60)


def test_the_role_copies_the_closure_of_the_module_its_service_runs():
    copied = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["host_exporters_npu_modules"]
    assert copied == "{{ host_exporters_module_utils | ascend.fleet.module_utils_closure('%s') }}" % collector()


def test_the_role_writes_each_of_them_with_its_text_in_one_task():
    (task,) = yaml.safe_load((ROLE / "tasks" / "npu.yml").read_text())[:1]
    assert "loop" not in task and task["ascend.fleet.folder_files"]["files"] == (
        "{{ host_exporters_npu_modules | ascend.fleet.module_utils_sources(host_exporters_module_utils) }}")
    names = module_utils_closure(str(REPO / "module_utils"), collector())
    sources = module_utils_sources(names, str(REPO / "module_utils"))
    assert list(sources) == names
    assert {name: text.encode() for name, text in sources.items()} == {
        name: (REPO / "module_utils" / name).read_bytes() for name in names}


def test_a_file_that_is_missing_or_no_text_is_refused_naming_it(tmp_path):
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe")
    for name in ("gone.py", "binary.py"):
        expected = r"%s cannot be read as text.*Fix" % re.escape(str(tmp_path / name))
        with pytest.raises(AnsibleFilterError, match=expected):
            module_utils_sources([name], str(tmp_path))


def test_the_collector_starts_from_the_files_the_filter_finds_and_the_standard_library(tmp_path):
    files = module_utils_closure(str(REPO / "module_utils"), collector())
    assert files[0] == collector() and len(files) > 1
    done = imports_alone(tmp_path / "closure", files, collector())
    assert done.returncode == 0, done.stdout
    # The folder is all it has: without the files it imports, it does not start.
    alone = imports_alone(tmp_path / "alone", files[:1], collector())
    assert alone.returncode != 0 and "ModuleNotFoundError" in alone.stdout, alone.stdout


def write(folder, name, text):
    (folder / name).write_text(text, encoding="utf-8")


def test_every_kind_of_import_is_followed_once_and_nothing_else(tmp_path):
    write(tmp_path, "root.py", "import os\nfrom %s.a import x\nimport %s.b as b\n" % (PACKAGE, PACKAGE))
    write(tmp_path, "a.py", "from %s import c, d\n" % PACKAGE)
    write(tmp_path, "b.py", "def later():\n    from .e import y\n    from . import a\n")
    write(tmp_path, "c.py", "from %s.root import z\n" % PACKAGE)  # a cycle
    for name in ("d.py", "e.py", "unused.py"):
        write(tmp_path, name, "from ansible.module_utils.basic import AnsibleModule\n")
    assert module_utils_closure(str(tmp_path), "root.py") == ["root.py", "a.py", "b.py", "c.py", "d.py", "e.py"]


def test_an_import_of_a_missing_file_is_refused_naming_both(tmp_path):
    write(tmp_path, "root.py", "from %s.gone import x\n" % PACKAGE)
    with pytest.raises(AnsibleFilterError, match=r"gone\.py \(imported by root\.py\) cannot be read as Python.*Fix"):
        module_utils_closure(str(tmp_path), "root.py")
