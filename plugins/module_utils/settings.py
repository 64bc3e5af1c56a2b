# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Validation of every setting, once, before anything changes: the llm_ settings and every role's
knobs (preflight_*, service_*, ...). Types and choices come from the roles' argument specs, then
ranges, forms, cross-field rules and what each engine can honour. Each failure is a finding that
names the variable, the value and what is allowed.

A value flows one way: inventory -> validate() -> the typed settings -> templates and modules.
validate() returns the typed values (as Ansible converts them: '2' -> 2 for an int) beside the
findings, and display() the copy that may be shown or written (every no_log option masked)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import ipaddress
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuserve.llm.plugins.module_utils import checkpoint, dummy_hf
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,60}$")
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
DOMAIN = re.compile(r"^(\*\.)?([A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}$")
DRAFTER_METHODS = ("mtp", "off", "ngram")
GPU_ENGINES = ("vllm", "sglang")
# The attention backends of each engine's --attention-backend that serve a GQA model such as GLM's on NVIDIA GPUs
# (vLLM 0.26.0's AttentionBackendEnum names, SGLang 0.5.5's choices less the MLA, NPU and ROCm ones).
ATTENTION_BACKENDS = {
    "vllm": ("FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION"),
    "sglang": ("fa3", "flashinfer", "triton", "flex_attention", "torch_native"),
}

# Integer and float ranges: (minimum, maximum or None). Every other number a spec declares must be 0 or more.
RANGES = {
    "llm_model_max_context": (1, None),
    "llm_parallel": (1, 1024),
    "llm_context": (1, None),
    "llm_max_tokens": (1, None),
    "llm_port": (1, 65535),
    "llm_engine_port": (1, 65535),
    "front_rate_per_key": (1, 100000),
    "front_rate_burst": (0, 100000),
    "front_connections_per_key": (1, 100000),
    "front_connections_per_address": (1, 100000),
    "front_body_max_kib": (1, 4 * 1024 * 1024),
    "front_media_item_mib": (1, 1024),
    "llm_reserve_gib": (0, None),
    "llm_kv_cap_gib": (0, None),
    "llm_default_top_k": (0, None),
    "preflight_expected_power_w": (1, None),
    "weights_rsync_port": (1, 65535),
    "verify_undrafted_port": (1, 65535),
    "router_port": (1, 65535),
    "router_admin_port": (1, 65535),
    "router_metrics_port": (1, 65535),
    "weights_workers": (1, 256),
    "weights_dummy_layers": (0, 1024),
    "autotune_llamacpp_n_prompt": (1, None),
    "autotune_llamacpp_n_gen": (1, None),
    "autotune_llamacpp_repetitions": (1, None),
    "bench_reply_tokens": (1, None),
    "bench_prefill_reply_tokens": (1, None),
    "bench_reuse_tokens": (1, None),
    "bench_reuse_turns": (2, None),
    "bench_repeats": (1, None),
    "verify_exact_prompts": (1, None),
    "verify_exact_max_tokens": (1, None),
    "verify_burst_size": (1, None),
    "service_smoke_max_tokens": (1, None),
    "service_health_interval": (0.1, 3600),
    "router_drain_interval": (0.1, 60),
    "router_drain_settle": (0, 600),
    "router_drain_zero_readings": (1, 100),
    "router_vrrp_id": (1, 255),
    "router_vrrp_advert_secs": (0.01, 40),
    "router_vrrp_check_interval": (1, 60),
    "service_warm_reply_tokens": (1, None),
    "service_warm_prompt_tokens": (0, None),
}
# Names ending so are waits: at least one second (a 0 would spin or never wait).
POSITIVE_SUFFIXES = ("_timeout", "_interval")
# Each element of a list of numbers: (minimum, maximum or None); others must be 0 or more.
ELEMENT_RANGES = {
    "bench_concurrency": (1, 1024),
    "service_warm_concurrency": (1, 1024),
    "bench_prefill_sizes": (1, None),
    "autotune_llamacpp_threads": (1, None),
    "autotune_llamacpp_batch_sizes": (1, None),
    "autotune_llamacpp_ubatch_sizes": (1, None),
    # verify_needle_sizes: fractions of llm_context or token counts (NEEDLE_SIZES, its own check)
    "verify_needle_depths": (0, 1),
}
# verify_needle_sizes: each a fraction of llm_context in this range, or a token count above it (verify_checks).
NEEDLE_FRACTIONS = (0.01, 1)
# Text settings with a form: (pattern, what is allowed).
FORMS = {
    "preflight_min_compute_capability": (r"^\d+\.\d+$", "a compute capability such as 8.9"),
    "service_log_max_size": (r"^\d+[kmg]?$", "a size such as 100m (Docker's json-file max-size)"),
    "service_log_max_file": (r"^[1-9]\d*$", "a count of files such as 5"),
    "service_shm_size": (r"^\d+[bkmg]?$", "a size such as 1g"),
    "image_git_commit": (r"^([0-9a-f]{40})?$", "a full commit hash (40 hex digits), or empty"),
    # An OpenPGP key's fingerprint as vendors publish it: 40 hex digits, in groups or not.
    "host_docker_key_fingerprint": (r"^\s*(0x)?([0-9A-Fa-f]{4}\s*){10}$", "a key fingerprint (40 hex digits)"),
    "host_nvidia_key_fingerprint": (r"^\s*(0x)?([0-9A-Fa-f]{4}\s*){10}$", "a key fingerprint (40 hex digits)"),
    "host_docker_data_root": (r"^(/.*)?$", "an absolute path, or empty"),
    "host_docker_version": (r"^\d+\.\d+\.\d+$", "Docker's upstream version such as 29.7.1"),
    "host_nvidia_toolkit_version": (r"^\d+\.\d+\.\d+(~rc\.\d+)?-\d+$", "a package version such as 1.18.2-1"),
    "router_wheel_sha256": (r"^[0-9a-f]{64}$", "a sha256 (64 hex digits)"),
}
URL_SETTINGS = ("host_venv_index_url", "weights_hf_endpoint", "verify_undrafted_url", "host_apt_mirror", "host_proxy",
                "router_wheel_url")
