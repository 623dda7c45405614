"""The test tree as pytest collects it: its test modules are imported by their file name alone, so two of one
name in different folders make the second fail to collect ("import file mismatch"), after a fleet was built."""
import collections

from conftest import FLEET_OF_MODULE, LONGEST_SCOPES, REPO, SHARED_FLEET_MODULES, run_order


def test_no_two_test_modules_share_a_file_name():
    names = collections.defaultdict(list)
    for path in (REPO / "tests").rglob("test_*.py"):
        names[path.name].append(str(path.relative_to(REPO)))
    assert [paths for paths in names.values() if len(paths) > 1] == []


def test_the_longest_scopes_go_out_first_and_the_tests_without_a_fleet_last():
    """Under --dist loadscope the scopes go out in collection order: the longest must not wait behind another scope,
    and the small unit and local scopes are what a worker that is free at the end picks up."""
    modules = sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                     if path.parts[-2] in ("integration", "local") or "unit" in path.parts)
    ordered = sorted(modules, key=run_order)
    scopes = []
    for module in ordered:
        if FLEET_OF_MODULE.get(module, module) not in scopes:
            scopes.append(FLEET_OF_MODULE.get(module, module))
    assert scopes[:len(LONGEST_SCOPES)] == list(LONGEST_SCOPES)
    longest = [module for module in ordered if FLEET_OF_MODULE.get(module, module) in LONGEST_SCOPES]
    assert ordered[:len(longest)] == longest
    assert set(SHARED_FLEET_MODULES) <= set(LONGEST_SCOPES)
    rest = ordered[len(longest):]
    fleets = [module for module in rest if module.startswith("tests/integration/")]
    assert fleets and rest[:len(fleets)] == fleets
    assert {module.split("/")[1] for module in rest[len(fleets):]} == {"local", "unit"}


def test_a_module_belongs_to_one_shared_fleet_at_most():
    named = [module for modules in SHARED_FLEET_MODULES.values() for module in modules]
    assert len(named) == len(set(named)) and all((REPO / module).is_file() for module in named)
