"""What every module does with input it cannot use: an error that names the input, what was expected and the
fix, never a traceback, even when something unforeseen breaks (the per-module tables: the other
test_<module>.py files of this folder; run_module and assert_refused: tests/module_runs.py)."""
import importlib
import json

import pytest
import yaml
from module_runs import MODULES, SECRET, assert_refused, run_module

from conftest import REPO

# Per module: arguments it accepts, and a function of it replaced by one that breaks in a way nobody foresaw.
UNFORESEEN = {
    "model_files": ({"path": "/data/models/Qwen3-VL-8B-Instruct"}, "check_folder",
                    "checking the model folder /data/models/Qwen3-VL-8B-Instruct"),
    "docker_image_pull": ({"name": "quay.io/ascend/vllm-ascend:v1", "docker": "/nonexistent/docker"},
                          "make_present", "making the image quay.io/ascend/vllm-ascend:v1 present"),
    "npu_facts": ({"npu_smi": "/nonexistent/npu-smi"}, "Gatherer.gather", "gathering the NPU facts"),
    "vllm_probe": ({"model": "Qwen3-VL-8B-Instruct", "api_key": SECRET, "base_url": "http://127.0.0.1:9", "timeout": 1},
                   "probe", "probing http://127.0.0.1:9"),
    "vllm_benchmark": ({"api_key": SECRET, "base_url": "http://127.0.0.1:9", "_ansible_check_mode": True},
                       "run", "the load test of http://127.0.0.1:9"),
    "npu_holders": ({"docker": "/nonexistent/docker"}, "processes", "listing what holds the NPU device nodes in /dev"),
    "vllm_instance": ({"name": "vllm-ascend", "script": "/tmp/none.sh", "env_file": "/tmp/none.env", "state": "absent",
                       "api_key": SECRET}, "run", "vllm_instance vllm-ascend (state absent)"),
    "vllm_plan": ({"plan": {"host": "npu-a", "instances": []}, "path": "/tmp/plan.json", "config_dir": "/tmp/etc",
                   "cache_dir": "/tmp/cache", "salt_file": "/tmp/etc/salt"}, "refusals",
                  "recording the serving plan in /tmp/plan.json"),
    "vllm_plan_info": ({"path": "/tmp/plan.json", "host": "npu-a"}, "read", "reading the serving plan /tmp/plan.json"),
    "fleet_verify": ({"host": "npu-a", "driver_version": "25.5.2", "firmware_version": "7.8.0.7.220",
                      "api_key": SECRET, "plan_file": "/tmp/none/plan.json", "npu_smi": "/nonexistent/npu-smi"},
                     "judge", "verifying npu-a"),
    "model_download": ({"path": "/tmp/m", "source": "modelscope", "repo": "Qwen/Qwen3-VL-8B-Instruct",
                        "revision": "master", "token": SECRET}, "download",
                        "downloading Qwen/Qwen3-VL-8B-Instruct into /tmp/m"),
    "host_tuning": ({"sysctls": {"vm.swappiness": 0}}, "governor_setting", "reading the host's tuning"),
    "haproxy_server": ({"backend": "vllm_instances", "server": "npu-node-01:vllm-ascend", "state": "drain"}, "apply",
                       "setting vllm_instances/npu-node-01:vllm-ascend to drain through /run/haproxy/admin.sock"),
}


@pytest.mark.parametrize("name", sorted(UNFORESEEN))
def test_the_unforeseen_ends_in_a_message_that_says_what_was_being_done(name):
    args, function, doing = UNFORESEEN[name]
    owner, _dot, attribute = ("module." + function).rpartition(".")
    sabotage = "def broken(*args, **kwargs):\n    raise KeyError('unforeseen')\n%s.%s = broken" % (owner, attribute)
    result = run_module(name, prepare=sabotage, **args)
    assert_refused(result, doing, "failed unexpectedly", "KeyError", "unforeseen")
    assert SECRET not in json.dumps(result)  # the modules that take a token were given this one


@pytest.mark.parametrize("name,args,expected", [
    ("model_files", {}, "missing required arguments: path"),
    ("model_files", {"path": "/m", "fail_on_incomplete": "maybe"}, "fail_on_incomplete"),
    ("docker_image_pull", {"name": "x", "retries": "five"}, "retries"),
    ("npu_facts", {"timeout": "soon"}, "timeout"),
    ("vllm_probe", {"model": "m", "smoke_test": "perhaps"}, "smoke_test"),
    ("vllm_benchmark", {"concurrency": ["many"]}, "concurrency"),
    ("vllm_benchmark", {"requests": 5}, "Unsupported parameters"),
    ("haproxy_server", {"backend": "b", "server": "s", "state": "up"}, "state"),
    ("haproxy_server", {"backend": "b", "state": "drain"}, "missing required arguments: server"),
    ("vllm_instance", {"name": "n", "script": "/s", "env_file": "/e"}, "state is started but all of the following"),
    ("vllm_plan", {"plan": {}, "path": "/p", "config_dir": "/c", "cache_dir": "/k"}, "salt_file"),
    ("fleet_verify", {"host": "h"}, "missing required arguments: driver_version, firmware_version"),
    ("fleet_verify", {"host": "h", "driver_version": "1", "firmware_version": "1", "restart_policy": "sometimes"},
     "restart_policy"),
])
def test_ansibles_own_checks_name_the_option(name, args, expected):
    # The argument spec's checks come first; the modules rely on them for types, required and unknown options.
    result = run_module(name, **args)
    assert result["failed"] is True and expected in result["msg"]


@pytest.mark.parametrize("name, args", [
    ("path_mounts", {"paths": {"model": "/m"}, "dest": "/tmp/not-written.prom"}),
    ("docker_daemon_settings", {"path": "/tmp/not-written.json", "settings": {}}),
    ("folder_files", {"dest": "/tmp/not-written", "files": {}}),
])
def test_a_file_mode_that_is_no_octal_string_is_refused_alike(name, args):
    """The modules that write files read their mode with option_checks.octal_mode: one message, with the fix."""
    assert_refused(run_module(name, mode="rw-r--r--", **args), "mode 'rw-r--r--': expected an octal string such as "
                   "0644", 'Fix: quote it, "0644"')


@pytest.mark.parametrize("name", sorted(path.stem for path in (REPO / "library").glob("*.py")))
def test_each_modules_documentation_is_yaml(name):
    """ansible-doc and the sanity suite read them as YAML: a colon in a sentence breaks a whole module's docs."""
    module = importlib.import_module(MODULES + "." + name)
    for part in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(module, part)), "%s of %s" % (part, name)


@pytest.mark.parametrize("name", sorted(path.stem for path in (REPO / "library").glob("*.py")))
def test_the_examples_call_each_module_by_its_full_name(name):
    """Users copy the examples ansible-doc shows: a short name resolves nowhere but in a play naming the collection."""
    examples = yaml.safe_load(importlib.import_module(MODULES + "." + name).EXAMPLES)
    keywords = {"name", "register", "when", "run_once", "loop", "loop_control", "check_mode", "become", "vars",
                "delegate_to", "changed_when", "failed_when", "until", "retries", "delay", "async", "poll", "notify"}
    called = {key for task in examples for key in task if key not in keywords and not key.startswith("ansible.")}
    assert called == {"ascend.fleet." + name}, called
