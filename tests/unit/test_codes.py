"""The one catalogue of codes: the design's table (docs/design.md) is in it, docs/codes.md's table is
rendered from it."""
import os
import re
import subprocess
import sys

from ansible_collections.gpuserve.llm.plugins.module_utils import codes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_docs  # noqa: E402


def design_codes():
    """docs/design.md's table of the codes the catalogue must hold at least: the contract."""
    with open(os.path.join(ROOT, "docs", "design.md")) as f:
        block = f.read().split("<!-- required-codes -->")[1].split("<!-- /required-codes -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    required = dict(re.findall(r"(?m)^\| `([EWI]_[A-Z0-9_]+)` \| (error|warning|info) \|", block))
    assert rows and len(required) == len(rows), "a row of the table is not `CODE` | severity |"
    return required


def test_every_code_the_design_requires_is_in_the_catalogue_with_its_severity():
    required = design_codes()
    assert {c: codes.CODES[c][0] for c in required if c in codes.CODES} == required


def test_every_code_has_meaning_and_fix_and_a_severity_matching_its_prefix():
    prefix = {"E": codes.ERROR, "W": codes.WARNING, "I": codes.INFO}
    for code, (severity, when, fix) in codes.CODES.items():
        assert re.match(r"^[EWI]_[A-Z0-9_]+$", code), code
        assert severity == prefix[code[0]], code
        assert len(when) > 10 and len(fix) > 20, code


def test_codes_doc_table_is_the_rendered_catalogue():
    with open(os.path.join(ROOT, gen_docs.CODES_DOC)) as f:
        doc = f.read()
    start, end = gen_docs.CODES_MARKERS
    assert start in doc and end in doc
    assert doc == gen_docs.with_table(doc, gen_docs.CODES_MARKERS, gen_docs.codes_table()), \
        "run: .venv/bin/python scripts/gen_docs.py"
    for code in codes.CODES:
        assert "| `%s` |" % code in doc


def test_finding_refuses_an_unknown_code():
    try:
        codes.finding("E_NOPE", "x", "y")
    except KeyError as e:
        assert "E_NOPE" in str(e)
    else:
        raise AssertionError("an unknown code was accepted")


def test_readme_test_command_is_what_ci_runs():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    command = re.search(r"<!-- test-command -->\s*```sh\n(.+?)\n```", readme, re.S).group(1).strip()
    assert command == "bash tests/run.sh"
    assert "exec %s" % command in ci
    assert subprocess.run(["bash", "-n", os.path.join(ROOT, "tests", "run.sh")], check=False).returncode == 0
