# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""What a checkpoint can serve, read before any weight file is fetched: its config.json (a vision
tower, MTP layers, the shape that tensor parallelism splits) or, for a GGUF model, its header's
metadata (nextn layers). Settings it cannot honour (llm_vision with a text model, llm_drafter: mtp
without MTP layers, a GPU count its heads or experts do not divide) are refused with E_UNSUPPORTED
while nothing is downloaded yet. Settings validation applies the same rules on the workstation
(the burn-in folder's config, or a hub config.json the workstation has).

Standard library only, but for the HTTP read (requests, in the host's virtualenv)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

# Where model configs say how many multi-token-prediction layers they carry (GLM, DeepSeek: nextn;
# Qwen3-Next, MiMo: mtp), at the top or in a multimodal model's text_config.
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
# A GGUF header is read this far: llama.cpp's converter writes the architecture's keys before the
# tokenizer's arrays (which run to megabytes), so they are in the first few kilobytes.
GGUF_HEADER_BYTES = 1 << 20


def from_config(config):
    """{vision, mtp_layers, shape, source} from a config.json's content (a dict)."""
    sections = [config] + [config[k] for k in ("text_config", "language_config") if isinstance(config.get(k), dict)]
    mtp = 0
    for section in sections:
        for key in MTP_KEYS:
            if isinstance(section.get(key), int):
                mtp = max(mtp, section[key])
    return {"vision": "vision_config" in config, "mtp_layers": mtp, "shape": shape(config), "source": "config.json"}


# The names vLLM reads a language model's KV heads and routed experts by (ModelConfig.get_total_num_kv_heads,
# get_num_experts), first found wins; no KV key means as many KV heads as attention heads.
KV_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
GPU_ENGINES = ("vllm", "sglang")


def _count(section, key):
    value = section.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def shape(config):
    """What tensor parallelism splits, from a config.json's content: the language model's attention heads, KV
    heads, MLP width (intermediate_size), routed experts and their width (moe_intermediate_size), and the vision
    tower's heads. A part the config does not give is None."""
    text = next((config[k] for k in ("text_config", "language_config") if isinstance(config.get(k), dict)), config)
    heads = _count(text, "num_attention_heads")
    kv = next((_count(text, k) for k in KV_KEYS if _count(text, k)), heads)
    experts = next((_count(text, k) for k in EXPERT_KEYS if _count(text, k)), None)
    tower = config.get("vision_config")
    return {"heads": heads, "kv_heads": kv, "mlp_width": _count(text, "intermediate_size"), "experts": experts,
            "expert_width": _count(text, "moe_intermediate_size") if experts else None,
            "vision": isinstance(tower, dict),
            "vision_heads": (_count(tower, "num_heads") or _count(tower, "num_attention_heads"))
            if isinstance(tower, dict) else None}


def _kv_splits(kv, gpus):
    # vLLM's QKVParallelLinear: fewer GPUs than KV heads divide them; more replicate them, a whole number of times.
    return kv % gpus == 0 if gpus < kv else gpus % kv == 0


def split_problems(model, gpus, vision):
    """What stops `gpus`-way tensor parallelism on the engines (vLLM, SGLang): each part of the shape the GPU count
    does not split evenly, in words; [] when it splits. vLLM 0.26.0 refuses attention heads the GPUs do not divide
    (ModelConfig.verify_with_parallel_config), and its layers assert the same of KV heads, the MLP's and the
    experts' widths (FusedMoE, without expert parallelism) and, with images on, the vision tower's heads."""
    out = []
    if model.get("heads") and model["heads"] % gpus:
        out.append("its %d attention heads" % model["heads"])
    if model.get("kv_heads") and not _kv_splits(model["kv_heads"], gpus):
        out.append("its %d KV heads (nor is %d a multiple of them)" % (model["kv_heads"], gpus))
    if model.get("mlp_width") and model["mlp_width"] % gpus:
        out.append("its MLP width %d (intermediate_size)" % model["mlp_width"])
    if model.get("expert_width") and model["expert_width"] % gpus:
        out.append("its %d experts' width %d (moe_intermediate_size)" % (model["experts"], model["expert_width"]))
    if vision and model.get("vision_heads") and model["vision_heads"] % gpus:
        out.append("its vision tower's %d attention heads" % model["vision_heads"])
    return out


def gpu_counts(model, vision, most=16):
    """The GPU counts up to `most` that split the model, in words: '1, 2 or 4'."""
    counts = [str(n) for n in range(1, most + 1) if not split_problems(model, n, vision)]
    return counts[0] if len(counts) == 1 else "%s or %s" % (", ".join(counts[:-1]), counts[-1])


def split_refusal(model, settings, where):
    """E_UNSUPPORTED on llm_gpus when the GPU engine cannot split the model over that many GPUs; None when it can,
    or when the profile uses no GPUs (llama.cpp)."""
    engine, gpus = settings.get("llm_engine"), settings.get("llm_gpus")
    if engine not in GPU_ENGINES or not isinstance(gpus, list) or len(gpus) < 2 or not model:
        return None
    vision = bool(settings.get("llm_vision")) and model.get("vision")
    problems = split_problems(model, len(gpus), vision)
    if not problems:
        return None
    counts = gpu_counts(model, vision)
    allowed = "%s GPU%s" % (counts, "" if counts == "1" else "s")
    listed = problems[0] if len(problems) == 1 else "%s or %s" % (", ".join(problems[:-1]), problems[-1])
    # vLLM serves a vision model's language model alone with llm_vision off (--language-model-only).
    text_only = engine == "vllm" and not split_problems(model, len(gpus), False)
    return finding(
        "E_UNSUPPORTED", "llm_gpus", "llm_gpus is %r on %s: it splits %s over all %d GPUs (tensor parallel), and %d "
        "does not divide %s; set llm_gpus to %s%s" % (
            gpus, engine, where, len(gpus), len(gpus), listed, allowed,
            ", or llm_vision: false (no vision tower is loaded then)" if text_only else ""),
        variable="llm_gpus", value=gpus, allowed=allowed, engine=engine)


def vision_refusal(settings, has_vision, where, alternative="serve a vision checkpoint (llm_model)"):
    """E_UNSUPPORTED on llm_vision for a text model (no vision tower); None otherwise."""
    if not settings.get("llm_vision") or has_vision is not False:
        return None
    return finding(
        "E_UNSUPPORTED", "llm_vision", "llm_vision is true but %s is a text model: no vision tower "
        "(vision_config); set llm_vision: false, or %s" % (where, alternative),
        variable="llm_vision", engine=settings.get("llm_engine"))


HEX40 = re.compile(r"^[0-9a-f]{40}$")


def hub_cache_dir(environ, home):
    """The Hugging Face cache huggingface_hub uses on this machine: HF_HUB_CACHE, HF_HOME/hub, or ~/.cache."""
    if environ.get("HF_HUB_CACHE"):
        return environ["HF_HUB_CACHE"]
    base = environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
                                                  "huggingface")
    return os.path.join(base, "hub")


def cached_config(cache, repo, revision):
    """A repo's config.json at `revision` (a commit, or a branch or tag its refs/ names) in a Hugging Face cache,
    as (content, path); None when the cache does not hold it or it is not one JSON object."""
    folder = os.path.join(cache, "models--" + repo.replace("/", "--"))
    try:
        if HEX40.match(revision):
            commit = revision
        else:
            with open(os.path.join(folder, "refs", revision)) as f:
                commit = f.read().strip()
        path = os.path.join(folder, "snapshots", commit, "config.json")
        with open(path) as f:
            content = json.load(f)
    except (IOError, OSError, ValueError):
        return None
    return (content, path) if isinstance(content, dict) else None


# GGUF value types: struct format of the scalars; 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Short(Exception):
    """The bytes read end inside a value."""


def _take(data, pos, fmt):
    size = struct.calcsize(fmt)
    if pos + size > len(data):
        raise _Short()
    return struct.unpack_from(fmt, data, pos)[0], pos + size


def _string(data, pos):
    n, pos = _take(data, pos, "<Q")
    if pos + n > len(data):
        raise _Short()
    return data[pos:pos + n].decode("utf-8", "replace"), pos + n


def _value(data, pos, kind):
    if kind in _SCALARS:
        return _take(data, pos, _SCALARS[kind])
    if kind == 8:
        return _string(data, pos)
    if kind == 9:
        inner, pos = _take(data, pos, "<I")
        count, pos = _take(data, pos, "<Q")
        if inner in _SCALARS:  # skip fixed-size arrays without reading them
            end = pos + count * struct.calcsize(_SCALARS[inner])
            if end > len(data):
                raise _Short()
            return None, end
        for _item_no in range(count):
            _item, pos = _value(data, pos, inner)
        return None, pos
    raise ValueError("unknown GGUF value type %d" % kind)


def gguf_metadata(data):
    """The key/value metadata at the start of a GGUF file, as far as `data` (its first bytes) goes.

    Returns (metadata, complete): arrays are left out (None); complete is False when the bytes ended first."""
    if data[:4] != b"GGUF":
        raise ValueError("not a GGUF file (no GGUF magic)")
    meta = {}
    try:
        _version, pos = _take(data, 4, "<I")
        _tensors, pos = _take(data, pos, "<Q")
        count, pos = _take(data, pos, "<Q")
        for _key_no in range(count):
            key, pos = _string(data, pos)
            kind, pos = _take(data, pos, "<I")
            meta[key], pos = _value(data, pos, kind)
    except _Short:
        return meta, False
    return meta, True


def from_gguf(meta, complete):
    """{vision, mtp_layers, source} from a GGUF header (a GGUF model carries no vision tower: that is a
    separate projector file). mtp_layers is None when the header read ended before the key could be seen."""
    arch = meta.get("general.architecture", "")
    key = "%s.nextn_predict_layers" % arch
    mtp = meta.get(key)
    if mtp is None and (complete or "%s.block_count" % arch in meta):
        mtp = 0  # read to the end, or past the architecture's keys (written together): there is none
    return {"vision": False, "mtp_layers": mtp, "source": "GGUF header"}


def refusals(settings, caps, repo, commit):
    """E_UNSUPPORTED findings for settings this checkpoint cannot honour (what is not known is not refused)."""
    out = []
    where = "%s@%s (%s)" % (repo, commit[:12], caps["source"])
    refused = vision_refusal(settings, caps.get("vision"), where)
    if refused:
        out.append(refused)
    split = split_refusal(caps.get("shape"), dict(settings, llm_vision=settings.get("llm_vision") and not refused),
                          where)
    if split:
        out.append(split)
    if settings.get("llm_drafter") == "mtp" and caps.get("mtp_layers") == 0:
        out.append(finding(
            "E_UNSUPPORTED", "llm_drafter", "llm_drafter is 'mtp' but %s has no MTP layers; set llm_drafter: 'off', "
            "ngram (vLLM, SGLang) or a draft model repo, or serve a checkpoint with MTP layers" % where,
            variable="llm_drafter", engine=settings.get("llm_engine")))
    return out


def needed(settings):
    """Whether the checkpoint must be read at all: only what vision, MTP drafting or a GPU engine's split over
    several GPUs depend on."""
    gpus = settings.get("llm_gpus")
    return bool(settings.get("llm_vision")) or settings.get("llm_drafter") == "mtp" or (
        settings.get("llm_engine") in GPU_ENGINES and isinstance(gpus, list) and len(gpus) > 1)


def read(get, manifest, gguf_file=None):
    """The checkpoint's capabilities through `get(path, max_bytes)` (an HTTP read of a file at the manifest's
    commit, returning bytes): config.json when the repo has one, else the GGUF model's header; None when
    neither is there."""
    paths = set(f["path"] for f in manifest["files"])
    if "config.json" in paths:
        return from_config(json.loads(get("config.json", None).decode("utf-8")))
    if gguf_file:
        return from_gguf(*gguf_metadata(get(gguf_file, GGUF_HEADER_BYTES)))
    return None
