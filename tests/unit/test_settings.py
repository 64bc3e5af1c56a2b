"""Settings validation: every rule, each bad value refused with its code, naming variable and value."""
import os

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "roles", "llm", "meta", "argument_specs.yml")) as f:
    OPTIONS = yaml.safe_load(f)["argument_specs"]["main"]["options"]
with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    DEFAULTS = yaml.safe_load(f)
# As Ansible templates them for the recipe's model.
DEFAULTS.update(llm_context=DEFAULTS["llm_model_max_context"], llm_model_dense="fp8", llm_data_dir="/var/lib/gpuserve",
                llm_hf_cache_dir="/var/lib/gpuserve/hf", llm_cache_dir="/var/lib/gpuserve/cache")
CPU = dict(DEFAULTS, llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4",
           llm_model_dense="q4", llm_kv_cap_gib=0, llm_reserve_gib=0)
SGLANG = dict(DEFAULTS, llm_engine="sglang", llm_media_urls="any", llm_kv_cap_gib=0)


def check(base=None, **changes):
    return validate(dict(base or DEFAULTS, **changes), OPTIONS)


def test_the_recipe_defaults_are_valid():
    assert check() == []
    assert check(CPU) == []


@pytest.mark.parametrize("name, value, code, allowed", [
    # wrong type
    ("llm_gpus", "zero", "E_CONFIG", "a list of int"),
    ("llm_container_name", "my engine/1", "E_CONFIG",
     "a Docker container name: letters, digits, '_', '.', '-', starting with a letter or digit"),
    ("llm_parallel", "forty", "E_CONFIG", "an integer"),
    ("llm_vision", "maybe", "E_CONFIG", "true or false"),
    ("llm_reserve_gib", [1], "E_CONFIG", "a number"),
    # not a choice
    ("llm_engine", "tensorfold", "E_CONFIG", "one of vllm, sglang, llamacpp"),
    ("llm_kv", "fp4", "E_CONFIG", "one of fp8, bf16"),
    ("llm_dense", "int8", "E_CONFIG", "one of fp8, q4, bf16"),
    ("llm_reasoning_effort", "max", "E_CONFIG", "one of low, medium, high"),
    # out of range
    ("llm_parallel", 0, "E_CONFIG", "1 to 1024"),
    ("llm_parallel", 5000, "E_CONFIG", "1 to 1024"),
    ("llm_port", 0, "E_CONFIG", "1 to 65535"),
    ("llm_port", 70000, "E_CONFIG", "1 to 65535"),
    ("llm_kv_cap_gib", -1, "E_CONFIG", "0 to any"),
    ("llm_reserve_gib", -1, "E_CONFIG", "0 to any"),
    ("llm_max_tokens", 0, "E_CONFIG", "1 to any"),
    # empty
    ("llm_model", "", "E_CONFIG", "a non-empty string"),
    ("llm_served_model_name", " ", "E_CONFIG", "a non-empty string"),
    ("llm_model_revision", "", "E_CONFIG", "a non-empty string"),
    # malformed
    ("llm_model", "GLM-4.6V", "E_CONFIG", "a Hugging Face repo id, org/name"),
    ("llm_drafter", "dflash2", "E_CONFIG", "mtp, off, ngram, or a draft model repo org/name"),
    ("llm_host", "my host", "E_CONFIG", "an IPv4 or IPv6 address to bind"),
    ("llm_media_urls", ["http://x/"], "E_CONFIG", "data_only, any, or a list of domain names"),
    ("llm_media_urls", "some", "E_CONFIG", "data_only, any, or a list of domain names"),
    # duplicate
    ("llm_gpus", [0, 1, 1, 3], "E_CONFIG", "each GPU index once"),
    ("llm_gpus", [-1, 0], "E_CONFIG", "GPU indices of 0 or more"),
    # cross-field
    ("llm_max_tokens", 200000, "E_CONFIG", "at most llm_context (131072)"),
    ("llm_context", 1048576, "E_CONTEXT", "at most 131072"),
])
def test_bad_setting_is_refused_with_its_code(name, value, code, allowed):
    findings = check(**{name: value})
    mine = [f for f in findings if f["subject"] == name]
    assert [f["code"] for f in mine] == [code], findings
    assert mine[0]["details"]["allowed"] == allowed
    assert name in mine[0]["message"]
    if code == "E_CONFIG":
        assert repr(value) in mine[0]["message"]


