"""README.zh-CN.md has every section of README.md, in the same order, so that an operator who reads the Chinese
README reads what the English one says.

Headings are translated, so the sections are matched by what a translation leaves alone. A section is its `## ` or
`### ` heading and the text up to the next one (fenced code blocks are not searched for headings). Of each, the test
reads: the heading's level; the code names in the heading (text in backticks, bare names such as site.yml or
playbooks/driver.yml, and numbers); and in the section's text, its code spans (`...`: variables, paths, commands,
messages, which stay untranslated), its fenced code blocks (by their language) and its tables (by their rows). Two
sections correspond when they are at the same level and at least SAME_SECTION of the code spans of the two are
common to both. The READMEs are aligned section by section, in order, pairing the sections that are most alike;
every section of each must have its counterpart in the other, and each pair must have the same code names in its
heading, the same code blocks and tables of as many rows. No table of translated headings: a section added, removed
or moved in one README only fails here, whatever its heading says.
"""
import dataclasses
import re

from conftest import REPO

ENGLISH, CHINESE = "README.md", "README.zh-CN.md"
HEADING = re.compile(r"(#{2,3}) +(\S.*?)\s*$")
FENCE = re.compile(r"\s*(`{3,}|~{3,})\s*([^`\s]*)")
TABLE_RULE = re.compile(r"\s*\|?(\s*:?-{3,}:?\s*\|)+(\s*:?-{3,}:?\s*)?$")
CODE_SPAN = re.compile(r"`([^`]+)`")
# A placeholder such as <site> or <timestamp> may be translated (<站点>, <时间戳>): spans are compared without it.
PLACEHOLDER = re.compile(r"<[^<>`]*>")
BARE_NAME = re.compile(r"[A-Za-z0-9_][\w./-]*", re.ASCII)
# Two sections at one level correspond when this share of their code spans (both sections' together) is in both.
SAME_SECTION = 0.3


@dataclasses.dataclass
class Section:
    readme: str
    line: int
    level: int
    title: str
    names: frozenset
    fences: list = dataclasses.field(default_factory=list)
    tables: list = dataclasses.field(default_factory=list)     # the rows of each table, heading row aside
    spans: set = dataclasses.field(default_factory=set)

    @property
    def heading(self):
        return "%s %s" % ("#" * self.level, self.title)

    def __str__(self):
        return '"%s" (%s line %d)' % (self.heading, self.readme, self.line)


def heading_names(title):
    """The code names of a heading: backticked text, bare names with a dot, slash or underscore, and numbers."""
    names = {" ".join(span.split()) for span in CODE_SPAN.findall(title)}
    for token in BARE_NAME.findall(CODE_SPAN.sub(" ", title)):
        token = token.rstrip(".-/")
        if token.isdigit() or any(mark in token for mark in "./_"):
            names.add(token)
    return frozenset(names)


def sections(text, readme):
    """The `## ` and `### ` sections of a README's text, in order (what comes before the first is not one)."""
    found, prose, fence, in_table = [], [], None, False

    def close():
        if found:
            found[-1].spans = {PLACEHOLDER.sub("<>", " ".join(span.split()))
                               for span in CODE_SPAN.findall("\n".join(prose))}
        prose.clear()

    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if fence:
            if opening and opening.group(1).startswith(fence) and not opening.group(2):
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            if found:
                found[-1].fences.append(opening.group(2) or "(none)")
            continue
        heading = HEADING.match(line)
        if heading:
            close()
            level, title = len(heading.group(1)), heading.group(2)
            found.append(Section(readme, number, level, title, heading_names(title)))
        elif found:
            prose.append(line)
            if TABLE_RULE.match(line):
                found[-1].tables.append(0)
                in_table = True
            elif in_table and line.lstrip().startswith("|"):
                found[-1].tables[-1] += 1
            else:
                in_table = False
    close()
    return found


def likeness(one, other):
    """The share of two sections' code spans common to both (1 for two sections without any); None across levels."""
    if one.level != other.level:
        return None
    spans = one.spans | other.spans
    return len(one.spans & other.spans) / len(spans) if spans else 1.0


def align(english, chinese):
    """Pairs (i, j) of corresponding sections, in order, with the greatest likeness in all (dynamic programming)."""
    best = [[0.0] * (len(chinese) + 1) for _ in range(len(english) + 1)]
    for i, one in enumerate(english):
        for j, other in enumerate(chinese):
            alike = likeness(one, other)
            paired = best[i][j] + alike if alike is not None and alike >= SAME_SECTION else -1.0
            best[i + 1][j + 1] = max(best[i][j + 1], best[i + 1][j], paired)
    pairs, i, j = [], len(english), len(chinese)
    while i and j:
        if best[i][j] == best[i - 1][j]:
            i -= 1
        elif best[i][j] == best[i][j - 1]:
            j -= 1
        else:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return pairs[::-1]


def neighbours(index, mine, counterpart):
    """The nearest sections before and after mine[index] that have a counterpart (their indexes, or None)."""
    before = next((k for k in range(index - 1, -1, -1) if k in counterpart), None)
    after = next((k for k in range(index + 1, len(mine)) if k in counterpart), None)
    return before, after


