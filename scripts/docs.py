#!/usr/bin/env python3
"""Write the READMEs' parts made from the code: the doctor's table, from the rules of module_utils/diagnosis.py.

The table stands between the lines <!-- doctor-rules --> and <!-- /doctor-rules --> of README.md and
README.zh-CN.md; tests/unit/module_utils/test_diagnosis.py fails when it differs from the rules.
Usage: .venv/bin/python scripts/docs.py
"""
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.ascend.fleet.plugins.module_utils.diagnosis import rules_table  # noqa: E402

BETWEEN = re.compile(r"(<!-- doctor-rules -->\n)(?:.*?\n)?(<!-- /doctor-rules -->)", re.DOTALL)


def main():
    for name in ("README.md", "README.zh-CN.md"):
        path = REPO / name
        text = path.read_text(encoding="utf-8")
        if not BETWEEN.search(text):
            sys.exit("%s has no <!-- doctor-rules --> ... <!-- /doctor-rules --> lines to write the table between"
                     % name)
        path.write_text(BETWEEN.sub(lambda match: match.group(1) + rules_table() + "\n" + match.group(2), text),
                        encoding="utf-8")
        print("wrote the doctor table of %s" % name)


if __name__ == "__main__":
    main()
