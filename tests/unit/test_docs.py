"""docs/ is the project's own reference: its flag table is what the templates render, the settings it
names exist, and nothing in the repository points outside it for what a reader needs."""
import glob
import os
import re
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    prefixes = "llm|preflight|host|image|weights|autotune|service|verify|bench"
    named = set()
    for doc in ("design.md", "engines.md"):
        named |= set(re.findall(r"`((?:%s)_[a-z0-9_]+)`" % prefixes, read("docs", doc)))
    assert len(named) > 20
    assert sorted(named - options - groups) == []


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