def where_to_put(index, mine, theirs, counterpart):
    """Where the counterpart of mine[index] belongs in the other README, told by the sections around it."""
    before, after = neighbours(index, mine, counterpart)
    if before is None:
        return "before %s" % theirs[counterpart[after]] if after is not None else "as its first section"
    place = "right after %s, the counterpart of \"%s\"" % (theirs[counterpart[before]], mine[before].heading)
    return place + (" (after the sections missing before it)" if before != index - 1 else "")


def stand_ins(index, mine, theirs, counterpart):
    """The other README's unpaired sections of the same level where mine[index]'s counterpart belongs: most likely
    that counterpart, fallen behind."""
    before, after = neighbours(index, mine, counterpart)
    start = counterpart[before] + 1 if before is not None else 0
    end = counterpart[after] if after is not None else len(theirs)
    paired = set(counterpart.values())
    return [k for k in range(start, end) if k not in paired and theirs[k].level == mine[index].level]


def unpaired(english, chinese):
    """One message per section without a counterpart: which README lacks it, where it goes, and how to fix it."""
    pairs = align(english, chinese)
    to_chinese, to_english = dict(pairs), {j: i for i, j in pairs}
    messages, explained = [], set()
    for i, section in enumerate(english):
        if i in to_chinese:
            continue
        behind = [j for j in stand_ins(i, english, chinese, to_chinese) if j not in explained]
        moved = [j for j, other in enumerate(chinese) if j not in to_english and j not in explained
                 and (likeness(section, other) or 0) >= SAME_SECTION]
        if moved and not behind:
            explained.add(moved[0])
            messages.append(
                "%s has its counterpart %s out of order. Fix: move that section of %s %s." % (
                    section, chinese[moved[0]], CHINESE, where_to_put(i, english, chinese, to_chinese)))
        elif behind:
            explained.update(behind)
            messages.append(
                "%s has no counterpart in %s. %s stands where it belongs but shares only %d%% of its `code` spans "
                "with it. Fix: bring that section of %s up to date with the English (translate what it lacks, drop "
                "what %s no longer says, keep the `...` spans as they are)." % (
                    section, CHINESE, " and ".join(str(chinese[j]) for j in behind),
                    100 * max(likeness(section, chinese[j]) or 0 for j in behind), CHINESE, ENGLISH))
        else:
            messages.append(
                "%s has no counterpart in %s. Fix: translate it into %s as a `%s ` heading %s, with the same "
                "`code` spans, code blocks and tables as the English." % (
                    section, CHINESE, CHINESE, "#" * section.level, where_to_put(i, english, chinese, to_chinese)))
    for j, section in enumerate(chinese):
        if j not in to_english and j not in explained:
            messages.append(
                "%s has no counterpart in %s. Fix: %s follows %s: remove the section from %s, or add it to %s "
                "first (%s) and keep the two alike." % (
                    section, ENGLISH, CHINESE, ENGLISH, CHINESE, ENGLISH,
                    where_to_put(j, chinese, english, to_english)))
    if messages:
        messages.append(
            "(Two sections correspond when they are at the same level and at least %d%% of their `code` spans are in "
            "both: a translation keeps the spans as they are, placeholders such as <site> aside.)"
            % (SAME_SECTION * 100))
    return messages


def both():
    return (sections((REPO / ENGLISH).read_text(encoding="utf-8"), ENGLISH),
            sections((REPO / CHINESE).read_text(encoding="utf-8"), CHINESE))


def outline(found):
    return [section.level for section in found]


def test_both_readmes_have_as_many_sections_and_subsections_in_the_same_order():
    english, chinese = both()
    counts = {readme: ("%d `## ` sections and %d `### ` subsections" % (outline(found).count(2),
                                                                     outline(found).count(3)))
              for readme, found in ((ENGLISH, english), (CHINESE, chinese))}
    assert outline(english) == outline(chinese), "\n".join(
        ["%s has %s, %s has %s, or not in the same order:" % (ENGLISH, counts[ENGLISH], CHINESE, counts[CHINESE])]
        + unpaired(english, chinese))


def test_every_section_of_each_readme_has_its_counterpart_in_the_other():
    english, chinese = both()
    assert english and chinese
    messages = unpaired(english, chinese)
    assert messages == [], "\n".join(messages)


def test_corresponding_sections_name_the_same_code_and_have_the_same_code_blocks_and_tables():
    english, chinese = both()
    differences = []
    for i, j in align(english, chinese):
        one, other = english[i], chinese[j]
        for what, mine, theirs in (("code names in the heading", sorted(one.names), sorted(other.names)),
                                   ("fenced code blocks (by language)", one.fences, other.fences),
                                   ("tables (rows of each)", one.tables, other.tables)):
            if mine != theirs:
                differences.append("%s and its counterpart %s differ in their %s: %s in %s, %s in %s. Fix: make %s's "
                                   "section carry what %s's does (code names stay untranslated, every code block and "
                                   "table is kept)." % (one, other, what, mine, ENGLISH, theirs, CHINESE, CHINESE,
                                                        ENGLISH))
    assert differences == [], "\n".join(differences)