# Every setting that holds a URL (scheme://host:port/...): its port, when it names one, is a number from 1 to
# 65535. Text that is no such URL (unix:///..., a path, git@host:repo) names no port here.
URL_PORT_SETTINGS = URL_SETTINGS + ("image_debian_mirror", "front_debian_mirror", "router_debian_mirror",
                                    "image_git_repo", "llm_docker_host")
# Lists of mappings with a URL in each: (setting, key).
URL_PORT_ITEMS = (("bench_endpoints", "url"),)
URL_AUTHORITY = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
ADDRESS_SETTINGS = ("llm_host", "llm_engine_host", "weights_rsync_bind", "router_bind", "router_metrics_host")
CLIENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A client key: printable ASCII without spaces (it travels in an Authorization header), long enough not to guess.
CLIENT_KEY = re.compile(r"^[!-~]{16,512}$")
# Control characters (C0, DEL, C1) and line or paragraph separators: never part of a secret.
# A DNS name (labels of letters, digits and '-', a leading '*.' for a wildcard) for a certificate.
DNS_NAME = re.compile(r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
SERIAL = re.compile(r"^([1-9]\d*|([1-9]\d?|100)%)$")


def _dummy(s):
    return s.get("llm_weights") == "dummy"


# The dummy model folders (vLLM, SGLang): GLM-4.5-Air's text shape with an MTP layer, or with
# llm_vision GLM-4.6V's shape (its vision tower, no MTP layer); no draft model folder.
_DUMMY_DRAFT = (
    "llm_drafter", lambda s: _dummy(s) and s.get("llm_drafter") not in DRAFTER_METHODS,
    "dummy mode makes no draft model folder for this engine",
    "set llm_drafter: mtp (the text folder has an MTP layer), ngram or 'off', or llm_weights: hub")
GLM_VISION = re.compile(r"glm-4\.\dv", re.I)


def _glm_vision(s):
    """GLM-4.5V/4.6V: the burn-in vision folder, or such a repo named with vision on."""
    return bool(s.get("llm_vision")) and (_dummy(s) or bool(GLM_VISION.search(s.get("llm_model") or "")))


# What an engine cannot do: (setting, predicate on the settings, why, the alternative).
UNSUPPORTED = {
    "vllm": [
        _DUMMY_DRAFT,
        ("llm_drafter", lambda s: _glm_vision(s) and s.get("llm_drafter") == "mtp",
         "vLLM 0.26.0 has no MTP drafting for GLM's vision models (Glm4vMoeForConditionalGeneration): it exits with "
         "\"Unsupported speculative method: 'mtp'\"",
         "set llm_drafter: ngram or 'off', or llm_vision: false with a text model"),
    ],
    "sglang": [
        _DUMMY_DRAFT,
        ("llm_vision", lambda s: _dummy(s) and bool(s.get("llm_vision")),
         "the burn-in vision folder (GLM-4.6V's shape) is proven on vLLM only",
         "set llm_vision: false for burn-in on SGLang, llm_engine: vllm, or llm_weights: hub"),
        ("llm_media_urls", lambda s: s.get("llm_vision") and s.get("llm_media_urls") != "any",
         "SGLang has no way to refuse http(s) media URLs",
         "set llm_media_urls: any to serve on SGLang (it fetches any URL), or llm_engine: vllm"),
        ("llm_kv_cap_gib", lambda s: s.get("llm_kv_cap_gib", 0) > 0,
         "SGLang sizes its KV pool as a fraction of GPU memory (--mem-fraction-static), not in GiB",
         "set llm_kv_cap_gib: 0 (the pool then follows llm_reserve_gib), or llm_engine: vllm"),
        ("llm_thinking", lambda s: not s.get("llm_thinking"),
         "SGLang 0.5.5 cannot set a thinking default (its parser refuses --default-chat-template-kwargs): the "
         "model's chat template decides, and GLM's thinks unless a request sends chat_template_kwargs",
         "set llm_thinking: true (a request turns thinking off with chat_template_kwargs "
         "{\"enable_thinking\": false}), or llm_engine: vllm"),
    ],
    "llamacpp": [
        ("llm_attention_backend", lambda s: bool(s.get("llm_attention_backend")),
         "llama-server has no choice of attention backend",
         "set llm_attention_backend: '' (empty), or llm_engine: vllm"),
        ("llm_kv", lambda s: s.get("llm_kv") == "fp8",
         "llama.cpp has no fp8 KV cache (its cache types are q8_0, f16, bf16)",
         "set llm_kv: bf16, or llm_engine: vllm"),
        # Burn-in weights carry a projector (mmproj.gguf, the weights stage); a hub repo's is not fetched.
        ("llm_vision", lambda s: bool(s.get("llm_vision")) and not _dummy(s),
         "the weights stage fetches the repo's one GGUF and no projector (--mmproj) for it, so llama.cpp serves "
         "hub weights as text only",
         "set llm_vision: false, llm_weights: dummy (burn-in weights with a projector), or llm_engine: vllm"),
        ("llm_media_urls", lambda s: s.get("llm_vision") and s.get("llm_media_urls") != "any",
         "llama-server 0.7.0 fetches any http(s) image URL and has no flag to refuse them",
         "set llm_media_urls: any to serve images on llama.cpp (it fetches any URL), llm_vision: false, or "
         "llm_engine: vllm"),
        ("llm_dense", lambda s: s.get("llm_dense") != s.get("llm_model_dense", s.get("llm_dense")),
         "llama.cpp runs the GGUF's own quantization and converts nothing at load",
         "set llm_dense to the GGUF's (llm_model_dense), or llm_engine: vllm"),
        ("llm_drafter", lambda s: s.get("llm_drafter") == "ngram",
         "the llama.cpp profile has no n-gram drafting",
         "set llm_drafter: 'off', mtp or a draft GGUF repo, or llm_engine: vllm"),
        ("llm_drafter", lambda s: _dummy(s) and s.get("llm_drafter") == "mtp",
         "the dummy GGUF has no MTP head",
         "set llm_drafter to a draft repo name (a second dummy GGUF is made as the draft model) or 'off'"),
        ("llm_kv_cap_gib", lambda s: s.get("llm_kv_cap_gib", 0) > 0,
         "the llama.cpp profile runs on the CPU: its cache is sized by llm_context x llm_parallel, not in GiB",
         "set llm_kv_cap_gib: 0"),
        ("llm_reserve_gib", lambda s: bool(s.get("llm_gpus") == [] and s.get("llm_reserve_gib", 0) > 0),
         "the CPU profile has no GPU memory to keep in reserve",
         "set llm_reserve_gib: 0"),
    ],
}

# Dense conversions an engine can make at load: from the checkpoint's precision to llm_dense.
DENSE_CONVERSIONS = {("bf16", "fp8")}
# What display() shows for a secret that is set.
MASK = "<hidden>"


def shown(value):
    """A value as the user wrote it in YAML: text quoted, null, true and false, lists and mappings of them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[%s]" % ", ".join(shown(v) for v in value)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (shown(k), shown(v)) for k, v in value.items())
    if isinstance(value, str):
        return repr(str(value))
    return repr(value)


def range_text(low, high, elements=False):
    """What a range allows, in words: '1 to 65535', '1 or more' (never 'to any'); for a list's elements,
    'a list of numbers from 1 to 1024', 'a list of numbers, each 1 or more'."""
    if elements:
        return ("a list of numbers, each %s or more" % low if high is None
                else "a list of numbers from %s to %s" % (low, high))
    return "%s or more" % low if high is None else "%s to %s" % (low, high)


def _bad(code, name, value, allowed, secret=False):
    shown_value = "(hidden)" if secret else shown(value)
    return finding(code, name, "%s is %s; allowed: %s" % (name, shown_value, allowed), variable=name,
                   value=None if secret else value, allowed=allowed)


# YAML 1.1 (Ansible's) reads off, no, on, yes unquoted as booleans: `llm_drafter: off` arrives as false.
YAML_BOOL_WORDS = {False: ("off", "no", "false"), True: ("on", "yes", "true")}


def yaml_word(name, option, value):
    """The word a boolean stood for before YAML read it, where a text setting takes that word (off for llm_drafter
    and autotune_moe, no for service_restart_policy, written unquoted); None for any other value."""
    if not isinstance(value, bool) or option.get("type", "str") != "str":
        return None
    words = option.get("choices") or (DRAFTER_METHODS if name == "llm_drafter" else ())
    return next((w for w in YAML_BOOL_WORDS[value] if w in words), None)


def _allowed(option):
    if option.get("choices"):
        return "one of %s" % ", ".join(str(c) for c in option["choices"])
    kind = option.get("type", "str")
    if kind == "list":
        return "a list of %s" % option.get("elements", "values")
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "path": "a path", "dict": "a mapping"}.get(kind, kind)


class Specs(object):
    """Every role's documented options by name, the prefix of each role's knobs, and the names the
    roles keep for themselves (vars/main.yml: derived values, never settings)."""

    def __init__(self, options, prefixes, internal):
        self.options = options
        self.prefixes = prefixes
        self.internal = internal

    def is_setting(self, name):
        return name.startswith(self.prefixes) and name not in self.internal

    def secret(self):
        return set(n for n, o in self.options.items() if o.get("no_log"))


_SPECS = {}
# What validation itself keeps (roles/llm/tasks/validate.yml, become.yml's probe): facts, not settings.
VALIDATION_FACTS = ("llm_validation", "llm_settings", "llm_settings_display",
                    "llm_become_probe", "llm_become_ok", "llm_become_error", "llm_become_findings")


def task_facts(tasks):
    """The names a role's tasks set on a host (register, set_fact): a later play's validation in the same
    run sees them among the host's variables, and they are not settings."""
    names = set()
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        if isinstance(task.get("register"), str):
            names.add(task["register"])
        for key in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(task.get(key), dict):
                names.update(k for k in task[key] if k != "cacheable")
        for key in ("block", "rescue", "always"):
            names.update(task_facts(task.get(key)))
    return names


def load_specs(collection):
    """The Specs of the collection's roles (read once per process: the action runs for every host, each in a
    worker process of its own, so this runs on every play of every host: libyaml's loader where PyYAML has it,
    a tenth of the pure-Python loader's time)."""
    import yaml  # the controller's PyYAML (ansible-core's dependency)

    if collection in _SPECS:
        return _SPECS[collection]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def load(f):
        return yaml.load(f, Loader=loader)  # noqa: S506 - a safe loader, C or Python
    options, prefixes, internal = {}, set(), set()
    for role_dir in sorted(glob.glob(os.path.join(collection, "roles", "*"))):
        role = os.path.basename(role_dir)
        spec_file = os.path.join(role_dir, "meta", "argument_specs.yml")
        if os.path.exists(spec_file):  # a role without one has no settings (its callers give its parameters)
            prefixes.add(role + "_")
            with open(spec_file) as f:
                for entry in (load(f) or {}).get("argument_specs", {}).values():
                    for name, option in (entry.get("options") or {}).items():
                        # The llm role owns the llm_ settings; another role's note of one adds nothing.
                        if name not in options or role == "llm":
                            options[name] = dict(option, role=role)
        for tasks_file in glob.glob(os.path.join(role_dir, "tasks", "*.yml")):
            with open(tasks_file) as f:
                internal.update(task_facts(load(f)))
        vars_file = os.path.join(role_dir, "vars", "main.yml")
        if os.path.exists(vars_file):
            with open(vars_file) as f:
                internal.update(load(f) or {})
    internal.update(VALIDATION_FACTS)
    _SPECS[collection] = Specs(options, tuple(sorted(prefixes, key=len, reverse=True)), frozenset(internal))
    return _SPECS[collection]


def display(values, options):
    """The settings as they may be shown or written: every option the specs mark no_log masked."""
    return dict((name, MASK if options.get(name, {}).get("no_log") and value not in ("", None) else value)
                for name, value in values.items())


def _number_range(name, option):
    if name in RANGES:
        return RANGES[name]
    if name.endswith(POSITIVE_SUFFIXES):
        return (1, None)
    return (0, None)


def _check_numbers(values, options, findings):
    for name in sorted(values):
        option = options.get(name, {})
        kind, value = option.get("type", "str"), values[name]
        if kind in ("int", "float") and value is not None:
            low, high = _number_range(name, option)
            if value < low or (high is not None and value > high):
                findings.append(_bad("E_CONFIG", name, value, range_text(low, high)))
                values.pop(name)
        elif name == "verify_needle_sizes" and value:
            low, high = NEEDLE_FRACTIONS
            if not all(low <= v <= high or (v > high and v == int(v)) for v in value):
                findings.append(_bad("E_CONFIG", name, value, "a list of fractions of llm_context from %s to %s, "
                                     "or of token counts (whole numbers above %s)" % (low, high, high)))
                values.pop(name)
        elif kind == "list" and option.get("elements") in ("int", "float") and value and name != "llm_gpus":
            low, high = ELEMENT_RANGES.get(name, (0, None))
            if any(v < low or (high is not None and v > high) for v in value):
                findings.append(_bad("E_CONFIG", name, value, range_text(low, high, elements=True)))
                values.pop(name)


def _check_forms(values, findings, secret=()):
    for name, (pattern, allowed) in FORMS.items():
        if name in values and values[name] is not None and not re.match(pattern, str(values[name])):
            findings.append(_bad("E_CONFIG", name, values[name], allowed))
            values.pop(name)
    for name in URL_SETTINGS:
        if values.get(name) and not re.match(r"^https?://[^/\s]+", str(values[name])):
            findings.append(_bad("E_CONFIG", name, values[name], "an http(s) URL, or empty", name in secret))
            values.pop(name)
    for name in URL_PORT_SETTINGS:
        why = url_port_problem(values.get(name))
        if why:
            findings.append(_url_port_bad(name, name, values.pop(name), why, name in secret))
    for name, key in URL_PORT_ITEMS:
        items = values.get(name) if isinstance(values.get(name), list) else []
        bad = [(i, item.get(key), url_port_problem(item.get(key))) for i, item in enumerate(items) if isinstance(item, dict)]
        bad = [(i, url, why) for i, url, why in bad if why]
        for i, url, why in bad:
            findings.append(_url_port_bad("%s[%d].%s" % (name, i, key), name, url, why))
        if bad:
            values.pop(name)
    for name in ADDRESS_SETTINGS:
        if name in values:
            try:
                ipaddress.ip_address(values[name])
            except ValueError:
                findings.append(_bad("E_CONFIG", name, values[name], "an IPv4 or IPv6 address to bind"))
                values.pop(name)
    serial = values.get("service_serial")
    if serial is not None:
        batches = serial if isinstance(serial, list) else [serial]
        if not batches or not all(SERIAL.match(str(b).strip()) for b in batches):
            findings.append(_bad("E_CONFIG", "service_serial", serial,
                                 "a number of hosts (1 or more), a percentage (1% to 100%), or a list of them"))
            values.pop("service_serial")


# Hub checkpoints whose shape the collection carries: the recipe's model and its text stand-in
# (docs/engines.md), as the burn-in presets copy them from the hub's config.json (dummy_hf.PRESETS), with the
# block-FP8 quantization both declare (the weights role's weights_fp8_quantization).
CARRIED_SHAPES = {"zai-org/GLM-4.6V-FP8": "glm4v_moe", "zai-org/GLM-4.5-Air-FP8": "glm4_moe"}
FP8_BLOCKS = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}}
# What the weights role's default weights_dummy_preset comes to (roles/weights/defaults/main.yml).
DUMMY_PRESETS = {True: "glm4v_moe", False: "glm4_moe"}
# The settings the model's shape is read from, or judged against (llm_vision too, when it passed).
SHAPE_INPUTS = ("llm_engine", "llm_gpus", "llm_weights", "llm_model", "llm_model_revision")
DUMMY_INPUTS = ("weights_dummy_preset", "weights_dummy_config")


