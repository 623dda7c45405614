"""The preflight role's own settings (plugins/filter/ascend_preflight.py ascend_preflight_setting_problems), checked
once before any host is judged: each problem names the setting, what it is and what is expected."""
import json

import pytest

from ansible_collections.ascend.fleet.plugins.filter.ascend_preflight import ascend_preflight_setting_problems

GOOD_DISKS = [{"path": "/data/models", "min_free_gb": 20, "purpose": "the model weights"},
              {"path": "/var/lib/docker", "min_free_gb": 0}]


def test_quoted_versions_and_well_formed_disk_checks_are_no_problem():
    assert ascend_preflight_setting_problems("25.5.2", "7.8.0.7.220", GOOD_DISKS) == []
    assert ascend_preflight_setting_problems("25.5.2", "7.8.0.7.220", []) == []


@pytest.mark.parametrize("driver,firmware,expected", [
    (25.5, "7.8.0.7.220", 'ascend_preflight_driver_version is 25.5 (float): expected a quoted version string such '
                          'as "25.5.2" (unquoted, YAML turns 25.5 into a number and 7.10 into 7.1).'),
    ("25.5.2", 7.1, 'ascend_preflight_firmware_version is 7.1 (float): expected a quoted version string such as '
                    '"7.8.0.7.220".'),
    ("", "7.8.0.7.220", 'ascend_preflight_driver_version is "" (str)'),
    (None, "7.8.0.7.220", "ascend_preflight_driver_version is null (NoneType)"),
])
def test_a_version_that_is_no_string_is_named_with_its_type(driver, firmware, expected):
    (problem,) = ascend_preflight_setting_problems(driver, firmware, GOOD_DISKS)
    assert problem.startswith(expected), problem


@pytest.mark.parametrize("entry", [
    {"path": "data/models", "min_free_gb": 20},
    {"path": "/data/models", "min_free_gb": -1},
    {"path": "/data/models", "min_free_gb": "20"},
    {"path": "/data/models"},
    {"min_free_gb": 20},
    "/data/models",
])
def test_a_disk_check_without_an_absolute_path_and_a_size_is_named(entry):
    (problem,) = ascend_preflight_setting_problems("25.5.2", "7.8.0.7.220", GOOD_DISKS + [entry])
    assert problem.startswith("ascend_preflight_disk_checks entry ") and "expected an absolute path" in problem
    assert problem.startswith("ascend_preflight_disk_checks entry %s:" % json.dumps(entry)), problem


def test_every_problem_is_reported_at_once():
    problems = ascend_preflight_setting_problems(25.5, 7.1, [{"path": "relative", "min_free_gb": 1}])
    assert [problem.split(" ")[0] for problem in problems] == [
        "ascend_preflight_driver_version", "ascend_preflight_firmware_version", "ascend_preflight_disk_checks"]


def test_a_value_handed_over_in_a_subclass_is_named_by_its_plain_type():
    """Ansible hands settings over in subclasses that carry their origin: the message names what YAML read."""
    class Tagged(float):
        pass

    (problem,) = ascend_preflight_setting_problems(Tagged(25.5), "7.8.0.7.220", GOOD_DISKS)
    assert problem.startswith("ascend_preflight_driver_version is 25.5 (float):"), problem
