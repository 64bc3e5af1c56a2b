"""Render the README's codes table from plugins/module_utils/codes.py.

    python3 scripts/codes_table.py           # print the table
    python3 scripts/codes_table.py --write   # replace it in README.md, between the markers
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import CODES  # noqa: E402

START, END = "<!-- codes:start (scripts/codes_table.py --write) -->", "<!-- codes:end -->"


def table():
    rows = ["| code | severity | when | what to do |", "|---|---|---|---|"]
    for code, (severity, when, fix) in CODES.items():
        rows.append("| `%s` | %s | %s | %s |" % (code, severity, when, fix))
    return "\n".join(rows)


def readme_with_table(text):
    head, rest = text.partition(START)[::2]
    tail = rest.partition(END)[2]
    return "%s%s\n%s\n%s%s" % (head, START, table(), END, tail)


if __name__ == "__main__":
    if "--write" in sys.argv:
        path = os.path.join(ROOT, "README.md")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(readme_with_table(text))
    else:
        print(table())