def model_shape(values, model_config=None, hub_config=None):
    """The checkpoint's shape for a GPU engine, as (shape, where, alternative to vision, None) or (None, why not,
    None, how to make it known): the burn-in folder's config (the preset the weights stage makes, with
    weights_dummy_config over it), or with hub weights the config.json the workstation has (model_config), else
    the shape the collection carries, else the config.json the hub gives (hub_config: weights_hf_endpoint, with
    llm_hf_token)."""
    if values["llm_weights"] == "dummy":
        preset = values.get("weights_dummy_preset") or DUMMY_PRESETS[bool(values.get("llm_vision"))]
        config = dummy_hf.merged(dummy_hf.PRESETS[preset], values.get("weights_dummy_config") or {})
        return (checkpoint.shape(config), "the burn-in folder (weights_dummy_preset: %s)" % preset,
                "weights_dummy_preset: glm4v_moe (GLM-4.6V's shape, its vision tower too)", None)
    repo, revision = values["llm_model"], values["llm_model_revision"]
    read = model_config(repo, revision) if model_config else None
    if read:
        return (checkpoint.shape(read[0]), "%s@%s (config.json in %s)" % (repo, revision, read[1]),
                "serve a vision checkpoint (llm_model)", None)
    if repo in CARRIED_SHAPES:
        return (checkpoint.shape(dummy_hf.merged(dummy_hf.PRESETS[CARRIED_SHAPES[repo]], FP8_BLOCKS)),
                "%s (its config.json's shape, as the collection carries it)" % repo,
                "serve a vision checkpoint (llm_model)", None)
    hub_why = ""
    if hub_config and values.get("weights_source", "hub") == "hub":
        read, why = hub_config(repo, revision, values.get("weights_hf_endpoint") or "", values.get("llm_hf_token") or "")
        if read:
            return (checkpoint.shape(read[0]), "%s@%s (config.json from %s)" % (repo, revision, read[1]),
                    "serve a vision checkpoint (llm_model)", None)
        hub_why = ", and the hub did not give it (%s)" % why
    return (None, "its config.json at %s is not in the workstation's Hugging Face cache, and its shape is not one "
            "the collection carries%s" % (revision, hub_why), None,
            "the weights stage makes it when it reads the model's config.json, before any weight is fetched (hf "
            "download %s config.json --revision %s, on the workstation, lets validation make it)" % (repo, revision))


