"""Docs and validation agree (issue 38 item 5): every value the docs show or promise for a setting is one
validation accepts. The examples are read from the docs themselves - README.md, docs/*.md, the roles'
meta/argument_specs.yml (defaults and descriptions), the roles' defaults and the example inventories - and
fed to settings.validate with the specs load_specs reads."""
import glob
import json
import os
import re

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import validate
from settings_bases import CPU, DEFAULTS, OPTIONS, ROOT, SGLANG, SPECS

# The profiles a documented value may belong to: the recipe (vLLM), the CPU profile (llama.cpp), SGLang.
BASES = [DEFAULTS, dict(CPU, llm_media_urls="any"), SGLANG]
# The docs' pages and the READMEs of their examples (docs/examples/<name>/README.md: the commands that made them).
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + sorted(
    glob.glob(os.path.join(ROOT, "docs", "*", "*", "README.md")))
PREFIXES = SPECS.prefixes
SETTING = r"(?:%s)[a-z0-9_]+" % "|".join(re.escape(p) for p in PREFIXES)
# Placeholders a doc writes where the user puts their own value: not a value to try.
PLACEHOLDER = re.compile(r"<|\.\.\.|\|")


def _read(path):
    with open(path) as f:
        return f.read()


def _typed(text):
    """A value as written in a doc (YAML's reading of `-e name=value` text, as Ansible's key=value is)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def doc_examples():
    """[(where, setting, value)] from every place the docs give a value for a setting."""
    found = []
    for path in DOCS + sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        text, where = _read(path), os.path.relpath(path, ROOT)
        # -e name=value, -e 'name=value', -e "name=value"
        for m in re.finditer(r"-e +['\"]?(%s)=([^\s'\"`]+)" % SETTING, text):
            found.append((where, m.group(1), _typed(m.group(2))))
        # -e '{"name": value, ...}': JSON extra-vars, each setting in it
        for m in re.finditer(r"-e +'(\{[^']*\})'", text):
            for name, value in sorted(json.loads(m.group(1)).items()):
                found.append((where, name, value))
        # `name: value` and `name=value` in prose and tables (not `llm_host:llm_port`, an address)
        for m in re.finditer(r"`(%s)(?:: +| *= *)([^`]+)`" % SETTING, text):
            if not PLACEHOLDER.search(m.group(2)) and m.group(2).strip():
                found.append((where, m.group(1), _typed(m.group(2))))
        # ```yaml snippets: the settings they set
        for block in re.findall(r"```ya?ml\n(.*?)```", text, re.S):
            for name, value in _settings_in(yaml.safe_load(block)):
                found.append((where, name, value))
    # What the collection's own messages tell a user to set (an E_UNSUPPORTED's alternative, a code's fix).
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "*", "*.py")) +
                       glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))):
        for m in re.finditer(r"(?:[Ss]et |, |or )(%s): ('[^']*'|[A-Za-z0-9_.-]*[A-Za-z0-9_])" % SETTING,
                             _read(path)):
            found.append((os.path.relpath(path, ROOT), m.group(1), _typed(m.group(2))))
    # The example inventories are documentation users copy: each file's settings together (they go together).
    for path in sorted(glob.glob(os.path.join(ROOT, "inventories", "*", "group_vars", "*", "*.yml"))):
        given = dict((n, v) for n, v in _settings_in(yaml.safe_load(_read(path)))
                     if not (isinstance(v, str) and "{{" in v))
        for name, value in sorted(given.items()):
            found.append((os.path.relpath(path, ROOT), name, (value, given)))
    return [(w, n, v) for w, n, v in found if n in OPTIONS]


def _settings_in(data):
    """(name, value) of every setting a YAML document sets, at any depth (an inventory's hosts and vars)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and key in OPTIONS:
                yield key, value
            else:
                yield from _settings_in(value)


def spec_examples():
    """[(where, setting, value)] that the specs document: each default (not computed), the roles' defaults, and
    what a description promises - 'empty = ...' (the empty value), '0 = ...' (zero), 'false for ...', 'in
    tokens' (a token count), 'fractions' (a fraction), and the numbers of '(180; 1 for burn-in weights)' or
    '(default 1800 for GPU engines, 120 for llama.cpp)'."""
    found = []
    empty = {"str": "", "path": "", "list": [], "dict": {}, "raw": ""}
    for name, option in sorted(OPTIONS.items()):
        where = "roles/%s/meta/argument_specs.yml" % option["role"]
        kind, elements = option.get("type", "str"), option.get("elements")
        description = " ".join(option.get("description") if isinstance(option.get("description"), list)
                               else [option.get("description") or ""])
        if "default" in option and not (isinstance(option["default"], str) and "{{" in option["default"]):
            found.append((where + " default", name, option["default"]))
        if re.search(r"\b[Ee]mpty\b", description) and kind in empty:
            found.append((where + " 'empty'", name, empty[kind]))
        number = kind in ("int", "float") or (kind == "list" and elements in ("int", "float"))
        if number and re.search(r"(^|[;(,] )0( =|:| for| means)", description):
            found.append((where + " '0 ='", name, [0] if kind == "list" else 0))
        if kind == "bool" and re.search(r"\bfalse (for|leaves)\b", description):
            found.append((where + " 'false'", name, False))
        if number and re.search(r"\bin tokens\b", description):
            found.append((where + " 'in tokens'", name, [32768] if kind == "list" else 32768))
        if number and re.search(r"\bfractions?\b", description):
            found.append((where + " 'fractions'", name, [0.5] if kind == "list" else 0.5))
        if kind in ("int", "float"):
            for group in re.findall(r"\(((?:default )?\d[^)]*)\)", description):
                for value in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.%])", group):
                    found.append((where + " (%s)" % group, name, float(value) if "." in value else int(value)))
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml"))):
        for name, value in sorted((yaml.safe_load(_read(path)) or {}).items()):
            if name in OPTIONS and "{{" not in repr(value):
                found.append((os.path.relpath(path, ROOT), name, value))
    return found


