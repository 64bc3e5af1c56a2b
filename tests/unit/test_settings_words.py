"""Every message validation gives is written for the user (issue 38 item 3): a battery of bad values through
validation, plain and as a play renders the roles' defaults, each refused with one finding that names the
setting, and none that carries a template's or Python's error text or judges a setting through one refused."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import range_text, references, validate
from settings_bases import CPU, DEFAULTS, OPTIONS, ROOT, SGLANG, SPECS


# What a user must never read: a template's or Python's error text, or a range without its end in words.
FORBIDDEN = ("object of type", "has no attribute", "Traceback", "undefined", "NoneType", "{{", "{%", "to any",
             "is None", "Error", "could not be resolved", "jinja", "Jinja")
# Wrong values of every kind a user types: empty, null, the wrong type, the wrong case, out of any range.
BAD = [None, "", "abc", "VLLM", -1, -0.5, 0, 10 ** 12, True, [], {}, [None], ["x"], [-1], [[1]], {"a": None}]


def words_only(findings):
    for f in findings:
        for text in (f["message"], str(f.get("details", {}).get("allowed", ""))):
            assert not [w for w in FORBIDDEN if w in text], f


@pytest.mark.parametrize("base, prefix", [(DEFAULTS, ""), (CPU, "llm_"), (SGLANG, "llm_")],
                         ids=["vllm", "llamacpp", "sglang"])
def test_every_setting_refuses_each_bad_value_once_in_words(base, prefix):
    """Each option of every role (on the other engines, the llm_ ones their limits read), each bad value: no
    exception, words only; a refused value is one error finding on that setting, naming it, and no other
    setting is judged through it."""
    assert validate(base, OPTIONS, SPECS.internal)[0] == []
    tried = refused = 0
    for name in sorted(n for n in OPTIONS if n.startswith(prefix)):
        for value in BAD:
            tried += 1
            findings, values = validate(dict(base, **{name: value}), OPTIONS, SPECS.internal)
            words_only(findings)
            errors = [f for f in findings if f["severity"] == "error"]
            mine = [f for f in errors if f.get("details", {}).get("variable") == name]
            if not mine:
                continue
            refused += 1
            assert errors == mine[:1], (name, value, errors)
            assert name in mine[0]["message"] and mine[0]["subject"] == name
            assert name not in values  # a refused setting is not handed on
    assert refused > tried // 2  # the battery is mostly mistakes: the ones accepted are values the setting takes


def test_null_is_refused_in_yamls_words():
    """No setting has null as its value (every one has a default): null would reach a template as None."""
    for name in ("llm_gpus", "llm_kv_cap_gib", "router_drain_timeout", "llm_tls_cert_file", "verify_checks"):
        findings = validate(dict(DEFAULTS, **{name: None}), OPTIONS, SPECS.internal)[0]
        assert [(f["code"], f["subject"]) for f in findings] == [("E_CONFIG", name)]
        assert "%s is null; allowed: " % name in findings[0]["message"]
    # SGLang's KV-cap rule compared None with 0 (a TypeError in the action) before null was refused.
    assert [f["subject"] for f in validate(dict(SGLANG, llm_kv_cap_gib=None), OPTIONS, SPECS.internal)[0]] == [
        "llm_kv_cap_gib"]


def test_ranges_read_as_words():
    assert range_text(1, None) == "1 or more"
    assert range_text(1, 65535) == "1 to 65535"
    assert range_text(1, None, elements=True) == "a list of numbers, each 1 or more"
    assert range_text(1, 1024, elements=True) == "a list of numbers from 1 to 1024"
    f = validate(dict(DEFAULTS, router_drain_timeout=-5), OPTIONS, SPECS.internal)[0]
    assert [x["message"] for x in f] == ["router_drain_timeout is -5; allowed: 1 or more"]
    f = validate(dict(DEFAULTS, bench_prefill_sizes=[0]), OPTIONS, SPECS.internal)[0]
    assert f[0]["details"]["allowed"] == "a list of numbers, each 1 or more"


def test_a_refused_setting_is_not_judged_again_through_another():
    """One finding per mistake: cross-field rules and the engine's limits read only settings that passed."""
    def subjects(base, **changes):
        return [f["subject"] for f in validate(dict(base, **changes), OPTIONS, SPECS.internal)[0]]
    # an unknown media rule on SGLang: refused as a form, not again as one SGLang cannot honour
    assert subjects(SGLANG, llm_media_urls="some") == ["llm_media_urls"]
    # a window of 0 tokens: refused, not compared with llm_context
    assert subjects(DEFAULTS, llm_model_max_context=0) == ["llm_model_max_context"]
    # a context beyond the window: E_CONTEXT, not also llm_max_tokens against it
    assert subjects(DEFAULTS, llm_context=300000, llm_max_tokens=200000) == ["llm_context"]
    # a router port out of range: refused, not compared with its neighbours through the default
    router = dict(DEFAULTS, router_port=70000, router_admin_port=8000, router_metrics_port=8002)
    assert [f["subject"] for f in validate(router, OPTIONS, SPECS.internal, ("llm_routers",))[0]] == ["router_port"]
    # true for a number (Ansible's int would take it as 1)
    assert subjects(DEFAULTS, bench_reuse_turns=True) == ["bench_reuse_turns"]
    # a list for a path (Ansible's path would take its text)
    assert subjects(DEFAULTS, llm_tls_cert_file=["a.pem"]) == ["llm_tls_cert_file"]


