#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: autotune_plan
short_description: Plan a kernel tune - its cache key, the tuner's command, and whether a valid result is there
version_added: "0.1.0"
description:
  - Reads what the result depends on - the host's processor (model, usable CPUs) or the GPU model given, the engine
    image, the model's shapes (a MoE checkpoint's C(config.json), or the GGUF's identity), the parallelism and the
    search - hashes it into the cache key, and says whether a valid stamp for that key is there (RV(ready)). For
    llama.cpp it also gives the llama-bench grid; for vLLM and SGLang the file the tuner must write and its batch
    sizes. M(gpuserve.llm.autotune_stamp) validates the tuner's output against this plan and stamps it.
  - Changes nothing. In check mode a model the weights stage has not made yet gives a plan marked RV(pending) instead
    of a failure.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Only reads; a model not made yet gives a pending plan.
  diff_mode:
    support: none
options:
  engine:
    description: The engine profile.
    type: str
    choices: [vllm, sglang, llamacpp]
    required: true
  base_dir:
    description: The host's autotune cache; results live in base_dir/engine/key.
    type: path
    required: true
  inputs:
    description: What the result depends on, as the playbook knows it (GPU model, image, parallelism, search).
    type: dict
    default: {}
  model_dir:
    description: The model folder whose config.json gives the MoE shapes (vLLM, SGLang).
    type: path
  model_file:
    description: The GGUF (llama.cpp), identified by size and the sha256 of its first 16 MiB.
    type: path
  gpu_name:
    description: The GPU model as NVML names it (vLLM, SGLang).
    type: str
    default: ""
  tp_size:
    description: GPUs per engine (tensor parallelism).
    type: int
    default: 1
  expert_parallel:
    description: The engine runs whole experts on each GPU (llm_expert_parallel on more than one GPU); the MoE tune
      is of that split (vLLM's benchmark_moe.py --enable-expert-parallel).
    type: bool
    default: false
  search:
    description: C(full) or C(reduced) (vLLM, SGLang).
    type: str
    choices: [full, reduced]
    default: full
  moe:
    description: Tune the fused-MoE kernels (vLLM, SGLang).
    type: bool
    default: true
  gemv:
    description: Tune the one-token GEMV of the collection's vLLM patch 0004 for a block-FP8 checkpoint's linears
      (vLLM). A plan with neither anything to tune returns C(empty) and C(why).
    type: bool
    default: false
  threads:
    description: llama-bench thread counts; empty = powers of two up to the usable CPUs, and their count.
    type: list
    elements: int
    default: []
  batch_sizes:
    description: llama-bench batch sizes (-b).
    type: list
    elements: int
    default: []
  ubatch_sizes:
    description: llama-bench ubatch sizes (-ub).
    type: list
    elements: int
    default: []
  n_prompt:
    description: Prompt tokens of the prompt-processing runs.
    type: int
    default: 512
  n_gen:
    description: Tokens of the generation runs.
    type: int
    default: 64
  container_model:
    description: The model as the tuner container sees it (the GGUF, or the model folder).
    type: str
    default: ""
  tuner:
    description: SGLang's tuner script inside its image.
    type: str
    default: /sgl-workspace/sglang/benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py
  repetitions:
    description: llama-bench repetitions per grid point.
    type: int
    default: 3
"""

EXAMPLES = r"""
- name: Plan the tune
  gpuserve.llm.autotune_plan:
    engine: llamacpp
    base_dir: /var/lib/gpuserve/cache/autotune
    model_file: /var/lib/gpuserve/models/dummy/m/model.gguf
    inputs: {image: "sha256:..."}
  register: plan
"""

RETURN = r"""
key:
  description: The cache key (a hash of the inputs); C(pending) for a pending plan.
  returned: always
  type: str
dir:
  description: The result folder on the host.
  returned: always
  type: str
engine:
  description: The engine profile.
  returned: always
  type: str
ready:
  description: Whether a valid stamp for the key is there.
  returned: always
  type: bool
pending:
  description: In check mode, true when the model is not made yet (nothing else is planned).
  returned: when pending
  type: bool
empty:
  description: True when there is nothing to tune (no MoE tune asked for, and no block-FP8 linear for the GEMV).
  returned: when empty
  type: bool
why:
  description: Why there is nothing to tune.
  returned: when empty
  type: str
inputs:
  description: Everything hashed into the key.
  returned: always
  type: dict
grid:
  description: The llama-bench grid (threads, batches, ubatches).
  returned: O(engine=llamacpp)
  type: dict
moe:
  description: The MoE shapes, the file name the tuner writes and the batch sizes it must hold.
  returned: O(engine=vllm) or O(engine=sglang)
  type: dict
gemv:
  description: For vLLM and a block-FP8 checkpoint, the block-FP8 linear shapes whose one-token GEMV configs
    tune_gemv.py measures (N, K, calls a decode step) and the file it writes (C(gemv.json)).
  returned: O(engine=vllm) with a block-FP8 checkpoint
  type: dict
command:
  description: The tuner's command line in the engine image (results into /autotune).
  returned: always
  type: list
  elements: str
choice:
  description: For llama.cpp, the chosen threads, threads_batch, batch_size, ubatch_size and their tokens per second.
  returned: when ready
  type: dict
stamp:
  description: The stamp (key, inputs, when, tuned on, files with their sha256, choice).
  returned: when ready
  type: dict
"""

import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import autotune
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.dummy_gguf import digest as sha256

SGLANG_TUNER = "/sgl-workspace/sglang/benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py"


def processor():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except (IOError, OSError):
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return model, cpus


def file_identity(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(16 << 20))
    return "%d:%s" % (os.path.getsize(path), h.hexdigest())


def plan(module, p):
    inputs = dict(p["inputs"], engine=p["engine"])
    out = {}
    model = p["model_file"] if p["engine"] == "llamacpp" else p["model_dir"]
    if module.check_mode and not os.path.exists(model):
        # A check run on a fresh host: the weights stage would make the model first.
        return dict(key="pending", dir="", ready=False, inputs=inputs, engine=p["engine"], pending=True,
                    command=[])
    try:
        if p["engine"] == "llamacpp":
            model, cpus = processor()
            grid = autotune.llamacpp_grid(cpus, p["threads"], p["batch_sizes"], p["ubatch_sizes"])
            inputs.update(cpu=model, cpus=cpus, model=file_identity(p["model_file"]), grid=grid,
                          n_prompt=p["n_prompt"], n_gen=p["n_gen"])
            out["grid"] = grid
            out["command"] = autotune.llamacpp_command(p["container_model"], grid, p["n_prompt"], p["n_gen"],
                                                       p["repetitions"], "/autotune")
        else:
            with open(os.path.join(p["model_dir"], "config.json")) as f:
                config = json.load(f)
            inputs.update(gpu=p["gpu_name"], tp_size=p["tp_size"])
            shapes = None
            if p["moe"]:
                shapes = autotune.moe_shapes(config, p["tp_size"], p["expert_parallel"], p["engine"])
                out["moe"] = dict(shapes, file=autotune.moe_file_name(shapes, p["gpu_name"]),
                                  batch_sizes=autotune.batch_sizes(p["search"]))
                inputs.update(search=p["search"], shapes=shapes)
            gemv = autotune.gemv_shapes(config, p["tp_size"]) if p["gemv"] and p["engine"] == "vllm" else []
            if gemv:  # the one-token GEMV's table (vLLM patch 0004)
                inputs["gemv"] = gemv
                out["gemv"] = {"file": autotune.GEMV_FILE, "shapes": gemv}
            if not shapes and not gemv:
                return dict(key="none", dir="", ready=False, inputs=inputs, engine=p["engine"], empty=True, command=[],
                            why="the checkpoint has no 128 x 128 block-FP8 linear for the one-token GEMV, and "
                                "autotune_moe is off")
            if p["engine"] == "vllm":
                out["command"] = autotune.vllm_command(p["container_model"], p["tp_size"], shapes, p["search"],
                                                       "/autotune", gemv=gemv)
            else:
                out["command"] = autotune.sglang_command(p["container_model"], p["tp_size"], shapes, p["search"],
                                                         "/autotune", p["tuner"])
    except (IOError, OSError, ValueError, KeyError, TypeError) as e:
        fail(module, "E_AUTOTUNE", p["model_dir"] or p["model_file"] or p["engine"], "cannot plan the tune: %s" % e)
    key = autotune.key(inputs)
    folder = os.path.join(p["base_dir"], p["engine"], key)
    stamp = autotune.read_stamp(folder)
    ready = bool(stamp) and stamp.get("key") == key and all(
        os.path.isfile(os.path.join(folder, name)) and sha256(os.path.join(folder, name)) == digest
        for name, digest in stamp.get("files", {}).items())
    out.update(key=key, dir=folder, ready=ready, inputs=inputs, engine=p["engine"])
    if ready:
        out.update(stamp=stamp, choice=stamp.get("choice", {}))
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            engine=dict(type="str", required=True, choices=["vllm", "sglang", "llamacpp"]),
            base_dir=dict(type="path", required=True),
            inputs=dict(type="dict", default={}),
            model_dir=dict(type="path"),
            model_file=dict(type="path"),
            gpu_name=dict(type="str", default=""),
            tp_size=dict(type="int", default=1),
            expert_parallel=dict(type="bool", default=False),
            search=dict(type="str", default="full", choices=["full", "reduced"]),
            moe=dict(type="bool", default=True),
            gemv=dict(type="bool", default=False),
            threads=dict(type="list", elements="int", default=[]),
            batch_sizes=dict(type="list", elements="int", default=[]),
            ubatch_sizes=dict(type="list", elements="int", default=[]),
            n_prompt=dict(type="int", default=512),
            n_gen=dict(type="int", default=64),
            container_model=dict(type="str", default=""),
            tuner=dict(type="str", default=SGLANG_TUNER),
            repetitions=dict(type="int", default=3),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["engine"] == "llamacpp" and not p["model_file"]:
        fail(module, "E_AUTOTUNE", "llamacpp", "llama.cpp tuning needs the GGUF (model_file)")
    if p["engine"] != "llamacpp" and not p["model_dir"]:
        fail(module, "E_AUTOTUNE", p["engine"], "MoE tuning needs the model folder (model_dir)")
    module.exit_json(changed=False, **plan(module, p))


if __name__ == "__main__":
    main()
