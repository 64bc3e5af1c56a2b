# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""What a checkpoint can serve, read before any weight file is fetched: its config.json (a vision
tower, MTP layers) or, for a GGUF model, its header's metadata (nextn layers). Settings it cannot
honour (llm_vision with a text model, llm_drafter: mtp without MTP layers) are refused with
E_UNSUPPORTED while nothing is downloaded yet.

Standard library only, but for the HTTP read (requests, in the host's virtualenv)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

# Where model configs say how many multi-token-prediction layers they carry (GLM, DeepSeek: nextn;
# Qwen3-Next, MiMo: mtp), at the top or in a multimodal model's text_config.
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
# A GGUF header is read this far: llama.cpp's converter writes the architecture's keys before the
# tokenizer's arrays (which run to megabytes), so they are in the first few kilobytes.
GGUF_HEADER_BYTES = 1 << 20


def from_config(config):
    """{vision, mtp_layers, source} from a config.json's content (a dict)."""
    sections = [config] + [config[k] for k in ("text_config", "language_config") if isinstance(config.get(k), dict)]
    mtp = 0
    for section in sections:
        for key in MTP_KEYS:
            if isinstance(section.get(key), int):
                mtp = max(mtp, section[key])
    return {"vision": "vision_config" in config, "mtp_layers": mtp, "source": "config.json"}


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
    if settings.get("llm_vision") and caps.get("vision") is False:
        out.append(finding(
            "E_UNSUPPORTED", "llm_vision", "llm_vision is true but %s is a text model: no vision tower "
            "(vision_config); set llm_vision: false, or serve a vision checkpoint (llm_model)" % where,
            variable="llm_vision", engine=settings.get("llm_engine")))
    if settings.get("llm_drafter") == "mtp" and caps.get("mtp_layers") == 0:
        out.append(finding(
            "E_UNSUPPORTED", "llm_drafter", "llm_drafter is 'mtp' but %s has no MTP layers; set llm_drafter: 'off', "
            "ngram (vLLM, SGLang) or a draft model repo, or serve a checkpoint with MTP layers" % where,
            variable="llm_drafter", engine=settings.get("llm_engine")))
    return out


def needed(settings):
    """Whether the checkpoint must be read at all: only what vision or MTP drafting depend on."""
    return bool(settings.get("llm_vision")) or settings.get("llm_drafter") == "mtp"


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