def skipped_shape_checks(values):
    """The checks of the model's shape these settings ask for, in words: what an unknown shape leaves unmade."""
    gpus, engine = values["llm_gpus"], values["llm_engine"]
    checks = []
    if len(gpus) > 1:
        checks.append("the GPU split check")
    if values.get("llm_vision"):
        checks.append("the check that the model has a vision tower (llm_vision)")
    if engine == "vllm" and len(gpus) > 1 and values.get("llm_expert_parallel"):
        checks.append("the check that it has routed experts (llm_expert_parallel)")
    if values.get("autotune_moe") in ("full", "reduced"):
        checks.append("the check of the MoE tune's split (autotune_moe)")
    return checks


def _check_model_shape(values, findings, refused, model_config=None, hub_config=None):
    """What only the model's shape tells, before anything changes: images on for a text model, expert parallelism
    on vLLM for a dense model, and a GPU count the engine cannot run the model over (vLLM and SGLang run one engine
    over every GPU of llm_gpus, its experts split or whole by llm_expert_parallel). Read only from settings that
    passed; an unknown shape is said (W_CHECK_SKIPPED), never guessed."""
    if values.get("llm_engine") not in checkpoint.GPU_ENGINES or refused & set(SHAPE_INPUTS + DUMMY_INPUTS) \
            or "llm_expert_parallel" in refused or not all(n in values for n in SHAPE_INPUTS):
        return
    gpus = values["llm_gpus"]
    shape_checks = skipped_shape_checks(values)
    try:
        # The hub is asked only for a check these settings ask for, and only with the endpoint, token and source
        # that passed (a refused endpoint must not send the token to the default hub instead).
        ask_hub = shape_checks and not refused & {"weights_hf_endpoint", "llm_hf_token", "weights_source"}
        model, where, alternative, hint = model_shape(values, model_config, hub_config if ask_hub else None)
    except Exception as e:  # a weights_dummy_config the preset cannot take: named, never a traceback
        model, where, hint = None, "the burn-in config could not be made with weights_dummy_config (%s)" % (
            type(e).__name__), "correct weights_dummy_config, or leave it out"
    if model is None:
        if shape_checks:
            listed = shape_checks[0] if len(shape_checks) == 1 else "%s and %s" % (
                ", ".join(shape_checks[:-1]), shape_checks[-1])
            findings.append(finding(
                "W_CHECK_SKIPPED", "llm_model", "%s (E_UNSUPPORTED) %s not made for %s on %d GPU%s: %s; %s" % (
                    listed[0].upper() + listed[1:], "was" if len(shape_checks) == 1 else "were", values["llm_model"],
                    len(gpus), "" if len(gpus) == 1 else "s", where, hint),
                variable="llm_model", check=", ".join(shape_checks)))
        return
    vision = checkpoint.vision_refusal(values, model["vision"], where, alternative)
    if vision:
        findings.append(vision)
        values.pop("llm_vision")
    dense = checkpoint.expert_parallel_refusal(model, values, where)
    if dense:
        findings.append(dense)
        values.pop("llm_expert_parallel")
    split = checkpoint.split_refusal(model, values, where)
    if split:
        findings.append(split)
        values.pop(split["details"]["variable"], None)
    elif "autotune_moe" not in refused:
        tune = checkpoint.autotune_moe_refusal(model, values, where)
        if tune:
            findings.append(tune)
            values.pop("autotune_moe", None)


