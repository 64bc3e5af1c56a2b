# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The memory-bandwidth bound of decoding, for bench's tables.

A decoded token reads every weight it uses once, so one request cannot go faster than the GPUs'
memory bandwidth over those bytes. The bandwidth is NVML's: memory bus width (bits) / 8 x memory
clock (MHz) x 2 (double data rate); an H200 answers 6,016 bits and 3,201 MHz, 4,814 GB/s. With
tensor parallelism each GPU reads its shard, so the GPUs' bandwidths add; with llama.cpp's layer
split they take turns, so the slowest GPU's counts. The bytes are read from the served model:

* a Hugging Face folder's config.json (the text model's, for a vision model): attention, the dense
  MLPs, the shared and top-k routed experts of every layer, the router and the output head; FP8
  checkpoints' linear layers 1 byte a weight, the router and head in bf16; the embedding row and the
  norms are left out (a few kB). An MTP layer is not counted (a drafted step reads it on top).
* a GGUF file's tensor table: every tensor at its own type's size, less the token embedding (one row
  is read), unless the head is tied to it (no output.weight).

A bound is a ceiling, not a target: real engines reach 40-70 % of it for one request (KV cache
reads, kernels launch by kernel, the sampler).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils.checkpoint import _Short, _string, _take, _value

NVML_CLOCK_MEM = 2
# ggml type id: (elements a block, bytes a block), as ggml.h numbers them.
GGML_SIZES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
              10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
              15: (256, 292), 30: (1, 2)}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADER_BYTES = 64 << 20  # a GGUF's tokenizer arrays come before the tensor table: real ones take a few MB


class Unknown(Exception):
    """The bound cannot be given; the message says why."""


def nvml_bandwidth(nvml, gpus, split="tensor"):
    """{gb_s, per_gpu, how} of the GPUs in `gpus` (indices), read through `nvml` (the pynvml module)."""
    if not gpus:
        raise Unknown("the engine runs on the CPU, llm_gpus is empty: the host memory bandwidth is not read")
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError and its subclasses, or a missing library
        raise Unknown("NVML did not answer (%s)" % e)
    try:
        per_gpu = []
        for index in gpus:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            bits = nvml.nvmlDeviceGetMemoryBusWidth(handle)
            mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_MEM)
            per_gpu.append({"gpu": index, "bus_bits": bits, "memory_mhz": mhz, "gb_s": round(bits / 8.0 * mhz * 2 / 1000, 1)})
    except Exception as e:
        raise Unknown("NVML could not give GPU %s's memory bus width and clock (%s)" % (index, e))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    each = [g["gb_s"] for g in per_gpu]
    total = sum(each) if split == "tensor" else min(each)
    how = "%s GPU%s x %s GB/s (NVML: %s-bit bus, %s MHz memory clock)%s" % (
        len(each), "" if len(each) == 1 else "s", "{:,}".format(min(each)), per_gpu[0]["bus_bits"],
        per_gpu[0]["memory_mhz"], ", layers split: the slowest GPU's" if split != "tensor" and len(each) > 1 else "")
    return {"gb_s": round(total, 1), "per_gpu": per_gpu, "how": how}


def config_bytes(config):
    """{bytes, parts} one decoded token reads, from a Hugging Face config.json's content."""
    c = config.get("text_config") or config
    try:
        h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
        kv = c.get("num_key_value_heads", heads)
        head_dim = c.get("head_dim") or h // heads
        vocab = c["vocab_size"]
    except (KeyError, TypeError, ZeroDivisionError) as e:
        raise Unknown("config.json lacks the shape (%s)" % e)
    quant = config.get("quantization_config") or c.get("quantization_config") or {}
    dtype = c.get("torch_dtype") or c.get("dtype") or config.get("torch_dtype") or "bfloat16"
    if quant and quant.get("quant_method") != "fp8":
        raise Unknown("config.json's quantization %r is not one bench knows the size of" % quant.get("quant_method"))
    weight = 1 if quant else DTYPE_BYTES.get(dtype, 2)
    attn = layers * (2 * h * heads * head_dim + 2 * h * kv * head_dim)
    experts = c.get("n_routed_experts") or c.get("num_experts") or 0
    parts = {"attention": attn * weight}
    if experts:
        k_dense = c.get("first_k_dense_replace", 0)
        moe_layers = layers - k_dense
        expert = 3 * h * c["moe_intermediate_size"]
        shared = c.get("n_shared_experts", 0) * expert or 3 * h * c.get("shared_expert_intermediate_size", 0)
        # A dense MLP an FP8 checkpoint leaves out of quantization stays bf16 (the burn-in folder does).
        ignored = quant.get("ignored_layers") or quant.get("modules_to_not_convert") or []
        dense_weight = 2 if any(str(n).endswith("layers.0.mlp.gate_proj") for n in ignored) else weight
        parts["dense_mlp"] = k_dense * 3 * h * c.get("intermediate_size", 0) * dense_weight
        parts["experts"] = moe_layers * (c["num_experts_per_tok"] * expert + shared) * weight
        parts["router"] = moe_layers * h * experts * 2
    else:
        parts["mlp"] = layers * 3 * h * c["intermediate_size"] * weight
    parts["lm_head"] = h * vocab * 2
    return {"bytes": int(sum(parts.values())), "parts": dict((k, int(v)) for k, v in parts.items()),
            "how": "config.json: %d layers, %s" % (layers, "FP8 linear layers" if quant else dtype)}


