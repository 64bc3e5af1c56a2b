"""Settings validation: every rule, each bad value refused with its code, naming variable and value;
the typed settings it hands on, and the copy with the secrets masked."""
import glob
import os

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import MASK, display, validate
from settings_bases import CPU, DEFAULTS, OPTIONS, ROOT, SGLANG, SPECS


def check(base=None, **changes):
    return validate(dict(base or DEFAULTS, **changes), OPTIONS, SPECS.internal)[0]


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
    ("llm_kv_cap_gib", -1, "E_CONFIG", "0 or more"),
    ("llm_reserve_gib", -1, "E_CONFIG", "0 or more"),
    ("llm_max_tokens", 0, "E_CONFIG", "1 or more"),
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
    ("llm_attention_backend", "fa3", "E_CONFIG",
     "'' (the engine's choice), or for vllm: FLASH_ATTN, TRITON_ATTN, FLASHINFER, FLEX_ATTENTION"),
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
    (SGLANG, dict(llm_thinking=False), "llm_thinking"),            # SGLang 0.5.5 sets no thinking default
    (None, dict(llm_gpus=[]), "llm_gpus"),                        # vLLM needs GPUs
    (SGLANG, dict(llm_gpus=[]), "llm_gpus"),
    (None, dict(llm_dense="q4"), "llm_dense"),                    # q4 needs a 4-bit checkpoint
    (None, dict(llm_dense="bf16"), "llm_dense"),                  # no fp8 -> bf16 at load
    (CPU, dict(llm_kv="fp8"), "llm_kv"),                          # llama.cpp has no fp8 KV
    (CPU, dict(llm_attention_backend="TRITON_ATTN"), "llm_attention_backend"),  # llama-server has one
    (CPU, dict(llm_vision=True, llm_media_urls="any"), "llm_vision"),  # hub weights: no projector fetched
    # llama-server 0.7.0 fetches any http(s) image URL: only llm_media_urls: any is honest
    (CPU, dict(llm_weights="dummy", llm_vision=True), "llm_media_urls"),
    (CPU, dict(llm_weights="dummy", llm_vision=True, llm_media_urls=["example.com"]), "llm_media_urls"),
    (CPU, dict(llm_dense="fp8"), "llm_dense"),                    # the GGUF's quantization is fixed
    (CPU, dict(llm_drafter="ngram"), "llm_drafter"),
    (CPU, dict(llm_kv_cap_gib=60), "llm_kv_cap_gib"),
    (CPU, dict(llm_reserve_gib=7.5), "llm_reserve_gib"),
    # vLLM 0.26.0 has no MTP drafting for GLM's vision models (the burn-in vision folder, or a GLM-4.xV repo)
    (None, dict(llm_drafter="mtp"), "llm_drafter"),
    (None, dict(llm_weights="dummy", llm_drafter="mtp"), "llm_drafter"),
    # dummy weights: GLM folders without a draft model for vLLM/SGLang (the vision one on vLLM only),
    # a GGUF without MTP for llama.cpp
    (SGLANG, dict(llm_weights="dummy"), "llm_vision"),
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
    assert check(llm_weights="dummy", llm_vision=False, llm_drafter="mtp") == []  # MTP on the text folder
    assert check(llm_weights="dummy") == []                                    # the vision folder on vLLM
    assert check(llm_vision=False, llm_drafter="mtp", llm_model="zai-org/GLM-4.5-Air-FP8") == []
    assert check(CPU, llm_weights="dummy", llm_drafter="gpuserve/tiny-draft") == []  # a second dummy GGUF
    # the burn-in GGUF with its projector (mmproj.gguf): images on llama.cpp, any media URL (it fetches them)
    assert check(CPU, llm_weights="dummy", llm_vision=True, llm_media_urls="any") == []
    assert check(CPU, llm_weights="dummy", llm_vision=True, llm_media_urls="any", llm_drafter="gpuserve/tiny-draft") == []
    assert check(llm_drafter="org/draft-model") == []                           # real weights: any draft repo


def test_sglang_with_any_media_urls_and_no_kv_cap_is_accepted():
    assert check(SGLANG) == []
    assert check(llm_dense="fp8", llm_model_dense="bf16") == []  # vLLM quantizes bf16 to fp8 at load
    assert check(llm_vision=True, llm_media_urls=["example.com", "*.cdn.example.org"]) == []


