"""The collection as a user gets it: the tarball scripts/collection.py builds, installed with ansible-galaxy into an
empty collections path, deploys a twin host from a project of the user's own that names everything by its full
name, and knows nothing of this checkout: the instance the checkout deployed is removed and the installed
collection starts it again, from the same spec; its verification (ascend.fleet.verify) then passes on the host,
without anything of the checkout's tests."""
import json
import os
import subprocess
import sys

import pytest
from readme_commands import readme_block, recap, run_command

from conftest import REPO, run_playbook, venv_tool
from twin_fleet import DEFAULT_CONTAINER as NAME
from twin_fleet import LABEL

pytestmark = pytest.mark.docker
HOST = "npu-c"  # the shared single host: two cards, deployed from the checkout
# A user's own project: its own ansible.cfg, which finds collections only where the user installed them.
CONFIG = """[defaults]
collections_path = {collections}
collections_scan_sys_path = False
interpreter_python = auto_silent
host_key_checking = True
retry_files_enabled = False
[ssh_connection]
pipelining = True
"""
PLAYBOOK = """---
- name: The whole deploy, as the collection ships it
  ansible.builtin.import_playbook: ascend.fleet.site

- name: The collection's modules and roles in a play of the user's own
  hosts: ascend
  gather_facts: false
  become: true
  tasks:
    - name: Gather the NPU facts
      ascend.fleet.npu_facts:
    - name: Read the serving plan the deploy recorded
      ascend.fleet.vllm_plan_info:
        path: /etc/vllm-ascend/plan.json
        host: "{{ inventory_hostname }}"
      register: recorded
    - name: Plan a benchmark of it by the module's old name, which still works for a release
      ascend.fleet.vllm_load_test:
        base_url: "http://127.0.0.1:{{ recorded.plan.instances[0].port }}"
        image_sizes: [640x480]
        max_tokens: [32]
        concurrency: [1]
      check_mode: true
      register: planned
    - name: Show what the user's play read
      ansible.builtin.debug:
        msg: "chips {{ ansible_facts.ascend.chip_count }}, instances {{ recorded.plan.instances | length }},
          groups planned {{ planned.planned | length }}"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The collections path the built tarball was installed into, and the tarball."""
    scratch = tmp_path_factory.mktemp("collection")
    built = subprocess.run([sys.executable, str(REPO / "scripts" / "collection.py"), str(scratch / "dist")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert built.returncode == 0, built.stdout
    tarball = built.stdout.strip().splitlines()[-1]
    collections = scratch / "collections"
    shown = subprocess.run([venv_tool("ansible-galaxy"), "collection", "install", "--offline", "--force", "-p",
                            str(collections), tarball], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, check=False)
    assert shown.returncode == 0, shown.stdout
    return collections, tarball


def test_the_tarball_holds_the_collection_and_nothing_of_the_checkout(installed):
    collections, tarball = installed
    root = collections / "ansible_collections" / "ascend" / "fleet"
    manifest = json.loads((root / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"]) == ("ascend", "fleet")
    assert tarball.endswith("ascend-fleet-%s.tar.gz" % manifest["version"])
    files = {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}
    # Every module, module_utils file and role of the checkout, under the collection's names.
    for module in (REPO / "library").glob("*.py"):
        assert "plugins/modules/%s" % module.name in files
    for util in (REPO / "module_utils").glob("*.py"):
        assert "plugins/module_utils/%s" % util.name in files
    for role in (REPO / "roles").iterdir():
        assert "roles/%s/tasks/main.yml" % role.name in files
    assert {"playbooks/site.yml", "meta/runtime.yml", "plugins/doc_fragments/attributes.py",
            "plugins/filter/vllm_server.py", "plugins/action/vllm_bench_follow.py",
            "plugins/plugin_utils/report.py", "templates/report.html.j2"} <= files
    # The verification ships with it: its playbook, its role entry point, its module and the judge.
    assert {"playbooks/verify.yml", "roles/vllm_server/tasks/verify.yml", "plugins/modules/fleet_verify.py",
            "plugins/module_utils/verification.py"} <= files
    assert not [path for path in root.rglob("*") if path.is_symlink()]
    assert not [name for name in files if name.startswith(("tests/", "inventory/", "collections/"))
                or "__pycache__" in name]


def test_a_users_playbook_of_full_names_deploys_from_the_installed_collection(installed, shared_single, tmp_path):
    collections, _tarball = installed
    fleet = shared_single
    project = tmp_path / "project"
    project.mkdir()
    (project / "ansible.cfg").write_text(CONFIG.format(collections=collections))
    (project / "deploy.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(project / "ansible.cfg"))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    # ansible-doc names the file it found: the installed collection's, not the checkout's.
    doc = subprocess.run([venv_tool("ansible-doc"), "--json", "ascend.fleet.npu_facts"], cwd=str(project), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["ascend.fleet.npu_facts"]["doc"]["filename"].startswith(str(collections))

    # The host was deployed from the checkout; its instance goes, and the installed collection brings it back.
    deployed = fleet[HOST].inspect(NAME)["Config"]["Labels"]["%s.config-hash" % LABEL]
    fleet[HOST].docker("rm", "-f", NAME)
    fleet.write([HOST])
    run = run_playbook(tmp_path / "run", fleet.inventory, str(project / "deploy.yml"),
                       config=project / "ansible.cfg")
    assert run.rc == 0, run.stdout
    assert run.stats["changed"].get(HOST, 0) > 0 and not run.stats["failures"] and not run.stats["dark"], run.stats
    # It serves again, from the very spec the checkout rendered.
    serving = fleet[HOST].inspect(NAME)
    assert serving["State"]["Running"] and serving["Config"]["Labels"]["%s.config-hash" % LABEL] == deployed
    assert "chips 4, instances 1, groups planned 1" in run.stdout, run.stdout
    assert "vllm_load_test is now ascend.fleet.vllm_benchmark" in run.stdout, run.stdout
    # The host serves what it recorded, by the installed collection's own verification (the project finds only the
    # installed collection: its ansible.cfg, run in its folder).
    verified = subprocess.run([venv_tool("ansible-playbook"), "-i", str(fleet.inventory), "ascend.fleet.verify"],
                              cwd=str(project), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=900, check=False)
    assert verified.returncode == 0, verified.stdout[-4000:]
    assert "PLAY [Verify that every host serves what its deploy recorded]" in verified.stdout, verified.stdout[-4000:]
    assert recap(verified.stdout)[HOST][1:] == (0, 0, 0), verified.stdout[-4000:]


def test_the_collection_commands_as_written(shared_single, tmp_path):
    """The README's steps, typed as written from the checkout: build the tarball, install it into a collections
    path (a temporary one here, for ~/.ansible/collections), deploy from it (nothing to change on the deployed host)
    and read a module's documentation."""
    inventory = str(shared_single.write([HOST]))
    collections = tmp_path / "collections"
    replacements = [("~/.ansible/collections", str(collections)), ("inventory/<site>/hosts.yml", inventory)]
    outputs = {}
    for command in readme_block(
            "tests/integration/test_installed_collection.py::test_the_collection_commands_as_written"):
        ran = run_command(command, replacements)
        assert ran.code == 0, "%s: exit %d\n%s\n%s" % (command, ran.code, ran.stdout[-4000:], ran.stderr[-2000:])
        outputs[command] = ran.stdout + ran.stderr
    assert (collections / "ansible_collections" / "ascend" / "fleet" / "MANIFEST.json").is_file()
    (deployed,) = [output for command, output in outputs.items() if "ascend.fleet.site" in command]
    assert recap(deployed)[HOST][1:] == (0, 0, 0), deployed[-4000:]
    (doc,) = [output for command, output in outputs.items() if command.startswith("ansible-doc")]
    assert "ascend.fleet.npu_facts" in doc