EXAMPLES = doc_examples() + spec_examples()


def refusal(name, value):
    """None when some profile accepts the value for the setting (a finding that blames another setting, such as
    llm_context beyond a smaller window, is not a refusal of this value); else the findings on it. An
    inventory's value comes as (value, the file's settings), tried together."""
    worst = None
    given = value[1] if isinstance(value, tuple) else {name: value}
    for base in BASES:
        findings = [f for f in validate(dict(base, **given), OPTIONS, SPECS.internal)[0]
                    if f["severity"] == "error" and f.get("details", {}).get("variable") == name]
        if not findings:
            return None
        worst = worst or findings
    return worst


def test_the_docs_give_examples_to_try():
    """The readers found what the docs hold: the README's -e examples, the prose's `name: value`, the
    inventories, every spec default, and the description that promised tokens."""
    wheres = set(w.split(" ")[0] for w, n, v in EXAMPLES)
    assert {"README.md", "docs/preflight.md", "inventories/example/group_vars/llm_hosts/settings.yml",
            "plugins/module_utils/settings.py"} <= wheres
    names = set((n, repr(v)) for w, n, v in EXAMPLES if not isinstance(v, tuple))
    assert ("llm_port", "8021") in names and ("llm_media_urls", "'any'") in names
    assert ("verify_needle_sizes", "[32768]") in names  # "Needle prompt sizes, in tokens or as fractions"
    # An example's README, and the JSON form of -e in it.
    example = [(n, v) for w, n, v in EXAMPLES if w == "docs/examples/cpu-llamacpp/README.md"]
    assert ("llm_context", 8192) in example and ("bench_prefill_sizes", [1024, 2048, 4096, 8000]) in example
    assert len(EXAMPLES) > 400


@pytest.mark.parametrize("where, name, value", EXAMPLES, ids=[
    "%s:%s=%r" % (w, n, v[0] if isinstance(v, tuple) else v) for w, n, v in EXAMPLES])
def test_every_documented_value_is_accepted(where, name, value):
    assert refusal(name, value) is None, "%s documents %s: %r, which validation refuses" % (where, name, value)


def test_off_written_unquoted_in_yaml_is_refused_saying_how_to_write_it():
    """`llm_drafter: off` in group_vars arrives as false (YAML 1.1), and the roles read the variable itself too:
    refused with the way to write it (the messages and docs write 'off' quoted, a value YAML keeps)."""
    given = yaml.safe_load("llm_drafter: off\n")
    assert given == {"llm_drafter": False}
    findings = validate(dict(BASES[1], **given), OPTIONS, SPECS.internal)[0]
    assert [f["message"] for f in findings] == [
        "llm_drafter is false; allowed: llm_drafter: 'off', quoted (YAML reads off unquoted as false)"]
    assert validate(dict(BASES[1], **yaml.safe_load("llm_drafter: 'off'\n")), OPTIONS, SPECS.internal)[0] == []
    findings = validate(dict(BASES[1], service_restart_policy=False), OPTIONS, SPECS.internal)[0]
    assert findings[0]["message"].endswith("allowed: service_restart_policy: 'no', quoted (YAML reads no unquoted "
                                           "as false)")
