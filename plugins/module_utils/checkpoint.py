# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""What a checkpoint can serve, read before any weight file is fetched: its config.json (a vision
tower, MTP layers, the shape that tensor parallelism splits) or, for a GGUF model, its header's
metadata (nextn layers). Settings it cannot honour (llm_vision with a text model, llm_drafter: mtp
without MTP layers, a GPU count its heads or experts do not divide, expert parallelism on vLLM for a
dense model, a MoE tune of a split the tuner cannot make) are refused with E_UNSUPPORTED while nothing is
downloaded yet. Settings validation applies the same rules on the workstation (the burn-in folder's config, a hub
config.json the workstation has, or the one hub_config.read gets from the hub).

Standard library only, but for the HTTP read (requests, in the host's virtualenv)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils import autotune
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


def _weight_block(config, text):
    """The blocks a block-quantized checkpoint's weights are scaled in, {method, n, k} from its quantization_config's
    weight_block_size [n, k] (zai-org's FP8 checkpoints: fp8, [128, 128]); None for any other checkpoint."""
    quant = next((q for q in (config.get("quantization_config"), text.get("quantization_config"))
                  if isinstance(q, dict)), None)
    block = quant.get("weight_block_size") if quant else None
    if not (isinstance(block, list) and len(block) == 2 and all(_count({"b": b}, "b") for b in block)):
        return None
    return {"method": str(quant.get("quant_method") or "block"), "n": block[0], "k": block[1]}


def shape(config):
    """What tensor parallelism splits, from a config.json's content: the language model's attention heads, KV
    heads, MLP width (intermediate_size), routed experts and their width (moe_intermediate_size), the vision
    tower's heads, and the weight blocks of a block-quantized checkpoint. A part the config does not give is
    None."""
    text = next((config[k] for k in ("text_config", "language_config") if isinstance(config.get(k), dict)), config)
    heads = _count(text, "num_attention_heads")
    kv = next((_count(text, k) for k in KV_KEYS if _count(text, k)), heads)
    experts = next((_count(text, k) for k in EXPERT_KEYS if _count(text, k)), None)
    tower = config.get("vision_config")
    return {"heads": heads, "kv_heads": kv, "mlp_width": _count(text, "intermediate_size"), "experts": experts,
            "expert_width": _count(text, "moe_intermediate_size") if experts else None,
            "vision": isinstance(tower, dict),
            "vision_heads": (_count(tower, "num_heads") or _count(tower, "num_attention_heads"))
            if isinstance(tower, dict) else None,
            "weight_block": _weight_block(config, text)}


def _kv_splits(kv, gpus):
    # vLLM's QKVParallelLinear: fewer GPUs than KV heads divide them; more replicate them, a whole number of times.
    return kv % gpus == 0 if gpus < kv else gpus % kv == 0


def split_problems(model, gpus, vision, expert_parallel=False, engine=None):
    """What stops the engines (vLLM, SGLang) from running the model on `gpus` GPUs: each part of the shape the GPU
    count does not split evenly, in words that follow "N does not divide"; [] when it splits. vLLM 0.26.0 refuses
    attention heads the GPUs do not divide (ModelConfig.verify_with_parallel_config), and its layers assert the
    same of KV heads, the MLP's width and, with images on, the vision tower's heads. The routed experts:
    - tensor parallel (expert_parallel false): each expert's width is split over the GPUs (FusedMoE), and in a
      block-quantized checkpoint each GPU's part must be whole blocks (Fp8MoEMethod.create_weights: "The
      output_size of gate's and up's weight = 352 is not divisible by weight quantization block_n = 128");
    - expert parallel (more than one GPU): each GPU holds whole experts, so their width is not split. SGLang
      asserts the experts divide evenly (FusedMoE: num_experts % moe_ep_size == 0); vLLM gives the first GPUs one
      more (determine_expert_map), so any count places them."""
    out = []
    if model.get("heads") and model["heads"] % gpus:
        out.append("its %d attention heads" % model["heads"])
    if model.get("kv_heads") and not _kv_splits(model["kv_heads"], gpus):
        out.append("its %d KV heads (nor is %d a multiple of them)" % (model["kv_heads"], gpus))
    if model.get("mlp_width") and model["mlp_width"] % gpus:
        out.append("its MLP width %d (intermediate_size)" % model["mlp_width"])
    experts, width, block = model.get("experts"), model.get("expert_width"), model.get("weight_block")
    part = None
    if experts and expert_parallel and gpus > 1:
        if engine != "vllm" and experts % gpus:
            out.append("its %d routed experts (expert parallel: as many whole experts on each GPU)" % experts)
        part = width
    elif width and width % gpus:
        out.append("its %d experts' width %d (moe_intermediate_size)" % (experts, width))
    elif width:
        part = width // gpus
    # Each GPU's part of an expert: gate and up's output in blocks of n, and down's input, with more than one GPU,
    # in blocks of k (vLLM's and SGLang's block-FP8 MoE methods check both).
    if part and block and (part % block["n"] or (gpus > 1 and part % block["k"])):
        size = block["n"] if block["n"] == block["k"] else "%dx%d" % (block["n"], block["k"])
        out.append("its %d experts' width %d into whole %s weight blocks of %s (%s; quantization_config "
                   "weight_block_size)" % (experts, width, block["method"], size,
                                           "%d on each GPU" % part if part != width else "whole experts"))
    if vision and model.get("vision_heads") and model["vision_heads"] % gpus:
        out.append("its vision tower's %d attention heads" % model["vision_heads"])
    return out


def gpu_counts(model, vision, most=16, expert_parallel=False, engine=None):
    """The GPU counts up to `most` that run the model, in words: '1, 2 or 4'; None when none does."""
    counts = [str(n) for n in range(1, most + 1) if not split_problems(model, n, vision, expert_parallel, engine)]
    if not counts:
        return None
    return counts[0] if len(counts) == 1 else "%s or %s" % (", ".join(counts[:-1]), counts[-1])


def _gpus_words(counts):
    return "%s GPU%s" % (counts, "" if counts == "1" else "s") if counts else "no count of GPUs up to 16"


def split_refusal(model, settings, where):
    """E_UNSUPPORTED when the GPU engine cannot run the model over all of llm_gpus; None when it can, or when the
    profile uses no GPUs (llama.cpp). On llm_expert_parallel when turning it on is what runs the model on these
    GPUs (a block-quantized checkpoint whose experts split into parts of blocks), else on llm_gpus."""
    engine, gpus = settings.get("llm_engine"), settings.get("llm_gpus")
    if engine not in GPU_ENGINES or not isinstance(gpus, list) or len(gpus) < 2 or not model:
        return None
    count, ep = len(gpus), bool(settings.get("llm_expert_parallel")) and bool(model.get("experts"))
    vision = bool(settings.get("llm_vision")) and model.get("vision")
    problems = split_problems(model, count, vision, ep, engine)
    if not problems:
        return None
    listed = problems[0] if len(problems) == 1 else "%s or %s" % (", ".join(problems[:-1]), problems[-1])
    how = "tensor parallel, each expert whole on a GPU: llm_expert_parallel" if ep else "tensor parallel"
    said = "it splits %s over all %d GPUs (%s), and %d does not divide %s" % (where, count, how, count, listed)
    counts = gpu_counts(model, vision, expert_parallel=ep, engine=engine)
    # vLLM serves a vision model's language model alone with llm_vision off (--language-model-only).
    text_only = ", or llm_vision: false (no vision tower is loaded then)" if engine == "vllm" and not split_problems(
        model, count, False, ep, engine) else ""
    if model.get("experts") and not ep:
        if not split_problems(model, count, vision, True, engine):
            return finding(
                "E_UNSUPPORTED", "llm_expert_parallel", "llm_expert_parallel is false on %s: %s; set "
                "llm_expert_parallel: true (each GPU then holds whole experts, attention and the dense layers stay "
                "tensor parallel), or llm_gpus to %s%s" % (engine, said, _gpus_words(counts), text_only),
                variable="llm_expert_parallel", value=False, allowed="true", engine=engine)
        with_ep = gpu_counts(model, vision, expert_parallel=True, engine=engine)
        if with_ep and with_ep != counts:
            text_only += ", or llm_expert_parallel: true with %s" % _gpus_words(with_ep)
    return finding(
        "E_UNSUPPORTED", "llm_gpus", "llm_gpus is %r on %s: %s; set llm_gpus to %s%s" % (
            gpus, engine, said, _gpus_words(counts), text_only),
        variable="llm_gpus", value=gpus, allowed=_gpus_words(counts), engine=engine)


def expert_parallel_refusal(model, settings, where):
    """E_UNSUPPORTED on llm_expert_parallel for a dense model on vLLM over several GPUs (the template renders
    --enable-expert-parallel there): vLLM refuses expert parallelism for a model with no routed experts
    (ModelConfig._verify_with_expert_parallelism). A shape without its heads is too little known to say."""
    engine, gpus = settings.get("llm_engine"), settings.get("llm_gpus")
    if engine != "vllm" or not settings.get("llm_expert_parallel") or not isinstance(gpus, list) or len(gpus) < 2 \
            or not model or not model.get("heads") or model.get("experts"):
        return None
    return finding(
        "E_UNSUPPORTED", "llm_expert_parallel", "llm_expert_parallel is true on vllm but %s has no routed experts "
        "(none of %s in its config): vLLM refuses expert parallelism for a dense model (\"Number of experts in the "
        "model must be greater than 0 when expert parallelism is enabled\"); set llm_expert_parallel: false" % (
            where, ", ".join(EXPERT_KEYS)),
        variable="llm_expert_parallel", value=True, allowed="false", engine=engine)


def autotune_moe_refusal(model, settings, where):
    """E_UNSUPPORTED on autotune_moe (full or reduced) when the autotune stage could not tune the MoE split the engine
    runs: a model without routed experts, or the split autotune.moe_tune_problem names (SGLang's whole experts,
    experts the GPUs do not divide for vLLM's tuner). Asked after split_refusal passed: a split the engine cannot
    run is refused there, on llm_gpus. None when the shape is too little known to say."""
    engine, gpus, search = settings.get("llm_engine"), settings.get("llm_gpus"), settings.get("autotune_moe")
    if search not in ("full", "reduced") or engine not in GPU_ENGINES or not model or not isinstance(gpus, list):
        return None
    fix = "set autotune_moe: 'off'"
    if not model.get("experts"):
        if not model.get("heads"):
            return None
        why = "%s has no routed experts (none of %s in its config): the MoE tuner has nothing to tune" % (
            where, ", ".join(EXPERT_KEYS))
    else:
        count = max(len(gpus), 1)
        ep = bool(settings.get("llm_expert_parallel")) and count > 1
        block = model.get("weight_block")
        why = autotune.moe_tune_problem(model["experts"], model.get("expert_width"), block["n"] if block else None,
                                        count, ep, engine)
        if not why:
            return None
        why = "for %s, %s" % (where, why)
        fix += ", or llm_expert_parallel: false" if engine != "vllm" else ", or llm_gpus to a count that divides them"
    return finding(
        "E_UNSUPPORTED", "autotune_moe", "autotune_moe is %s on %s but %s; %s" % (search, engine, why, fix),
        variable="autotune_moe", value=search, allowed="off", engine=engine)


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
    dense = expert_parallel_refusal(caps.get("shape"), settings, where)
    if dense:
        out.append(dense)
    split = split_refusal(caps.get("shape"), dict(settings, llm_vision=settings.get("llm_vision") and not refused,
                                                  llm_expert_parallel=settings.get("llm_expert_parallel") and not dense),
                          where)
    if split:
        out.append(split)
    else:
        tune = autotune_moe_refusal(caps.get("shape"), settings, where)
        if tune:
            out.append(tune)
    if settings.get("llm_drafter") == "mtp" and caps.get("mtp_layers") == 0:
        out.append(finding(
            "E_UNSUPPORTED", "llm_drafter", "llm_drafter is 'mtp' but %s has no MTP layers; set llm_drafter: 'off', "
            "ngram (vLLM, SGLang) or a draft model repo, or serve a checkpoint with MTP layers" % where,
            variable="llm_drafter", engine=settings.get("llm_engine")))
    return out


def needed(settings):
    """Whether the checkpoint must be read at all: only what vision, MTP drafting, a GPU engine's split over
    several GPUs or its MoE tune (autotune_moe) depend on."""
    gpus = settings.get("llm_gpus")
    return bool(settings.get("llm_vision")) or settings.get("llm_drafter") == "mtp" or (
        settings.get("llm_engine") in GPU_ENGINES and isinstance(gpus, list) and len(gpus) > 1) or (
        settings.get("llm_engine") in GPU_ENGINES and settings.get("autotune_moe") in ("full", "reduced"))


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
