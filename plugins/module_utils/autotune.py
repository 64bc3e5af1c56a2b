# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Kernel tuning per engine: the tuner's command, what its output must hold, the choice it leads to.

- vLLM: benchmarks/kernels/benchmark_moe.py --tune writes one JSON per MoE shape,
  E=<experts>,N=<intermediate per GPU>,device_name=<GPU>[,dtype=..][,block_shape=[n,k]].json, a map
  from batch size to a Triton config; vLLM reads it from VLLM_TUNED_CONFIG_FOLDER. For a block-FP8
  checkpoint, then, files/tune_gemv.py writes gemv.json: the one-token GEMV's config (the collection's
  vLLM patch 0004) for each block-FP8 linear shape, or none where vLLM's kernel is as fast; the patched
  vLLM reads it from GPUSERVE_GEMV_CONFIGS.
- SGLang: benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py writes the same kind of file
  into the working folder; SGLang reads configs/triton_<version>/ under SGLANG_MOE_CONFIG_DIR.
- llama.cpp: llama-bench over a grid of threads and batch sizes (JSON records); the fastest
  generation threads, prompt threads and batch/ubatch go to llama-server (-t, -tb, -b, -ub).

A result is ready only with a stamp, written after the outputs validate; the stamp holds the
inputs' hash (GPU or CPU model, engine image, model shapes, parallelism, search space).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shlex

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import read_json

# benchmark_moe.py's own default batch sizes (vLLM 0.26.0): the full tune.
VLLM_BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
# The reduced tune: a smaller tile search, and the full tune's batch sizes up to 64 (every decode batch a server
# of up to 64 sequences runs) with two prefill sizes. vLLM takes the entry nearest the batch: with 16 and 64 alone,
# 40 sequences ran the 16-token tile and lost 9.7 % of the tok/s to vLLM's default (H200, 2026-12-03).
REDUCED_BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 256, 1024]
CONFIG_FIELDS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
STAMP = "gpuserve-autotune.json"
GEMV_FILE = "gemv.json"
GEMV_REDUCTIONS = ("direct", "atomic", "counter")


