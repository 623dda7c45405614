"""The test tree as pytest collects it: its test modules are imported by their file name alone, so two of one
name in different folders make the second fail to collect ("import file mismatch"), after a fleet was built."""
import collections

from conftest import PAIR_MODULES, REPO, run_order


def test_no_two_test_modules_share_a_file_name():
    names = collections.defaultdict(list)
    for path in (REPO / "tests").rglob("test_*.py"):
        names[path.name].append(str(path.relative_to(REPO)))
    assert [paths for paths in names.values() if len(paths) > 1] == []


def test_the_pair_goes_out_first_and_the_tests_without_a_fleet_last():
    """Under --dist loadscope the scopes go out in collection order: the pair, the longest, must not wait behind
    another scope, and the small unit and local scopes are what a worker that is free at the end picks up."""
    modules = sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                     if path.parts[-2] in ("integration", "local") or "unit" in path.parts)
    ordered = sorted(modules, key=run_order)
    pair = [module for module in ordered if module in PAIR_MODULES]
    assert ordered[:len(pair)] == pair and sorted(pair) == sorted(PAIR_MODULES)
    rest = ordered[len(pair):]
    fleets = [module for module in rest if module.startswith("tests/integration/")]
    assert fleets and rest[:len(fleets)] == fleets
    assert {module.split("/")[1] for module in rest[len(fleets):]} == {"local", "unit"}