def url_port_problem(url):
    """Why the port a URL names cannot be used, as (with the port's text, without it: for a secret), or None: a
    port that is not a number, or not from 1 to 65535, or an IPv6 host outside brackets (its port is ambiguous).
    A URL without a port, or text that is no scheme://host URL, is not judged here."""
    match = URL_AUTHORITY.match(url.strip()) if isinstance(url, str) else None
    if not match:
        return None
    host = match.group(1).rpartition("@")[2]  # after any user:password@
    if host.startswith("["):
        end = host.find("]")
        if end < 0 or (host[end + 1:] and not host[end + 1:].startswith(":")):
            return ("its IPv6 host is not [address] or [address]:port",) * 2
        port = host[end + 2:] if host[end + 1:] else ""
    elif host.count(":") > 1:
        return ("its IPv6 host is not in brackets ([address]:port)",) * 2
    else:
        port = host.partition(":")[2]
    if port == "":  # none, or 'host:' (the scheme's own port)
        return None
    if not re.match(r"^[0-9]+$", port):
        return "its port %r is not a number" % port, "its port is not a number"
    if not 1 <= int(port) <= 65535:
        return "its port %s is not from 1 to 65535" % port, "its port is not from 1 to 65535"
    return None


def _url_port_bad(subject, name, url, why, secret=False):
    """E_CONFIG for a URL whose port cannot be used; a secret's value (a proxy's credentials) is never shown."""
    allowed = "a URL whose port, if it names one, is a number from 1 to 65535"
    return finding("E_CONFIG", subject, "%s is %s: %s; allowed: %s" % (
        subject, "(hidden)" if secret else shown(url), why[1] if secret else why[0], allowed),
        variable=name, value=None if secret else url, allowed=allowed)


ROUTER_PORTS = ("router_port", "router_admin_port", "router_metrics_port")


def _check_router_ports(values, options, groups, findings, refused=()):
    """A router host's three ports differ, and none is its own engine's (a host of llm_hosts too). A port
    refused on its own is not compared (nor stood in for by its default)."""
    if "llm_routers" not in groups or refused & set(ROUTER_PORTS + ("llm_port", "llm_engine_port")):
        return
    ports = dict((n, values.get(n, options.get(n, {}).get("default"))) for n in ROUTER_PORTS)
    if None in ports.values():
        return
    if len(set(ports.values())) < len(ports):
        findings.append(finding("E_CONFIG", "router_port", "router_port, router_admin_port and router_metrics_port "
                                "are %s: a router host needs three different ports" % ", ".join(
                                    str(ports[n]) for n in ROUTER_PORTS), variable="router_port"))
    for port_name in ("llm_port", "llm_engine_port"):
        engine = values.get(port_name, options.get(port_name, {}).get("default"))
        if "llm_hosts" in groups and engine in ports.values():
            name = [n for n in ROUTER_PORTS if ports[n] == engine][0]
            findings.append(finding("E_CONFIG", name, "this host is a router (llm_routers) and a worker (llm_hosts) on "
                                    "the same port: %s and %s are both %s; give the router another port" % (
                                        name, port_name, engine), variable=name, value=engine))


INTERFACE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


def _ipv4(value):
    try:
        return isinstance(value, str) and ipaddress.IPv4Address(value) is not None
    except ValueError:
        return False


