"""docs/ is the project's own reference: its flag table is what the templates render, the settings it
names exist, its settings and codes tables are what the specs and the catalogue give, every role's
options show in ansible-doc, its links lead somewhere, the README is a front page that links every page,
and nothing in the repository points outside it for what a reader needs."""
import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_docs  # noqa: E402
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import VALIDATION_FACTS  # noqa: E402

DOCS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
ENGINES = ("vllm", "sglang", "llamacpp")
FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def template_flags(engine):
    text = re.sub(r"\{#.*?#\}", "", read("templates", engine + ".j2"), flags=re.S)  # comments say --help=all
    return set(FLAG.findall(text))


def doc_flag_table():
    block = read("docs", "engines.md").split("<!-- flag-table -->")[1].split("<!-- /flag-table -->")[0]
    rows = [r.strip().strip("|").split("|") for r in block.strip().splitlines()[2:]]
    assert rows and all(len(r) == 4 for r in rows)
    return {engine: set(FLAG.findall(" ".join(r[i + 1] for r in rows))) for i, engine in enumerate(ENGINES)}


@pytest.mark.parametrize("engine", ENGINES)
def test_the_documented_flags_are_the_flags_the_template_renders(engine):
    documented, rendered = doc_flag_table()[engine], template_flags(engine)
    assert rendered
    assert sorted(documented - rendered) == [], "in docs/engines.md, not in templates/%s.j2" % engine
    assert sorted(rendered - documented) == [], "in templates/%s.j2, not in docs/engines.md" % engine


def test_every_setting_the_docs_name_exists():
    options = set()
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(path) as f:
            options |= set(yaml.safe_load(f)["argument_specs"]["main"]["options"])
    for path in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")):  # play-level knobs (service_serial)
        with open(path) as f:
            options |= set(re.findall(r"\b([a-z][a-z0-9_]*) \| default\(", f.read()))
    groups = {"llm_hosts", "llm_routers"}  # inventory groups, not settings
    groups |= set(os.listdir(os.path.join(ROOT, "roles")))  # role names (`host_venv`), not settings
    groups |= set(VALIDATION_FACTS)  # what validation hands on (`llm_settings`), not settings
    with open(os.path.join(ROOT, "roles", "verify", "defaults", "main.yml")) as f:
        groups |= set(yaml.safe_load(f)["verify_checks"])  # verify's checks (`image_input`), not settings
    prefixes = "llm|preflight|host|image|weights|autotune|service|router|verify|bench"
    named = set()
    for doc in ("design.md", "engines.md"):
        named |= set(re.findall(r"`((?:%s)_[a-z0-9_]+)`" % prefixes, read("docs", doc)))
    assert len(named) > 20
    assert sorted(named - options - groups) == []
    for doc in DOCS + ["README.md"]:  # every page, the README too
        named = set(re.findall(r"`((?:%s)_[a-z0-9_]+)`" % prefixes, read(doc)))
        assert sorted(named - options - groups) == [], doc


def test_no_file_points_outside_the_repository():
    """The project stands alone: what a reader needs is in docs/, not in documents beside the repository."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    outside = re.compile(r"\b(SPEC|ENGINES|STYLE)\.md\b|(?<![\w.-])shared/(seed|fixtures|gpu-vllm|hooks)\b")
    found = []
    for name in files.decode().split("\0"):
        path = os.path.join(ROOT, name)
        if not name or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        found += ["%s:%d" % (name, text.count("\n", 0, m.start()) + 1) for m in outside.finditer(text)]
    assert found == []


def role_specs():
    """{role: {entry point: options}} for every role: its meta/argument_specs.yml, else the argument_specs of its
    meta/main.yml (the job role: parameters its callers give, not settings)."""
    specs = {}
    for role in sorted(os.listdir(os.path.join(ROOT, "roles"))):
        for name in ("argument_specs.yml", "main.yml"):
            path = os.path.join(ROOT, "roles", role, "meta", name)
            if os.path.exists(path):
                with open(path) as f:
                    entries = (yaml.safe_load(f) or {}).get("argument_specs")
                if entries:
                    specs[role] = {entry: spec.get("options") or {} for entry, spec in entries.items()}
                    break
    return specs


def test_every_role_has_an_argument_spec_and_every_option_a_description():
    specs = role_specs()
    assert sorted(specs) == sorted(os.listdir(os.path.join(ROOT, "roles")))
    missing = ["%s %s %s" % (role, entry, name) for role, entries in specs.items() for entry, options in entries.items()
               for name, option in options.items() if not option.get("description")]
    assert missing == []


def test_ansible_doc_shows_every_roles_options():
    """`ansible-doc -t role gpuserve.llm.<role>`, as a user runs it from a checkout (ansible.cfg finds the
    collection through .collections/), gives every entry point and every option of each role's spec."""
    specs = role_specs()
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"))
    out = subprocess.run([ansible_doc, "-t", "role", "-j"] + ["gpuserve.llm.%s" % r for r in specs], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    shown = json.loads(out.stdout)
    for role, entries in specs.items():
        points = shown["gpuserve.llm.%s" % role]["entry_points"]
        assert sorted(points) == sorted(entries), role
        for entry, options in entries.items():
            doc_options = points[entry].get("options") or {}
            assert sorted(doc_options) == sorted(options), (role, entry)
            assert all(o.get("description") for o in doc_options.values()), (role, entry)


def test_the_settings_and_codes_tables_are_what_their_sources_give():
    """docs/settings.md from every role's meta/argument_specs.yml, docs/codes.md from the catalogue: a spec or
    a code changed without `scripts/gen_docs.py` fails here."""
    for path, text in gen_docs.rendered().items():
        assert read(path) == text, "run: .venv/bin/python scripts/gen_docs.py (%s)" % path
    settings = read(gen_docs.SETTINGS_DOC)
    for role, entries in role_specs().items():
        if not os.path.exists(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")):
            continue  # parameters, not settings (the job role)
        assert "### `%s`" % role in settings, role
        for options in entries.values():
            for name in options:
                assert "| `%s` |" % name in settings, name


def slug(heading):
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_in_the_readme_and_docs_leads_somewhere():
    broken = []
    for doc in ["README.md"] + DOCS:
        text = re.sub(r"```.*?```", "", read(doc), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            path, anchor = (target.split("#", 1) + [""])[:2]
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path)) if path else os.path.join(ROOT, doc)
            if not os.path.exists(full):
                broken.append("%s: %s" % (doc, target))
            elif anchor and full.endswith(".md"):
                with open(full) as f:
                    anchors = {slug(h) for h in re.findall(r"(?m)^#+ (.+)$", f.read())}
                if anchor not in anchors:
                    broken.append("%s: %s" % (doc, target))
    assert broken == []


def test_the_readme_is_a_front_page_that_links_every_docs_page():
    readme = read("README.md")
    assert readme.count("\n") < 250
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", readme))
    assert sorted(set(DOCS) - linked) == []
    assert "<!-- codes:start" not in readme and "<!-- settings:start" not in readme  # the tables live in docs/