def test_unknown_llm_variable_is_a_warning():
    findings = check(llm_paralel=8)
    assert [(f["code"], f["subject"], f["severity"]) for f in findings] == [
        ("W_UNKNOWN_SETTING", "llm_paralel", "warning")]
    assert check(preflight_min_free_mb=1000)[0]["subject"] == "preflight_min_free_mb"  # every role's knobs
    assert check(service_profile="x", llm_settings={}) == []  # the roles' own derived names are not settings
    # roles/llm/tasks/become.yml's probe and its facts, registered before a later play validates again
    assert check(llm_become_probe={"rc": 0, "stdout": "0"}, llm_become_ok=True, llm_become_error="x",
                 llm_become_findings=[]) == []


def test_secret_values_are_never_shown():
    findings = check(llm_api_key=["sk-very-secret"])
    assert [f["code"] for f in findings] == ["E_CONFIG"]
    assert "sk-very-secret" not in repr(findings)
    assert "(hidden)" in findings[0]["message"]


def test_strings_for_numbers_are_converted_as_ansible_does():
    assert check(llm_parallel="40", llm_port="8020", llm_thinking="no") == []


def test_validation_hands_on_the_settings_typed_as_the_specs_say():
    findings, values = validate(dict(DEFAULTS, llm_parallel="40", llm_thinking="no", llm_reserve_gib="7",
                                     preflight_expected_power_w="300", service_serial="50%"), OPTIONS, SPECS.internal)
    assert findings == []
    assert values["llm_parallel"] == 40 and isinstance(values["llm_parallel"], int)
    assert values["llm_thinking"] is False
    assert values["llm_reserve_gib"] == 7.0 and isinstance(values["llm_reserve_gib"], float)
    assert values["preflight_expected_power_w"] == 300.0
    # A refused setting is left out of what is handed on.
    findings, values = validate(dict(DEFAULTS, llm_parallel="forty"), OPTIONS, SPECS.internal)
    assert "llm_parallel" not in values and [f["subject"] for f in findings] == ["llm_parallel"]


def test_the_display_copy_masks_every_option_the_specs_mark_no_log():
    secret = sorted(n for n, o in OPTIONS.items() if o.get("no_log"))
    assert "llm_api_key" in secret and "llm_hf_token" in secret
    assert "host_proxy" in secret  # it may hold the proxy's credentials
    values = validate(dict(DEFAULTS, llm_api_key="sk-1", llm_hf_token="hf_2", host_proxy="http://u:pw3@proxy:3128"),
                      OPTIONS, SPECS.internal)[1]
    shown = display(values, OPTIONS)
    assert [shown[n] for n in secret] == [MASK] * len(secret)
    assert "sk-1" not in repr(shown) and "hf_2" not in repr(shown) and "pw3" not in repr(shown)
    assert shown["llm_parallel"] == values["llm_parallel"]
    # Driven by the spec: a new no_log option is masked without naming it anywhere else.
    options = dict(OPTIONS, router_admin_token={"type": "str", "no_log": True})
    assert display({"router_admin_token": "t0k"}, options) == {"router_admin_token": MASK}
    assert display(dict(values, llm_api_key=""), OPTIONS)["llm_api_key"] == ""  # unset stays visibly unset