def _check_vrrp(values, groups, routers, findings, refused=()):
    """Two or more router hosts share router_vip (VRRP): it is given, an IPv4 address, and not this host's own
    router_vrrp_address, which is an IPv4 address too (keepalived's unicast peers are addresses)."""
    if "llm_routers" not in groups or "router_vip" in refused:
        return
    vip = values.get("router_vip", "")
    if vip and not _ipv4(vip):
        findings.append(_bad("E_CONFIG", "router_vip", values.pop("router_vip"), "an IPv4 address, or empty"))
        return
    if not vip:
        if len(routers) > 1:
            findings.append(finding(
                "E_CONFIG", "router_vip", "llm_routers has %d hosts (%s): they serve one endpoint on one address, "
                "router_vip, which is empty; set it to an IPv4 address on their network that no host holds" % (
                    len(routers), ", ".join(routers)), variable="router_vip", value="",
                allowed="an IPv4 address"))
        return
    bind = values.get("router_bind")
    if bind is not None and bind not in ("0.0.0.0", "::"):
        findings.append(_bad("E_CONFIG", "router_bind", values.pop("router_bind"), "0.0.0.0 or :: with router_vip (the "
                             "front answers on the address wherever it lands)"))
    address = values.get("router_vrrp_address")  # None where the router role is not in scope (another play)
    if address is not None and not _ipv4(address):
        findings.append(_bad("E_CONFIG", "router_vrrp_address", values.pop("router_vrrp_address"),
                             "this router host's IPv4 address on router_vip's network (its default is ansible_host: "
                             "set it where ansible_host is a name)"))
    elif address == vip:
        findings.append(_bad("E_CONFIG", "router_vip", values.pop("router_vip"),
                             "an address no host holds (it is this host's router_vrrp_address)"))
    docker_host = values.get("llm_docker_host")
    if docker_host and not docker_host.startswith(("unix://", "tcp://")):
        findings.append(_bad("E_CONFIG", "llm_docker_host", values.pop("llm_docker_host"),
                             "unix:// or tcp:// (plain HTTP) on a router host with router_vip: keepalived's check "
                             "asks that Docker daemon itself, three times a second"))
    interface = values.get("router_vrrp_interface")
    if interface and not INTERFACE.match(interface):
        findings.append(_bad("E_CONFIG", "router_vrrp_interface", values.pop("router_vrrp_interface"),
                             "a network interface's name (up to 15 letters, digits, '_', '.', '-'), or empty"))


def _private(address):
    """Loopback or a private address (RFC 1918, unique local, link-local): not reachable from the internet."""
    ip = ipaddress.ip_address(address)
    return not ip.is_unspecified and (ip.is_loopback or ip.is_private or ip.is_link_local)


def _check_engine_bind(values, findings):
    """The engine is reached by the front and the routers only: loopback or private, unless published on purpose."""
    host = values.get("llm_engine_host")
    if host is not None and values.get("llm_engine_public") and not _private(host):
        findings.append(finding(
            "W_ENGINE_PUBLIC", "llm_engine_host", "the engine listens on %s (llm_engine_public): its own routes "
            "answer whoever reaches that address, past the front" % host, variable="llm_engine_host", value=host))
    elif host is not None and not _private(host):
        findings.append(finding(
            "E_CONFIG", "llm_engine_host", "llm_engine_host is %r: the engine would answer whoever reaches that address "
            "on its own routes (vLLM's key guards only /v1); allowed: 127.0.0.1, or a private address of the host "
            "that the router hosts reach; set llm_engine_public: true to publish it anyway (W_ENGINE_PUBLIC)" % host,
            variable="llm_engine_host", value=host, allowed="a loopback or private address"))
        values.pop("llm_engine_host")
    if values.get("llm_engine_port") is not None and values.get("llm_engine_port") == values.get("llm_port"):
        findings.append(_bad("E_CONFIG", "llm_engine_port", values.pop("llm_engine_port"),
                             "a port other than llm_port (the front listens there)"))


def _check_secrets(values, options, findings):
    """Secrets are typed, pasted and templated: a control character or a space around one is a mistake (a newline
    from a file, a trailing blank) that would fail at the engine or the front with no word. The value is never shown."""
    for name in sorted(values):
        if not options.get(name, {}).get("no_log"):
            continue
        value = values[name]
        texts = [(name, value)] if isinstance(value, str) else (
            [("%s[%r]" % (name, k), v) for k, v in sorted(value.items())] if isinstance(value, dict) else [])
        for shown, text in texts:
            if not isinstance(text, str):
                continue
            why = ("holds a control character" if CONTROL.search(text) else
                   "has white space before or after it" if text != text.strip() else "")
            if why:
                findings.append(finding("E_CONFIG", shown, "%s %s (its value is not shown); allowed: the secret alone, "
                                        "with no line break, tab or space around it" % (shown, why), variable=name))
                values.pop(name, None)
                break


def _check_client_keys(values, findings):
    """llm_client_keys: {client name: key}, each key its own and none the internal key (llm_api_key)."""
    keys = values.get("llm_client_keys")
    if keys is None:
        return
    problems = []
    for client in sorted(keys, key=str):
        key = keys[client]
        if not isinstance(client, str) or not CLIENT_NAME.match(client):
            problems.append("the client name %r is not letters, digits, '_', '.', '-' (up to 64)" % (client,))
        elif not isinstance(key, str) or not CLIENT_KEY.match(key):
            problems.append("the key of %r is not 16 to 512 printable ASCII characters without spaces (not shown)"
                            % client)
    given = [k for k in keys.values() if isinstance(k, str)]
    if len(set(given)) < len(given):
        problems.append("two clients share one key (not shown): each client needs its own to be revoked alone")
    if values.get("llm_api_key") and values["llm_api_key"] in given:
        problems.append("a client key is llm_api_key, the engines' internal key, which no client may hold")
    if problems:
        findings.append(finding("E_CONFIG", "llm_client_keys", "llm_client_keys: %s; allowed: {client name: key}, "
                                "each key its own" % "; ".join(problems), variable="llm_client_keys"))
        values.pop("llm_client_keys")