@pytest.mark.parametrize("base, changes, subject", [
    (SGLANG, dict(llm_media_urls="data_only"), "llm_media_urls"),  # SGLang cannot refuse http(s) URLs
    (SGLANG, dict(llm_kv_cap_gib=60), "llm_kv_cap_gib"),           # SGLang sizes its pool by fraction
    (None, dict(llm_gpus=[]), "llm_gpus"),                        # vLLM needs GPUs
    (SGLANG, dict(llm_gpus=[]), "llm_gpus"),
    (None, dict(llm_dense="q4"), "llm_dense"),                    # q4 needs a 4-bit checkpoint
    (None, dict(llm_dense="bf16"), "llm_dense"),                  # no fp8 -> bf16 at load
    (CPU, dict(llm_kv="fp8"), "llm_kv"),                          # llama.cpp has no fp8 KV
    (CPU, dict(llm_vision=True), "llm_vision"),
    (CPU, dict(llm_dense="fp8"), "llm_dense"),                    # the GGUF's quantization is fixed
    (CPU, dict(llm_drafter="ngram"), "llm_drafter"),
    (CPU, dict(llm_kv_cap_gib=60), "llm_kv_cap_gib"),
    (CPU, dict(llm_reserve_gib=7.5), "llm_reserve_gib"),
    # dummy weights: a text-only folder with an MTP layer for vLLM/SGLang, a GGUF without MTP for llama.cpp
    (None, dict(llm_weights="dummy"), "llm_vision"),
    (None, dict(llm_weights="dummy", llm_vision=False, llm_drafter="org/draft-model"), "llm_drafter"),
    (dict(SGLANG, llm_vision=False), dict(llm_weights="dummy", llm_drafter="org/draft"), "llm_drafter"),
    (CPU, dict(llm_weights="dummy", llm_drafter="mtp"), "llm_drafter"),
])
def test_engine_limits_are_e_unsupported_naming_engine_and_alternative(base, changes, subject):
    findings = check(base, **changes)
    assert [(f["code"], f["subject"]) for f in findings] == [("E_UNSUPPORTED", subject)]
    assert "set " in findings[0]["message"]
    assert findings[0]["details"]["engine"] == dict(base or DEFAULTS, **changes)["llm_engine"]


def test_dummy_weights_with_what_they_can_serve_are_accepted():
    assert check(llm_weights="dummy", llm_vision=False) == []                 # MTP drafting on the dummy folder
    assert check(CPU, llm_weights="dummy", llm_drafter="gpuserve/tiny-draft") == []  # a second dummy GGUF
    assert check(llm_drafter="org/draft-model") == []                           # real weights: any draft repo


def test_sglang_with_any_media_urls_and_no_kv_cap_is_accepted():
    assert check(SGLANG) == []
    assert check(llm_dense="fp8", llm_model_dense="bf16") == []  # vLLM quantizes bf16 to fp8 at load
    assert check(llm_vision=True, llm_media_urls=["example.com", "*.cdn.example.org"]) == []


def test_unknown_llm_variable_is_a_warning():
    findings = check(llm_paralel=8)
    assert [(f["code"], f["subject"], f["severity"]) for f in findings] == [
        ("W_UNKNOWN_SETTING", "llm_paralel", "warning")]
    assert validate(dict(DEFAULTS, llm_hf_token="x"), OPTIONS, known_names=["llm_hf_token"]) == []


def test_secret_values_are_never_shown():
    findings = check(llm_api_key=["sk-very-secret"])
    assert [f["code"] for f in findings] == ["E_CONFIG"]
    assert "sk-very-secret" not in repr(findings)
    assert "(hidden)" in findings[0]["message"]


def test_strings_for_numbers_are_converted_as_ansible_does():
    assert check(llm_parallel="40", llm_port="8020", llm_thinking="no") == []
