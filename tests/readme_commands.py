"""The README's command blocks as tests: every ```sh or ```bash block of README.md is run by a test, or is marked in
the README's source as not run here, with the reason.

The marks are HTML comments on the lines right above the block's opening fence (invisible where the README is
rendered):

    <!-- README test: tests/integration/test_readme_commands.py::test_the_quick_start_tools -->
    <!-- not run here: `vllm_bench_preset=seed`: the seed's 2880 requests take hours at the twin's pace -->

A "README test" mark names the test that runs the block: the test asks readme_block for the commands marked with
its own name (path::name) and runs every one it gets. A "not run here" mark with a code span first leaves out the
block's commands that contain that text; one without leaves out the whole block. tests/unit/test_readme_commands.py
holds every block to a mark, every named test to existing and running what it is given, and README.zh-CN.md to the
same blocks and marks.
"""
import collections
import dataclasses
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
COMMAND_LANGUAGES = ("sh", "bash", "shell", "console")
FENCE = re.compile(r"^(\s*)(`{3,})\s*(\S*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(README test|not run here):\s*(.*?)\s*-->\s*$")
LEFT_OUT = re.compile(r"`([^`]+)`\s*:?\s*(.*)$")
# A comment after a command: at least two spaces, then #, as the README aligns them.
TRAILING_COMMENT = re.compile(r"\s{2,}#.*$")


@dataclasses.dataclass
class Block:
    readme: str
    line: int               # of the opening fence
    language: str
    commands: list           # each command whole, continuation lines joined, comments dropped
    tests: list              # node ids of the "README test" marks
    left_out: list           # (text, reason) of the "not run here" marks naming a text
    not_run: str = ""        # the reason of a "not run here" mark for the whole block

    def __str__(self):
        return "%s line %d" % (self.readme, self.line)

    def runnable(self):
        """The commands a test runs: all but those a mark leaves out."""
        if self.not_run:
            return []
        return [command for command in self.commands if not any(text in command for text, _ in self.left_out)]


def commands_of(lines):
    """The commands of a block's lines: `\\` continuations joined, comments and blank lines dropped."""
    found, pending = [], ""
    for line in lines:
        line = line.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        found.append(" ".join((pending + TRAILING_COMMENT.sub("", line)).split()))
        pending = ""
    if pending:
        found.append(" ".join(pending.split()))
    return found


def blocks(readme="README.md", text=None):
    """Every command block of a README (or of text, read as that README), in order, with its marks."""
    lines = (text if text is not None else (REPO / readme).read_text(encoding="utf-8")).splitlines()
    found, number = [], 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        indent, fence, language = opening.groups()
        end = number + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence) and not lines[end].strip()[len(fence):]):
            end += 1
        if language in COMMAND_LANGUAGES:
            marks, above = [], number - 1
            while above >= 0 and MARK.match(lines[above]):
                marks.insert(0, MARK.match(lines[above]).groups())
                above -= 1
            block = Block(readme, number + 1, language, commands_of(lines[number + 1:end]), [], [])
            for kind, text in marks:
                if kind == "README test":
                    block.tests.append(text)
                elif LEFT_OUT.match(text):
                    block.left_out.append(LEFT_OUT.match(text).groups())
                else:
                    block.not_run = text or "(no reason given)"
            found.append(block)
        number = end + 1
    return found


def problems(readme="README.md", text=None):
    """What keeps a README's command blocks from being tests: a block without a mark, a mark naming a test that does
    not exist or does not run what it is given, a left-out text no command contains."""
    found = []
    for block in blocks(readme, text):
        if not block.tests and not block.not_run and (not block.left_out or block.runnable()):
            found.append("%s: a command block with no mark: add <!-- README test: <the test that runs it> --> or "
                         "<!-- not run here: <why> --> on the line above its fence (tests/readme_commands.py)"
                         % block)
        for test in block.tests:
            path, _, name = test.partition("::")
            source = (REPO / path).read_text(encoding="utf-8") if (REPO / path).is_file() else ""
            body = re.search(r"^def %s\(.*?(?=^\S)" % re.escape(name), source + "\n#", re.M | re.S) if name else None
            if body is None:
                found.append("%s: the README test %s does not exist" % (block, test))
            elif "readme_block(" not in source or not re.search(r"[\"'][^\"'\n]*\b%s[\"']" % re.escape(name),
                                                                 body.group(0)):
                found.append("%s: the README test %s does not run the block (it must ask readme_block for the "
                             'commands of its own name, "%s")' % (block, test, name))
            if not block.runnable():
                found.append("%s: marked as run by %s, but every command is left out" % (block, test))
        for text_left_out, reason in block.left_out:
            if not any(text_left_out in command for command in block.commands):
                found.append("%s: `%s` is left out, but no command of the block contains it" % (block, text_left_out))
            if not reason:
                found.append("%s: `%s` is left out with no reason" % (block, text_left_out))
    return found


def readme_block(node_id):
    """The commands to run of the README blocks whose mark names this test (its node id, as the mark writes it:
    path::name); fails when no block names it, so that a test cannot pass having run nothing."""
    named = [block for block in blocks() if node_id in block.tests]
    assert named, "no command block of README.md is marked <!-- README test: %s -->" % node_id
    return [command for block in named for command in block.runnable()]


def node_id(test_file, test_name):
    return "%s::%s" % (pathlib.Path(test_file).resolve().relative_to(REPO), test_name)


Ran = collections.namedtuple("Ran", "code stdout stderr")


def run_command(command, replacements=(), env=None, timeout=1800):
    """Run a README command as a user types it, in the repository with the venv's tools first on PATH, after the
    replacements (README text -> this fleet's): Ran(exit code, stdout, stderr)."""
    for text, value in replacements:
        command = command.replace(text, value)
    environment = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), **(env or {}))
    environment["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(sys.executable)), environment["PATH"]])
    done = subprocess.run(["bash", "-c", command], cwd=str(REPO), env=environment, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, check=False)
    return Ran(done.returncode, done.stdout, done.stderr)


RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def recap(output):
    """host -> (ok, changed, unreachable, failed) of an ansible-playbook run's PLAY RECAP."""
    return {host: tuple(int(n) for n in numbers) for host, *numbers in RECAP.findall(output)}


README_TEXT = (REPO / "README.md").read_text(encoding="utf-8")


TASK = re.compile(r"^TASK \[(.+?)\] \**$")
CHANGED = re.compile(r"^changed: \[([^\]]+)\]")


def changed_tasks(output):
    """(task, host) of every task an ansible-playbook run reported changed, from its output."""
    found, task = [], None
    for line in output.splitlines():
        if TASK.match(line):
            task = TASK.match(line).group(1)
        elif CHANGED.match(line):
            found.append((task, CHANGED.match(line).group(1)))
    return found