def test_references_are_what_a_template_reads():
    assert references("{{ llm_data_dir }}/hf") == {"llm_data_dir"}
    assert references("{{ [llm_settings.llm_context // 4, 32768] | min }}") == {"llm_settings", "llm_context"}
    assert references("{{ llm_settings['llm_parallel'] }}") == {"llm_settings", "llm_parallel"}
    assert references([{"path": "{{ a }}", "gib": "{{ b | int }}"}]) == {"a", "b"}
    assert references("plain") == set() and references(3) == set() and references("{{ broken") == set()
    # A collection's or Ansible's filters and tests, which a plain Jinja environment does not know
    assert references("{{ d | default({}) | gpuserve.llm.engine_image_bytes(llm_image) }}") == {"d", "llm_image"}
    assert references("{{ a if b is ansible.builtin.match('x') else c | ansible.builtin.to_json }}") == {"a", "b", "c"}


# The roles' defaults as a play holds them (every role's defaults/main.yml), rendered by Ansible's own templar
# with the collection's plugins: in a process of its own, whose collection loader is Ansible's (this one imports
# the collection from the checkout's path).
RENDER = r"""
import glob, json, os, sys
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
root = sys.argv[1]
init_plugin_loader([os.path.join(root, ".collections")])
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs, validate_templated

def trusted(value):  # a play's own files and a user's extra-vars are trusted as templates
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(v) for v in value]
    if isinstance(value, dict):
        return dict((k, trusted(v)) for k, v in value.items())
    return value

specs, loader, defaults = load_specs(root), DataLoader(), {}
for path in sorted(glob.glob(os.path.join(root, "roles", "*", "defaults", "main.yml"))):
    with open(path) as f:
        defaults.update(trusted(yaml.safe_load(f) or {}))
scope = dict(defaults, inventory_hostname="gpu-host-1", group_names=["llm_hosts"],
             groups={"all": ["gpu-host-1"], "llm_hosts": ["gpu-host-1"]}, hostvars={"gpu-host-1": {}},
             role_path=os.path.join(root, "roles", "image"))
out = []
for given in json.load(sys.stdin):
    variables = dict(scope, **trusted(given))
    raw = dict((n, v) for n, v in variables.items() if specs.is_setting(n))

    def render(value, typed):
        return Templar(loader=loader, variables=variables if typed is None else dict(
            variables, llm_settings=typed)).template(value)
    findings, values = validate_templated(raw, render, specs.options, specs.internal, ("llm_hosts",), set(variables))
    out.append({"findings": [dict(code=f["code"], subject=f["subject"], severity=f["severity"], message=f["message"],
                                  details=dict((k, str(v)) for k, v in f.get("details", {}).items()))
                             for f in findings],
                "values": dict((n, values[n]) for n in ("verify_exact_prompts", "bench_reuse_tokens",
                                                       "preflight_image_cuda", "llm_engine_port", "image_source")
                               if n in values),
                "names": sorted(values)})
print(json.dumps(out))
"""
RENDERED_CASES = [
    # issue 38: a wrong-case engine gave an E_CONFIG with Jinja's words for preflight_image_cuda beside its own
    (dict(llm_engine="VLLM"), "llm_engine"),
    (dict(llm_engine=None), "llm_engine"),
    (dict(router_drain_timeout=-5), "router_drain_timeout"),
    (dict(llm_model_max_context=-1), "llm_model_max_context"),  # llm_context reads it: not refused again
    (dict(llm_model_max_context="many"), "llm_model_max_context"),
    (dict(llm_port=70000), "llm_port"),                         # llm_engine_port is llm_port + 10000
    (dict(llm_parallel=0), "llm_parallel"),                     # verify's and the warm-up's defaults read it
    (dict(llm_parallel="forty"), "llm_parallel"),
    (dict(llm_context=0), "llm_context"),                       # bench's, verify's and the warm-up's read it
    (dict(llm_data_dir=["a", "b"]), "llm_data_dir"),            # the caches' paths read it
    (dict(llm_weights="hub2"), "llm_weights"),                  # the preflight disk budget reads it
    (dict(llm_drafter=None), "llm_drafter"),
    (dict(llm_vision="maybe"), "llm_vision"),                   # the burn-in preset reads it
    (dict(llm_gpus=None), "llm_gpus"),                          # the container's ulimits read its length
    (dict(llm_served_model_name="{{ nosuch_variable }}"), "llm_served_model_name"),
    (dict(llm_context="{{ llm_model_max_context // 0 }}"), "llm_context"),
]
_RENDERED = []