def _check_tls(values, findings):
    """A given certificate comes with its key; the names for the collection's certificates are names or addresses."""
    cert, key = values.get("llm_tls_cert_file"), values.get("llm_tls_key_file")
    if cert is not None and key is not None and bool(cert) != bool(key):
        given, missing = ("llm_tls_cert_file", "llm_tls_key_file") if cert else ("llm_tls_key_file", "llm_tls_cert_file")
        findings.append(finding("E_CONFIG", missing, "%s is set but %s is empty: a front needs the certificate and its "
                                "key; give both, or neither for the collection's CA" % (given, missing),
                                variable=missing, allowed="a PEM file on the workstation"))
        values.pop(missing, None)
    names = values.get("llm_tls_names")
    if names:
        bad = []
        for name in names:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                if not DNS_NAME.match(name) or len(name) > 253:
                    bad.append(name)
        if bad:
            findings.append(_bad("E_CONFIG", "llm_tls_names", bad, "DNS names (a leading '*.' for a wildcard) or IP "
                                 "addresses"))
            values.pop("llm_tls_names")


def validate(settings, options, internal=(), groups=(), model_config=None, routers=(), hub_config=None):
    """Validate the settings given as {name: value} (templated values).

    `options`: the documented options by name (Specs.options); `internal`: names the roles keep for
    themselves; `groups`: the host's inventory groups (the router's rules); `routers`: the hosts of
    llm_routers (two or more share router_vip); `model_config(repo, revision)`:
    a hub checkpoint's config.json as (content, where it was read) when the workstation has it, else None;
    `hub_config(repo, revision, endpoint, token)`: the same read from the hub, as ((content, where), None) or (None,
    why not), asked when the workstation has none and weights_source is the hub.
    Returns (findings, values): values holds every setting that passed, typed as the spec says; a setting
    that failed is left out of it.
    """
    findings = []
    secret = set(n for n, o in options.items() if o.get("no_log"))
    for name in sorted(settings):
        if name not in options and name not in internal:
            findings.append(finding("W_UNKNOWN_SETTING", name, "%s is not a setting of this collection (a typo?); "
                                    "it is ignored" % name, variable=name))

    # Types and choices: the roles' argument specs, option by option so each failure names its variable.
    values = {}
    for name, option in sorted(options.items()):
        if name not in settings:
            continue
        spec = dict((k, v) for k, v in option.items() if k in ("type", "choices", "elements", "no_log"))
        kind, given = option.get("type", "str"), settings[name]
        word = yaml_word(name, option, given)
        if word is not None:
            # The roles read the variable too, where false is not the word: refused, saying how to write it.
            findings.append(_bad("E_CONFIG", name, given, "%s: '%s', quoted (YAML reads %s unquoted as %s)" % (
                name, word, word, shown(given))))
            continue
        result = ArgumentSpecValidator({name: spec}).validate({name: given})
        # Ansible's str and path types turn a list or mapping into its text, and its int type takes true
        # for 1; a setting never means that. No setting is null (YAML's empty value): each has a default.
        mistyped = (given is None or (kind in ("str", "path") and isinstance(given, (list, dict)))
                    or (kind in ("int", "float") and isinstance(given, bool)))
        if result.error_messages or mistyped:
            findings.append(_bad("E_CONFIG", name, given, _allowed(option), name in secret))
        else:
            values[name] = result.validated_parameters[name]

    _check_numbers(values, options, findings)
    _check_forms(values, findings, secret)
    for name in ("llm_model", "llm_served_model_name", "llm_model_revision"):
        if name in values and not str(values[name]).strip():
            findings.append(_bad("E_CONFIG", name, values[name], "a non-empty string"))
            values.pop(name)

    def refuse(name, allowed):
        findings.append(_bad("E_CONFIG", name, values.pop(name), allowed))

    if values.get("llm_model") and not REPO.match(values["llm_model"]):
        refuse("llm_model", "a Hugging Face repo id, org/name")

    name = values.get("llm_container_name")
    if name is not None and not CONTAINER_NAME.match(str(name)):
        refuse("llm_container_name", "a Docker container name: letters, digits, '_', '.', '-', starting with a letter "
               "or digit")

    drafter = values.get("llm_drafter")
    if drafter is not None and drafter not in DRAFTER_METHODS and not REPO.match(drafter):
        refuse("llm_drafter", "mtp, off, ngram, or a draft model repo org/name")

    if "llm_media_urls" in values:
        media = values["llm_media_urls"]
        ok = media in ("data_only", "any") or (
            isinstance(media, list) and media and all(isinstance(d, str) and DOMAIN.match(d) for d in media))
        if not ok:
            refuse("llm_media_urls", "data_only, any, or a list of domain names")

    gpus = values.get("llm_gpus")
    if gpus is not None:
        if any(g < 0 for g in gpus):
            refuse("llm_gpus", "GPU indices of 0 or more")
        elif len(set(gpus)) != len(gpus):
            refuse("llm_gpus", "each GPU index once")
    _check_secrets(values, options, findings)
    _check_client_keys(values, findings)

    # Cross-field rules and the engine's limits read only settings that passed on their own: a setting
    # refused above is not judged again through another (one finding per mistake).
    gpus = values.get("llm_gpus")
    context, window = values.get("llm_context"), values.get("llm_model_max_context")
    if context is not None and window is not None and context > window:
        findings.append(finding("E_CONTEXT", "llm_context", "llm_context is %d tokens, beyond the model's window of "
                                "%d (llm_model_max_context)" % (context, window),
                                variable="llm_context", value=context, allowed="at most %d" % window))
        values.pop("llm_context")
        context = None
    reply = values.get("llm_max_tokens")
    if reply is not None and context is not None and reply > context:
        refuse("llm_max_tokens", "at most llm_context (%d)" % context)

    engine = values.get("llm_engine")
    if engine in GPU_ENGINES and gpus == []:
        findings.append(finding("E_UNSUPPORTED", "llm_gpus", "llm_gpus is [] (CPU) but %s needs GPUs; set "
                                "llm_engine: llamacpp for a CPU profile, or name GPUs" % engine,
                                variable="llm_gpus", engine=engine))
    dense, model_dense = values.get("llm_dense"), values.get("llm_model_dense")
    if engine in GPU_ENGINES and dense and model_dense and dense != model_dense \
            and (model_dense, dense) not in DENSE_CONVERSIONS:
        findings.append(finding("E_UNSUPPORTED", "llm_dense", "llm_dense is %r but the checkpoint is %s "
                                "(llm_model_dense) and %s converts only bf16 to fp8 at load; serve a %s checkpoint "
                                "(llm_model), or set llm_dense: %s" % (dense, model_dense, engine, dense, model_dense),
                                variable="llm_dense", engine=engine))
    for unsupported in set(f["details"]["variable"] for f in findings if f["code"] == "E_UNSUPPORTED"):
        values.pop(unsupported, None)
    # In order, each refused one taken out before the next rule reads it (vision refused: no media-URL rule).
    for name, applies, why, alternative in UNSUPPORTED.get(engine, []):
        if name in values and applies(values):
            findings.append(finding("E_UNSUPPORTED", name, "%s is %s on %s: %s; %s" % (
                name, shown(values.pop(name)), engine, why, alternative), variable=name, engine=engine))
    backend = values.get("llm_attention_backend")
    if backend and engine in ATTENTION_BACKENDS and backend not in ATTENTION_BACKENDS[engine]:
        refuse("llm_attention_backend", "'' (the engine's choice), or for %s: %s" % (
            engine, ", ".join(ATTENTION_BACKENDS[engine])))
    refused = set(name for name in settings if name not in values)
    _check_model_shape(values, findings, refused, model_config, hub_config)
    _check_router_ports(values, options, groups, findings, refused)
    _check_vrrp(values, groups, routers, findings, refused)
    _check_engine_bind(values, findings)
    _check_tls(values, findings)

    return findings, values


