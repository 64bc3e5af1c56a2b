#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dummy_weights
short_description: Burn-in weights made on the host, no download
version_added: "0.1.0"
description:
  - O(format=gguf) writes a tiny llama-architecture GGUF for llama.cpp with hand-set weights (a bigram table, a head
    that spots C(<tools>) in the prompt), so that plain replies, streaming, C(json_schema), C(json_object) and tool
    calls work through the engine's own grammars. Needs the C(gguf) and C(numpy) packages (the collection's host
    virtualenv has them).
  - O(format=gguf) with O(vision=true) also writes C(mmproj.gguf), a tiny LLaVA-style projector with hand-set weights
    for C(llama-server --mmproj) - images by data URL are accepted and counted (more pixels, more tokens), the reply
    is the burn-in one with or without images.
  - O(format=hf) writes a model folder for vLLM or SGLang served with C(--load-format dummy) - the architecture's
    C(config.json) (a preset's shapes or a given config, layer count adjustable), C(generation_config.json) and a
    byte-level tokenizer with the model family's special tokens and chat template. No weight files.
  - The same inputs give the same bytes. A stamp (C(gpuserve-dummy.json)) records the inputs and each file's sha256;
    nothing is written while both match.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Says whether the model would be written; writes nothing.
  diff_mode:
    support: none
options:
  path:
    description: The model folder on the host.
    type: path
    required: true
  format:
    description: C(gguf) for llama.cpp, C(hf) for vLLM and SGLang.
    type: str
    choices: [gguf, hf]
    required: true
  chat_template:
    description: The chat template (Jinja) the tokenizer carries.
    type: str
    required: true
  seed:
    description: Seeds the GGUF's filler weights; a second seed makes a draft model with the same vocabulary.
    type: int
    default: 0
  layers:
    description: Transformer layers; 0 = the format's default (GGUF 2, hf the preset's).
    type: int
    default: 0
  context:
    description: The GGUF's trained context length.
    type: int
    default: 8192
  preset:
    description:
      - The architecture whose config.json O(format=hf) writes - C(glm4_moe) (GLM-4.5-Air), C(glm4v_moe) (GLM-4.6V,
        with its vision tower and image and video processors).
    type: str
    default: glm4_moe
  config:
    description: Keys that replace the preset's in config.json (a given config).
    type: dict
    default: {}
  name:
    description: The model's name, written into the file's metadata.
    type: str
    default: gpuserve burn-in model
  vision:
    description:
      - O(format=gguf) - also write the multimodal projector C(mmproj.gguf), matched to the text model's width.
      - O(format=hf) ignores it (the O(preset) decides the vision tower).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: A tiny GGUF for llama.cpp
  gpuserve.llm.dummy_weights:
    path: /var/lib/gpuserve/models/dummy/tiny
    format: gguf
    seed: 0
    chat_template: "{{ lookup('ansible.builtin.file', 'templates/chat/chatml-tools.jinja') }}"

- name: A GLM-4.5-Air-shaped folder cut to 8 layers, for vLLM --load-format dummy
  gpuserve.llm.dummy_weights:
    path: /var/lib/gpuserve/models/dummy/glm
    format: hf
    layers: 8
    chat_template: "{{ lookup('ansible.builtin.file', 'templates/chat/glm45.jinja') }}"
"""

RETURN = r"""
path:
  description: The model folder.
  returned: always
  type: str
model_file:
  description: The GGUF file (O(format=gguf)).
  returned: when O(format=gguf)
  type: str
mmproj_file:
  description: The projector GGUF (O(format=gguf) with O(vision=true)).
  returned: when O(format=gguf) and O(vision=true)
  type: str
files:
  description: File name to sha256 of what the folder holds (or would hold).
  returned: always
  type: dict
model:
  description: What the model is (architecture, layers, sizes; for GGUF the seed and the fixed reply, and the projector's
    shape under C(mmproj) when O(vision=true)).
  returned: always
  type: dict
dummy:
  description: Always true - these are burn-in weights.
  returned: always
  type: bool
finding:
  description: On failure, the finding (E_VENV when gguf/numpy are missing, E_WEIGHTS when the folder cannot be written).
  returned: failure
  type: dict
