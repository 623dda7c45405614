"""library/docker_daemon_settings.py on daemon.json files as hosts have them: missing, empty, the operator's own
settings, one this collection wrote before, and files the daemon could not read either."""
import json
import os

import pytest
from module_runs import run_module

OPTIONS = {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"}}


def lay(path, check=False, **args):
    return run_module("docker_daemon_settings", path=str(path), settings=OPTIONS, _ansible_check_mode=check, **args)


def test_the_operators_settings_stay_and_ours_are_laid_over_them_in_to_nice_json_layout(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps({"registry-mirrors": ["https://mirror.example.cn"], "log-driver": "journald"}))
    result = lay(path)
    assert result["changed"] and result["settings"] == dict(OPTIONS, **{"registry-mirrors": [
        "https://mirror.example.cn"]}), result
    # What `{{ settings | to_nice_json }}` and a line break wrote before this module: a file it wrote reads as
    # unchanged, so no upgrade restarts the daemon.
    assert path.read_text() == json.dumps(result["settings"], indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert json.loads(open(result["backup_file"]).read())["log-driver"] == "journald"
    assert result["diff"]["before"]["log-driver"] == "journald" and result["diff"]["after"]["log-driver"] == "json-file"
    again = lay(path)
    assert not again["changed"] and "backup_file" not in again, again
    assert sorted(os.listdir(tmp_path)) == sorted(["daemon.json", os.path.basename(result["backup_file"])])


@pytest.mark.parametrize("content", [None, "", "\n"])
def test_a_missing_or_empty_file_holds_no_settings(tmp_path, content):
    path = tmp_path / "daemon.json"
    if content is not None:
        path.write_text(content)
    result = lay(path)
    assert result["changed"] and json.loads(path.read_text()) == OPTIONS and result["diff"]["before"] == {}


def test_check_mode_tells_the_change_and_writes_nothing(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"iptables": false}')
    result = lay(path, check=True)
    assert result["changed"] and result["settings"] == dict(OPTIONS, iptables=False), result
    assert path.read_text() == '{"iptables": false}' and os.listdir(tmp_path) == ["daemon.json"]


def test_a_file_with_our_settings_but_another_mode_gets_its_mode(tmp_path):
    path = tmp_path / "daemon.json"
    lay(path)
    os.chmod(path, 0o600)
    assert lay(path)["changed"] and oct(os.stat(path).st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("content, expected", [
    ('{"log-driver": "json-file",}', "is not JSON"),
    ('["log-driver"]', "holds a list, expected a JSON object"),
])
def test_a_file_the_daemon_cannot_read_either_is_named_with_the_fix_and_left_as_it_is(tmp_path, content, expected):
    path = tmp_path / "daemon.json"
    path.write_text(content)
    result = lay(path)
    assert result["failed"] and str(path) in result["msg"] and expected in result["msg"], result
    assert "Fix: correct the file, or remove it" in result["msg"] and path.read_text() == content
    assert os.listdir(tmp_path) == ["daemon.json"]
