"""The command runs the Ansible tools beside the Python it runs under (its venv, activated or not), else those on
PATH; a tool it cannot find, or a run that reaches no host, is named on stderr with the reason, never an empty
table."""
import os
import shutil
import subprocess
import sys

import pytest

from ascend_vllm_fleet import cli

BIN = os.path.dirname(sys.executable)  # the venv's bin/, where the command is installed
WITHOUT_THE_VENV = "/usr/bin:/bin"


def command(*argv, tmp_path):
    """The installed command, from a shell whose PATH lacks the venv: (exit code, stdout, stderr)."""
    entry_point = os.path.join(BIN, "ascend-vllm-fleet")
    assert os.access(entry_point, os.X_OK), "the command is not installed beside %s" % sys.executable
    assert shutil.which("ansible-playbook", path=WITHOUT_THE_VENV) is None, "PATH would find ansible-playbook anyway"
    done = subprocess.run([entry_point] + list(argv), env=dict(os.environ, PATH=WITHOUT_THE_VENV), cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_without_the_venv_on_path_the_command_runs_the_venvs_ansible_playbook(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    code, out, err = command("bench", "--plan", "-i", str(inventory), "-e", "vllm_bench_reports_dir=%s" % tmp_path,
                             tmp_path=tmp_path)
    # ansible-playbook ran (its play started) and matched no host of the empty inventory: said why, exit 1.
    assert code == 1
    assert "no host ran a task (%s exit code 0)" % os.path.join(BIN, "ansible-playbook") in err, err
    assert "PLAY [Benchmark vLLM-Ascend]" in err and "skipping: no hosts matched" in err, err
    assert "host  status" not in out


def test_a_run_that_stops_before_its_first_play_prints_why(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    missing = tmp_path / "no-such-limit-file"
    code, out, err = command("deploy", "-i", str(inventory), "-l", "@%s" % missing, tmp_path=tmp_path)
    assert code == 1
    assert "no host ran a task (%s exit code 1)" % os.path.join(BIN, "ansible-playbook") in err, err
    assert "Unable to find limit file" in err and str(missing) in err, err
    assert "host  status" not in out


@pytest.mark.parametrize("argv, tool", [
    (["deploy"], "ansible-playbook"),
    (["doctor"], "ansible-playbook"),
    (["verify"], "ansible-playbook"),
    (["report", "{tmp}/report", "--from-facts"], "ansible"),
])
def test_a_tool_found_neither_beside_python_nor_on_path_is_named_with_where_it_was_looked_for(
        tmp_path, monkeypatch, argv, tool):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all: {}\n")
    nowhere = tmp_path / "empty"
    nowhere.mkdir()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(nowhere))
    with pytest.raises(SystemExit) as stopped:
        cli.main([part.format(tmp=tmp_path) for part in argv] + ["-i", str(inventory)])
    message = str(stopped.value)
    assert message.startswith("ascend-vllm-fleet: %s not found: not in %s (beside %s" % (
        tool, tmp_path / "bin", tmp_path / "bin" / "python")), message
    assert "nor on PATH (%s)" % nowhere in message and "Fix: install requirements.txt" in message


def test_a_tool_beside_python_comes_before_one_on_path(tmp_path, monkeypatch):
    beside, on_path = tmp_path / "venv" / "bin", tmp_path / "elsewhere"
    for folder in (beside, on_path):
        folder.mkdir(parents=True)
        (folder / "ansible-playbook").write_text("#!/bin/sh\n")
        (folder / "ansible-playbook").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(beside / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    assert cli.find_tool("ansible-playbook") == str(beside / "ansible-playbook")
    assert cli.tools_path(cli.find_tool("ansible-playbook")) == os.pathsep.join([str(beside), str(on_path)])
    (beside / "ansible-playbook").unlink()
    assert cli.find_tool("ansible-playbook") == str(on_path / "ansible-playbook")