# The typed settings, as templates read them (validate.yml's fact): `llm_settings.llm_context` reads llm_context.
TYPED = "llm_settings"
# Names a template reads that are no variables: Jinja's globals and Ansible's.
TEMPLATE_GLOBALS = frozenset(("range", "dict", "lipsum", "cycler", "joiner", "namespace", "lookup", "query", "q",
                              "now", "undef", "true", "false", "none", "True", "False", "None", "omit"))


def _any_filter(value, *_args, **_kwargs):
    return value


class _AnyName(dict):
    """Filters or tests by name for references(): every name is known (what it does does not matter there)."""

    def __contains__(self, name):
        return True

    def get(self, name, default=None):
        return dict.get(self, name, _any_filter)


def references(value):
    """The variables a value's templates read ({{ llm_data_dir }}/hf reads llm_data_dir; llm_settings.llm_context
    reads llm_settings and llm_context), in lists and mappings too; () for a value with no template."""
    from jinja2 import Environment, meta, nodes  # the controller's Jinja2 (ansible-core's dependency)

    if isinstance(value, dict):
        return set().union(*[references(v) for v in value.values()]) if value else set()
    if isinstance(value, (list, tuple)):
        return set().union(*[references(v) for v in value]) if value else set()
    if not isinstance(value, str) or ("{{" not in value and "{%" not in value):
        return set()
    # Any filter or test name passes: meta's walk asks the environment for each, and a plain Environment knows
    # neither Ansible's nor a collection's (gpuserve.llm.engine_image_bytes).
    environment = Environment()
    environment.filters, environment.tests = _AnyName(environment.filters), _AnyName(environment.tests)
    try:
        tree = environment.parse(str(value))
        names = set(meta.find_undeclared_variables(tree))
    except Exception:  # a template Jinja cannot read: it fails when rendered, and is named then
        return set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        if isinstance(node.node, nodes.Name) and node.node.name == TYPED:
            key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
            if isinstance(key, str):
                names.add(key)
    return names


def validate_templated(raw, render, options, internal=(), groups=(), defined=(), model_config=None, routers=(),
                       hub_config=None):
    """Render and validate the settings as given (`raw`: {name: value, templates unrendered}), so that the user
    sees one finding per mistake, in words: never a template's or Python's error text.

    `render(value, typed)` renders a value (raising on failure) with `typed` as llm_settings when it is not
    None; `defined`: every variable name in scope; `model_config`, `routers`, `hub_config`: as validate() takes them. A setting whose
    template reads llm_settings is rendered with the values validated first. A setting computed from one that
    was refused (or could not be computed) is neither reported nor handed on: the finding on the setting it
    reads says what to correct. A template that fails on its own is named with what it reads that is not set.
    Returns (findings, values) as validate().
    """
    reads = dict((name, references(value)) for name, value in raw.items())
    # What each setting reads, through the settings it reads (llm_context -> llm_model_max_context ...).
    closure = {}
    for name in raw:
        seen, todo = set(), list(reads[name])
        while todo:
            other = todo.pop()
            if other not in seen:
                seen.add(other)
                todo.extend(reads.get(other, ()))
        closure[name] = seen
    given, unresolved = {}, {}
    later = sorted(name for name in raw if TYPED in closure[name])
    for name in sorted(raw):
        if name not in later:
            try:
                given[name] = render(raw[name], None)
            except Exception:
                unresolved[name] = True
    if later:
        first = validate(given, options, internal, groups, routers=routers)[1]
        for name in later:
            try:
                given[name] = render(raw[name], first)
            except Exception:
                unresolved[name] = True
    findings, values = validate(given, options, internal, groups, model_config, routers, hub_config)
    refused = set(f["details"]["variable"] for f in findings
                  if f["severity"] == "error" and f.get("details", {}).get("variable") in raw) | set(unresolved)
    derived = set(name for name in raw if closure[name] & refused)
    kept = [f for f in findings if f.get("details", {}).get("variable") not in derived]
    for name in sorted(set(unresolved) - derived):
        missing = sorted(n for n in reads[name] - TEMPLATE_GLOBALS if n not in defined and n != TYPED and n not in raw)
        if missing:
            why = "it reads %s, which %s not set" % (", ".join(missing), "is" if len(missing) == 1 else "are")
        elif reads[name] - {TYPED}:
            why = "its template, which reads %s, gives no value" % ", ".join(sorted(reads[name] - {TYPED}))
        else:
            why = "its template gives no value"
        kept.append(finding("E_CONFIG", name, "%s could not be computed: %s; allowed: %s, or a template of settings "
                            "that are set" % (name, why, _allowed(options.get(name, {}))), variable=name))
    for name in derived:
        values.pop(name, None)
    return kept, values
