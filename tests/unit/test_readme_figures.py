"""The READMEs' measurements stay reproducible and placed: every `benchmarks/<name>.py` either README names exists
and answers --help, and every paragraph of README.md that gives a measurement says when and on what machine."""
import re
import subprocess
import sys

import pytest

from conftest import REPO

READMES = ("README.md", "README.zh-CN.md")
SCRIPT = re.compile(r"\bbenchmarks/(\w+)\.py\b")
# None of the cited scripts starts a server, a twin or a measurement before parsing its arguments: --help takes
# about a second (their imports), so this is ample on a busy machine.
HELP_TIMEOUT_S = 30
# A paragraph that gives a measurement: "Measured ..." or "... measured by `benchmarks/...`".
MEASUREMENT = re.compile(r"\bMeasured\b|\bmeasured by `benchmarks/")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# The machine as the README names it: "a 2-core x86_64 machine", "2 x86_64 cores", "a 2-core AMD EPYC".
MACHINE = re.compile(r"\b\d+-core\b|\b\d+ (?:x86_64|aarch64) cores\b")
# Lines with text, up to a blank line or the end.
PARAGRAPH = re.compile(r"(?:^[^\S\n]*\S.*(?:\n|\Z))+", re.M)


def cited_scripts():
    return sorted({name for readme in READMES for name in SCRIPT.findall((REPO / readme).read_text(encoding="utf-8"))})


def paragraphs(text):
    """(number of its first line, text) of each paragraph."""
    return [(text.count("\n", 0, match.start()) + 1, match.group(0)) for match in PARAGRAPH.finditer(text)]


def test_the_readmes_cite_benchmarks():
    """Without this, a change of how they are cited would leave the test below with nothing to check."""
    assert cited_scripts()


@pytest.mark.parametrize("name", cited_scripts())
def test_each_cited_benchmark_exists_and_answers_help(name):
    path = REPO / "benchmarks" / ("%s.py" % name)
    assert path.is_file(), "the READMEs cite %s, which does not exist" % path.relative_to(REPO)
    result = subprocess.run([sys.executable, str(path), "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=HELP_TIMEOUT_S, cwd=str(REPO))
    assert result.returncode == 0 and result.stdout.startswith("usage: %s.py" % name), result.stdout


def test_every_measurement_in_the_readme_says_when_and_on_what_machine():
    offending = []
    for line, paragraph in paragraphs((REPO / "README.md").read_text(encoding="utf-8")):
        if not MEASUREMENT.search(paragraph):
            continue
        missing = [what for what, pattern in (("a date (YYYY-MM-DD)", DATE), ("the machine (e.g. 2-core x86_64)",
                                                                            MACHINE)) if not pattern.search(paragraph)]
        if missing:
            offending.append("README.md:%d lacks %s: %s" % (line, " and ".join(missing),
                                                           " ".join(paragraph.split())[:100]))
    assert not offending, "\n".join(["paragraphs of README.md that give a measurement:"] + offending)