@pytest.mark.parametrize("name, value, allowed", [
    ("preflight_expected_power_w", "250W", "a number"),
    ("preflight_min_free_mib", -1, "0 or more"),
    ("preflight_min_compute_capability", "Hopper", "a compute capability such as 8.9"),
    ("host_venv_index_url", "ftp://mirror/simple", "an http(s) URL, or empty"),
    ("host_venv_packages", {"nvidia-ml-py": 1}, "a list of str"),
    ("service_serial", "0", "a number of hosts (1 or more), a percentage (1% to 100%), or a list of them"),
    ("service_serial", "150%", "a number of hosts (1 or more), a percentage (1% to 100%), or a list of them"),
    ("service_health_timeout", 0, "1 or more"),
    ("service_log_max_size", "100 MB", "a size such as 100m (Docker's json-file max-size)"),
    ("service_restart_policy", "sometimes", "one of no, on-failure, always, unless-stopped"),
    ("weights_rsync_bind", "all", "an IPv4 or IPv6 address to bind"),
    ("weights_rsync_port", 70000, "1 to 65535"),
    ("weights_progress_interval", 0, "1 or more"),
    ("image_git_commit", "main", "a full commit hash (40 hex digits), or empty"),
    ("autotune_moe", "fast", "one of off, reduced, full"),
    ("bench_concurrency", [1, 0], "a list of numbers from 1 to 1024"),
    ("verify_needle_sizes", [0.5, 2.5], "a list of fractions of llm_context from 0.01 to 1, or of token counts (whole numbers above 1)"),
    ("verify_timeout", "an hour", "an integer"),
    ("host_setup", "maybe", "true or false"),
    ("host_docker_source", "snap", "one of distribution, docker"),
    ("host_docker_restart", "sometimes", "one of refuse, allow"),
    ("host_docker_key_fingerprint", "0EBFCD88", "a key fingerprint (40 hex digits)"),
    ("host_nvidia_key_fingerprint", "C95B321B61E88C1809C4F759DDCAE044F796ECBZ", "a key fingerprint (40 hex digits)"),
    ("host_docker_data_root", "data/docker", "an absolute path, or empty"),
    ("host_docker_version", "latest", "Docker's upstream version such as 29.7.1"),
    ("host_nvidia_toolkit_version", "1.18.2", "a package version such as 1.18.2-1"),
    ("host_apt_mirror", "mirror.internal/apt", "an http(s) URL, or empty"),
    ("host_docker_timeout", 0, "1 or more"),
])
def test_every_role_knob_is_validated_like_the_llm_settings(name, value, allowed):
    findings = check(**{name: value})
    assert [(f["code"], f["subject"]) for f in findings] == [("E_CONFIG", name)], findings
    assert findings[0]["details"]["allowed"] == allowed
    assert repr(value) in findings[0]["message"]


def test_the_host_stages_forms_take_what_vendors_publish_and_a_bad_proxy_is_never_shown():
    assert check(host_docker_key_fingerprint="9DC8 5822 9FC7 DD38 854A  E2D8 8D81 803C 0EBF CD88",
                 host_nvidia_key_fingerprint="c95b321b61e88c1809c4f759ddcae044f796ecb0", host_docker_data_root="",
                 host_apt_mirror="http://mirror.internal:8080/apt", host_proxy="http://user:pw@proxy:3128",
                 host_nvidia_toolkit_version="1.19.0~rc.5-1") == []
    findings = check(host_proxy="user:s3cret@proxy:3128")  # no scheme
    assert [(f["code"], f["subject"]) for f in findings] == [("E_CONFIG", "host_proxy")]
    assert "s3cret" not in repr(findings) and findings[0]["details"]["value"] is None


def test_service_serial_takes_what_ansible_serial_takes():
    for good in (1, "3", "25%", "100%", [1, "50%", "100%"]):
        assert check(service_serial=good) == [], good


def test_every_role_default_is_a_documented_setting():
    """A knob without a spec entry would escape validation (and be called a typo)."""
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml")):
        if not os.path.exists(os.path.join(os.path.dirname(path), "..", "meta", "argument_specs.yml")):
            continue  # a role with no settings (gpuserve.llm.job: its callers give its parameters)
        with open(path) as f:
            names = set(yaml.safe_load(f) or {})
        assert names - set(OPTIONS) == set(), path


def test_what_the_roles_register_and_set_is_not_a_setting():
    """A run that brings a host up and then benches it validates again in the same process: the facts the
    earlier plays set (bench_job, weights_model, service_warmed ...) are the roles' own, not typos."""
    later = dict(DEFAULTS, bench_job={"ansible_job_id": "1"}, bench_dummy=True, weights_model={"dummy": True},
                 service_warmed={"line": "warm-up in 1 s"}, bench_typo=3)
    findings = validate(later, OPTIONS, SPECS.internal)[0]
    assert [f["subject"] for f in findings if f["code"] == "W_UNKNOWN_SETTING"] == ["bench_typo"], findings