"""

import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_gguf, dummy_hf, dummy_mmproj
from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import read_json, replacing, write_bytes
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail

STAMP = "gpuserve-dummy.json"
GGUF_FILE = "model.gguf"
MMPROJ_FILE = "mmproj.gguf"
# Bumped when the generator's output changes for the same inputs.
GENERATOR = 1


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def current(path, stamp, inputs):
    """True when the folder holds exactly what the stamp says, made from these inputs."""
    if not stamp or stamp.get("inputs") != inputs:
        return False
    for name, digest in stamp.get("files", {}).items():
        full = os.path.join(path, name)
        if not os.path.isfile(full) or dummy_gguf.digest(full) != digest:
            return False
    return True


def make_gguf(module, path, p):
    try:
        import gguf  # noqa: F401  pylint: disable=unused-import
        import numpy  # noqa: F401  pylint: disable=unused-import
    except ImportError as e:
        fail(module, "E_VENV", path, "the gguf format needs the gguf and numpy packages in the host's virtualenv "
             "(%s); they are in requirements-host.txt" % e)
    with replacing(os.path.join(path, GGUF_FILE), suffix=".gguf") as tmp:
        model = dummy_gguf.write(tmp, seed=p["seed"], layers=p["layers"] or 2, context=p["context"],
                                 chat_template=p["chat_template"], name=p["name"])
        digest = dummy_gguf.digest(tmp)
    files = {GGUF_FILE: digest}
    if p["vision"]:
        with replacing(os.path.join(path, MMPROJ_FILE), suffix=".gguf") as tmp:
            model["mmproj"] = dummy_mmproj.write(tmp, seed=p["seed"], text_layers=p["layers"] or 2,
                                                 text_context=p["context"], name=p["name"] + " mmproj")
            files[MMPROJ_FILE] = dummy_gguf.digest(tmp)
    return model, files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            format=dict(type="str", required=True, choices=["gguf", "hf"]),
            chat_template=dict(type="str", required=True),
            seed=dict(type="int", default=0),
            layers=dict(type="int", default=0),
            context=dict(type="int", default=8192),
            preset=dict(type="str", default="glm4_moe"),
            config=dict(type="dict", default={}),
            name=dict(type="str", default="gpuserve burn-in model"),
            vision=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    inputs = {"generator": GENERATOR, "format": p["format"], "chat_template": sha256_text(p["chat_template"]),
              "name": p["name"]}
    if p["format"] == "gguf":
        inputs.update(seed=p["seed"], layers=p["layers"] or 2, context=p["context"])
        shape = dummy_gguf.layout(p["layers"] or 2, p["context"])
        model = dummy_gguf.describe(shape, p["seed"])
        if p["vision"]:
            inputs["vision"] = True  # absent without it: a text model's stamp stays what it was
            model["mmproj"] = dummy_mmproj.describe(dummy_mmproj.layout(p["layers"] or 2, p["context"]), p["seed"])
        texts = None
    else:
        try:
            texts = dummy_hf.folder_files(p["chat_template"], p["preset"], p["layers"] or None, p["config"])
            model = dummy_hf.describe(json.loads(texts["config.json"]))
        except ValueError as e:
            fail(module, "E_CONFIG", path, "the dummy model's config: %s" % e)
        inputs.update(files=dict((n, sha256_text(t)) for n, t in texts.items()))
    model["dummy"] = True

    stamp = read_json(os.path.join(path, STAMP))
    result = dict(changed=False, path=path, model=model, dummy=True)
    if p["format"] == "gguf":
        result["model_file"] = os.path.join(path, GGUF_FILE)
        if p["vision"]:
            result["mmproj_file"] = os.path.join(path, MMPROJ_FILE)
    if current(path, stamp, inputs):
        result["files"] = stamp["files"]
        module.exit_json(**result)
    result["changed"] = True
    if module.check_mode:
        result["files"] = inputs.get("files", {})
        module.exit_json(**result)

    try:
        if not os.path.isdir(path):
            os.makedirs(path, 0o755)
        if texts is None:
            model_info, files = make_gguf(module, path, p)
            model.update(model_info)
        else:
            for name, text in sorted(texts.items()):
                write_bytes(os.path.join(path, name), text.encode("utf-8"))
            files = dict((n, sha256_text(t)) for n, t in texts.items())
        stamp_doc = {"inputs": inputs, "files": files, "dummy": True, "model": model}
        write_bytes(os.path.join(path, STAMP), (json.dumps(stamp_doc, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    except (IOError, OSError) as e:
        code = "E_DISK" if getattr(e, "errno", None) == 28 else "E_WEIGHTS"
        fail(module, code, path, "cannot write the dummy model: %s" % e)
    result["files"] = files
    module.exit_json(**result)


if __name__ == "__main__":
    main()
