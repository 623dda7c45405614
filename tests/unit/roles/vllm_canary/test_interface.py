"""The canary is one interface between roles: the server phase gives roles/vllm_canary what it needs as the canary's
own variables at its include and reads back one fact, vllm_canary_verdict; the canary gives roles/vllm_bench its
documented variables at its include. No role reads another's variables otherwise: a name read where it is not
given would couple the roles through whatever they happen to keep."""
import re

import pytest
import yaml

from conftest import REPO

# A variable of roles/vllm_server or roles/vllm_bench, read in a template or a condition. Filters and modules
# (ascend.fleet.vllm_bench_results_file) follow a dot, and are no variables.
SERVER_OR_BENCH = re.compile(r"(?<![.\w])vllm_(?:server|bench)_\w+")
CANARY = re.compile(r"(?<![.\w])vllm_canary_\w+")


def strings(node):
    """Every string value of parsed YAML (keys are names set, not read; comments are gone)."""
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def evaluated(role):
    """The role's parsed files Ansible evaluates: its tasks, defaults and vars."""
    folder = REPO / "roles" / role
    return {str(path.relative_to(REPO)): yaml.safe_load(path.read_text(encoding="utf-8"))
            for part in ("tasks", "defaults", "vars") for path in sorted((folder / part).glob("*.yml"))}


def includes(files, role):
    """The tasks of these files that include the role, however deep in blocks."""
    def walk(tasks):
        for task in tasks or []:
            for key in ("block", "rescue", "always"):
                yield from walk(task.get(key))
            if (task.get("ansible.builtin.include_role") or {}).get("name") == "ascend.fleet." + role:
                yield task
    return [task for tasks in files.values() if isinstance(tasks, list) for task in walk(tasks)]


def read_names(files, pattern):
    """{file: sorted names matching the pattern} read anywhere in the files' values."""
    found = {}
    for path, content in files.items():
        names = sorted(set(name for text in strings(content) for name in pattern.findall(text)))
        if names:
            found[path] = names
    return found


def test_the_scan_finds_a_variable_read_in_a_condition_or_a_template_and_not_a_filter():
    tasks = [{"name": "Probe", "ascend.fleet.vllm_probe": {"timeout": "{{ vllm_server_ready_timeout }}"},
              "when": "vllm_bench_keep_facts | bool",
              "loop": "{{ measured | map('ascend.fleet.vllm_bench_results_file', dir) }}"}]
    assert read_names({"tasks/main.yml": tasks}, SERVER_OR_BENCH) == {
        "tasks/main.yml": ["vllm_bench_keep_facts", "vllm_server_ready_timeout"]}


def test_the_canary_reads_no_variable_of_the_server_or_the_benchmark_it_is_not_given_at_include():
    server = evaluated("vllm_server")
    canary = evaluated("vllm_canary")
    (given_to_canary,) = includes(server, "vllm_canary")
    bench_includes = includes(canary, "vllm_bench")
    assert bench_includes, "roles/vllm_canary benchmarks through an include of roles/vllm_bench"
    given = set(given_to_canary.get("vars") or {})
    for task in bench_includes:
        given |= set(task.get("vars") or {})
    read = {path: [name for name in names if name not in given]
            for path, names in read_names(canary, SERVER_OR_BENCH).items()}
    assert {path: names for path, names in read.items() if names} == {}, (
        "roles/vllm_canary reads another role's variables: pass what it needs as a vllm_canary_ variable at its "
        "include (roles/vllm_server/tasks/05-finish.yml)")


@pytest.mark.parametrize("role", ["vllm_bench", "vllm_canary"])
def test_what_each_include_gives_is_a_documented_variable_of_the_role_included(role):
    includer = {"vllm_canary": "vllm_server", "vllm_bench": "vllm_canary"}[role]
    options = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text(encoding="utf-8"))[
        "argument_specs"]["main"]["options"]
    for task in includes(evaluated(includer), role):
        assert sorted(set(task.get("vars") or {}) - set(options)) == [], (
            "roles/%s gives roles/%s variables it does not document" % (includer, role))


def test_the_server_reads_only_the_canarys_verdict():
    server = evaluated("vllm_server")
    read = read_names(server, CANARY)
    assert {path: [name for name in names if name != "vllm_canary_verdict"] for path, names in read.items()
            if set(names) - {"vllm_canary_verdict"}} == {}
    assert "vllm_canary_verdict" in sum(read.values(), []), "the server phase reads the canary's verdict"


def test_the_canarys_defaults_are_what_the_server_phase_passes_and_it_keeps_runs_where_the_benchmark_does():
    """An include that gives no more than the instances gets the server's model and wait; and the gate looks for the
    baselines where playbooks/benchmark.yml records them: both roles take their folders from the fleet's
    settings, and neither states a path of its own."""
    canary, server, bench = (yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text(encoding="utf-8"))
                             for role in ("vllm_canary", "vllm_server", "vllm_bench"))
    assert canary["vllm_canary_served_name"] == server["vllm_server_served_name"]
    assert canary["vllm_canary_probe_timeout"] == server["vllm_server_ready_timeout"]
    fleet_settings = {"vllm_bench_results_dir": "fleet_bench_dir",
                      "vllm_bench_baselines_dir": "fleet_bench_baselines_dir",
                      "vllm_bench_facts_file": "fleet_bench_facts_file"}
    assert {name: bench[name] for name in fleet_settings} == {
        name: "{{ %s }}" % setting for name, setting in fleet_settings.items()}
    tasks = (REPO / "roles/vllm_canary/tasks/main.yml").read_text(encoding="utf-8")
    assert "/var/lib" not in tasks and "facts.d" not in tasks and not [name for name in canary if "_dir" in name]
    for setting in fleet_settings.values():
        assert setting in tasks, setting
    assert canary["vllm_canary_fleet_report"] is False and bench["vllm_bench_fleet_report"] is True
