# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Validation of the llm_ settings: types and choices from the llm role's argument spec,
then ranges, cross-field rules and what each engine can honour. Each failure is a finding that
names the variable, the value and what is allowed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import ipaddress
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,60}$")
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
DOMAIN = re.compile(r"^(\*\.)?([A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63}$")
DRAFTER_METHODS = ("mtp", "off", "ngram")
GPU_ENGINES = ("vllm", "sglang")

# Integer and float ranges: (minimum, maximum or None).
RANGES = {
    "llm_model_max_context": (1, None),
    "llm_parallel": (1, 1024),
    "llm_context": (1, None),
    "llm_max_tokens": (1, None),
    "llm_port": (1, 65535),
    "llm_reserve_gib": (0, None),
    "llm_kv_cap_gib": (0, None),
    "llm_default_top_k": (0, None),
}


def _dummy(s):
    return s.get("llm_weights") == "dummy"


# The dummy model folder (vLLM, SGLang) is a text model with an MTP layer and no draft model.
_DUMMY_FOLDER = [
    ("llm_vision", lambda s: _dummy(s) and bool(s.get("llm_vision")),
     "the dummy model folder is a text-only GLM-4.5-Air-shaped model (no vision tower)",
     "set llm_vision: false for burn-in, or llm_weights: hub"),
    ("llm_drafter", lambda s: _dummy(s) and s.get("llm_drafter") not in DRAFTER_METHODS,
     "dummy mode makes no draft model folder for this engine",
     "set llm_drafter: mtp (the dummy config has an MTP layer), ngram or off, or llm_weights: hub"),
]