def rendered(index):
    """(findings, values) of RENDERED_CASES[index]; index None: the defaults as they are."""
    if not _RENDERED:
        cases = [{}] + [given for given, dummy in RENDERED_CASES]
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        done = subprocess.run([sys.executable, "-c", RENDER, ROOT], input=json.dumps(cases), capture_output=True,
                              text=True, cwd=ROOT, env=env, timeout=300, check=True)
        _RENDERED.extend(json.loads(done.stdout.strip().splitlines()[-1]))
    return _RENDERED[0 if index is None else index + 1]


def test_the_roles_defaults_render_and_pass():
    result = rendered(None)
    assert result["findings"] == []
    # the defaults that read the typed settings read the values validated first
    assert result["values"]["verify_exact_prompts"] == 8 and result["values"]["bench_reuse_tokens"] == 32768
    assert result["values"]["preflight_image_cuda"] and result["values"]["llm_engine_port"] == 18020
    assert result["values"]["image_source"] == "pull"


@pytest.mark.parametrize("index", range(len(RENDERED_CASES)), ids=[
    "%s=%r" % list(given.items())[0] for given, subject in RENDERED_CASES])
def test_one_finding_in_words_for_each_mistake_as_a_play_renders_it(index):
    subject = RENDERED_CASES[index][1]
    result = rendered(index)
    words_only(result["findings"])
    assert [(f["code"], f["subject"]) for f in result["findings"]] == [("E_CONFIG", subject)], result["findings"]
    assert subject in result["findings"][0]["message"]
    assert subject not in result["names"]


def test_a_template_that_reads_what_is_not_set_says_so_in_words():
    cases = [given for given, dummy in RENDERED_CASES]
    findings = rendered(cases.index(dict(llm_served_model_name="{{ nosuch_variable }}")))["findings"]
    assert findings[0]["message"] == ("llm_served_model_name could not be computed: it reads nosuch_variable, which "
                                      "is not set; allowed: a string, or a template of settings that are set")
    findings = rendered(cases.index(dict(llm_context="{{ llm_model_max_context // 0 }}")))["findings"]
    assert "its template, which reads llm_model_max_context, gives no value" in findings[0]["message"]
