"""The two files of the API key, each named for what it holds: a module's env_file is the instance's env file on
the host, with a VLLM_API_KEY=<key> line (vllm_probe and vllm_benchmark read the key from it there); the fleet
role's fleet_api_key_file is the controller's file of the bare key. The modules' option was called api_key_file
until 0.1.0: that name still works, as a deprecated alias of env_file, until 1.0.0, and comes back as nothing else."""
import importlib
import json
import re

import pytest
import yaml
from fake_vllm import MODEL, Handler, server  # noqa: F401  (the fixture)
from module_runs import MODULES, SECRET, assert_refused, run_module

from conftest import REPO

OLD_NAME = "api_key_file"
OLD_NAME_ALIAS = {"name": OLD_NAME, "version": "1.0.0", "collection_name": "ascend.fleet"}
# The modules that read the key on the host, with arguments that make each send a request or two.
KEY_READERS = {
    "vllm_probe": {"model": MODEL, "image_size": "32x24", "answer_check": "none", "timeout": 30},
    "vllm_benchmark": {"image_sizes": ["32x24"], "max_tokens": [3], "concurrency": [1], "requests_per_group": 1,
                       "warmup_requests": 0, "answer_check": "none"},
}
MODULE_NAMES = sorted(path.stem for path in (REPO / "library").glob("*.py"))


class SpecSeen(BaseException):
    """Ends a module's main() once it has built its AnsibleModule, past any `except Exception` of main()."""


def argument_spec(name, monkeypatch):
    """The argument spec library/<name>.py gives AnsibleModule, or its action plugin's when it runs on the
    controller only (a module of documentation alone)."""
    module = importlib.import_module(MODULES + "." + name)
    if not hasattr(module, "main"):
        return importlib.import_module("ansible_collections.ascend.fleet.plugins.action." + name).ARGUMENT_SPEC
    seen = {}

    def recording(*args, **kwargs):
        seen["spec"] = args[0] if args else kwargs["argument_spec"]
        raise SpecSeen

    monkeypatch.setattr(module, "AnsibleModule", recording)
    with pytest.raises(SpecSeen):
        module.main()
    return seen["spec"]


def options_of(spec, prefix=""):
    """Every option of an argument spec, its suboptions included, by its dotted name."""
    for option, settings in spec.items():
        yield prefix + option, settings
        yield from options_of(settings.get("options") or {}, prefix + option + ".")


def env_file(tmp_path, content):
    path = tmp_path / "vllm-ascend.env"
    path.write_text(content)
    return str(path)


@pytest.mark.parametrize("option", ["env_file", OLD_NAME])
@pytest.mark.parametrize("name", sorted(KEY_READERS))
def test_the_key_is_read_from_the_instances_env_file_by_either_name(server, tmp_path, name, option):  # noqa: F811
    path = env_file(tmp_path, "VLLM_HOST_IP=127.0.0.1\nVLLM_API_KEY=%s\n" % SECRET)
    result = run_module(name, base_url=server, **dict(KEY_READERS[name], **{option: path}))
    assert not result.get("failed"), result
    keys = [key for request_path, key in Handler.seen if request_path.startswith("/v1/")]
    assert keys and set(keys) == {"Bearer " + SECRET}, Handler.seen
    deprecations = json.dumps(result.get("deprecations", []))
    if option == OLD_NAME:
        assert "Alias 'api_key_file' is deprecated" in deprecations and '"1.0.0"' in deprecations, deprecations
        assert '"ascend.fleet"' in deprecations, deprecations
    else:
        assert deprecations == "[]"
    assert SECRET not in json.dumps(result)


@pytest.mark.parametrize("name", sorted(KEY_READERS))
def test_the_controllers_file_of_the_bare_key_is_refused_for_the_env_file(server, tmp_path, name):  # noqa: F811
    path = env_file(tmp_path, SECRET + "\n")
    result = run_module(name, base_url=server, **dict(KEY_READERS[name], env_file=path))
    assert_refused(result, "env_file %s holds no VLLM_API_KEY=<key> line" % path, "not a file of the bare key",
                   "<fleet_config_dir>/<instance>.env")
    assert SECRET not in json.dumps(result)


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_api_key_file_is_no_modules_option_but_the_deprecated_alias_of_env_file(name, monkeypatch):
    spec = dict(options_of(argument_spec(name, monkeypatch)))
    assert [option for option in spec if option.rpartition(".")[2] == OLD_NAME] == []
    for option, settings in spec.items():
        if OLD_NAME in settings.get("aliases", []):
            assert option == "env_file" and OLD_NAME_ALIAS in settings.get("deprecated_aliases", []), (option, settings)


@pytest.mark.parametrize("name", sorted(KEY_READERS))
def test_the_key_readers_document_env_file_as_the_hosts_env_file(name, monkeypatch):
    settings = argument_spec(name, monkeypatch)["env_file"]
    assert settings["type"] == "path" and settings.get("no_log") is not True  # a path: the key is masked once read
    assert settings["deprecated_aliases"] == [OLD_NAME_ALIAS]
    documented = yaml.safe_load(importlib.import_module(MODULES + "." + name).DOCUMENTATION)["options"]["env_file"]
    assert documented["aliases"] == [OLD_NAME]
    text = " ".join(documented["description"])
    for piece in ("The instance's env file on the host", "C(VLLM_API_KEY=<key>)", "Not the controller's file of the "
                  "bare key", "C(fleet_api_key_file)", "C(api_key_file) is its name until 0.1.0, deprecated", "1.0.0"):
        assert piece in text, "%r not in the env_file docs of %s: %s" % (piece, name, text)


def test_the_roles_and_playbooks_call_the_modules_option_by_its_name():
    """A task with the old name would print a deprecation warning at every deploy."""
    old = re.compile(r"(?<![\w.])%s\s*[:=]" % OLD_NAME)
    found = ["%s:%d" % (path.relative_to(REPO), number)
             for folder in ("roles", "playbooks") for path in sorted((REPO / folder).rglob("*.yml"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if old.search(line)]
    assert found == []


def test_the_fleet_roles_key_file_is_documented_as_the_controllers_file_of_the_bare_key():
    specs = yaml.safe_load((REPO / "roles/fleet/meta/argument_specs.yml").read_text(encoding="utf-8"))
    description = specs["argument_specs"]["settings"]["options"]["fleet_api_key_file"]["description"]
    for piece in ("on the controller", "the bare key and nothing else", "Not the instance's env file",
                  "VLLM_API_KEY=", "env_file"):
        assert piece in description, description
    readme = (REPO / "roles/fleet/README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `fleet_api_key_file` |"))
    assert "the bare key and nothing else" in row and "`VLLM_API_KEY=`" in row and "`env_file`" in row, row