# What an engine cannot do: (setting, predicate on the settings, why, the alternative).
UNSUPPORTED = {
    "vllm": list(_DUMMY_FOLDER),
    "sglang": list(_DUMMY_FOLDER) + [
        ("llm_media_urls", lambda s: s.get("llm_vision") and s.get("llm_media_urls") != "any",
         "SGLang has no way to refuse http(s) media URLs",
         "set llm_media_urls: any to serve on SGLang (it fetches any URL), or llm_engine: vllm"),
        ("llm_kv_cap_gib", lambda s: s.get("llm_kv_cap_gib", 0) > 0,
         "SGLang sizes its KV pool as a fraction of GPU memory (--mem-fraction-static), not in GiB",
         "set llm_kv_cap_gib: 0 (the pool then follows llm_reserve_gib), or llm_engine: vllm"),
    ],
    "llamacpp": [
        ("llm_kv", lambda s: s.get("llm_kv") == "fp8",
         "llama.cpp has no fp8 KV cache (its cache types are q8_0, f16, bf16)",
         "set llm_kv: bf16, or llm_engine: vllm"),
        ("llm_vision", lambda s: bool(s.get("llm_vision")),
         "the llama.cpp profile serves text only (image input needs an --mmproj projector)",
         "set llm_vision: false, or llm_engine: vllm"),
        ("llm_dense", lambda s: s.get("llm_dense") != s.get("llm_model_dense", s.get("llm_dense")),
         "llama.cpp runs the GGUF's own quantization and converts nothing at load",
         "set llm_dense to the GGUF's (llm_model_dense), or llm_engine: vllm"),
        ("llm_drafter", lambda s: s.get("llm_drafter") == "ngram",
         "the llama.cpp profile has no n-gram drafting",
         "set llm_drafter: off, mtp or a draft GGUF repo, or llm_engine: vllm"),
        ("llm_drafter", lambda s: _dummy(s) and s.get("llm_drafter") == "mtp",
         "the dummy GGUF has no MTP head",
         "set llm_drafter to a draft repo name (a second dummy GGUF is made as the draft model) or off"),
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


def _bad(code, name, value, allowed, secret=False):
    shown = "(hidden)" if secret else repr(value)
    return finding(code, name, "%s is %s; allowed: %s" % (name, shown, allowed), variable=name,
                   value=None if secret else value, allowed=allowed)


def _allowed(option):
    if option.get("choices"):
        return "one of %s" % ", ".join(str(c) for c in option["choices"])
    kind = option.get("type", "str")
    if kind == "list":
        return "a list of %s" % option.get("elements", "values")
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "path": "a path", "dict": "a mapping"}.get(kind, kind)


def spec_options(collection):
    """The llm role's options, and every llm_ option any role of the collection documents (known names)."""
    import yaml  # the controller's PyYAML (ansible-core's dependency)

    with open(os.path.join(collection, "roles", "llm", "meta", "argument_specs.yml")) as f:
        options = yaml.safe_load(f)["argument_specs"]["main"]["options"]
    known = set()
    for path in glob.glob(os.path.join(collection, "roles", "*", "meta", "argument_specs.yml")):
        with open(path) as f:
            for entry in (yaml.safe_load(f) or {}).get("argument_specs", {}).values():
                known.update(n for n in (entry.get("options") or {}) if n.startswith("llm_"))
    return options, known


def typed(settings, options):
    """The settings converted as Ansible converts arguments of the spec's types ('2' -> 2 for an int,
    'yes' -> True for a bool); a value that does not convert stays as given (validation reports it)."""
    out = dict(settings)
    for name, option in options.items():
        if name in settings:
            spec = dict((k, v) for k, v in option.items() if k in ("type", "elements"))
            result = ArgumentSpecValidator({name: spec}).validate({name: settings[name]})
            if not result.error_messages:
                out[name] = result.validated_parameters[name]
    return out


def validate(settings, spec_options, known_names=()):
    """Return findings for the llm_ settings given as {name: value} (templated values)."""
    findings = []
    secret = set(n for n, o in spec_options.items() if o.get("no_log"))
    known = set(spec_options) | set(known_names)
    for name in sorted(settings):
        if name not in known:
            findings.append(finding("W_UNKNOWN_SETTING", name, "%s is not a setting of this collection (a typo?); "
                                    "it is ignored" % name, variable=name))

    # Types and choices: the llm role's argument spec, option by option so each failure names its variable.
    values = {}
    for name, option in spec_options.items():
        if name not in settings:
            continue
        spec = dict((k, v) for k, v in option.items() if k in ("type", "choices", "elements", "no_log"))
        result = ArgumentSpecValidator({name: spec}).validate({name: settings[name]})
        # Ansible's str type turns a list or mapping into its text; a setting never means that.
        mistyped = option.get("type", "str") == "str" and isinstance(settings[name], (list, dict))
        if result.error_messages or mistyped:
            findings.append(_bad("E_CONFIG", name, settings[name], _allowed(option), name in secret))
        else:
            values[name] = result.validated_parameters[name]

    for name, (low, high) in RANGES.items():
        value = values.get(name)
        if value is None:
            continue
        if value < low or (high is not None and value > high):
            findings.append(_bad("E_CONFIG", name, value, "%s to %s" % (low, high if high is not None else "any")))
            values.pop(name)

    for name in ("llm_model", "llm_served_model_name", "llm_model_revision"):
        if name in values and not str(values[name]).strip():
            findings.append(_bad("E_CONFIG", name, values[name], "a non-empty string"))
            values.pop(name)
    if values.get("llm_model") and not REPO.match(values["llm_model"]):
        findings.append(_bad("E_CONFIG", "llm_model", values["llm_model"], "a Hugging Face repo id, org/name"))

    name = values.get("llm_container_name")
    if name is not None and not CONTAINER_NAME.match(str(name)):
        findings.append(_bad("E_CONFIG", "llm_container_name", name,
                             "a Docker container name: letters, digits, '_', '.', '-', starting with a letter or digit"))

    drafter = values.get("llm_drafter")
    if drafter is not None and drafter not in DRAFTER_METHODS and not REPO.match(drafter):
        findings.append(_bad("E_CONFIG", "llm_drafter", drafter, "mtp, off, ngram, or a draft model repo org/name"))

    if "llm_media_urls" in values:
        media = values["llm_media_urls"]
        ok = media in ("data_only", "any") or (
            isinstance(media, list) and media and all(isinstance(d, str) and DOMAIN.match(d) for d in media))
        if not ok:
            findings.append(_bad("E_CONFIG", "llm_media_urls", media, "data_only, any, or a list of domain names"))

    if "llm_host" in values:
        try:
            ipaddress.ip_address(values["llm_host"])
        except ValueError:
            findings.append(_bad("E_CONFIG", "llm_host", values["llm_host"], "an IPv4 or IPv6 address to bind"))

    gpus = values.get("llm_gpus")
    if gpus is not None:
        if any(g < 0 for g in gpus):
            findings.append(_bad("E_CONFIG", "llm_gpus", gpus, "GPU indices of 0 or more"))
        elif len(set(gpus)) != len(gpus):
            findings.append(_bad("E_CONFIG", "llm_gpus", gpus, "each GPU index once"))

    context, window = values.get("llm_context"), values.get("llm_model_max_context")
    if context is not None and window is not None and context > window:
        findings.append(finding("E_CONTEXT", "llm_context", "llm_context is %d tokens, beyond the model's window of "
                                "%d (llm_model_max_context)" % (context, window),
                                variable="llm_context", value=context, allowed="at most %d" % window))
    reply = values.get("llm_max_tokens")
    if reply is not None and context is not None and reply > context:
        findings.append(_bad("E_CONFIG", "llm_max_tokens", reply, "at most llm_context (%d)" % context))

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
    for name, applies, why, alternative in UNSUPPORTED.get(engine, []):
        if name in values and applies(values):
            findings.append(finding("E_UNSUPPORTED", name, "%s is %r on %s: %s; %s" % (
                name, values[name], engine, why, alternative), variable=name, engine=engine))
    return findings