def gguf_bytes(data):
    """{bytes, parts} one decoded token reads, from a GGUF file's first bytes (its tensor table)."""
    if data[:4] != b"GGUF":
        raise Unknown("not a GGUF file")
    try:
        _version, pos = _take(data, 4, "<I")
        tensors, pos = _take(data, pos, "<Q")
        count, pos = _take(data, pos, "<Q")
        for _key_no in range(count):
            _key, pos = _string(data, pos)
            kind, pos = _take(data, pos, "<I")
            _v, pos = _value(data, pos, kind)
        sizes = {}
        for _tensor_no in range(tensors):
            name, pos = _string(data, pos)
            dims, pos = _take(data, pos, "<I")
            shape = struct.unpack_from("<%dQ" % dims, data, pos)
            pos += 8 * dims
            kind, pos = _take(data, pos, "<I")
            _offset, pos = _take(data, pos, "<Q")
            if kind not in GGML_SIZES:
                raise Unknown("tensor %s has ggml type %d, whose size bench does not know" % (name, kind))
            block, size = GGML_SIZES[kind]
            elements = 1
            for d in shape:
                elements *= d
            sizes[name] = (elements // block * size, shape)
    except (_Short, struct.error):
        raise Unknown("the GGUF header did not fit in its first %d MiB" % (len(data) >> 20))
    embd, shape = sizes.get("token_embd.weight", (0, (1,)))
    total = sum(s for s, _shape in sizes.values())
    tied = "output.weight" not in sizes
    read = total - embd + (embd if tied else embd // max(shape[-1], 1))
    return {"bytes": int(read), "parts": {"tensors": int(total), "token_embd_not_read": int(total - read)},
            "how": "GGUF: %d tensors%s" % (len(sizes), ", head tied to the embedding" if tied else "")}


def model_bytes(path):
    """The bytes a token reads for the model at `path` on this host: a folder with config.json, or a GGUF."""
    if os.path.isdir(path):
        config = os.path.join(path, "config.json")
        if not os.path.isfile(config):
            raise Unknown("%s holds no config.json" % path)
        with open(config) as f:
            return config_bytes(json.load(f))
    if path.endswith(".gguf") and os.path.isfile(path):
        with open(path, "rb") as f:
            return gguf_bytes(f.read(HEADER_BYTES))
    raise Unknown("%s is neither a model folder nor a GGUF file" % path)


def served_model_path(args, mounts):
    """The host path of the model a container serves: the first argument under one of its mounts that
    names a model folder or a .gguf (mounts: [{Source, Destination}] as docker inspect gives them)."""
    for arg in args or []:
        for m in mounts or []:
            dest = m.get("Destination", "").rstrip("/")
            if dest and (arg == dest or arg.startswith(dest + "/")):
                path = m.get("Source", "") + arg[len(dest):]
                if arg.endswith(".gguf") or os.path.isdir(path):
                    return path
    raise Unknown("the engine's command names no model under its mounts")


def decode_bound(bandwidth, model):
    """{tok_s, gb_s, bytes, how}: one request's ceiling in tokens per second."""
    return {"tok_s": round(bandwidth["gb_s"] * 1e9 / model["bytes"], 1), "gb_s": bandwidth["gb_s"],
            "bytes": model["bytes"], "parts": model["parts"], "bandwidth": bandwidth["how"], "model": model["how"]}


def percent(value, bound):
    """value as a percentage of bound (one decimal), or None where either is unknown."""
    if value is None or not bound:
        return None
    return round(100.0 * value / bound, 1)