def key(inputs):
    """The cache key: a hash of everything the result depends on."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def device_file_name(gpu_name):
    """The GPU as vLLM names it in config files (spaces to _, any H200 variant NVIDIA_H200)."""
    name = gpu_name.replace(" ", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def moe_shapes(config, tp_size, expert_parallel=False, engine="vllm"):
    """E, N (the experts and the intermediate size each GPU's MoE kernel runs, as the file name has them), top-k,
    hidden, dtype and block shape of a MoE checkpoint's config.json (GLM-4.5/4.6 and DeepSeek style, Mixtral style,
    or a text_config inside a vision model's config). Tensor parallel: every expert's width split over the GPUs.
    Expert parallel on more than one GPU (llm_expert_parallel, as the engine is started): each GPU holds E / GPUs
    whole experts ("ep": true), what vLLM's benchmark_moe.py --enable-expert-parallel tunes."""
    cfg = config.get("text_config") or config
    if "n_routed_experts" in cfg:
        experts, inter = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    elif "num_local_experts" in cfg:
        experts, inter = cfg["num_local_experts"], cfg["intermediate_size"]
    elif "num_experts" in cfg:
        experts, inter = cfg["num_experts"], cfg.get("moe_intermediate_size", cfg.get("intermediate_size"))
    else:
        raise ValueError("config.json names no routed experts: not a MoE model, nothing to tune")
    quant = config.get("quantization_config") or cfg.get("quantization_config") or {}
    fp8 = quant.get("quant_method") == "fp8"
    block = quant.get("weight_block_size") if fp8 else None
    shapes = {"topk": cfg["num_experts_per_tok"], "hidden": cfg["hidden_size"],
              "dtype": "fp8_w8a8" if fp8 else None, "block_shape": list(block) if block else None}
    problem = moe_tune_problem(experts, inter, block[0] if block else None, tp_size, expert_parallel, engine)
    if problem:
        raise ValueError(problem)
    if expert_parallel and tp_size > 1:
        return dict(shapes, E=experts // tp_size, N=inter, ep=True)
    return dict(shapes, E=experts, N=inter // tp_size)


def moe_tune_problem(experts, width, block_n, gpus, expert_parallel, engine):
    """Why the MoE tuner cannot tune the split the engine runs, in words, or None. The validation of the settings
    asks the same before anything changes (E_UNSUPPORTED on autotune_moe), the stage's plan again (E_AUTOTUNE)."""
    if expert_parallel and gpus > 1:
        if engine != "vllm":
            return ("the collection runs %s's MoE tuner for the tensor-parallel split only, and with "
                    "llm_expert_parallel on %d GPUs the engine runs whole experts: it would not read that tune's "
                    "file" % (engine, gpus))
        if experts % gpus:
            return ("vLLM's tuner (benchmark_moe.py --enable-expert-parallel) places as many whole experts on each "
                    "GPU, and %d GPUs do not divide %d experts" % (gpus, experts))
        return None
    if not width:  # not given (a Mixtral-style config's experts are read by their MLP's name)
        return None
    if width % gpus:
        return "the experts' intermediate size %d does not divide by %d GPUs" % (width, gpus)
    if block_n and (width // gpus) % block_n:
        # Seen on an H200 (tests/gpu/RESULTS.md): the tuner's per-token-group FP8 quantisation asserts on it.
        return ("the experts' intermediate size per GPU, %d (%d over %d GPUs), is not a multiple of the FP8 block %d: "
                "the block-FP8 MoE kernels cannot split it; use fewer GPUs per engine (a divisor of %d) or expert "
                "parallelism" % (width // gpus, width, gpus, block_n, width // block_n))
    return None


def moe_model_params(shapes, tp_size):
    """(E, top-k, intermediate size, hidden) of the whole model, as benchmark_moe.py's get_model_params returns
    them: what tune_moe.py --moe gives the tuner in place of its own reading of config.json (vLLM 0.26.0 reads a
    GLM-4.6V config by its Mixtral branch: the dense MLP's 10944 for the experts' 1408)."""
    if shapes.get("ep"):
        return shapes["E"] * tp_size, shapes["topk"], shapes["N"], shapes["hidden"]
    return shapes["E"], shapes["topk"], shapes["N"] * tp_size, shapes["hidden"]


def gemv_shapes(config, tp_size):
    """The block-FP8 linears one decode step runs on each GPU that vLLM patch 0004's one-token GEMV can take, as
    [{"N", "K", "calls"}] (calls: how many such linears a step runs): the attention's qkv and o projections, the
    shared experts' gate_up and down, the dense layers' MLP where the checkpoint quantizes it. [] for a checkpoint
    without 128 x 128 block-FP8 weights. The patch's guard: K whole 128-column blocks, N a multiple of 16."""
    cfg = config.get("text_config") or config
    quant = config.get("quantization_config") or cfg.get("quantization_config") or {}
    if quant.get("quant_method") != "fp8" or list(quant.get("weight_block_size") or []) != [128, 128]:
        return []
    hidden, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or hidden // heads
    kv_heads = max(1, cfg.get("num_key_value_heads", heads) // tp_size)  # replicated where fewer than GPUs
    dense = int(cfg.get("first_k_dense_replace", 0)) if "n_routed_experts" in cfg else 0
    ignored = [str(n) for n in (quant.get("ignored_layers") or quant.get("modules_to_not_convert") or [])]
    found = {}

    def add(n, k, calls):
        if calls > 0 and n > 0 and k > 0 and n % 16 == 0 and k % 128 == 0:
            found[(n, k)] = found.get((n, k), 0) + calls

    add((heads // tp_size + 2 * kv_heads) * head_dim, hidden, layers)
    add(hidden, heads * head_dim // tp_size, layers)
    shared = int(cfg.get("n_shared_experts") or 0) * int(cfg.get("moe_intermediate_size") or 0)
    if shared and shared % tp_size == 0:
        add(2 * shared // tp_size, hidden, layers - dense)
        add(hidden, shared // tp_size, layers - dense)
    inter = int(cfg.get("intermediate_size") or 0)
    quantized = [d for d in range(dense) if not any(".layers.%d.mlp" % d in name for name in ignored)]
    if quantized and inter % tp_size == 0:
        add(2 * inter // tp_size, hidden, len(quantized))
        add(hidden, inter // tp_size, len(quantized))
    return [{"N": n, "K": k, "calls": c} for (n, k), c in sorted(found.items())]


def moe_file_name(shapes, gpu_name):
    """What the tuner writes and the engine looks for."""
    name = "E=%d,N=%d,device_name=%s" % (shapes["E"], shapes["N"], device_file_name(gpu_name))
    if shapes["dtype"]:
        name += ",dtype=" + shapes["dtype"]
    if shapes["block_shape"] and all(shapes["block_shape"]):
        name += ",block_shape=[%s]" % ",".join(str(b) for b in shapes["block_shape"])
    return name + ".json"


def batch_sizes(search):
    return REDUCED_BATCH_SIZES if search == "reduced" else VLLM_BATCH_SIZES


def vllm_command(model_dir, tp_size, shapes, search, save_dir, benchmark="/gpuserve/benchmark_moe.py", gemv=None):
    """benchmark_moe.py --tune through the collection's driver (files/tune_moe.py), which narrows
    the tile search for `reduced` and runs the script unchanged for `full`; with `gemv` (gemv_shapes'
    list), files/tune_gemv.py after it, into save_dir/gemv.json; with no MoE `shapes`, tune_gemv.py alone."""
    tune_gemv = ["python3", "/gpuserve/tune_gemv.py", "--out", save_dir + "/" + GEMV_FILE]
    for shape in gemv or []:
        tune_gemv += ["--shape", "%dx%d:%d" % (shape["N"], shape["K"], shape["calls"])]
    if not shapes:  # the GEMV alone (no MoE tune asked for)
        return tune_gemv
    argv = ["python3", "/gpuserve/tune_moe.py", "--search", search, "--moe",
            ",".join(str(v) for v in moe_model_params(shapes, tp_size)), "--", benchmark, "--model", model_dir,
            "--tp-size", str(tp_size), "--tune", "--save-dir", save_dir]
    if shapes.get("ep"):
        argv.append("--enable-expert-parallel")
    argv += ["--batch-size"] + [str(b) for b in batch_sizes(search)]
    if shapes["dtype"]:
        argv += ["--dtype", shapes["dtype"]]
    if not gemv:
        return argv
    return ["sh", "-c", "set -e; %s; exec %s" % (" ".join(shlex.quote(a) for a in argv),
                                                 " ".join(shlex.quote(a) for a in tune_gemv))]


def sglang_command(model_dir, tp_size, shapes, search, save_dir,
                   tuner="/sgl-workspace/sglang/benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py"):
    """SGLang's tuner writes into its working folder: run it in configs/triton_<version>/ under
    the folder that becomes SGLANG_MOE_CONFIG_DIR."""
    args = ["--model", model_dir, "--tp-size", str(tp_size), "--tune", "--batch-size"]
    args += [str(b) for b in batch_sizes(search)]
    if shapes["dtype"]:
        args += ["--dtype", shapes["dtype"]]
    script = ('set -e; d=%s/configs/triton_$(python3 -c "import triton; print(triton.__version__.replace(\'.\', \'_\'))"); '
              'mkdir -p "$d"; cd "$d"; exec python3 /gpuserve/tune_moe.py --search %s -- %s %s'
              % (save_dir, search, tuner, " ".join(args)))
    return ["sh", "-c", script]


def validate_moe(folder, file_name, expected_batch_sizes):
    """Problems with a MoE tuner's output: the file absent, unreadable, a batch size or a field missing."""
    found = []
    for root, _dirs, names in os.walk(folder):
        if file_name in names:
            found.append(os.path.join(root, file_name))
    if not found:
        return ["%s was not written under %s" % (file_name, folder)], None
    try:
        with open(found[0]) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError) as e:
        return ["%s cannot be read: %s" % (found[0], e)], None
    problems = []
    missing = [b for b in expected_batch_sizes if str(b) not in data]
    if missing:
        problems.append("%s lacks batch sizes %s" % (file_name, ", ".join(str(b) for b in missing)))
    for batch, config in sorted(data.items()):
        if batch.isdigit():
            absent = [k for k in CONFIG_FIELDS if not isinstance(config.get(k), int)]
            if absent:
                problems.append("%s: batch size %s lacks %s" % (file_name, batch, ", ".join(absent)))
    return problems, found[0]


def validate_gemv(folder, shapes):
    """Problems with tune_gemv.py's gemv.json: absent, unreadable, a planned shape or a config's field missing. A file
    that says why it tuned nothing (`skipped`: the image's vLLM lacks patch 0004) is complete."""
    path = os.path.join(folder, GEMV_FILE)
    try:
        with open(path) as f:
            data = json.load(f)
    except (IOError, OSError, ValueError) as e:
        return ["%s is missing or unreadable (%s)" % (GEMV_FILE, e)]
    if not isinstance(data, dict) or data.get("format") != 1 or not isinstance(data.get("shapes"), dict):
        return ["%s is not tune_gemv.py's format 1" % GEMV_FILE]
    if data.get("skipped"):
        return []
    problems = []
    missing = ["%dx%d" % (s["N"], s["K"]) for s in shapes if "%dx%d" % (s["N"], s["K"]) not in data["shapes"]]
    if missing:
        problems.append("%s lacks shapes %s" % (GEMV_FILE, ", ".join(missing)))
    for shape, entry in sorted(data["shapes"].items()):
        config = entry.get("config") if isinstance(entry, dict) else "?"
        if config is not None and not (isinstance(config, list) and len(config) == 5
                                       and all(isinstance(v, int) and v > 0 for v in config[:4])
                                       and config[4] in GEMV_REDUCTIONS):
            problems.append("%s: shape %s has no valid config (%s)" % (GEMV_FILE, shape, config))
    return problems


def llamacpp_grid(cpus, threads=None, batches=None, ubatches=None):
    """The llama-bench grid: thread counts up to the host's CPUs (powers of two and the count
    itself), and batch / ubatch sizes with ubatch <= batch."""
    if not threads:
        threads, n = [], 1
        while n < cpus:
            threads.append(n)
            n *= 2
        threads.append(cpus)
    return {"threads": sorted(set(t for t in threads if 0 < t <= max(cpus, 1))) or [1],
            "batches": sorted(set(batches or [256, 512, 2048])),
            "ubatches": sorted(set(ubatches or [128, 512]))}


def llamacpp_command(model_file, grid, n_prompt, n_gen, repetitions, out_dir):
    """Two llama-bench runs in the engine's image: generation over threads, prompt processing over
    threads x batch x ubatch; JSON into out_dir, each file moved into place only when complete."""
    threads = ",".join(str(t) for t in grid["threads"])
    tg = ["llama-bench", "-m", model_file, "-p", "0", "-n", str(n_gen), "-t", threads, "-r", str(repetitions),
          "-o", "json"]
    pp = ["llama-bench", "-m", model_file, "-p", str(n_prompt), "-n", "0", "-t", threads,
          "-b", ",".join(str(b) for b in grid["batches"]), "-ub", ",".join(str(u) for u in grid["ubatches"]),
          "-r", str(repetitions), "-o", "json"]
    script = ("set -e; %s > %s/tg.json.part; mv %s/tg.json.part %s/tg.json; %s > %s/pp.json.part; "
              "mv %s/pp.json.part %s/pp.json" % (" ".join(tg), out_dir, out_dir, out_dir, " ".join(pp), out_dir,
                                                 out_dir, out_dir))
    return ["sh", "-c", script]


def choose_llamacpp(tg, pp, grid, n_prompt, n_gen):
    """From llama-bench's records: the fastest generation threads, the fastest prompt threads, and
    the fastest batch / ubatch at those threads. Returns (choice, problems)."""
    problems = []
    gen = dict((r["n_threads"], r["avg_ts"]) for r in tg if r.get("n_gen") == n_gen and r.get("n_prompt") == 0)
    missing = [t for t in grid["threads"] if t not in gen]
    if missing:
        problems.append("generation results lack threads %s" % missing)
    prompt = {}
    for r in pp:
        if r.get("n_prompt") == n_prompt and r.get("n_gen") == 0:
            prompt[(r["n_threads"], r["n_batch"], r["n_ubatch"])] = r["avg_ts"]
    wanted = [(t, b, u) for t in grid["threads"] for b in grid["batches"] for u in grid["ubatches"] if u <= b]
    absent = [w for w in wanted if w not in prompt]
    if absent:
        problems.append("prompt results lack %d of %d grid points (threads, batch, ubatch), e.g. %s"
                        % (len(absent), len(wanted), list(absent[0])))
    if problems or not gen or not prompt:
        return None, problems or ["llama-bench wrote no results"]
    threads = max(gen, key=lambda t: (gen[t], -t))
    tb, batch, ubatch = max(prompt, key=lambda k: (prompt[k], -k[0]))
    return {"threads": threads, "threads_batch": tb, "batch_size": batch, "ubatch_size": ubatch,
            "tg_tokens_per_s": round(gen[threads], 1), "pp_tokens_per_s": round(prompt[(tb, batch, ubatch)], 1),
            "grid_points": len(gen) + len(prompt)}, []


def read_stamp(folder):
    return read_json(os.path.join(folder, STAMP))
