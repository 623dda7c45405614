"""Every command block of the README is run by a test or says why it is not (tests/readme_commands.py), and the
Chinese README shows the same commands with the same marks."""
import pytest
import readme_commands

from conftest import REPO

ENGLISH, CHINESE = "README.md", "README.zh-CN.md"


def test_every_command_block_of_the_readme_is_run_by_a_test_or_says_why_not():
    assert readme_commands.problems(ENGLISH) == []


def test_the_chinese_readme_shows_the_same_commands_with_the_same_marks():
    def shown(readme):
        return [(block.language, block.commands, block.tests, [text for text, _ in block.left_out],
                 bool(block.not_run)) for block in readme_commands.blocks(readme)]

    assert shown(CHINESE) == shown(ENGLISH)


def test_a_command_block_added_without_a_test_or_a_reason_fails():
    text = (REPO / ENGLISH).read_text(encoding="utf-8") + "\n```sh\nansible-playbook playbooks/new.yml\n```\n"
    (problem,) = readme_commands.problems(ENGLISH, text)
    assert "line %d: a command block with no mark" % (text.count("\n") - 2) in problem


@pytest.mark.parametrize("mark, expected", [
    ("<!-- README test: tests/unit/test_readme_commands.py::test_that_does_not_exist -->", "does not exist"),
    # A test that exists but does not run what the block holds.
    ("<!-- README test: tests/unit/test_readme_commands.py::test_every_command_block_of_the_readme_is_run_by_a_test"
     "_or_says_why_not -->", "it must ask readme_block for the commands of its own name"),
    ("<!-- not run here: `playbooks/old.yml`: gone -->", "no command of the block contains it"),
])
def test_a_mark_that_runs_nothing_fails(mark, expected):
    text = "# README\n\n%s\n```sh\nansible-playbook playbooks/new.yml\n```\n" % mark
    problems = readme_commands.problems(ENGLISH, text)
    assert problems and all("README.md line 4" in problem for problem in problems)
    assert any(expected in problem for problem in problems), problems


def test_commands_are_read_as_a_shell_reads_them():
    text = ("<!-- not run here: `slow`: hours -->\n```sh\n# a comment line\nfirst --a \\\n  --b   # what it does\n"
            "slow run\n\n```\n")
    (block,) = readme_commands.blocks(ENGLISH, text)
    assert block.commands == ["first --a --b", "slow run"] and block.runnable() == ["first --a --b"]
    assert block.left_out == [("slow", "hours")]
