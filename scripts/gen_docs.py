"""Render the generated tables of docs/: the settings (docs/settings.md) from every role's
meta/argument_specs.yml (a default the spec leaves out is the one of the role's defaults/main.yml), the
codes (docs/codes.md) from plugins/module_utils/codes.py. Each table sits between its marker comments;
the prose around them is written by hand and left as it is.

    .venv/bin/python scripts/gen_docs.py           # rewrite the tables in docs/
    .venv/bin/python scripts/gen_docs.py --check   # exit 1 when a table differs from its source

tests/unit/test_docs.py and tests/unit/test_codes.py fail when a spec or a code changed without this.
"""
import glob
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import CODES  # noqa: E402

SETTINGS_DOC = os.path.join("docs", "settings.md")
CODES_DOC = os.path.join("docs", "codes.md")
SETTINGS_MARKERS = ("<!-- settings:start (scripts/gen_docs.py) -->", "<!-- settings:end -->")
CODES_MARKERS = ("<!-- codes:start (scripts/gen_docs.py) -->", "<!-- codes:end -->")
# The stages' order (site.yml); a role not named here follows, by name.
ROLE_ORDER = ("llm", "host", "host_venv", "preflight", "image", "weights", "autotune", "service", "router",
              "verify", "bench")


def cell(text):
    """One table cell: Ansible's C(x) markup as code, pipes escaped, on one line."""
    text = re.sub(r"C\(([^)]*)\)", r"`\1`", str(text))
    return " ".join(text.replace("|", "\\|").split())


def shown(value):
    """A default or a choice as the inventory would write it."""
    if isinstance(value, str):
        return "`%s`" % value if value else '`""`'
    return "`%s`" % json.dumps(value).replace("|", "\\|")


def spec_files():
    """Each role that has settings (a meta/argument_specs.yml, as settings validation reads them), in stage order."""
    roles = [os.path.basename(os.path.dirname(os.path.dirname(p)))
             for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))]
    order = {role: i for i, role in enumerate(ROLE_ORDER)}
    for role in sorted(roles, key=lambda r: (order.get(r, len(order)), r)):
        yield role, os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")


def option_type(option):
    kind = option.get("type", "str")
    return "%s of %s" % (kind, option["elements"]) if option.get("elements") else kind


def role_defaults(role):
    path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return yaml.safe_load(f) or {}


def default_cell(name, option, defaults):
    if "default" in option:
        return shown(option["default"])
    if name in defaults:  # computed there (a Jinja expression) or left out of the spec
        return "%s (`defaults/main.yml`)" % shown(defaults[name])
    return ""


def options_table(options, defaults):
    rows = ["| setting | type | default | choices | description |", "|---|---|---|---|---|"]
    for name, option in options.items():  # the spec's own order
        description = option.get("description", "")
        if isinstance(description, list):
            description = " ".join(description)
        notes = []
        if option.get("required"):
            notes.append("**Required.**")
        if option.get("no_log"):
            notes.append("**Secret** (`no_log`: never shown, written or logged).")
        rows.append("| `%s` | %s | %s | %s | %s |" % (
            name, option_type(option), default_cell(name, option, defaults),
            ", ".join(shown(c) for c in option.get("choices", [])),
            cell(" ".join(notes + [description]) if notes else description)))
    return rows


def settings_table():
    out = []
    for role, path in spec_files():
        with open(path) as f:
            entries = yaml.safe_load(f)["argument_specs"]
        for entry, spec in entries.items():
            title = "`%s`" % role if entry == "main" else "`%s`, entry point `%s`" % (role, entry)
            out += ["", "### %s: %s" % (title, cell(spec.get("short_description", ""))), "",
                    "`roles/%s/meta/argument_specs.yml`; `ansible-doc -t role gpuserve.llm.%s`." % (role, role), ""]
            out += options_table(spec["options"], role_defaults(role)) if spec.get("options") else ["No options."]
    return "\n".join(out[1:])


def codes_table():
    rows = ["| code | severity | when | what to do |", "|---|---|---|---|"]
    for code, (severity, when, fix) in CODES.items():
        rows.append("| `%s` | %s | %s | %s |" % (code, severity, cell(when), cell(fix)))
    return "\n".join(rows)


def with_table(text, markers, table):
    """text with what stands between the markers replaced by table."""
    start, end = markers
    if start not in text or end not in text:
        raise ValueError("markers %s ... %s missing" % markers)
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    return "%s%s\n%s\n%s%s" % (head, start, table, end, tail)


def rendered():
    """{path: the file as it should be}, for each generated doc."""
    out = {}
    for path, markers, table in ((SETTINGS_DOC, SETTINGS_MARKERS, settings_table()),
                                 (CODES_DOC, CODES_MARKERS, codes_table())):
        with open(os.path.join(ROOT, path)) as f:
            out[path] = with_table(f.read(), markers, table)
    return out


def main(argv):
    stale = []
    for path, text in rendered().items():
        with open(os.path.join(ROOT, path)) as f:
            if f.read() == text:
                continue
        stale.append(path)
        if "--check" not in argv:
            with open(os.path.join(ROOT, path), "w") as f:
                f.write(text)
    if "--check" in argv and stale:
        print("not what the sources give (run scripts/gen_docs.py): %s" % ", ".join(stale))
        return 1
    for path in stale:
        print("rewrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
