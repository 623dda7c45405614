"""The test tree as pytest collects it: its test modules are imported by their file name alone, so two of one
name in different folders make the second fail to collect ("import file mismatch"), after a fleet was built."""
import collections

from conftest import REPO


def test_no_two_test_modules_share_a_file_name():
    names = collections.defaultdict(list)
    for path in (REPO / "tests").rglob("test_*.py"):
        names[path.name].append(str(path.relative_to(REPO)))
    assert [paths for paths in names.values() if len(paths) > 1] == []
