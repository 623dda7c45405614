"""ascend-vllm-fleet's command (cli.py) and its live view (view.py), run from a checkout.

They import the collection's own code (module_utils, plugin_utils) by the names Ansible gives it,
``ansible_collections.ascend.fleet.plugins...``, through Ansible's collection loader pointed at the checkout's
collections/ folder: the same files under the same names as in a playbook run, on a host or installed from Galaxy.
"""
import pathlib

from ansible.plugins.loader import init_plugin_loader

REPO = pathlib.Path(__file__).resolve().parent.parent
# collections/ansible_collections/ascend/fleet: relative links to library/, module_utils/, plugins/, roles/, ...
COLLECTIONS = REPO / "collections"

init_plugin_loader([str(COLLECTIONS)])
